"""Registries, one-shot decoders and the incremental readers for both directions.

Offsets in every :class:`DecodeError` raised here count from the start of the framed
message: from the type byte for typed messages (so the first body byte is offset 5),
and from the length word for untyped startup packets (so the request code is offset 4).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final, Generic, NoReturn, TypeVar

from codec._buffer import INT32
from codec.errors import DecodeError
from codec.wire._common import (
    TYPED_HEADER_SIZE,
    UNTYPED_HEADER_SIZE,
    CopyData,
    CopyDone,
    shift_error,
)
from codec.wire.backend import (
    BindComplete,
    CloseComplete,
    CommandComplete,
    CopyBothResponse,
    CopyInResponse,
    CopyOutResponse,
    DataRow,
    EmptyQueryResponse,
    FunctionCallResponse,
    NoData,
    NotificationResponse,
    ParameterDescription,
    ParseComplete,
    PortalSuspended,
    RowDescription,
)
from codec.wire.backend_notices import ErrorResponse, NoticeResponse
from codec.wire.backend_startup import (
    AUTHENTICATION_MESSAGES,
    Authentication,
    AuthenticationCleartextPassword,
    AuthenticationGSS,
    AuthenticationGSSContinue,
    AuthenticationKerberosV5,
    AuthenticationMD5Password,
    AuthenticationOk,
    AuthenticationSASL,
    AuthenticationSASLContinue,
    AuthenticationSASLFinal,
    AuthenticationSSPI,
    BackendKeyData,
    GSSENCResponse,
    NegotiateProtocolVersion,
    ParameterStatus,
    ReadyForQuery,
    SSLResponse,
    decode_authentication,
)
from codec.wire.frontend import (
    MAX_STARTUP_PACKET_LENGTH,
    PASSWORD_KINDS,
    Bind,
    Close,
    CopyFail,
    Describe,
    Execute,
    Flush,
    FunctionCall,
    GSSResponse,
    Parse,
    PasswordKind,
    PasswordMessage,
    Query,
    SASLInitialResponse,
    SASLResponse,
    StartupMessage,
    StartupPacket,
    Sync,
    Terminate,
    decode_startup_body,
)

FrontendMessage = (
    StartupPacket
    | PasswordMessage
    | SASLInitialResponse
    | SASLResponse
    | GSSResponse
    | Bind
    | Close
    | CopyData
    | CopyDone
    | CopyFail
    | Describe
    | Execute
    | Flush
    | FunctionCall
    | Parse
    | Query
    | Sync
    | Terminate
)
BackendMessage = (
    Authentication
    | SSLResponse
    | GSSENCResponse
    | BackendKeyData
    | BindComplete
    | CloseComplete
    | CommandComplete
    | CopyBothResponse
    | CopyData
    | CopyDone
    | CopyInResponse
    | CopyOutResponse
    | DataRow
    | EmptyQueryResponse
    | ErrorResponse
    | FunctionCallResponse
    | NegotiateProtocolVersion
    | NoData
    | NoticeResponse
    | NotificationResponse
    | ParameterDescription
    | ParameterStatus
    | ParseComplete
    | PortalSuspended
    | ReadyForQuery
    | RowDescription
)

#: Typed frontend messages with a tag of their own ('p' needs context, see below).
FRONTEND_MESSAGES: Final = (
    Bind,
    Close,
    CopyData,
    CopyDone,
    CopyFail,
    Describe,
    Execute,
    Flush,
    FunctionCall,
    Parse,
    Query,
    Sync,
    Terminate,
)
#: Typed backend messages with a tag of their own ('R' dispatches on a sub-code).
BACKEND_MESSAGES: Final = (
    BackendKeyData,
    BindComplete,
    CloseComplete,
    CommandComplete,
    CopyBothResponse,
    CopyData,
    CopyDone,
    CopyInResponse,
    CopyOutResponse,
    DataRow,
    EmptyQueryResponse,
    ErrorResponse,
    FunctionCallResponse,
    NegotiateProtocolVersion,
    NoData,
    NoticeResponse,
    NotificationResponse,
    ParameterDescription,
    ParameterStatus,
    ParseComplete,
    PortalSuspended,
    ReadyForQuery,
    RowDescription,
)

_FrontendDecoder = Callable[[bytes], FrontendMessage]
_BackendDecoder = Callable[[bytes], BackendMessage]

#: Tag byte -> class, for typed frontend messages except 'p'.
FRONTEND_REGISTRY: Final[dict[bytes, type[FrontendMessage]]] = {
    cls.TAG: cls for cls in FRONTEND_MESSAGES
}
#: Tag byte -> class, for typed backend messages except 'R'.
BACKEND_REGISTRY: Final[dict[bytes, type[BackendMessage]]] = {
    cls.TAG: cls for cls in BACKEND_MESSAGES
}

# Keyed by the tag's integer value: ``buf[pos]`` on a bytearray is an int, and this
# saves building a one-byte bytes object per message on the hot path.
_FRONTEND_DECODERS: Final[dict[int, _FrontendDecoder]] = {
    cls.TAG[0]: cls.decode_body for cls in FRONTEND_MESSAGES
}
_BACKEND_DECODERS: Final[dict[int, _BackendDecoder]] = {
    cls.TAG[0]: cls.decode_body for cls in BACKEND_MESSAGES
}
_BACKEND_DECODERS[ord("R")] = decode_authentication

_FRONTEND_TAGS: Final = frozenset(_FRONTEND_DECODERS) | {ord("p")}
_BACKEND_TAGS: Final = frozenset(_BACKEND_DECODERS)

# Messages whose length word can only have one value: a lie is reported as soon as the
# header arrives instead of after buffering the claimed body.
_FRONTEND_FIXED_LENGTHS: Final = {ord(t): 4 for t in "SHXc"}
# BackendKeyData ('K') is not here: since protocol 3.2 its key is 4 to 256 bytes.
_BACKEND_FIXED_LENGTHS: Final = {
    **{ord(t): 4 for t in "123nsIc"},
    ord("Z"): 5,
}

#: What the server should expect after sending each authentication request.
PASSWORD_KIND_FOR: Final[dict[type[Authentication], PasswordKind]] = {
    AuthenticationCleartextPassword: PasswordMessage,
    AuthenticationMD5Password: PasswordMessage,
    AuthenticationSASL: SASLInitialResponse,
    AuthenticationSASLContinue: SASLResponse,
    AuthenticationKerberosV5: GSSResponse,
    AuthenticationGSS: GSSResponse,
    AuthenticationGSSContinue: GSSResponse,
    AuthenticationSSPI: GSSResponse,
}
assert set(PASSWORD_KIND_FOR) | {AuthenticationOk, AuthenticationSASLFinal} == set(
    AUTHENTICATION_MESSAGES
)

#: PQ_LARGE_MESSAGE_LIMIT in src/include/libpq/libpq.h (MaxAllocSize - 1).
DEFAULT_MAX_MESSAGE_SIZE: Final = 0x3FFFFFFF - 1
#: The postmaster allows MAX_STARTUP_PACKET_LENGTH bytes after the length word.
DEFAULT_MAX_STARTUP_PACKET_SIZE: Final = MAX_STARTUP_PACKET_LENGTH + UNTYPED_HEADER_SIZE
# Compact the buffer once this many consumed bytes sit in front of the unread tail.
_COMPACT_AT: Final = 1 << 16

_unpack_int32 = INT32.unpack_from


def _tag_name(tag: int) -> str:
    return repr(bytes((tag,)))


def decode_startup(body: bytes) -> StartupPacket:
    """Decode an untyped startup packet from its body (the bytes after the length word)."""
    try:
        return decode_startup_body(body)
    except DecodeError as err:
        raise shift_error(err, "frontend", UNTYPED_HEADER_SIZE) from err


def decode_frontend(
    tag: bytes, body: bytes, *, password_kind: PasswordKind = PasswordMessage
) -> FrontendMessage:
    """Decode a typed frontend message from its tag and body.

    'p' means a different message depending on the authentication exchange in
    progress; ``password_kind`` says which (see :meth:`FrontendReader.expect_password`).
    """
    if len(tag) != 1:
        raise DecodeError("frontend message", 0, f"expected a one-byte tag, found {tag!r}")
    decoder: _FrontendDecoder | None = (
        password_kind.decode_body if tag == b"p" else _FRONTEND_DECODERS.get(tag[0])
    )
    if decoder is None:
        raise DecodeError("frontend message", 0, f"unknown frontend tag {tag!r}")
    try:
        return decoder(body)
    except DecodeError as err:
        raise shift_error(err, "frontend", TYPED_HEADER_SIZE) from err


def decode_backend(tag: bytes, body: bytes) -> BackendMessage:
    """Decode a typed backend message from its tag and body."""
    if len(tag) != 1:
        raise DecodeError("backend message", 0, f"expected a one-byte tag, found {tag!r}")
    decoder = _BACKEND_DECODERS.get(tag[0])
    if decoder is None:
        raise DecodeError("backend message", 0, f"unknown backend tag {tag!r}")
    try:
        return decoder(body)
    except DecodeError as err:
        raise shift_error(err, "backend", TYPED_HEADER_SIZE) from err


def encode(message: FrontendMessage | BackendMessage) -> bytes:
    """The whole message as it goes on the wire (framed, or untyped where the protocol says)."""
    return message.encode()


M = TypeVar("M")
T = TypeVar("T")


class _Reader(Generic[M]):
    """Buffering and framing shared by both readers.

    The buffer is a bytearray with a read offset: consuming a message only moves the
    offset, and the consumed prefix is dropped in :meth:`feed` (all of it when
    everything was read, otherwise once it passes 64 KiB), so a long COPY stream costs
    O(n) rather than re-slicing the tail after every message.
    """

    __slots__ = ("_buf", "_error", "_pos", "max_message_size")

    def __init__(self, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        if max_message_size < 4:
            raise ValueError("max_message_size must allow at least the length word (4)")
        #: Largest accepted value of a typed message's length word (which counts itself
        #: but not the type byte); checked as soon as the 5-byte header is buffered.
        self.max_message_size = max_message_size
        self._buf = bytearray()
        self._pos = 0
        self._error: DecodeError | None = None

    @property
    def buffered(self) -> int:
        """Bytes fed but not yet returned as messages (a partial message, or more)."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes; call :meth:`next_message` or iterate to get messages."""
        if self._error is not None:
            raise self._error
        buf = self._buf
        pos = self._pos
        if pos:
            if pos == len(buf):
                buf.clear()
                self._pos = 0
            elif pos >= _COMPACT_AT:
                del buf[:pos]
                self._pos = 0
        buf += data

    def __iter__(self) -> Iterator[M]:
        """Yield every complete message buffered so far; the partial tail stays buffered."""
        next_message = self.next_message
        while (message := next_message()) is not None:
            yield message

    def next_message(self) -> M | None:
        """The next complete message, or None until more bytes are fed.

        Raises :class:`DecodeError` on malformed input. That is fatal: framing is lost,
        just as PostgreSQL drops a connection on a protocol violation, so every later
        call on this reader raises the same error again.
        """
        if self._error is not None:
            raise self._error
        return self._next()

    def _next(self) -> M | None:
        raise NotImplementedError

    def _fail(self, err: DecodeError) -> NoReturn:
        self._error = err
        raise err

    def _typed_frame(
        self, known: frozenset[int], fixed: dict[int, int], direction: str
    ) -> tuple[int, int, int] | None:
        """Locate the next typed message: (tag, body start, body end), or None if partial."""
        buf = self._buf
        pos = self._pos
        if len(buf) - pos < TYPED_HEADER_SIZE:
            if len(buf) > pos and buf[pos] not in known:
                self._fail(DecodeError(f"{direction} message", 0, self._unknown(buf[pos])))
            return None
        tag = buf[pos]
        if tag not in known:
            self._fail(DecodeError(f"{direction} message", 0, self._unknown(tag)))
        (length,) = _unpack_int32(buf, pos + 1)
        expected = fixed.get(tag)
        if expected is not None and length != expected:
            self._fail(
                DecodeError(
                    f"{direction} message {_tag_name(tag)}",
                    1,
                    f"expected length word {expected}, found {length}",
                )
            )
        if length < 4 or length > self.max_message_size:
            self._fail(
                DecodeError(
                    f"{direction} message {_tag_name(tag)}",
                    1,
                    f"expected a length word in [4, {self.max_message_size}], found {length}",
                )
            )
        end = pos + 1 + length
        if len(buf) < end:
            return None
        return tag, pos + TYPED_HEADER_SIZE, end

    def _unknown(self, tag: int) -> str:
        return f"unknown message tag {_tag_name(tag)}"

    def take_run(self, split: Callable[[bytearray, int, int], tuple[list[T], int]]) -> list[T]:
        """A fast path's bulk read: ``split(buffer, start, max_message_size)`` reads a
        run of complete messages from ``buffer[start:]`` (e.g.
        :func:`codec.replication.split_xlog_data`) and says where the run ends; those
        messages are consumed, the rest stays for :meth:`next_message`."""
        if self._error is not None:
            raise self._error
        run, end = split(self._buf, self._pos, self.max_message_size)
        self._pos = end
        return run

    def _take(self, start: int, end: int) -> bytes:
        """Copy out one body (a single copy, via memoryview) and consume the message."""
        with memoryview(self._buf) as view:
            body = view[start:end].tobytes()
        self._pos = end
        return body


