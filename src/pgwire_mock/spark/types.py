"""PostgreSQL column types as Arrow and Spark types, and codec values as Arrow values.

Every column of a pgoutput Relation gets one :class:`ColumnType`: the Arrow type its
values are built in, and a ``convert`` function from the raw TupleData value (``str``
in text format, ``bytes`` in binary format) to a value ``pyarrow.array`` accepts.
Spark types follow from the Arrow types (:func:`to_spark_type`).

The one rule for values a Spark type cannot hold (``NaN`` in a ``DECIMAL`` column,
``infinity`` or a BC date in a ``DATE`` / ``TIMESTAMP`` column, a 2-D array in a
column declared 1-D, an array with lower bounds other than 1, a user type sent in
binary): the column is NULL and the row's ``_special`` map holds the value's exact
PostgreSQL text under the column's name. Nothing is clamped and nothing is NULL
without a trace. See docs/spark.md for the whole table.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Final

import pyarrow as pa
from pyspark.sql import types as st
from pyspark.sql.types import DataType

from codec.errors import DecodeError
from codec.values import (
    TYPES,
    Interval,
    decode_binary,
    decode_text,
    encode_text,
    type_by_name,
)

__all__ = [
    "INTERVAL_ARROW",
    "MAX_DECIMAL_PRECISION",
    "ColumnType",
    "Unrepresentable",
    "column_type",
    "numeric_precision_scale",
    "to_spark_type",
]

MAX_DECIMAL_PRECISION: Final = 38
"""Spark's (and Arrow decimal128's) widest DECIMAL."""

INTERVAL_ARROW: Final = pa.struct(
    [
        pa.field("months", pa.int32()),
        pa.field("days", pa.int32()),
        pa.field("microseconds", pa.int64()),
    ]
)
"""interval keeps PostgreSQL's three fields: a month is not a fixed number of days, so
neither CalendarInterval (no Arrow form) nor DayTimeInterval (no months) is lossless."""


class Unrepresentable(Exception):  # noqa: N818 - a signal, not an error users see
    """Raised by a value converter: the Spark type cannot hold this value."""


_ToArrow = Callable[[object], object]

# OIDs of src/include/catalog/pg_type.dat, for the types with special handling.
_BOOL, _BYTEA, _INT8, _INT2, _INT4, _OID = 16, 17, 20, 21, 23, 26
_FLOAT4, _FLOAT8, _NUMERIC = 700, 701, 1700
_DATE, _TIME, _TIMESTAMP, _TIMESTAMPTZ, _INTERVAL, _TIMETZ = 1082, 1083, 1114, 1184, 1186, 1266
_UUID = 2950
PG_EPOCH_US: Final = 946_684_800_000_000
"""PostgreSQL's epoch, 2000-01-01 00:00:00 UTC, in Unix microseconds."""


def numeric_precision_scale(type_modifier: int) -> tuple[int, int] | None:
    """(precision, scale) of ``numeric(p, s)``, or None when unconstrained.

    numeric's typmod is ``((p << 16) | s) + VARHDRSZ``, with the scale an 11-bit signed
    field since PostgreSQL 15 (which allows negative scales); see utils/adt/numeric.c,
    ``make_numeric_typmod``.
    """
    if type_modifier < 4:
        return None
    packed = type_modifier - 4
    precision = (packed >> 16) & 0xFFFF
    scale = ((packed & 0x7FF) ^ 1024) - 1024
    return precision, scale


def _identity(value: object) -> object:
    return value


def _decimal(value: object) -> object:
    if not isinstance(value, Decimal) or not value.is_finite():
        raise Unrepresentable
    return value


def _date(value: object) -> object:
    # datetime is a date subclass but never comes from the date decoder.
    if type(value) is not dt.date:
        raise Unrepresentable  # infinity, -infinity, PgDate (BC or after 9999)
    return value


def _timestamp(value: object) -> object:
    if not isinstance(value, dt.datetime):
        raise Unrepresentable  # infinity, -infinity, PgTimestamp
    return value


