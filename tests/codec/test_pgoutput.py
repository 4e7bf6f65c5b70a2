"""pgoutput messages: exact bytes, round trips, and the decoder's error contract."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from codec import DecodeError, EncodeError
from codec.pgoutput import (
    UNCHANGED_TOAST,
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Decoder,
    Delete,
    Insert,
    Message,
    Origin,
    PgOutputMessage,
    Prepare,
    Relation,
    RelationColumn,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    Type,
    Update,
    encode,
)
from codec.strategies import messages, transactions

VERSIONS = [1, 2, 3, 4]


def q(value: int) -> bytes:
    return struct.pack("!Q", value)


def i(value: int) -> bytes:
    return struct.pack("!I", value)


# Bytes laid out by hand from proto.c (PostgreSQL 17), field by field, so a mistake in
# the codec cannot hide behind the same mistake in a round trip.
VECTORS: list[tuple[PgOutputMessage, bytes, bool]] = [
    (Begin(0x16B3748, 7, 735), b"B" + q(0x16B3748) + q(7) + i(735), False),
    (Commit(0, 10, 20, 30), b"C\x00" + q(10) + q(20) + q(30), False),
    (Origin(5, "node1"), b"O" + q(5) + b"node1\0", False),
    (
        Relation(16384, "public", "t", "d", (RelationColumn(1, "id", 23, -1),)),
        b"R" + i(16384) + b"public\0t\0d\x00\x01" + b"\x01id\0" + i(23) + b"\xff\xff\xff\xff",
        False,
    ),
    (Type(16390, "public", "mood"), b"Y" + i(16390) + b"public\0mood\0", False),
    (
        Insert(16384, ("1", None, UNCHANGED_TOAST, b"\x01")),
        b"I" + i(16384) + b"N\x00\x04t" + i(1) + b"1nub" + i(1) + b"\x01",
        False,
    ),
    (
        Update(16384, ("2",), key_tuple=("1",)),
        b"U" + i(16384) + b"K\x00\x01t" + i(1) + b"1" + b"N\x00\x01t" + i(1) + b"2",
        False,
    ),
    (Update(16384, ("2",)), b"U" + i(16384) + b"N\x00\x01t" + i(1) + b"2", False),
    (
        Delete(16384, old_tuple=("1",)),
        b"D" + i(16384) + b"O\x00\x01t" + i(1) + b"1",
        False,
    ),
    (Truncate(3, (1, 2)), b"T" + i(2) + b"\x03" + i(1) + i(2), False),
    # In a Message the xid comes before the flags (logicalrep_write_message).
    (Message(1, 99, "p", b"hi"), b"M\x01" + q(99) + b"p\0" + i(2) + b"hi", False),
    (Message(1, 99, "p", b"", xid=7), b"M" + i(7) + b"\x01" + q(99) + b"p\0" + i(0), True),
    (Insert(1, (), xid=7), b"I" + i(7) + i(1) + b"N\x00\x00", True),
    (Truncate(0, (5,), xid=7), b"T" + i(7) + i(1) + b"\x00" + i(5), True),
    (StreamStart(7, True), b"S" + i(7) + b"\x01", False),
    (StreamStop(), b"E", False),
    (StreamCommit(7, 0, 1, 2, 3), b"c" + i(7) + b"\x00" + q(1) + q(2) + q(3), False),
    (StreamAbort(7, 8), b"A" + i(7) + i(8), False),
    (StreamAbort(7, 8, 9, 10), b"A" + i(7) + i(8) + q(9) + q(10), False),
    (BeginPrepare(1, 2, 3, 7, "g"), b"b" + q(1) + q(2) + q(3) + i(7) + b"g\0", False),
    (Prepare(0, 1, 2, 3, 7, "g"), b"P\x00" + q(1) + q(2) + q(3) + i(7) + b"g\0", False),
    (CommitPrepared(0, 1, 2, 3, 7, "g"), b"K\x00" + q(1) + q(2) + q(3) + i(7) + b"g\0", False),
    (
        RollbackPrepared(0, 1, 2, 3, 4, 7, "g"),
        b"r\x00" + q(1) + q(2) + q(3) + q(4) + i(7) + b"g\0",
        False,
    ),
    (StreamPrepare(0, 1, 2, 3, 7, "g"), b"p\x00" + q(1) + q(2) + q(3) + i(7) + b"g\0", False),
]


def decoder(in_stream: bool) -> Decoder:
    d = Decoder()
    d.in_stream = in_stream
    return d


@pytest.mark.parametrize(("message", "wire", "in_stream"), VECTORS)
def test_known_bytes_encode_and_decode_exactly(
    message: PgOutputMessage, wire: bytes, in_stream: bool
) -> None:
    """Each message class encodes to proto.c's layout and decodes back from it."""
    assert encode(message) == wire
    assert decoder(in_stream).decode(wire) == message


