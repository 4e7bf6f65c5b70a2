"""Debezium's snapshot, as pgjdbc runs it, against real PostgreSQL 14–17 and the fake.

``DebeziumSnapshotJdbc.java`` (beside this file, run with Java's single-file launcher on
Debian's pgjdbc jar) does what Debezium's PostgreSQL snapshot does on its JDBC connection
after creating its slot with an exported snapshot: autocommit off, ``SET TRANSACTION
ISOLATION LEVEL REPEATABLE READ; SET TRANSACTION SNAPSHOT '…';``, ``getTables`` for the
table ids, ``getTables``/``getColumns`` of the schema, ``getColumns``, ``getPrimaryKeys``
and (no primary key) ``getIndexInfo`` per table, Debezium's replica identity query, then
``SELECT "col", … FROM "schema"."table"`` per table, and COMMIT; before the tables it
primes Debezium's ``TypeRegistry`` (both whole-pg_type reads, printing the rows of the
tables' column types, and a lookup by name and by OID) and after them asks
``currentTransactionId`` (its value masked: the servers' xid counters differ). It prints
every result set (column labels and JDBC types, every value) and every error; the output
from the fake must equal the output from the real server.

Both hold the same tables (the fake's from a script with the real tables' OIDs): one
with a primary key and varied types, one REPLICA IDENTITY FULL without a key. A row is
inserted after the slot on both: the snapshot must not see it.

pgjdbc runs in its default extended query mode, as Debezium runs it: Parse/Bind/Describe/
Execute with typed parameters, named portals with a fetch size inside the snapshot
transaction.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import psycopg2
import pytest
from psycopg import sql

from conformance import provision
from conformance.provision import Server
from pgwire_mock.pytest_plugin import start_walsender
from pgwire_mock.script import Script, column, insert

JAR = Path("/usr/share/java/postgresql.jar")
PROGRAM = Path(__file__).with_name("DebeziumSnapshotJdbc.java")

COLUMNS = [
    ("id", "int8", "int8 PRIMARY KEY"),
    ("name", "varchar(20)", "varchar(20)"),
    ("amount", "numeric(10,2)", "numeric(10,2)"),
    ("at", "timestamptz", "timestamptz"),
    ("flag", "bool", "bool"),
    ("data", "bytea", "bytea"),
    ("doc", "jsonb", "jsonb"),
    ("u", "uuid", "uuid"),
    ("tags", "text[]", "text[]"),
    ("ch", "char(3)", "char(3)"),
    ("f8", "float8", "float8"),
    ("d", "date", "date"),
    ("i2", "int2", "int2"),
    ("tm", "time", "time"),
    ("ts", "timestamp(3)", "timestamp(3)"),
]
KEYED_ROWS = [
    (1, "a", "1.50", "2024-01-02 03:04:05+00", True, "\\x0001", '{"a": 1}',
     "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "{x,y}", "ab ", 1.25, "2024-02-29", 7,
     "12:34:56", "2024-01-02 03:04:05.123"),
    (2, "tab\there\\", None, None, False, None, "[1, 2]", None, "{}", None, None, None,
     None, None, None),
]  # fmt: skip
FULL_ROWS = [(1, "line\nbreak"), (2, None), (3, "ünïcode")]


def _java() -> str:
    java = shutil.which("java")
    if java is None or not JAR.exists():
        why = "java or Debian's pgjdbc jar (libpostgresql-jdbc-java) is missing"
        if not provision.in_ci() and os.environ.get("PGWIRE_MOCK_SKIP_CLIENTS") == "1":
            pytest.skip(why)
        pytest.fail(f"{why}: run scripts/install-clients", pytrace=False)
    return java


@pytest.fixture
def tables(pg_server: Server) -> Iterator[tuple[str, str, int, int]]:
    tag = uuid.uuid4().hex[:8]
    keyed, full = f"dbz_keyed_{tag}", f"dbz_full_{tag}"
    with pg_server.connect() as conn:
        conn.execute(
            sql.SQL("CREATE TABLE {} ({})").format(
                sql.Identifier(keyed),
                sql.SQL(", ").join(
                    sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(d)) for n, _, d in COLUMNS
                ),
            )
        )
        conn.execute(sql.SQL("CREATE TABLE {} (k int4, note text)").format(sql.Identifier(full)))
        conn.execute(sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(sql.Identifier(full)))
        for row in KEYED_ROWS:
            conn.execute(
                sql.SQL("INSERT INTO {} VALUES ({})").format(
                    sql.Identifier(keyed), sql.SQL(", ").join([sql.Placeholder()] * len(row))
                ),
                row,
            )
        for pair in FULL_ROWS:
            conn.execute(
                sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(sql.Identifier(full)), pair
            )
        oids = [
            int(str(conn.execute("SELECT %s::regclass::oid", (name,)).fetchone()[0]))  # type: ignore[index]
            for name in (keyed, full)
        ]
    yield keyed, full, oids[0], oids[1]
    with pg_server.connect() as conn:
        conn.execute(
            sql.SQL("DROP TABLE {}, {}").format(sql.Identifier(keyed), sql.Identifier(full))
        )


def _script(major: int, keyed: str, full: str, keyed_oid: int, full_oid: int) -> Script:
    names = [n for n, _, _ in COLUMNS]
    return (
        Script(pg_version=major)
        .table(
            f"public.{keyed}",
            columns=[column(n, t, key=n == "id") for n, t, _ in COLUMNS],
            oid=keyed_oid,
            rows=[dict(zip(names, row, strict=True)) for row in KEYED_ROWS],
        )
        .table(
            f"public.{full}",
            columns=[column("k", "int4"), column("note", "text")],
            replica_identity="full",
            oid=full_oid,
            rows=[{"k": k, "note": v} for k, v in FULL_ROWS],
        )
    )


def _snapshot(java: str, host: str, port: int, name: str, *tables: str) -> str:
    url = (
        f"jdbc:postgresql://{host}:{port}/postgres?user=postgres"
        "&assumeMinServerVersion=9.4&ApplicationName=Debezium%20General"
    )
    done = subprocess.run(
        [java, "-Xshare:auto", "-cp", str(JAR), str(PROGRAM), url, "public", name, *tables],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TZ": "UTC"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _export(host: str, port: int, major: int, slot: str) -> tuple[object, str]:
    conn = psycopg2.connect(
        host=host, port=port, user="postgres", dbname="postgres", replication="database"
    )
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute(
        f"CREATE_REPLICATION_SLOT {slot} LOGICAL pgoutput "
        + ("EXPORT_SNAPSHOT" if major < 15 else "(SNAPSHOT 'export')")
    )
    row = cur.fetchone()
    assert row is not None
    return conn, str(row[2])


def test_debezium_snapshot_through_pgjdbc_sees_what_postgres_shows(
    pg_server: Server, tables: tuple[str, str, int, int]
) -> None:
    """Every metadata result set, every snapshot row and every error pgjdbc reports is the
    same from the fake as from real PostgreSQL of the same major; the row inserted after
    the slot is in neither snapshot."""
    java = _java()
    keyed, full, keyed_oid, full_oid = tables
    major = pg_server.version
    fake = start_walsender(
        _script(major, keyed, full, keyed_oid, full_oid),
        databases=["postgres"],
        new_slots="end_of_wal",
    )
    slot = f"dbz_{uuid.uuid4().hex[:8]}"
    out: dict[str, str] = {}
    try:
        for side, (host, port) in {
            "postgres": (pg_server.host, pg_server.port),
            "fake": ("127.0.0.1", fake.port),
        }.items():
            exporter, name = _export(host, port, major, slot)
            try:
                if side == "postgres":
                    with pg_server.connect() as conn:
                        conn.execute(
                            sql.SQL("INSERT INTO {} (id, name) VALUES (99, 'after')").format(
                                sql.Identifier(keyed)
                            )
                        )
                else:
                    fake.commit([insert(f"public.{keyed}", id=99, name="after")])
                out[side] = _snapshot(java, host, port, name, keyed, full)
            finally:
                exporter.close()  # type: ignore[attr-defined]
    finally:
        fake.stop()
        with pg_server.connect() as conn:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    assert "'after'" not in out["postgres"]
    assert "ERROR" not in out["postgres"], out["postgres"]
    # The real server is shared with the rest of the run: getTables there may list tables
    # other tests hold at this moment (Debezium would drop them with its table filter).
    ours = (f"'{keyed}'", f"'{full}'")
    real = [
        line
        for line in out["postgres"].splitlines()
        if not (line.startswith("ROW NULL 'public' '") and "'TABLE'" in line)
        or any(f"'public' {name} 'TABLE'" in line for name in ours)
    ]
    assert out["fake"].splitlines() == real


def _described(conn: object, text: str) -> tuple[object, ...]:
    cur = conn.cursor()  # type: ignore[attr-defined]
    try:
        cur.execute(text)
    except psycopg2.Error as err:
        return ("ERROR", err.pgcode, err.diag.message_primary)
    fields = tuple(
        (d.name, d.type_code, d.internal_size, d.table_oid, d.table_column) for d in cur.description
    )
    return (cur.statusmessage, fields, cur.fetchall())


def test_the_queries_behind_get_columns_get_the_same_row_descriptions(
    pg_server: Server, tables: tuple[str, str, int, int]
) -> None:
    """The server queries pgjdbc reads getColumns and unknown types from (their results
    are not handed to the client as they are): the same RowDescription (type OIDs and
    sizes, catalog relation OIDs and column numbers), tag and rows from both."""
    from pgwire_mock.server import jdbc_catalog

    keyed, full, keyed_oid, full_oid = tables
    fake = start_walsender(
        _script(pg_server.version, keyed, full, keyed_oid, full_oid), databases=["postgres"]
    )
    # getColumns' text as pgjdbc 42.5 sends it (the JDBC test above fails if it does not).
    texts = [
        f"{jdbc_catalog._GET_COLUMNS} AND n.nspname LIKE 'public' AND c.relname LIKE "
        f"'{name}') c WHERE true ORDER BY nspname,c.relname,attnum"
        for name in (keyed, full, "dbz\\_%")
    ]
    texts += [
        "SELECT typinput='pg_catalog.array_in'::regproc as is_array, typtype, typname, "
        "pg_type.oid FROM pg_catalog.pg_type LEFT JOIN (select ns.oid as nspoid, ns.nspname, "
        "r.r from pg_namespace as ns join ( select s.r, (current_schemas(false))[s.r] as "
        "nspname from generate_series(1, array_upper(current_schemas(false), 1)) as s(r) ) "
        "as r using ( nspname ) ) as sp ON sp.nspoid = typnamespace WHERE pg_type.oid = "
        f"('{oid}'::int8) ORDER BY sp.r, pg_type.oid DESC"
        for oid in (3802, 2950, 1009, 1114)
    ]
    texts += [
        "SELECT n.nspname = ANY(current_schemas(true)), n.nspname, t.typname FROM "
        "pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON t.typnamespace = n.oid WHERE "
        f"t.oid = ('{oid}'::int4)"
        for oid in (3802, 1009)
    ]
    real = psycopg2.connect(pg_server.dsn)
    other = psycopg2.connect(host="127.0.0.1", port=fake.port, user="postgres", dbname="postgres")
    real.autocommit = other.autocommit = True
    try:
        for text in texts:
            expected = _described(real, text)
            assert expected[0] != "ERROR", (text, expected)
            assert _described(other, text) == expected, text
    finally:
        real.close()
        other.close()
        fake.stop()


def test_what_the_model_cannot_answer_is_refused_with_0a000_naming_it() -> None:
    """getColumns of every schema (it would list system catalogs), getTables with no
    types, getIndexInfo of a table with a primary key (index statistics), a type OID the
    fake does not know: 0A000 naming the pgjdbc call, never a made-up result."""
    from pgwire_mock.server import jdbc_catalog

    fake = start_walsender(_script(17, "k", "f", 16400, 16410), databases=["postgres"])
    conn = psycopg2.connect(host="127.0.0.1", port=fake.port, user="postgres", dbname="postgres")
    conn.autocommit = True
    index_info = (
        f"{jdbc_catalog._GET_INDEX_INFO} AND n.nspname = 'public' AND ct.relname = 'k' "
        "AND i.indisunique ) AS tmp ORDER BY NON_UNIQUE, TYPE, INDEX_NAME, ORDINAL_POSITION"
    )
    refused = {
        f"{jdbc_catalog._GET_COLUMNS}) c WHERE true ORDER BY nspname,c.relname,attnum": (
            "getColumns"
        ),
        f"{jdbc_catalog._GET_COLUMNS} AND n.nspname LIKE 'pg_catalog') c WHERE true "
        "ORDER BY nspname,c.relname,attnum": "getColumns",
        f"{jdbc_catalog._GET_TABLES} ORDER BY TABLE_TYPE,TABLE_SCHEM,TABLE_NAME": "getTables",
        index_info: "getIndexInfo",
        "SELECT n.nspname = ANY(current_schemas(true)), n.nspname, t.typname FROM "
        "pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON t.typnamespace = n.oid WHERE "
        "t.oid = ('790'::int4)": "TypeInfoCache",
    }
    try:
        for text, what in refused.items():
            got = _described(conn, text)
            assert got[:2] == ("ERROR", "0A000"), text
            assert f"pgjdbc's {what}" in str(got[2]), got
    finally:
        conn.close()
        fake.stop()


def test_type_registry_reads_list_known_types_as_postgres_does(
    pg_server: Server, tables: tuple[str, str, int, int]
) -> None:
    """Debezium's two whole-pg_type reads, over the extended protocol: the same
    RowDescription; every row the fake sends is the real server's row for that type, in
    the real server's order where the query orders; the fake lists every type of the
    served tables' columns (the other ~600 types of pg_type it does not model)."""
    from pgwire_mock.server import pg_type

    keyed, full, keyed_oid, full_oid = tables
    fake = start_walsender(
        _script(pg_server.version, keyed, full, keyed_oid, full_oid), databases=["postgres"]
    )
    texts = {"SQL_TYPES": pg_type._SQL_TYPES, "SQL_TYPE_DETAILS": pg_type._SQL_TYPE_DETAILS}
    got: dict[str, dict[str, tuple[object, ...]]] = {}
    try:
        for side, dsn in {
            "postgres": pg_server.dsn,
            "fake": f"host=127.0.0.1 port={fake.port} user=postgres dbname=postgres",
        }.items():
            with psycopg.connect(dsn, autocommit=True) as conn:
                for what, text in texts.items():
                    cur = conn.execute(text, prepare=False)
                    fields = tuple(
                        (d.name, d.type_code, d.internal_size) for d in cur.description or ()
                    )
                    got.setdefault(what, {})[side] = (fields, cur.fetchall())
    finally:
        fake.stop()
    for what in texts:
        (real_fields, real_rows), (fake_fields, fake_rows) = (
            got[what]["postgres"],
            got[what]["fake"],
        )
        assert fake_fields == real_fields, what
        assert set(fake_rows) <= set(real_rows), (what, set(fake_rows) - set(real_rows))
        if what == "SQL_TYPE_DETAILS":  # ORDER BY typname: the same relative order
            assert fake_rows == [r for r in real_rows if r in set(fake_rows)]
    names = {row[1] for row in got["SQL_TYPES"]["fake"][1]}
    column_types = {"int8", "varchar", "numeric", "timestamptz", "bool", "bytea", "jsonb",
                    "uuid", "_text", "bpchar", "float8", "date", "int2", "time", "timestamp",
                    "int4", "text"}  # fmt: skip
    assert column_types <= names
