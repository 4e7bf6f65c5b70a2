"""Reading what ``pg_recvlogical -P pgoutput -f FILE`` writes.

pg_recvlogical writes the data of each XLogData message it receives, then a newline
(pg_recvlogical.c, StreamLogicalLog: ``write(outfd, "\\n", 1)`` after every message),
and nothing else: no positions and no lengths. pgoutput's binary payloads can hold
newline bytes themselves, so a newline is not a boundary by itself. The reader finds
each message's end from pgoutput's own layout (fixed fields, NUL-terminated strings and
length-prefixed values, as proto.c writes them), requires the newline there, and has the
codec decode the payload, so a file that is not pg_recvlogical output ends in one error
naming the byte offset.

Only Stream Abort has two lengths for one tag (9 bytes, or 25 with protocol 4's
parallel streaming): the shorter is taken when a newline follows it and the byte after
that starts another message (or the file ends there).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import IO, Final

from codec import DecodeError
from codec.pgoutput import MESSAGE_CLASSES, Decoder
from pgwire_mock.streamfile import StreamFileError

__all__ = ["TAGS", "read_recvlogical"]

#: The first byte of every pgoutput message: a file starting with one of these is
#: pg_recvlogical output (JSON Lines start with ``{``, wire files with ``d``).
TAGS: Final = frozenset(cls.TAG[0] for cls in MESSAGE_CLASSES)
# Tags whose messages carry an xid after the tag inside Stream Start ... Stream Stop.
_STREAMABLE: Final = frozenset(cls.TAG[0] for cls in MESSAGE_CLASSES if cls.STREAMABLE)
# The messages of fixed length (tag included) and, for those ending in a GID, the
# length before the GID's NUL-terminated string.
_FIXED: Final = {b"B"[0]: 21, b"C"[0]: 26, b"S"[0]: 6, b"E"[0]: 1, b"c"[0]: 30}
_BEFORE_GID: Final = {b"b"[0]: 29, b"P"[0]: 30, b"K"[0]: 30, b"p"[0]: 30, b"r"[0]: 38}
_ABORT_SHORT: Final = 9
_ABORT_LONG: Final = 25
_INT16 = struct.Struct("!h").unpack_from
_INT32 = struct.Struct("!i").unpack_from
_CHUNK: Final = 1 << 16
_NEWLINE: Final = 0x0A


class _ShortError(Exception):
    """The buffer ends before the message does: read more."""


def _cstring_end(buf: bytearray, pos: int) -> int:
    end = buf.find(0, pos)
    if end < 0:
        raise _ShortError
    return end + 1


def _int16(buf: bytearray, pos: int) -> int:
    if pos + 2 > len(buf):
        raise _ShortError
    (value,) = _INT16(buf, pos)
    return int(value)


def _int32(buf: bytearray, pos: int) -> int:
    if pos + 4 > len(buf):
        raise _ShortError
    (value,) = _INT32(buf, pos)
    return int(value)


def _byte(buf: bytearray, pos: int) -> int:
    if pos >= len(buf):
        raise _ShortError
    return buf[pos]


def _tuple_end(buf: bytearray, pos: int) -> int:
    count = _int16(buf, pos)
    pos += 2
    for _ in range(max(count, 0)):
        kind = _byte(buf, pos)
        pos += 1
        if kind in b"tb":
            pos += 4 + max(_int32(buf, pos), 0)
    return pos


def _message_end(buf: bytearray, start: int, in_stream: bool, at_eof: bool) -> int:
    """Where the message at ``start`` ends (its newline's offset); raises _ShortError.

    Only a guide: the payload up to there is decoded by the codec, which judges it.
    """
    tag = buf[start]
    if tag in _FIXED:
        return start + _FIXED[tag]
    if tag in _BEFORE_GID:
        return _cstring_end(buf, start + _BEFORE_GID[tag])
    if tag == b"A"[0]:
        short = start + _ABORT_SHORT
        if len(buf) < short + 2 and not at_eof:
            raise _ShortError
        if (
            len(buf) > short
            and buf[short] == _NEWLINE
            and (len(buf) == short + 1 or buf[short + 1] in TAGS)
        ):
            return short
        return start + _ABORT_LONG
    pos = start + 1 + (4 if in_stream and tag in _STREAMABLE else 0)
    if tag == b"O"[0]:
        return _cstring_end(buf, pos + 8)
    if tag == b"Y"[0]:
        return _cstring_end(buf, _cstring_end(buf, pos + 4))
    if tag == b"R"[0]:
        pos = _cstring_end(buf, _cstring_end(buf, pos + 4)) + 1
        count = _int16(buf, pos)
        pos += 2
        for _ in range(max(count, 0)):
            pos = _cstring_end(buf, pos + 1) + 8
        return pos
    if tag == b"T"[0]:
        return pos + 5 + 4 * max(_int32(buf, pos), 0)
    if tag == b"M"[0]:
        pos = _cstring_end(buf, pos + 9)
        return pos + 4 + max(_int32(buf, pos), 0)
    # Insert, Update, Delete: the relation OID, then one or two tuples, each after a
    # kind byte ('N' new, 'K' key, 'O' old).
    pos += 4
    if tag == b"U"[0] and _byte(buf, pos) in b"KO":
        pos = _tuple_end(buf, pos + 1)
    return _tuple_end(buf, pos + 1)


def read_recvlogical(source: IO[bytes], name: str = "<stream>") -> Iterator[bytes]:
    """Yield the pgoutput payloads of a file ``pg_recvlogical -P pgoutput -f`` wrote.

    Raises :class:`~pgwire_mock.streamfile.StreamFileError` naming the byte offset when
    the bytes are not that.
    """
    decoder = Decoder()
    buf = bytearray()
    start = 0  # of the next message in buf
    offset = 0  # of buf[0] in the file
    at_eof = False

    def more() -> None:
        nonlocal buf, start, offset, at_eof
        if start:  # drop what has been read, once per read rather than once per message
            del buf[:start]
            offset += start
            start = 0
        # Read at least as much as is buffered: one long message costs linear time.
        chunk = source.read(max(_CHUNK, len(buf)))
        if chunk:
            buf += chunk
        else:
            at_eof = True

    while True:
        if start == len(buf):
            if at_eof:
                return
            more()
            continue
        if buf[start] not in TAGS:
            raise StreamFileError(
                f"{name}: at byte {offset + start}: expected a pgoutput message type, found "
                f"{bytes(buf[start : start + 1])!r} (not what pg_recvlogical -P pgoutput writes)"
            )
        try:
            end = _message_end(buf, start, decoder.in_stream, at_eof)
            if end >= len(buf):
                raise _ShortError
        except _ShortError:
            if at_eof:
                raise StreamFileError(
                    f"{name}: ends in the middle of a message (the one at byte {offset + start})"
                ) from None
            more()
            continue
        if buf[end] != _NEWLINE:
            raise StreamFileError(
                f"{name}: at byte {offset + end}: expected the newline pg_recvlogical writes "
                f"after each message, found {bytes(buf[end : end + 1])!r}"
            )
        payload = bytes(buf[start:end])
        try:
            decoder.decode(payload)
        except DecodeError as err:
            raise StreamFileError(f"{name}: message at byte {offset + start}: {err}") from None
        yield payload
        start = end + 1
