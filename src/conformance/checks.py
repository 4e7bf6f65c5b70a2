"""The checks run on every cell of the matrix (version × scenario × option set).

A :class:`Check` looks at a :class:`CheckContext` (the streams every subject delivered
for one cell, plus the server's tables) and returns one :class:`CheckResult`. The checks,
in :data:`CHECKS` order:

``capture``
    every subject delivered a stream.
``roundtrip``
    every message decodes, and re-encodes to the very same bytes.
``same-messages``
    every subject delivered the reference's payloads, in order, byte for byte; and at the
    same WAL positions, except where :data:`~conformance.subjects.Positions` allows a
    documented difference (see :func:`walsender_position_ok`).
``values``
    replaying the stream (:mod:`conformance.replay`) gives the tables the server holds:
    both sides are converted through :mod:`codec.values` (text or binary as sent), so
    numerics, timestamps, infinities and arrays compare exactly.
``declared-types``
    every message type the scenario declares (``Scenario.emits``) appears, so a
    scenario that silently produced nothing fails.
``replies``
    the fake walsender answers the probe commands as real PostgreSQL does.
``spark-values``
    the reference stream decoded and applied by the Spark side (no JVM) gives the
    server's tables, compared as ``values`` compares them (:class:`SparkTables`).

New checks plug in by implementing :class:`Check` and being added to :data:`CHECKS`
(or passed to :func:`conformance.matrix.run_matrix`).
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, time
from decimal import Decimal
from typing import ClassVar, Final, Protocol

from codec import CodecError
from codec import pgoutput as po
from codec.pgoutput import ColumnValue
from codec.values import TYPES, decode_binary, decode_text, encode_text
from conformance.replay import ReplayError, Row, replay
from conformance.replies import Replies
from conformance.scenarios import OptionSet, Scenario
from conformance.subjects import Positions, ServerTable, Stream, StreamMessage

__all__ = [
    "CHECKS",
    "Captured",
    "Check",
    "CheckContext",
    "CheckResult",
    "DeclaredTypes",
    "RoundTrip",
    "SameMessages",
    "SameReplies",
    "SparkTables",
    "Values",
    "accepted_forms",
    "same_value",
    "walsender_position_ok",
]

_NUMERIC = 1700


@dataclass(frozen=True, slots=True)
class CheckResult:
    """``ok``, and when not, one line saying why."""

    ok: bool
    detail: str = ""


@dataclass(frozen=True, slots=True)
class CheckContext:
    """Everything a check may look at for one cell.

    ``streams`` holds the stream of every subject that captured one, ``errors`` why the
    others could not; ``reference`` names the subject the others are compared with;
    ``positions`` says how each subject's WAL positions relate to the reference's.
    """

    major: int
    scenario: Scenario
    options: OptionSet
    reference: str
    streams: Mapping[str, Stream]
    errors: Mapping[str, str] = field(default_factory=dict)
    positions: Mapping[str, str] = field(default_factory=dict)
    tables: Mapping[int, ServerTable] = field(default_factory=dict)
    #: What each subject's walsender replied to :mod:`conformance.replies`' probe.
    replies: Mapping[str, Replies] = field(default_factory=dict)

    @property
    def subjects(self) -> list[str]:
        """Every subject of the cell, the reference first."""
        names = [self.reference, *self.streams, *self.errors]
        return list(dict.fromkeys(names))


class Check(Protocol):
    """One column of the matrix."""

    @property
    def name(self) -> str: ...

    def run(self, ctx: CheckContext) -> CheckResult: ...


def _per_subject(ctx: CheckContext, check: Callable[[str, Stream], str | None]) -> CheckResult:
    """Run ``check`` on each subject's stream; fail with the first subject's reason."""
    failures = []
    for subject in ctx.subjects:
        stream = ctx.streams.get(subject)
        reason = "not captured" if stream is None else check(subject, stream)
        if reason is not None:
            failures.append(f"{subject}: {reason}")
    if not failures:
        return CheckResult(True)
    more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
    return CheckResult(False, failures[0] + more)


def _describe(payload: bytes) -> str:
    cls = next((c for c in po.MESSAGE_CLASSES if payload[:1] == c.TAG), None)
    return f"{payload[:1].decode('latin-1')!r} {cls.__name__}" if cls else repr(payload[:1])


# --------------------------------------------------------------------------------------


class Captured:
    """Every subject delivered a stream (capture errors are reported here, once)."""

    name: ClassVar[str] = "capture"

    def run(self, ctx: CheckContext) -> CheckResult:
        if not ctx.errors:
            return CheckResult(True)
        subject, error = next(iter(ctx.errors.items()))
        return CheckResult(False, f"{subject}: {error}")


class RoundTrip:
    """Each message decodes, and ``encode(decode(b)) == b``."""

    name: ClassVar[str] = "roundtrip"

    def run(self, ctx: CheckContext) -> CheckResult:
        return _per_subject(ctx, lambda _, stream: self._one(stream))

    @staticmethod
    def _one(stream: Stream) -> str | None:
        decoder = po.Decoder()
        for index, message in enumerate(stream):
            try:
                decoded = decoder.decode(message.payload)
                again = po.encode(decoded)
            except CodecError as err:
                return f"message {index} ({_describe(message.payload)}): {err}"
            if again != message.payload:
                at = _first_difference(again, message.payload)
                return (
                    f"message {index} ({_describe(message.payload)}) re-encodes differently "
                    f"from byte {at} ({len(message.payload)} bytes in, {len(again)} out)"
                )
        return None


def walsender_position_ok(reference: Stream, index: int, lsn: int) -> bool:
    """Whether a walsender may deliver ``reference[index]`` at ``lsn``.

    The same position, or 0/0 when pgoutput wrote the message with ``last_write =
    false``: walsender.c ``WalSndPrepareWrite`` sends InvalidXLogRecPtr then ("can't have
    sync rep confused by sending the same LSN several times"), while the SQL interface
    (logicalfuncs.c ``LogicalOutputPrepareWrite``) keeps the LSN. pgoutput.c writes that
    way the Relation and Type messages sent before a change, and the Begin, Begin Prepare
    or Stream Start of a transaction that has an Origin message after it.
    """
    message = reference[index]
    if lsn == message.lsn:
        return True
    if lsn != 0:
        return False
    if message.tag in ("R", "Y"):
        return True
    following = reference[index + 1].tag if index + 1 < len(reference) else ""
    return message.tag in ("B", "b", "S") and following == "O"


class SameMessages:
    """Every subject delivered the reference's payloads, in order, at the same positions."""

    name: ClassVar[str] = "same-messages"

    def run(self, ctx: CheckContext) -> CheckResult:
        reference = ctx.streams.get(ctx.reference)
        if reference is None:
            return CheckResult(False, f"{ctx.reference}: not captured")

        def compare(subject: str, stream: Stream) -> str | None:
            if subject == ctx.reference:
                return None
            mode = ctx.positions.get(subject, Positions.SAME)
            return self.compare(reference, stream, mode, ctx.reference)

        return _per_subject(ctx, compare)

    @staticmethod
    def compare(
        reference: Stream, stream: Stream, mode: str, reference_name: str = "reference"
    ) -> str | None:
        for index, (want, got) in enumerate(zip(reference, stream, strict=False)):
            if want.payload != got.payload:
                return (
                    f"message {index}: {_describe(got.payload)} where {reference_name} has "
                    f"{_describe(want.payload)}" + _payload_diff(want, got)
                )
        if len(stream) != len(reference):
            index = min(len(stream), len(reference))
            longer = reference if len(reference) > len(stream) else stream
            return (
                f"{len(stream)} messages, {reference_name} has {len(reference)}; "
                f"first unmatched: message {index} {_describe(longer[index].payload)}"
            )
        if mode == Positions.NONE:
            return None
        for index, got in enumerate(stream):
            want = reference[index]
            ok = (
                walsender_position_ok(reference, index, got.lsn)
                if mode == Positions.WALSENDER
                else got.lsn == want.lsn
            )
            if not ok:
                return (
                    f"message {index} ({_describe(got.payload)}) at {got.lsn}, "
                    f"{reference_name} has it at {want.lsn}"
                )
        return None


def _payload_diff(want: StreamMessage, got: StreamMessage) -> str:
    if want.payload[:1] != got.payload[:1]:
        return ""
    return f" (bytes differ from offset {_first_difference(want.payload, got.payload)})"


def _first_difference(a: bytes, b: bytes) -> int:
    """The first offset where ``a`` and ``b`` differ (the shorter length if one is a prefix)."""
    common = min(len(a), len(b))
    return next((i for i in range(common) if a[i] != b[i]), common)


# --------------------------------------------------------------------------------------
# Values


_IP_VALUES: Final = (
    ipaddress.IPv4Interface,
    ipaddress.IPv6Interface,
    ipaddress.IPv4Network,
    ipaddress.IPv6Network,
)


def same_value(a: object, b: object) -> bool:
    """Exact equality of decoded values: NaN equals NaN, -0.0 differs from 0.0, numerics
    must have the same digits and scale, times the same UTC offset, lists element-wise."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, Decimal) and isinstance(b, Decimal):
        # The same numeric_out text: digits and display scale, however the value holds
        # them (a ScaledDecimal keeps its scale's zeros unwritten).
        return encode_text(_NUMERIC, a) == encode_text(_NUMERIC, b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, _IP_VALUES) and isinstance(b, _IP_VALUES):
        # Decoded inet/cidr values are lazy subclasses (codec.values.LazyIPv4Interface,
        # ...); ipaddress's own == tells interfaces, networks and versions apart.
        return a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, datetime | time) and isinstance(b, datetime | time):
        return a == b and a.utcoffset() == b.utcoffset()
    return a == b


def _stream_value(type_oid: int, value: ColumnValue) -> object:
    """``value`` decoded as ``type_oid`` (a base type OID) if codec.values knows it."""
    if isinstance(value, str):
        return decode_text(type_oid, value) if type_oid in TYPES else value
    if isinstance(value, bytes):
        return decode_binary(type_oid, value) if type_oid in TYPES else value
    return value


def _server_value(table: ServerTable, row: int, column: int, sent_binary: bool) -> object:
    type_oid = table.type_oids[column]
    if type_oid not in TYPES:
        # Enums, domains, composites: compare what the server's own output/send
        # functions produce, in the form the stream used.
        if sent_binary:
            return table.binary_rows[row][column]
        return table.text_rows[row][column]
    text = table.text_rows[row][column]
    return None if text is None else decode_text(type_oid, text)


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Values:
    """The tables replayed from the stream equal the server's, value by value.

    Rows are matched on the first column (every scenario table's key). A column the
    stream never sent for a row (it was written before ``ALTER TABLE ... ADD COLUMN``) is
    not compared; every other column of every row is.
    """

    name: ClassVar[str] = "values"

    def run(self, ctx: CheckContext) -> CheckResult:
        return _per_subject(ctx, lambda _, stream: self.compare(stream, ctx.tables))

    @classmethod
    def compare(cls, stream: Stream, tables: Mapping[int, ServerTable]) -> str | None:
        try:
            replayed = replay(m.payload for m in stream)
        except ReplayError as err:
            return f"replay: {err}"
        for oid, got in replayed.items():
            if oid not in tables:
                return f"changes for {got.name} (OID {oid}), which is not published"
        for oid, table in tables.items():
            rows = replayed[oid].rows if oid in replayed else []
            try:
                problem = cls._table(table, rows)
            except CodecError as err:
                problem = f"{table.name}: {err}"
            if problem:
                return problem
        return None

    @staticmethod
    def _table(table: ServerTable, rows: list[Row]) -> str | None:
        key_column = table.columns[0]
        server_keys: dict[str, int] = {}
        for index in range(len(table.text_rows)):
            server_keys[repr(_server_value(table, index, 0, sent_binary=False))] = index
        stream_keys: dict[str, Row] = {}
        for row in rows:
            if key_column not in row:
                return f"{table.name}: a streamed row has no {key_column} column"
            type_oid, raw = row[key_column]
            stream_keys[repr(_stream_value(table.base_type(type_oid), raw))] = row
        missing = [k for k in server_keys if k not in stream_keys]
        extra = [k for k in stream_keys if k not in server_keys]
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"server rows {key_column}={', '.join(missing)} not streamed")
            if extra:
                parts.append(f"streamed rows {key_column}={', '.join(extra)} not on server")
            return f"{table.name}: " + "; ".join(parts)
        differences = []
        for key, index in server_keys.items():
            row = stream_keys[key]
            for column, name in enumerate(table.columns):
                if name not in row:
                    continue
                type_oid, raw = row[name]
                got = _stream_value(table.base_type(type_oid), raw)
                want = _server_value(table, index, column, sent_binary=isinstance(raw, bytes))
                if not same_value(got, want):
                    differences.append(
                        f"{table.name} {key_column}={key} {name}: stream {_show(got)} "
                        f"!= server {_show(want)}"
                    )
        if differences:
            more = f" (+{len(differences) - 1} more)" if len(differences) > 1 else ""
            return differences[0] + more
        return None


# --------------------------------------------------------------------------------------
# Declared message types


def accepted_forms(tag: str, options: OptionSet) -> frozenset[str]:
    """The message types that show a declared ``tag`` was produced under ``options``.

    With ``two_phase`` every transaction of a scenario may be a prepared one, whose
    boundaries are Begin Prepare (``b``) and Commit Prepared (``K``) instead of Begin
    and Commit (the ``two_phase`` scenario does exactly that). Nothing else is
    substituted.
    """
    forms = {tag}
    if options.two_phase:
        forms |= {"B": {"b"}, "C": {"K"}}.get(tag, set())
    return frozenset(forms)


class DeclaredTypes:
    """Every message type the scenario declares appears in every subject's stream."""

    name: ClassVar[str] = "declared-types"

    def run(self, ctx: CheckContext) -> CheckResult:
        def check(_: str, stream: Stream) -> str | None:
            return self.missing(ctx.scenario.emits, ctx.options, stream)

        return _per_subject(ctx, check)

    @staticmethod
    def missing(emits: frozenset[str], options: OptionSet, stream: Stream) -> str | None:
        seen = {m.tag for m in stream}
        absent = sorted(t for t in emits if not accepted_forms(t, options) & seen)
        if not stream:
            return "no messages at all"
        if absent:
            return f"declared message types {''.join(absent)} missing (saw {''.join(sorted(seen))})"
        return None


# --------------------------------------------------------------------------------------
# Replies to commands


class SameReplies:
    """Every subject that probed a walsender got the same replies as real PostgreSQL did.

    The reference is ``real`` (the :class:`~conformance.subjects.Walsender` subject: our
    client against the real server). Compared: the shape of the IDENTIFY_SYSTEM and
    CREATE_REPLICATION_SLOT results and the severity, SQLSTATE and message of the errors
    for a missing slot, an active slot, proto_version 99, an unknown pgoutput option and a
    missing publication (:mod:`conformance.replies`). Subjects that read no walsender
    (the SQL interface) have nothing to compare.
    """

    name: ClassVar[str] = "replies"

    def __init__(self, real: str = "walsender") -> None:
        self.real = real

    def run(self, ctx: CheckContext) -> CheckResult:
        others = [s for s in ctx.replies if s != self.real]
        if not others:
            return CheckResult(True)
        reference = ctx.replies.get(self.real)
        if reference is None:
            return CheckResult(False, f"{self.real}: no replies probed")
        failures: list[str] = []
        for subject in others:
            diffs = reference.differences(ctx.replies[subject], subject, self.real)
            failures.extend(f"{subject}: {d}" for d in diffs)
        if not failures:
            return CheckResult(True)
        more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
        return CheckResult(False, failures[0] + more)


# --------------------------------------------------------------------------------------
# The Spark side


class SparkTables:
    """The reference stream, materialised by the Spark side, equals the server's tables.

    The reference subject's capture goes through :func:`pgwire_mock.spark.decode_stream`
    and :func:`pgwire_mock.spark.apply_changes` into a Parquet target, in this process and
    without a JVM (:mod:`conformance.spark_check`); each Spark value is turned back into
    PostgreSQL's form by docs/spark.md's type mapping (NULL plus ``_special`` text for the
    values Spark cannot hold) and compared with :meth:`Values.compare`'s comparison, value
    by value, rows matched on the first column.

    Covered: every scenario but ``ddl``, under every option set -- built-in types with
    their special values (NaN numerics, infinite and BC dates, 2-D arrays and arrays
    holding infinity go through ``_special``), replica identity default / full / index /
    nothing (the ``nothing`` table only gets inserts: PostgreSQL refuses updates and
    deletes on it when they are published), unchanged TOAST, truncate, streamed,
    two-phase, origin, partitioned, filtered and generated-column tables. User types are
    covered too: enums, composites and arrays of them as their text (text format) or as
    ``_special`` = ``\\x<hex>`` equal to the server's send function output (binary format),
    a domain as its base type.

    Excluded, explicitly: ``ddl`` (every option set). Its stream changes the table's
    columns and name mid-stream, which the Spark side refuses by design (docs/spark.md:
    one schema per read, ``SchemaChangeError``). The cell passes only if the Spark side
    does raise ``SchemaChangeError``; its detail says it was excluded. Any other scenario
    the Spark side refuses fails its cell.
    """

    name: ClassVar[str] = "spark-values"

    #: Scenario -> why it is excluded; the Spark side must refuse it with SchemaChangeError.
    EXCLUDED: ClassVar[Mapping[str, str]] = {
        "ddl": "ALTER TABLE changes the Relation mid-stream (SchemaChangeError by design)",
    }

    def run(self, ctx: CheckContext) -> CheckResult:
        stream = ctx.streams.get(ctx.reference)
        if stream is None:
            return CheckResult(False, f"{ctx.reference}: not captured")
        excluded = self.EXCLUDED.get(ctx.scenario.name)
        problem = self.compare(stream, ctx.tables, expect_refusal=excluded is not None)
        if problem is not None:
            return CheckResult(False, f"{ctx.reference}: {problem}")
        return CheckResult(True, f"excluded: {excluded}" if excluded else "")

    @staticmethod
    def compare(
        stream: Stream, tables: Mapping[int, ServerTable], *, expect_refusal: bool = False
    ) -> str | None:
        """Why the Spark side's tables differ from ``tables`` (None when they do not).

        With ``expect_refusal`` the Spark side must refuse the stream with a
        ``SchemaChangeError``, and anything else is the problem.
        """
        # Imported here: the Spark side needs the ``spark`` extra, the rest of the
        # matrix does not, and a missing extra must fail this column, not the import.
        try:
            from conformance import spark_check  # noqa: PLC0415 - the spark extra is optional
            from pgwire_mock.spark import (  # noqa: PLC0415 - as above
                SchemaChangeError,
                SparkSideError,
            )
        except ImportError as err:
            return f"the Spark side cannot be imported (pip install 'pgwire-mock[spark]'): {err}"
        try:
            got = spark_check.materialise(stream)
        except SchemaChangeError as err:
            return None if expect_refusal else f"spark: {err}"
        except (SparkSideError, CodecError) as err:
            return f"spark: {type(err).__name__}: {err}"
        if expect_refusal:
            return "spark: expected SchemaChangeError, the stream was applied"
        stray = spark_check.unknown_tables(got, tables)
        if stray:
            return f"spark: changes for {stray[0]}, which is not published"
        for oid, table in tables.items():
            try:
                rows = spark_check.spark_rows(table, got.tables[oid]) if oid in got.tables else []
                problem = Values._table(table, rows)
            except (CodecError, SparkSideError) as err:
                problem = f"{table.name}: {err}"
            if problem:
                return f"spark: {problem}"
        return None


#: The checks of the matrix, in column order.
CHECKS: Final[tuple[Check, ...]] = (
    Captured(),
    RoundTrip(),
    SameMessages(),
    Values(),
    DeclaredTypes(),
    SameReplies(),
    SparkTables(),
)
