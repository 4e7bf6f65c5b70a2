"""Log sequence numbers: 64-bit WAL positions printed as ``X/Y`` like ``pg_lsn``."""

from __future__ import annotations

from typing import Final, SupportsIndex

from codec._buffer import UINT64_MAX
from codec.errors import DecodeError, EncodeError

_HEX: Final = frozenset("0123456789abcdefABCDEF")


class LSN(int):
    """A WAL position: an ``int`` in ``[0, 2**64 - 1]`` whose ``str`` is ``X/Y``.

    It is a subclass of :class:`int` so that message objects, which store LSNs as plain
    ints for speed, accept it anywhere, and ``LSN(msg.final_lsn)`` gives the readable form.
    Ordering and hashing are the int's. ``LSN + int`` and ``LSN - int`` give an ``LSN``
    (like PostgreSQL's ``pg_lsn + numeric``); ``LSN - LSN`` gives a plain ``int`` byte
    distance (like ``pg_lsn - pg_lsn``, which may be negative).
    """

    __slots__ = ()

    def __new__(cls, value: SupportsIndex | str = 0) -> LSN:
        if isinstance(value, str):
            return cls.parse(value)
        value = int(value.__index__())
        if not 0 <= value <= UINT64_MAX:
            raise EncodeError(f"LSN must be in [0, {UINT64_MAX}], got {value}")
        return super().__new__(cls, value)

    @classmethod
    def parse(cls, text: str) -> LSN:
        """Parse ``X/Y`` (1-8 hex digits each side, any case), as ``pg_lsn_in`` does.

        See src/backend/utils/adt/pg_lsn.c: both halves are required, at most 8 hex digits
        each, and nothing may follow.
        """
        what = "pg_lsn text value"
        slash = text.find("/")
        if slash < 0:
            raise DecodeError(what, 0, f"expected 'X/Y', found no '/' in {text!r}")
        high, low = text[:slash], text[slash + 1 :]
        for part, start in ((high, 0), (low, slash + 1)):
            if not 1 <= len(part) <= 8:
                raise DecodeError(
                    what, start, f"expected 1 to 8 hex digits, found {len(part)} in {text!r}"
                )
            for i, ch in enumerate(part):
                if ch not in _HEX:
                    raise DecodeError(what, start + i, f"expected a hex digit, found {ch!r}")
        return super().__new__(cls, (int(high, 16) << 32) | int(low, 16))

    def __str__(self) -> str:
        value = int(self)
        return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"

    def __repr__(self) -> str:
        return f"LSN('{self}')"

    def __format__(self, spec: str) -> str:
        return str(self) if not spec else int.__format__(int(self), spec)

    def __add__(self, other: int) -> LSN:
        if not isinstance(other, int):
            return NotImplemented
        return LSN(int(self) + int(other))

    __radd__ = __add__

    def __sub__(self, other: int) -> int:
        """``LSN - LSN`` is a byte distance (int); ``LSN - int`` is an earlier LSN."""
        if isinstance(other, LSN):
            return int(self) - int(other)
        if not isinstance(other, int):
            return NotImplemented
        return LSN(int(self) - int(other))


INVALID_LSN: Final = LSN(0)
"""``InvalidXLogRecPtr``: PostgreSQL's "no position" (0/0)."""
