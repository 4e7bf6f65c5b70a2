"""BASE_BACKUP's options as ``parse_basebackup_options`` (basebackup.c) reads them.

The grammar (:mod:`pgwire_mock.server.grammar`) gives the options as written: 14's words
(``LABEL 'x' PROGRESS FAST NOWAIT ...``, flags as ``True``) or 15+'s generic list
(``(LABEL 'x', CHECKPOINT 'fast', WAIT 0, ...)``). :func:`parse_backup_options` checks them
in PostgreSQL's order and raises the real server's errors, file, line and routine included
(read off real 14–18: ``tests/pgwire_mock/test_basebackup_postgres.py``), then returns
the settings as one :class:`BackupOptions`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Final

from pgwire_mock.server.errors import ServerError
from pgwire_mock.server.grammar import GenericOption, parse_bool, quote_literal
from pgwire_mock.server.versions import ErrorFact, error, format_error

__all__ = ["CHECKSUM_TYPES", "BackupOptions", "in_transaction_block", "parse_backup_options"]

CHECKSUM_TYPES: Final = ("NONE", "CRC32C", "SHA224", "SHA256", "SHA384", "SHA512")
"""pg_checksum_parse_type's names (any case on input)."""
MAX_RATE_LOWER: Final = 32
MAX_RATE_UPPER: Final = 1048576

# Every ``duplicate option "x"`` has its own ereport: its line per major.
_DUPLICATE_LINES: Final[dict[str, dict[int, int]]] = {
    "label": {14: 789, 15: 706, 16: 722, 17: 733, 18: 735},
    "progress": {14: 798, 15: 715, 16: 731, 17: 742, 18: 744},
    "fast": {14: 807},
    "wal": {14: 825, 15: 752, 16: 768, 17: 779, 18: 781},
    "nowait": {14: 816},
    "max_rate": {14: 836, 15: 763, 16: 779, 17: 803, 18: 805},
    "tablespace_map": {14: 853, 15: 780, 16: 796, 17: 820, 18: 822},
    "noverify_checksums": {14: 862},
    "manifest": {14: 874, 15: 801, 16: 817, 17: 841, 18: 843},
    "manifest_checksums": {14: 898, 15: 825, 16: 841, 17: 865, 18: 867},
    "checkpoint": {15: 726, 16: 742, 17: 753, 18: 755},
    "wait": {15: 743, 16: 759, 17: 770, 18: 772},
    "verify_checksums": {15: 789, 16: 805, 17: 829, 18: 831},
    "target": {15: 839, 16: 855, 17: 879, 18: 881},
    "target_detail": {15: 850, 16: 866, 17: 890, 18: 892},
    "compression": {15: 861, 16: 877, 17: 901, 18: 903},
    "compression_detail": {15: 874, 16: 890, 17: 914, 18: 916},
    "incremental": {17: 788, 18: 790},
}

