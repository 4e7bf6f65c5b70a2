"""convert_column (RE2 patterns and Arrow casts) gives exactly what convert_values (the
codec, value by value) gives: the same Arrow values, NaN and -0.0 included, and the same
specials, whatever the mix of canonical, non-canonical, malformed and NULL values."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any, TypeAlias

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pgwire_mock.spark.convert as convert_module
from codec.strategies.values import values_for
from codec.values import TYPES, encode_binary, encode_text, type_by_name
from pgwire_mock.spark.convert import RawValue, Specials, convert_column, convert_values
from pgwire_mock.spark.types import ColumnType, column_type

UTC = dt.UTC
Arrow: TypeAlias = "pa.Array[Any]"


def _typmod(precision: int, scale: int) -> int:
    return ((precision << 16) | scale) + 4


def _oid(name: str) -> int:
    return type_by_name(name).oid


ARRAYS = sorted(oid for oid, info in TYPES.items() if info.is_array)
# (type OID, typmod, array_dims): every codec type, declared numerics, and 2-D arrays.
SPECS = (
    [(oid, -1, 1) for oid in sorted(TYPES)]
    + [(1700, _typmod(10, 2), 1), (1700, _typmod(38, 6), 1), (1700, _typmod(5, 0), 1)]
    + [(1231, _typmod(10, 2), 1)]
    + [(oid, -1, 2) for oid in ARRAYS]
)


def _spec_id(spec: tuple[int, int, int]) -> str:
    oid, typmod, dims = spec
    name = TYPES[oid].name
    if typmod >= 4:
        name += f"({(typmod - 4) >> 16},{(typmod - 4) & 0xFFFF})"
    return name + ("-2d" if dims == 2 else "")


# ------------------------------------------------------------------ comparison


def _identical(a: object, b: object) -> bool:
    """Equality where NaN equals NaN and -0.0 differs from 0.0, through lists and dicts."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_identical(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_identical(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _storage(array: Arrow) -> Arrow:
    """Dates and timestamps as their integers: a year-0 value a wrong cast might make
    cannot become a Python datetime, but must still show as a difference."""
    kind = array.type
    depth = 0
    while pa.types.is_list(kind):
        kind, depth = kind.value_type, depth + 1
    if pa.types.is_timestamp(kind) or pa.types.is_date(kind):
        target: pa.DataType = pa.int64() if pa.types.is_timestamp(kind) else pa.int32()
        for _ in range(depth):
            target = pa.list_(target)
        return array.cast(target)
    return array


def assert_same_result(
    got: tuple[Arrow, Specials], expected: tuple[Arrow, Specials], raws: object
) -> None:
    (array, specials), (ref_array, ref_specials) = got, expected
    assert array.type == ref_array.type, raws
    assert len(array) == len(ref_array), raws
    got_values, ref_values = _storage(array).to_pylist(), _storage(ref_array).to_pylist()
    assert _identical(got_values, ref_values), (raws, got_values, ref_values)
    assert specials == ref_specials, (raws, specials, ref_specials)


def assert_paths_agree(column: ColumnType, raws: list[RawValue]) -> None:
    """convert_column on the list, and on it as a string array when it is all text,
    equals convert_values on the list."""
    reference = convert_values(column, raws)
    assert_same_result(convert_column(column, raws), reference, raws)
    if any(isinstance(r, bytes) for r in raws):
        return
    try:
        strings = pa.array(raws, pa.string())
    except (pa.ArrowInvalid, UnicodeEncodeError):
        return  # surrogate-escaped bytes that are not UTF-8: no string array holds them
    assert_same_result(convert_column(column, strings), reference, raws)


# ------------------------------------------------------------------ strategies

