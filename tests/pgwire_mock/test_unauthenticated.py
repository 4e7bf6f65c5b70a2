"""What an unauthenticated client can make the server do: PostgreSQL's limits.

Measured on real 14.23, 15.18, 16.14, 17.10 and 18.4 (md5 and scram-sha-256 roles, and
authentication_timeout = 2s), the fake reproduces:

* a startup packet whose length word is over 10000: the connection closes, no message;
* during a password/MD5 exchange a message other than 'p': FATAL 08P01 "expected
  password response, got message type 81" as soon as the type byte arrives (SCRAM:
  "expected SASL response"), whatever length follows;
* a 'p' longer than 65535 (PG_MAX_AUTH_TOKEN_LENGTH): closed without a message (password,
  MD5) or with FATAL 28P01 (SCRAM), before its body arrives;
* no authentication within authentication_timeout: the connection closes, no message,
  whether the client sent nothing, half a startup packet, or a startup packet and then
  no password.
"""

from __future__ import annotations

import gc
import hashlib
import re
import socket
import struct
import subprocess
import sys
import time
import weakref

import pytest
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from codec.wire import (
    AuthenticationOk,
    BackendReader,
    ErrorResponse,
    PasswordMessage,
    StartupMessage,
)
from pgwire_mock.pytest_plugin import start_walsender
from pgwire_mock.server.auth import User, md5_secret
from pgwire_mock.server.protocol import WalSenderFactory, WalSenderProtocol
from pgwire_mock.server.session import SessionConfig, WalSenderSession
from pgwire_mock.server.state import ServerState

STARTUP = StartupMessage((("user", "u"), ("database", "postgres"))).encode()


def _session(auth: str = "md5") -> WalSenderSession:
    config = SessionConfig(major=17, auth=auth, users={"u": User("u", "secret")})  # type: ignore[arg-type]
    session = WalSenderSession(config, ServerState(), now=0.0)
    session.receive_data(STARTUP, 0.0)
    session.data_to_send()  # the authentication request
    return session


def _errors(data: bytes) -> list[tuple[str, str, str]]:
    reader = BackendReader()
    reader.feed(data)
    out = []
    for message in reader:
        assert isinstance(message, ErrorResponse)
        fields = dict(message.fields)
        out.append((fields["S"], fields["C"], fields["M"]))
    return out


@pytest.mark.parametrize(
    ("auth", "expected"),
    [
        ("password", "expected password response, got message type 81"),
        ("md5", "expected password response, got message type 81"),
        ("scram-sha-256", "expected SASL response, got message type 81"),
    ],
)
def test_a_query_during_authentication_is_refused_by_its_type_byte(
    auth: str, expected: str
) -> None:
    """A 'Q' announcing 1 GiB during authentication gets FATAL 08P01 at its header: the
    server never waits for, or buffers, the gigabyte."""
    session = _session(auth)
    session.receive_data(b"Q" + struct.pack("!i", 1 << 30), 1.0)
    assert _errors(session.data_to_send()) == [("FATAL", "08P01", expected)]
    assert session.closed


@pytest.mark.parametrize(
    ("auth", "expected"),
    [
        ("password", []),
        ("md5", []),
        ("scram-sha-256", [("FATAL", "28P01", 'password authentication failed for user "u"')]),
    ],
)
def test_a_password_message_over_65535_bytes_closes_at_its_header(
    auth: str, expected: list[tuple[str, str, str]]
) -> None:
    session = _session(auth)
    session.receive_data(b"p" + struct.pack("!i", 65536), 1.0)
    assert _errors(session.data_to_send()) == expected
    assert session.closed


def test_a_password_message_of_65535_bytes_is_read() -> None:
    """The limit counts the length word, as pq_getmessage's maxlen does."""
    session = _session("md5")
    session.receive_data(b"p" + struct.pack("!i", 65535) + b"x" * 65530 + b"\0", 1.0)
    assert _errors(session.data_to_send()) == [
        ("FATAL", "28P01", 'password authentication failed for user "u"')
    ]


def test_a_startup_packet_over_10000_bytes_closes_without_a_message() -> None:
    session = WalSenderSession(SessionConfig(major=17), ServerState(), now=0.0)
    session.receive_data(struct.pack("!i", 10005) + b"\0" * 100, 0.0)
    assert session.data_to_send() == b""
    assert session.closed


# --- the Twisted adapter ------------------------------------------------------------------


def _connect(**factory: object) -> tuple[WalSenderProtocol, StringTransport, Clock]:
    clock = Clock()
    config = SessionConfig(major=17, auth="md5", users={"u": User("u", "secret")})
    server = WalSenderFactory(config, ServerState(), clock, **factory)  # type: ignore[arg-type]
    protocol = server.buildProtocol(None)
    transport = StringTransport()
    protocol.makeConnection(transport)
    return protocol, transport, clock


@pytest.mark.parametrize(
    "sent",
    [b"", STARTUP[:7], STARTUP],
    ids=["nothing", "half a startup packet", "a startup packet, no password"],
)
def test_no_authentication_within_authentication_timeout_closes_without_a_message(
    sent: bytes,
) -> None:
    protocol, transport, clock = _connect(authentication_timeout=2.0)
    if sent:
        protocol.dataReceived(sent)
    transport.clear()
    clock.advance(1.9)
    assert not transport.disconnecting
    clock.advance(0.1)
    assert transport.disconnecting
    assert transport.value() == b""


def test_an_authenticated_connection_outlives_authentication_timeout() -> None:
    protocol, transport, clock = _connect(authentication_timeout=2.0)
    protocol.dataReceived(STARTUP)
    salt = transport.value()[-4:]
    inner = md5_secret("u", "secret")[3:].encode()
    protocol.dataReceived(PasswordMessage("md5" + hashlib.md5(inner + salt).hexdigest()).encode())
    reader = BackendReader()
    reader.feed(transport.value())
    assert AuthenticationOk() in list(reader)
    clock.advance(3600)
    assert not transport.disconnecting
    assert clock.getDelayedCalls() == []


def test_the_default_authentication_timeout_is_postgresqls_60_seconds() -> None:
    _protocol, transport, clock = _connect()
    clock.advance(59.9)
    assert not transport.disconnecting
    clock.advance(0.1)
    assert transport.disconnecting


def test_a_closed_connections_session_is_freed_without_the_garbage_collector() -> None:
    """Protocol and session referenced each other, so what a session buffered stayed
    until a full collection; now refcounting frees it when the connection closes."""
    protocol, transport, _ = _connect()
    assert protocol.session is not None
    session = weakref.ref(protocol.session)
    gc.disable()
    try:
        protocol.connectionLost(None)
        del protocol, transport
        assert session() is None
    finally:
        gc.enable()


def _silent_client_closed_after(port: int) -> float:
    """Seconds until the server closes a connection that sends nothing."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        began = time.monotonic()
        assert sock.recv(1) == b""  # closed, and nothing was said
        return time.monotonic() - began


def test_start_walsender_takes_an_authentication_timeout() -> None:
    with start_walsender(authentication_timeout=0.5) as server:
        assert 0.4 < _silent_client_closed_after(server.port) < 10


def test_serve_takes_an_authentication_timeout() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "pgwire_mock.serve", "--port", "0", "--authentication-timeout", "1"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        port = int(re.search(r"listening on 127\.0\.0\.1:(\d+)", line).group(1))  # type: ignore[union-attr]
        assert 0.9 < _silent_client_closed_after(port) < 10
    finally:
        process.terminate()
        process.wait(timeout=30)
