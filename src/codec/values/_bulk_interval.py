"""interval_in over all distinct element texts of a text interval array at once.

PostgreSQL prints an interval (IntervalStyle postgres) as up to three date fields and a
clock: "1 year 2 mons -3 days +04:05:06.5". A regular expression match and a handful of
int() calls per element cost ~2 us, too much for the 50 ms per MB target. But the
distinct elements of an array share few date parts ("1 year 2 mons -3 days") and few
"HH:MM" clock heads, so those are decoded once each, and per element only the seconds
are left to convert, by C-level passes:

* The texts are joined, each followed by six zeros. Read with every digit as a 9, each
  text gives its *shape* ("9 mons 99 days 99:99:99.999999"): few distinct ones, each
  checked once by a regular expression, and every position in an element is fixed by
  its shape. So slices looked up by shape cut each element into its date part, its
  "HH:MM" and its seconds.
* The seconds are cut to "SS" and six fraction digits, padded by the zeros that follow
  the text, with the point read as an underscore, which int() skips: "05.5" becomes
  "05_500000", 5.5 s in microseconds. A bare number of seconds ("-5", which
  interval_in also reads) with its six zeros is its microseconds too.

Anything outside these forms (other units, "ago", "infinity", the ISO and SQL forms,
digit counts that could overflow) makes the conversion decline, and the array decoder
runs interval_in on each element, which gives the value or the exact error.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from operator import add, getitem, mul
from typing import Final

from codec.values._interval import blank_intervals, fill_intervals, intervals
from codec.values._time import USECS_PER_HOUR, USECS_PER_MINUTE, USECS_PER_SEC

_PADDING: Final = "000000"  # a fraction's missing digits, read after each text
_SEPARATOR: Final = _PADDING + "\n"  # no text in the forms below holds a newline
_AS_NINE: Final = str.maketrans("0123456789", "9999999999")
# The shapes of what interval_out prints, and of a bare number of seconds. Each date
# field appears once and in order, so a value is the plain sum of its fields; the digit
# bounds keep every field inside int32 / int64. interval_in reads minutes and seconds
# of 60 and over as they are (75 minutes is 01:15:00), and so does the conversion.
_CLOCK: Final = r"[+-]?9{1,9}:99:99(?:\.9{1,6})?"
_YEARS, _MONS, _DAYS = r"[+-]?9{1,6} years?", r"[+-]?9{1,9} mons?", r"[+-]?9{1,9} days?"
_DATE: Final = f"{_YEARS}(?: {_MONS})?(?: {_DAYS})?|{_MONS}(?: {_DAYS})?|{_DAYS}"  # one at least
_SHAPE: Final = re.compile(f"[+-]?9{{1,9}}|(?:{_DATE})(?: {_CLOCK})?|{_CLOCK}")
_EMPTY: Final = slice(0, 0)
_cut: Final[Callable[[str, slice], str]] = getitem  # str.__getitem__ costs 1.5x as much
_UNIT_MONTHS: Final = {"year": 12, "years": 12, "mon": 1, "mons": 1}

# Where an element of a shape holds its date part, "HH:MM" and seconds (its text is
# followed by the padding), and the seconds' sign: that of the clock.
_Layout = tuple[slice, slice, slice, int]


def interval_texts(texts: list[str]) -> list[object] | None:
    """The Interval of each text, or None if any is outside the forms above: by shape
    when the texts share few shapes, date parts and clock heads, else one by one."""
    values = by_shape(texts, len(texts) // _SHAPE_SHARE, len(texts) // _PART_SHARE)
    return one_by_one(texts) if values is _TOO_MANY else values


# Each distinct shape costs ~2.5 us of Python, each date part up to 2.5 and each clock
# head 0.7, and the conversion by shape saves ~1 us per text over one_by_one().
_SHAPE_SHARE: Final = 16
_PART_SHARE: Final = 4
_TOO_MANY: Final[list[object]] = []  # compared by identity


def by_shape(texts: list[str], max_shapes: int, max_parts: int) -> list[object] | None:
    """The conversion by shape, or _TOO_MANY past ``max_shapes`` distinct shapes or
    ``max_parts`` distinct date parts and clock heads."""
    if texts and _SHAPE.fullmatch(texts[0].translate(_AS_NINE)) is None:
        return None  # an array of junk is refused at its first text, not after a pass
    joined = _SEPARATOR.join(texts) + _PADDING
    shapes = joined.translate(_AS_NINE).split("\n")
    if len(shapes) != len(texts):
        return None  # a text holds a newline
    distinct = set(shapes)
    if len(distinct) > max_shapes:
        return _TOO_MANY
    # Per shape, one table each: three slicing passes beat one itemgetter's tuples.
    date_at: dict[str, slice] = {}
    head_at: dict[str, slice] = {}
    seconds_at: dict[str, slice] = {}
    sign: dict[str, int] = {}
    for shape in distinct:
        layout = _layout(shape[: -len(_PADDING)])
        if layout is None:
            return None
        date_at[shape], head_at[shape], seconds_at[shape], sign[shape] = layout
    made = blank_intervals(len(texts))  # before the lists below: see blank_intervals
    parts = joined.replace(".", "_").split("\n")
    dates = list(map(_cut, parts, map(date_at.__getitem__, shapes)))
    heads = list(map(_cut, parts, map(head_at.__getitem__, shapes)))
    distinct_dates, distinct_heads = set(dates), set(heads)
    if len(distinct_dates) + len(distinct_heads) > max_parts:
        return _TOO_MANY
    date_of = {text: _date_part(text) for text in distinct_dates}
    head_of = {text: _clock_head(text) for text in distinct_heads}
    us = map(int, map(_cut, parts, map(seconds_at.__getitem__, shapes)))
    if -1 in sign.values():
        us = map(mul, us, map(sign.__getitem__, shapes))
    months = {text: months for text, (months, _) in date_of.items()}
    days = {text: days for text, (_, days) in date_of.items()}
    return fill_intervals(
        made,
        map(months.__getitem__, dates),
        map(days.__getitem__, dates),
        map(add, map(head_of.__getitem__, heads), us),
    )


def _layout(shape: str) -> _Layout | None:
    if _SHAPE.fullmatch(shape) is None:
        return None
    end = len(shape) + len(_PADDING)
    if ":" not in shape:
        if shape[-1] == "9":  # a bare number: with the padding, its microseconds
            return _EMPTY, _EMPTY, slice(0, end), 1
        return slice(0, len(shape)), _EMPTY, slice(end - 1, end), 1  # "0" seconds
    clock = shape.rfind(" ") + 1
    colon = shape.rfind(":")
    seconds = slice(colon + 1, colon + 9 + ("." in shape))  # "SS", "_" and 6 digits
    date = slice(0, max(clock - 1, 0))
    return date, slice(clock, colon), seconds, -1 if shape[clock] == "-" else 1


def _date_part(text: str) -> tuple[int, int]:
    """Months and days of a checked date part ("1 year -2 mons 3 days")."""
    months = days = 0
    words = text.split()  # "" when there is no date part
    for number, unit in zip(words[0::2], words[1::2], strict=True):
        if unit[0] == "d":
            days = int(number)
        else:
            months += int(number) * _UNIT_MONTHS[unit]
    return months, days


def _clock_head(text: str) -> int:
    """Microseconds of a checked "[+-]HH:MM" ("" is none); its sign is the clock's."""
    if not text:
        return 0
    hours, _, minutes = text.partition(":")
    us = abs(int(hours)) * USECS_PER_HOUR + int(minutes) * USECS_PER_MINUTE
    return -us if hours[0] == "-" else us


