"""Messages a server sends (PostgreSQL docs, "Message Formats", marked (B)).

All are typed except the one-byte answers to SSLRequest and GSSENCRequest, which
:class:`codec.wire.BackendReader` only reads when told to expect them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Final, Literal, Self

from codec._buffer import (
    INT8,
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
    normalize_secret_key,
    pack_int16_array,
    pack_uint16_count,
    pack_values,
    secret_key_bytes,
    unpack_int16_array,
    unpack_secret_key,
    unpack_values,
)

if TYPE_CHECKING:
    from codec.wire.frontend import StartupMessage

_VERSION_AND_COUNT: Final = struct.Struct("!Ii")
_INT32_AND_SALT: Final = struct.Struct("!i4s")
# RowDescription per-field tail after the name: table OID, attnum, type OID, typlen,
# typmod, format code.
_FIELD: Final = struct.Struct("!IhIhih")

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


# --- query results ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ParseComplete:
    """'1': Parse succeeded."""

    TAG: ClassVar[bytes] = b"1"

    def encode(self) -> bytes:
        return _PARSE_COMPLETE

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        empty_body(body, "ParseComplete ('1')")
        return cls()


@dataclass(frozen=True, slots=True)
class BindComplete:
    """'2': Bind succeeded."""

    TAG: ClassVar[bytes] = b"2"

    def encode(self) -> bytes:
        return _BIND_COMPLETE

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        empty_body(body, "BindComplete ('2')")
        return cls()


@dataclass(frozen=True, slots=True)
class CloseComplete:
    """'3': Close succeeded."""

    TAG: ClassVar[bytes] = b"3"

    def encode(self) -> bytes:
        return _CLOSE_COMPLETE

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        empty_body(body, "CloseComplete ('3')")
        return cls()


@dataclass(frozen=True, slots=True)
class NoData:
    """'n': the described statement or portal returns no rows."""

    TAG: ClassVar[bytes] = b"n"

    def encode(self) -> bytes:
        return _NO_DATA

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        empty_body(body, "NoData ('n')")
        return cls()


@dataclass(frozen=True, slots=True)
class PortalSuspended:
    """'s': Execute stopped at its row limit; the portal can be resumed."""

    TAG: ClassVar[bytes] = b"s"

    def encode(self) -> bytes:
        return _PORTAL_SUSPENDED

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        empty_body(body, "PortalSuspended ('s')")
        return cls()


@dataclass(frozen=True, slots=True)
class EmptyQueryResponse:
    """'I': the query string was empty (takes the place of CommandComplete)."""

    TAG: ClassVar[bytes] = b"I"

    def encode(self) -> bytes:
        return _EMPTY_QUERY_RESPONSE

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        empty_body(body, "EmptyQueryResponse ('I')")
        return cls()


@dataclass(frozen=True, slots=True)
class ParameterDescription:
    """'t': the type OIDs of a prepared statement's parameters."""

    TAG: ClassVar[bytes] = b"t"
    parameter_type_oids: tuple[int, ...] = ()

    def encode(self) -> bytes:
        out = [pack_uint16_count(len(self.parameter_type_oids), "parameters")]
        for oid in self.parameter_type_oids:
            check_range(oid, 0, UINT32_MAX, "parameter type OID")
            out.append(UINT32.pack(oid))
        return frame(b"t", b"".join(out))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = "ParameterDescription ('t')"
        need(body, 0, 2, mt, "number of parameters")
        (count,) = UINT16.unpack_from(body, 0)
        need(body, 2, 4 * count, mt, f"{count} parameter type OIDs")
        trailing(body, 2 + 4 * count, mt)
        oids: tuple[int, ...] = array_struct("I", count).unpack_from(body, 2)
        return cls(oids)


