"""PostgreSQL's own subscriber restarted while its table sync copies the table, against
the fake and against a real publisher.

A table of :data:`ROWS` rows is published; the subscription (copy_data on) starts its
table sync, which creates the sync slot (``pg_<subscription>_sync_<relation>_<system
identifier>``, from IDENTIFY_SYSTEM) with a snapshot and copies the table. While it
copies (pg_subscription_rel 'd') the subscription is disabled: the sync worker is
terminated mid-COPY and its slot left on the publisher. Enabled again, a new sync worker
drops that slot (``DROP_REPLICATION_SLOT``: it may still be active for the walsender of
the COPY that was cut, and is then retried), creates it again and copies the table
again; a change committed meanwhile comes after. The subscriber ends with the
publisher's table, and the publisher with the subscription's slot alone.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance import subscriber_live as live

__all__ = ["ROWS", "Outcome", "Publisher", "fake_publisher", "real_publisher", "run"]

#: Enough rows for the COPY to take a while on either publisher.
ROWS = 200_000


@dataclass
class Publisher:
    conninfo: str
    table: str
    publication: str
    commit: Callable[[int, str], object]  # an insert, committed
    slots: Callable[[], list[str]]  # the publisher's slot names
    slot_active: Callable[[str], bool]


@dataclass
class Outcome:
    state_at_restart: str  # the table's sync state when the subscription was disabled
    rows: int  # the subscriber's rows at the end
    checksum: str  # and their md5, in key order
    slots: list[str]  # the publisher's slots at the end, the subscription's name left out
    errors: list[str]  # the subscriber's ERROR lines, without time, process and name


def _value(i: int) -> str:
    return f"row {i:06d}"


@contextmanager
def real_publisher(server: Any, table: str, publication: str) -> Iterator[Publisher]:
    from psycopg import sql  # noqa: PLC0415 - a test-time dependency

    ident = sql.Identifier(table)
    with server.connect() as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(ident))
        conn.execute(
            sql.SQL(
                "INSERT INTO {} SELECT g, 'row ' || lpad(g::text, 6, '0') "
                "FROM generate_series(1, %s) g"
            ).format(ident),
            (ROWS,),
        )
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(sql.Identifier(publication), ident)
        )

        def commit(key: int, value: str) -> None:
            conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(ident), (key, value))

        def slots() -> list[str]:
            rows = conn.execute("SELECT slot_name FROM pg_replication_slots ORDER BY 1")
            return [str(r[0]) for r in rows.fetchall()]

        def slot_active(slot: str) -> bool:
            row = conn.execute(
                "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)
            ).fetchone()
            return bool(row and row[0])

        try:
            yield Publisher(
                f"host={server.host} port={server.port} user=postgres dbname=postgres",
                table,
                publication,
                commit,
                slots,
                slot_active,
            )
        finally:
            for slot in slots():
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            conn.execute(sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(publication)))
            conn.execute(sql.SQL("DROP TABLE {}").format(ident))


@contextmanager
def fake_publisher(major: int, table: str, publication: str) -> Iterator[Publisher]:
    from pgwire_mock.pytest_plugin import start_walsender  # noqa: PLC0415
    from pgwire_mock.script import Script, column, insert  # noqa: PLC0415

    name = f"public.{table}"
    script = (
        Script(pg_version=major)
        .table(
            name,
            columns=[column("id", "int4", key=True), column("v", "text")],
            rows=[{"id": i, "v": _value(i)} for i in range(1, ROWS + 1)],
        )
        .publication(publication, tables=[name])
    )
    server = start_walsender(script, databases=["postgres"], new_slots="end_of_wal")

    def slot_active(slot: str) -> bool:
        info = server.slots.get(slot)
        return info is not None and bool(info.active)

    try:
        yield Publisher(
            f"host=127.0.0.1 port={server.port} user=postgres dbname=postgres",
            table,
            publication,
            lambda key, value: server.commit([insert(name, id=key, v=value)]),
            lambda: sorted(server.slots),
            slot_active,
        )
    finally:
        server.stop()


def run(subscriber: Any, publisher: Publisher, *, timeout: float = 60) -> Outcome:
    """The story of the module docstring, ``subscriber`` being a cluster."""
    from psycopg import sql  # noqa: PLC0415 - a test-time dependency

    table = sql.Identifier(publisher.table)
    name = f"s_{uuid.uuid4().hex[:10]}"
    ident = sql.Identifier(name)
    log = Path(subscriber.log_file)
    log_start = log.stat().st_size
    with subscriber.connect() as conn:
        one = live.query_one(conn, name)
        state = live.SYNC_STATES
        settings = {"copy_data": "true"}
        with live.subscription(
            conn, name, publisher.conninfo, publisher.publication, publisher.table, settings
        ):
            live.wait_for(lambda: one(state) == "d", timeout, "the table's COPY")
            conn.execute(sql.SQL("ALTER SUBSCRIPTION {} DISABLE").format(ident))
            at_restart = str(one(state))
            live.wait_for(lambda: one(live.WORKERS_LEFT, None) == 0, timeout, "the workers' exit")
            conn.execute(sql.SQL("ALTER SUBSCRIPTION {} ENABLE").format(ident))
            publisher.commit(ROWS + 1, "after the restart")
            count = sql.SQL("SELECT count(*) FROM {}").format(table)
            live.wait_for(
                lambda: one(state) == "r" and one(count, None) == ROWS + 1, timeout, "the sync"
            )
            checksum = one(
                sql.SQL("SELECT md5(string_agg(id || ':' || v, ',' ORDER BY id)) FROM {}").format(
                    table
                ),
                None,
            )
            rows = int(one(count, None))
        slots = [slot.replace(name, "<subscription>") for slot in publisher.slots()]
    errors = live.error_lines(log, log_start, name)
    return Outcome(at_restart, rows, str(checksum), slots, errors)
