"""Running-xacts records in the fake's live WAL: when the background writer writes them,
what a logical slot's creation writes, and that a slot moves only at one. The rules
against real 14-18: tests/conformance/test_slot_saves_postgres.py."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from twisted.internet.task import Clock

from codec.values import LSN
from pgwire_mock.client import ReplicationConnection
from pgwire_mock.pytest_plugin import WalSender
from pgwire_mock.script import Script, ScriptError, column, insert, savepoint
from pgwire_mock.script.live import LiveWal
from pgwire_mock.script.model import Transaction
from pgwire_mock.server.live import WalWriter
from pgwire_mock.server.state import ServerState

TABLE = "public.t"
GOLDEN = Path(__file__).parent.parent / "data" / "golden"


def _script() -> Script:
    return (
        Script(pg_version=16)
        .table(TABLE, columns=[column("id", "int4", key=True), column("v", "text")])
        .publication("pub", tables=[TABLE])
    )


def _writer(clock: Clock) -> WalWriter:
    wal = LiveWal(_script())
    state = ServerState(wal_lsn=wal.end_lsn)
    writer = WalWriter(wal, state, clock, lambda: None, lambda _line: None)
    writer.start_bgwriter()
    return writer


def _records(writer: WalWriter) -> list[int]:
    return [r.lsn for r in writer.wal.compiled.snapshots]


def test_the_background_writer_writes_15_s_after_its_last_record_once_wal_was_written() -> None:
    """Measured on 16: a record 15 s after the start, with or without writes; none while
    nothing is written; after a quiet spell one at the background writer's next wake-up
    (0.2 s after a write), then 15 s after that one."""
    clock = Clock()
    writer = _writer(clock)
    clock.advance(14.9)
    assert _records(writer) == []
    clock.advance(0.1)
    assert len(_records(writer)) == 1
    clock.advance(60)
    assert len(_records(writer)) == 1, "a record alone calls for no other"
    writer.append([Transaction((insert(TABLE, id=1, v="a"),))])
    clock.advance(0.15)
    assert len(_records(writer)) == 1
    clock.advance(0.1)
    assert len(_records(writer)) == 2
    assert _records(writer)[-1] == writer.end_lsn - 56
    writer.append([Transaction((insert(TABLE, id=2, v="b"),))])
    clock.advance(14.6)
    assert len(_records(writer)) == 2
    clock.advance(0.5)
    assert len(_records(writer)) == 3


def test_no_background_records_with_a_zero_interval() -> None:
    clock = Clock()
    wal = LiveWal(_script())
    writer = WalWriter(wal, ServerState(), clock, lambda: None, lambda _line: None, 0)
    writer.start_bgwriter()
    writer.append([Transaction((insert(TABLE, id=1, v="a"),))])
    clock.advance(100)
    assert _records(writer) == []


def test_a_slot_creation_writes_a_running_xacts_record_and_starts_at_its_end(
    make_walsender: Callable[..., WalSender],
) -> None:
    """Measured on 16: restart_lsn where WAL ended, the consistent point 56 bytes on."""
    server = make_walsender(script=_script(), new_slots="end_of_wal")
    end = server.commit([insert(TABLE, id=1, v="a")])
    conn = ReplicationConnection.connect(server.dsn(), timeout=10)
    created = conn.create_slot("s")
    conn.close()
    assert int(created.consistent_point) == end + 56 == server.end_of_wal
    assert (server.slots["s"].restart_lsn, server.slots["s"].confirmed_flush) == (end, end + 56)


def test_a_slot_creation_waiting_for_a_transaction_writes_a_record_before_and_after(
    make_walsender: Callable[..., WalSender],
) -> None:
    """Measured on 16: the first record (listing the open transaction) where restart_lsn
    is; once it committed, another after its commit record, whose end is the
    consistent point."""
    server = make_walsender(script=_script(), new_slots="end_of_wal")
    txn = server.begin()
    txn.write([insert(TABLE, id=1, v="a")])
    reserved_at = server.end_of_wal
    conn = ReplicationConnection.connect(server.dsn(), timeout=10)
    result: list[int] = []
    creating = threading.Thread(
        target=lambda: result.append(int(conn.create_slot("s").consistent_point)), daemon=True
    )
    creating.start()
    server.wait_until(lambda s: s.end_of_wal == reserved_at + 56)
    assert creating.is_alive()
    committed = txn.commit()
    creating.join(10)
    conn.close()
    assert result == [committed + 56], (result, committed)
    assert server.slots["s"].restart_lsn == reserved_at


def test_the_sql_functions_write_to_a_script_and_are_refused_for_a_recording(
    make_walsender: Callable[..., WalSender],
) -> None:
    """``SELECT pg_log_standby_snapshot()`` answers its record's end; a recording cannot
    grow, so both statements get 0A000 naming why (compared with real 14-18 in
    tests/conformance/test_slot_saves_postgres.py)."""
    server = make_walsender(script=_script())
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        row = conn.execute("SELECT pg_log_standby_snapshot()").fetchone()
        assert row is not None and int(LSN.parse(row[0])) == server.end_of_wal
        conn.execute("CHECKPOINT")
    recording = make_walsender(script=GOLDEN / "pg16" / "messages.v2-stream.jsonl")
    with psycopg.connect(recording.dsn(), autocommit=True) as conn:
        for statement in ("CHECKPOINT", "SELECT pg_log_standby_snapshot()"):
            with pytest.raises(psycopg.errors.FeatureNotSupported, match="cannot run"):
                conn.execute(statement)


def test_a_record_lists_each_xid_of_the_open_transactions_once() -> None:
    """50 bytes and 4 per xid listed (measured on 14-18): the open transaction's own
    and its subtransactions' that wrote, each once however many changes it wrote, and
    none of a write that failed."""
    wal = LiveWal(_script())
    txn = wal.begin()
    wal.write(txn, [insert(TABLE, id=i, v="a") for i in range(3)])
    sizes = []

    def record_size() -> int:
        record = wal.log_running_xacts()
        assert record is not None
        sizes.append(record.end_lsn - record.lsn)
        return len(wal.compiled.running_xids())

    assert record_size() == 1
    wal.write(txn, [savepoint("a"), insert(TABLE, id=10, v="b"), insert(TABLE, id=11, v="c")])
    assert record_size() == 2
    with pytest.raises(ScriptError):  # no such table: nothing of the write is kept
        wal.write(txn, [savepoint("b"), insert(TABLE, id=20, v="d"), insert("public.nope", id=1)])
    assert record_size() == 2
    other = wal.begin()
    wal.write(other, [insert(TABLE, id=30, v="f")])
    assert record_size() == 3
    wal.finish(txn)
    assert record_size() == 1
    assert sizes == [56, 64, 64, 64, 56]
