"""The live-WAL check: a consumer reads transactions committed while it runs, is killed,
misses more, and restarts — against real PostgreSQL (commits in SQL) and against the fake
(commits through the pytest handle, ``WalSender.commit``) — and sees the same thing.

The story is the one a CDC consumer's test tells (README, "Testing a consumer's
restarts"): commit, read and acknowledge; commit, read without acknowledging (the
consumer dies before its flush); two more commits while it is down; restart from the slot
and read everything not acknowledged, exactly once. Both sides run the same psycopg2
consumer with the same pgoutput options.

What is compared (:func:`observed`): every message decoded, with what differs between
any two servers taken out — xids, LSN values, timestamps and OIDs — and kept as the
relations a consumer relies on instead: each XLogData's position is 0/0 or not, positions
never go back, Begin's final_lsn is its Commit's commit_lsn, a Commit arrives at its
end_lsn, the slot's confirmed_flush after the run is the last acknowledged end_lsn, its
restart_lsn when the consumer restarts is at or before everything sent again. The
transactions the consumer applies, in order, must then be equal byte for byte.

A second story (:func:`run_long_story`) runs two long transactions while the consumer
waits at the end of WAL — each writes rows, pauses, rolls back a savepoint of more rows,
writes again, and the first ends in ROLLBACK — so the walsender decodes them while they
run (streaming clients get their blocks and a Stream Abort for each rollback); the
consumer dies before acknowledging, and the restarted walsender decodes them again after
the fact, when CLOG already shows the rollbacks (``WalSender.commit(...,
long_running=True)`` on the fake).

A third (:func:`run_open_story`) restarts the consumer in the middle of a transaction: it
stays open (600 rows, past logical_decoding_work_mem) while a short one commits; the
consumer applies and acknowledges the short one (a position inside the open one) and
dies; the open one writes more, the consumer restarts, the open one commits. The restarted
walsender must decode it again from its first change (``WalSender.begin`` on the fake).

Another (:func:`run_held_prepared_story`) prepares a transaction for a consumer that does
not decode two-phase: it stays in the reorder buffer, its memory counted, until COMMIT or
ROLLBACK PREPARED, so a later transaction that brings the total past the limit makes the
prepared one stream.

And (:func:`run_prepared_restart_lsn_story`) a prepared transaction holds the slot's
restart_lsn back until it is finished, like one in progress, however far the consumer
confirms past it and however many running-xacts records the walsender decodes: the
restarted walsender must decode it again, whole (without two-phase) or to know its
PREPARE was sent (with two-phase, only COMMIT PREPARED comes then).

A two-phase consumer that received a PREPARE without confirming it
(:func:`run_unconfirmed_prepare_story`) gets it again after its restart, at the same
positions, then the COMMIT or ROLLBACK PREPARED written before or after the restart;
rolled back before, the transaction is found aborted when it is decoded again, and
only Begin Prepare and Prepare come. The same story with ``confirm=True`` has the
consumer confirm the PREPARE before it dies: after its restart only Commit or Rollback
Prepared comes, even to a consumer restarted without two_phase (``restart_options``).
A slot first streamed with two_phase after a PREPARE its consumer confirmed past
(:func:`run_late_two_phase_story`) gets that transaction whole at COMMIT PREPARED.

Two stories create a slot while a transaction is open: :func:`run_slot_creation_story`
(the command answers once the transaction ended), and
:func:`run_vanished_creation_story`, whose client vanishes mid-wait (the slot stays
listed until the transaction ends, then is dropped).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import select
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from codec.pgoutput import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Decoder,
    Prepare,
    RollbackPrepared,
    StreamCommit,
)
from codec.values import LSN

__all__ = [
    "LONG_TRANSACTIONS",
    "OPTION_SETS",
    "TRANSACTIONS",
    "TWO_PHASE_OPTION_SETS",
    "VANISHED_ENDINGS",
    "FakeOpenTransaction",
    "LiveRun",
    "RealOpenTransaction",
    "Received",
    "fake_side",
    "new_names",
    "observed",
    "real_side",
    "run_held_prepared_story",
    "run_late_two_phase_story",
    "run_long_story",
    "run_open_story",
    "run_prepared_restart_lsn_story",
    "run_prepared_story",
    "run_slot_creation_story",
    "run_story",
    "run_two_open_story",
    "run_unconfirmed_prepare_story",
    "run_vanished_creation_story",
]

#: (kind, id, value) rows of each transaction the story commits, in order. The third is
#: big enough to be streamed in blocks under a 64 kB logical_decoding_work_mem.
Row = tuple[str, int, str]
TRANSACTIONS: tuple[tuple[Row, ...], ...] = (
    (("insert", 1, "one"), ("insert", 2, "two"), ("insert", 3, "three")),
    (("update", 1, "uno"),),
    tuple(("insert", 100 + i, f"row {i:04d} " + "x" * 40) for i in range(600)),
    (("delete", 2, ""), ("insert", 4, "four"), ("update", 3, "tres")),
)


def _rows(first: int, count: int) -> tuple[Row, ...]:
    return tuple(("insert", first + i, f"row {i:04d} " + "x" * 40) for i in range(count))


#: A long transaction: parts of rows, each followed by a command (SAVEPOINT s1, ROLLBACK
#: TO SAVEPOINT s1, ... and its end, COMMIT or ROLLBACK); a part of 300 rows comes close
#: to logical_decoding_work_mem (64 kB).
LongTransaction = tuple[tuple[tuple[Row, ...], str], ...]
LONG_TRANSACTIONS: tuple[LongTransaction, ...] = (
    (
        (_rows(1000, 300), "SAVEPOINT s1"),
        (_rows(2000, 300), "ROLLBACK TO SAVEPOINT s1"),
        (_rows(3000, 100), "SAVEPOINT s2"),
        (_rows(4000, 100), "ROLLBACK"),  # s2 still open
    ),
    (
        (_rows(5000, 300), "SAVEPOINT s1"),
        (_rows(6000, 300), "ROLLBACK TO SAVEPOINT s1"),
        (_rows(7000, 100), "COMMIT"),
    ),
)

#: The parts of the transaction that stays open across the consumer's restart.
OPEN_PARTS: tuple[tuple[Row, ...], ...] = (_rows(8000, 600), _rows(9000, 10))

#: Messages that end a transaction for the consumer: Commit, Stream Commit, Prepare,
#: Stream Prepare, Commit Prepared, Rollback Prepared.
_ENDS = frozenset(bytes([c]) for c in b"CcPpKr")

#: Two-phase options by the least major that accepts them (the prepared story).
TWO_PHASE_OPTION_SETS: tuple[tuple[int, Mapping[str, str]], ...] = (
    (15, {"proto_version": "3", "two_phase": "on"}),
    (15, {"proto_version": "3", "two_phase": "on", "streaming": "on"}),
    (16, {"proto_version": "4", "two_phase": "on", "streaming": "parallel"}),
)

#: pgoutput options by the least major that accepts them.
OPTION_SETS: tuple[tuple[int, Mapping[str, str]], ...] = (
    (14, {"proto_version": "1"}),
    (14, {"proto_version": "2", "streaming": "on"}),
    (16, {"proto_version": "4", "streaming": "parallel", "binary": "true"}),
)


@dataclass(frozen=True, slots=True)
class Received:
    wal_start: int
    wal_end: int
    payload: bytes


@dataclass
class LiveRun:
    """What the consumer received in each phase, the slot's restart_lsn when it
    restarted and its confirmed_flush after."""

    first: list[Received]  # T0 acknowledged, T1 read without acknowledging
    after_restart: list[Received]
    confirmed_flush: int
    restart_lsn: int = 0
    final_restart_lsn: int | None = None
    """The slot's restart_lsn at the end, once a running-xacts record was decoded and
    confirmed after everything (stories that measure it)."""
    confirmed_at_restart: int | None = None
    """The slot's confirmed_flush when the consumer restarted (stories that measure it)."""


