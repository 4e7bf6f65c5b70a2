"""The 19 pgoutput messages, protocol versions 1 to 4, one class each.

Layouts follow ``src/backend/replication/logical/proto.c`` (PostgreSQL 14–17) and the
"Logical Replication Message Formats" chapter; field names are the documentation's, in
snake_case. LSNs, xids and OIDs are unsigned, timestamps are signed microseconds since
2000-01-01 UTC (see :mod:`codec.values` to turn them into :class:`~datetime.datetime`).

Protocol 2 puts the transaction's xid in front of Message, Relation, Type, Insert,
Update, Delete and Truncate when they are sent between Stream Start and Stream Stop;
those classes carry it as ``xid`` (``None`` outside a stream). Whether a payload has
that xid is not visible in its bytes, which is why :class:`~codec.pgoutput.Decoder`
keeps state.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from codec._buffer import UINT32, cstring, read_cstring, trailing
from codec.errors import DecodeError, EncodeError
from codec.pgoutput.tuples import TupleData, read_tuple, write_tuple

_XID: Final = UINT32
_LSN_TIME_XID = struct.Struct("!QqI")  # Begin
_FLAGS_LSN_LSN_TIME = struct.Struct("!BQQq")  # Commit
_LSN = struct.Struct("!Q")  # Origin
_MESSAGE_HEAD = struct.Struct("!BQ")  # Message: flags, lsn
_CONTENT_LENGTH = struct.Struct("!i")
_OID = UINT32
_RELATION_TAIL = struct.Struct("!Bh")  # replica identity, number of columns
_COLUMN_TAIL = struct.Struct("!Ii")  # type OID, type modifier
_OID_ACTION = struct.Struct("!IB")  # relation OID, 'N'/'K'/'O'
_ACTION = struct.Struct("!B")
_TRUNCATE_HEAD = struct.Struct("!iB")  # number of relations, option bits
_XID_FLAG = struct.Struct("!IB")  # Stream Start: xid, first segment
_XID_FLAGS_LSN_LSN_TIME = struct.Struct("!IBQQq")  # Stream Commit
_XID_SUBXID = struct.Struct("!II")
_XID_SUBXID_LSN_TIME = struct.Struct("!IIQq")  # Stream Abort with abort info (protocol 4)
_LSN_LSN_TIME_XID = struct.Struct("!QQqI")  # Begin Prepare
_FLAGS_LSN_LSN_TIME_XID = struct.Struct("!BQQqI")  # Prepare, Commit Prepared, Stream Prepare
_FLAGS_LSN_LSN_TIME_TIME_XID = struct.Struct("!BQQqqI")  # Rollback Prepared

_N = ord("N")
_K = ord("K")
_O = ord("O")

# What each field may hold, by name: checked only after struct.pack refused a value, to
# say which field was wrong instead of struct's bare "argument out of range".
_FIELD_RANGES: Final[dict[str, tuple[int, int]]] = {
    "flags": (0, 255),
    "type_modifier": (-(1 << 31), (1 << 31) - 1),
}
_UINT32_FIELDS = ("xid", "subxid", "oid", "relation_oid", "type_oid")
_INT64_SUFFIX = "timestamp"
_LSN_SUFFIX = "lsn"


def _field_range(name: str) -> tuple[int, int] | None:
    if name in _FIELD_RANGES:
        return _FIELD_RANGES[name]
    if name in _UINT32_FIELDS:
        return (0, (1 << 32) - 1)
    if name.endswith(_LSN_SUFFIX):
        return (0, (1 << 64) - 1)
    if name.endswith(_INT64_SUFFIX):
        return (-(1 << 63), (1 << 63) - 1)
    return None


def _name(cls: type) -> str:
    return f"pgoutput {cls.__name__} ({cls.TAG.decode()!r})"  # type: ignore[attr-defined]


class PgOutputMessage:
    """Base of every pgoutput message class."""

    __slots__ = ()
    TAG: ClassVar[bytes]
    #: How errors name the message, e.g. ``pgoutput Insert ('I')``.
    NAME: ClassVar[str]
    #: Builds an instance from all fields, positionally, without the frozen ``__init__``.
    _make: ClassVar[Callable[..., PgOutputMessage]]
    #: Whether protocol 2+ prefixes the message with an xid inside a streamed transaction.
    STREAMABLE: ClassVar[bool] = False

    def encode(self) -> bytes:
        """The message's bytes, exactly as pgoutput sends them."""
        try:
            return self._encode()
        except struct.error as err:
            raise self._range_error(err) from err

    def _encode(self) -> bytes:
        raise NotImplementedError

    @classmethod
    def decode_body(cls, buf: bytes, pos: int, xid: int | None) -> PgOutputMessage:
        """Decode the fields after the tag (and after the xid, already read)."""
        raise NotImplementedError

    def _range_error(self, err: struct.error) -> EncodeError:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            bounds = _field_range(f.name)
            if bounds is None or value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool):
                return EncodeError(
                    f"{type(self).__name__}.{f.name} must be an int, not {type(value).__name__}"
                )
            if not bounds[0] <= value <= bounds[1]:
                return EncodeError(
                    f"{type(self).__name__}.{f.name} must be in [{bounds[0]}, {bounds[1]}], "
                    f"got {value}"
                )
        return EncodeError(f"{type(self).__name__}: {err}")

    def _xid_prefix(self) -> bytes:
        xid: int | None = getattr(self, "xid", None)
        return b"" if xid is None else _XID.pack(xid)