# kind -> (sqlstate, message, file, routine, line per major)
_ERRORS: Final[dict[str, ErrorFact]] = {
    "unrecognized_option": ErrorFact(
        "42601",
        'unrecognized base backup option: "{name}"',
        "basebackup.c",
        "parse_basebackup_options",
        {15: 882, 16: 898, 17: 922, 18: 924},
    ),
    "checkpoint_type": ErrorFact(
        "42601",
        'unrecognized checkpoint type: "{value}"',
        "basebackup.c",
        "parse_basebackup_options",
        {15: 735, 16: 751, 17: 762, 18: 764},
    ),
    "max_rate_range": ErrorFact(
        "22003",
        '{value} is outside the valid range for parameter "MAX_RATE" '
        f"({MAX_RATE_LOWER} .. {MAX_RATE_UPPER})",
        "basebackup.c",
        "parse_basebackup_options",
        {14: 843, 15: 770, 16: 786, 17: 810, 18: 812},
    ),
    "manifest_option": ErrorFact(
        "42601",
        'unrecognized manifest option: "{value}"',
        "basebackup.c",
        "parse_basebackup_options",
        {14: 888, 15: 815, 16: 831, 17: 855, 18: 857},
    ),
    "checksum_algorithm": ErrorFact(
        "42601",
        'unrecognized checksum algorithm: "{value}"',
        "basebackup.c",
        "parse_basebackup_options",
        {14: 904, 15: 831, 16: 847, 17: 871, 18: 873},
    ),
    "checksums_need_manifest": ErrorFact(
        "42601",
        "manifest checksums require a backup manifest",
        "basebackup.c",
        "parse_basebackup_options",
        {14: 918, 15: 892, 16: 908, 17: 932, 18: 934},
    ),
    "detail_without_target": ErrorFact(
        "42601",
        "target detail cannot be used without target",
        "basebackup.c",
        "parse_basebackup_options",
        {15: 901, 16: 917, 17: 941, 18: 943},
    ),
    "client_target_detail": ErrorFact(
        "42601",
        'target "client" does not accept a target detail',
        "basebackup.c",
        "parse_basebackup_options",
        {15: 911, 16: 927, 17: 951, 18: 953},
    ),
    "blackhole_target_detail": ErrorFact(
        "42601",
        'target "blackhole" does not accept a target detail',
        "basebackup_target.c",
        "reject_target_detail",
        dict.fromkeys((15, 16, 17, 18), 219),
    ),
    "server_needs_detail": ErrorFact(
        "42601",
        'target "server" requires a target detail',
        "basebackup_target.c",
        "server_check_detail",
        dict.fromkeys((15, 16, 17, 18), 238),
    ),
    "unrecognized_target": ErrorFact(
        "0A000",
        'unrecognized target: "{value}"',
        "basebackup_target.c",
        "BaseBackupGetTargetHandle",
        dict.fromkeys((15, 16, 17, 18), 146),
    ),
    "compression_algorithm": ErrorFact(
        "42601",
        'unrecognized compression algorithm: "{value}"',
        "basebackup.c",
        "parse_basebackup_options",
        {15: 866, 16: 882, 17: 906, 18: 908},
    ),
    "compression_detail_alone": ErrorFact(
        "42601",
        "compression detail cannot be specified unless compression is enabled",
        "basebackup.c",
        "parse_basebackup_options",
        {15: 921, 16: 937, 17: 961, 18: 963},
    ),
    "incremental_needs_summaries": ErrorFact(
        "55000",
        "incremental backups cannot be taken unless WAL summarization is enabled",
        "basebackup.c",
        "parse_basebackup_options",
        {17: 793, 18: 795},
    ),
    # define.c defGetInt64: no value, then a value that is not a number.
    "numeric_missing": ErrorFact(
        "42601",
        "{name} requires a numeric value",
        "define.c",
        "defGetInt64",
        {15: 193, 16: 193, 17: 192, 18: 179},
    ),
    "numeric_not_number": ErrorFact(
        "42601",
        "{name} requires a numeric value",
        "define.c",
        "defGetInt64",
        {15: 211, 16: 211, 17: 210, 18: 197},
    ),
}


def in_transaction_block(major: int) -> ServerError:
    """PreventInTransactionBlock (xact.c), which exec_replication_command runs before
    reading BASE_BACKUP's options (a logical walsender can be inside BEGIN)."""
    return ServerError(
        "ERROR",
        "25001",
        "BASE_BACKUP cannot run inside a transaction block",
        file="xact.c",
        line={14: 3427, 15: 3490, 16: 3501, 17: 3604, 18: 3658}.get(major),
        routine="PreventInTransactionBlock",
    )


def _fail(major: int, kind: str, **args: object) -> ServerError:
    return format_error(_ERRORS[kind], major, args)


