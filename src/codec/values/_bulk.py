"""Whole-array fast paths for the text of array elements.

An array of a million small elements cannot afford one Python-level parse per element
(the input functions cost 0.1-25 us each). The array decoder therefore decodes each
distinct element text once, and for the types below hands all of them to one function
here, which checks them against the canonical form PostgreSQL prints with a single
regular expression over the joined texts and converts them in C-level passes
(``int``, ``float``, ``Decimal``, ``fromisoformat``).

Each function returns the values in the order of its texts, or None when any text is
outside the form it handles or converts out of range; the array decoder then runs the
type's input function on every text, which gives the value or the exact error. So a
fast path may refuse anything, but what it accepts it must decode exactly as the input
function does: tests/codec/test_values_bulk.py checks that on generated texts.
"""

from __future__ import annotations

import json
import operator
import re
import struct
from collections import deque
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, time, timedelta, timezone
from functools import partial
from itertools import compress, count, repeat
from math import isfinite
from operator import and_, gt, itemgetter, lt, not_, or_
from typing import Final, cast
from uuid import UUID, SafeUUID

from codec.values._array_forms import element_start
from codec.values._bulk_decimal import _numeric, _whole_numeric
from codec.values._bulk_forms import (
    _SEPARATOR,
    BulkDecoder,
    WholeDecoder,
    _all_match,
    _declined,
    _json_numbers,
    _not_null,
    _then,
    _unquoting,
)
from codec.values._bulk_interval import interval_texts, one_field_array
from codec.values._bulk_json import json_scalars, json_texts
from codec.values._bulk_net import ip_area, ip_texts, ip_whole
from codec.values._bulk_numeric import numerics_array, numerics_recv
from codec.values._interval import intervals
from codec.values._net import cidrs, inets
from codec.values._numbers import FLT_MAX
from codec.values._ranges import BulkResult, Declined
from codec.values._text import NAMEDATALEN
from codec.values._time import (
    _EPOCH,
    _EPOCH_ORDINAL,
    _EPOCH_UTC,
    _PY_DAY_MAX,
    _PY_DAY_MIN,
    _PY_US_END,
    _PY_US_MIN,
    INT64_MAX,
    INT64_MIN,
    TZDISP_LIMIT,
    USECS_PER_HOUR,
    USECS_PER_SEC,
)

# --------------------------------------------------------------------------- numbers


def _integers(low: int, high: int, digits: int, wrap: int = 0) -> BulkDecoder:
    """int2in/int4in/int8in, or oidin: from -2**31, ``wrap`` (2**32) added to a
    negative value ("-1" is 4294967295). The integer types take PostgreSQL 16's
    hexadecimal, octal and binary forms and underscores between digits ("0x1F",
    "1_000"), as int() does with base 0 (but for a decimal's leading zeros: declined)."""
    matches = _all_match(rf"[+-]?[0-9]{{1,{digits}}}")
    others = _all_match(
        rf"[+-]?(?:0[xX](?:_?[0-9a-fA-F]){{1,{digits}}}|0[oO](?:_?[0-7]){{1,{3 * digits}}}"
        rf"|0[bB](?:_?[01]){{1,{4 * digits}}}|[0-9](?:_?[0-9]){{0,{digits - 1}}})"
    )

    def decode(texts: list[str]) -> BulkResult:
        plain = matches(texts)
        if plain < len(texts) and not wrap:
            return prefixed(texts, plain)
        declined = _declined(texts, plain)
        if declined is not None or not texts:
            return declined
        return in_range(list(map(int, texts)))

    def prefixed(texts: list[str], plain: int) -> BulkResult:
        """The texts in the other forms too, or Declined at the first in neither."""
        declined = _declined(texts, max(plain, others(texts)))
        if declined is not None:
            return declined
        try:
            values = list(map(int, texts, repeat(0)))
        except ValueError:  # a decimal with leading zeros ("007"), which base 0 refuses
            return None
        return in_range(values)

    def in_range(values: list[int]) -> BulkResult:
        """``values``, or Declined at the first out of range, with those before it."""
        if min(values) < low or max(values) > high:
            outside = map(or_, map(lt, values, repeat(low)), map(gt, values, repeat(high)))
            first = next(compress(count(), outside))
            return Declined(first, _wrapped(values[:first], wrap))
        return _wrapped(values, wrap)

    return decode


