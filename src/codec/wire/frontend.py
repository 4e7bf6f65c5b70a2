"""Messages a client sends (PostgreSQL docs, "Message Formats", marked (F)).

Startup-phase packets carry no type byte: an int32 length (counting itself) and an
int32 request code or protocol version come first. Everything after the StartupMessage
is typed. ``decode_body`` takes the body after the framing; for untyped packets that
body starts with the request code (see :mod:`codec.wire._common` for offsets).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar, Final, Literal, Self

from codec._buffer import (
    INT16,
    INT32,
    INT32_MAX,
    UINT16,
    UINT32,
    UINT32_MAX,
    check_range,
    cstring,
    need,
    read_cstring,
    trailing,
)
from codec.errors import DecodeError, EncodeError
from codec.wire._common import (
    SecretKey,
    array_struct,
    empty_body,
    frame,
    frame_untyped,
    normalize_secret_key,
    pack_int16_array,
    pack_uint16_count,
    pack_values,
    secret_key_bytes,
    unpack_int16_array,
    unpack_secret_key,
    unpack_values,
)

# Request codes from src/include/libpq/pqcomm.h: a "protocol version" of 1234.5678-5680
# that no real protocol will ever use.
CANCEL_REQUEST_CODE: Final = (1234 << 16) | 5678
NEGOTIATE_SSL_CODE: Final = (1234 << 16) | 5679
NEGOTIATE_GSS_CODE: Final = (1234 << 16) | 5680
#: Protocol 3.0, what PostgreSQL 14-17 speak (and libpq asks for by default).
PROTOCOL_3_0: Final = 3 << 16
#: Protocol 3.2, the newest PostgreSQL 18 speaks: longer cancel keys. 3.1 was skipped
#: (old pgbouncers wrongly claimed it); 18 treats a 3.1 request as 3.0 with no answer.
PROTOCOL_3_2: Final = (3 << 16) | 2
#: Names starting with this in a StartupMessage are protocol options, not settings.
PROTOCOL_OPTION_PREFIX: Final = "_pq_."
#: MAX_STARTUP_PACKET_LENGTH in pqcomm.h; the postmaster rejects longer startup packets.
MAX_STARTUP_PACKET_LENGTH: Final = 10000
#: PG_MAX_AUTH_TOKEN_LENGTH in auth.h: the largest length word (counting itself) of a
#: password or SASL message; before authentication nothing longer is read.
PG_MAX_AUTH_TOKEN_LENGTH: Final = 65535

_CODE_AND_PID: Final = struct.Struct("!Ii")

Target = Literal["S", "P"]
_TARGETS: Final[dict[int, Target]] = {ord("S"): "S", ord("P"): "P"}


def _pack_target(target: str, what: str) -> bytes:
    if target not in ("S", "P"):
        raise EncodeError(f"{what} must be 'S' (statement) or 'P' (portal), got {target!r}")
    return target.encode()


def _read_target(body: bytes, mt: str) -> Target:
    need(body, 0, 1, mt, "'S' or 'P'")
    target = _TARGETS.get(body[0])
    if target is None:
        raise DecodeError(mt, 0, f"expected 'S' (statement) or 'P' (portal), found {body[:1]!r}")
    return target


# --- startup phase (untyped) --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartupMessage:
    """The first packet of a normal connection: protocol version and parameters.

    ``parameters`` keeps the client's order (and duplicates), as pairs of name and
    value; ``user`` is required by the server but not by the codec.
    """

    parameters: tuple[tuple[str, str], ...] = ()
    protocol_version: int = PROTOCOL_3_0

    @property
    def major_version(self) -> int:
        return self.protocol_version >> 16

    @property
    def minor_version(self) -> int:
        return self.protocol_version & 0xFFFF

    @property
    def protocol_options(self) -> tuple[str, ...]:
        """The ``_pq_.`` parameter names, in order, repeats kept (as the server lists them)."""
        return tuple(name for name, _ in self.parameters if name.startswith(PROTOCOL_OPTION_PREFIX))

    def get(self, name: str, default: str | None = None) -> str | None:
        """The value of the first parameter called ``name``."""
        for key, value in self.parameters:
            if key == name:
                return value
        return default

    def encode(self) -> bytes:
        check_range(self.protocol_version, 0, UINT32_MAX, "protocol_version")
        if self.protocol_version in (CANCEL_REQUEST_CODE, NEGOTIATE_SSL_CODE, NEGOTIATE_GSS_CODE):
            raise EncodeError(f"protocol_version {self.protocol_version} is a special request code")
        out = [UINT32.pack(self.protocol_version)]
        for name, value in self.parameters:
            if not name:
                # An empty name is the list terminator on the wire.
                raise EncodeError("startup parameter names must not be empty")
            out.append(cstring(name, "startup parameter name"))
            out.append(cstring(value, f"startup parameter {name!r}"))
        out.append(b"\0")
        return frame_untyped(b"".join(out))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = "StartupMessage"
        need(body, 0, 4, mt, "protocol version")
        (version,) = UINT32.unpack_from(body, 0)
        if version >> 16 != 3:
            # Protocol 2.0 used a fixed-size layout; only 3.x has name/value pairs.
            raise DecodeError(
                mt, 0, f"expected protocol 3.x, found {version >> 16}.{version & 0xFFFF}"
            )
        pos = 4
        params: list[tuple[str, str]] = []
        while True:
            need(body, pos, 1, mt, "parameter name or terminator")
            if body[pos] == 0:
                pos += 1
                break
            name, pos = read_cstring(body, pos, mt, "parameter name")
            value, pos = read_cstring(body, pos, mt, f"value of parameter {name!r}")
            params.append((name, value))
        trailing(body, pos, mt)
        return cls(tuple(params), version)


@dataclass(frozen=True, slots=True)
class SSLRequest:
    """Ask the server for TLS; it answers with one byte (see ``SSLResponse``)."""

    CODE: ClassVar[int] = NEGOTIATE_SSL_CODE

    def encode(self) -> bytes:
        return _SSL_REQUEST

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        trailing(body, 4, "SSLRequest")
        return cls()


@dataclass(frozen=True, slots=True)
class GSSENCRequest:
    """Ask the server for GSSAPI encryption; it answers 'G' or 'N'."""

    CODE: ClassVar[int] = NEGOTIATE_GSS_CODE

    def encode(self) -> bytes:
        return _GSSENC_REQUEST

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        trailing(body, 4, "GSSENCRequest")
        return cls()


@dataclass(frozen=True, slots=True)
class CancelRequest:
    """Sent on a new connection to cancel the query of another backend.

    ``secret_key`` repeats the BackendKeyData key: an ``int`` for a 4-byte key, ``bytes``
    for a longer one (protocol 3.2: the key runs to the end of the packet, 4 to 256
    bytes). PostgreSQL 18 matches length and bytes (``SendCancelRequest``).
    """

    CODE: ClassVar[int] = CANCEL_REQUEST_CODE
    process_id: int
    secret_key: SecretKey

    def __post_init__(self) -> None:
        if not isinstance(self.secret_key, int):
            object.__setattr__(self, "secret_key", normalize_secret_key(self.secret_key))

    @property
    def secret_key_bytes(self) -> bytes:
        """The key as sent."""
        return secret_key_bytes(self.secret_key)

    def encode(self) -> bytes:
        check_range(self.process_id, -(1 << 31), INT32_MAX, "process_id")
        key = secret_key_bytes(self.secret_key)
        return frame_untyped(_CODE_AND_PID.pack(CANCEL_REQUEST_CODE, self.process_id) + key)

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = "CancelRequest"
        need(body, 4, 4, mt, "process ID")
        (process_id,) = INT32.unpack_from(body, 4)
        return cls(process_id, unpack_secret_key(body, 8, mt))


@dataclass(frozen=True, slots=True)
class UnsupportedStartupMessage:
    """A startup packet asking for a protocol major other than 3. PostgreSQL reads only
    its version (``ProcessStartupPacket``) and refuses it; the rest is kept as sent."""

    protocol_version: int
    payload: bytes = b""

    @property
    def major_version(self) -> int:
        return self.protocol_version >> 16

    @property
    def minor_version(self) -> int:
        return self.protocol_version & 0xFFFF

    def encode(self) -> bytes:
        check_range(self.protocol_version, 0, UINT32_MAX, "protocol_version")
        if self.major_version == 3 or self.protocol_version in STARTUP_REGISTRY:
            raise EncodeError(f"protocol_version {self.protocol_version:#x} is not unsupported")
        return frame_untyped(UINT32.pack(self.protocol_version) + self.payload)

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        need(body, 0, 4, "UnsupportedStartupMessage", "protocol version")
        (version,) = UINT32.unpack_from(body, 0)
        return cls(version, bytes(body[4:]))


_SSL_REQUEST: Final = frame_untyped(UINT32.pack(NEGOTIATE_SSL_CODE))
_GSSENC_REQUEST: Final = frame_untyped(UINT32.pack(NEGOTIATE_GSS_CODE))

StartupPacket = (
    StartupMessage | UnsupportedStartupMessage | SSLRequest | GSSENCRequest | CancelRequest
)
STARTUP_PACKETS: Final = (SSLRequest, GSSENCRequest, CancelRequest)
#: Special request codes to classes; any other code is a protocol version (StartupMessage).
STARTUP_REGISTRY: Final[dict[int, type[SSLRequest | GSSENCRequest | CancelRequest]]] = {
    cls.CODE: cls for cls in STARTUP_PACKETS
}


def decode_startup_body(body: bytes) -> StartupPacket:
    """Decode an untyped startup packet body (request code onwards), offsets from the code."""
    need(body, 0, 4, "startup packet", "request code or protocol version")
    (code,) = UINT32.unpack_from(body, 0)
    cls = STARTUP_REGISTRY.get(code)
    if cls is not None:
        return cls.decode_body(body)
    if code >> 16 != 3:
        return UnsupportedStartupMessage.decode_body(body)
    return StartupMessage.decode_body(body)


# --- authentication responses: all 'p', told apart by context -------------------------


@dataclass(frozen=True, slots=True)
class PasswordMessage:
    """'p': a cleartext or MD5-hashed ("md5" + hex) password."""

    TAG: ClassVar[bytes] = b"p"
    #: PostgreSQL compares the bytes as sent, in whatever encoding the client used; bytes
    #: that are not UTF-8 are kept as lone surrogates (``surrogateescape``), so a Latin-1
    #: password fails authentication (28P01) as on the server instead of framing (08P01).
    password: str

    def encode(self) -> bytes:
        try:
            data = self.password.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as err:
            raise EncodeError(f"password is not encodable: {err.reason}") from None
        if b"\0" in data:
            raise EncodeError(f"password must not contain a NUL character: {self.password!r}")
        return frame(b"p", data + b"\0")

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = "PasswordMessage ('p')"
        end = body.find(b"\0")
        if end < 0:
            raise DecodeError(mt, 0, "expected a NUL-terminated password, found no NUL")
        trailing(body, end + 1, mt)
        return cls(body[:end].decode("utf-8", "surrogateescape"))


@dataclass(frozen=True, slots=True)
class SASLInitialResponse:
    """'p': the chosen SASL mechanism and its initial response (None: length -1)."""

    TAG: ClassVar[bytes] = b"p"
    mechanism: str
    data: bytes | None

    def encode(self) -> bytes:
        head = cstring(self.mechanism, "SASL mechanism")
        if self.data is None:
            return frame(b"p", head + b"\xff\xff\xff\xff")
        if len(self.data) > INT32_MAX:
            raise EncodeError("SASL initial response does not fit an int32 length")
        return frame(b"p", head + INT32.pack(len(self.data)) + bytes(self.data))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = "SASLInitialResponse ('p')"
        mechanism, pos = read_cstring(body, 0, mt, "SASL mechanism name")
        need(body, pos, 4, mt, "length of the initial response")
        (size,) = INT32.unpack_from(body, pos)
        pos += 4
        if size == -1:
            trailing(body, pos, mt)
            return cls(mechanism, None)
        if size < 0:
            raise DecodeError(mt, pos - 4, f"expected -1 or a length >= 0, found {size}")
        need(body, pos, size, mt, "initial response")
        trailing(body, pos + size, mt)
        return cls(mechanism, body[pos : pos + size])


@dataclass(frozen=True, slots=True)
class SASLResponse:
    """'p': SASL mechanism-specific data after the initial response."""

    TAG: ClassVar[bytes] = b"p"
    data: bytes

    def encode(self) -> bytes:
        return frame(b"p", bytes(self.data))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        return cls(body)


@dataclass(frozen=True, slots=True)
class GSSResponse:
    """'p': GSSAPI or SSPI token."""

    TAG: ClassVar[bytes] = b"p"
    data: bytes

    def encode(self) -> bytes:
        return frame(b"p", bytes(self.data))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        return cls(body)


PasswordKind = (
    type[PasswordMessage] | type[SASLInitialResponse] | type[SASLResponse] | type[GSSResponse]
)
PASSWORD_KINDS: Final = (PasswordMessage, SASLInitialResponse, SASLResponse, GSSResponse)


# --- typed messages ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Query:
    """'Q': a simple query (one or more SQL statements)."""

    TAG: ClassVar[bytes] = b"Q"
    query: str

    def encode(self) -> bytes:
        return frame(b"Q", cstring(self.query, "query"))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = "Query ('Q')"
        query, pos = read_cstring(body, 0, mt, "query string")
        trailing(body, pos, mt)
        return cls(query)


@dataclass(frozen=True, slots=True)
class Parse:
    """'P': create a prepared statement; type OID 0 leaves a parameter unspecified."""

    TAG: ClassVar[bytes] = b"P"
    statement: str
    query: str
    parameter_type_oids: tuple[int, ...] = ()

    def encode(self) -> bytes:
        out = [
            cstring(self.statement, "statement name"),
            cstring(self.query, "query"),
            pack_uint16_count(len(self.parameter_type_oids), "parameter types"),
        ]
        for oid in self.parameter_type_oids:
            check_range(oid, 0, UINT32_MAX, "parameter type OID")
            out.append(UINT32.pack(oid))
        return frame(b"P", b"".join(out))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = "Parse ('P')"
        statement, pos = read_cstring(body, 0, mt, "statement name")
        query, pos = read_cstring(body, pos, mt, "query string")
        need(body, pos, 2, mt, "number of parameter types")
        (count,) = UINT16.unpack_from(body, pos)
        pos += 2
        need(body, pos, 4 * count, mt, f"{count} parameter type OIDs")
        oids: tuple[int, ...] = array_struct("I", count).unpack_from(body, pos)
        trailing(body, pos + 4 * count, mt)
        return cls(statement, query, oids)


@dataclass(frozen=True, slots=True)
class Bind:
    """'B': bind parameters (None is SQL NULL) to a statement, creating a portal."""

    TAG: ClassVar[bytes] = b"B"
    portal: str
    statement: str
    parameter_format_codes: tuple[int, ...] = ()
    parameters: tuple[bytes | None, ...] = ()
    result_format_codes: tuple[int, ...] = ()

    def encode(self) -> bytes:
        return frame(
            b"B",
            b"".join(
                (
                    cstring(self.portal, "portal name"),
                    cstring(self.statement, "statement name"),
                    pack_int16_array(self.parameter_format_codes, "parameter format codes"),
                    pack_values(self.parameters, "parameters"),
                    pack_int16_array(self.result_format_codes, "result format codes"),
                )
            ),
        )

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = "Bind ('B')"
        portal, pos = read_cstring(body, 0, mt, "portal name")
        statement, pos = read_cstring(body, pos, mt, "statement name")
        param_formats, pos = unpack_int16_array(body, pos, mt, "parameter format codes")
        params, pos = unpack_values(body, pos, mt, "parameter")
        result_formats, pos = unpack_int16_array(body, pos, mt, "result format codes")
        trailing(body, pos, mt)
        return cls(portal, statement, param_formats, params, result_formats)


class _TargetAndName:
    """Describe and Close share one layout: 'S' (statement) or 'P' (portal), then a name."""

    __slots__ = ()
    TAG: ClassVar[bytes]
    target: Target
    name: str

    # Declared so decode_body may call cls(target, name); each subclass is a dataclass
    # whose generated __init__ replaces this one.
    def __init__(self, target: Target, name: str) -> None:  # pragma: no cover
        raise NotImplementedError

    def encode(self) -> bytes:
        return frame(self.TAG, _pack_target(self.target, "target") + cstring(self.name, "name"))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = f"{cls.__name__} ({cls.TAG.decode()!r})"
        target = _read_target(body, mt)
        name, pos = read_cstring(body, 1, mt, "statement or portal name")
        trailing(body, pos, mt)
        return cls(target, name)


@dataclass(frozen=True, slots=True)
class Describe(_TargetAndName):
    """'D': describe a prepared statement ('S') or a portal ('P')."""

    TAG: ClassVar[bytes] = b"D"
    target: Target
    name: str


@dataclass(frozen=True, slots=True)
class Execute:
    """'E': run a portal; ``max_rows`` 0 means no limit."""

    TAG: ClassVar[bytes] = b"E"
    portal: str
    max_rows: int = 0

    def encode(self) -> bytes:
        check_range(self.max_rows, -(1 << 31), INT32_MAX, "max_rows")
        return frame(b"E", cstring(self.portal, "portal name") + INT32.pack(self.max_rows))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = "Execute ('E')"
        portal, pos = read_cstring(body, 0, mt, "portal name")
        need(body, pos, 4, mt, "maximum number of rows")
        (max_rows,) = INT32.unpack_from(body, pos)
        trailing(body, pos + 4, mt)
        return cls(portal, max_rows)


@dataclass(frozen=True, slots=True)
class Close(_TargetAndName):
    """'C': close a prepared statement ('S') or a portal ('P')."""

    TAG: ClassVar[bytes] = b"C"
    target: Target
    name: str


@dataclass(frozen=True, slots=True)
class Sync:
    """'S': end of an extended-query batch; the server answers ReadyForQuery."""

    TAG: ClassVar[bytes] = b"S"

    def encode(self) -> bytes:
        return _SYNC

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        empty_body(body, "Sync ('S')")
        return cls()


@dataclass(frozen=True, slots=True)
class Flush:
    """'H': ask the server to send what it has buffered."""

    TAG: ClassVar[bytes] = b"H"

    def encode(self) -> bytes:
        return _FLUSH

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        empty_body(body, "Flush ('H')")
        return cls()


@dataclass(frozen=True, slots=True)
class Terminate:
    """'X': the client is closing the connection."""

    TAG: ClassVar[bytes] = b"X"

    def encode(self) -> bytes:
        return _TERMINATE

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        empty_body(body, "Terminate ('X')")
        return cls()


@dataclass(frozen=True, slots=True)
class CopyFail:
    """'f': abort COPY FROM STDIN with an error message."""

    TAG: ClassVar[bytes] = b"f"
    message: str

    def encode(self) -> bytes:
        return frame(b"f", cstring(self.message, "error message"))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = "CopyFail ('f')"
        message, pos = read_cstring(body, 0, mt, "error message")
        trailing(body, pos, mt)
        return cls(message)


@dataclass(frozen=True, slots=True)
class FunctionCall:
    """'F': the legacy fast-path function call interface."""

    TAG: ClassVar[bytes] = b"F"
    function_oid: int
    argument_format_codes: tuple[int, ...] = ()
    arguments: tuple[bytes | None, ...] = ()
    result_format_code: int = 0

    def encode(self) -> bytes:
        check_range(self.function_oid, 0, UINT32_MAX, "function_oid")
        check_range(self.result_format_code, -0x8000, 0x7FFF, "result_format_code")
        return frame(
            b"F",
            b"".join(
                (
                    UINT32.pack(self.function_oid),
                    pack_int16_array(self.argument_format_codes, "argument format codes"),
                    pack_values(self.arguments, "arguments"),
                    INT16.pack(self.result_format_code),
                )
            ),
        )

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = "FunctionCall ('F')"
        need(body, 0, 4, mt, "function OID")
        (oid,) = UINT32.unpack_from(body, 0)
        formats, pos = unpack_int16_array(body, 4, mt, "argument format codes")
        arguments, pos = unpack_values(body, pos, mt, "argument")
        need(body, pos, 2, mt, "result format code")
        (result_format,) = INT16.unpack_from(body, pos)
        trailing(body, pos + 2, mt)
        return cls(oid, formats, arguments, result_format)


_SYNC: Final = frame(b"S", b"")
_FLUSH: Final = frame(b"H", b"")
_TERMINATE: Final = frame(b"X", b"")
