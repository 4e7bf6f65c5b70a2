"""The declarative spec of a synthetic change stream, and its validation.

A spec is a YAML (or JSON) mapping; ``docs/synth.md`` documents every field. Loading
checks everything up front and reports the first problem as one line naming the place,
``spec.yaml: tables[0].columns[2].type: unknown type 'int5'``, so that a generator
run never fails half-way through ten million changes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, cast

import yaml

from codec import CodecError
from codec.values import LSN, TypeInfo, datetime_to_pg_timestamp, type_by_name
from pgwire_mock import json_text

__all__ = [
    "ColumnSpec",
    "LargeSpec",
    "MessageSpec",
    "OutputSpec",
    "Spec",
    "SpecError",
    "TableSpec",
    "load_spec",
    "parse_spec",
]

#: Key columns hold an integer key id (negative for rows of rolled-back work), so they
#: must be able to represent every id: int2 is too small, the rest map ids exactly.
KEY_TYPES: Final = frozenset({"int4", "int8", "text", "varchar", "uuid"})
TOAST_TYPES: Final = frozenset({"text", "varchar", "bytea"})
MAX_BLOCK_SIZE: Final = 100_000
MAX_TOAST_SIZE: Final = 1 << 20
_STREAMING: Final = ("off", "on", "parallel")
_DISTRIBUTIONS: Final = ("fixed", "uniform", "geometric")
_FIRST_USER_OID: Final = 16384


class SpecError(ValueError):
    """A spec that cannot be generated; ``str()`` is one line naming the place."""

    def __init__(self, where: str, problem: str, source: str = "") -> None:
        self.where = where
        self.problem = problem
        self.source = source
        super().__init__(str(self))

    def __str__(self) -> str:
        place = ": ".join(p for p in (self.source, self.where) if p)
        return f"{place}: {self.problem}" if place else self.problem


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    name: str
    type: TypeInfo
    key: bool = False
    null_ratio: float = 0.0
    #: Share of rows whose value is TOAST-sized (``toast_size`` characters); such a value
    #: belongs to the row's key for its whole life, so updates send it as unchanged-TOAST.
    toast_ratio: float = 0.0
    toast_size: int = 4000


@dataclass(frozen=True, slots=True)
class TableSpec:
    namespace: str
    name: str
    oid: int
    columns: tuple[ColumnSpec, ...]
    weight: float = 1.0
    hot_keys: int = 16
    hot_ratio: float = 0.2
    #: Truncate (and re-insert the hot rows) every this many changes; 0 = never.
    truncate_every: int = 0
    #: Rows the table holds before the stream's first transaction: the recording's
    #: snapshot (key ids ``hot_keys .. hot_keys + initial_rows - 1``).
    initial_rows: int = 0

    @property
    def qualified_name(self) -> str:
        return f"{self.namespace}.{self.name}"

    @property
    def key_index(self) -> int:
        return next(i for i, c in enumerate(self.columns) if c.key)


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """The pgoutput options the stream is encoded for, as a client would ask."""

    proto_version: int = 1
    binary: bool = False
    streaming: str = "off"
    two_phase: bool = False
    messages: bool = False

    def as_pgoutput(self, publication: str) -> dict[str, str]:
        out = {
            "proto_version": str(self.proto_version),
            "publication_names": publication,
            "binary": "true" if self.binary else "false",
            "messages": "true" if self.messages else "false",
            "streaming": self.streaming,
        }
        if self.two_phase:
            out["two_phase"] = "true"
        return out


@dataclass(frozen=True, slots=True)
class MessageSpec:
    ratio: float = 0.0
    transactional_ratio: float = 0.5
    prefix: str = "synth"
    size: int = 32


@dataclass(frozen=True, slots=True)
class LargeSpec:
    #: Share of blocks that are one large transaction (streamed when streaming is on).
    ratio: float = 0.0
    chunk: int = 256
    subtransaction_size: int = 50
    subtransaction_abort_ratio: float = 0.0
    #: Chance that an aborted large transaction precedes a large one.
    abort_ratio: float = 0.0
    abort_size: int = 200


@dataclass(frozen=True, slots=True)
class Spec:
    tables: tuple[TableSpec, ...]
    operations: Mapping[str, float] = field(
        default_factory=lambda: {"insert": 0.5, "update": 0.3, "key_update": 0.0, "delete": 0.2}
    )
    size_distribution: str = "geometric"
    size_mean: float = 5.0
    size_min: int = 1
    size_max: int = 100
    two_phase_ratio: float = 0.0
    two_phase_rollback_ratio: float = 0.0
    messages: MessageSpec = MessageSpec()
    large: LargeSpec = LargeSpec()
    output: OutputSpec = OutputSpec()
    block_size: int = 1000
    pool_size: int = 1024
    start_lsn: int = 0x1000000
    start_time: int = 0  # microseconds since 2000-01-01 UTC
    changes_per_second: float = 10_000.0
    publication: str = "synth"
    server_version: int = 16
    #: Whether a recording starts with the tables' snapshot (their ``initial_rows``), as
    #: ``pgwire-mock record --snapshot`` writes one.
    snapshot: bool = False


def load_spec(path: str | Path) -> Spec:
    """Read and validate a spec file (``.json`` as JSON, anything else as YAML)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        raise SpecError("", f"cannot read: {err.strerror}", str(p)) from None
    except UnicodeDecodeError as err:
        raise SpecError("", f"not UTF-8 text: {err.reason}", str(p)) from None
    return parse_spec(text, source=str(p), json_only=p.suffix.lower() == ".json")


