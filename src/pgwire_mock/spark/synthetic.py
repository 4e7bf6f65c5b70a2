"""``spark.read.format("pgoutput")`` over a generator spec: synthetic changes straight into
Spark, with no recording on disk.

>>> df = (spark.read.format("pgoutput")                        # doctest: +SKIP
...       .option("synth_spec", "examples/synth-spec.yaml")
...       .option("synth_seed", "7").option("synth_changes", "1000000")
...       .option("table", "public.accounts").option("partitions", "8").load())

The driver reads and validates the spec and plans one partition per generator shard
(:meth:`~pgwire_mock.synth.Synth.shard_blocks`); each executor generates its shard in
memory from the spec's text. The driver never generates the stream: the Relation
messages come from the generator's per-table payloads.

Executors do not decode the pgoutput they generate: the generator logs the rows a
consumer makes of each committed change (:class:`~pgwire_mock.synth.rowlog.RowLog`:
operation, commit LSN and time, position, xid, key ids and pool picks), and
:class:`SynthColumns` turns them into Arrow columns by taking from each column's pool,
converted once by the decoder's own converter. Decoding the same stream gives the same
rows (``tests/spark/test_synthetic_source.py``); it is about three times faster.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, Final, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import yaml
from pyspark.sql.datasource import InputPartition

from codec.pgoutput import Decoder, Relation, Type
from codec.pgoutput.tuples import read_tuple
from pgwire_mock import json_text
from pgwire_mock.spark.convert import RawValue, Specials, convert_column, convert_values
from pgwire_mock.spark.decode import (
    SNAPSHOT_OP,
    ChangeDecoder,
    DecodeOptions,
    cast_batches,
    qualified_name,
)
from pgwire_mock.spark.errors import SparkSideError
from pgwire_mock.spark.rows import names_column, special_column
from pgwire_mock.spark.types import PG_EPOCH_US, ColumnType
from pgwire_mock.synth import InitialRows, Shard, SpecError, Synth, SynthError, parse_spec
from pgwire_mock.synth.rowlog import (
    KEY_UPDATE,
    NO_ROW,
    TRUNCATE,
    UPDATE,
    ColumnSource,
    LoggedRows,
)
from pgwire_mock.synth.values import KeyCodec

__all__ = [
    "SYNTH_OPTIONS",
    "SynthColumns",
    "SynthPartition",
    "SynthSnapshotPartition",
    "plan_synthetic",
    "read_synthetic",
]

SYNTH_OPTIONS: Final = ("synth_spec", "synth_seed", "synth_changes")


@dataclass(frozen=True, slots=True)
class SynthPartition(InputPartition):
    """Shard ``shard`` of ``shards`` of the stream of (``spec``, ``seed``, ``changes``).

    ``spec`` is the spec's text (executors may not see the driver's files), always YAML
    (a JSON spec is shipped re-dumped as YAML). ``relations`` and ``types`` preload the
    decoder's caches, so a shard may use a table whose Relation an earlier shard sent."""

    spec: str
    seed: int
    changes: int
    shard: int
    shards: int
    relations: tuple[Relation, ...]
    types: tuple[Type, ...]


@dataclass(frozen=True, slots=True)
class SynthSnapshotPartition(InputPartition):
    """Rows ``[start, stop)`` of table ``table``'s snapshot (its index in the spec) in the
    stream of (``spec``, ``seed``, ``changes``); ``relations`` as for a shard."""

    spec: str
    seed: int
    changes: int
    table: int
    start: int
    stop: int
    relations: tuple[Relation, ...]


