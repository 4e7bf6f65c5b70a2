"""bool, the integer types, oid, float4, float8 and numeric."""

from __future__ import annotations

import math
import re
import struct
from decimal import Context, Decimal
from fractions import Fraction
from typing import Final

from codec._buffer import INT16, INT32, INT64, UINT32
from codec.errors import EncodeError
from codec.values._common import PG_SPACE, Converter, Invalid, check_exact, type_error

FLOAT4: Final = struct.Struct("!f")
FLOAT8: Final = struct.Struct("!d")
NUMERIC_HEADER: Final = struct.Struct("!hhHH")  # ndigits, weight, sign, dscale

# --------------------------------------------------------------------------- bool

_TRUE: Final = b"\x01"
_FALSE: Final = b"\x00"


def _bool_in(text: str) -> bool:
    # parse_bool_with_len() in src/backend/utils/adt/bool.c: any case, surrounding
    # whitespace, and any unambiguous prefix ("t", "tr", "ye", but "of"/"on", not "o").
    word = text.strip(PG_SPACE).lower()
    n = len(word)
    if n:
        if "true".startswith(word) or "yes".startswith(word) or (n >= 2 and word == "on"):
            return True
        if "false".startswith(word) or "no".startswith(word) or (n >= 2 and "off".startswith(word)):
            return False
        if word == "1":
            return True
        if word == "0":
            return False
    raise Invalid(0, f"expected a boolean (t/f/true/false/yes/no/on/off/1/0), found {text!r}")


def _bool_out(value: object) -> str:
    if not isinstance(value, bool):
        raise type_error("bool", value, "bool")
    return "t" if value else "f"


def _bool_recv(data: bytes) -> bool:
    check_exact(data, 1)
    # boolrecv() treats any non-zero byte as true.
    return data != _FALSE


def _bool_send(value: object) -> bytes:
    if not isinstance(value, bool):
        raise type_error("bool", value, "bool")
    return _TRUE if value else _FALSE


BOOL: Final = Converter(16, "bool", 1000, "bool", _bool_in, _bool_out, _bool_recv, _bool_send)

# --------------------------------------------------------------------------- integers

# pg_strtoint16/32/64 in src/backend/utils/adt/numutils.c. PostgreSQL 16 added the
# 0x/0o/0b prefixes and "_" between digits; older servers reject them, so accepting them
# is a superset. [0-9] and not \d: Python's \d and int() also take non-ASCII digits.
_INT_RE: Final = re.compile(
    r"[ \t\n\r\v\f]*+([+-]?)(?:0[xX](_?[0-9a-fA-F](?:_?[0-9a-fA-F])*+)"
    r"|0[oO](_?[0-7](?:_?[0-7])*+)|0[bB](_?[01](?:_?[01])*+)|([0-9](?:_?[0-9])*+))"
    r"[ \t\n\r\v\f]*+"
)
# More significant digits than this is out of range for every integer type in any base
# (2**64 has 65 binary digits). Leading zeros and spaces do not count: PostgreSQL takes
# "   0000000001" of any length, so the text itself has no length limit.
_MAX_INT64_DIGITS: Final = 64


def _int_value(digits: str, base: int) -> int | None:
    """The value of a matched digit run, or None when it has too many digits for int64."""
    significant = digits.replace("_", "").lstrip("0")
    if len(significant) > _MAX_INT64_DIGITS:
        return None
    return int(significant or "0", base)


def _make_int(name: str, bits: int, fmt: struct.Struct) -> Converter:
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    size = fmt.size
    unpack, pack = fmt.unpack, fmt.pack

    def decode_text(text: str) -> int:
        match = _INT_RE.fullmatch(text)
        if match is None:
            raise Invalid(0, f"expected an integer, found {text[:50]!r}")
        sign, hexa, octal, binary, dec = match.groups()
        if dec is not None:
            value = _int_value(dec, 10)
        elif hexa is not None:
            value = _int_value(hexa, 16)
        elif octal is not None:
            value = _int_value(octal, 8)
        else:
            value = _int_value(binary, 2)
        if value is not None and sign == "-":
            value = -value
        if value is None or not low <= value <= high:
            shown = text.strip(PG_SPACE)[:50]
            raise Invalid(0, f"value {shown} is out of range for type {name}")
        return value

    def encode_text(value: object) -> str:
        if type(value) is not int:
            value = _as_int(value, name)
        if not low <= value <= high:
            raise EncodeError(f"{name} must be in [{low}, {high}], got {value}")
        return str(value)

    def decode_binary(data: bytes) -> int:
        if len(data) != size:
            check_exact(data, size)
        return int(unpack(data)[0])

    def encode_binary(value: object) -> bytes:
        if type(value) is not int:
            value = _as_int(value, name)
        if not low <= value <= high:
            raise EncodeError(f"{name} must be in [{low}, {high}], got {value}")
        return pack(value)

    return Converter(0, name, 0, "int", decode_text, encode_text, decode_binary, encode_binary)


