"""The snapshot of a ``record --snapshot`` recording as rows with ``_op = "snapshot"``.

Such a recording (:mod:`pgwire_mock.streamfile` has the format) holds, after its meta
line, one ``{"table": ..., "copy": ...}`` line per row of the published tables as the
slot's exported snapshot saw them, then the stream from the slot's consistent point.
Read with ``format("pgoutput")``, a table's snapshot rows come before its changes:

* the driver scans the snapshot lines without parsing them (:func:`scan_snapshot`): it
  reads the tables' definitions from the meta line and, for each table, the byte ranges
  of its lines, the table's row count before each range and the file's line number at
  its start. In the layout ``record`` and ``synth`` write (``{"table": "<name>",
  "copy": "``), a run of one table's lines is found with one regular expression search;
  a line in any other JSON layout is parsed by the one snapshot parser (below) to learn
  its table;
* each executor seeks to its ranges and parses every line with the one snapshot parser,
  :func:`pgwire_mock.streamfile.read_snapshot_line` (JSON, then COPY's text format by
  :func:`codec.copy.decode_text_row`), then converts each column at once with the
  decoder's converter (:mod:`pgwire_mock.spark.convert`), as values of the same type
  sent as text in a stream are converted.

A snapshot row has the columns of a change row: ``_op`` ``snapshot``, ``_commit_lsn``
the consistent point (the stream's changes all commit at or after it), ``_position`` the
row's index among the table's snapshot rows (file order, from 0), ``_xid`` 0 (no
transaction), ``_commit_time`` 2000-01-01 00:00:00 UTC (PostgreSQL's epoch: the
recording has no time for the snapshot), ``_toast_unchanged`` empty, ``_special`` as for
changes, the table's columns, and ``_before`` NULL.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from codec import DecodeError
from codec.pgoutput import Relation, RelationColumn, Type
from codec.values import LSN
from pgwire_mock import json_text
from pgwire_mock.spark.convert import RawValue, Specials, convert_column
from pgwire_mock.spark.decode import (
    SNAPSHOT_OP,
    ChangeDecoder,
    DecodeOptions,
    SchemaChangeError,
    cast_batches,
)
from pgwire_mock.spark.rows import names_column, special_column
from pgwire_mock.spark.types import PG_EPOCH_US, ColumnType
from pgwire_mock.streamfile import StreamFileError, read_meta, read_snapshot_line

__all__ = [
    "SNAPSHOT_OP",
    "RecordedSnapshot",
    "SnapshotPartition",
    "SnapshotPiece",
    "check_same_table",
    "meta_relation",
    "plan_snapshot",
    "read_snapshot_partition",
    "scan_snapshot",
    "snapshot_batch",
]

# A snapshot line as json.dumps writes {"table": ..., "copy": ...} (record, synth).
_TABLE_LINE: Final = re.compile(rb'\{"table": ("(?:[^"\\\n]|\\.)*"), "copy": "')
_CHUNK: Final = 1 << 24


@dataclass(frozen=True, slots=True)
class SnapshotPiece:
    """Whole lines ``[start, stop)`` of one table's snapshot rows: the table's rows
    before them and the file's line number of the first."""

    start: int
    stop: int
    row: int
    line: int


@dataclass(slots=True)
class RecordedSnapshot:
    """What the driver knows of a recording's snapshot: the consistent point, each
    table's definition (as the Relation message pgoutput would send for it), where each
    table's lines are and how many there are, and where the stream begins."""

    consistent_point: int
    relations: dict[str, Relation]
    end: int
    pieces: dict[str, list[SnapshotPiece]] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SnapshotPartition(InputPartition):
    """Some of one table's snapshot rows in one file, with the Relation (and the user
    types) their columns are converted by."""

    path: str
    consistent_point: int
    pieces: tuple[SnapshotPiece, ...]
    relation: Relation
    types: tuple[Type, ...]


def meta_relation(table: Mapping[str, Any]) -> Relation:
    """The Relation message pgoutput sends for a table of ``meta.snapshot.tables``: every
    column flagged as key under REPLICA IDENTITY FULL (proto.c, logicalrep_write_attrs),
    the replica identity index's columns otherwise."""
    identity = str(table["relreplident"])
    columns = tuple(
        RelationColumn(
            1 if (bool(c["key"]) or identity == "f") else 0,
            str(c["name"]),
            int(c["type_oid"]),
            int(c["typmod"]),
        )
        for c in table["columns"]
    )
    return Relation(int(table["oid"]), str(table["schema"]), str(table["name"]), identity, columns)


def table_name(relation: Relation) -> str:
    return f"{relation.namespace or 'pg_catalog'}.{relation.relation_name}"


