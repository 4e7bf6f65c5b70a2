"""decode_text on long hostile input: the work grows linearly for every type, and the
length and field limits PostgreSQL's input functions enforce are enforced at the same
places (the same inputs are checked against real servers in
test_values_limits_postgres.py)."""

from __future__ import annotations

import contextlib
import gc
import time

import pytest
from adversarial_values import MAKERS

from codec.errors import DecodeError
from codec.values import TYPES, Interval, decode_text, type_by_name

ALL_OIDS = sorted(TYPES)

# Sizes for the scaling test: linear work takes 8x as long for the larger input, the
# quadratic float parsing this replaced 64x, the cubic timestamp parsing 500x.
SMALL = 8 * 1024
LARGE = 8 * SMALL
MAX_RATIO = 20.0
# Below this the larger input is too quick to time: even a quadratic decoder this fast
# at 64 KB would finish 1 MB in 1024 * 0.1 ms / 4 = 26 ms.
FLOOR_SECONDS = 0.0001


def _best(oid: int, text: str, runs: int) -> float:
    """The shortest of ``runs`` timings of decode_text(oid, text); DecodeError counts as
    done, any other exception fails the test (the decoder's contract)."""
    best = float("inf")
    # The cyclic collector's full passes cost more the more objects are alive, which
    # makes array decoding look super-linear on a busy heap; it is not the decoder's work.
    gc.collect()
    gc.disable()
    try:
        for _ in range(runs):
            start = time.perf_counter()
            with contextlib.suppress(DecodeError):
                decode_text(oid, text)
            best = min(best, time.perf_counter() - start)
    finally:
        gc.enable()
    return best


def _ratio(oid: int, small: str, large: str) -> tuple[float, float]:
    large_time = _best(oid, large, 3)
    if large_time < FLOOR_SECONDS:
        return 0.0, large_time
    return large_time / max(_best(oid, small, 5), 1e-9), large_time


@pytest.mark.parametrize("oid", ALL_OIDS, ids=[TYPES[o].name for o in ALL_OIDS])
def test_work_grows_linearly_on_hostile_input(oid: int) -> None:
    """For every hostile input family, 8x the input costs at most 20x the time (linear
    is 8x): no backtracking parser is left, and nothing but DecodeError escapes.

    A ratio is a bound on work, not on wall-clock time: the shortest of several runs of
    each size is compared, and a ratio over the bound is measured once more before it
    counts, so a busy machine slows both sides and does not fail the test.
    """
    failures = []
    for name, make in MAKERS.items():
        small, large = make(SMALL), make(LARGE)
        ratio, large_time = _ratio(oid, small, large)
        if ratio > MAX_RATIO:
            ratio, large_time = _ratio(oid, small, large)
        if ratio > MAX_RATIO:
            failures.append(f"{name}: x{ratio:.0f} ({large_time * 1e3:.1f} ms at {LARGE})")
    assert not failures, failures


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
    overflow error, as float8in says."""
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