def _wrapped(values: list[int], wrap: int) -> list[object]:
    """``values`` with ``wrap`` added to the negative ones (oidin's unsigned wrap)."""
    if wrap and values and min(values) < 0:
        return list(map(operator.mod, values, repeat(wrap)))
    return cast(list[object], values)


# float8out's shortest forms ("1.5", "1e-05", "1.2345678e+168", "NaN", "-Infinity"), with
# at most 17 digits on each side of the point and an exponent of up to three digits
# after any leading zeros: float() is float8in there, but for what overflows to infinity
# or underflows to zero, which float8in refuses (_in_range finds those).
_FLOAT_FORM: Final = (
    r"-?(?:[0-9]{1,17}(?:\.[0-9]{0,17})?|\.[0-9]{1,17})"
    r"(?:[eE][+-]?(?:0*+[1-9][0-9]{0,2}|0++))?"
    r"|NaN|-?Infinity"
)
_float_forms: Final = _all_match(_FLOAT_FORM)
_INFINITIES: Final = (float("inf"), float("-inf"))
_NONZERO_NUMBER: Final = re.compile(r"-?[0.]*+[1-9]").match


def _in_range(texts: list[str], values: list[float]) -> BulkResult:
    """``values`` (float() of ``texts``), or Declined at the first that overflowed to
    infinity from a number (not from "Infinity") or underflowed to zero from a non-zero
    mantissa: float8in's out-of-range errors."""
    bad = len(values)
    if _INFINITIES[0] in values or _INFINITIES[1] in values:
        infinite = list(compress(count(), map(_INFINITIES.__contains__, values)))
        spelled = map(str.endswith, map(texts.__getitem__, infinite), repeat("y"))
        bad = next(compress(infinite, map(not_, spelled)), bad)
    if 0.0 in values:
        zeros = list(compress(count(), map(not_, values)))
        nonzero = map(_NONZERO_NUMBER, map(texts.__getitem__, zeros))
        bad = min(bad, next(compress(zeros, map(bool, nonzero)), bad))
    return values if bad == len(values) else Declined(bad, values[:bad])  # type: ignore[arg-type,return-value]


def _float8(texts: list[str]) -> BulkResult:
    declined = _declined(texts, _float_forms(texts))
    return declined if declined is not None else _in_range(texts, list(map(float, texts)))


def _float4(texts: list[str]) -> BulkResult:
    declined = _declined(texts, _float_forms(texts))
    if declined is not None:
        return declined
    values = _in_range(texts, list(map(float, texts)))
    if isinstance(values, Declined):
        before = _float4_narrowed(values.before) if values.before else []  # type: ignore[arg-type]
        return Declined(values.index, before if isinstance(before, list) else None)
    return _float4_narrowed(values)  # type: ignore[arg-type]


def _float4_narrowed(values: list[float]) -> BulkResult:
    """``values`` narrowed to float4, or Declined at the first past its range (an
    overflow, or a non-zero value that narrows to zero), with those before narrowed."""
    narrowed, over = _narrowed_until_over(values)
    if narrowed.count(0.0) != (values if over == len(values) else values[:over]).count(0.0):
        # A value before ``over`` underflowed to zero: the first error.
        first = next(compress(count(), map(and_, map(not_, narrowed), map(bool, values))))
        return Declined(first, narrowed[:first])
    return narrowed if over == len(values) else Declined(over, narrowed)


# Values narrowed a chunk at a time: an overflow is then looked for, and the values
# before it narrowed again, in one chunk, not in all of them (an array ending in one
# cost 11 ms per MB more).
_NARROW_CHUNK: Final = 4096


