"""codec.wire: every protocol 3.0 message both ways, the readers, and the error contract."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from codec import wire
from codec.errors import DecodeError, EncodeError
from codec.strategies import wire as ws
from codec.wire import (
    AuthenticationCleartextPassword,
    AuthenticationMD5Password,
    AuthenticationOk,
    AuthenticationSASL,
    AuthenticationSASLContinue,
    BackendKeyData,
    BackendMessage,
    BackendReader,
    Bind,
    CancelRequest,
    Close,
    CommandComplete,
    CopyBothResponse,
    CopyData,
    CopyDone,
    DataRow,
    Describe,
    ErrorResponse,
    Execute,
    FieldDescription,
    FrontendMessage,
    FrontendReader,
    GSSENCRequest,
    GSSENCResponse,
    GSSResponse,
    NoticeResponse,
    Parse,
    PasswordMessage,
    Query,
    ReadyForQuery,
    RowDescription,
    SASLInitialResponse,
    SASLResponse,
    SSLRequest,
    SSLResponse,
    StartupMessage,
    Sync,
    Terminate,
    decode_backend,
    decode_frontend,
    decode_startup,
    encode,
)

PASSWORD_KINDS = (PasswordMessage, SASLInitialResponse, SASLResponse, GSSResponse)
STARTUP_KINDS = (StartupMessage, SSLRequest, GSSENCRequest, CancelRequest)


def snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and (name[i - 1].islower() or name[i + 1 : i + 2].islower()):
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def decode_one_frontend(message: FrontendMessage) -> FrontendMessage:
    data = encode(message)
    if isinstance(message, STARTUP_KINDS):
        return decode_startup(data[4:])
    kind = type(message) if isinstance(message, PASSWORD_KINDS) else PasswordMessage
    return decode_frontend(data[:1], data[5:], password_kind=kind)


def decode_one_backend(message: BackendMessage) -> BackendMessage:
    data = encode(message)
    if isinstance(message, SSLResponse | GSSENCResponse):
        reader = BackendReader()
        if isinstance(message, SSLResponse):
            reader.expect_ssl_response()
        else:
            reader.expect_gssenc_response()
        reader.feed(data)
        return next(iter(reader))
    return decode_backend(data[:1], data[5:])


def read_all(reader: FrontendReader | BackendReader, chunks: Iterable[bytes]) -> list[object]:
    out: list[object] = []
    for chunk in chunks:
        reader.feed(chunk)
        out.extend(reader)
    return out


def one_byte_at_a_time(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


# --- every class has a strategy ----------------------------------------------------

ALL_CLASSES = sorted(
    {
        *wire.FRONTEND_REGISTRY.values(),
        *wire.BACKEND_REGISTRY.values(),
        *wire.AUTHENTICATION_REGISTRY.values(),
        *STARTUP_KINDS,
        *PASSWORD_KINDS,
        SSLResponse,
        GSSENCResponse,
        FieldDescription,
    },
    key=lambda cls: cls.__name__,
)


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda cls: cls.__name__)
@given(data=st.data())
def test_every_message_class_has_a_strategy_named_after_it(cls: type, data: st.DataObject) -> None:
    """codec.strategies.wire offers one strategy per message class, in snake_case."""
    strategy = getattr(ws, snake(cls.__name__))
    assert isinstance(data.draw(strategy()), cls)


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda cls: cls.__name__)
def test_every_message_class_is_a_frozen_slotted_dataclass(cls: type) -> None:
    assert "__slots__" in cls.__dict__
    assert cls.__dataclass_params__.frozen  # type: ignore[attr-defined]


# --- round trips --------------------------------------------------------------------


@given(ws.frontend_messages())
def test_frontend_round_trip(message: FrontendMessage) -> None:
    """decode(encode(m)) == m for every frontend message."""
    assert decode_one_frontend(message) == message


@given(ws.backend_messages())
def test_backend_round_trip(message: BackendMessage) -> None:
    """decode(encode(m)) == m for every backend message."""
    assert decode_one_backend(message) == message


@given(ws.frontend_messages())
def test_frontend_bytes_round_trip(message: FrontendMessage) -> None:
    """encode(decode(b)) == b: the decoded message is a faithful model of the bytes."""
    data = encode(message)
    assert encode(decode_one_frontend(message)) == data


# --- readers: whole, byte by byte, with a partial tail -------------------------------


def frontend_stream(
    startup: StartupMessage, messages: Sequence[FrontendMessage]
) -> tuple[bytes, list[FrontendMessage]]:
    return encode(startup) + b"".join(encode(m) for m in messages), [startup, *messages]


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    ws.startup_message(),
    st.lists(ws.frontend_messages(startup=False, password=False), max_size=12),
    st.data(),
)
def test_frontend_reader_framing_does_not_depend_on_chunking(
    startup: StartupMessage, messages: list[FrontendMessage], data: st.DataObject
) -> None:
    """Fed whole, one byte at a time, or in random chunks with a trailing partial
    message, the FrontendReader yields the same messages and keeps the partial tail."""
    stream, expected = frontend_stream(startup, messages)
    assert read_all(FrontendReader(), [stream]) == expected
    assert read_all(FrontendReader(), one_byte_at_a_time(stream)) == expected
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    assert read_all(FrontendReader(), pieces) == expected

    tail = encode(Query("select 1"))
    cut = data.draw(st.integers(1, len(tail) - 1))
    reader = FrontendReader()
    assert read_all(reader, [stream + tail[:cut]]) == expected
    assert reader.buffered == cut
    assert read_all(reader, [tail[cut:]]) == [Query("select 1")]
    assert reader.buffered == 0


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ws.backend_messages(typed_only=True), max_size=12), st.data())
def test_backend_reader_framing_does_not_depend_on_chunking(
    messages: list[BackendMessage], data: st.DataObject
) -> None:
    """Same for the BackendReader."""
    stream = b"".join(encode(m) for m in messages)
    assert read_all(BackendReader(), [stream]) == messages
    assert read_all(BackendReader(), one_byte_at_a_time(stream)) == messages
    tail = encode(ReadyForQuery("T"))
    cut = data.draw(st.integers(1, len(tail) - 1))
    reader = BackendReader()
    assert read_all(reader, [stream + tail[:cut]]) == messages
    assert reader.buffered == cut
    assert read_all(reader, [tail[cut:]]) == [ReadyForQuery("T")]


def test_frontend_reader_stays_in_startup_phase_after_ssl_and_gssenc_requests() -> None:
    """SSLRequest and GSSENCRequest are followed by another startup packet; only the
    StartupMessage switches the reader to typed messages."""
    startup = StartupMessage((("user", "alice"), ("database", "db")))
    stream = b"".join(
        encode(m) for m in (GSSENCRequest(), SSLRequest(), startup, Query("select 1"), Sync())
    )
    reader = FrontendReader()
    assert reader.in_startup_phase
    got = read_all(reader, one_byte_at_a_time(stream))
    assert got == [GSSENCRequest(), SSLRequest(), startup, Query("select 1"), Sync()]
    assert not reader.in_startup_phase


def test_cancel_request_is_decoded_in_the_startup_phase() -> None:
    reader = FrontendReader()
    reader.feed(encode(CancelRequest(1234, -5678)))
    assert list(reader) == [CancelRequest(1234, -5678)]
    assert reader.in_startup_phase


# --- known bytes from the protocol documentation -------------------------------------

DOC_VECTORS: list[tuple[object, bytes]] = [
    (SSLRequest(), bytes.fromhex("00000008 04d2162f")),
    (GSSENCRequest(), bytes.fromhex("00000008 04d21630")),
    (CancelRequest(7, 9), bytes.fromhex("00000010 04d2162e 00000007 00000009")),
    (
        StartupMessage((("user", "u"),)),
        bytes.fromhex("00000010 00030000") + b"user\0u\0\0",
    ),
    (Sync(), b"S\0\0\0\x04"),
    (Terminate(), b"X\0\0\0\x04"),
    (Query("select 1"), b"Q\0\0\0\x0dselect 1\0"),
    (Execute("", 0), b"E\0\0\0\x09\0\0\0\0\0"),
    (Describe("P", ""), b"D\0\0\0\x06P\0"),
    (Close("S", "s1"), b"C\0\0\0\x08Ss1\0"),
    (
        Bind("", "", (1,), (b"\x00\x07", None), ()),
        b"B\0\0\0\x18\0\0\0\x01\0\x01\0\x02\0\0\0\x02\x00\x07\xff\xff\xff\xff\0\0",
    ),
    (Parse("", "select $1", (23,)), b"P\0\0\0\x15\0select $1\0\0\x01\0\0\0\x17"),
    (AuthenticationOk(), b"R\0\0\0\x08\0\0\0\0"),
    (AuthenticationCleartextPassword(), b"R\0\0\0\x08\0\0\0\x03"),
    (AuthenticationMD5Password(b"\x01\x02\x03\x04"), b"R\0\0\0\x0c\0\0\0\x05\x01\x02\x03\x04"),
    (AuthenticationSASL(("SCRAM-SHA-256",)), b"R\0\0\0\x17\0\0\0\x0aSCRAM-SHA-256\0\0"),
    (ReadyForQuery("I"), b"Z\0\0\0\x05I"),
    (BackendKeyData(42, -1), b"K\0\0\0\x0c\0\0\0\x2a\xff\xff\xff\xff"),
    (DataRow((b"1", None)), b"D\0\0\0\x0f\0\x02\0\0\0\x011\xff\xff\xff\xff"),
    (CommandComplete("SELECT 1"), b"C\0\0\0\x0dSELECT 1\0"),
    (CopyBothResponse(0, ()), b"W\0\0\0\x07\0\0\0"),
    (CopyData(b"abc"), b"d\0\0\0\x07abc"),
    (CopyDone(), b"c\0\0\0\x04"),
    (SSLResponse(True), b"S"),
    (SSLResponse(False), b"N"),
    (GSSENCResponse(True), b"G"),
]


@pytest.mark.parametrize(("message", "data"), DOC_VECTORS, ids=lambda v: type(v).__name__)
def test_known_bytes(message: FrontendMessage | BackendMessage, data: bytes) -> None:
    """Each message encodes to the bytes the protocol docs describe, and back."""
    assert encode(message) == data
    if isinstance(message, SSLResponse | GSSENCResponse):
        assert decode_one_backend(message) == message
    elif (
        isinstance(
            message, StartupMessage | SSLRequest | GSSENCRequest | CancelRequest | Query | Sync
        )
        or type(message) in wire.FRONTEND_REGISTRY.values()
    ):
        reader = FrontendReader(startup_phase=isinstance(message, STARTUP_KINDS))
        reader.feed(data)
        assert list(reader) == [message]
    else:
        reader_b = BackendReader()
        reader_b.feed(data)
        assert list(reader_b) == [message]


# --- 'p' needs context ---------------------------------------------------------------


def test_password_kind_is_chosen_by_the_server() -> None:
    """'p' decodes as PasswordMessage by default; expect_password / expect_password_for
    switch it to the SASL or GSS responses, and the setting sticks until changed."""
    reader = FrontendReader(startup_phase=False)
    body = SASLInitialResponse("SCRAM-SHA-256", b"n,,n=,r=abc").encode()
    reader.expect_password_for(AuthenticationSASL(("SCRAM-SHA-256",)))
    reader.feed(body)
    assert list(reader) == [SASLInitialResponse("SCRAM-SHA-256", b"n,,n=,r=abc")]
    reader.expect_password_for(AuthenticationSASLContinue(b"r=abc"))
    reader.feed(SASLResponse(b"c=biws").encode() * 2)
    assert list(reader) == [SASLResponse(b"c=biws")] * 2
    reader.expect_password(PasswordMessage)
    reader.feed(PasswordMessage("md5abc").encode())
    assert list(reader) == [PasswordMessage("md5abc")]
    with pytest.raises(ValueError, match="expected one of"):
        reader.expect_password(Query)  # type: ignore[arg-type]


def test_sasl_initial_response_without_data_has_length_minus_one() -> None:
    data = encode(SASLInitialResponse("SCRAM-SHA-256", None))
    assert data.endswith(b"SCRAM-SHA-256\0\xff\xff\xff\xff")
    assert decode_frontend(b"p", data[5:], password_kind=SASLInitialResponse) == (
        SASLInitialResponse("SCRAM-SHA-256", None)
    )


# --- SSL / GSSENC answers --------------------------------------------------------------


def test_ssl_answer_is_read_only_when_expected_then_typed_messages_follow() -> None:
    """After expect_ssl_response the next byte is the answer; then framing resumes."""
    reader = BackendReader()
    reader.expect_ssl_response()
    got = read_all(reader, one_byte_at_a_time(b"N" + encode(AuthenticationOk())))
    assert got == [SSLResponse(False), AuthenticationOk()]


def test_gssenc_answer() -> None:
    reader = BackendReader()
    reader.expect_gssenc_response()
    reader.feed(b"G")
    assert list(reader) == [GSSENCResponse(True)]


def test_bytes_after_a_willing_ssl_answer_are_refused() -> None:
    """Data behind 'S' came before the TLS handshake, unencrypted (CVE-2021-23222)."""
    reader = BackendReader()
    reader.expect_ssl_response()
    reader.feed(b"S" + encode(AuthenticationOk()))
    with pytest.raises(DecodeError, match="before the handshake"):
        list(reader)


def test_error_response_in_place_of_the_ssl_answer_is_decoded() -> None:
    """The docs allow an ErrorResponse instead of 'S'/'N' (from a very old server)."""
    error = ErrorResponse.build("FATAL", "08P01", "unsupported frontend protocol")
    reader = BackendReader()
    reader.expect_ssl_response()
    reader.feed(encode(error))
    assert list(reader) == [error]


def test_unexpected_ssl_answer_byte() -> None:
    reader = BackendReader()
    reader.expect_ssl_response()
    reader.feed(b"G")
    with pytest.raises(DecodeError) as info:
        list(reader)
    assert info.value.message_type == "backend SSLResponse"


# --- ErrorResponse / NoticeResponse ---------------------------------------------------


def test_error_response_build_matches_postgresql_field_order() -> None:
    """build() writes the fields in elog.c's order, 'V' defaulting to the severity."""
    error = ErrorResponse.build(
        "ERROR",
        "42P01",
        'relation "nonexistent" does not exist',
        position=15,
        file="parse_relation.c",
        line=1392,
        routine="parserOpenTable",
    )
    assert [code for code, _ in error.fields] == ["S", "V", "C", "M", "P", "F", "L", "R"]
    assert error.severity == error.severity_nonlocalized == "ERROR"
    assert error.sqlstate == "42P01"
    assert error.position == "15"
    assert error.line == "1392"
    assert error.detail is None
    notice: object = NoticeResponse(error.fields)
    assert notice != error


