"""Connection checks and everyday SQL, asked of real PostgreSQL and of the fake alike.

The same raw-socket client (codec.wire) talks to a real server and to the fake emulating
its major; what it sees must be equal: message kinds in order, every ErrorResponse field
(SQLSTATE, message, source file, line, routine), RowDescription fields and rows.
"""

from __future__ import annotations

import socket
import struct
import uuid
from collections.abc import Iterator, Sequence

import psycopg
import pytest
from psycopg import conninfo

from codec.wire import (
    BackendKeyData,
    BackendReader,
    CommandComplete,
    DataRow,
    ErrorResponse,
    NegotiateProtocolVersion,
    ParameterStatus,
    Query,
    ReadyForQuery,
    RowDescription,
    StartupMessage,
)
from conformance.provision import Server
from pgwire_mock.pytest_plugin import WalSender, start_walsender

pytestmark = pytest.mark.postgres


class Raw:
    """A frontend that records every message, one startup or query at a time."""

    def __init__(
        self, host: str, port: int, params: Sequence[tuple[str, str]], protocol: int = 0x30000
    ) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.settimeout(30)
        self.reader = BackendReader()
        self.sock.sendall(StartupMessage(tuple(params), protocol).encode())
        self.startup = self._until_ready()

    @property
    def ok(self) -> bool:
        return isinstance(self.startup[-1], ReadyForQuery)

    def _until_ready(self) -> list[object]:
        out: list[object] = []
        while True:
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                data = b""
            if not data:
                out.append("EOF")
                return out
            self.reader.feed(data)
            for message in self.reader:
                out.append(message)
                if isinstance(message, ReadyForQuery):
                    return out

    def query(self, text: str) -> list[object]:
        self.sock.sendall(Query(text).encode())
        return self._until_ready()

    def close(self) -> None:
        self.sock.close()


def seen(messages: Sequence[object], *, values: bool = True) -> list[object]:
    """What a client can compare: kinds, error fields, column descriptions, rows, tags."""
    out: list[object] = []
    for m in messages:
        if isinstance(m, ErrorResponse):
            out.append(("Error", m.fields))
        elif isinstance(m, RowDescription):
            out.append(
                [
                    (f.name, f.table_oid, f.column_number, f.type_oid, f.type_size, f.type_modifier)
                    for f in m.fields
                ]
            )
        elif isinstance(m, DataRow):
            out.append(m.values if values else "DataRow")
        elif isinstance(m, CommandComplete):
            out.append(m.command_tag)
        elif isinstance(m, NegotiateProtocolVersion):
            out.append((m.protocol_version, m.unrecognized_options))
        elif isinstance(m, BackendKeyData):
            key = m.secret_key
            out.append(("BackendKeyData", 4 if isinstance(key, int) else len(key)))
        elif isinstance(m, ParameterStatus):
            out.append(("ParameterStatus", m.name))
        else:
            out.append(m if isinstance(m, str) else type(m).__name__)
    return out


def _address(server: Server) -> tuple[str, int]:
    info = conninfo.conninfo_to_dict(server.dsn)
    return str(info["host"]), int(str(info["port"]))


@pytest.fixture
def fake(pg_server: Server) -> Iterator[WalSender]:
    """The fake emulating the real server's major, with a real cluster's catalog."""
    server = start_walsender(
        pg_version=pg_server.version,
        roles=["postgres"],
        databases=["postgres", "other_db"],
        slots=["other_slot"],
        max_wal_senders=20,  # what conformance.provision configures
    )
    yield server
    server.stop()


def startup(host: str, port: int, **params: str) -> list[object]:
    conn = Raw(host, port, list(params.items()))
    conn.close()
    return seen(conn.startup)


START_PARAMS = [
    pytest.param({"user": "postgres", "database": "nodb"}, id="unknown-database"),
    pytest.param({"user": "norole", "database": "postgres"}, id="unknown-role"),
    pytest.param({"user": "norole", "database": "nodb"}, id="unknown-role-and-database"),
    pytest.param({"user": "norole"}, id="unknown-role-default-database"),
    pytest.param({"user": "postgres", "database": "template1"}, id="template1"),
    pytest.param(
        {"user": "postgres", "database": "postgres", "_pq_.a": "1", "_pq_.b": "2"},
        id="unknown-protocol-options",
    ),
]


