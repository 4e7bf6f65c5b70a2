"""Faults on a physical stream, without a network or a real server: WAL removed on demand
(at START_REPLICATION, at a segment's start, inside an open segment), a connection that
drops after N bytes or messages, a slow rate, no keepalives, and an injected error.

The errors' fields are what real 14-18 send (``test_physical_faults_postgres.py`` checks
them against real servers whose checkpoints removed the WAL).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_session import Client, make

from codec import replication
from codec.wire import (
    CommandComplete,
    CopyBothResponse,
    CopyData,
    ErrorResponse,
    ReadyForQuery,
    StartupMessage,
)
from pgwire_mock.server.faults import Fault, FaultError
from pgwire_mock.server.physical import MAX_SEND_SIZE, PhysicalRecording

SEGMENT = 16 << 20
START = 0x1000000  # the start of segment 1
WAL = bytes(range(256)) * 4096  # 1 MB: eight full messages
LINES = {14: 4040, 15: 3473, 16: 3460, 17: 3721, 18: 3741}


def _client(
    major: int = 15, *, wal: bytes = WAL, start: int = START, **config: object
) -> tuple[Client, PhysicalRecording]:
    recording = PhysicalRecording("15.18", 15, 1, 1, start, start + len(wal), wal)
    client, _ = make(major, source=recording, **config)  # type: ignore[arg-type]
    replies = client.send(
        StartupMessage((("user", "postgres"), ("database", "x"), ("replication", "true")))
    )
    assert replies[-1] == ReadyForQuery("I")
    return client, recording


def _xlog(replies: list[object]) -> list[replication.XLogData]:
    return [r for r in replies if isinstance(r, replication.XLogData)]


def _error(replies: list[object]) -> dict[str, str]:
    (err,) = [r for r in replies if isinstance(r, ErrorResponse)]
    assert replies[-1] == ReadyForQuery("I")
    return dict(err.fields)


@pytest.mark.parametrize("major", sorted(LINES))
def test_wal_removed_inside_the_open_segment_is_checkxlogremoved_xx000(major: int) -> None:
    """A stream reading segment 1 when its WAL is removed: the next read fails as
    CheckXLogRemoved does on the real server (XX000, xlog.c, that major's line), then
    ReadyForQuery; no XLogData after the error. (A checkpoint never removes the segment
    holding the end of WAL: the recording reaches into segment 2.)"""
    client, _ = _client(major, wal=bytes(SEGMENT + 8192))
    assert isinstance(client.query("START_REPLICATION 0/1000000 TIMELINE 1")[0], CopyBothResponse)
    client.session.produce(2 * MAX_SEND_SIZE, client.now)
    assert len(_xlog(client.replies())) == 2
    assert client.session.inject(Fault.parse("wal_removed:0/2000000"), client.now)
    fields = _error(client.replies() + client.pump())
    assert fields == {
        "S": "ERROR",
        "V": "ERROR",
        "C": "XX000",
        "M": "requested WAL segment 000000010000000000000001 has already been removed",
        "F": "xlog.c",
        "L": str(LINES[major]),
        "R": "CheckXLogRemoved",
    }
    # The connection takes commands again, and the WAL stays removed for the next start.
    replies = client.query("START_REPLICATION 0/1000000 TIMELINE 1")
    assert isinstance(replies[0], CopyBothResponse)
    assert _error(replies)["R"] == "WalSndSegmentOpen"


def test_wal_removed_before_start_replication_is_walsndsegmentopen_58p01() -> None:
    """``--fault wal_removed`` (every stream, from START_REPLICATION) removes all but the
    segment holding the end of WAL: a start in an older segment gets CopyBothResponse,
    then 58P01 from WalSndSegmentOpen; a start in the kept segment streams."""
    wal = bytes(SEGMENT + 8192)
    client, recording = _client(16, wal=wal, faults=(Fault.parse("wal_removed"),))
    replies = client.query("START_REPLICATION 0/1000000 TIMELINE 1")
    assert isinstance(replies[0], CopyBothResponse)
    assert _error(replies + client.pump()) == {
        "S": "ERROR",
        "V": "ERROR",
        "C": "58P01",
        "M": "requested WAL segment 000000010000000000000001 has already been removed",
        "F": "walsender.c",
        "L": "2782",
        "R": "WalSndSegmentOpen",
    }
    assert recording.removed_before == 0x2000000
    client.query("START_REPLICATION 0/2000000 TIMELINE 1")
    assert [x.wal_start for x in _xlog(client.pump())] == [0x2000000]


def test_a_stream_reaching_a_removed_segment_gets_58p01_not_xx000() -> None:
    """A stream at a segment boundary must open the next segment: its removal is ENOENT
    in WalSndSegmentOpen (58P01), although the stream read the previous one."""
    client, _ = _client(17, wal=bytes(MAX_SEND_SIZE + SEGMENT + 8192), start=0x1FE0000)
    client.query("START_REPLICATION 0/1FE0000 TIMELINE 1")
    client.session.produce(1, client.now)
    assert len(_xlog(client.replies())) == 1  # up to 0/2000000, the end of segment 1
    client.session.inject(Fault.parse("wal_removed:lsn=0/3000000"), client.now)
    fields = _error(client.pump())
    assert (fields["C"], fields["R"], fields["M"].split()[3]) == (
        "58P01",
        "WalSndSegmentOpen",
        "000000010000000000000002",
    )


def test_close_after_bytes_cuts_the_stream_mid_message_and_closes() -> None:
    """close_after:bytes=N: exactly N more bytes of the stream (the last XLogData cut
    short), then the connection closes without an ErrorResponse."""
    client, _ = _client(faults=(Fault.parse("close_after:bytes=200000"),))
    client.query("START_REPLICATION 0/1000000 TIMELINE 1")
    client.session.produce(1 << 22, client.now)
    data = client.session.data_to_send()
    assert len(data) == 200000
    assert client.session.close_requested
    client.reader.feed(data)
    messages = list(client.reader)
    assert len(messages) == 1  # one whole XLogData; the second is cut short
    assert client.reader.buffered


def test_close_after_messages_counts_xlogdata() -> None:
    client, _ = _client()
    client.query("START_REPLICATION 0/1000000 TIMELINE 1")
    client.session.inject(Fault.parse("close_after:3"), client.now)
    assert len(_xlog(client.pump())) == 3
    assert client.session.closed


def test_slow_paces_the_wal_at_the_rate() -> None:
    """slow:rate=R: about R bytes each second on the session's clock; no more before."""
    client, _ = _client(wal=bytes(4 << 20), faults=(Fault.parse("slow:rate=256kb"),))
    client.query("START_REPLICATION 0/1000000 TIMELINE 1")
    received = 0
    while client.now < 1_700_000_004.0:
        received += sum(len(x.data) for x in _xlog(client.pump()))
        deadline = client.session.next_deadline()
        assert deadline is not None
        client.tick(max(deadline - client.now, 0.01))
    # 4 s at 256 kB/s, whole 128 kB messages only: within one message of 1 MB.
    assert 7 * MAX_SEND_SIZE <= received <= 10 * MAX_SEND_SIZE


def test_stop_keepalives_leaves_reply_requests_unanswered_and_no_timeout() -> None:
    client, recording = _client(wal_sender_timeout=60.0)
    client.query(f"START_REPLICATION {recording.end_lsn >> 32:X}/{recording.end_lsn:X}")
    client.session.inject(Fault("stop_keepalives"), client.now)
    update = replication.StandbyStatusUpdate(0, 0, 0, 0, True)
    assert client.send(CopyData(update.encode())) == []
    assert client.session.next_deadline() is None
    assert client.tick(120.0) == []
    assert not client.session.closed


def test_error_fault_ends_the_stream_with_its_error() -> None:
    client, _ = _client()
    client.query("START_REPLICATION 0/1000000 TIMELINE 1")
    client.session.inject(Fault.parse("error:57P01"), client.now)
    replies = client.replies()
    (err,) = [r for r in replies if isinstance(r, ErrorResponse)]
    assert dict(err.fields)["C"] == "57P01"
    assert client.session.closed  # FATAL


def test_faults_a_physical_stream_does_not_model_are_logged_and_ignored() -> None:
    lines: list[str] = []
    client, _ = _client(faults=(Fault.parse("pause:5"),))
    client.session._log = lines.append
    client.query("START_REPLICATION 0/1000000 TIMELINE 1")
    assert "fault pause does not act on a physical stream" in lines
    assert _xlog(client.pump())
    assert not any(isinstance(r, CommandComplete) for r in client.replies())


def test_wal_removed_parses_an_lsn_and_rejects_garbage() -> None:
    assert Fault.parse("wal_removed:0/3000000").lsn == 0x3000000
    assert Fault.parse("wal_removed:before=0/3000000").lsn == 0x3000000
    assert str(Fault.parse("wal_removed:0/3000000")) == "wal_removed:lsn=0/3000000"
    with pytest.raises(FaultError, match="bad lsn"):
        Fault.parse("wal_removed:3000000")


def test_physical_recording_keeps_removed_wal_out_of_the_file(tmp_path: Path) -> None:
    """The fault's removal is the serving server's state: a recording written after it
    still holds its whole WAL, and reads back equal."""
    wal = bytes(SEGMENT + 8192)
    recording = PhysicalRecording("15.18", 15, 1, 1, SEGMENT, 2 * SEGMENT + 8192, wal)
    assert recording.remove_wal(None) == 2 * SEGMENT
    path = tmp_path / "r.jsonl"
    with path.open("w") as out:
        recording.write(out)
    again = PhysicalRecording.from_file(path)
    assert again == recording
    assert again.removed_before == 0


def test_shutdown_sends_the_rest_asks_for_a_reply_then_copy_0_and_closes() -> None:
    """``shutdown`` mid-stream: the WAL up to the end (the shutdown checkpoint's stand-in),
    one reply-requested keepalive at the end, and once the client's write position is
    there, CommandComplete ``COPY 0`` without CopyDone and a close (WalSndDone)."""
    client, recording = _client()
    client.query("START_REPLICATION 0/1000000 TIMELINE 1")
    client.session.produce(1, client.now)
    client.replies()
    client.session.inject(Fault("shutdown"), client.now)
    replies = client.pump()
    assert len(_xlog(replies)) == 7
    assert replies[-1] == replication.PrimaryKeepalive(
        recording.end_lsn, replies[-1].send_time, True
    )  # type: ignore[union-attr]
    # Any reply ends the wait for one: a short one gets another request (WalSndDone).
    short = replication.StandbyStatusUpdate(recording.end_lsn - 1, 0, 0, 0, False)
    (again,) = client.send(CopyData(short.encode()))
    assert isinstance(again, replication.PrimaryKeepalive) and again.reply_requested
    assert not client.session.closed
    update = replication.StandbyStatusUpdate(recording.end_lsn, 0, 0, 0, False)
    assert client.send(CopyData(update.encode())) == [CommandComplete("COPY 0")]
    assert client.session.closed


def test_shutdown_without_wait_closes_at_once_with_copy_0() -> None:
    client, _ = _client()
    client.query("START_REPLICATION 0/1000000 TIMELINE 1")
    client.session.inject(Fault.parse("shutdown:wait=false"), client.now)
    assert client.replies() == [CommandComplete("COPY 0")]
    assert client.session.closed