class FrontendReader(_Reader[FrontendMessage]):
    """What a server reads: startup packets first, typed messages after StartupMessage.

    SSLRequest, GSSENCRequest and CancelRequest leave the reader in the startup phase
    (after a willing answer the caller switches transports and feeds decrypted bytes).
    Before starting TLS, a server should check :attr:`buffered` is 0, as the postmaster
    does: bytes sent before the handshake were not encrypted (CVE-2021-23214).
    """

    __slots__ = ("_password_kind", "_startup", "max_startup_packet_size")

    def __init__(
        self,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        *,
        max_startup_packet_size: int = DEFAULT_MAX_STARTUP_PACKET_SIZE,
        startup_phase: bool = True,
    ) -> None:
        super().__init__(max_message_size)
        #: Largest accepted length word of an untyped startup packet (counting itself).
        self.max_startup_packet_size = max_startup_packet_size
        self._startup = startup_phase
        self._password_kind: PasswordKind = PasswordMessage

    @property
    def in_startup_phase(self) -> bool:
        """True until a StartupMessage has been read."""
        return self._startup

    @property
    def password_kind(self) -> PasswordKind:
        """The class 'p' messages decode to (see :meth:`expect_password`)."""
        return self._password_kind

    def expect_password(self, kind: PasswordKind) -> None:
        """Say what the next 'p' messages are: the server knows, the bytes do not.

        ``kind`` is one of PasswordMessage (the default), SASLInitialResponse,
        SASLResponse or GSSResponse. The setting sticks until changed, so a server calls
        this each time it sends an authentication request (or uses
        :meth:`expect_password_for`).
        """
        if kind not in PASSWORD_KINDS:
            raise ValueError(
                f"expected one of {[k.__name__ for k in PASSWORD_KINDS]}, got {kind!r}"
            )
        self._password_kind = kind

    def expect_password_for(self, request: Authentication) -> None:
        """Expect the 'p' message that answers this authentication request."""
        kind = PASSWORD_KIND_FOR.get(type(request))
        if kind is not None:
            self._password_kind = kind

    def peek_header(self) -> tuple[int, int | None] | None:
        """The next typed message's tag and length word, without consuming anything:
        ``(tag, None)`` while only the tag has arrived, None while nothing has (or in the
        startup phase). A server reads the type byte first and may refuse a message by its
        type or length before its body arrives, as PostgreSQL does before authentication.
        """
        buf, pos = self._buf, self._pos
        if self._startup or len(buf) <= pos:
            return None
        if len(buf) - pos < TYPED_HEADER_SIZE:
            return buf[pos], None
        return buf[pos], _unpack_int32(buf, pos + 1)[0]

    def _next(self) -> FrontendMessage | None:
        if self._startup:
            return self._next_startup()
        located = self._typed_frame(_FRONTEND_TAGS, _FRONTEND_FIXED_LENGTHS, "frontend")
        if located is None:
            return None
        tag, start, end = located
        body = self._take(start, end)
        if tag == 0x64:  # CopyData: the bulk of a COPY or replication stream
            return CopyData(body)
        try:
            if tag == 0x70:  # 'p'
                return self._password_kind.decode_body(body)
            return _FRONTEND_DECODERS[tag](body)
        except DecodeError as err:
            self._fail(shift_error(err, "frontend", TYPED_HEADER_SIZE))

    def _next_startup(self) -> StartupPacket | None:
        buf = self._buf
        pos = self._pos
        if len(buf) - pos < UNTYPED_HEADER_SIZE:
            return None
        (length,) = _unpack_int32(buf, pos)
        if length < 8 or length > self.max_startup_packet_size:
            reason = (
                f"expected a startup packet length in [8, {self.max_startup_packet_size}], "
                f"found {length}"
            )
            if buf[pos] == 0x16:
                reason += " (this looks like a TLS ClientHello: direct SSL is not supported)"
            self._fail(DecodeError("frontend startup packet", 0, reason))
        end = pos + length
        if len(buf) < end:
            return None
        body = self._take(pos + UNTYPED_HEADER_SIZE, end)
        try:
            packet = decode_startup_body(body)
        except DecodeError as err:
            self._fail(shift_error(err, "frontend", UNTYPED_HEADER_SIZE))
        if isinstance(packet, StartupMessage):
            self._startup = False
        return packet