@dataclass
class Side:
    """One server of the check: where to connect, how to commit, how to read the slot."""

    dsn: str
    slot: str
    publication: str
    commit: Callable[[Sequence[Row]], object]
    slot_positions: Callable[[], tuple[int, int]]  # confirmed_flush, restart_lsn
    run_long: Callable[[LongTransaction], object]
    begin: Callable[[], OpenTransaction]
    commit_prepared: Callable[[str], object]
    rollback_prepared: Callable[[str], object]
    log_running_xacts: Callable[[], object]
    """Write a running-xacts record now (PostgreSQL moves restart_lsn only at one)."""
    client_gone: Callable[[int], object]
    """Wait until the server has read that the client of backend ``pid`` went away (a
    waiting walsender finds it in its socket when it reads again: nothing to wait for)."""


class OpenTransaction(Protocol):
    """A transaction left open on one side: ``write`` adds rows (the WAL holds them once
    it returns), ``commit`` or ``prepare`` ends it."""

    def write(self, rows: Sequence[Row]) -> object: ...
    def commit(self) -> object: ...
    def rollback(self) -> object: ...
    def prepare(self, gid: str) -> object: ...


# --- the consumer ---------------------------------------------------------------------------


class Consumer:
    """A psycopg2 logical replication consumer, as CDC consumers are written with it."""

    def __init__(self, side: Side, options: Mapping[str, str], timeout: float) -> None:
        import psycopg2  # noqa: PLC0415 - a test-time dependency
        from psycopg2 import errors, extras  # noqa: PLC0415

        self.timeout = timeout
        deadline = time.monotonic() + timeout
        while True:
            self.conn = psycopg2.connect(
                side.dsn, connection_factory=extras.LogicalReplicationConnection
            )
            self.cur = self.conn.cursor()
            try:
                self.cur.start_replication(
                    slot_name=side.slot,
                    decode=False,
                    options={**options, "publication_names": side.publication},
                )
                break
            except errors.ObjectInUse:
                # PostgreSQL's walsender of the killed consumer may not have released the
                # slot yet: a restarting consumer retries, as real ones do.
                self.conn.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def read(self, commits: int, *, acknowledge: bool, blocks: int = 0) -> list[Received]:
        """Read until ``commits`` transactions and ``blocks`` streamed blocks ended;
        acknowledge each commit if told."""
        out: list[Received] = []
        deadline = time.monotonic() + self.timeout
        done = 0
        while done < commits or blocks > 0:
            message = self.cur.read_message()
            if message is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"{done} of {commits} transactions ({blocks} more streamed blocks "
                        "awaited) within the timeout"
                    )
                select.select([self.conn], [], [], min(left, 0.5))
                continue
            payload = bytes(message.payload)
            out.append(Received(message.data_start, message.wal_end, payload))
            blocks -= payload[:1] == b"E"
            if payload[:1] in _ENDS:
                done += 1
                if acknowledge:
                    self.cur.send_feedback(flush_lsn=message.data_start, force=True)
        return out

    def kill(self) -> None:
        self.conn.close()


def run_story(side: Side, options: Mapping[str, str], *, timeout: float = 30.0) -> LiveRun:
    """The story of the module docstring, on one side."""
    consumer = Consumer(side, options, timeout)
    side.commit(TRANSACTIONS[0])
    first = consumer.read(1, acknowledge=True)
    side.commit(TRANSACTIONS[1])
    first += consumer.read(1, acknowledge=False)
    consumer.kill()
    side.commit(TRANSACTIONS[2])
    side.commit(TRANSACTIONS[3])
    return _restart_and_read(side, options, timeout, first, commits=3)


