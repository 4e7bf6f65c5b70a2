"""codec.wire: protocol 3.2 (PostgreSQL 18) next to 3.0.

3.2 changed one thing on the wire: the cancel key in BackendKeyData and CancelRequest
is 4 to 256 bytes instead of an Int32. The golden bytes below were captured from real
PostgreSQL 18.4 and 17.10 (tests/codec/test_wire_protocol32_postgres.py checks the
same against the running servers).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codec.errors import DecodeError, EncodeError
from codec.strategies import wire as ws
from codec.wire import (
    MAX_SECRET_KEY_LENGTH,
    PROTOCOL_3_0,
    PROTOCOL_3_2,
    BackendKeyData,
    BackendMessage,
    BackendReader,
    CancelRequest,
    FrontendReader,
    NegotiateProtocolVersion,
    ReadyForQuery,
    StartupMessage,
    decode_backend,
    decode_startup,
    encode,
)

# PostgreSQL 18.4 to a client asking for 3.2: PID 342, a 32-byte key.
K_18_PROTOCOL_3_2 = bytes.fromhex(
    "4b00000028 00000156 f8accfec37620f2c201457712948f5098f9c7ea1bb522eeb320caa2b4deac0aa"
)
# PostgreSQL 18.4 to a client asking for 3.0: the key is 4 bytes, as in 14-17.
K_18_PROTOCOL_3_0 = bytes.fromhex("4b0000000c 00000155 52019a4f")
# PostgreSQL 18.4 to 3.3 with _pq_.x: it will speak 3.2 and ignores _pq_.x.
V_18_PROTOCOL_3_3 = bytes.fromhex("760000001300030002000000015f70715f2e7800")
# PostgreSQL 17.10 to 3.2: it will speak 3.0 (the whole version number, not a minor).
V_17_PROTOCOL_3_2 = bytes.fromhex("760000000c 00030000 00000000")

GOLDEN: list[tuple[bytes, BackendMessage]] = [
    (
        K_18_PROTOCOL_3_2,
        BackendKeyData(
            342,
            bytes.fromhex("f8accfec37620f2c201457712948f5098f9c7ea1bb522eeb320caa2b4deac0aa"),
        ),
    ),
    (K_18_PROTOCOL_3_0, BackendKeyData(341, 0x52019A4F)),
    (V_18_PROTOCOL_3_3, NegotiateProtocolVersion(PROTOCOL_3_2, ("_pq_.x",))),
    (V_17_PROTOCOL_3_2, NegotiateProtocolVersion(PROTOCOL_3_0, ())),
]


def read_backend(chunks: list[bytes]) -> list[object]:
    reader = BackendReader()
    out: list[object] = []
    for chunk in chunks:
        reader.feed(chunk)
        out.extend(reader)
    return out


@pytest.mark.parametrize(
    ("data", "message"), GOLDEN, ids=["K-18-3.2", "K-18-3.0", "v-18-3.3", "v-17-3.2"]
)
def test_golden_bytes_from_real_servers_round_trip(data: bytes, message: BackendMessage) -> None:
    """Captured bytes decode to the message and encode back byte for byte; the reader
    gets the same fed whole, one byte at a time, and with the next message's head after."""
    assert decode_backend(data[:1], data[5:]) == message
    assert encode(message) == data
    assert read_backend([data]) == [message]
    assert read_backend([data[i : i + 1] for i in range(len(data))]) == [message]
    reader = BackendReader()
    reader.feed(data + encode(ReadyForQuery("I"))[:3])
    assert list(reader) == [message]
    assert reader.buffered == 3


def test_negotiate_protocol_version_carries_the_whole_version_number() -> None:
    """17 sends 00030000 (3.0) and 18 sends 00030002 (3.2), not a bare minor number."""
    v17 = decode_backend(b"v", V_17_PROTOCOL_3_2[5:])
    v18 = decode_backend(b"v", V_18_PROTOCOL_3_3[5:])
    assert isinstance(v17, NegotiateProtocolVersion)
    assert isinstance(v18, NegotiateProtocolVersion)
    assert (v17.major_version, v17.minor_version) == (3, 0)
    assert (v18.major_version, v18.minor_version) == (3, 2)


