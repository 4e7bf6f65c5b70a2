"""``apply_changes`` for a Spark DataFrame: routed (by Spark expressions, in the JVM),
materialized (in ``mapInArrow``) and written on the executors (see
:mod:`pgwire_mock.spark.apply`). The driver reads back metadata only, from one aggregate:
the position of the last truncate, the change count, the identity changes that join two
groups (key changes leaving TOAST columns unchanged), the first change it must refuse;
then written file names and sizes."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake.transaction import AddAction, RemoveAction
from pyspark import StorageLevel
from pyspark.sql import functions as sf
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from pgwire_mock.spark import materialize as mz
from pgwire_mock.spark import targets as tg
from pgwire_mock.spark.decode import SNAPSHOT_OP
from pgwire_mock.spark.errors import ApplyError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Row

__all__ = ["apply"]

_FILES = pa.schema({"name": pa.string(), "rows": pa.int64()})  # type: ignore[arg-type]  # stubs type pa.string() as object


def _clean(schema: pa.Schema) -> pa.Schema:
    """Without Spark's field metadata (Delta and Parquet footers need none of it)."""
    return pa.schema([f.remove_metadata() for f in schema])


def _union_find(edges: list[tuple[int, int]]) -> dict[int, int]:
    parent: dict[int, int] = {}

    def root(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {x: root(x) for x in parent}


def _reraise(err: Exception) -> None:
    """An ApplyError raised on an executor, raised again here with its own message."""
    found = re.search(r"ApplyError: (.*)", str(err))
    if found:
        raise ApplyError(found.group(1)) from err


def apply(
    df: DataFrame,
    target: tg.ParquetTarget | tg.DeltaTarget,
    batch_id: int,
    keys: list[str],
    partitions: int | None,
) -> tg.ApplyResult:
    try:
        return _apply(df, target, batch_id, keys, partitions)
    except Exception as err:
        if type(err).__name__ in ("PythonException", "Py4JJavaError"):
            _reraise(err)
        raise


def _apply(
    df: DataFrame,
    target: tg.ParquetTarget | tg.DeltaTarget,
    batch_id: int,
    keys: list[str],
    partitions: int | None,
) -> tg.ApplyResult:
    applied = tg.applied_rows(target, batch_id)
    if applied is not None:
        return tg.ApplyResult(False, applied, 0)
    spark = df.sparkSession
    change_schema = _clean(to_arrow_schema(df.schema, timezone="UTC"))
    state = mz.state_schema(change_schema)
    state_spark = from_arrow_schema(state)
    # What each executor gets back from Spark for this schema (time zone included).
    state_arrow = _clean(to_arrow_schema(state_spark, timezone=_tz(spark)))
    router = _Router(df, state.names, keys, mz.whole_row(change_schema, keys))
    routed = router.route(df).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        # One pass over the routed rows for all the driver needs.
        summary = routed.agg(*router.summary()).first()
        assert summary is not None
        router.check(summary)
        barrier = summary["barrier"]
        rows = routed.where(sf.col(mz.ROLE) < mz.EDGE)
        if barrier is not None:
            lsn, pos = sf.col("_commit_lsn"), sf.col("_position")
            later = (lsn > barrier[0]) | ((lsn == barrier[0]) & (pos > barrier[1]))
            rows = rows.where(later & (sf.col(mz.RANK) == 2))
        else:
            current = _current(spark, target, state_spark)
            if current is not None:
                rows = router.route_current(current).unionByName(rows)
        edges = [(int(e[0]), int(e[1])) for e in summary["edges"]]
        if edges:
            rows = _join_groups(spark, rows, _union_find(edges))

        def materialize(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            tables = [pa.Table.from_batches([b]) for b in batches]
            if not tables:
                return
            part = pa.concat_tables(tables)
            if not part.num_rows:
                return
            part = part.take(pc.sort_indices(part, sort_keys=mz.SORT))
            yield from mz.materialize(part, state_arrow, keys).to_batches()

        # Without a count: Spark's (adaptive execution coalesces small partitions).
        shuffled = (
            rows.repartition(partitions, mz.GROUP) if partitions else rows.repartition(mz.GROUP)
        )
        result = shuffled.mapInArrow(materialize, state_spark)
        if isinstance(target, tg.ParquetTarget):
            total = _write_parquet(spark, result, target, batch_id)
        else:
            total = _write_delta(result, target, batch_id, state)
    finally:
        routed.unpersist()
    return tg.ApplyResult(True, total, int(summary["changes"]))


def _tz(spark: Any) -> str:
    return str(spark.conf.get("spark.sql.session.timeZone") or "UTC")


class _Router:
    """:func:`pgwire_mock.spark.materialize.route` as Spark expressions, so the change rows
    stay in the JVM until they are materialized. A group is Spark's ``xxhash64`` of the
    identity: it hashes values Spark's ``=`` holds equal (NaN and NaN, -0 and +0, inside
    arrays and structs too) equally, as PostgreSQL's ``=`` holds them equal; rows the
    hash puts together are told apart by :func:`~pgwire_mock.spark.materialize.materialize`.
    The routed rows keep only what materializing reads: the state's columns, ``_op``,
    ``_position``, ``_toast_unchanged`` and the identity of ``_before``."""

    def __init__(self, df: DataFrame, columns: list[str], keys: list[str], whole_row: bool):
        self.columns = columns  # the state's: the table's, _special, _commit_lsn
        self.keys = keys
        self.whole_row = whole_row
        self.toast_type = df.schema["_toast_unchanged"].dataType

    def route(self, df: DataFrame) -> DataFrame:
        op, before, toast = sf.col("_op"), sf.col("_before"), sf.col("_toast_unchanged")
        truncate = op == "truncate"
        meta = [op, sf.col("_position")]
        rank = sf.when(op == SNAPSHOT_OP, 1).otherwise(2).cast("byte").alias(mz.RANK)
        if not self.keys:
            # No identity: each row is its own group (updates and deletes are refused).
            return df.select(
                *self.columns,
                *meta,
                toast,
                sf.when(truncate, 0).otherwise(sf.monotonically_increasing_id()).alias(mz.GROUP),
                sf.lit(0).cast("long").alias(mz.GROUP2),
                sf.when(truncate, mz.TRUNCATE).otherwise(mz.ROW).cast("byte").alias(mz.ROLE),
                rank,
            )
        has_before = (op == "update") & before.isNotNull()
        unchanged = sf.coalesce(sf.size(toast) > 0, sf.lit(False))
        old = [before[k] for k in self.keys]
        # Under REPLICA IDENTITY FULL the new tuple's unchanged columns are the old
        # tuple's values (sent whole, detoasted: ExtractReplicaIdentity in heapam.c).
        new = [self._filled(k) if self.whole_row else sf.col(k) for k in self.keys]
        changed = has_before & ~sf.struct(*new).eqNullSafe(sf.struct(*old))
        split = changed if self.whole_row else changed & ~unchanged  # DEL old + INS new
        edge = sf.lit(False) if self.whole_row else changed & unchanged  # ROW old + EDGE
        flagged = df.select(
            "*",
            has_before.alias("_pgwm_has_before"),
            split.alias("_pgwm_split"),
            edge.alias("_pgwm_edge"),
            sf.explode(
                sf.when(split | edge, sf.array(sf.lit(False), sf.lit(True))).otherwise(
                    sf.array(sf.lit(False))
                )
            ).alias("_pgwm_second"),
        )
        second = sf.col("_pgwm_second")
        split, edge = sf.col("_pgwm_split"), sf.col("_pgwm_edge")
        ins = split & second
        old_id, new_id = sf.xxhash64(*old), sf.xxhash64(*new)
        group = (
            sf.when(truncate, 0)
            .when(ins, new_id)
            .when(sf.col("_pgwm_has_before"), old_id)
            .otherwise(new_id)
        )
        role = (
            sf.when(truncate, mz.TRUNCATE)
            .when(ins, mz.INS)
            .when(split, mz.DEL)
            .when(edge & second, mz.EDGE)
            .otherwise(mz.ROW)
        )
        columns = [sf.col(c) for c in self.columns]
        if self.whole_row:
            # An INS row takes its unchanged columns from the old tuple. (It keeps its
            # _toast_unchanged: materializing does not read it on an INS row, and the
            # summary finds there a column the old tuple has no value for.)
            filled = {k: sf.when(ins, self._filled(k)).otherwise(sf.col(k)) for k in self.keys}
            columns = [filled[c].alias(c) if c in filled else sf.col(c) for c in self.columns]
        return flagged.select(
            *columns,
            *meta,
            toast.alias("_toast_unchanged"),
            sf.when(before.isNotNull(), sf.struct(*[before[k].alias(k) for k in self.keys])).alias(
                "_before"
            ),
            group.alias(mz.GROUP),
            sf.when(edge & second, new_id).otherwise(0).cast("long").alias(mz.GROUP2),
            role.cast("byte").alias(mz.ROLE),
            rank,
        )

    def _filled(self, column: str) -> Column:
        unchanged = sf.array_contains(sf.col("_toast_unchanged"), column)
        return sf.when(unchanged, sf.col("_before")[column]).otherwise(sf.col(column))

    def route_current(self, current: DataFrame) -> DataFrame:
        """The target's rows as CURRENT rows, in their groups."""
        group = sf.xxhash64(*[sf.col(k) for k in self.keys]) if self.keys else None
        before: list[Column] = []
        if self.keys:
            before = [sf.lit(None).cast(self._before_type(current)).alias("_before")]
        return current.select(
            *self.columns,
            sf.lit(mz.CURRENT_OP).alias("_op"),
            sf.lit(0).cast("long").alias("_position"),
            sf.array().cast(self.toast_type).alias("_toast_unchanged"),
            *before,
            (group if group is not None else sf.monotonically_increasing_id()).alias(mz.GROUP),
            sf.lit(0).cast("long").alias(mz.GROUP2),
            sf.lit(mz.CURRENT).cast("byte").alias(mz.ROLE),
            sf.lit(0).cast("byte").alias(mz.RANK),
        )

    def _before_type(self, current: DataFrame) -> StructType:
        return StructType([current.schema[k] for k in self.keys])

    def summary(self) -> list[Column]:
        """The last truncate, the change count, the edges, and the first row that
        cannot be applied, in one aggregate."""
        role, lsn, pos = sf.col(mz.ROLE), sf.col("_commit_lsn"), sf.col("_position")
        out = [
            sf.max(sf.when(role == mz.TRUNCATE, sf.struct(lsn, pos))).alias("barrier"),
            sf.count(sf.when(~role.isin(mz.INS, mz.EDGE), 1)).alias("changes"),
            sf.collect_list(sf.when(role == mz.EDGE, sf.struct(mz.GROUP, mz.GROUP2))).alias(
                "edges"
            ),
        ]
        op = sf.col("_op")
        if not self.keys:
            bad = ~op.isin("insert", SNAPSHOT_OP, "truncate")
            out.append(sf.min(sf.when(bad, sf.struct(lsn, pos, op))).alias("keyless"))
        elif self.whole_row:
            # An INS row whose unchanged column the old tuple has no value for.
            for i, k in enumerate(self.keys):
                lost = (role == mz.INS) & sf.array_contains(sf.col("_toast_unchanged"), k)
                lost = lost & sf.col("_before")[k].isNull()
                out.append(sf.min(sf.when(lost, sf.struct(lsn, pos))).alias(f"lost{i}"))
        return out

    def check(self, summary: Row) -> None:
        if not self.keys and summary["keyless"] is not None:
            lsn, _, op = summary["keyless"]
            raise ApplyError(
                f"{op} at LSN {mz.lsn_text(lsn)} on a table without replica identity key "
                "columns (REPLICA IDENTITY NOTHING, or no key flags in the schema: "
                "pass key=[...])"
            )
        if self.keys and self.whole_row:
            lost = [(summary[f"lost{i}"], k) for i, k in enumerate(self.keys)]
            found = sorted((tuple(at), k) for at, k in lost if at is not None)
            if found:
                (lsn, _), column = found[0]
                raise ApplyError(
                    f"update at LSN {mz.lsn_text(lsn)} leaves column {column} "
                    "unchanged (TOAST) and its old tuple has no value for it"
                )


def _join_groups(spark: Any, rows: DataFrame, roots: dict[int, int]) -> DataFrame:
    """Groups joined by key changes that carry unchanged TOAST: one group per chain."""
    mapping = spark.createDataFrame(list(roots.items()), "pgwm_g long, pgwm_root long")
    joined = rows.join(sf.broadcast(mapping), rows[mz.GROUP] == mapping["pgwm_g"], "left")
    group: Column = sf.coalesce(sf.col("pgwm_root"), sf.col(mz.GROUP))
    return joined.withColumn(mz.GROUP, group).drop("pgwm_g", "pgwm_root")


def _current(
    spark: Any, target: tg.ParquetTarget | tg.DeltaTarget, schema: Any
) -> DataFrame | None:
    """The target's current rows, read by the executors."""
    if isinstance(target, tg.ParquetTarget):
        pointer = tg.read_pointer(Path(target.path))
        if pointer is None:
            return None
        return spark.read.schema(schema).parquet(str(Path(target.path) / pointer["version"]))  # type: ignore[no-any-return]
    dt = tg.delta_table(target)
    if dt is None:
        return None
    uris = dt.file_uris()
    if not uris:
        return None
    return spark.read.schema(schema).parquet(*uris)  # type: ignore[no-any-return]


def _write_parquet(spark: Any, result: DataFrame, target: tg.ParquetTarget, batch_id: int) -> int:
    """Spark writes the new version; the pointer switch commits it."""
    version = tg.new_version(target, batch_id)
    conf = "spark.sql.parquet.outputTimestampType"
    before = spark.conf.get(conf)
    spark.conf.set(conf, "TIMESTAMP_MICROS")  # what pyarrow and Delta write, not INT96
    try:
        result.write.parquet(str(version))
    finally:
        spark.conf.set(conf, before)
    total = tg.parquet_rows(version)
    tg.commit_parquet(target, batch_id, version)
    return total


def _write_delta(
    result: DataFrame, target: tg.DeltaTarget, batch_id: int, schema: pa.Schema
) -> int:
    """Each executor streams its partition into one Parquet file under the table; the
    driver commits the files it is told about in one Delta transaction."""
    root = target.path
    Path(root).mkdir(parents=True, exist_ok=True)

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        name = f"part-{batch_id:010d}-{uuid.uuid4().hex}.parquet"
        rows = 0
        writer: pq.ParquetWriter | None = None
        try:
            for batch in batches:
                if writer is None:
                    writer = pq.ParquetWriter(str(Path(root) / name), schema)
                table = pa.Table.from_batches([batch]).cast(schema)
                writer.write_table(table)
                rows += table.num_rows
        finally:
            if writer is not None:
                writer.close()
        if writer is not None:
            yield pa.RecordBatch.from_pydict(
                {"name": [name], "rows": [rows]},
                schema=_FILES,
            )

    files = result.mapInArrow(write, "name string, rows long").collect()
    actions: list[AddAction | RemoveAction] = [
        tg.add_action(root, r["name"], int(r["rows"])) for r in files
    ]
    tg.commit_delta(target, batch_id, schema, actions)
    return sum(int(r["rows"]) for r in files)
