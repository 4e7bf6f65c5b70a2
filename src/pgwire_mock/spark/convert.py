"""Column-at-a-time conversion of raw TupleData values to Arrow arrays.

Converting value by value (:meth:`ColumnType.convert`: the codec's typinput, then the
Arrow value) costs microseconds per value in CPython. Most columns of a real stream are
in PostgreSQL's canonical text form, which Arrow's C++ kernels can check and parse in
bulk: this module does that where it gives the same answer.

For each fast type, a strict pattern (RE2, run by Arrow) accepts only the canonical
text PostgreSQL's output function writes; the matching values go through one Arrow cast
(which checks ranges and calendars and raises if anything is off); values that do not
match (``infinity``, ``NaN``, BC dates, quoted array elements, other DateStyles...) are
converted one by one by :meth:`ColumnType.convert` and merged in. A cast that raises
sends the whole column down the one-by-one path. So the fast path changes speed, never
results: ``tests/spark/test_convert.py`` checks both paths agree on Hypothesis values of
every type.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias, cast

import pyarrow as pa
import pyarrow.compute as pc

from codec.values import TYPES
from pgwire_mock.spark.types import MAX_DECIMAL_PRECISION, ColumnType

__all__ = ["RawValue", "Specials", "convert_column", "convert_values"]

RawValue = str | bytes | None
"""A TupleData value as the codec decodes it: text, binary, or NULL (unchanged TOAST
values are passed as None)."""

Specials = list[tuple[int, str]]
"""(row index, exact PostgreSQL text) of each value the column's Arrow type cannot hold."""

_Array: TypeAlias = "pa.Array[Any]"

# OIDs of src/include/catalog/pg_type.dat.
_BOOL, _BYTEA, _INT8, _INT2, _INT4, _TEXT, _OID = 16, 17, 20, 21, 23, 25, 26
_FLOAT4, _FLOAT8, _BPCHAR, _VARCHAR = 700, 701, 1042, 1043
_DATE, _TIMESTAMP, _TIMESTAMPTZ, _NUMERIC, _UUID = 1082, 1114, 1184, 1700, 2950
_JSON, _JSONB = 114, 3802

_FLT_MAX: Final = 3.4028234663852886e38
_FLT_MIN_NORMAL: Final = 1.1754943508222875e-38

# Canonical output forms (what the output functions of utils/adt write in DateStyle ISO).
_YEAR: Final = r"(000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})"  # no year 0, no BC
_DATE_RE: Final = _YEAR + r"-[0-9]{2}-[0-9]{2}"
_TIME_RE: Final = r"[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?"
_INT_RE: Final = r"-?[0-9]{1,19}"
# JSON nested at most two deep, in RFC 8259's grammar (what the codec's check, Python's
# json with NaN and Infinity refused, accepts); deeper documents go one by one.
_JSON_WS: Final = r"[ \t\n\r]*"
_JSON_STRING: Final = r'"([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"'
_JSON_NUMBER: Final = r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"
# jsonb keeps a number as numeric, which overflows past 131072 digits before the point or
# 16383 after it (the codec refuses those): with at most 100 digits before, 99 after and
# an exponent below 1000, every number this pattern takes fits; longer ones go one by one.
_JSONB_NUMBER: Final = r"-?(0|[1-9][0-9]{0,99})(\.[0-9]{1,99})?([eE][+-]?[0-9]{1,3})?"


def _json_scalar(number: str) -> str:
    return f"({_JSON_STRING}|{number}|true|false|null)"


def _json_container(value: str) -> str:
    w = _JSON_WS
    member = f"{_JSON_STRING}{w}:{w}{value}"
    return (
        rf"(\{{{w}({member}{w}(,{w}{member}{w})*)?\}}"
        rf"|\[{w}({value}{w}(,{w}{value}{w})*)?\])"
    )


def _json_document(number: str) -> str:
    scalar = _json_scalar(number)
    return (
        f"^{_JSON_WS}({scalar}|"
        + _json_container(f"({scalar}|{_json_container(scalar)})")
        + f"){_JSON_WS}$"
    )


_JSON_DOCUMENT: Final = _json_document(_JSON_NUMBER)
_JSONB_DOCUMENT: Final = _json_document(_JSONB_NUMBER)

# PostgreSQL quotes an array element that is empty, is NULL in any case, or holds a
# quote, backslash, brace, comma or white space (array_out): unquoted ones have none.
_BARE_ELEMENT: Final = r'[^"{}\\, \t\n\r\x0b\f\x00]+'


