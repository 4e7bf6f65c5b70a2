"""Column types of a script and the conversion of script values to pgoutput column values.

Built-in types come from :mod:`codec.values` (``int4``, ``timestamptz``, ``int4[]``, SQL
spellings such as ``integer`` or ``character varying(20)``). User types (enum, domain,
composite, and arrays of them) are declared by the script; their text and binary forms
follow PostgreSQL's ``enum_out``/``enum_send``, ``record_out``/``record_send`` and
``array_out``/``array_send`` (``src/backend/utils/adt/{enum,rowtypes,arrayfuncs}.c``).

A script value is a plain YAML/JSON value: a string is read by the type's input function
(``decode_text``: ``'infinity'``, ``'2024-02-29 12:00:00+00'``, ``'{1,2}'``), numbers,
booleans and lists convert directly. The Python API also accepts the Python objects
:mod:`codec.values` encodes (``Decimal``, ``datetime``…).
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation
from typing import Final

from codec.errors import CodecError
from codec.values import TYPES, TypeInfo, decode_text, encode_binary, encode_text, type_by_name

__all__ = [
    "FIRST_GENBKI_OID",
    "ColumnType",
    "TypeCatalog",
    "UserType",
    "parse_type_spec",
]

#: Types with OIDs below this are "built in" for pgoutput (``send_relation_and_attrs``
#: sends Type messages only for the others).
FIRST_GENBKI_OID: Final = 10000
_INT32 = struct.Struct("!i")
_UINT32 = struct.Struct("!I")
_FLOAT4 = struct.Struct("!f")

_SPEC = re.compile(
    r"^\s*(?P<name>[^()\[\]]+?)\s*(?:\((?P<mods>[^()]*)\))?\s*(?P<array>\[\s*\])?\s*$"
)
_INTEGERS: Final = frozenset({"int2", "int4", "int8", "oid"})
_FLOATS: Final = frozenset({"float4", "float8"})


@dataclass(frozen=True, slots=True)
class UserType:
    """A type the script creates: ``enum`` (labels), ``domain`` (base) or ``composite``
    (fields). ``name`` is schema-qualified; ``oid``/``array_oid`` are assigned if absent."""

    name: str
    kind: str
    labels: tuple[str, ...] = ()
    base: str = ""
    fields: tuple[tuple[str, str], ...] = ()
    oid: int | None = None
    array_oid: int | None = None


@dataclass(frozen=True, slots=True, eq=False)
class ColumnType:
    """A resolved column type.

    ``namespace`` and ``typname`` are what a Type message carries (``""`` for
    ``pg_catalog``); ``spec`` is how scripts write it (``int4``, ``public.mood[]``).
    """

    oid: int
    spec: str
    namespace: str
    typname: str
    kind: str  # builtin, enum, domain, composite, array
    info: TypeInfo | None = None
    element: ColumnType | None = None
    base: ColumnType | None = None
    labels: tuple[str, ...] = ()
    fields: tuple[tuple[str, ColumnType], ...] = field(default=())

    @property
    def is_user_defined(self) -> bool:
        return self.oid >= FIRST_GENBKI_OID

    @property
    def type_message_names(self) -> tuple[str, str]:
        """(namespace, name) of this type's Type message: a domain is named after its
        base type, as ``logicalrep_write_typ`` does (``getBaseType``)."""
        t = self
        while t.kind == "domain" and t.base is not None:
            t = t.base
        return t.namespace, t.typname


def parse_type_spec(spec: str) -> tuple[str, tuple[int, ...], bool]:
    """``'varchar(32)[]'`` → ``('varchar', (32,), True)``."""
    m = _SPEC.match(spec)
    if m is None:
        raise ValueError(f"malformed type {spec!r}")
    mods: tuple[int, ...] = ()
    if m["mods"] is not None:
        try:
            mods = tuple(int(p) for p in m["mods"].split(","))
        except ValueError:
            raise ValueError(f"malformed type modifier in {spec!r}") from None
    return " ".join(m["name"].split()), mods, m["array"] is not None


def typmod_for(base: str, mods: tuple[int, ...]) -> int:
    """``pg_attribute.atttypmod`` for a type name and its modifiers (-1 for none)."""
    if not mods:
        return -1
    if base in ("varchar", "bpchar") and len(mods) == 1 and mods[0] > 0:
        return mods[0] + 4  # VARHDRSZ
    if base == "numeric" and 1 <= len(mods) <= 2 and 1 <= mods[0] <= 1000:
        scale = mods[1] if len(mods) == 2 else 0
        return ((mods[0] << 16) | (scale & 0x7FF)) + 4
    time_types = ("time", "timetz", "timestamp", "timestamptz")
    if base in time_types and len(mods) == 1 and 0 <= mods[0] <= 6:
        return mods[0]
    if base == "interval" and len(mods) == 1 and 0 <= mods[0] <= 6:
        return (0x7FFF << 16) | mods[0]  # INTERVAL_FULL_RANGE
    raise ValueError(f"type {base} does not take modifiers {mods}")


_SQL_WITH_MODS: Final = {
    "char": "bpchar",  # char(n) is bpchar; bare "char" is the one-byte "char" type
    "character": "bpchar",
    "character varying": "varchar",
    "varchar": "varchar",
    "bpchar": "bpchar",
}


class TypeCatalog:
    """Built-in types plus a script's user types; resolves type names."""

    def __init__(self, user_types: Sequence[UserType], oids: Mapping[str, tuple[int, int]]) -> None:
        self._user: dict[str, ColumnType] = {}
        for ut in user_types:
            oid, array_oid = oids[ut.name]
            schema, _, name = ut.name.rpartition(".")
            if ut.kind == "enum":
                ctype = ColumnType(oid, ut.name, schema, name, "enum", labels=ut.labels)
            elif ut.kind == "domain":
                base, _ = self.resolve(ut.base)
                ctype = ColumnType(oid, ut.name, schema, name, "domain", base=base)
            else:
                fields = tuple((fname, self.resolve(fspec)[0]) for fname, fspec in ut.fields)
                ctype = ColumnType(oid, ut.name, schema, name, "composite", fields=fields)
            self._user[ut.name] = ctype
            self._user[f"{ut.name}[]"] = ColumnType(
                array_oid, f"{ut.name}[]", schema, f"_{name}", "array", element=ctype
            )

    def resolve(self, spec: str) -> tuple[ColumnType, int]:
        """The type and type modifier of ``spec``; raises ValueError naming the problem."""
        name, mods, is_array = parse_type_spec(spec)
        key = name.lower()
        if "." not in key and f"public.{key}" in self._user:
            key = f"public.{key}"
        if key in self._user:
            if mods:
                raise ValueError(f"type {name} does not take modifiers")
            return self._user[f"{key}[]" if is_array else key], -1
        if mods and key in _SQL_WITH_MODS:
            key = _SQL_WITH_MODS[key]
        try:
            info = type_by_name(key + ("[]" if is_array else ""))
        except KeyError:
            raise ValueError(f"unknown type {spec!r}") from None
        base_name = TYPES[info.element_oid].name if info.is_array else info.name
        typmod = typmod_for(base_name, mods)
        return ColumnType(info.oid, _display(info), "", info.name, "builtin", info=info), typmod


