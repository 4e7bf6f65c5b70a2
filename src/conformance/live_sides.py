"""The two sides of the live-WAL check (:mod:`conformance.live`), with the same table,
publication and slot names (:func:`new_names`): real PostgreSQL, transactions committed in
SQL (:func:`real_side`), and the fake serving a script, transactions committed with
``WalSender.commit`` (:func:`fake_side`); a transaction left open on each
(:class:`RealOpenTransaction`, :class:`FakeOpenTransaction`, which
conformance.subscriber_live uses too)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from itertools import count
from typing import Any

from conformance.live_types import LongTransaction, OpenTransaction, Row, Side

__all__ = [
    "FakeOpenTransaction",
    "RealOpenTransaction",
    "apply_rows",
    "create_story_objects",
    "drop_slot",
    "fake_side",
    "fake_story_server",
    "new_names",
    "real_side",
    "story_script",
]


def new_names() -> tuple[str, str, str]:
    """A table, publication and slot name no other run uses (both sides take the same:
    the Relation message carries the table's name)."""
    tag = uuid.uuid4().hex[:10]
    return f"live_{tag}", f"live_pub_{tag}", f"live_slot_{tag}"


def create_story_objects(conn: Any, names: tuple[str, str, str], *, second: bool = False) -> Any:
    """The story's table (id int key, v text), a publication of it and a pgoutput slot,
    made on a real server through ``conn`` (with ``second``, first a second table
    ``{table}_x`` (id int) that the publication leaves out); the table's identifier."""
    from psycopg import sql  # noqa: PLC0415 - a test-time dependency

    table, publication, slot = names
    ident = sql.Identifier(table)
    if second:
        conn.execute(sql.SQL("CREATE TABLE {} (id int)").format(sql.Identifier(f"{table}_x")))
    conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(ident))
    conn.execute(
        sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(sql.Identifier(publication), ident)
    )
    conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    return ident


@contextmanager
def real_side(server: Any, names: tuple[str, str, str], *, second: bool = False) -> Iterator[Side]:
    """A table, publication and slot on a real server (``conformance.provision.Server``);
    transactions committed in SQL; with ``second``, a second table for
    ``Side.catalog_command``. Everything is dropped afterwards."""
    from psycopg import conninfo, sql  # noqa: PLC0415 - a test-time dependency

    table, publication, slot = names
    # The fake's scripts run with the least logical_decoding_work_mem, so the big
    # transaction streams in blocks on both sides.
    dsn = conninfo.make_conninfo(
        server.replication_dsn, options="-c logical_decoding_work_mem=64kB"
    )
    with server.connect() as conn:
        ident = create_story_objects(conn, names, second=second)
        other = sql.Identifier(f"{table}_x")
        added = count(1)

        def catalog_command(command: str) -> None:
            if command in ("publish", "unpublish"):
                verb = "ADD" if command == "publish" else "DROP"
                alter = sql.SQL("ALTER PUBLICATION {} " + verb + " TABLE {}")
                conn.execute(alter.format(sql.Identifier(publication), other))
            elif command == "truncate":
                conn.execute(sql.SQL("TRUNCATE {}").format(other))
            else:
                kind = "int" if command == "add_int" else "text"
                column = sql.Identifier(f"c{next(added)}")
                alter = sql.SQL("ALTER TABLE {} ADD COLUMN {} " + kind)
                conn.execute(alter.format(other, column))

        def commit(rows: Sequence[Row]) -> None:
            with conn.transaction():
                apply_rows(conn, ident, rows, other)

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
            return RealOpenTransaction(server.connect(), ident, other)

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
                catalog_command if second else None,
            )
        finally:
            # A prepared transaction left by a failed run would hold the table's lock.
            for (gid,) in conn.execute(
                "SELECT gid FROM pg_prepared_xacts WHERE gid = %s", (f"{slot}_gid",)
            ).fetchall():
                conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
            drop_slot(conn, slot)
            conn.execute(sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(publication)))
            conn.execute(sql.SQL("DROP TABLE {}").format(ident))
            if second:
                conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(f"{table}_x")))


def apply_rows(conn: Any, ident: Any, rows: Sequence[Row], second: Any = None) -> None:
    """Write ``rows`` into the table ``ident`` (``insert_x`` ones into ``second``; both
    psycopg ``sql.Identifier``)."""
    from psycopg import sql  # noqa: PLC0415 - a test-time dependency

    for kind, key, value in rows:
        if kind == "insert":
            conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(ident), (key, value))
        elif kind == "update":
            query = sql.SQL("UPDATE {} SET v = %s WHERE id = %s").format(ident)
            conn.execute(query, (value, key))
        elif kind == "savepoint":
            conn.execute(sql.SQL("SAVEPOINT {}").format(sql.Identifier(value)))
        elif kind == "rollback_to":
            conn.execute(sql.SQL("ROLLBACK TO SAVEPOINT {}").format(sql.Identifier(value)))
        elif kind == "insert_x":
            conn.execute(sql.SQL("INSERT INTO {} (id) VALUES (%s)").format(second), (key,))
        elif kind == "alter_x":  # an int column named ``value``
            alter = sql.SQL("ALTER TABLE {} ADD COLUMN {} int")
            conn.execute(alter.format(second, sql.Identifier(value)))
        else:
            conn.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(ident), (key,))