def test_every_message_class_has_a_vector() -> None:
    """The 19 pgoutput message types are all pinned by a hand-laid vector."""
    tags = {type(m).TAG for m, _, _ in VECTORS}
    assert {tag.decode() for tag in tags} == set("BMCORYIUDTSEcAbPKrp")


@pytest.mark.parametrize(("message", "wire", "in_stream"), VECTORS)
def test_truncated_or_extended_payload_raises_decode_error(
    message: PgOutputMessage, wire: bytes, in_stream: bool
) -> None:
    """A prefix or an extension of a valid message is a DecodeError naming an offset.

    The one exception is a prefix that is itself a whole message (the first 9 bytes of a
    protocol-4 Stream Abort are a protocol-2 one): it must then re-encode to itself.
    """
    for end in range(len(wire)):
        try:
            shorter = decoder(in_stream).decode(wire[:end])
        except DecodeError as err:
            assert 0 <= err.offset <= end
        else:
            assert isinstance(shorter, StreamAbort)
            assert encode(shorter) == wire[:end]
    with pytest.raises(DecodeError, match="expected"):
        decoder(in_stream).decode(wire + b"\x00")


@pytest.mark.parametrize("version", VERSIONS)
@given(data=st.data())
def test_round_trip_outside_a_stream(version: int, data: st.DataObject) -> None:
    """decode(encode(m)) == m for every message a protocol version allows."""
    message = data.draw(messages(version))
    wire = encode(message)
    assert decoder(False).decode(wire) == message


@pytest.mark.parametrize("version", [2, 3, 4])
@given(data=st.data())
def test_round_trip_inside_a_stream(version: int, data: st.DataObject) -> None:
    """Inside Stream Start/Stop the xid is read back in front of streamable messages."""
    message = data.draw(messages(version, in_stream=True))
    assert getattr(message, "xid", None) is not None
    assert decoder(True).decode(encode(message)) == message