def test_unknown_error_fields_round_trip() -> None:
    """The docs say clients must ignore unknown field codes; the codec keeps them."""
    error = ErrorResponse((("S", "ERROR"), ("Z", "future"), ("\xe9", "x")))
    assert decode_one_backend(error) == error
    assert error.get("Z") == "future"


# --- encoding validates ----------------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        Query("nul\0inside"),
        StartupMessage((("", "x"),)),
        StartupMessage(protocol_version=80877103),
        CancelRequest(1 << 31, 0),
        BackendKeyData(0, -(1 << 31) - 1),
        Execute("", 1 << 31),
        Parse("", "", (-1,)),
        Bind("", "", (1 << 15,)),
        Bind("", "", (), (None,) * 65536),
        Describe("X", ""),  # type: ignore[arg-type]
        Close("", ""),  # type: ignore[arg-type]
        ReadyForQuery("X"),  # type: ignore[arg-type]
        AuthenticationMD5Password(b"abc"),
        AuthenticationSASL(("",)),
        ErrorResponse((("", "x"),)),
        ErrorResponse((("\0", "x"),)),
        CopyBothResponse(128, ()),
        RowDescription((FieldDescription("a", table_oid=-1),)),
    ],
    ids=repr,
)
def test_encode_rejects_values_the_wire_cannot_carry(
    message: FrontendMessage | BackendMessage,
) -> None:
    with pytest.raises(EncodeError):
        encode(message)


