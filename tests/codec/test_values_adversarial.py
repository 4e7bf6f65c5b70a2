"""decode_text on long hostile input: the work grows linearly for every type, and the
length and field limits PostgreSQL's input functions enforce are enforced at the same
places (the same inputs are checked against real servers in
test_values_limits_postgres.py)."""

from __future__ import annotations

import contextlib
import importlib
import re
import struct
import sys
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import pytest
from adversarial_values import MAKERS

import codec.values
from codec.errors import DecodeError
from codec.values import (
    TYPES,
    Interval,
    ScaledDecimal,
    decode_binary,
    decode_text,
    encode_binary,
    encode_text,
    type_by_name,
)

ALL_OIDS = sorted(TYPES)
# The regex parser and its opcodes (stdlib, private; typeshed has no stubs for them).
sre_parser: Any = importlib.import_module("re._parser")
sre_constants: Any = importlib.import_module("re._constants")
VALUES_DIR = str(Path(codec.values.__file__).resolve().parent)

# Sizes for the scaling test. Work is counted, not timed, so the figures are exact and
# the bound can be tight: linear work grows as the text does (16x, or a little more
# where a maker rounds the small input down to whole units), plus a fixed cost; the
# quadratic float parsing this replaced grew 256x, the cubic timestamp parsing 4096x.
SMALL = 256
NUMERIC, NUMERIC_ARRAY = 1700, 1231
NUMERIC_HEAD = struct.Struct("!hhHH")  # ndigits, weight, sign, dscale
LARGE = 16 * SMALL
SLACK = 1.1
FIXED_WORK = 200

Result = TypeVar("Result")


def _linear(small_text: str, small: int, large_text: str, large: int) -> bool:
    growth = len(large_text) / max(1, len(small_text))
    return large <= SLACK * growth * small + FIXED_WORK


def _work(
    oid: int,
    text: Any,
    decode: Callable[[int, Any], object] = decode_text,
    *,
    also: str | None = None,
) -> int:
    """Python-level work inside codec.values (and the file ``also``, if given) to decode
    ``text`` (with ``decode``), as traced() counts it. DecodeError counts as done; any
    other exception fails the test (the contract)."""

    def run() -> None:
        with contextlib.suppress(DecodeError):
            decode(oid, text)

    return traced(run, lambda name: name.startswith(VALUES_DIR) or name == also)[0]


