"""numeric_recv over all distinct elements of a binary numeric array at once.

One call per element of the receive function costs ~2 us (a 1 MB array of small
numbers held 145,000 of them). The elements' 8-byte headers (digit count, weight,
sign, display scale) are mostly a few: by_header checks each distinct header once and
makes it a %-format template of the element's digit groups (its sign, the groups as
zero-padded text, the last ones cut by a precision where the scale hides digits, the
zeros the scale pads with, the exponent), so that one format of all elements'
templates over all digit groups writes every element's text, and Decimal() reads each.
Elements of one size and one header (one_header, checked on the joined bytes) skip the
per-element slicing: one struct call past the headers unpacks all their digits. With
many headers, by_element makes the texts by C-level passes over all elements:
each element's slice of the digits' text, cut or padded to its display scale. Either
way the result is what numeric_recv gives: the same digit string is built and read by
Decimal().

Anything numeric_recv refuses (short data, a length other than its digit count says,
a bad sign word, a scale over 0x3FFF, a digit of 10000 or more) makes the conversion
decline, and the array decoder then runs the receive function on each element, which
gives the exact error. Zeros past an element's digits that its bytes do not spell are
kept as its exponent beyond COMPACT_ZEROS, as numeric_recv keeps them.

numerics_array goes further: it reads a whole array's element area without making one
bytes object per element. Elements come in runs of one length word and one header (a
column of prices: 99 of 1.01..1.99, then 2.00, ...); a regular expression per distinct
12-byte prefix (length word and header) finds where each run ends at C speed, and one
struct call over the whole area unpacks every element's digit groups past its prefix.
Arrays whose runs are short (sizes or headers that keep changing) or whose prefixes are
many are declined after a bounded number of runs, for the element path to convert.
"""

from __future__ import annotations

import re
import struct
from collections import deque
from collections.abc import Iterator
from decimal import Decimal
from functools import lru_cache
from itertools import accumulate, chain, compress, count, islice, repeat
from operator import add, and_, gt, itemgetter, mul, not_, rshift, setitem, sub
from typing import Final, NamedTuple, cast

from codec.values._numbers import (
    _NAN,
    _NINF,
    _PINF,
    COMPACT_ZEROS,
    NUMERIC_DSCALE_MAX,
    NUMERIC_HEADER,
    NUMERIC_NAN,
    NUMERIC_NEG,
    NUMERIC_NINF,
    NUMERIC_PINF,
    NUMERIC_POS,
    ScaledDecimal,
)
from codec.values._ranges import BulkResult, Declined

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
# Headers converted one by one before the by-element passes: a few, and 1 in 16 elements.
_KINDS_FEW: Final = 16
_KINDS_PER: Final = 16
# numerics_array declines past this many runs plus 1 per _RUNS_PER elements read, and
# past _PREFIXES_MAX distinct prefixes (a regular expression compiled for each).
_RUNS_FEW: Final = 64
_RUNS_PER: Final = 8
_PREFIXES_MAX: Final = 64
_INT32: Final = struct.Struct("!i")
_NULLS: Final = re.compile(b"(?:\xff\xff\xff\xff)*+")


@lru_cache(maxsize=256)
def _run_of(prefix: bytes) -> re.Pattern[bytes]:
    """Elements that begin with ``prefix`` (a length word L >= 8 and a header), each
    followed by the rest of its L bytes: matched possessively, to where they end."""
    (length,) = _INT32.unpack_from(prefix)
    return re.compile(b"(?s)(?:%s.{%d})*+" % (re.escape(prefix), length - 8))


class _Kind(NamedTuple):
    """What numerics_array makes of elements with one 12-byte prefix."""

    run: re.Pattern[bytes]  # where a run of them ends
    stride: int  # 4 + their length
    code: str  # the struct code of one, past its prefix: its digit groups, or padding
    shape: _Shape


