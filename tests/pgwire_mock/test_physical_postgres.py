"""Physical replication: a recording of a real server, replayed by the fake, against the
real server itself (Debian's pg_receivewal and a raw client), on every major.

Each test records the server's current WAL segment (``record_physical``), serves it with
``pgwire-mock serve`` and asks both the same things. pg_receivewal is Debian's 15: it
streams from 14 and 15 and refuses newer servers, which the fake must do alike.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from physical_wire import error_fields, physical_connection, receivewal, tags
from test_real_clients import FakeServer

from codec import basebackup, replication
from codec.values import LSN
from codec.wire import (
    BackendMessage,
    CopyData,
    CopyDone,
    CopyOutResponse,
    DataRow,
    ErrorResponse,
    Query,
    RowDescription,
)
from conformance import provision
from pgwire_mock.record import record_physical
from pgwire_mock.server.physical import PhysicalRecording


def _flush(server: provision.Server) -> int:
    with server.connect() as conn:
        row = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
    assert row is not None
    return int(LSN.parse(str(row[0])))


@pytest.fixture
def recorded(
    pg_server: provision.Server, tmp_path: Path
) -> Iterator[tuple[provision.Server, PhysicalRecording, FakeServer]]:
    """Some fresh WAL (several 128 kB messages' worth), recorded, and a fake serving it."""
    with pg_server.connect() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS pgwm_physical (id int, t text)")
        conn.execute(
            "INSERT INTO pgwm_physical SELECT g, repeat('x', 100) FROM generate_series(1, 3000) g"
        )
    path = tmp_path / "physical.jsonl"
    recording = record_physical(pg_server.dsn, path)
    assert PhysicalRecording.from_file(path) == recording
    fake = FakeServer(pg_server.version, path)
    try:
        yield pg_server, recording, fake
    finally:
        fake.stop()


def test_pg_receivewal_writes_the_same_segment_files(
    recorded: tuple[provision.Server, PhysicalRecording, FakeServer], tmp_path: Path
) -> None:
    """pg_receivewal up to the recording's end writes the same files from both, byte for
    byte over the recorded range (zeros after it from the fake; the real server's too when
    it wrote no WAL meanwhile), with the same exit status; 16+ refuse alike."""
    server, recording, fake = recorded
    # pg_receivewal stops once it has received WAL *past* --endpos.
    endpos = recording.end_lsn - 1
    real = receivewal(server.dsn, tmp_path / "real", endpos)
    ours = receivewal(fake.dsn(), tmp_path / "fake", endpos)
    assert ours.returncode == real.returncode, (real.stderr, ours.stderr)
    if server.version > 15:
        assert real.returncode == 1
        assert "incompatible server version" in real.stderr
        assert ours.stderr == real.stderr.replace(str(server.port), str(fake.port))
        return
    assert real.returncode == 0, real.stderr
    names = sorted(p.name for p in (tmp_path / "real").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "fake").iterdir())
    offset = recording.start_lsn % recording.segment_size
    size = len(recording.wal_data)
    for name in names:
        real_bytes = (tmp_path / "real" / name).read_bytes()
        fake_bytes = (tmp_path / "fake" / name).read_bytes()
        assert fake_bytes[offset : offset + size] == recording.wal_data
        assert real_bytes[offset : offset + size] == recording.wal_data
        assert not fake_bytes[offset + size :].strip(b"\0")
        if _flush(server) == recording.end_lsn:
            assert real_bytes == fake_bytes


def _identify(dsn_host: str, port: int) -> tuple[object, ...]:
    with physical_connection(dsn_host, port) as conn:
        messages = conn.command("IDENTIFY_SYSTEM")
    description, row = messages[0], messages[1]
    assert isinstance(description, RowDescription)
    assert isinstance(row, DataRow)
    return description, row.values, tags(messages)