# Values PostgreSQL's output functions never write, and values no input function takes.
MALFORMED = [
    "",
    " ",
    "+5",
    " 5",
    "5 ",
    "007",
    "-0",
    "-0.00",
    "0.0",
    "1e400",
    "1e-400",
    "2e-324",
    "1e-46",
    "3.5e38",
    "3.4028235e+38",
    "1E5",
    "1.5e+3",
    ".5",
    "5.",
    "0x1F",
    "1_000",
    "9223372036854775808",
    "-9223372036854775809",
    "99999999999999999999",
    "4294967296",
    "-1",
    "infinity",
    "-infinity",
    "Infinity",
    "-Infinity",
    "inf",
    "NaN",
    "nan",
    "-NaN",
    "true",
    "T",
    "yes",
    "null",
    "NULL",
    "0000-01-01",
    "2023-02-30",
    "2023-02-29",
    "2024-02-29",
    "2023-13-01",
    "2023-1-5",
    "0001-01-01 BC",
    "0044-03-15 BC",
    "5874897-12-31",
    "10000-01-01",
    "2023-01-01T12:00:00",
    "2023-01-01 24:00:00",
    "2023-01-01 23:59:60",
    "2023-01-01 23:59:60.5",
    "9999-12-31 23:59:60",
    "2023-01-01 12:00:00.1234567",
    "2023-01-01 12:00:00+05:30",
    "2023-01-01 12:00:00-03:30:15",
    "2023-01-01 12:00:00+16",
    "2023-01-01 12:00:00+15:59",
    "2023-01-01 12:00:00+05:60",
    "2023-01-01 12:00:00 UTC",
    "0001-01-01 00:00:00+05",
    "0001-01-01 00:00:00-05",
    "9999-12-31 23:00:00-05",
    "9999-12-31 23:00:00+05",
    "{1,NULL}",
    "{}",
    "{ 1 , 2 }",
    "{{1,2},{3,4}}",
    "[0:1]={1,2}",
    '{"a,b",c}',
    '{"a\\"b",""}',
    '{a,NULL,"NULL",null,NuLl}',
    '{" x "}',
    "{a b}",
    "{a,}",
    "{,}",
    "{",
    "x\x00y",
    "\x00",
    "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
    "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
    "a0eebc999c0b4ef8bb6d6bb9bd380a11",
    "\\x",
    "\\x0A0b",
    "\\xabc",
    "abc",
    "\\001",
    "caf\udce9",  # a Latin-1 byte from a non-UTF-8 database, surrogate-escaped
    "0." + "1" * 16383,
    "0." + "1" * 16384,
    "1" + "0" * 131072,
]


def _mutations(text: str) -> list[str]:
    """Near misses of a canonical text: what another client or DateStyle might send."""
    return [
        " " + text,
        text + " ",
        "+" + text,
        "0" + text,
        text + "0",
        text[:-1],
        text.upper(),
        text.lower(),
        text.replace("-", "+", 1),
        text.replace(",", " , "),
        text.replace("{", "{ ").replace("}", " }"),
        text.replace(":", ".", 1),
        text + "\x00",
        '"' + text + '"',
    ]


def _canonical(oid: int, typmod: int) -> st.SearchStrategy[str]:
    texts = values_for(oid).map(lambda v: encode_text(oid, v))
    info = TYPES[oid]
    numeric = info.element_oid == 1700 if info.is_array else oid == 1700
    if numeric and typmod >= 4:
        # Values that fit numeric(p, s), written as a numeric(p, s) column prints them,
        # so the decimal cast is taken (random numerics rarely fit).
        precision, scale = (typmod - 4) >> 16, (typmod - 4) & 0xFFFF
        fits = st.integers(-(10**precision) + 1, 10**precision - 1).map(
            lambda c: encode_text(1700, Decimal(c).scaleb(-scale))
        )
        if info.is_array:
            fits = st.lists(st.none() | fits, max_size=3).map(
                lambda items: "{" + ",".join("NULL" if i is None else i for i in items) + "}"
            )
        texts = texts | fits | fits
    # Half the codec's dates and timestamps are infinities or outside years 1-9999 (sent
    # one by one): more in-range ones keep most columns on the fast path.
    in_range = {
        1082: st.dates(),
        1114: st.datetimes(),
        1184: st.datetimes(timezones=st.just(UTC)),
    }
    if oid in in_range:
        texts = texts | in_range[oid].map(lambda v: encode_text(oid, v))
    return texts