def run_long_story(side: Side, options: Mapping[str, str], *, timeout: float = 30.0) -> LiveRun:
    """The long transactions of the module docstring, on one side."""
    consumer = Consumer(side, options, timeout)
    time.sleep(0.5)  # the walsender waits at the end of WAL
    for txn in LONG_TRANSACTIONS:
        side.run_long(txn)
    first = consumer.read(1, acknowledge=False)
    consumer.kill()
    return _restart_and_read(side, options, timeout, first, commits=1)


def run_open_story(side: Side, options: Mapping[str, str], *, timeout: float = 30.0) -> LiveRun:
    """The open transaction of the module docstring, on one side."""
    consumer = Consumer(side, options, timeout)
    time.sleep(0.5)  # the walsender waits at the end of WAL
    txn = side.begin()
    txn.write(OPEN_PARTS[0])
    # Streaming clients get a block of it while it runs, before anything commits.
    first = consumer.read(0, acknowledge=False, blocks=1) if options.get("streaming") else []
    side.commit(TRANSACTIONS[0])
    first += consumer.read(1, acknowledge=True)
    consumer.kill()
    txn.write(OPEN_PARTS[1])
    return _restart_and_read(side, options, timeout, first, commits=1, then=txn.commit)


def run_two_open_story(side: Side, options: Mapping[str, str], *, timeout: float = 30.0) -> LiveRun:
    """Two transactions open at once, their writes interleaved (300 rows each, twice),
    then both commit: the reorder buffer counts their memory together, so a streaming
    client gets blocks of the larger one when the two together pass the limit. The
    consumer then restarts and reads both again."""
    consumer = Consumer(side, options, timeout)
    time.sleep(0.5)
    a, b = side.begin(), side.begin()
    a.write(_rows(10000, 300))
    b.write(_rows(20000, 300))
    a.write(_rows(11000, 300))
    b.write(_rows(21000, 300))
    a.commit()
    b.commit()
    first = consumer.read(2, acknowledge=False)
    consumer.kill()
    return _restart_and_read(side, options, timeout, first, commits=2)


def run_prepared_story(side: Side, options: Mapping[str, str], *, timeout: float = 30.0) -> LiveRun:
    """A two-phase consumer dies while a transaction is open (600 rows: streamed in part
    if it streams); the transaction writes 10 more and is prepared while the consumer is
    down; the restarted consumer gets the prepared transaction (decoded again from its
    first change) and then, committed, its COMMIT PREPARED."""
    consumer = Consumer(side, options, timeout)
    time.sleep(0.5)
    txn = side.begin()
    txn.write(OPEN_PARTS[0])
    first = consumer.read(0, acknowledge=False, blocks=1) if options.get("streaming") else []
    consumer.kill()
    txn.write(OPEN_PARTS[1])
    gid = f"{side.slot}_gid"
    txn.prepare(gid)
    commit = lambda: side.commit_prepared(gid)  # noqa: E731 - a one-line step
    return _restart_and_read(side, options, timeout, first, commits=2, then=commit)


def run_held_prepared_story(
    side: Side, options: Mapping[str, str], *, rollback: bool = False, timeout: float = 30.0
) -> LiveRun:
    """A transaction prepared for a consumer that does not decode two-phase stays in the
    reorder buffer until COMMIT PREPARED: A writes 250 rows and is prepared; B writes 150,
    and the two together pass logical_decoding_work_mem (64 kB: 360 rows of 182 bytes),
    so a streaming client gets a block of A, the larger; B writes 300 more and passes the
    limit alone. A is then
    committed (or rolled back) prepared and B commits; the consumer restarts without
    acknowledging and gets both again, decoded after the fact."""
    consumer = Consumer(side, options, timeout)
    time.sleep(0.5)  # the walsender waits at the end of WAL
    a = side.begin()
    a.write(_rows(30000, 250))
    gid = f"{side.slot}_gid"
    a.prepare(gid)
    b = side.begin()
    b.write(_rows(40000, 150))
    # A's block is streamed while A is prepared, before it is finished either way.
    first = consumer.read(0, acknowledge=False, blocks=1) if options.get("streaming") else []
    b.write(_rows(41000, 300))
    (side.rollback_prepared if rollback else side.commit_prepared)(gid)
    b.commit()
    commits = 1 if rollback else 2
    first += consumer.read(commits, acknowledge=False)
    consumer.kill()
    return _restart_and_read(side, options, timeout, first, commits=commits)


def run_prepared_restart_lsn_story(
    side: Side, options: Mapping[str, str], *, timeout: float = 30.0
) -> LiveRun:
    """A (5 rows) is prepared; T0 commits, a running-xacts record is written, T1 commits;
    the consumer acknowledges everything it gets (with two-phase A's PREPARE too) and
    dies. restart_lsn stays at or before A's first change. The restarted consumer gets A
    once it is committed prepared (whole without two-phase; with two-phase only COMMIT
    PREPARED); then, after another running-xacts record and T3, the slot's restart_lsn
    has moved past A."""
    consumer = Consumer(side, options, timeout)
    time.sleep(0.5)  # the walsender waits at the end of WAL
    a = side.begin()
    a.write(_rows(50000, 5))
    gid = f"{side.slot}_gid"
    a.prepare(gid)
    side.commit(TRANSACTIONS[0])
    first = consumer.read(2 if options.get("two_phase") == "on" else 1, acknowledge=True)
    side.log_running_xacts()
    side.commit(TRANSACTIONS[1])
    first += consumer.read(1, acknowledge=True)
    _await_confirmed(side, first[-1].wal_start, timeout)
    consumer.kill()
    commit = lambda: side.commit_prepared(gid)  # noqa: E731 - a one-line step
    run = _restart_and_read(side, options, timeout, first, commits=1, then=commit)
    consumer = Consumer(side, options, timeout)
    side.log_running_xacts()
    side.commit(TRANSACTIONS[3])
    last = consumer.read(1, acknowledge=True)
    _await_confirmed(side, last[-1].wal_start, timeout)
    consumer.kill()
    run.final_restart_lsn = side.slot_positions()[1]
    return run


