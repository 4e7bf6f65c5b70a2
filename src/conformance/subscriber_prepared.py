"""PostgreSQL's own two-phase subscriber restarted after it prepared a transaction,
against the fake and against a real publisher (conformance.subscriber_live's).

The subscription has two_phase on; once its table is synchronized and two-phase is
enabled (subtwophasestate 'e': the apply worker restarts itself for it), a transaction
writes :data:`~conformance.subscriber_live.OPEN_PARTS` [0] on the publisher (600 rows,
past the 64 kB logical_decoding_work_mem: a streaming subscription gets it in blocks)
and is prepared. The subscriber prepares it too, as ``pg_gid_<subscription>_<xid>``, and
its replication origin moves past the prepare. The subscription is disabled, and the
publisher commits or rolls back the prepared transaction, while the subscription is
down or once it is enabled again. The new walsender starts at the origin's position,
after the prepare, so it must send the transaction's end alone (Commit Prepared or
Rollback Prepared): sent again whole, the subscriber fails, the gid being in use
(ReorderBufferFinishPrepared's rule for a transaction prepared before the start point).
The subscriber ends with the 600 rows or without them, and no prepared transaction.

Or the subscription is disabled inside the transaction (once the subscriber read into
it: a streaming one got a block), which writes 10 more rows and is prepared while it is
down: the new walsender decodes it again from its first change and sends it prepared
(Begin Prepare ... Prepare, or streamed and Stream Prepare), then its end.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance import subscriber_live as live
from conformance.subscriber_tap import Tap

__all__ = ["Cell", "Outcome", "cells", "run", "subscriber_errors"]


@dataclass(frozen=True)
class Cell:
    """One run of the story: the subscription's ``options``; whether the prepared
    transaction is rolled back (else committed), finished while the subscription is
    down (else once it is enabled again), and prepared while it is down, after 10 more
    rows (else before the restart, the subscriber having prepared it)."""

    options: Mapping[str, str]
    rollback: bool = False
    while_down: bool = False
    prepare_while_down: bool = False


def cells(major: int) -> list[Cell]:
    """The cells for a subscriber and publisher of ``major`` (15+): each end, down and
    up, prepared before the restart or while down, with and without streaming
    (parallel on 16+)."""
    off, streaming = {"streaming": "off"}, {"streaming": "parallel" if major >= 16 else "on"}
    return [
        Cell(off),
        Cell(streaming, while_down=True),
        Cell(off, rollback=True, while_down=True),
        Cell(streaming, rollback=True),
        Cell(streaming, prepare_while_down=True),
        Cell(off, rollback=True, while_down=True, prepare_while_down=True),
    ]


@dataclass
class Outcome:
    """The subscriber's table after the story, and what it observed on the way."""

    rows: list[tuple[int, str | None]]
    prepared_before: int  # the subscriber's prepared transactions at the restart
    prepared_after: int  # and at the end
    errors: list[str]  # the subscriber's ERROR lines during the run
    own_rows: list[tuple[int, str]] | None  # the real publisher's table
    # What the subscriber received before and after the restart (live.shape).
    before_restart: list[str]
    after_restart: list[str]