def _interval(value: object) -> object:
    if not isinstance(value, Interval):
        raise Unrepresentable  # PostgreSQL 17's interval infinity
    return {"months": value.months, "days": value.days, "microseconds": value.microseconds}


def _uuid(value: object) -> object:
    if not isinstance(value, uuid.UUID):  # pragma: no cover - the decoder's contract
        raise Unrepresentable
    return str(value)


def _scalar(oid: int, type_modifier: int) -> tuple[pa.DataType, _ToArrow] | None:
    """Arrow type and converter of a built-in scalar type that is not a plain string;
    None for the types carried as their PostgreSQL text."""
    simple: dict[int, tuple[pa.DataType, _ToArrow]] = {
        _BOOL: (pa.bool_(), _identity),
        _INT2: (pa.int16(), _identity),
        _INT4: (pa.int32(), _identity),
        _INT8: (pa.int64(), _identity),
        _OID: (pa.int64(), _identity),  # unsigned 32-bit: does not fit Spark's INT
        _FLOAT4: (pa.float32(), _identity),
        _FLOAT8: (pa.float64(), _identity),
        _BYTEA: (pa.binary(), _identity),
        _DATE: (pa.date32(), _date),
        _TIMESTAMP: (pa.timestamp("us"), _timestamp),
        _TIMESTAMPTZ: (pa.timestamp("us", tz="UTC"), _timestamp),
        _INTERVAL: (INTERVAL_ARROW, _interval),
        _UUID: (pa.string(), _uuid),
    }
    if oid in simple:
        return simple[oid]
    if oid == _NUMERIC:
        ps = numeric_precision_scale(type_modifier)
        if ps is not None and 0 <= ps[1] <= ps[0] <= MAX_DECIMAL_PRECISION:
            return pa.decimal128(ps[0], ps[1]), _decimal
    return None


@dataclass(frozen=True, slots=True)
class ColumnType:
    """How one column's values become Arrow values.

    ``oid`` is the type the values are decoded as: the column's own type, or for a
    domain over a built-in type (which pgoutput's Type message names) that built-in
    type. ``known`` is False for user types the codec cannot decode (enums,
    composites, ranges...): their text form is kept as a string.
    """

    pg_oid: int
    pg_name: str
    oid: int
    known: bool
    arrow: pa.DataType
    array_dims: int
    _to_arrow: _ToArrow

    def convert(self, raw: str | bytes) -> tuple[object, str | None]:
        """(Arrow value, None), or (None, PostgreSQL text) when Spark cannot hold it."""
        if not self.known:
            if isinstance(raw, str):
                return raw, None
            # Binary form of a type we know nothing about: no text to show but the bytes.
            return None, "\\x" + raw.hex()
        try:
            if isinstance(raw, str):
                value = decode_text(self.oid, raw)
            else:
                value = decode_binary(self.oid, raw)
        except DecodeError:
            if isinstance(raw, str):
                return None, raw
            return None, "\\x" + raw.hex()
        try:
            return self._to_arrow(value), None
        except Unrepresentable:
            return None, raw if isinstance(raw, str) else encode_text(self.oid, value)


def _pg_text_scalar(oid: int) -> _ToArrow:
    """Converter to the PostgreSQL text of a value kept as a string (time, inet...)."""

    def convert(value: object) -> object:
        # The text family, json/jsonb and macaddr decode to their text already.
        return value if isinstance(value, str) else encode_text(oid, value)

    return convert


def _nested(element: _ToArrow, dims: int) -> _ToArrow:
    def convert(value: object, depth: int = dims) -> object:
        if value is None:
            return None
        if depth == 0:
            if isinstance(value, list):
                raise Unrepresentable  # more dimensions than declared
            return element(value)
        if not isinstance(value, list):
            raise Unrepresentable  # fewer dimensions than declared, or a BoundedArray
        return [convert(item, depth - 1) for item in value]

    return convert