def run_unconfirmed_prepare_story(
    side: Side,
    options: Mapping[str, str],
    *,
    rollback: bool = False,
    finish_first: bool = False,
    confirm: bool = False,
    restart_options: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> LiveRun:
    """A (5 rows) stays open while T0 commits; the two-phase consumer acknowledges T0 (a
    position inside A), gets A's PREPARE (Begin Prepare…Prepare) without confirming it,
    and dies. A is committed (or rolled back) prepared while the consumer is down
    (``finish_first``) or once it has restarted. The restarted walsender decodes A's
    PREPARE again (its record is past confirmed_flush): the consumer reads two ends.

    With ``confirm`` the consumer confirms A's PREPARE (flush = its end) before it dies.
    What the restarted walsender sends then is not counted in advance: after the finish,
    T1 (an Update) commits, and the consumer reads every end up to T1's Commit. The
    restarted consumer starts with ``restart_options`` if given (a slot marked two-phase
    by the first start, restarted without the option)."""
    consumer = Consumer(side, options, timeout)
    a = side.begin()
    a.write(_rows(60000, 5))
    side.commit(TRANSACTIONS[0])
    first = consumer.read(1, acknowledge=True)
    _await_confirmed(side, first[-1].wal_start, timeout)
    gid = f"{side.slot}_gid"
    a.prepare(gid)
    first += consumer.read(1, acknowledge=confirm)
    if confirm:
        _await_confirmed(side, first[-1].wal_start, timeout)
    consumer.kill()
    confirmed, _ = side.slot_positions()
    finish = functools.partial(side.rollback_prepared if rollback else side.commit_prepared, gid)
    if finish_first:
        finish()
    run = _restart_and_read(
        side,
        options if restart_options is None else restart_options,
        timeout,
        first,
        commits=0 if confirm else 2,
        then=None if finish_first else finish,
        marker=confirm,
    )
    run.confirmed_at_restart = confirmed
    return run


def run_late_two_phase_story(
    side: Side, options: Mapping[str, str], *, rollback: bool = False, timeout: float = 30.0
) -> LiveRun:
    """A (5 rows) is prepared, then T0 commits, while a consumer without two_phase
    (protocol 3) reads: it gets T0 only, confirms it (past A's PREPARE) and dies. It
    restarts with ``options`` (two_phase): the slot is two-phase from there on
    (two_phase_at, T0's end), and A is committed (or rolled back) prepared; then T1."""
    consumer = Consumer(side, {"proto_version": "3"}, timeout)
    a = side.begin()
    a.write(_rows(60000, 5))
    gid = f"{side.slot}_gid"
    a.prepare(gid)
    side.commit(TRANSACTIONS[0])
    first = consumer.read(1, acknowledge=True)
    _await_confirmed(side, first[-1].wal_start, timeout)
    consumer.kill()
    confirmed, _ = side.slot_positions()
    finish = functools.partial(side.rollback_prepared if rollback else side.commit_prepared, gid)
    run = _restart_and_read(side, options, timeout, first, commits=0, then=finish, marker=True)
    run.confirmed_at_restart = confirmed
    return run


def _await_confirmed(side: Side, lsn: int, timeout: float) -> None:
    """Wait until the slot confirmed ``lsn`` (a real walsender takes the status update
    asynchronously; restart_lsn moves in the same step)."""
    deadline = time.monotonic() + timeout
    while side.slot_positions()[0] < lsn and time.monotonic() < deadline:
        time.sleep(0.05)


class _SlotCreation:
    """CREATE_REPLICATION_SLOT in a thread of its own: it may block (psycopg 3's simple
    query protocol, as replication commands need)."""

    def __init__(self, dsn: str, name: str) -> None:
        import psycopg  # noqa: PLC0415 - a test-time dependency

        self.conn = psycopg.connect(dsn, autocommit=True, cursor_factory=psycopg.ClientCursor)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._create, args=(name,), daemon=True)
        self.thread.start()

    def _create(self, name: str) -> None:
        try:
            self.conn.execute(f"CREATE_REPLICATION_SLOT {name} LOGICAL pgoutput")
        except Exception as err:
            self.error = err

    def waiting(self, seconds: float) -> bool:
        self.thread.join(seconds)
        return self.thread.is_alive()

    def vanish(self, timeout: float) -> None:
        """The client goes away mid-command, as a process that dies (see
        :func:`_shut_down`); the connection is closed once execute() failed."""
        _shut_down(self.conn)
        if self.waiting(timeout):
            raise TimeoutError("the creating thread did not see its connection end")
        self.conn.close()

    @property
    def pid(self) -> int:
        return int(self.conn.info.backend_pid)

    def drop(self, name: str, timeout: float) -> None:
        """Drop the slot once the walsender that used it let it go."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.conn.execute(f"DROP_REPLICATION_SLOT {name}")
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self.conn.close()


def run_slot_creation_story(
    side: Side, options: Mapping[str, str], *, prepared: bool = False, timeout: float = 30.0
) -> dict[str, Any]:
    """A slot created while a transaction is open (or ``prepared``: prepared and not yet
    committed prepared): the command answers only once it ended (the snapshot builder
    waits for the transactions in progress, prepared ones among them), and the slot
    never decodes it, only what commits after."""
    import psycopg  # noqa: PLC0415 - a test-time dependency

    txn = side.begin()
    txn.write(TRANSACTIONS[0])
    end: Callable[[], object] = txn.commit
    if prepared:
        gid = f"{side.slot}_gid"
        txn.prepare(gid)
        end = lambda: side.commit_prepared(gid)  # noqa: E731 - a one-line step
    name = f"{side.slot}_late"
    creation = _SlotCreation(side.dsn, name)
    creator = creation.pid
    blocked = creation.waiting(1.5)
    with psycopg.connect(side.dsn, autocommit=True, cursor_factory=psycopg.ClientCursor) as other:
        # The slot exists while the command waits: listed, held by its walsender; its
        # name is taken.
        during = _slot_row(other, name)
        refused = {
            command: _refusal(side.dsn, f"{command} {name}" + suffix)
            for command, suffix in (
                ("DROP_REPLICATION_SLOT", ""),
                ("CREATE_REPLICATION_SLOT", " LOGICAL pgoutput"),
            )
        }
        end()
        created = not creation.waiting(timeout)
        after = _slot_row(other, name)
    side.commit(TRANSACTIONS[1])
    consumer = Consumer(dataclasses.replace(side, slot=name), options, timeout)
    received = consumer.read(1, acknowledge=True)
    consumer.kill()
    creation.drop(name, timeout)
    decoder = Decoder()

    def lsn(row: dict[str, Any] | None, column: str) -> int | None:
        return int(LSN.parse(row[column])) if row and row[column] else None

    return {
        "blocked_while_open": blocked,
        "created_after_its_end": created,
        "messages": [_plain(decoder.decode(r.payload)) for r in received],
        "listed_while_waiting": _slot_shape(during, creator),
        "listed_once_created": _slot_shape(after, creator),
        "restart_lsn_kept": lsn(during, "restart_lsn") == lsn(after, "restart_lsn"),
        "restart_lsn_before_consistent_point": (lsn(after, "restart_lsn") or 0)
        <= (lsn(after, "confirmed_flush_lsn") or 0),
        "refused_while_waiting": {
            command: (state, message.replace(str(creator), "<pid>"))
            for command, (state, message) in refused.items()
        },
    }


#: How the transaction a slot creation waits for ends (:func:`run_vanished_creation_story`).
VANISHED_ENDINGS: tuple[str, ...] = ("commit", "rollback", "commit_prepared", "rollback_prepared")


def run_vanished_creation_story(
    side: Side, ending: str, *, timeout: float = 10.0
) -> dict[str, Any]:
    """A slot creation waits for an open transaction (``*_prepared``: a prepared one) and
    its client vanishes, its socket shut down as when a process dies; then the
    transaction ends as ``ending`` says (:data:`VANISHED_ENDINGS`). What another session
    sees of the slot (pg_replication_slots) and of its walsender (pg_stat_replication)
    while it waits, once its client is gone, and once the transaction ended."""
    import psycopg  # noqa: PLC0415 - a test-time dependency

    txn = side.begin()
    txn.write(TRANSACTIONS[0])
    gid = f"{side.slot}_gid"  # real_side rolls it back if the story fails
    ends: dict[str, Callable[[], object]] = {
        "commit": txn.commit,
        "rollback": txn.rollback,
        "commit_prepared": lambda: side.commit_prepared(gid),
        "rollback_prepared": lambda: side.rollback_prepared(gid),
    }
    if ending.endswith("_prepared"):
        txn.prepare(gid)
    name = f"{side.slot}_gone"
    creation = _SlotCreation(side.dsn, name)
    creator = creation.pid
    with psycopg.connect(side.dsn, autocommit=True, cursor_factory=psycopg.ClientCursor) as other:

        def seen() -> dict[str, Any]:
            walsender = other.execute(
                "SELECT state, sent_lsn, write_lsn, flush_lsn, replay_lsn, sync_state"
                f" FROM pg_stat_replication WHERE pid = '{creator}'"
            ).fetchone()
            return {"slot": _slot_shape(_slot_row(other, name), creator), "walsender": walsender}

        # Listed at once; its WAL reserved just after (ReplicationSlotReserveWal).
        deadline = time.monotonic() + timeout
        while (row := _slot_row(other, name)) is None or row["restart_lsn"] is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"slot {name} not listed with its WAL reserved")
            time.sleep(0.02)
        blocked = creation.waiting(0.2)
        during = seen()
        creation.vanish(timeout)
        side.client_gone(creator)
        gone = seen()
        ends[ending]()
        # The walsender notices, drops the slot and exits a moment after the end.
        deadline = time.monotonic() + timeout
        while (after := seen()) != {"slot": None, "walsender": None}:
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
    return {
        "blocked_while_open": blocked,
        "client_error": type(creation.error).__name__,
        "while_waiting": during,
        "once_the_client_is_gone": gone,
        "once_the_transaction_ended": after,
    }


def _slot_row(conn: Any, name: str) -> dict[str, Any] | None:
    """``name``'s row of pg_replication_slots, by column (None: not listed)."""
    cur = conn.execute(f"SELECT * FROM pg_replication_slots WHERE slot_name = '{name}'")
    row = cur.fetchone()
    return None if row is None else dict(zip([d.name for d in cur.description], row, strict=True))


