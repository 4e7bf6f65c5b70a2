"""Unit tests for LSNs, timestamps, input variants and error reporting."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal

import pytest

from codec.errors import DecodeError, EncodeError
from codec.values import (
    DT_NOBEGIN,
    DT_NOEND,
    INFINITY,
    LSN,
    NEG_INFINITY,
    BoundedArray,
    Interval,
    PgTimestamp,
    datetime_to_pg_timestamp,
    decode_binary,
    decode_text,
    encode_binary,
    encode_text,
    pg_timestamp_to_datetime,
    type_by_name,
)


def test_lsn_formats_like_pg_lsn() -> None:
    """LSN prints upper/lower 32 bits in uppercase hex without padding."""
    assert str(LSN(0x16B3748)) == "0/16B3748"
    assert str(LSN((1 << 64) - 1)) == "FFFFFFFF/FFFFFFFF"
    assert LSN.parse("1/a") == (1 << 32) + 10
    assert LSN("0/16b3748") == 0x16B3748


def test_lsn_is_an_int_with_lsn_arithmetic() -> None:
    """LSN + int is an LSN, LSN - LSN a plain int distance, and ordering is numeric."""
    a, b = LSN(100), LSN(40)
    assert isinstance(a + 1, LSN) and a + 1 == 101
    assert a - b == 60 and type(a - b) is int
    assert b - a == -60
    assert isinstance(a - 1, LSN)
    assert b < a and sorted([a, b]) == [b, a]
    assert {a: 1}[100] == 1


@pytest.mark.parametrize("text", ["", "0", "0/", "/0", "123456789/0", "0/g", "0/1 ", "x/y"])
def test_lsn_parse_errors_are_decode_errors(text: str) -> None:
    """Malformed LSN text raises DecodeError."""
    with pytest.raises(DecodeError):
        LSN.parse(text)


def test_lsn_range() -> None:
    """LSNs outside [0, 2**64) are refused."""
    with pytest.raises(EncodeError):
        LSN(-1)
    with pytest.raises(EncodeError):
        LSN(1 << 64)


def test_pg_timestamp_conversions() -> None:
    """int64 microseconds since 2000-01-01 UTC <-> aware datetimes, infinities as
    sentinels, and out-of-range years as PgTimestamp."""
    assert pg_timestamp_to_datetime(0) == datetime(2000, 1, 1, tzinfo=UTC)
    assert pg_timestamp_to_datetime(DT_NOEND) is INFINITY
    assert pg_timestamp_to_datetime(DT_NOBEGIN) is NEG_INFINITY
    assert datetime_to_pg_timestamp(INFINITY) == DT_NOEND
    assert (
        datetime_to_pg_timestamp(datetime(2000, 1, 1, 1, tzinfo=timezone(timedelta(hours=1)))) == 0
    )
    far = pg_timestamp_to_datetime(-(10**17))
    assert isinstance(far, PgTimestamp)
    assert datetime_to_pg_timestamp(far) == -(10**17)


@pytest.mark.parametrize(
    ("oid", "text", "expected"),
    [
        (16, " TRUE ", True),
        (16, "of", False),
        (16, "ye", True),
        (23, "  -12  ", -12),
        (23, "0x1F", 31),
        (23, "1_000", 1000),
        (26, "-1", 4294967295),
        (701, " -InFiNiTy", float("-inf")),
        (1700, "1.5e2", Decimal("150")),
        (1700, "1.23e1", Decimal("12.3")),
        (17, "\\x 00 ff", b"\x00\xff"),
        (17, "a\\\\b\\001", b"a\\b\x01"),
        (2950, "{A0EEBC999C0B4EF8BB6D6BB9BD380A11}", None),
        (829, "0800.2b01.0203", "08:00:2b:01:02:03"),
        (1082, "44-03-15 BC".rjust(13, "0"), None),
        (1184, "2024-06-01T12:00:00+05:30", datetime(2024, 6, 1, 6, 30, tzinfo=UTC)),
        (1114, "2024-06-01 12:00:00+05:30", datetime(2024, 6, 1, 12, 0)),
        (1083, "24:00", None),
        (1266, "12:00:00", time(12, tzinfo=UTC)),
        (1186, "@ 1 day 2 hours ago", Interval(0, -1, -7200000000)),
        (1186, "1.5 years", Interval(18, 0, 0)),
        (1186, "-infinity", NEG_INFINITY),
        (1007, '  { 1 , NULL ,"3" }  ', [1, None, 3]),
        (1009, '{a\\,b,"NULL",null}', ["a,b", "NULL", None]),
        (1007, "[0:1]={1,2}", BoundedArray((0,), [1, 2])),
    ],
)
def test_text_input_variants(oid: int, text: str, expected: object) -> None:
    """Input functions accept the alternative spellings PostgreSQL accepts."""
    value = decode_text(oid, text)
    if expected is not None:
        assert value == expected


@pytest.mark.parametrize(
    ("oid", "text"),
    [
        (23, "2147483648"),
        (21, "1.0"),
        (23, "١٢"),
        (700, "1e39"),
        (701, "1e-400"),
        (1700, "1e131072"),
        (17, "\\x0"),
        (17, "\\9"),
        (1082, "2023-02-29"),
        (1082, "0000-01-01"),
        (1083, "24:00:01"),
        (1186, "1 fortnight"),
        (2950, "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        (650, "10.0.0.1/8"),
        (1007, "{1,2"),
        (1007, "{{1,2},{3}}"),
        (1007, "{1,{2}}"),
        (1007, "{1,}"),
        (1007, "{1} x"),
        (1007, "[1:3]={1,2}"),
        (1007, "{{{{{{{1}}}}}}}"),
        (1009, '{"a}'),
        (3802, "{'a': 1}"),
        (3802, "NaN"),
        (25, "a\0b"),
    ],
)
def test_malformed_text_raises_decode_error(oid: int, text: str) -> None:
    """Malformed text raises DecodeError naming the type."""
    with pytest.raises(DecodeError) as info:
        decode_text(oid, text)
    assert "text value" in info.value.message_type


def test_lying_array_dimensions_do_not_allocate() -> None:
    """A binary array claiming 2**31 elements fails at once on its length check."""
    data = (
        (1).to_bytes(4, "big")
        + (0).to_bytes(4, "big")
        + (23).to_bytes(4, "big")
        + (2**31 - 1).to_bytes(4, "big")
        + (1).to_bytes(4, "big")
    )
    with pytest.raises(DecodeError) as info:
        decode_binary(1007, data)
    assert info.value.offset == 20


def test_array_element_errors_point_into_the_array() -> None:
    """An element's DecodeError names the element and its offset in the array."""
    with pytest.raises(DecodeError) as info:
        decode_text(1007, "{1,x}")
    assert info.value.offset == 3 and "element 1" in info.value.reason
    with pytest.raises(DecodeError) as info:
        decode_binary(1007, encode_binary(1007, [1, 2])[:-1])
    assert info.value.message_type == "_int4 binary value"


