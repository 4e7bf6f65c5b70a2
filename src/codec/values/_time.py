"""date, time, timetz, timestamp and timestamptz, plus the infinities (interval:
:mod:`codec.values._interval`).

PostgreSQL counts from 2000-01-01 (``POSTGRES_EPOCH_JDATE``): dates in int32 days,
timestamps and times in int64 microseconds (src/include/datatype/timestamp.h).
"""

from __future__ import annotations

import enum
import re
import struct
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, timezone
from fractions import Fraction
from typing import Final

from codec._buffer import INT32, INT64
from codec.errors import EncodeError
from codec.values._common import PG_SPACE, Converter, Invalid, check_exact, type_error

USECS_PER_SEC: Final = 1_000_000
USECS_PER_MINUTE: Final = 60 * USECS_PER_SEC
USECS_PER_HOUR: Final = 60 * USECS_PER_MINUTE
USECS_PER_DAY: Final = 24 * USECS_PER_HOUR
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

# DT_NOBEGIN / DT_NOEND and DATEVAL_NOBEGIN / DATEVAL_NOEND.
DT_NOBEGIN: Final = INT64_MIN
DT_NOEND: Final = INT64_MAX
DATEVAL_NOBEGIN: Final = INT32_MIN
DATEVAL_NOEND: Final = INT32_MAX

# The valid ranges (IS_VALID_DATE / IS_VALID_TIMESTAMP): from julian day 0
# (4714-11-24 BC) up to, not including, 5874898-01-01 for dates and 294277-01-01 for
# timestamps.
DATE_MIN: Final = -2451545
DATE_END: Final = 2147483494 - 2451545
TIMESTAMP_MIN: Final = DATE_MIN * USECS_PER_DAY
TIMESTAMP_END: Final = 9223371331200000000

_EPOCH_DATE: Final = date(2000, 1, 1)
_EPOCH_ORDINAL: Final = _EPOCH_DATE.toordinal()
_EPOCH: Final = datetime(2000, 1, 1)
_EPOCH_UTC: Final = datetime(2000, 1, 1, tzinfo=UTC)
# Python's date range, in PostgreSQL days / microseconds.
_PY_DAY_MIN: Final = date.min.toordinal() - _EPOCH_ORDINAL
_PY_DAY_MAX: Final = date.max.toordinal() - _EPOCH_ORDINAL
_PY_US_MIN: Final = _PY_DAY_MIN * USECS_PER_DAY
_PY_US_END: Final = (_PY_DAY_MAX + 1) * USECS_PER_DAY
_DAYS_PER_400Y: Final = 146097
# timetz zones are stored in seconds *west* of UTC, limited to under 16 hours
# (TZDISP_LIMIT in src/include/utils/datetime.h).
TZDISP_LIMIT: Final = 16 * 3600

TIMETZ: Final = struct.Struct("!qi")


class PgInfinity(enum.Enum):
    """PostgreSQL's ``infinity`` and ``-infinity`` for date, timestamp, timestamptz and
    (PostgreSQL 17+) interval, which no Python type can hold."""

    NEG_INFINITY = -1
    INFINITY = 1

    def __str__(self) -> str:
        return "infinity" if self is PgInfinity.INFINITY else "-infinity"


INFINITY: Final = PgInfinity.INFINITY
NEG_INFINITY: Final = PgInfinity.NEG_INFINITY


@dataclass(frozen=True, slots=True, order=True)
class PgDate:
    """A date Python's :class:`datetime.date` cannot hold (BC, or after 9999-12-31).

    ``days`` is PostgreSQL's own value: days since 2000-01-01. Only produced for dates
    outside Python's range; encoding one inside it works and decodes as a ``date``.
    """

    days: int

    @property
    def ymd(self) -> tuple[int, int, int]:
        """(year, month, day) with astronomical years: 0 is 1 BC, -1 is 2 BC."""
        return _ymd(self.days)

    def __str__(self) -> str:
        return _date_text(self.days)


@dataclass(frozen=True, slots=True, order=True)
class PgTimestamp:
    """A timestamp[tz] Python's :class:`datetime.datetime` cannot hold (BC, or after year
    9999). ``microseconds`` is PostgreSQL's value: since 2000-01-01 00:00:00 (UTC for
    timestamptz). Only produced outside Python's range."""

    microseconds: int