class RealOpenTransaction:
    """A transaction left open on a connection of its own (``conn``, autocommit), on the
    table ``ident`` (and ``second``; psycopg ``sql.Identifier``)."""

    def __init__(self, conn: Any, ident: Any, second: Any = None) -> None:
        self.conn = conn
        self.ident = ident
        self.second = second
        conn.execute("BEGIN")

    def write(self, rows: Sequence[Row]) -> None:
        apply_rows(self.conn, self.ident, rows, self.second)
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


def drop_slot(conn: Any, slot: str) -> None:
    """Drop ``slot``, waiting (up to 10 s) for a walsender that still holds it to exit."""
    deadline = time.monotonic() + 10
    while True:
        try:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            return
        except Exception:  # the killed consumer's walsender may still hold it
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def story_script(major: int, names: tuple[str, str, str], *, second: bool = False) -> Any:
    """The script of a fake emulating ``major`` for a story: its table (id int4 key, v
    text), publication and slot, and the least logical_decoding_work_mem, so that the
    big transaction streams in blocks as on the real side (``real_side``); with
    ``second``, first the second table (id int4)."""
    from pgwire_mock.script import Script, column  # noqa: PLC0415

    table, publication, slot = names
    name = f"public.{table}"
    script = Script(pg_version=major, logical_decoding_work_mem=64)
    if second:
        script.table(f"{name}_x", columns=[column("id", "int4")])
    return (
        script.table(name, columns=[column("id", "int4", key=True), column("v", "text")])
        .publication(publication, tables=[name])
        .slot(slot)
    )


def fake_story_server(
    major: int, names: tuple[str, str, str], *, second: bool = False
) -> tuple[Any, Callable[[Sequence[Row]], list[Any]]]:
    """The fake emulating ``major``, serving the story's script (:func:`story_script`),
    started (``stop()`` it); and what turns rows into the script's changes."""
    from pgwire_mock.pytest_plugin import start_walsender  # noqa: PLC0415
    from pgwire_mock.script import (  # noqa: PLC0415
        alter_table,
        column,
        delete,
        insert,
        rollback_to_savepoint,
        savepoint,
        update,
    )

    name = f"public.{names[0]}"
    script = story_script(major, names, second=second)
    # PostgreSQL's rule for where a new slot starts (a story creates one).
    server = start_walsender(script, new_slots="end_of_wal")
    makers: dict[str, Callable[[int, str], Any]] = {
        "insert": lambda key, value: insert(name, id=key, v=value),
        "update": lambda key, value: update(name, id=key, v=value),
        "delete": lambda key, _value: delete(name, key={"id": key}),
        "savepoint": lambda _key, value: savepoint(value),
        "rollback_to": lambda _key, value: rollback_to_savepoint(value),
        "insert_x": lambda key, _value: insert(f"{name}_x", id=key),
        "alter_x": lambda _key, value: alter_table(f"{name}_x", add=[column(value, "int4")]),
    }

    def changes(rows: Sequence[Row]) -> list[Any]:
        return [makers[kind](key, value) for kind, key, value in rows]

    return server, changes


@contextmanager
def fake_side(major: int, names: tuple[str, str, str], *, second: bool = False) -> Iterator[Side]:
    """The fake emulating ``major``, serving a script with the same table, publication and
    slot (and second table); transactions committed with ``WalSender.commit``."""
    from pgwire_mock.script import (  # noqa: PLC0415
        AlterPublication,
        CommitPrepared,
        RollbackPrepared,
        Transaction,
        alter_table,
        column,
        insert,
        rollback_to_savepoint,
        savepoint,
        truncate,
    )

    table, publication, slot = names
    name = f"public.{table}"
    server, changes = fake_story_server(major, names, second=second)
    added = count(1)

    def catalog_command(command: str) -> None:
        if command in ("publish", "unpublish"):
            action = "add" if command == "publish" else "drop"
            server.append(AlterPublication(publication, action, (f"{name}_x",)))
        elif command == "truncate":
            server.append(Transaction((truncate(f"{name}_x"),)))
        else:
            kind = "int4" if command == "add_int" else "text"
            added_column = column(f"c{next(added)}", kind)
            server.append(alter_table(f"{name}_x", add=[added_column]))

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
            # As on the real side: pg_log_standby_snapshot (16+), else CHECKPOINT.
            server.log_standby_snapshot if major >= 16 else server.checkpoint,
            client_gone,
            catalog_command if second else None,
        )
    finally:
        server.stop()
