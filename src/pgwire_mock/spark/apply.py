"""Materializing a table's current state from its change rows: Parquet and Delta Lake.

:func:`apply_changes` takes one batch of change rows (a Spark DataFrame from
``format("pgoutput")`` or an Arrow table from :mod:`pgwire_mock.spark.decode`), in any
row order, and brings the target up to date, as a subscriber's apply worker would:

* snapshot rows (``_op`` ``snapshot``: a table's rows at a recording's consistent point,
  :mod:`pgwire_mock.spark.snapshot`) are the initial state: they are applied first, as
  inserts, then the changes, so snapshot + changes give the table's final state;
* rows are applied in ``(_commit_lsn, _position)`` order;
* the row identity is the replica identity (the columns flagged as key in the Relation
  message; every column under REPLICA IDENTITY FULL); an update whose ``_before`` is set
  finds its row by the old key, so a key change deletes the old key and upserts the new;
* a truncate empties the table at its place in the order (earlier changes of the batch
  are gone with it, later ones are applied after it);
* a column named in ``_toast_unchanged`` keeps the value (and ``_special`` entry) of the
  existing row; if there is no existing row the batch fails rather than write NULL;
* a batch whose ``batch_id`` is not greater than the last one applied is skipped, so a
  ``foreachBatch`` retried by Spark after a failure applies once.

The materialized table has the source table's columns, ``_special`` (the row's
unrepresentable values, see :mod:`pgwire_mock.spark.types`) and ``_commit_lsn`` (the
commit LSN of the row's last change).

The batch and the current table state are brought to the driver (this is a toolkit for
tests and small pipelines, not a bulk loader): Parquet targets are rewritten whole, one
file per version; Delta targets get one ``MERGE`` per batch (one ``overwrite`` when the
batch truncates), committed with a Delta app transaction ``(app_id, batch_id)`` as
Spark's own Delta sink does, so the idempotence check and the write are one commit.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import TableNotFoundError

from pgwire_mock.spark.decode import KEY_METADATA, METADATA_FIELDS, SNAPSHOT_OP, SparkSideError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "ApplyError",
    "ApplyResult",
    "DeltaTarget",
    "ParquetTarget",
    "apply_changes",
    "foreach_batch",
    "read_parquet_target",
    "state_schema",
]

_META_NAMES: Final = frozenset(f.name for f in METADATA_FIELDS) | {"_before"}
_STATE_FILE: Final = "_pgwire_mock_state.json"
_SPECIAL: Final = pa.field("_special", pa.map_(pa.string(), pa.string()))
_LSN: Final = pa.field("_commit_lsn", pa.int64())
_STATE_EXTRA: Final = frozenset({"_special", "_commit_lsn"})  # state columns not the table's


class ApplyError(SparkSideError):
    """A batch that cannot be applied faithfully (a TOAST value with no row to take it
    from, an update or delete on a table without a replica identity...)."""


@dataclass(frozen=True, slots=True)
class ParquetTarget:
    """A directory holding one Parquet file (the current version) and a state file;
    ``spark.read.parquet(path)`` reads it (files starting with ``_`` are ignored)."""

    path: str


@dataclass(frozen=True, slots=True)
class DeltaTarget:
    """A Delta Lake table written with delta-rs; ``app_id`` names the writer in the
    table's app transactions (default: the path)."""

    path: str
    app_id: str | None = None


@dataclass(frozen=True, slots=True)
class ApplyResult:
    applied: bool
    rows: int  # rows in the table after the batch
    changes: int


def state_schema(changes: pa.Schema) -> pa.Schema:
    """The materialized table's schema for a change schema."""
    columns = [f for f in changes if f.name not in _META_NAMES]
    return pa.schema([*columns, _SPECIAL, _LSN])


def _key_columns(schema: pa.Schema, key: Sequence[str] | None) -> list[str]:
    if key is not None:
        return list(key)
    return [
        f.name
        for f in schema
        if f.name not in _META_NAMES and (f.metadata or {}).get(KEY_METADATA) == b"true"
    ]


def _spark_keys(df: DataFrame) -> list[str]:
    return [f.name for f in df.schema.fields if f.metadata.get("pgoutput.key") is True]


def _hashable(value: object) -> object:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


Row = dict[str, Any]


@dataclass(slots=True)
class _Outcome:
    """The table after a batch, and what a MERGE needs: which of its rows the batch
    touched, and the keys it deleted."""

    table: pa.Table
    truncated: bool
    touched_rows: list[int]
    deleted_keys: list[tuple[object, ...]]
    whole_row: bool = False  # the key is the whole row: identical rows may repeat