# --- the decoder contract: DecodeError and nothing else ---------------------------------

FRONTEND_TAGS = [*sorted(wire.FRONTEND_REGISTRY), b"p"]
BACKEND_TAGS = [*sorted(wire.BACKEND_REGISTRY), b"R"]


@given(st.sampled_from(FRONTEND_TAGS), st.binary(max_size=64), st.sampled_from(PASSWORD_KINDS))
@example(b"B", b"\0\0\xff\xff", PasswordMessage)
@example(b"D", b"P\xff\0", PasswordMessage)
def test_decode_frontend_random_bodies_raise_only_decode_error(
    tag: bytes, body: bytes, kind: type[PasswordMessage]
) -> None:
    try:
        message = decode_frontend(tag, body, password_kind=kind)
    except DecodeError as err:
        assert err.offset >= 0
    else:
        assert encode(message)[5:] == body


@given(st.sampled_from(BACKEND_TAGS), st.binary(max_size=64))
@example(b"D", b"\0\x01\x7f\xff\xff\xff")
@example(b"T", b"\xff\xff")
@example(b"R", b"\0\0\0\x0a\xc3")
def test_decode_backend_random_bodies_raise_only_decode_error(tag: bytes, body: bytes) -> None:
    try:
        message = decode_backend(tag, body)
    except DecodeError as err:
        assert err.offset >= 0
    else:
        assert encode(message)[5:] == body