def _check_bool(value: bool, what: str) -> int:
    if not isinstance(value, bool):
        raise EncodeError(f"{what} must be a bool, not {type(value).__name__}")
    return int(value)


# --- transaction boundaries -------------------------------------------------------------


def encode_begin(final_lsn: int, commit_timestamp: int, xid: int) -> bytes:
    """``Begin(final_lsn, commit_timestamp, xid).encode()`` without building the message,
    for generators that send millions (out-of-range values raise ``struct.error``)."""
    return b"B" + _LSN_TIME_XID.pack(final_lsn, commit_timestamp, xid)


def encode_commit(flags: int, commit_lsn: int, end_lsn: int, commit_timestamp: int) -> bytes:
    """``Commit(...).encode()`` without building the message (see :func:`encode_begin`)."""
    return b"C" + _FLAGS_LSN_LSN_TIME.pack(flags, commit_lsn, end_lsn, commit_timestamp)


@dataclass(frozen=True, slots=True)
class Begin(PgOutputMessage):
    """Start of a transaction (not sent for streamed ones, which use Stream Start)."""

    TAG: ClassVar[bytes] = b"B"
    final_lsn: int
    commit_timestamp: int
    xid: int

    def _encode(self) -> bytes:
        return encode_begin(self.final_lsn, self.commit_timestamp, self.xid)

    @classmethod
    def decode_body(cls, buf: bytes, pos: int, xid: int | None) -> PgOutputMessage:
        _need_exact(buf, pos, _LSN_TIME_XID.size, cls)
        return cls._make(*_LSN_TIME_XID.unpack_from(buf, pos))


@dataclass(frozen=True, slots=True)
class Commit(PgOutputMessage):
    """End of a transaction; ``flags`` is currently always 0."""

    TAG: ClassVar[bytes] = b"C"
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_timestamp: int

    def _encode(self) -> bytes:
        return encode_commit(self.flags, self.commit_lsn, self.end_lsn, self.commit_timestamp)

    @classmethod
    def decode_body(cls, buf: bytes, pos: int, xid: int | None) -> PgOutputMessage:
        _need_exact(buf, pos, _FLAGS_LSN_LSN_TIME.size, cls)
        return cls._make(*_FLAGS_LSN_LSN_TIME.unpack_from(buf, pos))


@dataclass(frozen=True, slots=True)
class Origin(PgOutputMessage):
    """The replication origin a transaction came from (sent after Begin / Stream Start)."""

    TAG: ClassVar[bytes] = b"O"
    commit_lsn: int
    name: str

    def _encode(self) -> bytes:
        return b"O" + _LSN.pack(self.commit_lsn) + cstring(self.name, "Origin.name")

    @classmethod
    def decode_body(cls, buf: bytes, pos: int, xid: int | None) -> PgOutputMessage:
        _need(buf, pos, 8, cls, "the origin's commit LSN")
        (lsn,) = _LSN.unpack_from(buf, pos)
        name, pos = read_cstring(buf, pos + 8, cls.NAME, "origin name")
        trailing(buf, pos, cls.NAME)
        return cls._make(lsn, name)


