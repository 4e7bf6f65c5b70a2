"""Arrays whose bulk conversion declines: the ranges it takes are still taken in bulk
(codec.values._ranges), and the first bad element raises as it did one by one."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import pytest
from test_values_adversarial import _work

from codec.errors import DecodeError
from codec.values import decode_binary, decode_text, encode_binary, type_by_name
from codec.values._common import Invalid
from codec.values._ranges import (
    BUDGET,
    ONE_BY_ONE,
    BulkResult,
    Declined,
    ElementError,
    convert_ranges,
)

# The i-th of many distinct valid element texts, per element type.
DISTINCT: dict[str, Callable[[int], str]] = {
    "int4": lambda i: str(i * 7919),
    "float8": lambda i: f"{i}.25",
    "numeric": lambda i: f"{i}.5",
    "date": lambda i: f"{2000 + i // 365:04d}-01-01",
    "timestamptz": lambda i: f"2000-01-01 00:00:{i % 60:02d}.{i:06d}+00",
    "interval": lambda i: f"{i} days",
    "inet": lambda i: f"2001:db8:{i:x}::{i:x}/64",
    "cidr": lambda i: f"10.{i // 256 % 256}.{i % 256}.0/24",
    "uuid": lambda i: f"{i:032x}",
    "json": lambda i: f"[{i}]",
    "jsonb": lambda i: f"{i}e131000",
}
BAD = {"json": "[", "jsonb": "1e999999999"}  # else "x"
MANY = 1024


def _array(
    type_name: str, count: int, bad_at: int | None, quoted: bool = True
) -> tuple[str, list[str]]:
    """An array text of ``count`` distinct elements (each quoted, or all bare) with the
    bad one at ``bad_at``, and its element texts."""
    texts = [DISTINCT[type_name](i) for i in range(count)]
    if bad_at is not None:
        texts.insert(bad_at, BAD.get(type_name, "x"))
    return "{" + ",".join(_quoted(texts) if quoted else texts) + "}", texts


def _expected_error(type_name: str, texts: list[str], bad_at: int, quoted: bool) -> tuple[int, str]:
    """Where and why array_in fails: the bad element's offset (its opening quote, or
    first character) plus its own error's, as decoding the elements one by one in order
    finds it."""
    element_oid = type_by_name(type_name).oid
    for index, element in enumerate(texts):
        try:
            decode_text(element_oid, element)
        except DecodeError as err:
            assert index == bad_at
            before = _quoted(texts[:index]) if quoted else texts[:index]
            start = 1 + sum(len(text) + 1 for text in before)
            return start + err.offset, f"element {index}: {err.reason}"
    raise AssertionError("no element is bad")


def _quoted(texts: list[str]) -> list[str]:
    return ['"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"' for t in texts]


# Element texts that can stand unquoted in an array (no braces, commas, quotes).
BARE = sorted(name for name in DISTINCT if name not in ("json", "jsonb"))


@pytest.mark.parametrize(
    ("type_name", "quoted"), [(n, True) for n in sorted(DISTINCT)] + [(n, False) for n in BARE]
)
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_the_first_bad_element_raises_where_one_by_one_found_it(
    type_name: str, quoted: bool, where: str
) -> None:
    bad_at = {"first": 0, "middle": MANY // 2 + 3, "last": MANY}[where]
    text, texts = _array(type_name, MANY, bad_at, quoted)
    with pytest.raises(DecodeError) as caught:
        decode_text(type_by_name(type_name).array_oid, text)
    assert (caught.value.offset, caught.value.reason) == _expected_error(
        type_name, texts, bad_at, quoted
    )


@pytest.mark.parametrize(
    ("type_name", "quoted"), [(n, True) for n in sorted(DISTINCT)] + [(n, False) for n in BARE]
)
def test_a_bad_last_element_costs_about_what_the_valid_array_does(
    type_name: str, quoted: bool
) -> None:
    """The elements before the bad one are converted in bulk (by ranges, or read whole
    up to it), not one by one: a few bulk conversions per halving and a short run one
    by one, where every element used to be parsed on its own (and twice, to find the
    error's place)."""
    info = type_by_name(type_name)
    valid = _work(info.array_oid, _array(type_name, MANY, None, quoted)[0])
    element = _work(info.oid, DISTINCT[type_name](MANY // 2))
    bad_last = _work(info.array_oid, _array(type_name, MANY, MANY, quoted)[0])
    halvings = (MANY // ONE_BY_ONE).bit_length()
    assert bad_last <= 2 * halvings * valid + 2 * ONE_BY_ONE * element, (valid, element, bad_last)


@pytest.mark.parametrize("bad_at", [0, 700, MANY - 2])
def test_binary_arrays_raise_at_the_first_bad_element_with_its_offset(bad_at: int) -> None:
    """A binary numeric array whose element ``bad_at`` has a base-10000 digit of 10000
    raises there, at that element's bytes plus the element's own error offset."""
    element_oid, oid = type_by_name("numeric").oid, type_by_name("numeric").array_oid
    values = [Decimal(i) for i in range(1, MANY)]
    data = bytearray(encode_binary(oid, values))
    # A 20-byte head (12, one dimension of 8), then each element's length and bytes.
    start = len(encode_binary(oid, values[:bad_at])) + 4 if bad_at else 24
    data[start + 8 : start + 10] = (10000).to_bytes(2, "big")
    element = bytes(data[start : start + 10])
    with pytest.raises(DecodeError) as own:
        decode_binary(element_oid, element)
    with pytest.raises(DecodeError) as caught:
        decode_binary(oid, bytes(data))
    assert (caught.value.offset, caught.value.reason) == (
        start + own.value.offset,
        f"element {bad_at}: {own.value.reason}",
    )


# --------------------------------------------------------------------------- the unit


def _decode(item: int) -> object:
    if item < 0:
        raise Invalid(0, f"bad {item}")
    return item * 10


def _bulk_taking(limit: int, calls: list[int]) -> Callable[[list[int]], list[object] | None]:
    """A bulk conversion that declines any range holding an item over ``limit`` (or a
    bad one), counting the items it is given."""

    def bulk(items: list[int]) -> list[object] | None:
        calls.append(len(items))
        if any(item > limit or item < 0 for item in items):
            return None
        return [item * 10 for item in items]

    return bulk


@pytest.mark.parametrize("unsupported", [0, 1, 5, 100, 2000])
def test_ranges_convert_what_one_by_one_does_within_the_budget(unsupported: int) -> None:
    items = list(range(4000))
    limit = 4000 - unsupported  # items past it are valid but the bulk cannot take them
    calls: list[int] = []
    assert convert_ranges(items, _bulk_taking(limit - 1, calls), _decode) == [i * 10 for i in items]
    assert sum(calls) <= (BUDGET + 1) * len(items)


def test_ranges_raise_for_the_first_bad_item_after_converting_those_before() -> None:
    items = [*range(3000), -1, *range(3000, 3100), -2]
    calls: list[int] = []
    with pytest.raises(ElementError) as caught:
        convert_ranges(items, _bulk_taking(10**9, calls), _decode)
    assert caught.value.token == -1
    assert caught.value.error.reason == "bad -1"
    # About two passes over the array, not one per element.
    assert sum(calls) <= 3 * len(items)


def test_without_a_bulk_conversion_items_go_one_by_one() -> None:
    assert convert_ranges([1, 2, 3], None, _decode) == [10, 20, 30]
    with pytest.raises(ElementError) as caught:
        convert_ranges([1, -5, -6], None, _decode)
    assert caught.value.token == -5


def test_the_offset_of_a_bad_element_counts_bare_nulls_before_it() -> None:
    texts = [str(i) if i % 3 else "NuLL" for i in range(200)] + ["x"]
    text = "{" + ",".join(texts) + "}"
    with pytest.raises(DecodeError) as caught:
        decode_text(type_by_name("int4").array_oid, text)
    assert (caught.value.offset, caught.value.reason) == (
        text.index(",x") + 1,
        "element 200: " + _element_reason("int4", "x"),
    )


def _element_reason(type_name: str, text: str) -> str:
    with pytest.raises(DecodeError) as caught:
        decode_text(type_by_name(type_name).oid, text)
    return caught.value.reason


def test_a_bulk_conversion_that_says_where_it_stopped_is_cut_there() -> None:
    """Declined(k): the items before k are taken, item k goes alone, the rest is given
    to the bulk conversion again: about one pass over the array, not two."""
    items = [*range(5000), -1]
    calls: list[int] = []

    def bulk(range_items: list[int]) -> BulkResult:
        calls.append(len(range_items))
        bad = [i for i, item in enumerate(range_items) if item < 0]
        return Declined(bad[0]) if bad else [item * 10 for item in range_items]

    with pytest.raises(ElementError) as caught:
        convert_ranges(items, bulk, _decode)
    assert caught.value.token == -1
    assert calls == [5001, 5000]


def test_a_declined_index_outside_the_range_is_taken_for_no_answer() -> None:
    calls: list[int] = []

    def bulk(range_items: list[int]) -> BulkResult:
        calls.append(len(range_items))
        return Declined(len(range_items)) if len(range_items) > 100 else list(range_items)

    assert convert_ranges(list(range(400)), bulk, _decode) == list(range(400))
    # As for None: ranges doubling from the left, those over 100 halved.
    assert calls == [400, 32, 64, 128, 64, 64, 176, 88, 88]


def _numeric_array(count: int) -> tuple[bytearray, list[int]]:
    """A binary numeric array of ``count`` distinct values and where each element's
    length word starts."""
    oid = type_by_name("numeric").array_oid
    values = [Decimal(i) for i in range(1, count + 1)]
    data = bytearray(encode_binary(oid, values))
    starts, pos = [], 20
    for _ in values:
        starts.append(pos)
        pos += 4 + int.from_bytes(data[pos : pos + 4], "big")
    return data, starts


def test_a_bad_length_raises_after_the_elements_before_it_are_converted() -> None:
    """array_recv reads element by element: an element error before a bad length is
    the error; with none, the bad length is, and the elements before it were converted
    in bulk (Python-level work close to the valid array's, not one decode each)."""
    oid = type_by_name("numeric").array_oid
    data, starts = _numeric_array(MANY)
    valid = _work(oid, bytes(data), decode_binary)
    data[starts[-1] : starts[-1] + 4] = (10**6).to_bytes(4, "big")
    with pytest.raises(DecodeError) as caught:
        decode_binary(oid, bytes(data))
    assert (caught.value.offset, caught.value.reason) == (
        starts[-1],
        f"element {MANY - 1}: invalid length {10**6}",
    )
    assert _work(oid, bytes(data), decode_binary) <= 3 * valid + 50 * ONE_BY_ONE
    # A bad digit in element 300 comes first in array order.
    data[starts[300] + 12 : starts[300] + 14] = (10000).to_bytes(2, "big")
    with pytest.raises(DecodeError) as caught:
        decode_binary(oid, bytes(data))
    assert caught.value.reason.startswith("element 300: ")
    assert caught.value.offset == starts[300] + 4 + 8
