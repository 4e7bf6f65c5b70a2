"""Replication command text and typed views of their results.

Quoting follows src/backend/replication/repl_scanner.l: a double-quoted identifier is
taken as it stands (``""`` for a quote), a single-quoted string takes ``''`` for a quote;
neither may contain NUL. Every name is quoted, as pg_recvlogical and psycopg2 do, so
mixed case and odd characters survive and keywords cannot clash.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from codec.values import LSN

if TYPE_CHECKING:
    from pgwire_mock.client.session import CommandResult

#: What CREATE_REPLICATION_SLOT does with the snapshot it builds.
Snapshot = Literal["nothing", "export", "use"]
#: START_REPLICATION option values: a string, a bool/int (sent as text), or None (no value).
OptionValue = str | bool | int | None

_LEGACY_SNAPSHOT: Final[dict[str, str]] = {
    "nothing": "NOEXPORT_SNAPSHOT",
    "export": "EXPORT_SNAPSHOT",
    "use": "USE_SNAPSHOT",
}


def quote_identifier(name: str) -> str:
    """``name`` as a double-quoted identifier."""
    if not name:
        raise ValueError("zero-length delimited identifier")
    if "\0" in name:
        raise ValueError(f"identifier contains NUL: {name!r}")
    return '"' + name.replace('"', '""') + '"'


def quote_literal(value: str) -> str:
    """``value`` as a single-quoted string constant."""
    if "\0" in value:
        raise ValueError(f"string contains NUL: {value!r}")
    return "'" + value.replace("'", "''") + "'"


def publication_names(names: str | Iterable[str]) -> str:
    """The value of pgoutput's ``publication_names``: a list of quoted identifiers.

    pgoutput splits it with SplitIdentifierString, which lower-cases bare names; quoting
    each keeps them exact and allows commas inside.
    """
    items = [names] if isinstance(names, str) else list(names)
    if not items:
        raise ValueError("publication_names needs at least one publication")
    return ",".join(quote_identifier(name) for name in items)


def pgoutput_options(
    publications: str | Iterable[str],
    *,
    proto_version: int = 1,
    binary: bool | None = None,
    messages: bool | None = None,
    streaming: bool | str | None = None,
    two_phase: bool | None = None,
    origin: str | None = None,
) -> dict[str, OptionValue]:
    """START_REPLICATION options for pgoutput; None leaves an option out.

    ``proto_version`` and ``publication_names`` always go first: PostgreSQL 17 requires
    both explicitly (pgoutput.c parse_output_parameters).
    """
    options: dict[str, OptionValue] = {
        "proto_version": str(proto_version),
        "publication_names": publication_names(publications),
    }
    extra: dict[str, OptionValue] = {
        "binary": binary,
        "messages": messages,
        "streaming": streaming,
        "two_phase": two_phase,
        "origin": origin,
    }
    options.update({name: value for name, value in extra.items() if value is not None})
    return options


def _option_text(value: OptionValue) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def format_lsn(lsn: LSN | int | str) -> str:
    """``X/Y`` as the replication grammar's RECPTR token wants it."""
    return str(lsn if isinstance(lsn, LSN) else LSN(lsn))


def server_major(server_version: str) -> int:
    """The major version in a ``server_version`` ParameterStatus (``"16.4 (Debian …)"``)."""
    digits = ""
    for ch in server_version:
        if not ch.isdigit():
            break
        digits += ch
    if not digits:
        raise ValueError(f"cannot read a major version from server_version {server_version!r}")
    return int(digits)