def plan_synthetic(
    options: Mapping[str, str], table: str, partitions: int
) -> tuple[list[SynthPartition | SynthSnapshotPartition], Relation, dict[int, tuple[str, str]]]:
    """One partition per generator shard (at most one per block, at least one), with
    ``table``'s Relation and the user types (OID -> (namespace, name)) for its schema;
    if the spec gives the table ``initial_rows``, ``partitions`` more before them for
    its snapshot rows.

    Raises :class:`SparkSideError` with one line for an unreadable or invalid spec, a
    bad ``synth_seed`` / ``synth_changes``, or a table the spec does not have."""
    if "path" in options:
        raise SparkSideError('pgoutput: give either "path" or "synth_spec", not both')
    path = options.get("synth_spec", "")
    if not path:
        raise SparkSideError('pgoutput: option "synth_spec" needs the path of a spec file')
    text = _spec_text(path)
    seed = _integer(options, "synth_seed", "0", "an integer")
    changes = _integer(options, "synth_changes", None, "a positive integer")
    if changes < 1:
        raise SparkSideError(f"pgoutput: synth_changes must be a positive integer, got {changes}")
    try:
        synth = Synth(parse_spec(text, source=path), seed, changes)
    except SpecError as err:
        raise SparkSideError(f"pgoutput: bad synth_spec: {err}") from None
    except SynthError as err:
        raise SparkSideError(f"pgoutput: synth_spec {path}: {err}") from None
    relations = tuple(_relation(t.relation) for t in synth.tables)
    table = qualified_name(table)
    found = [r for r, t in zip(relations, synth.tables, strict=True) if t.name == table]
    if not found:
        names = ", ".join(t.name for t in synth.tables)
        raise SparkSideError(f"pgoutput: table {table} is not in synth_spec {path} ({names})")
    shards = max(1, min(partitions, synth.blocks))
    # Specs use built-in types only: the stream has no Type messages, no user types.
    plans: list[SynthPartition | SynthSnapshotPartition] = []
    index = next(t.index for t in synth.tables if t.name == table)
    initial = synth.tables[index].initial
    if synth.spec.snapshot and initial:  # the table's snapshot rows first
        pieces = max(1, min(partitions, initial))
        plans += [
            SynthSnapshotPartition(
                text,
                seed,
                changes,
                index,
                k * initial // pieces,
                (k + 1) * initial // pieces,
                relations,
            )
            for k in range(pieces)
        ]
    plans += [SynthPartition(text, seed, changes, k, shards, relations, ()) for k in range(shards)]
    return plans, found[0], {}


def read_synthetic(
    partition: SynthPartition | SynthSnapshotPartition,
    options: DecodeOptions,
    arrow: pa.Schema | None = None,
) -> Iterator[pa.RecordBatch]:
    """The record batches of one shard, or of some of a table's snapshot rows,
    generated in memory (what an executor runs; no Spark needed), cast to ``arrow``
    when given."""
    synth = Synth(parse_spec(partition.spec), partition.seed, partition.changes)
    if isinstance(partition, SynthSnapshotPartition):
        yield from _read_snapshot(synth, partition, options, arrow)
        return
    # The decoder, preloaded with the Relations, gives each table's types and schema
    # exactly as decoding would.
    decoder = ChangeDecoder(options, relations=partition.relations, types=partition.types)
    columns = {
        t.index: SynthColumns(t.column_sources(), t.key, decoder, t.name)
        for t in synth.tables
        if t.name in decoder.tables
    }
    shard = Shard(partition.shard, partition.shards)
    for logged in synth.logged_rows(columns, shard, rows=options.batch_rows):
        for index, rows in logged.items():
            if len(rows):
                yield from cast_batches([columns[index].batch(rows)], arrow)


def _read_snapshot(
    synth: Synth,
    partition: SynthSnapshotPartition,
    options: DecodeOptions,
    arrow: pa.Schema | None,
) -> Iterator[pa.RecordBatch]:
    """Snapshot rows, as the rows of a recording's snapshot read with ``path`` are
    (:mod:`pgwire_mock.spark.snapshot`): ``_op`` snapshot, ``_commit_lsn`` the
    consistent point (the spec's ``start_lsn``), ``_position`` the row's index."""
    decoder = ChangeDecoder(options, relations=partition.relations)
    t = synth.tables[partition.table]
    columns = SynthColumns(t.column_sources(), t.key, decoder, t.name)
    point = synth.spec.start_lsn
    waiting: list[InitialRows] = []
    chunks = synth.initial_rows(t.index, partition.start, partition.stop)
    for rows in chain(chunks, [None]):
        if rows is not None:
            waiting.append(rows)
        if waiting and (rows is None or sum(map(len, waiting)) >= options.batch_rows):
            # Consecutive chunks, joined: about batch_rows rows per batch.
            logged = LoggedRows.snapshot(
                waiting[0].start,
                np.concatenate([w.kids for w in waiting]),
                np.concatenate([w.picks for w in waiting]),
                tuple(np.concatenate(c) for c in zip(*(w.toast for w in waiting), strict=True)),
                point,
            )
            waiting = []
            yield from cast_batches([columns.batch(logged)], arrow)


