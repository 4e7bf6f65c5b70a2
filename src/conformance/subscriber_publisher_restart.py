"""PostgreSQL's own subscriber while its publisher restarts (``pg_ctl restart -m fast``),
against a real publisher and against the fake (``WalSender.restart``).

The subscriber applies a commit of three rows; a transaction of 600 rows stays open on
the publisher (a ``streaming`` subscription gets blocks of it). The publisher restarts:
the open transaction rolls back, the subscriber's walsender asks for a reply, the apply
worker confirms and the stream ends; the worker fails to reach the publisher while it
is down, then starts again from its replication origin. Two more commits follow. On
14-16 the publisher's slot comes back where it was created (its confirmed_flush was
never saved), but the subscriber asks to start at its origin's position, past what it
applied, so nothing comes twice. The subscriber ends with the publisher's table.
"""

from __future__ import annotations

import signal
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance import subscriber_live as live
from conformance.live_types import Row
from conformance.serve_sides import ServedServer, row_changes, row_steps
from conformance.server_restart import FakeRestart

__all__ = ["Outcome", "Publisher", "fake_publisher", "real_publisher", "run", "serve_publisher"]


@dataclass
class Publisher:
    conninfo: str
    table: str
    publication: str
    commit: Callable[[list[tuple[int, str]]], object]  # inserts, committed together
    begin: Callable[[list[tuple[int, str]]], object]  # inserts in a transaction left open
    begin_shutdown: Callable[[], object]
    start_again: Callable[[], object]


@dataclass
class Outcome:
    rows: int  # the subscriber's rows at the end
    checksum: str  # and their md5, in key order
    errors: list[str]  # its ERROR lines, but those of reaching the publisher while down


# The apply worker's lines while the publisher is down: how many depends on how long
# each publisher takes to shut down and start (a second or two, or milliseconds).
_WHILE_DOWN: tuple[str, ...] = (
    "could not connect to the publisher",
    "could not receive data from WAL stream",
    "data stream from publisher has ended",
    # After COPY 0 the worker sends CopyDone: refused if the walsender has closed first.
    "could not send end-of-streaming message to primary",
    "terminating logical replication worker due to",
    "logical replication parallel apply worker",  # 16+: its worker's follow-up lines
    "lost connection to the logical replication",
    live.ORIGIN_RACE,
)


def _rows(first: int, count: int) -> list[tuple[int, str]]:
    return [(first + i, f"row {i:04d} " + "x" * 40) for i in range(count)]


@contextmanager
def real_publisher(cluster: Any, table: str, publication: str) -> Iterator[Publisher]:
    """On a cluster of its own (``conformance.provision.Cluster``): the restart ends
    every connection to it."""
    from psycopg import sql  # noqa: PLC0415 - a test-time dependency

    ident = sql.Identifier(table)
    insert = sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(ident)
    with cluster.connect() as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(ident))
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(sql.Identifier(publication), ident)
        )
    opened: list[Any] = []

    def commit(rows: list[tuple[int, str]]) -> None:
        with cluster.connect() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(insert, rows)

    def begin(rows: list[tuple[int, str]]) -> None:
        conn = cluster.connect()
        opened.append(conn)
        conn.execute("BEGIN")
        with conn.cursor() as cur:
            cur.executemany(insert, rows)

    try:
        yield Publisher(
            f"host={cluster.host} port={cluster.port} user=postgres dbname=postgres",
            table,
            publication,
            commit,
            begin,
            cluster.begin_fast_shutdown,
            cluster.start_again,
        )
    finally:
        for conn in opened:
            conn.close()
        with cluster.connect() as conn:
            for (slot,) in conn.execute("SELECT slot_name FROM pg_replication_slots").fetchall():
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            conn.execute(sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(publication)))
            conn.execute(sql.SQL("DROP TABLE {}").format(ident))


def _script(major: int, table: str, publication: str) -> Any:
    """The fake publisher's script: the table and its publication; the subscriber
    makes its slot."""
    from pgwire_mock.script import Script, column  # noqa: PLC0415

    name = f"public.{table}"
    return (
        Script(pg_version=major, logical_decoding_work_mem=64)
        .table(name, columns=[column("id", "int4", key=True), column("v", "text")])
        .publication(publication, tables=[name])
    )