@st.composite
def _datetime_texts(draw: st.DrawFn, time: bool, tz: bool) -> str:
    """Dates / timestamps in the canonical layout: years 0 to 9999, offsets up to 23
    hours (out of PostgreSQL's range) that may carry the value out of years 1-9999,
    and rarely an invalid field (which makes Arrow's cast of the whole column fail)."""

    def field(low: int, high: int, edge: int) -> int:
        if draw(st.integers(0, 49)) == 0:
            return draw(st.just(edge) | st.integers(0, 99))
        return draw(st.integers(low, high))

    year = draw(st.sampled_from([0, 1, 1600, 1700, 2000, 2024, 9999]) | st.integers(0, 9999))
    text = f"{year:04d}-{field(1, 12, 13):02d}-{field(1, 28, 31):02d}"
    hour, sign = field(0, 23, 24), draw(st.sampled_from("+-"))
    if draw(st.integers(0, 2)) == 0:  # an offset that may cross into year 0 or 10000
        text, hour, sign = draw(
            st.sampled_from(
                [("0001-01-01", field(0, 7, 0), "+"), ("9999-12-31", field(16, 23, 23), "-")]
            )
        )
    if time:
        text += f" {hour:02d}:{field(0, 59, 60):02d}:{field(0, 59, 60):02d}"
        if draw(st.booleans()):
            text += "." + draw(st.text("0123456789", min_size=1, max_size=7))
    if tz:
        text += sign + f"{field(0, 23, 24):02d}"
        if draw(st.booleans()):
            text += f":{field(0, 59, 60):02d}"
    return text


# Values that probe one fast path's edges, by type OID.
EDGES: dict[int, st.SearchStrategy[str]] = {
    1082: _datetime_texts(time=False, tz=False),
    1114: _datetime_texts(time=True, tz=False),
    1184: _datetime_texts(time=True, tz=True),
    # More digits than 128 bits hold (2**128 + 1), and more than numeric allows.
    1700: st.sampled_from(
        [
            str(2**128 + 1),
            "-" + str(2**128 + 5),
            str(2**127 + 1),
            "1." + "0" * 38,
            "0." + "0" * 38 + "1",
            "9" * 38,
            "0." + "1" * 16384,
            "1" + "0" * 131072,
        ]
    )
    | st.integers(-(2**130), 2**130).map(str),
    700: st.floats(width=32).map(repr) | st.floats().map(repr),
    701: st.floats().map(repr) | st.integers(-(10**400), 10**400).map(lambda i: f"{i}e-700"),
}


@st.composite
def raw_columns(draw: st.DrawFn, oid: int, typmod: int, dims: int = 1) -> list[RawValue]:
    """Mostly canonical text (so the fast path's merge is taken), with NULLs, near
    misses, malformed values, arbitrary text, text the fast path's own pattern accepts,
    and values probing the type's edges in between."""
    canonical = _canonical(oid, typmod)
    fast = convert_module._fast_path(column_type(oid, typmod, array_dims=dims))
    # (Random digits in a date's layout are rarely a date, and one invalid date makes
    # the whole column go one by one: dates and times get well-formed edges instead.)
    extra = ["pattern"] if fast is not None and oid not in (1082, 1114, 1184) else []
    extra += ["edge", "edge"] if oid in EDGES and fast is not None else []
    kinds = st.sampled_from(["canonical"] * 6 + ["null", "mutated", "malformed", "any", *extra])
    raws: list[RawValue] = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(kinds)
        if kind == "canonical":
            raws.append(draw(canonical))
        elif kind == "null":
            raws.append(None)
        elif kind == "mutated":
            raws.append(draw(st.sampled_from(_mutations(draw(canonical)))))
        elif kind == "malformed":
            raws.append(draw(st.sampled_from(MALFORMED)))
        elif kind == "pattern":
            assert fast is not None
            raws.append(draw(st.from_regex(fast.pattern, fullmatch=True)))
        elif kind == "edge":
            raws.append(draw(EDGES[oid]))
        else:
            raws.append(draw(st.text(max_size=12)))
    return raws


# ------------------------------------------------------------------ properties


def _has_fast_path(spec: tuple[int, int, int]) -> bool:
    oid, typmod, dims = spec
    return convert_module._fast_path(column_type(oid, typmod, array_dims=dims)) is not None


FAST = [s for s in SPECS if _has_fast_path(s)]
# The others go straight to convert_values: a few examples show the dispatch is right.
OTHERS = [s for s in SPECS if not _has_fast_path(s)]


