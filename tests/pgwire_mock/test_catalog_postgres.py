"""A subscriber's catalog queries and COPY, asked of real PostgreSQL and of the fake.

The queries are the texts 14-17 subscribers send (read off real publishers' logs:
conformance.subscriber runs the subscribers themselves); the fake serves a script with
the real tables' definitions, OIDs and rows. Every reply must be equal: RowDescription
(catalog relation OIDs and attribute numbers included), rows (as sets where the query
says DISTINCT), tags, CopyOutResponse formats and every CopyData byte.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence

import pytest
from psycopg import sql
from test_checks_postgres import Raw, seen

from codec.wire import CopyData, CopyOutResponse, NoticeResponse
from conformance.provision import Server
from pgwire_mock.pytest_plugin import WalSender, start_walsender
from pgwire_mock.script import Script, ScriptError, column, compile_script

ROWS = [
    (1, "one", "1.50"),
    (2, "tab\tand\nnewline \\ back", None),
    (3, None, "-12345678901234567890.000001"),
    (4, "ünïcode", "NaN"),
]


def observed(messages: Sequence[object], *, distinct: bool = False) -> list[object]:
    out = []
    for m in messages:
        if isinstance(m, NoticeResponse):
            out.append(("Notice", m.fields))
        elif isinstance(m, CopyOutResponse):
            out.append(("CopyOut", m.overall_format, m.column_formats))
        elif isinstance(m, CopyData):
            out.append(("CopyData", m.data))
        else:
            out.extend(seen([m]))
    if distinct:  # DISTINCT promises no order
        rows = sorted((x for x in out if isinstance(x, tuple) and x[:1] != ("CopyData",)), key=repr)
        out = [x for x in out if not (isinstance(x, tuple) and x[:1] != ("CopyData",))] + rows
    return out


@pytest.fixture
def tables(pg_server: Server) -> Iterator[tuple[str, str, int, int]]:
    """Two tables (t: primary key; u: REPLICA IDENTITY FULL) and a publication of both."""
    tag = uuid.uuid4().hex[:8]
    t, u, pub = f"cat_t_{tag}", f"cat_u_{tag}", f"cat_pub_{tag}"
    with pg_server.connect() as conn:
        conn.execute(
            sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text, n numeric)").format(
                sql.Identifier(t)
            )
        )
        conn.execute(sql.SQL("CREATE TABLE {} (k int, w text)").format(sql.Identifier(u)))
        conn.execute(sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(sql.Identifier(u)))
        for row in ROWS:
            conn.execute(
                sql.SQL("INSERT INTO {} VALUES (%s, %s, %s)").format(sql.Identifier(t)), row
            )
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLE {}, {}").format(
                sql.Identifier(pub), sql.Identifier(t), sql.Identifier(u)
            )
        )
        t_oid = int(conn.execute("SELECT %s::regclass::oid", (t,)).fetchone()[0])  # type: ignore[index]
        u_oid = int(conn.execute("SELECT %s::regclass::oid", (u,)).fetchone()[0])  # type: ignore[index]
    yield t, u, pub, t_oid, u_oid  # type: ignore[misc]
    with pg_server.connect() as conn:
        conn.execute(sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(pub)))
        conn.execute(sql.SQL("DROP TABLE {}, {}").format(sql.Identifier(t), sql.Identifier(u)))


def fake_for(major: int, t: str, u: str, pub: str, t_oid: int, u_oid: int) -> WalSender:
    script = (
        Script(pg_version=major)
        .table(
            f"public.{t}",
            columns=[column("id", "int4", key=True), column("v", "text"), column("n", "numeric")],
            oid=t_oid,
            rows=[{"id": i, "v": v, "n": n} for i, v, n in ROWS],
        )
        .table(
            f"public.{u}",
            columns=[column("k", "int4"), column("w", "text")],
            replica_identity="full",
            oid=u_oid,
        )
        .publication(pub, tables=[f"public.{t}", f"public.{u}"])
    )
    return start_walsender(script, databases=["postgres"])


def queries(major: int, t: str, u: str, pub: str, t_oid: int, u_oid: int) -> list[str]:
    attributes = (
        "SELECT {attnum}a.attname,       a.atttypid,       a.attnum = ANY(i.indkey)"
        "  FROM pg_catalog.pg_attribute a  LEFT JOIN pg_catalog.pg_index i"
        "       ON (i.indexrelid = pg_get_replica_identity_index({oid})) WHERE a.attnum >"
        " 0::pg_catalog.int2   AND NOT a.attisdropped AND a.attgenerated = ''"
        "   AND a.attrelid = {oid} ORDER BY a.attnum"
    )
    out = [
        "SELECT t.pubname FROM\n pg_catalog.pg_publication t WHERE\n"
        f" t.pubname IN ('{pub}', 'nope')",
        f"SELECT DISTINCT t.schemaname, t.tablename \n  FROM pg_catalog.pg_publication_tables t\n"
        f" WHERE t.pubname IN ('{pub}')",
        *(
            "SELECT c.oid, c.relreplident, c.relkind  FROM pg_catalog.pg_class c  INNER JOIN "
            "pg_catalog.pg_namespace n        ON (c.relnamespace = n.oid) WHERE n.nspname = "
            f"'public'   AND c.relname = '{name}'"
            for name in (t, u, "missing")
        ),
        *(
            attributes.format(attnum=a, oid=o)
            for a in ("", "a.attnum,       ")
            for o in (t_oid, u_oid)
        ),
        f"COPY public.{t} TO STDOUT",
        f"COPY public.{t} (id, v, n) TO STDOUT",
        f"COPY public.{u} (k, w) TO STDOUT",
        f"COPY public.{t} (id, v) TO STDOUT WITH (FORMAT binary)",
        f"COPY public.{u} (k, w) TO STDOUT WITH (FORMAT binary)",
        "COPY public.missing (a) TO STDOUT",
    ]
    if major >= 15:
        out += [
            f"SELECT DISTINCT t.schemaname, t.tablename \n, t.attnames\n"
            f"  FROM pg_catalog.pg_publication_tables t\n WHERE t.pubname IN ('{pub}')",
            *(
                "SELECT DISTINCT  (CASE WHEN (array_length(gpt.attrs, 1) = c.relnatts)   THEN "
                "NULL ELSE gpt.attrs END)  FROM pg_publication p,  LATERAL "
                "pg_get_publication_tables(p.pubname) gpt,  pg_class c WHERE gpt.relid = "
                f"{o} AND c.oid = gpt.relid   AND p.pubname IN ( '{pub}' )"
                for o in (t_oid, 1)
            ),
            *(
                "SELECT DISTINCT pg_get_expr(gpt.qual, gpt.relid)  FROM pg_publication p,  "
                "LATERAL pg_get_publication_tables(p.pubname) gpt WHERE gpt.relid = "
                f"{o}   AND p.pubname IN ( '{pub}' )"
                for o in (u_oid, 1)
            ),
            f"COPY (SELECT id, n FROM ONLY public.{t}) TO STDOUT",
        ]
    if major >= 16:
        out.append(
            "SELECT DISTINCT n.nspname, c.relname, gpt.attrs\n       FROM pg_class c\n"
            "         JOIN pg_namespace n ON n.oid = c.relnamespace\n         JOIN ( SELECT "
            "(pg_get_publication_tables(VARIADIC array_agg(pubname::text))).*\n"
            f"                FROM pg_publication\n                WHERE pubname IN ( '{pub}' ))"
            " AS gpt\n             ON gpt.relid = c.oid\n"
        )
    return out


def test_catalog_queries_and_copy_are_answered_as_postgres_answers(
    pg_server: Server, tables: tuple[str, str, str, int, int]
) -> None:
    t, u, pub, t_oid, u_oid = tables
    fake = fake_for(pg_server.version, t, u, pub, t_oid, u_oid)
    params = [("user", "postgres"), ("database", "postgres"), ("replication", "database")]
    real_conn = Raw(pg_server.host, pg_server.port, params)
    fake_conn = Raw("127.0.0.1", fake.port, params)
    try:
        for query in queries(pg_server.version, t, u, pub, t_oid, u_oid):
            distinct = "DISTINCT" in query
            real = observed(real_conn.query(query), distinct=distinct)
            got = observed(fake_conn.query(query), distinct=distinct)
            if real and isinstance(real[0], tuple) and real[0][0] == "Error":
                # Errors: same SQLSTATE and message; the fake has no source location.
                fields = lambda e: {k: v for k, v in e[0][1] if k in ("C", "M", "S")}  # noqa: E731
                assert fields(got) == fields(real), query
                continue
            assert got == real, query
    finally:
        real_conn.close()
        fake_conn.close()
        fake.stop()


def _snapshot_name(messages: Sequence[object]) -> str:
    (row,) = [m for m in messages if type(m).__name__ == "DataRow"]
    return bytes(row.values[2]).decode()  # type: ignore[attr-defined]


def test_reading_tables_under_an_exported_snapshot_as_postgres_does(
    pg_server: Server, tables: tuple[str, str, str, int, int]
) -> None:
    """A slot's exported snapshot imported on another connection (what Debezium and
    pg_dump-style snapshotting clients do): SELECT and COPY see the rows as of the slot's
    consistent point, not a row committed after it; outside the transaction they do.
    With the errors a client meets on the way."""
    from pgwire_mock.script import insert

    t, u, pub, t_oid, u_oid = tables
    major = pg_server.version
    fake = fake_for(major, t, u, pub, t_oid, u_oid)
    slot = f"snap_{uuid.uuid4().hex[:8]}"
    create = f'CREATE_REPLICATION_SLOT "{slot}" LOGICAL pgoutput ' + (
        "EXPORT_SNAPSHOT" if major < 15 else "(SNAPSHOT 'export')"
    )
    replication = [("user", "postgres"), ("database", "postgres"), ("replication", "database")]
    plain = [("user", "postgres"), ("database", "postgres")]
    seen_by: dict[str, list[object]] = {}
    for side, (host, port) in {
        "postgres": (pg_server.host, pg_server.port),
        "fake": ("127.0.0.1", fake.port),
    }.items():
        exporter = Raw(host, port, replication)
        name = _snapshot_name(exporter.query(create))
        if side == "postgres":
            with pg_server.connect() as conn:
                conn.execute(
                    sql.SQL("INSERT INTO {} VALUES (5, 'after the slot', 5)").format(
                        sql.Identifier(t)
                    )
                )
        else:
            fake.commit([insert(f"public.{t}", id=5, v="after the slot", n=5)])
        reader = Raw(host, port, plain)
        out: list[object] = []
        for statement in (
            f"SET TRANSACTION SNAPSHOT '{name}'",
            f"LOCK TABLE public.{t} IN ACCESS SHARE MODE",
            "BEGIN",
            f"SET TRANSACTION SNAPSHOT '{name}'",
            "ROLLBACK",
            "BEGIN ISOLATION LEVEL REPEATABLE READ",
            "SET TRANSACTION SNAPSHOT 'nonsense'",
            "ROLLBACK",
            "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
            "BEGIN",
            "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE, READ ONLY, DEFERRABLE;",
            f"SET TRANSACTION SNAPSHOT '{name}';",
            "ROLLBACK",
            "BEGIN",
            "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY;",
            f"SET TRANSACTION SNAPSHOT '{name}';",
            f'LOCK TABLE "public"."{t}" IN ACCESS SHARE MODE;',
            f'SELECT * FROM "public"."{t}"',
            f"SELECT id, v FROM {t}",
            f"COPY public.{t} TO STDOUT",
            "COMMIT",
            f"SELECT * FROM ONLY public.{t}",
            f"SELECT nope FROM {t}",
            f"SELECT ids FROM {t}",
            f"SELECT  id,   vv FROM {t}",
            f"SELECT e FROM {t}",
            "SELECT * FROM missing_table",
            "SELECT * FROM public.missing_table",
        ):
            out.append(observed(reader.query(statement)))
        reader.close()
        exporter.close()
        seen_by[side] = out
    fake.stop()
    with pg_server.connect() as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    assert seen_by["fake"] == seen_by["postgres"]


def test_a_bug_answering_sql_is_an_error_response_not_a_dropped_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pgwire_mock.server.catalog import CatalogQueries

    def broken(self: CatalogQueries, text: str, *, in_transaction: bool) -> None:
        raise IndexError("no such group")

    monkeypatch.setattr(CatalogQueries, "answer", broken)
    server = start_walsender(pg_version=17)
    conn = Raw("127.0.0.1", server.port, [("user", "postgres"), ("database", "postgres")])
    try:
        (error, ready) = observed(conn.query("SELECT 1"))
        assert error[0] == "Error" and ("C", "XX000") in error[1]  # type: ignore[index]
        assert "IndexError: no such group" in dict(error[1])["M"]  # type: ignore[index]
        assert observed(conn.query("SELECT 1")) == [error, "ReadyForQuery"]  # still up
    finally:
        conn.close()
        server.stop()
    assert ready == "ReadyForQuery"


def test_column_lists_and_row_filters_are_answered_as_postgres_answers(
    pg_server: Server, tables: tuple[str, str, str, int, int]
) -> None:
    """15+: a publication with a column list and a row filter, another of the same table
    without: the table list (attnames / attrs), the column list and row filter queries
    and the table sync's COPY (SELECT … WHERE …), on both servers."""
    major = pg_server.version
    t, u, pub, t_oid, u_oid = tables
    if major < 15:
        # 14 has neither: a script that asks for them is refused, as the SQL would be.
        refused = Script(pg_version=14).table(f"public.{t}", columns=[column("id", "int4")])
        refused.publication(pub, tables=[f"public.{t}"], where={f"public.{t}": "(id > 1)"})
        with pytest.raises(ScriptError, match="need PostgreSQL 15 or later"):
            compile_script(refused)
        return
    narrow = f"{pub}_narrow"
    with pg_server.connect() as conn:
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLE {} (id, v) WHERE (id > 1)").format(
                sql.Identifier(narrow), sql.Identifier(t)
            )
        )
    script = (
        Script(pg_version=major)
        .table(
            f"public.{t}",
            columns=[column("id", "int4", key=True), column("v", "text"), column("n", "numeric")],
            oid=t_oid,
            rows=[{"id": i, "v": v, "n": n} for i, v, n in ROWS],
        )
        .table(
            f"public.{u}",
            columns=[column("k", "int4"), column("w", "text")],
            replica_identity="full",
            oid=u_oid,
        )
        .publication(pub, tables=[f"public.{t}", f"public.{u}"])
        .publication(
            narrow,
            tables=[f"public.{t}"],
            columns={f"public.{t}": ["id", "v"]},
            where={f"public.{t}": "(id > 1)"},
        )
    )
    fake = start_walsender(script, databases=["postgres"])
    params = [("user", "postgres"), ("database", "postgres"), ("replication", "database")]
    real_conn = Raw(pg_server.host, pg_server.port, params)
    fake_conn = Raw("127.0.0.1", fake.port, params)
    lists = [f"'{narrow}'", f"'{pub}', '{narrow}'"]
    statements = [
        *(
            "SELECT DISTINCT t.schemaname, t.tablename \n, t.attnames\n"
            f"  FROM pg_catalog.pg_publication_tables t\n WHERE t.pubname IN ({names})"
            for names in lists
        ),
        *(
            "SELECT DISTINCT  (CASE WHEN (array_length(gpt.attrs, 1) = c.relnatts)   THEN "
            "NULL ELSE gpt.attrs END)  FROM pg_publication p,  LATERAL "
            "pg_get_publication_tables(p.pubname) gpt,  pg_class c WHERE gpt.relid = "
            f"{t_oid} AND c.oid = gpt.relid   AND p.pubname IN ( {names} )"
            for names in lists
        ),
        *(
            "SELECT DISTINCT pg_get_expr(gpt.qual, gpt.relid)  FROM pg_publication p,  "
            "LATERAL pg_get_publication_tables(p.pubname) gpt WHERE gpt.relid = "
            f"{t_oid}   AND p.pubname IN ( {names} )"
            for names in lists
        ),
        f"COPY (SELECT id, v FROM ONLY public.{t} WHERE (id > 1)) TO STDOUT",
        f"COPY (SELECT id, v FROM ONLY public.{t} WHERE (id > 1)) TO STDOUT WITH (FORMAT binary)",
    ]
    if major >= 16:
        statements += [
            "SELECT DISTINCT n.nspname, c.relname, gpt.attrs\n       FROM pg_class c\n"
            "         JOIN pg_namespace n ON n.oid = c.relnamespace\n         JOIN ( SELECT "
            "(pg_get_publication_tables(VARIADIC array_agg(pubname::text))).*\n"
            f"                FROM pg_publication\n                WHERE pubname IN ( {names} ))"
            " AS gpt\n             ON gpt.relid = c.oid\n"
            for names in lists
        ]
    try:
        for statement in statements:
            distinct = "DISTINCT" in statement
            real = observed(real_conn.query(statement), distinct=distinct)
            assert observed(fake_conn.query(statement), distinct=distinct) == real, statement
    finally:
        real_conn.close()
        fake_conn.close()
        fake.stop()
        with pg_server.connect() as conn:
            conn.execute(sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(narrow)))


