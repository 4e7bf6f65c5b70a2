"""spark.readStream.format("pgoutput"): option values, and Trigger.AvailableNow's target.

Without Spark: the reader is driven as Spark's stream runner drives it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from conformance import provision
from pgwire_mock.client import ReplicationConnection, ServerError, pgoutput_options
from pgwire_mock.pytest_plugin import WalSender, start_walsender
from pgwire_mock.script import Script, column, insert
from pgwire_mock.spark import DecodeOptions, PgOutputStreamReader, SparkSideError, StreamSettings
from pgwire_mock.spark.source import PgOutputDataSource
from spark.spark_helpers import golden

ITEMS = "public.items"
BASE = {"dsn": "host=127.0.0.1", "slot": "s", "publication": "p"}
# What a user might write for `streaming`: pgoutput's words in other cases, the integer
# and parse_bool forms the replication grammar never turns into booleans, prefixes.
STREAMING_VALUES = (
    "on", "off", "true", "false", "parallel", "ON", "False", "Parallel",
    "1", "0", "yes", "no", "t", "f", "par", " on", "",
)  # fmt: skip


def _script(transactions: int = 6, pg_version: int = 16) -> Script:
    script = (
        Script(pg_version=pg_version)
        .table(ITEMS, columns=[column("id", "int4", key=True), column("label", "text")])
        .publication("pub", tables=[ITEMS])
        .slot("spark")
    )
    for n in range(transactions):
        script.transaction([insert(ITEMS, id=n, label="x" * 20)])
    return script


def _reader(server: WalSender, **options: str) -> PgOutputStreamReader:
    base = {"dsn": server.dsn(), "slot": "spark", "publication": "pub"}
    return PgOutputStreamReader({**base, **options}, ITEMS, DecodeOptions(), None)


def _one_line_error(options: dict[str, str]) -> str:
    with pytest.raises(SparkSideError) as failed:
        StreamSettings.from_options(options)
    text = str(failed.value)
    assert "\n" not in text
    return text


def _spark_accepts(value: str) -> bool:
    try:
        StreamSettings.from_options({**BASE, "proto_version": "4", "streaming": value})
    except SparkSideError as err:
        assert str(err).startswith('pgoutput: option "streaming" must be one of off, on, parallel')
        return False
    return True


def _server_accepts(dsn: str, slot: str, publication: str, value: str) -> bool:
    with ReplicationConnection.connect(dsn, timeout=10) as conn:
        options = {**pgoutput_options(publication, proto_version=4), "streaming": value}
        try:
            conn.start_replication(slot, 0, options)
        except ServerError as err:
            assert err.sqlstate == "42601", err  # syntax_error: "requires a Boolean value"
            return False
        conn.stop()
        return True


def test_streaming_takes_what_pgoutput_takes() -> None:
    """Each candidate value of `streaming` is accepted exactly when the walsender's
    pgoutput (PostgreSQL 16's, as the fake answers it) accepts it."""
    with start_walsender(_script()) as fake:
        for value in STREAMING_VALUES:
            assert _spark_accepts(value) == _server_accepts(fake.dsn(), "spark", "pub", value), (
                value
            )


@pytest.fixture
def pg_slot(pg_server: provision.Server) -> Iterator[tuple[provision.Server, str]]:
    """A publication and a pgoutput slot of one fresh name on a real server."""
    if pg_server.version < 16:
        pytest.skip("streaming=parallel and protocol 4 need PostgreSQL 16+")
    name = f"opts_{time.monotonic_ns()}"
    with pg_server.connect() as conn:
        conn.execute(f"CREATE PUBLICATION {name}")
        conn.execute(f"SELECT pg_create_logical_replication_slot('{name}', 'pgoutput')")
    try:
        yield pg_server, name
    finally:
        with pg_server.connect() as conn:
            conn.execute(f"SELECT pg_drop_replication_slot('{name}')")
            conn.execute(f"DROP PUBLICATION {name}")


def test_streaming_takes_what_real_pgoutput_takes(pg_slot: tuple[provision.Server, str]) -> None:
    """The same against a real PostgreSQL 16+."""
    server, name = pg_slot
    for value in STREAMING_VALUES:
        accepted = _server_accepts(server.replication_dsn, name, name, value)
        assert _spark_accepts(value) == accepted, value


def test_streaming_modes_reach_pgoutput() -> None:
    """off/on/parallel (and the booleans) are passed as pgoutput's words; `messages` is
    passed too; each mode's protocol is required before anything connects."""

    def start_options(**options: str) -> dict[str, object]:
        return dict(StreamSettings.from_options({**BASE, **options}).start_options())

    assert start_options(proto_version="4", streaming="Parallel")["streaming"] == "parallel"
    assert start_options(proto_version="2", streaming="TRUE")["streaming"] == "on"
    assert start_options(streaming="false")["streaming"] == "off"
    assert "streaming" not in start_options()
    assert start_options(messages="on")["messages"] is True
    assert "messages" not in start_options()
    assert "proto_version 4" in _one_line_error(
        {**BASE, "proto_version": "3", "streaming": "parallel"}
    )
    assert "proto_version 2" in _one_line_error({**BASE, "streaming": "on"})


@pytest.mark.parametrize(
    ("option", "value", "accepted"),
    [
        ("streaming", "yes", "one of off, on, parallel, true, false (any case)"),
        ("binary", "1", "one of true, false, on, off (any case)"),
        ("messages", "maybe", "one of true, false, on, off (any case)"),
        ("two_phase", "y", "one of true, false, on, off (any case)"),
        ("partitions", "0", "an integer >= 1"),
        ("partitions", "-2", "an integer >= 1"),
        ("partitions", "two", "an integer >= 1"),
        ("proto_version", "0", "an integer >= 1"),
        ("max_buffered_rows", "0", "an integer >= 1"),
        ("caught_up_timeout", "-1", "a number >= 0"),
        ("timeout", "soon", "a number >= 0"),
        ("reconnect_attempts", "-1", "an integer >= 0"),
        ("start_lsn", "16", "an LSN X/Y (hexadecimal)"),
    ],
)
def test_a_bad_value_fails_in_one_line_naming_the_option(
    option: str, value: str, accepted: str
) -> None:
    """The first (and only) line says which option, what it takes and what it got."""
    text = _one_line_error({**BASE, option: value})
    assert text == f'pgoutput: option "{option}" must be {accepted}, not {value!r}'


def test_the_data_source_checks_stream_options_at_load() -> None:
    """Spark makes the data source at load() (with or without a user schema): a bad
    streaming value, or a `path` next to a walsender, fails there."""
    with pytest.raises(SparkSideError, match='option "streaming" must be'):
        PgOutputDataSource({**BASE, "table": "t", "streaming": "parallel-ish"})
    with pytest.raises(SparkSideError, match=r'option "path" is for spark\.read'):
        PgOutputDataSource({**BASE, "table": "t", "path": "x.jsonl"})


def test_partitions_below_one_are_refused_by_the_batch_source() -> None:
    recording = golden(16, "types", "v1")
    source = PgOutputDataSource({"path": str(recording), "table": "pgwm_types", "partitions": "0"})
    with pytest.raises(SparkSideError, match=r'^pgoutput: option "partitions" must be an'):
        source.schema()


def test_a_path_given_to_read_stream_fails_at_the_first_call() -> None:
    """load() cannot tell spark.readStream from spark.read (PySpark builds the source
    the same way), so a recording's `path` alone passes it; the query then fails at its
    first call with the line, not with PySpark's UnboundLocalError from streamReader()."""
    recording = golden(16, "types", "v1")
    source = PgOutputDataSource({"path": str(recording), "table": "pgwm_types"})
    reader = source.streamReader(source.schema())
    for call in (reader.initialOffset, reader.prepareForTriggerAvailableNow):  # type: ignore[attr-defined]
        with pytest.raises(SparkSideError, match=r'option "path" is for spark\.read'):
            call()


def test_parallel_streaming_needs_postgresql_16() -> None:
    with start_walsender(_script(pg_version=15)) as fake:
        reader = _reader(fake, proto_version="4", streaming="parallel")
        try:
            with pytest.raises(
                SparkSideError, match=r"streaming=parallel needs PostgreSQL 16.*is 15"
            ):
                reader.prepareForTriggerAvailableNow()
                reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
        finally:
            reader.stop()


# ------------------------------------------------------------------- Trigger.AvailableNow


def _available_now(reader: PgOutputStreamReader) -> list[dict[str, Any]]:
    """What an availableNow query gets: batches until latestOffset reports nothing new,
    each committed before the next is asked for."""
    reader.prepareForTriggerAvailableNow()
    start = reader.initialOffset()
    rows: list[dict[str, Any]] = []
    while (end := reader.latestOffset(start, ReadAllAvailable())) != start:
        for partition in reader.partitions(start, end):
            rows.extend(r for batch in reader.read(partition) for r in batch.to_pylist())
        reader.commit(end)
        start = end
    return rows


def test_available_now_reads_a_slow_backlog_whole() -> None:
    """A backlog the server sends for longer than the old 30 s cut-off is read whole:
    availableNow waits for everything committed before the query started."""
    transactions = 40
    with start_walsender(_script(transactions), faults=["slow:rate=180"]) as fake:
        reader = _reader(fake, reconnect_backoff="0.01")
        began = time.monotonic()
        committed = fake.end_of_wal
        try:
            rows = _available_now(reader)
        finally:
            reader.stop()
        took = time.monotonic() - began
        assert sorted(r["id"] for r in rows) == list(range(transactions))
        assert took > 30, f"the backlog took {took:.1f}s; make the server slower"
        # At least what was committed: the background writer's running-xacts records
        # (every 15 s) move the end of WAL on meanwhile, as PostgreSQL's do.
        assert fake.slots["spark"].confirmed_flush >= committed


def test_a_caught_up_timeout_that_runs_out_fails_the_query() -> None:
    """With caught_up_timeout set and too short, the query fails with the option's name,
    the end of WAL it aimed for and how far it got, instead of ending early."""
    with start_walsender(_script(), faults=["slow:rate=100"]) as fake:
        reader = _reader(fake, caught_up_timeout="1")
        try:
            with pytest.raises(SparkSideError) as failed:
                _available_now(reader)
        finally:
            reader.stop()
        text = str(failed.value)
        assert text.startswith('pgoutput stream: availableNow: option "caught_up_timeout" (1s)')
        assert f"end of WAL at the query's start (0/{fake.end_of_wal:X})" in text
        assert "received up to 0/" in text
