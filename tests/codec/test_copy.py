"""COPY's text and binary row formats: round trips, hostile input, and PostgreSQL's bytes."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable, Iterator, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg import sql

from codec import DecodeError
from codec.copy import (
    BINARY_TRAILER,
    binary_header,
    decode_binary,
    decode_text_row,
    encode_binary_row,
    encode_text_row,
)
from codec.wire import (
    BackendReader,
    CopyData,
    CopyDone,
    CopyOutResponse,
    Query,
    ReadyForQuery,
    StartupMessage,
)
from conformance.provision import Server

VALUES = st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=8)


@given(VALUES)
def test_text_rows_round_trip(values: list[bytes | None]) -> None:
    if not values:
        values = [None]  # a row of no columns is a bare newline: one empty string to COPY
    assert list(decode_text_row(encode_text_row(values))) == values


@given(st.lists(VALUES, max_size=5))
def test_binary_streams_round_trip(rows: list[list[bytes | None]]) -> None:
    data = binary_header() + b"".join(encode_binary_row(r) for r in rows) + BINARY_TRAILER
    assert [list(r) for r in decode_binary(data)] == rows


def test_text_escapes_are_copys() -> None:
    assert encode_text_row([b"a\\b", b"\t\n\r\b\f\v", b"\x01"]) == (
        b"a\\\\b\t\\t\\n\\r\\b\\f\\v\t\x01\n"
    )
    assert decode_text_row(b"\\101\\x42\\q\n") == (b"ABq",)  # COPY FROM's escapes too


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"PGCOPY\n\xff\r\n\x00\x00\x00", "header cut short"),
        (b"NOTCOPY\n\xff\r\n\x00", "signature"),
        (binary_header() + b"\x00\x01\x00\x00\x00\x09ab", "bad field length 9"),
        (binary_header() + b"\x00\x01", "field cut short"),
        (binary_header(), "without its trailer"),
        (binary_header() + BINARY_TRAILER + b"x", "after the binary COPY trailer"),
    ],
)
def test_bad_binary_copy_is_a_decode_error(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        list(decode_binary(data))


def test_bad_text_rows_are_decode_errors() -> None:
    with pytest.raises(DecodeError, match="ends with a newline"):
        decode_text_row(b"1\t2")
    with pytest.raises(DecodeError, match="ends with a backslash") as info:
        decode_text_row(b"1\tab\\\n")
    assert info.value.offset == 4


def _copy_out(server: Server, statement: str) -> list[bytes]:
    """The CopyData payloads of ``statement`` as PostgreSQL sends them."""
    sock = socket.create_connection((server.host, server.port))
    sock.settimeout(30)
    reader = BackendReader()
    params = (("user", "postgres"), ("database", "postgres"))
    sock.sendall(StartupMessage(params).encode())
    payloads: list[bytes] = []
    sent = False
    try:
        while True:
            data = sock.recv(65536)
            assert data, "connection closed"
            reader.feed(data)
            for message in reader:
                if isinstance(message, ReadyForQuery):
                    if sent:
                        return payloads
                    sock.sendall(Query(statement).encode())
                    sent = True
                elif isinstance(message, CopyData):
                    payloads.append(message.data)
                elif isinstance(message, CopyOutResponse | CopyDone):
                    pass
    finally:
        sock.close()


@pytest.fixture
def make_table(pg_server: Server) -> Iterator[Callable[[Sequence[tuple[object, ...]]], str]]:
    """Tables for one test, dropped after it: the servers are shared by the whole run, and
    a table left behind shows in other tests' catalog reads (pgjdbc's getTables)."""
    names: list[str] = []

    def make(rows: Sequence[tuple[object, ...]]) -> str:
        names.append(_table(pg_server, rows))
        return names[-1]

    yield make
    with pg_server.connect() as conn:
        for name in names:
            conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(name)))


def _table(server: Server, rows: Sequence[tuple[object, ...]]) -> str:
    name = f"copy_{uuid.uuid4().hex[:8]}"
    with server.connect() as conn:
        conn.execute(
            sql.SQL("CREATE TABLE {} (id int, t text, b bytea, f float8, ts timestamptz)").format(
                sql.Identifier(name)
            )
        )
        for row in rows:
            conn.execute(
                sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s, %s)").format(sql.Identifier(name)),
                row,
            )
    return name


ROWS = [
    (1, "plain", b"\x00\x01", 1.5, "2024-01-02 03:04:05+00"),
    (2, "tab\there\nnew\\back\r\x0b\x08\x0c", None, float("nan"), None),
    (3, None, b"\\", -0.0, "infinity"),
    (4, "ünïcode ☃", b"", 1e300, "2000-01-01 00:00:00.000001+00"),
]


def test_postgres_copy_text_rows_decode_and_encode_back_byte_for_byte(
    pg_server: Server, make_table: Callable[[Sequence[tuple[object, ...]]], str]
) -> None:
    name = make_table(ROWS)
    payloads = _copy_out(pg_server, f"COPY {name} TO STDOUT")
    assert len(payloads) == len(ROWS)  # one CopyData per row
    decoded = [decode_text_row(p) for p in payloads]
    assert [encode_text_row(r) for r in decoded] == payloads
    with pg_server.connect() as conn:
        texts = conn.execute(
            sql.SQL("SELECT id::text, t, b::text, f::text, ts::text FROM {} ").format(
                sql.Identifier(name)
            )
        ).fetchall()
    assert [tuple(None if v is None else v.decode() for v in r) for r in decoded] == texts


def test_postgres_copy_binary_header_rows_and_trailer(
    pg_server: Server, make_table: Callable[[Sequence[tuple[object, ...]]], str]
) -> None:
    name = make_table(ROWS)
    payloads = _copy_out(pg_server, f"COPY {name} TO STDOUT (FORMAT binary)")
    rows = list(decode_binary(b"".join(payloads)))
    # The header rides with the first row, each later row has a CopyData of its own, and
    # the trailer too.
    assert payloads[0] == binary_header() + encode_binary_row(rows[0])
    assert payloads[1:-1] == [encode_binary_row(r) for r in rows[1:]]
    assert payloads[-1] == BINARY_TRAILER
    empty = make_table([])
    assert _copy_out(pg_server, f"COPY {empty} TO STDOUT (FORMAT binary)") == [
        binary_header() + BINARY_TRAILER
    ]
