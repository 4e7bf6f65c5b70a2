"""Transactions that stay open on a live WAL (``LiveWal.begin``, ``WalSender.begin``):
their changes reach the WAL as they are written, between other transactions' records,
so a walsender reads them as PostgreSQL's does and a consumer can restart in the middle.
The same stories against real PostgreSQL: tests/conformance/test_live_wal_postgres.py."""

from __future__ import annotations

import os
import re
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import psycopg2
import pytest
from psycopg2 import extras

from codec.pgoutput import (
    Begin,
    Commit,
    Decoder,
    Insert,
    PgOutputMessage,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
)
from codec.values import LSN
from pgwire_mock.pytest_plugin import WalSender
from pgwire_mock.script import (
    EndOfWal,
    Script,
    ScriptError,
    Send,
    StreamOptions,
    Transaction,
    alter_table,
    column,
    compile_script,
    dump_script,
    encode_stream,
    insert,
    loads_script,
    rollback_to_savepoint,
    savepoint,
    update,
)
from pgwire_mock.script.live import LiveWal
from pgwire_mock.script.model import BeginTransaction, Change, EndTransaction
from pgwire_mock.script.wal import WChange

TABLE = "public.t"
PROTO_1 = StreamOptions(proto_version=1, publication_names=("pub",))
STREAMING = StreamOptions(proto_version=2, streaming="on", publication_names=("pub",))


def script(major: int = 16) -> Script:
    return (
        Script(pg_version=major, logical_decoding_work_mem=64)
        .table(TABLE, columns=[column("id", "int4", key=True), column("v", "text")])
        .publication("pub", tables=[TABLE])
        .slot("s")
    )


def rows(first: int, count: int) -> list[Change]:
    return [insert(TABLE, id=first + i, v=f"row {i:04d} " + "x" * 40) for i in range(count)]


def until_end(events: Iterator[object]) -> list[PgOutputMessage]:
    """The messages sent up to the end of what is written."""
    decoder = Decoder()
    out: list[PgOutputMessage] = []
    for event in events:
        if isinstance(event, EndOfWal):
            return out
        if isinstance(event, Send):
            out.append(decoder.decode(event.payload))
    raise AssertionError("a live WAL's stream ended")


def kinds(messages: list[PgOutputMessage]) -> list[str]:
    return [type(m).__name__ for m in messages]


# --- the script layer -----------------------------------------------------------------------


def test_an_open_transaction_is_in_the_wal_but_sent_only_at_its_commit() -> None:
    wal = LiveWal(script())
    events = encode_stream_at(wal, PROTO_1)
    start = wal.end_lsn
    txn = wal.begin()
    assert wal.end_lsn == start  # nothing written yet
    end = wal.write(txn, rows(1, 3))
    assert end > start and wal.compiled.oldest_running_lsn() == start
    assert until_end(events) == []  # in progress: nothing to decode
    commit_end = wal.finish(txn, rollback=False)
    assert wal.compiled.oldest_running_lsn() is None
    sent = until_end(events)
    assert kinds(sent) == ["Begin", "Relation", "Insert", "Insert", "Insert", "Commit"]
    commit = sent[-1]
    assert isinstance(commit, Commit) and commit.end_lsn == commit_end == wal.end_lsn
    with pytest.raises(ScriptError, match="has ended"):
        wal.write(txn, rows(10, 1))


def encode_stream_at(wal: LiveWal, options: StreamOptions, from_lsn: int = 0) -> Iterator[object]:
    return encode_stream(wal.compiled, options, from_lsn=from_lsn)