def _as_int(value: object, name: str) -> int:
    # bool is an int subclass; True as an int4 is almost always a caller's mistake.
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    raise type_error(name, value, "int")


def _with(conv: Converter, oid: int, array_oid: int) -> Converter:
    return Converter(
        oid,
        conv.name,
        array_oid,
        conv.python_type,
        conv.decode_text,
        conv.encode_text,
        conv.decode_binary,
        conv.encode_binary,
    )


INT2: Final = _with(_make_int("int2", 16, INT16), 21, 1005)
INT4: Final = _with(_make_int("int4", 32, INT32), 23, 1007)
INT8: Final = _with(_make_int("int8", 64, INT64), 20, 1016)

_UINT32_MAX: Final = 0xFFFFFFFF


def _oid_in(text: str) -> int:
    # oidin() goes through uint32in_subr() in src/backend/utils/adt/numutils.c, which
    # also accepts -2147483648..-1 and wraps them ("for backwards compatibility").
    match = _INT_RE.fullmatch(text)
    # strtoul() underneath: decimal only, and no "_" (not even in PostgreSQL 16+).
    if match is None or match.group(5) is None or "_" in match.group(5):
        raise Invalid(0, f"expected an oid (unsigned integer), found {text[:50]!r}")
    value = _int_value(match.group(5), 10)
    if value is not None and match.group(1) == "-":
        value = -value
    if value is None or not -(1 << 31) <= value <= _UINT32_MAX:
        shown = text.strip(PG_SPACE)[:50]
        raise Invalid(0, f"value {shown} is out of range for type oid")
    return value & _UINT32_MAX


def _oid_out(value: object) -> str:
    value = _as_int(value, "oid")
    if not 0 <= value <= _UINT32_MAX:
        raise EncodeError(f"oid must be in [0, {_UINT32_MAX}], got {value}")
    return str(value)


def _oid_recv(data: bytes) -> int:
    check_exact(data, 4)
    return int(UINT32.unpack(data)[0])


def _oid_send(value: object) -> bytes:
    value = _as_int(value, "oid")
    if not 0 <= value <= _UINT32_MAX:
        raise EncodeError(f"oid must be in [0, {_UINT32_MAX}], got {value}")
    return UINT32.pack(value)


OID: Final = Converter(26, "oid", 1028, "int", _oid_in, _oid_out, _oid_recv, _oid_send)

# --------------------------------------------------------------------------- floats

# Possessive quantifiers (*+, ++) throughout: with plain ones a long digit run that fails
# to match ("111...1e") is split every way between the integer and fraction parts, which
# made a 32 KB value take 20 s. Each run here can only end one way, so nothing is lost.
_FLOAT_RE: Final = re.compile(
    r"[ \t\n\r\v\f]*+([+-]?)(?:((?:[0-9]++(?:\.[0-9]*+)?|\.[0-9]++)(?:[eE][+-]?[0-9]++)?)"
    r"|(inf|infinity)|(nan))[ \t\n\r\v\f]*+",
    re.IGNORECASE,
)
_NONZERO_MANTISSA: Final = re.compile(r"[1-9]")
_INF: Final = math.inf
FLT_MAX: Final = FLOAT4.unpack(b"\x7f\x7f\xff\xff")[0]
# Doubles below FLT_MAX + half an ulp (2**103) round to FLT_MAX in C's (float) cast,
# but struct refuses anything above FLT_MAX.
_FLT_ROUNDS_TO_MAX: Final = 2.0**128 - 2.0**103


