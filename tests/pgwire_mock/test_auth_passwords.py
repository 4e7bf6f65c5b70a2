"""Passwords beyond ASCII, and empty ones, answered as PostgreSQL 14-17 answer them.

What the servers do was checked with a raw socket against each version (pg_hba methods
password, md5 and scram-sha-256, roles made with CREATE ROLE ... PASSWORD):

* an empty cleartext or MD5 answer: FATAL 28P01 "empty password returned by client"
  (recv_password_packet in src/backend/libpq/auth.c), whatever the role;
* CREATE ROLE ... PASSWORD '' stores no password, so such a role fails every method with
  28P01 "password authentication failed for user";
* a non-ASCII password works with every method (compared as bytes; SCRAM prepares it
  with SASLprep, src/common/saslprep.c), and a wrong one is an ordinary 28P01.
"""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Iterator

import psycopg
import pytest

from codec.wire import (
    AuthenticationCleartextPassword,
    AuthenticationMD5Password,
    AuthenticationOk,
    BackendReader,
    ErrorResponse,
    PasswordMessage,
    StartupMessage,
)
from pgwire_mock.cli import main
from pgwire_mock.pytest_plugin import WalSender, start_walsender
from pgwire_mock.server.auth import AuthFailedError, User, start_exchange

PASSWORD = "pässwörd ☃"


def _md5_answer(user: str, password: str, salt: bytes) -> str:
    inner = hashlib.md5((password + user).encode()).hexdigest()
    return "md5" + hashlib.md5(inner.encode() + salt).hexdigest()


def _failure(method: str, users: dict[str, User], user: str, answer: str) -> tuple[str, ...]:
    """(severity, SQLSTATE, message) of the FATAL ``answer`` gets, sans-IO."""
    exchange = start_exchange(method, user, users, lambda n: bytes(range(n)))  # type: ignore[arg-type]
    assert exchange is not None
    with pytest.raises(AuthFailedError) as info:
        exchange.respond(PasswordMessage(answer))
    error = info.value.error
    return error.severity, error.sqlstate, error.message


# md5 for an unknown role is a mock SCRAM exchange (CheckPWChallengeAuth), so only
# cleartext asks an unknown role for a PasswordMessage.
@pytest.mark.parametrize(
    ("method", "user"), [("password", "app"), ("password", "nobody"), ("md5", "app")]
)
def test_empty_answer_is_refused_before_the_role_is_looked_at(method: str, user: str) -> None:
    """An empty PasswordMessage gets 28P01 'empty password returned by client', for a
    known role and an unknown one alike."""
    users = {"app": User("app", PASSWORD)}
    assert _failure(method, users, user, "") == (
        "FATAL",
        "28P01",
        "empty password returned by client",
    )


def test_empty_stored_password_is_no_password() -> None:
    """User(name, "") has no password, as CREATE ROLE ... PASSWORD '' clears it: the
    empty answer that used to let it in is refused, and nothing else matches."""
    assert User("app", "").password is None
    users = {"app": User("app", "")}
    assert _failure("password", users, "app", "")[2] == "empty password returned by client"
    assert _failure("password", users, "app", "x")[2] == (
        'password authentication failed for user "app"'
    )


@pytest.mark.parametrize("method", ["password", "md5"])
@pytest.mark.parametrize("stored", [PASSWORD, "plain"])
def test_wrong_non_ascii_answer_is_28p01_not_a_crash(method: str, stored: str) -> None:
    """A non-ASCII answer that does not match is an ordinary failed login (it used to
    raise TypeError from hmac.compare_digest and drop the connection)."""
    users = {"app": User("app", stored)}
    assert _failure(method, users, "app", "wrong é") == (
        "FATAL",
        "28P01",
        'password authentication failed for user "app"',
    )


# --------------------------------------------------------------------------- real clients


@pytest.fixture
def servers() -> Iterator[dict[str, WalSender]]:
    started = {
        method: start_walsender(users={"app": PASSWORD}, auth=method)
        for method in ("password", "md5", "scram-sha-256")
    }
    yield started
    for server in started.values():
        server.stop()


@pytest.mark.parametrize("method", ["password", "md5", "scram-sha-256"])
def test_libpq_logs_in_with_a_non_ascii_password(
    servers: dict[str, WalSender], method: str
) -> None:
    """psycopg (libpq sends the password as UTF-8 bytes) logs in with every method, and a
    wrong non-ASCII password gets PostgreSQL's 28P01 message."""
    server = servers[method]
    with psycopg.connect(host=server.host, port=server.port, user="app", password=PASSWORD) as c:
        assert c.info.status == psycopg.pq.ConnStatus.OK
    with pytest.raises(psycopg.OperationalError) as info:
        psycopg.connect(host=server.host, port=server.port, user="app", password="pässwörd ☂")
    assert 'password authentication failed for user "app"' in str(info.value)


