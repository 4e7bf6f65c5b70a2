"""Real CDC clients against the fake walsender, for every emulated version.

The server runs as a subprocess (``python -m pgwire_mock.serve --port 0``) replaying a
real captured stream; the clients are the real programs: Debian's ``pg_recvlogical``
(a PostgreSQL 15 libpq client) and psycopg2's ``LogicalReplicationConnection``.
"""

from __future__ import annotations

import json
import select
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest
from psycopg2 import extras

from codec.values import LSN
from conformance.serve_process import ServeProcess
from pgwire_mock.server import MAJORS

GOLDEN = Path(__file__).parent.parent / "data" / "golden"

RECORDING = "streaming.v2-stream"
PUBLICATION = "pgwm_streaming"


class FakeServer(ServeProcess):
    def __init__(self, major: int, recording: Path, *extra: str) -> None:
        args = ["--pg-version", str(major), "--script", str(recording), *extra]
        super().__init__(args, control=False)


def recording(major: int) -> tuple[Path, list[tuple[int, bytes]]]:
    path = GOLDEN / f"pg{major}" / f"{RECORDING}.jsonl"
    entries = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if "meta" not in record:
            entries.append((int(LSN.parse(record["lsn"])), bytes.fromhex(record["data"])))
    return path, entries


@pytest.fixture(params=MAJORS, ids=[f"pg{m}" for m in MAJORS])
def fake(
    request: pytest.FixtureRequest,
) -> Iterator[tuple[int, FakeServer, list[tuple[int, bytes]]]]:
    major = request.param
    path, entries = recording(major)
    server = FakeServer(major, path)
    try:
        yield major, server, entries
    finally:
        server.stop()


