"""Physical faults against real 14-18: WAL that a checkpoint removed under a running
stream and before a new one, pg_receivewal resuming after an interrupted stream, and the
end of a stream at a fast shutdown.

The real server removes WAL the production way (no slot holds it: WAL switches and
checkpoints recycle the segment a slowed-down walsender is reading); the fake removes it
on demand with the ``wal_removed`` fault, injected through the pytest handle. The fake's
connection drop is ``close_after:bytes=N``; the real run is interrupted with
``--endpos`` inside the segment (pg_receivewal keeps a ``.partial`` file either way).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from physical_wire import RawPhysical, physical_connection, receivewal

from codec import replication
from codec.values import LSN
from codec.wire import (
    AuthenticationOk,
    CommandComplete,
    CopyData,
    ErrorResponse,
    StartupMessage,
)
from conformance import provision
from pgwire_mock.pytest_plugin import WalSender
from pgwire_mock.record import record_physical

SEGMENT = 16 << 20

Make = Callable[..., WalSender]


def _sql(server: provision.Server, *statements: str) -> object:
    with server.connect() as conn:
        row = None
        for statement in statements:
            cursor = conn.execute(statement.encode())
            row = cursor.fetchone() if statement.startswith("SELECT") else None
    return row[0] if row else None


def _flush(server: provision.Server) -> int:
    return int(LSN.parse(str(_sql(server, "SELECT pg_current_wal_flush_lsn()::text"))))


def _slow_connection(host: str, port: int) -> RawPhysical:
    """A physical connection with a small receive buffer: a walsender it does not read
    from stops inside the segment it is sending."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(10)
    sock.connect((host, port))
    conn = RawPhysical(sock)
    params = (("user", "postgres"), ("database", "postgres"), ("replication", "true"))
    conn.send(StartupMessage(params))
    assert isinstance(conn.until_ready()[0], AuthenticationOk)
    return conn


def _error_after_data(conn: RawPhysical) -> dict[str, str]:
    """Skip the CopyData in flight; the ErrorResponse's fields, ReadyForQuery after it."""
    while True:
        message = conn.next(20)
        assert message is not None, "no error"
        if isinstance(message, CopyData):
            continue
        assert isinstance(message, ErrorResponse), message
        rest = conn.until_ready()
        assert len(rest) == 1, rest
        return dict(message.fields)


def _remove_segment(server: provision.Server, name: str) -> None:
    """Switch WAL and checkpoint until the segment ``name`` is gone from pg_wal."""
    for _ in range(8):
        _sql(
            server,
            "INSERT INTO pgwm_phys_faults SELECT g, 'y' FROM generate_series(1, 1000) g",
            "SELECT pg_switch_wal()",
            "CHECKPOINT",
        )
        if not _sql(server, f"SELECT count(*) FROM pg_ls_waldir() WHERE name = '{name}'"):
            return
    pytest.fail(f"the server kept {name}")


