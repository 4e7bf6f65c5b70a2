"""What the fake says where it cannot answer as PostgreSQL would (no server needed)."""

from __future__ import annotations

import socket

import psycopg

from codec.wire import (
    BackendReader,
    Describe,
    ErrorResponse,
    ParameterDescription,
    Parse,
    ParseComplete,
    ReadyForQuery,
    StartupMessage,
    Sync,
)
from pgwire_mock.pytest_plugin import start_walsender
from pgwire_mock.script import Script, column, insert

TXID = (
    "select (case pg_is_in_recovery() when 't' then '0'::xid8 else pg_current_xact_id() end)"
    " AS pg_current_txid"
)


def _script() -> Script:
    return Script(pg_version=17, first_xid=900).table(
        "public.t", columns=[column("id", "int4", key=True)], rows=[{"id": 1}]
    )


def _until_ready(sock: socket.socket, reader: BackendReader) -> list[object]:
    out: list[object] = []
    while not out or not isinstance(out[-1], ReadyForQuery):
        data = sock.recv(65536)
        assert data, out
        reader.feed(data)
        out.extend(reader)
    return out


def test_describe_of_a_parameter_whose_type_the_fake_cannot_infer_is_0a000() -> None:
    """PostgreSQL infers text for both set_config parameters; the fake has no parse
    analysis and says so (0A000 naming the parameter) instead of guessing. A typed
    parameter is described with its type."""
    fake = start_walsender(_script(), databases=["postgres"])
    sock = socket.create_connection(("127.0.0.1", fake.port), timeout=10)
    reader = BackendReader()
    try:
        sock.sendall(StartupMessage((("user", "postgres"), ("database", "postgres"))).encode())
        _until_ready(sock, reader)
        sock.sendall(
            Parse("s", "SELECT pg_catalog.set_config($1, $2, false)").encode()
            + Describe("S", "s").encode()
            + Sync().encode()
        )
        replies = _until_ready(sock, reader)
        assert isinstance(replies[0], ParseComplete)
        assert isinstance(replies[1], ErrorResponse)
        assert ("C", "0A000") in replies[1].fields
        assert "parameter $1" in dict(replies[1].fields)["M"]
        sock.sendall(
            Parse(
                "t",
                "SELECT relreplident FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_namespace"
                " n ON c.relnamespace=n.oid WHERE n.nspname=$1 and c.relname=$2",
                (1043, 1043),
            ).encode()
            + Describe("S", "t").encode()
            + Sync().encode()
        )
        assert ParameterDescription((1043, 1043)) in _until_ready(sock, reader)
    finally:
        sock.close()
        fake.stop()


def test_the_transaction_id_follows_the_scripts_transactions() -> None:
    """Before any transaction the script's first_xid; after one commits, the next one."""
    fake = start_walsender(_script(), databases=["postgres"])
    try:
        with psycopg.connect(fake.dsn(replication=""), autocommit=True) as conn:
            assert conn.execute(TXID).fetchall() == [("900",)]
            fake.commit([insert("public.t", id=2)])
            assert conn.execute(TXID).fetchall() == [("901",)]
    finally:
        fake.stop()