def test_a_transaction_committed_meanwhile_comes_first_and_the_open_one_keeps_its_start() -> None:
    wal = LiveWal(script())
    events = encode_stream_at(wal, PROTO_1)
    long = wal.begin()
    wal.write(long, rows(1, 2))
    short_end = wal.append([Transaction((insert(TABLE, id=100, v="short"),))])
    wal.write(long, [update(TABLE, id=1, v="changed")])
    sent = until_end(events)
    assert kinds(sent) == ["Begin", "Relation", "Insert", "Commit"]  # only the short one
    short_begin = sent[0]
    assert isinstance(short_begin, Begin)
    assert isinstance(sent[-1], Commit) and sent[-1].end_lsn == short_end
    long_end = wal.finish(long, rollback=False)
    sent = until_end(events)
    assert kinds(sent) == ["Begin", "Insert", "Insert", "Update", "Commit"]
    begin, commit = sent[0], sent[-1]
    assert isinstance(begin, Begin) and isinstance(commit, Commit)
    assert begin.final_lsn == commit.commit_lsn and commit.end_lsn == long_end
    assert begin.xid < short_begin.xid  # its first write came first
    # A walsender starting after both reads them in commit order too, and one confirmed
    # past the short one (inside the long one) gets the long one whole.
    later = until_end(encode_stream_at(wal, PROTO_1))
    assert kinds(later) == ["Begin", "Relation", "Insert", "Commit", *kinds(sent)]
    again = until_end(encode_stream_at(wal, PROTO_1, from_lsn=short_end))
    assert kinds(again) == ["Begin", "Relation", "Insert", "Insert", "Update", "Commit"]


def test_an_open_transaction_streams_as_it_passes_the_memory_limit() -> None:
    wal = LiveWal(script())
    events = encode_stream_at(wal, STREAMING)
    txn = wal.begin()
    wal.write(txn, rows(1, 200))
    assert until_end(events) == []  # under 64 kB so far
    wal.write(txn, rows(1000, 400))
    blocks = until_end(events)
    assert kinds(blocks)[:2] == ["StreamStart", "Relation"] and kinds(blocks)[-1] == "StreamStop"
    first = blocks[0]
    assert isinstance(first, StreamStart) and first.first_segment
    streamed = sum(isinstance(m, Insert) for m in blocks)
    assert 0 < streamed < 600
    wal.finish(txn, rollback=False)
    rest = until_end(events)
    assert kinds(rest)[0] == "StreamStart" and kinds(rest)[-1] == "StreamCommit"
    assert streamed + sum(isinstance(m, Insert) for m in rest) == 600


def test_restarted_inside_an_open_transaction_it_is_decoded_again_from_its_first_change() -> None:
    """A consumer that confirmed a keepalive's position inside the transaction (its
    restart_lsn held at the first change) gets the transaction whole after a restart:
    never streamed from before the confirmed position, so its first block again holds
    everything from the start, with first_segment set."""
    wal = LiveWal(script())
    txn = wal.begin()
    wal.write(txn, rows(1, 600))
    streamed_before = until_end(encode_stream_at(wal, STREAMING))
    assert isinstance(streamed_before[0], StreamStart)
    confirmed = wal.end_lsn  # the keepalive's position, inside the transaction
    restarted = encode_stream_at(wal, STREAMING, from_lsn=confirmed)
    assert until_end(restarted) == []  # before the confirmed position: spilled, not streamed
    wal.write(txn, rows(1000, 10))
    blocks = until_end(restarted)
    assert isinstance(blocks[0], StreamStart) and blocks[0].first_segment
    # Spilled, it streams at its first change that may stream (ReorderBufferProcess-
    # PartialChange): everything before, and that one.
    assert sum(isinstance(m, Insert) for m in blocks) == 601
    wal.finish(txn, rollback=False)
    rest = until_end(restarted)
    assert kinds(rest)[0] == "StreamStart" and kinds(rest)[-1] == "StreamCommit"
    assert sum(isinstance(m, Insert) for m in rest) == 9
    # Not streaming: the whole transaction at its commit.
    whole = until_end(encode_stream_at(wal, PROTO_1, from_lsn=confirmed))
    assert kinds(whole)[:2] == ["Begin", "Relation"]
    assert sum(isinstance(m, Insert) for m in whole) == 610


def test_a_rolled_back_open_transaction_that_streamed_gets_a_stream_abort() -> None:
    wal = LiveWal(script())
    events = encode_stream_at(wal, STREAMING)
    txn = wal.begin()
    wal.write(txn, [*rows(1, 10), savepoint("s1"), *rows(100, 600)])
    assert isinstance(until_end(events)[0], StreamStart)
    wal.write(txn, [rollback_to_savepoint("s1")])
    sub_abort = until_end(events)
    assert kinds(sub_abort) == ["StreamAbort"]
    wal.finish(txn, rollback=True)
    top_abort = until_end(events)
    assert kinds(top_abort) == ["StreamAbort"]
    assert isinstance(top_abort[0], StreamAbort) and top_abort[0].xid == top_abort[0].subxid
    # Not streaming, the rolled-back transaction is never sent.
    assert until_end(encode_stream_at(wal, PROTO_1)) == []


