"""Whole-array fast paths for json and jsonb elements (see codec.values._bulk): the
texts checked by the json module's C scanner, and arrays of bare JSON numbers and
literals read whole, their values being their texts."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from itertools import compress, count
from operator import itemgetter
from typing import Final

from codec.values._ranges import BulkResult, Declined
from codec.values._text import _JSON, json_numbers_decoder, jsonb_long_run, jsonb_misfit

_SEPARATOR: Final = "\n"  # joins the texts for checks over them all: no digit, no structure

_end: Final = itemgetter(1)


def json_texts(jsonb: bool) -> Callable[[list[str]], BulkResult]:
    """json_in / jsonb_in over all texts: each is scanned by the C scanner through the
    documented raw_decode(), which must end exactly at the text's end (half the cost of
    decode(), which also skips whitespace around the value; texts with whitespace
    there decline). Texts of numbers and literals only are read as one JSON array, a
    scan with no call per text. jsonb's numbers must fit numeric: the scanner hands
    over every number with a fraction or exponent, checked together afterwards; a
    digit run of 16383 or more declines."""

    def decode(texts: list[str]) -> BulkResult:
        joined = _SEPARATOR.join(texts)
        if "\0" in joined or (jsonb and jsonb_long_run(joined)):
            return None
        floats: list[str] = []
        decoder = json_numbers_decoder(floats) if jsonb else _JSON
        # Numbers and literals only: the texts are the elements of one JSON array (no
        # text can end or join another), read by one scan.
        scalars = not any(map(joined.__contains__, _STRUCTURE))
        try:
            if scalars:
                array = "[" + ",".join(texts) + "]"
                try:
                    if len(decoder.decode(array)) != len(texts):
                        return None
                except json.JSONDecodeError as err:
                    # The commas before where it failed number the text it is in; the
                    # texts before it are values, but for jsonb numbers that misfit.
                    index = min(array.count(",", 0, err.pos), len(texts) - 1)
                    fits = not jsonb or not floats or jsonb_misfit(floats) is None
                    return Declined(index, list(texts[:index]) if fits else None)
            elif list(map(_end, map(decoder.raw_decode, texts))) != list(map(len, texts)):
                return None
        except (ValueError, RecursionError):
            return None
        # jsonb's numbers must fit numeric: only those with an exponent may not.
        misfit = jsonb_misfit(floats) if floats else None
        if misfit is None:
            return list(texts)
        # Of scalars, a text each: the misfit's text is its first occurrence (an equal
        # text before would misfit first), or, spaced, the misfit-th that is a float.
        try:
            place = texts.index(floats[misfit]) if scalars else -1
        except ValueError:
            places = list(compress(count(), map(_FLOAT_TEXT, texts)))
            place = places[misfit] if len(places) == len(floats) else -1
        return Declined(place, list(texts[:place])) if place >= 0 else None

    return decode


# In an array text of JSON numbers and literals: a character of neither; SQL's NULL.
_NOT_JSON_SCALAR: Final = re.compile(r"[^-+.0-9eEtrufals,]").search
_NULL_ELEMENT: Final = re.compile(r"(?<![^,])null(?![^,])").search


def json_scalars(jsonb: bool) -> Callable[[str], BulkResult]:
    """A reader of a whole array text of bare JSON numbers and literals
    ("{1,2.5,true}"), whose values are their texts: one split and the texts' JSON
    check, without the array's parse and table of distinct texts. Where an element is
    out of that form (a quote, a space, SQL's NULL), the elements before it are read
    alone: Declined there, with their values. Elements averaging under five characters
    with their comma are left to the table (few distinct ones)."""
    texts_of = json_texts(jsonb)

    def read(text: str) -> BulkResult:
        if text[:1] != "{" or text[-1:] != "}" or len(text) < 5 * (text.count(",") + 1):
            return None
        body = text[1:-1]
        found = _NOT_JSON_SCALAR(body)
        end = len(body) if found is None else found.start()
        null = _NULL_ELEMENT(body, 0, end) if "null" in body else None
        end = end if null is None else null.start()
        stop = body.rfind(",", 0, end) if end < len(body) else end
        if stop < 0:
            return None  # in the first element
        texts = body[:stop].split(",")
        values = texts_of(texts)
        if isinstance(values, list):
            return values if stop == len(body) else Declined(len(texts), values, stop + 2)
        if isinstance(values, Declined) and values.before is not None:
            index = values.index
            return Declined(index, values.before, 1 + sum(map(len, texts[:index])) + index)
        return None

    return read


# What JSON arrays, objects and strings are made of, and the separator of a JSON array.
_STRUCTURE: Final = ("[", "]", "{", "}", '"', ",")
# A JSON number with a fraction or an exponent (never true, false or null).
_FLOAT_TEXT: Final = re.compile("[0-9][.eE]").search
