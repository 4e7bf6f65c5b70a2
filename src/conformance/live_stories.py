"""The live-WAL check's stories (:mod:`conformance.live`) of a consumer killed and
restarted, each told on one side (:class:`conformance.live_types.Side`).

The story (:func:`run_story`) is the one a CDC consumer's test tells (README, "Testing a
consumer's restarts"): commit, read and acknowledge; commit, read without acknowledging
(the consumer dies before its flush); two more commits while it is down; restart from the
slot and read everything not acknowledged, exactly once. Both sides run the same psycopg2
consumer with the same pgoutput options.

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
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping

from conformance.live_types import (
    LONG_TRANSACTIONS,
    OPEN_PARTS,
    TRANSACTIONS,
    Consumer,
    LiveRun,
    Received,
    Side,
    _rows,
)

__all__ = [
    "run_held_prepared_story",
    "run_late_two_phase_story",
    "run_long_story",
    "run_open_story",
    "run_prepared_restart_lsn_story",
    "run_prepared_story",
    "run_story",
    "run_two_open_story",
    "run_unconfirmed_prepare_story",
]


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