class SynthColumns:
    """Turns one synthetic table's logged rows into record batches of its decoded schema.

    Each pool (and each TOAST column's pools) is converted to Arrow once, with the
    converter decoding uses; a batch then takes from those arrays by the rows' picks.
    Key values come from the rows' key ids, converted per batch."""

    _OPS: Final = pa.array(
        ["insert", "update", "update", "delete", "truncate", SNAPSHOT_OP], pa.string()
    )

    def __init__(
        self,
        sources: tuple[ColumnSource, ...],
        key: KeyCodec,
        decoder: ChangeDecoder,
        table: str,
    ) -> None:
        schema = decoder.schema(table)
        assert schema is not None  # the decoder was preloaded with the table's Relation
        self.schema = schema
        types = decoder.column_types(table)
        self.names = tuple(types)
        self.types: tuple[ColumnType, ...] = tuple(types.values())
        self.sources = sources
        self.key = key
        self.before_type = schema.field("_before").type
        # Per column: its converted pool and the specials of its entries (entry -> text).
        self.pools: list[tuple[pa.Array[Any], dict[int, str]] | None] = []
        for source, column in zip(sources, self.types, strict=True):
            if source.kind == "key":
                self.pools.append(None)
                continue
            array, specials = convert_values(column, [_raw(e) for _, e in source.entries])
            self.pools.append((array, dict(specials)))
        self.toast_names = [
            n for n, s in zip(self.names, sources, strict=True) if s.kind == "toast"
        ]

    def batch(self, rows: LoggedRows) -> pa.RecordBatch:
        n = len(rows)
        op = rows.column("op")
        key = rows.column("key")
        picks = rows.picks
        picks_at = rows.column("picks_at")
        has_row = picks_at >= 0
        at = np.where(has_row, picks_at, 0)
        toast = _toast_matrix(rows.toast, len(self.toast_names))
        specials: list[Specials] = []
        columns: list[pa.Array[Any]] = []
        pool_at = toast_at = 0
        for source, column, pool in zip(self.sources, self.types, self.pools, strict=True):
            if pool is None:  # the key: a truncate's row has none
                array, special = self._keys(column, key, op != TRUNCATE)
                columns.append(array)
                specials.append(special)
                continue
            if source.kind == "pool":
                entries = picks[at, pool_at] if len(picks) else np.zeros(n, np.int64)
                present = has_row
                pool_at += 1
            else:
                entries = toast[:, toast_at]
                present = entries >= 0
                toast_at += 1
            values, entry_specials = pool
            index = pa.array(np.where(present, entries, 0), pa.int64(), mask=~present)
            columns.append(values.take(index))
            specials.append(_row_specials(entries, present, entry_specials))
        unchanged = [
            (row, [self.toast_names[c] for c in cols]) for row, cols in _unchanged(toast, op)
        ]
        arrays = [
            self._OPS.take(pa.array(op, pa.int64())),
            pa.array(rows.column("commit_lsn"), pa.int64()),
            pa.array(rows.column("position"), pa.int64()),
            pa.array(rows.column("xid"), pa.int64()),
            pa.array(rows.column("commit_time") + PG_EPOCH_US, pa.timestamp("us", tz="UTC")),
            names_column(n, unchanged),
            special_column(self.names, n, specials),
            *columns,
            self._before(rows.column("old"), op),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)  # type: ignore[arg-type]

    def _keys(
        self, column: ColumnType, ids: npt.NDArray[np.int64], present: npt.NDArray[np.bool_]
    ) -> tuple[pa.Array[Any], Specials]:
        """The key column of rows with key ``ids`` (NULL where not ``present``)."""
        if self.key.type_name in ("int4", "int8") and pa.types.is_integer(column.arrow):
            ints: pa.Array[Any] = pa.array(ids, column.arrow, mask=~present)
            return ints, []
        text = self.key.text
        return convert_column(
            column,
            [text(k) if p else None for k, p in zip(ids.tolist(), present.tolist(), strict=True)],
        )

    def _before(self, old: npt.NDArray[np.int64], op: npt.NDArray[np.int64]) -> pa.Array[Any]:
        """A key update's old key (every other column NULL); NULL for other rows."""
        key_change = op == KEY_UPDATE
        n = len(op)
        if not key_change.any():
            nulls: pa.Array[Any] = pa.nulls(n, self.before_type)
            return nulls
        arrays = []
        for source, column in zip(self.sources, self.types, strict=True):
            if source.kind == "key":
                arrays.append(self._keys(column, old, key_change)[0])
            else:
                arrays.append(pa.nulls(n, column.arrow))  # type: ignore[call-overload]
        return pa.StructArray.from_arrays(
            arrays, fields=list(self.before_type), mask=pa.array(~key_change)
        )


