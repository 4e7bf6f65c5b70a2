"""Hypothesis strategies for PostgreSQL values, for your own property tests.

Every value :func:`values_for` draws is one :mod:`codec.values` can encode, and decodes
back to an equal value (compare floats with NaN in mind)::

    from hypothesis import given
    from codec.strategies.values import type_oids, values_for
    from codec.values import decode_binary, encode_binary

    @given(st.data())
    def test_my_sink_keeps_values(data):
        oid = data.draw(type_oids())
        value = data.draw(values_for(oid))
        assert my_sink(oid, encode_binary(oid, value)) == value

Edge cases are drawn on purpose: NaN and the infinities, the ends of every integer range,
BC and year-10000+ dates, ``24:00:00``, ``infinity`` timestamps, empty arrays, arrays
with NULLs, multi-dimensional arrays and arrays with lower bounds other than 1.
Needs the ``hypothesis`` extra.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable
from datetime import UTC, date, timedelta, timezone
from decimal import Decimal
from typing import Final

from hypothesis import strategies as st

from codec.values import (
    INFINITY,
    NEG_INFINITY,
    TYPES,
    BoundedArray,
    EndOfDay,
    Interval,
    PgDate,
    PgTimestamp,
    ScaledDecimal,
)

__all__ = [
    "array_values",
    "cidrs",
    "inets",
    "intervals",
    "numerics",
    "pg_dates",
    "pg_times",
    "pg_timestamps",
    "type_oids",
    "values_for",
]

_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)
_EPOCH_ORDINAL: Final = date(2000, 1, 1).toordinal()
_DAY_US: Final = 86_400_000_000
# PostgreSQL's ranges and Python's, as days / microseconds since 2000-01-01.
_PG_DAY_MIN, _PG_DAY_END = -2451545, 2147483494 - 2451545
_PY_DAY_MIN = date.min.toordinal() - _EPOCH_ORDINAL
_PY_DAY_MAX = date.max.toordinal() - _EPOCH_ORDINAL
_PG_US_MIN, _PG_US_END = _PG_DAY_MIN * _DAY_US, 9223371331200000000


def type_oids() -> st.SearchStrategy[int]:
    """Every OID :mod:`codec.values` converts, scalar and array types alike."""
    return st.sampled_from(sorted(TYPES))


def _text() -> st.SearchStrategy[str]:
    # Any Unicode except NUL (no PostgreSQL text holds it) and lone surrogates (not UTF-8).
    return st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\0"))


@st.composite
def numerics(draw: st.DrawFn) -> Decimal:
    """numeric values: NaN, +-Infinity, finite values with display scale 0-30, and
    ScaledDecimals (a display scale past the digits held, as decode_binary gives them)."""
    special = draw(st.sampled_from([None, None, None, "NaN", "Infinity", "-Infinity"]))
    if special is not None:
        return Decimal(special)
    if draw(st.integers(0, 7)) == 0:
        exponent = draw(st.integers(-60, 200))
        held = Decimal(draw(st.integers(-(10**12), 10**12))).scaleb(exponent)
        return ScaledDecimal(held, draw(st.integers(max(0, -exponent), 300)))
    coefficient = draw(st.integers(-(10**40), 10**40))
    scale = draw(st.integers(0, 30))
    return Decimal(f"{coefficient}E-{scale}")


@st.composite
def pg_dates(draw: st.DrawFn) -> object:
    """dates, including ``INFINITY``/``NEG_INFINITY`` and BC / after-9999 ``PgDate``."""
    kind = draw(st.sampled_from(["py", "py", "py", "inf", "low", "high"]))
    if kind == "py":
        return draw(st.dates())
    if kind == "inf":
        return draw(st.sampled_from([INFINITY, NEG_INFINITY]))
    if kind == "low":
        return PgDate(draw(st.integers(_PG_DAY_MIN, _PY_DAY_MIN - 1)))
    return PgDate(draw(st.integers(_PY_DAY_MAX + 1, _PG_DAY_END - 1)))


@st.composite
def pg_timestamps(draw: st.DrawFn, tz: bool) -> object:
    """timestamp (naive) or timestamptz (UTC) values, with infinities and PgTimestamp."""
    kind = draw(st.sampled_from(["py", "py", "py", "inf", "low", "high"]))
    if kind == "py":
        return draw(st.datetimes(timezones=st.just(UTC) if tz else st.none()))
    if kind == "inf":
        return draw(st.sampled_from([INFINITY, NEG_INFINITY]))
    if kind == "low":
        return PgTimestamp(draw(st.integers(_PG_US_MIN, _PY_DAY_MIN * _DAY_US - 1)))
    return PgTimestamp(draw(st.integers((_PY_DAY_MAX + 1) * _DAY_US, _PG_US_END - 1)))


@st.composite
def pg_times(draw: st.DrawFn, tz: bool) -> object:
    """time or timetz values; timetz offsets under 16 h, with seconds; and ``24:00:00``."""
    offset = None
    if tz:
        offset = timedelta(seconds=draw(st.integers(-57599, 57599)))
    if draw(st.integers(0, 9)) == 0:
        return EndOfDay(offset)
    value = draw(st.times())
    return value.replace(tzinfo=None if offset is None else timezone(offset))


@st.composite
def intervals(draw: st.DrawFn) -> object:
    """Intervals with any int32 months/days and int64 microseconds, and the infinities."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from([INFINITY, NEG_INFINITY]))
    months = draw(st.integers(*_INT32))
    days = draw(st.integers(*_INT32))
    micro = draw(st.integers(*_INT64))
    value = Interval(months, days, micro)
    extremes = (
        Interval(_INT32[1], _INT32[1], _INT64[1]),
        Interval(_INT32[0], _INT32[0], _INT64[0]),
    )
    return Interval.ZERO if value in extremes else value


