"""Arrays decode each distinct element once, through a whole-array fast path where the
element type has one (codec.values._bulk): what a fast path accepts it must decode
exactly as the element's input function does, and arrays must come out as if every
element were decoded on its own, errors included."""

from __future__ import annotations

import pickle
import struct
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_values_adversarial import _work

from codec.errors import DecodeError
from codec.strategies.values import values_for
from codec.values import decode_binary, decode_text, encode_binary, encode_text, type_by_name
from codec.values._array_binary import _binary_elements, _steps
from codec.values._array_forms import flat_texts
from codec.values._array_tokens import parse_text
from codec.values._bulk import BULK_BINARY, BULK_BINARY_ELEMENTS, BULK_TEXT, BULK_WHOLE
from codec.values._bulk_interval import by_shape, one_by_one
from codec.values._common import Invalid
from codec.values._interval import Interval, intervals
from codec.values._ranges import Declined
from codec.values._text import _all_fit, _jsonb_number, jsonb_misfit

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BULK_TYPES = sorted(BULK_TEXT)


def _exact(a: object, b: object) -> bool:
    """Same type and same repr: -0.0 vs 0.0, a Decimal's scale and a tzinfo all show."""
    return type(a) is type(b) and repr(a) == repr(b)


def _element(type_name: str, text: str) -> object:
    """The element input function's answer for ``text``: its value or its DecodeError."""
    try:
        return decode_text(type_by_name(type_name).oid, text)
    except DecodeError as err:
        return err


def _check_bulk(type_name: str, texts: list[str]) -> None:
    values = BULK_TEXT[type_name](texts)
    if isinstance(values, Declined):
        # Where it stopped, never past the end; the values of those before, if it
        # made them, are theirs (checked below, as the texts before are).
        assert 0 <= values.index < len(texts), (texts, values)
        texts, values = texts[: values.index], values.values_before()
    if values is None:
        return
    expected = [_element(type_name, text) for text in texts]
    assert all(_exact(v, e) for v, e in zip(values, expected, strict=True)), (
        texts,
        values,
        expected,
    )


# Characters the canonical forms are made of, to build near misses from.
_NEAR: st.SearchStrategy[str] = st.text(alphabet="0123456789+-.:eE NaIfinty", max_size=30)


@pytest.mark.parametrize("type_name", BULK_TYPES)
@SETTINGS
@given(data=st.data())
def test_fast_path_decodes_exactly_as_the_input_function(
    type_name: str, data: st.DataObject
) -> None:
    """For printed values and for near misses built from the same characters, a fast
    path either declines or gives each text's value with the same type, sign, scale
    and time zone as the element's input function."""
    oid = type_by_name(type_name).oid
    printed = data.draw(st.lists(values_for(oid).map(lambda v: encode_text(oid, v)), max_size=8))
    near = data.draw(st.lists(_NEAR, max_size=4))
    texts = data.draw(st.permutations(list(dict.fromkeys(printed + near))))
    _check_bulk(type_name, texts)


