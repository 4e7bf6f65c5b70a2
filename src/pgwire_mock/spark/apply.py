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
* identity values are compared as the apply worker's ``tuples_equal``
  (executor/execReplication.c) compares them: with the type's ``=`` (float NaN equals
  NaN, -0 equals +0) and NULL matching NULL; under REPLICA IDENTITY FULL identical rows
  are separate rows, and a delete or update takes one row (an identical one, bit for
  bit, when there is one);
* a truncate empties the table at its place in the order (earlier changes of the batch
  are gone with it, later ones are applied after it);
* a column named in ``_toast_unchanged`` keeps the value (and ``_special`` entry) of the
  existing row; if there is no existing row the batch fails rather than write NULL;
* a batch whose ``batch_id`` is not greater than the last one applied is skipped, so a
  ``foreachBatch`` retried by Spark after a failure applies once.

The materialized table has the source table's columns, ``_special`` (the row's
unrepresentable values, see :mod:`pgwire_mock.spark.types`) and ``_commit_lsn`` (the
commit LSN of the row's last change).

A Spark DataFrame is applied on the executors: each change row gets a group (a hash of
its identity) from Spark expressions (:mod:`pgwire_mock.spark.distributed`, the same
routing as :func:`~pgwire_mock.spark.materialize.route`), rows and the target's current
rows are shuffled by group, sorted, and each partition is materialized by
:func:`~pgwire_mock.spark.materialize.materialize` in ``mapInArrow``; the result is
written by the executors (``DataFrame.write`` for Parquet, per-partition Parquet files
committed in one Delta transaction for Delta: :mod:`pgwire_mock.spark.targets`). The
driver holds metadata: the last truncate's position, the identity changes that carry
unchanged TOAST (they join two groups), file names and counts. An Arrow table is routed
and materialized the same way in this process, as one partition.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pgwire_mock.spark.decode import KEY_METADATA
from pgwire_mock.spark.errors import ApplyError
from pgwire_mock.spark.materialize import (
    META_NAMES,
    SORT,
    after_barrier,
    last_truncate,
    materialize,
    route,
    route_current,
    state_schema,
    whole_row,
)
from pgwire_mock.spark.targets import (
    ApplyResult,
    DeltaTarget,
    ParquetTarget,
    add_action,
    applied_rows,
    commit_delta,
    commit_parquet,
    new_version,
    parquet_target_path,
    read_current,
    read_parquet_target,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "ApplyError",
    "ApplyResult",
    "DeltaTarget",
    "ParquetTarget",
    "apply_changes",
    "foreach_batch",
    "parquet_target_path",
    "read_parquet_target",
    "state_schema",
]


# ------------------------------------------------------------------------------ keys


_SPARK_METADATA_KEY: Final = b"SPARK::metadata::json"  # where DataFrame.toArrow() keeps it


def _flagged(field: pa.Field[Any]) -> bool:
    metadata = field.metadata or {}
    if metadata.get(KEY_METADATA) == b"true":
        return True
    spark = metadata.get(_SPARK_METADATA_KEY)
    if spark is not None:
        try:
            return json.loads(spark).get("pgoutput.key") is True
        except (ValueError, AttributeError):
            return False
    return False


def _resolve_keys(
    schema: pa.Schema, key: Sequence[str] | None, spark_keys: list[str] | None
) -> list[str]:
    columns = [f.name for f in schema if f.name not in META_NAMES]
    if key is not None:
        keys = list(key)
        missing = [k for k in keys if k not in columns]
        if missing:
            raise ApplyError(
                f"key column {', '.join(missing)} is not a column of the table; "
                f"its columns: {', '.join(columns)}"
            )
        return keys
    if spark_keys:
        return spark_keys
    return [f.name for f in schema if f.name in columns and _flagged(f)]


def _spark_keys(df: DataFrame) -> list[str]:
    return [f.name for f in df.schema.fields if f.metadata.get("pgoutput.key") is True]


# ------------------------------------------------------------------------ entry points


def apply_changes(
    changes: DataFrame | pa.Table,
    target: ParquetTarget | DeltaTarget,
    batch_id: int,
    *,
    key: Sequence[str] | None = None,
    partitions: int | None = None,
) -> ApplyResult:
    """Apply one batch of change rows of one table to ``target``; see the module doc.

    ``key`` overrides the key columns read from the change schema's metadata. A Spark
    DataFrame is applied on the executors in ``partitions`` partitions (default:
    ``spark.sql.shuffle.partitions``, which adaptive query execution may coalesce); an
    Arrow table in this process.
    """
    if isinstance(changes, pa.Table):
        keys = _resolve_keys(changes.schema, key, None)
        return _apply_local(changes, target, batch_id, keys)
    # pyspark is imported only for a DataFrame: Arrow tables apply without it.
    from pgwire_mock.spark import distributed  # noqa: PLC0415

    keys = _resolve_keys(_arrow_schema(changes), key, _spark_keys(changes))
    return distributed.apply(changes, target, batch_id, keys, partitions)


def _arrow_schema(df: DataFrame) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema  # noqa: PLC0415  # as above

    return to_arrow_schema(df.schema, timezone="UTC")


def foreach_batch(
    target_for: Callable[[], ParquetTarget | DeltaTarget], *, key: Sequence[str] | None = None
) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function: ``stream.writeStream.foreachBatch(foreach_batch(...))``."""

    def run(df: DataFrame, batch_id: int) -> None:
        apply_changes(df, target_for(), batch_id, key=key)

    return run


def _apply_local(
    changes: pa.Table, target: ParquetTarget | DeltaTarget, batch_id: int, keys: list[str]
) -> ApplyResult:
    schema = state_schema(changes.schema)
    applied = applied_rows(target, batch_id)
    if applied is not None:
        return ApplyResult(False, applied, 0)
    routed = route(changes, keys, whole_row(changes.schema, keys))
    barrier = last_truncate(routed)
    parts = [after_barrier(routed, barrier)]
    if barrier is None:
        current = read_current(target, schema)
        if current is not None:
            parts.insert(0, route_current(current, routed.schema, keys))
    rows = pa.concat_tables([p.cast(parts[-1].schema) for p in parts])
    rows = rows.take(pc.sort_indices(rows, sort_keys=SORT))
    new = materialize(rows, schema, keys)
    if isinstance(target, ParquetTarget):
        version = new_version(target, batch_id)
        version.mkdir(parents=True)
        pq.write_table(new, version / "part-00000.parquet")
        commit_parquet(target, batch_id, version)
    else:
        name = f"part-{batch_id:010d}-{uuid.uuid4().hex}.parquet"
        Path(target.path).mkdir(parents=True, exist_ok=True)
        pq.write_table(new, Path(target.path) / name)
        action = add_action(target.path, name, new.num_rows)
        commit_delta(target, batch_id, schema, [action])
    return ApplyResult(True, new.num_rows, changes.num_rows)
