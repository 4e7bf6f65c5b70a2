"""Bounds-checked primitives shared by every decoder and encoder in the codec.

Decoders read with :mod:`struct` at explicit offsets, checking every length against
what is left *before* reading or allocating, so a lying length field becomes a
:class:`DecodeError` and never an ``IndexError``, ``struct.error`` or a huge buffer.
"""

from __future__ import annotations

import struct
from typing import Final

from codec.errors import DecodeError, EncodeError

INT8: Final = struct.Struct("!b")
UINT8: Final = struct.Struct("!B")
INT16: Final = struct.Struct("!h")
UINT16: Final = struct.Struct("!H")
INT32: Final = struct.Struct("!i")
UINT32: Final = struct.Struct("!I")
INT64: Final = struct.Struct("!q")
UINT64: Final = struct.Struct("!Q")

INT16_MAX: Final = (1 << 15) - 1
INT32_MAX: Final = (1 << 31) - 1
UINT32_MAX: Final = (1 << 32) - 1
UINT64_MAX: Final = (1 << 64) - 1


def need(buf: bytes | memoryview, pos: int, size: int, message_type: str, what: str) -> None:
    """Raise unless ``size`` bytes of ``what`` are left at ``pos``."""
    if size < 0:
        raise DecodeError(message_type, pos, f"negative length {size} for {what}")
    left = len(buf) - pos
    if left < size:
        raise DecodeError(
            message_type, pos, f"expected {size} bytes of {what}, found {max(left, 0)}"
        )


def read_cstring(buf: bytes, pos: int, message_type: str, what: str) -> tuple[str, int]:
    """Read a NUL-terminated UTF-8 string; return it and the offset after the NUL."""
    end = buf.find(b"\0", pos)
    if end < 0:
        raise DecodeError(message_type, pos, f"expected a NUL-terminated {what}, found no NUL")
    try:
        return buf[pos:end].decode(), end + 1
    except UnicodeDecodeError as err:
        raise DecodeError(message_type, pos + err.start, f"{what} is not valid UTF-8") from err


def cstring(value: str, what: str) -> bytes:
    """Encode ``value`` as a NUL-terminated UTF-8 string."""
    data = value.encode()
    if b"\0" in data:
        raise EncodeError(f"{what} must not contain a NUL character: {value!r}")
    return data + b"\0"


def check_range(value: int, low: int, high: int, what: str) -> None:
    """Raise :class:`EncodeError` unless ``low <= value <= high``."""
    if not low <= value <= high:
        raise EncodeError(f"{what} must be in [{low}, {high}], got {value}")


def trailing(buf: bytes | memoryview, pos: int, message_type: str) -> None:
    """Raise if anything is left after a complete message body."""
    if pos != len(buf):
        raise DecodeError(
            message_type, pos, f"expected end of message, found {len(buf) - pos} more bytes"
        )