def test_a_write_that_does_not_fit_writes_nothing_and_the_transaction_goes_on() -> None:
    wal = LiveWal(script())
    txn = wal.begin()
    wal.write(txn, rows(1, 1))
    end = wal.end_lsn
    with pytest.raises(ScriptError, match="no column 'nope'"):
        wal.write(txn, [savepoint("a"), *rows(2, 1), update(TABLE, id=1, nope="x")])
    # A column added by a write that failed is gone with it.
    with pytest.raises(ScriptError, match="no column 'nope'"):
        wal.write(txn, [alter_table(TABLE, add=[column("w", "int4")]), update(TABLE, id=1, nope=1)])
    with pytest.raises(ScriptError, match="no column 'w'"):
        wal.write(txn, [update(TABLE, id=1, w=1)])
    assert wal.end_lsn == end and len(txn.wtxn.items) == 1 and txn.stack == [txn.wtxn.top]
    wal.write(txn, [savepoint("a"), *rows(2, 1)])
    wal.finish(txn, rollback=False)
    sent = until_end(encode_stream_at(wal, PROTO_1))
    inserts = [m for m in sent if isinstance(m, Insert)]
    assert [m.xid for m in sent if isinstance(m, Begin)] == [txn.wtxn.top.xid]
    assert len(inserts) == 2
    # The subtransaction got the next xid after the top one: the failed write used none.
    second, top = txn.wtxn.items[1], txn.wtxn.top.xid
    assert isinstance(second, WChange) and top is not None and second.sub.xid == top + 1


def test_a_wait_for_step_holds_back_an_open_transactions_later_records() -> None:
    wal = LiveWal(script())
    events = encode_stream_at(wal, STREAMING)
    txn = wal.begin()
    wal.write(txn, rows(1, 200))
    wal.append(script().wait_for(slot="s").steps)
    held = wal.end_lsn
    assert wal.write(txn, rows(1000, 400)) == held  # compiled, not written yet
    assert until_end(events) == []  # the 200 rows before the wait: under the limit
    wal.finish(txn, rollback=False)  # its commit waits too: in progress for clients
    assert wal.end_lsn == held and until_end(events) == []
    assert wal.compiled.oldest_running_lsn() == txn.wtxn.first_lsn
    wal.release()
    sent = until_end(events)
    assert kinds(sent)[0] == "StreamStart" and kinds(sent)[-1] == "StreamCommit"
    assert sum(isinstance(m, Insert) for m in sent) == 600
    assert wal.compiled.oldest_running_lsn() is None


def test_an_open_transaction_can_end_prepared() -> None:
    """PREPARE TRANSACTION: a two-phase client gets it at the prepare (streamed, since it
    passed the memory limit while open), COMMIT PREPARED later; one without two-phase
    decoding gets it whole at COMMIT PREPARED. A gid in use is refused."""
    two_phase = StreamOptions(
        proto_version=3, streaming="on", two_phase=True, publication_names=("pub",)
    )
    wal = LiveWal(script())
    events = encode_stream_at(wal, two_phase)
    txn = wal.begin()
    wal.write(txn, rows(1, 600))
    assert kinds(until_end(events))[0] == "StreamStart"
    with pytest.raises(ScriptError, match="exclude each other"):
        wal.finish(txn, prepare="g1", rollback=True)
    prepared_end = wal.finish(txn, prepare="g1")
    sent = until_end(events)
    assert kinds(sent)[-1] == "StreamPrepare" and sent[-1].end_lsn == prepared_end  # type: ignore[attr-defined]
    other = wal.begin()
    with pytest.raises(ScriptError, match="already exists"):
        wal.finish(other, prepare="g1")
    wal.append(script().commit_prepared("g1").steps)
    assert kinds(until_end(events)) == ["CommitPrepared"]
    whole = until_end(encode_stream_at(wal, PROTO_1))
    assert kinds(whole)[:2] == ["Begin", "Relation"] and kinds(whole)[-1] == "Commit"
    assert sum(isinstance(m, Insert) for m in whole) == 600


