"""``WalSender.restart``: a fast shutdown and start of the fake, as ``pg_ctl restart -m
fast`` does to PostgreSQL. The same story against real 14-18:
tests/conformance/test_server_restart_postgres.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from pgwire_mock.client import (
    CommandResult,
    ConnectionLostError,
    Keepalive,
    ReplicationConnection,
    ServerError,
    WalData,
)
from pgwire_mock.pytest_plugin import WalSender
from pgwire_mock.script import Script, ScriptError, column, insert
from pgwire_mock.server import RecordingSource
from pgwire_mock.server.live import ShuttingDownError
from pgwire_mock.streamfile import StreamEntry

TABLE = "public.t"
Make = Callable[..., WalSender]


def _script(major: int) -> Script:
    return (
        Script(pg_version=major, logical_decoding_work_mem=64)
        .table(TABLE, columns=[column("id", "int4", key=True), column("v", "text")])
        .publication("pub", tables=[TABLE])
        .slot("s")
    )


def _stream(server: WalSender, **options: str) -> tuple[ReplicationConnection, Iterator[object]]:
    conn = ReplicationConnection.connect(server.dsn(), timeout=10, auto_reply=False)
    events = conn.start_replication(
        "s", 0, {"proto_version": "1", "publication_names": "pub", **options}
    )
    return conn, events


def _commit_and_confirm(
    server: WalSender, conn: ReplicationConnection, events: Iterator[object], key: int
) -> int:
    end = server.commit([insert(TABLE, id=key, v="x")])
    for event in events:
        if isinstance(event, WalData) and event.payload[:1] == b"C":
            conn.send_status(flush=event.wal_start)
            return end
    raise AssertionError("no commit")


def _restart_in_background(server: WalSender, **kwargs: float) -> threading.Thread:
    thread = threading.Thread(target=server.restart, kwargs=kwargs, daemon=True)
    thread.start()
    server.wait_until(lambda s: s.with_state(lambda state: state.shutting_down))
    return thread


@pytest.mark.parametrize(("major", "kept"), [(16, False), (17, True)])
def test_restart_writes_a_checkpoint_and_keeps_what_the_major_saves(
    make_walsender: Make, major: int, kept: bool
) -> None:
    """A consumer that confirmed everything: COPY 0 at once. After the restart the end of
    WAL is 120 bytes on (the shutdown checkpoint); 17 kept the confirmation, 16 the
    position the slot was last saved at (the script's start)."""
    server = make_walsender(_script(major))
    start = server.slots["s"].confirmed_flush
    conn, events = _stream(server)
    end = _commit_and_confirm(server, conn, events, 1)
    server.wait_confirmed("s", end)
    thread = _restart_in_background(server)
    seen = []
    with pytest.raises(ConnectionLostError):
        for event in events:
            seen.append(event)
    thread.join(10)
    assert [e.command_tag for e in seen if isinstance(e, CommandResult)] == ["COPY 0"]
    assert not any(isinstance(e, Keepalive) and e.reply_requested for e in seen)
    assert server.end_of_wal == end + 120
    assert server.slots["s"].confirmed_flush == (end if kept else start)
    assert not server.slots["s"].active
    again = ReplicationConnection.connect(server.dsn(), timeout=10)
    assert int(again.identify_system().xlogpos) == end + 120
    again.close()


def test_connections_during_the_shutdown_are_refused_and_idle_ones_ended(
    make_walsender: Make,
) -> None:
    server = make_walsender(_script(18))
    idle = ReplicationConnection.connect(server.dsn(), timeout=10)
    conn, events = _stream(server)
    _commit_and_confirm(server, conn, events, 1)
    server.commit([insert(TABLE, id=2, v="y")])  # sent, never confirmed: the wait holds
    thread = _restart_in_background(server)
    with pytest.raises(ServerError) as refused:
        ReplicationConnection.connect(server.dsn(), timeout=10)
    fields = {code: refused.value.get(code) for code in "CMFLR"}
    assert fields == {
        "C": "57P03",
        "M": "the database system is shutting down",
        "F": "backend_startup.c",
        "L": "333",
        "R": "BackendInitialize",
    }
    with pytest.raises(ServerError) as ended:
        idle.identify_system()
    assert (ended.value.get("C"), ended.value.get("L")) == ("57P01", "3356")
    for event in events:  # the second commit, then the reply request
        if isinstance(event, Keepalive) and event.reply_requested:
            conn.send_status(flush=event.wal_end)
            break
    thread.join(10)
    assert not thread.is_alive()
    assert not server.with_state(lambda state: state.shutting_down)


def test_a_consumer_that_never_answers_is_dropped_at_wal_sender_timeout(
    make_walsender: Make,
) -> None:
    server = make_walsender(_script(17), wal_sender_timeout=1.0)
    conn, events = _stream(server)
    _commit_and_confirm(server, conn, events, 1)
    server.commit([insert(TABLE, id=2, v="y")])
    started = time.monotonic()
    thread = _restart_in_background(server, timeout=10)
    seen = []
    with pytest.raises(ConnectionLostError):
        for event in events:
            seen.append(event)
    thread.join(10)
    assert not thread.is_alive()
    assert 0.5 < time.monotonic() - started < 5
    assert not any(isinstance(e, CommandResult) for e in seen)  # no COPY 0: a timeout
    assert "terminating walsender process due to replication timeout" in "\n".join(server.log)


def test_a_consumer_answering_without_confirming_holds_the_shutdown(make_walsender: Make) -> None:
    """It answers every reply request with an older position: PostgreSQL asks again
    for ever (the shutdown waits); so does the fake, and restart() gives up."""
    server = make_walsender(_script(17))
    conn, events = _stream(server)
    first = _commit_and_confirm(server, conn, events, 1)
    server.commit([insert(TABLE, id=2, v="y")])
    failure: list[BaseException] = []

    def restart() -> None:
        try:
            server.restart(timeout=1.0)
        except TimeoutError as err:
            failure.append(err)

    thread = threading.Thread(target=restart, daemon=True)
    thread.start()
    asked = 0
    deadline = time.monotonic() + 1.5
    for event in events:
        if isinstance(event, Keepalive) and event.reply_requested:
            asked += 1
            conn.send_status(flush=first)
        if time.monotonic() > deadline:
            break
    thread.join(5)
    assert asked > 10
    assert failure and "did not shut down within 1s" in str(failure[0])
    conn.close()


def test_open_transactions_roll_back_and_a_streaming_consumer_gets_stream_abort(
    make_walsender: Make,
) -> None:
    server = make_walsender(_script(17))
    conn, events = _stream(server, proto_version="2", streaming="on")
    txn = server.begin()
    txn.write([insert(TABLE, id=100 + i, v="x" * 40) for i in range(600)])
    kinds = []
    for event in events:
        if isinstance(event, WalData):
            kinds.append(event.payload[:1])
            if event.payload[:1] == b"E":
                break
    thread = _restart_in_background(server)
    for event in events:
        if isinstance(event, WalData):
            kinds.append(event.payload[:1])
        if isinstance(event, Keepalive) and event.reply_requested:
            conn.send_status(flush=event.wal_end)
            break
    thread.join(10)
    assert kinds[0] == b"S" and kinds[-1] == b"A"
    assert not txn.open


def test_a_served_recording_restarts_without_a_checkpoint_record(make_walsender: Make) -> None:
    """A recording cannot grow: its end of WAL stays where it was."""
    entries = [StreamEntry(0x3000000 + 0x100 * i, b"\xff") for i in range(3)]
    server = make_walsender(RecordingSource(entries, major=16), slots=["s"])
    end = server.end_of_wal
    server.restart()
    assert server.end_of_wal == end
    ReplicationConnection.connect(server.dsn(), timeout=10).close()


def test_an_immediate_restart_drops_everyone_and_slots_fall_back_on_every_major(
    make_walsender: Make,
) -> None:
    """A crash: the stream closes without COPY 0; the open transaction can take no more
    writes and never ends; confirmed_flush is back where the slot was last saved (17
    too); a slot created afterwards does not wait for the crashed transaction."""
    server = make_walsender(_script(17), new_slots="end_of_wal")
    start = server.slots["s"].confirmed_flush
    conn, events = _stream(server)
    end = _commit_and_confirm(server, conn, events, 1)
    server.wait_confirmed("s", end)
    txn = server.begin()
    txn.write([insert(TABLE, id=2, v="y")])
    server.restart(immediate=True)
    seen = []
    with pytest.raises(ConnectionLostError):
        for event in events:
            seen.append(event)
    assert not any(isinstance(e, CommandResult) for e in seen)
    assert server.slots["s"].confirmed_flush == start
    assert server.end_of_wal > end
    assert not txn.open
    with pytest.raises(ScriptError, match="the transaction has ended"):
        txn.write([insert(TABLE, id=3, v="z")])
    creator = ReplicationConnection.connect(server.dsn(), timeout=10)
    created = creator.create_slot("after_the_crash")
    assert created.slot_name == "after_the_crash"
    creator.close()


def test_nothing_is_written_while_the_server_restarts(make_walsender: Make) -> None:
    """On PostgreSQL a session that would write is refused (57P03) or ended (57P01)
    meanwhile: the fake's writers get ShuttingDownError, and write again after."""
    server = make_walsender(script=_script(16))
    conn, _ = _stream(server)  # confirms nothing: the shutdown waits for it
    server.commit([insert(TABLE, id=1, v="x")])
    restarting = _restart_in_background(server, timeout=30)
    server.wait_until(lambda s: s.with_state(lambda state: state.shutting_down), 10)
    for write in (
        lambda: server.commit([insert(TABLE, id=2, v="x")]),
        server.begin,
        server.log_standby_snapshot,
    ):
        with pytest.raises(ShuttingDownError, match="the database system is shutting down"):
            write()
    conn.close()
    restarting.join(30)
    assert server.commit([insert(TABLE, id=3, v="x")]) == server.end_of_wal