def test_a_four_byte_key_is_the_int32_it_spells() -> None:
    """Keys of exactly 4 bytes are kept as the signed Int32 (the 3.0 form), so a 3.0
    client's int key and the same 4 bytes make equal, identically encoded messages."""
    as_bytes = BackendKeyData(7, b"\xff\xff\xff\xfe")
    assert as_bytes == BackendKeyData(7, -2)
    assert as_bytes.secret_key == -2
    assert as_bytes.secret_key_bytes == b"\xff\xff\xff\xfe"
    assert CancelRequest(7, b"\0\0\0\x09") == CancelRequest(7, 9)
    assert encode(CancelRequest(7, b"\0\0\0\x09")) == bytes.fromhex(
        "00000010 04d2162e 00000007 00000009"
    )


def test_cancel_request_with_a_32_byte_key() -> None:
    """A 3.2 CancelRequest is 8 + 4 + 32 bytes: length 44, code, PID, key."""
    key = bytes(range(32))
    data = encode(CancelRequest(342, key))
    assert data == bytes.fromhex("0000002c 04d2162e 00000156") + key
    assert decode_startup(data[4:]) == CancelRequest(342, key)
    reader = FrontendReader()
    for i in range(len(data)):
        reader.feed(data[i : i + 1])
    reader.feed(encode(CancelRequest(1, 2)))
    assert list(reader) == [CancelRequest(342, key), CancelRequest(1, 2)]
    assert reader.in_startup_phase


@pytest.mark.parametrize("size", [4, 5, 32, MAX_SECRET_KEY_LENGTH])
def test_every_key_length_from_4_to_256_round_trips(size: int) -> None:
    key = bytes([0xA5]) * size
    for message in (BackendKeyData(1, key), CancelRequest(1, key)):
        assert message.secret_key_bytes == key
        data = encode(message)
        decoded = decode_startup(data[4:]) if isinstance(message, CancelRequest) else None
        if decoded is None:
            decoded = decode_backend(data[:1], data[5:])
        assert decoded == message


@pytest.mark.parametrize("size", [0, 1, 3, MAX_SECRET_KEY_LENGTH + 1])
def test_keys_outside_4_to_256_bytes_do_not_decode(size: int) -> None:
    """BackendKeyData: the key starts at message offset 9 (tag, length, PID);
    CancelRequest: at offset 12 (length, code, PID). The error says how long it was."""
    body = b"\0\0\0\x01" + b"k" * size
    with pytest.raises(DecodeError) as info:
        decode_backend(b"K", body)
    assert (info.value.message_type, info.value.offset) == ("backend BackendKeyData ('K')", 9)
    assert f"found {size}" in info.value.reason

    cancel = bytes.fromhex("04d2162e") + body
    with pytest.raises(DecodeError) as info:
        decode_startup(cancel)
    assert (info.value.message_type, info.value.offset) == ("frontend CancelRequest", 12)

    reader = BackendReader()
    reader.feed(b"K" + (len(body) + 4).to_bytes(4, "big") + body)
    with pytest.raises(DecodeError):
        list(reader)


@pytest.mark.parametrize("size", [0, 3, MAX_SECRET_KEY_LENGTH + 1])
def test_keys_outside_4_to_256_bytes_do_not_encode(size: int) -> None:
    with pytest.raises(EncodeError, match="4 to 256 bytes"):
        encode(BackendKeyData(1, b"k" * size))
    with pytest.raises(EncodeError, match="4 to 256 bytes"):
        encode(CancelRequest(1, b"k" * size))


def test_negotiate_protocol_version_rejects_versions_outside_uint32() -> None:
    with pytest.raises(EncodeError):
        encode(NegotiateProtocolVersion(-1))
    with pytest.raises(EncodeError):
        encode(NegotiateProtocolVersion(1 << 32))


# --- what a server answers to each StartupMessage ------------------------------------

USER = (("user", "postgres"),)

# (requested version, extra parameters, what 17 answers, what 18 answers): observed on
# 17.10 and 18.4 with raw sockets (see the _postgres test module).
ANSWERS = [
    (PROTOCOL_3_0, (), None, None),
    (PROTOCOL_3_0 | 1, (), NegotiateProtocolVersion(PROTOCOL_3_0), None),
    (PROTOCOL_3_2, (), NegotiateProtocolVersion(PROTOCOL_3_0), None),
    (
        PROTOCOL_3_0 | 3,
        (("_pq_.x", "1"),),
        NegotiateProtocolVersion(PROTOCOL_3_0, ("_pq_.x",)),
        NegotiateProtocolVersion(PROTOCOL_3_2, ("_pq_.x",)),
    ),
    (
        PROTOCOL_3_2,
        (("_pq_.x", "1"),),
        NegotiateProtocolVersion(PROTOCOL_3_0, ("_pq_.x",)),
        NegotiateProtocolVersion(PROTOCOL_3_2, ("_pq_.x",)),
    ),
    (
        PROTOCOL_3_0,
        (("_pq_.a", "1"), ("application_name", "x"), ("_pq_.b", "2")),
        NegotiateProtocolVersion(PROTOCOL_3_0, ("_pq_.a", "_pq_.b")),
        NegotiateProtocolVersion(PROTOCOL_3_0, ("_pq_.a", "_pq_.b")),
    ),
    (
        PROTOCOL_3_0 | 0xFFFF,
        (),
        NegotiateProtocolVersion(PROTOCOL_3_0),
        NegotiateProtocolVersion(PROTOCOL_3_2),
    ),
]