def test_a_prepared_transaction_holds_the_restart_bound_until_finished() -> None:
    """A prepared transaction, ended open or written whole by a step, bounds restart_lsn
    at its first record until its COMMIT or ROLLBACK PREPARED is written (a wait_for step
    holding that back holds the bound too), as PostgreSQL keeps it in the reorder buffer
    (tests/conformance, run_prepared_restart_lsn_story)."""
    wal = LiveWal(script())
    txn = wal.begin()
    wal.write(txn, rows(1, 3))
    wal.finish(txn, prepare="g1")
    assert wal.compiled.oldest_running_lsn() == txn.wtxn.first_lsn
    wal.append(script().transaction([insert(TABLE, id=10, v="x")], prepare="g2").steps)
    wal.append(script().commit_prepared("g1").steps)
    second = wal.compiled.prepares[1]
    assert second.gid == "g2" and wal.compiled.oldest_running_lsn() == second.first_lsn
    wal.append(script().wait_for(slot="s").rollback_prepared("g2").steps)
    assert wal.compiled.oldest_running_lsn() == second.first_lsn  # compiled, not written
    wal.release()
    assert wal.compiled.oldest_running_lsn() is None
    # Written whole, with its COMMIT PREPARED: nothing held.
    assert (
        compile_script(
            script().transaction([insert(TABLE, id=1)], prepare="g").commit_prepared("g")
        ).oldest_running_lsn()
        is None
    )


def squeezed(messages: list[PgOutputMessage]) -> list[str]:
    """The message kinds, each run of Inserts as one ``Insert*n``."""
    out: list[str] = []
    for kind in kinds(messages):
        if kind == "Insert" and out and out[-1].startswith("Insert"):
            count = int(out[-1].partition("*")[2] or 1)
            out[-1] = f"Insert*{count + 1}"
        else:
            out.append(kind)
    return out


@pytest.mark.parametrize("commit", [True, False])
def test_a_transaction_prepared_without_two_phase_counts_until_it_is_finished(
    commit: bool,
) -> None:
    """decode.c keeps a transaction prepared for a client without two-phase decoding in
    the reorder buffer until COMMIT or ROLLBACK PREPARED: A (250 rows, prepared) and B
    (200 rows, open) pass the 64 kB limit together, so A, the larger, streams. Measured on
    PostgreSQL 17 with pg_logical_slot_peek_binary_changes (after the fact: a rolled-back
    A is cut short at its first catalog lookup, an empty block); live, A streams whole."""
    wal = LiveWal(script(17))
    events = encode_stream_at(wal, STREAMING)
    a = wal.begin()
    wal.write(a, rows(30000, 250))
    wal.finish(a, prepare="g1")
    b = wal.begin()
    wal.write(b, rows(40000, 200))
    block = ["StreamStart", "Relation", "Insert*250", "StreamStop"]
    assert squeezed(until_end(events)) == block
    step = script().commit_prepared("g1") if commit else script().rollback_prepared("g1")
    wal.append(step.steps)
    wal.finish(b, rollback=False)
    tail = (
        ["Begin", "Insert*200", "Commit"]
        if commit
        else ["Begin", "Relation", "Insert*200", "Commit"]
    )
    ended = ["StreamCommit"] if commit else ["StreamAbort"]
    assert squeezed(until_end(events)) == ended + tail
    if not commit:
        block = ["StreamStart", "StreamStop"]
    assert squeezed(until_end(encode_stream_at(wal, STREAMING))) == block + ended + tail
    # Without streaming A is spilled, not sent: it comes whole at COMMIT PREPARED.
    whole = squeezed(until_end(encode_stream_at(wal, PROTO_1)))
    a_whole = ["Begin", "Relation", "Insert*250", "Commit"] if commit else []
    assert whole == a_whole + (tail if commit else ["Begin", "Relation", "Insert*200", "Commit"])


def test_a_transaction_that_wrote_nothing_leaves_no_trace() -> None:
    wal = LiveWal(script())
    end = wal.end_lsn
    txn = wal.begin()
    wal.write(txn, [savepoint("a")])
    assert wal.finish(txn, rollback=False) == end == wal.end_lsn
    assert until_end(encode_stream_at(wal, PROTO_1)) == []