def run(
    subscriber: Any,
    publisher: live.Publisher,
    cell: Cell,
    *,
    decodes_prepare: bool = True,
    timeout: float = 30,
) -> Outcome:
    """The story of the module docstring: ``subscriber`` (a cluster) subscribes to
    ``publisher`` with the cell's options (copy_data and two_phase on) and is restarted
    around the prepared transaction as the cell says. Without ``decodes_prepare`` (a 14
    publisher, which does not take two_phase: the subscriber leaves it out and enables
    two-phase all the same) the transaction comes at its COMMIT PREPARED, whole, and
    the subscriber prepares nothing."""
    from psycopg import sql  # noqa: PLC0415 - a test-time dependency

    pub = publisher.base
    table = sql.Identifier(pub.table)
    name = f"s_{uuid.uuid4().hex[:10]}"
    ident = sql.Identifier(name)
    gid = f"g_{uuid.uuid4().hex[:10]}"
    log = Path(subscriber.log_file)
    log_start = log.stat().st_size
    with Tap(pub.conninfo) as tap, subscriber.connect() as conn:
        one = live.query_one(conn, name)
        ready = (
            "SELECT bool_and(r.srsubstate = 'r') AND bool_and(s.subtwophasestate = 'e') "
            "FROM pg_subscription_rel r JOIN pg_subscription s ON s.oid = r.srsubid "
            "WHERE s.subname = %s"
        )
        prepared = "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'pg_gid_%%'"
        marker = sql.SQL("SELECT 1 FROM {} WHERE id = 9900").format(table)

        settings = {**cell.options, "copy_data": "true", "two_phase": "true"}
        with live.subscription(conn, name, tap.conninfo, pub.publication, pub.table, settings):
            live.wait_for(lambda: one(ready) and one(live.RECEIVED) is not None, timeout, "sync")
            before = publisher.end_of_wal()
            txn = publisher.begin()
            txn.write(live.OPEN_PARTS[0])
            if cell.prepare_while_down:
                # Restarted inside the transaction, as in conformance.subscriber_live,
                # once the subscriber has read (and confirmed) into it.
                live.poll(lambda: publisher.confirmed_flush(name) > before, 5)
            else:
                txn.prepare(gid)
                if decodes_prepare:
                    live.wait_for(lambda: one(prepared, None) == 1, timeout, "the prepare")
                else:
                    # Until the subscriber confirmed past the PREPARE: the restarted
                    # walsender then starts after the transaction's changes and sends it
                    # whole at COMMIT PREPARED, not streamed (as it does from before them).
                    end = publisher.end_of_wal()
                    live.poll(lambda: publisher.confirmed_flush(name) >= end, 10)
            prepared_before = int(one(prepared, None))
            conn.execute(sql.SQL("ALTER SUBSCRIPTION {} DISABLE").format(ident))
            restart = len(tap.received)
            # Until its processes are gone (see conformance.subscriber_live).
            live.wait_for(
                lambda: one(live.WORKERS_LEFT, None) == 0, timeout, "the apply worker's exit"
            )
            live.wait_for(lambda: not publisher.slot_active(name), timeout, "the walsender's exit")
            if cell.prepare_while_down:
                txn.write(live.OPEN_PARTS[1])
                txn.prepare(gid)
            if cell.while_down:
                publisher.finish_prepared(gid, cell.rollback)
            conn.execute(sql.SQL("ALTER SUBSCRIPTION {} ENABLE").format(ident))
            live.wait_for(lambda: one(live.RECEIVED) is not None, timeout, "the new walsender")
            if not cell.while_down:
                if cell.prepare_while_down and decodes_prepare:
                    live.wait_for(lambda: one(prepared, None) == 1, timeout, "the prepare")
                publisher.finish_prepared(gid, cell.rollback)
            pub.commit(live.AFTER_ROLLBACK if cell.rollback else live.AFTER_COMMIT)
            arrived = lambda: conn.execute(marker).fetchone() is not None  # noqa: E731
            if not live.poll(arrived, timeout):
                raise TimeoutError(
                    f"no marker; the subscriber's errors: {subscriber_errors(log, log_start)}"
                )
            query = sql.SQL("SELECT id, v FROM {} ORDER BY id").format(table)
            rows = [(int(r[0]), r[1]) for r in conn.execute(query).fetchall()]
            prepared_after = int(one(prepared, None))
        tapped = tap.received
    publisher.drop_slot(name)
    errors = subscriber_errors(log, log_start, name)
    own = pub.own_rows() if pub.own_rows is not None else None
    return Outcome(
        rows,
        prepared_before,
        prepared_after,
        errors,
        own,
        live.shape([m for c in tapped[:restart] for m in c]),
        live.shape([m for c in tapped[restart:] for m in c]),
    )


def subscriber_errors(log: Path, start: int, name: str | None = None) -> list[str]:
    """live.error_lines of subscription ``name``, but for a race of the subscriber's own:
    the apply worker restarts itself to enable two-phase once the table is synchronized,
    and the launcher may start the new one before the old one released the replication
    origin (on_shmem_exit), which fails and is started again (seen against either
    publisher)."""
    return live.error_lines(log, start, name, leave_out=(live.ORIGIN_RACE,))