def test_unknown_oid() -> None:
    """Unknown OIDs raise DecodeError / EncodeError naming the OID."""
    with pytest.raises(DecodeError, match="12345"):
        decode_text(12345, "1")
    with pytest.raises(DecodeError, match="12345"):
        decode_binary(12345, b"")
    with pytest.raises(EncodeError, match="12345"):
        encode_text(12345, 1)
    with pytest.raises(EncodeError, match="12345"):
        encode_binary(12345, 1)


@pytest.mark.parametrize(
    ("oid", "value"),
    [
        (23, 2**31),
        (23, True),
        (23, "1"),
        (700, 0.1),
        (700, 1e39),
        (1700, Decimal("sNaN")),
        (1700, Decimal("1E-20000")),
        (19, "x" * 64),
        (18, "ab"),
        (1184, datetime(2000, 1, 1)),
        (1114, datetime(2000, 1, 1, tzinfo=UTC)),
        (1007, [[1], [2, 3]]),
        (1007, [[]]),
        (1007, [1, [2]]),
        (1007, BoundedArray((1, 1), [1])),
        (3802, "{bad json"),
        (25, "nul\0"),
        (829, "not a mac"),
    ],
)
def test_bad_python_values_raise_encode_error(oid: int, value: object) -> None:
    """Values the type cannot hold raise EncodeError in both formats."""
    with pytest.raises(EncodeError):
        encode_text(oid, value)
    with pytest.raises(EncodeError):
        encode_binary(oid, value)