def _raw(entry: bytes) -> RawValue:
    """A pool entry (one TupleData column) as the decoder reads it: text, bytes or None."""
    values, _ = read_tuple(b"\x00\x01" + entry, 0, "Insert")
    return cast(RawValue, values[0])


def _toast_matrix(toast: Sequence[tuple[int, ...]], columns: int) -> npt.NDArray[np.int64]:
    """Rows x TOAST columns of entry indexes; NO_ROW where none was sent (a delete's or
    truncate's row has no TOAST entries at all)."""
    if not columns:
        return np.zeros((len(toast), 0), np.int64)
    absent = (NO_ROW,) * columns
    return np.array([t or absent for t in toast], np.int64).reshape(len(toast), columns)


def _unchanged(
    toast: npt.NDArray[np.int64], op: npt.NDArray[np.int64]
) -> list[tuple[int, list[int]]]:
    """(row, TOAST column indexes) of updates that left a TOAST value unchanged."""
    mask = (toast == NO_ROW) & (op == UPDATE)[:, None]
    rows, cols = np.nonzero(mask)
    out: dict[int, list[int]] = {}
    for row, col in zip(rows.tolist(), cols.tolist(), strict=True):
        out.setdefault(row, []).append(col)
    return list(out.items())


def _row_specials(
    entries: npt.NDArray[np.int64], present: npt.NDArray[np.bool_], texts: dict[int, str]
) -> Specials:
    """(row, text) for the rows whose pool entry its Spark type cannot hold."""
    if not texts:
        return []
    return [
        (row, texts[e])
        for row, (e, p) in enumerate(zip(entries.tolist(), present.tolist(), strict=True))
        if p and e in texts
    ]


def _spec_text(path: str) -> str:
    """The spec's text as YAML. A ``.json`` spec (parsed as strict JSON by ``load_spec``)
    is checked as JSON here and shipped as YAML, so executors parse it the same way."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise SparkSideError(f"pgoutput: cannot read synth_spec {path}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise SparkSideError(f"pgoutput: synth_spec {path} is not UTF-8: {err.reason}") from None
    if not path.lower().endswith(".json"):
        return text
    try:
        parse_spec(text, source=path, json_only=True)
    except SpecError as err:
        raise SparkSideError(f"pgoutput: bad synth_spec: {err}") from None
    return yaml.safe_dump(json_text.loads(text), sort_keys=False)


def _integer(options: Mapping[str, str], name: str, default: str | None, what: str) -> int:
    value = options.get(name, default)
    if value is None:
        raise SparkSideError(f'pgoutput: option "{name}" is required with "synth_spec" ({what})')
    try:
        return int(value)
    except ValueError:
        raise SparkSideError(f"pgoutput: {name} must be {what}, got {value!r}") from None


def _relation(payload: bytes) -> Relation:
    message = Decoder().decode(payload)
    assert isinstance(message, Relation)  # the generator's own Relation payload
    return message
