"""numerics_array: a whole binary numeric array read by runs of one length and header.

Every array it converts must give what numeric_recv gives element by element (the
reference below decodes each element alone, OID 1700, so the comparison holds once the
array decoder calls numerics_array); every array the element path refuses, it declines.
Its Python-level work depends on the number of runs, not of elements.
"""

from __future__ import annotations

import struct
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_values_adversarial import traced

import codec.values._bulk_numeric as bulk_numeric
from codec.errors import DecodeError
from codec.values import ScaledDecimal, decode_binary, encode_binary
from codec.values._bulk_numeric import numerics_array
from codec.values._ranges import Declined

NUMERIC, NUMERIC_ARRAY = 1700, 1231
HEAD = struct.Struct("!hhHH")  # ndigits, weight, sign, dscale
POS, NEG, NAN, PINF, NINF = 0x0000, 0x4000, 0xC000, 0xD000, 0xF000
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def numeric(ndigits: int, weight: int, sign: int, dscale: int, digits: list[int]) -> bytes:
    return HEAD.pack(ndigits, weight, sign, dscale) + struct.pack(f"!{len(digits)}H", *digits)


def array(elements: list[bytes | None], ndim: int = 1) -> tuple[bytes, int]:
    """The array of ``elements`` (one dimension, or two of len x 1) and the offset of
    its first element."""
    total = len(elements)
    has_null = any(e is None for e in elements)
    dims = [(total, 1)] if ndim == 1 else [(total, 1), (1, -3)]
    parts = [struct.pack("!iiI", len(dims), int(has_null), NUMERIC)]
    parts += [struct.pack("!ii", size, low) for size, low in dims]
    pos = len(b"".join(parts))
    for element in elements:
        parts.append(struct.pack("!i", -1) if element is None else struct.pack("!i", len(element)))
        parts.append(element or b"")
    return b"".join(parts), pos


def reference(elements: list[bytes | None]) -> list[object] | None:
    """numeric_recv on each element alone, or None if one is refused."""
    try:
        return [None if e is None else decode_binary(NUMERIC, e) for e in elements]
    except DecodeError:
        return None


def same(got: list[object], want: list[object]) -> bool:
    """The same values: types, signs, exponents and display scales included."""
    if len(got) != len(want):
        return False
    for a, b in zip(got, want, strict=True):
        if type(a) is not type(b):
            return False
        if isinstance(a, Decimal):
            assert isinstance(b, Decimal)
            if str(a) != str(b) or a.as_tuple() != b.as_tuple():
                return False
            if isinstance(a, ScaledDecimal) and a.dscale != b.dscale:  # type: ignore[attr-defined]
                return False
    return True


# A header of every kind an array holds: small and extreme weights and scales (zeros the
# bytes do not spell, ScaledDecimal), negative signs (negative zero), NaN and infinities.
weights = st.one_of(st.integers(-8, 8), st.sampled_from([-32768, -200, 200, 32767]))
scales = st.one_of(st.integers(0, 12), st.sampled_from([40, 100, 1000, 0x3FFF]))
signs = st.sampled_from([POS, POS, NEG, NEG, NAN, PINF, NINF])
headers = st.tuples(st.integers(0, 5), weights, signs, scales)
group = st.one_of(st.integers(0, 9999), st.sampled_from([0, 0, 1, 9999]))


@st.composite
def blocks(draw: st.DrawFn, max_blocks: int = 12) -> list[bytes | None]:
    """Elements in runs: each block repeats one header (or NULL) with its own digits."""
    elements: list[bytes | None] = []
    for _ in range(draw(st.integers(1, max_blocks))):
        size = draw(st.integers(1, 40))
        if draw(st.integers(0, 6)) == 0:
            elements += [None] * size
            continue
        ndigits, weight, sign, dscale = draw(headers)
        for _ in range(size):
            digits = draw(st.lists(group, min_size=ndigits, max_size=ndigits))
            elements.append(numeric(ndigits, weight, sign, dscale, digits))
    return elements


