"""A server restarted under a streaming consumer (``pg_ctl restart -m fast``), told on
real PostgreSQL and on the fake (``WalSender.restart``), compared as the consumer sees it.

The story (:func:`run_restart_story`): a consumer streams and confirms a commit; a
transaction stays open with 600 rows (a streaming consumer gets its first block); an idle
replication connection waits. The server begins a fast shutdown. Meanwhile a new
connection is refused (FATAL 57P03), the idle connection's next command finds it ended
(FATAL 57P01), and the consumer reads what the walsender still sends: the open
transaction's abort (Stream Abort, if a block of it was streamed) and a keepalive asking
for a reply, which it answers with the keepalive's position, as pg_recvlogical does once
it has written everything; then ``COPY 0`` without CopyDone and the close. The server
starts again; the consumer reconnects from its slot and reads a new commit.

:func:`observed` keeps what two servers share: the error fields, the messages (with
xids, LSNs and times taken out), the end of the stream, and relations of positions — the
slot's confirmed_flush is the consumer's last confirmation (17+; 14-16 bring back the one
last saved), the end of WAL after the restart lies one shutdown checkpoint record past
that confirmation, the restarted stream's first keepalive is at confirmed_flush and its
next at that end of WAL.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from codec.pgoutput import Decoder
from conformance.live_observed import plain_message
from conformance.live_sides import (
    FakeOpenTransaction,
    RealOpenTransaction,
    apply_rows,
    create_story_objects,
    drop_slot,
    fake_story_server,
)
from conformance.live_types import (
    OPEN_PARTS,
    TRANSACTIONS,
    Consumer,
    LiveRun,
    OpenTransaction,
    Received,
    Row,
)
from pgwire_mock.client import (
    CommandResult,
    ConnectionLostError,
    Keepalive,
    ReplicationConnection,
    ServerError,
    StreamEnded,
    WalData,
)

__all__ = [
    "FakeRestart",
    "RestartRun",
    "RestartSide",
    "StorySide",
    "begin_story",
    "error_fields",
    "fake_restart_side",
    "idle_connection_end",
    "observed",
    "plain_events",
    "read_until",
    "real_restart_side",
    "refused_connection",
]

_FIELDS = "SVCMFLR"  # severity (both), SQLSTATE, message, file, line, routine


@dataclass
class RestartSide:
    """One server of the story, with the same table, publication and slot names."""

    dsn: str  # a replication connection
    slot: str
    publication: str
    commit: Callable[[Sequence[Row]], object]
    begin: Callable[[], OpenTransaction]
    slot_positions: Callable[[], tuple[int, int]]  # confirmed_flush, restart_lsn
    begin_shutdown: Callable[[], object]
    start_again: Callable[[], object]
    crash: Callable[[], object]  # an immediate shutdown, begun; start_again restarts
    log_running_xacts: Callable[[], object]
    """pg_log_standby_snapshot() (16+), else CHECKPOINT: a running-xacts record."""
    wal_end: Callable[[], int]  # pg_current_wal_insert_lsn()
    settle: Callable[[], object]
    """Return once the background writer has just written its running-xacts record, so
    that it writes none for the next 15 s."""


@dataclass
class RestartRun:
    refused: dict[str, str | None]  # a new connection during the shutdown
    idle_ended: dict[str, str | None] | str  # the idle connection's next command
    before: list[WalData]  # what the consumer read before the shutdown
    during: list[object]  # events from the shutdown to the end of the stream
    confirmed: int  # the last flush position the consumer sent
    confirmed_flush: int  # the slot's, after the restart
    restart_lsn: int
    xlogpos: int  # IDENTIFY_SYSTEM after the restart
    after: list[object]  # the restarted stream, to its first commit


class StorySide(Protocol):
    """What :func:`begin_story` needs of a side (RestartSide, server_stop.StopSide)."""

    @property
    def dsn(self) -> str: ...
    @property
    def slot(self) -> str: ...
    @property
    def publication(self) -> str: ...
    @property
    def commit(self) -> Callable[[Sequence[Row]], object]: ...


def begin_story(
    side: StorySide, stream_options: Mapping[str, str], timeout: float
) -> tuple[ReplicationConnection, ReplicationConnection, Iterator[object], list[WalData]]:
    """How the stories of a server stopping begin: an idle replication connection, and
    a consumer streaming from the side's slot (``auto_reply`` off) that read the first
    transaction and confirmed its commit. (idle, consumer, its events, what it read)"""
    idle = ReplicationConnection.connect(side.dsn, timeout=timeout)
    consumer = ReplicationConnection.connect(side.dsn, timeout=timeout, auto_reply=False)
    events = consumer.start_replication(side.slot, 0, stream_options)
    side.commit(TRANSACTIONS[0])
    before = read_until(events, b"C")
    consumer.send_status(flush=before[-1].wal_start)
    return idle, consumer, events, before


def run_restart_story(
    side: RestartSide, options: Mapping[str, str], *, timeout: float = 30.0
) -> RestartRun:
    """The story of the module docstring, on one side."""
    stream_options = {**options, "publication_names": side.publication}
    idle, consumer, events, before = begin_story(side, stream_options, timeout)
    confirmed = int(before[-1].wal_start)
    txn = side.begin()
    txn.write(OPEN_PARTS[0])
    if options.get("streaming"):
        before += read_until(events, b"E")  # a block of it, streamed while it runs
    side.begin_shutdown()
    refused = refused_connection(side.dsn, timeout)
    idle_ended = idle_connection_end(idle, timeout)
    during: list[object] = []
    try:
        for event in events:
            during.append(event)
            if isinstance(event, Keepalive) and event.reply_requested:
                # The first answers fall short (Spark's last offset, say): the walsender
                # asks again after each. Then the keepalive's position, all it sent.
                if sum(isinstance(e, Keepalive) and e.reply_requested for e in during) > 3:
                    confirmed = int(event.wal_end)
                consumer.send_status(flush=confirmed)
    except ConnectionLostError:
        during.append("closed")
    consumer.close()
    side.start_again()
    confirmed_flush, restart_lsn = side.slot_positions()
    again = ReplicationConnection.connect(side.dsn, timeout=timeout, auto_reply=False)
    xlogpos = int(again.identify_system().xlogpos)
    events = again.start_replication(side.slot, 0, stream_options)
    after: list[object] = []
    for event in events:  # the keepalives at confirmed_flush, then at the end of WAL
        after.append(event)
        if sum(isinstance(e, Keepalive) for e in after) == 2:
            break
    side.commit(TRANSACTIONS[1])
    after += read_until(events, b"C")
    again.close()
    return RestartRun(
        refused,
        idle_ended,
        before,
        during,
        confirmed,
        confirmed_flush,
        restart_lsn,
        xlogpos,
        after,
    )


def run_psycopg2_story(
    side: RestartSide, options: Mapping[str, str], *, timeout: float = 30.0
) -> tuple[LiveRun, str]:
    """The restart with psycopg2 as the consumer (conformance.live_types.Consumer): it
    applies and acknowledges two commits; the server restarts fast. psycopg2 answers the
    walsender's reply request with the keepalive's position (it acknowledged the last
    data it got), so the shutdown goes on, and its next read fails (which error depends on
    whether its feedback write or its read meets the end first: only the class and
    SQLSTATE are kept). It connects again and applies what comes, to a new commit. The
    run, and how psycopg2 saw the end."""
    consumer = Consumer(side, options, timeout)
    side.commit(TRANSACTIONS[0])
    first = consumer.read(1, acknowledge=True)
    side.commit(TRANSACTIONS[1])
    first += consumer.read(1, acknowledge=True)
    side.begin_shutdown()
    ended = consumer.read_to_the_end()
    consumer.kill()
    side.start_again()
    confirmed_at_restart, restart_lsn = side.slot_positions()
    consumer = Consumer(side, options, timeout)
    side.commit(TRANSACTIONS[3])
    after: list[Received] = []
    while not any(r.payload[:1] == b"I" and b"four" in r.payload for r in after):
        after += consumer.read(1, acknowledge=True)
    consumer.kill()
    # Its last acknowledgement may still be on its way: give it the time it takes.
    last = max(r.wal_start for r in after)
    deadline = time.monotonic() + 5
    while side.slot_positions()[0] < last and time.monotonic() < deadline:
        time.sleep(0.02)
    run = LiveRun(first, after, side.slot_positions()[0], restart_lsn)
    run.confirmed_at_restart = confirmed_at_restart
    return run, ended


def read_until(events: Iterator[object], *kinds: bytes) -> list[Any]:
    """The XLogData up to and including the first of any of ``kinds`` (message type
    bytes; keepalives skipped)."""
    out: list[Any] = []
    for event in events:
        if isinstance(event, WalData):
            out.append(event)
            if event.payload[:1] in kinds:
                return out
    raise AssertionError(f"the stream ended before a {' or '.join(map(repr, kinds))} message")


def refused_connection(dsn: str, timeout: float) -> dict[str, str | None]:
    """The error a new connection gets once a shutdown has begun (one made before the
    server read its signal is let in, or let in and ended by it: try again);
    ``{"closed": "no server"}`` if the server is gone (an immediate shutdown's may be
    gone already, or still refusing for the few milliseconds it takes to end)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ReplicationConnection.connect(dsn, timeout=timeout).close()
        except ServerError as err:
            if err.get("C") != "57P01":
                return error_fields(err)
        except (ConnectionLostError, OSError):
            return {"closed": "no server"}
        time.sleep(0.02)
    raise AssertionError("new connections were still let in")