# The same forms, read one text at a time: a regular expression match each.
_FORM: Final = re.compile(
    r"([+-]?[0-9]{1,9})"
    r"|(?:([+-]?[0-9]{1,6}) years?(?: |$))?"
    r"(?:([+-]?[0-9]{1,9}) mons?(?: |$))?"
    r"(?:([+-]?[0-9]{1,9}) days?(?: |$))?"
    r"(?:([+-]?)([0-9]{1,9}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,6}))?)?"
)


def one_by_one(texts: list[str]) -> list[object] | None:
    """The Intervals of ``texts`` in the forms above, one regular expression match each
    (the Interval objects still made together by intervals())."""
    match = _FORM.fullmatch
    months: list[int] = []
    days_: list[int] = []
    micros: list[int] = []
    for text in texts:
        found = match(text)
        if found is None or not text or text[-1] == " ":
            return None
        bare, years, mons, days, sign, hours, minutes, seconds, frac = found.groups()
        if bare is not None:
            months.append(0)
            days_.append(0)
            micros.append(int(bare) * USECS_PER_SEC)
            continue
        us = 0
        if hours is not None:
            us = (
                int(hours) * USECS_PER_HOUR
                + int(minutes) * USECS_PER_MINUTE
                + int(seconds) * USECS_PER_SEC
                + (int(frac.ljust(6, "0")) if frac else 0)
            )
            if sign == "-":
                us = -us
        months.append(int(years) * 12 + int(mons or 0) if years else int(mons or 0))
        days_.append(int(days or 0))
        micros.append(us)
    return intervals(months, days_, micros)
