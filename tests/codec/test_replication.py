"""codec.replication: the CopyData payloads of START_REPLICATION, both directions."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from codec import replication as rep
from codec.errors import DecodeError, EncodeError
from codec.replication import (
    HotStandbyFeedback,
    PrimaryKeepalive,
    ReplicationMessage,
    StandbyStatusUpdate,
    XLogData,
    decode_client_copy_data,
    decode_server_copy_data,
)
from codec.strategies.wire import client_copy_data, replication_messages, server_copy_data


def decode_any(payload: bytes) -> ReplicationMessage:
    if payload[:1] in rep.SERVER_REGISTRY:
        return decode_server_copy_data(payload)
    return decode_client_copy_data(payload)


@given(replication_messages())
def test_round_trip(message: ReplicationMessage) -> None:
    """decode(encode(m)) == m for every replication message."""
    assert decode_any(rep.encode(message)) == message


@given(server_copy_data())
def test_server_messages_decode_from_memoryview(message: ReplicationMessage) -> None:
    assert decode_server_copy_data(memoryview(rep.encode(message))) == message


@given(client_copy_data())
def test_client_messages_are_not_server_messages(message: ReplicationMessage) -> None:
    """One registry per layer: 'r' and 'h' are client-only, so the server registry
    refuses them (and pgoutput's 'r', Rollback Prepared, lives elsewhere)."""
    with pytest.raises(DecodeError, match="expected 'w' or 'k'"):
        decode_server_copy_data(rep.encode(message))


KEEPALIVE = bytes.fromhex("6b 0000000001564040 000303d4d450396c 01")


def test_known_bytes_from_postgresql_15() -> None:
    """Captured from PostgreSQL 15 streaming to pg_receivewal (wal_sender_timeout=2s)."""
    assert len(KEEPALIVE) == 18
    keepalive = decode_server_copy_data(KEEPALIVE)
    assert keepalive == PrimaryKeepalive(0x1564040, 0x000303D4D450396C, True)
    assert rep.encode(keepalive) == KEEPALIVE

    status = bytes.fromhex("72000000000156404000000000000000000000000000000000000303d4d450390900")
    update = decode_client_copy_data(status)
    assert update == StandbyStatusUpdate(0x1564040, 0, 0, 0x000303D4D4503909, False)
    assert rep.encode(update) == status

    head = bytes.fromhex("7700000000010000000000000001563fe8000303d4d4131523")
    xlog = decode_server_copy_data(head + b"\x01\x02")
    assert xlog == XLogData(0x1000000, 0x1563FE8, 0x000303D4D4131523, b"\x01\x02")


def test_documented_layouts() -> None:
    """Sizes from the docs: keepalive 18 bytes, status update 34, feedback 25, XLogData
    header 25."""
    assert len(rep.encode(PrimaryKeepalive(1, 2))) == 18
    assert len(rep.encode(StandbyStatusUpdate(1, 2, 3, 4))) == 34
    assert len(rep.encode(HotStandbyFeedback(1, 2, 3, 4, 5))) == 25
    assert rep.encode(XLogData(1, 2, 3, b"pg")) == (
        b"w" + (1).to_bytes(8, "big") + (2).to_bytes(8, "big") + (3).to_bytes(8, "big") + b"pg"
    )
    assert rep.encode(HotStandbyFeedback(-1, 7, 1, 8, 2)) == (
        b"h" + b"\xff" * 8 + bytes.fromhex("00000007 00000001 00000008 00000002")
    )


@pytest.mark.parametrize(
    "message",
    [
        XLogData(-1, 0, 0, b""),
        XLogData(0, 1 << 64, 0, b""),
        PrimaryKeepalive(0, 1 << 63),
        StandbyStatusUpdate(0, 0, -1, 0),
        HotStandbyFeedback(0, 1 << 32, 0, 0, 0),
    ],
    ids=repr,
)
def test_encode_rejects_out_of_range_values(message: ReplicationMessage) -> None:
    with pytest.raises(EncodeError):
        rep.encode(message)


@pytest.mark.parametrize(
    ("payload", "offset"),
    [
        (b"", 0),
        (b"w" + b"\0" * 23, 24),
        (KEEPALIVE[:-1], 17),
        (KEEPALIVE + b"\0", 18),
        (KEEPALIVE[:-1] + b"\x02", 17),
        (b"r", 0),
    ],
)
def test_malformed_server_payloads(payload: bytes, offset: int) -> None:
    """Wrong sizes and reply flags other than 0/1 are DecodeErrors at the right offset."""
    with pytest.raises(DecodeError) as info:
        decode_server_copy_data(payload)
    assert info.value.offset == offset


@given(st.binary(max_size=64))
@example(b"k" + b"\0" * 17)
@example(b"r" + b"\0" * 32 + b"\x05")
@example(b"h" + b"\0" * 24)
def test_random_payloads_raise_only_decode_error(payload: bytes) -> None:
    for decode in (decode_server_copy_data, decode_client_copy_data):
        try:
            message = decode(payload)
        except DecodeError:
            continue
        assert rep.encode(message) == payload