def test_pg_recvlogical_reads_the_recording_byte_for_byte(
    fake: tuple[int, FakeServer, list[tuple[int, bytes]]],
) -> None:
    """pg_recvlogical --create-slot --start --endpos writes each payload and a newline."""
    major, server, entries = fake
    endpos = max(lsn for lsn, _ in entries)
    result = subprocess.run(
        [
            "pg_recvlogical",
            "-d",
            server.dsn(),
            "-S",
            "recv",
            "-P",
            "pgoutput",
            "--create-slot",
            "--start",
            "-o",
            "proto_version=2",
            "-o",
            f"publication_names={PUBLICATION}",
            "-o",
            "streaming=on",
            "--endpos",
            str(LSN(endpos)),
            "-f",
            "-",
            "--no-loop",
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    log = server.stop()
    assert result.returncode == 0, result.stderr.decode() + log
    assert result.stdout == b"".join(payload + b"\n" for _, payload in entries)
    # What the PG15 client sent, whatever the emulated version.
    assert "SELECT pg_catalog.set_config('search_path', '', false);" in log
    assert "SHOW data_directory_mode" in log
    assert "IDENTIFY_SYSTEM" in log
    # pg_recvlogical 15 picks the syntax from server_version (and leaves two blanks
    # before the legacy word).
    create = " ( SNAPSHOT 'nothing')" if major >= 15 else "  NOEXPORT_SNAPSHOT"
    assert f'CREATE_REPLICATION_SLOT "recv" LOGICAL "pgoutput"{create}\n' in log
    assert 'START_REPLICATION SLOT "recv" LOGICAL 0/0 ("proto_version" \'2\'' in log
    assert "client sent CopyDone" in log


def test_psycopg2_logical_replication_connection(
    fake: tuple[int, FakeServer, list[tuple[int, bytes]]],
) -> None:
    """psycopg2 creates a slot, streams with options, sends feedback, closes."""
    major, server, entries = fake
    conn = psycopg2.connect(server.dsn(), connection_factory=extras.LogicalReplicationConnection)
    try:
        assert conn.server_version // 10000 == major
        cur = conn.cursor()
        cur.create_replication_slot("pyslot", output_plugin="pgoutput")
        slot_name, _point, snapshot, plugin = cur.fetchone()
        assert (slot_name, plugin) == ("pyslot", "pgoutput")
        assert snapshot is not None
        cur.start_replication(
            slot_name="pyslot",
            decode=False,
            options={"proto_version": "2", "publication_names": PUBLICATION, "streaming": "on"},
        )
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 30
        while len(got) < len(entries) and time.monotonic() < deadline:
            message = cur.read_message()
            if message is None:
                select.select([conn], [], [], 1.0)
                continue
            got.append((message.data_start, bytes(message.payload)))
            cur.send_feedback(flush_lsn=message.data_start)
        assert [p for _, p in got] == [p for _, p in entries]
        for (wal, payload), (lsn, _) in zip(got, entries, strict=True):
            assert wal == (0 if payload[:1] in (b"R", b"Y") else lsn)
        cur.send_feedback(flush_lsn=max(lsn for lsn, _ in entries), force=True)
        time.sleep(0.2)
    finally:
        conn.close()
    log = server.stop()
    assert 'CREATE_REPLICATION_SLOT "pyslot" LOGICAL "pgoutput"' in log
    assert 'START_REPLICATION SLOT "pyslot" LOGICAL 0/00000000' in log
    assert "client sent Terminate" in log or "client closed the connection" in log


def test_psycopg2_sees_server_errors(
    fake: tuple[int, FakeServer, list[tuple[int, bytes]]],
) -> None:
    """A missing slot and a too-high proto_version reach psycopg2 as its exceptions."""
    _, server, _ = fake
    conn = psycopg2.connect(server.dsn(), connection_factory=extras.LogicalReplicationConnection)
    try:
        cur = conn.cursor()
        with pytest.raises(psycopg2.Error) as missing:
            cur.start_replication(
                slot_name="nope",
                decode=False,
                options={"proto_version": "1", "publication_names": "p"},
            )
        assert missing.value.pgcode == "42704"
        cur.create_replication_slot("s2", output_plugin="pgoutput")
        with pytest.raises(psycopg2.Error) as high:
            cur.start_replication(
                slot_name="s2",
                decode=False,
                options={"proto_version": "9", "publication_names": "p"},
            )
        assert high.value.pgcode == "0A000"
        cur.execute("IDENTIFY_SYSTEM")
        assert len(cur.fetchone()) == 4
    finally:
        conn.close()


# --- differential: the same psycopg2 client against real PostgreSQL and the fake ------------


def _replies(dsn: str) -> dict[str, object]:
    conn = psycopg2.connect(dsn, connection_factory=extras.LogicalReplicationConnection)
    out: dict[str, object] = {}
    try:
        cur = conn.cursor()
        cur.execute("IDENTIFY_SYSTEM")
        row = cur.fetchone()
        out["identify"] = ([(d.name, d.type_code) for d in cur.description], row[3])
        cur.create_replication_slot("diff_slot", output_plugin="pgoutput")
        out["create"] = [(d.name, d.type_code) for d in cur.description]
        for name, options in (
            ("missing", ("nope", {"proto_version": "1", "publication_names": "p"})),
            ("proto", ("diff_slot", {"proto_version": "99", "publication_names": "p"})),
        ):
            try:
                cur.start_replication(slot_name=options[0], decode=False, options=options[1])
                out[name] = None
            except psycopg2.Error as err:
                out[name] = (err.pgcode, err.diag.message_primary)
        cur.drop_replication_slot("diff_slot")
    finally:
        conn.close()
    return out


def test_psycopg2_gets_the_same_replies_from_the_fake_and_postgres(pg_server: object) -> None:
    """Differential: command reply shapes and errors match a real server of that version."""
    major = pg_server.version  # type: ignore[attr-defined]
    real = _replies(pg_server.replication_dsn)  # type: ignore[attr-defined]
    path, _ = recording(major)
    server = FakeServer(major, path)
    try:
        fake = _replies(server.dsn(replication="database"))
    finally:
        server.stop()
    assert fake == real