@dataclass(frozen=True, slots=True)
class EndOfDay:
    """``24:00:00``, a valid time and timetz that :class:`datetime.time` cannot hold.

    ``utcoffset`` is ``None`` for ``time`` and the zone's offset for ``timetz``.
    """

    utcoffset: timedelta | None = None


# --------------------------------------------------------------------------- calendar


def _ymd(days: int) -> tuple[int, int, int]:
    """Proleptic Gregorian (year, month, day) for any day count, via 400-year cycles
    (the calendar repeats every 146097 days), so BC and far-future dates work."""
    cycles, rest = divmod(days, _DAYS_PER_400Y)
    d = date.fromordinal(_EPOCH_ORDINAL + rest)
    return d.year + 400 * cycles, d.month, d.day


def _days(year: int, month: int, day: int) -> int:
    """Inverse of :func:`_ymd` (astronomical year); raises ValueError for a bad date."""
    cycles, year_in = divmod(year - 2000, 400)
    return date(2000 + year_in, month, day).toordinal() - _EPOCH_ORDINAL + cycles * _DAYS_PER_400Y


def _date_text(days: int) -> str:
    year, month, day = _ymd(days)
    if year > 0:
        return f"{year:04d}-{month:02d}-{day:02d}"
    # EncodeDateOnly(): year 0 is 1 BC.
    return f"{1 - year:04d}-{month:02d}-{day:02d} BC"


def _frac(us: int) -> str:
    """``.ffffff`` without trailing zeros, or nothing (AppendSeconds())."""
    return f".{us:06d}".rstrip("0") if us else ""


def _time_text(us: int) -> str:
    hours, us = divmod(us, USECS_PER_HOUR)
    minutes, us = divmod(us, USECS_PER_MINUTE)
    seconds, us = divmod(us, USECS_PER_SEC)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}{_frac(us)}"


def _zone_text(west: int) -> str:
    """EncodeTimezone(): +HH, then :MM and :SS only when non-zero."""
    sign = "-" if west > 0 else "+"
    east = abs(west)
    hours, rest = divmod(east, 3600)
    minutes, seconds = divmod(rest, 60)
    if seconds:
        return f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}"
    if minutes:
        return f"{sign}{hours:02d}:{minutes:02d}"
    return f"{sign}{hours:02d}"


def _timestamp_text(us: int, tz: bool) -> str:
    days, rest = divmod(us, USECS_PER_DAY)
    year, month, day = _ymd(days)
    text = f"{max(year, 1 - year):04d}-{month:02d}-{day:02d} {_time_text(rest)}"
    if tz:
        text += "+00"
    # EncodeDateTime() appends " BC" after the zone.
    return text + " BC" if year <= 0 else text


# --------------------------------------------------------------------------- parsing

# Every whitespace run is possessive (*+): with plain ones, the three runs around the
# optional zone and era split trailing spaces every possible way before failing, which
# was cubic (4 KB took 50 s). Nothing after a run can start with whitespace, so giving
# characters back could never help a match.
_DATE_RE: Final = r"([0-9]{4,}+)-([0-9]{1,2})-([0-9]{1,2})"
_TIME_RE: Final = r"([0-9]{1,2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]*+))?)?"
_ZONE_RE: Final = r"(z|utc|gmt|[+-][0-9]{1,2}(?::?[0-9]{2}(?::?[0-9]{2})?)?)"
_SP: Final = r"[ \t\n\r\v\f]*+"
_TIMESTAMP_MATCH: Final = re.compile(
    rf"{_SP}{_DATE_RE}(?:(?:[tT]|[ \t\n\r\v\f]++){_TIME_RE})?{_SP}{_ZONE_RE}?{_SP}(bc|ad)?{_SP}",
    re.IGNORECASE,
).fullmatch
_DATE_MATCH: Final = re.compile(rf"{_SP}{_DATE_RE}{_SP}(bc|ad)?{_SP}", re.IGNORECASE).fullmatch
_TIME_MATCH: Final = re.compile(rf"{_SP}{_TIME_RE}{_SP}{_ZONE_RE}?{_SP}", re.IGNORECASE).fullmatch
_SPECIALS: Final = {"infinity": INFINITY, "+infinity": INFINITY, "-infinity": NEG_INFINITY}


