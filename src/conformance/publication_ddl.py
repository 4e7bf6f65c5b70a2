"""CREATE and DROP PUBLICATION while changes are written, run the same on real
PostgreSQL and on the fake, and what a consumer streaming through the publication sees.

pgoutput looks a publication up with the historic snapshot of the change it decodes: a
publication exists for the changes written after its creation committed, and no longer
for those after its drop. Before it exists, 14-17 end the stream with 42704 and 18 skips
it with a WARNING (LoadPublications). The stories (:data:`STORIES`), each on a fresh
table (id int key, v text) and slot:

* ``created first``: what Debezium does at its first start: the publication, then the
  slot, then a change;
* ``created after a change``: the slot, a change, the publication, a change;
* ``dropped between changes``: the publication, the slot, a change, the drop, a change;
* ``another created for the table`` / ``for all tables``: a second publication, not
  streamed through, created and dropped between changes: its catalog change invalidates
  the table's relcache entry (every table's, for all tables), and pgoutput sends the
  Relation again before the next change;
* ``a table added`` / ``dropped`` / ``tables set``: ALTER PUBLICATION between changes to
  the story's two tables;
* ``alterations refused``: ALTER PUBLICATION of a missing publication, of a FOR ALL
  TABLES one, adding a member, dropping a table that is not one, adding a missing table;
* ``inserts only`` / ``updates and deletes only``: WITH (publish = ...);
* ``publish altered``: ALTER PUBLICATION ... SET (publish = ...) between changes;
* ``options refused``: bad WITH / SET options (an unknown action or parameter, one
  given twice, a missing publication);
* ``a table added while the consumer is away``: a consumer reads and confirms a change,
  goes, the publication gains a table, and the consumer comes back;
* ``a table that does not exist``: CREATE PUBLICATION ... FOR TABLE of a missing table.

The SQL runs on a replication connection, as Debezium's does; changes are committed in
SQL on the real server and with ``WalSender.commit`` on the fake. Then a client streams
the slot (proto_version 1) and what it receives is kept by name (Relation with its
table, Insert with its key), with the notices and the error that ended it, if any.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

from codec import pgoutput as po
from pgwire_mock.client import (
    Notice,
    ReplicationConnection,
    ReplicationTimeoutError,
    ServerError,
    WalData,
)

__all__ = ["STORIES", "Observed", "Side", "fake_side", "new_tag", "real_side", "run_story"]

#: Story name → its steps: ("sql", text with {table} and {pub}), ("slot",), ("insert", key).
STORIES: Final[dict[str, tuple[tuple[Any, ...], ...]]] = {
    "created first": (
        ("sql", "CREATE PUBLICATION {pub} FOR ALL TABLES"),
        ("slot",),
        ("insert", 1),
    ),
    "created after a change": (
        ("slot",),
        ("insert", 1),
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("insert", 2),
    ),
    "dropped between changes": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("slot",),
        ("insert", 1),
        ("sql", "DROP PUBLICATION {pub}"),
        ("insert", 2),
    ),
    # Its catalog change invalidates the table's relcache entry (CacheInvalidateRelcache,
    # for every table with FOR ALL TABLES): pgoutput sends the Relation again.
    "another created for the table": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("slot",),
        ("insert", 1),
        ("sql", "CREATE PUBLICATION {pub}_2 FOR TABLE {table}"),
        ("insert", 2),
        ("sql", "DROP PUBLICATION {pub}_2"),
        ("insert", 3),
    ),
    "another created for all tables": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("slot",),
        ("insert", 1),
        ("sql", "CREATE PUBLICATION {pub}_2 FOR ALL TABLES"),
        ("insert", 2),
        ("sql", "DROP PUBLICATION {pub}_2"),
        ("insert", 3),
    ),
    # ALTER PUBLICATION: a table added or removed is published from the commit on, or no
    # longer, and only its relcache entry is invalidated (its Relation comes again, not
    # the other table's).
    "a table added": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("slot",),
        ("insert", 1),
        ("insert_b", 2),
        ("sql", "ALTER PUBLICATION {pub} ADD TABLE {table}_b"),
        ("insert_b", 3),
        ("insert", 4),
    ),
    "a table dropped": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}, {table}_b"),
        ("slot",),
        ("insert", 1),
        ("insert_b", 2),
        ("sql", "ALTER PUBLICATION {pub} DROP TABLE {table}_b"),
        ("insert_b", 3),
        ("insert", 4),
    ),
    "tables set": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("slot",),
        ("insert", 1),
        ("sql", "ALTER PUBLICATION {pub} SET TABLE {table}_b"),
        ("insert", 2),
        ("insert_b", 3),
    ),
    "alterations refused": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("sql", "CREATE PUBLICATION {pub}_2 FOR ALL TABLES"),
        ("sql", "ALTER PUBLICATION {pub}_missing ADD TABLE {table}"),
        ("sql", "ALTER PUBLICATION {pub}_2 ADD TABLE {table}"),
        ("sql", "ALTER PUBLICATION {pub} ADD TABLE {table}"),
        ("sql", "ALTER PUBLICATION {pub} DROP TABLE {table}_b"),
        ("sql", "ALTER PUBLICATION {pub} ADD TABLE {table}_missing"),
        ("slot",),
        ("insert", 1),
    ),
    # WITH (publish = ...): the actions not published are not sent (pgoutput_change).
    "inserts only": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table} WITH (publish = 'insert')"),
        ("slot",),
        ("insert", 1),
        ("update", 1),
        ("delete", 1),
        ("insert", 2),
    ),
    "updates and deletes only": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table} WITH (publish = 'update, delete')"),
        ("slot",),
        ("insert", 1),
        ("update", 1),
        ("delete", 1),
        ("insert", 2),
    ),
    "publish altered": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("slot",),
        ("insert", 1),
        ("sql", "ALTER PUBLICATION {pub} SET (publish = 'update, delete')"),
        ("insert", 2),
        ("update", 1),
        ("delete", 1),
        ("sql", "ALTER PUBLICATION {pub} SET (publish = 'insert')"),
        ("insert", 3),
    ),
    "options refused": (
        ("sql", "CREATE PUBLICATION {pub}_2 FOR TABLE {table} WITH (publish = 'upsert')"),
        ("sql", "CREATE PUBLICATION {pub}_2 FOR TABLE {table} WITH (bogus = 1)"),
        ("sql", "CREATE PUBLICATION {pub}_2 FOR TABLE {table} WITH (publish = '', publish = '')"),
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table} WITH (publish = 'INSERT , delete')"),
        ("sql", "ALTER PUBLICATION {pub} SET (publish = 'upsert')"),
        ("sql", "ALTER PUBLICATION {pub}_missing SET (publish = 'insert')"),
        ("slot",),
        ("insert", 1),
        ("update", 1),
        ("delete", 1),
        ("insert", 2),
    ),
    # The consumer goes and comes back (it confirmed insert 1): the new walsender
    # decodes the later changes with the publication as the ALTER left it.
    "a table added while the consumer is away": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("slot",),
        ("insert", 1),
        ("stream",),
        ("sql", "ALTER PUBLICATION {pub} ADD TABLE {table}_b"),
        ("insert_b", 2),
        ("insert", 3),
    ),
    "a table that does not exist": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}_missing"),
        ("slot",),
        ("insert", 1),
    ),
}


@dataclass
class Side:
    """One server: its replication DSN, the story's first table (the second is the
    same name with ``_b``), and how a change is made (an insert into one of them)."""

    dsn: str
    table: str
    write: Callable[[str, str, int], object]  # (insert | update | delete, table, key)


@dataclass
class Observed:
    sql: list[str] = field(default_factory=list)  # each statement's tag, or its error
    received: list[str] = field(default_factory=list)
    error: tuple[str, str, str] | None = None  # severity, SQLSTATE, message


def new_tag() -> str:
    """What names a run's table, publication and slot, the same on both sides (the
    messages and errors carry them)."""
    return uuid.uuid4().hex[:8]


def run_story(
    side: Side,
    steps: tuple[tuple[Any, ...], ...],
    tag: str,
    *,
    quiet: float = 2.0,
    publications: str | None = None,
) -> Observed:
    """Run ``steps`` on ``side``, then stream the slot (through ``publications``,
    default the story's one) until the last change's commit, an error, or ``quiet``
    seconds without a message."""
    import psycopg  # noqa: PLC0415 - a test-time dependency

    pub, slot = f"pub_{tag}", f"slot_{tag}"
    observed = Observed()
    written: list[int] = []  # the keys inserted so far

    def stream() -> None:
        """Stream the slot until the commit of the last key inserted so far, confirm
        it, and stop (or the error, or quiet)."""
        last = written[-1] if written else None
        consumer = ReplicationConnection.connect(side.dsn, timeout=quiet, decode_pgoutput=True)
        try:
            options = {"proto_version": "1", "publication_names": publications or pub}
            for event in consumer.start_replication(slot, 0, options):
                if isinstance(event, Notice):
                    observed.received.append(f"{event.severity} {event.message}")
                elif isinstance(event, WalData):
                    message = event.message
                    observed.received.append(_named(message))
                    if isinstance(message, po.Insert) and message.new_tuple[0] == str(last):
                        last = -1  # its Commit is the end
                    elif isinstance(message, po.Commit) and last == -1:
                        consumer.send_status(flush=message.end_lsn)
                        break
        except ServerError as err:
            observed.error = (str(err.get("S")), err.sqlstate, err.message)
        except ReplicationTimeoutError:
            pass
        finally:
            consumer.close()

    with psycopg.connect(side.dsn, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
        for step in steps:
            if step[0] == "sql":
                try:
                    cur = conn.execute(step[1].format(table=side.table, pub=pub))
                    observed.sql.append(str(cur.statusmessage))
                except psycopg.Error as err:
                    observed.sql.append(f"{err.diag.sqlstate} {err.diag.message_primary}")
            elif step[0] == "slot":
                conn.execute(f"CREATE_REPLICATION_SLOT {slot} LOGICAL pgoutput")
            elif step[0] == "stream":  # a consumer that reads, confirms and goes away
                stream()
                observed.received.append("(the consumer stops)")
                _wait_released(conn, slot)
            else:  # insert, update or delete; insert_b into the story's second table
                kind, _, second = step[0].partition("_")
                side.write(kind, side.table + ("_b" if second else ""), step[1])
                if kind == "insert":
                    written.append(step[1])
        stream()
        conn.execute(f"DROP_REPLICATION_SLOT {slot} WAIT")
        conn.execute(f"DROP PUBLICATION IF EXISTS {pub}")
        conn.execute(f"DROP PUBLICATION IF EXISTS {pub}_2")
    return observed


def _wait_released(conn: Any, slot: str, timeout: float = 10) -> None:
    """Until the walsender of a consumer that went has released ``slot``."""
    query = "SELECT active FROM pg_replication_slots WHERE slot_name = %s"
    deadline = time.monotonic() + timeout
    while (row := conn.execute(query, (slot,)).fetchone()) is not None and row[0]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"slot {slot} still active")
        time.sleep(0.05)


def _named(message: po.PgOutputMessage | None) -> str:
    if isinstance(message, po.Relation):
        return f"Relation {message.namespace}.{message.relation_name}"
    if isinstance(message, po.Insert):
        return f"Insert {message.new_tuple[0]!s}"
    return type(message).__name__


@contextmanager
def real_side(server: Any, tag: str) -> Iterator[Side]:
    """A fresh table on a real server (``conformance.provision.Server``)."""
    table = f"pubddl_{tag}"
    with server.connect() as conn:
        for name in (table, f"{table}_b"):
            conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text)")
        statements = {
            "insert": "INSERT INTO {} VALUES (%s, 'v')",
            "update": "UPDATE {} SET v = 'w' WHERE id = %s",
            "delete": "DELETE FROM {} WHERE id = %s",
        }
        try:
            yield Side(
                server.replication_dsn,
                table,
                lambda kind, name, key: conn.execute(statements[kind].format(name), (key,)),
            )
        finally:
            conn.execute(f"DROP TABLE {table}, {table}_b")


@contextmanager
def fake_side(major: int, tag: str, publications: Sequence[Any] = ()) -> Iterator[Side]:
    """The fake emulating ``major``, serving a script with the story's two tables and
    ``publications`` (script Publications; none by default); new slots start at the end
    of WAL, as PostgreSQL's."""
    from pgwire_mock.pytest_plugin import start_walsender  # noqa: PLC0415
    from pgwire_mock.script import Script, column, delete, insert, update  # noqa: PLC0415

    table = f"pubddl_{tag}"
    script = Script(pg_version=major)
    columns = [column("id", "int4", key=True), column("v", "text")]
    for name in (table, f"{table}_b"):
        script.table(f"public.{name}", columns=columns)
    script.publications.extend(publications)
    server = start_walsender(script, new_slots="end_of_wal")
    try:
        yield Side(
            server.dsn(replication="database"),
            table,
            lambda kind, name, key: server.commit(
                [
                    insert(f"public.{name}", id=key, v="v")
                    if kind == "insert"
                    else update(f"public.{name}", id=key, v="w")
                    if kind == "update"
                    else delete(f"public.{name}", key={"id": key})
                ]
            ),
        )
    finally:
        server.stop()