def test_the_fast_paths_cover_the_common_types() -> None:
    """The property below runs many examples on exactly these (a type losing its fast
    path, or 2-D arrays gaining one, shows here)."""
    names = {_spec_id(s) for s in FAST}
    assert names == {
        *("bool", "int2", "int4", "int8", "oid", "float4", "float8", "numeric"),
        *("text", "varchar", "bpchar", "uuid", "bytea", "date", "timestamp", "timestamptz"),
        *("json", "jsonb"),
        *("numeric(10,2)", "numeric(38,6)", "numeric(5,0)"),
        *("_int2", "_int4", "_int8", "_text", "_varchar"),
    }


def _agree_on_text(oid: int, typmod: int, dims: int, data: st.DataObject) -> None:
    column = column_type(oid, typmod, array_dims=dims)
    raws = data.draw(raw_columns(oid, typmod, dims))
    assert_paths_agree(column, raws)


@pytest.mark.parametrize(("oid", "typmod", "dims"), FAST, ids=[_spec_id(s) for s in FAST])
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fast_and_reference_paths_agree_on_text(
    oid: int, typmod: int, dims: int, data: st.DataObject
) -> None:
    """Any mix of canonical, near-canonical, malformed and NULL text values converts to
    the same array and specials either way, as a list and as a string array."""
    _agree_on_text(oid, typmod, dims, data)


@pytest.mark.parametrize(("oid", "typmod", "dims"), OTHERS, ids=[_spec_id(s) for s in OTHERS])
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_types_without_a_fast_path_give_the_reference_result(
    oid: int, typmod: int, dims: int, data: st.DataObject
) -> None:
    """The same, for the types (and 2-D array columns) converted one by one anyway."""
    _agree_on_text(oid, typmod, dims, data)


@pytest.mark.parametrize(("oid", "typmod", "dims"), FAST, ids=[_spec_id(s) for s in FAST])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_binary_values_take_the_reference_path(
    oid: int, typmod: int, dims: int, data: st.DataObject
) -> None:
    """Binary values (alone, or next to text and NULLs) give the reference result: a
    binary value that happens to be valid UTF-8 is not read as text."""
    column = column_type(oid, typmod, array_dims=dims)
    binary = values_for(oid).map(lambda v: encode_binary(oid, v))
    text = _canonical(oid, typmod)
    raws: list[RawValue] = data.draw(
        st.lists(st.one_of(st.none(), binary, binary, text, st.binary(max_size=8)), max_size=8)
    )
    assert_paths_agree(column, raws)


def test_unknown_user_types_keep_their_text_and_the_hex_of_binary() -> None:
    column = column_type(16495, user_types={16495: ("public", "mood")})
    raws: list[RawValue] = ["happy", None, b"sad", "x\x00"]
    assert_paths_agree(column, raws)
    array, specials = convert_column(column, raws)
    assert array.to_pylist() == ["happy", None, None, "x\x00"]
    assert specials == [(2, "\\x736164")]


# ------------------------------------------------------------------ targeted examples