@pytest.mark.parametrize(
    ("version", "extra", "answer_17", "answer_18"),
    ANSWERS,
    ids=[f"3.{v & 0xFFFF}-{len(extra)}opts" for v, extra, _, _ in ANSWERS],
)
def test_negotiation_answers_as_17_and_18_do(
    version: int,
    extra: tuple[tuple[str, str], ...],
    answer_17: NegotiateProtocolVersion | None,
    answer_18: NegotiateProtocolVersion | None,
) -> None:
    """NegotiateProtocolVersion.for_startup gives 14-17's answer with latest=3.0 and
    18's with latest=3.2: sent only for a newer minor or a _pq_ option."""
    startup = StartupMessage(USER + extra, version)
    assert NegotiateProtocolVersion.for_startup(startup, PROTOCOL_3_0) == answer_17
    assert NegotiateProtocolVersion.for_startup(startup, PROTOCOL_3_2) == answer_18


def test_protocol_options_keep_order_and_repeats() -> None:
    """The server lists every _pq_ name as it comes, a repeated one twice."""
    startup = StartupMessage((("_pq_.b", ""), ("user", "u"), ("_pq_.a", ""), ("_pq_.b", "")))
    assert startup.protocol_options == ("_pq_.b", "_pq_.a", "_pq_.b")


@given(ws.startup_message(), st.sampled_from((PROTOCOL_3_0, PROTOCOL_3_2)))
def test_a_negotiation_answer_never_offers_more_than_either_side(
    startup: StartupMessage, latest: int
) -> None:
    """The answer names the older of the client's and the server's version, and is sent
    exactly when a _pq_ option or a newer minor came."""
    answer = NegotiateProtocolVersion.for_startup(startup, latest)
    asked_more = startup.minor_version > latest & 0xFFFF
    assert (answer is not None) == (asked_more or bool(startup.protocol_options))
    if answer is not None:
        assert answer.protocol_version == min(startup.protocol_version, latest)
        assert answer.unrecognized_options == startup.protocol_options
        assert decode_backend(b"v", encode(answer)[5:]) == answer


@given(ws.secret_keys())
def test_drawn_keys_survive_both_messages(key: int | bytes) -> None:
    """Every drawn key encodes, and decodes back equal, in BackendKeyData and
    CancelRequest, with the same key bytes in both."""
    k = BackendKeyData(5, key)
    c = CancelRequest(5, key)
    assert decode_backend(b"K", encode(k)[5:]) == k
    assert decode_startup(encode(c)[4:]) == c
    assert k.secret_key_bytes == c.secret_key_bytes
    assert encode(k)[9:] == encode(c)[12:]


@pytest.mark.parametrize("version", [0x00020000, 0x00010005, 0x00040000, 0xFFFF0000])
def test_startup_packets_of_other_majors_are_read_not_refused(version: int) -> None:
    """A server must read a 2.0 or 4.0 startup packet to refuse it as PostgreSQL does
    (0A000), so the reader hands it over with its bytes instead of failing to frame it."""
    from codec.wire import FrontendReader, LegacyErrorResponse, UnsupportedStartupMessage

    packet = UnsupportedStartupMessage(version, b"user\0x\0\0")
    reader = FrontendReader()
    reader.feed(packet.encode())
    assert list(reader) == [packet]
    with pytest.raises(EncodeError):
        UnsupportedStartupMessage(0x00030000).encode()
    legacy = LegacyErrorResponse("FATAL:  unsupported frontend protocol 2.0\n")
    assert LegacyErrorResponse.decode(legacy.encode()) == legacy
    with pytest.raises(DecodeError):
        LegacyErrorResponse.decode(b"E no NUL")