def check_same_table(stream: Relation, snapshot: Relation, path: str) -> None:
    """The snapshot's definition of a table must be the one its changes are sent with."""
    if (stream.replica_identity, stream.columns) != (snapshot.replica_identity, snapshot.columns):
        name = table_name(stream)
        raise SchemaChangeError(
            f"{path}: table {name} has other columns or another replica identity in the "
            f"snapshot ({_describe(snapshot)}) than in the stream ({_describe(stream)}); "
            "one schema per read"
        )


def _describe(relation: Relation) -> str:
    columns = ", ".join(
        f"{c.name} oid {c.type_oid}{' key' if c.is_key else ''}" for c in relation.columns
    )
    return f"replica identity {relation.replica_identity}: {columns}"


# ----------------------------------------------------------------------------- the driver


def scan_snapshot(path: str) -> RecordedSnapshot | None:
    """The snapshot of a JSON Lines recording whose meta line has one; None for any
    other file (it reads as a stream alone)."""
    size = Path(path).stat().st_size
    with open(path, "rb") as f:
        meta = read_meta(f)
        if meta is None or "snapshot" not in meta:
            return None
        start = f.tell()
        snapshot = _from_meta(meta["snapshot"], path, start)
        _Walker(snapshot, path, max(size >> 12, 1)).walk(f, start)
    return snapshot


def _from_meta(meta: object, path: str, start: int) -> RecordedSnapshot:
    try:
        if not isinstance(meta, Mapping):
            raise TypeError("not an object")
        point = int(LSN.parse(str(meta["consistent_point"])))
        relations = [meta_relation(t) for t in meta["tables"]]
    except (KeyError, TypeError, ValueError, DecodeError) as err:
        raise StreamFileError(f"{path}: meta.snapshot: {err!r}") from None
    return RecordedSnapshot(point, {table_name(r): r for r in relations}, start)


@dataclass(slots=True)
class _Run:
    """The table whose lines come next in this project's layout: their common start,
    and a pattern that finds the first line after them."""

    table: str
    prefix: bytes
    after: re.Pattern[bytes]


class _Walker:
    """Finds where each table's snapshot lines are, in pieces of about ``gap`` bytes."""

    def __init__(self, snapshot: RecordedSnapshot, path: str, gap: int) -> None:
        self.snapshot = snapshot
        self.path = path
        self.gap = gap
        self.line = 2  # the meta line is the first

    def walk(self, source: IO[bytes], start: int) -> None:
        base = start  # file offset of data[0]
        data = b""
        run: _Run | None = None
        while True:
            chunk = source.read(_CHUNK)
            data += chunk
            cut = data.rfind(b"\n") + 1 if chunk else len(data)
            i = 0
            while i < cut:
                if run is not None and data.startswith(run.prefix, i):
                    found = run.after.search(data, i, cut)
                    end = found.end() if found is not None else cut
                    self._lines(run.table, data, i, end, base)
                    i = end
                    continue
                newline = data.find(b"\n", i, cut)
                j = cut if newline < 0 else newline + 1
                if not data[i:j].strip():  # a blank line
                    self.line += 1
                    i = j
                    continue
                match = _TABLE_LINE.match(data, i, j)
                table = _json_string(match.group(1)) if match is not None else None
                if match is not None and table is not None:
                    prefix = data[i : match.end()]
                    run = _Run(table, prefix, re.compile(b"\n(?!" + re.escape(prefix) + b")"))
                    continue
                record = self._record(data[i:j])
                if isinstance(record, dict) and "meta" in record:
                    self.line += 1
                elif isinstance(record, dict) and "table" in record:
                    # Another layout: the one parser says which table (or what is wrong).
                    row = read_snapshot_line(data[i:j], self.path, self.line)
                    assert row is not None
                    self._lines(row.table, data, i, j, base)
                else:  # the first message of the stream
                    self.snapshot.end = base + i
                    return
                i = j
            base += cut
            data = data[cut:]
            if not chunk:
                self.snapshot.end = base
                return

    def _record(self, line: bytes) -> object:
        try:
            return json_text.loads(line)
        except ValueError as err:
            raise StreamFileError(f"{self.path}, line {self.line}: not JSON: {err}") from None

    def _lines(self, table: str, data: bytes, i: int, end: int, base: int) -> None:
        """The lines ``data[i:end]``, all of ``table``, cut into pieces of about gap bytes."""
        snapshot = self.snapshot
        if table not in snapshot.relations:  # as serve refuses it (script/snapshot.py)
            raise StreamFileError(f"{self.path}, line {self.line}: no table {table} in meta")
        pieces = snapshot.pieces.setdefault(table, [])
        while i < end:
            stop = end
            if end - i > self.gap:
                newline = data.find(b"\n", i + self.gap, end)
                if newline >= 0:
                    stop = newline + 1
            count = data.count(b"\n", i, stop) + (data[stop - 1] != 10)
            row = snapshot.rows.get(table, 0)
            pieces.append(SnapshotPiece(base + i, base + stop, row, self.line))
            snapshot.rows[table] = row + count
            self.line += count
            i = stop


