"""Arrays of any catalogue type, text (array_in / array_out) and binary (array_recv /
array_send), per src/backend/utils/adt/arrayfuncs.c."""

from __future__ import annotations

import functools
import itertools
import json
import operator
import re
import struct
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar, cast

from codec._buffer import INT32
from codec.errors import EncodeError
from codec.values._array_forms import (
    MAXDIM,
    NULL_SPELLINGS,
    element_start,
    escaped_texts,
    nested_texts,
    opening,
)
from codec.values._bulk import BinaryArea, BinaryBulk, BinaryElements
from codec.values._bulk_forms import BulkDecoder, WholeDecoder
from codec.values._common import (
    PG_SPACE,
    SAMPLE,
    Converter,
    Invalid,
    few_distinct,
    type_error,
)
from codec.values._ranges import Declined, ElementError, convert_ranges

ARRAY_HEADER: Final = struct.Struct("!iiI")  # ndim, has-null flag, element OID
DIMENSION: Final = struct.Struct("!ii")  # size, lower bound
_Item = TypeVar("_Item", str, bytes)  # an element as parsed: its text, or its binary bytes
_NULL_LENGTH: Final = INT32.pack(-1)
# array_out() quotes an element that is empty, spells NULL, or holds any of these.
_NEEDS_QUOTES: Final = frozenset('{},"\\' + PG_SPACE)


@dataclass(frozen=True, slots=True)
class BoundedArray:
    """An array whose lower bounds are not all 1 (``'[0:1]={a,b}'``).

    ``elements`` is the nested list a plain array would be; ``lower_bounds`` has one
    entry per dimension. Arrays whose lower bounds are all 1 decode as plain lists.
    """

    lower_bounds: tuple[int, ...]
    elements: list[object]


# --------------------------------------------------------------------------- shape


def _shape(value: list[object], name: str) -> list[int]:
    """Dimensions of a nested list, checking that it is rectangular."""
    shape: list[int] = []
    level: object = value
    while isinstance(level, list):
        if not level:
            if shape:
                raise EncodeError(f"{name}: a sub-array is empty; only the whole array can be")
            return shape
        shape.append(len(level))
        level = level[0]
    if len(shape) > MAXDIM:
        raise EncodeError(f"{name}: {len(shape)} dimensions exceed the maximum of {MAXDIM}")
    return shape


def _flatten(value: list[object], shape: list[int], name: str) -> list[object]:
    items: list[object] = []
    last = len(shape) - 1

    def walk(level: list[object], depth: int) -> None:
        if len(level) != shape[depth]:
            raise EncodeError(f"{name}: multidimensional arrays must be rectangular")
        if depth == last:
            for item in level:
                if isinstance(item, list):
                    raise EncodeError(f"{name}: multidimensional arrays must be rectangular")
            items.extend(level)
        else:
            for sub in level:
                if not isinstance(sub, list):
                    raise EncodeError(f"{name}: multidimensional arrays must be rectangular")
                walk(sub, depth + 1)

    walk(value, 0)
    return items


def _unflatten(items: list[object], shape: list[int]) -> list[object]:
    for size in reversed(shape[1:]):
        if size <= 64:  # many short rows: cut by zip() at C speed, not a step each
            items = list(map(list, zip(*[iter(items)] * size, strict=True)))
        else:
            items = [items[i : i + size] for i in range(0, len(items), size)]
    return items


def _array_parts(value: object, name: str) -> tuple[list[int], list[int], list[object]]:
    """(shape, lower bounds, flat elements) of a list or BoundedArray."""
    if isinstance(value, BoundedArray):
        nested, bounds = value.elements, list(value.lower_bounds)
        if not isinstance(nested, list):
            raise type_error(name, nested, "a list in BoundedArray.elements")
    elif isinstance(value, list):
        nested, bounds = value, []
    else:
        raise type_error(name, value, "list or BoundedArray")
    shape = _shape(nested, name)
    if not bounds:
        bounds = [1] * len(shape)
    elif len(bounds) != len(shape):
        raise EncodeError(f"{name}: {len(bounds)} lower bounds for {len(shape)} dimensions")
    for size, low in zip(shape, bounds, strict=True):
        if not low >= -(1 << 31) or low + size - 1 > (1 << 31) - 1:
            raise EncodeError(f"{name}: lower bound {low} out of range")
    return shape, bounds, _flatten(nested, shape, name) if shape else []


def _each_once(
    items: list[_Item | None], convert: Callable[[list[_Item]], list[object]]
) -> list[object]:
    """The values of ``items`` (None stays None), each distinct one converted once by
    ``convert`` (a 1 MB array of small elements holds few distinct ones); mostly distinct
    and without NULL, they are converted in place, which beats a table."""
    table: dict[_Item | None, object] = dict.fromkeys(items)
    if 2 * len(table) > len(items) and None not in table:
        del table  # else every collection while converting walks its entries
        return convert(cast(list[_Item], items))
    table.pop(None, None)
    distinct = cast(list[_Item], list(table))
    values = convert(distinct) if distinct else []
    if all(map(operator.is_, values, distinct)):
        # Each value is its own text (text, "char", bytea's bytes): no table needed.
        return cast(list[object], items)
    table = dict(zip(distinct, values, strict=True))
    table[None] = None
    return list(map(table.__getitem__, items))


