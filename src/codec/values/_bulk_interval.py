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
* Where the distinct date parts or clock heads are many ("N days" for many N), their
  numbers are cut and read by int() for each text in the same way instead.

Texts that are each one date field of one unit ("N days" for many N, ~116,000 per MB)
skip the shapes (one_field): joined, checked by one regular expression, their unit words
deleted and their numbers read by one json decode. one_field_array does the same on a
whole array text ("{1 days,2 days}" or '{"1 day","2 days"}'), without the array's split
and table of distinct texts; one field each of several units ("{1 day,2 mons,3 years}")
too, each element's unit read from the one letter only its word has.

Anything outside these forms (other units, "ago", "infinity", the ISO and SQL forms,
digit counts that could overflow) makes the conversion decline, and the array decoder
runs interval_in on each element, which gives the value or the exact error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from itertools import repeat
from operator import add, getitem, mul
from typing import Final, cast

from codec.values._common import few_distinct
from codec.values._interval import blank_intervals, fill_intervals, intervals
from codec.values._ranges import BulkResult, Declined
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
_ZERO: Final = slice(-1, None)  # the padding's last "0": a number the text lacks
_DATE_FIELD: Final = re.compile(r"([+-]?9++) ([ymd])")  # in a checked date part
_cut: Final[Callable[[str, slice], str]] = getitem  # str.__getitem__ costs 1.5x as much
_UNIT_MONTHS: Final = {"year": 12, "years": 12, "mon": 1, "mons": 1}