# --- schema -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RelationColumn:
    """One column of a Relation message. ``flags`` is 1 for a replica identity column."""

    flags: int
    name: str
    type_oid: int
    type_modifier: int

    @property
    def is_key(self) -> bool:
        return bool(self.flags & 1)


@dataclass(frozen=True, slots=True)
class Relation(PgOutputMessage):
    """A table's description, sent before its first change and after it changes.

    ``namespace`` is empty for ``pg_catalog``; ``replica_identity`` is ``relreplident``:
    ``d`` (default), ``n`` (nothing), ``f`` (full) or ``i`` (index).
    """

    TAG: ClassVar[bytes] = b"R"
    STREAMABLE: ClassVar[bool] = True
    oid: int
    namespace: str
    relation_name: str
    replica_identity: str
    columns: tuple[RelationColumn, ...]
    xid: int | None = field(default=None, kw_only=True)

    def _encode(self) -> bytes:
        identity = self.replica_identity
        if len(identity) != 1 or ord(identity) > 255:
            raise EncodeError(f"Relation.replica_identity must be one byte, got {identity!r}")
        if len(self.columns) > 32767:
            raise EncodeError(f"Relation has {len(self.columns)} columns; at most 32767 fit")
        out = bytearray(b"R")
        out += self._xid_prefix()
        out += _OID.pack(self.oid)
        out += cstring(self.namespace, "Relation.namespace")
        out += cstring(self.relation_name, "Relation.relation_name")
        out += _RELATION_TAIL.pack(ord(identity), len(self.columns))
        for column in self.columns:
            if not 0 <= column.flags <= 255:
                raise EncodeError(f"RelationColumn.flags must be in [0, 255], got {column.flags}")
            out.append(column.flags)
            out += cstring(column.name, "RelationColumn.name")
            try:
                out += _COLUMN_TAIL.pack(column.type_oid, column.type_modifier)
            except struct.error as err:
                raise EncodeError(
                    f"column {column.name!r}: type_oid must be in [0, 4294967295] and "
                    f"type_modifier in [-2147483648, 2147483647], got {column.type_oid} "
                    f"and {column.type_modifier}"
                ) from err
        return bytes(out)

    @classmethod
    def decode_body(cls, buf: bytes, pos: int, xid: int | None) -> PgOutputMessage:
        what = cls.NAME
        _need(buf, pos, 4, cls, "the relation OID")
        (oid,) = _OID.unpack_from(buf, pos)
        namespace, pos = read_cstring(buf, pos + 4, what, "namespace")
        relation_name, pos = read_cstring(buf, pos, what, "relation name")
        _need(buf, pos, 3, cls, "the replica identity and column count")
        identity, count = _RELATION_TAIL.unpack_from(buf, pos)
        if count < 0:
            raise DecodeError(what, pos + 1, f"expected a column count >= 0, found {count}")
        pos += 3
        columns = []
        for _ in range(count):
            _need(buf, pos, 1, cls, "column flags")
            flags = buf[pos]
            name, pos = read_cstring(buf, pos + 1, what, "column name")
            _need(buf, pos, 8, cls, "the column's type OID and modifier")
            type_oid, type_modifier = _COLUMN_TAIL.unpack_from(buf, pos)
            pos += 8
            columns.append(_make_column(flags, name, type_oid, type_modifier))
        trailing(buf, pos, what)
        return cls._make(oid, namespace, relation_name, chr(identity), tuple(columns), xid)


