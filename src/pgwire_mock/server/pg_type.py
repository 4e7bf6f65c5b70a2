"""Debezium's reads of pg_type and of the current transaction ID, answered from the types
the fake knows.

Debezium's PostgreSQL connector primes its ``TypeRegistry`` with two reads of the whole
pg_type table (``SQL_TYPES``, joined with pg_namespace and pg_enum, and
``SqlTypeMapper.SQL_TYPE_DETAILS``, one row per type name) and looks single types up by
name or OID with ``SQL_TYPES`` plus ``AND t.typname = ?`` / ``AND t.oid = ?``; its snapshot
asks ``PostgresConnection.currentTransactionId`` (``pg_current_xact_id()`` on 13+). The
texts are those of debezium-connector-postgres (``TypeRegistry``, ``PostgresConnection``),
whitespace collapsed, parameters inlined as :mod:`pgwire_mock.server.extended` or pgjdbc's
simple mode inline them.

The rows are derived, not canned: the built-in types are the codec's
(:data:`codec.values.TYPES`, OIDs, names, element and array types as in pg_type.dat) plus
the xid, xid8 and pg_lsn the fake's own answers use, each with its pg_type.dat category;
the user types are those of the served tables' columns (enums with their labels, domains
with their base type, composites, arrays). PostgreSQL's pg_type has some 600 more rows
(catalog row types, pseudo-types, geometric, range and text-search types…) that the fake
does not model: they are absent from the whole-table reads, and a lookup of one by name or
OID is refused with 0A000 rather than answered "no such type".
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from codec.values import TYPES, encode_text
from pgwire_mock.server.errors import ServerError
from pgwire_mock.server.sql_result import Column, Result

if TYPE_CHECKING:
    from pgwire_mock.script.tables import TableState
    from pgwire_mock.script.types import ColumnType

__all__ = ["NAMES_OID", "TypeQueries", "builtin_name", "type_and_parts"]

# array_out of the name[] array_agg collects: quoted as text[] is, without name's check of
# NAMEDATALEN (a script's names are not truncated as CREATE would).
NAMES_OID: Final = 1009

_PG_TYPE: Final = 1247
_PG_NAMESPACE: Final = 2615
# pg_type's attribute numbers (the same on 14-18).
_ATTNUM: Final = {
    "oid": 1,
    "typname": 2,
    "typtype": 7,
    "typcategory": 8,
    "typelem": 14,
    "typbasetype": 26,
    "typtypmod": 27,
}
# typcategory of the built-in scalar types the fake knows (pg_type.dat); arrays are 'A'.
_CATEGORY: Final = {
    "bool": "B",
    "bytea": "U",
    "char": "Z",
    "name": "S",
    "int8": "N",
    "int2": "N",
    "int4": "N",
    "text": "S",
    "oid": "N",
    "json": "U",
    "cidr": "I",
    "float4": "N",
    "float8": "N",
    "macaddr": "U",
    "inet": "I",
    "bpchar": "S",
    "varchar": "S",
    "date": "D",
    "time": "D",
    "timestamp": "D",
    "timestamptz": "D",
    "interval": "T",
    "timetz": "D",
    "numeric": "N",
    "uuid": "U",
    "jsonb": "U",
    "xid": "U",
    "xid8": "U",
    "pg_lsn": "U",
}
# 15 moved "char" from the string category to internal-use types ('Z').
_CHAR_CATEGORY_14: Final = "S"
# Built-in types the codec does not convert but the fake's answers use: (OID, name).
_EXTRA: Final = ((28, "xid"), (3220, "pg_lsn"), (5069, "xid8"))
# name is a fixed-length array of char: pg_type.dat gives it typelem 'char'.
_FIXED_ELEMENT: Final = {19: 18}

_SQL_ENUM_VALUES: Final = (
    "SELECT t.enumtypid as id, array_agg(t.enumlabel) as values FROM pg_catalog.pg_enum t "
    "GROUP BY id"
)
_SQL_TYPES: Final = (
    "SELECT t.oid AS oid, t.typname AS name, n.nspname AS schema_name, t.typelem AS element, "
    "t.typbasetype AS parentoid, t.typtypmod as modifiers, t.typcategory as category, "
    "e.values as enum_values FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON "
    f"(t.typnamespace = n.oid) LEFT JOIN ({_SQL_ENUM_VALUES}) e ON (t.oid = e.id) WHERE "
    "n.nspname != 'pg_toast'"
)
_LOOKUP: Final = re.compile(
    r"(?: AND t\.typname = E?'((?:[^']|'')*)'| AND t\.oid = \(?'?([0-9]+)'?(?:::int[248]\))?)?"
)
_SQL_TYPE_DETAILS: Final = (
    "SELECT DISTINCT ON (typname) typname, typinput='array_in'::regproc, typtype, sp.r, "
    "pg_type.oid FROM pg_catalog.pg_type LEFT JOIN (select ns.oid as nspoid, ns.nspname, r.r "
    "from pg_namespace as ns join ( select s.r, (current_schemas(false))[s.r] as nspname "
    "from generate_series(1, array_upper(current_schemas(false), 1)) as s(r) ) as r using ( "
    "nspname ) ) as sp ON sp.nspoid = typnamespace ORDER BY typname, sp.r, pg_type.oid"
)
_CURRENT_TXID: Final = re.compile(
    r"select \(case pg_is_in_recovery\(\) when 't' then '0'::xid8 else "
    r"pg_current_xact_id\(\) end\) AS pg_current_txid",
    re.IGNORECASE,
)
# current_schemas(false): the search path's schemas that exist, implicit ones left out.
_SEARCH_PATH: Final = ("public",)


@dataclass(frozen=True, slots=True)
class _Type:
    oid: int
    name: str
    namespace: str
    typtype: str
    element: int
    base: int
    category: str
    labels: tuple[str, ...] | None = None

    @property
    def is_array(self) -> bool:
        return self.category == "A"


def _builtins() -> Iterator[_Type]:
    for info in TYPES.values():
        category = "A" if info.is_array else _CATEGORY[info.name]
        element = info.element_oid or _FIXED_ELEMENT.get(info.oid, 0)
        yield _Type(info.oid, info.name, "pg_catalog", "b", element, 0, category)
    for oid, name in _EXTRA:
        yield _Type(oid, name, "pg_catalog", "b", 0, 0, _CATEGORY[name])


_BUILTINS: Final = {t.oid: t for t in _builtins()}


def type_and_parts(ctype: ColumnType) -> list[ColumnType]:
    """A column's type and the types it is made of (element, base, fields)."""
    out = [ctype]
    for part in (ctype.element, ctype.base, *(t for _, t in ctype.fields)):
        if part is not None:
            out.extend(type_and_parts(part))
    return out


