"""The codec's exceptions: one root, one class per direction."""

from __future__ import annotations


class CodecError(Exception):
    """Root of every error the codec raises on purpose."""


class DecodeError(CodecError, ValueError):
    """Bytes that are not a valid message.

    ``message_type`` names what was being decoded (e.g. ``"pgoutput Insert ('I')"``),
    ``offset`` is the byte offset inside that message's payload where decoding failed,
    and ``reason`` says what was expected and what was found.
    """

    def __init__(self, message_type: str, offset: int, reason: str) -> None:
        self.message_type = message_type
        self.offset = offset
        self.reason = reason
        super().__init__(f"{message_type} at byte {offset}: {reason}")

    def __reduce__(self) -> tuple[type[DecodeError], tuple[str, int, str]]:
        return (type(self), (self.message_type, self.offset, self.reason))


class EncodeError(CodecError, ValueError):
    """A message object that cannot be put on the wire (e.g. a value out of range)."""