def _display(info: TypeInfo) -> str:
    return f"{info.name[1:]}[]" if info.is_array else info.name


# --- value conversion -------------------------------------------------------------------


class ValueProblem(Exception):  # noqa: N818 (internal signal turned into ScriptError)
    """A value that does not fit its column type."""


def _spec_with_mod(ctype: ColumnType, typmod: int) -> str:
    if typmod < 0 or ctype.info is None:
        return ctype.spec
    name = ctype.info.name
    if name in ("varchar", "bpchar"):
        return f"{name}({typmod - 4})"
    if name == "numeric":
        precision, scale = (typmod - 4) >> 16, (typmod - 4) & 0xFFFF
        return f"numeric({precision},{scale})"
    return ctype.spec


def convert(ctype: ColumnType, typmod: int, raw: object) -> object:
    """The Python value to encode for ``raw``; raises :class:`ValueProblem`."""
    if raw is None:
        return None
    try:
        value = _convert(ctype, typmod, raw)
        # Encode once now, so range errors surface at load time, naming the place.
        encode_value(ctype, value, binary=False)
        encode_value(ctype, value, binary=True)
    except (CodecError, ValueError, TypeError, InvalidOperation, OverflowError) as err:
        raise ValueProblem(f"expected {_spec_with_mod(ctype, typmod)}, got {raw!r}") from err
    return value