@given(st.binary(max_size=64))
def test_decode_startup_random_bodies_raise_only_decode_error(body: bytes) -> None:
    try:
        packet = decode_startup(body)
    except DecodeError:
        pass
    else:
        assert encode(packet)[4:] == body


def feed_and_drain(reader: FrontendReader | BackendReader, data: bytes) -> None:
    try:
        read_all(reader, [data[: len(data) // 2], data[len(data) // 2 :]])
    except DecodeError:
        # Fatal: the reader keeps raising the same error.
        with pytest.raises(DecodeError):
            reader.next_message()
        with pytest.raises(DecodeError):
            reader.feed(b"x")


@given(st.binary(max_size=200), st.booleans())
def test_random_bytes_into_readers_raise_only_decode_error(data: bytes, startup: bool) -> None:
    feed_and_drain(FrontendReader(startup_phase=startup), data)
    feed_and_drain(BackendReader(), data)


def mutate(data: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    buf = bytearray(data)
    for kind, where, value in edits:
        if not buf:
            break
        i = where % len(buf)
        if kind == 0:
            buf[i] = value
        elif kind == 1:
            del buf[i]
        else:
            buf.insert(i, value)
    return bytes(buf)


EDITS = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 1 << 16), st.integers(0, 255)),
    min_size=1,
    max_size=4,
)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    ws.startup_message(),
    st.lists(ws.frontend_messages(startup=False), max_size=6),
    EDITS,
)
def test_mutated_frontend_streams_raise_only_decode_error(
    startup: StartupMessage, messages: list[FrontendMessage], edits: list[tuple[int, int, int]]
) -> None:
    stream, _ = frontend_stream(startup, messages)
    feed_and_drain(FrontendReader(), mutate(stream, edits))


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ws.backend_messages(typed_only=True), min_size=1, max_size=6), EDITS)
def test_mutated_backend_streams_raise_only_decode_error(
    messages: list[BackendMessage], edits: list[tuple[int, int, int]]
) -> None:
    stream = b"".join(encode(m) for m in messages)
    feed_and_drain(BackendReader(), mutate(stream, edits))


