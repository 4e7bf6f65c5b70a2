"""spark.readStream.format("pgoutput"): a walsender's stream into Parquet through foreachBatch."""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
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
from pgwire_mock.client import ConnectionLostError
from pgwire_mock.pytest_plugin import WalSender, start_walsender
from pgwire_mock.script import Script, column, delete, insert, update
from pgwire_mock.spark import (
    DecodeOptions,
    ParquetTarget,
    PgOutputStreamReader,
    SparkSideError,
    StreamSettings,
    apply_changes,
    foreach_batch,
    read_parquet_target,
)
from pgwire_mock.spark.stream import peek_schema
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


def _types_stream(spark: SparkSession, fake: WalSender, **options: str) -> DataFrame:
    """The types recording's table, streamed from the fake's slot "spark"."""
    return _stream(
        spark,
        fake.dsn(),
        slot="spark",
        publication="pgwm_types",
        table=TABLE,
        array_dims=ARRAY_DIMS,
        **options,
    )


def _table_stream(
    spark: SparkSession, server: provision.Server, name: str, **options: str
) -> DataFrame:
    """Table ``name`` of a real server, through the slot and publication of that name."""
    return _stream(
        spark, server.replication_dsn, slot=name, publication=name, table=name, **options
    )


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
    partitions carry the rows, and the slot moves only to what Spark committed: when
    commit() is called, or when the next batch is asked for from an offset (Spark plans a
    batch only from the end of the last one in its commit log)."""
    reader = PgOutputStreamReader(
        {"dsn": fake.dsn(), "slot": "spark", "publication": "pgwm_types"},
        TABLE,
        DecodeOptions(array_dims={"c_int4_2d": 2}),
        None,
    )

    def confirmed() -> int:
        return fake.slots["spark"].confirmed_flush

    try:
        start = reader.initialOffset()
        assert start == {"lsn": "0/0"}
        reader.prepareForTriggerAvailableNow()
        first = reader.latestOffset(start, ReadMaxRows(2))
        rows = [b.num_rows for p in reader.partitions(start, first) for b in reader.read(p)]
        assert sum(rows) == 2  # the first transaction; the next one would pass 2
        assert confirmed() < int(LSN(first["lsn"]))  # planned and read, not committed
        reader.commit(first)
        assert confirmed() == int(LSN(first["lsn"]))
        end = reader.latestOffset(first, ReadAllAvailable())
        assert confirmed() == int(LSN(first["lsn"]))
        assert reader.latestOffset(end, ReadAllAvailable()) == end
        assert confirmed() == int(LSN(end["lsn"]))  # asked from end: committed there
    finally:
        reader.stop()


def test_available_now_materializes_what_the_batch_reader_does(
    spark: SparkSession, fake: WalSender, tmp_path: Path
) -> None:
    """One availableNow run over the fake's replay gives the batch reader's table in one
    batch, and the slot is confirmed at its end: Spark asks for the batch after it (and
    gets none) once it is in the commit log."""
    target = ParquetTarget(str(tmp_path / "stream"))
    checkpoint = tmp_path / "checkpoint"
    df = _types_stream(spark, fake)
    _run(df, checkpoint, foreach_batch(lambda: target))
    assert same(_rows(read_parquet_target(target)), _rows(_expected(spark, tmp_path)[0]))
    (last,) = _end_offsets(checkpoint).values()
    assert fake.slots["spark"].confirmed_flush == last


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


# ------------------------------------------------------------------- reconnect, two-phase

ITEMS = "public.items"


def _items_script(*, pg_version: int = 16, faults: bool = False, two_phase: bool = False) -> Script:
    """Six transactions on a small table; with ``faults``, the connection is cut inside
    the third (close_after), terminated by 57P01 after the fourth and ended by a
    shutdown (COPY 0, then close) after the fifth, each once. With ``two_phase``, two
    transactions are prepared and decided one way each while others commit around them."""
    script = (
        Script(pg_version=pg_version)
        .table(ITEMS, columns=[column("id", "int4", key=True), column("label", "text")])
        .publication("pub", tables=[ITEMS])
        .slot("spark")
    )
    if two_phase:
        script.transaction([insert(ITEMS, id=1, label="a")])
        script.transaction([insert(ITEMS, id=2, label="b")], prepare="keep")
        script.transaction([insert(ITEMS, id=3, label="c")])
        script.transaction([insert(ITEMS, id=4, label="d")], prepare="drop")
        script.commit_prepared("keep")
        script.rollback_prepared("drop")
        script.transaction([insert(ITEMS, id=5, label="e")])
        return script
    script.transaction([insert(ITEMS, id=1, label="a"), insert(ITEMS, id=2, label="b")])
    script.transaction([insert(ITEMS, id=3, label="c")])
    if faults:
        script.fault("close_after", messages=2)  # Begin and Relation of the next one
    script.transaction([insert(ITEMS, id=4, label="d"), insert(ITEMS, id=5, label="e")])
    script.transaction([update(ITEMS, id=1, label="A")])
    if faults:
        script.fault("error", sqlstate="57P01")  # FATAL, as pg_terminate_backend
    script.transaction([delete(ITEMS, key={"id": 2})])
    if faults:
        script.fault("shutdown", wait=False)
    script.transaction([insert(ITEMS, id=6, label="f")])
    return script


def _reader(server: WalSender, **options: str) -> PgOutputStreamReader:
    base = {"dsn": server.dsn(), "slot": "spark", "publication": "pub"}
    return PgOutputStreamReader({**base, **options}, ITEMS, DecodeOptions(), None)


def _changes(
    reader: PgOutputStreamReader, start: dict[str, str], end: dict[str, str]
) -> list[tuple[Any, ...]]:
    """(op, id, label, commit LSN) of the rows in (start, end]."""
    return [
        (row["_op"], row["id"], row["label"], row["_commit_lsn"])
        for partition in reader.partitions(start, end)
        for batch in reader.read(partition)
        for row in batch.to_pylist()
    ]


def _starts(server: WalSender) -> int:
    """START_REPLICATION commands the fake accepted (one per connection of the pump)."""
    return sum("streaming slot " in line for line in server.log)


def _flushed(server: WalSender) -> list[int]:
    return [u.flushed_lsn for u in server.acknowledged if u.flushed_lsn]


def test_the_reader_reconnects_without_losing_or_repeating_a_transaction() -> None:
    """A connection cut mid-transaction, a 57P01 termination and a shutdown are survived
    inside the query: the rows are those of a run without faults, each once. A batch
    planned and not committed when the connection drops is still served, the next batch
    too, and the slot is confirmed only where commit() said, on the new connection."""
    with start_walsender(_items_script()) as clean:
        reader = _reader(clean)
        try:
            reader.prepareForTriggerAvailableNow()
            start = reader.initialOffset()
            expected = _changes(reader, start, reader.latestOffset(start, ReadAllAvailable()))
        finally:
            reader.stop()
    assert len(expected) == 8

    with start_walsender(_items_script(faults=True)) as fake:
        reader = _reader(fake, reconnect_backoff="0.01")
        try:
            reader.prepareForTriggerAvailableNow()
            start = reader.initialOffset()
            reader.latestOffset(start, ReadAllAvailable())  # returns once read to the end
            starts = _starts(fake)
            assert starts >= 4  # the first connection, then one after each fault
            first = reader.latestOffset(start, ReadMaxRows(3))
            got = _changes(reader, start, first)  # planned, not committed...
            assert fake.inject("error:sqlstate=57P01")  # ...when the walsender goes
            fake.wait_until(lambda s: _starts(s) == starts + 1 and s.slots["spark"].active)
            end = reader.latestOffset(first, ReadAllAvailable())
            got += _changes(reader, first, end)
            assert got == expected
            reader.commit(first)
            reader.commit(end)
            assert fake.slots["spark"].confirmed_flush == int(LSN(end["lsn"]))
            assert set(_flushed(fake)) == {int(LSN(first["lsn"])), int(LSN(end["lsn"]))}
        finally:
            reader.stop()


@pytest.mark.parametrize("major", [16, 17])
def test_a_server_restart_ends_while_the_reader_runs_and_it_reads_on(major: int) -> None:
    """The server restarts (fast) while the reader holds nothing back but a transaction
    is open on the server: it rolls back (WAL that makes no unit), and the walsender waits
    until its client confirmed everything it sent. The reader confirms the keepalive's
    position, as PostgreSQL's apply worker does, so the restart ends (a reader confirming
    only Spark's offsets would hold it for good); then it reconnects and reads on. On 16
    the slot comes back where it was last saved, before all of it: the reader asks to
    start after what it holds, so nothing comes twice."""
    with start_walsender(_items_script(pg_version=major)) as fake:
        reader = _reader(fake, reconnect_backoff="0.01")
        try:
            reader.prepareForTriggerAvailableNow()
            start = reader.initialOffset()
            end = reader.latestOffset(start, ReadAllAvailable())
            assert len(_changes(reader, start, end)) == 8
            reader.commit(end)
            fake.wait_confirmed("spark", int(LSN(end["lsn"])))
            txn = fake.begin()
            txn.write([insert(ITEMS, id=50, label="never")])
            starts = _starts(fake)
            fake.restart(timeout=10)
            confirmed = fake.slots["spark"].confirmed_flush
            assert (
                confirmed > int(LSN(end["lsn"]))
                if major >= 17
                else confirmed < int(LSN(start["lsn"]) or 1 << 62)
            )
            fake.commit([insert(ITEMS, id=7, label="g")])
            fake.wait_until(lambda s: _starts(s) == starts + 1)
            reader.prepareForTriggerAvailableNow()  # a new target: the end of WAL now
            later = reader.latestOffset(end, ReadAllAvailable())
            assert [row[:3] for row in _changes(reader, end, later)] == [("insert", 7, "g")]
        finally:
            reader.stop()


def test_reconnect_attempts_run_out() -> None:
    """A walsender that terminates every stream: the query fails after
    reconnect_attempts more tries, or at the first with reconnect_attempts=0."""
    for attempts, starts, match in ((2, 3, "gave up after 2 reconnect attempts"), (0, 1, "")):
        with start_walsender(_items_script(), faults=["error:sqlstate=57P01"]) as fake:
            reader = _reader(fake, reconnect_attempts=str(attempts), reconnect_backoff="0.01")
            try:
                with pytest.raises(SparkSideError, match=f"{match}.*57P01") as failed:
                    reader.prepareForTriggerAvailableNow()
                    reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
                assert "administrator command" in str(failed.value)
                assert _starts(fake) == starts
            finally:
                reader.stop()


def test_the_schema_peek_is_retried_after_a_lost_connection() -> None:
    """load()'s schema peek meets a connection cut before anything streams: it connects
    again (with the stream's back-off) and reads the schema; without retries it fails."""
    for attempts in (3, 0):
        cut = Script(pg_version=16)
        cut.table(ITEMS, columns=[column("id", "int4", key=True), column("label", "text")])
        cut.publication("pub", tables=[ITEMS]).slot("spark")
        cut.fault("close_after", messages=0)  # the first stream closes at once
        cut.transaction([insert(ITEMS, id=1, label="a")])
        with start_walsender(cut) as fake:
            mine = StreamSettings.from_options(
                {"dsn": fake.dsn(), "slot": "spark", "publication": "pub",
                 "reconnect_attempts": str(attempts), "reconnect_backoff": "0.01"}
            )  # fmt: skip
            if attempts:
                schema = peek_schema(mine, ITEMS, DecodeOptions(), timeout=10)
                assert schema.names[-3:] == ["id", "label", "_before"]
                assert _starts(fake) == 2
            else:
                with pytest.raises(ConnectionLostError):
                    peek_schema(mine, ITEMS, DecodeOptions(), timeout=10)
                assert _starts(fake) == 1


def test_short_connections_are_retried_like_the_stream() -> None:
    """StreamSettings.retried: a retryable failure is tried again up to
    reconnect_attempts times, then raised; anything else at once."""
    settings = StreamSettings.from_options(
        {"dsn": "host=x", "slot": "s", "publication": "p", "reconnect_attempts": "2",
         "reconnect_backoff": "0.001"}
    )  # fmt: skip
    calls: list[int] = []

    def flaky(failures: int, error: Exception) -> Callable[[], str]:
        def run() -> str:
            calls.append(1)
            if len(calls) <= failures:
                raise error
            return "ok"

        return run

    assert settings.retried("x", flaky(2, ConnectionLostError("gone"))) == "ok"
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(ConnectionLostError):
        settings.retried("x", flaky(3, ConnectionLostError("gone")))
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(SparkSideError):
        settings.retried("x", flaky(1, SparkSideError("no")))
    assert len(calls) == 1


def test_available_now_retries_identify_system() -> None:
    """availableNow's IDENTIFY_SYSTEM connection fails once: it is tried again and the
    trigger still reads every transaction."""
    with start_walsender(_items_script()) as fake:
        reader = _reader(fake, reconnect_backoff="0.01")
        real = reader._xlogpos
        failed: list[int] = []

        def once() -> int:
            if not failed:
                failed.append(1)
                raise ConnectionLostError("the server closed the connection")
            return real()

        reader._xlogpos = once  # type: ignore[method-assign]
        try:
            start = reader.initialOffset()
            reader.prepareForTriggerAvailableNow()
            end = reader.latestOffset(start, ReadAllAvailable())
            assert failed == [1]
            assert len(_changes(reader, start, end)) == 8  # every change of the script
        finally:
            reader.stop()


def test_a_missing_slot_fails_at_once() -> None:
    """Not retryable: the error names the slot and the SQLSTATE, with no back-off."""
    with start_walsender(_items_script()) as fake:
        reader = _reader(fake, slot="nope", reconnect_backoff="60")
        began = time.monotonic()
        try:
            with pytest.raises(SparkSideError, match=r'"nope" does not exist.*42704.*not retried'):
                reader.prepareForTriggerAvailableNow()
                reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
        finally:
            reader.stop()
        assert time.monotonic() - began < 10


def test_two_phase_needs_protocol_3_and_postgresql_15() -> None:
    """Refused before anything streams: at parse time, or once the server says it is 14."""
    options = {"dsn": "host=x", "slot": "s", "publication": "p", "two_phase": "true"}
    with pytest.raises(SparkSideError, match="two_phase needs proto_version 3"):
        StreamSettings.from_options(options)
    with start_walsender(_items_script(pg_version=14, two_phase=False)) as fake:
        reader = _reader(fake, two_phase="true", proto_version="3")
        try:
            with pytest.raises(SparkSideError, match=r"two_phase needs PostgreSQL 15.*is 14"):
                reader.prepareForTriggerAvailableNow()
                reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
        finally:
            reader.stop()


def test_two_phase_serves_prepared_transactions_once_they_commit() -> None:
    """two_phase on the fake (PostgreSQL 16): a prepared transaction's rows come at
    COMMIT PREPARED, a rolled-back one's never; no offset falls while one is undecided,
    so a reader restarted from the confirmed position gets the prepared one again whole."""
    with start_walsender(_items_script(two_phase=True)) as fake:
        options = {"two_phase": "true", "proto_version": "3"}
        reader = _reader(fake, **options)
        try:
            reader.prepareForTriggerAvailableNow()
            start = reader.initialOffset()
            first = reader.latestOffset(start, ReadMaxRows(1))
            batches = [[(op, key) for op, key, _, _ in _changes(reader, start, first)]]
            # Asking from an offset confirms it (Spark asks once it committed there), so
            # the batches after the first are planned from it alone.
            offsets = [
                start,
                first,
                reader.latestOffset(first, ReadMaxRows(1)),
                reader.latestOffset(first, ReadAllAvailable()),
            ]
            batches += [
                [(op, key) for op, key, _, _ in _changes(reader, a, b)]
                for a, b in itertools.pairwise(offsets[1:])
            ]
            # Transaction 3 committed while "keep" was prepared: it waits for the decision.
            assert batches == [[("insert", 1)], [("insert", 3), ("insert", 2)], [("insert", 5)]]
            reader.commit(offsets[1])
            assert fake.slots["spark"].confirmed_flush == int(LSN(offsets[1]["lsn"]))
        finally:
            reader.stop()
        reader = _reader(fake, **options)
        try:
            reader.prepareForTriggerAvailableNow()
            end = reader.latestOffset(offsets[1], ReadAllAvailable())
            assert end == offsets[-1]
            rows = [(op, key) for op, key, _, _ in _changes(reader, offsets[1], end)]
            assert rows == [("insert", 3), ("insert", 2), ("insert", 5)]
        finally:
            reader.stop()


def test_a_query_survives_dropped_connections(spark: SparkSession, tmp_path: Path) -> None:
    """Every streaming connection of the fake is cut after 6 messages (so the recording
    arrives about a transaction per connection), and a FATAL 57P01 ends one during the
    first batch: the availableNow query still gives the batch reader's table, each
    change once, and the walsender never hears of a position past Spark's commit log."""
    target = ParquetTarget(str(tmp_path / "stream"))
    checkpoint = tmp_path / "checkpoint"
    applied: dict[int, int] = {}
    with start_walsender(
        RECORDING, pg_version=16, slots=["spark"], faults=["close_after:6"]
    ) as fake:

        def run(batch: DataFrame, batch_id: int) -> None:
            done = _committed(checkpoint)
            limit = _end_offsets(checkpoint)[done[-1]] if done else 0
            assert max(_flushed(fake), default=0) <= limit
            if batch_id == 0:  # on the connection streaming now, or else on the next
                fake.inject("error:sqlstate=57P01")
            result = apply_changes(batch, target, batch_id)
            if result.applied:
                applied[batch_id] = result.changes

        df = _types_stream(spark, fake, max_rows_per_batch="4", reconnect_backoff="0.05")
        _run(df, checkpoint, run)
        expected, changes = _expected(spark, tmp_path)
        assert same(_rows(read_parquet_target(target)), _rows(expected))
        assert sorted(applied) == [0, 1, 2]
        assert sum(applied.values()) == changes
        # peek_schema, then at least one stream per transaction, then the 57P01.
        assert _starts(fake) >= 1 + 7 + 1
        ends = _end_offsets(checkpoint)
        assert set(_flushed(fake)) <= set(ends.values())
        assert fake.slots["spark"].confirmed_flush <= max(ends.values())


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
        # Each run asks for a batch after its last one, which confirms that one too.
        assert flushed is not None and int(LSN(str(flushed[0]))) == ends[1]
    finally:
        with pg16.connect() as conn:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s AND NOT active",
                (name,),
            )
            conn.execute(f"DROP PUBLICATION IF EXISTS {name}")
            conn.execute(f"DROP TABLE IF EXISTS {name}")


