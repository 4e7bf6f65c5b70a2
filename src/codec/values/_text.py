"""String-like types: text, varchar, bpchar, name, "char", bytea, uuid, json(b) and
macaddr."""

from __future__ import annotations

import codecs
import json
import re
import uuid
from collections import deque
from collections.abc import Iterable, Iterator
from itertools import compress, count, repeat
from operator import add, and_, ge, gt, itemgetter, mul, neg, or_, setitem, sub
from typing import Final

from codec.errors import EncodeError
from codec.values._common import (
    PG_SPACE,
    SAMPLE,
    BinaryEncoder,
    Converter,
    Invalid,
    TextEncoder,
    check_exact,
    few_distinct,
    no_nul,
    type_error,
    utf8,
)

# --------------------------------------------------------------------------- text


def _text_in(text: str) -> str:
    if "\0" in text:
        raise Invalid(text.index("\0"), "expected text, found a NUL character")
    return text


def _make_text_out(name: str) -> tuple[TextEncoder, BinaryEncoder]:
    def encode_text(value: object) -> str:
        if type(value) is not str:
            raise type_error(name, value, "str")
        return no_nul(value, name)

    def encode_binary(value: object) -> bytes:
        if type(value) is not str:
            raise type_error(name, value, "str")
        return no_nul(value, name).encode()

    return encode_text, encode_binary


def _text_conv(oid: int, name: str, array_oid: int) -> Converter:
    out, send = _make_text_out(name)
    return Converter(oid, name, array_oid, "str", _text_in, out, utf8, send)


TEXT: Final = _text_conv(25, "text", 1009)
VARCHAR: Final = _text_conv(1043, "varchar", 1015)
# bpchar keeps its blank padding on output (bpcharout prints the stored value).
BPCHAR: Final = _text_conv(1042, "bpchar", 1014)

NAMEDATALEN: Final = 64


def _name_in(text: str) -> str:
    # namein() silently truncates to NAMEDATALEN - 1 bytes at a character boundary.
    _text_in(text)
    data = text.encode()
    if len(data) < NAMEDATALEN:
        return text
    return data[: NAMEDATALEN - 1].decode(errors="ignore")


def _name_out(value: object) -> str:
    if type(value) is not str:
        raise type_error("name", value, "str")
    if len(no_nul(value, "name").encode()) >= NAMEDATALEN:
        # Encoding it would let the server truncate it, so it could not round-trip.
        raise EncodeError(f"name must be at most {NAMEDATALEN - 1} bytes, got {value!r}")
    return value


def _name_recv(data: bytes) -> str:
    if len(data) >= NAMEDATALEN:
        # namerecv(): "identifier too long"
        raise Invalid(0, f"expected at most {NAMEDATALEN - 1} bytes, found {len(data)}")
    return utf8(data)


NAME: Final = Converter(
    19, "name", 1003, "str", _name_in, _name_out, _name_recv, lambda v: _name_out(v).encode()
)

# --------------------------------------------------------------------------- "char"

_OCTAL: Final = frozenset("01234567")


def _char_in(text: str) -> str:
    # charin() (PostgreSQL 15+, src/backend/utils/adt/char.c): "\ooo" is one byte in
    # octal; otherwise the first *byte* of the input, so "é" gives 0xC3.
    if len(text) == 4 and text[0] == "\\" and all(c in _OCTAL for c in text[1:]):
        byte = int(text[1:], 8)
        if byte > 0xFF:
            raise Invalid(1, f"expected an octal byte \\000-\\377, found {text!r}")
    elif not text:
        return ""
    else:
        byte = text.encode(errors="surrogatepass")[0]
    return chr(byte) if byte else ""


def _check_char(value: object) -> int:
    if type(value) is not str or len(value) > 1 or (value and ord(value) > 0xFF):
        raise type_error('"char"', value, "a str of length 0 or 1 with a code point below 256")
    if value == "\0":
        raise EncodeError('"char" spells the zero byte as "", not "\\0"')
    return ord(value) if value else 0


def _char_out(value: object) -> str:
    byte = _check_char(value)
    if byte >= 0x80:
        # charout() prints high-bit bytes as \ooo since PostgreSQL 15 so that the output
        # is valid in every server encoding.
        return f"\\{byte:03o}"
    return chr(byte) if byte else ""


