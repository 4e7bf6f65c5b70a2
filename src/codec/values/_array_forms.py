"""Three forms of array text read without array_in's token loop (codec.values._array_tokens),
which takes a Python-level step per sub-array, per element with a backslash and per
change between quoted and unquoted elements: a 1 MB two-dimensional array of small
numbers took 190-300 ms, one of elements with a backslash each 310-360 ms, one of
quoted and unquoted elements 50-100 ms.

* flat_texts: a one-dimensional array of quoted and plain elements, read as the JSON
  array it spells (see the comment above it).
* nested_texts: a multidimensional array of unquoted elements without backslashes
  ("{{1,2},{3,4}}"). Its structure, the braces and commas of its UTF-8 bytes alone,
  must be the rectangular one its first sub-arrays give; what stands between two of
  them is an element where it follows "{" or "," and precedes "," or "}", else it
  must be whitespace. The elements are then the pieces between commas once the braces
  are read as commas.
* escaped_texts: a one-dimensional array of unquoted elements whose backslashes escape
  characters of no meaning to the syntax ("{a\\b,c}"): the escapes change no
  structure, so the elements are the pieces between commas without their backslashes,
  and one that had a backslash is never NULL.

Anything else (quotes, escaped braces, commas, quotes, backslashes or whitespace,
dimensions, ragged or empty sub-arrays, empty elements) is left to the token loop,
which also words every error; element_start gives an element's offset for the errors
of its conversion in the last two.
"""

from __future__ import annotations

import itertools
import json
import re
from itertools import compress, repeat
from typing import Final, cast

from codec.values._common import PG_SPACE, has_pg_space

MAXDIM: Final = 6  # src/include/utils/array.h
NULL_SPELLINGS: Final[dict[str, None]] = dict.fromkeys(
    "".join(spelling) for spelling in itertools.product(*zip("NULL", "null", strict=True))
)
_NOT_STRUCTURE: Final = bytes(b for b in range(256) if b not in b"{},")  # deleted
_BRACES_AS_COMMAS: Final = str.maketrans("{}", ",,")
# Per structure character: may an element follow it ("{" and ","), precede it ("," and "}").
_FOLLOWED: Final = bytes.maketrans(b"{,}", b"\x01\x01\x00")
_PRECEDED: Final = bytes.maketrans(b"{,}", b"\x00\x01\x01")
_NOT: Final = bytes.maketrans(b"\x00\x01", b"\x01\x00")
_ESCAPED_SYNTAX: Final = re.compile(r'\\(?:[{},"\\ \t\n\r\v\f]|$)').search

Form = tuple[list[int], list[str | None]]  # shape, element texts (None for NULL)


def nested_texts(text: str) -> Form | None:
    """The shape and element texts of a multidimensional array in the form above."""
    if text[:2] != "{{" or text[-1:] != "}" or '"' in text or "\\" in text:
        return None
    structure = text.encode("utf-8", "surrogatepass").translate(None, _NOT_STRUCTURE)
    shape = _rectangle(structure)
    if shape is None:
        return None
    pieces = text.translate(_BRACES_AS_COMMAS).split(",")[1:-1]  # between two of them
    # A piece is an element where the character before it may be followed by one and
    # the character after it may be preceded by one: one AND of the two as integers.
    size = len(structure) - 1
    follows = int.from_bytes(structure[:-1].translate(_FOLLOWED), "big")
    precedes = int.from_bytes(structure[1:].translate(_PRECEDED), "big")
    slots = (follows & precedes).to_bytes(size, "big")
    if "".join(compress(pieces, slots.translate(_NOT))).strip(PG_SPACE):
        return None  # something other than whitespace outside the elements
    elements = _elements(list(compress(pieces, slots)), text)
    return None if elements is None else (shape, elements)