@dataclass(frozen=True, slots=True)
class Type(PgOutputMessage):
    """A non-built-in data type used by a following Relation (enum, domain, composite…)."""

    TAG: ClassVar[bytes] = b"Y"
    STREAMABLE: ClassVar[bool] = True
    oid: int
    namespace: str
    name: str
    xid: int | None = field(default=None, kw_only=True)

    def _encode(self) -> bytes:
        return (
            b"Y"
            + self._xid_prefix()
            + _OID.pack(self.oid)
            + cstring(self.namespace, "Type.namespace")
            + cstring(self.name, "Type.name")
        )

    @classmethod
    def decode_body(cls, buf: bytes, pos: int, xid: int | None) -> PgOutputMessage:
        what = cls.NAME
        _need(buf, pos, 4, cls, "the type OID")
        (oid,) = _OID.unpack_from(buf, pos)
        namespace, pos = read_cstring(buf, pos + 4, what, "namespace")
        name, pos = read_cstring(buf, pos, what, "type name")
        trailing(buf, pos, what)
        return cls._make(oid, namespace, name, xid)


# --- changes ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Insert(PgOutputMessage):
    """A new row."""

    TAG: ClassVar[bytes] = b"I"
    STREAMABLE: ClassVar[bool] = True
    relation_oid: int
    new_tuple: TupleData
    xid: int | None = field(default=None, kw_only=True)

    def _encode(self) -> bytes:
        out = bytearray(b"I")
        out += self._xid_prefix()
        out += _OID_ACTION.pack(self.relation_oid, _N)
        write_tuple(out, self.new_tuple, "Insert.new_tuple")
        return bytes(out)

    @classmethod
    def decode_body(cls, buf: bytes, pos: int, xid: int | None) -> PgOutputMessage:
        _need(buf, pos, 5, cls, "the relation OID and 'N'")
        relation_oid, action = _OID_ACTION.unpack_from(buf, pos)
        if action != _N:
            raise DecodeError(cls.NAME, pos + 4, f"expected 'N', found {bytes([action])!r}")
        new_tuple, pos = read_tuple(buf, pos + 5, cls.NAME)
        trailing(buf, pos, cls.NAME)
        return cls._make(relation_oid, new_tuple, xid)


@dataclass(frozen=True, slots=True)
class Update(PgOutputMessage):
    """A changed row.

    ``key_tuple`` ('K') holds the old replica identity columns when the update changed
    them; ``old_tuple`` ('O') holds the whole old row under REPLICA IDENTITY FULL. At
    most one of the two is set; often neither is.
    """

    TAG: ClassVar[bytes] = b"U"
    STREAMABLE: ClassVar[bool] = True
    relation_oid: int
    new_tuple: TupleData
    key_tuple: TupleData | None = None
    old_tuple: TupleData | None = None
    xid: int | None = field(default=None, kw_only=True)

    def _encode(self) -> bytes:
        out = bytearray(b"U")
        out += self._xid_prefix()
        out += _OID.pack(self.relation_oid)
        if self.key_tuple is not None:
            if self.old_tuple is not None:
                raise EncodeError("Update can carry key_tuple or old_tuple, not both")
            out.append(_K)
            write_tuple(out, self.key_tuple, "Update.key_tuple")
        elif self.old_tuple is not None:
            out.append(_O)
            write_tuple(out, self.old_tuple, "Update.old_tuple")
        out.append(_N)
        write_tuple(out, self.new_tuple, "Update.new_tuple")
        return bytes(out)

    @classmethod
    def decode_body(cls, buf: bytes, pos: int, xid: int | None) -> PgOutputMessage:
        what = cls.NAME
        _need(buf, pos, 5, cls, "the relation OID and 'K', 'O' or 'N'")
        relation_oid, action = _OID_ACTION.unpack_from(buf, pos)
        pos += 5
        key_tuple = old_tuple = None
        if action in (_K, _O):
            old, pos = read_tuple(buf, pos, what)
            if action == _K:
                key_tuple = old
            else:
                old_tuple = old
            _need(buf, pos, 1, cls, "'N'")
            action = buf[pos]
            pos += 1
            if action != _N:
                raise DecodeError(what, pos - 1, f"expected 'N', found {bytes([action])!r}")
        elif action != _N:
            raise DecodeError(what, pos - 1, f"expected 'K', 'O' or 'N', found {bytes([action])!r}")
        new_tuple, pos = read_tuple(buf, pos, what)
        trailing(buf, pos, what)
        return cls._make(relation_oid, new_tuple, key_tuple, old_tuple, xid)


