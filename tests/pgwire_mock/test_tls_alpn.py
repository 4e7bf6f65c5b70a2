"""TLS with clients that offer ALPN (libpq 17+) and direct TLS, as PostgreSQL 14-18 do.

Measured on real servers (ssl=on): 14-16 install no ALPN callback, so whatever a client
offers, the handshake completes with no protocol selected, and a ClientHello in place of a
startup packet is closed without an answer. 17+ select "postgresql", refuse any other offer
with the no_application_protocol alert, and accept direct TLS (sslnegotiation=direct), which
requires ALPN "postgresql": without it the handshake completes, then the server closes.
Twisted's own TLS options answered every ALPN offer with alert 80, so psycopg 3 (libpq 18)
could not connect at all and sslmode=prefer fell back to cleartext.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from test_real_clients import FakeServer, recording

from conformance import provision

CHECKED = (16, 17)  # a version without ALPN and one with


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("tls")
    subprocess.run(
        [sys.executable, "-m", "pgwire_mock.cli", "cert", "--out", str(out)],
        check=True,
        capture_output=True,
    )
    return out / "cert.pem", out / "key.pem"


def _fake(major: int, certificate: tuple[Path, Path]) -> FakeServer:
    path, _ = recording(min(major, 17))
    cert, key = certificate
    return FakeServer(major, path, "--tls-cert", str(cert), "--tls-key", str(key))


def _connect(host: str, port: int, **params: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(
        host=host, port=port, user="postgres", dbname="postgres", connect_timeout=10, **params
    )


def test_psycopg_bundles_a_libpq_that_offers_alpn() -> None:
    """The client these tests need: libpq 17 or later."""
    assert psycopg.pq.version() >= 170000


@pytest.mark.parametrize("major", CHECKED)
def test_libpq_17_plus_connects_with_sslmode_require(
    major: int, certificate: tuple[Path, Path]
) -> None:
    server = _fake(major, certificate)
    try:
        with _connect("127.0.0.1", server.port, sslmode="require") as conn:
            assert conn.pgconn.ssl_in_use
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        server.stop()


@pytest.mark.parametrize("major", CHECKED)
def test_sslnegotiation_direct_works_from_17(major: int, certificate: tuple[Path, Path]) -> None:
    server = _fake(major, certificate)
    try:
        if major >= 17:
            with _connect(
                "127.0.0.1", server.port, sslmode="require", sslnegotiation="direct"
            ) as conn:
                assert conn.pgconn.ssl_in_use
                assert conn.execute("SELECT 1").fetchone() == (1,)
        else:
            with pytest.raises(psycopg.OperationalError):
                _connect("127.0.0.1", server.port, sslmode="require", sslnegotiation="direct")
    finally:
        server.stop()


# --- differential: the same handshakes against real PostgreSQL --------------------------


def _handshake(host: str, port: int, alpn: tuple[str, ...] | None, direct: bool) -> str:
    """What a client sees: the negotiated ALPN and the first answer to a startup packet,
    or how the handshake failed."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if alpn:
        context.set_alpn_protocols(list(alpn))
    with socket.create_connection((host, port), timeout=10) as raw:
        if not direct:
            raw.sendall(struct.pack("!ii", 8, 80877103))
            answer = raw.recv(1)
            if answer != b"S":
                return f"SSLRequest answered {answer!r}"
        try:
            tls = context.wrap_socket(raw)
        except ssl.SSLError as err:
            return f"handshake failed: {re.sub(r' [(]_ssl[.]c:[0-9]+[)]', '', str(err))}"
        startup = struct.pack("!i", 196608) + b"user\0postgres\0database\0postgres\0\0"
        try:
            tls.sendall(struct.pack("!i", len(startup) + 4) + startup)
            first = tls.recv(1)
        except (ssl.SSLError, OSError) as err:
            first = type(err).__name__.encode()
        return f"alpn={tls.selected_alpn_protocol()} first={first!r}"


CASES = [
    (None, False),
    (("postgresql",), False),
    (("http/1.1",), False),
    (("postgresql",), True),
    (None, True),
    (("http/1.1",), True),
]


@pytest.fixture
def real_tls_server(
    pg_server: provision.Server, certificate: tuple[Path, Path]
) -> Iterator[provision.Server]:
    """A server of ``pg_server``'s version with ssl=on (a cluster of our own: the shared
    one stays without TLS for the other tests)."""
    if not isinstance(pg_server, provision.Cluster):
        pytest.skip("needs a provisioned server to enable ssl on (PGWIRE_MOCK_DSN_* given)")
    with provision.Cluster(pg_server.installation).start() as cluster:
        for name, source in zip(("server.crt", "server.key"), certificate, strict=True):
            target = cluster.data_dir / name
            shutil.copy(source, target)
            if cluster._uid is not None:
                os.chown(target, cluster._uid, cluster._gid)
            target.chmod(0o600)
        with cluster.connect() as conn:
            conn.execute("ALTER SYSTEM SET ssl = on")
            conn.execute("SELECT pg_reload_conf()")
        for _ in range(100):
            with cluster.connect() as conn:
                if conn.execute("SHOW ssl").fetchone() == ("on",):
                    break
        yield cluster


def test_handshakes_match_real_postgresql(
    real_tls_server: provision.Server, certificate: tuple[Path, Path]
) -> None:
    major = real_tls_server.version
    real = {case: _handshake(real_tls_server.host, real_tls_server.port, *case) for case in CASES}
    fake_server = _fake(major, certificate)
    try:
        fake = {case: _handshake("127.0.0.1", fake_server.port, *case) for case in CASES}
    finally:
        fake_server.stop()
    assert fake == real
    # And what was seen, so a change on either side is noticed.
    if major >= 17:
        assert real[(("postgresql",), True)] == "alpn=postgresql first=b'R'"
        assert (
            real[(("http/1.1",), False)]
            == "handshake failed: [SSL] tlsv1 alert no application protocol"
        )
    else:
        assert real[(("postgresql",), False)] == "alpn=None first=b'R'"
        assert real[(("postgresql",), True)].startswith("handshake failed")


def test_ssl_request_on_a_unix_socket_is_answered_n(
    certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    """ProcessStartupPacket answers 'S' only off Unix-domain sockets: a client that asks
    there (libpq never does; a raw or JDBC client may) gets 'N' and goes on in clear, as
    on a server with ssl=on. Over TCP the same server says 'S'."""
    path, _ = recording(17)
    cert, key = certificate
    sock_path = tmp_path / ".s.PGSQL.5499"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pgwire_mock.serve",
            "--listen",
            f"unix:{sock_path}",
            "--script",
            str(path),
            "--tls-cert",
            str(cert),
            "--tls-key",
            str(key),
        ],
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while not sock_path.exists():
            assert process.poll() is None, "serve exited"
            assert time.monotonic() < deadline, "serve did not listen"
            time.sleep(0.05)
        client = socket.socket(socket.AF_UNIX)
        client.settimeout(10)
        client.connect(str(sock_path))
        client.sendall(struct.pack("!ii", 8, 80877103))
        assert client.recv(1) == b"N"
        client.close()
    finally:
        process.terminate()
        process.wait(10)
    server = _fake(17, certificate)
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as tcp:
            tcp.sendall(struct.pack("!ii", 8, 80877103))
            assert tcp.recv(1) == b"S"
    finally:
        server.stop()