def numerics_array(data: bytes, pos: int, total: int) -> BulkResult:
    """The ``total`` elements of a binary numeric array from ``pos`` (the first length
    word) to the end of ``data``, as numeric_recv gives them (None for NULL); Declined
    at an element whose length or header numeric_recv refuses (or that is one kind too
    many, or runs past the end), with the values of those before it and its offset; or
    None to decline: bytes left over, or runs too short for reading by runs to pay."""
    n = len(data)
    start = pos
    kinds: dict[bytes, _Kind] = {}
    sizes: list[int] = []  # each run's elements
    prefixes: list[bytes | None] = []  # each run's prefix (None: NULLs)
    codes: list[str] = []
    index = 0

    def stopped() -> BulkResult:
        """Declined at element ``index``, whose length word is at ``pos``."""
        before = _from_runs(data, start, kinds, sizes, prefixes, "".join(codes)) if index else None
        return Declined(index, before, pos) if before is not None else None

    while index < total:
        if n - pos < 4 or len(sizes) > _RUNS_FEW + index // _RUNS_PER:
            return None
        prefix = data[pos : pos + 12]
        kind = kinds.get(prefix)
        if kind is None:
            (length,) = _INT32.unpack_from(data, pos)
            if length == -1:
                end = _NULLS.match(data, pos, pos + 4 * (total - index)).end()  # type: ignore[union-attr]
                found = (end - pos) >> 2
                sizes.append(found)
                prefixes.append(None)
                codes.append("4x" * found)
                index += found
                pos = end
                continue
            kind = _kind(prefix, length, len(kinds))
            if kind is None:
                return stopped()
            kinds[prefix] = kind
        stride = kind.stride
        end = kind.run.match(data, pos, pos + (total - index) * stride).end()  # type: ignore[union-attr]
        if end == pos:  # the element runs past the end
            return stopped()
        found = (end - pos) // stride
        sizes.append(found)
        prefixes.append(prefix)
        codes.append(kind.code * found)
        index += found
        pos = end
    if pos != n:
        return None
    return _from_runs(data, start, kinds, sizes, prefixes, "".join(codes))


def _kind(prefix: bytes, length: int, known: int) -> _Kind | None:
    """The kind of elements that begin with ``prefix`` (of ``length``), the array's
    ``known + 1``-th; None if numeric_recv refuses them or there are too many kinds."""
    if length < 8 or len(prefix) < 12 or known >= _PREFIXES_MAX:
        return None
    head = prefix[4:]
    ndigits = NUMERIC_HEADER.unpack(head)[0]
    shape = _shape(head) if 8 + 2 * ndigits == length else None
    if shape is None:
        return None
    code = f"{4 + length}x" if shape.special else f"12x{ndigits}H"
    return _Kind(_run_of(prefix), 4 + length, code, shape)


def _from_runs(
    data: bytes,
    start: int,
    kinds: dict[bytes, _Kind],
    sizes: list[int],
    prefixes: list[bytes | None],
    code: str,
) -> list[object] | None:
    """The values of the runs of ``sizes`` elements with ``prefixes`` (of ``kinds``),
    whose digit groups (from ``start``) the struct ``code`` unpacks."""
    shapes = {p: kind.shape for p, kind in kinds.items() if not kind.shape.special}
    groups = struct.Struct("!" + code).unpack_from(data, start) if shapes else ()
    numbers = list(map(shapes.__contains__, prefixes))
    templates = {p: shape.template for p, shape in shapes.items()}
    number_prefixes = cast(list[bytes], list(compress(prefixes, numbers)))
    number_sizes = list(compress(sizes, numbers))
    template = "".join(map(mul, map(templates.__getitem__, number_prefixes), number_sizes))
    heads: list[bytes] | None = None
    if len(shapes) > 1 and any(shape.scaled or shape.unsure for shape in shapes.values()):
        heads = list(chain.from_iterable(map(repeat, number_prefixes, number_sizes)))
    values = _numbers(groups, template, shapes, heads)
    if values is None or all(numbers):
        return values
    # NULLs and NaN or infinities: constants between the runs of numbers.
    converted = iter(values)
    result: list[object] = []
    for prefix, size, number in zip(prefixes, sizes, numbers, strict=True):
        if number:
            result.extend(islice(converted, size))
        elif prefix is None:
            result.extend(repeat(None, size))
        else:
            result.extend(repeat(_SPECIAL[kinds[prefix].shape.sign], size))
    return result