def test_scram_prepares_the_password_with_saslprep() -> None:
    """SCRAM normalises both sides with SASLprep: a role stored with a soft hyphen and a
    full-width letter logs in with the plain spelling libpq prepares the same way."""
    server = start_walsender(users={"app": "pass\u00adｗord"}, auth="scram-sha-256")
    try:
        with psycopg.connect(host=server.host, port=server.port, user="app", password="password"):
            pass
    finally:
        server.stop()


# --------------------------------------------------------------------------- raw socket


def _login(server: WalSender, method_reply: type, answer: bytes | None) -> list[object]:
    """Start up as "app", answer the password request with ``answer`` (None: the MD5
    hash of PASSWORD), and return every message until the server closes."""
    reader = BackendReader()
    received: list[object] = []
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(StartupMessage((("user", "app"), ("database", "postgres"))).encode())
        request = None
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            reader.feed(chunk)
            for message in reader:
                received.append(message)
                if isinstance(message, method_reply) and request is None:
                    request = message
                    if answer is None:
                        assert isinstance(message, AuthenticationMD5Password)
                        text = _md5_answer("app", PASSWORD, message.salt).encode()
                    else:
                        text = answer
                    sock.sendall(b"p" + (len(text) + 5).to_bytes(4, "big") + text + b"\0")
            if any(isinstance(m, AuthenticationOk) for m in received):
                break
    return received


def _errors(messages: list[object]) -> list[tuple[str | None, str | None, str | None]]:
    return [(m.severity, m.sqlstate, m.message) for m in messages if isinstance(m, ErrorResponse)]


@pytest.mark.parametrize(
    ("method", "request_type"),
    [("password", AuthenticationCleartextPassword), ("md5", AuthenticationMD5Password)],
)
def test_raw_socket_gets_postgres_answers(
    servers: dict[str, WalSender], method: str, request_type: type
) -> None:
    """Over a real socket: an empty answer is ErrorResponse FATAL 28P01 'empty password
    returned by client', a wrong UTF-8 answer FATAL 28P01 'password authentication
    failed', and the right password (as UTF-8 bytes) is AuthenticationOk."""
    server = servers[method]
    assert _errors(_login(server, request_type, b"")) == [
        ("FATAL", "28P01", "empty password returned by client")
    ]
    assert _errors(_login(server, request_type, "mdé5 faux".encode())) == [
        ("FATAL", "28P01", 'password authentication failed for user "app"')
    ]
    right = None if method == "md5" else PASSWORD.encode()
    assert any(isinstance(m, AuthenticationOk) for m in _login(server, request_type, right))


def test_serve_refuses_an_empty_password(capsys: pytest.CaptureFixture[str]) -> None:
    """`serve --user app:` is a usage error that says why, not a role that logs in with
    an empty password."""
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--user", "app:"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "empty password" in err[0]


@pytest.mark.parametrize("method", ["password", "md5"])
@pytest.mark.parametrize("stored", [PASSWORD, "p\xe9ss"])
def test_a_latin1_password_is_an_ordinary_failed_login(method: str, stored: str) -> None:
    """A client in Latin-1 sends bytes that are not UTF-8. PostgreSQL compares the bytes
    (recv_password_packet checks only the NUL), so the login fails with 28P01 — even
    when the role's password is the same text in UTF-8 — not with a framing error."""
    server = start_walsender(users={"app": stored}, auth=method)
    try:
        sock = socket.create_connection((server.host, server.port), timeout=10)
        sock.sendall(StartupMessage((("user", "app"), ("database", "postgres"))).encode())
        reader = BackendReader()
        body = stored.encode("latin-1", "replace")
        sent = False
        error = None
        while error is None:
            data = sock.recv(65536)
            assert data, "the server closed the connection without an ErrorResponse"
            reader.feed(data)
            for message in reader:
                if not sent and not isinstance(message, ErrorResponse):
                    sock.sendall(b"p" + (len(body) + 5).to_bytes(4, "big") + body + b"\0")
                    sent = True
                elif isinstance(message, ErrorResponse):
                    error = message
        sock.close()
    finally:
        server.stop()
    fields = dict(error.fields)
    assert (fields["S"], fields["C"], fields["M"]) == (
        "FATAL",
        "28P01",
        'password authentication failed for user "app"',
    )
    assert PasswordMessage.decode_body(b"p\xe9ss\0").encode() == b"p\0\0\0\x09p\xe9ss\0"
