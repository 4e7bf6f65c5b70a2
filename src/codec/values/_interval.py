"""interval: months, days and microseconds kept apart, as PostgreSQL keeps them; its
postgres-style text (EncodeInterval / DecodeInterval in src/backend/utils/adt/datetime.c)
and binary form, and PostgreSQL 17's infinities. Field parsing limits are shared with
the other date/time types (:mod:`codec.values._time`).
"""

from __future__ import annotations

import re
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from fractions import Fraction
from itertools import repeat
from typing import ClassVar, Final

from codec.errors import EncodeError
from codec.values._common import PG_SPACE, Converter, Invalid, check_exact, type_error
from codec.values._time import (
    _SPECIALS,
    INFINITY,
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    INTERVAL_WORKBUF,
    NEG_INFINITY,
    USECS_PER_DAY,
    USECS_PER_HOUR,
    USECS_PER_MINUTE,
    USECS_PER_SEC,
    PgInfinity,
    _frac,
    _fraction_us,
    check_datetime_fields,
)

INTERVAL: Final = struct.Struct("!qii")  # time, day, month: the order interval_send uses


@dataclass(frozen=True, slots=True)
class Interval:
    """A PostgreSQL interval: months, days and microseconds kept apart, as PostgreSQL
    does, because a month is not a fixed number of days nor a day (across a DST change)
    a fixed number of hours. ``str()`` gives the IntervalStyle ``postgres`` text.
    """

    months: int = 0
    days: int = 0
    microseconds: int = 0

    ZERO: ClassVar[Interval]

    def __str__(self) -> str:
        return _interval_text(self)

    @classmethod
    def from_timedelta(cls, delta: timedelta) -> Interval:
        """``days`` and the rest of ``delta`` in microseconds (never months)."""
        return cls(0, delta.days, delta.seconds * USECS_PER_SEC + delta.microseconds)


Interval.ZERO = Interval()


def intervals(months: list[int], days: list[int], microseconds: list[int]) -> list[object]:
    """``Interval(m, d, us)`` for each triple, built by C-level passes: the instances
    are made empty and their three slots filled through the slot descriptors, which a
    frozen dataclass leaves alone (its ``__init__`` costs 1 us per instance). Interval
    has no ``__post_init__``; tests check the results equal constructed ones."""
    return fill_intervals(blank_intervals(len(months)), months, days, microseconds)


def blank_intervals(count: int) -> list[object]:
    """``count`` Interval instances with their slots unset, for fill_intervals() only.

    Making them runs a garbage collection every 700, and every tenth goes through all
    the lists made since: a caller that makes them before its large temporary lists
    (the texts cut apart) saves most of that (4.5 against 12.5 ms for 35,000)."""
    return list(map(object.__new__, repeat(Interval, count)))


def fill_intervals(
    made: list[object], months: Iterable[int], days: Iterable[int], microseconds: Iterable[int]
) -> list[object]:
    """Fill the instances of blank_intervals() with each triple, and return them."""
    for field, column in ((_MONTHS, months), (_DAYS, days), (_MICROSECONDS, microseconds)):
        deque(map(field.__set__, made, column), 0)
    return made


_MONTHS: Final = Interval.__dict__["months"]
_DAYS: Final = Interval.__dict__["days"]
_MICROSECONDS: Final = Interval.__dict__["microseconds"]


def _tdiv(a: int, b: int) -> tuple[int, int]:
    """C's truncating division and remainder, which interval2itm() relies on."""
    q = abs(a) // b
    q = -q if a < 0 else q
    return q, a - q * b


def _interval_text(value: Interval) -> str:
    # EncodeInterval() with INTSTYLE_POSTGRES in src/backend/utils/adt/datetime.c.
    if (value.months, value.days, value.microseconds) == (INT32_MAX, INT32_MAX, INT64_MAX):
        return "infinity"
    if (value.months, value.days, value.microseconds) == (INT32_MIN, INT32_MIN, INT64_MIN):
        return "-infinity"
    year, mon = _tdiv(value.months, 12)
    parts: list[str] = []
    is_before = False
    for amount, unit in ((year, "year"), (mon, "mon"), (value.days, "day")):
        if amount:
            # Each non-zero field makes the next one print an explicit "+" if the field
            # before it was negative ("-1 days +02:00:00").
            plus = "+" if is_before and amount > 0 else ""
            parts.append(f"{plus}{amount} {unit}{'' if amount == 1 else 's'}")
            is_before = amount < 0
    hour, rest = _tdiv(value.microseconds, USECS_PER_HOUR)
    minute, rest = _tdiv(rest, USECS_PER_MINUTE)
    sec, fsec = _tdiv(rest, USECS_PER_SEC)
    if not parts or value.microseconds:
        minus = value.microseconds < 0
        sign = "-" if minus else ("+" if is_before else "")
        parts.append(f"{sign}{abs(hour):02d}:{abs(minute):02d}:{abs(sec):02d}{_frac(abs(fsec))}")
    return " ".join(parts)