# --- sizes and offsets ------------------------------------------------------------------


@pytest.mark.parametrize("reader_cls", [FrontendReader, BackendReader])
def test_length_word_above_the_maximum_fails_from_the_header_alone(
    reader_cls: type[FrontendReader] | type[BackendReader],
) -> None:
    """The limit is checked on the 5-byte header, before the body is buffered."""
    reader = reader_cls(max_message_size=1000)
    if isinstance(reader, FrontendReader):
        reader.feed(encode(StartupMessage((("user", "u"),))))
        assert len(list(reader)) == 1
    reader.feed(b"d\x7f\xff\xff\xff")
    with pytest.raises(DecodeError) as info:
        reader.next_message()
    assert info.value.offset == 1
    assert "2147483647" in info.value.reason
    assert reader.buffered == 5


def test_startup_packet_length_is_bounded_like_the_postmaster() -> None:
    """MAX_STARTUP_PACKET_LENGTH (10000 bytes after the length word) applies."""
    reader = FrontendReader()
    reader.feed((10005).to_bytes(4, "big"))
    with pytest.raises(DecodeError, match=r"\[8, 10004\]"):
        list(reader)


def test_direct_tls_hello_gets_a_clear_error() -> None:
    reader = FrontendReader()
    reader.feed(bytes.fromhex("16030100a5010000a10303"))
    with pytest.raises(DecodeError, match="TLS ClientHello"):
        list(reader)