@dataclass(frozen=True, slots=True)
class FieldDescription:
    """One column of a RowDescription (not a message on its own)."""

    name: str
    table_oid: int = 0
    column_number: int = 0
    type_oid: int = 25
    type_size: int = -1
    type_modifier: int = -1
    format_code: int = 0

    def _encode(self) -> bytes:
        check_range(self.table_oid, 0, UINT32_MAX, "table_oid")
        check_range(self.column_number, -0x8000, 0x7FFF, "column_number")
        check_range(self.type_oid, 0, UINT32_MAX, "type_oid")
        check_range(self.type_size, -0x8000, 0x7FFF, "type_size")
        check_range(self.type_modifier, -(1 << 31), INT32_MAX, "type_modifier")
        check_range(self.format_code, -0x8000, 0x7FFF, "format_code")
        return cstring(self.name, "field name") + _FIELD.pack(
            self.table_oid,
            self.column_number,
            self.type_oid,
            self.type_size,
            self.type_modifier,
            self.format_code,
        )


@dataclass(frozen=True, slots=True)
class RowDescription:
    """'T': the columns of the rows that follow."""

    TAG: ClassVar[bytes] = b"T"
    fields: tuple[FieldDescription, ...] = ()

    def encode(self) -> bytes:
        head = pack_uint16_count(len(self.fields), "fields")
        return frame(b"T", head + b"".join(field._encode() for field in self.fields))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = "RowDescription ('T')"
        need(body, 0, 2, mt, "number of fields")
        (count,) = UINT16.unpack_from(body, 0)
        pos = 2
        fields: list[FieldDescription] = []
        unpack = _FIELD.unpack_from
        for index in range(count):
            name, pos = read_cstring(body, pos, mt, f"name of field #{index}")
            need(body, pos, 18, mt, f"description of field {name!r}")
            fields.append(FieldDescription(name, *unpack(body, pos)))
            pos += 18
        trailing(body, pos, mt)
        return cls(tuple(fields))


@dataclass(frozen=True, slots=True)
class DataRow:
    """'D': one row; each value is the column's bytes, or None for NULL."""

    TAG: ClassVar[bytes] = b"D"
    values: tuple[bytes | None, ...] = ()

    def encode(self) -> bytes:
        return frame(b"D", pack_values(self.values, "columns"))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = "DataRow ('D')"
        values, pos = unpack_values(body, 0, mt, "column")
        trailing(body, pos, mt)
        return cls(values)


@dataclass(frozen=True, slots=True)
class CommandComplete:
    """'C': a command finished; the tag is e.g. "INSERT 0 1" or "SELECT 3"."""

    TAG: ClassVar[bytes] = b"C"
    command_tag: str

    def encode(self) -> bytes:
        return frame(b"C", cstring(self.command_tag, "command tag"))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = "CommandComplete ('C')"
        tag, pos = read_cstring(body, 0, mt, "command tag")
        trailing(body, pos, mt)
        return cls(tag)


@dataclass(frozen=True, slots=True)
class NotificationResponse:
    """'A': a NOTIFY from some backend on a channel this session LISTENs to."""

    TAG: ClassVar[bytes] = b"A"
    process_id: int
    channel: str
    payload: str = ""

    def encode(self) -> bytes:
        check_range(self.process_id, -(1 << 31), INT32_MAX, "process_id")
        return frame(
            b"A",
            INT32.pack(self.process_id)
            + cstring(self.channel, "channel")
            + cstring(self.payload, "payload"),
        )

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = "NotificationResponse ('A')"
        need(body, 0, 4, mt, "process ID")
        (process_id,) = INT32.unpack_from(body, 0)
        channel, pos = read_cstring(body, 4, mt, "channel name")
        payload, pos = read_cstring(body, pos, mt, "payload")
        trailing(body, pos, mt)
        return cls(process_id, channel, payload)


@dataclass(frozen=True, slots=True)
class FunctionCallResponse:
    """'V': the result of a FunctionCall (None for NULL)."""

    TAG: ClassVar[bytes] = b"V"
    result: bytes | None

    def encode(self) -> bytes:
        if self.result is None:
            return frame(b"V", b"\xff\xff\xff\xff")
        if len(self.result) > INT32_MAX:
            raise EncodeError("function result does not fit an int32 length")
        return frame(b"V", INT32.pack(len(self.result)) + bytes(self.result))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = "FunctionCallResponse ('V')"
        need(body, 0, 4, mt, "result length")
        (size,) = INT32.unpack_from(body, 0)
        if size == -1:
            trailing(body, 4, mt)
            return cls(None)
        if size < 0:
            raise DecodeError(mt, 0, f"expected -1 or a length >= 0, found {size}")
        need(body, 4, size, mt, "result value")
        trailing(body, 4 + size, mt)
        return cls(body[4:])


