"""CREATE and DROP PUBLICATION (and ALTER TABLE or TRUNCATE of a table while another
transaction runs) while changes are written, run the same on real PostgreSQL and on the
fake, and what a consumer streaming through the publication sees.

pgoutput looks a publication up with the historic snapshot of the change it decodes: a
publication exists for the changes written after its creation committed, and no longer
for those after its drop. Before it exists, 14-17 end the stream with 42704 and 18 skips
it with a WARNING (LoadPublications). The stories are
:mod:`conformance.publication_ddl_stories`.

The SQL runs on a replication connection, as Debezium's does; changes are committed in
SQL on the real server and with ``WalSender.commit`` on the fake, an open transaction's
on a second connection and with ``WalSender.begin``. Then a client streams the slot
(proto_version 1; 2 with streaming for the ``streamed:`` stories) and what it receives
is kept by name (Relation with its table, Insert with its key), with the notices and
the error that ended it, if any.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from codec import pgoutput as po
from conformance.publication_ddl_stories import STORIES
from pgwire_mock.client import (
    Notice,
    ReplicationConnection,
    ReplicationTimeoutError,
    ServerError,
    WalData,
)

__all__ = ["STORIES", "Observed", "Side", "fake_side", "new_tag", "real_side", "run_story"]


class OpenWrites(Protocol):
    """A transaction left open on one server while the story goes on."""

    def insert(self, table: str, keys: range) -> object: ...
    def commit(self) -> object: ...


@dataclass
class Side:
    """One server: its replication DSN, the story's first table (the second is the
    same name with ``_b``), how a change is made (an insert into one of them), and how
    a transaction is opened."""

    dsn: str
    table: str
    write: Callable[[str, str, int], object]  # (insert | update | delete, table, key)
    begin: Callable[[], OpenWrites]
    table_command: Callable[[str], object]  # a TABLE_COMMANDS name


@dataclass
class Observed:
    sql: list[str] = field(default_factory=list)  # each statement's tag, or its error
    received: list[str] = field(default_factory=list)
    error: tuple[str, str, str] | None = None  # severity, SQLSTATE, message


#: ALTER TABLE and TRUNCATE of the story's second table: the SQL, and the script step.
TABLE_COMMANDS: Final = {
    "add_column_b": "ALTER TABLE {table}_b ADD COLUMN c int",
    "drop_column_b": "ALTER TABLE {table}_b DROP COLUMN c",
    "truncate_b": "TRUNCATE {table}_b",
}


def _table_step(name: str, table: str) -> Any:
    from pgwire_mock.script import Transaction, alter_table, column, truncate  # noqa: PLC0415

    second = f"public.{table}_b"
    if name == "add_column_b":
        return alter_table(second, add=[column("c", "int4")])
    if name == "drop_column_b":
        return alter_table(second, drop=["c"])
    return Transaction((truncate(second),))


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
    options = {"proto_version": "1"}
    if steps and steps[0] == ("streaming",):
        options = {"proto_version": "2", "streaming": "on"}
    # The fake's limit is its script's (fake_side).
    dsn = f"{side.dsn} options='-c logical_decoding_work_mem=64kB'"
    open_writes: dict[str, OpenWrites] = {}  # by the step that began it

    def stream() -> None:
        """Stream the slot until the commit of the last key inserted so far, confirm
        it, and stop (or the error, or quiet)."""
        last = written[-1] if written else None
        consumer = ReplicationConnection.connect(dsn, timeout=quiet, decode_pgoutput=True)
        try:
            names = {"publication_names": publications or pub}
            for event in consumer.start_replication(slot, 0, {**options, **names}):
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
            elif step[0] == "table":  # ("table", a TABLE_COMMANDS name)
                side.table_command(step[1])
            elif step[0] == "streaming":
                pass
            elif step[0] in ("begin", "begin_2"):
                open_writes[step[0]] = side.begin()
            elif step[0] in ("commit", "commit_2"):
                open_writes.pop(step[0].replace("commit", "begin")).commit()
            elif step[0].startswith("txn_"):
                # txn_insert, txn_bulk (600 keys); txn_2_...: the second one; ..._b
                words = step[0].split("_")
                which = "begin_2" if words[1] == "2" else "begin"
                keys = range(step[1], step[1] + (600 if "bulk" in words else 1))
                table = side.table + ("_b" if words[-1] == "b" else "")
                open_writes[which].insert(table, keys)
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
                lambda: _RealOpenWrites(server),
                lambda name: conn.execute(TABLE_COMMANDS[name].format(table=table)),
            )
        finally:
            conn.execute(f"DROP TABLE {table}, {table}_b")


class _RealOpenWrites:
    def __init__(self, server: Any) -> None:
        self.conn = server.connect()
        self.conn.execute("BEGIN")

    def insert(self, table: str, keys: range) -> None:
        query = f"INSERT INTO {table} SELECT g, 'v' FROM generate_series(%s::int, %s::int) g"
        self.conn.execute(query, (keys[0], keys[-1]))

    def commit(self) -> None:
        self.conn.execute("COMMIT")
        self.conn.close()


@contextmanager
def fake_side(major: int, tag: str, publications: Sequence[Any] = ()) -> Iterator[Side]:
    """The fake emulating ``major``, serving a script with the story's two tables and
    ``publications`` (script Publications; none by default); new slots start at the end
    of WAL, as PostgreSQL's."""
    from pgwire_mock.pytest_plugin import start_walsender  # noqa: PLC0415
    from pgwire_mock.script import Script, column, delete, insert, update  # noqa: PLC0415

    table = f"pubddl_{tag}"
    script = Script(pg_version=major, logical_decoding_work_mem=64)
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
            lambda: _FakeOpenWrites(server.begin()),
            lambda name: server.append(_table_step(name, table)),
        )
    finally:
        server.stop()


class _FakeOpenWrites:
    def __init__(self, txn: Any) -> None:
        self.txn = txn

    def insert(self, table: str, keys: range) -> None:
        from pgwire_mock.script import insert  # noqa: PLC0415

        self.txn.write([insert(f"public.{table}", id=key, v="v") for key in keys])

    def commit(self) -> None:
        self.txn.commit()
