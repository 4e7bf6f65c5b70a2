"""Messages a server sends (PostgreSQL docs, "Message Formats", marked (B)): the query cycle.

This module holds what answers a query, simple or extended: ParseComplete,
BindComplete, CloseComplete, NoData, PortalSuspended, EmptyQueryResponse,
ParameterDescription, RowDescription, DataRow, CommandComplete,
NotificationResponse, FunctionCallResponse and the three Copy*Response messages that
start COPY and streaming replication. The other backend messages live next door
(:mod:`codec.wire` exports them all):

* :mod:`codec.wire.backend_startup`: the answers to SSLRequest / GSSENCRequest, the
  Authentication requests and the session state (ParameterStatus, BackendKeyData,
  ReadyForQuery, NegotiateProtocolVersion);
* :mod:`codec.wire.backend_notices`: ErrorResponse and NoticeResponse.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar, Final, Self

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
    array_struct,
    empty_body,
    frame,
    pack_int16_array,
    pack_uint16_count,
    pack_values,
    unpack_int16_array,
    unpack_values,
)

# RowDescription per-field tail after the name: table OID, attnum, type OID, typlen,
# typmod, format code.
_FIELD: Final = struct.Struct("!IhIhih")

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