def _key_values(table: pa.Table, keys: list[str]) -> list[tuple[object, ...]]:
    columns = []
    for k in keys:
        values = table.column(k).to_pylist()
        if pa.types.is_nested(table.schema.field(k).type):
            values = [_hashable(v) for v in values]
        columns.append(values)
    return list(zip(*columns, strict=True))


def _materialize(
    current: pa.Table, changes: pa.Table, schema: pa.Schema, keys: list[str]
) -> _Outcome:
    """Apply ``changes`` (sorted) to ``current``.

    The state maps each key to a row *reference* (into ``current`` followed by
    ``changes``); only keys, operations and unchanged-TOAST columns are read in Python,
    and the result is gathered with one ``take`` per column."""
    ops = changes.column("_op").to_pylist()
    start = 0
    truncated = "truncate" in ops
    if truncated:  # a barrier: nothing before the last truncate survives it
        start = len(ops) - ops[::-1].index("truncate")
        current = current.slice(0, 0)
    names = schema.names
    projected = pa.Table.from_arrays([changes.column(n) for n in names], schema=schema)
    base = pa.concat_tables([current.select(names).cast(schema), projected])
    offset = current.num_rows
    counter = iter(range(1 << 62))

    def unique() -> tuple[object, ...]:
        return ("row", next(counter))

    if keys:
        new_keys = _key_values(changes, keys)
        current_keys = _key_values(current, keys)
        before = changes.column("_before")
        has_before = before.is_valid().to_pylist()
        before_keys = _key_values(
            pa.Table.from_arrays([pc.struct_field(before, k) for k in keys], names=keys),
            keys,
        )
    else:
        current_keys = [unique() for _ in range(offset)]
    toast = changes.column("_toast_unchanged")
    lengths = pc.list_value_length(toast)
    toasted = pc.fill_null(pc.greater(lengths, 0), False).to_pylist()  # type: ignore[call-overload]
    # Under REPLICA IDENTITY FULL the key is the whole row, and a table without a primary
    # key may hold identical rows: each is kept, and a delete or update takes one of them,
    # as the apply worker's search for the old tuple does. Otherwise a key is one row.
    whole_row = bool(keys) and set(keys) >= {n for n in names if n not in _STATE_EXTRA}
    state: dict[object, int] = {}  # key -> row ref
    extra: dict[object, list[int]] = {}  # whole_row: key -> refs of more identical rows

    def add(k: object, r: int) -> None:
        if whole_row and k in state:
            extra.setdefault(k, []).append(r)
        else:
            state[k] = r

    def drop(k: object) -> None:  # one row of key k
        more = extra.get(k)
        if more:
            more.pop()
            if not more:
                del extra[k]
        else:
            state.pop(k, None)

    for k, r in zip(current_keys, range(offset), strict=True):
        add(k, r)
    inherited: dict[int, dict[str, int]] = {}  # row ref -> column -> row ref it comes from
    touched: set[object] = set()
    for i in range(start, len(ops)):
        op = ops[i]
        ref = offset + i
        if op in ("insert", SNAPSHOT_OP):
            k = new_keys[i] if keys else unique()
            if whole_row:
                add(k, ref)
            else:
                state[k] = ref
            touched.add(k)
            continue
        if not keys:
            raise ApplyError(f"{op} on a table without replica identity key columns")
        old = before_keys[i] if op == "update" and has_before[i] else new_keys[i]
        if op == "delete":
            drop(old)
            touched.add(old)
            continue
        if toasted[i]:
            existing = state.get(old)
            lsn = changes.column("_commit_lsn")[i].as_py()
            for column in toast[i].as_py():
                if existing is None:
                    raise ApplyError(
                        f"update at LSN {lsn:X} leaves column {column} unchanged (TOAST) "
                        f"but the target has no row with key {old}"
                    )
                source = inherited.get(existing, {}).get(column, existing)
                inherited.setdefault(ref, {})[column] = source
        k = new_keys[i]
        over = inherited.get(ref)
        if over and not over.keys().isdisjoint(keys):  # REPLICA IDENTITY FULL and TOAST
            k = tuple(
                _hashable(base.column(c)[over[c]].as_py()) if c in over else v
                for c, v in zip(keys, k, strict=True)
            )
        if whole_row:  # the update takes one of the identical old rows
            drop(old)
            touched.add(old)
            add(k, ref)
        else:
            if old != k:
                state.pop(old, None)
                touched.add(old)
            state[k] = ref
        touched.add(k)
    refs = list(state.values())
    touched_rows = [i for i, k in enumerate(state) if k in touched]
    for same_key, more in extra.items():
        if same_key in touched:
            touched_rows.extend(range(len(refs), len(refs) + len(more)))
        refs.extend(more)
    table = base.take(pa.array(refs, pa.int64()))
    if inherited:
        table = _inherit(table, base, refs, inherited)
    table = _sort_specials(table)
    deleted = [k for k in touched if k not in state]
    return _Outcome(table, truncated, touched_rows, deleted, whole_row)  # type: ignore[arg-type]