# ---- ParseDateTime()'s limits (src/backend/utils/adt/datetime.c)
#
# Every date/time input function first splits its text into at most MAXDATEFIELDS
# fields, copying each (lower-cased, NUL-terminated) into a fixed work buffer; running
# out of either is DTERR_BAD_FORMAT, "invalid input syntax for type ...". Whitespace
# between fields is not copied, so '2000-01-01' followed by a megabyte of spaces is
# valid, but the fields themselves cannot be long. The buffer sizes are the callers'
# (date_in, time_in, timetz_in: MAXDATELEN + 1; timestamp_in, timestamptz_in:
# MAXDATELEN + MAXDATEFIELDS; interval_in: 256), the same in PostgreSQL 14-17 and
# checked against each of them.
MAXDATELEN: Final = 128
MAXDATEFIELDS: Final = 25
DATE_WORKBUF: Final = MAXDATELEN + 1
TIMESTAMP_WORKBUF: Final = MAXDATELEN + MAXDATEFIELDS
INTERVAL_WORKBUF: Final = 256

_WS_RUN: Final = re.compile(r"[ \t\n\r\v\f]*+")
_DIGIT_RUN: Final = re.compile(r"[0-9]*+")
_ALPHA_RUN: Final = re.compile(r"[A-Za-z]*+")
_TIME_TAIL: Final = re.compile(r"[0-9:.]*+")
_ZONE_TAIL: Final = re.compile(r"[0-9:.\-]*+")
_DATE_WORD_TAIL: Final = re.compile(r"[A-Za-z0-9+\-/_.:]*+")
# ispunct() characters other than "+", "-" and ".", which start fields: skipped as
# delimiters, with any whitespace between them.
_SKIPPED_RUN: Final = re.compile(r"[!-*,/:-@\[-`{-~ \t\n\r\v\f]*+")
_DIGITS: Final = frozenset("0123456789")
_LETTERS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_SKIPPED: Final = frozenset("!\"#$%&'()*,/:;<=>?@[\\]^_`{|}~")
# datetktbl keywords that may stand right before a digit or "+": ParseDateTime ends the
# field after them ("t" in 2000-01-01T12:00, the ISO labels y m d h s j), while other
# letters followed by a digit carry on as one field, a zone name like Etc/GMT+5. Only
# "t" can be followed by a digit in input this module accepts, so for anything else a
# different split changes which error is reported, never whether there is one.
_KEYWORDS_BEFORE_DIGIT: Final = frozenset(("t", "z", "d", "h", "j", "m", "s", "y", "ad", "bc"))
_DELIMITED_DIGITS: Final = {d: re.compile(rf"[0-9{re.escape(d)}]*+") for d in "-/."}
_DELIMITED_WORDS: Final = {d: re.compile(rf"[A-Za-z0-9{re.escape(d)}]*+") for d in "-/."}


def _end(run: re.Pattern[str], text: str, pos: int) -> int:
    """Where the run of ``run`` (a pattern that also matches nothing) starting at ``pos``
    ends."""
    match = run.match(text, pos)
    return pos if match is None else match.end()