@contextmanager
def fake_publisher(major: int, table: str, publication: str) -> Iterator[Publisher]:
    from pgwire_mock.pytest_plugin import start_walsender  # noqa: PLC0415
    from pgwire_mock.script import insert  # noqa: PLC0415

    name = f"public.{table}"
    script = _script(major, table, publication)
    server = start_walsender(script, databases=["postgres"], new_slots="end_of_wal")
    restart = FakeRestart(server)

    def changes(rows: list[tuple[int, str]]) -> list[Any]:
        return [insert(name, id=key, v=value) for key, value in rows]

    def begin(rows: list[tuple[int, str]]) -> None:
        server.begin().write(changes(rows))

    try:
        yield Publisher(
            f"host=127.0.0.1 port={server.port} user=postgres dbname=postgres",
            table,
            publication,
            lambda rows: server.commit(changes(rows)),
            begin,
            restart.begin_shutdown,
            restart.start_again,
        )
    finally:
        server.stop()


@contextmanager
def serve_publisher(major: int, table: str, publication: str) -> Iterator[Publisher]:
    """A ``serve`` process as the publisher, with a state file kept as PostgreSQL keeps
    its disk; its restart is a new process on the same port and files."""
    from pgwire_mock.script import dump_script  # noqa: PLC0415

    script = _script(major, table, publication)
    with tempfile.TemporaryDirectory(prefix="pgwire-mock-publisher-") as directory:
        path = Path(directory) / "script.yaml"
        path.write_text(dump_script(script))
        state = ["--state-file", str(Path(directory) / "state.json"), "--slot-saves", "postgresql"]
        slots = ["--database", "postgres", "--new-slots", "end-of-wal"]
        server = ServedServer(["--script", str(path), *state, *slots])
        opened = iter(range(1, 1_000_000))

        def rows_of(rows: list[tuple[int, str]]) -> list[Row]:
            return [("insert", key, value) for key, value in rows]

        def begin(rows: list[tuple[int, str]]) -> None:
            txn = f"t{next(opened)}"
            server.post("/wal", [{"begin": txn}])
            server.post("/wal", [{"write": txn, "changes": row_changes(table, rows_of(rows))}])

        try:
            yield Publisher(
                f"host=127.0.0.1 port={server.port} user=postgres dbname=postgres",
                table,
                publication,
                lambda rows: server.post("/wal", row_steps(table, rows_of(rows))),
                begin,
                lambda: server.send_signal(signal.SIGINT),
                server.start_again,
            )
        finally:
            server.stop()


def run(
    subscriber: Any,
    publisher: Publisher,
    settings: Mapping[str, str],
    *,
    timeout: float = 60,
) -> Outcome:
    """The story of the module docstring, ``subscriber`` being a cluster."""
    from psycopg import sql  # noqa: PLC0415 - a test-time dependency

    table = sql.Identifier(publisher.table)
    name = f"s_{uuid.uuid4().hex[:10]}"
    log = Path(subscriber.log_file)
    log_start = log.stat().st_size
    count = sql.SQL("SELECT count(*) FROM {}").format(table)
    with subscriber.connect() as conn:
        one = live.query_one(conn, name)
        with live.subscription(
            conn,
            name,
            publisher.conninfo,
            publisher.publication,
            publisher.table,
            {"copy_data": "false", **settings},
        ):
            publisher.commit(_rows(1, 3))
            live.wait_for(lambda: one(count, None) == 3, timeout, "the first commit")
            publisher.begin(_rows(1000, 600))
            # A streaming subscriber has the first block once the publisher's walsender
            # decoded past the work-memory limit: give both publishers that moment.
            live.poll(lambda: False, 1.0)
            publisher.begin_shutdown()
            publisher.start_again()
            publisher.commit(_rows(10, 2))
            publisher.commit(_rows(20, 2))
            live.wait_for(lambda: one(count, None) == 7, timeout, "the commits after the restart")
            checksum = one(
                sql.SQL("SELECT md5(string_agg(id || ':' || v, ',' ORDER BY id)) FROM {}").format(
                    table
                ),
                None,
            )
            rows = int(one(count, None))
    errors = live.error_lines(log, log_start, name, leave_out=_WHILE_DOWN)
    return Outcome(rows, str(checksum), errors)