def test_identify_system_and_the_first_xlogdata_match(
    recorded: tuple[provision.Server, PhysicalRecording, FakeServer],
) -> None:
    """IDENTIFY_SYSTEM: same columns, system identifier and timeline, xlogpos the recorded
    end; START_REPLICATION from the segment: the same XLogData (start, size, bytes; wal_end
    each server's flush position), then on CopyDone the same closing messages."""
    server, recording, fake = recorded
    real_id = _identify(server.host, server.port)
    fake_id = _identify("127.0.0.1", fake.port)
    assert fake_id[0] == real_id[0]
    assert fake_id[2] == real_id[2] == ["IDENTIFY_SYSTEM"]
    real_row, fake_row = real_id[1], fake_id[1]
    assert isinstance(real_row, tuple) and isinstance(fake_row, tuple)
    assert fake_row[:2] == real_row[:2]
    assert fake_row[2] == str(LSN(recording.end_lsn)).encode()
    assert fake_row[3] is None is real_row[3]
    start = f"START_REPLICATION PHYSICAL {LSN(recording.start_lsn)} TIMELINE 1"
    streams = {}
    for name, host, port in (
        ("real", server.host, server.port),
        ("fake", "127.0.0.1", fake.port),
    ):
        with physical_connection(host, port) as conn:
            opened = conn.start(start)
            xlog = conn.xlog(3)
            streams[name] = (opened, xlog, conn.finish())
    assert streams["fake"][0] == streams["real"][0]
    assert streams["fake"][2] == streams["real"][2]
    assert tags(streams["real"][2]) == ["START_STREAMING", "START_REPLICATION"]
    for real, fake in zip(streams["real"][1], streams["fake"][1], strict=True):
        assert isinstance(real, replication.XLogData)
        assert isinstance(fake, replication.XLogData)
        assert (fake.wal_start, len(fake.data)) == (real.wal_start, len(real.data))
        assert fake.data == real.data
        assert fake.wal_end == recording.end_lsn <= real.wal_end


def _answers(host: str, port: int, recording: PhysicalRecording) -> dict[str, object]:
    """What one server answers to bad positions and timelines."""
    end = recording.end_lsn
    out: dict[str, object] = {}
    with physical_connection(host, port) as conn:
        out["history"] = conn.command("TIMELINE_HISTORY 2")
        out["unknown timeline"] = conn.start("START_REPLICATION 0/0 TIMELINE 3")
        for label, lsn in (("ahead", end + (16 << 20)), ("removed", 1)):
            opened = conn.start(f"START_REPLICATION {LSN(lsn)} TIMELINE 1")
            rest = conn.until_ready()
            out[label] = (opened, error_fields(rest), tags(rest))
        out["after"] = conn.command("IDENTIFY_SYSTEM")[0]
    return out


def test_bad_positions_and_timelines_get_the_same_errors(
    recorded: tuple[provision.Server, PhysicalRecording, FakeServer],
) -> None:
    """An unknown timeline (XX000, before CopyBoth), a start beyond the flush position
    (XX000, after CopyBoth) and before the WAL kept (58P01, after CopyBoth): the same
    messages with every field, file, line and routine included; TIMELINE_HISTORY of a
    timeline with no file: the RowDescription, then 58P01."""
    server, recording, fake = recorded
    real = _answers(server.host, server.port, recording)
    ours = _answers("127.0.0.1", fake.port, recording)
    flush = str(LSN(recording.end_lsn))
    real_ahead = real["ahead"]
    assert isinstance(real_ahead, tuple)
    # The real server's flush position may have moved since it was recorded.
    real_ahead[1]["M"] = real_ahead[1]["M"].rsplit(" ", 1)[0] + f" {flush}"
    assert ours == real


def observed(messages: list[BackendMessage]) -> list[object]:
    """What the client sees: an error's every field, a row's values, other kinds."""
    out: list[object] = []
    for m in messages:
        if isinstance(m, ErrorResponse):
            out.append(dict(m.fields))
        elif isinstance(m, DataRow):
            out.append(m.values)
        else:
            out.append(type(m).__name__)
    return out


def _read_slot_answered(
    major: int, seen: list[object], restart_lsn: str | None = None
) -> bytes | None:
    """READ_REPLICATION_SLOT got a row (15+): its restart_lsn, ``restart_lsn`` when
    given; or on 14 the refusal of SQL on a physical walsender (walsender.c,
    exec_replication_command): None."""
    if major < 15:
        refusal = seen[0]
        assert isinstance(refusal, dict), seen
        assert (refusal["C"], refusal["R"]) == ("0A000", "exec_replication_command")
        assert refusal["M"] == "cannot execute SQL commands in WAL sender for physical replication"
        return None
    row = seen[1]
    assert isinstance(row, tuple), seen
    found = row[1]
    assert isinstance(found, bytes), seen
    if restart_lsn is not None:
        assert found == restart_lsn.encode()
    return found