# --- ErrorResponse / NoticeResponse -------------------------------------------------

# Field codes in the order elog.c's send_message_to_frontend writes them, so that
# build() produces the same bytes as PostgreSQL.
_FIELD_CODES: Final = {
    "severity": "S",
    "severity_nonlocalized": "V",
    "sqlstate": "C",
    "message": "M",
    "detail": "D",
    "hint": "H",
    "position": "P",
    "internal_position": "p",
    "internal_query": "q",
    "where": "W",
    "schema_name": "s",
    "table_name": "t",
    "column_name": "c",
    "data_type_name": "d",
    "constraint_name": "n",
    "file": "F",
    "line": "L",
    "routine": "R",
}


@dataclass(frozen=True, slots=True)
class _NoticeFields:
    """Shared body of ErrorResponse and NoticeResponse: (code, value) pairs in order.

    Unknown codes are kept as they are, because the docs say clients must ignore field
    types they do not recognise (new ones may be added).
    """

    TAG: ClassVar[bytes]
    _NAME: ClassVar[str]
    fields: tuple[tuple[str, str], ...]

    def get(self, code: str) -> str | None:
        """The value of the first field with this one-character code."""
        for key, value in self.fields:
            if key == code:
                return value
        return None

    @property
    def severity(self) -> str | None:
        """'S': ERROR, FATAL, PANIC, WARNING, NOTICE, ... possibly localized."""
        return self.get("S")

    @property
    def severity_nonlocalized(self) -> str | None:
        """'V': the severity, never localized (PostgreSQL 9.6+)."""
        return self.get("V")

    @property
    def sqlstate(self) -> str | None:
        """'C': the SQLSTATE code."""
        return self.get("C")

    @property
    def message(self) -> str | None:
        """'M': the primary human-readable message."""
        return self.get("M")

    @property
    def detail(self) -> str | None:
        return self.get("D")

    @property
    def hint(self) -> str | None:
        return self.get("H")

    @property
    def position(self) -> str | None:
        """'P': 1-based character index into the query string, as a decimal string."""
        return self.get("P")

    @property
    def internal_position(self) -> str | None:
        return self.get("p")

    @property
    def internal_query(self) -> str | None:
        return self.get("q")

    @property
    def where(self) -> str | None:
        return self.get("W")

    @property
    def schema_name(self) -> str | None:
        return self.get("s")

    @property
    def table_name(self) -> str | None:
        return self.get("t")

    @property
    def column_name(self) -> str | None:
        return self.get("c")

    @property
    def data_type_name(self) -> str | None:
        return self.get("d")

    @property
    def constraint_name(self) -> str | None:
        return self.get("n")

    @property
    def file(self) -> str | None:
        return self.get("F")

    @property
    def line(self) -> str | None:
        return self.get("L")

    @property
    def routine(self) -> str | None:
        return self.get("R")

    @classmethod
    def build(
        cls,
        severity: str,
        sqlstate: str,
        message: str,
        *,
        severity_nonlocalized: str | None = None,
        detail: str | None = None,
        hint: str | None = None,
        position: int | str | None = None,
        internal_position: int | str | None = None,
        internal_query: str | None = None,
        where: str | None = None,
        schema_name: str | None = None,
        table_name: str | None = None,
        column_name: str | None = None,
        data_type_name: str | None = None,
        constraint_name: str | None = None,
        file: str | None = None,
        line: int | str | None = None,
        routine: str | None = None,
    ) -> Self:
        """Fields in PostgreSQL's order; 'V' defaults to ``severity`` as PG 9.6+ sends it."""
        values: dict[str, object] = {
            "severity": severity,
            "severity_nonlocalized": severity
            if severity_nonlocalized is None
            else severity_nonlocalized,
            "sqlstate": sqlstate,
            "message": message,
            "detail": detail,
            "hint": hint,
            "position": position,
            "internal_position": internal_position,
            "internal_query": internal_query,
            "where": where,
            "schema_name": schema_name,
            "table_name": table_name,
            "column_name": column_name,
            "data_type_name": data_type_name,
            "constraint_name": constraint_name,
            "file": file,
            "line": line,
            "routine": routine,
        }
        return cls(
            tuple(
                (code, str(values[name]))
                for name, code in _FIELD_CODES.items()
                if values[name] is not None
            )
        )

    def encode(self) -> bytes:
        out = []
        for code, value in self.fields:
            if len(code) != 1 or not 0 < ord(code) < 256:
                raise EncodeError(f"field code must be one non-NUL Latin-1 character, got {code!r}")
            out.append(code.encode("latin-1"))
            out.append(cstring(value, f"field {code!r}"))
        out.append(b"\0")
        return frame(self.TAG, b"".join(out))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = cls._NAME
        pos = 0
        fields: list[tuple[str, str]] = []
        while True:
            need(body, pos, 1, mt, "field code or terminator")
            code = body[pos]
            if code == 0:
                pos += 1
                break
            value, pos = read_cstring(body, pos + 1, mt, f"value of field {chr(code)!r}")
            fields.append((chr(code), value))
        trailing(body, pos, mt)
        return cls(tuple(fields))