@dataclass(frozen=True, slots=True)
class BackupOptions:
    """What one BASE_BACKUP asked for, PostgreSQL's defaults filled in."""

    label: str = "base backup"
    progress: bool = False
    fast_checkpoint: bool = False
    wait: bool = True
    wal: bool = False
    incremental: bool = False
    max_rate: int = 0
    """kB/s; 0: not throttled."""
    tablespace_map: bool = False
    verify_checksums: bool = True
    manifest: str = "no"
    """no | yes | force-encode."""
    manifest_checksums: str = "NONE"
    target: str = "client"
    target_detail: str | None = None
    compression: str = "none"
    compression_detail: str | None = None

    def content(self) -> dict[str, object]:
        """The options that decide the bytes sent (not when or how fast): a recorded
        backup can answer a request only when these agree. PROGRESS and TARGET are
        compared apart (:func:`pgwire_mock.server.basebackup.choose`)."""
        timing = ("progress", "fast_checkpoint", "max_rate", "verify_checksums", "target")
        return {k: v for k, v in asdict(self).items() if k not in timing}

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> BackupOptions:
        known = {f.name for f in fields(cls)}
        unknown = set(obj) - known
        if unknown:
            raise ValueError(f"unknown base backup options {sorted(unknown)}")
        return cls(**obj)

    def command(self, major: int) -> str:
        """The BASE_BACKUP that asks for these options, in ``major``'s syntax."""
        if major < 15:
            words = [f"LABEL {quote_literal(self.label)}"]
            for flag, word in (
                (self.progress, "PROGRESS"),
                (self.fast_checkpoint, "FAST"),
                (self.wal, "WAL"),
                (not self.wait, "NOWAIT"),
                (self.tablespace_map, "TABLESPACE_MAP"),
                (not self.verify_checksums, "NOVERIFY_CHECKSUMS"),
            ):
                if flag:
                    words.append(word)
            if self.max_rate:
                words.append(f"MAX_RATE {self.max_rate}")
            if self.manifest != "no":
                words.append(f"MANIFEST {quote_literal(self.manifest)}")
                words.append(f"MANIFEST_CHECKSUMS {quote_literal(self.manifest_checksums)}")
            if (self.target, self.compression, self.incremental) != ("client", "none", False):
                raise ValueError("PostgreSQL 14 has no TARGET, COMPRESSION or INCREMENTAL")
            return "BASE_BACKUP " + " ".join(words)
        parts = [
            f"LABEL {quote_literal(self.label)}",
            f"PROGRESS {int(self.progress)}",
            f"CHECKPOINT '{'fast' if self.fast_checkpoint else 'spread'}'",
            f"WAIT {int(self.wait)}",
            f"WAL {int(self.wal)}",
            f"TABLESPACE_MAP {int(self.tablespace_map)}",
            f"VERIFY_CHECKSUMS {int(self.verify_checksums)}",
            f"MANIFEST {quote_literal(self.manifest)}",
            f"TARGET {quote_literal(self.target)}",
        ]
        if self.incremental:
            parts.append("INCREMENTAL")
        if self.max_rate:
            parts.append(f"MAX_RATE {self.max_rate}")
        if self.manifest != "no":
            parts.append(f"MANIFEST_CHECKSUMS {quote_literal(self.manifest_checksums)}")
        if self.target_detail is not None:
            parts.append(f"TARGET_DETAIL {quote_literal(self.target_detail)}")
        if self.compression != "none":
            parts.append(f"COMPRESSION {quote_literal(self.compression)}")
        if self.compression_detail is not None:
            parts.append(f"COMPRESSION_DETAIL {quote_literal(self.compression_detail)}")
        return "BASE_BACKUP (" + ", ".join(parts) + ")"


def _string(major: int, option: GenericOption) -> str:
    """defGetString."""
    if option.value is None:
        raise error(major, "requires_parameter", option=option.name)
    if isinstance(option.value, bool):
        return "true"
    return str(option.value)


def _boolean(major: int, option: GenericOption) -> bool:
    """defGetBoolean: no value is true; 0/1; true/false/on/off in any case."""
    value = option.value
    if value is None or value is True:
        return True
    if isinstance(value, int):
        if value in (0, 1):
            return bool(value)
    elif value.lower() in ("true", "on"):
        return True
    elif value.lower() in ("false", "off"):
        return False
    raise error(major, "requires_boolean", option=option.name)


_COMPRESSIONS: Final = ("none", "gzip", "lz4", "zstd")
# 14's words (grammar) -> 15+'s option names.
_LEGACY: Final = {"fast": "checkpoint", "nowait": "wait", "noverify_checksums": "verify_checksums"}


