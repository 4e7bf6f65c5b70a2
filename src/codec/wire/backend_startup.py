"""The messages a server sends while a connection starts, and the session state it reports.

PostgreSQL docs, "Message Formats", marked (B): the one-byte answers to SSLRequest and
GSSENCRequest (untyped; :class:`codec.wire.BackendReader` only reads them when told to
expect them), protocol 2.0's error to a too-old startup packet, the ten Authentication
requests ('R', told apart by their first Int32), and what the server tells the client
about the session: ParameterStatus, BackendKeyData, ReadyForQuery and
NegotiateProtocolVersion.

They are apart from the query-cycle messages (:mod:`codec.wire.backend`) and from
ErrorResponse / NoticeResponse (:mod:`codec.wire.backend_notices`) because they are the
start-up handshake's vocabulary: a client's authentication code reads this module alone.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Final, Literal, Self

from codec._buffer import (
    INT32,
    INT32_MAX,
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
    frame,
    normalize_secret_key,
    secret_key_bytes,
    unpack_secret_key,
)

if TYPE_CHECKING:
    from codec.wire.frontend import StartupMessage

_VERSION_AND_COUNT: Final = struct.Struct("!Ii")
_INT32_AND_SALT: Final = struct.Struct("!i4s")

# --- the answers to SSLRequest / GSSENCRequest (a single untyped byte) -----------------


@dataclass(frozen=True, slots=True)
class SSLResponse:
    """The server's one-byte answer to SSLRequest: 'S' (willing) or 'N' (unwilling)."""

    willing: bool

    def encode(self) -> bytes:
        return b"S" if self.willing else b"N"


@dataclass(frozen=True, slots=True)
class GSSENCResponse:
    """The server's one-byte answer to GSSENCRequest: 'G' (willing) or 'N' (unwilling)."""

    willing: bool

    def encode(self) -> bytes:
        return b"G" if self.willing else b"N"


@dataclass(frozen=True, slots=True)
class LegacyErrorResponse:
    """Protocol 2.0's error: 'E', the text, a NUL, no length word. PostgreSQL sends it to
    a startup packet below protocol 3.0 (``FATAL:  unsupported frontend protocol ...``),
    whose client could not read a 3.0 ErrorResponse."""

    text: str

    def encode(self) -> bytes:
        return b"E" + cstring(self.text, "error text")

    @classmethod
    def decode(cls, data: bytes) -> Self:
        """The whole message as a 2.0 client reads it ('E' included)."""
        if data[:1] != b"E":
            raise DecodeError("LegacyErrorResponse", 0, f"expected 'E', found {data[:1]!r}")
        text, end = read_cstring(data, 1, "LegacyErrorResponse", "error text")
        trailing(data, end, "LegacyErrorResponse")
        return cls(text)


# --- authentication: all 'R', told apart by the int32 that starts the body ------------


def _auth_frame(code: int, extra: bytes = b"") -> bytes:
    return frame(b"R", INT32.pack(code) + extra)


def _no_extra(body: bytes, mt: str) -> None:
    trailing(body, 4, mt)


@dataclass(frozen=True, slots=True)
class AuthenticationOk:
    """'R' 0: authentication succeeded."""

    TAG: ClassVar[bytes] = b"R"
    AUTH_CODE: ClassVar[int] = 0

    def encode(self) -> bytes:
        return _auth_frame(0)

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        _no_extra(body, "AuthenticationOk ('R')")
        return cls()


@dataclass(frozen=True, slots=True)
class AuthenticationKerberosV5:
    """'R' 2: Kerberos V5 (no longer supported by PostgreSQL; kept for completeness)."""

    TAG: ClassVar[bytes] = b"R"
    AUTH_CODE: ClassVar[int] = 2

    def encode(self) -> bytes:
        return _auth_frame(2)

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        _no_extra(body, "AuthenticationKerberosV5 ('R')")
        return cls()


@dataclass(frozen=True, slots=True)
class AuthenticationCleartextPassword:
    """'R' 3: send the password in clear text (a PasswordMessage)."""

    TAG: ClassVar[bytes] = b"R"
    AUTH_CODE: ClassVar[int] = 3

    def encode(self) -> bytes:
        return _auth_frame(3)

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        _no_extra(body, "AuthenticationCleartextPassword ('R')")
        return cls()


@dataclass(frozen=True, slots=True)
class AuthenticationMD5Password:
    """'R' 5: send an MD5-hashed password using this 4-byte salt."""

    TAG: ClassVar[bytes] = b"R"
    AUTH_CODE: ClassVar[int] = 5
    salt: bytes

    def encode(self) -> bytes:
        if len(self.salt) != 4:
            raise EncodeError(f"MD5 salt must be 4 bytes, got {len(self.salt)}")
        return frame(b"R", _INT32_AND_SALT.pack(5, bytes(self.salt)))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = "AuthenticationMD5Password ('R')"
        need(body, 4, 4, mt, "salt")
        trailing(body, 8, mt)
        return cls(body[4:8])