def to_float4(value: float) -> float:
    """``(float) value`` as C rounds it; raises OverflowError past float4's range."""
    try:
        return float(FLOAT4.unpack(FLOAT4.pack(value))[0])
    except OverflowError:
        if abs(value) < _FLT_ROUNDS_TO_MAX:
            return math.copysign(FLT_MAX, value)
        raise


def _float_in(text: str, name: str) -> float:
    # float8in_internal() in src/backend/utils/adt/float.c: strtod() syntax plus the
    # spellings inf/infinity/nan in any case; overflow is an error, and so is a non-zero
    # input that underflows to zero (denormals are fine).
    match = _FLOAT_RE.fullmatch(text)
    if match is None:
        raise Invalid(0, f"expected a {name} number, found {text[:50]!r}")
    sign, number, inf, nan = match.groups()
    if nan is not None:
        if sign:  # "+nan" is not accepted: float8in checks the exact spellings
            raise Invalid(0, f"expected a {name} number, found {text[:50]!r}")
        return math.nan
    if inf is not None:
        return -_INF if sign == "-" else _INF
    value = float(number)
    mantissa = number.split("e", 1)[0].split("E", 1)[0]
    if value == _INF or (value == 0.0 and _NONZERO_MANTISSA.search(mantissa)):
        raise Invalid(0, f"{number!r} is out of range for type {name}")
    return -value if sign == "-" else value


def _float8_in(text: str) -> float:
    return _float_in(text, "double precision")


def _float4_in(text: str) -> float:
    value = _float_in(text, "real")
    if math.isinf(value) or math.isnan(value):
        return value
    try:
        narrowed = to_float4(value)
    except OverflowError as err:
        raise Invalid(0, f"{text.strip(PG_SPACE)!r} is out of range for type real") from err
    if narrowed == 0.0 and value != 0.0:
        raise Invalid(0, f"{text.strip(PG_SPACE)!r} is out of range for type real")
    return narrowed


def _digits_of(text: str) -> tuple[str, int]:
    """Split a positive shortest repr ("1.5e-05", "120.0") into digits and exponent.

    Returns ``(digits, exp)`` with no leading or trailing zeros in ``digits`` and the
    value equal to ``0.d1d2... * 10**exp * 10`` i.e. ``d1.d2... * 10**exp``.
    """
    exp = 0
    if "e" in text:
        text, e = text.split("e")
        exp = int(e)
    if "." in text:
        whole, frac = text.split(".")
    else:
        whole, frac = text, ""
    digits = (whole + frac).lstrip("0")
    stripped = digits.rstrip("0")
    last_exp = exp - len(frac) + (len(digits) - len(stripped))
    return stripped, last_exp + len(stripped) - 1


def _format_shortest(digits: str, exp: int, fixed_below: int) -> str:
    # to_chars() in src/common/d2s.c / f2s.c: fixed notation when -4 <= exp < 15 for
    # float8 (< 6 for float4, matching printf's %g defaults), else d.ddde+XX with at
    # least two exponent digits.
    if -4 <= exp < fixed_below:
        if exp < 0:
            return "0." + "0" * (-exp - 1) + digits
        if len(digits) <= exp + 1:
            return digits + "0" * (exp + 1 - len(digits))
        return digits[: exp + 1] + "." + digits[exp + 1 :]
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"


def _special_float(value: float) -> str | None:
    if math.isnan(value):
        return "NaN"
    if value == _INF:
        return "Infinity"
    if value == -_INF:
        return "-Infinity"
    if value == 0.0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    return None


def _check_float(value: object, name: str) -> float:
    if type(value) is float:
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError as err:
            raise EncodeError(f"{name}: {value} is out of range") from err
    raise type_error(name, value, "float")


def _float8_out(value: object) -> str:
    value = _check_float(value, "float8")
    special = _special_float(value)
    if special is not None:
        return special
    # PostgreSQL 12+ (extra_float_digits > 0) prints the shortest string that reads
    # back exactly (Ryu); Python's repr() is also shortest-round-trip, and both pick the
    # digits closest to the exact value, so only the layout differs.
    digits, exp = _digits_of(_shortest8(abs(value)))
    text = _format_shortest(digits, exp, 15)
    return "-" + text if value < 0 else text