def _char_recv(data: bytes) -> str:
    check_exact(data, 1)
    return chr(data[0]) if data[0] else ""


def _char_send(value: object) -> bytes:
    return bytes((_check_char(value),))


CHAR: Final = Converter(18, "char", 1002, "str", _char_in, _char_out, _char_recv, _char_send)

# --------------------------------------------------------------------------- bytea

_HEXDIGITS: Final = frozenset("0123456789abcdefABCDEF")
# Hex pairs, whitespace allowed before each and at the end; always matches (maybe nothing).
# Escape-format bytea: text without backslashes, "\\\\", or "\\ooo" with ooo <= 377.
_BYTEA_ESCAPED: Final = re.compile(r"(?:[^\\]++|\\\\|\\[0-3][0-7][0-7])*+")
_HEX_PAIRS: Final = re.compile(r"(?:[ \t\n\r\v\f]*+[0-9a-fA-F]{2})*+[ \t\n\r\v\f]*+")


def _bytea_in(text: str) -> bytes:
    # byteain() in src/backend/utils/adt/varlena.c: "\x" then hex pairs (whitespace
    # allowed between pairs), else the escape format where only "\\" and "\ooo" are
    # escapes and every other character is its UTF-8 bytes.
    if text.startswith("\\x"):
        # One C-speed pass finds where the pairs stop; bytes.fromhex skips the same
        # whitespace (space, \t \n \r \v \f) before each pair. A per-character loop
        # took 130 ms for 1 MB.
        pairs = _HEX_PAIRS.match(text, 2)
        end = pairs.end() if pairs is not None else 2
        if end == len(text):
            return bytes.fromhex(text[2:])
        if text[end] in _HEXDIGITS:
            raise Invalid(end + 1, "expected a second hex digit: odd number of digits")
        raise Invalid(end, f"expected a hex digit, found {text[end]!r}")
    if "\\" not in text:
        return _text_in(text).encode()
    # The escape format in two C-speed passes (a loop per escape took 115 ms for 1 MB):
    # a possessive regex finds the first bad backslash; once only "\\\\" and "\\ooo"
    # are left, Python's own bytes-literal unescaping reads them exactly as byteain does
    # (at most three octal digits, the first 0-3; every other byte as is).
    escaped = _BYTEA_ESCAPED.match(text)
    end = escaped.end() if escaped is not None else 0
    nul = text.find("\0", 0, end)
    if nul >= 0:
        raise Invalid(nul, "expected text, found a NUL character")
    if end != len(text):
        raise Invalid(end, "invalid escape: expected \\\\ or \\ooo (three octal digits)")
    return codecs.escape_decode(text.encode())[0]


def _bytea_out(value: object) -> str:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise type_error("bytea", value, "bytes")
    return "\\x" + bytes(value).hex()


def _bytea_send(value: object) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise type_error("bytea", value, "bytes")
    return bytes(value)


BYTEA: Final = Converter(17, "bytea", 1001, "bytes", _bytea_in, _bytea_out, bytes, _bytea_send)

# --------------------------------------------------------------------------- uuid

# string_to_uuid() in src/backend/utils/adt/uuid.c: optional matching braces, and an
# optional hyphen after any group of four hex digits except the last.
_UUID_RE: Final = re.compile(r"(\{?)([0-9a-fA-F]{4}(?:-?[0-9a-fA-F]{4}){7})(\}?)")


def _uuid_in(text: str) -> uuid.UUID:
    match = _UUID_RE.fullmatch(text)
    if match is None or len(match.group(1)) != len(match.group(3)):
        raise Invalid(0, f"expected a uuid, found {text[:50]!r}")
    return uuid.UUID(match.group(2).replace("-", ""))


def _uuid_out(value: object) -> str:
    if not isinstance(value, uuid.UUID):
        raise type_error("uuid", value, "uuid.UUID")
    return str(value)


def _uuid_recv(data: bytes) -> uuid.UUID:
    check_exact(data, 16)
    return uuid.UUID(bytes=data)


def _uuid_send(value: object) -> bytes:
    if not isinstance(value, uuid.UUID):
        raise type_error("uuid", value, "uuid.UUID")
    return value.bytes