def parse_spec(text: str, *, source: str = "<spec>", json_only: bool = False) -> Spec:
    """Validate spec text; raise :class:`SpecError` with the first problem."""
    try:
        data = json_text.loads(text) if json_only else yaml.safe_load(text)
    except json.JSONDecodeError as err:
        raise SpecError(f"line {err.lineno}", f"not JSON: {err.msg}", source) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise SpecError(where, f"not YAML: {problem}", source) from None
    except RecursionError:  # PyYAML's composer recurses once per nesting level
        raise SpecError("", "not YAML: nested too deeply", source) from None
    try:
        return _build(data)
    except SpecError as err:
        raise SpecError(err.where, err.problem, source) from None


# --- validation -------------------------------------------------------------------------


class _Node:
    """A mapping being read, that knows its path and refuses unknown keys."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, Mapping):
            raise SpecError(where, f"expected a mapping, found {_kind(data)}")
        self.data = data
        self.where = where
        self.used: set[str] = set()

    def at(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        return self.data.get(key, default)

    def child(self, key: str) -> _Node:
        return _Node(self.get(key, {}), self.at(key))

    def number(
        self, key: str, default: float, lo: float, hi: float, *, integer: bool = False
    ) -> Any:
        value: Any = self.get(key, default)
        kinds: tuple[type, ...] = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            want = "an integer" if integer else "a number"
            raise SpecError(self.at(key), f"expected {want}, found {_kind(value)}")
        if not lo <= cast(float, value) <= hi:
            raise SpecError(self.at(key), f"must be in [{lo:g}, {hi:g}], got {value!r}")
        return value

    def ratio(self, key: str, default: float = 0.0) -> float:
        return float(self.number(key, default, 0.0, 1.0))

    def integer(self, key: str, default: int, lo: int, hi: int) -> int:
        return int(self.number(key, default, lo, hi, integer=True))

    def string(self, key: str, default: str | None = None) -> str:
        value = self.get(key, default)
        if not isinstance(value, str) or not value:
            raise SpecError(self.at(key), f"expected a non-empty string, found {_kind(value)}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise SpecError(self.at(key), f"expected true or false, found {_kind(value)}")
        return value

    def done(self) -> None:
        extra = sorted(str(k) for k in self.data if k not in self.used)
        if extra:
            raise SpecError(self.at(extra[0]), "unknown field")


def _kind(value: object) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, str):
        return f"{value!r}"
    if isinstance(value, bool | int | float):
        return f"{value!r}"
    return type(value).__name__


def _build(data: object) -> Spec:
    root = _Node(data, "")
    version = root.get("version", 1)
    if version != 1:
        raise SpecError("version", f"only version 1 is known, got {version!r}")
    tables_data = root.get("tables")
    if not isinstance(tables_data, list) or not tables_data:
        raise SpecError("tables", f"expected a non-empty list, found {_kind(tables_data)}")
    tables = tuple(_table(t, i) for i, t in enumerate(tables_data))
    names = [t.qualified_name for t in tables]
    oids = [t.oid for t in tables]
    for i, t in enumerate(tables):
        if names.index(t.qualified_name) != i:
            raise SpecError(f"tables[{i}].name", f"duplicate table {t.qualified_name!r}")
        if oids.index(t.oid) != i:
            raise SpecError(f"tables[{i}].oid", f"duplicate OID {t.oid}")

    ops_node = root.child("operations")
    ops = {
        k: float(ops_node.number(k, d, 0, 1e9))
        for k, d in (("insert", 0.5), ("update", 0.3), ("key_update", 0.0), ("delete", 0.2))
    }
    ops_node.done()
    if sum(ops.values()) <= 0:
        raise SpecError("operations", "at least one operation needs a weight above 0")
    if ops["delete"] + ops["key_update"] > ops["insert"]:
        raise SpecError(
            "operations.delete",
            "delete + key_update must not exceed insert (deletes take the oldest rows, "
            "which inserts must have made)",
        )

    tx = root.child("transactions")
    size = tx.child("size")
    distribution = size.get("distribution", "geometric")
    if distribution not in _DISTRIBUTIONS:
        raise SpecError(
            size.at("distribution"),
            f"expected one of {', '.join(_DISTRIBUTIONS)}, found {_kind(distribution)}",
        )
    size_min = size.integer("min", 1, 1, MAX_BLOCK_SIZE)
    size_max = size.integer("max", 100, size_min, MAX_BLOCK_SIZE)
    size_mean = float(size.number("mean", 5.0, size_min, size_max))
    size.done()
    two = tx.child("two_phase")
    two_ratio = two.ratio("ratio")
    two_rollback = two.ratio("rollback_ratio")
    two.done()
    tx.done()

    msg = root.child("messages")
    messages = MessageSpec(
        ratio=msg.ratio("ratio"),
        transactional_ratio=msg.ratio("transactional_ratio", 0.5),
        prefix=msg.string("prefix", "synth"),
        size=msg.integer("size", 32, 0, 1 << 20),
    )
    msg.done()

    big = root.child("large_transactions")
    large = LargeSpec(
        ratio=big.ratio("ratio"),
        chunk=big.integer("chunk", 256, 1, MAX_BLOCK_SIZE),
        subtransaction_size=big.integer("subtransaction_size", 50, 1, MAX_BLOCK_SIZE),
        subtransaction_abort_ratio=big.ratio("subtransaction_abort_ratio"),
        abort_ratio=big.ratio("abort_ratio"),
        abort_size=big.integer("abort_size", 200, 1, MAX_BLOCK_SIZE),
    )
    big.done()

    out = root.child("output")
    output = OutputSpec(
        proto_version=out.integer("proto_version", 1, 1, 4),
        binary=out.boolean("binary", False),
        streaming=_streaming(out),
        two_phase=out.boolean("two_phase", False),
        messages=out.boolean("messages", False),
    )
    out.done()
    if output.streaming != "off" and output.proto_version < 2:
        raise SpecError("output.streaming", "streaming needs proto_version 2 or more")
    if output.streaming == "parallel" and output.proto_version < 4:
        raise SpecError("output.streaming", "streaming: parallel needs proto_version 4")
    if output.two_phase and output.proto_version < 3:
        raise SpecError("output.two_phase", "two_phase needs proto_version 3 or more")

    # The majors the fake emulates (pgwire_mock.server.MAJORS, not imported: that pulls in
    # Twisted, and specs are read on Spark executors too).
    server_version = root.integer("server_version", 16, 14, 18)
    if output.streaming == "parallel" and server_version < 16:
        raise SpecError("output.streaming", "streaming: parallel needs server_version 16+")

    if ops["update"] + ops["key_update"] + ops["delete"] > 0:
        for i, t in enumerate(tables):
            if t.hot_keys < 1:
                raise SpecError(
                    f"tables[{i}].hot_keys",
                    "must be at least 1 when there are updates or deletes "
                    "(updates fall back to the hot keys when no other row is live)",
                )

    initial = [i for i, t in enumerate(tables) if t.initial_rows]
    snapshot = root.boolean("snapshot", bool(initial))
    if initial and not snapshot:
        raise SpecError(
            f"tables[{initial[0]}].initial_rows",
            "initial rows are the recording's snapshot: not with snapshot: false",
        )

    spec = Spec(
        tables=tables,
        operations=ops,
        size_distribution=distribution,
        size_mean=size_mean,
        size_min=size_min,
        size_max=size_max,
        two_phase_ratio=two_ratio,
        two_phase_rollback_ratio=two_rollback,
        messages=messages,
        large=large,
        output=output,
        block_size=root.integer("block_size", 1000, 1, MAX_BLOCK_SIZE),
        pool_size=root.integer("pool_size", 1024, 1, 1 << 20),
        start_lsn=_lsn(root, "start_lsn", "0/1000000"),
        start_time=_time(root, "start_time", "2025-01-01T00:00:00Z"),
        changes_per_second=float(root.number("changes_per_second", 10_000, 1e-3, 1e6)),
        publication=root.string("publication", "synth"),
        server_version=server_version,
        snapshot=snapshot,
    )
    root.done()
    return spec


def _streaming(node: _Node) -> str:
    value = node.get("streaming", "off")
    # YAML 1.1 reads a bare on/off as a boolean; accept both spellings.
    if isinstance(value, bool):
        value = "on" if value else "off"
    if value not in _STREAMING:
        raise SpecError(
            node.at("streaming"), f"expected one of off, on, parallel, found {_kind(value)}"
        )
    return str(value)


def _lsn(node: _Node, key: str, default: str) -> int:
    value = node.get(key, default)
    try:
        return int(LSN(value)) if isinstance(value, str | int) else int(LSN(str(value)))
    except (CodecError, ValueError) as err:
        raise SpecError(node.at(key), f"expected an LSN like '0/1000000': {err}") from None


def _time(node: _Node, key: str, default: str) -> int:
    value = node.get(key, default)
    if isinstance(value, datetime):  # YAML reads unquoted timestamps itself
        moment = value
    else:
        try:
            moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            raise SpecError(
                node.at(key), f"expected an ISO 8601 timestamp, found {_kind(value)}"
            ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(datetime_to_pg_timestamp(moment))


def _table(data: object, index: int) -> TableSpec:
    where = f"tables[{index}]"
    node = _Node(data, where)
    full = node.string("name")
    namespace, _, name = full.rpartition(".")
    columns_data = node.get("columns")
    if not isinstance(columns_data, list) or not columns_data:
        raise SpecError(
            node.at("columns"), f"expected a non-empty list, found {_kind(columns_data)}"
        )
    columns = tuple(_column(c, f"{where}.columns[{i}]") for i, c in enumerate(columns_data))
    keys = [i for i, c in enumerate(columns) if c.key]
    if len(keys) != 1:
        raise SpecError(
            node.at("columns"), f"expected exactly one column with key: true, found {len(keys)}"
        )
    seen: set[str] = set()
    for i, c in enumerate(columns):
        if c.name in seen:
            raise SpecError(f"{where}.columns[{i}].name", f"duplicate column {c.name!r}")
        seen.add(c.name)
    table = TableSpec(
        namespace=namespace or "public",
        name=name,
        oid=node.integer("oid", _FIRST_USER_OID + index, 1, (1 << 32) - 1),
        columns=columns,
        weight=float(node.number("weight", 1.0, 0, 1e9)),
        hot_keys=node.integer("hot_keys", 16, 0, 1_000_000),
        hot_ratio=node.ratio("hot_ratio", 0.2),
        truncate_every=node.integer("truncate_every", 0, 0, 1 << 62),
        initial_rows=node.integer("initial_rows", 0, 0, 1 << 40),
    )
    node.done()
    return table


def _column(data: object, where: str) -> ColumnSpec:
    node = _Node(data, where)
    name = node.string("name")
    type_name = node.get("type")
    if not isinstance(type_name, str):
        raise SpecError(node.at("type"), f"expected a type name, found {_kind(type_name)}")
    try:
        info = type_by_name(type_name)
    except KeyError:
        raise SpecError(node.at("type"), f"unknown type {type_name!r}") from None
    key = node.boolean("key", False)
    column = ColumnSpec(
        name=name,
        type=info,
        key=key,
        null_ratio=node.ratio("null_ratio"),
        toast_ratio=node.ratio("toast_ratio"),
        toast_size=node.integer("toast_size", 4000, 1, MAX_TOAST_SIZE),
    )
    node.done()
    if key:
        if info.name not in KEY_TYPES:
            raise SpecError(
                node.at("type"),
                f"a key column must be one of {', '.join(sorted(KEY_TYPES))}, not {info.name}",
            )
        if column.null_ratio or column.toast_ratio:
            raise SpecError(node.at("key"), "a key column cannot be NULL or TOASTed")
    if column.toast_ratio and info.name not in TOAST_TYPES:
        raise SpecError(
            node.at("toast_ratio"), f"only text, varchar and bytea can be TOASTed, not {info.name}"
        )
    return column