def _builtin(oid: int, type_modifier: int, dims: int) -> tuple[pa.DataType, _ToArrow]:
    info = TYPES[oid]
    if info.is_array:
        element_oid = info.element_oid
        # An array column's typmod is its elements' (numeric(10,2)[]).
        found = _scalar(element_oid, type_modifier)
        element_arrow, element_conv = found or (pa.string(), _pg_text_scalar(element_oid))
        arrow: pa.DataType = element_arrow
        for _ in range(dims):
            arrow = pa.list_(arrow)
        return arrow, _nested(element_conv, dims)
    found = _scalar(oid, type_modifier)
    if found is not None:
        return found
    return pa.string(), _pg_text_scalar(oid)


def column_type(
    type_oid: int,
    type_modifier: int = -1,
    *,
    user_types: Mapping[int, tuple[str, str]] | None = None,
    overrides: Mapping[str, str] | None = None,
    array_dims: int = 1,
) -> ColumnType:
    """The :class:`ColumnType` of a Relation column.

    ``user_types`` maps the OIDs of pgoutput Type messages to (namespace, name); a
    domain's Type message names its base type in ``pg_catalog`` (namespace ``""``), so a
    domain over a built-in type is decoded as that type. ``overrides`` maps a type name
    (``"public.mood"`` or ``"mood"``) to a built-in type name to decode it as, e.g.
    ``{"mood": "text"}`` for an enum sent in binary (enum_send sends the label).
    ``array_dims`` is the number of dimensions an array column is declared to have:
    PostgreSQL does not enforce or send it.
    """
    name = TYPES[type_oid].name if type_oid in TYPES else f"oid:{type_oid}"
    oid: int | None = type_oid if type_oid in TYPES else None
    if oid is None and user_types and type_oid in user_types:
        namespace, type_name = user_types[type_oid]
        name = f"{namespace}.{type_name}" if namespace else type_name
        wanted = None
        if overrides:
            wanted = overrides.get(name, overrides.get(type_name))
        if wanted is not None:
            oid = type_by_name(wanted).oid
        elif namespace in ("", "pg_catalog"):
            try:
                oid = type_by_name(type_name).oid
            except KeyError:
                oid = None
    if oid is None:
        return ColumnType(type_oid, name, type_oid, False, pa.string(), 0, _identity)
    arrow, convert = _builtin(oid, type_modifier, max(array_dims, 1))
    dims = max(array_dims, 1) if TYPES[oid].is_array else 0
    return ColumnType(type_oid, name, oid, True, arrow, dims, convert)


def to_spark_type(arrow: pa.DataType) -> DataType:
    """The Spark type Spark's Arrow conversion pairs with ``arrow``."""
    simple: list[tuple[Callable[[pa.DataType], bool], Callable[[], DataType]]] = [
        (pa.types.is_boolean, st.BooleanType),
        (pa.types.is_int16, st.ShortType),
        (pa.types.is_int32, st.IntegerType),
        (pa.types.is_int64, st.LongType),
        (pa.types.is_float32, st.FloatType),
        (pa.types.is_float64, st.DoubleType),
        (pa.types.is_string, st.StringType),
        (pa.types.is_binary, st.BinaryType),
        (pa.types.is_date32, st.DateType),
    ]
    for test, make in simple:
        if test(arrow):
            return make()
    if pa.types.is_decimal(arrow):
        return st.DecimalType(arrow.precision, arrow.scale)
    if pa.types.is_timestamp(arrow):
        return st.TimestampType() if arrow.tz else st.TimestampNTZType()
    if pa.types.is_list(arrow):
        return st.ArrayType(to_spark_type(arrow.value_type), containsNull=True)
    if pa.types.is_map(arrow):
        return st.MapType(to_spark_type(arrow.key_type), to_spark_type(arrow.item_type), True)
    if pa.types.is_struct(arrow):
        return st.StructType(
            [st.StructField(f.name, to_spark_type(f.type), f.nullable) for f in arrow]
        )
    raise TypeError(f"no Spark type for Arrow type {arrow}")