def _json_string(literal: bytes) -> str | None:
    try:
        value = json_text.loads(literal)
    except ValueError:
        return None  # the line is looked at as a whole, which names the fault
    return value if isinstance(value, str) else None


def plan_snapshot(
    path: str,
    snapshot: RecordedSnapshot,
    table: str,
    relation: Relation,
    user_types: Mapping[int, tuple[str, str]],
    partitions: int,
) -> list[SnapshotPartition]:
    """``table``'s snapshot rows in at most ``partitions`` partitions, about even in
    bytes; none if the snapshot has no rows of it."""
    pieces = snapshot.pieces.get(table, [])
    if not pieces:
        return []
    types = tuple(Type(oid, namespace, name) for oid, (namespace, name) in user_types.items())
    total = sum(p.stop - p.start for p in pieces)
    groups: list[list[SnapshotPiece]] = [[]]
    done = 0
    count = max(partitions, 1)
    for piece in pieces:
        if groups[-1] and done >= total * len(groups) // count:
            groups.append([])
        group = groups[-1]
        if group and group[-1].stop == piece.start:  # adjacent lines: one range
            first = group[-1]
            group[-1] = SnapshotPiece(first.start, piece.stop, first.row, first.line)
        else:
            group.append(piece)
        done += piece.stop - piece.start
    return [
        SnapshotPartition(path, snapshot.consistent_point, tuple(g), relation, types)
        for g in groups
    ]


# -------------------------------------------------------------------------- the executors


def read_snapshot_partition(
    partition: SnapshotPartition, options: DecodeOptions, arrow: pa.Schema | None = None
) -> Iterator[pa.RecordBatch]:
    """The record batches of one snapshot partition (what an executor runs; no Spark
    needed): each line parsed by :func:`pgwire_mock.streamfile.read_snapshot_line`."""
    relation = partition.relation
    table = table_name(relation)
    # The decoder's own types and schema for the table, as for its change rows.
    decoder = ChangeDecoder(options, relations=(relation,), types=partition.types)
    schema = decoder.schema(table)
    assert schema is not None  # the decoder was preloaded with the table's Relation
    columns = decoder.column_types(table)
    names, types = tuple(columns), tuple(columns.values())
    point = partition.consistent_point
    width = len(types)
    path = partition.path
    rows: list[tuple[bytes | None, ...]] = []
    positions: list[int] = []
    with open(path, "rb") as f:
        for piece in partition.pieces:
            f.seek(piece.start)
            offset, number, position = piece.start, piece.line, piece.row
            for line in f:
                if offset >= piece.stop:
                    break
                offset += len(line)
                row = read_snapshot_line(line, path, number)
                if row is not None:
                    if row.table != table:
                        raise StreamFileError(
                            f"{path}, line {number}: a row of {row.table} where the scan "
                            f"found {table}'s (has the file changed?)"
                        )
                    if len(row.values) != width:
                        raise StreamFileError(
                            f"{path}, line {number}: {table} has {width} columns, "
                            f"the snapshot row {len(row.values)}"
                        )
                    rows.append(row.values)
                    positions.append(position)
                    position += 1
                    if len(rows) >= options.batch_rows:
                        batch = snapshot_batch(schema, names, types, rows, positions, point)
                        yield from cast_batches([batch], arrow)
                        rows, positions = [], []
                number += 1
    if rows:
        batch = snapshot_batch(schema, names, types, rows, positions, point)
        yield from cast_batches([batch], arrow)


def snapshot_batch(
    schema: pa.Schema,
    names: Sequence[str],
    types: Sequence[ColumnType],
    rows: Sequence[Sequence[bytes | None]],
    positions: Sequence[int],
    consistent_point: int,
) -> pa.RecordBatch:
    """Snapshot rows (COPY text values, None for NULL) as one record batch of the
    table's change schema (``names`` and ``types``: its columns)."""
    n = len(rows)
    arrays: list[pa.Array[Any]] = []
    specials: list[Specials] = []
    for j, column in enumerate(types):
        # The text as a stream's text tuple data would hold it (columnar.py decodes
        # the same way): COPY and pgoutput both send the type's output function's text.
        raws: list[RawValue] = [
            None if row[j] is None else row[j].decode("utf-8", "surrogateescape")  # type: ignore[union-attr]
            for row in rows
        ]
        array, special = convert_column(column, raws)
        arrays.append(array)
        specials.append(special)
    metadata: list[pa.Array[Any]] = [
        pa.array([SNAPSHOT_OP] * n, pa.string()),
        pa.array([consistent_point] * n, pa.int64()),
        pa.array(positions, pa.int64()),
        pa.array([0] * n, pa.int64()),
        pa.array([PG_EPOCH_US] * n, pa.timestamp("us", tz="UTC")),
        names_column(n, []),
        special_column(names, n, specials),
    ]
    before = pa.nulls(n, schema.field("_before").type)
    return pa.RecordBatch.from_arrays([*metadata, *arrays, before], schema=schema)
