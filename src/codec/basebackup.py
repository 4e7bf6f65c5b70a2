"""BASE_BACKUP's CopyData payloads on PostgreSQL 15+ (one COPY OUT for the whole backup).

Since 15 the server sends every archive and the manifest in a single CopyOutResponse
stream; each CopyData payload starts with a type byte (``basebackup_copy.c``, read back by
``ReceiveArchiveStreamChunk`` in ``pg_basebackup.c``):

* ``'n'`` NewArchive: archive name and tablespace location, both NUL-terminated strings
  (the location is empty for the main data directory);
* ``'m'`` ManifestStart: nothing else; the manifest's bytes follow as ``'d'`` messages;
* ``'d'`` ArchiveData: a chunk of the current archive, or of the manifest after ``'m'``;
* ``'p'`` Progress: bytes done so far, 8 bytes (``pq_sendint64`` of a uint64; the client
  reads it with ``GetCopyDataUInt64``).

The strings are the server's bytes; a tablespace path need not be UTF-8, so they are
decoded with ``surrogateescape`` and encoded back the same way: any bytes without a NUL
decode, and encoding what was decoded gives the same bytes. DecodeError offsets count from
the payload's type byte.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Final, Self

from codec._buffer import UINT64_MAX, check_range
from codec.errors import DecodeError, EncodeError

__all__ = [
    "REGISTRY",
    "ArchiveData",
    "BaseBackupMessage",
    "ManifestStart",
    "NewArchive",
    "Progress",
    "decode",
    "encode",
]

_PROGRESS: Final = struct.Struct("!BQ")  # 9 bytes, tag included


def _string(payload: bytes, pos: int, mt: str, what: str) -> tuple[str, int]:
    end = payload.find(b"\0", pos)
    if end < 0:
        raise DecodeError(mt, pos, f"expected a NUL-terminated {what}, found no NUL")
    return payload[pos:end].decode("utf-8", "surrogateescape"), end + 1


def _cstring(value: str, what: str) -> bytes:
    try:
        data = value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as err:
        raise EncodeError(f"{what} cannot be encoded: {err}") from err
    if b"\0" in data:
        raise EncodeError(f"{what} must not contain a NUL character: {value!r}")
    return data + b"\0"


@dataclass(frozen=True, slots=True)
class NewArchive:
    """'n': the next archive starts (``base.tar``, ``<oid>.tar``...)."""

    TAG: ClassVar[bytes] = b"n"
    archive_name: str
    tablespace_location: str = ""
    """Empty for the data directory itself (pg_basebackup treats "" as no location)."""

    def encode(self) -> bytes:
        return (
            b"n"
            + _cstring(self.archive_name, "archive_name")
            + _cstring(self.tablespace_location, "tablespace_location")
        )

    @classmethod
    def decode(cls, payload: bytes | memoryview) -> Self:
        mt = "BASE_BACKUP NewArchive ('n')"
        data = bytes(payload)
        name, pos = _string(data, 1, mt, "archive name")
        location, pos = _string(data, pos, mt, "tablespace location")
        if pos != len(data):
            raise DecodeError(
                mt, pos, f"expected end of message, found {len(data) - pos} more bytes"
            )
        return cls(name, location)


@dataclass(frozen=True, slots=True)
class ManifestStart:
    """'m': the archives are done; the backup manifest follows as ArchiveData."""

    TAG: ClassVar[bytes] = b"m"

    def encode(self) -> bytes:
        return b"m"

    @classmethod
    def decode(cls, payload: bytes | memoryview) -> Self:
        if len(payload) != 1:
            raise DecodeError(
                "BASE_BACKUP ManifestStart ('m')",
                1,
                f"expected end of message, found {len(payload) - 1} more bytes",
            )
        return cls()


@dataclass(frozen=True, slots=True)
class ArchiveData:
    """'d': bytes of the current archive (or of the manifest, after ManifestStart)."""

    TAG: ClassVar[bytes] = b"d"
    data: bytes

    def encode(self) -> bytes:
        return b"d" + bytes(self.data)

    @classmethod
    def decode(cls, payload: bytes | memoryview) -> Self:
        return cls(bytes(payload[1:]))


@dataclass(frozen=True, slots=True)
class Progress:
    """'p': how many bytes of the backup the server has sent so far."""

    TAG: ClassVar[bytes] = b"p"
    bytes_done: int

    def encode(self) -> bytes:
        check_range(self.bytes_done, 0, UINT64_MAX, "bytes_done")
        return _PROGRESS.pack(0x70, self.bytes_done)

    @classmethod
    def decode(cls, payload: bytes | memoryview) -> Self:
        if len(payload) != _PROGRESS.size:
            raise DecodeError(
                "BASE_BACKUP Progress ('p')",
                min(len(payload), _PROGRESS.size),
                f"expected exactly {_PROGRESS.size} bytes, found {len(payload)}",
            )
        return cls(_PROGRESS.unpack_from(payload)[1])


BaseBackupMessage = NewArchive | ManifestStart | ArchiveData | Progress

#: Tag byte -> class, for the CopyData payloads of a 15+ BASE_BACKUP.
REGISTRY: Final[dict[bytes, type[BaseBackupMessage]]] = {
    cls.TAG: cls for cls in (NewArchive, ManifestStart, ArchiveData, Progress)
}
_DECODERS: Final[dict[int, Callable[[bytes | memoryview], BaseBackupMessage]]] = {
    cls.TAG[0]: cls.decode for cls in REGISTRY.values()
}


def decode(payload: bytes | memoryview) -> BaseBackupMessage:
    """Decode one CopyData payload of a BASE_BACKUP stream (15+)."""
    mt = "BASE_BACKUP message"
    if not payload:
        raise DecodeError(mt, 0, "expected 'n', 'm', 'd' or 'p', found nothing")
    decoder = _DECODERS.get(payload[0])
    if decoder is None:
        raise DecodeError(mt, 0, f"expected 'n', 'm', 'd' or 'p', found {bytes((payload[0],))!r}")
    return decoder(payload)


def encode(message: BaseBackupMessage) -> bytes:
    """The CopyData payload for ``message`` (wrap it in ``codec.wire.CopyData`` to send)."""
    return message.encode()
