"""One table's committed changes, kept as raw pgoutput payloads until they are turned
into an Arrow record batch a whole batch at a time.

A change is kept as its message bytes and where its tuples start. :meth:`TableRows.flush`
parses every row's TupleData at once (:mod:`pgwire_mock.spark.columnar`) and converts
each column at once (:mod:`pgwire_mock.spark.convert`); if the batch holds a malformed
tuple, it decodes the rows one by one with the codec instead, which raises the
:class:`~codec.errors.DecodeError` naming the message and offset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeAlias, cast

import numpy as np
import pyarrow as pa

from codec.errors import DecodeError
from codec.pgoutput import UNCHANGED_TOAST, Delete, Insert, Relation, TupleData, Update
from codec.pgoutput.tuples import read_tuple
from pgwire_mock.spark.columnar import KIND_TOAST, ParsedTuples, concat, parse_tuples
from pgwire_mock.spark.errors import StreamStateError
from pgwire_mock.spark.types import ColumnType

if TYPE_CHECKING:
    from pgwire_mock.spark.convert import RawValue, Specials

__all__ = [
    "AFTER_OLD",
    "NO_TUPLE",
    "Change",
    "RawRows",
    "TableRows",
    "names_column",
    "special_column",
]

AFTER_OLD: Final = -1
"""``Change.values_at`` of an Update with an old tuple: the new tuple follows it."""
NO_TUPLE: Final = -2
"""``Change.values_at`` of a Truncate's rows, and ``old_at`` of changes without one."""

_NEW: Final = ord("N")

RawColumn: TypeAlias = "pa.StringArray | list[RawValue]"
"""One column's raw values: text values as an Arrow string array, or a list."""
# DecodeError names a message as the codec does.
_MESSAGE_NAMES: Final = {"insert": Insert.NAME, "update": Update.NAME, "delete": Delete.NAME}


@dataclass(slots=True)
class Change:
    """One change: its message, where the tuple shown in the table's columns starts
    (the new row; a Delete's old key or row), and where the old tuple an Update
    carries starts; offsets are into ``payload``. A change to a table nobody asked for
    has ``table`` None (it still takes its place in the transaction)."""

    subxid: int | None
    table: str | None
    op: str
    payload: bytes = b""
    values_at: int = NO_TUPLE
    old_at: int = NO_TUPLE
    truncated: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RawRows:
    """Committed rows of one table, not parsed yet, column by column: what the decoder
    collects and a driver hands to executors to convert. A row costs an item in each
    list and no object of its own, so a buffer of a million rows gives the garbage
    collector a few lists to scan, not a million tuples; and lists of ints, strings and
    bytes pickle in C."""

    ops: list[str] = field(default_factory=list)
    commit_lsns: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    xids: list[int] = field(default_factory=list)
    commit_times: list[int] = field(default_factory=list)
    payloads: list[bytes] = field(default_factory=list)
    values_at: list[int] = field(default_factory=list)
    old_at: list[int] = field(default_factory=list)

    def add(
        self, op: str, commit_lsn: int, position: int, xid: int, commit_time: int, change: Change
    ) -> None:
        """One committed row: ``change`` at ``position`` in transaction ``xid``,
        committed at ``commit_lsn`` (commit time in Unix µs)."""
        self.ops.append(op)
        self.commit_lsns.append(commit_lsn)
        self.positions.append(position)
        self.xids.append(xid)
        self.commit_times.append(commit_time)
        self.payloads.append(change.payload)
        self.values_at.append(change.values_at)
        self.old_at.append(change.old_at)

    def extend(self, other: RawRows) -> None:
        """Append the rows of ``other``."""
        self.ops.extend(other.ops)
        self.commit_lsns.extend(other.commit_lsns)
        self.positions.extend(other.positions)
        self.xids.extend(other.xids)
        self.commit_times.extend(other.commit_times)
        self.payloads.extend(other.payloads)
        self.values_at.extend(other.values_at)
        self.old_at.extend(other.old_at)

    def __len__(self) -> int:
        return len(self.ops)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Pickled as one compressed blob: a micro-batch's rows travel from the driver's
        # source runner through the JVM (several copies, and on a cluster the network)
        # to the executors; as lists they are ~280 bytes a row of the benchmark's wide
        # table and make the JVM's collector chase humongous arrays, packed ~40.
        return (_unpack, _pack(self))

    def slice(self, start: int, stop: int) -> RawRows:
        return RawRows(
            self.ops[start:stop],
            self.commit_lsns[start:stop],
            self.positions[start:stop],
            self.xids[start:stop],
            self.commit_times[start:stop],
            self.payloads[start:stop],
            self.values_at[start:stop],
            self.old_at[start:stop],
        )