def parse_backup_options(major: int, options: Sequence[GenericOption]) -> BackupOptions:
    """``parse_basebackup_options``: the options, or the error the real server sends."""
    seen: set[str] = set()
    values: dict[str, Any] = {}
    target: str | None = None
    target_detail: str | None = None
    compression_detail: str | None = None

    def once(name: str) -> None:
        if name in seen:
            raise ServerError(
                "ERROR",
                "42601",
                f'duplicate option "{name}"',
                file="basebackup.c",
                line=_DUPLICATE_LINES.get(name, {}).get(major),
                routine="parse_basebackup_options",
            )
        seen.add(name)

    for option in options:
        name = option.name
        if major < 15 and name in _LEGACY:
            # 14's flags: FAST, NOWAIT, NOVERIFY_CHECKSUMS (no value, no other spelling).
            once(name)
            key = _LEGACY[name]
            values["fast_checkpoint" if key == "checkpoint" else key] = key == "checkpoint"
            continue
        if name == "label":
            once(name)
            values["label"] = _string(major, option)
        elif name in ("progress", "wal", "tablespace_map", "wait", "verify_checksums"):
            once(name)
            values[name] = _boolean(major, option)
        elif name == "checkpoint" and major >= 15:
            value = _string(major, option)
            once(name)
            if value.lower() not in ("fast", "spread"):
                raise _fail(major, "checkpoint_type", value=value)
            values["fast_checkpoint"] = value.lower() == "fast"
        elif name == "incremental" and major >= 17:
            once(name)
            values["incremental"] = _boolean(major, option)
            if values["incremental"]:
                raise _fail(major, "incremental_needs_summaries")
        elif name == "max_rate":
            once(name)
            if option.value is None:
                raise _fail(major, "numeric_missing", name=name)
            if not isinstance(option.value, int) or isinstance(option.value, bool):
                raise _fail(major, "numeric_not_number", name=name)
            if not MAX_RATE_LOWER <= option.value <= MAX_RATE_UPPER:
                raise _fail(major, "max_rate_range", value=option.value)
            values["max_rate"] = option.value
        elif name == "manifest":
            value = _string(major, option)
            once(name)
            flag = parse_bool(value)
            if flag is not None:
                values["manifest"] = "yes" if flag else "no"
            elif value.lower() == "force-encode":
                values["manifest"] = "force-encode"
            else:
                raise _fail(major, "manifest_option", value=value)
        elif name == "manifest_checksums":
            value = _string(major, option)
            once(name)
            if value.upper() not in CHECKSUM_TYPES:
                raise _fail(major, "checksum_algorithm", value=value)
            values["manifest_checksums"] = value.upper()
        elif name == "target" and major >= 15:
            once(name)
            target = _string(major, option)
        elif name == "target_detail" and major >= 15:
            value = _string(major, option)
            once(name)
            target_detail = value
        elif name == "compression" and major >= 15:
            value = _string(major, option)
            once(name)
            if value not in _COMPRESSIONS:
                raise _fail(major, "compression_algorithm", value=value)
            values["compression"] = value
        elif name == "compression_detail" and major >= 15:
            once(name)
            compression_detail = _string(major, option)
        else:
            raise _fail(major, "unrecognized_option", name=name)

    manifest = values.get("manifest", "no")
    if manifest == "no":
        if "manifest_checksums" in seen:
            raise _fail(major, "checksums_need_manifest")
        values["manifest_checksums"] = "NONE"
    else:
        values.setdefault("manifest_checksums", "CRC32C")
    if target is None:
        if target_detail is not None:
            raise _fail(major, "detail_without_target")
    elif target == "client":
        if target_detail is not None:
            raise _fail(major, "client_target_detail")
    elif target == "blackhole":
        if target_detail is not None:
            raise _fail(major, "blackhole_target_detail")
    elif target == "server":
        if target_detail is None:
            raise _fail(major, "server_needs_detail")
    else:
        raise _fail(major, "unrecognized_target", value=target)
    if compression_detail is not None and "compression" not in values:
        raise _fail(major, "compression_detail_alone")
    return BackupOptions(
        **values,
        target=target or "client",
        target_detail=target_detail,
        compression_detail=compression_detail,
    )
