"""Multidimensional arrays of plain elements and arrays of elements with backslashes
are read without the token loop (codec.values._array_forms), multidimensional arrays of
numbers by the whole readers: on generated texts, near misses included, the value or the
error (offset and text) is the token loop's or the parser's alone."""

from __future__ import annotations

import struct
from unittest import mock

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import codec.values._array_text as arrays
from codec.errors import DecodeError
from codec.values import decode_text, type_by_name
from codec.values._array_forms import escaped_texts, nested_texts
from codec.values._array_shape import each_once
from codec.values._bulk import BULK_TEXT, _float4_narrowed
from codec.values._catalogue import SCALARS
from codec.values._common import Invalid
from codec.values._ranges import Declined

INT4 = type_by_name("int4").array_oid
TEXT = type_by_name("text").array_oid
_SPACE = st.sampled_from(["", "", "", " ", "\t", "  "])
_ELEMENT = st.sampled_from(["1", "-22", "333", "NULL", "null", "x", "", "a b", "é", "0"])


def _decoded(oid: int, text: str) -> object:
    try:
        return decode_text(oid, text)
    except DecodeError as err:
        return ("error", str(err))


def _by_token_loop(oid: int, text: str) -> object:
    with (
        mock.patch.object(arrays, "nested_flat", lambda text: None),
        mock.patch.object(arrays, "nested_texts", lambda text: None),
        mock.patch.object(arrays, "escaped_texts", lambda text: None),
    ):
        return _decoded(oid, text)


@st.composite
def _nested(draw: st.DrawFn) -> str:
    """A 2- or 3-dimensional array text, often rectangular, sometimes not, with
    whitespace and now and then junk between its parts."""
    sizes = draw(st.lists(st.integers(1, 3), min_size=2, max_size=3))

    def level(depth: int) -> str:
        count = sizes[depth] + (draw(st.integers(-1, 1)) if draw(st.integers(0, 9)) == 0 else 0)
        if depth == len(sizes) - 1:
            items = [draw(_SPACE) + draw(_ELEMENT) + draw(_SPACE) for _ in range(max(count, 0))]
        else:
            items = [draw(_SPACE) + level(depth + 1) + draw(_SPACE) for _ in range(max(count, 0))]
        return "{" + ",".join(items) + "}"

    text = level(0)
    if draw(st.integers(0, 5)) == 0:  # junk somewhere
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(["x", "}", "{", ",", '"', "\\"])) + text[at:]
    return text


@st.composite
def _escaped(draw: st.DrawFn) -> str:
    """A one-dimensional array text of elements with backslashes, now and then one
    escaping what the syntax reads (a comma, a brace, whitespace, a backslash)."""
    escapes = st.sampled_from(["\\a", "\\1", "\\N", "\\é", "\\,", "\\ ", "\\\\", "\\}", "\\"])
    pieces = st.lists(st.sampled_from(["a", "1", "NULL", "b c"]) | escapes, min_size=1, max_size=4)
    elements = draw(st.lists(pieces.map("".join), min_size=1, max_size=6))
    return "{" + ",".join(draw(_SPACE) + e + draw(_SPACE) for e in elements) + "}"


@example("{{1,2},{3,4}}")
@example("{{1,2}x,{3,4}}")
@example("{{1},{2}}}")
@example("{{1,{1}}")
@example("{{{1},{2}},{{3},{x}}}")
@given(_nested())
def test_nested_arrays_decode_as_the_token_loop_decodes_them(text: str) -> None:
    # The form is tried only with many sub-arrays (_MANY_BRACES): here with any.
    with mock.patch.object(arrays, "_MANY_BRACES", 0):
        for oid in (INT4, TEXT):
            assert _decoded(oid, text) == _by_token_loop(oid, text), (oid, text)


@example("{a\\b,\\NULL,NULL}")
@example("{a\\,b, c\\ }")
@example("{1\\2,x\\3}")
@given(_escaped())
def test_escaped_arrays_decode_as_the_token_loop_decodes_them(text: str) -> None:
    for oid in (INT4, TEXT):
        assert _decoded(oid, text) == _by_token_loop(oid, text), (oid, text)