@dataclass(frozen=True, slots=True)
class ErrorResponse(_NoticeFields):
    """'E': an error; build one with ``ErrorResponse.build("ERROR", "42P01", "...")``."""

    TAG: ClassVar[bytes] = b"E"
    _NAME: ClassVar[str] = "ErrorResponse ('E')"


@dataclass(frozen=True, slots=True)
class NoticeResponse(_NoticeFields):
    """'N': a notice (warning, notice, info, ...), same fields as ErrorResponse."""

    TAG: ClassVar[bytes] = b"N"
    _NAME: ClassVar[str] = "NoticeResponse ('N')"


# --- COPY -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _CopyResponse:
    """Shared body of the three Copy*Response messages."""

    TAG: ClassVar[bytes]
    _NAME: ClassVar[str]
    overall_format: int = 0
    column_formats: tuple[int, ...] = ()

    def encode(self) -> bytes:
        check_range(self.overall_format, -0x80, 0x7F, "overall_format")
        return frame(
            self.TAG,
            INT8.pack(self.overall_format)
            + pack_int16_array(self.column_formats, "column formats"),
        )

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = cls._NAME
        need(body, 0, 1, mt, "overall format")
        (overall,) = INT8.unpack_from(body, 0)
        formats, pos = unpack_int16_array(body, 1, mt, "column format codes")
        trailing(body, pos, mt)
        return cls(overall, formats)


@dataclass(frozen=True, slots=True)
class CopyInResponse(_CopyResponse):
    """'G': the server is ready for COPY FROM STDIN data."""

    TAG: ClassVar[bytes] = b"G"
    _NAME: ClassVar[str] = "CopyInResponse ('G')"


@dataclass(frozen=True, slots=True)
class CopyOutResponse(_CopyResponse):
    """'H': COPY TO STDOUT data follows."""

    TAG: ClassVar[bytes] = b"H"
    _NAME: ClassVar[str] = "CopyOutResponse ('H')"


@dataclass(frozen=True, slots=True)
class CopyBothResponse(_CopyResponse):
    """'W': both directions carry CopyData (used for streaming replication)."""

    TAG: ClassVar[bytes] = b"W"
    _NAME: ClassVar[str] = "CopyBothResponse ('W')"


_PARSE_COMPLETE: Final = frame(b"1", b"")
_BIND_COMPLETE: Final = frame(b"2", b"")
_CLOSE_COMPLETE: Final = frame(b"3", b"")
_NO_DATA: Final = frame(b"n", b"")
_PORTAL_SUSPENDED: Final = frame(b"s", b"")
_EMPTY_QUERY_RESPONSE: Final = frame(b"I", b"")