@SETTINGS
@given(
    texts=st.lists(
        st.builds(
            "{}{}{}e{}".format,
            st.sampled_from(["", "-"]),
            st.from_regex(r"[0-9]{1,4}", fullmatch=True),
            st.sampled_from(["", ".0", ".5", ".250"]),
            st.integers(-16390, 131075) | st.integers(-3, 70) | st.integers(160, 170),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_numeric_exponents_decode_exactly_as_numeric_in(texts: list[str]) -> None:
    """Numeric texts with exponents (which numeric_out never writes) at and around the
    limits and COMPACT_ZEROS: the array path declines or gives what numeric_in gives."""
    _check_bulk("numeric", texts)


_JSONB_NUMBER_TEXTS = st.builds(
    "{}{}{}{}{}".format,
    st.sampled_from(["", "-"]),
    st.from_regex(r"0|[1-9][0-9]{0,3}", fullmatch=True),
    st.sampled_from(["", ".0", ".5", ".250", "." + "1" * 16380]),
    st.sampled_from(["e", "E", "e+", "e-", "E-"]),
    st.integers(0, 16390).map(str)
    | st.integers(131060, 131080).map(str)
    | st.integers(1073741820, 1073741830).map(str)
    | st.sampled_from(["00000000005", "000000000005", "99999999999"]),
)


@SETTINGS
@given(
    numbers=st.lists(_JSONB_NUMBER_TEXTS, min_size=1, max_size=6),
    wrap=st.sampled_from(["{}", "[{}]", '{{"a": {}}}', '"x{}"']),
)
def test_jsonb_exponents_decode_exactly_as_jsonb_in(numbers: list[str], wrap: str) -> None:
    """jsonb texts holding numbers with exponents at and around numeric's limits (the
    scale, digits before the point, the exponent's own limit, zeros, leading zeros, and
    the same characters inside a JSON string): the array path, which checks them all
    together, declines or gives what jsonb_in gives."""
    _check_bulk("jsonb", [wrap.format(number) for number in numbers])


_NEAR_BOUND_NUMBERS = st.builds(
    "{}{}{}{}{}".format,
    st.sampled_from(["", "-"]),
    st.from_regex(r"0|[1-9][0-9]{0,20}", fullmatch=True),
    st.sampled_from(["", ".0", ".5", ".00250"] + ["." + "1" * n for n in (300, 6360, 6390)]),
    st.sampled_from(["e", "E", "e+", "e-", "E-", "e0", "e-0"]),
    st.integers(0, 40).map(str)
    | st.integers(9990, 10001).map(str)
    | st.integers(16050, 16400).map(str)
    | st.integers(130750, 131080).map(str)
    | st.integers(1073741820, 1073741825).map(str),
)


@SETTINGS
@given(
    floats=st.lists(
        _NEAR_BOUND_NUMBERS | st.sampled_from(["1.5", "-0.25", "0.0", "1" + "0" * 300 + ".5"]),
        min_size=1,
        max_size=6,
    )
)
def test_jsonb_bounds_pass_only_numbers_that_fit(floats: list[str]) -> None:
    """The bounds over all numbers (_all_fit) never pass a number numeric refuses: each
    is checked on its own against them; where they pass, none is a misfit."""
    if _all_fit(floats):
        for number in floats:
            _jsonb_number(number)  # raises where numeric_in would refuse it
    fits = []
    for number in floats:
        try:
            _jsonb_number(number)
            fits.append(True)
        except ValueError:
            fits.append(False)
    assert jsonb_misfit(floats) == (None if all(fits) else fits.index(False)), floats


def test_jsonb_bounds_at_the_limits() -> None:
    """Exponents of four digits and texts of 6,384 characters pass the bounds (and fit);
    past either, they do not, and each number is checked: the misfit, or none."""
    longest = "1" * 6376 + "e-9999"
    assert len(longest) == 6382 and _all_fit(["1e9999", "2.5E-9999", longest])
    assert not _all_fit(["1e10000"]) and jsonb_misfit(["1e10000"]) is None
    assert not _all_fit(["1" * 6385]) and jsonb_misfit(["1" * 6385 + "e-9999"]) is None
    assert not _all_fit(["1e00001"]) and jsonb_misfit(["1e00001"]) is None
    assert not _all_fit(["12e131071"]) and jsonb_misfit(["1.5", "12e131071"]) == 1
    assert jsonb_misfit(["1e-16384"]) == 0 and jsonb_misfit(["0e1073741824"]) == 0
    assert jsonb_misfit(["0e1073741823"]) is None
    assert _all_fit(["1.5", "2"]) and _all_fit([])


@pytest.mark.parametrize(
    ("type_name", "text"),
    [
        ("int2", "32768"),
        ("int2", "-32769"),
        ("int8", "9223372036854775808"),
        ("oid", "4294967296"),
        ("oid", "-1"),
        ("float4", "1e39"),
        ("float4", "1e-46"),
        ("float4", "-0"),
        ("float8", "-0.0"),
        ("numeric", "-0.00"),
        ("numeric", "007.50"),
        ("numeric", "1e131071"),
        ("numeric", "1e131072"),
        ("numeric", "-12.5e1000"),
        ("numeric", "1e64"),
        ("numeric", "1e65"),
        ("numeric", "10e64"),
        ("numeric", "0e99"),
        ("numeric", "-0e99"),
        ("numeric", "1e-16383"),
        ("numeric", "1e-16384"),
        ("numeric", "1.50e-2"),
        ("numeric", "1e164"),
        ("numeric", "1e165"),
        ("numeric", "1." + "0" * 100 + "e165"),
        ("numeric", "1e-9999"),
        ("date", "2024-02-30"),
        ("date", "0000-01-01"),
        ("time", "23:59:60"),
        ("timetz", "12:00:00+16"),
        ("timestamp", "2024-06-01 24:00:00"),
        ("timestamptz", "0001-01-01 00:30:00+01"),
        ("timestamptz", "9999-12-31 23:30:00-01"),
        ("timestamptz", "2024-06-01 12:00:00.5-05:30"),
        ("interval", "1 year "),
        ("interval", ""),
        ("interval", "-1 years +2 mons -3 days +04:05:06.7"),
        ("interval", "999999999:59:59.999999"),
        ("interval", "1 day 1 day"),
        ("interval", "-0"),
        ("inet", "10.0.0.1/33"),
        ("inet", "010.0.0.1"),
        ("inet", "255.255.255.255"),
        ("cidr", "10.0.0.1/24"),
        ("cidr", "10.0.0.0"),
        ("cidr", "0.0.0.0/0"),
        ("uuid", "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"),
        ("json", " 1"),
        ("jsonb", "1e999999999"),
        ("text", "a\x00"),
    ],
)
def test_fast_path_edges(type_name: str, text: str) -> None:
    """At the edges of range and form (out of range, negative zero, an impossible day,
    a zone shift past year 1 or 9999), a fast path declines or agrees, and the array
    holds what the element decodes to or fails with the element's error."""
    _check_bulk(type_name, [text, "1"])
    array_oid = type_by_name(type_name).array_oid
    expected = _element(type_name, text)
    quoted = '{"' + text + '"}'
    if isinstance(expected, DecodeError):
        with pytest.raises(DecodeError) as info:
            decode_text(array_oid, quoted)
        assert info.value.reason == "element 0: " + expected.reason
        assert info.value.offset == 1 + expected.offset
    else:
        [value] = decode_text(array_oid, quoted)  # type: ignore[misc]
        assert _exact(value, expected)


@SETTINGS
@given(
    elements=st.lists(
        st.sampled_from(["1", "-2", "1.5", "x", "NULL", '"NULL"', '""', '"a,b"', '"\\"q\\""']),
        min_size=1,
        max_size=12,
    ),
    separator=st.sampled_from([",", " , ", ", "]),
    type_name=st.sampled_from(["int4", "numeric", "text", "interval"]),
)
def test_arrays_decode_like_their_elements_one_by_one(
    elements: list[str], separator: str, type_name: str
) -> None:
    """However elements repeat, are quoted or escaped, an array is its elements decoded
    one by one, and its error is the first failing element's, at that element."""
    array_oid = type_by_name(type_name).array_oid
    text = "{" + separator.join(elements) + "}"
    expected: list[object] = []
    first_error: DecodeError | None = None
    for index, element in enumerate(elements):
        try:
            [value] = decode_text(array_oid, "{" + element + "}")  # type: ignore[misc]
        except DecodeError as err:
            start = 1 + sum(len(e) + len(separator) for e in elements[:index])
            first_error = first_error or DecodeError(
                err.message_type,
                start + err.offset - 1,
                err.reason.replace("element 0: ", f"element {index}: ", 1),
            )
            continue
        expected.append(value)
    if first_error is None:
        decoded = decode_text(array_oid, text)
        assert isinstance(decoded, list)
        assert all(_exact(a, b) for a, b in zip(decoded, expected, strict=True))
    else:
        with pytest.raises(DecodeError) as info:
            decode_text(array_oid, text)
        assert (info.value.offset, info.value.reason) == (first_error.offset, first_error.reason)


@pytest.mark.parametrize("type_name", ["int2", "int4", "int8", "oid", "float4", "float8", "text"])
def test_binary_arrays_of_equal_sized_elements_match_element_decoding(type_name: str) -> None:
    """Arrays whose elements all have one size are split at C speed; with a NULL or a
    different size they are walked element by element; both give the elements' values."""
    info = type_by_name(type_name)
    sample = {"float4": 1.5, "float8": 2.25, "text": "ab"}.get(type_name, 7)
    for items in ([sample] * 5, [sample, None, sample], [[sample, sample], [sample, sample]]):
        data = encode_binary(info.array_oid, items)
        assert decode_binary(info.array_oid, data) == items


def _element_binary(type_name: str, data: bytes) -> object:
    try:
        return decode_binary(type_by_name(type_name).oid, data)
    except DecodeError as err:
        return err


# Raw numbers at the edges of what the whole-array conversions take: Python's years
# 1 and 9999 in days and microseconds, infinity, 24:00:00, negative times, bytes
# other than 0 and 1 for bool (true, as boolrecv reads any non-zero byte).
_US_EDGES = [-63082281600000000, -63082281600000001, 252455615999999999, 252455616000000000]
EDGE_NUMBERS = {
    "bool": (">B", [0, 1, 2, 255]),
    "date": (">i", [-730119, -730120, 2921939, 2921940, 2147483647, -2147483648, 0]),
    "time": (">q", [0, -1, 86_399_999_999, 86_400_000_000, 86_400_000_001]),
    "timestamp": (">q", [*_US_EDGES, 2**63 - 1, -(2**63), 0]),
    "timestamptz": (">q", [*_US_EDGES, 2**63 - 1, -(2**63), 0]),
}


def _binary_array(element_oid: int, raws: list[bytes]) -> bytes:
    """A one-dimensional binary array of the given element encodings."""
    header = struct.pack(">iiIii", 1, 0, element_oid, len(raws), 1)
    return header + b"".join(struct.pack(">i", len(raw)) + raw for raw in raws)


@pytest.mark.parametrize("type_name", sorted(BULK_BINARY))
@SETTINGS
@given(data=st.data())
def test_binary_arrays_unpacked_whole_match_element_decoding(
    type_name: str, data: st.DataObject
) -> None:
    """An array unpacked and converted whole holds exactly what each element's
    receive function gives, for drawn values and for the raw numbers at the edges of
    the conversion's range (outside it the array is decoded element by element)."""
    info = type_by_name(type_name)
    raws = [encode_binary(info.oid, v) for v in data.draw(st.lists(values_for(info.oid)))]
    if type_name in EDGE_NUMBERS:
        fmt, edges = EDGE_NUMBERS[type_name]
        raws += [struct.pack(fmt, n) for n in data.draw(st.lists(st.sampled_from(edges)))]
    array = _binary_array(info.oid, data.draw(st.permutations(raws)))
    expected = [_element_binary(type_name, raw) for raw in raws]
    if any(isinstance(e, DecodeError) for e in expected):
        with pytest.raises(DecodeError):
            decode_binary(type_by_name(type_name).array_oid, array)
    elif raws:
        decoded = decode_binary(info.array_oid, array)
        assert isinstance(decoded, list)
        assert sorted(map(repr, decoded)) == sorted(map(repr, expected))


def test_binary_array_error_is_the_first_in_array_order() -> None:
    """A bad element before a bad length is reported, not the length: array_recv()
    decodes each element as it reads it."""
    data = bytearray(encode_binary(1007, [1, 2, 3]))
    # Element 0 says 3 bytes (an int4 has 4), which also misaligns every later length.
    data[20:24] = (3).to_bytes(4, "big")
    with pytest.raises(DecodeError) as info:
        decode_binary(1007, bytes(data))
    assert (info.value.offset, info.value.reason) == (27, "element 0: expected 4 bytes, found 3")


# --------------------------------------------------------------------------- work

# A typical printed element per scalar type.
ELEMENT_TEXT = {
    "bool": "t",
    "int2": "12",
    "int4": "1234",
    "int8": "123456789",
    "oid": "16384",
    "float4": "1.5",
    "float8": "1234.5678",
    "numeric": "1234.5678",
    "text": "some text",
    "varchar": "abc",
    "bpchar": "abc ",
    "name": "a_name",
    "char": "c",
    "bytea": "\\\\x0001ff",
    "uuid": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    "json": '{\\"a\\": [1, 2]}',
    "jsonb": '{\\"a\\": [1, 2]}',
    "macaddr": "08:00:2b:01:02:03",
    "inet": "192.168.0.1/24",
    "cidr": "10.0.0.0/8",
    "date": "2024-06-01",
    "time": "12:34:56.5",
    "timetz": "12:34:56+02",
    "timestamp": "2024-06-01 12:34:56",
    "timestamptz": "2024-06-01 12:34:56.123456+00",
    "interval": "1 mon 2 days 00:00:03",
}
ARRAY_TYPES = sorted(ELEMENT_TEXT)
FEW, MANY = 64, 1024
FIXED_WORK = 60  # calls and lines that do not depend on the element count


def _distinct(type_name: str, i: int) -> str:
    """The i-th of many distinct printed values of a type with a C-level fast path."""
    clock = f"{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}"
    day = f"{2000 + i // 336:04d}-{i // 28 % 12 + 1:02d}-{i % 28 + 1:02d}"
    return {
        "bool": "t" if i % 2 else "f",
        "int2": str(i - 500),
        "int4": str(i * 7919),
        "int8": str(-i * 10**12),
        "oid": str(i),
        "float4": f"{i}.5",
        "float8": f"{i}.25e-05",
        "numeric": f"-{i + 1}.{i:04d}",
        "date": day,
        "time": clock,
        "timetz": clock + "-05:30",
        "timestamp": f"{day} {clock}",
        "timestamptz": f"{day} {clock}.{i:06d}+02",
        "macaddr": f"08:00:2b:{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x}",
        "bytea": f"\\\\x{i:08x}",
        "text": f"text {i}",
        "name": f"relation_{i}",
        "char": f"{chr(97 + i % 26)}{i}",
        "varchar": f"v{i}",
        "bpchar": f"c{i} ",
        "uuid": f"{i:08x}-0000-4000-8000-{i * 7919:012x}",
        "json": f'{{\\"a\\": {i}}}',
        "jsonb": f"[{i}, true, null]",
        "inet": f"10.{i >> 8 & 255}.{i & 255}.{i % 7}/{i % 33}",
        "cidr": f"10.{i >> 8 & 255}.{i & 255}.0/24",
        "interval": f"{i} mons {i % 31} days {i % 24:02d}:{i % 60:02d}:00.{i:06d}",
    }[type_name]


def _array_work(type_name: str, texts: list[str]) -> int:
    return _work(type_by_name(type_name).array_oid, '{"' + '","'.join(texts) + '"}')


@pytest.mark.parametrize("type_name", ARRAY_TYPES)
def test_work_does_not_grow_with_repeated_elements(type_name: str) -> None:
    """Decoding 1024 copies of an element takes the same Python-level work as 64 (a
    constant number of C-level passes), where each element used to be parsed anew:
    an array of small intervals took seconds per megabyte."""
    few = _array_work(type_name, [ELEMENT_TEXT[type_name]] * FEW)
    many = _array_work(type_name, [ELEMENT_TEXT[type_name]] * MANY)
    assert many <= few + FIXED_WORK, (few, many)


@pytest.mark.parametrize("type_name", sorted(set(BULK_TEXT) - {"interval"}))
def test_work_does_not_grow_with_distinct_elements_of_fast_path_types(type_name: str) -> None:
    """Numbers, dates, times, timestamps, MAC addresses, hex bytea, text, name, "char",
    uuid, json and IPv4 addresses in their printed form are checked and converted whole:
    1024 distinct elements take the Python-level work of 64."""
    few = _array_work(type_name, [_distinct(type_name, i) for i in range(FEW)])
    many = _array_work(type_name, [_distinct(type_name, i) for i in range(MANY)])
    assert many <= few + FIXED_WORK, (few, many)


# Elements of one size: the lengths of variable-sized ones chain, so splitting them
# takes a step per element (_binary_elements), whatever converts them afterwards.
FIXED_SIZE_ELEMENTS = ["cidr", "inet", "interval", "timetz", "uuid"]


@pytest.mark.parametrize("type_name", sorted(BULK_BINARY) + FIXED_SIZE_ELEMENTS)
def test_binary_work_does_not_grow_with_fixed_size_elements(type_name: str) -> None:
    """A binary array of a fixed-size number, date, time or timestamp type is unpacked
    and converted whole, and the distinct elements of uuid, timetz, interval and IPv4
    inet/cidr arrays are converted together: 1024 elements take the Python-level work
    of 64."""
    oid = type_by_name(type_name).array_oid
    values = [
        decode_text(type_by_name(type_name).oid, _distinct(type_name, i)) for i in range(MANY)
    ]
    few = _work(oid, encode_binary(oid, values[:FEW]), decode_binary)
    many = _work(oid, encode_binary(oid, values), decode_binary)
    assert many <= few + FIXED_WORK, (few, many)


# --------------------------------------------------------------------------- flat arrays


def _token_loop(text: str) -> list[str | None] | Exception:
    """What the general array parser makes of ``text``: its element texts, or its error."""
    try:
        shape, texts, _spans, sizes, _bounds = parse_text(text)
    except Invalid as err:
        return err
    return texts if len(shape) == 1 and sizes is None else ValueError("not flat")


def _agrees_with_token_loop(text: str) -> None:
    flat = flat_texts(text)
    if flat is not None:
        assert flat == _token_loop(text), text


_ELEMENT_TEXT = st.text(alphabet='ab ,{}"\\\x01\t\nNUL\u00e9', max_size=6)


@st.composite
def _printed_arrays(draw: st.DrawFn) -> str:
    """One-dimensional array text of drawn elements, each quoted or not as drawn
    (quoting what must be), NULL in any case, escapes where needed or not."""
    parts = []
    for element in draw(st.lists(st.none() | _ELEMENT_TEXT, min_size=1, max_size=8)):
        if element is None:
            parts.append(draw(st.sampled_from(["NULL", "null", "Null"])))
        elif draw(st.booleans()) or _needs_quotes(element):
            parts.append('"' + element.replace("\\", "\\\\").replace('"', '\\"') + '"')
        else:
            parts.append(element)
    return "{" + ",".join(parts) + "}"


def _needs_quotes(element: str) -> bool:
    return (
        element == ""
        or element.upper() == "NULL"
        or any(c in element for c in '{},"\\ \t\n')
        or "\x01" in element
    )


@SETTINGS
@given(text=_printed_arrays())
def test_flat_arrays_read_as_the_token_loop_reads_them(text: str) -> None:
    """A one-dimensional array of quoted, plain and NULL elements, read through the
    JSON scanner, has exactly the element texts the general parser finds."""
    _agrees_with_token_loop(text)


@SETTINGS
@given(text=_printed_arrays(), data=st.data())
def test_mutated_flat_arrays_are_refused_or_read_alike(text: str, data: st.DataObject) -> None:
    """Insert, delete or replace a character of a printed array: the JSON path either
    declines or reads what the general parser reads, and never takes what it refuses."""
    position = data.draw(st.integers(0, len(text)))
    character = data.draw(st.sampled_from('{}",\\ \taN\x00\x02\x03'))
    mutated = data.draw(
        st.sampled_from(
            [
                text[:position] + character + text[position:],
                text[:position] + text[position + 1 :],
                text[:position] + character + text[position + 1 :],
            ]
        )
    )
    _agrees_with_token_loop(mutated)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a b",c,"d\\"e",NULL}', ["a b", "c", 'd"e', None]),
        ('{"a\\\\b",nUlL,"NULL"}', ["a\\b", None, "NULL"]),
        ('{"",x}', ["", "x"]),
        ('{"a"b}', None),
        ('{"a" ,b}', None),
        ('{"a\\b"}', None),
        ('{{"a"}}', None),
        ('[1:1]={"a"}', None),
        ('{"a",,b}', None),
        ('{"a\x02"}', None),
        ('{"}', None),
        ('{""}', [""]),
        ('{"a\\"}', None),
    ],
)
def test_flat_array_edges(text: str, expected: list[str | None] | None) -> None:
    """The JSON path takes one-dimensional arrays without whitespace between elements or
    escapes other than \\\\ and \\"; the general parser takes the rest."""
    assert flat_texts(text) == expected
    _agrees_with_token_loop(text)


