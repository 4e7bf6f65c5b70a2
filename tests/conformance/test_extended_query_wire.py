"""The extended query protocol on a plain connection, message by message, against real
PostgreSQL and the fake emulating the same major.

A raw client built on :mod:`codec.wire` pipelines Parse/Bind/Describe/Execute/Close/Sync
sequences (named and unnamed statements and portals, typed and untyped parameters in text
and binary format, binary results, row limits with PortalSuspended, transaction blocks,
errors mid-pipeline and the skip to Sync after them) to both servers, each scenario on a
new connection, and compares every message the servers send back. ErrorResponse and
NoticeResponse are compared on severity, SQLSTATE, message, detail, hint, position and
context: the file/line/routine fields name the server's source, which the fake leaves out.

Both servers hold the same table (the fake's from a script with the real table's OID), so
RowDescription's table OIDs and column numbers are comparable too.
"""

from __future__ import annotations

import socket
import struct
import uuid
from collections.abc import Iterator, Sequence

import pytest
from psycopg import conninfo, sql

from codec.wire import (
    BackendReader,
    Bind,
    Close,
    Describe,
    ErrorResponse,
    Execute,
    NoticeResponse,
    Parse,
    Query,
    ReadyForQuery,
    StartupMessage,
    Sync,
)
from conformance.provision import Server
from pgwire_mock.pytest_plugin import start_walsender
from pgwire_mock.script import Script, column

pytestmark = pytest.mark.postgres

_COMPARED_FIELDS = frozenset("SVCMDHPW")
TEXT, INT4, VARCHAR = 25, 23, 1043
ROWS = [(1, "one"), (2, None), (3, "three 'quoted'")]


class Client:
    """Startup as user postgres, then raw messages in, every message out."""

    def __init__(self, host: str, port: int, user: str) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.settimeout(30)
        self.reader = BackendReader()
        self.sock.sendall(StartupMessage((("user", user), ("database", "postgres"))).encode())
        self.read(1)

    def read(self, readies: int) -> list[object]:
        out: list[object] = []
        while readies:
            data = self.sock.recv(65536)
            if not data:
                out.append("EOF")
                return out
            self.reader.feed(data)
            for message in self.reader:
                out.append(message)
                if isinstance(message, ReadyForQuery):
                    readies -= 1
        return out

    def run(self, messages: Sequence[object]) -> list[object]:
        self.sock.sendall(b"".join(m.encode() for m in messages))  # type: ignore[attr-defined]
        return self.read(sum(1 for m in messages if isinstance(m, Sync | Query)))

    def close(self) -> None:
        self.sock.close()


def _comparable(message: object) -> object:
    if isinstance(message, ErrorResponse | NoticeResponse):
        return (
            type(message).__name__,
            tuple((k, v) for k, v in message.fields if k in _COMPARED_FIELDS),
        )
    return message


def _int4(value: int) -> bytes:
    return struct.pack("!i", value)