def numerics_recv(raws: list[bytes]) -> list[object] | None:
    """The values of ``raws`` as numeric_recv gives them, or None."""
    n = len(raws)
    if not n:
        return []
    lengths = list(map(len, raws))
    first = raws[0]
    size = len(first)
    if size >= 8 and lengths.count(size) == n:
        blob = b"".join(raws)
        # One header: its bytes recur every ``size`` bytes of the elements joined.
        if all([blob[i::size] == first[i : i + 1] * n for i in range(8)]):
            return one_header(raws, blob)
    heads = list(map(_HEAD, raws))
    kinds = dict.fromkeys(heads)
    if len(kinds) <= _KINDS_FEW + n // _KINDS_PER:
        return by_header(raws, heads, kinds, lengths)
    return by_element(raws, heads)


def one_header(raws: list[bytes], blob: bytes) -> list[object] | None:
    """The values of ``raws``, all of one size and one header (``blob`` is them joined):
    one struct call past the headers unpacks every digit group."""
    n = len(raws)
    head = raws[0][:8]
    ndigits = NUMERIC_HEADER.unpack(head)[0]
    if len(raws[0]) != 8 + 2 * ndigits:
        return None
    shape = _shape(head)
    if shape is None:
        return None
    if shape.special:
        return [_SPECIAL[shape.sign]] * n
    groups = struct.Struct("!" + f"8x{ndigits}H" * n).unpack(blob) if ndigits else ()
    # Where no digit is cut, a zero's digits are all 0: no first digit 0, no zero.
    any_zero = shape.cut or not ndigits or 0 in groups[::ndigits]
    return _numbers(groups, shape.template * n, {head: shape}, None, any_zero)


def by_header(
    raws: list[bytes], heads: list[bytes], kinds: dict[bytes, None], lengths: list[int]
) -> list[object] | None:
    """The values of ``raws`` (of ``lengths``), whose headers (``heads``, the distinct
    ones ``kinds``) are few: each header's checks and text are worked out once, as a
    %-format template that takes the element's digit groups, and one format of all
    templates writes every element's text at once."""
    n = len(raws)
    # The sizes first: a header's template is as long as the digits it says it has.
    sizes: dict[bytes, int] = {}
    for head in kinds:
        if len(head) != 8:
            return None
        sizes[head] = 8 + 2 * NUMERIC_HEADER.unpack(head)[0]  # under 8 if it is negative
    if len(sizes) == 1:
        if lengths.count(sizes[heads[0]]) != n:
            return None
    elif lengths != list(map(sizes.__getitem__, heads)):
        return None
    shapes: dict[bytes, _Shape] = {}
    for head in kinds:
        found = _shape(head)
        if found is None:
            return None
        shapes[head] = found
    if any(shape.special for shape in shapes.values()):
        signs = {head: shape.sign for head, shape in shapes.items()}
        return _with_specials(raws, tuple(map(signs.__getitem__, heads)))
    blob = b"".join(map(_DIGITS, raws))
    groups = struct.unpack(f"!{len(blob) // 2}H", blob)
    if len(shapes) == 1:
        return _numbers(groups, shapes[heads[0]].template * n, shapes, None)
    templates = {head: shape.template for head, shape in shapes.items()}
    return _numbers(groups, "".join(map(templates.__getitem__, heads)), shapes, heads)


def _numbers(
    groups: tuple[int, ...],
    template: str,
    shapes: dict[bytes, _Shape],
    heads: list[bytes] | None,
    any_zero: bool = True,
) -> list[object] | None:
    """The numbers whose digit groups are ``groups`` and texts ``template`` (of the
    shapes of their ``heads``; None when there is one shape), or None for a digit of
    10000 or more. ``any_zero`` is False when no element is zero."""
    if groups and max(groups) >= 10000:
        return None
    texts = (template % tuple(map(_GROUP_TEXT.__getitem__, groups))).split(",")
    texts.pop()
    n = len(texts)
    scaled = {head: shape.dscale for head, shape in shapes.items() if shape.scaled}
    if not scaled:
        values = list(map(Decimal, texts))
    elif heads is None:
        values = list(map(Decimal.__new__, repeat(ScaledDecimal, n), texts))
        (dscale,) = scaled.values()
        deque(map(setattr, values, repeat("_dscale"), repeat(dscale)), 0)
    else:
        kinds_of = {head: ScaledDecimal if head in scaled else Decimal for head in shapes}
        values = list(map(Decimal.__new__, map(kinds_of.__getitem__, heads), texts))
        places = list(compress(count(), map(scaled.__contains__, heads)))
        dscales = map(scaled.__getitem__, map(heads.__getitem__, places))
        deque(map(setattr, map(values.__getitem__, places), repeat("_dscale"), dscales), 0)
    # A negative sign on digits that are all zero or all cut, or zeros kept as an
    # exponent: numeric_recv gives the unsigned zero at the element's scale.
    unsure = any_zero and any(shape.unsure for shape in shapes.values())
    if unsure and any(map(Decimal.is_zero, values)):
        places = list(compress(count(), map(Decimal.is_zero, values)))
        if heads is None:
            (shape,) = shapes.values()
            at_scale: Iterator[Decimal] = repeat(shape.zero)
        else:
            zeros = {head: shape.zero for head, shape in shapes.items()}
            at_scale = map(zeros.__getitem__, map(heads.__getitem__, places))
        deque(map(setitem, repeat(values), places, at_scale), 0)
    return values  # type: ignore[return-value]