@pytest.mark.parametrize("replication", [None, "database", "true"])
@pytest.mark.parametrize("params", START_PARAMS)
def test_unknown_roles_and_databases_as_postgres_reports_them(
    pg_server: Server, fake: WalSender, params: dict[str, str], replication: str | None
) -> None:
    """After AuthenticationOk: 28000 for an unknown role first, then 3D000 for an unknown
    database, except on a physical walsender (replication=true), which needs none."""
    if replication is not None:
        params = {**params, "replication": replication}
    real = startup(*_address(pg_server), **params)
    mock = startup(fake.host, fake.port, **params)
    if real[-1] == "ReadyForQuery":
        # ParameterStatus values (TimeZone, ...) are compared elsewhere; the kinds here,
        # and a NegotiateProtocolVersion's fields.
        kept = (str, tuple)
        assert [m for m in mock if isinstance(m, kept)] == [m for m in real if isinstance(m, kept)]
    else:
        assert mock == real


def test_a_slot_from_another_database_is_refused_at_start_replication(
    pg_server: Server, fake: WalSender
) -> None:
    """START_REPLICATION of a slot created in another database: 55000 from
    CreateDecodingContext, before CopyBoth; the connection stays usable."""
    with pg_server.connect() as conn:
        conn.execute("DROP DATABASE IF EXISTS other_db")
        conn.execute("CREATE DATABASE other_db")
        conn.execute("SELECT pg_create_logical_replication_slot('other_slot', 'pgoutput')")
    try:
        command = (
            "START_REPLICATION SLOT other_slot LOGICAL 0/0"
            " (proto_version '1', publication_names 'p')"
        )
        replies = []
        for host, port in (_address(pg_server), (fake.host, fake.port)):
            conn = Raw(
                host,
                port,
                [("user", "postgres"), ("database", "other_db"), ("replication", "database")],
            )
            replies.append(seen(conn.query(command)) + seen(conn.query("SELECT 1")))
            conn.close()
        assert replies[1] == replies[0]
        assert replies[0][0][1][2] == ("C", "55000")  # type: ignore[index]
    finally:
        with pg_server.connect() as conn:
            conn.execute("SELECT pg_drop_replication_slot('other_slot')")
            conn.execute("DROP DATABASE IF EXISTS other_db")


def _fill(host: str, port: int, limit: int, **params: str) -> tuple[int, list[object]]:
    """Open connections until one is refused: (how many were accepted, the refusal)."""
    opened: list[Raw] = []
    try:
        for _ in range(limit + 5):
            conn = Raw(host, port, list(params.items()))
            if not conn.ok:
                conn.close()
                return len(opened), seen(conn.startup)
            opened.append(conn)
        raise AssertionError(f"{limit + 5} connections and no refusal")
    finally:
        for conn in opened:
            conn.close()


@pytest.mark.parametrize(
    ("replication", "limit"), [("database", 20), ("true", 20), (None, 100)], ids=str
)
def test_connection_limits_refuse_with_53300_before_authentication(
    pg_server: Server, fake: WalSender, replication: str | None, limit: int
) -> None:
    """max_wal_senders counts replication connections, max_connections the others; one
    more gets FATAL 53300 from InitProcess, with no AuthenticationOk before it."""
    params = {"user": "postgres", "database": "postgres"}
    if replication is not None:
        params["replication"] = replication
    _, real = _fill(*_address(pg_server), limit, **params)
    accepted, mock = _fill(fake.host, fake.port, limit, **params)
    assert mock == real
    assert accepted == limit  # the real server may have had other clients already


SQL = [
    "SELECT pg_is_in_recovery()",
    "SELECT current_database()",
    "select pg_catalog.current_database();",
    "SELECT version()",
    "SHOW TimeZone",
    "SHOW timezone",
    "show TIMEZONE",
    "SHOW server_version",
    "SHOW server_version_num",
    "SHOW server_encoding",
    "SHOW client_encoding",
    "SHOW DateStyle",
    "SHOW integer_datetimes",
    "SHOW standard_conforming_strings",
    "SHOW transaction_isolation",
    "SHOW statement_timeout",
    "SET statement_timeout = 0",
    "SET TIME ZONE 'UTC'",
    "SELECT pg_catalog.set_config('search_path', '', false)",
    "SET search_path = public",
    "SET search_path = public",
    "SHOW search_path",
    "SET application_name = 'x'",
    "SHOW wal_level",
    "SHOW max_connections",
    "SHOW max_wal_senders",
    "SELECT current_user",
    "SELECT session_user",
    "SELECT user",
    "SELECT current_setting('server_version_num')",
    "SELECT 1",
    "SHOW no_such_setting",
]