@dataclass(frozen=True, slots=True)
class _FastPath:
    """``pattern``: the values that may be cast; ``cast``: the matching values (others
    NULL) to the column's Arrow array, or an ArrowInvalid to give up; ``reject``: an
    optional second look at the result, True where the value must go one by one."""

    pattern: str
    cast: Callable[[pa.StringArray], _Array]
    reject: Callable[[pa.StringArray, _Array], _Array] | None = None


def _cast_to(arrow: pa.DataType) -> Callable[[pa.StringArray], _Array]:
    def cast_strings(strings: pa.StringArray) -> _Array:
        return pc.cast(strings, arrow)

    return cast_strings


def _identity(strings: pa.StringArray) -> _Array:
    return strings


def _bool(strings: pa.StringArray) -> _Array:
    return pc.equal(strings, pa.scalar("t"))


def _oid(strings: pa.StringArray) -> _Array:
    return pc.cast(pc.cast(strings, pa.uint32()), pa.int64())


def _bytea(strings: pa.StringArray) -> _Array:
    return pa.array(
        [None if s is None else bytes.fromhex(s[2:]) for s in strings.to_pylist()], pa.binary()
    )


_ZERO_RE: Final = r"^-?[0.]+(e[+-]?[0-9]+)?$"


def _float_reject(strings: pa.StringArray, values: _Array) -> _Array:
    # float8in: a non-zero input that overflows or underflows to zero is an error.
    infinite = pc.and_(pc.is_inf(values), pc.invert(pc.match_substring(strings, "Infinity")))
    underflow = pc.and_(
        pc.equal(values, pa.scalar(0.0)), pc.invert(pc.match_substring_regex(strings, _ZERO_RE))
    )
    return pc.or_(infinite, underflow)


def _float4_reject(strings: pa.StringArray, values: _Array) -> _Array:
    # float4in: also out of range once narrowed to float4; a non-zero magnitude below
    # float4's smallest normal is narrowed by the codec and by Arrow alike but sent one
    # by one, so a double rounding in the subnormal range can never differ.
    doubles = pc.cast(strings, pa.float64())
    magnitude = pc.abs(doubles)
    out_of_range = pc.and_(
        pc.is_finite(doubles),
        pc.or_(
            pc.greater(magnitude, pa.scalar(_FLT_MAX)),
            pc.and_(
                pc.less(magnitude, pa.scalar(_FLT_MIN_NORMAL)),
                pc.greater(magnitude, pa.scalar(0.0)),
            ),
        ),
    )
    return pc.or_(_float_reject(strings, doubles), out_of_range)


# timestamptz_in accepts offsets under 16 hours (MAX_TZDISP_HOUR); Python's datetime, so
# the codec, holds years 1-9999 only, which an offset can carry a value out of.
_OFFSET_RE: Final = r"[+-](0[0-9]|1[0-5])(:[0-5][0-9])?"
_TIMESTAMPTZ_MIN: Final = pa.scalar(-62135596800000000, pa.timestamp("us", tz="UTC"))
_TIMESTAMPTZ_MAX: Final = pa.scalar(253402300799999999, pa.timestamp("us", tz="UTC"))


def _timestamptz_reject(strings: pa.StringArray, values: _Array) -> _Array:
    return pc.or_(pc.less(values, _TIMESTAMPTZ_MIN), pc.greater(values, _TIMESTAMPTZ_MAX))


# numeric_in: at most 16383 digits after the point and 131072 before it (RE2 counts
# only to 1000); a value that long is rare, and goes one by one.
_NUMERIC_MAX_FAST: Final = 16383


def _numeric_reject(strings: pa.StringArray, values: _Array) -> _Array:
    return pc.greater(pc.binary_length(strings), pa.scalar(_NUMERIC_MAX_FAST))


def _decimal_reject(strings: pa.StringArray, values: _Array) -> _Array:
    # Arrow reads a decimal string into 128 bits without an overflow check: more than
    # 38 digits may wrap around ("340282366920938463463374607431768211457", 2**128 + 1,
    # casts to 1). No numeric(p, s) value has more; such strings go one by one.
    digits = pc.count_substring_regex(strings, "[0-9]")
    return pc.greater(digits, pa.scalar(MAX_DECIMAL_PRECISION, digits.type))


def _float4(strings: pa.StringArray) -> _Array:
    return pc.cast(pc.cast(strings, pa.float64()), pa.float32())


def _int_list(element: pa.DataType) -> Callable[[pa.StringArray], _Array]:
    def cast_lists(strings: pa.StringArray) -> _Array:
        return _split_list(strings, lambda flat: pc.cast(flat, element))

    return cast_lists