def _inherit(
    table: pa.Table, base: pa.Table, refs: list[int], inherited: dict[int, dict[str, int]]
) -> pa.Table:
    """Unchanged-TOAST columns take the value, and the ``_special`` entry, of the row
    they were inherited from."""
    columns = {c for over in inherited.values() for c in over}
    for column in sorted(columns):
        index = [inherited.get(r, {}).get(column, r) for r in refs]
        at = table.schema.get_field_index(column)
        table = table.set_column(at, column, base.column(column).take(pa.array(index, pa.int64())))
    specials = table.column("_special").to_pylist()
    base_specials = base.column("_special")
    for row, ref in enumerate(refs):
        over = inherited.get(ref)
        if not over:
            continue
        merged = dict(specials[row] or [])
        for column, source in over.items():
            merged.pop(column, None)
            inherited_special = dict(base_specials[source].as_py() or [])
            if column in inherited_special:
                merged[column] = inherited_special[column]
        specials[row] = list(merged.items())
    at = table.schema.get_field_index("_special")
    return table.set_column(at, _SPECIAL, pa.array(specials, _SPECIAL.type))


def _sort_specials(table: pa.Table) -> pa.Table:
    """``_special`` entries in column-name order (rows with several of them are rare)."""
    special = table.column("_special")
    if all(max(np.diff(c.offsets), default=0) <= 1 for c in special.chunks):  # type: ignore[attr-defined]
        return table
    values = special.to_pylist()
    values = [sorted(v) if v and len(v) > 1 else v for v in values]
    at = table.schema.get_field_index("_special")
    return table.set_column(at, _SPECIAL, pa.array(values, _SPECIAL.type))


def _to_arrow(changes: DataFrame | pa.Table) -> tuple[pa.Table, list[str] | None]:
    if isinstance(changes, pa.Table):
        return changes, None
    return changes.toArrow(), _spark_keys(changes)


def apply_changes(
    changes: DataFrame | pa.Table,
    target: ParquetTarget | DeltaTarget,
    batch_id: int,
    *,
    key: Sequence[str] | None = None,
) -> ApplyResult:
    """Apply one batch of change rows of one table to ``target``; see the module doc.

    ``key`` overrides the key columns read from the change schema's metadata.
    """
    table, spark_keys = _to_arrow(changes)
    keys = list(key) if key is not None else (spark_keys or _key_columns(table.schema, None))
    schema = state_schema(table.schema)
    # Snapshot rows are the initial state: before every change, whatever their LSN.
    change = pc.cast(pc.not_equal(table.column("_op"), pa.scalar(SNAPSHOT_OP)), pa.int8())
    order = pc.sort_indices(
        pa.table([change, table.column("_commit_lsn"), table.column("_position")], ["c", "l", "p"]),
        sort_keys=[("c", "ascending"), ("l", "ascending"), ("p", "ascending")],
    )
    table = table.take(order)
    if isinstance(target, ParquetTarget):
        return _apply_parquet(target, batch_id, table, schema, keys)
    return _apply_delta(target, batch_id, table, schema, keys)