@pytest.mark.parametrize("replication", ["database", None], ids=["replication", "plain"])
def test_everyday_sql_is_answered_as_postgres_answers(
    pg_server: Server, fake: WalSender, replication: str | None
) -> None:
    """What Debezium, pgjdbc and psycopg run beside replication: same columns (name,
    type OID, size), same values, same tags, on a replication and on a plain connection."""
    params = [("user", "postgres"), ("database", "postgres")]
    if replication is not None:
        params.append(("replication", replication))
    replies = []
    for host, port in (_address(pg_server), (fake.host, fake.port)):
        conn = Raw(host, port, params)
        replies.append({text: seen(conn.query(text)) for text in SQL})
        replies[-1]["pid"] = seen(conn.query("SELECT pg_backend_pid()"), values=False)
        conn.close()
    real, mock = replies
    for text in real:
        assert mock[text] == _unlocated(real[text]) or mock[text] == real[text], text


def _unlocated(messages: list[object]) -> list[object]:
    """Errors the fake raises without the real F/L/R fields (unknown settings)."""
    out: list[object] = []
    for m in messages:
        if isinstance(m, tuple) and m and m[0] == "Error":
            out.append(("Error", tuple(f for f in m[1] if f[0] not in "FLR")))
        else:
            out.append(m)
    return out


def test_pg_publication_shows_publications_as_they_were_created(
    pg_server: Server, fake: WalSender
) -> None:
    """puballtables and the publish flags as CREATE PUBLICATION set them; pg_publication's
    columns with the catalog's relation OID and attribute numbers."""
    suffix = uuid.uuid4().hex[:8]
    table = f"pub_t_{suffix}"
    with pg_server.connect() as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY)")
    names = [f"pa_{suffix}", f"pt_{suffix}", f"pi_{suffix}"]
    statements = [
        f"CREATE PUBLICATION {names[0]} FOR ALL TABLES",
        f"CREATE PUBLICATION {names[1]} FOR TABLE {table}",
        f"CREATE PUBLICATION {names[2]} FOR TABLE {table} WITH (publish = 'insert')",
    ]
    wanted = "pubname, pubowner, puballtables, pubinsert, pubupdate, pubdelete, pubtruncate"
    selects = [f"SELECT {wanted} FROM pg_publication WHERE pubname = '{n}'" for n in names]
    params = [("user", "postgres"), ("database", "postgres"), ("replication", "database")]
    replies = []
    try:
        for host, port in (_address(pg_server), (fake.host, fake.port)):
            conn = Raw(host, port, params)
            replies.append([seen(conn.query(text)) for text in [*statements, *selects]])
            star = seen(conn.query(f"SELECT * FROM pg_publication WHERE pubname = '{names[0]}'"))
            replies[-1].append(star[0])  # the RowDescription
            conn.close()
    finally:
        with pg_server.connect() as conn:
            for name in names:
                conn.execute(f"DROP PUBLICATION IF EXISTS {name}")
            conn.execute(f"DROP TABLE IF EXISTS {table}")
    assert replies[1] == replies[0]


ALTER_CASES = [
    "ALTER_REPLICATION_SLOT {slot} (FAILOVER)",
    "ALTER_REPLICATION_SLOT {slot} (FAILOVER false)",
    "ALTER_REPLICATION_SLOT {slot} (FAILOVER maybe)",
    "ALTER_REPLICATION_SLOT {slot} (FAILOVER, FAILOVER false)",
    "ALTER_REPLICATION_SLOT {slot} (TWO_PHASE)",
    "ALTER_REPLICATION_SLOT {slot} (TWO_PHASE false, FAILOVER true)",
    "ALTER_REPLICATION_SLOT {slot} (TWO_PHASE, TWO_PHASE)",
    "ALTER_REPLICATION_SLOT {slot} (TWO_PHASE 2)",
    "ALTER_REPLICATION_SLOT {slot} (BOGUS)",
    "ALTER_REPLICATION_SLOT nosuch (FAILOVER)",
    "ALTER_REPLICATION_SLOT nosuch (BOGUS)",
    "ALTER_REPLICATION_SLOT {physical} (FAILOVER)",
    "ALTER_REPLICATION_SLOT {temporary} (FAILOVER)",
    "ALTER_REPLICATION_SLOT {temporary} (FAILOVER false)",
]


