"""COPY's row formats: the CopyData payloads of ``COPY … TO STDOUT`` (and ``FROM STDIN``).

Text format (copyto.c, ``CopyAttributeOutText``): one row per CopyData, columns joined
by a tab, ``\\N`` for NULL, a newline at the end; a backslash, backspace, form feed,
newline, carriage return, tab and vertical tab inside a value are written as ``\\\\``,
``\\b``, ``\\f``, ``\\n``, ``\\r``, ``\\t`` and ``\\v``. Binary format (``FORMAT binary``):
an 11-byte signature, 32-bit flags and header-extension length before the first row, then
per row a 16-bit field count and each field as a 32-bit length (-1: NULL) and the type's
binary send form, and a 16-bit -1 after the last row. PostgreSQL puts the header in the
same CopyData as the first row (or the trailer, for no rows), and the trailer in a
CopyData of its own.

>>> encode_text_row([b"1", None, b"a\\tb"])
b'1\\t\\\\N\\ta\\\\tb\\n'
>>> decode_text_row(b'1\\t\\\\N\\ta\\\\tb\\n')
(b'1', None, b'a\\tb')
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import Final

from codec.errors import DecodeError

__all__ = [
    "BINARY_SIGNATURE",
    "BINARY_TRAILER",
    "binary_header",
    "decode_binary",
    "decode_text_row",
    "encode_binary_row",
    "encode_text_row",
]

BINARY_SIGNATURE: Final = b"PGCOPY\n\xff\r\n\x00"
BINARY_TRAILER: Final = b"\xff\xff"

_ESCAPES: Final = {
    ord("\\"): b"\\\\",
    ord("\b"): b"\\b",
    ord("\f"): b"\\f",
    ord("\n"): b"\\n",
    ord("\r"): b"\\r",
    ord("\t"): b"\\t",
    ord("\v"): b"\\v",
}
_NEEDS_ESCAPE: Final = bytes(_ESCAPES)
_UNESCAPES: Final = {b"b": b"\b", b"f": b"\f", b"n": b"\n", b"r": b"\r", b"t": b"\t", b"v": b"\v"}
_INT16: Final = struct.Struct("!h")
_INT32: Final = struct.Struct("!i")


def _error(offset: int, reason: str) -> DecodeError:
    return DecodeError("COPY data", offset, reason)


def _escape(value: bytes) -> bytes:
    if not any(b in _NEEDS_ESCAPE for b in value):
        return value
    return b"".join(_ESCAPES.get(b, bytes((b,))) for b in value)


def encode_text_row(values: Sequence[bytes | None]) -> bytes:
    """One row in COPY's text format (values in the types' text output form)."""
    return b"\t".join(b"\\N" if v is None else _escape(v) for v in values) + b"\n"


def decode_text_row(line: bytes) -> tuple[bytes | None, ...]:
    """A text-format row back into values (``\\N`` → None); raises DecodeError.

    Besides the escapes COPY TO writes, COPY FROM's octal (``\\NNN``) and hex
    (``\\xHH``) escapes are read too, and a backslash before any other byte stands for it.
    """
    if not line.endswith(b"\n"):
        raise _error(len(line), "a COPY text row ends with a newline")
    out: list[bytes | None] = []
    for field_start, raw in _fields(line[:-1]):
        if raw == b"\\N":
            out.append(None)
        else:
            out.append(_unescape(raw, field_start))
    return tuple(out)


def _fields(body: bytes) -> Iterator[tuple[int, bytes]]:
    start = 0
    while True:
        tab = body.find(b"\t", start)
        if tab < 0:
            yield start, body[start:]
            return
        yield start, body[start:tab]
        start = tab + 1


def _unescape(raw: bytes, offset: int) -> bytes:
    if b"\\" not in raw:
        return raw
    out = bytearray()
    i, n = 0, len(raw)
    while i < n:
        b = raw[i]
        if b != 0x5C:  # a backslash
            out.append(b)
            i += 1
            continue
        if i + 1 >= n:
            raise _error(offset + i, "a COPY text value ends with a backslash")
        c = raw[i + 1 : i + 2]
        if c in _UNESCAPES:
            out += _UNESCAPES[c]
            i += 2
        elif c in b"01234567":
            j = i + 1
            while j < n and j < i + 4 and raw[j] in b"01234567":
                j += 1
            out.append(int(raw[i + 1 : j], 8) & 0xFF)
            i = j
        elif c == b"x" and i + 2 < n and raw[i + 2 : i + 3] in b"0123456789abcdefABCDEF":
            j = i + 2
            while j < n and j < i + 4 and raw[j : j + 1] in b"0123456789abcdefABCDEF":
                j += 1
            out.append(int(raw[i + 2 : j], 16))
            i = j
        else:
            out += c
            i += 2
    return bytes(out)


def binary_header() -> bytes:
    """What precedes the first binary row: signature, flags 0, no header extension."""
    return BINARY_SIGNATURE + _INT32.pack(0) + _INT32.pack(0)


def encode_binary_row(values: Sequence[bytes | None]) -> bytes:
    """One row in COPY's binary format (values in the types' binary send form)."""
    parts = [_INT16.pack(len(values))]
    for v in values:
        parts.append(_INT32.pack(-1) if v is None else _INT32.pack(len(v)) + v)
    return b"".join(parts)


def decode_binary(data: bytes) -> Iterator[tuple[bytes | None, ...]]:
    """The rows of a whole binary COPY stream (header to trailer); raises DecodeError."""
    if not data.startswith(BINARY_SIGNATURE):
        raise _error(0, "not a binary COPY signature")
    pos = len(BINARY_SIGNATURE)
    if len(data) < pos + 8:
        raise _error(pos, "binary COPY header cut short")
    (extension,) = _INT32.unpack_from(data, pos + 4)
    if extension < 0:
        raise _error(pos + 4, "negative header extension length")
    pos += 8 + extension
    while True:
        if pos + 2 > len(data):
            raise _error(pos, "binary COPY data without its trailer")
        (count,) = _INT16.unpack_from(data, pos)
        pos += 2
        if count == -1:
            if pos != len(data):
                raise _error(pos, "bytes after the binary COPY trailer")
            return
        if count < 0:
            raise _error(pos - 2, f"bad field count {count}")
        row: list[bytes | None] = []
        for _ in range(count):
            if pos + 4 > len(data):
                raise _error(pos, "binary COPY field cut short")
            (length,) = _INT32.unpack_from(data, pos)
            pos += 4
            if length == -1:
                row.append(None)
                continue
            if length < 0 or pos + length > len(data):
                raise _error(pos - 4, f"bad field length {length}")
            row.append(data[pos : pos + length])
            pos += length
        yield tuple(row)
