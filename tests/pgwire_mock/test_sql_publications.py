"""ALTER PUBLICATION on a server with no script to write to (a recording, or nothing
served): the catalog's own refusals and pg_publication_tables, as on PostgreSQL (whose
answers tests/conformance/test_publication_ddl_postgres.py compares on a script)."""

from __future__ import annotations

import contextlib
import time

import psycopg

from pgwire_mock.pytest_plugin import start_walsender


def test_alter_publication_changes_the_catalog_and_refuses_as_postgresql() -> None:
    server = start_walsender()
    answers = []
    try:
        dsn = server.dsn(replication="database")
        with psycopg.connect(dsn, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
            for statement in (
                "CREATE PUBLICATION p FOR TABLE a",
                "CREATE PUBLICATION allp FOR ALL TABLES",
                "ALTER PUBLICATION p ADD TABLE b",
                "ALTER PUBLICATION p ADD TABLE a",
                "ALTER PUBLICATION p DROP TABLE c",
                "ALTER PUBLICATION allp ADD TABLE a",
                "ALTER PUBLICATION nosuch SET TABLE a",
                "ALTER PUBLICATION p DROP TABLE a",
                "SELECT tablename FROM pg_publication_tables WHERE pubname = 'p'",
                "ALTER PUBLICATION p SET TABLE c, d",
                "SELECT tablename FROM pg_publication_tables WHERE pubname = 'p'",
            ):
                try:
                    cur = conn.execute(statement)
                    rows = cur.fetchall() if cur.description else []
                    answers.append((cur.statusmessage, [r[0] for r in rows]))
                except psycopg.Error as err:
                    answers.append((err.diag.sqlstate, err.diag.message_primary))
    finally:
        server.stop()
    assert answers == [
        ("CREATE PUBLICATION", []),
        ("CREATE PUBLICATION", []),
        ("ALTER PUBLICATION", []),
        ("42710", 'relation "a" is already member of publication "p"'),
        ("42704", 'relation "c" is not part of the publication'),
        ("55000", 'publication "allp" is defined as FOR ALL TABLES'),
        ("42704", 'publication "nosuch" does not exist'),
        ("ALTER PUBLICATION", []),
        ("SELECT 1", ["b"]),
        ("ALTER PUBLICATION", []),
        ("SELECT 2", ["c", "d"]),
    ]


def _cost(statement: str) -> float:
    """The best of three CPU times of the SQL layer on ``statement`` (errors included)."""
    from pgwire_mock.server.errors import ServerError
    from pgwire_mock.server.sql import SqlLayer
    from pgwire_mock.server.state import ServerState

    layer = SqlLayer(16, ServerState())
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        with contextlib.suppress(ServerError):
            layer.execute(statement, in_transaction=False)
        best = min(best, time.process_time() - start)
    return best


def test_publication_statements_cost_linear_work_in_their_length() -> None:
    """8x the statement costs well under the 64x a quadratic match would (a lazy table
    list followed by many " with (" took 10 s at 160 kB): a ratio of two runs, not a
    clock limit."""
    hostile = (
        lambda n: "create publication p for table " + "a with (" * n,
        lambda n: "create publication p for table " + "a with (x)" * n + " z",
        lambda n: "alter publication p set (" + "'x," * n,
        lambda n: "create publication p with (" + "publish = 'a, b', " * n + ")",
    )
    for make in hostile:
        small, large = _cost(make(2_000)), _cost(make(16_000))
        assert large < 24 * max(small, 0.0005), (make(1)[:40], small, large)
