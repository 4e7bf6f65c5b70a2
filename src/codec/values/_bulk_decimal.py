"""numeric_in over the texts of a numeric array's elements at once (codec.values._bulk):
the printed forms, and the exponent forms numeric_out never writes but numeric_in reads
("100e10", "1.5E-3"), whose zeros it writes out up to COMPACT_ZEROS of them; zeros come
unsigned and without an exponent ("-0.00" is 0.00, "0e5" is 0)."""

from __future__ import annotations

import json
import operator
from collections import deque
from decimal import Context, Decimal
from itertools import compress, count, repeat
from operator import ge, gt, mul, or_, sub
from typing import Final, cast

from codec.values._bulk_forms import (
    _all_match,
    _declined,
    _json_numbers,
    _not_null,
)
from codec.values._common import has_pg_space
from codec.values._numbers import COMPACT_ZEROS, MAX_INT_DIGITS
from codec.values._ranges import BulkResult, Declined

# numeric_out never writes an exponent; a text that does ("1e131000", hostile or by
# hand) gets from Decimal() the digits and exponent numeric_in keeps: down to -9999
# (within the scale limit with 100 fraction digits), or up to six digits, after at
# most 16 leading zeros. Texts with and without one may mix.
_numeric_forms: Final = _all_match(
    r"-?[0-9]{1,100}(?:\.[0-9]{1,100})?(?:[eE](?:-0{0,16}[0-9]{1,4}|\+?0{0,16}[0-9]{1,6}))?"
)


def _numeric(texts: list[str]) -> BulkResult:
    declined = _declined(texts, _numeric_forms(texts))
    if declined is not None or not texts:
        return declined
    values = list(map(Decimal, texts))
    final = _as_numeric_in(cast(list[object], values), ",".join(texts), texts)
    return values if final == len(values) else Declined(final, values[:final])  # type: ignore[return-value,arg-type]


def _as_numeric_in(
    values: list[object], joined: str, texts: list[str] | None = None, bounded: bool = False
) -> int:
    """Make ``values``, Decimal() of each of ``texts`` (None for NULL; ``joined``: the
    texts joined by commas, split when ``texts`` is None and needed), what numeric_in
    makes of them, in place: the zeros of exponents up to COMPACT_ZEROS written out,
    zeros unsigned and without an exponent ("-0.00" is 0.00, "0e5" is 0). How many are
    final: all, or those before the first with more digits before the point than
    numeric holds (numeric_in refuses it; none when ``bounded``: digit runs and
    exponents too short for that)."""
    final = len(values)
    exponents = joined.count("e") + joined.count("E")
    if exponents:
        if exponents == len(values):  # one each (a form has one at most): no NULL
            places, scaled, scaled_joined = None, cast(list[Decimal], values), joined
        else:
            texts = joined.split(",") if texts is None else texts
            flags = map(operator.contains, texts, repeat("e"))  # str.__contains__: 2x
            if "E" in joined:
                flags = map(or_, flags, map(operator.contains, texts, repeat("E")))
            places = list(compress(count(), flags))
            scaled = list(map(values.__getitem__, places))  # type: ignore[arg-type]
            scaled_joined = ",".join(map(texts.__getitem__, places))
        over = map(ge, map(Decimal.adjusted, scaled), repeat(MAX_INT_DIGITS))
        first = None if bounded else next(compress(count(), over), None)
        if first is not None:
            final = first if places is None else places[first]
        # (None of the exponents written out is on a value that long: no need to stop.)
        _write_out_zeros(scaled_joined, scaled)
        if places is not None:
            deque(map(operator.setitem, repeat(values), places, scaled), 0)
    # A zero's text begins with "0" or "-0" (after any whitespace).
    if joined.startswith(("0", "-0")) or ",0" in joined or "-0" in joined or has_pg_space(joined):
        _unsigned_zeros(values, "N" in joined or "n" in joined)
    return final


def _unsigned_zeros(values: list[object], nulls: bool) -> None:
    """numeric's zeros in ``values`` (with NULLs if ``nulls``), in place: Decimal keeps
    the sign of "-0.00" and the exponent of "0e5", numeric_in neither (0.00, 0)."""
    present = cast(list[Decimal], list(filter(_not_null, values)) if nulls else values)
    zeros = list(compress(count(), map(Decimal.is_zero, present)))
    if not zeros:
        return
    fixed = list(map(Decimal.copy_abs, map(present.__getitem__, zeros)))
    scaled_up = compress(count(), map(gt, map(Decimal.adjusted, fixed), repeat(0)))
    deque(map(operator.setitem, repeat(fixed), scaled_up, repeat(_ZERO)), 0)
    if nulls:  # the places of the zeros among all values, NULLs counted
        zeros = list(map(list(compress(count(), map(_not_null, values))).__getitem__, zeros))
    deque(map(operator.setitem, repeat(values), zeros, fixed), 0)


