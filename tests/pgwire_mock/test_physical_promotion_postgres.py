"""The ``timeline_switch`` fault against real promotions and real standbys, on 14–18.

* A provisioned server is stopped and restarted as a standby with no primary: in
  recovery at the end of its WAL (its shutdown checkpoint). It is recorded there (its
  walsender streams timeline 1 up to what it replayed), then promoted with
  ``pg_promote()``: the real switch point is the recording's end. The fake serves the
  recording with ``timeline_switch`` (no position: the end of the last record) and a raw
  client asks both the same: the end-of-timeline handshake, ``TIMELINE_HISTORY 2``,
  IDENTIFY_SYSTEM's timeline, and timeline 2's first record, the XLOG_END_OF_RECOVERY,
  byte for byte but for its ``end_time`` and CRC.
* On 15, Debian's pg_receivewal follows both switches (a slot on timeline 1) to the same
  files, and pg_waldump 15 reads the new timeline's segment of each; a second switch point
  inside the recording shows the later records re-laid out after the end-of-recovery
  record: pg_waldump reads them all, the same kinds in the same order as on timeline 1.
* A real standby of each major (a copy of a primary's data directory taken at a clean
  shutdown, ``primary_conninfo`` pointing at the fake) follows the fake's switch in the
  middle of the WAL recorded from that primary: ``pg_stat_wal_receiver`` shows timeline
  2, it replays to the fake's end of WAL with every row, and logs no error.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from physical_wire import (
    RawPhysical,
    error_fields,
    physical_connection,
    receivewal,
    restart_as_standby,
    server_prefix,
    switch_point,
)

from codec import replication
from codec.values import LSN
from codec.wal import XLOG_SWITCH, record_crc
from codec.wire import CopyData, CopyDone, DataRow
from conformance import provision
from pgwire_mock.pytest_plugin import WalSender
from pgwire_mock.record import record_physical
from pgwire_mock.server.faults import Fault
from pgwire_mock.server.physical import PhysicalRecording, segment_file_name
from pgwire_mock.server.promotion import record_ends

SEGMENT = 16 << 20
PG_WALDUMP = Path("/usr/lib/postgresql/15/bin/pg_waldump")
SLOT = "pgwm_switch"

Make = Callable[..., WalSender]


@dataclass
class Promoted:
    server: provision.Cluster
    recording: PhysicalRecording
    path: Path
    switch: int


@pytest.fixture
def promoted(pg_server: provision.Server, tmp_path: Path) -> Iterator[Promoted]:
    """A server recorded as a standby at the end of timeline 1, then promoted."""
    if not isinstance(pg_server, provision.Cluster):
        pytest.skip("the promotion restarts the server: only provisioned ones")
    server = provision.Cluster(pg_server.installation).start()
    try:
        with server.connect() as conn:
            conn.execute("CREATE TABLE pgwm_switch (id int, t text)")
            conn.execute(
                "INSERT INTO pgwm_switch SELECT g, repeat('x', 100) FROM generate_series(1, 3000) g"
            )
            row = conn.execute(
                f"SELECT pg_create_physical_replication_slot('{SLOT}', true)::text"
            ).fetchone()
            # Timeline 1 goes on in the next segment: the slot keeps the one before it,
            # which timeline 2 will not have.
            conn.execute("SELECT pg_switch_wal()")
            conn.execute("INSERT INTO pgwm_switch VALUES (0, 'next segment')")
        assert row is not None
        restart = int(LSN.parse(str(row[0]).strip("()").split(",")[1]))
        restart_as_standby(server)
        path = tmp_path / "standby.jsonl"
        recording = record_physical(server.dsn, path, start_lsn=restart // SEGMENT * SEGMENT)
        with server.connect() as conn:
            conn.execute("SELECT pg_promote()")
            conn.execute(
                "INSERT INTO pgwm_switch SELECT g, repeat('z', 100) FROM generate_series(1, 3000) g"
            )
        yield Promoted(server, recording, path, switch_point(server.host, server.port))
    finally:
        server.stop()


def _until_copy_done(conn: RawPhysical) -> list[replication.XLogData]:
    out: list[replication.XLogData] = []
    while True:
        message = conn.next(10)
        assert message is not None, f"no CopyDone after {len(out)} XLogData"
        if isinstance(message, CopyDone):
            return out
        assert isinstance(message, CopyData), message
        decoded = replication.decode_server_copy_data(message.data)
        if isinstance(decoded, replication.XLogData):
            out.append(decoded)


def _follow(host: str, port: int, start: int, switch: int) -> dict[str, object]:
    """Timeline 1 from ``start`` to its end, the handshake, TIMELINE_HISTORY 2,
    IDENTIFY_SYSTEM, then timeline 2's first bytes from the switch point."""
    out: dict[str, object] = {}
    with physical_connection(host, port) as conn:
        out["open"] = conn.start(f"START_REPLICATION PHYSICAL {LSN(start)} TIMELINE 1")
        xlog = _until_copy_done(conn)
        out["timeline 1"] = [(x.wal_start, x.wal_end, x.data) for x in xlog]
        conn.send(CopyDone())
        out["handshake"] = [m for m in conn.until_ready() if not isinstance(m, CopyData)]
        out["history"] = conn.command("TIMELINE_HISTORY 2")
        identify = conn.command("IDENTIFY_SYSTEM")[1]
        assert isinstance(identify, DataRow)
        out["identify"] = identify.values[:2]
        conn.start(f"START_REPLICATION PHYSICAL {LSN(switch)} TIMELINE 2")
        first = conn.xlog(1)[0]
        assert isinstance(first, replication.XLogData)
        out["timeline 2"] = first
        conn.finish()
        # As a walreceiver asks: timeline 2 from its first segment's start.
        conn.start(f"START_REPLICATION PHYSICAL {LSN(start)} TIMELINE 2")
        data = b""
        while start + len(data) < switch + 42:  # the end-of-recovery record, at least
            message = conn.xlog(1)[0]
            assert isinstance(message, replication.XLogData)
            assert message.wal_start == start + len(data)
            data += message.data
        out["segment start"] = data
        conn.finish()
        # The segment before: timeline 1 has it, timeline 2 does not.
        conn.start(f"START_REPLICATION PHYSICAL {LSN(start - SEGMENT)} TIMELINE 2")
        out["segment before"] = conn.until_ready()
    return out


