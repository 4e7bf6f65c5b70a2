"""``apply_changes`` for a Spark DataFrame: routed, materialized and written on the
executors (see :mod:`pgwire_mock.spark.apply`). The driver reads back metadata only: the
position of the last truncate, the change count, the identity changes that join two
groups (key changes leaving TOAST columns unchanged), written file names and sizes."""

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

from pgwire_mock.spark import apply as ap

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

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
        raise ap.ApplyError(found.group(1)) from err


def apply(
    df: DataFrame,
    target: ap.ParquetTarget | ap.DeltaTarget,
    batch_id: int,
    keys: list[str],
    partitions: int | None,
) -> ap.ApplyResult:
    try:
        return _apply(df, target, batch_id, keys, partitions)
    except Exception as err:
        if type(err).__name__ in ("PythonException", "Py4JJavaError"):
            _reraise(err)
        raise


def _apply(
    df: DataFrame,
    target: ap.ParquetTarget | ap.DeltaTarget,
    batch_id: int,
    keys: list[str],
    partitions: int | None,
) -> ap.ApplyResult:
    applied = ap._applied_rows(target, batch_id)
    if applied is not None:
        return ap.ApplyResult(False, applied, 0)
    spark = df.sparkSession
    change_schema = _clean(to_arrow_schema(df.schema, timezone="UTC"))
    state = ap.state_schema(change_schema)
    whole_row = ap._whole_row(change_schema, keys)
    routed_schema = pa.schema([*change_schema, *ap._ROUTING])
    routed_spark = from_arrow_schema(routed_schema)
    state_spark = from_arrow_schema(state)
    # What each executor gets back from Spark for these schemas (time zone included).
    routed_arrow = _clean(to_arrow_schema(routed_spark, timezone=_tz(spark)))
    state_arrow = _clean(to_arrow_schema(state_spark, timezone=_tz(spark)))

    def route(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            table = pa.Table.from_batches([batch])
            yield from ap._route(table, keys, whole_row).cast(routed_arrow).to_batches()

    routed = df.mapInArrow(route, routed_spark).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        role = sf.col(ap._ROLE)
        lsn, pos = sf.col("_commit_lsn"), sf.col("_position")
        summary = routed.agg(
            sf.max(sf.when(role == ap.TRUNCATE, sf.struct(lsn, pos))).alias("barrier"),
            sf.count(sf.when(~role.isin(ap.INS, ap.EDGE), 1)).alias("changes"),
        ).first()
        assert summary is not None
        barrier = summary["barrier"]
        changes = int(summary["changes"])
        edges = [
            (int(r[0]), int(r[1]))
            for r in routed.where(role == ap.EDGE).select(ap._G, ap._G2).toLocalIterator()
        ]
        rows = routed.where(role < ap.EDGE)
        if barrier is not None:
            later = (lsn > barrier[0]) | ((lsn == barrier[0]) & (pos > barrier[1]))
            rows = rows.where(later & (sf.col(ap._RANK) == 2))
        else:
            current = _current(spark, target, state_spark)
            if current is not None:

                def route_current(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
                    for batch in batches:
                        table = pa.Table.from_batches([batch])
                        out = ap._route_current(table, routed_arrow, keys)
                        yield from out.cast(routed_arrow).to_batches()

                rows = current.mapInArrow(route_current, routed_spark).unionByName(rows)
        if edges:
            rows = _join_groups(spark, rows, _union_find(edges))
        n = partitions or int(spark.conf.get("spark.sql.shuffle.partitions") or 200)

        def materialize(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            tables = [pa.Table.from_batches([b]) for b in batches]
            if not tables:
                return
            part = pa.concat_tables(tables)
            if not part.num_rows:
                return
            part = part.take(pc.sort_indices(part, sort_keys=ap._SORT))
            yield from ap._materialize(part, state_arrow, keys).to_batches()

        result = rows.repartition(n, ap._G).mapInArrow(materialize, state_spark)
        if isinstance(target, ap.ParquetTarget):
            total = _write_parquet(spark, result, target, batch_id)
        else:
            total = _write_delta(result, target, batch_id, state)
    finally:
        routed.unpersist()
    return ap.ApplyResult(True, total, changes)


def _tz(spark: Any) -> str:
    return str(spark.conf.get("spark.sql.session.timeZone") or "UTC")


def _join_groups(spark: Any, rows: DataFrame, roots: dict[int, int]) -> DataFrame:
    """Groups joined by key changes that carry unchanged TOAST: one group per chain."""
    mapping = spark.createDataFrame(list(roots.items()), "pgwm_g long, pgwm_root long")
    joined = rows.join(sf.broadcast(mapping), rows[ap._G] == mapping["pgwm_g"], "left")
    group: Column = sf.coalesce(sf.col("pgwm_root"), sf.col(ap._G))
    return joined.withColumn(ap._G, group).drop("pgwm_g", "pgwm_root")


def _current(
    spark: Any, target: ap.ParquetTarget | ap.DeltaTarget, schema: Any
) -> DataFrame | None:
    """The target's current rows, read by the executors."""
    if isinstance(target, ap.ParquetTarget):
        pointer = ap._read_pointer(Path(target.path))
        if pointer is None:
            return None
        return spark.read.schema(schema).parquet(str(Path(target.path) / pointer["version"]))  # type: ignore[no-any-return]
    dt = ap._delta(target)
    if dt is None:
        return None
    uris = dt.file_uris()
    if not uris:
        return None
    return spark.read.schema(schema).parquet(*uris)  # type: ignore[no-any-return]


def _write_parquet(spark: Any, result: DataFrame, target: ap.ParquetTarget, batch_id: int) -> int:
    """Spark writes the new version; the pointer switch commits it."""
    version = ap._new_version(target, batch_id)
    conf = "spark.sql.parquet.outputTimestampType"
    before = spark.conf.get(conf)
    spark.conf.set(conf, "TIMESTAMP_MICROS")  # what pyarrow and Delta write, not INT96
    try:
        result.write.parquet(str(version))
    finally:
        spark.conf.set(conf, before)
    total = ap._parquet_rows(version)
    ap._commit_parquet(target, batch_id, version)
    return total


def _write_delta(
    result: DataFrame, target: ap.DeltaTarget, batch_id: int, schema: pa.Schema
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
        ap._add_action(root, r["name"], int(r["rows"])) for r in files
    ]
    ap._commit_delta(target, batch_id, schema, actions)
    return sum(int(r["rows"]) for r in files)