# --- the server -----------------------------------------------------------------------------


class Consumer:
    """psycopg2 on slot s, as CDC consumers are written: acknowledges keepalives' positions
    once it has nothing left to apply (as pg_recvlogical does)."""

    def __init__(self, server: WalSender, options: dict[str, str], slot: str = "s") -> None:
        self.conn = psycopg2.connect(
            server.dsn(), connection_factory=extras.LogicalReplicationConnection
        )
        self.cur = self.conn.cursor()
        self.cur.start_replication(
            slot_name=slot, decode=False, options={**options, "publication_names": "pub"}
        )
        self.decoder = Decoder()

    def read(self, until: type, timeout: float = 10.0) -> list[PgOutputMessage]:
        out: list[PgOutputMessage] = []
        deadline = time.monotonic() + timeout
        while not out or not isinstance(out[-1], until):
            message = self.cur.read_message()
            if message is None:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no {until.__name__} within the timeout: {kinds(out)}")
                select.select([self.conn], [], [], 0.05)
                continue
            out.append(self.decoder.decode(bytes(message.payload)))
        return out

    def acknowledge_keepalive(self, server: WalSender, position: int) -> None:
        """Wait for a keepalive at ``position`` and confirm it."""
        deadline = time.monotonic() + 10
        while self.cur.wal_end < position:
            assert self.cur.read_message() is None, "nothing is sent while it is open"
            assert time.monotonic() < deadline, "no keepalive at the end of WAL"
            select.select([self.conn], [], [], 0.05)
        self.cur.send_feedback(flush_lsn=self.cur.wal_end, force=True)
        server.wait_confirmed("s", position)

    def kill(self) -> None:
        self.conn.close()


def test_a_consumer_restarted_inside_an_open_transaction_gets_it_whole_at_its_commit(
    make_walsender: Callable[..., WalSender],
) -> None:
    server = make_walsender(script=script(), idle_keepalive_interval=0.05)
    consumer = Consumer(server, {"proto_version": "1"})
    with server.begin() as txn:
        first = txn.write(rows(1, 2))
        start = server.slots["s"].restart_lsn
        consumer.acknowledge_keepalive(server, first)
        slot = server.slots["s"]
        assert slot.confirmed_flush == first  # inside the transaction
        assert slot.restart_lsn <= first - 1 and slot.restart_lsn >= start
        consumer.kill()
        txn.write(rows(10, 1))
        consumer = Consumer(server, {"proto_version": "1"})
    got = consumer.read(Commit)
    assert kinds(got) == ["Begin", "Relation", "Insert", "Insert", "Insert", "Commit"]
    consumer.kill()


def test_a_streaming_consumer_gets_the_blocks_again_after_a_restart(
    make_walsender: Callable[..., WalSender],
) -> None:
    options = {"proto_version": "2", "streaming": "on"}
    server = make_walsender(script=script(), idle_keepalive_interval=0.05)
    consumer = Consumer(server, options)
    txn = server.begin()
    txn.write(rows(1, 600))
    before = consumer.read(StreamStop)
    assert isinstance(before[0], StreamStart) and before[0].first_segment
    consumer.kill()
    consumer = Consumer(server, options)
    txn.write(rows(1000, 10))
    end = txn.commit()
    after = consumer.read(StreamCommit)
    assert isinstance(after[0], StreamStart) and after[0].first_segment  # from the start again
    assert sum(isinstance(m, Insert) for m in after) == 610
    assert isinstance(after[-1], StreamCommit) and after[-1].end_lsn == end
    consumer.kill()


# --- in a script file -----------------------------------------------------------------------

LIVE_SCRIPT = """\
format_version: 1
server: {pg_version: 16}
tables:
  - name: public.t
    columns: [{name: id, type: int4, key: true}, {name: v, type: text}]
publications: [{name: pub, tables: [public.t]}]
slots: [{name: s}]
steps:
  - begin: big
  - write: big
    changes: [{insert: public.t, values: {id: 1, v: a}}, {insert: public.t, values: {id: 2, v: b}}]
  - transaction: [{insert: public.t, values: {id: 100, v: short}}]
  - wait_for: {slot: s}
  - write: big
    changes: [{update: public.t, values: {id: 1, v: z}}]
  - commit: big
"""


