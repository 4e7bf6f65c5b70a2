"""PostgreSQL types to Arrow and Spark types, and the values Spark cannot hold."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from pyspark.sql import types as st

from codec.values import INFINITY, TYPES, encode_binary, type_by_name
from pgwire_mock.spark.types import (
    INTERVAL_ARROW,
    column_type,
    numeric_precision_scale,
    to_spark_type,
)


def _oid(name: str) -> int:
    return type_by_name(name).oid


@pytest.mark.parametrize(
    ("name", "arrow", "spark"),
    [
        ("bool", pa.bool_(), st.BooleanType()),
        ("int2", pa.int16(), st.ShortType()),
        ("int4", pa.int32(), st.IntegerType()),
        ("int8", pa.int64(), st.LongType()),
        ("oid", pa.int64(), st.LongType()),
        ("float4", pa.float32(), st.FloatType()),
        ("float8", pa.float64(), st.DoubleType()),
        ("numeric", pa.string(), st.StringType()),
        ("text", pa.string(), st.StringType()),
        ("varchar", pa.string(), st.StringType()),
        ("bpchar", pa.string(), st.StringType()),
        ("name", pa.string(), st.StringType()),
        ("char", pa.string(), st.StringType()),
        ("bytea", pa.binary(), st.BinaryType()),
        ("date", pa.date32(), st.DateType()),
        ("time", pa.string(), st.StringType()),
        ("timetz", pa.string(), st.StringType()),
        ("timestamp", pa.timestamp("us"), st.TimestampNTZType()),
        ("timestamptz", pa.timestamp("us", tz="UTC"), st.TimestampType()),
        ("uuid", pa.string(), st.StringType()),
        ("json", pa.string(), st.StringType()),
        ("jsonb", pa.string(), st.StringType()),
        ("inet", pa.string(), st.StringType()),
        ("cidr", pa.string(), st.StringType()),
        ("macaddr", pa.string(), st.StringType()),
        ("int4[]", pa.list_(pa.int32()), st.ArrayType(st.IntegerType())),
        ("text[]", pa.list_(pa.string()), st.ArrayType(st.StringType())),
    ],
)
def test_builtin_types_map_to_arrow_and_spark(
    name: str, arrow: pa.DataType, spark: st.DataType
) -> None:
    """Each built-in type gets the documented Arrow type and the Spark type paired with it."""
    ct = column_type(_oid(name))
    assert ct.arrow == arrow
    assert to_spark_type(ct.arrow) == spark


def test_every_codec_type_has_a_mapping() -> None:
    """No built-in type the codec converts is left without an Arrow/Spark type."""
    for oid in TYPES:
        ct = column_type(oid)
        assert ct.known
        to_spark_type(ct.arrow)


def test_interval_is_a_struct_of_the_three_postgres_fields() -> None:
    ct = column_type(_oid("interval"))
    assert ct.arrow == INTERVAL_ARROW
    assert ct.convert("1 year 2 mons 3 days 00:00:01") == (
        {"months": 14, "days": 3, "microseconds": 1_000_000},
        None,
    )


@pytest.mark.parametrize(
    ("typmod", "expected"),
    [(-1, None), (((10 << 16) | 2) + 4, (10, 2)), (((5 << 16) | (0x7FF & -2)) + 4, (5, -2))],
)
def test_numeric_typmod(typmod: int, expected: tuple[int, int] | None) -> None:
    assert numeric_precision_scale(typmod) == expected


def test_numeric_is_decimal_only_when_declared_and_it_fits() -> None:
    """numeric(p, s) with 0 <= s <= p <= 38 is DECIMAL(p, s); anything else is its text."""
    assert column_type(1700, ((12 << 16) | 4) + 4).arrow == pa.decimal128(12, 4)
    assert column_type(1700, ((39 << 16) | 2) + 4).arrow == pa.string()
    assert column_type(1700, ((5 << 16) | (0x7FF & -2)) + 4).arrow == pa.string()
    assert column_type(1700).convert("1.50") == ("1.50", None)


def test_nan_in_a_decimal_column_is_null_with_its_text_in_special() -> None:
    ct = column_type(1700, ((10 << 16) | 2) + 4)
    assert ct.convert("12.50") == (Decimal("12.50"), None)
    assert ct.convert("NaN") == (None, "NaN")
    assert ct.convert("-Infinity") == (None, "-Infinity")


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("date", "infinity"),
        ("date", "4713-01-01 BC"),
        ("timestamp", "-infinity"),
        ("timestamptz", "infinity"),
        ("timestamp", "294276-12-31 23:59:59.999999"),
    ],
)
def test_out_of_range_times_are_null_with_their_text(name: str, text: str) -> None:
    """Nothing is clamped: the column is NULL and the exact PostgreSQL text is kept."""
    assert column_type(_oid(name)).convert(text) == (None, text)


def test_binary_special_values_keep_the_postgres_text() -> None:
    ct = column_type(_oid("timestamptz"))
    raw = encode_binary(_oid("timestamptz"), INFINITY)
    assert ct.convert(raw) == (None, "infinity")


def test_timestamps() -> None:
    value = dt.datetime(2024, 2, 29, 13, 45, 30, 123456)
    assert column_type(_oid("timestamp")).convert("2024-02-29 13:45:30.123456") == (value, None)
    tz = column_type(_oid("timestamptz")).convert("2024-02-29 13:45:30.123456+00")
    assert tz == (value.replace(tzinfo=dt.UTC), None)


def test_array_dimensions_are_declared_and_mismatches_are_special() -> None:
    """PostgreSQL does not record an array column's dimensions: 1 unless declared."""
    one = column_type(_oid("int4[]"))
    two = column_type(_oid("int4[]"), array_dims=2)
    assert two.arrow == pa.list_(pa.list_(pa.int32()))
    assert one.convert("{1,NULL,3}") == ([1, None, 3], None)
    assert one.convert("{{1,2},{3,4}}") == (None, "{{1,2},{3,4}}")
    assert two.convert("{{1,2},{NULL,4}}") == ([[1, 2], [None, 4]], None)
    assert two.convert("{}") == ([], None)
    assert one.convert("[0:1]={1,2}") == (None, "[0:1]={1,2}")