@pytest.mark.parametrize("version", VERSIONS)
@settings(suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_transactions_decode_through_one_stateful_decoder(
    version: int, data: st.DataObject
) -> None:
    """A whole transaction, streamed or not, decodes message by message with one Decoder."""
    txn = data.draw(transactions(version))
    d = Decoder()
    decoded = [d.decode(encode(m)) for m in txn]
    assert decoded == txn
    assert not d.in_stream


def test_stream_start_and_stop_switch_xid_reading() -> None:
    """The same Insert bytes mean different things inside and outside a stream."""
    d = Decoder()
    inside = Insert(16384, ("a",), xid=900)
    d.decode(encode(StreamStart(900, True)))
    assert d.decode(encode(inside)) == inside
    d.decode(encode(StreamStop()))
    with pytest.raises(DecodeError):
        d.decode(encode(inside))  # read without the xid, 900 is taken as the OID
    assert d.decode(encode(Insert(16384, ("a",)))) == Insert(16384, ("a",))


@given(st.binary(max_size=64), st.booleans())
@example(b"", False)
@example(b"I", True)
@example(b"T\x7f\xff\xff\xff\x00", False)
@example(b"M\x00" + b"\x00" * 8 + b"\0" + b"\x7f\xff\xff\xff", False)
def test_arbitrary_bytes_raise_only_decode_error(payload: bytes, in_stream: bool) -> None:
    """Random input decodes or raises DecodeError; whatever decodes re-encodes to itself."""
    try:
        message = decoder(in_stream).decode(payload)
    except DecodeError as err:
        assert err.offset >= 0
    else:
        assert encode(message) == payload


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    messages(4),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_mutated_messages_raise_only_decode_error(
    message: PgOutputMessage, edits: list[tuple[int, int]]
) -> None:
    """Flipped bytes in a valid message never escape as anything but DecodeError."""
    wire = bytearray(encode(message))
    for where, value in edits:
        wire[where % len(wire)] = value
    try:
        decoded = decoder(False).decode(bytes(wire))
    except DecodeError:
        return
    assert encode(decoded) == bytes(wire)


def test_decode_error_names_message_type_and_offset() -> None:
    """The error says which message, where, and what was expected."""
    with pytest.raises(DecodeError) as info:
        Decoder().decode(b"I" + i(1) + b"X")
    assert info.value.message_type == "pgoutput Insert ('I')"
    assert info.value.offset == 5
    assert "expected 'N'" in str(info.value)
    with pytest.raises(DecodeError, match="expected a message type byte"):
        Decoder().decode(b"Z")


def test_lying_column_count_does_not_allocate() -> None:
    """A column count of 32767 over a 10-byte payload fails at the first missing column."""
    with pytest.raises(DecodeError, match="column 0 of 32767"):
        Decoder().decode(b"I" + i(1) + b"N\x7f\xff")
    with pytest.raises(DecodeError, match="does not fit"):
        Decoder().decode(b"I" + i(1) + b"N\x00\x01t\x7f\xff\xff\xff")


def test_text_values_round_trip_bytes_that_are_not_utf8() -> None:
    """A SQL_ASCII database can send any bytes as text; they survive decode and encode."""
    wire = b"I" + i(1) + b"N\x00\x01t" + i(2) + b"\xff\xfe"
    message = Decoder().decode(wire)
    assert isinstance(message, Insert)
    assert isinstance(message.new_tuple[0], str)
    assert encode(message) == wire


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (Begin(-1, 0, 0), "Begin.final_lsn must be in"),
        (Begin(0, 0, 1 << 32), "Begin.xid must be in"),
        (Commit(256, 0, 0, 0), "Commit.flags must be in"),
        (Origin(0, "a\0b"), "must not contain a NUL"),
        (Update(1, (), key_tuple=(), old_tuple=()), "not both"),
        (Delete(1), "exactly one"),
        (StreamAbort(1, 2, 3, None), "both abort_lsn and abort_timestamp"),
        (Insert(1, (1,)), "must be str, bytes, None or UNCHANGED_TOAST"),  # type: ignore[arg-type]
        (Relation(1, "", "t", "dd", ()), "one byte"),
        (StreamStart(1, 1), "must be a bool"),  # type: ignore[arg-type]
        (Truncate(0, (-1,)), "relation_oids"),
    ],
)
def test_invalid_messages_raise_encode_error(message: PgOutputMessage, error: str) -> None:
    with pytest.raises(EncodeError, match=error):
        encode(message)


def test_messages_are_frozen_and_hashable() -> None:
    message = Decoder().decode(encode(Insert(1, ("a", None))))
    assert hash(message) == hash(Insert(1, ("a", None)))
    with pytest.raises(AttributeError):
        message.relation_oid = 2  # type: ignore[misc]


def test_unchanged_toast_is_a_singleton_across_pickling() -> None:
    import pickle

    assert pickle.loads(pickle.dumps(UNCHANGED_TOAST)) is UNCHANGED_TOAST
    assert repr(UNCHANGED_TOAST) == "UNCHANGED_TOAST"