values = st.one_of(
    st.none(),
    st.decimals(places=2, min_value=-(10**9), max_value=10**9),
    st.decimals(allow_nan=True, allow_infinity=True).filter(lambda d: not d.is_snan()),
    st.sampled_from([Decimal("-0.00"), Decimal("0E-40"), Decimal("1E+300"), Decimal("-5E-500")]),
)


@SETTINGS
@given(blocks(), st.sampled_from([1, 2]))
def test_runs_convert_as_numeric_recv(elements: list[bytes | None], ndim: int) -> None:
    data, pos = array(elements, ndim)
    want = reference(elements)
    got = numerics_array(data, pos, len(elements))
    if want is None:
        assert not isinstance(got, list)
        _check_stop(got, data, pos, elements)
        return
    # At most 12 runs and prefixes, far under the limits: only refusals decline.
    assert isinstance(got, list)
    assert same(got, want)
    # ... which is what the array decoder gives, whichever path it takes.
    decoded = decode_binary(NUMERIC_ARRAY, data)
    flat = decoded if ndim == 1 else [row[0] for row in decoded.elements]  # type: ignore[attr-defined]
    assert same(got, flat)  # type: ignore[arg-type]


@SETTINGS
@given(st.lists(values, min_size=1, max_size=300))
def test_encoded_decimals_convert_as_decoded(items: list[Decimal | None]) -> None:
    data = encode_binary(NUMERIC_ARRAY, items)
    want = reference([None if d is None else encode_binary(NUMERIC, d) for d in items])
    assert want is not None
    got = numerics_array(data, 20, len(items))
    if isinstance(got, list):
        assert same(got, want)


def _check_stop(got: object, data: bytes, pos: int, elements: list[bytes | None]) -> None:
    """None, or Declined at an element: the values of those before it are the element
    path's, and its offset is where its length word is."""
    if got is None:
        return
    assert isinstance(got, Declined) and 0 < got.index < len(elements), got
    before = elements[: got.index]
    assert got.offset == pos + 4 * got.index + sum(len(e) for e in before if e is not None)
    want = reference(before)
    assert want is not None and got.before is not None and same(got.before, want)


@SETTINGS
@given(blocks(max_blocks=4), st.data())
def test_damaged_arrays_decline_where_the_element_path_refuses(
    elements: list[bytes | None], data: st.DataObject
) -> None:
    """A byte changed, bytes cut or added: numerics_array either gives the element
    path's values or declines, and declines whenever the element path raises."""
    whole, pos = array(elements)
    damaged = bytearray(whole)
    how = data.draw(st.sampled_from(["byte", "cut", "add"]))
    if how == "byte":
        at = data.draw(st.integers(pos, len(whole) - 1))
        damaged[at] = data.draw(st.integers(0, 255))
    elif how == "cut":
        del damaged[data.draw(st.integers(pos, len(whole) - 1)) :]
    else:
        damaged += bytes(data.draw(st.integers(1, 12)))
    raw = bytes(damaged)
    try:
        want: object = decode_binary(NUMERIC_ARRAY, raw)
    except DecodeError:
        want = None
    got = numerics_array(raw, pos, len(elements))
    if want is None:
        assert not isinstance(got, list)
    elif isinstance(got, list):
        assert same(got, want)  # type: ignore[arg-type]


def test_benchmark_column_is_read_by_runs() -> None:
    items: list[Decimal | None] = [Decimal(i).scaleb(-2) for i in range(3000)]
    items[7] = None
    items[2000:2010] = [Decimal("NaN")] * 10
    data = encode_binary(NUMERIC_ARRAY, items)
    got = numerics_array(data, 20, len(items))
    assert got is not None
    assert same(got, items)  # type: ignore[arg-type]