def _narrowed_until_over(values: list[float]) -> tuple[list[object], int]:
    """The float4 of each of ``values`` up to the first past FLT_MAX (infinity is in
    range), and that one's index (len(values) if none is)."""
    narrowed: list[object] = []
    for start in range(0, len(values), _NARROW_CHUNK):
        chunk = values[start : start + _NARROW_CHUNK]
        layout = f"!{len(chunk)}f"
        try:
            # The same (float) cast float4in's strtof result matches; struct refuses
            # values past float4's range, which the input function reports.
            narrowed += struct.unpack(layout, struct.pack(layout, *chunk))
        except OverflowError:
            over = map(and_, map(gt, map(abs, chunk), repeat(FLT_MAX)), map(isfinite, chunk))
            first = next(compress(count(), over), 0)
            layout = f"!{first}f"
            narrowed += struct.unpack(layout, struct.pack(layout, *chunk[:first]))
            return narrowed, start + first
    return narrowed, len(values)


# --------------------------------------------------------------------------- whole arrays


def _whole_integers(low: int, high: int, wrap: int = 0) -> WholeDecoder:
    # Up to 20 digits: past any type's range, which is checked after, and far from where
    # int() of a long digit run costs more than the element path. ``wrap``: _integers'.
    read = _json_numbers("-0123456789,NUL", json.JSONDecoder(), 5, 20)

    def in_range(text: str) -> BulkResult:
        """The values, or Declined at the first out of the type's range."""
        result = read(text)
        values = result.before if isinstance(result, Declined) else result
        if not values:
            return result
        present = cast(list[int], list(filter(_not_null, values)))
        if not present:
            return result
        if not (low <= min(present) and max(present) <= high):
            first = next(i for i, v in enumerate(values) if v is not None and not low <= v <= high)  # type: ignore[operator]
            before = values[:first]
            _wrap_present(before, wrap)
            complete = isinstance(result, list)
            return Declined(first, before, element_start(text, first), read_all=complete)
        _wrap_present(values, wrap)
        return result

    return in_range


def _wrap_present(values: list[object], wrap: int) -> None:
    """_wrapped() on the numbers among ``values`` (NULLs kept), in place."""
    present = cast(list[int], list(filter(_not_null, values)))
    if wrap and present and min(present) < 0:
        places = compress(count(), map(_not_null, values))
        deque(map(operator.setitem, repeat(values), places, _wrapped(present, wrap)), 0)


_read_floats: Final = _json_numbers(
    "-+.0123456789eE,NULaIfinty", json.JSONDecoder(parse_int=float), 6, 17
)
_THREE_DIGIT_EXPONENT: Final = re.compile(r"[eE][+-]?[0-9]{3}").search


def _whole_float8(text: str) -> BulkResult:
    result = _read_floats(text)
    values = result.before if isinstance(result, Declined) else result
    if not values or not (_INFINITIES[0] in values or _INFINITIES[1] in values or 0.0 in values):
        return result
    if _THREE_DIGIT_EXPONENT(text) is None:
        return result
    # An exponent of three digits may overflow to infinity or underflow to zero,
    # float8in's errors: Declined at the first infinity not spelled so, unless a zero
    # (maybe underflowed) comes before it, which the element path checks.
    infinite = next(compress(count(), map(_INFINITIES.__contains__, values)), len(values))
    if infinite == len(values) or 0.0 in values[:infinite]:
        return None
    start = element_start(text, infinite)
    if text.startswith(("Infinity", "-Infinity"), start):
        return None
    return Declined(infinite, values[:infinite], start)


def _whole_float4(text: str) -> BulkResult:
    result = _whole_float8(text)
    values = result.before if isinstance(result, Declined) else result
    if not values or None in values:
        return _then(result, _narrowed)
    narrowed = _float4_narrowed(cast(list[float], values))
    if isinstance(narrowed, list):
        if isinstance(result, Declined):
            return Declined(result.index, narrowed, result.offset)
        return narrowed
    if isinstance(narrowed, Declined) and narrowed.before is not None:
        # Past float4's range at element narrowed.index: the rest is parsed from there.
        index = narrowed.index
        complete = isinstance(result, list)
        return Declined(index, narrowed.before, element_start(text, index), read_all=complete)
    return None