@pytest.mark.parametrize(
    ("data", "message_type", "offset"),
    [
        # DataRow: 1 column, length 100, only 1 byte: body offset 6 -> message offset 11.
        (b"D\0\0\0\x0b\0\x01\0\0\0\x64x", "backend DataRow ('D')", 11),
        # ReadyForQuery with status 'X' at body offset 0 -> message offset 5.
        (b"Z\0\0\0\x05X", "backend ReadyForQuery ('Z')", 5),
        # Fixed-size message with a wrong length word: reported at the length word.
        (b"Z\0\0\0\x06XX", "backend message b'Z'", 1),
        # Unknown tag.
        (b"?\0\0\0\x04", "backend message", 0),
    ],
)
def test_decode_errors_name_the_message_and_count_offsets_from_the_type_byte(
    data: bytes, message_type: str, offset: int
) -> None:
    reader = BackendReader()
    reader.feed(data)
    with pytest.raises(DecodeError) as info:
        list(reader)
    assert (info.value.message_type, info.value.offset) == (message_type, offset)


def test_startup_offsets_count_from_the_length_word() -> None:
    """Untyped packets have no type byte: offset 4 is the protocol version, 8 the first
    parameter name (here without its NUL)."""
    reader = FrontendReader()
    reader.feed(b"\0\0\0\x09\0\x03\0\0x")
    with pytest.raises(DecodeError) as info:
        list(reader)
    assert info.value.offset == 8
    assert "parameter name" in info.value.reason


# --- volume ---------------------------------------------------------------------------


@pytest.mark.parametrize("reader_cls", [FrontendReader, BackendReader])
def test_large_copy_streams_are_read_in_linear_time(
    reader_cls: type[FrontendReader] | type[BackendReader],
) -> None:
    """100k CopyData messages fed in 64 KiB chunks: the cost per byte stays flat."""

    def run(count: int) -> float:
        one = encode(CopyData(b"x" * 90))
        stream = one * count
        reader = reader_cls(startup_phase=False) if reader_cls is FrontendReader else reader_cls()
        start = time.perf_counter()
        seen = 0
        for i in range(0, len(stream), 1 << 16):
            reader.feed(stream[i : i + (1 << 16)])
            for _ in reader:
                seen += 1
        assert seen == count
        return time.perf_counter() - start

    small, large = run(10_000), run(100_000)
    # Quadratic re-slicing would make the 10x stream ~100x slower.
    assert large < small * 30 + 0.5