# --------------------------------------------------------------------------- whole arrays

WHOLE_TYPES = sorted(BULK_WHOLE)
_NUMBER_NEAR: st.SearchStrategy[str] = st.text(alphabet="0123456789+-.eE NaIfinty", max_size=12)


@pytest.mark.parametrize("type_name", WHOLE_TYPES)
@SETTINGS
@given(data=st.data())
def test_whole_array_readers_decode_as_the_elements_do(type_name: str, data: st.DataObject) -> None:
    """A whole-array reader either declines or gives, for printed values, near misses
    and NULLs, each element's value as the element's input function gives it, with
    the same type, sign and scale; and it never takes an array with a bad element."""
    oid = type_by_name(type_name).oid
    element = values_for(oid).map(lambda v: encode_text(oid, v))
    texts = data.draw(st.lists(element | _NUMBER_NEAR | st.just("NULL"), min_size=1, max_size=8))
    values = BULK_WHOLE[type_name]("{" + ",".join(texts) + "}")
    if isinstance(values, Declined):
        # Stopped at an element out of form: the values of those before it, if any.
        assert 0 <= values.index < len(texts), (texts, values)
        if any("," in text for text in texts):
            return  # the index counts commas
        texts, values = texts[: values.index], values.values_before()
    if values is None:
        return
    expected = [None if text == "NULL" else _element(type_name, text) for text in texts]
    assert all(_exact(v, e) for v, e in zip(values, expected, strict=True)), (texts, values)