def builtin_name(oid: int) -> str | None:
    """The name of a built-in type the fake knows (None: not one)."""
    known = _BUILTINS.get(oid)
    return None if known is None else known.name


def _user_type(ctype: ColumnType) -> _Type:
    namespace = ctype.namespace or "pg_catalog"
    if ctype.kind == "array":
        element = ctype.element.oid if ctype.element is not None else 0
        return _Type(ctype.oid, ctype.typname, namespace, "b", element, 0, "A")
    if ctype.kind == "enum":
        return _Type(ctype.oid, ctype.typname, namespace, "e", 0, 0, "E", ctype.labels)
    if ctype.kind == "composite":
        return _Type(ctype.oid, ctype.typname, namespace, "c", 0, 0, "C")
    # A domain takes its base type's category (DefineDomain).
    root = ctype
    while root.kind == "domain" and root.base is not None:
        root = root.base
    base = ctype.base.oid if ctype.base is not None else 0
    category = _BUILTINS[root.oid].category if root.oid in _BUILTINS else _user_type(root).category
    return _Type(ctype.oid, ctype.typname, namespace, "d", 0, base, category)


def _c_order(name: str) -> bytes:
    return name.encode()


class TypeQueries:
    """Answers Debezium's TypeRegistry reads and its transaction ID query."""

    def __init__(
        self,
        major: int,
        states: Callable[[], Mapping[str, TableState]],
        next_xid: Callable[[], int | None],
    ) -> None:
        self.major = major
        self._states = states
        self._next_xid = next_xid

    def answer(self, text: str) -> Result | None:
        if text.startswith(_SQL_TYPES):
            match = _LOOKUP.fullmatch(text, len(_SQL_TYPES))
            return None if match is None else self._types(match, text)
        if text == _SQL_TYPE_DETAILS:
            return self._type_details()
        if _CURRENT_TXID.fullmatch(text):
            return self._current_txid(text)
        return None

    def _known(self) -> dict[int, _Type]:
        known = dict(_BUILTINS)
        if self.major < 15:
            known[18] = dataclasses.replace(known[18], category=_CHAR_CATEGORY_14)
        for state in self._states().values():
            for c in state.version.columns:
                for t in type_and_parts(c.ctype):
                    if t.oid not in known and t.kind != "builtin":
                        known[t.oid] = _user_type(t)
        return known

    def _types(self, match: re.Match[str], text: str) -> Result:
        known = self._known()
        name, oid = match.groups()
        rows: list[_Type]
        if name is not None:
            wanted = name.replace("''", "'")
            rows = [t for t in known.values() if t.name == wanted]
            what = f"type {wanted!r}"
        elif oid is not None:
            rows = [known[int(oid)]] if int(oid) in known else []
            what = f"type OID {oid}"
        else:
            rows = sorted(known.values(), key=lambda t: t.oid)
            what = ""
        if what and not rows:
            raise ServerError(
                "ERROR",
                "0A000",
                f"pgwire-mock cannot answer Debezium's TypeRegistry lookup: {what} is not one "
                "the fake knows",
                f"Statement: {text[:200]}",
            )
        columns = (
            Column("oid", "oid", _PG_TYPE, _ATTNUM["oid"]),
            Column("name", "name", _PG_TYPE, _ATTNUM["typname"]),
            Column("schema_name", "name", _PG_NAMESPACE, 2),
            Column("element", "oid", _PG_TYPE, _ATTNUM["typelem"]),
            Column("parentoid", "oid", _PG_TYPE, _ATTNUM["typbasetype"]),
            Column("modifiers", "int4", _PG_TYPE, _ATTNUM["typtypmod"]),
            Column("category", "char", _PG_TYPE, _ATTNUM["typcategory"]),
            Column("enum_values", "_name"),
        )
        out = tuple(
            (
                str(t.oid),
                t.name,
                t.namespace,
                str(t.element),
                str(t.base),
                "-1",
                t.category,
                None if t.labels is None else encode_text(NAMES_OID, list(t.labels)),
            )
            for t in rows
        )
        return Result(f"SELECT {len(out)}", columns, out)

    def _type_details(self) -> Result:
        first: dict[str, tuple[int, _Type]] = {}
        for t in self._known().values():
            rank = _SEARCH_PATH.index(t.namespace) + 1 if t.namespace in _SEARCH_PATH else 0
            # ORDER BY typname, sp.r (NULLs last), oid: DISTINCT ON keeps the first.
            key = (rank or len(_SEARCH_PATH) + 1, t.oid)
            held = first.get(t.name)
            if held is None or key < (held[0] or len(_SEARCH_PATH) + 1, held[1].oid):
                first[t.name] = (rank, t)
        columns = (
            Column("typname", "name", _PG_TYPE, _ATTNUM["typname"]),
            Column("?column?", "bool"),
            Column("typtype", "char", _PG_TYPE, _ATTNUM["typtype"]),
            Column("r", "int4"),
            Column("oid", "oid", _PG_TYPE, _ATTNUM["oid"]),
        )
        out = tuple(
            (
                t.name,
                "t" if t.is_array else "f",
                t.typtype,
                str(rank) if rank else None,
                str(t.oid),
            )
            for name, (rank, t) in sorted(first.items(), key=lambda kv: _c_order(kv[0]))
        )
        return Result(f"SELECT {len(out)}", columns, out)

    def _current_txid(self, text: str) -> Result:
        xid = self._next_xid()
        if xid is None:
            raise ServerError(
                "ERROR",
                "0A000",
                "pgwire-mock cannot tell a transaction ID: its source has no transactions",
                f"Statement: {text[:200]}",
            )
        return Result("SELECT 1", (Column("pg_current_txid", "xid8"),), ((str(xid),),))