def test_alter_replication_slot_as_postgres_answers(pg_server: Server) -> None:
    """ALTER_REPLICATION_SLOT (17: FAILOVER; 18: TWO_PHASE too): options are parsed before
    the slot is acquired; then the slot's kind and persistence are checked; then
    pg_replication_slots shows the new flags. Before 17 the command is the SQL grammar's
    syntax error at its first word (scan.l's line per major), refused alike, and the
    slots keep their flags (pg_replication_slots has no failover column there)."""
    suffix = uuid.uuid4().hex[:8]
    slot, physical, temporary = f"alt_{suffix}", f"alt_p_{suffix}", f"alt_t_{suffix}"
    fake = start_walsender(pg_version=pg_server.version, roles=["postgres"], databases=["postgres"])
    params = [("user", "postgres"), ("database", "postgres"), ("replication", "database")]
    replies = []
    try:
        for host, port in (_address(pg_server), (fake.host, fake.port)):
            conn = Raw(host, port, params)
            answers = []
            for text in (
                f"CREATE_REPLICATION_SLOT {slot} LOGICAL pgoutput",
                f"CREATE_REPLICATION_SLOT {physical} PHYSICAL",
                f"CREATE_REPLICATION_SLOT {temporary} TEMPORARY LOGICAL pgoutput",
            ):
                answers.append((text.split()[1], [seen(conn.query(text))[-2]]))  # the tag
            for case in ALTER_CASES:
                text = case.format(slot=slot, physical=physical, temporary=temporary)
                answers.append((text, seen(conn.query(text))))
            for name in (slot, temporary):
                columns = "failover, two_phase" if pg_server.version >= 17 else "two_phase"
                flags = f"SELECT slot_name, {columns} FROM pg_replication_slots"
                answers.append((name, seen(conn.query(f"{flags} WHERE slot_name = '{name}'"))))
            replies.append(answers)
            conn.close()
    finally:
        fake.stop()
        with pg_server.connect() as conn:
            for name in (slot, physical):
                conn.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                    f" WHERE slot_name = '{name}'"
                )
    real, mock = replies
    diffs = [
        f"{text}\n  fake: {got}\n  real: {want}"
        for (text, want), (_, got) in zip(real, mock, strict=True)
        if got != want
    ]
    assert not diffs, "\n".join(diffs)


@pytest.mark.parametrize(
    ("protocol", "options"),
    [
        (0x30000, ()),
        (0x30001, ()),
        (0x30002, ()),
        (0x30002, ("_pq_.x",)),
        (0x30003, ("_pq_.x",)),
        (0x3FFFF, ()),
        (0x30000, ("_pq_.a", "_pq_.b")),
    ],
    ids=["3.0", "3.1", "3.2", "3.2+option", "3.3+option", "3.65535", "3.0+options"],
)
def test_protocol_negotiation_as_postgres_negotiates(
    pg_server: Server, fake: WalSender, protocol: int, options: tuple[str, ...]
) -> None:
    """NegotiateProtocolVersion (17: 3.0 only; 18: up to 3.2), the cancel key's length
    (18: 32 bytes when 3.2 or newer was asked for), the ParameterStatus names in order."""
    params = [("user", "postgres"), ("database", "postgres"), ("replication", "database")]
    params += [(name, "1") for name in options]
    replies = []
    for host, port in (_address(pg_server), (fake.host, fake.port)):
        conn = Raw(host, port, params, protocol)
        replies.append([m for m in seen(conn.startup) if m != "AuthenticationOk"])
        conn.close()
    assert replies[1] == replies[0]


def test_psycopg_with_libpq_18_negotiates_the_same_protocol(
    pg_server: Server, fake: WalSender
) -> None:
    """psycopg's bundled libpq (18) asking for protocol 3.2: the protocol it gets, the
    cancel key it holds and the reported search_path, from the server and the fake."""
    if psycopg.pq.version() < 180000:
        pytest.fail(f"psycopg's libpq is {psycopg.pq.version()}, not 18 or newer")
    seen_by: list[tuple[object, ...]] = []
    for host, port in (_address(pg_server), (fake.host, fake.port)):
        dsn = (
            f"host={host} port={port} user=postgres dbname=postgres "
            "max_protocol_version=3.2 replication=database"
        )
        with psycopg.connect(dsn, autocommit=True) as conn:
            info = conn.pgconn
            search_path = info.parameter_status(b"search_path")
            conn.execute("SELECT pg_catalog.set_config('search_path', '', false)")
            after = info.parameter_status(b"search_path")
            seen_by.append((info.full_protocol_version, search_path, after))
    assert seen_by[1] == seen_by[0]
    if pg_server.version >= 18:
        assert seen_by[0] == (30002, b'"$user", public', b"")


