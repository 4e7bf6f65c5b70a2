"""A timeline switch: a real server promoted to timeline 2, recorded from the start of
the segment holding the switch point, and the fake replaying that recording, asked the
same things by a raw client on every major.

The promotion is built from a provisioned server of its own: stopped cleanly, restarted
with ``standby.signal`` (a standby with no primary, in recovery at the end of its WAL),
then ``pg_promote()``. Timeline 1 ends at the switch point inside the segment; the
recording, made on timeline 2, holds timeline 1's WAL up to it (the new timeline's
first segment is a copy of the old one's up to the switch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from physical_wire import (
    RawPhysical,
    physical_connection,
    receivewal,
    restart_as_standby,
    switch_point,
)

from codec import replication
from codec.values import LSN
from codec.wire import BackendMessage, CopyData, CopyDone
from conformance import provision
from pgwire_mock.pytest_plugin import WalSender
from pgwire_mock.record import record_physical

SEGMENT = 16 << 20


@pytest.fixture
def promoted(pg_server: provision.Server) -> Iterator[provision.Cluster]:
    """A server of ``pg_server``'s major on timeline 2 (its own: it is restarted)."""
    if not isinstance(pg_server, provision.Cluster):
        pytest.skip("the promotion restarts the server: only provisioned ones")
    server = provision.Cluster(pg_server.installation).start()
    try:
        with server.connect() as conn:
            conn.execute("CREATE TABLE pgwm_tli (id int, t text)")
            conn.execute(
                "INSERT INTO pgwm_tli SELECT g, repeat('x', 100) FROM generate_series(1, 3000) g"
            )
            # A slot whose restart_lsn stays on timeline 1 (pg_receivewal --slot).
            conn.execute("SELECT pg_create_physical_replication_slot('pgwm_tli', true)")
        restart_as_standby(server)
        with server.connect() as conn:
            conn.execute("SELECT pg_promote()")
            conn.execute(
                "INSERT INTO pgwm_tli SELECT g, repeat('z', 100) FROM generate_series(1, 3000) g"
            )
        yield server
    finally:
        server.stop()


def _until(conn: RawPhysical, kind: type) -> tuple[list[replication.XLogData], BackendMessage]:
    """The XLogData up to the first message of ``kind`` (keepalives skipped), and it."""
    out: list[replication.XLogData] = []
    while True:
        message = conn.next(10)
        assert message is not None, f"no {kind.__name__} after {len(out)} XLogData"
        if isinstance(message, CopyData):
            decoded = replication.decode_server_copy_data(message.data)
            if isinstance(decoded, replication.XLogData):
                out.append(decoded)
            continue
        assert isinstance(message, kind), message
        return out, message


def _crossing(host: str, port: int, start: int, switch: int) -> dict[str, object]:
    """What a client following the switch sees: timeline 1 from ``start`` to its end, the
    end-of-timeline handshake, TIMELINE_HISTORY 2, then timeline 2 from the switch."""
    out: dict[str, object] = {}
    with physical_connection(host, port) as conn:
        out["identify"] = conn.command("IDENTIFY_SYSTEM")[1]
        out["history"] = conn.command("TIMELINE_HISTORY 2")
        out["open"] = conn.start(f"START_REPLICATION PHYSICAL {LSN(start)} TIMELINE 1")
        xlog, _ = _until(conn, CopyDone)
        out["timeline 1"] = [(x.wal_start, x.wal_end, x.data) for x in xlog]
        conn.send(CopyDone())
        out["handshake"] = [m for m in conn.until_ready() if not isinstance(m, CopyData)]
        conn.start(f"START_REPLICATION PHYSICAL {LSN(switch)} TIMELINE 2")
        out["timeline 2"] = conn.xlog(1)[0]
        conn.finish()
        # At the switch point exactly: nothing to stream, no COPY, the next timeline.
        out["at switch"] = conn.start(f"START_REPLICATION PHYSICAL {LSN(switch)} TIMELINE 1")
    return out