USE_SNAPSHOT_CASES = {
    "outside a transaction": [],
    "read committed": ["BEGIN READ ONLY"],
    "read write": ["BEGIN ISOLATION LEVEL REPEATABLE READ"],
    "after a query": ["BEGIN READ ONLY ISOLATION LEVEL REPEATABLE READ", "SELECT 1"],
    "serializable": ["BEGIN READ ONLY ISOLATION LEVEL SERIALIZABLE"],
    "set transaction": ["BEGIN", "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY"],
    "as a table sync does": ["BEGIN READ ONLY ISOLATION LEVEL REPEATABLE READ"],
}


@pytest.mark.parametrize("case", USE_SNAPSHOT_CASES)
def test_use_snapshot_is_checked_as_postgres_checks_it(pg_server: Server, case: str) -> None:
    """walsender.c's checks of CREATE_REPLICATION_SLOT ... USE_SNAPSHOT (a transaction,
    REPEATABLE READ, read-only on 16+, before any query), field for field."""
    major = pg_server.version
    fake = start_walsender(Script(pg_version=major), databases=["postgres"])
    params = [("user", "postgres"), ("database", "postgres"), ("replication", "database")]
    slot = f"use_{uuid.uuid4().hex[:8]}"
    command = f'CREATE_REPLICATION_SLOT "{slot}" TEMPORARY LOGICAL pgoutput ' + (
        "USE_SNAPSHOT" if major < 15 else "(SNAPSHOT 'use')"
    )
    replies = []
    try:
        for host, port in ((pg_server.host, pg_server.port), ("127.0.0.1", fake.port)):
            conn = Raw(host, port, params)
            for statement in USE_SNAPSHOT_CASES[case]:
                conn.query(statement)
            got = observed(conn.query(command))
            conn.close()
            # The consistent point and the slot differ between servers; errors may not.
            replies.append(
                [
                    r if isinstance(r, tuple) and r[:1] == ("Error",) else type(r).__name__
                    for r in got
                ]
            )
    finally:
        fake.stop()
    assert replies[1] == replies[0]