def _field_end(text: str, pos: int) -> tuple[int, int]:
    """(end, characters copied) of the ParseDateTime field starting at ``pos``, whose
    first character is neither whitespace nor skipped punctuation."""
    ch = text[pos]
    if ch in _DIGITS:
        end = _end(_DIGIT_RUN, text, pos)
        nxt = text[end : end + 1]
        if nxt == ":":  # a time: digits, ":" and "."
            end = _end(_TIME_TAIL, text, end + 1)
        elif nxt in _DELIMITED_DIGITS:  # a date; "-", "/" or "." delimit it
            after = text[end + 1 : end + 2]
            if after and after in _DIGITS:
                end = _end(_DIGIT_RUN, text, end + 1)
                if text[end : end + 1] == nxt:  # a third part needs the same delimiter
                    end = _end(_DELIMITED_DIGITS[nxt], text, end + 1)
            else:  # a month name inside the date
                end = _end(_DELIMITED_WORDS[nxt], text, end + 1)
        return end, end - pos
    if ch == ".":
        end = _end(_DIGIT_RUN, text, pos + 1)
        return end, end - pos
    if ch in _LETTERS:
        end = _end(_ALPHA_RUN, text, pos)
        nxt = text[end : end + 1]
        if nxt in ("-", "/", "."):
            is_date = True
        elif nxt == "+" or (nxt != "" and nxt in _DIGITS):
            is_date = text[pos:end].lower() not in _KEYWORDS_BEFORE_DIGIT
        else:
            is_date = False
        if is_date:  # a date with a month name, or a zone name like Etc/GMT+5
            end = _end(_DATE_WORD_TAIL, text, end)
        return end, end - pos
    if ch in ("+", "-"):
        start = _end(_WS_RUN, text, pos + 1)  # spaces after a sign are not copied
        nxt = text[start : start + 1]
        if nxt != "" and nxt in _DIGITS:
            end = _end(_ZONE_TAIL, text, start)
        elif nxt != "" and nxt in _LETTERS:
            end = _end(_ALPHA_RUN, text, start)
        else:
            raise Invalid(start, f"invalid input syntax: expected a digit or letter after {ch!r}")
        return end, 1 + end - start
    raise Invalid(pos, f"invalid input syntax: unexpected character {ch!r}")


def check_datetime_fields(text: str, workbuf: int) -> None:
    """Raise :class:`Invalid` where PostgreSQL's ParseDateTime() gives up on ``text``:
    more than MAXDATEFIELDS fields, or fields that overflow a ``workbuf``-byte buffer.

    Linear in ``len(text)``: whitespace and punctuation runs are skipped by regular
    expressions, and at most MAXDATEFIELDS fields are looked at.
    """
    n = len(text)
    pos = _end(_WS_RUN, text, 0)
    fields = used = 0
    while pos < n:
        if fields >= MAXDATEFIELDS:
            raise Invalid(pos, f"invalid input syntax: more than {MAXDATEFIELDS} fields")
        if text[pos] in _SKIPPED:
            pos = _end(_SKIPPED_RUN, text, pos)
            continue
        end, copied = _field_end(text, pos)
        # APPEND_CHAR refuses a character once it would leave no room for the NUL.
        if used + copied > workbuf - 1:
            raise Invalid(
                pos,
                f"invalid input syntax: fields longer than PostgreSQL's {workbuf}-byte buffer",
            )
        used += copied + 1
        fields += 1
        pos = _end(_WS_RUN, text, end)


def _fraction_us(digits: str | None) -> int:
    """Microseconds from fraction digits, rounding half to even past the sixth digit
    (PostgreSQL rint()s the parsed double; exact ties are the only difference)."""
    if not digits:
        return 0
    if len(digits) <= 6:
        return int(digits.ljust(6, "0"))
    return round(Fraction(int(digits), 10 ** (len(digits) - 6)))


def _zone_seconds_east(zone: str | None) -> int:
    if zone is None or zone.lower() in ("z", "utc", "gmt"):
        return 0
    sign = -1 if zone[0] == "-" else 1
    body = zone[1:].replace(":", "")
    if len(body) <= 2:
        hours, minutes, seconds = int(body), 0, 0
    elif len(body) in (3, 4):
        hours, minutes, seconds = int(body[:-2]), int(body[-2:]), 0
    else:
        hours, minutes, seconds = int(body[:-4]), int(body[-4:-2]), int(body[-2:])
    if minutes > 59 or seconds > 59 or hours > 15:
        raise Invalid(0, f"time zone displacement out of range: {zone!r}")
    return sign * (hours * 3600 + minutes * 60 + seconds)


def _clock_us(hour: str | None, minute: str | None, second: str | None, frac: str | None) -> int:
    if hour is None:
        return 0
    h, m, s = int(hour), int(minute or 0), int(second or 0)
    # Like ValidateDate/DecodeTime: 24:00:00 and leap second 60 are accepted.
    if h > 24 or m > 59 or s > 60 or (h == 24 and (m or s or (frac and frac.strip("0")))):
        raise Invalid(0, f"time field value out of range: {hour}:{minute}:{second}")
    return h * USECS_PER_HOUR + m * USECS_PER_MINUTE + s * USECS_PER_SEC + _fraction_us(frac)