def test_the_forms_are_taken() -> None:
    """The forms are read by _array_forms, not left to the token loop (which would
    make the tests above compare the token loop with itself), and a large
    two-dimensional array takes the nested form."""
    text = "{" + ",".join(f"{{{i},{i + 1}}}" for i in range(0, 2000, 2)) + "}"
    with mock.patch.object(arrays, "parse_text", side_effect=AssertionError):
        assert decode_text(INT4, text) == [[i, i + 1] for i in range(0, 2000, 2)]
    assert nested_texts("{{1, 2},{NULL,4}}") == ([2, 2], ["1", "2", None, "4"])
    assert nested_texts("{{{a},{b}},{{c},{d}}}") == ([2, 2, 1], ["a", "b", "c", "d"])
    assert escaped_texts("{a\\b, \\NULL ,NULL}") == ([3], ["ab", "NULL", None])
    assert nested_texts("{{1,2},{3}}") is None
    assert escaped_texts("{a\\,b}") is None


_NUMBER_TYPES = ("int2", "int4", "int8", "oid", "float4", "float8", "numeric", "interval")
_OUT_OF_RANGE = ["40000", "-3000000000", "1e39", "1e-46"]  # of int2, int4, float4
_NUMBER = st.sampled_from(
    ["1", "-7", "007", "+3", "1.5", "2e3", "-0", "x", "", "1 2", "9" * 21, *_OUT_OF_RANGE]
)


@st.composite
def _numbers_array(draw: st.DrawFn) -> str:
    """An array text of numbers, some quoted, NULL in any spelling, whitespace around,
    and now and then its bounds."""
    elements = []
    for _ in range(draw(st.integers(1, 6))):
        element = draw(_NUMBER | st.sampled_from(["NULL", "null", "Null"]))
        if draw(st.booleans()):
            element = '"' + draw(_SPACE) + element + '"'
        elements.append(draw(_SPACE) + element + draw(_SPACE))
    text = "{" + ",".join(elements) + "}"
    if draw(st.integers(0, 3)) == 0:
        low = draw(st.integers(-2, 2))
        text = f"[{low}:{low + len(elements) - 1 + draw(st.sampled_from([0, 0, 1]))}]=" + text
    return text


def _by_parser(oid: int, text: str) -> object:
    """The array decoded by the parser and the element conversions alone."""
    array = next(info for info in SCALARS if info.array_oid == oid)
    decode = arrays.make_text_decoder(array, BULK_TEXT.get(array.name), None)
    try:
        return decode(text)  # type: ignore[operator]
    except Invalid as err:
        return ("error", err.offset, err.reason)


def _by_whole(oid: int, text: str) -> object:
    try:
        return decode_text(oid, text)
    except DecodeError as err:
        return ("error", err.offset, err.reason)


@example('{"1",2," 3"}', "int4")
@example("{ 1 ,null, 2 }", "int4")
@example("[0:1]={1,2}", "int4")
@example("[5:4]={}", "int4")  # the empty array, with no bounds kept
@example('{"NULL",1}', "int4")
@example('{" NULL"}', "int2")
@example("{null }", "numeric")
@example('{"1,2"}', "int4")
@example("{1, 40000,3}", "int2")  # read whole, then out of range: reported at once
@example('{"1",1e39, 2}', "float4")
@example('{"1","40000",3}', "int2")
@example("[0:2]={1,1e39, 2}", "float4")
@given(_numbers_array(), st.sampled_from(_NUMBER_TYPES))
def test_numbers_quoted_spaced_or_bounded_decode_as_the_parser_decodes_them(
    text: str, type_name: str
) -> None:
    oid = type_by_name(type_name).array_oid
    whole, parsed = _by_whole(oid, text), _by_parser(oid, text)
    assert whole == parsed, (text, whole, parsed)


def _by_elements(oid: int, text: str) -> object:
    """The array decoded by the parser and each element's input function alone."""
    array = next(info for info in SCALARS if info.array_oid == oid)
    try:
        return arrays.make_text_decoder(array, None, None)(text)  # type: ignore[operator]
    except Invalid as err:
        return ("error", err.offset, err.reason)


@pytest.mark.parametrize(
    "bad",
    [
        {9000: "1e39"},
        {4095: "-1e39"},
        {4096: "1e39"},
        {4097: "1e39"},
        {0: "1e39"},
        {9999: "1e39"},
        {5000: "1e-46", 9000: "1e39"},  # an underflow first
        {5000: "1e39", 9000: "1e-46"},
        {9000: "1e-46"},
        {4096: "Infinity", 9000: "-Infinity"},  # in range
        {100: "NULL", 9000: "1e39"},
    ],
)
def test_float4_range_errors_in_long_arrays(bad: dict[int, str]) -> None:
    """float4 values are narrowed a chunk at a time: an overflow or underflow anywhere
    in a long array, on either side of a chunk's edge, is the same first error, at the
    same offset, as each element's input function gives (values too where none is)."""
    oid = type_by_name("float4").array_oid
    elements = [bad.get(i, f"{i}.5") for i in range(10_000)]
    for text in ("{" + ",".join(elements) + "}", "[0:9999]={" + ",".join(elements) + "}"):
        assert _by_whole(oid, text) == _by_elements(oid, text), (text[:40], bad)