def _slot_shape(row: dict[str, Any] | None, creator: int) -> dict[str, Any] | None:
    """A pg_replication_slots row with what differs between servers (positions, xids,
    OIDs, times) reduced to set or NULL, and active_pid to whether it is the creator's."""
    if row is None:
        return None
    out: dict[str, Any] = {}
    for column, value in row.items():
        if column == "active_pid":
            out[column] = None if value is None else ("creator" if value == creator else "other")
        elif column in ("datoid", "catalog_xmin", "xmin", "inactive_since", "safe_wal_size") or (
            column.endswith("_lsn") or column == "two_phase_at"
        ):
            out[column] = None if value is None else "set"
        else:
            out[column] = value
    return out


def _refusal(dsn: str, command: str, wait: float = 3.0) -> tuple[str | None, str]:
    """The SQLSTATE and message a replication command fails with at once, on a connection
    of its own; ("", "") if it succeeded, ("blocked", "") if it waited (then cancelled)."""
    import psycopg  # noqa: PLC0415 - a test-time dependency

    answer: list[tuple[str | None, str]] = []
    conn = psycopg.connect(dsn, autocommit=True, cursor_factory=psycopg.ClientCursor)

    def run() -> None:
        try:
            conn.execute(command)
            answer.append(("", ""))
        except Exception as err:
            answer.append((getattr(err, "sqlstate", None), str(err)))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(wait)
    if thread.is_alive():
        conn.cancel_safe()
        thread.join(wait)
        if thread.is_alive():
            # The cancel did not land in time. Closing the connection now would free
            # it under the thread still in execute() (see _shut_down): end the
            # connection under it instead, and close only once the thread is out.
            _shut_down(conn)
            thread.join(wait)
        if thread.is_alive():
            raise TimeoutError(f"{command!r} still running after its connection ended")
        conn.close()
        return "blocked", ""
    conn.close()
    return answer[0]