# Fast enough at level 1 to cost the driver less than the copies it saves (0.07 s for
# 37 MB of the benchmark's rows, to 6 MB).
_CODEC: Final = "zstd"
_COMPRESS: Final = pa.Codec.is_available(_CODEC)
_INT_COLUMNS: Final = 6  # commit_lsns (as unsigned) ... old_at, then the payload lengths


def _pack(rows: RawRows) -> tuple[int, tuple[str, ...], bool, int, bytes]:
    """``rows`` as (row count, op names, codec, packed size, packed bytes): per row an
    op code byte and seven 64-bit ints, then every payload, compressed at once."""
    n = len(rows)
    names = tuple(sorted(set(rows.ops)))
    code = {name: i for i, name in enumerate(names)}
    ops = np.fromiter(map(code.__getitem__, rows.ops), np.uint8, n)
    ints = [
        np.array(rows.commit_lsns, np.uint64).view(np.int64),
        np.array(rows.positions, np.int64),
        np.array(rows.xids, np.int64),
        np.array(rows.commit_times, np.int64),
        np.array(rows.values_at, np.int64),
        np.array(rows.old_at, np.int64),
        np.fromiter(map(len, rows.payloads), np.int64, n),
    ]
    data = b"".join([ops.tobytes(), *(a.tobytes() for a in ints), *rows.payloads])
    if not _COMPRESS:
        return n, names, False, len(data), data
    return n, names, True, len(data), pa.Codec(_CODEC, 1).compress(data, asbytes=True)


def _unpack(n: int, names: tuple[str, ...], compressed: bool, size: int, data: bytes) -> RawRows:
    if compressed:
        data = pa.Codec(_CODEC).decompress(data, size, asbytes=True)
    ops = np.frombuffer(data, np.uint8, n)
    ints = np.frombuffer(data, np.int64, (_INT_COLUMNS + 1) * n, n).reshape(_INT_COLUMNS + 1, n)
    lengths = ints[_INT_COLUMNS]
    ends = np.cumsum(lengths) + (n + ints.nbytes)
    payloads = [data[e - k : e] for e, k in zip(ends.tolist(), lengths.tolist(), strict=True)]
    return RawRows(
        [names[i] for i in ops.tolist()],
        ints[0].view(np.uint64).tolist(),
        ints[1].tolist(),
        ints[2].tolist(),
        ints[3].tolist(),
        payloads,
        ints[4].tolist(),
        ints[5].tolist(),
    )