def test_declines_what_it_does_not_read() -> None:
    one = numeric(1, 0, POS, 0, [5])
    data, pos = array([one, one])
    assert numerics_array(data, pos, 2) == [Decimal(5), Decimal(5)]
    second = pos + 4 + len(one)
    assert numerics_array(data + b"\x00", pos, 2) is None  # bytes left over
    # Bytes missing: the second element runs past the end, the first is read.
    assert numerics_array(data[:-1], pos, 2) == Declined(1, [Decimal(5)], second)
    assert numerics_array(data, pos, 3) is None  # fewer elements than the dimensions say
    assert numerics_array(data, pos, 1) is None
    bad_length, _ = array([numeric(1, 0, POS, 0, [5]) + b"\x00\x00"])
    assert numerics_array(bad_length, pos, 1) is None
    short, _ = array([b"\x00\x00\x00"])
    assert numerics_array(short, pos, 1) is None
    for element, answer in (
        # A header it refuses: Declined there, the one before it read.
        (numeric(1, 0, 0x1234, 0, [5]), Declined(1, [Decimal(5)], second)),  # sign
        (numeric(1, 0, POS, 0x4000, [5]), Declined(1, [Decimal(5)], second)),  # scale
        (numeric(1, 0, POS, 0, [10000]), None),  # digit: checked once all are read
    ):
        refused, _ = array([one, element, one])
        assert numerics_array(refused, pos, 3) == answer
        try:
            decode_binary(NUMERIC_ARRAY, refused)
        except DecodeError:
            pass
        else:
            raise AssertionError("the element path takes what numerics_array refused")
    # A NaN's digits are not read: 10000 is no error there.
    nan, _ = array([numeric(1, 0, NAN, 0, [10000])])
    assert str(numerics_array(nan, pos, 1)) == "[Decimal('NaN')]"


def _events(data: bytes, pos: int, total: int) -> tuple[int, bool]:
    """Python-level call and line events in _bulk_numeric while numerics_array reads
    ``data``, and whether it converted."""
    bulk_numeric._run_of.cache_clear()  # each prefix's pattern compiled in both runs
    count, result = traced(lambda: numerics_array(data, pos, total), bulk_numeric.__file__.__eq__)
    return count, isinstance(result, list)


def _column(scale: int) -> list[bytes | None]:
    """A few runs of ``scale`` elements each: numbers of three sizes and headers, NULLs,
    NaN, a negative ScaledDecimal zero and numbers with a scale that cuts digits."""
    elements: list[bytes | None] = []
    for i in range(scale):
        elements.append(numeric(1, 0, POS, 0, [i % 10000]))
    elements += [None] * scale
    elements += [numeric(2, 3, NEG, 5, [i % 10000, 7]) for i in range(scale)]
    elements += [numeric(0, 0, NAN, 0, [])] * scale
    elements += [numeric(1, 200, NEG, 3, [0])] * scale
    elements += [numeric(3, -1, POS, 6, [1, 2, i % 10000]) for i in range(scale)]
    return elements


def test_work_grows_with_runs_not_elements() -> None:
    small, large = _column(50), _column(16 * 50)
    events_small, converted_small = _events(*array(small), len(small))
    events_large, converted_large = _events(*array(large), len(large))
    assert converted_small and converted_large
    assert events_large == events_small


def test_hostile_sizes_decline_after_bounded_work() -> None:
    """Sizes or headers that change every element would make a run (a regex match and
    a struct code) per element: it declines after a fixed number of runs."""
    for make in (
        lambda i: numeric(1 + i % 2, 0, POS, 0, [1] * (1 + i % 2)),  # sizes alternate
        lambda i: numeric(1, i % 3000, POS, 0, [1]),  # a new header each element
    ):
        small = [make(i) for i in range(1000)]
        large = [make(i) for i in range(16000)]
        events_small, converted_small = _events(*array(small), len(small))
        events_large, converted_large = _events(*array(large), len(large))
        assert not converted_small and not converted_large
        assert events_large == events_small