def test_open_transactions_in_a_script_file_round_trip_and_are_checked() -> None:
    script_ = loads_script(LIVE_SCRIPT)
    assert script_.steps[0] == BeginTransaction("big")
    assert script_.steps[-1] == EndTransaction("big")
    assert loads_script(dump_script(script_)) == script_
    prepared = loads_script(LIVE_SCRIPT.replace("- commit: big", "- {prepare: big, gid: g1}"))
    assert prepared.steps[-1] == EndTransaction("big", prepare="g1")
    assert loads_script(dump_script(prepared)) == prepared
    for bad, problem in (
        ("- write: nope\n    changes: []", "steps[1]: no open transaction 'nope'"),
        ("- begin: big", "steps[1]: expected a name no open transaction has"),
        ("- prepare: big", "steps[1]: missing gid"),
        ("- {rollback: big, commit: big}", "expected exactly one of"),
    ):
        text = LIVE_SCRIPT.replace(
            "  - write: big\n    changes: [{insert",
            f"  {bad}\n  - write: big\n    changes: [{{insert",
            1,
        )
        with pytest.raises(ScriptError, match=re.escape(problem)):
            compile_script(loads_script(text))


def test_a_served_script_holds_an_open_transaction_at_a_wait_for_step(
    make_walsender: Callable[..., WalSender],
) -> None:
    """The short transaction commits inside the open one; once the consumer confirms it,
    the wait_for step releases the rest: the open transaction's update and commit."""
    server = make_walsender(script=loads_script(LIVE_SCRIPT))
    consumer = Consumer(server, {"proto_version": "1"})
    short = consumer.read(Commit)
    assert kinds(short) == ["Begin", "Relation", "Insert", "Commit"]
    held = server.end_of_wal
    assert server.slots["s"].restart_lsn < held  # the open transaction began before
    assert isinstance(short[-1], Commit)
    consumer.cur.send_feedback(flush_lsn=short[-1].end_lsn, force=True)
    big = consumer.read(Commit)
    assert kinds(big) == ["Begin", "Insert", "Insert", "Update", "Commit"]
    assert server.end_of_wal > held
    consumer.kill()


# --- creating a slot while transactions are in progress -----------------------------------


class SlotCreation:
    """CREATE_REPLICATION_SLOT on a connection of its own, in a thread: it blocks.
    (psycopg 3: psycopg2's cancel() holds the GIL while it waits for the in-process
    server, which then cannot answer.)"""

    def __init__(self, server: WalSender, name: str) -> None:
        self.conn = psycopg.connect(
            server.dsn(), autocommit=True, cursor_factory=psycopg.ClientCursor
        )
        self.row: tuple[object, ...] | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._create, args=(name,))
        self.thread.start()

    def _create(self, name: str) -> None:
        try:
            self.row = self.conn.execute(
                f"CREATE_REPLICATION_SLOT {name} LOGICAL pgoutput"
            ).fetchone()
        except psycopg.Error as err:
            self.error = err

    def waiting(self, seconds: float = 0.5) -> bool:
        self.thread.join(seconds)
        return self.thread.is_alive()

    def vanish(self) -> None:
        """The client goes away mid-command, as a process that dies: its socket is shut
        down, so the server sees the connection end, and the connection is closed only
        once the thread's execute() has failed with that. Closing it under execute() is
        not safe: psycopg's C generators keep the PGconn pointer and the socket number
        while they wait, and close() frees both without the connection's lock, so the
        waiting thread went on to read through a freed PGconn from the next connection's
        socket (reused number, often reused memory) and that connection never got its
        answer."""
        with socket.socket(fileno=os.dup(self.conn.fileno())) as sock:
            sock.shutdown(socket.SHUT_RDWR)
        assert not self.waiting(5), "the thread did not see the connection end"
        self.conn.close()


def listed(server: WalSender, name: str) -> list[tuple[object, ...]]:
    """``name``'s pg_replication_slots row (slot_name, active, confirmed_flush_lsn)."""
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        query = "SELECT slot_name, active, confirmed_flush_lsn FROM pg_replication_slots"
        return [r for r in conn.execute(query).fetchall() if r[0] == name]


