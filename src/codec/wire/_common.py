"""Framing helpers and the messages both directions share (CopyData, CopyDone).

Every message class decodes its *body* with offsets counted from the first body byte;
the dispatchers in :mod:`codec.wire.reader` then shift the offset of any
:class:`DecodeError` so that, to the user, offsets count from the type byte (typed
messages: the first body byte is offset 5) or from the length word (untyped startup
packets: the request code is offset 4).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar, Final, Self

from codec._buffer import INT16, INT32, INT32_MAX, UINT16, check_range, need
from codec.errors import DecodeError, EncodeError

_pack_int32 = INT32.pack

#: Bytes before the body of a typed message: type byte + int32 length word.
TYPED_HEADER_SIZE: Final = 5
#: Bytes before the body of an untyped startup packet: the int32 length word.
UNTYPED_HEADER_SIZE: Final = 4


def frame(tag: bytes, body: bytes) -> bytes:
    """Return the typed message ``tag`` + int32 length (counting itself) + ``body``."""
    if len(body) > INT32_MAX - 4:
        raise EncodeError(f"message {tag!r} body of {len(body)} bytes does not fit an int32 length")
    return tag + _pack_int32(len(body) + 4) + body


def frame_untyped(body: bytes) -> bytes:
    """Return the startup-phase packet: int32 length (counting itself) + ``body``."""
    return _pack_int32(len(body) + 4) + body


def shift_error(err: DecodeError, direction: str, delta: int) -> DecodeError:
    """Re-base a body-relative error onto the framed message and name the direction."""
    return DecodeError(f"{direction} {err.message_type}", err.offset + delta, err.reason)


def pack_uint16_count(count: int, what: str) -> bytes:
    """Pack an element count; PostgreSQL reads these as unsigned 16-bit (pq_getmsgint(.., 2))."""
    check_range(count, 0, 0xFFFF, f"number of {what}")
    return UINT16.pack(count)


def pack_int16_array(values: Iterable[int], what: str) -> bytes:
    """Pack a uint16 count followed by that many int16 values (format codes)."""
    items = tuple(values)
    out = [pack_uint16_count(len(items), what)]
    for value in items:
        check_range(value, -0x8000, 0x7FFF, what)
        out.append(INT16.pack(value))
    return b"".join(out)


def unpack_int16_array(body: bytes, pos: int, mt: str, what: str) -> tuple[tuple[int, ...], int]:
    """Read a uint16 count and that many int16 values; return them and the next offset."""
    need(body, pos, 2, mt, f"number of {what}")
    (count,) = UINT16.unpack_from(body, pos)
    pos += 2
    need(body, pos, 2 * count, mt, f"{count} {what}")
    values: tuple[int, ...] = array_struct("h", count).unpack_from(body, pos)
    return values, pos + 2 * count


@lru_cache(maxsize=128)
def array_struct(code: str, count: int) -> struct.Struct:
    """A cached ``struct.Struct`` for ``count`` big-endian integers of type ``code``."""
    return struct.Struct(f"!{count}{code}")


def pack_values(values: Iterable[bytes | None], what: str) -> bytes:
    """Pack a uint16 count and length-prefixed values, -1 standing for NULL."""
    items = tuple(values)
    out = [pack_uint16_count(len(items), what)]
    for value in items:
        if value is None:
            out.append(b"\xff\xff\xff\xff")
        else:
            if len(value) > INT32_MAX:
                raise EncodeError(f"{what} value of {len(value)} bytes does not fit an int32")
            out.append(_pack_int32(len(value)))
            out.append(bytes(value))
    return b"".join(out)


def unpack_values(
    body: bytes, pos: int, mt: str, what: str
) -> tuple[tuple[bytes | None, ...], int]:
    """Read a uint16 count and that many int32-length-prefixed values (-1 is NULL)."""
    need(body, pos, 2, mt, f"number of {what}")
    (count,) = UINT16.unpack_from(body, pos)
    pos += 2
    end_of_body = len(body)
    unpack_int32 = INT32.unpack_from
    values: list[bytes | None] = []
    append = values.append
    for index in range(count):
        if pos + 4 > end_of_body:
            raise DecodeError(
                mt, pos, f"expected the length of {what} #{index}, found {end_of_body - pos} bytes"
            )
        (size,) = unpack_int32(body, pos)
        pos += 4
        if size == -1:
            append(None)
            continue
        if size < 0:
            raise DecodeError(mt, pos - 4, f"expected -1 or a length >= 0 for {what}, found {size}")
        end = pos + size
        if end > end_of_body:
            raise DecodeError(
                mt, pos, f"expected {size} bytes of {what} #{index}, found {end_of_body - pos}"
            )
        append(body[pos:end])
        pos = end
    return tuple(values), pos


@dataclass(frozen=True, slots=True)
class CopyData:
    """'d', both directions: a chunk of COPY data (or a replication payload)."""

    TAG: ClassVar[bytes] = b"d"
    data: bytes

    def encode(self) -> bytes:
        return frame(b"d", bytes(self.data))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        return cls(body)


_COPY_DONE: Final = frame(b"c", b"")


@dataclass(frozen=True, slots=True)
class CopyDone:
    """'c', both directions: the sender has no more COPY data."""

    TAG: ClassVar[bytes] = b"c"

    def encode(self) -> bytes:
        return _COPY_DONE

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        if body:
            raise DecodeError(
                "CopyDone ('c')", 0, f"expected an empty body, found {len(body)} bytes"
            )
        return cls()


# --- cancel keys (BackendKeyData, CancelRequest) ---------------------------------------

#: Protocol 3.2 allows a secret key of 4 to 256 bytes ("BackendKeyData" in the docs);
#: PostgreSQL 18 sends 32 (MAX_CANCEL_KEY_LENGTH in storage/procsignal.h) when the
#: client asked for 3.2 or newer, and 4 otherwise. Protocol 3.0 keys are an Int32.
MIN_SECRET_KEY_LENGTH: Final = 4
MAX_SECRET_KEY_LENGTH: Final = 256

#: A cancel key: an ``int`` is a 4-byte key read as a signed Int32 (the protocol 3.0
#: form, all that PostgreSQL 14-17 send), ``bytes`` a longer one (5 to 256 bytes).
#: Keeping 4-byte keys as ints lets code written for 3.0 compare keys unchanged.
SecretKey = int | bytes


def normalize_secret_key(key: SecretKey) -> SecretKey:
    """The one representation of ``key``: 4 bytes become the signed Int32 they spell."""
    if isinstance(key, int):
        return key
    key = bytes(key)
    if len(key) == MIN_SECRET_KEY_LENGTH:
        value: int = INT32.unpack(key)[0]
        return value
    return key


def secret_key_bytes(key: SecretKey) -> bytes:
    """The key as it goes on the wire (an int as its 4 big-endian bytes)."""
    if isinstance(key, int):
        check_range(key, -(1 << 31), INT32_MAX, "secret_key")
        return _pack_int32(key)
    if not MIN_SECRET_KEY_LENGTH <= len(key) <= MAX_SECRET_KEY_LENGTH:
        raise EncodeError(
            f"secret_key must be {MIN_SECRET_KEY_LENGTH} to {MAX_SECRET_KEY_LENGTH} bytes, "
            f"got {len(key)}"
        )
    return bytes(key)


def unpack_secret_key(body: bytes, pos: int, mt: str) -> SecretKey:
    """Read a secret key that runs from ``pos`` to the end of ``body``."""
    size = len(body) - pos
    if not MIN_SECRET_KEY_LENGTH <= size <= MAX_SECRET_KEY_LENGTH:
        raise DecodeError(
            mt,
            pos,
            f"expected a secret key of {MIN_SECRET_KEY_LENGTH} to {MAX_SECRET_KEY_LENGTH} "
            f"bytes, found {size}",
        )
    if size == MIN_SECRET_KEY_LENGTH:
        value: int = INT32.unpack_from(body, pos)[0]
        return value
    return body[pos:]


def empty_body(body: bytes, mt: str) -> None:
    """Raise unless a message that carries no fields has an empty body."""
    if body:
        raise DecodeError(mt, 0, f"expected an empty body, found {len(body)} bytes")