def foreach_batch(
    target_for: Callable[[], ParquetTarget | DeltaTarget], *, key: Sequence[str] | None = None
) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function: ``stream.writeStream.foreachBatch(foreach_batch(...))``."""

    def run(df: DataFrame, batch_id: int) -> None:
        apply_changes(df, target_for(), batch_id, key=key)

    return run


# ------------------------------------------------------------------------------ Parquet


def _read_state(path: Path) -> dict[str, Any]:
    try:
        state: dict[str, Any] = json.loads((path / _STATE_FILE).read_text())
    except FileNotFoundError:
        return {"batch_id": -1, "file": None}
    return state


def _apply_parquet(
    target: ParquetTarget,
    batch_id: int,
    changes: pa.Table,
    schema: pa.Schema,
    keys: list[str],
) -> ApplyResult:
    root = Path(target.path)
    root.mkdir(parents=True, exist_ok=True)
    state = _read_state(root)
    current = schema.empty_table()
    if state["file"]:
        current = pq.read_table(root / state["file"])
    if batch_id <= state["batch_id"]:
        return ApplyResult(False, current.num_rows, 0)
    new = _materialize(current, changes, schema, keys).table
    name = f"part-{batch_id:010d}-{uuid.uuid4().hex[:8]}.parquet"
    pq.write_table(new, root / name)
    # The state file names the current version: replacing it is the commit.
    tmp = root / f".{_STATE_FILE}.{uuid.uuid4().hex}"
    tmp.write_text(json.dumps({"batch_id": batch_id, "file": name}))
    os.replace(tmp, root / _STATE_FILE)
    if state["file"]:
        (root / state["file"]).unlink(missing_ok=True)
    return ApplyResult(True, new.num_rows, changes.num_rows)


def read_parquet_target(target: ParquetTarget) -> pa.Table:
    """The current version of a Parquet target (without Spark)."""
    root = Path(target.path)
    state = _read_state(root)
    if not state["file"]:
        raise FileNotFoundError(f"no table at {root}")
    return pq.read_table(root / state["file"])


# -------------------------------------------------------------------------------- Delta


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _apply_delta(
    target: DeltaTarget,
    batch_id: int,
    changes: pa.Table,
    schema: pa.Schema,
    keys: list[str],
) -> ApplyResult:
    app_id = target.app_id or f"pgwire_mock:{target.path}"
    try:
        dt: DeltaTable | None = DeltaTable(target.path)
    except TableNotFoundError:
        dt = None
    current = schema.empty_table()
    if dt is not None:
        done = dt.transaction_version(app_id)
        if done is not None and batch_id <= done:
            return ApplyResult(False, dt.to_pyarrow_table().num_rows, 0)
        current = dt.to_pyarrow_table()
    outcome = _materialize(current, changes, schema, keys)
    new = outcome.table
    commit = CommitProperties(
        app_transactions=[Transaction(app_id, batch_id)],
        custom_metadata={"pgwire_mock.batch_id": str(batch_id)},
    )
    if dt is None or outcome.truncated or not keys or outcome.whole_row:
        write_deltalake(target.path, new, mode="overwrite", commit_properties=commit)
        return ApplyResult(True, new.num_rows, changes.num_rows)
    if not outcome.touched_rows and not outcome.deleted_keys:
        write_deltalake(target.path, schema.empty_table(), mode="append", commit_properties=commit)
        return ApplyResult(True, new.num_rows, changes.num_rows)
    # One MERGE: touched keys still present are upserted, the others deleted.
    columns = [c for c in schema.names if c not in ("_special", "_commit_lsn")]
    upserts = new.take(pa.array(outcome.touched_rows, pa.int64()))
    deletes = pa.Table.from_pylist(
        [
            {c: None for c in columns}
            | dict(zip(keys, (_unhash(v) for v in k), strict=True))
            | {"_special": [], "_commit_lsn": 0}
            for k in outcome.deleted_keys
        ],
        schema=schema,
    )
    with_flag = schema.append(pa.field("_delete", pa.bool_()))
    source = pa.concat_tables(
        [
            upserts.append_column("_delete", pa.array([False] * upserts.num_rows)).cast(with_flag),
            deletes.append_column("_delete", pa.array([True] * deletes.num_rows)).cast(with_flag),
        ]
    )
    predicate = " AND ".join(f"(t.{_quote(k)} IS NOT DISTINCT FROM s.{_quote(k)})" for k in keys)
    every = {c: f"s.{_quote(c)}" for c in schema.names}
    (
        dt.merge(source, predicate, source_alias="s", target_alias="t", commit_properties=commit)
        .when_matched_delete(predicate="s._delete = true")
        .when_matched_update(updates=every, predicate="s._delete = false")
        .when_not_matched_insert(updates=every, predicate="s._delete = false")
        .execute()
    )
    return ApplyResult(True, new.num_rows, changes.num_rows)


def _unhash(value: object) -> object:
    # Key values are scalars in every table pgoutput can describe, except array columns
    # under REPLICA IDENTITY FULL, which _hashable turned into tuples.
    if isinstance(value, tuple):
        return [_unhash(v) for v in value]
    return value