def _on_boundary(text: str, value: float, half_ulp: Fraction) -> bool:
    return abs(Fraction(text) - Fraction(value)) == half_ulp


def _shortest8(value: float) -> str:
    """Shortest digits strictly inside the rounding interval of a positive double.

    Python's repr() also accepts a decimal lying exactly on the interval's edge when the
    mantissa is even (it reads back by round-half-even); PostgreSQL's Ryu (src/common/
    d2s.c) does not, and prints one more digit: 6.0473321051657984e+16, not
    6.047332105165798e+16. Checked against PostgreSQL 15.
    """
    text = repr(value)
    half_ulp = Fraction(math.ulp(value)) / 2
    if not _on_boundary(text, value, half_ulp):
        return text
    for precision in range(len(text), 17):
        candidate = f"{value:.{precision}e}"
        if float(candidate) == value and not _on_boundary(candidate, value, half_ulp):
            return candidate
    return f"{value:.16e}"


def _float4_shortest(value: float) -> str:
    """Shortest decimal digits that read back as the same float4 (what f2s.c finds)."""
    for precision in range(9):
        candidate = f"{value:.{precision}e}"
        if _reads_as(candidate, value):
            return candidate
        # Just above a power of two the rounding interval is lopsided and the nearest
        # candidate can miss while its neighbour a unit of the last digit away hits.
        step = 10.0 ** (int(candidate.split("e")[1]) - precision)
        for neighbour in (float(candidate) + step, float(candidate) - step):
            near = f"{neighbour:.{precision}e}"
            if _reads_as(near, value):
                return near
    return f"{value:.8e}"


def _reads_as(text: str, value: float) -> bool:
    # Like _shortest8: a decimal on the edge of the float4 rounding interval is not
    # taken (src/common/f2s.c), so compare against the exact half-ulp.
    try:
        if to_float4(float(text)) != value:
            return False
    except OverflowError:
        return False
    return _on_boundary_4(text, value) is False


def _on_boundary_4(text: str, value: float) -> bool:
    exp = math.frexp(value)[1]
    # float4 has 24 significant bits; subnormals share the smallest normal's ulp.
    ulp = Fraction(2) ** (max(exp, -125) - 24)
    return abs(Fraction(text) - Fraction(value)) == ulp / 2


def _float4_out(value: object) -> str:
    value = _check_float(value, "float4")
    special = _special_float(value)
    if special is not None:
        return special
    if to_float4_exact(value) != value:
        raise EncodeError(f"float4: {value!r} is not exactly representable as a float4")
    mant, exp = _float4_shortest(abs(value)).split("e")
    digits = mant.replace(".", "").rstrip("0") or "0"
    text = _format_shortest(digits, int(exp), 6)
    return "-" + text if value < 0 else text


def _float8_recv(data: bytes) -> float:
    if len(data) != 8:
        check_exact(data, 8)
    return float(FLOAT8.unpack(data)[0])


def _float8_send(value: object) -> bytes:
    if type(value) is not float:
        value = _check_float(value, "float8")
    return FLOAT8.pack(value)


def _float4_recv(data: bytes) -> float:
    if len(data) != 4:
        check_exact(data, 4)
    return float(FLOAT4.unpack(data)[0])


def _float4_send(value: object) -> bytes:
    value = _check_float(value, "float4")
    if not math.isnan(value):
        to_float4_exact(value)
    return FLOAT4.pack(value)


def to_float4_exact(value: float) -> float:
    """``value`` if it is exactly a float4, else EncodeError (never round silently)."""
    try:
        narrowed = to_float4(value)
    except OverflowError as err:
        raise EncodeError(f"float4: {value} is out of range") from err
    if narrowed != value:
        raise EncodeError(f"float4: {value!r} is not exactly representable as a float4")
    return narrowed


FLOAT4_CONV: Final = Converter(
    700, "float4", 1021, "float", _float4_in, _float4_out, _float4_recv, _float4_send
)
FLOAT8_CONV: Final = Converter(
    701, "float8", 1022, "float", _float8_in, _float8_out, _float8_recv, _float8_send
)

# --------------------------------------------------------------------------- numeric

