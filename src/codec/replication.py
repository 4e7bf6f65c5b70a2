"""Streaming replication CopyData payloads (PostgreSQL docs, "Streaming Replication
Protocol"): the bytes *inside* CopyData once START_REPLICATION has switched the
connection to CopyBoth mode.

The server sends XLogData ('w') and PrimaryKeepalive ('k'); the client sends
StandbyStatusUpdate ('r') and HotStandbyFeedback ('h'). Each direction has its own
registry: the same bytes mean other things in pgoutput ('r' is Rollback Prepared there)
and on the wire. LSNs are unsigned 64-bit ints; times are signed microseconds since
2000-01-01 00:00 UTC (TimestampTz). DecodeError offsets count from the payload's type
byte.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Final, Self

from codec._buffer import UINT32_MAX, UINT64_MAX, check_range
from codec.errors import DecodeError

__all__ = [
    "CLIENT_REGISTRY",
    "SERVER_REGISTRY",
    "ClientCopyData",
    "HotStandbyFeedback",
    "PrimaryKeepalive",
    "ReplicationMessage",
    "ServerCopyData",
    "StandbyStatusUpdate",
    "XLogData",
    "decode_client_copy_data",
    "decode_server_copy_data",
    "encode",
    "split_xlog_data",
]

_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1

# Whole fixed layouts, tag included, so that each decode is one unpack call.
_XLOG_HEADER: Final = struct.Struct("!BQQq")  # 25 bytes, then the WAL data
_KEEPALIVE: Final = struct.Struct("!BQqB")  # 18 bytes
_STATUS_UPDATE: Final = struct.Struct("!BQQQqB")  # 34 bytes
_FEEDBACK: Final = struct.Struct("!BqIIII")  # 25 bytes
# A CopyData ('d') frame carrying XLogData: 'd', length word, then the 25-byte header.
_COPY_XLOG: Final = struct.Struct("!BIBQQq")
_COPY_XLOG_MIN_LENGTH: Final = 4 + _XLOG_HEADER.size


def _reply_flag(value: int, mt: str, offset: int) -> bool:
    # PostgreSQL only ever writes 0 or 1 here; anything else is reported, not guessed,
    # so that decoding stays the exact inverse of encoding.
    if value > 1:
        raise DecodeError(mt, offset, f"expected 0 or 1 for reply_requested, found {value}")
    return value == 1


def _check_lsn(value: int, what: str) -> None:
    check_range(value, 0, UINT64_MAX, what)


def _check_time(value: int, what: str) -> None:
    check_range(value, _INT64_MIN, _INT64_MAX, what)


def _exact(payload: bytes | memoryview, size: int, mt: str) -> None:
    if len(payload) != size:
        raise DecodeError(
            mt, min(len(payload), size), f"expected exactly {size} bytes, found {len(payload)}"
        )


@dataclass(frozen=True, slots=True)
class XLogData:
    """'w': WAL data from ``wal_start``; with pgoutput, ``data`` is one pgoutput message."""

    TAG: ClassVar[bytes] = b"w"
    wal_start: int
    wal_end: int
    send_time: int
    data: bytes

    def encode(self) -> bytes:
        _check_lsn(self.wal_start, "wal_start")
        _check_lsn(self.wal_end, "wal_end")
        _check_time(self.send_time, "send_time")
        return _XLOG_HEADER.pack(0x77, self.wal_start, self.wal_end, self.send_time) + bytes(
            self.data
        )

    @classmethod
    def decode(cls, payload: bytes | memoryview) -> Self:
        if len(payload) < 25:
            raise DecodeError(
                "XLogData ('w')", len(payload), f"expected a 25-byte header, found {len(payload)}"
            )
        _, wal_start, wal_end, send_time = _XLOG_HEADER.unpack_from(payload)
        return cls(wal_start, wal_end, send_time, bytes(payload[25:]))


@dataclass(frozen=True, slots=True)
class PrimaryKeepalive:
    """'k': the server's WAL end and clock; ``reply_requested`` asks for a status update."""

    TAG: ClassVar[bytes] = b"k"
    wal_end: int
    send_time: int
    reply_requested: bool = False

    def encode(self) -> bytes:
        _check_lsn(self.wal_end, "wal_end")
        _check_time(self.send_time, "send_time")
        return _KEEPALIVE.pack(0x6B, self.wal_end, self.send_time, 1 if self.reply_requested else 0)

    @classmethod
    def decode(cls, payload: bytes | memoryview) -> Self:
        mt = "PrimaryKeepalive ('k')"
        _exact(payload, 18, mt)
        _, wal_end, send_time, reply = _KEEPALIVE.unpack_from(payload)
        return cls(wal_end, send_time, _reply_flag(reply, mt, 17))


@dataclass(frozen=True, slots=True)
class StandbyStatusUpdate:
    """'r': how far the client has written, flushed and applied the WAL it received."""

    TAG: ClassVar[bytes] = b"r"
    written_lsn: int
    flushed_lsn: int
    applied_lsn: int
    send_time: int
    reply_requested: bool = False

    def encode(self) -> bytes:
        _check_lsn(self.written_lsn, "written_lsn")
        _check_lsn(self.flushed_lsn, "flushed_lsn")
        _check_lsn(self.applied_lsn, "applied_lsn")
        _check_time(self.send_time, "send_time")
        return _STATUS_UPDATE.pack(
            0x72,
            self.written_lsn,
            self.flushed_lsn,
            self.applied_lsn,
            self.send_time,
            1 if self.reply_requested else 0,
        )

    @classmethod
    def decode(cls, payload: bytes | memoryview) -> Self:
        mt = "StandbyStatusUpdate ('r')"
        _exact(payload, 34, mt)
        _, written, flushed, applied, send_time, reply = _STATUS_UPDATE.unpack_from(payload)
        return cls(written, flushed, applied, send_time, _reply_flag(reply, mt, 33))