def interval_texts(texts: list[str]) -> BulkResult:
    """The Interval of each text, or None if any is outside the forms above (Declined
    at the first text that is, when that is known): as one field each when all are one
    date field of one unit, by shape when the texts share few shapes, else one by one."""
    values = _fields_of(texts)
    if isinstance(values, list):
        return values
    if values is not None and _refused(texts[values.index]):
        # by_shape() and one_by_one() would refuse it too, after a pass.
        return values
    values = by_shape(texts, len(texts) // _SHAPE_SHARE, len(texts) // _PART_SHARE)
    return one_by_one(texts) if values is _TOO_MANY else values


# Each distinct shape costs ~2.5 us of Python, and the conversion by shape saves ~1 us
# per text over one_by_one(). A distinct date part costs up to 2.5 us and a clock head
# 0.7 us, against ~0.3 us per text to read their numbers column by column.
_SHAPE_SHARE: Final = 16
_PART_SHARE: Final = 8
_TOO_MANY: Final[list[object]] = []  # compared by identity
# What _layout() locates in the elements of a shape.
_PARTS: Final = ("date", "years", "mons", "days", "head", "hours", "minutes", "seconds")
Cut = Callable[[str], Iterator[str]]  # a part -> that part of each text
Numbers = Callable[[str], Iterator[int]]  # a part -> that number of each text


def by_shape(texts: list[str], max_shapes: int, max_parts: int) -> list[object] | None:
    """The conversion by shape, or _TOO_MANY past ``max_shapes`` distinct shapes. Date
    parts and clock heads are decoded once each, or past ``max_parts`` distinct ones
    their numbers are read for each text."""
    if texts and _SHAPE.fullmatch(texts[0].translate(_AS_NINE)) is None:
        return None  # an array of junk is refused at its first text, not after a pass
    joined = _SEPARATOR.join(texts) + _PADDING
    shapes = joined.translate(_AS_NINE).split("\n")
    if len(shapes) != len(texts):
        return None  # a text holds a newline
    distinct = set(shapes)
    if len(distinct) > max_shapes:
        return _TOO_MANY
    # Per part, where each shape holds it: a slicing pass per part needed beats one
    # itemgetter call's tuple per text.
    at: dict[str, dict[str, slice]] = {part: {} for part in _PARTS}
    sign: dict[str, int] = {}
    for shape in distinct:
        layout = _layout(shape[: -len(_PADDING)])
        if layout is None:
            return None
        for part, where in zip(_PARTS, layout[0], strict=True):
            at[part][shape] = where
        sign[shape] = layout[1]
    made = blank_intervals(len(texts))  # before the lists below: see blank_intervals
    parts = joined.replace(".", "_").split("\n")

    def cut(part: str) -> Iterator[str]:
        return map(_cut, parts, map(at[part].__getitem__, shapes))

    def number(part: str) -> Iterator[int]:
        if all(where is _ZERO for where in at[part].values()):
            return repeat(0, len(texts))  # no shape has it ("N days" has no clock)
        return map(int, cut(part))

    # Date parts of days alone ("N days") and no clocks: nothing to decode once per
    # distinct part, and no table of them to build.
    if _any_shape_has(at, "years", "mons"):
        months, days = _months_and_days(cut, number, max_parts)
    else:
        months, days = repeat(0, len(texts)), number("days")
    us = number("seconds")
    if _any_shape_has(at, "head"):
        us = map(add, _clock_heads(cut, number, max_parts), us)
    if -1 in sign.values():
        us = map(mul, us, map(sign.__getitem__, shapes))
    return fill_intervals(made, months, days, us)


def _any_shape_has(at: dict[str, dict[str, slice]], *parts: str) -> bool:
    """Whether any shape holds one of ``parts`` (_layout() gives _ZERO or _EMPTY for
    a part a shape lacks)."""
    return any(where not in (_ZERO, _EMPTY) for part in parts for where in at[part].values())


def _layout(shape: str) -> tuple[tuple[slice, ...], int] | None:
    """Where the elements of ``shape`` hold each of _PARTS (in their text followed by
    the padding, whose last "0" stands for a number they lack), and the sign of their
    clock; None if the shape is not one of the forms read here."""
    if _SHAPE.fullmatch(shape) is None:
        return None
    if ":" not in shape and shape[-1] == "9":  # a bare number: padded, its microseconds
        return (_EMPTY, _ZERO, _ZERO, _ZERO, _EMPTY, _ZERO, _ZERO, slice(0, None)), 1
    colon = shape.rfind(":")
    clock = shape.rfind(" ", 0, colon) + 1 if colon >= 0 else len(shape) + 1
    date = slice(0, max(clock - 1, 0))
    numbers = {m[2]: slice(*m.span(1)) for m in _DATE_FIELD.finditer(shape, 0, date.stop)}
    years, mons, days = (numbers.get(unit, _ZERO) for unit in "ymd")
    if colon < 0:
        return (date, years, mons, days, _EMPTY, _ZERO, _ZERO, _ZERO), 1
    first = clock + (shape[clock] in "+-")  # the hours' first digit
    hours = slice(first, shape.index(":", first))
    minutes = slice(hours.stop + 1, colon)
    seconds = slice(colon + 1, colon + 9 + ("." in shape))  # "SS", "_" and 6 digits
    sign = -1 if shape[clock] == "-" else 1
    return (date, years, mons, days, slice(clock, colon), hours, minutes, seconds), sign


def _months_and_days(cut: Cut, number: Numbers, most: int) -> tuple[Iterator[int], Iterator[int]]:
    """Each text's months and days: each distinct date part decoded once, or past
    ``most`` distinct ones ("N days" for many N), its numbers read for each text."""
    dates = list(cut("date"))
    distinct = set(dates)
    if len(distinct) > most:
        years = map(mul, number("years"), repeat(12))
        return map(add, years, number("mons")), number("days")
    decoded = {text: _date_part(text) for text in distinct}
    months = {text: months for text, (months, _) in decoded.items()}
    days = {text: days for text, (_, days) in decoded.items()}
    return map(months.__getitem__, dates), map(days.__getitem__, dates)


def _clock_heads(cut: Cut, number: Numbers, most: int) -> Iterator[int]:
    """Each text's clock hours and minutes in microseconds, without the clock's sign:
    each distinct "[+-]HH:MM" decoded once, or past ``most`` distinct ones, its numbers
    read for each text."""
    heads = list(cut("head"))
    distinct = set(heads)
    if len(distinct) > most:
        hours = map(mul, number("hours"), repeat(USECS_PER_HOUR))
        return map(add, hours, map(mul, number("minutes"), repeat(USECS_PER_MINUTE)))
    decoded = {text: _clock_head(text) for text in distinct}
    return map(decoded.__getitem__, heads)


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
    """Microseconds of a checked "[+-]HH:MM" ("" is none), without its sign."""
    if not text:
        return 0
    hours, _, minutes = text.partition(":")
    return abs(int(hours)) * USECS_PER_HOUR + int(minutes) * USECS_PER_MINUTE


# Arrays of one date field alone, of one unit ("N days" for many N, the hostile family
# "array of distinct day counts"), or of bare numbers of seconds, skip the shapes: the
# texts, joined by commas, are checked by one regular expression (_SHAPE's field with
# its digit bound; 12 digits of seconds stay inside int64 microseconds), their unit
# words deleted, and their numbers read by one json decode ("[1,-2,3]"). Per unit: the
# check of texts joined by "," and by '","' (a quoted array's), the field the numbers
# go to (0 months, 1 days, 2 microseconds) and its amount per unit.
Field = tuple[re.Pattern[str], re.Pattern[str], int, int]


def _field(unit: str, most: int, column: int, scale: int) -> Field:
    field = f"[+-]?[0-9]{{1,{most}}}+" + (f" {unit}s?+" if unit else "")
    return (
        re.compile(f"{field}(?:,{field})*+"),
        re.compile(f'{field}(?:","{field})*+'),
        column,
        scale,
    )


_ONE_FIELD: Final = {
    "day": _field("day", 9, 1, 1),
    "mon": _field("mon", 9, 0, 1),
    "year": _field("year", 6, 0, 12),
}
_BARE: Final = _field("", 12, 2, USECS_PER_SEC)
_UNIT_LETTERS: Final = str.maketrans("", "", ' adeimnorsy"')  # " day(s)", " mon(s)", " year(s)"
_JSON_NUMBERS: Final = json.JSONDecoder()


def one_field(texts: list[str]) -> list[object] | None:
    """The Intervals of ``texts`` if each is one field of the same unit ("-5 days",
    "3 mons", "5" seconds), else None."""
    values = _fields_of(texts)
    return values if isinstance(values, list) else None


def _fields_of(texts: list[str]) -> list[object] | Declined | None:
    """one_field(), or when the first text is one field but not all are, Declined at
    the first text that is not, with the values of those before (None if not known)."""
    found = _unit_of(texts[0]) if texts else None
    if found is None:
        return None
    joined = ",".join(texts)
    if joined.count(",") != len(texts) - 1:
        return None  # a text holds a comma
    read = found[0].match(joined)
    if read is None or read.end() < len(joined):
        return _stopped(joined, read.end() if read else 0, found)
    return _one_field(joined, len(texts), found[2], found[3])


def _stopped(joined: str, end: int, found: Field, base: int | None = None) -> Declined:
    """Declined where the check of ``joined`` (elements joined by commas) stopped, at
    ``end``: after the last element it read whole, or inside the next one; with the
    values of the elements before it, and (given ``joined``'s offset in the array text,
    ``base``) where the next one begins."""
    complete = joined.startswith(",", end)
    index = joined.count(",", 0, end) + complete
    if not index:
        return Declined(0, [])
    cut = end if complete else joined.rfind(",", 0, end)
    values = partial(_one_field, joined[:cut], index, found[2], found[3])
    if base is None:
        return Declined(index, values())
    # The Intervals are made once the rest decodes: an array of valid elements ending
    # in a bad one is refused without making them.
    return Declined(index, None, base + cut + 1, values)


def _refused(text: str) -> bool:
    """Whether by_shape() (its shapes) and one_by_one() (its form) both refuse ``text``."""
    return _SHAPE.fullmatch(text.translate(_AS_NINE)) is None and _FORM.fullmatch(text) is None


def one_field_array(text: str) -> list[object] | Declined | None:
    """The elements of a whole one-dimensional array text of such fields, unquoted or
    all quoted ("{1 day,-2 days}", '{"1 day","-2 days"}': what array_out prints), else
    None (the array decoder then parses the text); unquoted, Declined at the first
    element out of form, with the values of those before."""
    # The unit of the first element, from the first characters: no pass over the text
    # for an array in another form ("{1 mon 2 days ...}").
    found = _unit_of(text[:_FIRST].partition(",")[0].strip('{}"'))
    if found is None:
        return None
    if text[:2] == '{"' and text[-2:] == '"}':
        check, start = found[1], 2  # a comma or quote inside an element fails it
    elif text[:1] == "{" and text[-1:] == "}":
        check, start = found[0], 1
    else:
        return None
    read = check.match(text, start, len(text) - start)
    if read is None or read.end() < len(text) - start:
        mixed = _mixed_units(text, start)
        if mixed is not None or start == 2:
            return mixed
        # Unquoted: the elements before where the check stopped are read alone.
        stopped = _stopped(text[1:-1], read.end() - 1 if read else 0, found, 1)
        return stopped if stopped.index else None
    body = text[start : len(text) - start]
    values = _one_field(body, body.count(",") + 1, found[2], found[3])
    return values if isinstance(values, list) else None


# One field each but of several units ("{1 day,2 mons,3 years}"): the same check with
# any unit, and each element's unit from the letter only its word has (d, m, r), the
# other characters deleted, which gives its amount per field.
_ANY_UNIT: Final = r"[+-]?[0-9]{1,9}+ (?:days?+|mons?+)|[+-]?[0-9]{1,6}+ years?+"
_MIXED: Final = (
    re.compile(f"(?:{_ANY_UNIT})(?:,(?:{_ANY_UNIT}))*+"),
    re.compile(f'(?:{_ANY_UNIT})(?:","(?:{_ANY_UNIT}))*+'),
)
_UNIT_CODE: Final = str.maketrans("", "", '+-0123456789 aeinosy,"')  # leaves d, m or r
_MONTHS_PER: Final = {"d": 0, "m": 1, "r": 12}
_DAYS_PER: Final = {"d": 1, "m": 0, "r": 0}


def _mixed_units(text: str, start: int) -> list[object] | None:
    """The elements of an array text of one field each, of any units, unquoted
    (``start`` 1) or all quoted (2), unless they repeat (the table of distinct texts
    does better); else None."""
    body = text[start : len(text) - start]
    read = _MIXED[start == 2].match(body)
    if read is None or read.end() < len(body) or few_distinct(body):
        return None
    units = body.translate(_UNIT_CODE)
    made = blank_intervals(len(units))  # before the lists: see blank_intervals
    numbers = _numbers(body.translate(_UNIT_LETTERS), 1)
    months = map(mul, numbers, map(_MONTHS_PER.__getitem__, units))
    days = map(mul, numbers, map(_DAYS_PER.__getitem__, units))
    return fill_intervals(made, months, days, repeat(0))


# Elements shorter than this on average, with their comma, may be few distinct ones ("1
# day" repeated): if few_distinct() says so, an Interval is made for each distinct number
# and shared, as the element path's table of distinct texts would (one each cost 65 ms
# per MB of "1 day").
_SHORT: Final = 8
_FIRST: Final = 24  # characters enough for '{"-999999999 days",'


def _unit_of(text: str) -> Field | None:
    """The _ONE_FIELD entry of the unit ``text`` ends with ("5 days"), or _BARE for a
    text without a space that ends in a digit ("5"): a guess, which the entry's check
    then confirms for every text."""
    _, space, word = text.rpartition(" ")
    if not space:
        return _BARE if word[-1:].isdigit() else None
    return _ONE_FIELD.get(word.removesuffix("s"))


def _one_field(joined: str, count: int, column: int, scale: int) -> list[object]:
    """The Intervals of ``count`` checked texts of one field joined by commas (quoted
    ones by '","'): each number ``scale`` times itself in field ``column``. json reads
    numbers without a "+" or leading zeros, int() the others (json declines "+5" and
    "007"; interval_in reads them as 5 and 7)."""
    numbers = joined.translate(_UNIT_LETTERS)
    if len(joined) < _SHORT * count and few_distinct(numbers):
        values = _numbers(numbers, 1)
        distinct = list(set(values))
        shared = _intervals_of(blank_intervals(len(distinct)), distinct, column, scale)
        table = dict(zip(distinct, shared, strict=True))
        return list(map(table.__getitem__, values))
    made = blank_intervals(count)  # before the list: see blank_intervals
    return _intervals_of(made, _numbers(numbers, scale), column, 1)


def _numbers(numbers: str, scale: int) -> list[int]:
    """The integers joined by commas in ``numbers``, each times ``scale`` (1 or a power
    of ten: then written out as zeros after each before json reads them, which saves a
    multiplication and an int each; not where a number starts with 0, which json
    refuses once written out)."""
    zeros = len(str(scale)) - 1
    if scale == 10**zeros > 1 and not (numbers[:1] == "0" or ",0" in numbers or "-0" in numbers):
        padding = "0" * zeros
        try:
            padded = f"[{numbers.replace(',', padding + ',')}{padding}]"
            return cast(list[int], _JSON_NUMBERS.decode(padded))
        except ValueError:
            pass
    try:
        values = _JSON_NUMBERS.decode(f"[{numbers}]")
    except ValueError:
        values = list(map(int, numbers.split(",")))
    return values if scale == 1 else list(map(mul, values, repeat(scale)))


def _intervals_of(made: list[object], numbers: list[int], column: int, scale: int) -> list[object]:
    """``made`` (blank_intervals()) filled: each of ``numbers`` times ``scale`` in field
    ``column`` (0 months, 1 days, 2 microseconds), the other two 0."""
    fields: list[Iterable[int]] = [repeat(0), repeat(0), repeat(0)]
    fields[column] = numbers if scale == 1 else map(mul, numbers, repeat(scale))
    return fill_intervals(made, *fields)


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