def _day_number(year: str, month: str, day: str, era: str | None) -> int:
    # Leading zeros are fine ("0002000-01-01"), within ParseDateTime's buffer.
    digits = year.lstrip("0")
    y = int(digits or "0") if len(digits) < 10 else 10**10
    if era is not None and era.lower() == "bc":
        if y == 0:
            raise Invalid(0, "year 0 BC does not exist")
        y = 1 - y
    elif y == 0:
        raise Invalid(0, "date/time field value out of range: year 0")
    if y > 5874898 or y < -4714:
        raise Invalid(0, f"date out of range: year {year}")
    try:
        return _days(y, int(month), int(day))
    except ValueError as err:
        raise Invalid(0, f"date/time field value out of range: {year}-{month}-{day}") from err


def _timestamp_in(text: str, tz: bool) -> datetime | PgTimestamp | PgInfinity:
    check_datetime_fields(text, TIMESTAMP_WORKBUF)
    match = _TIMESTAMP_MATCH(text)
    if match is None:
        word = text.strip(PG_SPACE).lower()
        if word in _SPECIALS:
            return _SPECIALS[word]
        if word == "epoch":
            return _us_to_datetime(-946684800 * USECS_PER_SEC, tz)
        raise Invalid(0, f"expected an ISO timestamp like 2000-01-31 12:34:56, found {text[:60]!r}")
    year, month, day, hour, minute, second, frac, zone, era = match.groups()
    us = _day_number(year, month, day, era) * USECS_PER_DAY + _clock_us(hour, minute, second, frac)
    # A zone on a timestamp without time zone is silently ignored (documented).
    if tz:
        us -= _zone_seconds_east(zone) * USECS_PER_SEC
    if not TIMESTAMP_MIN <= us < TIMESTAMP_END:
        raise Invalid(0, f"timestamp out of range: {text.strip(PG_SPACE)[:60]!r}")
    return _us_to_datetime(us, tz)


# --------------------------------------------------------------------------- timestamps


def _us_to_datetime(us: int, tz: bool) -> datetime | PgTimestamp:
    if _PY_US_MIN <= us < _PY_US_END:
        return (_EPOCH_UTC if tz else _EPOCH) + timedelta(microseconds=us)
    return PgTimestamp(us)


def pg_timestamp_to_datetime(us: int) -> datetime | PgTimestamp | PgInfinity:
    """A PostgreSQL timestamptz (int64 microseconds since 2000-01-01 UTC) as an aware UTC
    :class:`datetime`; :data:`INFINITY` / :data:`NEG_INFINITY` for ``DT_NOEND`` /
    ``DT_NOBEGIN``, and :class:`PgTimestamp` outside Python's years 1-9999."""
    if us == DT_NOEND:
        return INFINITY
    if us == DT_NOBEGIN:
        return NEG_INFINITY
    return _us_to_datetime(us, True)


def datetime_to_pg_timestamp(dt: datetime | PgTimestamp | PgInfinity) -> int:
    """Inverse of :func:`pg_timestamp_to_datetime`.

    An aware datetime is converted to UTC. A naive one is taken as it stands, which is
    how PostgreSQL stores ``timestamp without time zone`` (and reads as UTC otherwise).
    """
    if type(dt) is datetime or isinstance(dt, datetime):
        offset = dt.utcoffset()
        delta = dt.replace(tzinfo=None) - _EPOCH
        us = (delta.days * 86400 + delta.seconds) * USECS_PER_SEC + delta.microseconds
        if offset is not None:
            us -= (offset.days * 86400 + offset.seconds) * USECS_PER_SEC + offset.microseconds
        return us
    if isinstance(dt, PgTimestamp):
        if not TIMESTAMP_MIN <= dt.microseconds < TIMESTAMP_END:
            raise EncodeError(f"timestamp out of range: {dt}")
        return dt.microseconds
    if dt is INFINITY:
        return DT_NOEND
    if dt is NEG_INFINITY:
        return DT_NOBEGIN
    raise type_error("timestamp", dt, "datetime, PgTimestamp, INFINITY or NEG_INFINITY")