def traced(call: Callable[[], Result], counted: Callable[[str], bool]) -> tuple[int, Result]:
    """Every call and line event of the frames of the files ``counted`` accepts while
    ``call()`` runs, counted with sys.settrace (deterministic, unlike a clock), and what
    it returned."""
    count = 0

    def local(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal count
        count += 1
        return local

    def calls(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal count
        if counted(frame.f_code.co_filename):
            count += 1
            return local
        return None

    previous = sys.gettrace()
    sys.settrace(calls)
    try:
        result = call()
    finally:
        sys.settrace(previous)
    return count, result


@pytest.mark.parametrize("oid", ALL_OIDS, ids=[TYPES[o].name for o in ALL_OIDS])
def test_work_grows_linearly_on_hostile_input(oid: int) -> None:
    """For every hostile input family, 16x the input costs at most 1.1 x 16x the
    Python-level work in the codec, plus a fixed amount: no parser re-scans what it has read, and
    nothing but DecodeError escapes. The regular expressions the codec hands the rest
    of the work to are held to linear time by the next test."""
    failures = []
    for name, make in MAKERS.items():
        small_text, large_text = make(SMALL), make(LARGE)
        small, large = _work(oid, small_text), _work(oid, large_text)
        if not _linear(small_text, small, large_text, large):
            failures.append(
                f"{name}: {small} -> {large} steps for {len(small_text)} -> {len(large_text)}"
            )
    assert not failures, failures


def _patterns() -> Iterator[tuple[str, re.Pattern[str]]]:
    """Every compiled pattern held by a codec.values module, directly, as a bound
    method (``_X = re.compile(...).search``) or inside a tuple or dict."""
    for module_name, module in sorted(sys.modules.items()):
        if not module_name.startswith("codec.values."):
            continue
        for name, value in vars(module).items():
            found = [value, getattr(value, "__self__", None)]
            if isinstance(value, tuple):
                found.extend(value)
            if isinstance(value, dict):
                found.extend(value.values())
            for item in found:
                if isinstance(item, re.Pattern):
                    yield f"{module_name}.{name}", item


def _backtracking_repeats(pattern: re.Pattern[str]) -> list[str]:
    """Repeats that may give characters back: unbounded, neither possessive nor
    inside an atomic group. Nested or adjacent ones are what made matching
    quadratic or cubic; possessive ones end each run one way."""
    found: list[str] = []
    c = sre_constants

    def walk(items: Any, atomic: bool) -> None:
        for op, arg in items:
            if op in (c.MAX_REPEAT, c.MIN_REPEAT):
                low, high, sub = arg
                if high == c.MAXREPEAT and not atomic:
                    found.append(f"{op} {{{low},}}")
                walk(sub, atomic)
            elif op == c.POSSESSIVE_REPEAT:
                walk(arg[2], True)
            elif op == c.ATOMIC_GROUP:
                walk(arg, True)
            elif op == c.SUBPATTERN:
                walk(arg[3], atomic)
            elif op == c.BRANCH:
                for branch in arg[1]:
                    walk(branch, atomic)
            elif op in (c.ASSERT, c.ASSERT_NOT):
                walk(arg[1], atomic)

    walk(sre_parser.parse(pattern.pattern, pattern.flags), False)
    return found


def test_regular_expressions_cannot_backtrack() -> None:
    """Every unbounded repeat in codec.values' regular expressions is possessive (or
    atomic). The regex engine's steps are invisible to the work count above, and
    greedy runs that could split the same spaces or digits several ways were exactly
    the cubic timestamp and quadratic float parsing of issue #14."""
    patterns = list(_patterns())
    assert len(patterns) > 10  # the walk finds them at all
    offenders = {
        name: found for name, pattern in patterns if (found := _backtracking_repeats(pattern))
    }
    assert not offenders, offenders


def _rejected(type_name: str, text: str) -> DecodeError:
    with pytest.raises(DecodeError) as info:
        decode_text(type_by_name(type_name).oid, text)
    return info.value


# --------------------------------------------------------------------------- date/time

# (type, longest accepted text, the same one character longer): ParseDateTime's work
# buffer holds the fields plus a NUL each, MAXDATELEN + 1 bytes for date and time,
# MAXDATELEN + MAXDATEFIELDS for the timestamps and 256 for interval.
BUFFER_EDGES = [
    ("timestamp", "2000-01-01 12:00:00." + "0" * 132, "2000-01-01 12:00:00." + "0" * 133),
    ("timestamptz", "2000-01-01 12:00:00." + "0" * 132, "2000-01-01 12:00:00." + "0" * 133),
    ("timestamp", "0" * 136 + "2000-01-01 12:00", "0" * 137 + "2000-01-01 12:00"),
    ("date", "0" * 118 + "2000-01-01", "0" * 119 + "2000-01-01"),
    ("time", "12:00:00." + "0" * 119, "12:00:00." + "0" * 120),
    ("timetz", "12:00:00." + "0" * 119, "12:00:00." + "0" * 120),
    ("interval", "0" * 250 + " days", "0" * 251 + " days"),
    ("interval", "1 day 12:00:00." + "0" * 240, "1 day 12:00:00." + "0" * 241),
]


@pytest.mark.parametrize(("type_name", "longest", "too_long"), BUFFER_EDGES)
def test_date_time_fields_fill_postgres_buffer_exactly(
    type_name: str, longest: str, too_long: str
) -> None:
    """Fields that just fit PostgreSQL's work buffer decode; one more character is
    "invalid input syntax", as ParseDateTime() returns DTERR_BAD_FORMAT."""
    decode_text(type_by_name(type_name).oid, longest)
    error = _rejected(type_name, too_long)
    assert "buffer" in error.reason


# Twelve distinct units and "ago": 25 fields, MAXDATEFIELDS.
INTERVAL_25_FIELDS = (
    "1 millennium 1 century 1 decade 1 year 1 mon 1 week 1 day 1 hour 1 minute 1 second"
    " 1 millisecond 1 microsecond ago"
)


def test_interval_takes_twenty_five_fields_and_no_more() -> None:
    """MAXDATEFIELDS (25) fields decode; a 26th is invalid input syntax, however short,
    where a 600 KB interval of repeated fields used to be summed for seconds."""
    assert decode_text(1186, INTERVAL_25_FIELDS) == Interval(-13333, -8, -3661001001)
    error = _rejected("interval", INTERVAL_25_FIELDS + " 1")
    assert "more than 25 fields" in error.reason
    assert error.offset == len(INTERVAL_25_FIELDS) + 1
    assert "more than 25 fields" in _rejected("interval", "1 day " * 100_000).reason


@pytest.mark.parametrize(
    ("type_name", "text"),
    [
        ("timestamp", "2000-01-01 12:00:00"),
        ("timestamptz", "2000-01-01 12:00:00+02"),
        ("date", "2000-01-01"),
        ("time", "12:00:00"),
        ("timetz", "12:00:00+02"),
        ("interval", "1 day"),
    ],
)
def test_whitespace_between_fields_is_unlimited(type_name: str, text: str) -> None:
    """Whitespace is not copied into the work buffer, so a valid value padded with a
    megabyte of spaces is still valid (PostgreSQL accepts it too)."""
    oid = type_by_name(type_name).oid
    padding = " " * (1 << 20)
    assert decode_text(oid, padding + text + padding) == decode_text(oid, text)


def test_leading_zeros_in_a_year_are_not_an_overflow() -> None:
    """'0000000002000-01-01' is 2000-01-01 (the year's leading zeros count toward the
    buffer, not toward the year)."""
    assert decode_text(1082, "0" * 9 + "2000-01-01") == decode_text(1082, "2000-01-01")


# --------------------------------------------------------------------------- numbers


@pytest.mark.parametrize(
    ("type_name", "text", "expected"),
    [
        ("int4", " " * 100_000 + "42" + " " * 100_000, 42),
        ("int2", "-" + "0" * 1000 + "7", -7),
        ("int8", "0" * 100_000 + "9223372036854775807", 9223372036854775807),
        ("oid", " " * 1000 + "0" * 1000 + "4294967295", 4294967295),
    ],
)
def test_integers_of_any_length_decode_when_the_value_fits(
    type_name: str, text: str, expected: int
) -> None:
    """pg_strtoint* skip any amount of whitespace and leading zeros; only the value's
    range counts (these were refused as longer than 200 characters)."""
    assert decode_text(type_by_name(type_name).oid, text) == expected


def test_long_integers_that_do_not_fit_are_out_of_range_not_slow() -> None:
    """A megabyte of digits is 'out of range', found without converting it."""
    error = _rejected("int8", "1" * (1 << 20))
    assert "out of range" in error.reason


def test_oid_takes_no_underscores() -> None:
    """oidin() is strtoul(): '1_0' is invalid even on PostgreSQL 16+."""
    _rejected("oid", "1_0")


def test_float_digit_runs_decode_in_linear_time() -> None:
    """A 1 MB digit run followed by junk is refused, and a valid one is infinity's
    overflow error, as float8in says; 16x the digits is at most 1.1 x 16x the work."""
    for text in ("1" * SMALL + "e", "1" * SMALL, "1" * SMALL + "." + "1" * SMALL + "ex"):
        longer = text.replace("1" * SMALL, "1" * LARGE)
        assert _linear(text, _work(701, text), longer, _work(701, longer))
    assert "expected a double precision number" in _rejected("float8", "1" * (1 << 20) + "e").reason
    assert "out of range" in _rejected("float8", "1" * (1 << 20)).reason


# --------------------------------------------------------------------------- json


def test_json_integers_have_no_digit_limit() -> None:
    """json keeps numbers as text: an integer with more digits than Python's int()
    accepts (4300) is valid json and jsonb, and comes back unchanged."""
    big = "1" * 200_000
    assert decode_text(114, big) == big
    assert decode_text(3802, "[" + "1" * 5000 + "]") == "[" + "1" * 5000 + "]"


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("1" * 131072, True),
        ("1" * 131073, False),
        ("1e131071", True),
        ("1e131072", False),
        ("0." + "1" * 16383, True),
        ("0." + "1" * 16384, False),
        ("1e-16383", True),
        ("1e-16384", False),
        ("0e1073741824", False),
        ('"1e131072"', True),
    ],
)
def test_jsonb_numbers_overflow_where_numeric_does(text: str, ok: bool) -> None:
    """jsonb stores numbers as numeric: past numeric's limits it is 'value overflows
    numeric format' (json has no such limit)."""
    assert decode_text(114, text) == text
    if ok:
        assert decode_text(3802, text) == text
    else:
        assert "overflows numeric" in _rejected("jsonb", text).reason


