"""Arrays in binary form: array_recv() and array_send() (src/backend/utils/adt/arrayfuncs.c)
for any catalogue element type, with the element lengths checked against what is left
before anything is allocated."""

from __future__ import annotations

import functools
import itertools
import operator
import struct
from collections.abc import Callable
from typing import Final, cast

from codec._buffer import INT32
from codec.values._array_forms import MAXDIM
from codec.values._array_shape import array_parts, array_value, each_once
from codec.values._bulk import BinaryArea, BinaryBulk, BinaryElements
from codec.values._common import Converter, Invalid
from codec.values._ranges import Declined, ElementError, convert_ranges

ARRAY_HEADER: Final = struct.Struct("!iiI")  # ndim, has-null flag, element OID
DIMENSION: Final = struct.Struct("!ii")  # size, lower bound
_NULL_LENGTH: Final = INT32.pack(-1)


def _pairs(pair: str, count: int) -> struct.Struct:
    """A struct reading ``count`` (length, element) pairs in one call: a flat tuple is
    sliced apart at C speed, where iter_unpack's tuples cost ten times as much to
    regroup."""
    return struct.Struct("!" + pair * count)


@functools.lru_cache(maxsize=256)
def _run_of(length: int, count: int) -> struct.Struct:
    return _pairs(f"i{length}s", count)


_RUN_FIRST: Final = 16  # elements in the first guess of a run, and fewest kept to pay
_RUN_MAX: Final = 4096  # elements split by one struct call at most
_STEPS_MAX: Final = 1024  # single steps between guesses, when they keep failing