def _shut_down(conn: Any) -> None:
    """End ``conn``'s connection under a thread that may be inside its execute(), as a
    process that dies would: the socket is shut down (the server reads the end, the
    thread's execute() fails); the connection itself is left to close after that thread.

    Closing it under execute() is not safe: psycopg's C generators keep the PGconn
    pointer and the socket number while they wait, and close() frees both without the
    connection's lock, so the waiting thread reads on through a freed PGconn, from
    whatever connection reuses the socket number (and often the memory), which then
    never gets its answer."""
    with socket.socket(fileno=os.dup(conn.fileno())) as sock:
        sock.shutdown(socket.SHUT_RDWR)


def _restart_and_read(
    side: Side,
    options: Mapping[str, str],
    timeout: float,
    first: list[Received],
    commits: int,
    then: Callable[[], object] | None = None,
    *,
    marker: bool = False,
) -> LiveRun:
    """A restarted consumer reads ``commits`` transactions (after ``then`` ran, once its
    walsender waits at the end of WAL), acknowledging each, and with ``marker`` then
    every end up to the Commit of T1 (its one Update), committed after ``then``; the run
    ends once the slot confirmed the last (asynchronously on a real server)."""
    _, restart_lsn = side.slot_positions()
    consumer = Consumer(side, options, timeout)
    if then is not None or marker:
        time.sleep(0.5)
    if then is not None:
        then()
    if marker:
        side.commit(TRANSACTIONS[1])
    after = consumer.read(commits, acknowledge=True)
    while marker and not any(r.payload[:1] == b"U" for r in after):
        after += consumer.read(1, acknowledge=True)
    consumer.kill()
    last_end = after[-1].wal_start
    deadline = time.monotonic() + timeout
    confirmed, _ = side.slot_positions()
    while confirmed < last_end and time.monotonic() < deadline:
        time.sleep(0.05)
        confirmed, _ = side.slot_positions()
    return LiveRun(first, after, confirmed, restart_lsn)


# --- what is compared -----------------------------------------------------------------------

_VOLATILE = ("xid", "lsn", "timestamp", "oid")


def _plain(message: Any) -> dict[str, Any]:
    """A message's fields (a pgoutput message or a Relation's column), with what differs
    between two servers taken out."""
    out: dict[str, Any] = {"type": type(message).__name__}
    for f in dataclasses.fields(message):
        value = getattr(message, f.name)
        if any(word in f.name for word in _VOLATILE):
            value = None if value is None else ("0" if value == 0 else "set")
        elif isinstance(value, tuple):
            value = [_plain(v) if dataclasses.is_dataclass(v) else v for v in value]
        out[f.name] = value
    return out


def observed(run: LiveRun) -> dict[str, Any]:
    """What a consumer of ``run`` can rely on, equal on any two conforming servers."""
    phases = {"first": run.first, "after_restart": run.after_restart}
    out: dict[str, Any] = {}
    last_commit_end = 0
    decoded: dict[str, list[Any]] = {}
    for name, received in phases.items():
        decoder = Decoder()
        messages = decoded[name] = [decoder.decode(r.payload) for r in received]
        positions = [r.wal_start for r in received if r.wal_start]
        begins = [m for m in messages if isinstance(m, Begin)]
        commits = [(r, m) for r, m in zip(received, messages, strict=True) if isinstance(m, Commit)]
        out[name] = {
            "messages": [_plain(m) for m in messages],
            "at_0/0": [r.wal_start == 0 for r in received],
            "wal_start_is_wal_end": all(r.wal_start == r.wal_end for r in received),
            "positions_never_go_back": positions == sorted(positions),
            "begin_final_lsn_is_commit_lsn": [
                b.final_lsn == c.commit_lsn for b, (_, c) in zip(begins, commits, strict=False)
            ],
            "commit_sent_at_end_lsn": [r.wal_start == c.end_lsn for r, c in commits],
            "stream_commit_sent_at_end_lsn": [
                r.wal_start == m.end_lsn
                for r, m in zip(received, messages, strict=True)
                if isinstance(m, StreamCommit)
            ],
        }
        ends = [r.wal_start for r in received if r.payload[:1] in _ENDS]
        if name == "after_restart" and ends:
            last_commit_end = ends[-1]
    out["confirmed_flush_is_last_acknowledged_end"] = run.confirmed_flush == last_commit_end
    # Decoding restarts at restart_lsn: at or before everything sent again, the first
    # change of a transaction still open included, however far the slot confirmed.
    again = [r.wal_start for r in run.after_restart if r.wal_start]
    out["restart_lsn_at_or_before_what_comes_again"] = all(run.restart_lsn <= p for p in again)
    # A transaction prepared before the restart and finished after it (two-phase: its
    # PREPARE sent before, not again) is decoded again by the restarted walsender, so
    # restart_lsn stays at or before its first change, sent before the restart.
    finished = {
        m.xid for m in decoded["after_restart"] if isinstance(m, CommitPrepared | RollbackPrepared)
    }
    starts = [
        r.wal_start
        for r, m in zip(run.first, decoded["first"], strict=True)
        if r.wal_start and getattr(m, "xid", None) in finished
    ]
    out["restart_lsn_at_or_before_prepared_finished_after"] = all(
        run.restart_lsn <= p for p in starts
    )
    if run.confirmed_at_restart is not None:
        out["two_phase"] = _two_phase_relations(run, decoded)
    if run.final_restart_lsn is not None:
        # Once it is finished, a running-xacts record confirmed moves restart_lsn to
        # that record, which starts where the finish ended, or later.
        ends = [r.wal_start for r in run.after_restart if r.payload[:1] in _ENDS]
        out["final_restart_lsn_at_or_past_what_came_again"] = run.final_restart_lsn >= ends[0]
    return out