def scenarios(table: str) -> dict[str, list[object]]:
    select = f'SELECT "id", "v" FROM "public"."{table}"'
    identity = (
        "SELECT relreplident FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_namespace n "
        "ON c.relnamespace=n.oid WHERE n.nspname=$1 and c.relname=$2"
    )
    type_by_oid = (
        "SELECT n.nspname = ANY(current_schemas(true)), n.nspname, t.typname FROM "
        "pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON t.typnamespace = n.oid "
        "WHERE t.oid = $1"
    )
    set_config = "SELECT pg_catalog.set_config($1, $2, false)"
    return {
        "unnamed statement and portal, Describe portal, all rows": [
            Parse("", select),
            Bind("", ""),
            Describe("P", ""),
            Execute("", 0),
            Sync(),
        ],
        "named statement described, executed twice, binary results": [
            Parse("s1", select),
            Describe("S", "s1"),
            Sync(),
            Bind("", "s1", (), (), (1,)),
            Describe("P", ""),
            Execute("", 0),
            Bind("", "s1", (), (), (0, 1)),
            Describe("P", ""),
            Execute("", 0),
            Close("S", "s1"),
            Close("S", "s1"),
            Sync(),
        ],
        "row limits: PortalSuspended, the rest, then SELECT 0": [
            Parse("", select),
            Bind("", ""),
            Execute("", 2),
            Execute("", 2),
            Execute("", 2),
            Sync(),
        ],
        "a fetch of exactly the rows left still suspends": [
            Parse("", select),
            Bind("", ""),
            Execute("", 3),
            Execute("", 1),
            Sync(),
        ],
        "typed text parameters, statement and portal described": [
            Parse("rid", identity, (VARCHAR, VARCHAR)),
            Describe("S", "rid"),
            Bind("", "rid", (), (b"public", table.encode())),
            Describe("P", ""),
            Execute("", 0),
            Bind("", "rid", (0,), (b"public", b"no_such_table")),
            Execute("", 0),
            Sync(),
        ],
        "a binary int4 parameter and a binary result": [
            Parse("", type_by_oid, (INT4,)),
            Bind("", "", (1,), (_int4(3802),), (1, 0, 1)),
            Describe("P", ""),
            Execute("", 0),
            Sync(),
        ],
        "untyped parameters inlined, then read back": [
            Parse("", set_config),
            Bind("", "", (), (b"pgwire.test", b"it's")),
            Describe("P", ""),
            Execute("", 0),
            Parse("", "SELECT current_setting($1)", (TEXT,)),
            Bind("", "", (1,), (b"pgwire.test",)),
            Execute("", 0),
            Parse("", "SHOW pgwire.test"),
            Bind("", ""),
            Describe("P", ""),
            Execute("", 0),
            Sync(),
        ],
        "empty query": [
            Parse("", ""),
            Bind("", ""),
            Describe("P", ""),
            Execute("", 0),
            Sync(),
        ],
        "an error mid-pipeline skips to Sync; the portal is gone after it": [
            Parse("", "SELECT 1"),
            Bind("p1", ""),
            Bind("", "missing"),
            Execute("p1", 0),
            Parse("", "SELECT 2"),
            Sync(),
            Execute("p1", 0),
            Sync(),
            Parse("", "SELECT 3"),
            Bind("", ""),
            Execute("", 0),
            Sync(),
        ],
        "statement and portal errors": [
            Parse("dup", "SELECT 1"),
            Parse("dup", "SELECT 2"),
            Sync(),
            Parse("", "SELECT 1; SELECT 2"),
            Sync(),
            Parse("", "FOO 1"),
            Sync(),
            Bind("", "dup", (), (b"x",)),
            Sync(),
            Bind("", "dup", (), (), (0, 0)),
            Sync(),
            Describe("S", "nope"),
            Sync(),
            Describe("P", "nope"),
            Sync(),
            Execute("nope", 0),
            Sync(),
            Close("S", ""),
            Bind("", ""),
            Sync(),
            Close("S", "never"),
            Close("P", "never"),
            Sync(),
        ],
        "bad parameters": [
            Parse("", type_by_oid, (INT4,)),
            Bind("", "", (0,), (b"abc",)),
            Sync(),
            Bind("", "", (1,), (b"\x00\x01\x02",)),
            Sync(),
            Bind("", "", (0,), (b"99999999999",)),
            Sync(),
        ],
        "a transaction block: portals outlive Sync, an error aborts it": [
            Parse("", "BEGIN"),
            Bind("", ""),
            Execute("", 0),
            Parse("", select),
            Bind("cur", ""),
            Execute("cur", 1),
            Sync(),
            Execute("cur", 1),
            Sync(),
            Bind("", "missing"),
            Sync(),
            Parse("", "SELECT 1"),
            Sync(),
            Execute("cur", 1),
            Sync(),
            Parse("", "ROLLBACK"),
            Bind("", ""),
            Execute("", 0),
            Sync(),
        ],
        "a simple Query drops the unnamed statement": [
            Parse("", "SELECT 1"),
            Sync(),
            Query("SELECT 2"),
            Bind("", ""),
            Sync(),
        ],
        "a utility portal runs once": [
            Parse("", "BEGIN"),
            Bind("", ""),
            Execute("", 0),
            Execute("", 0),
            Sync(),
            Query("ROLLBACK"),
        ],
    }


@pytest.fixture
def served(pg_server: Server) -> Iterator[tuple[str, int, int]]:
    """The same table on the real server and in a fake's script: (name, real port, fake
    port)."""
    table = f"ext_{uuid.uuid4().hex[:8]}"
    with pg_server.connect() as conn:
        conn.execute(
            sql.SQL("CREATE TABLE {} (id int4 PRIMARY KEY, v text)").format(sql.Identifier(table))
        )
        for row in ROWS:
            conn.execute(
                sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(sql.Identifier(table)), row
            )
        oid = int(str(conn.execute("SELECT %s::regclass::oid", (table,)).fetchone()[0]))  # type: ignore[index]
    script = Script(pg_version=pg_server.version).table(
        f"public.{table}",
        columns=[column("id", "int4", key=True), column("v", "text")],
        oid=oid,
        rows=[{"id": i, "v": v} for i, v in ROWS],
    )
    fake = start_walsender(script, databases=["postgres"])
    try:
        yield table, pg_server.port, fake.port
    finally:
        fake.stop()
        with pg_server.connect() as conn:
            conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table)))


def test_every_message_of_each_extended_query_scenario_matches_postgres(
    pg_server: Server, served: tuple[str, int, int]
) -> None:
    """Each scenario's replies from the fake equal the real server's, message for
    message (errors on their user-facing fields)."""
    table, real_port, fake_port = served
    info = conninfo.conninfo_to_dict(pg_server.dsn)
    user = str(info.get("user") or "postgres")
    mismatches = []
    for name, messages in scenarios(table).items():
        replies = {}
        for side, (host, port) in {
            "postgres": (str(info["host"]), real_port),
            "fake": ("127.0.0.1", fake_port),
        }.items():
            client = Client(host, port, user if side == "postgres" else "postgres")
            try:
                replies[side] = [_comparable(m) for m in client.run(messages)]
            finally:
                client.close()
        if replies["fake"] != replies["postgres"]:
            mismatches.append((name, replies["postgres"], replies["fake"]))
    for name, real, fake in mismatches:
        print(f"--- {name}")
        for i in range(max(len(real), len(fake))):
            r = real[i] if i < len(real) else None
            f = fake[i] if i < len(fake) else None
            print(("   " if r == f else "!! ") + f"{r!r}\n   {'' if r == f else f'{f!r}'}")
    assert not mismatches, [name for name, _, _ in mismatches]
