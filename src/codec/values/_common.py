"""Pieces shared by the per-type converters.

Converters raise :class:`Invalid` (offset + reason) rather than :class:`DecodeError`
because they do not know their own name: the same int decoder serves int2, int4 and
int8, and an element decoder does not know it sits inside an array. The dispatch layer
in ``_catalogue`` turns :class:`Invalid` into ``DecodeError("int4 text value", ...)``,
and the array decoder shifts the offset to the element's position first.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from codec.errors import EncodeError


class Invalid(Exception):  # noqa: N818 (internal signal, never escapes the package)
    """Malformed input at ``offset``; re-raised as DecodeError by the dispatcher."""

    __slots__ = ("offset", "reason")

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(offset, reason)
        self.offset = offset
        self.reason = reason


TextDecoder = Callable[[str], object]
TextEncoder = Callable[[object], str]
BinaryDecoder = Callable[[bytes], object]
BinaryEncoder = Callable[[object], bytes]


@dataclass(frozen=True, slots=True)
class Converter:
    """The four conversions of one scalar type, exactly PostgreSQL's four I/O functions.

    ``decode_text`` is typinput, ``encode_text`` typoutput, ``decode_binary`` typreceive
    and ``encode_binary`` typsend.
    """

    oid: int
    name: str
    array_oid: int
    python_type: str
    decode_text: TextDecoder
    encode_text: TextEncoder
    decode_binary: BinaryDecoder
    encode_binary: BinaryEncoder


# array_isspace() in src/backend/utils/adt/arrayfuncs.c and scanner_isspace(): the
# whitespace PostgreSQL's input functions skip. Python's str.strip() also strips
# Unicode spaces, which PostgreSQL keeps, so every converter strips with this set.
PG_SPACE: Final = " \t\n\r\v\f"
#: The first of PG_SPACE in a text (a match), or None: whether it has any.
has_pg_space: Final = re.compile(r"[ \t\n\r\v\f]").search


def type_error(what: str, value: object, expected: str) -> EncodeError:
    """The EncodeError for a Python value of the wrong type."""
    return EncodeError(f"{what} needs {expected}, got {type(value).__name__}: {value!r}")


def check_exact(data: bytes, size: int) -> None:
    """Raise :class:`Invalid` unless ``data`` is exactly ``size`` bytes."""
    if len(data) != size:
        raise Invalid(min(len(data), size), f"expected {size} bytes, found {len(data)}")


def utf8(data: bytes) -> str:
    """Decode server-encoding (UTF-8) bytes; NUL is not allowed in any PostgreSQL text."""
    try:
        text = data.decode()
    except UnicodeDecodeError as err:
        raise Invalid(err.start, f"expected UTF-8, found byte 0x{data[err.start]:02x}") from err
    nul = text.find("\0")
    if nul >= 0:
        raise Invalid(len(text[:nul].encode()), "expected text, found a NUL byte")
    return text


# UTF-16 surrogates: a Python str can hold them alone (from surrogateescape, JSON
# "\ud800" or a careless slice), but no UTF-8 text can, so no PostgreSQL value in a
# UTF8 database can: the server refuses their bytes (ED A0 80...) as "invalid byte
# sequence for encoding UTF8" before any input function runs (pg_verify_mbstr()).
_SURROGATE: Final = re.compile("[\ud800-\udfff]").search


def lone_surrogate(text: str) -> int:
    """The index of the first lone surrogate in ``text``, or -1 (one C-level scan,
    skipped for ASCII)."""
    if text.isascii():
        return -1
    found = _SURROGATE(text)
    return -1 if found is None else found.start()


def surrogate_reason(text: str, index: int) -> str:
    return f"expected UTF-8 text, found the lone surrogate U+{ord(text[index]):04X}"


def no_nul(text: str, what: str) -> str:
    """Raise EncodeError if ``text`` contains NUL or a lone surrogate, which no
    PostgreSQL text value can."""
    if "\0" in text:
        raise EncodeError(f"{what} must not contain a NUL character: {text!r}")
    index = lone_surrogate(text)
    if index >= 0:
        raise EncodeError(f"{what}: {surrogate_reason(text, index)} at index {index}")
    return text


SAMPLE: Final = 256  # elements few_distinct() looks at


def few_distinct(joined: str) -> bool:
    """Whether the first SAMPLE elements of ``joined`` (elements joined by commas) mostly
    repeat one another: short elements that do are few distinct ones, each converted
    once by a table of them; a sample, as a set of them all costs what it saves."""
    sample = joined.split(",", SAMPLE)[:SAMPLE]
    return 2 * len(set(sample)) <= len(sample)