class TableRows:
    """The committed rows of one table not yet flushed."""

    def __init__(
        self, name: str, relation: Relation, types: Sequence[ColumnType], schema: pa.Schema
    ):
        self.name = name
        self.relation = relation
        self.types = tuple(types)
        self.schema = schema
        self.names = tuple(c.name for c in relation.columns)
        self._before_type = schema.field("_before").type
        self._reset()

    def _reset(self) -> None:
        self.pending = RawRows()

    @property
    def rows(self) -> int:
        return len(self.pending)

    def take(self) -> RawRows:
        """The rows so far, unconverted; the buffer is emptied."""
        raw = self.pending
        self._reset()
        return raw

    def flush(self) -> pa.RecordBatch:
        """The rows so far as one record batch; the buffer is emptied."""
        return self.convert(self.take())

    def convert(self, raw: RawRows) -> pa.RecordBatch:
        """``raw`` (rows of this table) as one record batch."""
        n = len(raw)
        if n:
            parsed = self._parse(raw)
            if parsed is not None:
                values, before, toast = parsed
            else:
                values, before, toast = self._decode_each(raw)
        else:
            values = before = [[] for _ in self.names]
            toast = []
        new_arrays, specials = self._convert(values)
        has_before = [
            at >= 0 and op == "update" for op, at in zip(raw.ops, raw.old_at, strict=True)
        ]
        if any(has_before):
            old_arrays, _ = self._convert(before)
            before_array = pa.StructArray.from_arrays(
                old_arrays,
                fields=list(self._before_type),
                mask=pa.array([not b for b in has_before], pa.bool_()),
            )
        else:
            before_array = pa.nulls(n, self._before_type)
        arrays = [
            pa.array(raw.ops, pa.string()),
            pa.array(raw.commit_lsns, pa.int64()),
            pa.array(raw.positions, pa.int64()),
            pa.array(raw.xids, pa.int64()),
            pa.array(raw.commit_times, pa.timestamp("us", tz="UTC")),
            names_column(n, toast),
            special_column(self.names, n, specials),
            *new_arrays,
            before_array,
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)  # type: ignore[arg-type]

    # ------------------------------------------------------------------- parsing

    def _parse(
        self, raw: RawRows
    ) -> (
        tuple[
            list[RawColumn],
            list[RawColumn],
            list[tuple[int, list[str]]],
        ]
        | None
    ):
        """Every tuple of the batch at once; None if any is malformed."""
        buffer, starts, ends = concat(raw.payloads)
        columns = len(self.names)
        rows = len(raw)
        values_at = np.fromiter(raw.values_at, np.int64, rows)
        old_at = np.fromiter(
            (
                at if op == "update" else NO_TUPLE
                for op, at in zip(raw.ops, raw.old_at, strict=True)
            ),
            np.int64,
            rows,
        )
        old = parse_tuples(buffer, np.where(old_at >= 0, starts + old_at, -1), ends, columns)
        if old is None:
            return None
        after_old = values_at == AFTER_OLD
        if np.any(after_old):
            at = np.where(after_old, old.ends, 0)
            if np.any(after_old & (at >= ends)) or np.any(buffer[at[after_old]] != _NEW):
                return None
        new_starts = np.where(
            after_old, old.ends + 1, np.where(values_at >= 0, starts + values_at, -1)
        )
        new = parse_tuples(buffer, new_starts, ends, columns)
        if new is None:
            return None
        if np.any((new_starts >= 0) & (new.ends != ends)):
            return None  # bytes after the tuple
        wanted = bool(np.any(old_at >= 0))  # an Update with its old key or row
        return (
            [cast(RawColumn, new.column(j)) for j in range(columns)],
            [cast(RawColumn, old.column(j)) if wanted else [] for j in range(columns)],
            self._toast(new),
        )

    def _toast(self, new: ParsedTuples) -> list[tuple[int, list[str]]]:
        if not new.kinds:
            return []
        unchanged = np.stack(new.kinds, axis=1) == KIND_TOAST  # rows x columns
        rows, cols = np.nonzero(unchanged)
        out: dict[int, list[str]] = {}
        for row, col in zip(rows.tolist(), cols.tolist(), strict=True):
            out.setdefault(row, []).append(self.names[col])
        return list(out.items())

    def _decode_each(
        self, raw: RawRows
    ) -> tuple[list[RawColumn], list[RawColumn], list[tuple[int, list[str]]]]:
        """The codec's path, one message at a time: raises the DecodeError."""
        columns = len(self.names)
        nulls: TupleData = (None,) * columns
        new_rows: list[TupleData] = []
        old_rows: list[TupleData] = []
        toast: list[tuple[int, list[str]]] = []
        for index, (op, payload, values_at, old_at) in enumerate(
            zip(raw.ops, raw.payloads, raw.values_at, raw.old_at, strict=True)
        ):
            name = _MESSAGE_NAMES.get(op, op)
            old: TupleData = nulls
            values: TupleData = nulls
            at = values_at
            if op == "update" and old_at >= 0:
                old, end = read_tuple(payload, old_at, name)
                self._check(old, f"{name} old tuple")
                if end >= len(payload) or payload[end] != _NEW:
                    raise DecodeError(name, end, "expected 'N' and the new tuple")
                at = end + 1
            if at >= 0:
                values, end = read_tuple(payload, at, name)
                self._check(values, name)
                if end != len(payload):
                    raise DecodeError(name, end, f"{len(payload) - end} bytes after the tuple")
            unchanged = [n for n, v in zip(self.names, values, strict=True) if v is UNCHANGED_TOAST]
            if unchanged:
                toast.append((index, unchanged))
            new_rows.append(values)
            old_rows.append(old)

        def transpose(rows: list[TupleData]) -> list[RawColumn]:
            return (
                [
                    [None if v is UNCHANGED_TOAST else v for v in column]
                    for column in zip(*rows, strict=True)
                ]
                if rows
                else [[] for _ in self.names]
            )

        return transpose(new_rows), transpose(old_rows), toast

    def _check(self, values: TupleData, kind: str) -> None:
        if len(values) != len(self.names):
            raise StreamStateError(
                f"{self.name}: {kind} has {len(values)} columns, "
                f"the Relation message {len(self.names)}"
            )

    # ---------------------------------------------------------------- converting

    def _convert(self, columns: Sequence[RawColumn]) -> tuple[list[pa.Array[Any]], list[Specials]]:
        # Imported here: convert pulls in pandas (pyarrow's time zone scalars), ~0.3 s
        # that readStream's source runner, which only buffers raw rows, never needs.
        from pgwire_mock.spark.convert import convert_column  # noqa: PLC0415

        arrays: list[pa.Array[Any]] = []
        specials: list[Specials] = []
        for column, raws in zip(self.types, columns, strict=True):
            array, special = convert_column(column, raws)
            arrays.append(array)
            specials.append(special)
        return arrays, specials