UUID: Final = Converter(
    2950, "uuid", 2951, "uuid.UUID", _uuid_in, _uuid_out, _uuid_recv, _uuid_send
)

# --------------------------------------------------------------------------- json


def _reject_constant(name: str) -> object:
    # Python's json accepts NaN/Infinity/-Infinity; JSON and PostgreSQL do not.
    raise ValueError(f"{name} is not valid JSON")


# Numbers are only validated, never converted: json is kept as text by PostgreSQL, so
# an integer of any length is valid, while int() refuses more than 4300 digits
# (sys.int_max_str_digits) and would be quadratic below that.
_JSON: Final = json.JSONDecoder(parse_constant=_reject_constant, parse_int=str, parse_float=str)

# jsonb keeps numbers as numeric (jsonb_in -> numeric_in), so they overflow where numeric
# does: more than NUMERIC_WEIGHT_MAX + 1 base-10000 digits before the point (131072
# decimal digits), a display scale over NUMERIC_DSCALE_MAX, or an exponent beyond
# +-INT_MAX / 2: 22003 "value overflows numeric format". Checked on PostgreSQL 14-17,
# except that 14 and 15 also refuse zero with an exponent near that limit ("0e1073741823"),
# which 16 and 17 take, as this does.
_JSONB_INT_DIGITS: Final = 131072
_JSONB_DSCALE_MAX: Final = 0x3FFF
_JSONB_EXPONENT_MAX: Final = (2**31 - 1) // 2
# Only a number this long or with an exponent can overflow; other jsonb skips the check.
# The lookbehind starts the count only where a digit run starts: searched from every
# digit, runs just short of 16383 digits made 512 KB of jsonb take 12 s. The leading
# digit lets the engine skip to digits at C speed (50 ms per MB with the lookbehind
# first); ASCII text is checked faster still with its digits all made "0".
_JSONB_SUSPECT_RE: Final = re.compile(r"[0-9](?:(?<![0-9][0-9])[0-9]{16382}|[eE])").search
_ZERO_DIGITS: Final = str.maketrans("123456789", "000000000")
_LONG_RUN: Final = "0" * 16383


def jsonb_suspect(text: str) -> bool:
    """Whether ``text`` has a digit run of 16383 or more, or a digit before an "e"."""
    if not text.isascii():
        return _JSONB_SUSPECT_RE(text) is not None
    zeroed = text.translate(_ZERO_DIGITS)
    return _LONG_RUN in zeroed or "0e" in zeroed or "0E" in zeroed


def jsonb_long_run(text: str) -> bool:
    """Whether ``text`` has a digit run of 16383 or more (as jsonb_suspect finds them)."""
    if not text.isascii():
        return _JSONB_LONG_RUN_RE(text) is not None
    return _LONG_RUN in text.translate(_ZERO_DIGITS)


_JSONB_LONG_RUN_RE: Final = re.compile(r"[0-9](?<![0-9][0-9])[0-9]{16382}").search
_JSON_NUMBER: Final = re.compile(r"-?([0-9]++)(?:\.([0-9]++))?(?:[eE]([+-]?[0-9]++))?")


class _NumericOverflowError(ValueError):
    """A jsonb number numeric_in would refuse (internal: becomes Invalid)."""


def _jsonb_number(number: str) -> None:
    """Raise _NumericOverflowError if jsonb_in would refuse ``number`` (JSON number text)."""
    match = _JSON_NUMBER.fullmatch(number)
    assert match is not None  # the JSON scanner only passes numbers
    whole, frac, exp_text = match.group(1), match.group(2) or "", match.group(3)
    exp = 0
    if exp_text is not None:
        digits = exp_text.lstrip("+-").lstrip("0")
        if len(digits) > 10 or int(digits or "0") > _JSONB_EXPONENT_MAX:
            raise _NumericOverflowError(number)
        exp = int(exp_text)
    significant = (whole + frac).lstrip("0")
    if max(0, len(frac) - exp) > _JSONB_DSCALE_MAX or (
        significant and len(significant) - len(frac) + exp > _JSONB_INT_DIGITS
    ):
        raise _NumericOverflowError(number)