@dataclass(frozen=True, slots=True)
class Delete(PgOutputMessage):
    """A deleted row: exactly one of ``key_tuple`` ('K') and ``old_tuple`` ('O') is set."""

    TAG: ClassVar[bytes] = b"D"
    STREAMABLE: ClassVar[bool] = True
    relation_oid: int
    key_tuple: TupleData | None = None
    old_tuple: TupleData | None = None
    xid: int | None = field(default=None, kw_only=True)

    def _encode(self) -> bytes:
        out = bytearray(b"D")
        out += self._xid_prefix()
        out += _OID.pack(self.relation_oid)
        if (self.key_tuple is None) == (self.old_tuple is None):
            raise EncodeError("Delete needs exactly one of key_tuple and old_tuple")
        if self.key_tuple is not None:
            out.append(_K)
            write_tuple(out, self.key_tuple, "Delete.key_tuple")
        else:
            assert self.old_tuple is not None
            out.append(_O)
            write_tuple(out, self.old_tuple, "Delete.old_tuple")
        return bytes(out)

    @classmethod
    def decode_body(cls, buf: bytes, pos: int, xid: int | None) -> PgOutputMessage:
        what = cls.NAME
        _need(buf, pos, 5, cls, "the relation OID and 'K' or 'O'")
        relation_oid, action = _OID_ACTION.unpack_from(buf, pos)
        if action not in (_K, _O):
            raise DecodeError(what, pos + 4, f"expected 'K' or 'O', found {bytes([action])!r}")
        old, pos = read_tuple(buf, pos + 5, what)
        trailing(buf, pos, what)
        if action == _K:
            return cls._make(relation_oid, old, None, xid)
        return cls._make(relation_oid, None, old, xid)


@dataclass(frozen=True, slots=True)
class Truncate(PgOutputMessage):
    """TRUNCATE of one or more relations; ``options``: 1 = CASCADE, 2 = RESTART IDENTITY."""

    TAG: ClassVar[bytes] = b"T"
    STREAMABLE: ClassVar[bool] = True
    CASCADE: ClassVar[int] = 1
    RESTART_IDENTITY: ClassVar[int] = 2
    options: int
    relation_oids: tuple[int, ...]
    xid: int | None = field(default=None, kw_only=True)

    @property
    def cascade(self) -> bool:
        return bool(self.options & self.CASCADE)

    @property
    def restart_identity(self) -> bool:
        return bool(self.options & self.RESTART_IDENTITY)

    def _encode(self) -> bytes:
        if not 0 <= self.options <= 255:
            raise EncodeError(f"Truncate.options must be in [0, 255], got {self.options}")
        count = len(self.relation_oids)
        try:
            oids = _oid_array(count).pack(*self.relation_oids)
        except struct.error as err:
            raise EncodeError(
                f"Truncate.relation_oids must be OIDs in [0, 4294967295]: {err}"
            ) from err
        return b"T" + self._xid_prefix() + _TRUNCATE_HEAD.pack(count, self.options) + oids

    @classmethod
    def decode_body(cls, buf: bytes, pos: int, xid: int | None) -> PgOutputMessage:
        what = cls.NAME
        _need(buf, pos, 5, cls, "the relation count and option bits")
        count, options = _TRUNCATE_HEAD.unpack_from(buf, pos)
        pos += 5
        if count < 0:
            raise DecodeError(what, pos - 5, f"expected a relation count >= 0, found {count}")
        _need_exact(buf, pos, 4 * count, cls)
        oids = _oid_array(count).unpack_from(buf, pos)
        return cls._make(options, oids, xid)