# A quoted element without commas or backslashes: splitting at commas cannot cut it.
_QUOTED_ELEMENT: Final = r'"[^",\\\x00]*"'


def _text_list(flat: _Array) -> _Array:
    # Quotes come off; an unquoted NULL, in any case, is a NULL element (array_in).
    quoted = pc.starts_with(flat, '"')
    is_null = pc.and_(pc.invert(quoted), pc.equal(pc.utf8_upper(flat), pa.scalar("NULL")))
    text = pc.if_else(quoted, pc.utf8_slice_codeunits(flat, 1, -1), flat)
    return cast(_Array, pc.if_else(is_null, pa.scalar(None, pa.string()), text))


def _split_list(strings: pa.StringArray, elements: Callable[[_Array], _Array]) -> _Array:
    """``{a,b,c}`` (one dimension, bare elements) to a list array."""
    inner = pc.utf8_slice_codeunits(strings, 1, -1)
    empty = cast(pa.BooleanArray, pc.fill_null(pc.equal(inner, pa.scalar("")), pa.scalar(False)))
    parts = pc.split_pattern(inner, ",")
    lengths = pc.if_else(
        empty, 0, pc.fill_null(pc.list_value_length(parts), pa.scalar(0, pa.int32()))
    )
    flat = cast(_Array, pc.list_flatten(pc.if_else(empty, pa.scalar(None, parts.type), parts)))
    offsets = pa.concat_arrays(
        [pa.array([0], pa.int32()), pc.cast(pc.cumulative_sum(lengths), pa.int32())]
    )
    return pa.ListArray.from_arrays(offsets, elements(flat), mask=pc.is_null(strings))


def _fast_path(column: ColumnType) -> _FastPath | None:
    """The bulk conversion of ``column``'s text values, if it has one."""
    if not column.known:
        return None
    oid, arrow = column.oid, column.arrow
    info = TYPES[oid]
    if info.is_array:
        if column.array_dims != 1:
            return None
        element = info.element_oid
        if element in (_INT2, _INT4, _INT8):
            body = _INT_RE
            return _FastPath(
                rf"^\{{({body}(,{body})*)?\}}$",
                _int_list(cast("pa.ListType[Any]", arrow).value_type),
            )
        if element in (_TEXT, _VARCHAR):
            body = f"({_BARE_ELEMENT}|{_QUOTED_ELEMENT})"
            return _FastPath(rf"^\{{({body}(,{body})*)?\}}$", lambda s: _split_list(s, _text_list))
        return None
    simple: dict[int, _FastPath] = {
        _BOOL: _FastPath(r"^[tf]$", _bool),
        _INT2: _FastPath(rf"^{_INT_RE}$", _cast_to(arrow)),
        _INT4: _FastPath(rf"^{_INT_RE}$", _cast_to(arrow)),
        _INT8: _FastPath(rf"^{_INT_RE}$", _cast_to(arrow)),
        _OID: _FastPath(r"^[0-9]{1,10}$", _oid),
        _FLOAT8: _FastPath(
            r"^(-?([0-9]+(\.[0-9]+)?(e[+-][0-9]+)?|Infinity)|NaN)$",
            _cast_to(pa.float64()),
            _float_reject,
        ),
        _FLOAT4: _FastPath(
            r"^(-?([0-9]+(\.[0-9]+)?(e[+-][0-9]+)?|Infinity)|NaN)$", _float4, _float4_reject
        ),
        _TEXT: _FastPath(r"^[^\x00]*$", _identity),
        _VARCHAR: _FastPath(r"^[^\x00]*$", _identity),
        _BPCHAR: _FastPath(r"^[^\x00]*$", _identity),
        _JSON: _FastPath(_JSON_DOCUMENT, _identity),
        _JSONB: _FastPath(_JSONB_DOCUMENT, _identity),
        _UUID: _FastPath(
            r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", _identity
        ),
        _BYTEA: _FastPath(r"^\\x([0-9a-f][0-9a-f])*$", _bytea),
        _DATE: _FastPath(rf"^{_DATE_RE}$", _cast_to(arrow)),
        _TIMESTAMP: _FastPath(rf"^{_DATE_RE} {_TIME_RE}$", _cast_to(arrow)),
        _TIMESTAMPTZ: _FastPath(
            rf"^{_DATE_RE} {_TIME_RE}{_OFFSET_RE}$", _cast_to(arrow), _timestamptz_reject
        ),
    }
    if oid == _NUMERIC:
        # numeric_out: no leading zeros, no "-0"; a decimal(p, s) column is cast (which
        # checks the precision), an unconstrained one keeps the text.
        canonical = r"^((0|-?[1-9][0-9]*)(\.[0-9]+)?|-0\.[0-9]*[1-9][0-9]*)$"
        if pa.types.is_decimal(arrow):
            return _FastPath(canonical, _cast_to(arrow), _decimal_reject)
        return _FastPath(canonical, _identity, _numeric_reject)
    return simple.get(oid)