@pytest.mark.postgres
def test_a_real_server_restart_ends_while_the_reader_runs() -> None:
    """PostgreSQL 16 restarted fast while the reader holds nothing back and a
    transaction is open: the shutdown ends (it waits until the reader confirmed what
    its walsender sent, the rolled-back transaction's WAL included), and the reader
    reads on without a repeat, though the slot came back where it was created."""
    reason = provision.opted_out()
    if reason:
        pytest.skip(reason)
    with (
        provision.Cluster(provision.install(16).installation) as cluster,
        _pg_table(cluster) as name,
    ):
        options = {"dsn": cluster.replication_dsn, "slot": name, "publication": name}
        reader = PgOutputStreamReader(
            {**options, "reconnect_backoff": "0.2", "reconnect_attempts": "20"},
            f"public.{name}",
            DecodeOptions(),
            None,
        )
        try:
            with cluster.connect() as conn:
                conn.execute(f"INSERT INTO {name} VALUES (1, 'a'), (2, 'b')")
            reader.prepareForTriggerAvailableNow()
            start = reader.initialOffset()
            end = reader.latestOffset(start, ReadAllAvailable())
            assert len(_changes(reader, start, end)) == 2
            reader.commit(end)
            _await(lambda: _slot_state(cluster, name)[1] == int(LSN(end["lsn"])), "the commit")
            open_txn = cluster.connect()
            open_txn.execute("BEGIN")
            open_txn.execute(f"INSERT INTO {name} VALUES (50, 'never')")
            time.sleep(0.5)  # flushed by the WAL writer, read by the walsender
            cluster.begin_fast_shutdown()
            cluster.start_again(timeout=30)  # ProvisionError if the reader held it
            with contextlib.suppress(Exception):  # the shutdown ended its session
                open_txn.close()
            with cluster.connect() as conn:
                conn.execute(f"INSERT INTO {name} VALUES (7, 'g')")
            reader.prepareForTriggerAvailableNow()
            later = reader.latestOffset(end, ReadAllAvailable())
            assert [row[:3] for row in _changes(reader, end, later)] == [("insert", 7, "g")]
        finally:
            reader.stop()