@dataclass(frozen=True, slots=True)
class Message(PgOutputMessage):
    """A logical decoding message from ``pg_logical_emit_message`` (option ``messages``).

    ``flags`` bit 0 is set for a transactional message.
    """

    TAG: ClassVar[bytes] = b"M"
    STREAMABLE: ClassVar[bool] = True
    flags: int
    lsn: int
    prefix: str
    content: bytes
    xid: int | None = field(default=None, kw_only=True)

    @property
    def transactional(self) -> bool:
        return bool(self.flags & 1)

    def _encode(self) -> bytes:
        return (
            b"M"
            + self._xid_prefix()
            + _MESSAGE_HEAD.pack(self.flags, self.lsn)
            + cstring(self.prefix, "Message.prefix")
            + _CONTENT_LENGTH.pack(len(self.content))
            + bytes(self.content)
        )

    @classmethod
    def decode_body(cls, buf: bytes, pos: int, xid: int | None) -> PgOutputMessage:
        what = cls.NAME
        _need(buf, pos, 9, cls, "the flags and LSN")
        flags, lsn = _MESSAGE_HEAD.unpack_from(buf, pos)
        prefix, pos = read_cstring(buf, pos + 9, what, "prefix")
        _need(buf, pos, 4, cls, "the content length")
        (length,) = _CONTENT_LENGTH.unpack_from(buf, pos)
        pos += 4
        if length < 0:
            raise DecodeError(what, pos - 4, f"expected a content length >= 0, found {length}")
        _need_exact(buf, pos, length, cls)
        return cls._make(flags, lsn, prefix, buf[pos : pos + length], xid)


# --- streamed transactions (protocol 2+) -------------------------------------------------


@dataclass(frozen=True, slots=True)
class StreamStart(PgOutputMessage):
    """Start of a block of changes of a large in-progress transaction."""

    TAG: ClassVar[bytes] = b"S"
    xid: int
    first_segment: bool

    def _encode(self) -> bytes:
        return b"S" + _XID_FLAG.pack(
            self.xid, _check_bool(self.first_segment, "StreamStart.first_segment")
        )

    @classmethod
    def decode_body(cls, buf: bytes, pos: int, xid: int | None) -> PgOutputMessage:
        _need_exact(buf, pos, _XID_FLAG.size, cls)
        stream_xid, first = _XID_FLAG.unpack_from(buf, pos)
        if first > 1:
            raise DecodeError(cls.NAME, pos + 4, f"expected first_segment 0 or 1, found {first}")
        return cls._make(stream_xid, first == 1)


@dataclass(frozen=True, slots=True)
class StreamStop(PgOutputMessage):
    """End of a block of streamed changes."""

    TAG: ClassVar[bytes] = b"E"

    def _encode(self) -> bytes:
        return b"E"

    @classmethod
    def decode_body(cls, buf: bytes, pos: int, xid: int | None) -> PgOutputMessage:
        trailing(buf, pos, cls.NAME)
        return cls._make()


@dataclass(frozen=True, slots=True)
class StreamCommit(PgOutputMessage):
    """Commit of a streamed transaction; ``flags`` is currently always 0."""

    TAG: ClassVar[bytes] = b"c"
    xid: int
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_timestamp: int

    def _encode(self) -> bytes:
        return b"c" + _XID_FLAGS_LSN_LSN_TIME.pack(
            self.xid, self.flags, self.commit_lsn, self.end_lsn, self.commit_timestamp
        )

    @classmethod
    def decode_body(cls, buf: bytes, pos: int, xid: int | None) -> PgOutputMessage:
        _need_exact(buf, pos, _XID_FLAGS_LSN_LSN_TIME.size, cls)
        return cls._make(*_XID_FLAGS_LSN_LSN_TIME.unpack_from(buf, pos))


@dataclass(frozen=True, slots=True)
class StreamAbort(PgOutputMessage):
    """Abort of a streamed transaction, or of one of its subtransactions (``subxid``).

    With protocol 4 and ``streaming=parallel`` (PostgreSQL 16+) the server also sends
    the abort's LSN and timestamp; otherwise both are ``None``. The payload's length
    tells the two forms apart.
    """

    TAG: ClassVar[bytes] = b"A"
    xid: int
    subxid: int
    abort_lsn: int | None = None
    abort_timestamp: int | None = None

    def _encode(self) -> bytes:
        if self.abort_lsn is None and self.abort_timestamp is None:
            return b"A" + _XID_SUBXID.pack(self.xid, self.subxid)
        if self.abort_lsn is None or self.abort_timestamp is None:
            raise EncodeError("StreamAbort needs both abort_lsn and abort_timestamp, or neither")
        return b"A" + _XID_SUBXID_LSN_TIME.pack(
            self.xid, self.subxid, self.abort_lsn, self.abort_timestamp
        )

    @classmethod
    def decode_body(cls, buf: bytes, pos: int, xid: int | None) -> PgOutputMessage:
        left = len(buf) - pos
        if left == _XID_SUBXID.size:
            return cls._make(*_XID_SUBXID.unpack_from(buf, pos), None, None)
        if left == _XID_SUBXID_LSN_TIME.size:
            return cls._make(*_XID_SUBXID_LSN_TIME.unpack_from(buf, pos))
        raise DecodeError(
            cls.NAME,
            pos,
            f"expected 8 bytes (xid, subxid) or 24 (with abort LSN and timestamp), found {left}",
        )