@pytest.mark.parametrize("text", ["1e131071", "-12.5e1000", "7e165", "-0.001e170"])
def test_numeric_zeros_the_input_does_not_spell_stay_an_exponent(text: str) -> None:
    """A numeric whose zeros come from an exponent (text) or the weight (binary) is
    decoded with them as the Decimal's exponent: the same value, and the same text and
    binary form once encoded, but a few digits instead of up to 131,072 each (a 1 MB
    array of "Ne131000" held gigabytes and took a minute)."""
    value = decode_text(NUMERIC, text)
    assert value == Decimal(text)
    assert len(value.as_tuple().digits) <= len(text)
    assert decode_text(NUMERIC, encode_text(NUMERIC, value)) == value
    binary = encode_binary(NUMERIC, value)
    again = decode_binary(NUMERIC, binary)
    assert again == value
    assert len(again.as_tuple().digits) <= len(text)
    assert encode_binary(NUMERIC, again) == binary


def test_numeric_arrays_of_huge_weights_stay_small() -> None:
    """Binary elements of 10-12 bytes with weight 32767 (values of 131,069+ digits),
    each different: the decoded array is about as many digits as the input has bytes."""
    elements = [
        NUMERIC_HEAD.pack(2, 32767, 0x4000 if i % 2 else 0, 0) + struct.pack("!hh", i, 7)
        for i in range(1, 2000)
    ]
    array = struct.pack("!iiIii", 1, 0, NUMERIC, len(elements), 1) + b"".join(
        struct.pack("!i", len(e)) + e for e in elements
    )
    values = decode_binary(NUMERIC_ARRAY, array)
    assert values[:2] == [-Decimal("1.0007E+131068"), Decimal("2.0007E+131068")]
    assert sum(len(v.as_tuple().digits) for v in values) < len(array)


