"""The type catalogue and the four dispatch functions.

Every conversion is one dict lookup on the OID and one call: the tables are built once
from the converters each type module exports, and each array type's converters are
built from its element type's.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, cast

from codec.errors import DecodeError, EncodeError
from codec.values._array_binary import make_binary_decoder, make_binary_encoder
from codec.values._array_text import make_text_decoder, make_text_encoder
from codec.values._bulk import (
    BULK_BINARY,
    BULK_BINARY_AREAS,
    BULK_BINARY_ELEMENTS,
    BULK_TEXT,
    BULK_WHOLE,
)
from codec.values._common import (
    BinaryDecoder,
    BinaryEncoder,
    Converter,
    Invalid,
    TextDecoder,
    TextEncoder,
    lone_surrogate,
    surrogate_reason,
)
from codec.values._interval import CONVERTERS as INTERVAL_CONVERTERS
from codec.values._net import CONVERTERS as NETWORK_CONVERTERS
from codec.values._numbers import CONVERTERS as NUMBER_CONVERTERS
from codec.values._text import CONVERTERS as TEXT_CONVERTERS
from codec.values._time import CONVERTERS as TIME_CONVERTERS


@dataclass(frozen=True, slots=True)
class TypeInfo:
    """One built-in type, with the OIDs of src/include/catalog/pg_type.dat.

    ``element_oid`` is 0 unless this is an array type (``name`` then starts with ``_``
    as in ``pg_type.typname``); ``array_oid`` is 0 for array types. ``python_type``
    names what :func:`decode_text` / :func:`decode_binary` return.
    """

    oid: int
    name: str
    array_oid: int
    element_oid: int
    python_type: str

    @property
    def is_array(self) -> bool:
        return self.element_oid != 0


SCALARS: Final[tuple[Converter, ...]] = (
    *NUMBER_CONVERTERS,
    *TEXT_CONVERTERS,
    *NETWORK_CONVERTERS,
    *TIME_CONVERTERS,
    *INTERVAL_CONVERTERS,
)


def _array_converter(element: Converter) -> Converter:
    name = f"_{element.name}"
    return Converter(
        element.array_oid,
        name,
        0,
        f"list[{element.python_type} | None]",
        cast(
            TextDecoder,
            make_text_decoder(element, BULK_TEXT.get(element.name), BULK_WHOLE.get(element.name)),
        ),
        cast(TextEncoder, make_text_encoder(element, name)),
        cast(
            BinaryDecoder,
            make_binary_decoder(
                element,
                BULK_BINARY.get(element.name),
                BULK_BINARY_ELEMENTS.get(element.name),
                BULK_BINARY_AREAS.get(element.name),
            ),
        ),
        cast(BinaryEncoder, make_binary_encoder(element, name)),
    )


_ALL: Final = (*SCALARS, *(_array_converter(c) for c in SCALARS))
_ELEMENT_OF: Final = {c.array_oid: c.oid for c in SCALARS}

TYPES: Final[Mapping[int, TypeInfo]] = MappingProxyType(
    {
        c.oid: TypeInfo(c.oid, c.name, c.array_oid, _ELEMENT_OF.get(c.oid, 0), c.python_type)
        for c in _ALL
    }
)
"""Every type this module converts, by OID (arrays included)."""

_BY_NAME: Final = {info.name: info for info in TYPES.values()}
# The SQL spellings people use for the same types.
_ALIASES: Final = {
    "boolean": "bool",
    "smallint": "int2",
    "integer": "int4",
    "int": "int4",
    "bigint": "int8",
    "real": "float4",
    "double precision": "float8",
    "decimal": "numeric",
    "character varying": "varchar",
    "character": "bpchar",
    '"char"': "char",
    "timestamp without time zone": "timestamp",
    "timestamp with time zone": "timestamptz",
    "time without time zone": "time",
    "time with time zone": "timetz",
}

_NAMES: Final = {c.oid: c.name for c in _ALL}
_DECODE_TEXT: Final[dict[int, TextDecoder]] = {c.oid: c.decode_text for c in _ALL}
_ENCODE_TEXT: Final[dict[int, TextEncoder]] = {c.oid: c.encode_text for c in _ALL}
_DECODE_BINARY: Final[dict[int, BinaryDecoder]] = {c.oid: c.decode_binary for c in _ALL}
_ENCODE_BINARY: Final[dict[int, BinaryEncoder]] = {c.oid: c.encode_binary for c in _ALL}

# The converters check what they read, so these should never fire; they are the last
# line of the "any input decodes or raises DecodeError" contract.
_UNEXPECTED: Final = (ValueError, ArithmeticError, IndexError, KeyError, struct.error)


def type_by_name(name: str) -> TypeInfo:
    """The type called ``name``: a ``pg_type`` name (``int4``, ``_int4``), an SQL
    spelling (``integer``, ``timestamp with time zone``) or either with ``[]``."""
    key = name.strip().lower()
    suffix = ""
    if key.endswith("[]"):
        key, suffix = key[:-2].strip(), "[]"
    key = _ALIASES.get(key, key)
    info = _BY_NAME.get(key)
    if info is None:
        raise KeyError(f"no built-in type named {name!r}")
    if suffix:
        if info.is_array:
            raise KeyError(f"no built-in type named {name!r} (arrays of arrays are arrays)")
        return TYPES[info.array_oid]
    return info


def _what(oid: int, form: str) -> str:
    return f"{_NAMES.get(oid, f'OID {oid}')} {form} value"


def decode_text(oid: int, text: str) -> object:
    """Parse ``text`` as the type's input function would (typinput).

    Raises :class:`DecodeError` for an unknown OID or malformed text, and nothing else.
    """
    try:
        decode = _DECODE_TEXT[oid]
    except (KeyError, TypeError):
        raise DecodeError(_what(oid, "text"), 0, f"unknown type OID {oid}") from None
    if type(text) is not str:
        raise DecodeError(_what(oid, "text"), 0, f"expected str, found {type(text).__name__}")
    # Text PostgreSQL could not have received, whatever the type (see lone_surrogate).
    surrogate = lone_surrogate(text)
    if surrogate >= 0:
        raise DecodeError(_what(oid, "text"), surrogate, surrogate_reason(text, surrogate))
    try:
        return decode(text)
    except Invalid as err:
        raise DecodeError(_what(oid, "text"), err.offset, err.reason) from None
    except (*_UNEXPECTED, RecursionError) as err:
        raise DecodeError(_what(oid, "text"), 0, f"malformed value: {err!r}") from err


def decode_binary(oid: int, data: bytes) -> object:
    """Parse ``data`` as the type's receive function would (typreceive).

    Raises :class:`DecodeError` for an unknown OID or malformed bytes, and nothing else.
    """
    try:
        decode = _DECODE_BINARY[oid]
    except (KeyError, TypeError):
        raise DecodeError(_what(oid, "binary"), 0, f"unknown type OID {oid}") from None
    if type(data) is not bytes:
        if not isinstance(data, (bytearray, memoryview)):
            raise DecodeError(
                _what(oid, "binary"), 0, f"expected bytes, found {type(data).__name__}"
            )
        data = bytes(data)
    try:
        return decode(data)
    except Invalid as err:
        raise DecodeError(_what(oid, "binary"), err.offset, err.reason) from None
    except (*_UNEXPECTED, RecursionError) as err:
        raise DecodeError(_what(oid, "binary"), 0, f"malformed value: {err!r}") from err


def encode_text(oid: int, value: object) -> str:
    """The type's output function (typoutput) applied to ``value``.

    Raises :class:`EncodeError` for an unknown OID or a value the type cannot hold.
    """
    try:
        encode = _ENCODE_TEXT[oid]
    except (KeyError, TypeError):
        raise EncodeError(f"unknown type OID {oid}") from None
    return encode(value)


def encode_binary(oid: int, value: object) -> bytes:
    """The type's send function (typsend) applied to ``value``.

    Raises :class:`EncodeError` for an unknown OID or a value the type cannot hold.
    """
    try:
        encode = _ENCODE_BINARY[oid]
    except (KeyError, TypeError):
        raise EncodeError(f"unknown type OID {oid}") from None
    return encode(value)