@pytest.mark.parametrize("version", [0x00020000, 0x00010005, 0x00040000, 0x00040002])
def test_unsupported_protocol_majors_are_refused_as_postgres_refuses_them(
    pg_server: Server, fake: WalSender, version: int
) -> None:
    """ProcessStartupPacket refuses a major other than 3 before reading the parameters:
    below 3.0 with protocol 2.0's error ('E', text, NUL), above with a 3.0 FATAL 0A000;
    then it closes. Every byte is compared, source location included."""
    body = struct.pack("!I", version) + b"user\0postgres\0database\0postgres\0\0"
    replies = []
    for host, port in (_address(pg_server), (fake.host, fake.port)):
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(struct.pack("!I", len(body) + 4) + body)
            received = b""
            while chunk := sock.recv(65536):
                received += chunk
        replies.append(received)
    assert replies[1] == replies[0]
    assert b"unsupported frontend protocol" in replies[0]


# Column references the server cannot resolve: the columns a major lacks (failover and
# inactive_since before 17, two_phase_at before 18), typos one or two columns are close
# to (errorMissingColumn's hint), qualified references, references in count() and
# WHERE, and positions counted in the text as sent (comments, several statements, a
# non-ASCII name before the column). Rows, where a major has the columns, are those of no
# slot: the fake serves one the real server has not.
MISSING_COLUMNS = [
    "SELECT slot_name, failover FROM pg_replication_slots WHERE slot_name = 'nosuch'",
    "SELECT inactive_since FROM pg_catalog.pg_replication_slots WHERE slot_name = 'nosuch'",
    "select two_phase_at from pg_replication_slots where slot_name = 'nosuch'",
    "SELECT slotname FROM pg_replication_slots",
    "SELECT slot_nyxe FROM pg_replication_slots",
    "SELECT pg_replication_slots.failover FROM pg_replication_slots WHERE slot_name = 'nosuch'",
    "SELECT pg_catalog.pg_replication_slots.slot_nyxe FROM pg_replication_slots",
    "SELECT x.slot_name FROM pg_replication_slots",
    'SELECT  /* a comment */ "Slot_name" FROM pg_replication_slots',
    "SELECT 1;\n  SELECT nope   FROM pg_replication_slots",
    "SELECT * FROM pg_replication_slots WHERE failover = 't'",
    "SELECT slot_name FROM pg_replication_slots WHERE slot_name = 'x' AND synced = 'f'",
    "SELECT count(failover) FROM pg_replication_slots WHERE slot_name = 'nosuch'",
    "SELECT slot_name, count(*), nope FROM pg_replication_slots",
    "SELECT nope, slot_name FROM pg_replication_slots WHERE bogus = 'x'",
    'SELECT "é", nope FROM pg_replication_slots',
    "SELECT pubnme FROM pg_publication",
    "SELECT tablename, attname FROM pg_publication_tables",
    "SELECT * FROM pg_stat_replication WHERE sent = 'x'",
    "SELECT *, slot_name FROM pg_replication_slots WHERE slot_name = 'nosuch'",
    "SELECT slot_name, * FROM pg_publication_tables",
    "SELECT É FROM pg_replication_slots",
    'SELECT "pg_replication_slots".nope FROM pg_replication_slots',
    "SELECT count(nope), slot_name FROM pg_replication_slots",
    "SELECT slot_name, count(*) FROM pg_replication_slots WHERE nope = 'x'",
    "  select nope from pg_replication_slots  ;  \n",
    "SELECT public.pg_replication_slots.slot_name FROM pg_replication_slots",
    "SELECT pg_catalog.pg_stat_replication.pid FROM pg_replication_slots",
    "SELECT *, count(*) FROM pg_replication_slots",
    "SELECT count(*),  plugin FROM pg_replication_slots",
]


def test_missing_columns_are_reported_as_postgres_reports_them(
    pg_server: Server, fake: WalSender
) -> None:
    """42703 from errorMissingColumn (parse_relation.c): the message (``column "c"``,
    or ``column rel.c`` unquoted when qualified), the hint naming the one or two closest
    columns (Levenshtein, at most 3 and half the name), the 1-based character position
    of the reference in the whole query string, and the ereport's file, line and routine
    per major; a qualifier naming no FROM item, or the view under another schema, is
    42P01 from errorMissingRTE. The select list is checked before WHERE, whether or not
    any row exists, and before the GROUP BY check (42803, at the ungrouped column)."""
    params = [("user", "postgres"), ("database", "postgres"), ("replication", "database")]
    replies = []
    for host, port in (_address(pg_server), (fake.host, fake.port)):
        conn = Raw(host, port, params)
        replies.append([seen(conn.query(text)) for text in MISSING_COLUMNS])
        conn.close()
    real, mock = replies
    diffs = [
        f"{text!r}\n  fake: {got}\n  real: {want}"
        for text, want, got in zip(MISSING_COLUMNS, real, mock, strict=True)
        if got != want
    ]
    assert not diffs, "\n".join(diffs)