def _each_once_after(
    before: list[object] | None,
    items: list[_Item | None],
    convert: Callable[[list[_Item]], list[object]],
) -> list[object]:
    """_each_once of ``items``, but for the first ones, whose values ``before`` holds
    (a whole reader's, which stopped after them)."""
    if before is None or len(before) > len(items):
        return _each_once(items, convert)
    return before + _each_once(items[len(before) :], convert)


def _result(items: list[object], shape: list[int], bounds: list[int]) -> object:
    nested = _unflatten(items, shape) if shape else []
    if any(low != 1 for low in bounds):
        return BoundedArray(tuple(bounds), nested)
    return nested


# --------------------------------------------------------------------------- text


def _quote(text: str) -> str:
    if text == "" or text.upper() == "NULL" or not _NEEDS_QUOTES.isdisjoint(text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def make_text_encoder(element: Converter, name: str) -> object:
    encode = element.encode_text

    def encode_text(value: object) -> str:
        shape, bounds, items = _array_parts(value, name)
        if not shape:
            return "{}"
        texts = ["NULL" if item is None else _quote(encode(item)) for item in items]
        for size in reversed(shape):
            texts = ["{" + ",".join(texts[i : i + size]) + "}" for i in range(0, len(texts), size)]
        body = texts[0]
        if any(low != 1 for low in bounds):
            dims = "".join(
                f"[{low}:{low + size - 1}]" for size, low in zip(shape, bounds, strict=True)
            )
            return f"{dims}={body}"
        return body

    return encode_text


def _parse_dims(text: str, pos: int) -> tuple[list[int], list[int], int]:
    """``[lb:ub][lb:ub]...=`` -> (sizes, lower bounds, position after '=')."""
    sizes: list[int] = []
    bounds: list[int] = []
    n = len(text)
    while pos < n and text[pos] == "[":
        close = text.find("]", pos)
        if close < 0 or len(sizes) >= MAXDIM:
            raise Invalid(pos, "malformed array dimensions: expected [lower:upper]")
        spec = text[pos + 1 : close].strip(PG_SPACE)
        low_text, colon, high_text = spec.partition(":")
        if not colon:
            low_text, high_text = "1", low_text
        try:
            low, high = int(low_text.strip(PG_SPACE)), int(high_text.strip(PG_SPACE))
        except ValueError as err:
            raise Invalid(pos, f"malformed array dimension {spec!r}") from err
        if abs(low) > (1 << 31) or abs(high) > (1 << 31) or high < low - 1:
            raise Invalid(pos, f"array dimension {spec!r} is out of range")
        sizes.append(high - low + 1)
        bounds.append(low)
        pos = close + 1
        while pos < n and text[pos] in PG_SPACE:
            pos += 1
    if pos >= n or text[pos] != "=":
        raise Invalid(pos, "expected '=' after array dimensions")
    return sizes, bounds, pos + 1


# One token of array_in() text, tried in this order: whitespace; a chunk of elements,
# quoted or not, and the commas between them ('1, "a\\"b", c'); a brace or comma. A
# chunk is found by one match over character classes and quoted strings, and taken
# apart by split() or findall(), so a 1 MB array costs a few C-level scans plus one
# decode per distinct element however its elements are arranged or quoted (one Python
# step per element made alternating quoted and unquoted elements cost seconds). A
# chunk without quotes is checked for empty elements after the split; one with quotes
# is matched again element by element (_RUN), which stops where the syntax does. An
# unquoted element with a backslash ends a chunk and is read by _UNQUOTED. Every
# quantifier is possessive, so each token is found in one pass over its characters.
_SPACE: Final = r"[ \t\n\r\v\f]"
_QUOTED: Final = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
_PLAIN: Final = r'[^{},"\\ \t\n\r\v\f]++(?:' + _SPACE + r'++[^{},"\\ \t\n\r\v\f]++)*+'
_COMMA: Final = _SPACE + "*+," + _SPACE + "*+"
_ELEMENT: Final = f"(?:{_QUOTED}|{_PLAIN})"
_TOKEN: Final = re.compile(
    _SPACE
    + "++"
    + rf'|(?P<chunk>(?:[^{{}},"\\ \t\n\r\v\f]|{_QUOTED})(?:[^{{}}"\\]++|{_QUOTED})*+)'
    + r"|(?P<punct>[{},])",
    re.DOTALL,
)
_RUN: Final = re.compile(f"{_ELEMENT}(?:{_COMMA}{_ELEMENT})*+", re.DOTALL)
# The elements of a run, in order, quoted ones with their quotes.
_RUN_ELEMENTS: Final = re.compile(_ELEMENT, re.DOTALL)
_UNQUOTED: Final = re.compile(r'(?:[^{},"\\]++|\\.)++', re.DOTALL)
# re.split keeps the captured (escaped) characters between the pieces, so joining its
# result drops the backslashes at C speed (sub() with a template is per match in 3.11).
_UNESCAPE: Final = re.compile(r"\\(.)", re.DOTALL).split


def _unescape(escaped: str) -> str:
    """``escaped`` without its backslash escapes (each backslash is followed by the
    character it escapes). Three replace() passes: an escaped backslash is parked on
    NUL while the other backslashes go, unless the text holds a NUL itself."""
    if "\0" in escaped:
        return "".join(_UNESCAPE(escaped))
    return escaped.replace("\\\\", "\0").replace("\\", "").replace("\0", "\\")


_SPACE_RUN: Final = re.compile(r"[ \t\n\r\v\f]*+")


def _skip_space(text: str, pos: int) -> int:
    match = _SPACE_RUN.match(text, pos)  # always matches, maybe nothing
    return match.end() if match is not None else pos


_HAS_SPACE: Final = re.compile(r"[ \t\n\r\v\f]").search

# Where the elements came from, to point an element's error at its offset without
# recording an offset per element: (index of the first element, offset of the token,
# RUN for a run of elements / None for a single element).
RUN: Final = "run"
_Span = tuple[int, int, str | None]


def _unquoted(text: str, start: int) -> tuple[str, int, bool]:
    """An unquoted element with backslash escapes at ``start`` (not whitespace):
    (its text, the position after it, whether it had an escape). Trailing whitespace
    is dropped unless escaped, as in array_in()'s ReadArrayStr()."""
    n = len(text)
    match = _UNQUOTED.match(text, start)
    end = match.end() if match is not None else start
    if end < n and text[end] == "\\":  # only a backslash at the very end is left over
        raise Invalid(start, "unterminated backslash escape")
    if end < n and text[end] == '"':
        raise Invalid(end, "unexpected '\"' inside an unquoted array element")
    raw = text[start:end]
    trimmed = raw.rstrip(PG_SPACE)
    if "\\" not in trimmed:
        return trimmed, end, False
    if (len(trimmed) - len(trimmed.rstrip("\\"))) % 2:  # the last space was escaped
        trimmed = raw[: len(trimmed) + 1]
    return _unescape(trimmed), end, True


def _element_text(element: str) -> str | None:
    """The text of one element as a run holds it: quoted (contents unescaped) or
    unquoted (None if it spells NULL in any case)."""
    if element[0] == '"':
        inner = element[1:-1]
        return _unescape(inner) if "\\" in inner else inner
    return None if element.upper() == "NULL" else element


_first_character: Final = operator.itemgetter(0)
_SEPARATOR: Final = "\x01"


def _texts(elements: list[str]) -> list[str | None]:
    """:func:`_element_text` of each element, computed once per distinct element. When
    all are quoted and hold no U+0001, they are unquoted and unescaped together: joined
    by U+0001, which no escape can produce, unescaped and split again."""
    distinct = list(dict.fromkeys(elements))
    joined = _SEPARATOR.join(distinct)
    if (
        "".join(map(_first_character, distinct)) == '"' * len(distinct)
        and joined.count(_SEPARATOR) == len(distinct) - 1
    ):
        inner = joined[1:-1].replace('"' + _SEPARATOR + '"', _SEPARATOR)
        texts: list[str | None] = list(_unescape(inner).split(_SEPARATOR))
    else:
        texts = list(map(_element_text, distinct))
    if len(distinct) == len(elements):
        return texts
    text_of = dict(zip(distinct, texts, strict=True))
    return list(map(text_of.__getitem__, elements))


def _unquoted_run(chunk: str, text: str, pos: int, end: int) -> tuple[list[str | None], str | None]:
    """The elements of a chunk without quotes at ``pos``..``end`` ("1,2, 3 ,4"), and
    the raw last piece if it runs into a backslash or quote (``tail``, "" after a
    final comma). A piece left empty is an element missing before that comma."""
    pieces = chunk.split(",")
    tail = pieces.pop() if end < len(text) and text[end] in '\\"' else None
    elements = pieces
    spaced = _HAS_SPACE(chunk) is not None
    if spaced:  # str.strip per piece, called from C by map()
        elements = list(map(str.strip, pieces, itertools.repeat(PG_SPACE)))
    if (spaced or ",," in chunk or chunk[-1] == ",") and "" in elements:
        blank = elements.index("")
        if blank < len(elements) - 1 or tail is not None:
            comma = pos + sum(len(p) + 1 for p in pieces[: blank + 1]) - 1
            raise Invalid(comma, "expected an element before ','")
        elements.pop()  # "1, }": the comma is read, no element after it
        if spaced:  # else elements is pieces
            pieces.pop()
        tail = ""
    if "NULL" in chunk.upper():  # each NULL spelling is None, in one C-level pass
        return list(map(NULL_SPELLINGS.get, elements, elements)), tail
    return elements, tail  # type: ignore[return-value]


def _quoted_only(chunk: str) -> list[str | None] | None:
    """The contents of a chunk of quoted elements without escapes or spaces between
    them ('"a","b"'), else None. Split at '","': if no piece holds a quote, each piece
    was one element's contents and the chunk is a well-formed run."""
    if chunk[0] != '"' or chunk[-1] != '"' or "\\" in chunk:
        return None
    parts = chunk[1:-1].split('","')
    if chunk.count('"') != 2 * len(parts):
        return None
    return cast("list[str | None]", parts)


def _run_elements(run: str, text: str, after: int) -> tuple[list[str | None], str | None]:
    """The element texts of a run (None for NULL) and, if its last element is
    unquoted and the run is followed by a backslash or quote (``text[after]``), that
    element's text, left out of the list: _unquoted reads it, to a longer element
    with escapes or to an error."""
    elements = _RUN_ELEMENTS.findall(run)
    tail = None
    if elements[-1][0] != '"' and after < len(text) and text[after] in '\\"':
        tail = elements.pop()
    return _texts(elements), tail


# A one-dimensional array with quoted elements ('{"a b",c,"d\\"e",NULL}') is turned into
# the JSON array it spells ('["a b","c","d\\"e",null]') and read by the json module's C
# scanner: a 1 MB array of quoted or mixed elements cost 50-100 ms in the token loop
# and the run splitting below, and costs a few C-level passes this way. The text is
# split at its quotes (after parking the two escapes array_out writes, \\ and \",
# on control characters that the text must not hold): the even pieces are outside
# quotes, and joined with \x02 standing for each quoted element they must read
# "{E,E,...}" with E a quoted element or a plain one (no whitespace, braces, quotes
# or backslashes). Then each comma becomes '","', the braces '["' and '"]', the
# quotes around quoted elements go, and a bare NULL (any case) becomes null. Anything
# else (whitespace between elements, other escapes, dimensions, nesting) takes the
# token loop, which also gives every error its offset.
_PARKED: Final = ("\0", "\x01", "\x02", "\x03")
_PLAIN_ELEMENT: Final = r'[^{},"\\ \t\n\r\v\f\x00-\x03]++'
_FLAT_OUTSIDE: Final = re.compile(
    rf"\{{(?:\x02|{_PLAIN_ELEMENT})(?:,(?:\x02|{_PLAIN_ELEMENT}))*+\}}"
).fullmatch
# The first letter leads so that the regex engine scans for it at C speed.
_BARE_NULL: Final = re.compile(r"[nN](?<=[{,][nN])[uU][lL][lL](?=[,}])")
_JSON_ARRAY: Final = json.JSONDecoder(strict=False)  # raw control characters are text


def _flat_texts(text: str) -> list[str | None] | None:
    """The element texts of a one-dimensional array in the plain form above (None
    for NULL), or None if ``text`` is in any other form."""
    if text[:1] != "{" or text[-1:] != "}" or any(map(text.__contains__, _PARKED)):
        return None
    escaped = "\\" in text
    if escaped:
        text = text.replace("\\\\", "\0").replace('\\"', "\x01")
        if "\\" in text:
            return None
    if len(text) >= 4 and text[:2] == '{"' and text[-2:] == '"}':  # all quoted: one split
        inner = text[2:-2].replace('","', "\x02")
        if '"' not in inner:
            if escaped:
                inner = inner.replace("\0", "\\").replace("\x01", '"')
            return cast("list[str | None]", inner.split("\x02"))
    pieces = text.split('"')
    if not len(pieces) % 2:  # an odd number of quotes: one is unterminated
        return None
    outside = "\x02".join(pieces[0::2])
    if _FLAT_OUTSIDE(outside) is None:
        return None
    nulls = 0
    if "NULL" in outside.upper():  # one C pass; the regex stops at every n and N
        outside, nulls = _BARE_NULL.subn("\x03", outside)
    pieces[0::2] = ('["' + outside[1:-1].replace(",", '","') + '"]').split("\x02")
    body = "".join(pieces)
    if nulls:
        body = body.replace('"\x03"', "null")
    if escaped:
        body = body.replace("\0", "\\\\").replace("\x01", '\\"')
    try:
        return cast("list[str | None]", _JSON_ARRAY.decode(body))
    except ValueError:  # unreachable: the checks above leave valid JSON
        return None


def _parse_text(
    text: str,
) -> tuple[list[int], list[str | None], list[_Span], list[int] | None, list[int] | None]:
    """Tokenise array_in() syntax into (shape, element texts with None for NULL, spans
    for error offsets, given sizes, given lower bounds).

    Iterative, and every loop advances, so no input can hang or recurse deeply.
    """
    n = len(text)
    pos = _skip_space(text, 0)
    given_sizes = given_bounds = None
    if pos < n and text[pos] == "[":
        given_sizes, given_bounds, pos = _parse_dims(text, pos)
        pos = _skip_space(text, pos)
    if pos >= n or text[pos] != "{":
        raise Invalid(pos, "expected '{' to start an array")
    texts: list[str | None] = []
    spans: list[_Span] = []
    shape: list[int] = []  # size per depth, fixed by the first completed sub-array
    counts: list[int] = []  # items seen so far at each open depth
    ndim: int | None = None  # depth at which elements live
    depth = 0
    expect_item = True  # right after '{' or ','
    token = _TOKEN.match
    while True:
        if pos >= n:
            raise Invalid(pos, "unexpected end of array")
        match = token(text, pos)
        kind = match.lastgroup if match is not None else None
        if match is not None and kind is None:  # whitespace
            pos = match.end()
            continue
        ch = text[pos]
        if kind == "punct":
            if ch == "{":
                if not expect_item or (ndim is not None and depth >= ndim):
                    raise Invalid(pos, "unexpected '{'")
                if depth >= MAXDIM:
                    raise Invalid(pos, f"number of array dimensions exceeds the maximum ({MAXDIM})")
                if counts:
                    counts[-1] += 1
                depth += 1
                counts.append(0)
                pos += 1
                expect_item = True
                continue
            if ch == "}":
                count = counts.pop()
                if expect_item and count:  # "{1,}"
                    raise Invalid(pos, "expected an element before '}'")
                if count == 0:
                    if depth != 1 or counts or texts:
                        raise Invalid(
                            pos, "empty sub-array: multidimensional arrays need matching sub-arrays"
                        )
                    ndim = 0
                elif ndim is None:
                    ndim = depth
                if ndim and depth > len(shape):
                    shape.extend([0] * (depth - len(shape)))
                if ndim:
                    if shape[depth - 1] == 0:
                        shape[depth - 1] = count
                    elif shape[depth - 1] != count:
                        raise Invalid(
                            pos, "multidimensional arrays must have sub-arrays of matching sizes"
                        )
                depth -= 1
                pos += 1
                expect_item = False
                if depth == 0:
                    break
                continue
            if expect_item:
                raise Invalid(pos, "expected an element before ','")
            expect_item = True
            pos += 1
            continue
        # One element or a run of them, quoted or not.
        if not expect_item or depth == 0 or (ndim is not None and depth != ndim):
            raise Invalid(pos, f"unexpected character {ch!r}")
        if ndim is None:
            ndim = depth
        first = len(texts)
        if kind == "chunk":
            assert match is not None
            chunk, end = match.group("chunk"), match.end()
            quoted = _quoted_only(chunk) if '"' in chunk else None
            if quoted is not None:
                elements, tail = quoted, None
            elif '"' in chunk:
                run = _RUN.match(text, pos)
                assert run is not None  # a chunk starts with an element
                end = run.end()
                elements, tail = _run_elements(run.group(), text, _skip_space(text, end))
            else:
                elements, tail = _unquoted_run(chunk, text, pos, end)
            texts.extend(elements)
            spans.append((first, pos, RUN))
            counts[-1] += len(elements)
            pos = end
            expect_item = False
            if tail is None:
                continue
            # The last element runs into a backslash or quote: _unquoted reads it.
            pos = end - len(tail.lstrip(PG_SPACE))
            expect_item = True
            if pos == end:  # "1, " before the quote: the comma is read, no element yet
                continue
            first = len(texts)
        elif ch == '"':
            raise Invalid(pos, "unterminated quoted array element")
        element, end, escaped = _unquoted(text, pos)
        texts.append(None if not escaped and element.upper() == "NULL" else element)
        spans.append((first, pos, None))
        counts[-1] += 1
        pos = end
        expect_item = False
    pos = _skip_space(text, pos)
    if pos != n:
        raise Invalid(pos, "junk after closing right brace")
    return shape if ndim else [], texts, spans, given_sizes, given_bounds


_first_index: Final = operator.itemgetter(0)


def _element_offset(text: str, spans: list[_Span], texts: list[str | None], index: int) -> int:
    """The offset in ``text`` of element ``index`` (its opening quote or first
    character), from the spans _parse_text kept: a run is scanned again up to it (at
    C speed: an array of valid elements ending in a bad one is read in bulk)."""
    first, offset, kind = spans[bisect_right(list(map(_first_index, spans)), index) - 1]
    if kind is None:
        return offset
    run = text[offset : text.find("}", offset)]
    if '"' not in run and "\\" not in run and _HAS_SPACE(run) is None:
        # Bare elements between commas, each its text ("NULL" in some case for None).
        before = texts[first:index]
        return offset + sum(map(len, filter(None, before))) + 4 * before.count(None) + len(before)
    elements = itertools.islice(_RUN_ELEMENTS.finditer(text, offset), index - first, None)
    element = next(elements, None)
    return offset if element is None else element.start()  # None: unreachable


def _element_error(
    text: str, texts: list[str | None], spans: list[_Span], bad: ElementError, first: int = 0
) -> Invalid:
    """The error of the first element (in array order) that does not decode, with its
    offset in the whole array text: the first occurrence of the text that raised. The
    elements are numbered from ``first``."""
    index = texts.index(bad.token)  # type: ignore[arg-type]
    offset = _element_offset(text, spans, texts, index) + bad.error.offset
    return Invalid(offset, f"element {first + index}: {bad.error.reason}")


_MANY_BRACES: Final = 1024  # a brace in every 16 of the first characters


def make_text_decoder(
    element: Converter, bulk: BulkDecoder | None = None, whole: WholeDecoder | None = None
) -> object:
    """array_in() for ``element``. ``whole`` reads the entire text when it is in its
    form (see _bulk); else each distinct element text is decoded once (a 1 MB array of
    small elements holds few distinct ones), by ``bulk`` when it takes them all, else
    by the element's input function."""
    decode = element.decode_text

    def convert_all(distinct: list[str]) -> list[object]:
        return convert_ranges(distinct, bulk, decode)

    def decode_text(text: str) -> object:
        if whole is not None and text[:1] == "[":
            bounded = bounded_whole(text)
            if bounded is not None:
                return bounded
        read = whole(text) if whole is not None else None
        if isinstance(read, list):
            return read
        if not isinstance(read, Declined) or (read.before is None and read.later is None):
            return parsed(text, None)
        # The whole reader stopped after the first elements and made their values.
        start = read.offset
        if start is None or text.find("{", start) >= 0 or text[_skip_space(text, start)] in ",}":
            return parsed(text, read.values_before())
        # The rest holds no sub-array and begins with an element: it is parsed as an
        # array of its own (the bulk of an array of valid elements ending in a bad one
        # is neither split nor scanned again), its errors moved to where they are in
        # the whole text.
        try:
            rest = parsed("{" + text[start:], None, read.index)
        except Invalid as err:
            raise Invalid(err.offset + start - 1, err.reason) from None
        return cast(list[object], read.values_before()) + cast(list[object], rest)

    def bounded_whole(text: str) -> object | None:
        """A one-dimensional array with its bounds ("[0:2]={1,2,3}") read whole, if the
        whole reader takes the part after them, as many elements as they say."""
        assert whole is not None
        sizes, bounds, pos = _parse_dims(text, 0)
        values = whole(text[_skip_space(text, pos) :]) if len(sizes) == 1 else None
        if isinstance(values, list) and [len(values)] == sizes:
            return _result(values, sizes, bounds)
        return None

    def parsed(text: str, before: list[object] | None, first: int = 0) -> object:
        """The array ``text``, the values of its first elements ``before`` given, its
        elements numbered from ``first`` in errors."""
        flat = _flat_texts(text) if '"' in text else None
        if flat:
            try:
                return converted(flat, before, first)
            except ElementError as bad:
                # A flat array's elements are those of one run from offset 1.
                raise _element_error(text, flat, [(0, 1, RUN)], bad, first) from None
        # Nested: only with many sub-arrays, each a step of the token loop (a few cost
        # less than the form's passes over every element).
        many = text[:2] == "{{" and text.count("{", 0, _MANY_BRACES) >= _MANY_BRACES // 16
        form = nested_texts(text) if many else escaped_texts(text)
        if form is not None:
            shape, texts = form
            if (
                len(shape) > 1
                and whole is not None
                and None not in texts
                and not few_distinct(",".join(cast(list[str], texts[:SAMPLE])))
            ):
                # The elements of a multidimensional array, as one array for the whole
                # reader (numbers, bare intervals and addresses: its form or none),
                # unless they repeat (the table of distinct texts does better then).
                values = whole("{" + ",".join(cast(list[str], texts)) + "}")
                if isinstance(values, list):
                    return _result(values, shape, [1] * len(shape))
                if isinstance(values, Declined) and values.before is not None:
                    # Those before it are valid: if it is not, it is the first bad one.
                    index = values.index
                    try:
                        decode(cast(str, texts[index]))
                    except Invalid as err:
                        offset = opening(text, element_start(text, index)) + err.offset
                        raise Invalid(offset, f"element {first + index}: {err.reason}") from None
            try:
                values = converted(texts, before if len(shape) == 1 else None, first)
            except ElementError as bad:
                index = texts.index(bad.token)  # type: ignore[arg-type]
                offset = opening(text, element_start(text, index)) + bad.error.offset
                raise Invalid(offset, f"element {first + index}: {bad.error.reason}") from None
            return _result(values, shape, [1] * len(shape))
        shape, texts, spans, sizes, bounds = _parse_text(text)
        if sizes is not None and bounds is not None:
            if shape and sizes != shape:
                raise Invalid(0, "array dimensions do not match the array contents")
            if not shape:
                bounds = []
        else:
            bounds = [1] * len(shape)

        try:
            values = converted(texts, before if len(shape) == 1 else None, first)
        except ElementError as bad:
            raise _element_error(text, texts, spans, bad, first) from None
        return _result(values, shape, bounds)

    def converted(items: list[str | None], before: list[object] | None, first: int) -> list[object]:
        """_each_once_after; for the rest of an array that a whole reader stopped in
        (``first`` elements before it), the element it stopped at is decoded alone
        first: most often the bad one, it is then found without converting the rest."""
        if first and items and items[0] is not None:
            try:
                decode(items[0])
            except Invalid as err:
                raise ElementError(items[0], err) from None
        return _each_once_after(before, items, convert_all)

    return decode_text


# --------------------------------------------------------------------------- binary


def _pairs(pair: str, count: int) -> struct.Struct:
    """A struct reading ``count`` (length, element) pairs in one call: a flat tuple is
    sliced apart at C speed, where iter_unpack's tuples cost ten times as much to
    regroup."""
    return struct.Struct("!" + pair * count)


@functools.lru_cache(maxsize=256)
def _run_of(length: int, count: int) -> struct.Struct:
    return _pairs(f"i{length}s", count)


_RUN_FIRST: Final = 16  # elements in the first guess of a run, and fewest kept to pay
_RUN_MAX: Final = 4096  # elements split by one struct call at most
_STEPS_MAX: Final = 1024  # single steps between guesses, when they keep failing


def _binary_elements(
    data: bytes, pos: int, total: int, items: list[bytes | None] | None = None, first: int = 0
) -> list[bytes | None]:
    """The ``total`` elements from ``pos`` on (None for NULL; numbered from ``first`` in
    errors), checking every length against what is left. When all elements have the
    first one's length, the layout is known in advance and struct splits it at C
    speed. Otherwise the lengths chain, but sizes come in runs (numbers of one digit
    count, texts of one length): the next elements are guessed to have the current
    one's length and split by one struct call, as many as have it kept, the guess
    growing while it holds. Guesses that keep failing (sizes that alternate) are spaced
    out by more and more single steps."""
    n = len(data)
    if n - pos >= 4:
        (size,) = INT32.unpack_from(data, pos)
        if size >= 0 and n - pos == total * (4 + size):
            flat = _pairs(f"i{size}s", total).unpack_from(data, pos)
            if flat[0::2].count(size) == total:
                return list(flat[1::2])
    items = [] if items is None else items  # the caller's: what was read before an error
    runs: dict[int, int] = {}  # element length -> the next guess for a run of it
    index, steps = 0, 0
    while index < total:
        if steps:
            count = min(steps, total - index)
            pos = _steps(data, pos, first + index, count, items)
            index += count
            if index == total:
                break
        length = INT32.unpack_from(data, pos)[0] if n - pos >= 4 else -1
        run = runs.get(length, _RUN_FIRST)
        guess = min(run, total - index, (n - pos) // (4 + length)) if length >= 0 else 0
        if guess < 2:  # NULL, or no room for two
            steps = min(2 * steps, _STEPS_MAX) if steps else 1
            continue
        flat = _run_of(length, guess).unpack_from(data, pos)
        lengths = flat[0::2]
        kept = guess
        if lengths.count(length) == guess:
            runs[length], steps = min(2 * run, _RUN_MAX), 0
        else:
            # The first element of another length ends the run (the first has it).
            other = map(operator.ne, lengths, itertools.repeat(length))
            kept = next(itertools.compress(itertools.count(), other))
            if kept < _RUN_FIRST:  # a guess that did not pay: step more before the next
                runs[length] = _RUN_FIRST
                steps = min(2 * steps, _STEPS_MAX) if steps else 1
            else:  # the next run of this length is guessed one longer than this one
                runs[length], steps = kept + 1, 0
        items.extend(cast(tuple[bytes, ...], flat[1 : 2 * kept : 2]))
        index += kept
        pos += kept * (4 + length)
        if kept < guess:
            # The element that ended the run: its length word was read where it is.
            other = lengths[kept]
            if other == -1:
                items.append(None)
            elif 0 <= other <= n - pos - 4:
                items.append(data[pos + 4 : pos + 4 + other])
            else:
                raise Invalid(pos, f"element {first + index}: invalid length {other}")
            index += 1
            pos += 4 + max(other, 0)
    if pos != n:
        raise Invalid(pos, f"expected end of array, found {n - pos} more bytes")
    return items


def _steps(data: bytes, pos: int, first: int, count: int, items: list[bytes | None]) -> int:
    """Elements ``first`` to ``first + count`` read one by one into ``items``; the
    position after them."""
    n = len(data)
    append = items.append
    unpack_int = INT32.unpack_from
    for index in range(first, first + count):
        if n - pos < 4:
            raise Invalid(pos, f"expected the length of element {index}, found end of data")
        (length,) = unpack_int(data, pos)
        pos += 4
        if length == -1:
            append(None)
            continue
        if length < 0 or length > n - pos:
            raise Invalid(pos - 4, f"element {index}: invalid length {length}")
        append(data[pos : pos + length])
        pos += length
    return pos


def _each_once_at(
    raws: list[bytes | None],
    convert: Callable[[list[bytes]], list[object]],
    pos: int,
    first: int = 0,
) -> list[object]:
    """_each_once over binary elements read from ``pos`` (numbered from ``first``); an
    element that does not decode raises its error at its bytes' offset."""
    try:
        return _each_once(raws, convert)
    except ElementError as bad:
        index = raws.index(bad.token)  # type: ignore[arg-type]
        # Each element before it: a 4-byte length and its bytes (none for NULL).
        start = pos + 4 * (index + 1) + sum(map(len, filter(None, raws[:index])))
        reason = f"element {first + index}: {bad.error.reason}"
        raise Invalid(start + bad.error.offset, reason) from None


def make_binary_decoder(
    element: Converter,
    whole: tuple[str, BinaryBulk | None] | None = None,
    bulk: BinaryElements | None = None,
    area: BinaryArea | None = None,
) -> object:
    """array_recv() for ``element``. Each distinct element is decoded once, by ``bulk``
    when it takes them all (see _bulk.BULK_BINARY_ELEMENTS), else one by one; a
    fixed-size type whose elements are all present is unpacked whole when ``whole``
    gives its struct code and the conversion of the numbers (see _bulk.BULK_BINARY),
    and a variable-sized one is read from the whole element area by ``area`` when it
    takes it (see _bulk.BULK_BINARY_AREAS)."""
    decode = element.decode_binary

    def convert_all(distinct: list[bytes]) -> list[object]:
        return convert_ranges(distinct, bulk, decode)

    element_oid = element.oid
    unpack_header, unpack_dim = ARRAY_HEADER.unpack_from, DIMENSION.unpack_from
    code, convert = whole if whole else ("", None)
    pair = struct.Struct(f"!i{code}") if code else None

    def decode_binary(data: bytes) -> object:
        n = len(data)
        if n < 12:
            raise Invalid(n, f"expected a 12-byte array header, found {n} bytes")
        ndim, flags, oid = unpack_header(data)
        if not 0 <= ndim <= MAXDIM:
            raise Invalid(0, f"invalid number of dimensions {ndim} (maximum {MAXDIM})")
        if flags not in (0, 1):
            raise Invalid(4, f"invalid array flags {flags}")
        if oid != element_oid:
            raise Invalid(8, f"wrong element type: expected OID {element_oid}, found {oid}")
        pos = 12
        if n < pos + 8 * ndim:
            raise Invalid(n, f"expected {ndim} dimensions of 8 bytes, found {n - pos} bytes")
        shape: list[int] = []
        bounds: list[int] = []
        total = 1 if ndim else 0
        for _ in range(ndim):
            size, low = unpack_dim(data, pos)
            if size < 0:
                raise Invalid(pos, f"invalid array dimension size {size}")
            if low + size - 1 > (1 << 31) - 1:
                raise Invalid(pos + 4, "array lower bound plus size overflows int32")
            shape.append(size)
            bounds.append(low)
            total *= size
            pos += 8
            # Every element takes at least its 4-byte length: a lying dimension
            # fails here, before anything is allocated.
            if total * 4 > n - pos:
                raise Invalid(pos, f"array claims {total} elements, only {n - pos} bytes left")
        if total == 0:
            # array_recv() turns any zero-sized dimension into the empty array.
            if pos != n:
                raise Invalid(pos, f"expected end of empty array, found {n - pos} more bytes")
            return []
        if pair is not None and n - pos == total * pair.size:
            flat = _pairs(f"i{code}", total).unpack_from(data, pos)
            if flat[0::2].count(pair.size - 4) == total:
                numbers = list(flat[1::2])
                values = numbers if convert is None else convert(numbers)
                if values is not None:
                    return _result(values, shape, bounds)
        read = area(data, pos, total) if area is not None else None
        if isinstance(read, list):
            return _result(read, shape, bounds)
        if isinstance(read, Declined) and read.before and read.offset is not None:
            # The area reader stopped at an element, the values before it made: the
            # rest is read from there (its elements numbered on from them).
            rest = elements(data, read.offset, total - read.index, read.index)
            return _result(read.before + rest, shape, bounds)
        return _result(elements(data, pos, total, 0), shape, bounds)

    def elements(data: bytes, pos: int, count: int, first: int) -> list[object]:
        """The values of the ``count`` elements from ``pos``, numbered from ``first``."""
        raws: list[bytes | None] = []
        try:
            raws = _binary_elements(data, pos, count, raws, first)
        except Invalid as bad_length:
            # Lengths are all checked before any element is decoded; the first
            # error in array order may be an element before the bad length.
            _each_once_at(raws, convert_all, pos, first)
            raise bad_length from None
        return _each_once_at(raws, convert_all, pos, first)

    return decode_binary


def make_binary_encoder(element: Converter, name: str) -> object:
    encode = element.encode_binary
    element_oid = element.oid
    pack_int = INT32.pack

    def encode_binary(value: object) -> bytes:
        shape, bounds, items = _array_parts(value, name)
        has_null = any(item is None for item in items)
        parts = [ARRAY_HEADER.pack(len(shape), 1 if has_null else 0, element_oid)]
        parts.extend(DIMENSION.pack(size, low) for size, low in zip(shape, bounds, strict=True))
        for item in items:
            if item is None:
                parts.append(_NULL_LENGTH)
            else:
                data = encode(item)
                parts.append(pack_int(len(data)))
                parts.append(data)
        return b"".join(parts)

    return encode_binary
