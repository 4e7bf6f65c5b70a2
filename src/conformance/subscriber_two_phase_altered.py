"""PostgreSQL 18's subscriber turning two-phase on and off for a disabled subscription
(ALTER SUBSCRIPTION ... SET (two_phase = ...)), against the fake and against a real
publisher (conformance.subscriber_live's).

The subscription starts without two_phase: a transaction prepared on the publisher comes
whole at its COMMIT PREPARED. Disabled, it is altered to two_phase on, which the
subscriber only records (subtwophasestate 'p'); enabled again, its apply worker starts
streaming with two_phase, which turns the slot's two_phase on (15+; the subscriber leaves
the option out for a 14 publisher), and a transaction of 600 rows prepared then is
prepared on the subscriber too (``pg_gid_...``) and ended by Commit Prepared alone.
Disabled again and altered to two_phase off, the subscriber sends ALTER_REPLICATION_SLOT
... (TWO_PHASE false), which an 18 publisher takes and earlier ones refuse (17 does not
know the option, 14-16 the command): ALTER SUBSCRIPTION fails with their error.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance import subscriber_live as live
from conformance.subscriber_prepared import subscriber_errors
from conformance.subscriber_tap import Tap

__all__ = ["Outcome", "run"]


@dataclass
class Outcome:
    """The subscriber's table after the story, and what it observed on the way."""

    rows: list[tuple[int, str | None]]
    # The publisher's slot's two_phase: after ALTER ... two_phase on, once enabled again,
    # after ALTER ... two_phase off.
    slot_two_phase: tuple[bool, bool, bool]
    turned_off: str | None  # ALTER ... two_phase off's error (the name left out)
    prepared_seen: int  # the subscriber's prepared transactions before COMMIT PREPARED
    prepared_after: int  # and at the end
    errors: list[str]  # the subscriber's ERROR lines, without time, process and name
    own_rows: list[tuple[int, str]] | None  # the real publisher's table
    # What the subscriber received before the first restart, after it, and after the
    # second (live.shape).
    received: tuple[list[str], list[str], list[str]]


def run(subscriber: Any, publisher: live.Publisher, *, timeout: float = 30) -> Outcome:
    """The story of the module docstring: ``subscriber`` (an 18 cluster) subscribes to
    ``publisher`` (copy_data on, two_phase off), then turns two-phase on and off."""
    from psycopg import errors as pg_errors  # noqa: PLC0415 - a test-time dependency
    from psycopg import sql  # noqa: PLC0415

    pub = publisher.base
    table = sql.Identifier(pub.table)
    name = f"s_{uuid.uuid4().hex[:10]}"
    ident = sql.Identifier(name)
    first, second = (f"g_{uuid.uuid4().hex[:10]}" for _ in range(2))
    log = Path(subscriber.log_file)
    log_start = log.stat().st_size
    with Tap(pub.conninfo) as tap, subscriber.connect() as conn:
        one = live.query_one(conn, name)

        def restart(alter: str) -> tuple[int, str | None, bool]:
            """Disabled, altered, enabled: where its connections began, the ALTER's
            error, and the slot's two_phase in between."""
            conn.execute(sql.SQL("ALTER SUBSCRIPTION {} DISABLE").format(ident))
            began = len(tap.received)
            live.wait_for(
                lambda: one(live.WORKERS_LEFT, None) == 0, timeout, "the apply worker's exit"
            )
            live.wait_for(lambda: not publisher.slot_active(name), timeout, "the walsender's exit")
            error = None
            try:
                conn.execute(
                    sql.SQL("ALTER SUBSCRIPTION {} SET ({})").format(ident, sql.SQL(alter))
                )
            except pg_errors.Error as err:
                error = str(err).replace(name, "<subscription>")
            two_phase = publisher.slot_two_phase(name)
            conn.execute(sql.SQL("ALTER SUBSCRIPTION {} ENABLE").format(ident))
            live.wait_for(lambda: one(live.RECEIVED) is not None, timeout, "the new walsender")
            return began, error, two_phase

        def row(key: int) -> bool:
            return bool(conn.execute(has, (key,)).fetchone()[0] == 1)

        synced = (
            "SELECT bool_and(r.srsubstate = 'r') FROM pg_subscription_rel r "
            "JOIN pg_subscription s ON s.oid = r.srsubid WHERE s.subname = %s"
        )
        enabled = "SELECT subtwophasestate = 'e' FROM pg_subscription WHERE subname = %s"
        prepared = "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'pg_gid_%%'"
        has = sql.SQL("SELECT count(*) FROM {} WHERE id = %s").format(table)
        marker = sql.SQL("SELECT 1 FROM {} WHERE id = 9900").format(table)

        settings = {"copy_data": "true", "two_phase": "false"}
        with live.subscription(conn, name, tap.conninfo, pub.publication, pub.table, settings):
            live.wait_for(lambda: one(synced) and one(live.RECEIVED) is not None, timeout, "sync")
            txn = publisher.begin()
            txn.write(live.OPEN_PARTS[1])  # 10 rows from 9000
            txn.prepare(first)
            publisher.finish_prepared(first, False)
            live.wait_for(lambda: row(9009), timeout, "the first prepared transaction")
            on_at, _, after_on = restart("two_phase = true")
            live.wait_for(lambda: one(enabled), timeout, "two-phase enabled")
            once_enabled = publisher.slot_two_phase(name)
            txn = publisher.begin()
            txn.write(live.OPEN_PARTS[0])  # 600 rows from 8000
            txn.prepare(second)
            if once_enabled:
                live.wait_for(lambda: one(prepared, None) == 1, timeout, "the prepare")
            else:
                live.poll(lambda: one(prepared, None) == 1, 1)  # none should come
            prepared_seen = int(one(prepared, None))
            publisher.finish_prepared(second, False)
            live.wait_for(lambda: row(8599), timeout, "the second prepared transaction")
            off_at, turned_off, after_off = restart("two_phase = false")
            pub.commit(live.AFTER_COMMIT)
            arrived = lambda: conn.execute(marker).fetchone() is not None  # noqa: E731
            if not live.poll(arrived, timeout):
                found = subscriber_errors(log, log_start)
                raise TimeoutError(f"no marker; the subscriber's errors: {found}")
            query = sql.SQL("SELECT id, v FROM {} ORDER BY id").format(table)
            rows = [(int(r[0]), r[1]) for r in conn.execute(query).fetchall()]
            prepared_after = int(one(prepared, None))
        tapped = tap.received
    publisher.drop_slot(name)
    errors = subscriber_errors(log, log_start, name)
    own = pub.own_rows() if pub.own_rows is not None else None
    parts = (tapped[:on_at], tapped[on_at:off_at], tapped[off_at:])
    return Outcome(
        rows,
        (after_on, once_enabled, after_off),
        turned_off,
        prepared_seen,
        prepared_after,
        errors,
        own,
        tuple(live.shape([m for c in part for m in c]) for part in parts),  # type: ignore[arg-type]
    )