def _two_phase_relations(run: LiveRun, decoded: Mapping[str, list[Any]]) -> dict[str, Any]:
    """Where a two-phase consumer's PREPARE, COMMIT and ROLLBACK PREPARED come, and which
    end the slot had confirmed at the restart: relations, not LSN values. A Begin
    Prepare or Prepare is True when it repeats one sent before the restart exactly."""
    confirmed = run.confirmed_at_restart
    assert confirmed is not None
    lsns = ("prepare_lsn", "end_lsn")
    before: dict[int, tuple[int, ...]] = {}  # xid → position and LSNs of its Begin Prepare
    prepares: dict[int, Prepare] = {}
    out: dict[str, Any] = {}
    for name, received in (("first", run.first), ("after_restart", run.after_restart)):
        rows: list[tuple[object, ...]] = []
        for r, m in zip(received, decoded[name], strict=True):
            if isinstance(m, BeginPrepare):
                where = (r.wal_start, *(getattr(m, f) for f in lsns))
                rows.append(("BeginPrepare", before.get(m.xid) == where))
                before.setdefault(m.xid, where)
            elif isinstance(m, Prepare):
                rows.append(("Prepare", r.wal_start == m.end_lsn, prepares.get(m.xid) == m))
                prepares[m.xid] = m
            elif isinstance(m, CommitPrepared):
                prepared = prepares.get(m.xid)
                follows = prepared is not None and m.commit_lsn >= prepared.end_lsn
                rows.append(("CommitPrepared", r.wal_start == m.end_lsn, follows))
            elif isinstance(m, RollbackPrepared):
                prepared = prepares.get(m.xid)
                follows = prepared is not None and m.prepare_end_lsn == prepared.end_lsn
                rows.append(("RollbackPrepared", r.wal_start == m.rollback_end_lsn, follows))
        out[name] = rows
    ends = [r.wal_start for r in run.first if r.payload[:1] in _ENDS]
    out["confirmed_at_restart_is_end"] = [end == confirmed for end in ends]
    out["confirmed_at_restart_before_prepare"] = [
        confirmed <= p.prepare_lsn for p in prepares.values()
    ]
    return out


# --- the two sides --------------------------------------------------------------------------


def new_names() -> tuple[str, str, str]:
    """A table, publication and slot name no other run uses (both sides take the same:
    the Relation message carries the table's name)."""
    tag = uuid.uuid4().hex[:10]
    return f"live_{tag}", f"live_pub_{tag}", f"live_slot_{tag}"


@contextmanager
def real_side(server: Any, names: tuple[str, str, str]) -> Iterator[Side]:
    """A table, publication and slot on a real server (``conformance.provision.Server``);
    transactions committed in SQL. Everything is dropped afterwards."""
    from psycopg import conninfo, sql  # noqa: PLC0415 - a test-time dependency

    table, publication, slot = names
    # The fake's scripts run with the least logical_decoding_work_mem, so the big
    # transaction streams in blocks on both sides.
    dsn = conninfo.make_conninfo(
        server.replication_dsn, options="-c logical_decoding_work_mem=64kB"
    )
    ident = sql.Identifier(table)
    with server.connect() as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(ident))
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(sql.Identifier(publication), ident)
        )
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))

        def commit(rows: Sequence[Row]) -> None:
            with conn.transaction():
                _apply(conn, ident, rows)

        def run_long(txn: LongTransaction) -> None:
            # Pauses long enough for the WAL writer (wal_writer_delay 200 ms) to flush
            # each part, so the walsender decodes it while the transaction is open.
            insert = sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(ident)
            conn.execute("BEGIN")
            for part, command in txn:
                with conn.cursor() as cur:
                    cur.executemany(insert, [(key, value) for _, key, value in part])
                time.sleep(0.5)
                conn.execute(command)

        def begin() -> OpenTransaction:
            return RealOpenTransaction(server.connect(), ident)

        def commit_prepared(gid: str) -> None:
            conn.execute(sql.SQL("COMMIT PREPARED {}").format(sql.Literal(gid)))

        def rollback_prepared(gid: str) -> None:
            conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))

        def log_running_xacts() -> None:
            # pg_log_standby_snapshot (16+) writes one; before, a checkpoint does.
            conn.execute(
                "SELECT pg_log_standby_snapshot()" if server.version >= 16 else "CHECKPOINT"
            )

        def slot_positions() -> tuple[int, int]:
            row = conn.execute(
                "SELECT confirmed_flush_lsn - '0/0', restart_lsn - '0/0' FROM pg_replication_slots"
                " WHERE slot_name = %s",
                (slot,),
            ).fetchone()
            return (int(row[0]), int(row[1])) if row is not None else (0, 0)

        try:
            yield Side(
                dsn,
                slot,
                publication,
                commit,
                slot_positions,
                run_long,
                begin,
                commit_prepared,
                rollback_prepared,
                log_running_xacts,
                # A walsender waiting on a lock reads nothing: the end of its client's
                # connection waits in its socket, whenever the client went.
                lambda _pid: None,
            )
        finally:
            # A prepared transaction left by a failed run would hold the table's lock.
            for (gid,) in conn.execute(
                "SELECT gid FROM pg_prepared_xacts WHERE gid = %s", (f"{slot}_gid",)
            ).fetchall():
                conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
            _drop_slot(conn, slot)
            conn.execute(sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(publication)))
            conn.execute(sql.SQL("DROP TABLE {}").format(ident))