# An exponent's sign and a zero, so that an exponent of only zeros reads as 0.
_EXPONENT_SIGN: Final = ("0", "-0")


def json_numbers_decoder(floats: list[str]) -> json.JSONDecoder:
    """A decoder that checks JSON as _JSON does and appends the text of every number
    with a fraction or an exponent to ``floats`` (its scanner hands them over, never a
    string's digits), for jsonb_misfit."""
    return json.JSONDecoder(
        parse_constant=_reject_constant, parse_int=str, parse_float=floats.append
    )


def jsonb_misfit(floats: list[str]) -> int | None:
    """The index in ``floats`` (JSON number texts from json_numbers_decoder, in text with
    no digit run of 16383) of the first that _jsonb_number refuses, or None if every one
    passes its checks: by C-level passes over them all. Only an exponent can make such
    a number overflow, and JSON gives an integer part no leading zeros, so "0" is its
    only zero."""
    if _all_fit(floats):
        return None
    has_exponent = _exponent_flags(floats)
    scaled = floats if has_exponent is None else list(compress(floats, has_exponent))
    if not scaled:
        return None
    mantissas, exponent_texts = _cut_exponents(scaled)
    too_long = None
    if max(map(len, exponent_texts)) > 11:  # a sign and ten digits
        # Leading zeros say nothing ("1e0000000000001" is 10); past them, more than
        # ten digits overflow (those are read as 0 and flagged).
        digits = list(map(str.lstrip, exponent_texts, repeat("-0")))
        too_long = list(map(gt, map(len, digits), repeat(10)))
        deque(map(setitem, repeat(digits), compress(count(), too_long), repeat("")), 0)
        signs = map(_EXPONENT_SIGN.__getitem__, map(str.startswith, exponent_texts, repeat("-")))
        exponent_texts = list(map(add, signs, digits))
    if few_distinct(",".join(exponent_texts[:SAMPLE])):  # each distinct one read once
        read = {text: int(text) for text in set(exponent_texts)}
        exponents = list(map(read.__getitem__, exponent_texts))
    else:
        exponents = list(map(int, exponent_texts))
    index = _first_misfit(mantissas, exponents, too_long)
    if index is None or has_exponent is None:
        return index
    return list(compress(count(), has_exponent))[index]


# An exponent of five digits or more, in a text whose digits are all "0" (lower case).
_LONG_EXPONENTS: Final = ("e00000", "e-00000", "e+00000")
# A text this long with an exponent of four digits at most fits: its digits before the
# point and its scale are each at most its length plus 9999.
_FITS_ANY_SHORT_EXPONENT: Final = _JSONB_DSCALE_MAX - 9999


def _all_fit(floats: list[str]) -> bool:
    """Whether every number fits numeric by bounds over them all, without cutting each
    apart: no exponent longer than four digits and no text longer than
    _FITS_ANY_SHORT_EXPONENT. False says nothing: each is then checked."""
    zeroed = ",".join(floats).translate(_ZERO_DIGITS)
    if "E" in zeroed:
        zeroed = zeroed.replace("E", "e")
    if any(map(zeroed.__contains__, _LONG_EXPONENTS)):
        return False
    return max(map(len, floats), default=0) <= _FITS_ANY_SHORT_EXPONENT


def _exponent_flags(floats: list[str]) -> list[bool] | None:
    """Whether each number has an exponent ("e" or "E"), or None if all have one (a
    JSON number has one at most, so as many as there are numbers means each has one)."""
    joined = "".join(floats)
    if joined.count("e") + joined.count("E") == len(floats):
        return None
    flags = list(map(str.__contains__, floats, repeat("e")))
    if "E" in joined:
        flags = list(map(or_, flags, map(str.__contains__, floats, repeat("E"))))
    return flags


