"""TLS: ``pgwire-mock cert`` writes a localhost certificate; psycopg2 streams over TLS with
``sslmode=require``, and a client that asks for no TLS still gets a plain connection."""

from __future__ import annotations

import select
import subprocess
import sys
import time
from pathlib import Path

import psycopg2
import pytest
from psycopg2 import extras
from test_real_clients import GOLDEN, PUBLICATION, RECORDING, FakeServer, recording


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("tls")
    result = subprocess.run(
        [sys.executable, "-m", "pgwire_mock.cli", "cert", "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    cert, key = out / "cert.pem", out / "key.pem"
    assert result.stdout.strip() == f"--tls-cert {cert} --tls-key {key}"
    assert key.stat().st_mode & 0o077 == 0
    return cert, key


@pytest.fixture
def tls_server(certificate: tuple[Path, Path]) -> tuple[FakeServer, list[tuple[int, bytes]]]:
    path, entries = recording(16)
    cert, key = certificate
    server = FakeServer(16, path, "--tls-cert", str(cert), "--tls-key", str(key))
    yield server, entries  # type: ignore[misc]
    server.stop()


def test_certificate_is_for_localhost(certificate: tuple[Path, Path]) -> None:
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(certificate[0].read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in names.get_values_for_type(x509.DNSName)


def test_psycopg2_streams_with_sslmode_require(
    tls_server: tuple[FakeServer, list[tuple[int, bytes]]], certificate: tuple[Path, Path]
) -> None:
    server, entries = tls_server
    conn = psycopg2.connect(
        server.dsn(sslmode="verify-full", sslrootcert=str(certificate[0])).replace(
            "host=127.0.0.1", "host=localhost"
        ),
        connection_factory=extras.LogicalReplicationConnection,
    )
    try:
        assert conn.info.ssl_in_use
        cur = conn.cursor()
        cur.create_replication_slot("tls_slot", output_plugin="pgoutput")
        cur.start_replication(
            slot_name="tls_slot",
            decode=False,
            options={"proto_version": "2", "publication_names": PUBLICATION, "streaming": "on"},
        )
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < len(entries) and time.monotonic() < deadline:
            message = cur.read_message()
            if message is None:
                select.select([conn], [], [], 0.5)
                continue
            got.append(bytes(message.payload))
        assert got == [payload for _, payload in entries]
    finally:
        conn.close()


def test_sslmode_require_also_works_without_verification(
    tls_server: tuple[FakeServer, list[tuple[int, bytes]]],
) -> None:
    server, _ = tls_server
    conn = psycopg2.connect(
        server.dsn(sslmode="require"), connection_factory=extras.LogicalReplicationConnection
    )
    try:
        assert conn.info.ssl_in_use
        cur = conn.cursor()
        cur.execute("IDENTIFY_SYSTEM")
        assert len(cur.fetchone()) == 4
    finally:
        conn.close()


def test_sslmode_disable_gets_a_plain_connection_from_a_tls_server(
    tls_server: tuple[FakeServer, list[tuple[int, bytes]]],
) -> None:
    server, _ = tls_server
    conn = psycopg2.connect(
        server.dsn(sslmode="disable"), connection_factory=extras.LogicalReplicationConnection
    )
    try:
        assert not conn.info.ssl_in_use
        cur = conn.cursor()
        cur.execute("IDENTIFY_SYSTEM")
        assert len(cur.fetchone()) == 4
    finally:
        conn.close()


def test_golden_recording_exists() -> None:
    assert (GOLDEN / "pg16" / f"{RECORDING}.jsonl").is_file()