def _timestamp_us(value: object, tz: bool) -> int:
    name = "timestamptz" if tz else "timestamp"
    if isinstance(value, datetime):
        if (value.utcoffset() is not None) != tz:
            raise EncodeError(
                f"{name} needs {'an aware' if tz else 'a naive'} datetime, got {value!r}"
            )
    elif not isinstance(value, (PgTimestamp, PgInfinity)):
        raise type_error(name, value, "datetime, PgTimestamp, INFINITY or NEG_INFINITY")
    return datetime_to_pg_timestamp(value)


def _make_timestamp(tz: bool) -> Converter:
    name = "timestamptz" if tz else "timestamp"
    epoch = _EPOCH_UTC if tz else _EPOCH
    unpack, pack = INT64.unpack, INT64.pack

    def decode_binary(data: bytes) -> object:
        if len(data) != 8:
            check_exact(data, 8)
        us: int = unpack(data)[0]
        if _PY_US_MIN <= us < _PY_US_END:
            return epoch + timedelta(microseconds=us)
        if us == DT_NOEND:
            return INFINITY
        if us == DT_NOBEGIN:
            return NEG_INFINITY
        if not TIMESTAMP_MIN <= us < TIMESTAMP_END:
            raise Invalid(0, f"{name} out of range: {us} microseconds")
        return PgTimestamp(us)

    def encode_binary(value: object) -> bytes:
        return pack(_timestamp_us(value, tz))

    def encode_text(value: object) -> str:
        us = _timestamp_us(value, tz)
        if us == DT_NOEND:
            return "infinity"
        if us == DT_NOBEGIN:
            return "-infinity"
        return _timestamp_text(us, tz)

    oid, array_oid = (1184, 1185) if tz else (1114, 1115)
    return Converter(
        oid,
        name,
        array_oid,
        "datetime",
        lambda text: _timestamp_in(text, tz),
        encode_text,
        decode_binary,
        encode_binary,
    )


TIMESTAMP: Final = _make_timestamp(False)
TIMESTAMPTZ: Final = _make_timestamp(True)

# --------------------------------------------------------------------------- date


def _date_days(value: object) -> int:
    if isinstance(value, date) and not isinstance(value, datetime):
        return value.toordinal() - _EPOCH_ORDINAL
    if isinstance(value, PgDate):
        if not DATE_MIN <= value.days < DATE_END:
            raise EncodeError(f"date out of range: {value}")
        return value.days
    if value is INFINITY:
        return DATEVAL_NOEND
    if value is NEG_INFINITY:
        return DATEVAL_NOBEGIN
    raise type_error("date", value, "date, PgDate, INFINITY or NEG_INFINITY")


def _days_to_date(days: int) -> date | PgDate:
    if _PY_DAY_MIN <= days <= _PY_DAY_MAX:
        return date.fromordinal(days + _EPOCH_ORDINAL)
    return PgDate(days)


def _date_in(text: str) -> date | PgDate | PgInfinity:
    check_datetime_fields(text, DATE_WORKBUF)
    match = _DATE_MATCH(text)
    if match is None:
        word = text.strip(PG_SPACE).lower()
        if word in _SPECIALS:
            return _SPECIALS[word]
        if word == "epoch":
            return date(1970, 1, 1)
        raise Invalid(0, f"expected an ISO date like 2000-01-31, found {text[:60]!r}")
    days = _day_number(*match.groups())
    if not DATE_MIN <= days < DATE_END:
        raise Invalid(0, f"date out of range: {text.strip(PG_SPACE)!r}")
    return _days_to_date(days)


def _date_out(value: object) -> str:
    days = _date_days(value)
    if days == DATEVAL_NOEND:
        return "infinity"
    if days == DATEVAL_NOBEGIN:
        return "-infinity"
    return _date_text(days)


def _date_recv(data: bytes) -> object:
    if len(data) != 4:
        check_exact(data, 4)
    days: int = INT32.unpack(data)[0]
    if _PY_DAY_MIN <= days <= _PY_DAY_MAX:
        return date.fromordinal(days + _EPOCH_ORDINAL)
    if days == DATEVAL_NOEND:
        return INFINITY
    if days == DATEVAL_NOBEGIN:
        return NEG_INFINITY
    if not DATE_MIN <= days < DATE_END:
        raise Invalid(0, f"date out of range: {days} days")
    return PgDate(days)


