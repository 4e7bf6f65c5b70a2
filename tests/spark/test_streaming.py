"""spark.readStream.format("pgoutput"): a walsender's stream into Parquet through foreachBatch."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from codec.values import LSN
from conformance import provision
from pgwire_mock.pytest_plugin import WalSender, start_walsender
from pgwire_mock.spark import (
    DecodeOptions,
    ParquetTarget,
    PgOutputStreamReader,
    apply_changes,
    foreach_batch,
    read_parquet_target,
)
from spark.spark_helpers import golden, same

RECORDING = golden(16, "types", "v1")  # 7 transactions, 10 change rows
TABLE = "public.pgwm_types"
ARRAY_DIMS = json.dumps({"c_int4_2d": 2})


@pytest.fixture
def fake() -> Iterator[WalSender]:
    """The fake walsender replaying the recording, with a slot at its start."""
    server = start_walsender(RECORDING, pg_version=16, slots=["spark"])
    yield server
    server.stop()


def _stream(spark: SparkSession, dsn: str, **options: str) -> DataFrame:
    reader = spark.readStream.format("pgoutput").option("dsn", dsn)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def _run(df: DataFrame, checkpoint: Path, function: Callable[[DataFrame, int], None]) -> None:
    query = (
        df.writeStream.foreachBatch(function)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120), "the availableNow query did not finish"
    finally:
        query.stop()


def _expected(spark: SparkSession, tmp_path: Path) -> tuple[pa.Table, int]:
    """What the batch reader materializes from the same recording, and its change rows."""
    df = (
        spark.read.format("pgoutput")
        .option("path", str(RECORDING))
        .option("table", TABLE)
        .option("array_dims", ARRAY_DIMS)
        .load()
    )
    target = ParquetTarget(str(tmp_path / "batch"))
    result = apply_changes(df, target, batch_id=0)
    return read_parquet_target(target), result.changes


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def _end_offsets(checkpoint: Path) -> dict[int, int]:
    """Batch id → the source's end offset, from Spark's offset log."""
    out = {}
    for path in (checkpoint / "offsets").iterdir():
        if path.name.isdigit():
            lines = path.read_text().splitlines()
            out[int(path.name)] = int(LSN(json.loads(lines[-1])["lsn"]))
    return out


def _committed(checkpoint: Path) -> list[int]:
    return sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())


def test_the_reader_confirms_only_what_spark_committed(fake: WalSender) -> None:
    """Without Spark: offsets fall on commits, whole transactions fill a row limit, the
    partitions carry the rows, and the slot moves only when commit() is called."""
    reader = PgOutputStreamReader(
        {"dsn": fake.dsn(), "slot": "spark", "publication": "pgwm_types"},
        TABLE,
        DecodeOptions(array_dims={"c_int4_2d": 2}),
        None,
    )
    try:
        start = reader.initialOffset()
        assert start == {"lsn": "0/0"}
        reader.prepareForTriggerAvailableNow()
        first = reader.latestOffset(start, ReadMaxRows(2))
        rows = [b.num_rows for p in reader.partitions(start, first) for b in reader.read(p)]
        assert sum(rows) == 2  # the first transaction; the next one would pass 2
        end = reader.latestOffset(first, ReadAllAvailable())
        assert reader.latestOffset(end, ReadAllAvailable()) == end
        before = fake.slots["spark"].confirmed_flush
        assert before < int(LSN(first["lsn"]))
        reader.commit(first)
        assert fake.slots["spark"].confirmed_flush == int(LSN(first["lsn"]))
        reader.commit(end)
        assert fake.slots["spark"].confirmed_flush == int(LSN(end["lsn"]))
    finally:
        reader.stop()


def test_available_now_materializes_what_the_batch_reader_does(
    spark: SparkSession, fake: WalSender, tmp_path: Path
) -> None:
    """One availableNow run over the fake's replay gives the batch reader's table; the
    slot is not confirmed past the batch (Spark tells a source that a batch is committed
    only when it plans the next one)."""
    target = ParquetTarget(str(tmp_path / "stream"))
    checkpoint = tmp_path / "checkpoint"
    df = _stream(
        spark,
        fake.dsn(),
        slot="spark",
        publication="pgwm_types",
        table=TABLE,
        array_dims=ARRAY_DIMS,
    )
    _run(df, checkpoint, foreach_batch(lambda: target))
    assert same(_rows(read_parquet_target(target)), _rows(_expected(spark, tmp_path)[0]))
    (last,) = _end_offsets(checkpoint).values()
    assert fake.slots["spark"].confirmed_flush <= last


def test_restart_after_a_failed_batch_applies_every_transaction_once(
    spark: SparkSession, fake: WalSender, tmp_path: Path
) -> None:
    """A query that dies in its second batch, restarted from its checkpoint, ends with the
    exact table; the walsender was never told a position past Spark's commit log."""
    target = ParquetTarget(str(tmp_path / "stream"))
    checkpoint = tmp_path / "checkpoint"
    applied: dict[int, int] = {}  # batch id → change rows applied

    def confirmed() -> int:
        return max((u.flushed_lsn for u in fake.acknowledged), default=0)

    def apply(fail_at: int | None) -> Callable[[DataFrame, int], None]:
        def run(batch: DataFrame, batch_id: int) -> None:
            # Spark committed the batches in its commit log and nothing after them.
            done = _committed(checkpoint)
            limit = _end_offsets(checkpoint)[done[-1]] if done else 0
            assert confirmed() <= limit, (LSN(confirmed()), LSN(limit))
            if batch_id == fail_at:
                raise RuntimeError("killed mid-stream")
            result = apply_changes(batch, target, batch_id)
            if result.applied:
                applied[batch_id] = result.changes

        return run

    options = {
        "slot": "spark",
        "publication": "pgwm_types",
        "table": TABLE,
        "array_dims": ARRAY_DIMS,
        "max_rows_per_batch": "4",  # whole transactions: 3 batches
    }
    with pytest.raises(Exception, match="killed mid-stream"):
        _run(_stream(spark, fake.dsn(), **options), checkpoint, apply(fail_at=1))
    assert _committed(checkpoint) == [0]
    assert confirmed() <= _end_offsets(checkpoint)[0]

    _run(_stream(spark, fake.dsn(), **options), checkpoint, apply(fail_at=None))
    expected, changes = _expected(spark, tmp_path)
    assert sorted(applied) == [0, 1, 2]
    assert sum(applied.values()) == changes  # no transaction twice
    assert same(_rows(read_parquet_target(target)), _rows(expected))
    ends = _end_offsets(checkpoint)
    flushed = [u.flushed_lsn for u in fake.acknowledged if u.flushed_lsn]
    assert flushed == sorted(flushed)
    assert set(flushed) <= set(ends.values())  # only ever a committed batch's end
    assert ends[0] < confirmed() <= ends[2]