@contextlib.contextmanager
def _pg_table(server: provision.Server) -> Iterator[str]:
    """A fresh table, a publication and a pgoutput slot of one name; dropped after."""
    name = f"spark_{uuid.uuid4().hex[:8]}"
    with server.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, label text)")
        conn.execute(f"CREATE PUBLICATION {name} FOR TABLE {name}")
        conn.execute(f"SELECT pg_create_logical_replication_slot('{name}', 'pgoutput')")
    try:
        yield name
    finally:
        with server.connect() as conn:
            for (gid,) in conn.execute(
                "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE %s", (f"{name}%",)
            ).fetchall():
                conn.execute(f"ROLLBACK PREPARED '{gid}'")
            conn.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                "WHERE slot_name = %s AND active",
                (name,),
            )
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s AND NOT active",
                (name,),
            )
            conn.execute(f"DROP PUBLICATION IF EXISTS {name}")
            conn.execute(f"DROP TABLE IF EXISTS {name}")


def _pg_rows(server: provision.Server, name: str) -> list[tuple[object, ...]]:
    with server.connect() as conn:
        return sorted(conn.execute(f"SELECT id, label FROM {name}").fetchall())


def _slot_state(server: provision.Server, name: str) -> tuple[int | None, int]:
    """(active_pid, confirmed_flush_lsn) of the slot."""
    with server.connect() as conn:
        row = conn.execute(
            "SELECT active_pid, confirmed_flush_lsn::text FROM pg_replication_slots "
            "WHERE slot_name = %s",
            (name,),
        ).fetchone()
    assert row is not None
    pid = row[0]
    return (pid if isinstance(pid, int) else None), int(LSN(str(row[1])))


