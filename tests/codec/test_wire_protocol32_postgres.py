"""codec.wire against real servers over raw sockets: protocol 3.0 and 3.2 startups.

PostgreSQL 18 is started by name (it is not in the default matrix yet); 14-17 come from
the ``pg_server`` matrix. Every byte a server sends during startup must decode and
encode back identically, its NegotiateProtocolVersion must be the one the codec
predicts, and a CancelRequest the codec encodes must cancel a running query.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from test_wire_protocol32 import ANSWERS, USER

from codec.wire import (
    PROTOCOL_3_0,
    PROTOCOL_3_2,
    BackendKeyData,
    BackendMessage,
    BackendReader,
    CancelRequest,
    ErrorResponse,
    NegotiateProtocolVersion,
    Query,
    ReadyForQuery,
    StartupMessage,
    encode,
)
from conformance import provision

pytestmark = pytest.mark.postgres

IDS = [f"3.{v & 0xFFFF}-{len(extra)}opts" for v, extra, _, _ in ANSWERS]


@pytest.fixture(scope="module")
def pg18() -> Iterator[provision.Server]:
    """Real PostgreSQL 18.4, whatever PGWIRE_MOCK_PG_VERSIONS says (it needs no opt-in)."""
    reason = provision.opted_out()
    if reason:
        pytest.skip(reason)
    with provision.provide(18) as server:
        yield server


class Backend:
    """A raw connection: what the server sent, as bytes and as decoded messages."""

    def __init__(self, server: provision.Server) -> None:
        self.sock = socket.create_connection((server.host, server.port), timeout=10)
        self.reader = BackendReader()
        self.raw = bytearray()
        self.messages: list[BackendMessage] = []

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_until(self, kinds: tuple[type, ...], timeout: float = 10.0) -> BackendMessage:
        """Read until a message of one of ``kinds`` arrives; return it."""
        deadline = time.monotonic() + timeout
        while True:
            for message in self.reader:
                self.messages.append(message)
                if isinstance(message, kinds):
                    return message
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = self.sock.recv(65536)
            if not chunk:
                raise AssertionError(f"connection closed; got {self.messages}")
            self.raw += chunk
            self.reader.feed(chunk)

    def close(self) -> None:
        self.sock.close()


def start(server: provision.Server, startup: StartupMessage) -> Backend:
    backend = Backend(server)
    backend.send(encode(startup))
    backend.read_until((ReadyForQuery, ErrorResponse))
    return backend


def check_startup(
    server: provision.Server,
    version: int,
    extra: tuple[tuple[str, str], ...],
    answer: NegotiateProtocolVersion | None,
    key_length: int,
) -> None:
    backend = start(server, StartupMessage(USER + extra, version))
    backend.close()
    messages = backend.messages
    assert bytes(backend.raw) == b"".join(encode(m) for m in messages)
    negotiated = [m for m in messages if isinstance(m, NegotiateProtocolVersion)]
    assert negotiated == ([] if answer is None else [answer])
    if answer is not None:
        assert messages[0] == answer  # before AuthenticationOk, as ProcessStartupPacket sends it
    (key,) = [m for m in messages if isinstance(m, BackendKeyData)]
    assert len(key.secret_key_bytes) == key_length
    assert messages[-1] == ReadyForQuery("I")


@pytest.mark.parametrize(("version", "extra", "answer_17", "answer_18"), ANSWERS, ids=IDS)
def test_18_answers_each_startup_as_the_codec_predicts(
    pg18: provision.Server,
    version: int,
    extra: tuple[tuple[str, str], ...],
    answer_17: NegotiateProtocolVersion | None,
    answer_18: NegotiateProtocolVersion | None,
) -> None:
    """18.4: 'v' only for a minor above 2 or a _pq_ option, naming Min(asked, 3.2); a
    32-byte key when 3.2 or newer was asked for, else 4 bytes; all bytes round-trip."""
    check_startup(pg18, version, extra, answer_18, 32 if version >= PROTOCOL_3_2 else 4)


@pytest.mark.parametrize(("version", "extra", "answer_17", "answer_18"), ANSWERS, ids=IDS)
def test_14_to_17_answer_each_startup_as_the_codec_predicts(
    pg_server: provision.Server,
    version: int,
    extra: tuple[tuple[str, str], ...],
    answer_17: NegotiateProtocolVersion | None,
    answer_18: NegotiateProtocolVersion | None,
) -> None:
    """14-17: 'v' naming 3.0 for any newer minor or _pq_ option; always a 4-byte key."""
    if pg_server.version >= 18:
        pytest.skip("18 is checked by the test above")
    check_startup(pg_server, version, extra, answer_17, 4)


def check_cancel(server: provision.Server, version: int) -> None:
    backend = start(server, StartupMessage(USER, version))
    try:
        (key,) = [m for m in backend.messages if isinstance(m, BackendKeyData)]
        backend.send(encode(Query("SELECT pg_sleep(60)")))
        time.sleep(0.3)  # let the query start: a cancel before it would be lost

        def cancel(secret: int | bytes) -> None:
            with socket.create_connection((server.host, server.port), timeout=10) as s:
                s.sendall(encode(CancelRequest(key.process_id, secret)))
                assert s.recv(1) == b""  # the postmaster answers nothing and closes

        if len(key.secret_key_bytes) > 4:
            # A key of the wrong length must not match, even with the right first bytes.
            cancel(key.secret_key_bytes[:4])
            backend.sock.settimeout(0.5)
            with pytest.raises(TimeoutError):
                backend.sock.recv(1)
        cancel(key.secret_key)
        error = backend.read_until((ErrorResponse,), timeout=20)
        assert isinstance(error, ErrorResponse)
        assert (error.sqlstate, error.message) == (
            "57014",
            "canceling statement due to user request",
        )
    finally:
        backend.close()


def test_a_32_byte_cancel_key_cancels_a_query_on_18(pg18: provision.Server) -> None:
    """The 3.2 CancelRequest the codec encodes (44 bytes) cancels pg_sleep on 18.4; the
    first 4 bytes of the key alone do not."""
    check_cancel(pg18, PROTOCOL_3_2)


def test_a_4_byte_cancel_key_cancels_a_query(pg_server: provision.Server) -> None:
    """The 3.0 CancelRequest (16 bytes) still cancels on every matrix version."""
    check_cancel(pg_server, PROTOCOL_3_0)
