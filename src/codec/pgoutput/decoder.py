"""Decoding pgoutput payloads: the one piece of the pgoutput codec that keeps state."""

from __future__ import annotations

from typing import Final

from codec._buffer import UINT32
from codec.errors import DecodeError
from codec.pgoutput.messages import (
    MESSAGE_CLASSES,
    PgOutputMessage,
    StreamStart,
    StreamStop,
)

# Indexed by the tag byte: one list lookup per message instead of a dict of bytes.
_BY_TAG: Final[list[type[PgOutputMessage] | None]] = [None] * 256
for _cls in MESSAGE_CLASSES:
    _BY_TAG[_cls.TAG[0]] = _cls
_XID_UNPACK = UINT32.unpack_from
_KNOWN_TAGS: Final = "".join(sorted(c.TAG.decode() for c in MESSAGE_CLASSES))


class Decoder:
    """Turns pgoutput payloads (the data of XLogData messages) into message objects.

    A Decoder follows one replication stream: it remembers whether it is between Stream
    Start and Stream Stop, because only there do protocol-2+ messages carry an xid. Use
    one Decoder per stream, fed every payload in order.
    """

    __slots__ = ("in_stream",)

    def __init__(self) -> None:
        self.in_stream = False

    def decode(self, payload: bytes) -> PgOutputMessage:
        """Decode one whole pgoutput message; raise :class:`DecodeError` if it is not one."""
        if not isinstance(payload, bytes):
            payload = bytes(payload)
        if not payload:
            raise DecodeError("pgoutput message", 0, "expected a message type byte, found no data")
        cls = _BY_TAG[payload[0]]
        if cls is None:
            raise DecodeError(
                "pgoutput message",
                0,
                f"expected a message type byte (one of {_KNOWN_TAGS}), found {payload[:1]!r}",
            )
        xid = None
        pos = 1
        if self.in_stream and cls.STREAMABLE:
            if len(payload) < 5:
                raise DecodeError(
                    cls.NAME,
                    1,
                    f"expected a 4-byte xid inside a stream, found {len(payload) - 1} bytes",
                )
            (xid,) = _XID_UNPACK(payload, 1)
            pos = 5
        message = cls.decode_body(payload, pos, xid)
        if cls is StreamStart:
            self.in_stream = True
        elif cls is StreamStop:
            self.in_stream = False
        return message


def encode(message: PgOutputMessage) -> bytes:
    """The bytes of ``message`` exactly as pgoutput sends them.

    Needs no state: a message inside a streamed transaction carries its ``xid``, one
    outside carries ``xid=None``.
    """
    return message.encode()