# --- two-phase commit (protocol 3+) ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BeginPrepare(PgOutputMessage):
    """Start of a transaction that will be prepared (PREPARE TRANSACTION ``gid``)."""

    TAG: ClassVar[bytes] = b"b"
    prepare_lsn: int
    end_lsn: int
    prepare_timestamp: int
    xid: int
    gid: str

    def _encode(self) -> bytes:
        return (
            b"b"
            + _LSN_LSN_TIME_XID.pack(
                self.prepare_lsn, self.end_lsn, self.prepare_timestamp, self.xid
            )
            + cstring(self.gid, "BeginPrepare.gid")
        )

    @classmethod
    def decode_body(cls, buf: bytes, pos: int, xid: int | None) -> PgOutputMessage:
        what = cls.NAME
        _need(buf, pos, _LSN_LSN_TIME_XID.size, cls, "the fixed fields")
        prepare_lsn, end_lsn, prepare_timestamp, prepare_xid = _LSN_LSN_TIME_XID.unpack_from(
            buf, pos
        )
        gid, pos = read_cstring(buf, pos + _LSN_LSN_TIME_XID.size, what, "gid")
        trailing(buf, pos, what)
        return cls._make(prepare_lsn, end_lsn, prepare_timestamp, prepare_xid, gid)


class _PrepareLike(PgOutputMessage):
    """Prepare, Commit Prepared and Stream Prepare share one layout:
    flags, two LSNs, a timestamp, the xid and the gid."""

    __slots__ = ()

    def _fixed(self) -> tuple[int, int, int, int, int]:
        raise NotImplementedError

    def _encode(self) -> bytes:
        gid: str = getattr(self, "gid")  # noqa: B009 -- the dataclass subclasses define it
        return (
            self.TAG
            + _FLAGS_LSN_LSN_TIME_XID.pack(*self._fixed())
            + cstring(gid, f"{type(self).__name__}.gid")
        )

    @classmethod
    def decode_body(cls, buf: bytes, pos: int, xid: int | None) -> PgOutputMessage:
        what = cls.NAME
        _need(buf, pos, _FLAGS_LSN_LSN_TIME_XID.size, cls, "the fixed fields")
        fixed = _FLAGS_LSN_LSN_TIME_XID.unpack_from(buf, pos)
        gid, pos = read_cstring(buf, pos + _FLAGS_LSN_LSN_TIME_XID.size, what, "gid")
        trailing(buf, pos, what)
        return cls._make(*fixed, gid)


@dataclass(frozen=True, slots=True)
class Prepare(_PrepareLike):
    """PREPARE TRANSACTION: the prepared transaction's changes are complete."""

    TAG: ClassVar[bytes] = b"P"
    flags: int
    prepare_lsn: int
    end_lsn: int
    prepare_timestamp: int
    xid: int
    gid: str

    def _fixed(self) -> tuple[int, int, int, int, int]:
        return (self.flags, self.prepare_lsn, self.end_lsn, self.prepare_timestamp, self.xid)


@dataclass(frozen=True, slots=True)
class CommitPrepared(_PrepareLike):
    """COMMIT PREPARED of an earlier prepared transaction."""

    TAG: ClassVar[bytes] = b"K"
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_timestamp: int
    xid: int
    gid: str

    def _fixed(self) -> tuple[int, int, int, int, int]:
        return (self.flags, self.commit_lsn, self.end_lsn, self.commit_timestamp, self.xid)


