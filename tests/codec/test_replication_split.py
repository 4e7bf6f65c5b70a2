"""codec.replication.split_xlog_data, the client's fast path, reads what the normal path
(BackendReader, then decode_server_copy_data) reads: the same XLogData in the same
order, the rest left for the normal path, and the same DecodeError where the bytes
are bad; and the client session that uses it reports the same stream either way."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codec import replication as rep
from codec import wire
from codec.errors import DecodeError
from codec.wire import BackendReader, CopyData
from pgwire_mock.client import ReplicationSession, State, WalData, WalRun, pgoutput_options
from pgwire_mock.streamfile import read_stream

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden" / "pg17"

Item = tuple[object, ...]


def _read_one(message: wire.BackendMessage, out: list[Item]) -> None:
    """The normal path for one message: a CopyData of 'w' decoded as XLogData."""
    if isinstance(message, CopyData) and message.data[:1] == b"w":
        x = rep.decode_server_copy_data(message.data)
        assert isinstance(x, rep.XLogData)
        out.append(("w", x.wal_start, x.wal_end, x.send_time, x.data))
    else:
        out.append(("message", message))


def normal(data: bytes, chunk: int, max_size: int) -> tuple[list[Item], str | None]:
    """Message by message: every CopyData decoded as a replication message."""
    reader = BackendReader(max_size)
    out: list[Item] = []
    try:
        for at in range(0, len(data), chunk):
            reader.feed(data[at : at + chunk])
            for message in reader:
                _read_one(message, out)
    except DecodeError as err:
        return out, str(err)
    return out, None


def fast(data: bytes, chunk: int, max_size: int) -> tuple[list[Item], str | None]:
    """As the client session reads in STREAMING: runs of XLogData by the fast path,
    anything else by the normal path, then the fast path again."""
    reader = BackendReader(max_size)
    out: list[Item] = []
    try:
        for at in range(0, len(data), chunk):
            reader.feed(data[at : at + chunk])
            while True:
                out.extend(("w", *x) for x in reader.take_run(rep.split_xlog_data))
                message = reader.next_message()
                if message is None:
                    break
                _read_one(message, out)
    except DecodeError as err:
        return out, str(err)
    return out, None


def xlog(start: int, end: int, data: bytes) -> bytes:
    return CopyData(rep.XLogData(start, end, 7, data).encode()).encode()


def keepalive(end: int) -> bytes:
    return CopyData(rep.PrimaryKeepalive(end, 7, True).encode()).encode()


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    """One backend frame: mostly XLogData, some keepalives, other messages, CopyData
    that is not a whole XLogData, and bytes that are no frame at all."""
    kind = draw(st.sampled_from(["xlog"] * 6 + ["keepalive", "other", "short", "junk"]))
    lsn = st.integers(0, 2**64 - 1)
    if kind == "xlog":
        return xlog(draw(lsn), draw(lsn), draw(st.binary(max_size=40)))
    if kind == "keepalive":
        return keepalive(draw(lsn))
    if kind == "other":
        message = draw(
            st.sampled_from(
                [wire.CopyDone(), wire.CommandComplete("COPY 0"), wire.ReadyForQuery("I")]
            )
        )
        return message.encode()
    if kind == "short":  # CopyData of 'w' with less than the 25-byte header
        return CopyData(b"w" + draw(st.binary(max_size=23))).encode()
    return draw(st.binary(min_size=1, max_size=12))


@given(st.lists(frames(), max_size=30), st.integers(1, 64), st.sampled_from([64, 1 << 30]))
def test_random_streams_read_the_same(parts: list[bytes], chunk: int, max_size: int) -> None:
    """Random frames (bad ones included), fed in random chunk sizes and with a small
    max_message_size or the default: the same items, then the same error if any."""
    data = b"".join(parts)
    assert fast(data, chunk, max_size) == normal(data, chunk, max_size)


def recorded(name: str) -> bytes:
    path = GOLDEN / name
    with path.open("rb") as f:
        stream = [(e.lsn, e.payload) for e in read_stream(f, str(path))]
    out = bytearray()
    for index, (lsn, payload) in enumerate(stream):
        out += xlog(lsn, lsn + len(payload), payload)
        if index % 17 == 0:
            out += keepalive(lsn)
    return bytes(out + wire.CopyDone().encode())


@pytest.mark.parametrize(
    "name", ["types.v1.jsonl", "streaming.v4-parallel-2pc-bin.jsonl", "toast.v1-binary.jsonl"]
)
@pytest.mark.parametrize("chunk", [1, 7, 1 << 16])
def test_recorded_streams_read_the_same(name: str, chunk: int) -> None:
    """PostgreSQL 17's pgoutput messages as XLogData with keepalives between, whole,
    byte by byte and in odd chunks: the same XLogData and messages as the normal path."""
    data = recorded(name)
    got = fast(data, chunk, 1 << 30)
    assert got == normal(data, chunk, 1 << 30)
    assert got[1] is None and len(got[0]) > 20


def test_a_frame_over_the_size_limit_is_left_to_the_normal_path() -> None:
    """An XLogData frame longer than max_message_size is not taken: the normal path then
    raises its DecodeError naming the length word."""
    data = xlog(1, 2, b"a" * 10) + xlog(3, 4, b"b" * 100)
    reader = BackendReader(60)
    reader.feed(data)
    assert [x[3] for x in reader.take_run(rep.split_xlog_data)] == [b"a" * 10]
    with pytest.raises(DecodeError, match="length word"):
        reader.next_message()


def streaming(**options: bool) -> ReplicationSession:
    session = ReplicationSession(user="u", database="d", **options)
    session.connect()
    session.receive_data(
        wire.AuthenticationOk().encode()
        + wire.ParameterStatus("server_version", "17.2").encode()
        + wire.ReadyForQuery("I").encode()
    )
    session.start_replication("s", "0/0", pgoutput_options("p"))
    session.receive_data(wire.CopyBothResponse().encode())
    session.data_to_send()
    assert session.state is State.STREAMING
    return session


def session_items(session: ReplicationSession, data: bytes, chunk: int) -> list[object]:
    """Every event, a WalRun's messages one by one as WalData's fields; then what the
    session queued to send (keepalive answers, CopyDone) and the received LSN."""
    out: list[object] = []
    for at in range(0, len(data), chunk):
        for event in session.receive_data(data[at : at + chunk], now=0):
            if isinstance(event, WalRun):
                out.extend(("w", *message) for message in event.messages)
            elif isinstance(event, WalData):
                out.append(("w", event.wal_start, event.wal_end, event.send_time, event.payload))
            else:
                out.append(event)
    return [*out, session.data_to_send(), session.received_lsn, session.state]


@pytest.mark.parametrize("chunk", [1, 7, 1 << 16])
def test_a_session_with_wal_runs_reports_what_a_session_with_wal_data_does(chunk: int) -> None:
    """Client sessions read XLogData by the fast path while streaming: with
    ``wal_runs`` they report the same messages, in the same places among keepalives and
    the stream's end, as WalData events do without it; answers and positions agree."""
    data = (
        recorded("streaming.v4-parallel-2pc-bin.jsonl")
        + wire.CommandComplete("COPY 0").encode()
        + wire.ReadyForQuery("I").encode()
    )
    runs = session_items(streaming(wal_runs=True), data, chunk)
    assert runs == session_items(streaming(), data, chunk)
    assert sum(isinstance(item, tuple) for item in runs) > 20