@dataclass(frozen=True, slots=True)
class AuthenticationGSS:
    """'R' 7: start GSSAPI authentication."""

    TAG: ClassVar[bytes] = b"R"
    AUTH_CODE: ClassVar[int] = 7

    def encode(self) -> bytes:
        return _auth_frame(7)

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        _no_extra(body, "AuthenticationGSS ('R')")
        return cls()


@dataclass(frozen=True, slots=True)
class AuthenticationGSSContinue:
    """'R' 8: GSSAPI or SSPI token for the client."""

    TAG: ClassVar[bytes] = b"R"
    AUTH_CODE: ClassVar[int] = 8
    data: bytes

    def encode(self) -> bytes:
        return _auth_frame(8, bytes(self.data))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        return cls(body[4:])


@dataclass(frozen=True, slots=True)
class AuthenticationSSPI:
    """'R' 9: start SSPI authentication."""

    TAG: ClassVar[bytes] = b"R"
    AUTH_CODE: ClassVar[int] = 9

    def encode(self) -> bytes:
        return _auth_frame(9)

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        _no_extra(body, "AuthenticationSSPI ('R')")
        return cls()


@dataclass(frozen=True, slots=True)
class AuthenticationSASL:
    """'R' 10: SASL authentication with one of these mechanisms, in server preference."""

    TAG: ClassVar[bytes] = b"R"
    AUTH_CODE: ClassVar[int] = 10
    mechanisms: tuple[str, ...]

    def encode(self) -> bytes:
        out = [INT32.pack(10)]
        for mechanism in self.mechanisms:
            if not mechanism:
                # An empty name is the list terminator on the wire.
                raise EncodeError("SASL mechanism names must not be empty")
            out.append(cstring(mechanism, "SASL mechanism name"))
        out.append(b"\0")
        return frame(b"R", b"".join(out))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = "AuthenticationSASL ('R')"
        pos = 4
        mechanisms: list[str] = []
        while True:
            need(body, pos, 1, mt, "mechanism name or terminator")
            if body[pos] == 0:
                pos += 1
                break
            mechanism, pos = read_cstring(body, pos, mt, "mechanism name")
            mechanisms.append(mechanism)
        trailing(body, pos, mt)
        return cls(tuple(mechanisms))


@dataclass(frozen=True, slots=True)
class AuthenticationSASLContinue:
    """'R' 11: a SASL challenge."""

    TAG: ClassVar[bytes] = b"R"
    AUTH_CODE: ClassVar[int] = 11
    data: bytes

    def encode(self) -> bytes:
        return _auth_frame(11, bytes(self.data))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        return cls(body[4:])


@dataclass(frozen=True, slots=True)
class AuthenticationSASLFinal:
    """'R' 12: SASL outcome data (e.g. the SCRAM server signature)."""

    TAG: ClassVar[bytes] = b"R"
    AUTH_CODE: ClassVar[int] = 12
    data: bytes

    def encode(self) -> bytes:
        return _auth_frame(12, bytes(self.data))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        return cls(body[4:])


Authentication = (
    AuthenticationOk
    | AuthenticationKerberosV5
    | AuthenticationCleartextPassword
    | AuthenticationMD5Password
    | AuthenticationGSS
    | AuthenticationGSSContinue
    | AuthenticationSSPI
    | AuthenticationSASL
    | AuthenticationSASLContinue
    | AuthenticationSASLFinal
)
AUTHENTICATION_MESSAGES: Final = (
    AuthenticationOk,
    AuthenticationKerberosV5,
    AuthenticationCleartextPassword,
    AuthenticationMD5Password,
    AuthenticationGSS,
    AuthenticationGSSContinue,
    AuthenticationSSPI,
    AuthenticationSASL,
    AuthenticationSASLContinue,
    AuthenticationSASLFinal,
)
AUTHENTICATION_REGISTRY: Final[dict[int, type[Authentication]]] = {
    cls.AUTH_CODE: cls for cls in AUTHENTICATION_MESSAGES
}


def decode_authentication(body: bytes) -> Authentication:
    """Decode an 'R' body by its leading int32 request code."""
    mt = "Authentication ('R')"
    need(body, 0, 4, mt, "authentication request code")
    (code,) = INT32.unpack_from(body, 0)
    cls = AUTHENTICATION_REGISTRY.get(code)
    if cls is None:
        # 1 (Kerberos 4), 4 (crypt) and 6 (SCM credentials) were removed long ago.
        raise DecodeError(
            mt, 0, f"expected one of {sorted(AUTHENTICATION_REGISTRY)}, found request code {code}"
        )
    return cls.decode_body(body)


# --- session state ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ParameterStatus:
    """'S': the current value of a run-time parameter the client should track."""

    TAG: ClassVar[bytes] = b"S"
    name: str
    value: str

    def encode(self) -> bytes:
        return frame(b"S", cstring(self.name, "parameter name") + cstring(self.value, "value"))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = "ParameterStatus ('S')"
        name, pos = read_cstring(body, 0, mt, "parameter name")
        value, pos = read_cstring(body, pos, mt, f"value of {name!r}")
        trailing(body, pos, mt)
        return cls(name, value)