def _narrowed(values: list[object]) -> list[object] | None:
    if None not in values:
        narrowed = _float4_narrowed(cast(list[float], values))
        return narrowed if isinstance(narrowed, list) else None
    # With NULLs: the numbers are narrowed apart and put back where they were.
    present = list(filter(_not_null, values))
    narrowed = _float4_narrowed(cast(list[float], present)) if present else []
    if not isinstance(narrowed, list):
        return None
    places = compress(count(), map(_not_null, values))
    deque(map(operator.setitem, repeat(values), places, narrowed), 0)
    return values


# --------------------------------------------------------------------------- date/time

_DATE: Final = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
_CLOCK: Final = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,6})?"
_ZONE: Final = r"[+-](?:0[0-9]|1[0-5])(?::[0-5][0-9])?"


def _iso(
    form: str, parse: Callable[[str], object], to_utc: bool = False, zone: str = ""
) -> BulkDecoder:
    """Canonical ISO text parsed by ``fromisoformat`` (a C function): years 0001-9999,
    hours 00-23, at most six fraction digits, zones within +-15:59. An impossible day
    (Feb 30) or a zone shift past year 1 or 9999 is left to the input function.
    ``zone`` is appended to each text before it is parsed."""
    matches = _all_match(form)

    def decode(texts: list[str]) -> BulkResult:
        declined = _declined(texts, matches(texts))
        if declined is not None:
            return declined
        try:
            values = list(map(parse, map(operator.add, texts, repeat(zone)) if zone else texts))
            if to_utc:
                values = list(map(datetime.astimezone, values, repeat(UTC)))  # type: ignore[arg-type]
        except (ValueError, OverflowError):
            return None
        return values

    return decode


_zoned_timestamps: Final = _iso(f"{_DATE} {_CLOCK}{_ZONE}", datetime.fromisoformat, to_utc=True)
# Without a zone, timestamptz_in takes the session's, which the codec takes to be UTC.
_utc_timestamps: Final = _iso(f"{_DATE} {_CLOCK}", datetime.fromisoformat, zone="+00:00")
_ZONE_AT_END: Final = re.compile(f"{_ZONE}$").search


def _timestamptz(texts: list[str]) -> BulkResult:
    """Timestamps with a zone, or all without one (the first text says which)."""
    zoned = not texts or _ZONE_AT_END(texts[0]) is not None
    return (_zoned_timestamps if zoned else _utc_timestamps)(texts)


# --------------------------------------------------------------------------- strings

_macaddr_forms: Final = _all_match(r"[0-9a-f]{2}(?::[0-9a-f]{2}){5}")


def _macaddr(texts: list[str]) -> BulkResult:
    # The canonical spelling is what macaddr_out prints, and what the input gives back.
    declined = _declined(texts, _macaddr_forms(texts))
    return declined if declined is not None else list(texts)


_bytea_forms: Final = _all_match(r"\\x(?:[0-9a-fA-F]{2})*+")
# The escape format with no escape: every character its UTF-8 bytes (NUL is refused).
_plain_bytea_forms: Final = _all_match(r"[^\\\0\n]*+")
_after_prefix: Final = itemgetter(slice(2, None))


def _bytea(texts: list[str]) -> BulkResult:
    # All in one form or none: the longer run of either is what is taken.
    plain = _plain_bytea_forms(texts)
    if plain == len(texts):
        return list(map(str.encode, texts))
    declined = _declined(texts, max(plain, _bytea_forms(texts)))
    if declined is not None:
        return declined
    return list(map(bytes.fromhex, map(_after_prefix, texts)))


def _text(texts: list[str]) -> list[object] | None:
    # textin takes any text without NUL; the value is the text.
    return None if "\0" in "".join(texts) else list(texts)