def _first_misfit(
    mantissas: list[str], exponents: list[int], too_long: list[bool] | None
) -> int | None:
    """The index of the first number with an exponent that does not fit numeric, or
    None: bounds over all numbers first, each number's checks only where they fail.
    ``too_long`` flags exponents past ten digits (read as 0)."""
    highest, lowest = max(exponents), min(exponents)
    in_range = highest <= _JSONB_EXPONENT_MAX and lowest >= -_JSONB_EXPONENT_MAX
    in_range = in_range and (too_long is None or not any(too_long))
    if "." in "".join(mantissas):
        flags: Iterable[bool] = _misfits(mantissas, exponents)
        scale_over: Iterable[bool] | None = None  # (part of _misfits)
    else:
        # No fraction: the scale is -exponent, the digits before the point the
        # mantissa's and the exponent (the longest mantissa with the highest exponent
        # bounds them all), but for "0", which takes any exponent.
        scale_fits = -lowest <= _JSONB_DSCALE_MAX
        longest = max(map(len, mantissas))
        if in_range and scale_fits and longest + highest <= _JSONB_INT_DIGITS:
            return None
        if in_range and scale_fits:
            # Only digits before the point may overflow. An exponent of the limit or
            # more does, whatever its mantissa (but "0"); if the numbers before the
            # first such one fit (the longest mantissa with their highest exponent
            # does), it is the first misfit: two passes.
            long = map(ge, exponents, repeat(_JSONB_INT_DIGITS))
            first = next(compress(count(), long), None)
            if (
                first is not None
                and mantissas[first] != "0"
                and (not first or longest + max(exponents[:first]) <= _JSONB_INT_DIGITS)
            ):
                return first
        flags = map(and_, _digits_over(mantissas, exponents), map("0".__ne__, mantissas))
        in_range = in_range and scale_fits
        scale_over = map(gt, map(neg, exponents), repeat(_JSONB_DSCALE_MAX))
    if not in_range:
        out_of_range = map(gt, map(abs, exponents), repeat(_JSONB_EXPONENT_MAX))
        if too_long is not None:
            out_of_range = map(or_, too_long, out_of_range)
        flags = map(or_, flags, out_of_range)
        if scale_over is not None:
            flags = map(or_, flags, scale_over)
    return next(compress(count(), flags), None)


def _digits_over(mantissas: list[str], exponents: list[int]) -> Iterator[bool]:
    """Whether each fraction-less number has more digits before the point than
    numeric holds (its mantissa's and its exponent; "0" is checked apart)."""
    return map(gt, map(add, map(len, mantissas), exponents), repeat(_JSONB_INT_DIGITS))


def _cut_exponents(scaled: list[str]) -> tuple[list[str], list[str]]:
    """The mantissas and exponents of numbers with an exponent: lower case, no "+" (only
    exponents have one), no mantissa sign ("-1.5E+3" is "1.5" and "3")."""
    joined = ",".join(scaled)
    # Each pass only where it changes something: each costs a pass over the text.
    if "E" in joined:
        joined = joined.lower()
    if "+" in joined:
        joined = joined.replace("+", "")
    if "-" in joined:
        joined = ("," + joined).replace(",-", ",")[1:]
    pieces = joined.replace("e", ",").split(",")
    return pieces[0::2], pieces[1::2]


def _misfits(mantissas: list[str], exponents: list[int]) -> list[bool]:
    """For each number whose exponent fits: whether its scale or its digits before the
    point (of a non-zero value: a zero takes any exponent) overflow."""
    parts = list(map(str.partition, mantissas, repeat(".")))
    fracs = list(map(itemgetter(2), parts))
    after_point = list(map(len, fracs))
    wholes = map(itemgetter(0), parts)
    significant = list(map(len, map(str.lstrip, map(add, wholes, fracs), repeat("0"))))
    before_point = map(add, map(sub, significant, after_point), exponents)
    scale_over = map(gt, map(sub, after_point, exponents), repeat(_JSONB_DSCALE_MAX))
    digits_over = map(gt, map(mul, before_point, map(bool, significant)), repeat(_JSONB_INT_DIGITS))
    return list(map(or_, scale_over, digits_over))


_JSONB_NUMBERS: Final = json.JSONDecoder(
    parse_constant=_reject_constant, parse_int=_jsonb_number, parse_float=_jsonb_number
)


def _check_json(text: str, jsonb: bool = False) -> str:
    try:
        _JSON.decode(text)
        if jsonb and jsonb_suspect(text):
            _JSONB_NUMBERS.decode(text)
    except _NumericOverflowError as err:
        # The hooks are not told where the number is; its first occurrence is close.
        raise Invalid(max(0, text.find(str(err))), "value overflows numeric format") from None
    except ValueError as err:
        pos = getattr(err, "pos", 0)
        raise Invalid(pos, f"expected JSON: {getattr(err, 'msg', err)}") from err
    except RecursionError as err:
        raise Invalid(0, "JSON nested too deeply") from err
    return text