def test_creating_a_slot_waits_for_the_transactions_in_progress(
    make_walsender: Callable[..., WalSender],
) -> None:
    """As snapbuild.c does: the slot is consistent only once the transaction open when it
    began has ended, and then the one that began meanwhile; it never decodes them.
    (PostgreSQL's rule for where a new slot starts: new_slots="end_of_wal".)"""
    server = make_walsender(script=script(), new_slots="end_of_wal")
    first = server.begin()
    first.write(rows(1, 2))
    creation = SlotCreation(server, "late")
    assert creation.waiting() and "late" not in server.slots
    second = server.begin()
    second.write(rows(10, 1))  # began while the slot waits: the second round
    first.commit()
    assert creation.waiting() and "late" not in server.slots
    end = second.commit()
    assert not creation.waiting(5), "the slot was not created once both ended"
    assert creation.row is not None and LSN.parse(str(creation.row[1])) >= end
    creation.conn.close()
    server.commit([insert(TABLE, id=50, v="after")])
    consumer = Consumer(server, {"proto_version": "1"}, slot="late")
    got = consumer.read(Commit)
    assert [m.new_tuple[0] for m in got if isinstance(m, Insert)] == ["50"]
    consumer.kill()


def test_a_slot_creation_waits_for_a_prepared_transaction(
    make_walsender: Callable[..., WalSender],
) -> None:
    """A prepared transaction is still running for the snapshot builder (xl_running_xacts
    lists it) until COMMIT PREPARED: the slot waits for it, and never decodes it."""
    server = make_walsender(script=script(), new_slots="end_of_wal")
    txn = server.begin()
    txn.write(rows(1, 2))
    txn.prepare("g1")
    server.commit([insert(TABLE, id=20, v="x")], prepare="g2")
    creation = SlotCreation(server, "late")
    assert creation.waiting() and "late" not in server.slots
    server.append(script().commit_prepared("g1"))
    assert creation.waiting() and "late" not in server.slots
    server.append(script().rollback_prepared("g2"))
    assert not creation.waiting(5), "the slot was not created once both were finished"
    creation.conn.close()
    server.commit([insert(TABLE, id=50, v="after")])
    consumer = Consumer(server, {"proto_version": "1"}, slot="late")
    got = consumer.read(Commit)
    assert [m.new_tuple[0] for m in got if isinstance(m, Insert)] == ["50"]
    consumer.kill()


def test_a_slot_creation_waiting_for_a_transaction_can_be_cancelled(
    make_walsender: Callable[..., WalSender],
) -> None:
    server = make_walsender(script=script(), new_slots="end_of_wal")
    txn = server.begin()
    txn.write(rows(1, 1))
    creation = SlotCreation(server, "late")
    assert creation.waiting()
    assert listed(server, "late") == [("late", True, None)]  # the ephemeral slot
    creation.conn.cancel_safe()
    assert not creation.waiting(5)
    assert isinstance(creation.error, psycopg.errors.QueryCanceled)
    assert listed(server, "late") == []  # dropped with the error
    assert creation.conn.execute("IDENTIFY_SYSTEM").fetchone() is not None  # it goes on
    creation.conn.close()
    # A session whose client vanishes while its slot waits keeps it listed, active,
    # until the transaction ends, then drops it: the walsender reads its client only
    # then (PostgreSQL 14-18 alike: test_slot_creation_client_gone_postgres.py).
    gone = SlotCreation(server, "gone")
    assert gone.waiting() and listed(server, "gone") == [("gone", True, None)]
    pid = gone.conn.info.backend_pid
    gone.vanish()
    assert isinstance(gone.error, psycopg.OperationalError)
    # The fake reads the end of the connection in its reactor thread: the commit must
    # come after that, as it comes before PostgreSQL's walsender reads again.
    server.wait_until(lambda s: s.with_state(lambda st: st.sessions[pid].client_gone), 5)
    assert listed(server, "gone") == [("gone", True, None)]
    txn.commit()
    assert "late" not in server.slots and "gone" not in server.slots
    assert listed(server, "gone") == []
    # A slot that starts at the stream's start (the default) waits for nothing.
    default = make_walsender(script=script())
    default.begin().write(rows(1, 1))
    early = SlotCreation(default, "early")
    assert not early.waiting(5) and early.error is None
    early.conn.close()