def test_a_promotion_replays_with_the_same_end_of_timeline_handshake(
    promoted: provision.Cluster, make_walsender: Callable[..., WalSender], tmp_path: Path
) -> None:
    """START_REPLICATION on timeline 1 from the switch segment: the same XLogData (wal_end
    the switch point, the last one ending there), the server's CopyDone, then after the
    client's CopyDone the next_tli row (int8 2, the switch point), START_STREAMING,
    START_REPLICATION; TIMELINE_HISTORY 2 the same; timeline 2 streams on from the switch
    point (the same bytes as far as recorded). From the switch point itself on timeline
    1: no CopyBothResponse, the next_tli row at once."""
    server = promoted
    switch = switch_point(server.host, server.port)
    start = switch // SEGMENT * SEGMENT
    path = tmp_path / "promoted.jsonl"
    recording = record_physical(server.dsn, path, start_lsn=start)
    assert recording.timeline == 2
    assert recording.end_lsn > switch
    fake = make_walsender(script=path, pg_version=server.version)
    real = _crossing(server.host, server.port, start, switch)
    ours = _crossing("127.0.0.1", fake.port, start, switch)
    assert ours["identify"].values[:2] == real["identify"].values[:2]  # type: ignore[attr-defined]
    for key in ("history", "open", "timeline 1", "handshake", "at switch"):
        assert ours[key] == real[key], key
    timeline_1 = real["timeline 1"]
    assert isinstance(timeline_1, list)
    assert {end for _, end, _ in timeline_1} == {switch}
    assert timeline_1[-1][0] + len(timeline_1[-1][2]) == switch
    real_2, fake_2 = real["timeline 2"], ours["timeline 2"]
    assert isinstance(real_2, replication.XLogData)
    assert isinstance(fake_2, replication.XLogData)
    assert fake_2.wal_start == real_2.wal_start == switch
    assert fake_2.data == real_2.data[: len(fake_2.data)]


def test_pg_receivewal_follows_the_switch_to_the_same_files(
    pg_server: provision.Server,
    request: pytest.FixtureRequest,
    make_walsender: Callable[..., WalSender],
    tmp_path: Path,
) -> None:
    """pg_receivewal --slot, the slot's restart_lsn on timeline 1 (READ_REPLICATION_SLOT
    names it), streams timeline 1 to the switch point, follows the handshake, fetches
    00000002.history and goes on on timeline 2: the same files from both, byte for byte."""
    if pg_server.version != 15:
        pytest.skip(
            "READ_REPLICATION_SLOT is 15+, and Debian's pg_receivewal 15 refuses 16+ "
            "(test_physical_postgres.py); the raw client covers every major"
        )
    server: provision.Cluster = request.getfixturevalue("promoted")
    switch = switch_point(server.host, server.port)
    start = switch // SEGMENT * SEGMENT
    path = tmp_path / "promoted.jsonl"
    recording = record_physical(server.dsn, path, start_lsn=start)
    fake = make_walsender(script=path, pg_version=server.version)
    slots = {}
    with physical_connection("127.0.0.1", fake.port) as conn:
        conn.command("CREATE_REPLICATION_SLOT pgwm_tli PHYSICAL RESERVE_WAL")
        slots["fake"] = conn.command("READ_REPLICATION_SLOT pgwm_tli")[1]
    with physical_connection(server.host, server.port) as conn:
        slots["real"] = conn.command("READ_REPLICATION_SLOT pgwm_tli")[1]
    for row in slots.values():
        lsn, tli = row.values[1:]  # type: ignore[attr-defined]
        assert (int(LSN.parse(lsn.decode())) // SEGMENT * SEGMENT, tli) == (start, b"1")
    endpos = recording.end_lsn - 1
    real = receivewal(server.dsn, tmp_path / "real", endpos, "pgwm_tli")
    fake_dsn = f"host=127.0.0.1 port={fake.port} user=postgres"
    ours = receivewal(fake_dsn, tmp_path / "fake", endpos, "pgwm_tli")
    assert (ours.returncode, real.returncode) == (0, 0), (real.stderr, ours.stderr)
    real_files = {p.name: p.read_bytes() for p in (tmp_path / "real").iterdir()}
    fake_files = {p.name: p.read_bytes() for p in (tmp_path / "fake").iterdir()}
    assert sorted(fake_files) == sorted(real_files)
    assert "00000002.history" in real_files
    assert any(name.startswith("00000001") for name in real_files)
    with server.connect() as conn:
        row = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
    assert row is not None
    moved = int(LSN.parse(str(row[0]))) != recording.end_lsn
    offset, size = start % SEGMENT, recording.end_lsn - start
    for name, data in real_files.items():
        if moved and name.startswith("000000020"):
            # The real server wrote WAL since: the same bytes as far as recorded.
            assert fake_files[name][offset : offset + size] == data[offset : offset + size]
        else:
            assert fake_files[name] == data, name