# DecodeInterval() refuses a field given twice: each unit sets its bit in a mask
# (DTK_M() in src/include/utils/datetime.h), a clock time sets hour, minute and all
# second bits, seconds with a non-zero fraction all second bits. "1 week 1 day" and
# "1 second 1 ms" are distinct fields; "1 day 1 d" and "1 hour 12:00" are not.
_SECOND_BIT: Final = 0x200
_ALL_SECOND_BITS: Final = _SECOND_BIT | 0x400 | 0x800
_CLOCK_BITS: Final = 0x80 | 0x100 | _ALL_SECOND_BITS
_DAY_BIT: Final = 0x40
_INTERVAL_UNITS: Final = {
    **dict.fromkeys(("millennium", "millennia", "mil", "mils"), ("m", 12000, 0x1)),
    **dict.fromkeys(("century", "centuries", "cent", "c"), ("m", 1200, 0x2)),
    **dict.fromkeys(("decade", "decades", "dec", "decs"), ("m", 120, 0x4)),
    **dict.fromkeys(("year", "years", "yr", "yrs", "y"), ("m", 12, 0x8)),
    **dict.fromkeys(("month", "months", "mon", "mons"), ("mon", 1, 0x10)),
    **dict.fromkeys(("week", "weeks", "w"), ("d", 7, 0x20)),
    **dict.fromkeys(("day", "days", "d"), ("d", 1, _DAY_BIT)),
    **dict.fromkeys(("hour", "hours", "hr", "hrs", "h"), ("us", USECS_PER_HOUR, 0x80)),
    **dict.fromkeys(("minute", "minutes", "min", "mins", "m"), ("us", USECS_PER_MINUTE, 0x100)),
    **dict.fromkeys(("second", "seconds", "sec", "secs", "s"), ("us", USECS_PER_SEC, _SECOND_BIT)),
    **dict.fromkeys(("millisecond", "milliseconds", "msec", "msecs", "ms"), ("us", 1000, 0x400)),
    **dict.fromkeys(("microsecond", "microseconds", "usec", "usecs", "us"), ("us", 1, 0x800)),
}
_INTERVAL_TOKEN: Final = re.compile(
    r"[ \t\n\r\v\f]*+(?:"
    r"([+-]?)([0-9]++):([0-9]++)(?::([0-9]++)(?:\.([0-9]*+))?)?"  # [-]HH:MM[:SS[.f]]
    r"|([+-]?(?:[0-9]++(?:\.[0-9]*+)?|\.[0-9]++))[ \t\n\r\v\f]*+([a-z]*+)"  # number [unit]
    r"|(ago))",
    re.IGNORECASE,
)