@pytest.mark.parametrize("type_name", WHOLE_TYPES)
@pytest.mark.parametrize(
    "text",
    [
        "{}",
        "{1,,2}",
        "{+1}",
        "{007}",
        "{ 1}",
        "{{1}}",
        "[1:1]={1}",
        "{1e400}",
        "{-0.0}",
        "{1,2,3}",
        "{1,1,1,1}",
        "{1e100,1e100}",
        "{12345678901234567890}",
        "{true,true}",
        "{null,null}",
        "{NULLNULL}",
        '{"1234567"}',
    ],
)
def test_whole_array_readers_leave_other_forms_to_the_parser(type_name: str, text: str) -> None:
    """Empty, malformed, spaced, nested, bounded and quoted arrays, numbers JSON spells
    otherwise or that leave the type's range or digit limits, JSON's own words, and
    arrays of short elements (which repeat) are left to the general parser, which
    decodes them as before."""
    values = BULK_WHOLE[type_name](text)
    array_oid = type_by_name(type_name).array_oid
    try:
        decoded: object = decode_text(array_oid, text)
    except DecodeError as err:
        decoded = err
    if isinstance(values, Declined):  # stopped after some elements: they come first
        values = None
    if values is not None:
        assert isinstance(decoded, list)
        assert all(_exact(v, d) for v, d in zip(values, decoded, strict=True))
    # float8 has a negative zero; numeric takes 20 digits: these two may be read whole.
    # Bare numbers are seconds to interval ("{1,2,3}" is three intervals). Short
    # elements are left to the parser's table only where they repeat ("{1,1,1,1}").
    read_whole = ("{-0.0}", "{12345678901234567890}")
    if type_name in ("float4", "float8", "int2", "int4", "int8", "numeric", "oid"):
        # Whitespace, null in JSON's spelling and quoted numbers are read too.
        read_whole += ("{1,2,3}", "{ 1}", "{null,null}", '{"1234567"}')
    if type_name == "interval":
        read_whole += ("{+1}", "{007}", "{1,2,3}", "{1,1,1,1}", '{"1234567"}')
    if type_name in ("json", "jsonb"):  # JSON's own spellings of numbers and literals
        read_whole += ("{1e400}", "{1e100,1e100}", "{true,true}")
    if type_name == "float8":  # three-digit exponents, within a double's range
        read_whole += ("{1e100,1e100}",)
    if type_name == "numeric":  # three-digit exponents: numeric_in reads them
        read_whole += ("{1e400}", "{1e100,1e100}")
    assert text in read_whole or values is None


def test_intervals_made_together_are_intervals() -> None:
    """intervals() fills the slots of empty instances: the results equal, hash and
    refuse assignment as constructed ones do."""
    [made] = intervals([14], [-3], [5_000_000])
    assert type(made) is Interval
    assert made == Interval(14, -3, 5_000_000)
    assert hash(made) == hash(Interval(14, -3, 5_000_000))
    with pytest.raises(AttributeError):
        made.days = 1  # type: ignore[misc]