@pytest.mark.parametrize(
    ("oid", "value", "text"),
    [
        (701, 1e15, "1e+15"),
        (701, 123456789012345.0, "123456789012345"),
        (701, 1e-5, "1e-05"),
        (701, 1.5e-7, "1.5e-07"),
        (701, 1e300, "1e+300"),
        (700, 1e6, "1e+06"),
        (700, 123456.0, "123456"),
        (1700, Decimal("-0.00"), "0.00"),
        (1700, Decimal("1E+3"), "1000"),
        (1186, Interval(0, 0, -1_000_000), "-00:00:01"),
        (1186, Interval(14, 3, 14706500000), "1 year 2 mons 3 days 04:05:06.5"),
        (1186, Interval(-1, 0, 0), "-1 mons"),
        (1186, INFINITY, "infinity"),
        (
            1184,
            datetime(2024, 1, 1, tzinfo=timezone(timedelta(hours=-8))),
            "2024-01-01 08:00:00+00",
        ),
        (1082, date(1, 1, 1), "0001-01-01"),
        (
            1266,
            time(1, tzinfo=timezone(timedelta(hours=5, minutes=30, seconds=15))),
            "01:00:00+05:30:15",
        ),
        (18, "\xe9", "\\351"),
        (869, __import__("ipaddress").ip_interface("::ffff:1.2.3.4"), "::ffff:1.2.3.4"),
        (1009, ["a b", "", "NULL", None, 'q"', "\\"], '{"a b","","NULL",NULL,"q\\"","\\\\"}'),
        (1007, [], "{}"),
        (1007, BoundedArray((0, 5), [[1, 2]]), "[0:0][5:6]={{1,2}}"),
    ],
)
def test_text_output_matches_postgresql(oid: int, value: object, text: str) -> None:
    """encode_text prints what PostgreSQL's output function prints."""
    assert encode_text(oid, value) == text


def test_type_by_name() -> None:
    """Types are found by pg_type name, SQL spelling, and with [] for arrays."""
    assert type_by_name("int4").oid == 23
    assert type_by_name("integer[]").oid == 1007
    assert type_by_name("_int4").element_oid == 23
    assert type_by_name("char").oid == 18
    assert type_by_name("timestamp with time zone").oid == 1184
    assert type_by_name("int4").array_oid == 1007
    with pytest.raises(KeyError):
        type_by_name("box")


@pytest.mark.parametrize("oid", [25, 1043, 1042, 19, 18, 17, 114, 3802, 23, 1009])
@pytest.mark.parametrize("surrogate", ["\ud800", "\udfff"])
def test_a_lone_surrogate_is_not_text(oid: int, surrogate: str) -> None:
    """A str holding a lone surrogate cannot be UTF-8, so PostgreSQL never receives it
    (it refuses the bytes as invalid UTF8, before any input function): decode_text
    raises DecodeError at the surrogate for every type, as it does for NUL in text,
    where text used to come back unchanged."""
    with pytest.raises(DecodeError) as info:
        decode_text(oid, "ab" + surrogate + "c")
    assert info.value.offset == 2
    assert (
        info.value.reason == f"expected UTF-8 text, found the lone surrogate U+{ord(surrogate):04X}"
    )


@pytest.mark.parametrize(
    ("oid", "value"), [(25, "a\ud800"), (19, "a\ud800"), (114, '"\udc80"'), (1009, ["\ud800"])]
)
def test_a_lone_surrogate_cannot_be_encoded(oid: int, value: object) -> None:
    """encode_text printed it unchanged and encode_binary raised UnicodeEncodeError;
    both refuse it with EncodeError."""
    for encode in (encode_text, encode_binary):
        with pytest.raises(EncodeError, match="lone surrogate"):
            encode(oid, value)