@dataclass(frozen=True, slots=True)
class BackendKeyData:
    """'K': the process ID and secret key a CancelRequest must quote.

    ``secret_key`` is an ``int`` for a 4-byte key (protocol 3.0 defines it as an Int32,
    and PostgreSQL 18 still sends 4 bytes to 3.0 clients) and ``bytes`` for a longer
    one: protocol 3.2 lets the key run to the end of the message, 4 to 256 bytes, and
    PostgreSQL 18 sends 32 (``BackendKeyData`` in the 18 docs; ``PostgresMain``). A
    4-byte ``bytes`` key is stored as its int, so equal bytes make equal messages.
    """

    TAG: ClassVar[bytes] = b"K"
    process_id: int
    secret_key: SecretKey

    def __post_init__(self) -> None:
        if not isinstance(self.secret_key, int):
            object.__setattr__(self, "secret_key", normalize_secret_key(self.secret_key))

    @property
    def secret_key_bytes(self) -> bytes:
        """The key as sent: what a CancelRequest must repeat, length included."""
        return secret_key_bytes(self.secret_key)

    def encode(self) -> bytes:
        check_range(self.process_id, -(1 << 31), INT32_MAX, "process_id")
        return frame(b"K", INT32.pack(self.process_id) + secret_key_bytes(self.secret_key))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = "BackendKeyData ('K')"
        need(body, 0, 4, mt, "process ID")
        (process_id,) = INT32.unpack_from(body, 0)
        return cls(process_id, unpack_secret_key(body, 4, mt))


TransactionStatus = Literal["I", "T", "E"]
_STATUSES: Final[dict[int, TransactionStatus]] = {ord("I"): "I", ord("T"): "T", ord("E"): "E"}


@dataclass(frozen=True, slots=True)
class ReadyForQuery:
    """'Z': idle ('I'), in a transaction block ('T') or in a failed one ('E')."""

    TAG: ClassVar[bytes] = b"Z"
    transaction_status: TransactionStatus = "I"

    def encode(self) -> bytes:
        if self.transaction_status not in ("I", "T", "E"):
            raise EncodeError(
                f"transaction_status must be 'I', 'T' or 'E', got {self.transaction_status!r}"
            )
        return frame(b"Z", self.transaction_status.encode())

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = "ReadyForQuery ('Z')"
        need(body, 0, 1, mt, "transaction status")
        trailing(body, 1, mt)
        status = _STATUSES.get(body[0])
        if status is None:
            raise DecodeError(mt, 0, f"expected 'I', 'T' or 'E', found {body[:1]!r}")
        return cls(status)


@dataclass(frozen=True, slots=True)
class NegotiateProtocolVersion:
    """'v': the protocol version the server will speak and the options it ignored.

    The docs call the first field the "newest minor protocol version supported", but
    PostgreSQL sends a whole version number, major in the high 16 bits: 14-17 send
    PG_PROTOCOL_LATEST (3.0, ``00030000``) and 18 sends the version it settled on,
    Min(requested, 3.2) (``SendNegotiateProtocolVersion`` in tcop/backend_startup.c);
    libpq 18 reads it that way (``pqGetNegotiateProtocolVersion3``).
    """

    TAG: ClassVar[bytes] = b"v"
    protocol_version: int
    unrecognized_options: tuple[str, ...] = ()

    @property
    def major_version(self) -> int:
        return self.protocol_version >> 16

    @property
    def minor_version(self) -> int:
        return self.protocol_version & 0xFFFF

    @classmethod
    def for_startup(cls, startup: StartupMessage, latest: int) -> Self | None:
        """What a server whose newest protocol is ``latest`` answers to ``startup``.

        None when it sends no NegotiateProtocolVersion. PostgreSQL sends one when the
        client asked for a newer minor version or gave any ``_pq_.`` option (it knows
        none), naming Min(requested, latest) and every such option in the client's
        order (ProcessStartupPacket). Since 14-17 only know 3.0, Min() gives their
        constant answer too. A major other than 3 is refused before this point.
        """
        options = startup.protocol_options
        if startup.minor_version > latest & 0xFFFF or options:
            return cls(min(startup.protocol_version, latest), options)
        return None

    def encode(self) -> bytes:
        check_range(self.protocol_version, 0, UINT32_MAX, "protocol_version")
        if len(self.unrecognized_options) > INT32_MAX:
            raise EncodeError("too many unrecognized options for an Int32 count")
        out = [_VERSION_AND_COUNT.pack(self.protocol_version, len(self.unrecognized_options))]
        out.extend(cstring(option, "option name") for option in self.unrecognized_options)
        return frame(b"v", b"".join(out))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = "NegotiateProtocolVersion ('v')"
        need(body, 0, 8, mt, "protocol version and number of options")
        version, count = _VERSION_AND_COUNT.unpack_from(body, 0)
        if count < 0:
            raise DecodeError(mt, 4, f"expected a number of options >= 0, found {count}")
        pos = 8
        options: list[str] = []
        # Each option takes at least its NUL, so a lying count runs out of bytes first.
        for _ in range(count):
            option, pos = read_cstring(body, pos, mt, "option name")
            options.append(option)
        trailing(body, pos, mt)
        return cls(version, tuple(options))