def _await(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.1)


@pytest.mark.postgres
def test_a_terminated_walsender_is_reconnected_inside_the_query(
    spark: SparkSession, pg16: provision.Server, tmp_path: Path
) -> None:
    """pg_terminate_backend on the query's walsender (FATAL 57P01): the running query
    reconnects, rows written meanwhile and after arrive, each change once."""
    target = ParquetTarget(str(tmp_path / "pg"))
    checkpoint = tmp_path / "checkpoint"
    seen = threading.Condition()
    state: dict[str, Any] = {"rows": [], "changes": 0}

    def run(batch: DataFrame, batch_id: int) -> None:
        result = apply_changes(batch, target, batch_id)
        got = read_parquet_target(target).select(["id", "label"]).to_pylist()
        with seen:
            state["changes"] += result.changes if result.applied else 0
            state["rows"] = sorted((r["id"], r["label"]) for r in got)
            seen.notify_all()

    def arrived(rows: list[tuple[object, ...]]) -> None:
        with seen:
            assert seen.wait_for(lambda: state["rows"] == rows, 60), (state["rows"], rows)

    with _pg_table(pg16) as name:
        with pg16.connect() as conn:
            conn.execute(f"INSERT INTO {name} SELECT g, 'row ' || g FROM generate_series(1, 10) g")
        df = _table_stream(spark, pg16, name, reconnect_backoff="0.1")
        query = (
            df.writeStream.foreachBatch(run)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        try:
            arrived(_pg_rows(pg16, name))
            pid, _ = _slot_state(pg16, name)
            assert pid is not None
            with pg16.connect() as conn:
                conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
                # Written while the pump reconnects, and after.
                conn.execute(f"INSERT INTO {name} SELECT g, 'new' FROM generate_series(11, 15) g")
            _await(lambda: _slot_state(pg16, name)[0] not in (None, pid), "a new walsender")
            with pg16.connect() as conn:
                conn.execute(f"UPDATE {name} SET label = 'changed' WHERE id IN (2, 12)")
                conn.execute(f"DELETE FROM {name} WHERE id IN (3, 13)")
            arrived(_pg_rows(pg16, name))
            assert state["changes"] == 10 + 5 + 2 + 2
        finally:
            query.stop()
        assert query.exception() is None
        ends = _end_offsets(checkpoint)
        assert _slot_state(pg16, name)[1] <= max(ends.values())


@pytest.mark.postgres
def test_two_phase_on_a_real_server(
    spark: SparkSession, pg16: provision.Server, tmp_path: Path
) -> None:
    """two_phase on PostgreSQL 16: a transaction committed while another is prepared
    waits for the decision (the slot is never confirmed past a PREPARE); at the next run
    committed prepared rows appear once and rolled-back ones never."""
    target = ParquetTarget(str(tmp_path / "pg"))
    checkpoint = tmp_path / "checkpoint"
    applied: dict[int, int] = {}

    def apply(batch: DataFrame, batch_id: int) -> None:
        result = apply_changes(batch, target, batch_id)
        if result.applied:
            applied[batch_id] = result.changes

    def run(name: str) -> list[tuple[object, ...]]:
        df = _table_stream(spark, pg16, name, two_phase="true", proto_version="3")
        _run(df, checkpoint, apply)
        got = read_parquet_target(target).select(["id", "label"]).to_pylist()
        return sorted((r["id"], r["label"]) for r in got)

    def prepared(conn: Any, gid: str, sql: str) -> None:
        conn.execute("BEGIN")
        conn.execute(sql)
        conn.execute(f"PREPARE TRANSACTION '{gid}'")

    with _pg_table(pg16) as name:
        with pg16.connect() as conn:
            conn.execute(f"INSERT INTO {name} VALUES (1, 'a')")
            prepared(conn, f"{name}_keep", f"INSERT INTO {name} VALUES (2, 'b')")
            conn.execute(f"INSERT INTO {name} VALUES (3, 'c')")
        assert run(name) == [(1, "a")]  # 3 waits for the prepared transaction
        with pg16.connect() as conn:  # marked by its first stream with two_phase
            marked = conn.execute(
                "SELECT two_phase FROM pg_replication_slots WHERE slot_name = %s", (name,)
            ).fetchone()
        assert marked == (True,)

        with pg16.connect() as conn:
            conn.execute(f"COMMIT PREPARED '{name}_keep'")
            prepared(conn, f"{name}_drop", f"INSERT INTO {name} VALUES (4, 'd')")
            conn.execute(f"ROLLBACK PREPARED '{name}_drop'")
            prepared(conn, f"{name}_upd", f"UPDATE {name} SET label = 'A' WHERE id = 1")
            conn.execute(f"COMMIT PREPARED '{name}_upd'")
        assert run(name) == _pg_rows(pg16, name) == [(1, "A"), (2, "b"), (3, "c")]
        assert sum(applied.values()) == 4  # inserts of 1, 2, 3 and the update, once each
