"""REPLICA IDENTITY FULL applied exactly: float NaN and ±0, NULLs and identical rows,
recorded from a real server with ``pgwire-mock record --snapshot`` and applied (the
snapshot as batch 0, the changes as batch 1, so the changes find their rows in the
target) to Parquet and Delta from a Spark DataFrame and from ``df.toArrow()``; each
target equals ``SELECT * FROM t`` on the server, row for row with multiplicities and the
sign of every zero."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from conformance.provision import Server
from pgwire_mock.client import pgoutput_options
from pgwire_mock.record import record
from pgwire_mock.spark import (
    DeltaTarget,
    ParquetTarget,
    apply_changes,
    parquet_target_path,
    read_parquet_target,
)
from spark.test_snapshot_postgres import _check, _expected, _materialized, _server_texts

ROWS = [
    (1, "NaN", "NaN", "a"),
    (1, "NaN", "NaN", "a"),
    (2, "0", "0", "z"),
    (2, "-0", "-0", "z"),
    (3, None, None, None),
    (3, None, None, None),
    (4, "1.5", None, "same"),
    (4, "1.5", None, "same"),
    (5, "NaN", "1", None),
    (6, "-0", "NaN", "six"),
]


def _changes(conn: Any, table: str) -> None:
    """Updates and deletes whose old tuples hold NaN, -0, NULLs, and one of two
    identical rows."""
    one = f"(SELECT ctid FROM {table} WHERE id = %s LIMIT 1)"
    conn.execute(f"UPDATE {table} SET t = 'b' WHERE ctid = {one}", (1,))  # one NaN row
    conn.execute(f"DELETE FROM {table} WHERE ctid = {one}", (3,))  # one all-NULL row
    conn.execute(f"UPDATE {table} SET t = 'x' WHERE id = 5")  # NaN and NULL
    conn.execute(f"DELETE FROM {table} WHERE id = 2 AND f::text = '-0'")  # the -0 row
    conn.execute(f"UPDATE {table} SET r = 2 WHERE ctid = {one}", (4,))  # one of two
    conn.execute(f"UPDATE {table} SET f = 0 WHERE id = 6")  # -0 -> 0
    with conn.transaction():
        conn.execute(f"INSERT INTO {table} VALUES (7, 'NaN', NULL, 'n'), (7, 'NaN', NULL, 'n')")
        conn.execute(f"DELETE FROM {table} WHERE ctid = {one}", (7,))
        conn.execute(f"UPDATE {table} SET t = NULL WHERE id = 3")  # the remaining NULL row


@pytest.fixture(scope="module")
def recording(
    pg_server: Server, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, str, list[list[str | None]]]]:
    tag = uuid.uuid4().hex[:8]
    table, publication, slot = f"fi_{tag}", f"fi_pub_{tag}", f"fi_{tag}"
    path = tmp_path_factory.mktemp("full_identity") / "full.jsonl"
    with pg_server.connect() as conn:
        try:
            conn.execute(f"CREATE TABLE {table} (id int, f float8, r real, t text)")
            conn.execute(f"ALTER TABLE {table} REPLICA IDENTITY FULL")
            with conn.cursor() as cur:
                cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s, %s)", ROWS)
            conn.execute(f"CREATE PUBLICATION {publication} FOR TABLE {table}")
            options = {
                k: str(v) for k, v in pgoutput_options([publication], proto_version=1).items()
            }
            try:
                record(
                    pg_server.dsn,
                    slot,
                    path,
                    options,
                    snapshot=True,
                    after_snapshot=lambda: _changes(conn, table),
                )
            finally:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            final = _server_texts(conn, table)
        finally:
            conn.execute(f"DROP PUBLICATION IF EXISTS {publication}")
            conn.execute(f"DROP TABLE IF EXISTS {table}")
    yield path, table, final


def test_full_identity_with_nan_zeros_nulls_and_duplicates_equals_the_server(
    spark: SparkSession, recording: tuple[Path, str, list[list[str | None]]], tmp_path: Path
) -> None:
    """Snapshot then changes, in 1 and 3 partitions, from the DataFrame and from
    df.toArrow(), to Parquet and Delta: the server's rows with their multiplicities."""
    path, table, final = recording
    meta = json.loads(path.read_text().splitlines()[0])["meta"]
    expected = _expected(meta, table, final)
    assert len(expected) == 9
    assert sum(1 for r in final if r[1] == "-0") == 0 and sum(1 for r in final if r[1] == "0") == 2
    df = spark.read.format("pgoutput").option("path", str(path)).option("table", table).load()
    for partitions in (1, 3):
        df = (
            spark.read.format("pgoutput")
            .option("path", str(path))
            .option("table", table)
            .option("partitions", str(partitions))
            .load()
        )
        snapshot, changes = df.where("_op = 'snapshot'"), df.where("_op != 'snapshot'")
        assert changes.where("_op IN ('update', 'delete')").count() >= 7
        for source in ("spark", "arrow"):
            where = tmp_path / str(partitions) / source
            targets = (ParquetTarget(str(where / "parquet")), DeltaTarget(str(where / "delta")))
            for target in targets:
                for batch_id, part in enumerate((snapshot, changes)):
                    if source == "arrow":
                        apply_changes(part.toArrow(), target, batch_id)
                    else:
                        apply_changes(part, target, batch_id, partitions=partitions + 1)
                if isinstance(target, ParquetTarget):
                    got = read_parquet_target(target).to_pylist()
                    read = spark.read.parquet(parquet_target_path(target)).toArrow().to_pylist()
                    _check(_materialized(read), expected, (partitions, source, "spark.read"))
                else:
                    got = DeltaTable(target.path).to_pyarrow_table().to_pylist()
                _check(_materialized(got), expected, (partitions, source, target))