def _convert(ctype: ColumnType, typmod: int, raw: object) -> object:
    if raw is None:
        return None
    if ctype.kind == "builtin":
        assert ctype.info is not None
        return _builtin(ctype.info, typmod, raw)
    if ctype.kind == "domain":
        assert ctype.base is not None
        return _convert(ctype.base, -1, raw)
    if ctype.kind == "enum":
        if not isinstance(raw, str) or raw not in ctype.labels:
            raise ValueError(f"not a label of {ctype.spec}")
        return raw
    if ctype.kind == "composite":
        if isinstance(raw, Mapping):
            unknown = set(raw) - {name for name, _ in ctype.fields}
            if unknown:
                raise ValueError(f"no field {sorted(unknown)[0]!r}")
            return tuple(_convert(t, -1, raw.get(name)) for name, t in ctype.fields)
        if isinstance(raw, list | tuple) and len(raw) == len(ctype.fields):
            return tuple(_convert(t, -1, v) for (_, t), v in zip(ctype.fields, raw, strict=True))
        raise ValueError("expected a mapping or a list of field values")
    # array of a user type
    assert ctype.element is not None
    if not isinstance(raw, list):
        raise ValueError("expected a list")
    element = ctype.element
    return [
        _convert(ctype, -1, v) if isinstance(v, list) else _convert(element, -1, v) for v in raw
    ]


def _builtin(info: TypeInfo, typmod: int, raw: object) -> object:
    name = info.name
    if isinstance(raw, str):
        value = decode_text(info.oid, raw)
    elif isinstance(raw, list):
        if not info.is_array:
            raise ValueError("a list for a non-array type")
        element = _element_info(info)
        value = [
            _builtin(info, -1, v) if isinstance(v, list) else _builtin(element, -1, v) for v in raw
        ]
    elif isinstance(raw, bool):
        if name != "bool":
            raise ValueError("a boolean")
        value = raw
    elif isinstance(raw, int):
        if name in _INTEGERS:
            value = raw
        elif name in _FLOATS:
            value = float(raw)
        elif name == "numeric":
            value = Decimal(raw)
        else:
            raise ValueError("a number")
    elif isinstance(raw, float):
        if name in _FLOATS:
            value = raw
        elif name == "numeric":
            value = Decimal(repr(raw))
        else:
            raise ValueError("a number")
    else:
        value = raw
    if name == "float4" and isinstance(value, float):
        # float4in rounds to the nearest 32-bit float.
        value = _FLOAT4.unpack(_FLOAT4.pack(value))[0]
    return _apply_typmod(name, typmod, value)


def _element_info(info: TypeInfo) -> TypeInfo:
    return TYPES[info.element_oid]


def _apply_typmod(name: str, typmod: int, value: object) -> object:
    if typmod < 0:
        return value
    if name == "bpchar" and isinstance(value, str):
        length = typmod - 4
        stripped = value.rstrip(" ")
        if len(stripped) > length:
            raise ValueError("value too long")
        return stripped.ljust(length) if len(value) <= length else stripped
    if name == "varchar" and isinstance(value, str):
        if len(value.rstrip(" ")) > typmod - 4:
            raise ValueError("value too long")
        return value[: typmod - 4]
    if name == "numeric" and isinstance(value, Decimal) and value.is_finite():
        # apply_typmod() in numeric.c: the scale is 11 bits, signed from PostgreSQL 15.
        precision = (typmod - 4) >> 16 & 0xFFFF
        scale = ((typmod - 4) & 0x7FF ^ 0x400) - 0x400
        if value.adjusted() > precision - scale:
            raise ValueError("numeric field overflow")  # even before rounding
        # Up to precision + 1 digits (a carry), past the default context's 28.
        context = Context(prec=precision + 2, rounding=ROUND_HALF_UP)
        rounded = value.quantize(Decimal(1).scaleb(-scale, context), context=context)
        if rounded.adjusted() >= precision - scale:
            raise ValueError("numeric field overflow")
        return rounded
    return value


# --- encoding -------------------------------------------------------------------------


def encode_value(ctype: ColumnType, value: object, *, binary: bool) -> str | bytes:
    """The column value as pgoutput sends it: text (``str``) or binary (``bytes``)."""
    if binary:
        return _binary(ctype, value)
    return _text(ctype, value)


