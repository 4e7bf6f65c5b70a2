"""numeric_recv over all distinct elements of a binary numeric array at once.

One call per element of the receive function costs ~2 us (a 1 MB array of small
numbers held 145,000 of them). Here every element's header and base-10000 digits are
unpacked by one struct call each, the digits turned into one text through a table of
zero-padded groups, and each element's Decimal made from its slice of that text, cut or
padded to its display scale, by C-level passes over all elements. The result is what
numeric_recv gives: the same digit string is built and read by Decimal().

Anything numeric_recv refuses (short data, a length other than its digit count says,
a bad sign word, a scale over 0x3FFF, a digit of 10000 or more) makes the conversion
decline, and the array decoder then runs the receive function on each element, which
gives the exact error. Zeros past an element's digits that its bytes do not spell are
kept as its exponent beyond COMPACT_ZEROS, as numeric_recv keeps them.
"""

from __future__ import annotations

import struct
from collections import deque
from decimal import Decimal
from itertools import accumulate, chain, compress, count, repeat
from operator import add, and_, gt, itemgetter, mul, not_, rshift, setitem, sub
from typing import Final

from codec.values._numbers import (
    _NAN,
    _NINF,
    _PINF,
    COMPACT_ZEROS,
    NUMERIC_DSCALE_MAX,
    NUMERIC_NAN,
    NUMERIC_NEG,
    NUMERIC_NINF,
    NUMERIC_PINF,
    NUMERIC_POS,
    ScaledDecimal,
)

_HEAD: Final = itemgetter(slice(None, 8))
_DIGITS: Final = itemgetter(slice(8, None))
_GROUP_TEXT: Final = tuple(f"{g:04d}" for g in range(10000))
# 4 * (weight + 1), the decimal digits before the point, by the weight's unsigned
# 16-bit word: 0..32767 and then -32768..-1.
_BEFORE_POINT: Final = tuple(range(4, 4 * 32768 + 4, 4)) + tuple(range(-4 * 32767, 4, 4))
# A sign and a leading zero, so that a coefficient cut to nothing still reads as 0.
_SIGN_TEXT: Final = {NUMERIC_POS: "0", NUMERIC_NEG: "-0"}
_SPECIAL: Final = {NUMERIC_NAN: _NAN, NUMERIC_PINF: _PINF, NUMERIC_NINF: _NINF}
_SIGN_WORDS: Final = frozenset((NUMERIC_POS, NUMERIC_NEG, *_SPECIAL))