D = dt.date
T = dt.datetime
BIG = "1" + "0" * 131072
EXAMPLES: list[tuple[str, int, int, list[RawValue], list[object], Specials]] = [
    # (type, typmod, array dims, raw values, expected values, expected specials)
    (
        "int2",
        -1,
        1,
        ["1", "-32768", "32767", "32768", None, "-0", "007", "+5", " 5"],
        [1, -32768, 32767, None, None, 0, 7, 5, 5],
        [(3, "32768")],
    ),
    (
        "int4",
        -1,
        1,
        ["2147483647", "-2147483648", "2147483648", "0x10", "1e3"],
        [2147483647, -2147483648, None, 16, None],
        [(2, "2147483648"), (4, "1e3")],
    ),
    (
        "int8",
        -1,
        1,
        ["9223372036854775807", "-9223372036854775808", "9223372036854775808", "12"],
        [9223372036854775807, -9223372036854775808, None, 12],
        [(2, "9223372036854775808")],
    ),
    (
        "oid",
        -1,
        1,
        ["0", "4294967295", "4294967296", "16384"],
        [0, 4294967295, None, 16384],
        [(2, "4294967296")],
    ),
    (
        "float8",
        -1,
        1,
        [
            "1.5",
            "-0",
            "NaN",
            "-Infinity",
            "1.7976931348623157e+308",
            "1e400",
            "5e-324",
            "2.2250738585072014e-308",
            "2e-324",
            "1e-400",
            "0e-999",
        ],
        [
            1.5,
            -0.0,
            math.nan,
            -math.inf,
            1.7976931348623157e308,
            None,
            5e-324,
            2.2250738585072014e-308,
            None,
            None,
            0.0,
        ],
        [(5, "1e400"), (8, "2e-324"), (9, "1e-400")],
    ),
    (
        "float4",
        -1,
        1,
        ["1.5", "-0", "NaN", "Infinity", "3.4028235e+38", "3.5e+38", "1e-45", "1e-46", "0.1"],
        [
            1.5,
            -0.0,
            math.nan,
            math.inf,
            3.4028234663852886e38,
            None,
            1.401298464324817e-45,
            None,
            0.10000000149011612,
        ],
        [(5, "3.5e+38"), (7, "1e-46")],
    ),
    (
        "bool",
        -1,
        1,
        ["t", "f", None, "true", "0", "x"],
        [True, False, None, True, False, None],
        [(5, "x")],
    ),
    (
        "numeric",
        -1,
        1,
        ["1.50", "0", "-0.5", "NaN", "-Infinity", "-0.00", "007", "1e3", "0." + "1" * 16384],
        ["1.50", "0", "-0.5", "NaN", "-Infinity", "0.00", "7", "1000", None],
        [(8, "0." + "1" * 16384)],
    ),
    ("numeric", -1, 1, ["1", BIG], ["1", None], [(1, BIG)]),
    (
        "numeric",
        _typmod(10, 2),
        1,
        ["12.50", "-0.01", "99999999.99", "NaN", "Infinity", "123456789.12", "1.5", "1.234"],
        [
            Decimal("12.50"),
            Decimal("-0.01"),
            Decimal("99999999.99"),
            None,
            None,
            None,
            Decimal("1.50"),
            None,
        ],
        [(3, "NaN"), (4, "Infinity"), (5, "123456789.12"), (7, "1.234")],
    ),
    # 2**128 + 1: Arrow's own string-to-decimal cast would wrap it around to 1.00.
    (
        "numeric",
        _typmod(10, 2),
        1,
        ["1", "340282366920938463463374607431768211457", "2"],
        [Decimal("1.00"), None, Decimal("2.00")],
        [(1, "340282366920938463463374607431768211457")],
    ),
    (
        "numeric",
        _typmod(38, 6),
        1,
        ["12345678901234567890123456789012.123456", "-1.000001", "0.000000"],
        [
            Decimal("12345678901234567890123456789012.123456"),
            Decimal("-1.000001"),
            Decimal("0.000000"),
        ],
        [],
    ),
    ("text", -1, 1, ["a", "", "é ☃", "x\x00y"], ["a", "", "é ☃", None], [(3, "x\x00y")]),
    ("varchar", -1, 1, ["{", "NULL", " s "], ["{", "NULL", " s "], []),
    ("bpchar", -1, 1, ["ab  ", ""], ["ab  ", ""], []),
    (
        "uuid",
        -1,
        1,
        [
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
            "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
            "a0eebc999c0b4ef8bb6d6bb9bd380a11",
            "a0eebc99",
        ],
        ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"] * 4 + [None],
        [(4, "a0eebc99")],
    ),
    (
        "bytea",
        -1,
        1,
        ["\\x", "\\x0a0b", "\\x0A0B", "abc", "\\xzz"],
        [b"", b"\n\x0b", b"\n\x0b", b"abc", None],
        [(4, "\\xzz")],
    ),
    (
        "date",
        -1,
        1,
        [
            "2024-02-29",
            "0001-01-01",
            "9999-12-31",
            "2023-02-30",
            "0000-01-01",
            "0044-03-15 BC",
            "infinity",
            "10000-01-01",
            "2023-1-5",
        ],
        [D(2024, 2, 29), D(1, 1, 1), D(9999, 12, 31), None, None, None, None, None, D(2023, 1, 5)],
        [
            (3, "2023-02-30"),
            (4, "0000-01-01"),
            (5, "0044-03-15 BC"),
            (6, "infinity"),
            (7, "10000-01-01"),
        ],
    ),
    (
        "timestamp",
        -1,
        1,
        [
            "2024-02-29 13:45:30.123456",
            "2023-01-01 00:00:00",
            "2023-01-01 24:00:00",
            "2023-01-01T01:02:03",
            "-infinity",
            "2023-02-30 00:00:00",
        ],
        [
            T(2024, 2, 29, 13, 45, 30, 123456),
            T(2023, 1, 1),
            T(2023, 1, 2),
            T(2023, 1, 1, 1, 2, 3),
            None,
            None,
        ],
        [(4, "-infinity"), (5, "2023-02-30 00:00:00")],
    ),
    (
        "timestamptz",
        -1,
        1,
        [
            "2023-01-01 12:00:00+00",
            "2023-01-01 12:00:00+05:30",
            "2023-01-01 12:00:00-03:30:15",
            "2023-01-01 12:00:00.5-03",
            "2023-01-01 12:00:00+15:59",
            "2023-01-01 12:00:00+16",
            "0001-01-01 00:00:00+05",
            "0001-01-01 00:00:00-05",
            "9999-12-31 23:00:00-05",
            "infinity",
        ],
        [
            T(2023, 1, 1, 12, tzinfo=UTC),
            T(2023, 1, 1, 6, 30, tzinfo=UTC),
            T(2023, 1, 1, 15, 30, 15, tzinfo=UTC),
            T(2023, 1, 1, 15, 0, 0, 500000, tzinfo=UTC),
            T(2022, 12, 31, 20, 1, tzinfo=UTC),
            None,
            None,
            T(1, 1, 1, 5, tzinfo=UTC),
            None,
            None,
        ],
        [
            (5, "2023-01-01 12:00:00+16"),
            (6, "0001-01-01 00:00:00+05"),
            (8, "9999-12-31 23:00:00-05"),
            (9, "infinity"),
        ],
    ),
    (
        "int4[]",
        -1,
        1,
        ["{1,NULL,-3}", "{}", "{ 1 , 2 }", "{{1,2},{3,4}}", "[0:1]={1,2}", "{1,99999999999}"],
        [[1, None, -3], [], [1, 2], None, None, None],
        [(3, "{{1,2},{3,4}}"), (4, "[0:1]={1,2}"), (5, "{1,99999999999}")],
    ),
    (
        "int8[]",
        -1,
        1,
        ["{9223372036854775807,-9223372036854775808}", "{007,-0}", "{null}"],
        [[9223372036854775807, -9223372036854775808], [7, 0], [None]],
        [],
    ),
    (
        "text[]",
        -1,
        1,
        ['{"a,b",c}', '{a,NULL,"NULL",""}', '{"a\\"b"}', '{" x "}', "{}", "{a b}", "{{a}}"],
        [["a,b", "c"], ["a", None, "NULL", ""], ['a"b'], [" x "], [], ["a b"], None],
        [(6, "{{a}}")],
    ),
    (
        "varchar[]",
        -1,
        1,
        ["{null,NuLl,é}", '{"",""}', "{a,}"],
        [[None, None, "é"], ["", ""], None],
        [(2, "{a,}")],
    ),
    (
        "int4[]",
        -1,
        2,
        ["{{1,2},{NULL,4}}", "{}", "{1,2}"],
        [[[1, 2], [None, 4]], [], None],
        [(2, "{1,2}")],
    ),
    (
        "jsonb",
        -1,
        1,
        # Two levels deep go by pattern, deeper documents one by one: all are kept.
        ['{"a": [1, {"b": null}]}', '{"a": {"b": {"c": 1}}}', "NaN", '{"a": 01}', '"\\u00e9"'],
        ['{"a": [1, {"b": null}]}', '{"a": {"b": {"c": 1}}}', None, None, '"\\u00e9"'],
        [(2, "NaN"), (3, '{"a": 01}')],
    ),
    (
        "json",
        -1,
        1,
        [' [1, "x\ty"] ', '{"k": 1,}', '{"k": "\\x"}', " 1e400 "],
        [None, None, None, " 1e400 "],
        [(0, ' [1, "x\ty"] '), (1, '{"k": 1,}'), (2, '{"k": "\\x"}')],
    ),
]