# By what the choice depends on; ColumnType itself holds a converter closure.
_FAST_PATHS: dict[tuple[int, pa.DataType, int, bool], _FastPath | None] = {}


def convert_values(column: ColumnType, raws: Sequence[RawValue]) -> tuple[_Array, Specials]:
    """One value at a time, through :meth:`ColumnType.convert` (the reference path)."""
    values: list[object] = []
    specials: Specials = []
    for index, raw in enumerate(raws):
        if raw is None:
            values.append(None)
            continue
        value, text = column.convert(raw)
        values.append(value)
        if text is not None:
            specials.append((index, text))
    try:
        return pa.array(values, column.arrow), specials
    except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeEncodeError):
        return _one_by_one(column, raws, values, specials)


def _one_by_one(
    column: ColumnType, raws: Sequence[RawValue], values: list[object], specials: Specials
) -> tuple[_Array, Specials]:
    # Some value the converter accepted does not fit the Arrow type (more fraction
    # digits than a numeric(p, s) scale, text that is not UTF-8...): that value is NULL
    # and its text goes to _special, like any other value Spark cannot hold.
    kept: list[object] = []
    for index, value in enumerate(values):
        try:
            pa.array([value], column.arrow)
            kept.append(value)
        except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeEncodeError):
            raw = raws[index]
            text = raw.hex() if isinstance(raw, bytes) else raw
            assert text is not None
            specials.append((index, text.encode("utf-8", "backslashreplace").decode()))
            kept.append(None)
    specials.sort()
    return pa.array(kept, column.arrow), specials


def convert_column(
    column: ColumnType, raws: Sequence[RawValue] | pa.StringArray
) -> tuple[_Array, Specials]:
    """``raws`` (a list of raw values, or the text values as an Arrow string array) as
    one Arrow array of ``column.arrow``, and the specials; the same result as
    :func:`convert_values`, faster for canonical text values."""
    key = (column.oid, column.arrow, column.array_dims, column.known)
    try:
        fast = _FAST_PATHS[key]
    except KeyError:
        fast = _FAST_PATHS[key] = _fast_path(column)
    if isinstance(raws, pa.StringArray):
        if fast is None:
            return convert_values(column, raws.to_pylist())
        return _convert_strings(column, fast, raws)
    # Binary values go one by one (pyarrow would take UTF-8-valid bytes as text).
    if fast is None or not raws or bytes in set(map(type, raws)):
        return convert_values(column, raws)
    try:
        strings = pa.array(raws, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeEncodeError):
        return convert_values(column, raws)  # text that is not UTF-8
    return _convert_strings(column, fast, strings)


def _convert_strings(
    column: ColumnType, fast: _FastPath, raws: pa.StringArray
) -> tuple[_Array, Specials]:
    ok = cast(
        pa.BooleanArray, pc.fill_null(pc.match_substring_regex(raws, fast.pattern), pa.scalar(True))
    )
    strings = raws
    if not pc.all(ok).as_py():
        strings = pc.if_else(ok, raws, pa.scalar(None, pa.string()))
    try:
        result = fast.cast(strings)
        if fast.reject is not None:
            rejected = cast(
                pa.BooleanArray, pc.fill_null(fast.reject(strings, result), pa.scalar(False))
            )
            ok = pc.and_(ok, pc.invert(rejected))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return convert_values(column, raws.to_pylist())
    if pc.all(ok).as_py():
        return result, []
    slow = pc.indices_nonzero(pc.invert(ok))
    if len(slow) * 2 > len(raws):
        return convert_values(column, raws.to_pylist())
    rows = cast(list[int], slow.to_pylist())
    replaced, specials = convert_values(column, pc.take(raws, slow).to_pylist())
    # Row i takes replaced[k] where rows[k] == i; the other rows keep the cast value.
    where: list[int | None] = [None] * len(raws)
    for k, i in enumerate(rows):
        where[i] = k
    merged = pc.if_else(ok, result, pc.take(replaced, pa.array(where, pa.int64())))
    return merged, [(rows[k], text) for k, text in specials]