@pytest.mark.parametrize("at", [0, 4095, 4096, 9000])
def test_float4_narrowing_stops_at_the_first_overflow(at: int) -> None:
    """Declined at the overflow's own index with every value before it narrowed (a
    wrong index would still give the right error, after parsing the rest again)."""
    values = [i + 0.1 for i in range(10_000)]
    values[at] = 1e39
    declined = _float4_narrowed(values)
    assert isinstance(declined, Declined) and declined.index == at
    assert declined.before == [struct.unpack("f", struct.pack("f", v))[0] for v in values[:at]]


@st.composite
def _nested_numbers(draw: st.DrawFn) -> str:
    """A 2- or 3-dimensional array of numbers, mostly distinct (the whole reader takes
    those) and mostly rectangular, now and then with a bad, empty or NULL element,
    whitespace, or junk between its parts."""
    sizes = draw(st.lists(st.integers(1, 4), min_size=2, max_size=3))
    counter = iter(range(10**6))

    def element() -> str:
        if draw(st.integers(0, 15)) == 0:
            return draw(_NUMBER | st.sampled_from(["NULL", " 5", "6 ", "1e400", "-0.5", "{}"]))
        return str(next(counter) * draw(st.sampled_from([1, -1, 7])))

    def level(depth: int) -> str:
        count = sizes[depth] + (draw(st.integers(-1, 1)) if draw(st.integers(0, 9)) == 0 else 0)
        if depth == len(sizes) - 1:
            items = [element() for _ in range(max(count, 0))]
        else:
            items = [level(depth + 1) for _ in range(max(count, 0))]
        gap = draw(st.sampled_from(["", "", "", "", " "]))
        return "{" + ("," + gap).join(items) + "}"

    text = level(0)
    if draw(st.integers(0, 7)) == 0:  # junk somewhere
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(["x", "}", "{", ",", " "])) + text[at:]
    return text


@example("{{1,2},{3,4}}", "int4")
@example("{{1,2},{3,4}}}", "int4")
@example("{{1,2},{3,}}", "int4")
@example("{{{1,2},{3,4}},{{5,6},{7,x}}}", "float8")
@example("{{1,2},{3,NULL}}", "numeric")
@example("{{1,2}, {3,4}}", "int2")
@given(_nested_numbers(), st.sampled_from((*_NUMBER_TYPES, "json", "jsonb", "int8")))
def test_nested_numbers_decode_as_the_parser_decodes_them(text: str, type_name: str) -> None:
    """The whole readers take the elements of a multidimensional array as one flat
    array (nested_flat), with the value or error of the parser alone."""
    oid = type_by_name(type_name).array_oid
    with mock.patch.object(arrays, "_MANY_BRACES", 0):  # any number of sub-arrays
        whole = _by_whole(oid, text)
    assert whole == _by_parser(oid, text), (text, whole)


def test_nested_numbers_take_the_flat_form() -> None:
    """A large two-dimensional array of distinct numbers goes to the whole reader as
    one flat array, never cut into element texts (which the test above would then
    compare with the parser alone)."""
    text = "{" + ",".join(f"{{{i},{i + 1}}}" for i in range(0, 2000, 2)) + "}"
    with mock.patch.object(arrays, "nested_texts", side_effect=AssertionError):
        assert decode_text(INT4, text) == [[i, i + 1] for i in range(0, 2000, 2)]


@given(
    st.lists(st.none() | st.text("ab1", max_size=3), max_size=40)
    | st.lists(st.none() | st.integers(0, 10**6).map(str), min_size=300, max_size=600)
)
def test_each_once_converts_every_element_and_keeps_nulls(items: list[str | None]) -> None:
    """Mostly distinct (converted in place, NULLs put back) or repeating (by a table),
    every element gets its own value and every NULL stays where it was."""
    calls: list[list[str]] = []

    def convert(texts: list[str]) -> list[object]:
        calls.append(texts)
        return [("value", text) for text in texts]

    assert each_once(items, convert) == [None if i is None else ("value", i) for i in items]
    assert all(None not in texts for texts in calls)