def _numeric_array(elements: list[bytes]) -> bytes:
    return struct.pack("!iiIii", 1, 0, NUMERIC, len(elements), 1) + b"".join(
        struct.pack("!i", len(e)) + e for e in elements
    )


@pytest.mark.parametrize(
    ("weight", "dscale", "printed"),
    [(32767, 1, 131_072), (32767, 0x3FFF, 147_454), (0, 0x3FFF, 16_386), (-1, 100, 103)],
)
def test_numeric_display_scales_the_bytes_do_not_spell_stay_unwritten(
    weight: int, dscale: int, printed: int
) -> None:
    """A binary numeric's display scale pads it with zeros its 10 bytes do not hold
    (-7 at weight 32767 and scale 1: 131,072 characters in numeric_out). Decoded, it holds its
    spelled digits and the scale beside them; encoded, every zero comes back."""
    raw = NUMERIC_HEAD.pack(1, weight, 0x4000, dscale) + struct.pack("!h", 7)
    value = decode_binary(NUMERIC, raw)
    assert isinstance(value, ScaledDecimal)
    assert value.dscale == dscale
    assert len(value.as_tuple().digits) == 1
    assert value == -7 * Decimal(10000) ** weight
    text = encode_text(NUMERIC, value)
    assert len(text) == printed
    assert text == encode_text(NUMERIC, value.expanded())
    assert value.expanded().as_tuple().exponent == -dscale
    assert encode_binary(NUMERIC, value) == raw
    assert decode_text(NUMERIC, text) == value