@pytest.mark.parametrize(
    ("name", "typmod", "dims", "raws", "values", "specials"),
    EXAMPLES,
    ids=[f"{e[0]}-{i}" for i, e in enumerate(EXAMPLES)],
)
def test_concrete_values(
    name: str,
    typmod: int,
    dims: int,
    raws: list[RawValue],
    values: list[object],
    specials: Specials,
) -> None:
    """Each fast path's edge cases give the PostgreSQL value, or NULL and the text, on
    both paths."""
    column = column_type(_oid(name), typmod, array_dims=dims)
    for got in (convert_column(column, raws), convert_values(column, raws)):
        assert_same_result(got, (pa.array(values, column.arrow), specials), raws)
    assert_paths_agree(column, raws)


# The canonical text of every type with a fast path, and the values it stands for.
CANONICAL: list[tuple[str, int, list[str]]] = [
    ("bool", -1, ["t", "f"]),
    ("int2", -1, ["-32768", "0", "32767"]),
    ("int4", -1, ["-2147483648", "42"]),
    ("int8", -1, ["-9223372036854775808", "9223372036854775807"]),
    ("oid", -1, ["0", "4294967295"]),
    # (float4's largest value and its subnormals are sent one by one, by design.)
    ("float4", -1, ["1.5", "-0", "NaN", "-Infinity", "3.4028233e+38", "1.1754944e-38"]),
    ("float8", -1, ["0.1", "-0", "NaN", "Infinity", "5e-324", "1.7976931348623157e+308"]),
    ("numeric", -1, ["0", "-0.5", "123.450"]),
    ("numeric", _typmod(10, 2), ["0.00", "-0.50", "12345678.90"]),
    ("text", -1, ["", "é ☃", "{a,b}"]),
    ("varchar", -1, ["x"]),
    ("bpchar", -1, ["x  "]),
    ("uuid", -1, ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]),
    ("bytea", -1, ["\\x", "\\x00ff"]),
    (
        "jsonb",
        -1,
        ['{"n": 324565, "ok": true, "tag": "amber"}', "[]", "null", '{"a": [1, 2.5e-3]}'],
    ),
    ("date", -1, ["0001-01-01", "2024-02-29", "9999-12-31"]),
    ("timestamp", -1, ["2024-02-29 13:45:30.123456", "0001-01-01 00:00:00"]),
    ("timestamptz", -1, ["2024-02-29 13:45:30.5+00", "2024-02-29 13:45:30+05:30"]),
    ("int2[]", -1, ["{}", "{1,-2}"]),
    ("int4[]", -1, ["{}", "{1,-2}"]),
    ("int8[]", -1, ["{9223372036854775807}"]),
    ("text[]", -1, ["{}", '{a,"b c","",NULL}']),
    ("varchar[]", -1, ['{"NULL",é}']),
]