def numerics_recv(raws: list[bytes]) -> list[object] | None:
    """The values of ``raws`` as numeric_recv gives them, or None."""
    n = len(raws)
    if not n:
        return []
    digits = list(map(_DIGITS, raws))
    heads = b"".join(map(_HEAD, raws))
    if len(heads) != 8 * n:  # an element under 8 bytes
        return None
    flat = struct.unpack(f"!{4 * n}H", heads)
    ndigits, weights, signs, scales = flat[0::4], flat[1::4], flat[2::4], flat[3::4]
    twice = list(map(add, ndigits, ndigits))
    # ndigits is signed: from 0x8000 on it is negative, which numeric_recv refuses.
    if max(ndigits) >= 0x8000 or twice != list(map(len, digits)):
        return None
    if signs.count(NUMERIC_POS) + signs.count(NUMERIC_NEG) != n:
        return _with_specials(raws, signs)
    if max(scales) > NUMERIC_DSCALE_MAX:
        return None
    blob = b"".join(digits)
    groups = struct.unpack(f"!{len(blob) // 2}H", blob)
    if groups and max(groups) >= 10000:
        return None
    text = "".join(map(_GROUP_TEXT.__getitem__, groups))
    lengths = list(map(add, twice, twice))
    ends = list(accumulate(lengths))
    # Zeros to append (numeric_recv pads to the scale) or, negative, digits to cut
    # (it truncates digits the scale hides): 4 * (weight + 1 - ndigits) + dscale.
    pads = list(map(sub, map(add, map(_BEFORE_POINT.__getitem__, weights), scales), lengths))
    tails = list(map({scale: f"E-{scale}" for scale in set(scales)}.__getitem__, scales))
    # Zeros beyond COMPACT_ZEROS that the bytes do not spell are not written out: the
    # element keeps its digits and exponent, as numeric_recv does (see ScaledDecimal).
    compact = list(compress(count(), map(gt, pads, repeat(COMPACT_ZEROS))))
    if compact:
        exponents = list(map(sub, map(pads.__getitem__, compact), map(scales.__getitem__, compact)))
        spelt = {exponent: f"E{exponent:+d}" for exponent in set(exponents)}
        deque(map(setitem, repeat(tails), compact, map(spelt.__getitem__, exponents)), 0)
        deque(map(setitem, repeat(pads), compact, repeat(0)), 0)
    # min(pad, 0) without a call: pad >> 31 is -1 for a negative pad, else 0.
    stops = list(map(add, ends, map(and_, pads, map(rshift, pads, repeat(31)))))
    starts = chain((0,), ends)
    if min(stops) < 0:  # cut past the text's start: the slice must stay empty
        stops = list(map(max, stops, starts))
        starts = chain((0,), ends)
    coefficients = map(text.__getitem__, map(slice, starts, stops))
    texts = list(
        map(
            "".join,
            zip(
                map(_SIGN_TEXT.__getitem__, signs),
                coefficients,
                map(mul, repeat("0"), pads),
                tails,
                strict=True,
            ),
        )
    )
    if compact:  # where the display scale asks for the unwritten zeros, a ScaledDecimal
        kinds: list[type[Decimal]] = [Decimal] * n
        wanted = compress(compact, map(scales.__getitem__, compact))
        deque(map(setitem, repeat(kinds), wanted, repeat(ScaledDecimal)), 0)
        values = list(map(Decimal.__new__, kinds, texts))
    else:
        values = list(map(Decimal, texts))
    # numeric has no negative zero: a negative value whose digits are all cut is 0.
    if any(map(Decimal.is_zero, filter(Decimal.is_signed, values))):
        negative_zeros = list(
            map(and_, map(Decimal.is_signed, values), map(Decimal.is_zero, values))
        )
        places = compress(count(), negative_zeros)
        unsigned = list(map(Decimal.copy_abs, compress(values, negative_zeros)))
        deque(map(setitem, repeat(values), places, unsigned), 0)
    if compact:
        _keep_unwritten(values, scales, compact)
    return values  # type: ignore[return-value]


def _keep_unwritten(values: list[Decimal], scales: tuple[int, ...], compact: list[int]) -> None:
    """The elements at ``compact``, whose texts keep their zeros as an exponent, made
    what numeric_recv gives: a zero at its scale (it has no digits to hold), and the
    ScaledDecimals given their display scale."""
    zeros = list(map(Decimal.is_zero, map(values.__getitem__, compact)))
    if any(zeros):
        places = list(compress(compact, zeros))
        at_scale = map(Decimal, map("0E-{}".format, map(scales.__getitem__, places)))
        deque(map(setitem, repeat(values), places, at_scale), 0)
        compact = list(compress(compact, map(not_, zeros)))
    places = list(compress(compact, map(scales.__getitem__, compact)))
    kept = map(values.__getitem__, places)
    deque(map(setattr, kept, repeat("_dscale"), map(scales.__getitem__, places)), 0)


def _with_specials(raws: list[bytes], signs: tuple[int, ...]) -> list[object] | None:
    """NaN and the infinities are constants, whatever their scale and digits say; the
    other elements are converted together and put back in their places."""
    if not _SIGN_WORDS.issuperset(signs):
        return None
    values: list[object] = list(map(_SPECIAL.get, signs))
    numbers = list(map(not_, map(_SPECIAL.__contains__, signs)))
    converted = numerics_recv(list(compress(raws, numbers))) if any(numbers) else []
    if converted is None:
        return None
    deque(map(setitem, repeat(values), compress(count(), numbers), converted), 0)
    return values