def nested_flat(text: str) -> tuple[list[int], str] | None:
    """The shape of a multidimensional array in the form above whose sub-arrays follow
    one another with nothing between them ("{{1,2},{3,4}}"), and its elements as the
    text of a one-dimensional array ("{1,2,3,4}"), for a whole reader: the elements are
    never cut apart nor joined again. The brace runs between sub-arrays become commas;
    any other brace left (whitespace between sub-arrays) declines the form."""
    if text[:2] != "{{" or text[-1:] != "}" or '"' in text or "\\" in text:
        return None
    shape = _rectangle(text.encode("utf-8", "surrogatepass").translate(None, _NOT_STRUCTURE))
    if shape is None:
        return None
    ndim = len(shape)
    flat = text[ndim - 1 : len(text) - ndim + 1]
    for depth in range(ndim - 1, 0, -1):
        flat = flat.replace("}" * depth + "," + "{" * depth, ",")
    if "{" in flat[1:] or "}" in flat[:-1]:
        return None
    return shape, flat


def _rectangle(structure: bytes) -> list[int] | None:
    """The sizes of an array of 2 to MAXDIM dimensions whose structure (its braces and
    commas) is ``structure``, if all its sub-arrays match the first ones."""
    ndim = len(structure) - len(structure.lstrip(b"{"))
    if not 2 <= ndim <= MAXDIM:
        return None
    sizes: list[int] = []
    inner = b""
    for depth in range(ndim, 0, -1):  # the first sub-array at each depth, innermost first
        start = depth - 1
        close = structure.find(b"}" * (ndim - depth + 1), start)
        if close < 0:
            return None
        first = structure[start : close + ndim - depth + 1]
        if inner:
            count = (len(first) - 1) // (len(inner) + 1)
            if first != b"{" + (inner + b",") * (count - 1) + inner + b"}":
                return None
        else:
            count = first.count(b",") + 1
            if first != b"{" + b"," * (count - 1) + b"}":  # a brace inside ("{1,{1}")
                return None
        sizes.insert(0, count)
        inner = first
    return sizes if inner == structure else None


def escaped_texts(text: str) -> Form | None:
    """The shape and element texts of a one-dimensional array in the form above."""
    if text[:1] != "{" or text[-1:] != "}" or '"' in text or "\\" not in text:
        return None
    body = text[1:-1]
    if "{" in body or "}" in body or _ESCAPED_SYNTAX(body) is not None:
        return None
    pieces = body.split(",")
    if has_pg_space(body) is not None:
        pieces = list(map(str.strip, pieces, repeat(PG_SPACE)))
    if "" in pieces:
        return None
    texts: list[str | None] = list(map(str.replace, pieces, repeat("\\"), repeat("")))
    if "NULL" in body.upper():  # a bare NULL spelling is None; an escaped one is text
        texts = list(map(NULL_SPELLINGS.get, pieces, texts))
    return [len(texts)], texts


def _elements(pieces: list[str], text: str) -> list[str | None] | None:
    """The texts of the unquoted elements without backslashes of ``text`` (None for
    NULL), or None if one is empty."""
    if has_pg_space(text) is not None:
        pieces = list(map(str.strip, pieces, repeat(PG_SPACE)))
    if "" in pieces:
        return None
    if "NULL" in text.upper():  # each NULL spelling is None, in one C-level pass
        return list(map(NULL_SPELLINGS.get, pieces, pieces))
    return pieces  # type: ignore[return-value]


def element_start(text: str, index: int) -> int:
    """Where element ``index`` of an array text of unquoted elements, or of elements
    without commas in their quotes, begins ("{1, 2}"): one comma after the element before
    it, past whitespace. In a nested one, braces may stand before it too (opening())."""
    found = re.compile(f"\\{{(?:[^,]*+,){{{index}}}[ \\t\\n\\r\\v\\f]*+").match(text)
    return found.end() if found is not None else 0


_OPENINGS: Final = re.compile(r"[{ \t\n\r\v\f]*+")


def opening(text: str, pos: int) -> int:
    """``pos`` past the opening braces and whitespace there (a nested array's element)."""
    return _OPENINGS.match(text, pos).end()  # type: ignore[union-attr]  # (always matches)


# A one-dimensional array with quoted elements ('{"a b",c,"d\\"e",NULL}') is turned into
# the JSON array it spells ('["a b","c","d\\"e",null]') and read by the json module's C
# scanner: a 1 MB array of quoted or mixed elements cost 50-100 ms in the token loop
# and its run splitting (_array_tokens), and costs a few C-level passes this way. The text is
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


def flat_texts(text: str) -> list[str | None] | None:
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
