"""Pieces the bulk conversions of codec.values._bulk and _bulk_decimal share: the
check of many texts against one form by one regular expression (_all_match), and the
reader of a whole array of numbers as the JSON array it nearly is (_json_numbers), with
the answers a reader gives when it stops (Declined, _then)."""

from __future__ import annotations

import dataclasses
import json
import operator
import re
from collections.abc import Callable
from functools import partial
from itertools import compress, count, repeat
from typing import Final, cast

from codec.values._array_forms import element_start
from codec.values._common import few_distinct
from codec.values._ranges import BulkResult, Declined

BulkDecoder = Callable[[list[str]], BulkResult]

_SEPARATOR: Final = "\n"  # no canonical form below contains it


def _all_match(element: str) -> Callable[[list[str]], int]:
    """A count of the texts, from the first, that fully match ``element``: one regex
    pass over the texts each followed by a newline, and the newlines before where it
    stopped counted. A text that itself holds a newline would look like two elements:
    only the texts before the first such one are counted."""
    each = re.compile(f"(?:(?:{element}){_SEPARATOR})*+")

    def matched(texts: list[str]) -> int:
        if not texts:
            return 0
        joined = _SEPARATOR.join(texts) + _SEPARATOR
        if joined.count(_SEPARATOR) != len(texts):
            first = next(compress(count(), map(str.__contains__, texts, repeat(_SEPARATOR))))
            return matched(texts[:first])
        end = each.match(joined).end()  # type: ignore[union-attr]  # (always matches)
        return joined.count(_SEPARATOR, 0, end)

    return matched


def _declined(texts: list[str], matched: int) -> Declined | None:
    """Declined at the first text that does not match, or None if all do."""
    return Declined(matched) if matched < len(texts) else None


WholeDecoder = Callable[[str], BulkResult]  # Declined: the values of the elements before
_not_null: Final = partial(operator.is_not, None)


# Digits as 0 and exponents in lower case, for the checks of digit runs and exponents.
_ZERO_DIGITS: Final = str.maketrans("123456789E", "000000000e")
_LONG_EXPONENTS: Final = ("e0000", "e+0000", "e-0000")


def _json_numbers(
    characters: str, decoder: json.JSONDecoder, shortest: int, digits: int
) -> WholeDecoder:
    """A reader of a whole one-dimensional array of numbers and NULL ("{1,-2,NULL}"),
    read as the JSON array it nearly is by the json module's C scanner, which makes
    each number without a text per element (a 1 MB array of distinct small numbers
    cost its split, its distinct-element table and a conversion per text).

    Only ``characters``, JSON's whitespace (which array_in skips around elements too)
    and null's letters may appear between the braces, so JSON can find nothing but
    numbers, its constants NaN/Infinity (where the letters are allowed) and null; its
    number syntax is a subset of what the input functions take, with the same values
    ("+1" and "007" make it decline). No digit run may be longer than ``digits`` nor an
    exponent four digits long (floats past a double's range are checked after).
    An array whose elements average under ``shortest`` characters with their comma and
    repeat (few_distinct) is declined too: converting each one costs more than the
    split and table of the element path, which converts each distinct text once
    ('{1,1,...}' of floats: 30 ms per MB that way, 140 whole).
    Where a character out of form comes after some elements, those are read and the
    answer is Declined at the element holding it, with their values."""
    # JSON's whitespace and null (any spelling of NULL but these two declines).
    other = re.compile(f"[^{re.escape(characters)} \t\n\rnul]").search
    run = "0" * (digits + 1)

    def read(text: str) -> BulkResult:
        body = text[1:-1]
        if len(text) < shortest * (text.count(",") + 1) and few_distinct(body):
            return None
        if text[:1] != "{" or text[-1:] != "}":
            return None
        found = other(body)
        end = len(body) if found is None else found.start()
        # A digit run or an exponent too long stops the reading as such a character does.
        zeroed = body.translate(_ZERO_DIGITS)
        for long in (run, *_LONG_EXPONENTS) if "e" in zeroed else (run,):
            at = zeroed.find(long, 0, end)
            end = end if at < 0 else at
        if end == len(body):
            return numbers(body)
        # The elements before the first character out of form are read alone
        # (Declined with their values): the array decoder parses only the rest.
        index = body.count(",", 0, end)
        cut = body.rfind(",", 0, end)
        before = numbers(body[:cut]) if index else None
        return Declined(index, before, cut + 2) if before is not None else None

    def numbers(body: str) -> list[object] | None:
        if "N" in body:
            body = body.replace("NULL", "null")
        try:
            values = decoder.decode("[" + body + "]")
        except ValueError:
            return None
        return cast(list[object], values) if values else None

    return read


def _unquoting(read: WholeDecoder) -> WholeDecoder:
    """``read``, which takes bare numbers (or intervals), given an array text with quoted
    ones too ('{"1",2}') without its quotes (a Declined's offset found again in
    ``text``: no quoted element holds a comma)."""

    def unquoted(text: str) -> BulkResult:
        if '"' not in text:
            return read(text)
        bare = _without_quotes(text)
        values = read(bare) if bare is not None else None
        if isinstance(values, Declined) and values.offset is not None:
            start = element_start(text, values.index)
            return dataclasses.replace(values, offset=start)
        return values

    return unquoted


def _without_quotes(text: str) -> str | None:
    """An array text of numbers some of which are quoted ('{"1",2}') without its quotes,
    if each quoted element stands alone between braces and commas and holds no comma,
    brace, backslash or spelling of NULL (a quoted "NULL" is a text, not NULL); a
    number's quotes change nothing else (the input functions skip whitespace)."""
    if '""' in text:  # an empty quoted element (a text), or a quote after a quote
        return None
    pieces = text.split('"')
    inside = pieces[1::2]
    outside = pieces[0::2]
    if not len(pieces) % 2:
        return None
    quoted = "".join(inside)
    if "," in quoted or "{" in quoted or "}" in quoted or "\\" in quoted:
        return None
    if "NULL" in quoted.upper():  # even with whitespace around it
        return None
    opens, closes = repeat(("{", ",")), repeat((",", "}"))
    if not all(map(str.endswith, outside[:-1], opens)) or not all(
        map(str.startswith, outside[1:], closes)
    ):
        return None
    return "".join(pieces)


def _then(result: BulkResult, check: Callable[[list[object]], list[object] | None]) -> BulkResult:
    """``check`` applied to a whole reader's values, or to those before where it stopped
    (Declined): its answer, or None if it refuses them."""
    if isinstance(result, list):
        return check(result)
    if isinstance(result, Declined) and result.before is not None:
        before = check(result.before)
        return None if before is None else dataclasses.replace(result, before=before, later=None)
    return None