def _json_in(text: str) -> str:
    return _check_json(_text_in(text))


def _jsonb_in(text: str) -> str:
    return _check_json(_text_in(text), jsonb=True)


def _json_out(value: object) -> str:
    if type(value) is not str:
        raise type_error("json", value, "str (JSON text)")
    try:
        return _check_json(no_nul(value, "json"))
    except Invalid as err:
        raise EncodeError(f"not valid JSON at {err.offset}: {err.reason}") from None


def _json_recv(data: bytes) -> str:
    return _check_json(utf8(data))


JSON_CONV: Final = Converter(
    114, "json", 199, "str", _json_in, _json_out, _json_recv, lambda v: _json_out(v).encode()
)


def _jsonb_recv(data: bytes) -> str:
    # jsonb_recv(): a version byte (only 1 exists) then the text form.
    if not data:
        raise Invalid(0, "expected the jsonb version byte, found nothing")
    if data[0] != 1:
        raise Invalid(0, f"unsupported jsonb version number {data[0]}")
    try:
        return _check_json(utf8(data[1:]), jsonb=True)
    except Invalid as err:
        raise Invalid(err.offset + 1, err.reason) from None


JSONB: Final = Converter(
    3802,
    "jsonb",
    3807,
    "str",
    _jsonb_in,
    _json_out,
    _jsonb_recv,
    lambda v: b"\x01" + _json_out(v).encode(),
)

# --------------------------------------------------------------------------- macaddr

# The formats macaddr_in() tries with sscanf in src/backend/utils/adt/mac.c.
_MAC_RES: Final = tuple(
    re.compile(p)
    for p in (
        r"([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2}):"
        r"([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})",
        r"([0-9a-fA-F]{1,2})-([0-9a-fA-F]{1,2})-([0-9a-fA-F]{1,2})-"
        r"([0-9a-fA-F]{1,2})-([0-9a-fA-F]{1,2})-([0-9a-fA-F]{1,2})",
        r"([0-9a-fA-F]{2})([0-9a-fA-F]{2})([0-9a-fA-F]{2})[:-]?"
        r"([0-9a-fA-F]{2})([0-9a-fA-F]{2})([0-9a-fA-F]{2})",
        r"([0-9a-fA-F]{2})([0-9a-fA-F]{2})\.([0-9a-fA-F]{2})([0-9a-fA-F]{2})\."
        r"([0-9a-fA-F]{2})([0-9a-fA-F]{2})",
        r"([0-9a-fA-F]{2})([0-9a-fA-F]{2})-([0-9a-fA-F]{2})([0-9a-fA-F]{2})-"
        r"([0-9a-fA-F]{2})([0-9a-fA-F]{2})",
    )
)


def _mac_in(text: str) -> str:
    stripped = text.strip(PG_SPACE)
    for regex in _MAC_RES:
        match = regex.fullmatch(stripped)
        if match is not None:
            return ":".join(f"{int(g, 16):02x}" for g in match.groups())
    raise Invalid(0, f"expected a MAC address like 08:00:2b:01:02:03, found {text[:50]!r}")


def _mac_bytes(value: object) -> bytes:
    if type(value) is not str:
        raise type_error("macaddr", value, "str like '08:00:2b:01:02:03'")
    try:
        return bytes.fromhex(_mac_in(value).replace(":", ""))
    except Invalid as err:
        raise EncodeError(err.reason) from None


def _mac_recv(data: bytes) -> str:
    check_exact(data, 6)
    return data.hex(":")


MACADDR: Final = Converter(
    829,
    "macaddr",
    1040,
    "str",
    _mac_in,
    lambda v: _mac_bytes(v).hex(":"),
    _mac_recv,
    _mac_bytes,
)

CONVERTERS: Final = (TEXT, VARCHAR, BPCHAR, NAME, CHAR, BYTEA, UUID, JSON_CONV, JSONB, MACADDR)