def _text(ctype: ColumnType, value: object) -> str:
    kind = ctype.kind
    if kind == "builtin":
        assert ctype.info is not None
        return encode_text(ctype.info.oid, value)
    if kind == "enum":
        assert isinstance(value, str)
        return value
    if kind == "domain":
        assert ctype.base is not None
        return _text(ctype.base, value)
    if kind == "composite":
        assert isinstance(value, tuple)
        return (
            "("
            + ",".join(
                "" if v is None else _record_quote(_text(t, v))
                for (_, t), v in zip(ctype.fields, value, strict=True)
            )
            + ")"
        )
    assert ctype.element is not None and isinstance(value, list)
    return _array_text(ctype.element, value)


def _record_quote(text: str) -> str:
    # record_out: quote empty strings and anything with "\(), or whitespace.
    if text and not any(c in '"\\(),' or c.isspace() for c in text):
        return text
    return '"' + text.replace('"', '""').replace("\\", "\\\\") + '"'


def _array_quote(text: str) -> str:
    # array_out: quote empty strings, NULL, and anything with "\{}, or whitespace.
    if (
        text
        and text.upper() != "NULL"
        and not any(c in '"\\{},' or c in " \t\n\r\v\f" for c in text)
    ):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _array_text(element: ColumnType, items: list[object]) -> str:
    parts = []
    for item in items:
        if isinstance(item, list):
            parts.append(_array_text(element, item))
        elif item is None:
            parts.append("NULL")
        else:
            parts.append(_array_quote(_text(element, item)))
    return "{" + ",".join(parts) + "}"


def _binary(ctype: ColumnType, value: object) -> bytes:
    kind = ctype.kind
    if kind == "builtin":
        assert ctype.info is not None
        return encode_binary(ctype.info.oid, value)
    if kind == "enum":
        assert isinstance(value, str)
        return value.encode()
    if kind == "domain":
        assert ctype.base is not None
        return _binary(ctype.base, value)
    if kind == "composite":
        assert isinstance(value, tuple)
        out = bytearray(_INT32.pack(len(ctype.fields)))
        for (_, t), v in zip(ctype.fields, value, strict=True):
            out += _UINT32.pack(t.oid)
            if v is None:
                out += _INT32.pack(-1)
            else:
                data = _binary(t, v)
                out += _INT32.pack(len(data)) + data
        return bytes(out)
    assert ctype.element is not None and isinstance(value, list)
    return _array_binary(ctype.element, value)


def _array_binary(element: ColumnType, items: list[object]) -> bytes:
    shape: list[int] = []
    level: object = items
    while isinstance(level, list):
        shape.append(len(level))
        if not level:
            break
        level = level[0]
    flat: list[object] = []

    def walk(node: list[object], depth: int) -> None:
        if len(node) != shape[depth]:
            raise ValueError("multidimensional arrays must be rectangular")
        for item in node:
            if depth + 1 < len(shape):
                if not isinstance(item, list):
                    raise ValueError("multidimensional arrays must be rectangular")
                walk(item, depth + 1)
            elif isinstance(item, list):
                raise ValueError("multidimensional arrays must be rectangular")
            else:
                flat.append(item)

    if not items:
        return _INT32.pack(0) + _INT32.pack(0) + _UINT32.pack(element.oid)
    walk(items, 0)
    has_null = any(item is None for item in flat)
    out = bytearray(_INT32.pack(len(shape)) + _INT32.pack(int(has_null)))
    out += _UINT32.pack(element.oid)
    for size in shape:
        out += _INT32.pack(size) + _INT32.pack(1)
    for item in flat:
        if item is None:
            out += _INT32.pack(-1)
        else:
            data = _binary(element, item)
            out += _INT32.pack(len(data)) + data
    return bytes(out)


def is_plain(value: object) -> bool:
    """Whether ``value`` is already a YAML/JSON value (nested lists and mappings of
    None, bool, int, str and finite floats)."""
    if value is None or isinstance(value, bool | int | str):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(is_plain(v) for v in value)
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and is_plain(v) for k, v in value.items())
    return False


def to_plain(ctype: ColumnType, value: object) -> object:
    """A YAML/JSON form of a Python API value (for ``to_dict``): plain values stay as
    they are, anything else becomes its text form, which reads back the same."""
    if is_plain(value):
        return value
    return _text(ctype, value)