# src/backend/utils/adt/numeric.c
NUMERIC_POS: Final = 0x0000
NUMERIC_NEG: Final = 0x4000
NUMERIC_NAN: Final = 0xC000
NUMERIC_PINF: Final = 0xD000
NUMERIC_NINF: Final = 0xF000
NUMERIC_DSCALE_MAX: Final = 0x3FFF
# set_var_from_str() in src/backend/utils/adt/numeric.c refuses an exponent beyond
# INT_MAX / 2 (it once said NUMERIC_MAX_PRECISION, 1000; no supported version does);
# past that only the result's size counts: "1e131071" and "0e99999999" are valid on
# PostgreSQL 14-17, "1e131072" and "1e-16384" are not.
_MAX_EXPONENT: Final = (2**31 - 1) // 2
# The largest weight a numeric can have (int16) is 32767 base-10000 digits before the
# point: 131072 decimal digits, the documented limit.
MAX_INT_DIGITS: Final = 131072
# Zeros a value's input does not spell out (an exponent in text, the weight or the
# display scale in binary: "1e131000" is 8 characters, 131,000 zeros in numeric_out):
# beyond this many, the decoded value does not hold them. A scale-0 value keeps them as
# a positive exponent; a value with a display scale is a ScaledDecimal. The value, its
# hash and what encode_text/encode_binary give are the same; the decoded object stays
# a few bytes instead of ~55 kB per such element, and a 1 MB array of them takes
# milliseconds instead of a minute.
COMPACT_ZEROS: Final = 64
# Enough digits for any numeric written out in full: what expanded() needs.
_FULL: Final = Context(prec=MAX_INT_DIGITS + NUMERIC_DSCALE_MAX + 1)


class ScaledDecimal(Decimal):
    """A numeric whose display scale reaches past the digits its Decimal holds.

    A binary numeric's display scale makes numeric_out print that many digits after the
    point: 12 bytes of weight 32767 and scale 1 print 131,074 digits, and a column of
    scale 100 prints 1.5 as 1.5 and 99 zeros. A Decimal's exponent is its scale, so a
    plain one would hold every such zero; when more than COMPACT_ZEROS of them are
    not in the input, decode_binary gives this Decimal instead: the same value, hash and
    comparisons, holding the digits the input spells, with the display scale in
    ``dscale``. encode_text and encode_binary write every zero back; ``expanded()`` is
    the plain Decimal with them all. Arithmetic on it gives plain Decimals.
    """

    __slots__ = ("_dscale",)  # read through the property: a Decimal is immutable
    _dscale: int

    def __new__(cls, value: Decimal | int | str, dscale: int) -> ScaledDecimal:
        self = Decimal.__new__(cls, value)
        exponent = self.as_tuple().exponent
        if not isinstance(exponent, int):
            raise ValueError(f"a ScaledDecimal is finite, not {value!r}")
        if not max(0, -exponent) <= dscale <= NUMERIC_DSCALE_MAX:
            raise ValueError(
                f"display scale {dscale} must cover the value's {max(0, -exponent)} "
                f"digits after the point and be at most {NUMERIC_DSCALE_MAX}"
            )
        self._dscale = dscale
        return self

    @property
    def dscale(self) -> int:
        """The display scale: digits numeric_out prints after the point."""
        return self._dscale

    def expanded(self) -> Decimal:
        """The plain Decimal with every digit numeric_out prints."""
        return Decimal(self).quantize(Decimal(1).scaleb(-self.dscale), context=_FULL)

    def __reduce__(self) -> tuple[type[ScaledDecimal], tuple[str, int]]:  # type: ignore[override]
        return ScaledDecimal, (str(self), self.dscale)

    def __repr__(self) -> str:
        return f"ScaledDecimal('{self}', dscale={self.dscale})"


# Possessive for the same reason as _FLOAT_RE.
_NUMERIC_RE: Final = re.compile(
    r"[ \t\n\r\v\f]*+([+-]?)(?:([0-9](?:_?[0-9])*+)?(?:\.([0-9](?:_?[0-9])*+)?)?"
    r"(?:[eE]([+-]?[0-9]++))?|(nan|inf|infinity))[ \t\n\r\v\f]*+",
    re.IGNORECASE,
)
_NAN: Final = Decimal("NaN")
_PINF: Final = Decimal("Infinity")
_NINF: Final = Decimal("-Infinity")