DATE: Final = Converter(
    1082,
    "date",
    1182,
    "datetime.date",
    _date_in,
    _date_out,
    _date_recv,
    lambda v: INT32.pack(_date_days(v)),
)

# --------------------------------------------------------------------------- time, timetz


def _time_parts(value: object, tz: bool) -> tuple[int, int]:
    """(microseconds since midnight, zone seconds west) for time/timetz values."""
    name = "timetz" if tz else "time"
    if isinstance(value, time):
        offset = value.utcoffset()
        us = (
            (value.hour * 60 + value.minute) * 60 + value.second
        ) * USECS_PER_SEC + value.microsecond
    elif isinstance(value, EndOfDay):
        offset, us = value.utcoffset, USECS_PER_DAY
    else:
        raise type_error(name, value, "datetime.time or EndOfDay")
    if (offset is not None) != tz:
        raise EncodeError(f"{name} needs {'an aware' if tz else 'a naive'} time, got {value!r}")
    if offset is None:
        return us, 0
    if offset.microseconds:
        raise EncodeError(f"timetz offsets are whole seconds, got {offset}")
    west = -(offset.days * 86400 + offset.seconds)
    if not -TZDISP_LIMIT < west < TZDISP_LIMIT:
        raise EncodeError(f"timetz offset must be under 16 hours, got {offset}")
    return us, west


def _make_time(us: int, west: int | None) -> time | EndOfDay:
    zone = None if west is None else timezone(timedelta(seconds=-west))
    if us == USECS_PER_DAY:
        return EndOfDay(None if zone is None else timedelta(seconds=-west))  # type: ignore[operator]
    seconds, micro = divmod(us, USECS_PER_SEC)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return time(hour, minute, second, micro, tzinfo=zone)


def _time_in(text: str, tz: bool) -> time | EndOfDay:
    check_datetime_fields(text, DATE_WORKBUF)
    match = _TIME_MATCH(text)
    if match is None:
        raise Invalid(0, f"expected a time like 12:34:56, found {text[:60]!r}")
    hour, minute, second, frac, zone = match.groups()
    us = _clock_us(hour, minute, second, frac)
    if us > USECS_PER_DAY:
        raise Invalid(0, f"time out of range: {text.strip(PG_SPACE)!r}")
    # Without a zone, timetz takes the session TimeZone, which we take to be UTC.
    return _make_time(us, -_zone_seconds_east(zone) if tz else None)


def _time_out(value: object, tz: bool) -> str:
    us, west = _time_parts(value, tz)
    return _time_text(us) + _zone_text(west) if tz else _time_text(us)


def _time_recv(data: bytes) -> time | EndOfDay:
    if len(data) != 8:
        check_exact(data, 8)
    us: int = INT64.unpack(data)[0]
    if not 0 <= us <= USECS_PER_DAY:
        raise Invalid(0, f"time out of range: {us} microseconds")
    return _make_time(us, None)


def _timetz_recv(data: bytes) -> time | EndOfDay:
    check_exact(data, 12)
    us, west = TIMETZ.unpack(data)
    if not 0 <= us <= USECS_PER_DAY:
        raise Invalid(0, f"time out of range: {us} microseconds")
    if not -TZDISP_LIMIT < west < TZDISP_LIMIT:
        raise Invalid(8, f"time zone displacement out of range: {west} seconds")
    return _make_time(us, west)


TIME: Final = Converter(
    1083,
    "time",
    1183,
    "datetime.time",
    lambda t: _time_in(t, False),
    lambda v: _time_out(v, False),
    _time_recv,
    lambda v: INT64.pack(_time_parts(v, False)[0]),
)
TIMETZ_CONV: Final = Converter(
    1266,
    "timetz",
    1270,
    "datetime.time",
    lambda t: _time_in(t, True),
    lambda v: _time_out(v, True),
    _timetz_recv,
    lambda v: TIMETZ.pack(*_time_parts(v, True)),
)

CONVERTERS: Final = (DATE, TIME, TIMETZ_CONV, TIMESTAMP, TIMESTAMPTZ)