def test_wal_removed_under_a_stream_and_before_one_match_the_real_server(
    pg_server: provision.Server, make_walsender: Make, tmp_path: Path
) -> None:
    """A stream inside segment N when a checkpoint removes N: XX000 from CheckXLogRemoved
    (the segment is open); START_REPLICATION in N afterwards: CopyBothResponse, then 58P01
    from WalSndSegmentOpen. The fake, its stream slowed and N removed by the fault,
    sends the same two errors, every field."""
    server = pg_server
    _sql(
        server,
        "DROP TABLE IF EXISTS pgwm_phys_faults",
        "CREATE TABLE pgwm_phys_faults (id int, t text)",
        "INSERT INTO pgwm_phys_faults SELECT g, repeat('x', 200) FROM generate_series(1, 5000) g",
    )
    segment_start = _flush(server) // SEGMENT * SEGMENT
    _sql(server, "SELECT pg_switch_wal()", "INSERT INTO pgwm_phys_faults VALUES (0, 'z')")
    path = tmp_path / "physical.jsonl"
    recording = record_physical(server.dsn, path, start_lsn=segment_start)
    assert recording.end_lsn > segment_start + SEGMENT  # it reaches into segment N+1
    start = f"START_REPLICATION PHYSICAL {LSN(segment_start)} TIMELINE 1"
    name = f"{recording.timeline:08X}{segment_start >> 32:08X}{segment_start // SEGMENT:08X}"

    answers: dict[str, tuple[dict[str, str], dict[str, str]]] = {}
    conn = _slow_connection(server.host, server.port)
    try:
        conn.start(start)
        conn.xlog(2)
        _remove_segment(server, name)
        mid = _error_after_data(conn)
        conn.start(start)
        answers["real"] = (mid, _error_after_data(conn))
    finally:
        conn.sock.close()

    fake = make_walsender(script=path, pg_version=server.version)
    fake.inject("slow:rate=256kb")  # the next stream: it stays inside segment N meanwhile
    with physical_connection("127.0.0.1", fake.port) as conn:
        conn.start(start)
        conn.xlog(2)
        assert fake.inject(f"wal_removed:{LSN(segment_start + SEGMENT)}")
        mid = _error_after_data(conn)
        conn.start(start)
        answers["fake"] = (mid, _error_after_data(conn))
    assert answers["fake"] == answers["real"]
    assert answers["real"][0]["R"] == "CheckXLogRemoved"
    assert answers["real"][1]["R"] == "WalSndSegmentOpen"
    assert name in answers["real"][1]["M"]


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_pg_receivewal_resumes_after_a_dropped_stream_to_the_same_files(
    pg_server: provision.Server, make_walsender: Make, tmp_path: Path
) -> None:
    """pg_receivewal interrupted inside a segment, then run again, ends with the same
    segment files as an uninterrupted run: against the fake, the fault drops the
    connection after 300,000 bytes (exit 1, a .partial file); against the real server the
    first run stops at an --endpos inside the segment. All four runs' files agree."""
    server = pg_server
    if server.version > 15:
        pytest.skip("Debian's pg_receivewal 15 refuses 16+ (test_physical_postgres.py)")
    _sql(
        server,
        "CREATE TABLE IF NOT EXISTS pgwm_phys_resume (id int, t text)",
        "INSERT INTO pgwm_phys_resume SELECT g, repeat('x', 100) FROM generate_series(1, 6000) g",
    )
    path = tmp_path / "physical.jsonl"
    recording = record_physical(server.dsn, path)
    endpos = recording.end_lsn - 1  # pg_receivewal stops once it has WAL past --endpos
    fake = make_walsender(script=path, pg_version=server.version)
    fake_dsn = f"host=127.0.0.1 port={fake.port} user=postgres"

    runs: dict[str, dict[str, bytes]] = {}
    whole = receivewal(server.dsn, tmp_path / "real-whole", endpos)
    assert whole.returncode == 0, whole.stderr
    runs["real-whole"] = _files(tmp_path / "real-whole")
    first = receivewal(server.dsn, tmp_path / "real-resumed", recording.start_lsn + 300_000)
    assert first.returncode == 0, first.stderr
    assert [p.suffix for p in (tmp_path / "real-resumed").iterdir()] == [".partial"]
    again = receivewal(server.dsn, tmp_path / "real-resumed", endpos)
    assert again.returncode == 0, again.stderr
    runs["real-resumed"] = _files(tmp_path / "real-resumed")

    ours = receivewal(fake_dsn, tmp_path / "fake-whole", endpos)
    assert ours.returncode == 0, ours.stderr
    runs["fake-whole"] = _files(tmp_path / "fake-whole")
    # Slowed down, the drop comes a second after pg_receivewal's first status update
    # reached the fake: a close with that update unread would reset the connection and
    # could discard the WAL not yet read (as a real walsender's death can).
    fake.inject("slow:rate=256kb")
    fake.inject("close_after:bytes=300000")
    cut = receivewal(fake_dsn, tmp_path / "fake-resumed", endpos)
    assert cut.returncode == 1
    assert "server closed the connection unexpectedly" in cut.stderr, cut.stderr
    partial = list((tmp_path / "fake-resumed").iterdir())
    assert [p.suffix for p in partial] == [".partial"]
    size = len(recording.wal_data)
    offset = recording.start_lsn % SEGMENT
    # What arrived in whole messages before the cut was written; the rest is zeros.
    kept = partial[0].read_bytes()[offset : offset + size]
    assert 0 < len(kept.rstrip(b"\0")) < 300_000
    again = receivewal(fake_dsn, tmp_path / "fake-resumed", endpos)
    assert again.returncode == 0, again.stderr
    runs["fake-resumed"] = _files(tmp_path / "fake-resumed")

    names = {run: sorted(files) for run, files in runs.items()}
    assert len({tuple(n) for n in names.values()}) == 1, names
    for file in runs["real-whole"]:
        contents = {run: files[file][offset : offset + size] for run, files in runs.items()}
        assert set(contents.values()) == {recording.wal_data}
    assert runs["fake-resumed"] == runs["fake-whole"]
    assert runs["real-resumed"] == runs["real-whole"]
    if _flush(server) == recording.end_lsn:
        assert runs["fake-whole"] == runs["real-whole"]


def _shutdown_tail(conn: RawPhysical, stop: Callable[[], None]) -> list[object]:
    """Catch up, then ``stop()`` the server in a thread: what follows but WAL, with a
    status update (write = wal_end) answering each reply request, up to the close."""
    while conn.next(0.5) is not None:
        pass  # caught up: everything in flight read
    thread = threading.Thread(target=stop)
    thread.start()
    tail: list[object] = []
    try:
        while True:
            message = conn.next(20)
            if message is None:
                tail.append("closed")
                return tail
            if not isinstance(message, CopyData):
                tail.append(message)
                continue
            decoded = replication.decode_server_copy_data(message.data)
            if isinstance(decoded, replication.PrimaryKeepalive):
                tail.append(("keepalive", decoded.reply_requested))
                if decoded.reply_requested:
                    update = replication.StandbyStatusUpdate(decoded.wal_end, 0, 0, 0, False)
                    conn.send(CopyData(update.encode()))
    finally:
        thread.join()


def test_shutdown_ends_a_physical_stream_as_a_fast_shutdown_does(
    pg_server: provision.Server, make_walsender: Make, tmp_path: Path
) -> None:
    """A real fast shutdown under a caught-up physical stream: the shutdown checkpoint's
    WAL, one reply-requested keepalive, and once the client's write position is there,
    CommandComplete ``COPY 0`` (no CopyDone) and the close. The fake's ``shutdown``
    fault, the recording's end standing for the checkpoint: the same after the WAL."""
    if not isinstance(pg_server, provision.Cluster):
        pytest.skip("the real server is shut down: only provisioned ones")
    server = provision.Cluster(pg_server.installation).start()
    try:
        path = tmp_path / "physical.jsonl"
        recording = record_physical(server.dsn, path)
        start = f"START_REPLICATION PHYSICAL {LSN(recording.start_lsn)} TIMELINE 1"
        with physical_connection(server.host, server.port) as conn:
            conn.start(start)
            real = _shutdown_tail(conn, server.stop)
    finally:
        server.stop()
    fake = make_walsender(script=path, pg_version=pg_server.version)
    with physical_connection("127.0.0.1", fake.port) as conn:
        conn.start(start)
        ours = _shutdown_tail(conn, lambda: fake.inject("shutdown"))
    assert ours == real == [("keepalive", True), CommandComplete("COPY 0"), "closed"]