# Enough digits to rescale any value the exponent forms take to exponent 0 exactly.
_WRITE_OUT: Final = Context(prec=100 + 100 + COMPACT_ZEROS)
_ONE: Final = Decimal(1)
_ZERO: Final = Decimal(0)
_WRITTEN_OUT: Final = range(1, COMPACT_ZEROS + 1)


def _write_out_zeros(joined: str, values: list[Decimal]) -> None:
    """Rescale to exponent 0 the values whose exponent, the text's less its fraction
    digits, leaves 1 to COMPACT_ZEROS zeros, which numeric_in writes out. ``joined``:
    their texts joined by commas, each with an exponent."""
    lowered = joined.lower() if "E" in joined else joined
    pieces = lowered.replace("e", ",").split(",")  # mantissa, exponent, mantissa, ...
    texts = pieces[1::2]
    # The distinct exponent texts (few when they are short) are read once each.
    if "." in lowered:
        read = {text: int(text) for text in set(texts)}  # int() takes the "+"
        mantissas = pieces[0::2]
        points = list(map(str.find, mantissas, repeat(".")))
        # Digits after the point: length - 1 - where the point is, 0 without one.
        after = map(sub, map(sub, map(len, mantissas), points), repeat(1))
        fractions = map(mul, after, map(ge, points, repeat(0)))
        exponents = map(sub, map(read.__getitem__, texts), fractions)
        places = list(compress(count(), map(_WRITTEN_OUT.__contains__, exponents)))
    else:
        # Without fractions a value's exponent is its text's.
        wanted = {text for text in set(texts) if int(text) in _WRITTEN_OUT}
        places = list(compress(count(), map(wanted.__contains__, texts))) if wanted else []
    if places:
        rescaled = map(
            Decimal.quantize,
            map(values.__getitem__, places),
            repeat(_ONE),
            repeat(None),
            repeat(_WRITE_OUT),
        )
        deque(map(operator.setitem, repeat(values), places, rescaled), 0)


# Exponents too ("100e10", which numeric_out never writes): at most three digits long
# and digit runs of 100, so that no value holds MAX_INT_DIGITS digits before the point
# (_as_numeric_in's ``bounded``). Where some numbers have an exponent and others not,
# those with a fraction or an exponent come as their texts, converted together after
# (_fractions_read): cheaper than picking them out of all texts after.
_numeric_characters: Final = "-+.0123456789eE,NUL"
_read_numerics: Final = _json_numbers(
    _numeric_characters, json.JSONDecoder(parse_int=Decimal, parse_float=Decimal), 6, 100
)
_read_numeric_texts: Final = _json_numbers(
    _numeric_characters, json.JSONDecoder(parse_int=Decimal, parse_float=str), 6, 100
)


def _whole_numeric(text: str) -> BulkResult:
    exponents = text.count("e") + text.count("E")
    mixed = 0 < exponents <= text.count(",")  # fewer than the elements
    result = (_read_numeric_texts if mixed else _read_numerics)(text)
    if isinstance(result, list):
        values, read = result, text[1:-1]
    elif result is not None and result.before:
        values, read = result.before, text[1 : cast(int, result.offset) - 1]
    else:
        return result
    if mixed:
        _fractions_read(values)
        if "-0" in read:  # json's integer "-0", which Decimal keeps signed
            _unsigned_zeros(values, "N" in read or "n" in read)
    else:
        _as_numeric_in(values, read, bounded=True)
    return result


def _fractions_read(values: list[object]) -> None:
    """The texts json handed over in ``values`` (numbers with a fraction or an exponent)
    made what numeric_in makes of them, in place, by C-level passes over them alone."""
    fractions = list(map(operator.is_, map(type, values), repeat(str)))
    texts = cast(list[str], list(compress(values, fractions)))
    numbers = list(map(Decimal, texts))
    _as_numeric_in(cast(list[object], numbers), ",".join(texts), texts, bounded=True)
    if len(numbers) == len(values):
        values[:] = numbers
    else:
        deque(map(operator.setitem, repeat(values), compress(count(), fractions), numbers), 0)