@pytest.mark.parametrize(
    ("name", "typmod", "texts"), CANONICAL, ids=[f"{c[0]}-{i}" for i, c in enumerate(CANONICAL)]
)
def test_canonical_text_never_goes_one_by_one(
    name: str, typmod: int, texts: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A column of canonical text (and NULLs) is converted in bulk: the reference path is
    never called, and the result is still the reference result."""
    column = column_type(_oid(name), typmod)
    raws: list[RawValue] = [*texts, None] * 50
    expected = convert_values(column, raws)

    def refuse(column: ColumnType, raws: Sequence[RawValue]) -> tuple[Arrow, Specials]:
        raise AssertionError(f"{name}: {sorted(set(map(repr, raws)))} went one by one")

    monkeypatch.setattr(convert_module, "convert_values", refuse)
    assert_same_result(convert_column(column, raws), expected, texts)
    assert_same_result(convert_column(column, pa.array(raws, pa.string())), expected, texts)


def test_a_few_odd_values_are_merged_into_the_bulk_result() -> None:
    """Odd values among many canonical ones are converted one by one and put back in
    their rows, with their specials at their own row numbers."""
    column = column_type(_oid("date"))
    raws: list[RawValue] = ["2024-01-02"] * 10
    raws[3], raws[7], raws[8] = "infinity", "2024-1-3", None
    array, specials = convert_column(column, raws)
    expected: list[D | None] = [D(2024, 1, 2)] * 10
    expected[3], expected[7], expected[8] = None, D(2024, 1, 3), None
    assert array.to_pylist() == expected
    assert specials == [(3, "infinity")]


Convert = Callable[[ColumnType, list[RawValue]], tuple[Arrow, Specials]]


@pytest.mark.parametrize("convert", [convert_column, convert_values])
def test_empty_columns(convert: Convert) -> None:
    for name in ("int4", "text", "timestamptz", "int4[]", "numeric"):
        column = column_type(_oid(name))
        array, specials = convert(column, [])
        assert (array.type, len(array), specials) == (column.arrow, 0, [])
