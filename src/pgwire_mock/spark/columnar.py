"""The TupleData of many change messages at once, column by column, with numpy.

pgoutput sends a row as TupleData: a column count, then per column a kind byte (``n``
NULL, ``u`` unchanged TOAST, ``t`` text, ``b`` binary) and, for ``t``/``b``, a 4-byte
length and the value (proto.c, logicalrep_write_tuple). Walking it in Python costs a
loop iteration per column per row; here every row of a batch advances one column at a
time as a numpy vector operation, and each column's values come out as one Arrow array
without a Python object per value.

The parse checks what :func:`codec.pgoutput.tuples.read_tuple` checks (column count,
kinds, lengths inside the message, nothing left over) and returns None at the first
anomaly: the caller then decodes those messages one by one with the codec, which raises
the :class:`~codec.errors.DecodeError` that names the place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

__all__ = ["KIND_BINARY", "KIND_NULL", "KIND_TEXT", "KIND_TOAST", "ParsedTuples", "parse_tuples"]

KIND_NULL: Final = ord("n")
KIND_TOAST: Final = ord("u")
KIND_TEXT: Final = ord("t")
KIND_BINARY: Final = ord("b")

_Ints = npt.NDArray[np.int64]
_Bytes = npt.NDArray[np.uint8]


@dataclass(frozen=True, slots=True)
class ParsedTuples:
    """One tuple per row: ``kinds[j][i]`` is column j's kind in row i (0 for rows
    without a tuple), ``starts``/``lengths`` locate its value in ``buffer``, ``ends``
    is where each row's tuple ends."""

    buffer: _Bytes
    kinds: list[_Bytes]
    starts: list[_Ints]
    lengths: list[_Ints]
    ends: _Ints

    def column(self, j: int) -> pa.Array[Any] | list[str | bytes | None]:
        """Column j's values: an Arrow string array when every value is text (NULL,
        unchanged TOAST and rows without a tuple are null), else a list of raw values
        as the codec decodes them (``str`` for text, ``bytes`` for binary)."""
        kinds = self.kinds[j]
        text = kinds == KIND_TEXT
        binary = kinds == KIND_BINARY
        if not binary.any():
            strings = _gather(self.buffer, self.starts[j], np.where(text, self.lengths[j], 0), text)
            if strings is not None:
                try:
                    strings.validate(full=True)  # UTF-8
                    return strings
                except pa.ArrowInvalid:
                    pass
        values: list[str | bytes | None] = []
        data = self.buffer.tobytes()
        for kind, start, length in zip(
            kinds.tolist(), self.starts[j].tolist(), self.lengths[j].tolist(), strict=True
        ):
            if kind == KIND_TEXT:
                values.append(data[start : start + length].decode("utf-8", "surrogateescape"))
            elif kind == KIND_BINARY:
                values.append(data[start : start + length])
            else:
                values.append(None)
        return values


def _gather(
    buffer: _Bytes, starts: _Ints, lengths: _Ints, valid: npt.NDArray[np.bool_]
) -> pa.StringArray | None:
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total >= 1 << 31:
        return None  # past a string array's 32-bit offsets: value by value
    index = np.arange(total, dtype=np.int64) + np.repeat(starts - offsets[:-1], lengths)
    data = buffer[index]
    bitmap = np.packbits(valid, bitorder="little")
    return pa.StringArray.from_buffers(
        len(lengths),
        pa.py_buffer(offsets.astype(np.int32).data),
        pa.py_buffer(data.data),
        pa.py_buffer(bitmap.data),
    )


def _be32(buffer: _Bytes, at: _Ints) -> _Ints:
    b = buffer
    return (
        (b[at].astype(np.int64) << 24)
        | (b[at + 1].astype(np.int64) << 16)
        | (b[at + 2].astype(np.int64) << 8)
        | b[at + 3].astype(np.int64)
    )


def parse_tuples(buffer: _Bytes, starts: _Ints, limits: _Ints, columns: int) -> ParsedTuples | None:
    """Parse the TupleData at ``starts[i]`` of each row, which must end by
    ``limits[i]``; a row whose start is negative has no tuple. None if any tuple is
    malformed or has another column count."""
    rows = len(starts)
    present = starts >= 0
    pos = np.where(present, starts, 0)
    limit = np.where(present, limits, 0)
    size = len(buffer)
    if np.any(present & (pos + 2 > limit)) or np.any(limit > size):
        return None
    # Reads past a row's end are masked, but their indexes must stay inside the buffer.
    padded = np.concatenate([buffer, np.zeros(8, np.uint8)])
    count = (padded[pos].astype(np.int64) << 8) | padded[pos + 1]
    if np.any(present & (count != columns)):
        return None
    pos = pos + 2
    kinds: list[_Bytes] = []
    value_starts: list[_Ints] = []
    lengths: list[_Ints] = []
    for _ in range(columns):
        if np.any(present & (pos >= limit)):
            return None
        kind = np.where(present, padded[pos], 0).astype(np.uint8)
        has_value = (kind == KIND_TEXT) | (kind == KIND_BINARY)
        known = has_value | (kind == KIND_NULL) | (kind == KIND_TOAST)
        if np.any(present & ~known):
            return None
        length = np.where(has_value, _be32(padded, pos + 1), 0)
        if np.any(length >= 1 << 31):
            return None  # a negative length
        end = pos + 1 + np.where(has_value, 4 + length, 0)
        if np.any(present & (end > limit)):
            return None
        kinds.append(kind)
        value_starts.append(pos + 5)
        lengths.append(length)
        pos = np.where(present, end, pos)
    del rows
    return ParsedTuples(buffer, kinds, value_starts, lengths, pos)


def concat(payloads: Sequence[bytes]) -> tuple[_Bytes, _Ints, _Ints]:
    """The payloads as one buffer, with where each begins and ends."""
    lengths = np.fromiter((len(p) for p in payloads), np.int64, len(payloads))
    ends = np.cumsum(lengths)
    return np.frombuffer(b"".join(payloads), np.uint8), ends - lengths, ends