# --------------------------------------------------------------------------- interval text

# Date units, each with the digit count the fast path takes at most.
_INTERVAL_UNITS = [("year", 6), ("years", 6), ("mon", 9), ("mons", 9), ("day", 9), ("days", 9)]
_INTERVAL_OTHERS = [
    "infinity",
    "-infinity",
    "",
    " ",
    "1 day ",
    " 1 day",
    "1 day  00:00:01",
    "1 day ago",
    "@ 1 day",
    "1 DAY",
    "1 week",
    "1 day 5",
    "1 day 1 day",
    "00:00:01.",
    "00:00:01_5",
    "1 day\n00:00:01",
    "\u0661 day",
    "P1D",
    "1-2",
    "5.5",
]
_SIGN = st.sampled_from(["", "+", "-"])


def _digit_run(most: int) -> st.SearchStrategy[str]:
    """Up to one digit more than ``most``, leading zeros included."""
    return st.from_regex(f"[0-9]{{1,{most + 1}}}", fullmatch=True)


@st.composite
def _interval_text(draw: st.DrawFn) -> str:
    """Interval texts in and around the form interval_out prints: date fields present
    or not, in order or not, singular or plural, signed or not, a digit past the fast
    path's bounds; clocks with 1-3 digit minutes and seconds (60 and over too) and 0-7
    fraction digits; bare numbers; and forms only interval_in reads, or nothing does."""
    kind = draw(st.sampled_from(["fields", "fields", "fields", "bare", "other"]))
    if kind == "bare":
        return draw(_SIGN) + draw(_digit_run(9))
    if kind == "other":
        return draw(st.sampled_from(_INTERVAL_OTHERS))
    units = draw(
        st.lists(st.sampled_from(_INTERVAL_UNITS), max_size=3, unique_by=lambda u: u[0][:3])
    )
    if draw(st.booleans()):
        units.sort(key=lambda u: ("yea", "mon", "day").index(u[0][:3]))
    fields = [f"{draw(_SIGN)}{draw(_digit_run(most))} {unit}" for unit, most in units]
    if not fields or draw(st.booleans()):
        minutes, seconds = (draw(st.from_regex("[0-9]{1,3}", fullmatch=True)) for _ in "ms")
        fraction = draw(st.sampled_from(["", "."]) | st.from_regex(r"\.[0-9]{1,7}", fullmatch=True))
        fields.append(f"{draw(_SIGN)}{draw(_digit_run(9))}:{minutes}:{seconds}{fraction}")
    return " ".join(fields)


def _check_intervals(texts: list[str]) -> None:
    expected = [_element("interval", text) for text in texts]
    for values in (
        by_shape(texts, len(texts), 2 * len(texts)),  # date parts and heads decoded once
        by_shape(texts, len(texts), 0),  # their numbers read for each text
        one_by_one(texts),
        BULK_TEXT["interval"](texts),
    ):
        if isinstance(values, list):  # else None, or Declined at a text it cannot read
            assert all(_exact(v, e) for v, e in zip(values, expected, strict=True)), (
                texts,
                values,
                expected,
            )


@SETTINGS
@given(texts=st.lists(_interval_text(), min_size=1, max_size=8, unique=True))
def test_interval_texts_decode_exactly_as_interval_in(texts: list[str]) -> None:
    """Interval texts in and around the printed form, alone and together, converted by
    shape (however few share one; date parts and clock heads decoded once each or their
    numbers read for each text) or one by one: each conversion declines or gives what
    interval_in gives for every text."""
    for text in texts:
        _check_intervals([text])
    _check_intervals(texts)


# Intervals whose printed fields are within the fast path's digit bounds.
_PRINTABLE_INTERVALS = st.builds(
    Interval,
    st.integers(-999_999 * 12, 999_999 * 12),
    st.integers(-(10**9 - 1), 10**9 - 1),
    st.integers(-(10**9 - 1) * 3_600_000_000, (10**9 - 1) * 3_600_000_000),
)


@SETTINGS
@given(values=st.lists(_PRINTABLE_INTERVALS, min_size=1, max_size=8))
def test_printed_intervals_are_converted_by_shape(values: list[Interval]) -> None:
    """What interval_out prints (as Interval's str() does) is taken whole by shape and
    one by one, and gives the values printed."""
    texts = [str(value) for value in values]
    assert by_shape(texts, len(texts), 2 * len(texts)) == values
    assert by_shape(texts, len(texts), 0) == values
    assert one_by_one(texts) == values


@pytest.mark.parametrize(
    "text",
    [
        "00:75:99",
        "-00:00:00.5",
        "+01:02:03.000001",
        "1 year 2 mons 3 days",
        "-1 years +2 mons -3 days +04:05:06.7",
        "999999 years -999999999 mons 999999999 days -999999999:99:99.999999",
        "1000000 years",
        "1000000000:00:00",
        "-5",
        "-0",
        "999999999",
        "1000000000",
        "00:00:01.1234567",
        "1 day 00:00:01.",
        "1 day\n2",
    ],
)
def test_interval_edges_by_shape(text: str) -> None:
    """At the digit bounds, with signs, minutes and seconds past 59 and fractions of
    7 digits, the conversion by shape declines or agrees with interval_in, alone and
    next to a text of another shape."""
    _check_intervals([text])
    _check_intervals(["1 day", text])


def test_work_does_not_grow_with_distinct_intervals_of_few_shapes() -> None:
    """Distinct intervals sharing a shape ("9 mons 9 days 99:99:99.999999"), a few date
    parts and a few hours and minutes, as those of a large array mostly do, are
    converted by C-level passes: 1024 take the Python-level work of 64, where one
    regular expression match each took work per element."""

    def text(i: int) -> str:
        return f"{i % 2} mons {i % 3} days 0{i % 2}:1{i % 3}:{i % 60:02d}.{i:06d}"

    few = _array_work("interval", [text(i) for i in range(FEW)])
    many = _array_work("interval", [text(i) for i in range(MANY)])
    assert many <= few + FIXED_WORK, (few, many)


def test_uuids_made_together_are_uuids() -> None:
    """uuid elements made by filling empty instances' slots are UUIDs as UUID() makes
    them: equal, same hash, repr, is_safe and pickling, from text and binary."""
    texts = ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A12"]
    expected = [UUID(text) for text in texts]
    for made in (
        BULK_TEXT["uuid"](texts),
        BULK_BINARY_ELEMENTS["uuid"]([u.bytes for u in expected]),
    ):
        assert made is not None
        for value, want in zip(made, expected, strict=True):
            assert type(value) is UUID and value == want and hash(value) == hash(want)
            assert (repr(value), value.is_safe) == (repr(want), want.is_safe)
            assert pickle.loads(pickle.dumps(value)) == want


