"""PostgreSQL's own subscriber stopped by an apply error and brought back, against the
fake and against a real publisher (conformance.subscriber_live's).

The subscription (15+, disable_on_error on) is synchronized; the subscriber's table is
given a row of its own with the key a publisher transaction then inserts, so applying
that transaction fails (unique violation) and disables the subscription, nothing of it
confirmed. The subscription is brought back either by skipping the transaction — ALTER
SUBSCRIPTION ... SKIP with the LSN the error's context gave ("finished at", the
transaction's final LSN as the publisher's Begin, or Stream Commit, sent it) — or by
deleting the subscriber's row; it is enabled again and the new walsender sends the
transaction again from its first change. A short transaction follows, which the check
waits for. Skipped, none of the failed transaction is applied and the skip LSN is
cleared; fixed, all of it is.

Where the failed transaction was streamed, the tap holds its Stream Commit until the
subscriber has reported the last block (conformance.subscriber_tap): the subscriber
then has confirmed the block's last change, and the walsender started again streams the
transaction in one block from there (ReorderBufferCanStartStreaming), on both servers.
Left to the subscriber's timing, that happened in one CI run of many on PostgreSQL only.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance import subscriber_live as live
from conformance.subscriber_tap import Tap

__all__ = ["Cell", "Outcome", "cells", "run"]

#: The key both the subscriber's own row and the failing transaction's first row take.
CONFLICT = 9500
_FINISHED_AT = re.compile(r"finished at ([0-9A-F]+/[0-9A-F]+)")
# The leader's line after its parallel apply worker failed (16+: "... exited due to
# error", "lost connection to the ..."): whether the worker or the leader applies the
# failing block (the leader serializes some to a file and applies them itself), and how
# the leader learns of the failure, is the subscriber's own timing.
_PARALLEL_WORKER_GONE = "logical replication parallel apply worker"


@dataclass(frozen=True)
class Cell:
    """One run: the subscription's ``options``; whether the failed transaction is
    skipped (else the subscriber's row is deleted); and whether it is large (600 rows
    more, past the 64 kB logical_decoding_work_mem: streamed where the options say)."""

    options: Mapping[str, str]
    skip: bool = True
    large: bool = False


def cells(major: int) -> list[Cell]:
    """Skipped and fixed, small; skipped, large and streamed; fixed, large and applied by
    a parallel apply worker where the subscriber is 16+ (a 14 publisher's subscriber is
    15). Not skipped in parallel: a failure in the parallel worker may not log the finish
    LSN (PostgreSQL's documentation of SKIP says so), as in one run of five here."""
    out = [
        Cell({"streaming": "off"}),
        Cell({"streaming": "off"}, skip=False),
        Cell({"streaming": "on"}, large=True),
    ]
    if major >= 16:
        out.append(Cell({"streaming": "parallel"}, skip=False, large=True))
    return out


@dataclass
class Outcome:
    """The subscriber's table after the story, and what it observed on the way."""

    rows: list[tuple[int, str | None]]
    errors: list[str]  # the subscriber's ERROR lines, without their time and process
    skip_lsn_given: bool  # the error's context named the transaction's final LSN
    skip_lsn_after: str | None  # pg_subscription.subskiplsn at the end
    own_rows: list[tuple[int, str]] | None  # the real publisher's table
    # What the subscriber received before and after it was enabled again (live.shape).
    before_restart: list[str]
    after_restart: list[str]


def run(subscriber: Any, publisher: live.Publisher, cell: Cell, *, timeout: float = 30) -> Outcome:
    """The story of the module docstring for ``cell``: ``subscriber`` (a cluster)
    subscribes to ``publisher`` (copy_data and disable_on_error on)."""
    from psycopg import sql  # noqa: PLC0415 - a test-time dependency

    pub = publisher.base
    table = sql.Identifier(pub.table)
    name = f"s_{uuid.uuid4().hex[:10]}"
    ident = sql.Identifier(name)
    log = Path(subscriber.log_file)
    log_start = log.stat().st_size
    failing: list[live.Row] = [("insert", CONFLICT, "from the publisher")]
    failing += [("insert", CONFLICT + 1, "after the conflict")]
    if cell.large:
        failing += list(live.OPEN_PARTS[0])
    # Whether the subscriber confirms a position inside the failed streamed transaction,
    # which decides how it is streamed again, is its own timing: the tap fixes it.
    hold = cell.options["streaming"] == "on"
    tap = Tap(pub.conninfo, confirm_before_stream_commit=hold)
    with tap, subscriber.connect() as conn:
        one = live.query_one(conn, name)
        ready = (
            "SELECT bool_and(r.srsubstate = 'r') FROM pg_subscription_rel r "
            "JOIN pg_subscription s ON s.oid = r.srsubid WHERE s.subname = %s"
        )
        enabled = "SELECT subenabled FROM pg_subscription WHERE subname = %s"
        skip_lsn = "SELECT subskiplsn::text FROM pg_subscription WHERE subname = %s"
        marker = sql.SQL("SELECT 1 FROM {} WHERE id = 9900").format(table)

        settings = {**cell.options, "copy_data": "true", "disable_on_error": "true"}
        with live.subscription(conn, name, tap.conninfo, pub.publication, pub.table, settings):
            live.wait_for(lambda: one(ready) and one(live.RECEIVED) is not None, timeout, "sync")
            local = sql.SQL("INSERT INTO {} VALUES (%s, 'the subscriber''s own')").format(table)
            conn.execute(local, (CONFLICT,))
            pub.commit(failing)
            live.wait_for(lambda: one(enabled) is False, timeout, "disable_on_error")
            live.wait_for(
                lambda: one(live.WORKERS_LEFT, None) == 0, timeout, "the apply worker's exit"
            )
            live.wait_for(lambda: not publisher.slot_active(name), timeout, "the walsender's exit")
            restart = len(tap.received)
            found = _FINISHED_AT.findall("\n".join(live.log_since(log, log_start)))
            if cell.skip and found:
                conn.execute(
                    sql.SQL("ALTER SUBSCRIPTION {} SKIP (lsn = {})").format(
                        ident, sql.Literal(found[-1])
                    )
                )
            elif not cell.skip:
                conn.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(table), (CONFLICT,))
            conn.execute(sql.SQL("ALTER SUBSCRIPTION {} ENABLE").format(ident))
            pub.commit([("insert", 9900, "marker")])
            arrived = lambda: conn.execute(marker).fetchone() is not None  # noqa: E731
            if not live.poll(arrived, timeout):
                raise TimeoutError(
                    f"no marker; the subscriber's log: {live.log_since(log, log_start)}"
                )
            query = sql.SQL("SELECT id, v FROM {} ORDER BY id").format(table)
            rows = [(int(r[0]), r[1]) for r in conn.execute(query).fetchall()]
            skip_after = one(skip_lsn)
        tapped = tap.received
    if not all(tap.held):
        raise TimeoutError("the subscriber reported nothing before a held Stream Commit")
    publisher.drop_slot(name)
    errors = live.error_lines(log, log_start, name, leave_out=(_PARALLEL_WORKER_GONE,))
    own = pub.own_rows() if pub.own_rows is not None else None
    return Outcome(
        rows,
        errors,
        bool(found),
        skip_after,
        own,
        live.shape([m for c in tapped[:restart] for m in c]),
        live.shape([m for c in tapped[restart:] for m in c]),
    )
