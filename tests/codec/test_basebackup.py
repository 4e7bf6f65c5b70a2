"""codec.basebackup: the CopyData payloads of a 15+ BASE_BACKUP ('n', 'm', 'd', 'p')."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from codec import basebackup
from codec.basebackup import ArchiveData, BaseBackupMessage, ManifestStart, NewArchive, Progress
from codec.errors import DecodeError, EncodeError
from codec.strategies.basebackup import base_backup_messages, base_backup_streams
from codec.wire import BackendReader, CopyData


@given(base_backup_messages())
def test_round_trip(message: BaseBackupMessage) -> None:
    """decode(encode(m)) == m, from bytes and from a memoryview."""
    payload = basebackup.encode(message)
    assert basebackup.decode(payload) == message
    assert basebackup.decode(memoryview(payload)) == message


@given(base_backup_streams())
def test_stream_through_copy_data_whole_and_byte_by_byte(messages: list[BaseBackupMessage]) -> None:
    """A whole stream framed in CopyData decodes back when fed whole and a byte at a time."""
    wire = b"".join(CopyData(basebackup.encode(m)).encode() for m in messages)
    for chunks in ([wire], [wire[i : i + 1] for i in range(len(wire))]):
        reader = BackendReader()
        decoded = []
        for chunk in chunks:
            reader.feed(chunk)
            for frame in reader:
                assert isinstance(frame, CopyData)
                decoded.append(basebackup.decode(frame.data))
        assert decoded == messages


def test_layouts_from_basebackup_copy_c() -> None:
    """Byte layouts as bbsink_copystream_* send them (PostgreSQL 18 basebackup_copy.c)."""
    assert basebackup.encode(NewArchive("base.tar", "")) == b"nbase.tar\0\0"
    assert basebackup.encode(NewArchive("16385.tar", "/srv/ts")) == b"n16385.tar\0/srv/ts\0"
    assert basebackup.encode(ManifestStart()) == b"m"
    assert basebackup.encode(ArchiveData(b"\0\1")) == b"d\0\1"
    assert basebackup.encode(Progress(0x0102030405060708)) == bytes.fromhex("70 0102030405060708")


def test_non_utf8_tablespace_location_round_trips() -> None:
    """A tablespace path is the server's bytes, not necessarily UTF-8: kept as they are."""
    payload = b"n16385.tar\0/srv/\xe9t\xe9\0"
    message = basebackup.decode(payload)
    assert isinstance(message, NewArchive)
    assert basebackup.encode(message) == payload


@pytest.mark.parametrize(
    ("payload", "message_type", "offset"),
    [
        (b"", "BASE_BACKUP message", 0),
        (b"x", "BASE_BACKUP message", 0),
        (b"nbase.tar", "BASE_BACKUP NewArchive ('n')", 1),
        (b"nbase.tar\0", "BASE_BACKUP NewArchive ('n')", 10),
        (b"nbase.tar\0\0!", "BASE_BACKUP NewArchive ('n')", 11),
        (b"m\0", "BASE_BACKUP ManifestStart ('m')", 1),
        (b"p" + b"\0" * 7, "BASE_BACKUP Progress ('p')", 8),
        (b"p" + b"\0" * 9, "BASE_BACKUP Progress ('p')", 9),
    ],
)
def test_malformed_payloads_say_which_message_and_where(
    payload: bytes, message_type: str, offset: int
) -> None:
    """What pg_basebackup's GetCopyDataString/GetCopyDataEnd refuse is a DecodeError
    naming the message and the offset."""
    with pytest.raises(DecodeError) as info:
        basebackup.decode(payload)
    assert (info.value.message_type, info.value.offset) == (message_type, offset)


@given(st.binary(max_size=40))
@example(b"n\0")
@example(b"p" + b"\xff" * 8)
def test_random_payloads_raise_only_decode_error(payload: bytes) -> None:
    """Any bytes decode, and then encode back to themselves, or raise DecodeError."""
    try:
        message = basebackup.decode(payload)
    except DecodeError:
        return
    assert basebackup.encode(message) == payload


@pytest.mark.parametrize(
    "message",
    [Progress(-1), Progress(1 << 64), NewArchive("a\0b"), NewArchive("a", "\ud800")],
    ids=repr,
)
def test_encode_rejects_what_cannot_be_sent(message: BaseBackupMessage) -> None:
    with pytest.raises(EncodeError):
        basebackup.encode(message)
