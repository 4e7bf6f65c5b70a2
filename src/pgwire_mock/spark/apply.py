"""Materializing a table's current state from its change rows: Parquet and Delta Lake.

:func:`apply_changes` takes one batch of change rows (a Spark DataFrame from
``format("pgoutput")`` or an Arrow table from :mod:`pgwire_mock.spark.decode`), in any
row order, and brings the target up to date, as a subscriber's apply worker would:

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

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import TableNotFoundError

from pgwire_mock.spark.decode import KEY_METADATA, METADATA_FIELDS, SparkSideError

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


def _materialize(
    current: list[Row], changes: list[Row], columns: list[str], keys: list[str]
) -> tuple[dict[object, Row], bool, set[object]]:
    """Apply ``changes`` (sorted) to ``current``: (new state, truncated?, touched keys)."""
    counter = iter(range(1 << 62))

    def key_of(row: Row) -> object:
        if not keys:
            return ("row", next(counter))
        return tuple(_hashable(row[k]) for k in keys)

    state: dict[object, Row] = {key_of(r): r for r in current}
    touched: set[object] = set()
    truncated = False
    for change in changes:
        op = change["_op"]
        if op == "truncate":
            state.clear()
            touched.clear()
            truncated = True
            continue
        row: Row = {c: change[c] for c in columns}
        special = dict(change["_special"] or [])
        if op == "insert":
            k = key_of(row)
        else:
            if not keys:
                raise ApplyError(f"{op} on a table without replica identity key columns")
            before = change.get("_before")
            old = key_of(before if op == "update" and before is not None else row)
            if op == "delete":
                state.pop(old, None)
                touched.add(old)
                continue
            existing = state.get(old)
            for column in change["_toast_unchanged"] or []:
                if existing is None:
                    raise ApplyError(
                        f"update at LSN {change['_commit_lsn']:X} leaves column {column} "
                        f"unchanged (TOAST) but the target has no row with key {old}"
                    )
                row[column] = existing[column]
                old_special = dict(existing["_special"] or [])
                if column in old_special:
                    special[column] = old_special[column]
            k = key_of(row)
            if old != k:
                state.pop(old, None)
                touched.add(old)
        row["_special"] = sorted(special.items())
        row["_commit_lsn"] = change["_commit_lsn"]
        state[k] = row
        touched.add(k)
    return state, truncated, touched


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
    columns = [f.name for f in schema if f.name not in ("_special", "_commit_lsn")]
    rows = table.to_pylist()
    rows.sort(key=lambda r: (r["_commit_lsn"], r["_position"]))
    if isinstance(target, ParquetTarget):
        return _apply_parquet(target, batch_id, rows, schema, columns, keys)
    return _apply_delta(target, batch_id, rows, schema, columns, keys)


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
    changes: list[Row],
    schema: pa.Schema,
    columns: list[str],
    keys: list[str],
) -> ApplyResult:
    root = Path(target.path)
    root.mkdir(parents=True, exist_ok=True)
    state = _read_state(root)
    current: list[Row] = []
    if state["file"]:
        current = pq.read_table(root / state["file"]).to_pylist()
    if batch_id <= state["batch_id"]:
        return ApplyResult(False, len(current), 0)
    new, _, _ = _materialize(current, changes, columns, keys)
    name = f"part-{batch_id:010d}-{uuid.uuid4().hex[:8]}.parquet"
    pq.write_table(pa.Table.from_pylist(list(new.values()), schema=schema), root / name)
    # The state file names the current version: replacing it is the commit.
    tmp = root / f".{_STATE_FILE}.{uuid.uuid4().hex}"
    tmp.write_text(json.dumps({"batch_id": batch_id, "file": name}))
    os.replace(tmp, root / _STATE_FILE)
    if state["file"]:
        (root / state["file"]).unlink(missing_ok=True)
    return ApplyResult(True, len(new), len(changes))


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
    changes: list[Row],
    schema: pa.Schema,
    columns: list[str],
    keys: list[str],
) -> ApplyResult:
    app_id = target.app_id or f"pgwire_mock:{target.path}"
    try:
        dt: DeltaTable | None = DeltaTable(target.path)
    except TableNotFoundError:
        dt = None
    if dt is not None:
        done = dt.transaction_version(app_id)
        if done is not None and batch_id <= done:
            return ApplyResult(False, dt.to_pyarrow_table().num_rows, 0)
    current = dt.to_pyarrow_table().to_pylist() if dt is not None else []
    new, truncated, touched = _materialize(current, changes, columns, keys)
    commit = CommitProperties(
        app_transactions=[Transaction(app_id, batch_id)],
        custom_metadata={"pgwire_mock.batch_id": str(batch_id)},
    )
    if dt is None or truncated or not keys:
        write_deltalake(
            target.path,
            pa.Table.from_pylist(list(new.values()), schema=schema),
            mode="overwrite",
            commit_properties=commit,
        )
        return ApplyResult(True, len(new), len(changes))
    # One MERGE: touched keys still present are upserted, the others deleted.
    source_rows = []
    for k in touched:
        row = new.get(k)
        if row is None:
            assert isinstance(k, tuple)
            key_values = dict(zip(keys, (_unhash(v) for v in k), strict=True))
            row = {c: None for c in columns} | key_values | {"_special": [], "_commit_lsn": 0}
            source_rows.append(row | {"_delete": True})
        else:
            source_rows.append(row | {"_delete": False})
    if not source_rows:
        write_deltalake(
            target.path,
            pa.Table.from_pylist([], schema=schema),
            mode="append",
            commit_properties=commit,
        )
        return ApplyResult(True, len(new), len(changes))
    source = pa.Table.from_pylist(
        source_rows, schema=schema.append(pa.field("_delete", pa.bool_()))
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
    return ApplyResult(True, len(new), len(changes))


def _unhash(value: object) -> object:
    # Key values are scalars in every table pgoutput can describe, except array columns
    # under REPLICA IDENTITY FULL, which _hashable turned into tuples.
    if isinstance(value, tuple):
        return [_unhash(v) for v in value]
    return value