def _without_time_and_crc(record: bytes) -> bytes:
    """An END_OF_RECOVERY record but for xl_crc and xl_end_of_recovery.end_time (and
    17+'s padding after wal_level, which the server leaves as it was on the stack)."""
    return record[:20] + bytes(4) + record[24:26] + bytes(8) + record[34:46]


def test_the_fakes_switch_answers_as_a_real_promotion(
    promoted: Promoted, make_walsender: Make
) -> None:
    """The same handshake at the same switch point, the same history file and timeline,
    and the same XLOG_END_OF_RECOVERY at the switch point (length, xl_prev, info, the
    timelines, 17+'s wal_level), its CRC right for its bytes."""
    switch, recording = promoted.switch, promoted.recording
    assert recording.end_lsn == switch  # the standby's end of WAL is where it switched
    start = switch // SEGMENT * SEGMENT
    assert recording.start_lsn == start - SEGMENT
    fake = make_walsender(
        script=promoted.path, pg_version=promoted.server.version, faults=["timeline_switch"]
    )
    server = promoted.server
    real = _follow(server.host, server.port, start, switch)
    ours = _follow("127.0.0.1", fake.port, start, switch)
    for key in ("open", "timeline 1", "handshake", "history", "identify", "segment before"):
        assert ours[key] == real[key], key
    before = real["segment before"]
    assert isinstance(before, list)
    assert error_fields(before)["M"] == (
        f"requested WAL segment {segment_file_name(2, start - SEGMENT, SEGMENT)} has already "
        "been removed"
    )
    real_2, fake_2 = real["timeline 2"], ours["timeline 2"]
    assert isinstance(real_2, replication.XLogData)
    assert isinstance(fake_2, replication.XLogData)
    assert fake_2.wal_start == real_2.wal_start == switch
    size = int.from_bytes(real_2.data[:4], "little")
    assert size == (50 if server.version >= 17 else 42)
    assert real_2.data[16:18] == bytes((0x90, 0))  # XLOG_END_OF_RECOVERY, RM_XLOG_ID
    assert _without_time_and_crc(fake_2.data[:size]) == _without_time_and_crc(real_2.data[:size])
    for data in (real_2.data[:size], fake_2.data[:size]):
        assert record_crc(bytes(data)) == int.from_bytes(data[20:24], "little")
    # From the segment's start: timeline 1's bytes up to the switch point, the page
    # holding it with timeline 1's header, then the same end-of-recovery record.
    real_seg, fake_seg = real["segment start"], ours["segment start"]
    assert isinstance(real_seg, bytes) and isinstance(fake_seg, bytes)
    offset = switch - start
    assert fake_seg[:offset] == real_seg[:offset]
    assert int.from_bytes(fake_seg[offset - offset % 8192 + 4 :][:4], "little") == 1
    record = slice(offset, offset + size)
    assert _without_time_and_crc(fake_seg[record]) == _without_time_and_crc(real_seg[record])