def test_array_with_an_unrepresentable_element_is_special_as_a_whole() -> None:
    ct = column_type(_oid("timestamptz[]"))
    text = '{"2024-01-01 00:00:00+00",infinity}'
    assert ct.convert(text) == (None, text)


def test_strings_hold_the_postgres_text() -> None:
    assert column_type(_oid("time")).convert("24:00:00") == ("24:00:00", None)
    assert column_type(_oid("timetz")).convert("13:45:30.5+05:30") == ("13:45:30.5+05:30", None)
    assert column_type(_oid("inet")).convert("192.168.0.1/24") == ("192.168.0.1/24", None)
    assert column_type(_oid("uuid")).convert("A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11") == (
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        None,
    )


def test_unknown_user_types() -> None:
    """Text is kept; binary of a type the codec cannot read is NULL plus its hex."""
    user = {16495: ("public", "mood")}
    ct = column_type(16495, user_types=user)
    assert not ct.known
    assert ct.arrow == pa.string()
    assert ct.convert("happy") == ("happy", None)
    assert ct.convert(b"happy") == (None, "\\x6861707079")
    overridden = column_type(16495, user_types=user, overrides={"mood": "text"})
    assert overridden.convert(b"happy") == ("happy", None)


def test_domain_over_a_builtin_decodes_as_the_builtin() -> None:
    """pgoutput's Type message for a domain names its base type in pg_catalog ("")."""
    ct = column_type(16502, user_types={16502: ("", "int4")})
    assert ct.arrow == pa.int32()
    assert ct.convert(b"\x00\x00\x00*") == (42, None)