def _numeric_in(text: str) -> Decimal:
    # numeric_in(): the display scale is the number of digits after the point minus
    # the exponent, never below zero ("1.50" keeps scale 2, "1e3" prints as 1000).
    match = _NUMERIC_RE.fullmatch(text)
    if match is None:
        raise Invalid(0, f"expected a numeric, found {text[:50]!r}")
    sign, whole, frac, exp_text, special = match.groups()
    if special is not None:
        word = special.lower()
        if word == "nan":
            if sign:
                raise Invalid(0, f"expected a numeric, found {text[:50]!r}")
            return _NAN
        return _NINF if sign == "-" else _PINF
    if whole is None and frac is None:
        raise Invalid(0, f"expected a numeric, found {text[:50]!r}")
    whole = (whole or "").replace("_", "")
    frac = (frac or "").replace("_", "")
    exp = 0
    if exp_text is not None:
        digits = exp_text.lstrip("+-").lstrip("0")
        if len(digits) > 10 or int(digits or "0") > _MAX_EXPONENT:
            raise Invalid(0, f"exponent {exp_text} is out of range for type numeric")
        exp = int(exp_text)
    dscale = max(0, len(frac) - exp)
    if dscale > NUMERIC_DSCALE_MAX:
        raise Invalid(0, f"{text.strip(PG_SPACE)[:50]!r}: numeric scale is out of range")
    significant = (whole + frac).lstrip("0")
    # Checked before the zeros are appended: a zero takes any exponent ("0e99999999").
    if significant and len(significant) - len(frac) + exp > MAX_INT_DIGITS:
        raise Invalid(0, "value overflows numeric format")
    coefficient = significant or "0"
    # value = coefficient * 10**(exp - len(frac)); rescale to exactly -dscale.
    shift = exp - len(frac) + dscale
    if dscale == 0 and shift > COMPACT_ZEROS and significant:
        return Decimal(f"{'-' if sign == '-' else ''}{significant}E+{shift}")
    if shift > 0 and significant:
        coefficient += "0" * shift
    negative = sign == "-" and coefficient.strip("0") != ""
    return Decimal(f"{'-' if negative else ''}{coefficient}E-{dscale}")


def _numeric_parts(value: object) -> tuple[bool, str, int] | str:
    """``(negative, coefficient digits, dscale)`` or the special value's spelling."""
    if not isinstance(value, Decimal):
        if isinstance(value, int) and not isinstance(value, bool):
            value = Decimal(value)
        else:
            raise type_error("numeric", value, "decimal.Decimal or int")
    if not value.is_finite():
        if value.is_snan():
            raise EncodeError("numeric has no signalling NaN")
        if value.is_nan():
            return "NaN"
        return "-Infinity" if value < 0 else "Infinity"
    sign, digit_tuple, exp = value.as_tuple()
    assert isinstance(exp, int)
    dscale = value.dscale if isinstance(value, ScaledDecimal) else max(0, -exp)
    if dscale > NUMERIC_DSCALE_MAX:
        raise EncodeError(f"numeric display scale {dscale} exceeds {NUMERIC_DSCALE_MAX}")
    if len(digit_tuple) + exp > MAX_INT_DIGITS:
        raise EncodeError("numeric value has too many digits before the decimal point")
    # The coefficient written out to exactly dscale digits after the point.
    digits = "".join(map(str, digit_tuple)) + "0" * (exp + dscale)
    digits = digits.lstrip("0")
    # PostgreSQL has no negative zero: -0.00 prints as 0.00.
    return bool(sign) and digits != "", digits, dscale


def _numeric_out(value: object) -> str:
    parts = _numeric_parts(value)
    if isinstance(parts, str):
        return parts
    negative, digits, dscale = parts
    if dscale:
        digits = digits.rjust(dscale + 1, "0")
        text = digits[:-dscale] + "." + digits[-dscale:]
    else:
        text = digits or "0"
    return "-" + text if negative else text