def _waldump(directory: Path, timeline: int, start: int, end: int) -> list[str]:
    """pg_waldump 15 of ``directory``'s segments (``.partial`` ones renamed): each
    record's rmgr and the first word of its description; fails on any error."""
    plain = directory.parent / f"{directory.name}-dump"
    plain.mkdir()
    for path in directory.iterdir():
        shutil.copy(path, plain / path.name.removesuffix(".partial"))
    proc = subprocess.run(
        [PG_WALDUMP, "-p", plain, "-t", str(timeline), "-s", str(LSN(start)), "-e", str(LSN(end))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    kinds = []
    for line in proc.stdout.splitlines():
        match = re.match(r"rmgr: (\w+) .*desc: (\w+)", line)
        assert match is not None, line
        kinds.append(f"{match[1]} {match[2]}")
        if match[2] == "END_OF_RECOVERY":
            assert "tli 2; prev tli 1;" in line, line
    return kinds


def _fake_slot(port: int, restart: int) -> None:
    """The fake's slot where the real one was made: RESERVE_WAL starts it at the
    recording's last checkpoint, as on PostgreSQL; a status update's flush then moves its
    restart_lsn back to ``restart`` (PhysicalConfirmReceivedLocation)."""
    with physical_connection("127.0.0.1", port) as conn:
        conn.command(f"CREATE_REPLICATION_SLOT {SLOT} PHYSICAL RESERVE_WAL")
        conn.start(f"START_REPLICATION SLOT {SLOT} PHYSICAL {LSN(restart)} TIMELINE 1")
        update = replication.StandbyStatusUpdate(restart, restart, 0, 0, True)
        conn.send(CopyData(update.encode()))
        while True:  # the keepalive it asked for, or the end of a timeline the fault ended
            message = conn.next()
            if isinstance(message, CopyDone):
                break
            assert isinstance(message, CopyData)
            decoded = replication.decode_server_copy_data(message.data)
            if (
                isinstance(decoded, replication.PrimaryKeepalive)
                and decoded.reply_requested is False
            ):
                break
        conn.finish()
        row = conn.command(f"READ_REPLICATION_SLOT {SLOT}")[1]
        assert isinstance(row, DataRow) and row.values[1] == str(LSN(restart)).encode()


def test_pg_receivewal_follows_the_fakes_switch_and_pg_waldump_reads_it(
    pg_server: provision.Server,
    request: pytest.FixtureRequest,
    make_walsender: Make,
    tmp_path: Path,
) -> None:
    """pg_receivewal --slot (the slot on timeline 1) from the real promoted server and from
    the fake switching at the same point: exit 0 both, the same files, timeline 1's
    segment and the history file byte for byte, timeline 2's the same but for the end of
    recovery's time and CRC (and the real server's later WAL). pg_waldump 15 reads both
    new segments; the first record after the switch is END_OF_RECOVERY, tli 2, prev 1."""
    if pg_server.version != 15:
        pytest.skip("Debian's pg_receivewal 15 refuses 16+ and needs READ_REPLICATION_SLOT (15+)")
    promoted: Promoted = request.getfixturevalue("promoted")
    switch, server = promoted.switch, promoted.server
    size = 42
    endpos = switch + size
    fake = make_walsender(script=promoted.path, pg_version=15, faults=["timeline_switch"])
    _fake_slot(fake.port, promoted.recording.start_lsn)
    real = receivewal(server.dsn, tmp_path / "real", endpos, SLOT)
    fake_dsn = f"host=127.0.0.1 port={fake.port} user=postgres"
    ours = receivewal(fake_dsn, tmp_path / "fake", endpos, SLOT)
    assert (ours.returncode, real.returncode) == (0, 0), (real.stderr, ours.stderr)
    real_files = {p.name: p.read_bytes() for p in (tmp_path / "real").iterdir()}
    fake_files = {p.name: p.read_bytes() for p in (tmp_path / "fake").iterdir()}
    assert sorted(fake_files) == sorted(real_files)
    assert "00000002.history" in real_files
    offset = switch % SEGMENT
    for name, data in real_files.items():
        if not name.startswith("00000002") or name.endswith(".history"):
            assert fake_files[name] == data, name
            continue
        assert fake_files[name][:offset] == data[:offset]
        fake_eor = fake_files[name][offset : offset + size]
        assert _without_time_and_crc(fake_eor) == _without_time_and_crc(
            data[offset : offset + size]
        )
    kinds_real = _waldump(tmp_path / "real", 2, switch, endpos)
    kinds_fake = _waldump(tmp_path / "fake", 2, switch, endpos)
    assert kinds_fake == kinds_real == ["XLOG END_OF_RECOVERY"]


def test_a_switch_inside_the_recording_rechains_the_later_records(
    pg_server: provision.Server, make_walsender: Make, tmp_path: Path
) -> None:
    """A recording of real 15 over two segments (a checkpoint, then pg_switch_wal())
    switched 300 records before the XLOG_SWITCH: pg_receivewal writes timeline 2 from
    the fake, and pg_waldump 15 reads it to the end, every CRC, prev-link and page header
    checked, into the next segment: END_OF_RECOVERY, then the recording's later records,
    the same kinds in the same order as pg_waldump shows them on timeline 1."""
    if pg_server.version != 15:
        pytest.skip("Debian's pg_receivewal and pg_waldump are 15's")
    with pg_server.connect() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS pgwm_rechain (id int, t text)")
        row = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
        assert row is not None
        first = int(LSN.parse(str(row[0]))) // SEGMENT * SEGMENT
        conn.execute(
            "INSERT INTO pgwm_rechain SELECT g, repeat('r', 900) FROM generate_series(1, 400) g"
        )
        conn.execute("CHECKPOINT")
        conn.execute("INSERT INTO pgwm_rechain SELECT g, 'q' FROM generate_series(1, 300) g")
        conn.execute("SELECT pg_switch_wal()")
        conn.execute("INSERT INTO pgwm_rechain SELECT g, 'w' FROM generate_series(1, 300) g")
    path = tmp_path / "rechain.jsonl"
    recording = record_physical(pg_server.dsn, path, start_lsn=first)
    records = record_ends(recording.wal_data, recording.start_lsn, recording.segment_size)
    switch = max(i for i, r in enumerate(records) if r.is_xlog(XLOG_SWITCH))
    at = records[switch - 300].end
    fault = Fault.parse(f"timeline_switch:at={LSN(at)}")
    fake = make_walsender(script=path, pg_version=15, faults=[fault])
    _fake_slot(fake.port, recording.start_lsn)
    # The new end of WAL, as the fake will have it: the promotion is deterministic.
    copy = PhysicalRecording.from_file(path)
    copy.promote(fault, 0)
    end = copy.end_lsn
    dsn = f"host=127.0.0.1 port={fake.port} user=postgres"
    proc = receivewal(dsn, tmp_path / "wal", end - 1, SLOT)
    assert proc.returncode == 0, proc.stderr
    original = tmp_path / "timeline-1"
    original.mkdir()
    for offset in range(0, len(recording.wal_data), SEGMENT):
        name = segment_file_name(1, first + offset, SEGMENT)
        data = recording.wal_data[offset : offset + SEGMENT]
        (original / name).write_bytes(data.ljust(SEGMENT, b"\0"))
    before = _waldump(original, 1, at, records[-1].end)
    after = _waldump(tmp_path / "wal", 2, at, end)
    assert after == ["XLOG END_OF_RECOVERY", *before]
    assert before.count("XLOG SWITCH") == 1 and len(before) == len(records) - switch + 299
    # Timeline 2's first segment is whole (the XLOG_SWITCH fills it), the next partial.
    segment = segment_file_name(2, at, SEGMENT)
    names = {name for name in os.listdir(tmp_path / "wal") if name.startswith("00000002")}
    assert names == {"00000002.history", segment, segment_file_name(2, end, SEGMENT) + ".partial"}


def _primary_and_standby_copy(
    installation: provision.Installation,
) -> tuple[provision.Cluster, Path, int]:
    """A primary with rows, stopped cleanly, copied, started again with more rows; the
    copy of its data directory and the primary's flush position before the new rows."""
    primary = provision.Cluster(installation).start()
    with primary.connect() as conn:
        conn.execute("CREATE TABLE pgwm_follow (id int, t text)")
        conn.execute("INSERT INTO pgwm_follow SELECT g, 'a' FROM generate_series(1, 100) g")
    primary._terminate()
    assert primary.run_dir is not None
    copy = primary.run_dir / "standby-data"
    shutil.copytree(primary.data_dir, copy, symlinks=True)
    primary._launch(server_prefix(primary))
    with primary.connect() as conn:
        row = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
        assert row is not None
        restart = int(LSN.parse(str(row[0])))
        for batch in range(4):
            conn.execute(
                "INSERT INTO pgwm_follow SELECT g, repeat('b', 500) FROM generate_series(1, 500) g"
            )
            if batch == 1:
                conn.execute("SELECT pg_switch_wal()")
    return primary, copy, restart


def _standby(installation: provision.Installation, data: Path, port: int) -> provision.Cluster:
    """A server on a copy of the primary's data directory, a standby of the fake."""
    standby = provision.Cluster(installation).start()
    standby._terminate()
    shutil.rmtree(standby.data_dir)
    shutil.copytree(data, standby.data_dir, symlinks=True)
    (standby.data_dir / "standby.signal").write_text("")
    with (standby.data_dir / "postgresql.auto.conf").open("a") as conf:
        conf.write(f"primary_conninfo = 'host=127.0.0.1 port={port} user=postgres'\n")
        conf.write("recovery_target_timeline = 'latest'\n")
    if standby._user is not None:
        for root, dirs, files in os.walk(standby.data_dir):
            for name in [*dirs, *files]:
                os.chown(
                    Path(root) / name, standby._user.uid, standby._user.gid, follow_symlinks=False
                )
        os.chown(standby.data_dir, standby._user.uid, standby._user.gid)
    standby.log_file.write_text("")  # the log of the standby alone, not of its initdb'd start
    standby._launch(server_prefix(standby))
    return standby


def test_a_real_standby_follows_the_fakes_switch(
    pg_server: provision.Server, make_walsender: Make, tmp_path: Path
) -> None:
    """The standby streams timeline 1 from the fake to the switch point, fetches
    00000002.history, goes on on timeline 2 (pg_stat_wal_receiver says so), replays the
    end-of-recovery record and every re-laid-out record after it up to the fake's end of
    WAL (every row is there), and its log has no ERROR, FATAL or PANIC."""
    if not isinstance(pg_server, provision.Cluster):
        pytest.skip("builds its own primary and standby: only provisioned servers")
    primary, copy, restart = _primary_and_standby_copy(pg_server.installation)
    standby = None
    try:
        path = tmp_path / "primary.jsonl"
        recording = record_physical(primary.dsn, path, start_lsn=restart // SEGMENT * SEGMENT)
        with primary.connect() as conn:
            row = conn.execute("SELECT count(*) FROM pgwm_follow").fetchone()
        assert row is not None
        rows = row[0]
        records = record_ends(recording.wal_data, recording.start_lsn, recording.segment_size)
        # The switch point 200 records before the XLOG_SWITCH: timeline 2 is laid out
        # again into the next segment.
        switch = max(i for i, r in enumerate(records) if r.is_xlog(XLOG_SWITCH))
        at = records[switch - 200].end
        assert at > restart
        fake = make_walsender(
            script=path, pg_version=primary.version, faults=[f"timeline_switch:{LSN(at)}"]
        )
        standby = _standby(pg_server.installation, copy, fake.port)
        deadline = time.monotonic() + 60
        status: tuple[object, ...] = ()
        while time.monotonic() < deadline:
            with standby.connect() as conn:
                got = conn.execute(
                    "SELECT (SELECT received_tli FROM pg_stat_wal_receiver), "
                    "pg_last_wal_replay_lsn()::text, "
                    "(SELECT count(*) FROM pgwm_follow)"
                ).fetchone()
            assert got is not None
            status = tuple(got)
            with physical_connection("127.0.0.1", fake.port) as conn:
                identify = conn.command("IDENTIFY_SYSTEM")[1]
            assert isinstance(identify, DataRow)
            end = int(LSN.parse(bytes(identify.values[2] or b"").decode()))
            if status[0] == 2 and int(LSN.parse(str(status[1]))) >= end:
                break
            time.sleep(0.3)
        assert status[0] == 2, status
        assert int(LSN.parse(str(status[1]))) >= end > at, status
        assert status[2] == rows, status
        log = standby.log_file.read_text(errors="replace")
        assert not re.findall(r"^.*\b(ERROR|FATAL|PANIC):.*$", log, re.M), log[-3000:]
        assert "fetching timeline history file for timeline 2" in log
        assert "new target timeline is 2" in log
        assert re.search(r"restarted WAL streaming at \S+ on timeline 2", log), log[-3000:]
    finally:
        if standby is not None:
            standby.stop()
        primary.stop()