@dataclass(frozen=True, slots=True)
class HotStandbyFeedback:
    """'h': the standby's xmin and catalog_xmin (0 turns feedback off), with epochs."""

    TAG: ClassVar[bytes] = b"h"
    send_time: int
    xmin: int
    xmin_epoch: int
    catalog_xmin: int
    catalog_xmin_epoch: int

    def encode(self) -> bytes:
        _check_time(self.send_time, "send_time")
        for name in ("xmin", "xmin_epoch", "catalog_xmin", "catalog_xmin_epoch"):
            # TransactionIds and epochs are uint32 (walreceiver.c sends them unsigned).
            check_range(getattr(self, name), 0, UINT32_MAX, name)
        return _FEEDBACK.pack(
            0x68,
            self.send_time,
            self.xmin,
            self.xmin_epoch,
            self.catalog_xmin,
            self.catalog_xmin_epoch,
        )

    @classmethod
    def decode(cls, payload: bytes | memoryview) -> Self:
        _exact(payload, 25, "HotStandbyFeedback ('h')")
        return cls(*_FEEDBACK.unpack_from(payload)[1:])


ServerCopyData = XLogData | PrimaryKeepalive
ClientCopyData = StandbyStatusUpdate | HotStandbyFeedback
ReplicationMessage = ServerCopyData | ClientCopyData

#: Tag byte -> class for what the server (walsender) sends.
SERVER_REGISTRY: Final[dict[bytes, type[ServerCopyData]]] = {
    cls.TAG: cls for cls in (XLogData, PrimaryKeepalive)
}
#: Tag byte -> class for what the client (walreceiver, pg_recvlogical, ...) sends.
CLIENT_REGISTRY: Final[dict[bytes, type[ClientCopyData]]] = {
    cls.TAG: cls for cls in (StandbyStatusUpdate, HotStandbyFeedback)
}
_SERVER_DECODERS: Final[dict[int, Callable[[bytes | memoryview], ServerCopyData]]] = {
    cls.TAG[0]: cls.decode for cls in SERVER_REGISTRY.values()
}
_CLIENT_DECODERS: Final[dict[int, Callable[[bytes | memoryview], ClientCopyData]]] = {
    cls.TAG[0]: cls.decode for cls in CLIENT_REGISTRY.values()
}


def decode_server_copy_data(payload: bytes | memoryview) -> ServerCopyData:
    """Decode a CopyData payload sent by the server: XLogData or PrimaryKeepalive."""
    if not payload:
        raise DecodeError("replication server message", 0, "expected 'w' or 'k', found nothing")
    tag = payload[0]
    if tag == 0x77:  # XLogData is nearly all of the stream: skip the dict lookup
        return XLogData.decode(payload)
    decoder = _SERVER_DECODERS.get(tag)
    if decoder is None:
        raise DecodeError(
            "replication server message", 0, f"expected 'w' or 'k', found {bytes((tag,))!r}"
        )
    return decoder(payload)


def decode_client_copy_data(payload: bytes | memoryview) -> ClientCopyData:
    """Decode a CopyData payload sent by the client: StandbyStatusUpdate or feedback."""
    if not payload:
        raise DecodeError("replication client message", 0, "expected 'r' or 'h', found nothing")
    decoder = _CLIENT_DECODERS.get(payload[0])
    if decoder is None:
        raise DecodeError(
            "replication client message",
            0,
            f"expected 'r' or 'h', found {bytes((payload[0],))!r}",
        )
    return decoder(payload)


XLogRun = list[tuple[int, int, int, bytes]]
"""(wal_start, wal_end, send_time, data) of consecutive XLogData messages."""


def split_xlog_data(
    buffer: bytes | bytearray, start: int, max_message_size: int
) -> tuple[XLogRun, int]:
    """The fast path of a client's stream: the XLogData of the complete CopyData
    messages at ``buffer[start:]`` (backend wire frames), and where they end.

    It reads what ``BackendReader`` and :func:`decode_server_copy_data` read, as plain
    tuples and without a message object per frame, and stops before the first frame it
    does not read whole: another message, a PrimaryKeepalive, a partial frame, a length
    word out of ``[4, max_message_size]`` or a header cut short. The normal path reads
    (or rejects with its DecodeError) what is left, so the results are the same
    (tests/codec/test_replication_split.py compares them)."""
    data = bytes(buffer[start:]) if start or not isinstance(buffer, bytes) else buffer
    size = len(data)
    unpack = _COPY_XLOG.unpack_from
    header = _COPY_XLOG.size
    out: XLogRun = []
    append = out.append
    pos = 0
    while size - pos >= header:
        tag, length, kind, wal_start, wal_end, send_time = unpack(data, pos)
        end = pos + 1 + length
        if (
            tag != 0x64  # 'd'
            or kind != 0x77  # 'w'
            or length < _COPY_XLOG_MIN_LENGTH
            or length > max_message_size
            or end > size
        ):
            break
        append((wal_start, wal_end, send_time, data[pos + header : end]))
        pos = end
    return out, start + pos


def encode(message: ReplicationMessage) -> bytes:
    """The CopyData payload for ``message`` (wrap it in ``codec.wire.CopyData`` to send)."""
    return message.encode()
