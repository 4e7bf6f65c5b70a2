"""``pgwire-mock serve`` of a physical recording with faults from the command line and
from ``--control``'s ``POST /faults``: the same machinery as for logical streams."""

from __future__ import annotations

from pathlib import Path

from physical_wire import error_fields, physical_connection
from test_serve_control import Served

from codec.wire import CopyBothResponse, CopyData, ErrorResponse
from pgwire_mock.server.physical import PhysicalRecording

SEGMENT = 1 << 20  # a 1 MB wal_segment_size keeps the file small
START = 5 * SEGMENT


def test_post_faults_removes_the_wal_under_a_slowed_physical_stream(tmp_path: Path) -> None:
    """``--fault slow`` holds the stream inside segment 5; ``POST /faults wal_removed``
    removes it: XX000 from CheckXLogRemoved, then 58P01 from WalSndSegmentOpen for a new
    START_REPLICATION there (16's lines)."""
    wal = bytes(range(256)) * ((SEGMENT + 8192) // 256)
    recording = PhysicalRecording("16.4", 16, 9, 1, START, START + len(wal), wal, SEGMENT)
    path = tmp_path / "wal.jsonl"
    with path.open("w") as out:
        recording.write(out)
    served = Served(path, "--pg-version", "16", "--fault", "slow:rate=128kb")
    try:
        with physical_connection("127.0.0.1", served.port) as conn:
            start = "START_REPLICATION PHYSICAL 0/500000 TIMELINE 1"
            assert isinstance(conn.start(start)[-1], CopyBothResponse)
            conn.xlog(1)
            status, answer = served.request("POST", "/faults", "wal_removed")
            assert (status, answer) == (200, {"applied": True})
            rest = [m for m in conn.until_ready() if not isinstance(m, CopyData)]
            assert isinstance(rest[0], ErrorResponse)
            fields = error_fields(rest)
            assert (fields["C"], fields["L"], fields["R"]) == ("XX000", "3460", "CheckXLogRemoved")
            name = "000000010000000000000005"
            assert fields["M"] == f"requested WAL segment {name} has already been removed"
            conn.start(start)
            fields = error_fields(conn.until_ready())
            assert (fields["C"], fields["L"], fields["R"]) == ("58P01", "2782", "WalSndSegmentOpen")
    finally:
        served.stop()