class _Shape(NamedTuple):
    """What a header makes of an element: its sign word, and for a number its text as a
    template of its digit groups (the groups a scale cuts print as nothing)."""

    sign: int
    special: bool
    template: str
    scaled: bool  # a ScaledDecimal (zeros kept as an exponent under a display scale)
    dscale: int
    unsure: bool  # a zero may come out signed or at another exponent
    zero: Decimal
    cut: bool = False  # digits cut: a zero may have digits that are not all 0


def _shape(head: bytes) -> _Shape | None:
    """The shape of elements with ``head`` (8 bytes, a digit count of 0 or more), or
    None if numeric_recv refuses it."""
    ndigits, weight, sign, dscale = NUMERIC_HEADER.unpack(head)
    if sign in _SPECIAL:
        return _Shape(sign, True, "", False, 0, False, _NAN)
    if sign not in _SIGN_TEXT or dscale > NUMERIC_DSCALE_MAX:
        return None
    zero = f"0E-{dscale}"
    shape = _Shape(sign, False, zero + ",", False, dscale, False, Decimal(zero))
    if not ndigits:
        return shape
    prefix, every = _SIGN_TEXT[sign], "%s" * ndigits
    exp10 = 4 * (weight + 1 - ndigits)
    if exp10 + dscale > COMPACT_ZEROS:  # zeros the bytes do not spell: an exponent
        template = f"{prefix}{every}E{exp10:+d},"
        return shape._replace(template=template, scaled=dscale > 0, unsure=True)
    negative = sign == NUMERIC_NEG
    if exp10 >= -dscale:  # numeric_recv pads to the scale
        template = f"{prefix}{every}{'0' * (exp10 + dscale)}E-{dscale},"
        return shape._replace(template=template, unsure=negative)
    shown = 4 * ndigits + exp10 + dscale  # it truncates the digits the scale hides
    if shown <= 0:
        return shape._replace(template="%.0s" * ndigits + zero + ",")
    whole, part = divmod(shown, 4)
    cut = f"%.{part}s" if part else ""
    hidden = "%.0s" * (ndigits - whole - (part > 0))
    template = f"{prefix}{'%s' * whole}{cut}{hidden}E-{dscale},"
    return shape._replace(template=template, unsure=negative, cut=True)


def by_element(raws: list[bytes], heads: list[bytes]) -> list[object] | None:
    """The values of ``raws`` (their headers ``heads``), converted by C-level passes over
    all elements, for elements whose headers are many."""
    n = len(raws)
    digits = list(map(_DIGITS, raws))
    joined = b"".join(heads)
    if len(joined) != 8 * n:  # an element under 8 bytes
        return None
    flat = struct.unpack(f"!{4 * n}H", joined)
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
    tails = list(map(_spelt("E-{}", set(scales)).__getitem__, scales))
    # Zeros beyond COMPACT_ZEROS that the bytes do not spell are not written out: the
    # element keeps its digits and exponent, as numeric_recv does (see ScaledDecimal).
    compact = list(compress(count(), map(gt, pads, repeat(COMPACT_ZEROS))))
    if compact:
        exponents = list(map(sub, map(pads.__getitem__, compact), map(scales.__getitem__, compact)))
        spelt = _spelt("E{:+d}", set(exponents))
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


def _spelt(form: str, numbers: set[int]) -> dict[int, str]:
    """Each of ``numbers`` written with ``form``, by a C-level pass (they may be as many
    as the elements)."""
    return dict(zip(numbers, map(form.format, numbers), strict=True))


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