# Raw elements at the edges of what the binary conversions take: 24:00:00 and zones at
# +-16 h for timetz, PostgreSQL 17's infinities for interval, bad families, lengths,
# bits and host bits for inet and cidr, other jsonb versions, NUL and bad UTF-8.
_TIMETZ = struct.Struct(">qi")
_INTERVAL = struct.Struct(">qii")
_NUMERIC = struct.Struct(">hhHH")
EDGE_ELEMENTS: dict[str, list[bytes]] = {
    "timetz": [
        _TIMETZ.pack(86_400_000_000, 0),
        _TIMETZ.pack(86_399_999_999, 57_599),
        _TIMETZ.pack(0, -57_599),
        _TIMETZ.pack(0, 57_600),
        _TIMETZ.pack(-1, 0),
    ],
    "interval": [
        _INTERVAL.pack(2**63 - 1, 2**31 - 1, 2**31 - 1),
        _INTERVAL.pack(-(2**63), -(2**31), -(2**31)),
        _INTERVAL.pack(2**63 - 1, 0, 0),
        _INTERVAL.pack(-5, -(2**31), 2**31 - 1),
    ],
    "inet": [
        bytes([2, 33, 0, 4, 1, 2, 3, 4]),
        bytes([2, 32, 1, 4, 1, 2, 3, 4]),
        bytes([3, 8, 0, 4, 1, 2, 3, 4]),
        bytes([2, 8, 0, 5, 1, 2, 3, 4]),
    ],
    "cidr": [
        bytes([2, 8, 1, 4, 10, 0, 0, 0]),
        bytes([2, 8, 1, 4, 10, 0, 0, 1]),
        bytes([2, 0, 1, 4, 0, 0, 0, 0]),
    ],
    "jsonb": [b"\x02[]", b"", b"\x01 1", b"\x011e999999999"],
    "json": [b" 1", b"\xff", b"1\x00", b"[1"],
    "text": [b"a\x00", b"\xc3", b""],
    "uuid": [bytes(15), bytes(17)],
    "numeric": [
        _NUMERIC.pack(0, 0, 0xC000, 0),  # NaN
        _NUMERIC.pack(1, 7, 0xD000, 0x7FFF) + b"\xff\xff",  # +Infinity, any scale and digit
        _NUMERIC.pack(0, 0, 0xF000, 0),  # -Infinity
        _NUMERIC.pack(1, 0, 0x8000, 0) + b"\x00\x01",  # bad sign word
        _NUMERIC.pack(1, 0, 0, 0) + b"\x27\x10",  # digit 10000
        _NUMERIC.pack(1, 0, 0, 0) + b"\xff\xff",  # digit -1
        _NUMERIC.pack(1, -1, 0x4000, 2) + b"\x00\x01",  # -0.0001 at scale 2: 0.00
        _NUMERIC.pack(0, 5, 0x4000, 3),  # -0 with a weight: 0.000
        _NUMERIC.pack(1, -32768, 0x4000, 0) + b"\x00\x07",  # cut past every digit
        _NUMERIC.pack(1, 32767, 0, 0x3FFF) + b"\x00\x01",  # the longest padding
        _NUMERIC.pack(1, 0, 0, 0x4000) + b"\x00\x01",  # scale over 0x3FFF
        _NUMERIC.pack(2, 0, 0, 1) + b"\x00\x01",  # fewer digits than ndigits
        _NUMERIC.pack(-1, 0, 0, 0),  # negative ndigits
        _NUMERIC.pack(1, 0, 0, 0),  # ndigits says 1, no digit
        b"\x00\x00\x00",  # short header
    ],
}


@pytest.mark.parametrize("type_name", sorted(BULK_BINARY_ELEMENTS))
@SETTINGS
@given(data=st.data())
def test_binary_element_conversions_match_element_decoding(
    type_name: str, data: st.DataObject
) -> None:
    """A conversion of all distinct binary elements at once either declines or gives
    each element's value exactly as its receive function does, for drawn values and
    for raw elements at the edges of what it takes."""
    info = type_by_name(type_name)
    raws = [encode_binary(info.oid, v) for v in data.draw(st.lists(values_for(info.oid)))]
    edges = EDGE_ELEMENTS.get(type_name, [])
    raws += data.draw(st.lists(st.sampled_from(edges))) if edges else []
    distinct = data.draw(st.permutations(list(dict.fromkeys(raws))))
    if not distinct:
        return
    values = BULK_BINARY_ELEMENTS[type_name](distinct)
    if isinstance(values, Declined):  # where it stopped: the values of those before
        assert 0 <= values.index < len(distinct), (distinct, values)
        distinct, values = distinct[: values.index], values.values_before()
    if values is None:
        return
    expected = [_element_binary(type_name, raw) for raw in distinct]
    assert all(_exact(v, e) for v, e in zip(values, expected, strict=True)), (distinct, values)


@st.composite
def _numeric_words(draw: st.DrawFn) -> bytes:
    """A binary numeric element from drawn words: mostly well-formed (ndigits matching
    the digits, a sign of the five, digits under 10000), sometimes any word, cut short
    or over-long, so that every check of numeric_recv is met or failed."""
    digits = draw(st.lists(st.integers(0, 9999) | st.integers(0, 0xFFFF), max_size=5))
    ndigits = draw(st.just(len(digits)) | st.integers(-2, 8) | st.sampled_from([0x7FFF, -0x8000]))
    weight = draw(st.integers(-3, 3) | st.integers(-0x8000, 0x7FFF))
    sign = draw(st.sampled_from([0, 0x4000, 0xC000, 0xD000, 0xF000]) | st.integers(0, 0xFFFF))
    dscale = draw(
        st.integers(0, 9) | st.integers(58, 72) | st.sampled_from([0x3FFF, 0x4000, 0xFFFF])
    )
    raw = _NUMERIC.pack(ndigits, weight, sign, dscale) + struct.pack(f">{len(digits)}H", *digits)
    return raw[: draw(st.integers(0, len(raw)))] if draw(st.integers(0, 19)) == 0 else raw


@SETTINGS
@given(raws=st.lists(_numeric_words(), min_size=1, max_size=12, unique=True))
def test_binary_numeric_conversion_matches_numeric_recv_on_any_words(raws: list[bytes]) -> None:
    """Binary numeric elements made of drawn words are converted together exactly as
    numeric_recv converts each (scale padding and cutting, weights at both ends,
    negative zero, the infinities, zeros kept unwritten), and only a set holding an
    element numeric_recv refuses is declined."""
    values = BULK_BINARY_ELEMENTS["numeric"](raws)
    expected = [_element_binary("numeric", raw) for raw in raws]
    if values is None:
        assert any(isinstance(e, DecodeError) for e in expected), raws
        return
    assert all(_exact(v, e) for v, e in zip(values, expected, strict=True)), (raws, values)


def test_binary_numeric_work_does_not_grow_with_distinct_elements() -> None:
    """1024 distinct numeric elements of one size (so that the lengths split at C
    speed) take the Python-level work of 64: their digits are converted together."""
    oid = type_by_name("numeric").array_oid
    values = [decode_text(1700, f"-{i + 1}.{i % 9000 + 1000:04d}") for i in range(MANY)]
    few = _work(oid, encode_binary(oid, values[:FEW]), decode_binary)
    many = _work(oid, encode_binary(oid, values), decode_binary)
    assert many <= few + FIXED_WORK, (few, many)


def _stepped(data: bytes, total: int) -> list[bytes | None] | Invalid:
    """The elements as read one by one, or the error."""
    items: list[bytes | None] = []
    try:
        pos = _steps(data, 0, 0, total, items)
    except Invalid as err:
        return err
    return items if pos == len(data) else Invalid(pos, "more bytes")