class BackendReader(_Reader[BackendMessage]):
    """What a client reads: typed messages, plus the one-byte SSL/GSSENC answers.

    Call :meth:`expect_ssl_response` after sending SSLRequest (or
    :meth:`expect_gssenc_response` after GSSENCRequest): the next byte is then read as
    :class:`SSLResponse` / :class:`GSSENCResponse`. An 'E' there is taken as the start of
    an ErrorResponse (the docs allow one in place of the answer).
    """

    __slots__ = ("_answer",)

    def __init__(self, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        super().__init__(max_message_size)
        self._answer = 0

    def expect_ssl_response(self) -> None:
        """Read the next byte as the answer to SSLRequest ('S' or 'N')."""
        self._answer = 0x53

    def expect_gssenc_response(self) -> None:
        """Read the next byte as the answer to GSSENCRequest ('G' or 'N')."""
        self._answer = 0x47

    def _next(self) -> BackendMessage | None:
        if self._answer:
            answer = self._next_answer()
            if answer is not None or self._answer:
                return answer
        located = self._typed_frame(_BACKEND_TAGS, _BACKEND_FIXED_LENGTHS, "backend")
        if located is None:
            return None
        tag, start, end = located
        body = self._take(start, end)
        if tag == 0x64:  # CopyData: the bulk of a COPY or replication stream
            return CopyData(body)
        try:
            return _BACKEND_DECODERS[tag](body)
        except DecodeError as err:
            self._fail(shift_error(err, "backend", TYPED_HEADER_SIZE))

    def _next_answer(self) -> SSLResponse | GSSENCResponse | None:
        buf = self._buf
        pos = self._pos
        if len(buf) == pos:
            return None
        willing_byte = self._answer
        name = "SSLResponse" if willing_byte == 0x53 else "GSSENCResponse"
        byte = buf[pos]
        if byte == 0x45:  # 'E': an ErrorResponse instead of an answer
            self._answer = 0
            return None
        if byte not in (willing_byte, 0x4E):
            self._fail(
                DecodeError(
                    f"backend {name}",
                    0,
                    f"expected {_tag_name(willing_byte)} or b'N', found {_tag_name(byte)}",
                )
            )
        willing = byte == willing_byte
        if willing and len(buf) > pos + 1:
            # Whatever follows a willing answer arrived before the handshake, unencrypted,
            # possibly injected by a man in the middle (CVE-2021-23222; libpq refuses too).
            self._fail(
                DecodeError(
                    f"backend {name}",
                    1,
                    f"expected nothing before the handshake, found {len(buf) - pos - 1} bytes",
                )
            )
        self._answer = 0
        self._pos = pos + 1
        return SSLResponse(willing) if willing_byte == 0x53 else GSSENCResponse(willing)