def _apply(conn: Any, ident: Any, rows: Sequence[Row]) -> None:
    from psycopg import sql  # noqa: PLC0415 - a test-time dependency

    for kind, key, value in rows:
        if kind == "insert":
            conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(ident), (key, value))
        elif kind == "update":
            query = sql.SQL("UPDATE {} SET v = %s WHERE id = %s").format(ident)
            conn.execute(query, (value, key))
        else:
            conn.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(ident), (key,))


class RealOpenTransaction:
    """A transaction left open on a connection of its own (``conn``, autocommit), on the
    table ``ident`` (a psycopg ``sql.Identifier``)."""

    def __init__(self, conn: Any, ident: Any) -> None:
        self.conn = conn
        self.ident = ident
        conn.execute("BEGIN")

    def write(self, rows: Sequence[Row]) -> None:
        _apply(self.conn, self.ident, rows)
        # An open transaction's records reach the walsender once the WAL writer flushes
        # them (wal_writer_delay, 200 ms).
        time.sleep(0.5)

    def commit(self) -> None:
        self._end("COMMIT")

    def rollback(self) -> None:
        self._end("ROLLBACK")

    def prepare(self, gid: str) -> None:
        from psycopg import sql  # noqa: PLC0415 - a test-time dependency

        self._end(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))

    def _end(self, command: Any) -> None:
        self.conn.execute(command)
        self.conn.close()


class FakeOpenTransaction:
    """A transaction left open on the fake (``WalSender.begin``); ``changes`` turns
    rows into script changes."""

    def __init__(self, server: Any, changes: Callable[[Sequence[Row]], list[Any]]) -> None:
        self.txn = server.begin()
        self.changes = changes

    def write(self, rows: Sequence[Row]) -> None:
        self.txn.write(self.changes(rows))

    def commit(self) -> None:
        self.txn.commit()

    def rollback(self) -> None:
        self.txn.rollback()

    def prepare(self, gid: str) -> None:
        self.txn.prepare(gid)


def _drop_slot(conn: Any, slot: str) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            return
        except Exception:  # the killed consumer's walsender may still hold it
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@contextmanager
def fake_side(major: int, names: tuple[str, str, str]) -> Iterator[Side]:
    """The fake emulating ``major``, serving a script with the same table, publication and
    slot; transactions committed with ``WalSender.commit``."""
    from pgwire_mock.pytest_plugin import start_walsender  # noqa: PLC0415
    from pgwire_mock.script import (  # noqa: PLC0415
        CommitPrepared,
        RollbackPrepared,
        Script,
        column,
        delete,
        insert,
        rollback_to_savepoint,
        savepoint,
        update,
    )

    table, publication, slot = names
    name = f"public.{table}"
    script = (
        Script(pg_version=major, logical_decoding_work_mem=64)
        .table(name, columns=[column("id", "int4", key=True), column("v", "text")])
        .publication(publication, tables=[name])
        .slot(slot)
    )
    # PostgreSQL's rule for where a new slot starts (a story creates one).
    server = start_walsender(script, new_slots="end_of_wal")
    makers: dict[str, Callable[[int, str], Any]] = {
        "insert": lambda key, value: insert(name, id=key, v=value),
        "update": lambda key, value: update(name, id=key, v=value),
        "delete": lambda key, _value: delete(name, key={"id": key}),
    }

    def run_long(txn: LongTransaction) -> None:
        changes: list[Any] = []
        for part, command in txn:
            changes += [insert(name, id=key, v=value) for _, key, value in part]
            verb, _, savepoint_name = command.rpartition(" ")
            if verb == "SAVEPOINT":
                changes.append(savepoint(savepoint_name))
            elif verb == "ROLLBACK TO SAVEPOINT":
                changes.append(rollback_to_savepoint(savepoint_name))
        server.commit(changes, rollback=txn[-1][1] == "ROLLBACK", long_running=True)

    def changes(rows: Sequence[Row]) -> list[Any]:
        return [makers[kind](key, value) for kind, key, value in rows]

    def client_gone(pid: int) -> None:
        # The fake reads the end of a connection in its reactor thread, whatever its
        # session does: wait for that, so that the story's next step (a commit) comes
        # after it, as it comes before PostgreSQL's walsender reads again.
        def read(state: Any) -> bool:
            return bool(getattr(state.sessions.get(pid), "client_gone", True))

        server.wait_until(lambda s: s.with_state(read), 10)

    try:
        yield Side(
            server.dsn(),
            slot,
            publication,
            lambda rows: server.commit(changes(rows)),
            lambda: (server.slots[slot].confirmed_flush, server.slots[slot].restart_lsn),
            run_long,
            lambda: FakeOpenTransaction(server, changes),
            lambda gid: server.append(CommitPrepared(gid)),
            lambda gid: server.append(RollbackPrepared(gid)),
            lambda: None,  # the fake's restart_lsn moves at any confirmation
            client_gone,
        )
    finally:
        server.stop()
