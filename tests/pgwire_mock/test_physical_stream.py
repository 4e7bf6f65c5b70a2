"""server.physical without a network or a real server: the cut of XLogData, waiting at
the end of WAL, and the recording file's round trip."""

from __future__ import annotations

import io

import pytest

from codec import replication
from codec.wire import BackendReader, CopyData
from pgwire_mock.server.physical import (
    MAX_SEND_SIZE,
    PhysicalRecording,
    PhysicalRecordingError,
    start_physical,
)
from pgwire_mock.server.state import ServerState, SlotState

START = 0x1000000
WAL = bytes(range(256)) * 1200  # 300 kB: three messages from the segment start


def _recording() -> PhysicalRecording:
    return PhysicalRecording("15.18", 15, 1234, 1, START, START + len(WAL), WAL)


def _decode(frames: list[bytes]) -> list[replication.ServerCopyData]:
    reader = BackendReader()
    reader.feed(b"".join(frames))
    out = []
    for message in reader:
        assert isinstance(message, CopyData)
        out.append(replication.decode_server_copy_data(message.data))
    return out


def test_messages_are_cut_at_max_send_size_and_page_boundaries() -> None:
    """From a position inside a page, the first message ends at a page boundary 128 kB
    on, the last one at the end of WAL; wal_end is always the end of WAL."""
    stream = start_physical(
        15, _recording(), ServerState(), None, START + 100, 0, now=0.0, wal_sender_timeout=60
    )
    messages = _decode(stream.produce(1 << 30, 0))
    assert [m.wal_start for m in messages] == [  # type: ignore[union-attr]
        START + 100,
        START + MAX_SEND_SIZE,
        START + 2 * MAX_SEND_SIZE,
    ]
    assert all(m.wal_end == START + len(WAL) for m in messages)
    assert b"".join(m.data for m in messages) == WAL[100:]  # type: ignore[union-attr]
    assert not stream.can_produce


def test_at_the_end_of_wal_only_the_timeout_keepalive_then_a_silent_close() -> None:
    """Caught up: nothing until wal_sender_timeout/2, then one reply-requested keepalive,
    then None (close) at the full timeout."""
    recording = _recording()
    stream = start_physical(
        15, recording, ServerState(), None, recording.end_lsn, 0, now=0.0, wal_sender_timeout=60
    )
    assert stream.produce(1 << 20, 0) == []
    assert stream.tick(29.0, 0) == []
    (keepalive,) = _decode(stream.tick(30.0, 0) or [])
    assert keepalive == replication.PrimaryKeepalive(recording.end_lsn, 0, True)
    assert stream.tick(45.0, 0) == []
    assert stream.tick(60.0, 0) is None


def test_flush_feedback_sets_restart_lsn_even_backwards() -> None:
    slot = SlotState("p", None, None, 0, START + 5000)
    stream = start_physical(
        15, _recording(), ServerState(), slot, START, 0, now=0.0, wal_sender_timeout=60
    )
    update = replication.StandbyStatusUpdate(START + 10, START + 10, 0, 0, True)
    (answer,) = _decode(stream.receive(update.encode(), 1.0, 7) or [])
    assert slot.restart_lsn == START + 10
    assert answer == replication.PrimaryKeepalive(START, 7, False)


def test_recording_file_round_trip_and_gaps() -> None:
    recording = _recording()
    text = io.StringIO()
    recording.write(text)
    assert PhysicalRecording.read(io.StringIO(text.getvalue()), "f") == recording
    lines = text.getvalue().splitlines()
    with pytest.raises(PhysicalRecordingError, match="does not follow"):
        PhysicalRecording.read(io.StringIO("\n".join([lines[0], *lines[2:]])), "f")