@st.composite
def inets(draw: st.DrawFn) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    """inet values: an address and any prefix length."""
    addr = draw(st.ip_addresses())
    bits = draw(st.integers(0, addr.max_prefixlen))
    return ipaddress.ip_interface((addr, bits))


@st.composite
def cidrs(draw: st.DrawFn) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """cidr values: networks with no host bits set."""
    iface = draw(inets())
    return iface.network


def _json_text() -> st.SearchStrategy[str]:
    scalars = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | _text()
    )
    documents = st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text(), inner, max_size=4),
        max_leaves=10,
    )
    return documents.map(lambda doc: json.dumps(doc, ensure_ascii=False))


_SCALARS: Final[dict[int, Callable[[], st.SearchStrategy[object]]]] = {
    16: st.booleans,
    21: lambda: st.integers(-(1 << 15), (1 << 15) - 1),
    23: lambda: st.integers(*_INT32),
    20: lambda: st.integers(*_INT64),
    26: lambda: st.integers(0, (1 << 32) - 1),
    700: lambda: st.floats(width=32),
    701: st.floats,
    1700: numerics,
    25: _text,
    1043: _text,
    1042: _text,
    19: lambda: _text().filter(lambda s: len(s.encode()) < 64),
    18: lambda: st.just("") | st.characters(min_codepoint=1, max_codepoint=255),
    17: st.binary,
    1082: pg_dates,
    1083: lambda: pg_times(False),
    1266: lambda: pg_times(True),
    1114: lambda: pg_timestamps(False),
    1184: lambda: pg_timestamps(True),
    1186: intervals,
    2950: st.uuids,
    114: _json_text,
    3802: _json_text,
    869: inets,
    650: cidrs,
    829: lambda: st.binary(min_size=6, max_size=6).map(lambda b: b.hex(":")),
}


@st.composite
def array_values(draw: st.DrawFn, elements: st.SearchStrategy[object]) -> object:
    """Arrays of ``elements``: empty, 1-3 dimensions of 1-3 items, NULLs (``None``), and
    sometimes a :class:`~codec.values.BoundedArray` with lower bounds other than 1."""
    ndim = draw(st.integers(0, 3))
    if ndim == 0:
        return []
    shape = draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim))
    total = 1
    for size in shape:
        total *= size
    items: list[object] = draw(st.lists(st.none() | elements, min_size=total, max_size=total))
    for size in reversed(shape[1:]):
        items = [items[i : i + size] for i in range(0, len(items), size)]
    if draw(st.booleans()):
        return items
    bounds = draw(st.lists(st.integers(-1000, 1000), min_size=ndim, max_size=ndim))
    if all(b == 1 for b in bounds):
        return items
    return BoundedArray(tuple(bounds), items)


def values_for(oid: int) -> st.SearchStrategy[object]:
    """Python values of the type ``oid`` that :mod:`codec.values` encodes and decodes
    back unchanged. Raises ``KeyError`` for an OID outside :data:`codec.values.TYPES`."""
    info = TYPES[oid]
    if info.element_oid:
        return array_values(_SCALARS[info.element_oid]())
    return _SCALARS[oid]()