def _numeric_send(value: object) -> bytes:
    parts = _numeric_parts(value)
    if isinstance(parts, str):
        # numeric_send() emits NUMERIC_DSCALE() of the special value's header, which is
        # 32 for the infinities (0xD000/0xF000 & NUMERIC_SHORT_DSCALE_MASK) >> 7 and 0
        # for NaN: an artefact, but it is what goes on the wire.
        if parts == "NaN":
            return NUMERIC_HEADER.pack(0, 0, NUMERIC_NAN, 0)
        return NUMERIC_HEADER.pack(0, 0, NUMERIC_PINF if parts[0] == "I" else NUMERIC_NINF, 32)
    negative, digits, dscale = parts
    if not digits:
        return NUMERIC_HEADER.pack(0, 0, NUMERIC_POS, dscale)
    # Align to base-10000 groups around the decimal point.
    frac_groups = -(-dscale // 4)
    digits += "0" * (frac_groups * 4 - dscale)
    digits = digits.rjust(-(-len(digits) // 4) * 4, "0")
    groups = [int(digits[i : i + 4]) for i in range(0, len(digits), 4)]
    weight = len(groups) - 1 - frac_groups
    while groups and groups[-1] == 0:
        groups.pop()
    start = 0
    while groups[start] == 0:
        start += 1
    weight -= start
    groups = groups[start:]
    if weight > 32767 or len(groups) > 32767:
        raise EncodeError("numeric value overflows the binary numeric format")
    header = NUMERIC_HEADER.pack(len(groups), weight, NUMERIC_NEG if negative else 0, dscale)
    return header + struct.pack(f"!{len(groups)}H", *groups)


def _numeric_recv(data: bytes) -> Decimal:
    if len(data) < 8:
        raise Invalid(len(data), f"expected an 8-byte numeric header, found {len(data)} bytes")
    ndigits, weight, sign, dscale = NUMERIC_HEADER.unpack_from(data)
    if ndigits < 0:
        raise Invalid(0, f"invalid number of digits {ndigits}")
    if len(data) != 8 + 2 * ndigits:
        raise Invalid(8, f"expected {2 * ndigits} bytes of digits, found {len(data) - 8}")
    if sign == NUMERIC_NAN:
        return _NAN
    if sign == NUMERIC_PINF:
        return _PINF
    if sign == NUMERIC_NINF:
        return _NINF
    if sign not in (NUMERIC_POS, NUMERIC_NEG):
        raise Invalid(4, f"invalid sign 0x{sign:04x} in external numeric value")
    if dscale > NUMERIC_DSCALE_MAX:
        raise Invalid(6, f"invalid scale {dscale} in external numeric value")
    groups = struct.unpack_from(f"!{ndigits}h", data, 8)
    for i, group in enumerate(groups):
        if not 0 <= group < 10000:
            raise Invalid(8 + 2 * i, f"invalid digit {group} in external numeric value")
    digits = "".join([f"{g:04d}" for g in groups])
    # value = digits * 10**exp10
    exp10 = 4 * (weight + 1 - ndigits)
    if exp10 + dscale > COMPACT_ZEROS:  # zeros the 8 + 2 * ndigits bytes do not spell
        significant = digits.lstrip("0")
        if not significant:
            return Decimal(f"0E-{dscale}")
        text = f"{'-' if sign == NUMERIC_NEG else ''}{significant}E{exp10:+d}"
        return ScaledDecimal(text, dscale) if dscale else Decimal(text)
    if exp10 >= -dscale:
        coefficient = digits + "0" * (exp10 + dscale)
    else:
        # numeric_recv() truncates digits that the given dscale would hide.
        cut = -dscale - exp10
        coefficient = digits[:-cut] if cut < len(digits) else ""
    coefficient = coefficient.lstrip("0")
    negative = sign == NUMERIC_NEG and coefficient != ""
    return Decimal(f"{'-' if negative else ''}{coefficient or '0'}E-{dscale}")


NUMERIC: Final = Converter(
    1700,
    "numeric",
    1231,
    "decimal.Decimal",
    _numeric_in,
    _numeric_out,
    _numeric_recv,
    _numeric_send,
)

CONVERTERS: Final = (BOOL, INT2, INT4, INT8, OID, FLOAT4_CONV, FLOAT8_CONV, NUMERIC)