@SETTINGS
@given(
    sizes=st.lists(st.sampled_from([-1, 0, 1, 2, 12]), max_size=300),
    runs=st.integers(1, 40),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=2),
)
def test_binary_elements_split_in_runs_as_step_by_step(
    sizes: list[int], runs: int, flips: list[tuple[int, int]]
) -> None:
    """Elements split by guessed runs of one length are those read one by one, for
    runs of lengths, alternating ones, NULLs and corrupted lengths (then both fail)."""
    lengths = [size for size in sizes for _ in range(runs)]
    data = bytearray()
    for i, length in enumerate(lengths):
        data += struct.pack(">i", length) + bytes([i % 256]) * max(length, 0)
    for at, byte in flips:
        if data:
            data[at % len(data)] = byte
    expected = _stepped(bytes(data), len(lengths))
    try:
        got: list[bytes | None] | Invalid = _binary_elements(bytes(data), 0, len(lengths))
    except Invalid as err:
        got = err
    if isinstance(expected, Invalid):
        assert isinstance(got, Invalid)
    else:
        assert got == expected


def test_binary_work_does_not_grow_with_runs_of_one_length() -> None:
    """Binary text elements whose lengths come in runs (three runs of one length each)
    are split a run at a time, guesses doubling: 16x the elements (runs 16x longer)
    take under twice the Python-level work, where a step per element took 16x."""
    oid = type_by_name("text").array_oid
    few = [f"{i:0{4 + i // 100}d}" for i in range(FEW * 4)]
    many = [f"{i:0{4 + i // 1600}d}" for i in range(FEW * 64)]
    small = _work(oid, encode_binary(oid, few), decode_binary)
    large = _work(oid, encode_binary(oid, many), decode_binary)
    assert large <= 2 * small, (small, large)


# --------------------------------------------------------------------------- binary numerics
# by header (helper-36): elements that share a few headers are converted through one
# template per header (_bulk_numeric.by_header); many headers take the by-element passes.


@st.composite
def _numeric_head(draw: st.DrawFn) -> tuple[int, int, int, int]:
    """ndigits, weight, sign and dscale: mostly valid, now and then a special or one
    numeric_recv refuses."""
    ndigits = draw(st.integers(0, 4))
    weight = draw(st.integers(-3, 3) | st.sampled_from([-0x8000, -17, 15, 0x7FFF]))
    sign = draw(st.sampled_from([0, 0x4000]))
    dscale = draw(st.integers(0, 9) | st.integers(58, 72) | st.just(0x3FFF))
    rare = draw(st.integers(0, 39))
    if rare == 0:
        sign = draw(st.sampled_from([0xC000, 0xD000, 0xF000, 0x8000]))
    elif rare == 1:
        ndigits = draw(st.sampled_from([-1, 0x7FFF]))
    elif rare == 2:
        dscale = 0x4000
    return ndigits, weight, sign, dscale


@st.composite
def _numerics_of_few_heads(draw: st.DrawFn) -> list[bytes]:
    """Distinct binary numerics over one to three drawn headers, their digits drawn to
    fit (often zero, rarely 10000 or more), rarely one too few or cut short."""
    heads = draw(st.lists(_numeric_head(), min_size=1, max_size=3))
    raws = []
    for _ in range(draw(st.integers(1, 16))):
        ndigits, weight, sign, dscale = draw(st.sampled_from(heads))
        count = max(0, min(ndigits, 5))
        digits = draw(st.lists(st.just(0) | st.integers(0, 9999), min_size=count, max_size=count))
        rare = draw(st.integers(0, 99))
        if rare == 0 and digits:
            digits[-1] = draw(st.sampled_from([10000, 0xFFFF]))
        elif rare == 1:
            digits = digits[:-1] if digits else [1]
        raw = _NUMERIC.pack(ndigits, weight, sign, dscale) + struct.pack(
            f">{len(digits)}H", *digits
        )
        raws.append(raw[: draw(st.integers(0, len(raw)))] if rare == 2 else raw)
    return list(dict.fromkeys(raws))


@SETTINGS
@given(raws=_numerics_of_few_heads())
def test_binary_numerics_of_few_headers_match_numeric_recv(raws: list[bytes]) -> None:
    """Elements sharing headers (one template each: padded, cut within a group, cut
    whole, zeros kept as an exponent, specials) convert by header and by element
    exactly as numeric_recv converts each, and are declined only for an element it
    refuses."""
    from codec.values._bulk_numeric import by_element, by_header, numerics_recv, one_header

    expected = [_element_binary("numeric", raw) for raw in raws]
    refused = any(isinstance(e, DecodeError) for e in expected)
    heads = [raw[:8] for raw in raws]
    lengths = [len(raw) for raw in raws]
    conversions = [
        numerics_recv(raws),
        by_header(raws, heads, dict.fromkeys(heads), lengths),
        by_element(raws, heads),
    ]
    if len(set(heads)) == 1 and len(set(lengths)) == 1 and lengths[0] >= 8:
        conversions.append(one_header(raws, b"".join(raws)))
    for values in conversions:
        if values is None:
            assert refused, raws
            continue
        assert all(_exact(v, e) for v, e in zip(values, expected, strict=True)), (raws, values)


# One header per template branch: padded, cut within a group, cut by whole groups, cut
# past every digit, zeros kept as an exponent with and without a display scale, no
# digits; each negative too.
_FEW_HEADS = [
    (ndigits, weight, sign, dscale)
    for ndigits, weight, dscale in [
        (1, 0, 2),  # 7.00
        (2, 0, 2),  # 7.12: the second group cut to 2 digits
        (3, -1, 3),  # 0.000: the last two groups cut whole, the first to 3 digits
        (2, -3, 1),  # every digit cut
        (2, 0, 100),  # 100 zeros after 2 digits: a ScaledDecimal
        (2, 20, 0),  # 72 zeros: a positive exponent
        (0, 5, 3),
    ]
    for sign in (0, 0x4000)
]


def _few_heads_elements(head: tuple[int, int, int, int]) -> list[bytes]:
    ndigits = head[0]
    digit_sets = [[0] * ndigits, [7] * ndigits, [1234, 5678, 9012][:ndigits], [9999] * ndigits]
    return list(
        dict.fromkeys(
            _NUMERIC.pack(*head) + struct.pack(f">{ndigits}H", *digits) for digits in digit_sets
        )
    )


@pytest.mark.parametrize("head", [*_FEW_HEADS, None])
def test_binary_numerics_of_each_template_match_numeric_recv(
    head: tuple[int, int, int, int] | None,
) -> None:
    """Elements of one header per template branch (or of all of them together, with the
    specials) convert by header exactly as numeric_recv converts each."""
    from codec.values._bulk_numeric import by_header, one_header

    if head is None:
        raws = [raw for each in _FEW_HEADS for raw in _few_heads_elements(each)]
        raws += EDGE_ELEMENTS["numeric"][:3]
    else:
        raws = _few_heads_elements(head)
    heads = [raw[:8] for raw in raws]
    lengths = [len(raw) for raw in raws]
    conversions = [by_header(raws, heads, dict.fromkeys(heads), lengths)]
    if head is not None:
        conversions.append(one_header(raws, b"".join(raws)))
    expected = [_element_binary("numeric", raw) for raw in raws]
    for values in conversions:
        assert values is not None
        assert all(_exact(v, e) for v, e in zip(values, expected, strict=True)), (raws, values)


