"""array_in()'s token loop (src/backend/utils/adt/arrayfuncs.c): any array text, with
dimensions, quotes, escapes and whitespace, read into its shape and element texts, and
the offsets of its elements for the errors of their conversion. The common forms are read
without it (codec.values._array_forms); this loop takes the rest and words every syntax
error as array_in() does."""

from __future__ import annotations

import itertools
import operator
import re
from bisect import bisect_right
from typing import Final, cast

from codec.values._array_forms import MAXDIM, NULL_SPELLINGS
from codec.values._common import PG_SPACE, Invalid, has_pg_space
from codec.values._ranges import ElementError


def parse_dims(text: str, pos: int) -> tuple[list[int], list[int], int]:
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


def skip_space(text: str, pos: int) -> int:
    match = _SPACE_RUN.match(text, pos)  # always matches, maybe nothing
    return match.end() if match is not None else pos


# Where the elements came from, to point an element's error at its offset without
# recording an offset per element: (index of the first element, offset of the token,
# RUN for a run of elements / None for a single element).
RUN: Final = "run"
Span = tuple[int, int, str | None]


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


def element_at(text: str, pos: int) -> str | None:
    """The text of the element at ``pos`` of a well-formed array text (quoted: its
    contents unescaped; None for NULL)."""
    element = _RUN_ELEMENTS.match(text, pos)
    assert element is not None  # an element begins there
    return _element_text(element.group())


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
    spaced = has_pg_space(chunk) is not None
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


def parse_text(
    text: str,
) -> tuple[list[int], list[str | None], list[Span], list[int] | None, list[int] | None]:
    """Tokenise array_in() syntax into (shape, element texts with None for NULL, spans
    for error offsets, given sizes, given lower bounds).

    Iterative, and every loop advances, so no input can hang or recurse deeply.
    """
    n = len(text)
    pos = skip_space(text, 0)
    given_sizes = given_bounds = None
    if pos < n and text[pos] == "[":
        given_sizes, given_bounds, pos = parse_dims(text, pos)
        pos = skip_space(text, pos)
    if pos >= n or text[pos] != "{":
        raise Invalid(pos, "expected '{' to start an array")
    texts: list[str | None] = []
    spans: list[Span] = []
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
                elements, tail = _run_elements(run.group(), text, skip_space(text, end))
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
    pos = skip_space(text, pos)
    if pos != n:
        raise Invalid(pos, "junk after closing right brace")
    return shape if ndim else [], texts, spans, given_sizes, given_bounds


_first_index: Final = operator.itemgetter(0)


def _element_offset(text: str, spans: list[Span], texts: list[str | None], index: int) -> int:
    """The offset in ``text`` of element ``index`` (its opening quote or first
    character), from the spans parse_text kept: a run is scanned again up to it (at
    C speed: an array of valid elements ending in a bad one is read in bulk)."""
    first, offset, kind = spans[bisect_right(list(map(_first_index, spans)), index) - 1]
    if kind is None:
        return offset
    run = text[offset : text.find("}", offset)]
    if '"' not in run and "\\" not in run and has_pg_space(run) is None:
        # Bare elements between commas, each its text ("NULL" in some case for None).
        before = texts[first:index]
        return offset + sum(map(len, filter(None, before))) + 4 * before.count(None) + len(before)
    elements = itertools.islice(_RUN_ELEMENTS.finditer(text, offset), index - first, None)
    element = next(elements, None)
    return offset if element is None else element.start()  # None: unreachable


def element_error(
    text: str, texts: list[str | None], spans: list[Span], bad: ElementError, first: int = 0
) -> Invalid:
    """The error of the first element (in array order) that does not decode, with its
    offset in the whole array text: the first occurrence of the text that raised. The
    elements are numbered from ``first``."""
    index = texts.index(bad.token)  # type: ignore[arg-type]
    offset = _element_offset(text, spans, texts, index) + bad.error.offset
    return Invalid(offset, f"element {first + index}: {bad.error.reason}")
