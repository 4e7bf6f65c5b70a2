"""PostgreSQL's own subscriber when a table joins the publication: ALTER PUBLICATION ...
ADD TABLE on the publisher, ALTER SUBSCRIPTION ... REFRESH PUBLICATION on the
subscriber, against the fake and against a real publisher.

The publisher has two tables (id int key, v text) with :data:`ROWS` rows each and a
publication of the first. The subscription (copy_data on) synchronizes the first; rows
are then written to both tables, the second is added to the publication (on the fake
through its SQL layer, as on PostgreSQL) and written to again; the subscription is
refreshed, which starts a table sync of the second (COPY at its slot's snapshot, then
the changes after it), and a last row is written to each. The subscriber must end with
both tables equal to the publisher's.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from conformance import subscriber_live as live
from conformance.live_sides import drop_slot

__all__ = ["ROWS", "Outcome", "Publisher", "fake_publisher", "real_publisher", "run"]

#: Rows in each table before the subscription exists.
ROWS = 50


@dataclass
class Publisher:
    conninfo: str
    tables: tuple[str, str]
    publication: str
    insert: Callable[[str, int], object]  # a row into one of the tables, committed
    sql: Callable[[str], object]  # a statement on the publisher (ALTER PUBLICATION)
    rows: Callable[[str], list[tuple[int, str]]] | None  # a table's rows (real only)


@dataclass
class Outcome:
    rows: dict[str, list[tuple[int, str]]]  # the subscriber's tables at the end
    states: str  # pg_subscription_rel states at the end
    errors: list[str]


def _value(key: int) -> str:
    return f"row {key}"


@contextmanager
def real_publisher(server: Any, tag: str) -> Iterator[Publisher]:
    tables = (f"refresh_a_{tag}", f"refresh_b_{tag}")
    publication = f"refresh_pub_{tag}"
    with server.connect() as conn:
        for table in tables:
            conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text)")
            conn.execute(
                f"INSERT INTO {table} SELECT g, 'row ' || g FROM generate_series(1, %s) g",
                (ROWS,),
            )
        conn.execute(f"CREATE PUBLICATION {publication} FOR TABLE {tables[0]}")

        def rows(table: str) -> list[tuple[int, str]]:
            found = conn.execute(f"SELECT id, v FROM {table} ORDER BY id").fetchall()
            return [(int(r[0]), str(r[1])) for r in found]

        try:
            yield Publisher(
                f"host={server.host} port={server.port} user=postgres dbname=postgres",
                tables,
                publication,
                lambda table, key: conn.execute(
                    f"INSERT INTO {table} VALUES (%s, %s)", (key, _value(key))
                ),
                conn.execute,
                rows,
            )
        finally:
            for (slot,) in conn.execute("SELECT slot_name FROM pg_replication_slots").fetchall():
                drop_slot(conn, slot)
            conn.execute(f"DROP PUBLICATION {publication}")
            conn.execute(f"DROP TABLE {tables[0]}, {tables[1]}")


@contextmanager
def fake_publisher(major: int, tag: str) -> Iterator[Publisher]:
    import psycopg  # noqa: PLC0415 - a test-time dependency

    from pgwire_mock.pytest_plugin import start_walsender  # noqa: PLC0415
    from pgwire_mock.script import Script, column, insert  # noqa: PLC0415

    tables = (f"refresh_a_{tag}", f"refresh_b_{tag}")
    publication = f"refresh_pub_{tag}"
    script = Script(pg_version=major)
    for table in tables:
        script.table(
            f"public.{table}",
            columns=[column("id", "int4", key=True), column("v", "text")],
            rows=[{"id": i, "v": _value(i)} for i in range(1, ROWS + 1)],
        )
    script.publication(publication, tables=[f"public.{tables[0]}"])
    server = start_walsender(script, databases=["postgres"], new_slots="end_of_wal")

    def sql(statement: str) -> None:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute(statement)

    try:
        yield Publisher(
            f"host=127.0.0.1 port={server.port} user=postgres dbname=postgres",
            tables,
            publication,
            lambda table, key: server.commit([insert(f"public.{table}", id=key, v=_value(key))]),
            sql,
            None,
        )
    finally:
        server.stop()


def run(subscriber: Any, publisher: Publisher, *, timeout: float = 60) -> Outcome:
    """The story of the module docstring, ``subscriber`` being a cluster."""
    name = f"s_{uuid.uuid4().hex[:10]}"
    first, second = publisher.tables
    log = Path(subscriber.log_file)
    log_start = log.stat().st_size
    with subscriber.connect() as conn:
        one = live.query_one(conn, name)
        states = live.SYNC_STATES
        last = "SELECT count(*) FROM {} WHERE id = %s"
        conn.execute(f"CREATE TABLE {second} (id int PRIMARY KEY, v text)")
        settings = {"copy_data": "true"}
        try:
            with live.subscription(
                conn, name, publisher.conninfo, publisher.publication, first, settings
            ):
                live.wait_for(lambda: one(states) == "r", timeout, "the first table's sync")
                publisher.insert(first, ROWS + 1)
                publisher.insert(second, ROWS + 1)  # not published yet: copied later
                publisher.sql(f"ALTER PUBLICATION {publisher.publication} ADD TABLE {second}")
                publisher.insert(second, ROWS + 2)
                conn.execute(f"ALTER SUBSCRIPTION {name} REFRESH PUBLICATION")
                live.wait_for(lambda: one(states) == "rr", timeout, "the second table's sync")
                publisher.insert(first, ROWS + 3)
                publisher.insert(second, ROWS + 3)
                for table in publisher.tables:
                    query = last.format(table)
                    live.wait_for(
                        partial(lambda q: one(q, (ROWS + 3,)) == 1, query),
                        timeout,
                        f"the last row of {table}",
                    )
                end_states = str(one(states))
                rows = {
                    table: [
                        (int(r[0]), str(r[1]))
                        for r in conn.execute(f"SELECT id, v FROM {table} ORDER BY id").fetchall()
                    ]
                    for table in publisher.tables
                }
        finally:
            conn.execute(f"DROP TABLE IF EXISTS {second}")
    errors = live.error_lines(log, log_start, name)
    return Outcome(rows, end_states, errors)