# ------------------------------------------------------------------------------ PostgreSQL


@pytest.fixture(scope="module")
def pg16() -> Iterator[provision.Server]:
    """PostgreSQL 16 only: one version is enough for the Spark side."""
    reason = provision.opted_out()
    if reason:
        pytest.skip(reason)
    with provision.provide(16) as server:
        yield server


@pytest.mark.postgres
def test_a_real_server_streams_into_parquet(
    spark: SparkSession, pg16: provision.Server, tmp_path: Path
) -> None:
    """Rows written to PostgreSQL 16 reach Parquet as the server's table has them."""
    name = f"spark_{uuid.uuid4().hex[:8]}"
    checkpoint = tmp_path / "checkpoint"
    target = ParquetTarget(str(tmp_path / "pg"))

    def run() -> list[tuple[object, ...]]:
        df = _stream(spark, pg16.replication_dsn, slot=name, publication=name, table=name)
        _run(df, checkpoint, foreach_batch(lambda: target))
        got = read_parquet_target(target).select(["id", "label", "amount"]).to_pylist()
        return sorted((r["id"], r["label"], r["amount"]) for r in got)

    with pg16.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, label text, amount numeric(10,2))")
        conn.execute(f"CREATE PUBLICATION {name} FOR TABLE {name}")
        conn.execute(f"SELECT pg_create_logical_replication_slot('{name}', 'pgoutput')")
    try:
        with pg16.connect() as conn:
            conn.execute(
                f"INSERT INTO {name} SELECT g, 'row ' || g, g * 1.25 FROM generate_series(1, 20) g"
            )
            conn.execute(f"UPDATE {name} SET label = 'changed', id = 100 WHERE id = 3")
            conn.execute(f"DELETE FROM {name} WHERE id % 5 = 0")
            rows = conn.execute(f"SELECT id, label, amount FROM {name}").fetchall()
        assert run() == sorted(rows)

        # A second run resumes from the checkpoint: only the new transaction comes.
        with pg16.connect() as conn:
            conn.execute(f"UPDATE {name} SET amount = -1 WHERE id < 8")
            rows = conn.execute(f"SELECT id, label, amount FROM {name}").fetchall()
        assert run() == sorted(rows)
        ends = _end_offsets(checkpoint)
        assert sorted(ends) == [0, 1]
        with pg16.connect() as conn:
            flushed = conn.execute(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                (name,),
            ).fetchone()
        # Planning batch 1 committed batch 0 to the source, which confirmed it.
        assert flushed is not None and int(LSN(str(flushed[0]))) == ends[0]
    finally:
        with pg16.connect() as conn:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s AND NOT active",
                (name,),
            )
            conn.execute(f"DROP PUBLICATION IF EXISTS {name}")
            conn.execute(f"DROP TABLE IF EXISTS {name}")