def _name(texts: list[str]) -> list[object] | None:
    # namein: the text, when under NAMEDATALEN bytes (else cut: the input function);
    # a character is at most four of them.
    joined = "".join(texts)
    longest = max(map(len, texts), default=0)
    if "\0" in joined or longest >= (NAMEDATALEN if joined.isascii() else NAMEDATALEN // 4):
        return None
    return list(texts)


def _char(texts: list[str]) -> list[object] | None:
    # charin: the first byte of an ASCII text ("100" is "1"); "\ooo" octal escapes,
    # empty texts and other first bytes are left to the input function.
    joined = "".join(texts)
    if not joined.isascii() or "\\" in joined or "\0" in joined or "" in texts:
        return None
    return list(map(operator.getitem, texts, repeat(0)))


_uuid_forms: Final = _all_match(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"|[0-9a-fA-F]{32}"  # uuid_in's form without hyphens, which mixes with the other
)


_UUID_INT: Final = UUID.__dict__["int"]
_UUID_IS_SAFE: Final = UUID.__dict__["is_safe"]


def _uuids(numbers: Iterator[int], count: int) -> list[object]:
    """``UUID(int=number)`` for each number, built by C-level passes as intervals()
    builds Intervals: empty instances whose two slots are filled through their slot
    descriptors (UUID's ``__init__`` costs ~1 us; tests check the results equal
    constructed ones)."""
    made: list[object] = list(map(object.__new__, repeat(UUID, count)))
    deque(map(_UUID_INT.__set__, made, numbers), 0)
    deque(map(_UUID_IS_SAFE.__set__, made, repeat(SafeUUID.unknown)), 0)
    return made


def _uuid(texts: list[str]) -> BulkResult:
    # uuid_out's form, or its 32 hex digits (either case) alone: read as string_to_uuid.
    declined = _declined(texts, _uuid_forms(texts))
    if declined is not None:
        return declined
    digits = _SEPARATOR.join(texts).replace("-", "").split(_SEPARATOR)
    return _uuids(map(int, digits, repeat(16)), len(texts))


# --------------------------------------------------------------------------- by type

BULK_WHOLE: Final[dict[str, WholeDecoder]] = {
    "int2": _unquoting(_whole_integers(-(1 << 15), (1 << 15) - 1)),
    "int4": _unquoting(_whole_integers(-(1 << 31), (1 << 31) - 1)),
    "int8": _unquoting(_whole_integers(-(1 << 63), (1 << 63) - 1)),
    "oid": _unquoting(_whole_integers(-(1 << 31), (1 << 32) - 1, wrap=1 << 32)),
    "float4": _unquoting(_whole_float4),
    "float8": _unquoting(_whole_float8),
    "numeric": _unquoting(_whole_numeric),
    "interval": _unquoting(one_field_array),
    "inet": partial(ip_whole, cidr=False),
    "cidr": partial(ip_whole, cidr=True),
    "json": json_scalars(jsonb=False),
    "jsonb": json_scalars(jsonb=True),
}
"""Element type name -> a reader of the whole array text, for arrays of numbers (and of
one-field intervals, "{1 day,2 days}", of bare IP addresses and of bare JSON scalars):
the values in order with None for NULL, Declined after the elements before one out of
form (with their values), or None when the text is in another form (the array decoder
then parses it)."""

BULK_TEXT: Final[dict[str, BulkDecoder]] = {
    "int2": _integers(-(1 << 15), (1 << 15) - 1, 5),
    "int4": _integers(-(1 << 31), (1 << 31) - 1, 10),
    "int8": _integers(-(1 << 63), (1 << 63) - 1, 19),
    "oid": _integers(-(1 << 31), (1 << 32) - 1, 10, wrap=1 << 32),
    "float4": _float4,
    "float8": _float8,
    "numeric": _numeric,
    "date": _iso(_DATE, date.fromisoformat),
    "time": _iso(_CLOCK, time.fromisoformat),
    "timetz": _iso(_CLOCK + _ZONE, time.fromisoformat),
    "timestamp": _iso(f"{_DATE} {_CLOCK}", datetime.fromisoformat),
    "timestamptz": _timestamptz,
    "interval": interval_texts,
    "macaddr": _macaddr,
    "bytea": _bytea,
    "text": _text,
    "name": _name,
    "char": _char,
    "varchar": _text,
    "bpchar": _text,
    "uuid": _uuid,
    "inet": partial(ip_texts, cidr=False),
    "cidr": partial(ip_texts, cidr=True),
    "json": json_texts(jsonb=False),
    "jsonb": json_texts(jsonb=True),
}
"""Element type name -> its whole-array fast path."""

# --------------------------------------------------------------------------- binary

BinaryBulk = Callable[[list[int]], list[object] | None]
_USECS_PER_DAY: Final = 24 * USECS_PER_HOUR


def _microseconds(us: list[int]) -> Iterator[timedelta]:
    zeros = repeat(0)
    return map(timedelta, zeros, zeros, us)


def _timestamps(epoch: datetime) -> BinaryBulk:
    """timestamp_recv for values inside Python's years: ``epoch + us``, in C."""

    def convert(us: list[int]) -> list[object] | None:
        if min(us) < _PY_US_MIN or max(us) >= _PY_US_END:
            return None
        return list(map(operator.add, repeat(epoch), _microseconds(us)))

    return convert


def _dates(days: list[int]) -> list[object] | None:
    if min(days) < _PY_DAY_MIN or max(days) > _PY_DAY_MAX:
        return None
    return list(map(date.fromordinal, map(operator.add, days, repeat(_EPOCH_ORDINAL))))


def _times(us: list[int]) -> list[object] | None:
    if min(us) < 0 or max(us) >= _USECS_PER_DAY:  # 24:00:00 is EndOfDay
        return None
    return list(map(datetime.time, map(operator.add, repeat(_EPOCH), _microseconds(us))))


BULK_BINARY: Final[dict[str, tuple[str, BinaryBulk | None]]] = {
    "bool": ("?", None),  # boolrecv: any non-zero byte is true, as struct's "?"
    "int2": ("h", None),
    "int4": ("i", None),
    "int8": ("q", None),
    "oid": ("I", None),
    "float4": ("f", None),
    "float8": ("d", None),
    "date": ("i", _dates),
    "time": ("q", _times),
    "timestamp": ("q", _timestamps(_EPOCH)),
    "timestamptz": ("q", _timestamps(_EPOCH_UTC)),
}
"""Element type name -> the struct code of its send format and the conversion of the
unpacked numbers (None: the numbers are the values), for arrays unpacked whole. A
conversion returns None for any number outside the range it handles, and the array
is then decoded element by element."""


# --------------------------------------------------------------------------- binary, any size

BinaryElements = Callable[[list[bytes]], BulkResult]
"""Distinct binary elements -> their values, or None (decoded one by one)."""


def _utf8(raws: list[bytes]) -> list[str] | None:
    """textrecv over all elements: valid UTF-8 without NUL, else None."""
    if b"\0" in b"".join(raws):
        return None
    try:
        return list(map(bytes.decode, raws))
    except UnicodeDecodeError:
        return None


def _text_recv(raws: list[bytes]) -> list[object] | None:
    return cast("list[object] | None", _utf8(raws))


def _json_recv(jsonb: bool) -> BinaryElements:
    check = json_texts(jsonb)

    def decode(raws: list[bytes]) -> BulkResult:
        if jsonb:  # jsonb_recv: version byte 1, then the text
            if not all(map(bytes.startswith, raws, repeat(b"\x01"))):
                return None
            raws = list(map(_after_version, raws))
        texts = _utf8(raws)
        return None if texts is None else check(texts)

    return decode


_after_version: Final = itemgetter(slice(1, None))


def _sized(raws: list[bytes], size: int, layout: str) -> tuple[object, ...] | None:
    """All elements unpacked by one struct call, when each is ``size`` bytes."""
    if raws.count(b"") or len(set(map(len, raws))) != 1 or len(raws[0]) != size:
        return None
    return struct.unpack("!" + layout * len(raws), b"".join(raws))


def _uuid_recv(raws: list[bytes]) -> list[object] | None:
    if _sized(raws, 16, "16s") is None:
        return None
    # Big-endian, as UUID(bytes=...) reads them (int.from_bytes' default since 3.11).
    return _uuids(map(int.from_bytes, raws), len(raws))


_USECS_PER_DAY_ALL: Final = 24 * USECS_PER_HOUR


def _timetz_recv(raws: list[bytes]) -> list[object] | None:
    flat = _sized(raws, 12, "qi")
    if flat is None:
        return None
    us, west = cast(tuple[int, ...], flat[0::2]), cast(tuple[int, ...], flat[1::2])
    # 24:00:00 (EndOfDay) and zones out of range are left to timetz_recv.
    if min(us) < 0 or max(us) >= _USECS_PER_DAY_ALL:
        return None
    if min(west) <= -TZDISP_LIMIT or max(west) >= TZDISP_LIMIT:
        return None
    distinct = list(set(west))
    zone_of = dict(
        zip(
            distinct,
            map(timezone, map(timedelta, repeat(0), map(operator.neg, distinct))),
            strict=True,
        )
    )
    seconds = list(map(operator.floordiv, us, repeat(USECS_PER_SEC)))
    return list(
        map(
            time,
            map(operator.floordiv, seconds, repeat(3600)),
            map(operator.mod, map(operator.floordiv, seconds, repeat(60)), repeat(60)),
            map(operator.mod, seconds, repeat(60)),
            map(operator.mod, us, repeat(USECS_PER_SEC)),
            map(zone_of.__getitem__, west),
        )
    )


def _interval_recv(raws: list[bytes]) -> list[object] | None:
    flat = _sized(raws, 16, "qii")
    if flat is None:
        return None
    us = cast(list[int], list(flat[0::3]))
    # PostgreSQL 17's infinities have microseconds at an extreme: interval_recv's.
    if us.count(INT64_MAX) or us.count(INT64_MIN):
        return None
    return intervals(cast(list[int], list(flat[2::3])), cast(list[int], list(flat[1::3])), us)


# network_recv's families and address sizes, by IP version.
_FAMILY: Final = {4: (2, 4), 6: (3, 16)}


def _ip_recv(cidr: bool) -> BinaryElements:
    """network_recv for arrays of IPv4 or of IPv6 elements: family, bits, is_cidr
    (ignored), length and the address, all unpacked at once; the values made as the
    text path makes them. Arrays mixing the two go element by element."""

    def decode(raws: list[bytes]) -> list[object] | None:
        version, flat = 4, _sized(raws, 8, "BBBBI")
        if flat is None:
            version, flat = 6, _sized(raws, 20, "BBBB16s")
            if flat is None:
                return None
        family, size = _FAMILY[version]
        n = len(raws)
        bits = cast(tuple[int, ...], flat[1::5])
        if flat[0::5].count(family) != n or flat[3::5].count(size) != n:
            return None
        if max(bits) > size * 8:
            return None
        numbers = cast(tuple[int, ...], flat[4::5])
        if version == 6:
            numbers = tuple(map(int.from_bytes, cast(tuple[bytes, ...], numbers)))
        # cidrs() is None for host bits set: network_recv's error for cidr.
        return cidrs(version, numbers, bits) if cidr else inets(version, numbers, bits)

    return decode


BULK_BINARY_ELEMENTS: Final[dict[str, BinaryElements]] = {
    "text": _text_recv,
    "varchar": _text_recv,
    "bpchar": _text_recv,
    "json": _json_recv(jsonb=False),
    "jsonb": _json_recv(jsonb=True),
    "uuid": _uuid_recv,
    "timetz": _timetz_recv,
    "interval": _interval_recv,
    "inet": _ip_recv(cidr=False),
    "cidr": _ip_recv(cidr=True),
    "numeric": numerics_recv,
}
"""Element type name -> the conversion of all distinct binary elements of an array at
once, for variable-sized or multi-field elements (see BULK_BINARY for single numbers)."""

BinaryArea = Callable[[bytes, int, int], BulkResult]
BULK_BINARY_AREAS: Final[dict[str, BinaryArea]] = {
    "numeric": numerics_array,
    "inet": partial(ip_area, cidr=False),
    "cidr": partial(ip_area, cidr=True),
}
"""Element type name -> a reader of a binary array's whole element area (the array
bytes, the offset of the first element's length, the element count): the values in
order with None for NULL, Declined at an element it stops at (with the values before
it and the offset of its length word: the rest goes to the element path), or None to
leave the array to the element path."""