@pytest.mark.parametrize("byte", range(8))
def test_binary_numerics_of_one_size_and_two_headers_match_numeric_recv(byte: int) -> None:
    """Elements of one size whose headers differ in one byte (any of the 8: another
    weight or scale, or a digit count or sign word numeric_recv refuses) are not taken
    for elements of one header."""
    from codec.values._bulk_numeric import numerics_recv

    first = _NUMERIC.pack(1, 0, 0, 2) + b"\x00\x07"
    other = bytearray(first)
    other[byte] ^= 1
    raws = [first, bytes(other), first[:8] + b"\x00\x08"]
    values = numerics_recv(raws)
    expected = [_element_binary("numeric", raw) for raw in raws]
    if values is None:
        assert any(isinstance(e, DecodeError) for e in expected)
    else:
        assert all(_exact(v, e) for v, e in zip(values, expected, strict=True)), (raws, values)


_SEVEN = _NUMERIC.pack(2, 0, 0, 2) + b"\x00\x07\x00\x07"


@pytest.mark.parametrize(
    "raws",
    [
        [_SEVEN, _SEVEN[:10]],  # one header, the second element a digit short
        [_SEVEN + b"\x00\x01", _SEVEN[:10]],  # a digit too many, then one too few
        *([raw] for raw in EDGE_ELEMENTS["numeric"]),  # one element: specials, refusals
        [EDGE_ELEMENTS["numeric"][1], EDGE_ELEMENTS["numeric"][1][:8] + b"\x00\x01"],
    ],
)
def test_binary_numerics_of_one_header_match_numeric_recv(raws: list[bytes]) -> None:
    """Elements of one header (or whose first 8 bytes are) convert as numeric_recv
    converts each, or are declined for an element it refuses."""
    from codec.values._bulk_numeric import numerics_recv

    values = numerics_recv(raws)
    expected = [_element_binary("numeric", raw) for raw in raws]
    if values is None:
        assert any(isinstance(e, DecodeError) for e in expected)
    else:
        assert all(_exact(v, e) for v, e in zip(values, expected, strict=True)), (raws, values)


def test_binary_numerics_of_many_headers_take_the_element_passes() -> None:
    """1024 elements of one size and 1024 headers (each its own scale) take the
    Python-level work of 64: past a few headers per element, the by-header templates
    would cost a step each."""
    oid = type_by_name("numeric").array_oid
    values = [decode_text(1700, "1.5" + "0" * i) for i in range(MANY)]
    few = _work(oid, encode_binary(oid, values[:FEW]), decode_binary)
    many = _work(oid, encode_binary(oid, values), decode_binary)
    assert many <= few + FIXED_WORK, (few, many)


@pytest.mark.parametrize(
    "lengths",
    [
        [12] * 99 + [10] + [12] * 99 + [10] + [12] * 5,  # runs ended by another length
        [1] * 20 + [-1] + [1] * 5,  # a run ended by NULL
        [1] * 20 + [-2] + [1] * 5,  # ... by a bad length
        [1] * 20 + [7],  # ... by a length past the end
        [2] * 40 + [0] + [2] * 40 + [-1, -1] + [2] * 3,
    ],
)
def test_binary_runs_take_the_element_that_ends_them(lengths: list[int]) -> None:
    """The element that ends a run of one length (its length word read with the run) is
    taken there, as a step would take it, or refused as a step refuses it."""
    data = b"".join(
        struct.pack(">i", n) + bytes([i % 256]) * max(n, 0) for i, n in enumerate(lengths)
    )
    if lengths[-1] == 7:
        data = data[:-3]
    expected = _stepped(data, len(lengths))
    try:
        got: list[bytes | None] | Invalid = _binary_elements(data, 0, len(lengths))
    except Invalid as err:
        got = err
    if isinstance(expected, Invalid):
        assert isinstance(got, Invalid)
    else:
        assert got == expected


def test_binary_runs_ended_by_one_other_length_take_a_guess_each() -> None:
    """Runs of 99 elements of one length, each ended by one of another (a column of
    numbers with two decimals, 1 in 100 a whole number), take one guess per run: the
    element that ends the run is taken with it, where a guess for its length and a step
    after it took ~70 Python-level events a run."""
    oid = type_by_name("text").array_oid

    def work(runs: int) -> int:
        items = ["a" * 8 if i % 100 else "b" * 6 for i in range(1, 100 * runs + 1)]
        return _work(oid, encode_binary(oid, items), decode_binary)

    few, many = work(16), work(64)
    assert (many - few) / 48 < 50, (few, many)


def test_oid_arrays_wrap_negative_numbers_as_oidin_does() -> None:
    """oidin reads -2147483648..-1 as 2**32 less them; the whole reader and the bulk
    conversion do too (they declined, and 1 MB of such elements took 170 ms)."""
    oid_array = type_by_name("oid").array_oid
    text = "{-1,5,-2147483648,NULL,4294967295,-7,-8}"
    assert BULK_WHOLE["oid"](text) == [
        4294967295,
        5,
        2147483648,
        None,
        4294967295,
        2**32 - 7,
        2**32 - 8,
    ]
    assert BULK_TEXT["oid"](["-1", "+2", "-00012"]) == [4294967295, 2, 4294967284]
    assert decode_text(oid_array, '{"-1","-2"}') == [4294967295, 4294967294]
    with pytest.raises(DecodeError, match="element 1: value -2147483649 is out of range"):
        decode_text(oid_array, "{-1,-2147483649}")


@pytest.mark.parametrize("type_name", ["int2", "int4", "int8"])
@given(
    st.lists(
        st.sampled_from(["0x1F", "-0o17", "0b101", "1_000", "0x_ff", "0X7fff", "+0b1_1", "12"])
        | st.sampled_from(["007", "0x", "1__0", "_1", "0xG", "0b2", "0x8000", "-0x80000000"])
        | st.integers(-(2**40), 2**40).map(hex),
        min_size=1,
        max_size=6,
    )
)
def test_integers_in_other_bases_convert_as_the_input_function(
    type_name: str, texts: list[str]
) -> None:
    """PostgreSQL 16's hexadecimal, octal and binary integers and underscores: the bulk
    conversion takes them as the input function does, or declines (each went one by
    one: 130 ms per MB of hexadecimal and decimal elements)."""
    values = BULK_TEXT[type_name](texts)
    if isinstance(values, Declined):
        texts, values = texts[: values.index], values.values_before()
    if values is None:
        return
    assert values == [_element(type_name, text) for text in texts], texts


def test_timestamptz_without_a_zone_converts_in_bulk_as_the_input_function() -> None:
    """Without a zone timestamptz_in takes the session's (UTC to the codec): in bulk
    too, where such elements went one by one (215 ms per MB)."""
    texts = ["2000-01-01 00:00:07.1234", "1999-12-31 23:59:59", "2024-02-29 12:00:00.5"]
    assert BULK_TEXT["timestamptz"](texts) == [_element("timestamptz", t) for t in texts]
    assert isinstance(BULK_TEXT["timestamptz"]([texts[0], texts[1] + "+02"]), Declined)