@dataclass(frozen=True, slots=True)
class StreamPrepare(_PrepareLike):
    """PREPARE TRANSACTION of a streamed transaction."""

    TAG: ClassVar[bytes] = b"p"
    flags: int
    prepare_lsn: int
    end_lsn: int
    prepare_timestamp: int
    xid: int
    gid: str

    def _fixed(self) -> tuple[int, int, int, int, int]:
        return (self.flags, self.prepare_lsn, self.end_lsn, self.prepare_timestamp, self.xid)


@dataclass(frozen=True, slots=True)
class RollbackPrepared(PgOutputMessage):
    """ROLLBACK PREPARED of an earlier prepared transaction."""

    TAG: ClassVar[bytes] = b"r"
    flags: int
    prepare_end_lsn: int
    rollback_end_lsn: int
    prepare_timestamp: int
    rollback_timestamp: int
    xid: int
    gid: str

    def _encode(self) -> bytes:
        return (
            b"r"
            + _FLAGS_LSN_LSN_TIME_TIME_XID.pack(
                self.flags,
                self.prepare_end_lsn,
                self.rollback_end_lsn,
                self.prepare_timestamp,
                self.rollback_timestamp,
                self.xid,
            )
            + cstring(self.gid, "RollbackPrepared.gid")
        )

    @classmethod
    def decode_body(cls, buf: bytes, pos: int, xid: int | None) -> PgOutputMessage:
        what = cls.NAME
        _need(buf, pos, _FLAGS_LSN_LSN_TIME_TIME_XID.size, cls, "the fixed fields")
        flags, prepare_end, rollback_end, prepared_at, rolled_back_at, rollback_xid = (
            _FLAGS_LSN_LSN_TIME_TIME_XID.unpack_from(buf, pos)
        )
        gid, pos = read_cstring(buf, pos + _FLAGS_LSN_LSN_TIME_TIME_XID.size, what, "gid")
        trailing(buf, pos, what)
        return cls._make(
            flags, prepare_end, rollback_end, prepared_at, rolled_back_at, rollback_xid, gid
        )


# --- helpers ------------------------------------------------------------------------------


def _need(buf: bytes, pos: int, size: int, cls: type[PgOutputMessage], what: str) -> None:
    left = len(buf) - pos
    if left < size:
        raise DecodeError(cls.NAME, pos, f"expected {size} bytes of {what}, found {left}")


def _need_exact(buf: bytes, pos: int, size: int, cls: type[PgOutputMessage]) -> None:
    left = len(buf) - pos
    if left != size:
        raise DecodeError(cls.NAME, pos, f"expected exactly {size} more bytes, found {left}")


@functools.lru_cache(maxsize=64)
def _oid_array(count: int) -> struct.Struct:
    return struct.Struct(f"!{count}I")


def _fast_constructor(cls: type) -> Callable[..., Any]:
    """A function that builds ``cls`` from all its fields, positionally.

    A frozen dataclass's ``__init__`` assigns each field through
    ``object.__setattr__``; writing the slots through their descriptors instead is
    about 40% cheaper, which matters when a stream decodes millions of messages. The
    decoder uses it only with values it has just read, so nothing is left unvalidated.
    """
    names = [f.name for f in dataclasses.fields(cls)]
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    lines = [f"def make({', '.join(names)}):", "    obj = _new(_cls)"]
    for index, name in enumerate(names):
        namespace[f"_set{index}"] = getattr(cls, name).__set__
        lines.append(f"    _set{index}(obj, {name})")
    lines.append("    return obj")
    exec("\n".join(lines), namespace)  # the source is built from field names only
    return namespace["make"]  # type: ignore[no-any-return]


_make_column = _fast_constructor(RelationColumn)

MESSAGE_CLASSES: Final[tuple[type[PgOutputMessage], ...]] = (
    Begin,
    Message,
    Commit,
    Origin,
    Relation,
    Type,
    Insert,
    Update,
    Delete,
    Truncate,
    StreamStart,
    StreamStop,
    StreamCommit,
    StreamAbort,
    BeginPrepare,
    Prepare,
    CommitPrepared,
    RollbackPrepared,
    StreamPrepare,
)

for _cls in MESSAGE_CLASSES:
    _cls.NAME = _name(_cls)
    _cls._make = _fast_constructor(_cls)