def _interval_in(text: str) -> Interval | PgInfinity:
    """The postgres / postgres_verbose forms: ``[@] n unit ... [[+-]HH:MM[:SS]] [ago]``.

    The ISO 8601 (``P1Y2M``) and SQL-standard (``1-2 3 4:05:06``) input forms are not
    supported and raise.
    """
    check_datetime_fields(text, INTERVAL_WORKBUF)
    stripped = text.strip(PG_SPACE)
    word = stripped.lower()
    if word in _SPECIALS:
        return _SPECIALS[word]
    body = stripped[1:] if stripped.startswith("@") else stripped
    months = days = 0
    us = Fraction(0)
    pos, end, seen, ago = 0, len(body), False, False
    pending_days: str | None = None
    fields = 0  # DecodeInterval()'s fmask: the fields given so far

    def field(bits: int, at: int) -> None:
        nonlocal fields
        if fields & bits:
            raise Invalid(at, f"an interval field is given twice in {text[:60]!r}")
        fields |= bits

    while pos < end:
        match = _INTERVAL_TOKEN.match(body, pos)
        if match is None or match.end() == pos or ago:
            raise Invalid(pos, f"expected an interval like '1 day 02:03:04', found {text[:60]!r}")
        start, pos = pos, match.end()
        seen = True
        sign, hh, mm, ss, frac, number, unit, ago_word = match.groups()
        if ago_word:
            ago = True
        elif hh is not None:
            field(_CLOCK_BITS, start)
            clock = (
                int(hh) * USECS_PER_HOUR
                + int(mm) * USECS_PER_MINUTE
                + int(ss or 0) * USECS_PER_SEC
                + _fraction_us(frac)
            )
            us += -clock if sign == "-" else clock
            if pending_days is not None:
                field(_DAY_BIT, start)
                days += int(Fraction(pending_days))
                pending_days = None
        elif not unit:
            # A bare number is seconds, unless a clock time follows (then it is days).
            if pending_days is not None:
                raise Invalid(pos, f"two unit-less numbers in {text[:60]!r}")
            pending_days = number
        else:
            unit_info = _INTERVAL_UNITS.get(unit.lower())
            if unit_info is None:
                raise Invalid(pos, f"unknown interval unit {unit!r}")
            if pending_days is not None:
                # DecodeInterval() reads right to left: a bare number takes the unit of
                # the next field, so "1 2 ms" gives milliseconds twice.
                raise Invalid(start, f"an interval field is given twice in {text[:60]!r}")
            kind, scale, bit = unit_info
            amount = Fraction(number) * scale
            field(_ALL_SECOND_BITS if bit == _SECOND_BIT and amount % scale else bit, start)
            if kind == "m":
                months += round(amount)  # AdjustFractYears(): rint(fval * 12)
            elif kind == "mon":
                whole = int(amount)
                months += whole
                extra = (amount - whole) * 30  # AdjustFractDays(): 30-day months
                days += int(extra)
                us += (extra - int(extra)) * USECS_PER_DAY
            elif kind == "d":
                whole = int(amount)
                days += whole
                us += (amount - whole) * USECS_PER_DAY
            else:
                us += amount
    if pending_days is not None:
        seconds = Fraction(pending_days)
        field(_ALL_SECOND_BITS if seconds.denominator > 1 else _SECOND_BIT, 0)
        if len(pending_days) > 30:
            raise Invalid(0, f"interval out of range: {text[:60]!r}")
        us += Fraction(pending_days) * USECS_PER_SEC
    if not seen:
        raise Invalid(0, f"expected an interval, found {text[:60]!r}")
    micro = round(us)
    if ago:
        months, days, micro = -months, -days, -micro
    if not (
        INT32_MIN <= months <= INT32_MAX
        and INT32_MIN <= days <= INT32_MAX
        and INT64_MIN <= micro <= INT64_MAX
    ):
        raise Invalid(0, f"interval out of range: {text[:60]!r}")
    value = Interval(months, days, micro)
    if value == _INTERVAL_INF:
        return INFINITY
    return NEG_INFINITY if value == _INTERVAL_NINF else value


_INTERVAL_INF: Final = Interval(INT32_MAX, INT32_MAX, INT64_MAX)
_INTERVAL_NINF: Final = Interval(INT32_MIN, INT32_MIN, INT64_MIN)


def _interval_value(value: object) -> Interval:
    if isinstance(value, Interval):
        if not (
            INT32_MIN <= value.months <= INT32_MAX
            and INT32_MIN <= value.days <= INT32_MAX
            and INT64_MIN <= value.microseconds <= INT64_MAX
        ):
            raise EncodeError(f"interval field out of range: {value!r}")
        return value
    if isinstance(value, timedelta):
        return Interval.from_timedelta(value)
    if value is INFINITY:
        return _INTERVAL_INF
    if value is NEG_INFINITY:
        return _INTERVAL_NINF
    raise type_error("interval", value, "Interval, timedelta, INFINITY or NEG_INFINITY")


def _interval_recv(data: bytes) -> Interval | PgInfinity:
    if len(data) != 16:
        check_exact(data, 16)
    us, days, months = INTERVAL.unpack(data)
    value = Interval(months, days, us)
    # PostgreSQL 17 spells interval infinities as all three fields at their extreme.
    if value == _INTERVAL_INF:
        return INFINITY
    if value == _INTERVAL_NINF:
        return NEG_INFINITY
    return value


def _interval_send(value: object) -> bytes:
    v = _interval_value(value)
    return INTERVAL.pack(v.microseconds, v.days, v.months)


INTERVAL_CONV: Final = Converter(
    1186,
    "interval",
    1187,
    "Interval",
    _interval_in,
    lambda v: _interval_text(_interval_value(v)),
    _interval_recv,
    _interval_send,
)

CONVERTERS: Final = (INTERVAL_CONV,)
