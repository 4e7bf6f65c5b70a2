"""Rows handed over unconverted, as readStream's pump hands them to executors."""

from __future__ import annotations

import pickle
from dataclasses import replace

import pyarrow as pa
import pytest

from codec.pgoutput import (
    Commit,
    CommitPrepared,
    Decoder,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
)
from codec.values import LSN
from pgwire_mock.client import WalData, WalRun
from pgwire_mock.spark import DecodeOptions
from pgwire_mock.spark.decode import ChangeDecoder, decode_stream
from pgwire_mock.spark.rows import RawRows
from pgwire_mock.spark.stream import PgOutputStreamReader, StreamSettings, _Pump
from spark.spark_helpers import TYPES_OPTIONS, entries, golden, same

MAJOR = 17
OPTION_SETS = ("v1", "v1-binary", "v2-stream", "v3-stream-2pc", "v4-parallel-2pc-bin")
SCENARIOS = ("types", "replica_identity", "toast", "truncate", "streaming", "two_phase")


@pytest.mark.parametrize("option_set", OPTION_SETS)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_raw_rows_convert_to_what_the_decoder_makes(scenario: str, option_set: str) -> None:
    """Rows taken unconverted at each point where no transaction is open, pickled and
    converted by their TableSpec (three rows a batch), equal decode_stream's rows, in
    order; a decoder with convert=False never makes a batch itself."""
    path = golden(MAJOR, scenario, option_set)
    options = replace(TYPES_OPTIONS if scenario == "types" else DecodeOptions(), batch_rows=3)
    expected = decode_stream(entries(path), options)
    decoder = ChangeDecoder(options, convert=False)
    got: dict[str, list[pa.RecordBatch]] = {}
    for lsn, payload in entries(path):
        decoder.feed(lsn, payload)
        assert not decoder.has_batches
        if decoder.ended and decoder.open_transactions == 0:
            for name in decoder.tables:
                spec, taken = decoder.take_rows(name)
                assert spec is not None
                raw = pickle.loads(pickle.dumps(taken))
                assert isinstance(raw, RawRows)
                spec = pickle.loads(pickle.dumps(spec))
                batches = list(spec.batches(raw))
                assert all(b.num_rows <= 3 for b in batches)
                got.setdefault(name, []).extend(batches)
    assert decoder.open_transactions == 0
    for name, table in expected.items():
        rows = pa.Table.from_batches(got.get(name, []), schema=table.schema)
        assert same(rows.to_pylist(), table.to_pylist()), name


def _end_of(message: object) -> int | None:
    if isinstance(message, Commit | StreamCommit | CommitPrepared):
        return message.end_lsn
    if isinstance(message, RollbackPrepared):
        return message.rollback_end_lsn
    if isinstance(message, StreamAbort) and message.xid == message.subxid:
        return message.abort_lsn
    return None


@pytest.mark.parametrize("option_set", OPTION_SETS)
@pytest.mark.parametrize("scenario", ["streaming", "two_phase", "truncate"])
def test_ended_is_the_end_lsn_of_the_transaction_a_message_ends(
    scenario: str, option_set: str
) -> None:
    """After each message, ``ended`` is the end LSN of a Commit, Stream Commit, Commit
    Prepared or Rollback Prepared, the abort LSN of a whole transaction's Stream Abort
    (protocol 4), else None: the fast path for Commit and the decoded path agree."""
    codec = Decoder()
    decoder = ChangeDecoder()
    seen = 0
    for lsn, payload in entries(golden(MAJOR, scenario, option_set)):
        want = _end_of(codec.decode(payload))
        decoder.feed(lsn, payload)
        assert decoder.ended == want
        seen += want is not None
    assert seen


def _reader(partitions: int) -> PgOutputStreamReader:
    options = {"dsn": "host=127.0.0.1", "slot": "s", "publication": "p"}
    return PgOutputStreamReader(
        {**options, "partitions": str(partitions)}, "t", DecodeOptions(), None
    )


@pytest.mark.parametrize(
    ("rows", "partitions", "sizes"),
    [
        ([100, 1, 1, 1, 1], 2, [100, 4]),
        ([1, 1, 1, 1, 100], 2, [4, 100]),
        ([5, 5, 5, 5], 2, [10, 10]),
        ([0, 0, 0], 2, [0, 0]),
        ([3], 4, [3]),
        ([1, 1, 1], 3, [1, 1, 1]),
    ],
)
def test_a_batch_is_split_into_runs_of_about_as_many_rows(
    rows: list[int], partitions: int, sizes: list[int]
) -> None:
    """Units go to at most ``partitions`` runs, in order, none empty, each closed once
    it holds its share of the rows."""
    groups = _reader(partitions)._group(rows)
    assert [i for lo, hi in groups for i in range(lo, hi)] == list(range(len(rows)))
    assert all(lo < hi for lo, hi in groups)
    assert [sum(rows[lo:hi]) for lo, hi in groups] == sizes


@pytest.mark.parametrize("rows", [0, 1, 3])
def test_raw_rows_pickle_to_the_same_rows(rows: int) -> None:
    """RawRows travel packed: every field comes back as it was, for the extreme LSN,
    negative times, empty and long payloads and any op name."""
    raw = RawRows()
    ops = ["insert", "truncate", "snapshot"]
    for i in range(rows):
        raw.ops.append(ops[i])
        raw.commit_lsns.append(2**64 - 1 - i)
        raw.positions.append(i)
        raw.xids.append(2**32 - 1)
        raw.commit_times.append(-(2**62) + i)
        raw.payloads.append(bytes(range(256)) * i)
        raw.values_at.append(i - 2)
        raw.old_at.append(-2)
    assert pickle.loads(pickle.dumps(raw)) == raw


def test_raw_rows_pickle_compressed() -> None:
    """A batch of similar rows pickles to much less than its payloads (what passes
    through the JVM to the executors)."""
    raw = RawRows()
    for i in range(1000):
        raw.extend(RawRows(["update"], [i], [0], [7], [0], [b"U" + b"note " * 40], [6], [-2]))
    assert len(pickle.dumps(raw)) < sum(map(len, raw.payloads)) / 4


@pytest.mark.parametrize("option_set", ["v1", "v4-parallel-2pc-bin"])
def test_the_pump_follows_wal_data_as_it_follows_wal_runs(option_set: str) -> None:
    """The pump holds the same units, rows and received position whether the client
    reports XLogData one WalData at a time or in WalRun events."""
    stream = entries(golden(MAJOR, "streaming", option_set))
    (table, *_) = decode_stream(stream)
    messages = [(lsn, lsn + len(payload), 0, payload) for lsn, payload in stream]
    runs = [WalRun(messages[at : at + 7]) for at in range(0, len(messages), 7)]
    single = [WalData(LSN(a), LSN(b), c, d) for a, b, c, d in messages]

    def held(events: list[object]) -> tuple[list[int], RawRows, int]:
        settings = StreamSettings.from_options({"dsn": "host=x", "slot": "s", "publication": "p"})
        pump = _Pump(settings, DecodeOptions(tables=frozenset({table})), None)
        pump._on_events(None, events)  # type: ignore[arg-type]  # no other event: no connection
        return pump.units.ends, pump.units.raw, pump.received

    got = held(runs)  # type: ignore[arg-type]
    assert got == held(single)  # type: ignore[arg-type]
    assert len(got[1]) > 0 and got[2] == messages[-1][1]