def idle_connection_end(idle: ReplicationConnection, timeout: float) -> dict[str, str | None] | str:
    """The error the idle connection's next command gets once its walsender is told to
    stop (PostgreSQL tells walsenders after the other backends have exited), or
    ``"closed"`` if it was dropped without one."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                idle.identify_system()
            except ServerError as err:
                return error_fields(err)
            except ConnectionLostError:
                return "closed"
            time.sleep(0.02)
    finally:
        idle.close()
    raise AssertionError("the idle connection was not ended")


def error_fields(err: ServerError) -> dict[str, str | None]:
    """An ErrorResponse's fields two servers share: severity (both), SQLSTATE, message,
    source file, line and routine."""
    return {code: err.get(code) for code in _FIELDS}


def plain_events(events: Sequence[object]) -> list[Any]:
    """A stream's events as two servers share them: messages without xids, LSNs and
    times, its end, and the close; keepalives left out (how many, and where, is the
    walsender's timing)."""
    decoder = Decoder()
    out: list[Any] = []
    for event in events:
        if isinstance(event, WalData):
            out.append(plain_message(decoder.decode(event.payload)))
        elif isinstance(event, StreamEnded):
            out.append(f"StreamEnded(by_server={event.by_server})")
        elif isinstance(event, CommandResult):
            out.append(event.command_tag)
        elif event == "closed":
            out.append(event)
    return out


def observed(run: RestartRun) -> dict[str, Any]:
    """What a consumer of ``run`` can rely on, equal on any two conforming servers."""
    decoder = Decoder()
    out: dict[str, Any] = {
        "refused": run.refused,
        "idle_ended": run.idle_ended,
        "before": [plain_message(decoder.decode(e.payload)) for e in run.before],
    }
    out["during"] = plain_events(run.during)
    # Once at least, then again after each of the three answers that fell short.
    out["asked_for_a_reply_again"] = (
        sum(isinstance(e, Keepalive) and e.reply_requested for e in run.during) >= 4
    )
    out["confirmed_flush_is_last_confirmed"] = run.confirmed_flush == run.confirmed
    out["restart_lsn_at_or_before_confirmed_flush"] = run.restart_lsn <= run.confirmed_flush
    # The shutdown checkpoint's record (120 bytes), or more: once in some hundred runs
    # PostgreSQL wrote another record (88 bytes) after its walsender's last position.
    out["xlogpos_a_checkpoint_past_last_confirmed"] = run.xlogpos - run.confirmed >= 120
    keepalives = [int(e.wal_end) for e in run.after if isinstance(e, Keepalive)]
    out["keepalives_after_restart"] = [
        keepalives[0] == run.confirmed_flush,
        keepalives[1] == run.xlogpos,
    ]
    decoder = Decoder()
    data = [e for e in run.after if isinstance(e, WalData)]
    out["after"] = [plain_message(decoder.decode(e.payload)) for e in data]
    # At or past it: PostgreSQL may write other records first (a heap page pruned of
    # the aborted rows), which the fake does not model.
    out["after_at_or_past_the_checkpoint"] = all(
        e.wal_start >= run.xlogpos for e in data if e.wal_start
    )
    return out


# --- the two sides ------------------------------------------------------------------------


@contextmanager
def real_restart_side(cluster: Any, names: tuple[str, str, str]) -> Iterator[RestartSide]:
    """The story's table, publication and slot on a cluster of its own
    (``conformance.provision.Cluster``: the restart ends every other connection)."""
    from psycopg import conninfo, sql  # noqa: PLC0415 - a test-time dependency

    _, publication, slot = names
    dsn = conninfo.make_conninfo(
        cluster.replication_dsn, options="-c logical_decoding_work_mem=64kB"
    )
    with cluster.connect() as conn:
        ident = create_story_objects(conn, names)
    opened: list[Any] = []

    def commit(rows: Sequence[Row]) -> None:
        with cluster.connect() as conn, conn.transaction():
            apply_rows(conn, ident, rows)

    def begin() -> OpenTransaction:
        txn = RealOpenTransaction(cluster.connect(), ident)
        opened.append(txn.conn)
        return txn

    def slot_positions() -> tuple[int, int]:
        with cluster.connect() as conn:
            row = conn.execute(
                "SELECT confirmed_flush_lsn - '0/0', restart_lsn - '0/0'"
                " FROM pg_replication_slots WHERE slot_name = %s",
                (slot,),
            ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    def log_running_xacts() -> None:
        with cluster.connect() as conn:
            conn.execute(
                "SELECT pg_log_standby_snapshot()" if cluster.version >= 16 else "CHECKPOINT"
            )

    def wal_end() -> int:
        with cluster.connect() as conn:
            row = conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'").fetchone()
        assert row is not None
        return int(row[0])

    def settle() -> None:
        # A write (an xid's commit record), then the background writer's record: at
        # its next wake-up if its last is 15 s old, else 15 s after that one.
        with cluster.connect() as conn:
            conn.execute("SELECT txid_current()")
        written = wal_end()
        deadline = time.monotonic() + 20
        while wal_end() == written:
            if time.monotonic() > deadline:
                raise AssertionError("the background writer wrote no running-xacts record")
            time.sleep(0.05)

    try:
        yield RestartSide(
            dsn,
            slot,
            publication,
            commit,
            begin,
            slot_positions,
            cluster.begin_fast_shutdown,
            cluster.start_again,
            cluster.begin_immediate_shutdown,
            log_running_xacts,
            wal_end,
            settle,
        )
    finally:
        for conn in opened:
            conn.close()
        with cluster.connect() as conn:
            drop_slot(conn, slot)  # the last consumer's walsender may still hold it
            conn.execute(sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(publication)))
            conn.execute(sql.SQL("DROP TABLE {}").format(ident))


class FakeRestart:
    """``WalSender.restart`` in a thread of its own, so that a story goes on while the
    server shuts down, as it does while a real one does: :meth:`begin_shutdown` returns
    once new connections are refused; :meth:`start_again` waits for the restart."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self._thread: threading.Thread | None = None
        self._failures: list[BaseException] = []

    def _restart(self, immediate: bool) -> None:
        try:
            self.server.restart(immediate=immediate)
        except BaseException as err:
            self._failures.append(err)

    def begin_shutdown(self, *, immediate: bool = False) -> None:
        self._thread = threading.Thread(target=self._restart, args=(immediate,), daemon=True)
        self._thread.start()
        # pg_ctl's signal reaches the postmaster at once: so does this. A restart whose
        # clients had confirmed everything may be over before the first look.
        thread = self._thread
        self.server.wait_until(
            lambda s: not thread.is_alive() or s.with_state(lambda state: state.shutting_down),
            10,
        )

    def crash(self) -> None:
        self.begin_shutdown(immediate=True)

    def start_again(self) -> None:
        assert self._thread is not None
        self._thread.join(60)
        if self._failures:
            raise self._failures.pop()
        if self._thread.is_alive():
            raise TimeoutError("the fake did not restart within 60 s")


@contextmanager
def fake_restart_side(major: int, names: tuple[str, str, str]) -> Iterator[RestartSide]:
    """The fake emulating ``major``, serving a script with the same names."""
    _, publication, slot = names
    server, changes = fake_story_server(major, names)
    restart = FakeRestart(server)
    try:
        yield RestartSide(
            server.dsn(),
            slot,
            publication,
            lambda rows: server.commit(changes(rows)),
            lambda: FakeOpenTransaction(server, changes),
            lambda: (server.slots[slot].confirmed_flush, server.slots[slot].restart_lsn),
            restart.begin_shutdown,
            restart.start_again,
            restart.crash,
            server.log_standby_snapshot if major >= 16 else server.checkpoint,
            lambda: server.end_of_wal,
            # Its background writer's first record comes 15 s after it started.
            lambda: None,
        )
    finally:
        server.stop()