def special_column(names: Sequence[str], n: int, specials: Sequence[Specials]) -> pa.Array[Any]:
    """The ``_special`` column of ``n`` rows: per row, column name -> PostgreSQL text of
    each value its Spark type cannot hold (``specials`` per column, by row)."""
    by_row: dict[int, list[tuple[str, str]]] = {}
    for name, column in zip(names, specials, strict=False):
        for row, text in column:
            by_row.setdefault(row, []).append((name, text))
    lengths = [0] * n
    keys: list[str] = []
    items: list[str] = []
    for row in sorted(by_row):
        lengths[row] = len(by_row[row])
        for key, text in by_row[row]:
            keys.append(key)
            items.append(text)
    return pa.MapArray.from_arrays(  # type: ignore[call-overload,no-any-return]
        _offsets(lengths), pa.array(keys, pa.string()), pa.array(items, pa.string())
    )


def names_column(n: int, rows: list[tuple[int, list[str]]]) -> pa.Array[Any]:
    """A list-of-strings column of ``n`` rows: ``rows`` gives (row, names), the rest are
    empty lists (``_toast_unchanged``)."""
    lengths = [0] * n
    names: list[str] = []
    for row, values in sorted(rows):
        lengths[row] = len(values)
        names.extend(values)
    return pa.ListArray.from_arrays(  # type: ignore[call-overload,no-any-return]
        _offsets(lengths), pa.array(names, pa.string())
    )


def _offsets(lengths: list[int]) -> pa.Array[Any]:
    offsets = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.array(offsets, pa.int32())