def _binary_elements(
    data: bytes, pos: int, total: int, items: list[bytes | None] | None = None, first: int = 0
) -> list[bytes | None]:
    """The ``total`` elements from ``pos`` on (None for NULL; numbered from ``first`` in
    errors), checking every length against what is left. When all elements have the
    first one's length, the layout is known in advance and struct splits it at C
    speed. Otherwise the lengths chain, but sizes come in runs (numbers of one digit
    count, texts of one length): the next elements are guessed to have the current
    one's length and split by one struct call, as many as have it kept, the guess
    growing while it holds. Guesses that keep failing (sizes that alternate) are spaced
    out by more and more single steps."""
    n = len(data)
    if n - pos >= 4:
        (size,) = INT32.unpack_from(data, pos)
        if size >= 0 and n - pos == total * (4 + size):
            flat = _pairs(f"i{size}s", total).unpack_from(data, pos)
            if flat[0::2].count(size) == total:
                return list(flat[1::2])
    items = [] if items is None else items  # the caller's: what was read before an error
    runs: dict[int, int] = {}  # element length -> the next guess for a run of it
    index, steps = 0, 0
    while index < total:
        if steps:
            count = min(steps, total - index)
            pos = _steps(data, pos, first + index, count, items)
            index += count
            if index == total:
                break
        length = INT32.unpack_from(data, pos)[0] if n - pos >= 4 else -1
        run = runs.get(length, _RUN_FIRST)
        guess = min(run, total - index, (n - pos) // (4 + length)) if length >= 0 else 0
        if guess < 2:  # NULL, or no room for two
            steps = min(2 * steps, _STEPS_MAX) if steps else 1
            continue
        flat = _run_of(length, guess).unpack_from(data, pos)
        lengths = flat[0::2]
        kept = guess
        if lengths.count(length) == guess:
            runs[length], steps = min(2 * run, _RUN_MAX), 0
        else:
            # The first element of another length ends the run (the first has it).
            other = map(operator.ne, lengths, itertools.repeat(length))
            kept = next(itertools.compress(itertools.count(), other))
            if kept < _RUN_FIRST:  # a guess that did not pay: step more before the next
                runs[length] = _RUN_FIRST
                steps = min(2 * steps, _STEPS_MAX) if steps else 1
            else:  # the next run of this length is guessed one longer than this one
                runs[length], steps = kept + 1, 0
        items.extend(cast(tuple[bytes, ...], flat[1 : 2 * kept : 2]))
        index += kept
        pos += kept * (4 + length)
        if kept < guess:
            # The element that ended the run: its length word was read where it is.
            other = lengths[kept]
            if other == -1:
                items.append(None)
            elif 0 <= other <= n - pos - 4:
                items.append(data[pos + 4 : pos + 4 + other])
            else:
                raise Invalid(pos, f"element {first + index}: invalid length {other}")
            index += 1
            pos += 4 + max(other, 0)
    if pos != n:
        raise Invalid(pos, f"expected end of array, found {n - pos} more bytes")
    return items


def _steps(data: bytes, pos: int, first: int, count: int, items: list[bytes | None]) -> int:
    """Elements ``first`` to ``first + count`` read one by one into ``items``; the
    position after them."""
    n = len(data)
    append = items.append
    unpack_int = INT32.unpack_from
    for index in range(first, first + count):
        if n - pos < 4:
            raise Invalid(pos, f"expected the length of element {index}, found end of data")
        (length,) = unpack_int(data, pos)
        pos += 4
        if length == -1:
            append(None)
            continue
        if length < 0 or length > n - pos:
            raise Invalid(pos - 4, f"element {index}: invalid length {length}")
        append(data[pos : pos + length])
        pos += length
    return pos


def _each_once_at(
    raws: list[bytes | None],
    convert: Callable[[list[bytes]], list[object]],
    pos: int,
    first: int = 0,
) -> list[object]:
    """each_once over binary elements read from ``pos`` (numbered from ``first``); an
    element that does not decode raises its error at its bytes' offset."""
    try:
        return each_once(raws, convert)
    except ElementError as bad:
        index = raws.index(bad.token)  # type: ignore[arg-type]
        # Each element before it: a 4-byte length and its bytes (none for NULL).
        start = pos + 4 * (index + 1) + sum(map(len, filter(None, raws[:index])))
        reason = f"element {first + index}: {bad.error.reason}"
        raise Invalid(start + bad.error.offset, reason) from None


def make_binary_decoder(
    element: Converter,
    whole: tuple[str, BinaryBulk | None] | None = None,
    bulk: BinaryElements | None = None,
    area: BinaryArea | None = None,
) -> object:
    """array_recv() for ``element``. Each distinct element is decoded once, by ``bulk``
    when it takes them all (see _bulk.BULK_BINARY_ELEMENTS), else one by one; a
    fixed-size type whose elements are all present is unpacked whole when ``whole``
    gives its struct code and the conversion of the numbers (see _bulk.BULK_BINARY),
    and a variable-sized one is read from the whole element area by ``area`` when it
    takes it (see _bulk.BULK_BINARY_AREAS)."""
    decode = element.decode_binary

    def convert_all(distinct: list[bytes]) -> list[object]:
        return convert_ranges(distinct, bulk, decode)

    element_oid = element.oid
    unpack_header, unpack_dim = ARRAY_HEADER.unpack_from, DIMENSION.unpack_from
    code, convert = whole if whole else ("", None)
    pair = struct.Struct(f"!i{code}") if code else None

    def decode_binary(data: bytes) -> object:
        n = len(data)
        if n < 12:
            raise Invalid(n, f"expected a 12-byte array header, found {n} bytes")
        ndim, flags, oid = unpack_header(data)
        if not 0 <= ndim <= MAXDIM:
            raise Invalid(0, f"invalid number of dimensions {ndim} (maximum {MAXDIM})")
        if flags not in (0, 1):
            raise Invalid(4, f"invalid array flags {flags}")
        if oid != element_oid:
            raise Invalid(8, f"wrong element type: expected OID {element_oid}, found {oid}")
        pos = 12
        if n < pos + 8 * ndim:
            raise Invalid(n, f"expected {ndim} dimensions of 8 bytes, found {n - pos} bytes")
        shape: list[int] = []
        bounds: list[int] = []
        total = 1 if ndim else 0
        for _ in range(ndim):
            size, low = unpack_dim(data, pos)
            if size < 0:
                raise Invalid(pos, f"invalid array dimension size {size}")
            if low + size - 1 > (1 << 31) - 1:
                raise Invalid(pos + 4, "array lower bound plus size overflows int32")
            shape.append(size)
            bounds.append(low)
            total *= size
            pos += 8
            # Every element takes at least its 4-byte length: a lying dimension
            # fails here, before anything is allocated.
            if total * 4 > n - pos:
                raise Invalid(pos, f"array claims {total} elements, only {n - pos} bytes left")
        if total == 0:
            # array_recv() turns any zero-sized dimension into the empty array.
            if pos != n:
                raise Invalid(pos, f"expected end of empty array, found {n - pos} more bytes")
            return []
        if pair is not None and n - pos == total * pair.size:
            flat = _pairs(f"i{code}", total).unpack_from(data, pos)
            if flat[0::2].count(pair.size - 4) == total:
                numbers = list(flat[1::2])
                values = numbers if convert is None else convert(numbers)
                if values is not None:
                    return array_value(values, shape, bounds)
        read = area(data, pos, total) if area is not None else None
        if isinstance(read, list):
            return array_value(read, shape, bounds)
        if isinstance(read, Declined) and read.before and read.offset is not None:
            # The area reader stopped at an element, the values before it made: the
            # rest is read from there (its elements numbered on from them).
            rest = elements(data, read.offset, total - read.index, read.index)
            return array_value(read.before + rest, shape, bounds)
        return array_value(elements(data, pos, total, 0), shape, bounds)

    def elements(data: bytes, pos: int, count: int, first: int) -> list[object]:
        """The values of the ``count`` elements from ``pos``, numbered from ``first``."""
        raws: list[bytes | None] = []
        try:
            raws = _binary_elements(data, pos, count, raws, first)
        except Invalid as bad_length:
            # Lengths are all checked before any element is decoded; the first
            # error in array order may be an element before the bad length.
            _each_once_at(raws, convert_all, pos, first)
            raise bad_length from None
        return _each_once_at(raws, convert_all, pos, first)

    return decode_binary


def make_binary_encoder(element: Converter, name: str) -> object:
    encode = element.encode_binary
    element_oid = element.oid
    pack_int = INT32.pack

    def encode_binary(value: object) -> bytes:
        shape, bounds, items = array_parts(value, name)
        has_null = any(item is None for item in items)
        parts = [ARRAY_HEADER.pack(len(shape), 1 if has_null else 0, element_oid)]
        parts.extend(DIMENSION.pack(size, low) for size, low in zip(shape, bounds, strict=True))
        for item in items:
            if item is None:
                parts.append(_NULL_LENGTH)
            else:
                data = encode(item)
                parts.append(pack_int(len(data)))
                parts.append(data)
        return b"".join(parts)

    return encode_binary