def create_replication_slot_command(
    slot_name: str,
    server_major_version: int,
    *,
    plugin: str = "pgoutput",
    temporary: bool = False,
    snapshot: Snapshot = "nothing",
    two_phase: bool = False,
    failover: bool = False,
) -> str:
    """CREATE_REPLICATION_SLOT for a logical slot in the syntax the server understands.

    15 introduced the parenthesized option list (and TWO_PHASE); 14 only knows the legacy
    ``*_SNAPSHOT`` words and has no two-phase slots. FAILOVER is new in 17.
    """
    if snapshot not in _LEGACY_SNAPSHOT:
        raise ValueError(f"snapshot must be 'nothing', 'export' or 'use', not {snapshot!r}")
    head = f"CREATE_REPLICATION_SLOT {quote_identifier(slot_name)}"
    if temporary:
        head += " TEMPORARY"
    head += f" LOGICAL {quote_identifier(plugin)}"
    if server_major_version < 15:
        if two_phase:
            raise ValueError("two-phase slots need PostgreSQL 15 or later")
        if failover:
            raise ValueError("failover slots need PostgreSQL 17 or later")
        return f"{head} {_LEGACY_SNAPSHOT[snapshot]}"
    options = [f"SNAPSHOT {quote_literal(snapshot)}"]
    if two_phase:
        options.append("TWO_PHASE")
    if failover:
        if server_major_version < 17:
            raise ValueError("failover slots need PostgreSQL 17 or later")
        options.append("FAILOVER")
    return f"{head} ( {', '.join(options)} )"


def drop_replication_slot_command(slot_name: str, *, wait: bool = False) -> str:
    """DROP_REPLICATION_SLOT; WAIT blocks until an active slot is released."""
    command = f"DROP_REPLICATION_SLOT {quote_identifier(slot_name)}"
    return command + " WAIT" if wait else command


def start_replication_command(
    slot_name: str, start_lsn: LSN | int | str, options: Mapping[str, OptionValue] | None = None
) -> str:
    """START_REPLICATION SLOT "s" LOGICAL X/Y ("name" 'value', ...)."""
    command = (
        f"START_REPLICATION SLOT {quote_identifier(slot_name)} LOGICAL {format_lsn(start_lsn)}"
    )
    if not options:
        return command
    parts = []
    for name, value in options.items():
        text = _option_text(value)
        quoted = quote_identifier(name)
        parts.append(quoted if text is None else f"{quoted} {quote_literal(text)}")
    return f"{command} ({', '.join(parts)})"


# --- typed results -------------------------------------------------------------------


def _single_row(result: CommandResult, command: str, width: int) -> tuple[str | None, ...]:
    if len(result.rows) != 1 or len(result.rows[0]) != width:
        raise ValueError(
            f"{command} should return one row of {width} columns, got {len(result.rows)} "
            f"rows of {[len(row) for row in result.rows]}"
        )
    return result.rows[0]


def _required(value: str | None, command: str, column: str) -> str:
    if value is None:
        raise ValueError(f"{command} returned NULL for {column}")
    return value


@dataclass(frozen=True, slots=True)
class SystemIdentity:
    """The row of IDENTIFY_SYSTEM (dbname is None on a physical replication connection)."""

    systemid: str
    timeline: int
    xlogpos: LSN
    dbname: str | None

    @classmethod
    def from_result(cls, result: CommandResult) -> SystemIdentity:
        systemid, timeline, xlogpos, dbname = _single_row(result, "IDENTIFY_SYSTEM", 4)
        return cls(
            _required(systemid, "IDENTIFY_SYSTEM", "systemid"),
            int(_required(timeline, "IDENTIFY_SYSTEM", "timeline")),
            LSN.parse(_required(xlogpos, "IDENTIFY_SYSTEM", "xlogpos")),
            dbname,
        )


@dataclass(frozen=True, slots=True)
class CreatedSlot:
    """The row of CREATE_REPLICATION_SLOT; ``snapshot_name`` is None unless exported."""

    slot_name: str
    consistent_point: LSN
    snapshot_name: str | None
    output_plugin: str | None

    @classmethod
    def from_result(cls, result: CommandResult) -> CreatedSlot:
        name, point, snapshot, plugin = _single_row(result, "CREATE_REPLICATION_SLOT", 4)
        return cls(
            _required(name, "CREATE_REPLICATION_SLOT", "slot_name"),
            LSN.parse(_required(point, "CREATE_REPLICATION_SLOT", "consistent_point")),
            snapshot,
            plugin,
        )
