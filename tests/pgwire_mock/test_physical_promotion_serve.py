"""``timeline_switch`` through ``pgwire-mock serve``: a bad switch point on the command
line is one line and exit 1; ``POST /faults`` answers 400 for one and queues a good one
for the next stream, which then ends at the switch point; and the pytest handle's
``inject()`` raises FaultError."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from physical_wire import physical_connection
from test_physical_promotion import SMALL_SEGMENT, SYSID, _timeline_1
from test_serve_control import Served

from codec import replication
from codec.values import LSN
from codec.wire import CopyBothResponse, CopyData, CopyDone, DataRow
from pgwire_mock.pytest_plugin import WalSender
from pgwire_mock.server.faults import FaultError
from pgwire_mock.server.physical import PhysicalRecording


def _recording(tmp_path: Path) -> tuple[Path, list[int]]:
    wal, ends = _timeline_1()
    recording = PhysicalRecording(
        "15.18", 15, SYSID, 1, 0x1000000, 0x1000000 + len(wal), wal, SMALL_SEGMENT
    )
    path = tmp_path / "wal.jsonl"
    with path.open("w") as out:
        recording.write(out)
    return path, ends


def test_a_bad_switch_point_on_the_command_line_is_one_line(tmp_path: Path) -> None:
    path, ends = _recording(tmp_path)
    command = [sys.executable, "-m", "pgwire_mock.serve", "--port", "0", "--script", str(path)]
    proc = subprocess.run(
        [*command, "--fault", f"timeline_switch:{LSN(ends[3] + 8)}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr == (
        f"pgwire-mock serve: --fault: timeline_switch: {LSN(ends[3] + 8)} is not a record "
        f"boundary (the records around it end at {LSN(ends[3])} and {LSN(ends[4])})\n"
    )


def test_post_faults_refuses_a_bad_switch_and_queues_a_good_one(tmp_path: Path) -> None:
    path, ends = _recording(tmp_path)
    served = Served(path, "--pg-version", "15")
    try:
        status, answer = served.request("POST", "/faults", "timeline_switch:0/9000000")
        assert status == 400
        assert answer["error"].startswith("timeline_switch: 0/9000000 is outside the recording")
        at = ends[20]
        assert served.request("POST", "/faults", f"timeline_switch:at={LSN(at)}") == (
            200,
            {"applied": False},
        )
        with physical_connection("127.0.0.1", served.port) as conn:
            opened = conn.start("START_REPLICATION PHYSICAL 0/1000000 TIMELINE 1")
            assert isinstance(opened[-1], CopyBothResponse)
            xlog = []
            while not isinstance(message := conn.next(10), CopyDone):
                assert isinstance(message, CopyData), message
                decoded = replication.decode_server_copy_data(message.data)
                if isinstance(decoded, replication.XLogData):
                    xlog.append(decoded)
            assert {x.wal_end for x in xlog} == {at}
            assert xlog[-1].wal_start + len(xlog[-1].data) == at
            conn.send(CopyDone())
            rows = [m for m in conn.until_ready() if isinstance(m, DataRow)]
            assert rows[0].values == (b"2", str(LSN(at)).encode())
            identify = conn.command("IDENTIFY_SYSTEM")[1]
            assert isinstance(identify, DataRow) and identify.values[1] == b"2"
    finally:
        served.stop()


def test_the_pytest_handle_raises_for_a_bad_switch(
    tmp_path: Path, make_walsender: Callable[..., WalSender]
) -> None:
    path, ends = _recording(tmp_path)
    server = make_walsender(script=path, pg_version=15)
    with pytest.raises(FaultError, match=r"^timeline_switch: .* is not a record boundary"):
        server.inject(f"timeline_switch:{LSN(ends[3] + 8)}")
    assert server.inject(f"timeline_switch:{LSN(ends[3])}") is False  # queued: no stream
