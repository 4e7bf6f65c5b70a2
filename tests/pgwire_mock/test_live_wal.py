"""A live WAL: transactions written while clients stream, and wait_for steps.

The script layer (:class:`LiveWal`: what is written, what a wait holds back, an append
that does not fit changes nothing), the steps' file form, and the server through the
pytest handle: streaming clients receive a commit at once, the end of WAL moves with it,
a consumer killed before acknowledging gets the transaction again after its restart and
nothing twice, and wait_for holds the WAL until a slot confirms (or a timeout passes).
The same story against real PostgreSQL: tests/conformance/test_live_wal_postgres.py.
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg2
import pytest
from psycopg2 import extras

from codec.pgoutput import Commit, Decoder, Insert, Update
from pgwire_mock.pytest_plugin import WalSender
from pgwire_mock.script import (
    EndOfWal,
    Script,
    ScriptError,
    Send,
    StreamOptions,
    Transaction,
    WaitFor,
    column,
    dump_script,
    encode_stream,
    insert,
    loads_script,
    loads_steps,
    update,
)
from pgwire_mock.script.live import LiveWal

TABLE = "public.t"
GOLDEN = Path(__file__).parent.parent / "data" / "golden"


def script(major: int = 16) -> Script:
    return (
        Script(pg_version=major)
        .table(TABLE, columns=[column("id", "int4", key=True), column("v", "text")])
        .publication("pub", tables=[TABLE])
        .slot("s")
    )


OPTIONS = StreamOptions(proto_version=1, publication_names=("pub",))


# --- the script layer -----------------------------------------------------------------------


def test_a_live_wal_stops_at_its_end_and_goes_on_after_an_append() -> None:
    wal = LiveWal(script().transaction([insert(TABLE, id=1, v="a")]))
    events = encode_stream(wal.compiled, OPTIONS)
    first = [next(events) for _ in range(4)]
    assert [e.payload[:1] for e in first if isinstance(e, Send)] == [b"B", b"R", b"I", b"C"]
    end = next(events)
    assert end == EndOfWal(wal.end_lsn)
    assert next(events) == end  # nothing new: the same end again
    new_end = wal.append([Transaction((insert(TABLE, id=2, v="b"),))])
    assert new_end > end.lsn
    more = [next(events) for _ in range(3)]
    assert [e.payload[:1] for e in more if isinstance(e, Send)] == [b"B", b"I", b"C"]
    assert next(events) == EndOfWal(new_end)


def test_a_wait_for_step_holds_back_what_follows_it() -> None:
    s = script().transaction([insert(TABLE, id=1, v="a")]).wait_for(slot="s")
    s.transaction([insert(TABLE, id=2, v="b")])
    wal = LiveWal(s)
    held = wal.held
    assert held is not None and wal.wait() == WaitFor(slot="s")
    assert wal.end_lsn == held.lsn  # the WAL ends before the wait
    sent = until_end(encode_stream(wal.compiled, OPTIONS))
    assert [e.payload[:1] for e in sent if isinstance(e, Send)] == [b"B", b"R", b"I", b"C"]
    wal.release()
    assert wal.held is None
    assert wal.end_lsn == wal.compiled.end_lsn > held.lsn


def until_end(events: Iterator[object]) -> list[object]:
    out = []
    for event in events:
        if isinstance(event, EndOfWal):
            return out
        out.append(event)
    raise AssertionError("a live WAL's stream ended")


def test_an_append_that_does_not_fit_changes_nothing() -> None:
    wal = LiveWal(script().transaction([insert(TABLE, id=1, v="a")]))
    end, steps = wal.end_lsn, len(wal.compiled.script.steps)
    with pytest.raises(ScriptError, match="no_such"):
        wal.append([Transaction((insert("public.no_such", id=1),))])
    assert (wal.end_lsn, len(wal.compiled.script.steps)) == (end, steps)
    with pytest.raises(ScriptError):
        wal.append([Transaction((insert(TABLE, id=2, v="b"), update(TABLE, id=1, nope="x")))])
    assert wal.end_lsn == end
    with pytest.raises(ScriptError, match="unknown step Insert"):
        wal.append([insert(TABLE, id=2, v="b")])  # type: ignore[list-item]
    # The compiler is still sound: the xid and LSN go on from where they were.
    assert wal.append([Transaction((insert(TABLE, id=2, v="b"),))]) > end
    txns = [e for e in until_end(encode_stream(wal.compiled, OPTIONS)) if isinstance(e, Send)]
    assert [e.payload[:1] for e in txns] == [b"B", b"R", b"I", b"C", b"B", b"I", b"C"]


def test_appending_leaves_the_given_script_as_it_was() -> None:
    """Two servers of one Script (a test module's constant): the second starts without
    what the first one's test appended."""
    given = script().transaction([insert(TABLE, id=1, v="a")])
    first = LiveWal(given)
    first.append([Transaction((insert(TABLE, id=2, v="b"),))])
    assert len(given.steps) == 1
    assert LiveWal(given).end_lsn < first.end_lsn


def test_wait_for_steps_round_trip_through_yaml() -> None:
    s = script().wait_for().wait_for(slot="s", timeout=5).wait_for(confirmed=False, seconds=1.5)
    text = dump_script(s)
    assert "wait_for: confirmed" in text
    assert loads_script(text) == s
    assert loads_steps("- wait_for: {seconds: 2}\n") == [WaitFor(confirmed=False, seconds=2)]
    with pytest.raises(ScriptError, match="unknown key 'slott'"):
        loads_steps("wait_for: {slott: s}")
    with pytest.raises(ScriptError, match="seconds >= 0"):
        LiveWal(script().wait_for(seconds=-1))


def test_steps_parse_as_one_a_list_or_a_steps_mapping() -> None:
    one = loads_steps("transaction: [{insert: public.t, values: {id: 1, v: a}}]")
    assert (
        loads_steps(
            '{"steps": [{"transaction": [{"insert": "public.t", "values": {"id": 1, "v": "a"}}]}]}'
        )
        == one
    )
    assert len(loads_steps("- message: {prefix: p, content: c}\n- sleep: 1\n")) == 2


# --- the server -----------------------------------------------------------------------------


class Consumer:
    """psycopg2 streaming from slot s, decoding inserts' ids."""

    def __init__(self, server: WalSender) -> None:
        self.conn = psycopg2.connect(
            server.dsn(), connection_factory=extras.LogicalReplicationConnection
        )
        self.cur = self.conn.cursor()
        self.cur.start_replication(
            slot_name="s", decode=False, options={"proto_version": "1", "publication_names": "pub"}
        )
        self.decoder = Decoder()

    def transaction(self, *, acknowledge: bool, timeout: float = 5.0) -> list[object]:
        """The next transaction's changes (as (tag, id)); acknowledges its commit if told."""
        changes: list[object] = []
        deadline = time.monotonic() + timeout
        while True:
            message = self.cur.read_message()
            if message is None:
                if time.monotonic() > deadline:
                    raise TimeoutError("no commit within the timeout")
                select.select([self.conn], [], [], 0.05)
                continue
            decoded = self.decoder.decode(bytes(message.payload))
            if isinstance(decoded, Insert | Update):
                changes.append((bytes(message.payload)[:1].decode(), decoded.new_tuple[0]))
            elif isinstance(decoded, Commit):
                if acknowledge:
                    self.cur.send_feedback(flush_lsn=message.data_start, force=True)
                return changes

    def nothing_within(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            message = self.cur.read_message()
            if message is not None:
                return False
            select.select([self.conn], [], [], 0.02)
        return True

    def kill(self) -> None:
        self.conn.close()


def xlogpos(server: WalSender) -> int:
    conn = psycopg2.connect(server.dsn(), connection_factory=extras.LogicalReplicationConnection)
    try:
        cur = conn.cursor()
        cur.execute("IDENTIFY_SYSTEM")
        row = cur.fetchone()
        high, low = str(row[2]).split("/")
        return (int(high, 16) << 32) | int(low, 16)
    finally:
        conn.close()


def test_a_commit_reaches_a_streaming_client_at_once_and_moves_the_end_of_wal(
    make_walsender: Callable[..., WalSender],
) -> None:
    server = make_walsender(script(), idle_keepalive_interval=3600)
    consumer = Consumer(server)
    try:
        assert consumer.nothing_within(0.2)
        before = server.end_of_wal
        start = time.monotonic()
        end = server.commit([insert(TABLE, id=1, v="a")])
        assert consumer.transaction(acknowledge=True) == [("I", "1")]
        assert time.monotonic() - start < 1.0  # no keepalive interval or poll in between
        assert end > before and server.end_of_wal == end == xlogpos(server)
        server.wait_confirmed("s")
        assert server.slots["s"].confirmed_flush == end
    finally:
        consumer.kill()


def test_killed_before_acknowledging_the_consumer_gets_it_again_and_nothing_twice(
    make_walsender: Callable[..., WalSender],
) -> None:
    """The README's story: commit, applied; commit, killed before the flush; two commits
    while it is down; after the restart, everything unacknowledged exactly once."""
    server = make_walsender(script())
    consumer = Consumer(server)
    server.commit([insert(TABLE, id=1, v="a")])
    assert consumer.transaction(acknowledge=True) == [("I", "1")]
    server.commit([update(TABLE, id=1, v="b")])
    assert consumer.transaction(acknowledge=False) == [("U", "1")]
    consumer.kill()
    server.commit([insert(TABLE, id=2, v="c")])
    end = server.commit([insert(TABLE, id=3, v="d")])
    consumer = Consumer(server)
    got = [consumer.transaction(acknowledge=True) for _ in range(3)]
    assert got == [[("U", "1")], [("I", "2")], [("I", "3")]]
    assert consumer.nothing_within(0.3)
    server.wait_confirmed("s", end)
    consumer.kill()


def test_two_clients_both_receive_a_commit(make_walsender: Callable[..., WalSender]) -> None:
    s = script()
    s.slot("s2")
    server = make_walsender(s)
    one = Consumer(server)
    two = psycopg2.connect(server.dsn(), connection_factory=extras.LogicalReplicationConnection)
    cur = two.cursor()
    cur.start_replication(
        slot_name="s2", decode=False, options={"proto_version": "1", "publication_names": "pub"}
    )
    server.commit([insert(TABLE, id=7, v="x")])
    assert one.transaction(acknowledge=False) == [("I", "7")]
    tags: list[bytes] = []
    deadline = time.monotonic() + 5
    while b"C" not in tags and time.monotonic() < deadline:
        message = cur.read_message()
        if message is None:
            select.select([two], [], [], 0.05)
        else:
            tags.append(bytes(message.payload)[:1])
    assert tags == [b"B", b"R", b"I", b"C"]
    one.kill()
    two.close()


def test_wait_for_holds_the_wal_until_the_slot_confirms(
    make_walsender: Callable[..., WalSender],
) -> None:
    s = script().transaction([insert(TABLE, id=1, v="a")]).wait_for(slot="s")
    s.transaction([insert(TABLE, id=2, v="b")])
    server = make_walsender(s)
    held_end = server.end_of_wal
    assert xlogpos(server) == held_end
    consumer = Consumer(server)
    assert consumer.transaction(acknowledge=False) == [("I", "1")]
    assert consumer.nothing_within(0.3)  # unacknowledged: the wait holds
    assert server.end_of_wal == held_end
    consumer.kill()
    consumer = Consumer(server)
    assert consumer.transaction(acknowledge=True) == [("I", "1")]
    assert consumer.transaction(acknowledge=True) == [("I", "2")]  # written once confirmed
    assert server.end_of_wal > held_end
    consumer.kill()


def test_wait_for_seconds_and_a_timeout_write_on_by_themselves(
    make_walsender: Callable[..., WalSender],
) -> None:
    s = script().wait_for(confirmed=False, seconds=0.3)
    s.transaction([insert(TABLE, id=1, v="a")]).wait_for(timeout=0.3)
    s.transaction([insert(TABLE, id=2, v="b")])
    server = make_walsender(s)
    consumer = Consumer(server)
    start = time.monotonic()
    assert consumer.transaction(acknowledge=False) == [("I", "1")]
    assert consumer.transaction(acknowledge=False) == [("I", "2")]  # never confirmed
    assert time.monotonic() - start >= 0.55
    assert any("did not confirm" in line for line in server.log)
    consumer.kill()


def test_appending_to_a_recording_is_refused(make_walsender: Callable[..., WalSender]) -> None:
    server = make_walsender(GOLDEN / "pg16" / "messages.v2-stream.jsonl")
    with pytest.raises(TypeError, match="not a script"):
        server.commit([insert(TABLE, id=1, v="a")])


def test_the_client_yields_what_came_before_an_error_in_the_same_read() -> None:
    """A transaction sent whole, then the error at the next one's change, arrive in one
    read: ReplicationConnection yields the transaction before it raises (it used to raise
    at once, and a consumer lost a transaction PostgreSQL had sent it)."""
    from pgwire_mock.client import ReplicationConnection, ServerError, WalData
    from pgwire_mock.pytest_plugin import start_walsender
    from pgwire_mock.script import CreatePublication, DropPublication, Publication

    steps = (
        Script(pg_version=15).table("public.t", columns=[column("id", "int4", key=True)]).slot("s")
    )
    steps.steps.append(CreatePublication(Publication("p", ("public.t",))))
    steps.transaction([insert("public.t", id=1)])
    steps.steps.append(DropPublication("p"))
    steps.transaction([insert("public.t", id=2)])
    server = start_walsender(steps)
    try:
        consumer = ReplicationConnection.connect(server.dsn(), timeout=5, decode_pgoutput=True)
        received = []
        with pytest.raises(ServerError, match='publication "p" does not exist'):
            for event in consumer.start_replication(
                "s", 0, {"proto_version": "1", "publication_names": "p"}
            ):
                if isinstance(event, WalData):
                    received.append(type(event.message).__name__)
        consumer.close()
    finally:
        server.stop()
    assert received == ["Begin", "Relation", "Insert", "Commit"]
