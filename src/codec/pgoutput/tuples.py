"""TupleData: the column values carried by Insert, Update and Delete.

A decoded tuple is a plain Python tuple with one entry per column, whose *type* says
which of the four column kinds PostgreSQL sent (``proto.c``, ``logicalrep_write_tuple``):

======================  =====  ==============================================
Python value            kind   meaning
======================  =====  ==============================================
``None``                ``n``  SQL NULL
``UNCHANGED_TOAST``     ``u``  an unchanged TOASTed value the server did not send
``str``                 ``t``  the value in text format (the type's output function)
``bytes``               ``b``  the value in binary format (the type's send function)
======================  =====  ==============================================

Text values are decoded as UTF-8 with ``surrogateescape``, so bytes from a database in
another encoding (SQL_ASCII holds anything) still decode, and encode back byte for byte.
Turning a value into a typed Python object is :mod:`codec.values`' job, given the
column's type OID from the Relation message.
"""

from __future__ import annotations

import struct
from typing import Final, TypeAlias

from codec._buffer import INT16_MAX, INT32_MAX
from codec.errors import DecodeError, EncodeError

__all__ = ["UNCHANGED_TOAST", "ColumnValue", "TupleData", "UnchangedToast"]


class UnchangedToast:
    """The type of :data:`UNCHANGED_TOAST`: a column PostgreSQL left out as unchanged."""

    __slots__ = ()
    _instance: UnchangedToast | None = None

    def __new__(cls) -> UnchangedToast:
        # One instance, so ``value is UNCHANGED_TOAST`` works even after unpickling.
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"

    def __reduce__(self) -> str:
        return "UNCHANGED_TOAST"


UNCHANGED_TOAST: Final = UnchangedToast()

ColumnValue: TypeAlias = str | bytes | UnchangedToast | None
TupleData: TypeAlias = tuple[ColumnValue, ...]

_COUNT = struct.Struct("!h")
_LENGTH = struct.Struct("!i")

_NULL = ord("n")
_TOAST = ord("u")
_TEXT = ord("t")
_BINARY = ord("b")


def read_tuple(buf: bytes, pos: int, message_type: str) -> tuple[TupleData, int]:
    """Decode a TupleData at ``pos``; return it and the offset just after it."""
    size = len(buf)
    if pos + 2 > size:
        raise DecodeError(
            message_type, pos, f"expected a 2-byte column count, found {max(size - pos, 0)} bytes"
        )
    (count,) = _COUNT.unpack_from(buf, pos)
    if count < 0:
        raise DecodeError(message_type, pos, f"expected a column count >= 0, found {count}")
    pos += 2
    values: list[ColumnValue] = []
    append = values.append
    length_at = _LENGTH.unpack_from
    # This loop is the decoder's hot path (one pass per column of every change), so it
    # lets buf[pos] and unpack_from raise on a short buffer and translates that once in
    # the handler below instead of testing the bounds before every read.
    try:
        for _ in range(count):
            kind = buf[pos]
            if kind == _TEXT:
                start = pos + 5
                pos = start + length_at(buf, pos + 1)[0]
                if pos > size or pos < start:
                    raise _bad_length(buf, start, message_type)
                append(buf[start:pos].decode("utf-8", "surrogateescape"))
            elif kind == _NULL:
                append(None)
                pos += 1
            elif kind == _BINARY:
                start = pos + 5
                pos = start + length_at(buf, pos + 1)[0]
                if pos > size or pos < start:
                    raise _bad_length(buf, start, message_type)
                append(buf[start:pos])
            elif kind == _TOAST:
                append(UNCHANGED_TOAST)
                pos += 1
            else:
                raise DecodeError(
                    message_type, pos, f"expected a column kind n/u/t/b, found {bytes([kind])!r}"
                )
    except IndexError:
        raise DecodeError(
            message_type, pos, f"expected column {len(values)} of {count}, found end of data"
        ) from None
    except struct.error:
        raise DecodeError(
            message_type, pos + 1, "expected a 4-byte column value length, found end of data"
        ) from None
    return tuple(values), pos


def _bad_length(buf: bytes, start: int, message_type: str) -> DecodeError:
    (length,) = _LENGTH.unpack_from(buf, start - 4)
    return DecodeError(
        message_type,
        start - 4,
        f"column value length {length} does not fit the {len(buf) - start} bytes left",
    )


def write_tuple(out: bytearray, values: TupleData, what: str) -> None:
    """Append ``values`` as TupleData to ``out``."""
    if len(values) > INT16_MAX:
        raise EncodeError(f"{what} has {len(values)} columns; at most {INT16_MAX} fit")
    out += _COUNT.pack(len(values))
    for index, value in enumerate(values):
        if isinstance(value, str):
            try:
                data = value.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError as err:
                raise EncodeError(f"{what} column {index} is not encodable text: {err}") from err
            kind = b"t"
        elif isinstance(value, bytes | bytearray | memoryview):
            data = bytes(value)
            kind = b"b"
        elif value is None:
            out += b"n"
            continue
        elif value is UNCHANGED_TOAST:
            out += b"u"
            continue
        else:
            raise EncodeError(
                f"{what} column {index} must be str, bytes, None or UNCHANGED_TOAST, "
                f"not {type(value).__name__}"
            )
        if len(data) > INT32_MAX:
            raise EncodeError(f"{what} column {index} is longer than {INT32_MAX} bytes")
        out += kind
        out += _LENGTH.pack(len(data))
        out += data