def test_physical_slot_restart_lsn_follows_the_flush_feedback(
    recorded: tuple[provision.Server, PhysicalRecording, FakeServer],
) -> None:
    """A status update's flush position becomes the physical slot's restart_lsn, as
    READ_REPLICATION_SLOT (15+) then shows, and a reply request gets a keepalive. On 14,
    whose replication grammar has no READ_REPLICATION_SLOT, the command is taken for SQL
    and refused alike (0A000 from exec_replication_command, every field)."""
    server, recording, fake = recorded
    flush = recording.start_lsn + 8192
    seen = {}
    for name, host, port in (
        ("real", server.host, server.port),
        ("fake", "127.0.0.1", fake.port),
    ):
        with physical_connection(host, port) as conn:
            conn.command("CREATE_REPLICATION_SLOT pgwm_phys PHYSICAL RESERVE_WAL")
            try:
                conn.start(f"START_REPLICATION SLOT pgwm_phys PHYSICAL {LSN(recording.start_lsn)}")
                conn.xlog(1)
                update = replication.StandbyStatusUpdate(flush, flush, 0, 0, True)
                conn.send(CopyData(update.encode()))
                keepalive = None
                while keepalive is None:
                    message = conn.next()
                    assert isinstance(message, CopyData)
                    decoded = replication.decode_server_copy_data(message.data)
                    if isinstance(decoded, replication.PrimaryKeepalive):
                        keepalive = decoded
                conn.finish()
                seen[name] = observed(conn.command("READ_REPLICATION_SLOT pgwm_phys"))
            finally:
                conn.command("DROP_REPLICATION_SLOT pgwm_phys")
            assert not keepalive.reply_requested
    assert seen["fake"] == seen["real"]
    _read_slot_answered(server.version, seen["real"], str(LSN(flush)))


def test_a_reserve_wal_slot_starts_at_the_last_checkpoints_redo(
    pg_server: provision.Server, tmp_path: Path
) -> None:
    """CREATE_REPLICATION_SLOT ... PHYSICAL RESERVE_WAL starts at the last checkpoint's
    redo (GetRedoRecPtr), not at the end of WAL: READ_REPLICATION_SLOT (15+) shows the
    same restart_lsn on the real server and on the fake serving a recording that holds
    the checkpoint (17+: its XLOG_CHECKPOINT_REDO record). On 14 the command is SQL to
    a physical walsender, refused alike."""
    with pg_server.connect() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS pgwm_redo (id int, t text)")
        conn.execute("SELECT pg_switch_wal()")  # the checkpoint lands in a new segment
        conn.execute(
            "INSERT INTO pgwm_redo SELECT g, repeat('r', 50) FROM generate_series(1, 500) g"
        )
        conn.execute("CHECKPOINT")
        conn.execute(
            "INSERT INTO pgwm_redo SELECT g, repeat('s', 50) FROM generate_series(1, 500) g"
        )
    path = tmp_path / "redo.jsonl"
    recording = record_physical(pg_server.dsn, path)
    fake = FakeServer(pg_server.version, path)
    rows = {}
    try:
        for name, host, port in (
            ("real", pg_server.host, pg_server.port),
            ("fake", "127.0.0.1", fake.port),
        ):
            with physical_connection(host, port) as conn:
                conn.command("CREATE_REPLICATION_SLOT pgwm_redo PHYSICAL RESERVE_WAL")
                try:
                    rows[name] = observed(conn.command("READ_REPLICATION_SLOT pgwm_redo"))
                finally:
                    conn.command("DROP_REPLICATION_SLOT pgwm_redo")
    finally:
        fake.stop()
    assert rows["fake"] == rows["real"]
    restart_lsn = _read_slot_answered(pg_server.version, rows["real"])
    if restart_lsn is not None:
        restart = LSN.parse(restart_lsn.decode())
        assert recording.start_lsn < restart < recording.end_lsn


def test_base_backup_copy_data_round_trips_byte_for_byte(pg_server: provision.Server) -> None:
    """Every CopyData payload of a real 15+ BASE_BACKUP (tar, manifest, progress) decodes
    with codec.basebackup and encodes back to the same bytes, in the documented order."""
    if pg_server.version < 15:
        pytest.skip("14 sends one COPY per archive, without type bytes")
    with physical_connection(pg_server.host, pg_server.port) as conn:
        conn.send(Query("BASE_BACKUP (LABEL 'pgwm', PROGRESS, MANIFEST 'yes', CHECKPOINT 'fast')"))
        payloads: list[bytes] = []
        copying = False
        while True:
            message = conn.next(60)
            assert message is not None
            if isinstance(message, CopyOutResponse):
                copying = True
            elif isinstance(message, CopyData) and copying:
                payloads.append(bytes(message.data))
            elif isinstance(message, CopyDone):
                break
        conn.until_ready(60)
    kinds = []
    for payload in payloads:
        decoded = basebackup.decode(payload)
        assert basebackup.encode(decoded) == payload
        kinds.append(type(decoded).__name__)
    assert kinds[0] == "NewArchive"
    assert "ManifestStart" in kinds and "Progress" in kinds
    assert kinds.index("ManifestStart") > max(i for i, k in enumerate(kinds) if k == "NewArchive")