def test_numeric_arrays_of_huge_display_scales_stay_small() -> None:
    """2,000 distinct 10-byte elements of weight 32767 or scale 16383 decoded from an
    array: about as many digits as the array has bytes (131,069 or 16,384 each before),
    each exactly what numeric_recv gives for it alone, and encoded back to the array."""
    elements = [
        NUMERIC_HEAD.pack(1, 32767 if i % 2 else 0, 0x4000 if i % 3 else 0, 1 if i % 2 else 0x3FFF)
        + struct.pack("!h", i)
        for i in range(1, 2001)
    ]
    array = _numeric_array(elements)
    values = decode_binary(NUMERIC_ARRAY, array)
    assert sum(len(v.as_tuple().digits) for v in values) < len(array)
    singles = [decode_binary(NUMERIC, e) for e in elements]
    assert [(type(v), repr(v)) for v in values] == [(type(v), repr(v)) for v in singles]
    assert encode_binary(NUMERIC_ARRAY, values) == array


def test_scaled_decimal_is_a_decimal_that_keeps_its_scale() -> None:
    """Equal and hashed as its value, pickled and printed with its scale, immutable,
    refused when the scale cannot hold its digits; arithmetic gives plain Decimals."""
    import pickle

    value = ScaledDecimal("1.25", 100)
    assert value == Decimal("1.25") and hash(value) == hash(Decimal("1.25"))
    assert repr(value) == "ScaledDecimal('1.25', dscale=100)"
    again = pickle.loads(pickle.dumps(value))
    assert (type(again), again.dscale, again) == (ScaledDecimal, 100, value)
    assert type(value + 1) is Decimal
    with pytest.raises(AttributeError):
        value.dscale = 3  # type: ignore[misc]
    assert encode_text(NUMERIC, value) == "1.25" + "0" * 98
    for bad, dscale in [("1.25", 1), ("1", 0x4000), ("1", -1), ("NaN", 5), ("Infinity", 5)]:
        with pytest.raises(ValueError, match=r"ScaledDecimal|display scale"):
            ScaledDecimal(bad, dscale)


# --------------------------------------------------------------------------- bytea


def test_bytea_hex_takes_whitespace_between_pairs_and_points_at_errors() -> None:
    """Hex bytea is parsed in one pass: whitespace before any pair and at the end is
    skipped, and an error still names the offending character's offset."""
    assert decode_text(17, "\\x 0a\t\n1B\r") == b"\n\x1b"
    assert decode_text(17, "\\x" + "ab" * (1 << 19)) == b"\xab" * (1 << 19)
    odd = _rejected("bytea", "\\xab c")
    assert (odd.offset, odd.reason) == (6, "expected a second hex digit: odd number of digits")
    bad = _rejected("bytea", "\\xab\u00a0cd")
    assert (bad.offset, bad.reason) == (4, "expected a hex digit, found '\\xa0'")
