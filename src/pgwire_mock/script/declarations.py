"""A script's catalogue, checked as PostgreSQL checks its DDL: types, tables and their
columns, publications (column lists, row filters, generated columns) and slots.

Each function takes the declarations of one kind and what the earlier ones produced,
and returns their compiled form or raises a :class:`ScriptError` naming the place: a
type is declared as ``CREATE TYPE`` would take it, a table's columns as ``CREATE
TABLE`` and ``ALTER TABLE ... ADD COLUMN`` would, a publication as ``CREATE
PUBLICATION`` and a later UPDATE/DELETE on the publisher would (publicationcmds.c).

Kept apart from :mod:`pgwire_mock.script.compile`, which lays out the WAL, because the
catalogue is checked once, before the first step, from the declarations alone; only the
OIDs come from the compiler (``fresh_oid``), so that each is used once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from pgwire_mock.script.errors import ScriptError
from pgwire_mock.script.model import (
    PUBLISH_GENERATED,
    REPLICA_IDENTITIES,
    Column,
    Publication,
    Script,
    Table,
    UserTypeDecl,
)
from pgwire_mock.script.rowfilter import RowFilter, RowFilterError
from pgwire_mock.script.sizes import needs_toast_table
from pgwire_mock.script.types import TypeCatalog, UserType
from pgwire_mock.script.wal import CColumn, PublishedTable, TableVersion
from pgwire_mock.server.state import PUBLICATION_ACTIONS, slot_name_problem

__all__ = [
    "PUBLISH_ACTIONS",
    "PublicationDeclarations",
    "compiled_columns",
    "declare_publications",
    "declare_slots",
    "declare_tables",
    "declare_types",
    "publish_actions",
]

_IDENTITY_CODE: Final = {"default": "d", "full": "f", "index": "i", "nothing": "n"}
_GENERATED_CODE: Final = {"": "", "stored": "s", "virtual": "v"}

#: What a publication may publish (pubinsert, pubupdate, pubdelete, pubtruncate).
PUBLISH_ACTIONS: Final = frozenset(PUBLICATION_ACTIONS)


@dataclass(frozen=True, slots=True)
class PublicationDeclarations:
    """Each publication's tables (None: all), column lists and row filters, pubgencols
    and the actions it publishes."""

    listed: dict[str, frozenset[str] | None]
    published: dict[str, dict[str, PublishedTable]]
    generated_columns: dict[str, str]
    actions: dict[str, frozenset[str]]


# --- types and tables ------------------------------------------------------------------


def declare_types(types: Sequence[UserTypeDecl], fresh_oid: Callable[[], int]) -> TypeCatalog:
    """The built-in types and the script's own, each checked when it is declared (a
    type may use only those declared before it); OIDs not given are ``fresh_oid()``'s."""
    oids: dict[str, tuple[int, int]] = {}
    declared: list[UserType] = []
    for i, decl in enumerate(types):
        where = f"types[{i}]"
        if "." not in decl.name:
            raise ScriptError(
                f"expected a schema-qualified name, got {decl.name!r}", f"{where}.name"
            )
        if decl.name in oids:
            raise ScriptError(f"type {decl.name} is declared twice", f"{where}.name")
        if decl.kind not in ("enum", "domain", "composite"):
            raise ScriptError(f"expected enum, domain or composite, got {decl.kind!r}", where)
        array_oid = decl.array_oid if decl.array_oid is not None else fresh_oid()
        oid = decl.oid if decl.oid is not None else fresh_oid()
        oids[decl.name] = (oid, array_oid)
        declared.append(
            UserType(decl.name, decl.kind, decl.labels, decl.base, decl.fields, oid, array_oid)
        )
        try:
            TypeCatalog(declared, oids)
        except ValueError as err:
            raise ScriptError(str(err), where) from None
    return TypeCatalog(declared, oids)


def declare_tables(
    tables: Sequence[Table], catalog: TypeCatalog, pg_version: int, fresh_oid: Callable[[], int]
) -> dict[str, TableVersion]:
    """The script's tables as first declared, by qualified name."""
    out: dict[str, TableVersion] = {}
    for i, t in enumerate(tables):
        where = f"tables[{i}]"
        if t.name in out:
            raise ScriptError(f"table {t.name} is declared twice", f"{where}.name")
        out[t.name] = _table(
            catalog, pg_version, fresh_oid, t.name, t.columns, t.replica_identity, t.oid, where
        )
    return out


def _table(
    catalog: TypeCatalog,
    pg_version: int,
    fresh_oid: Callable[[], int],
    name: str,
    columns: Sequence[Column],
    identity: str,
    oid: int | None,
    where: str,
) -> TableVersion:
    schema, dot, relname = name.rpartition(".")
    if not dot or not schema or not relname:
        raise ScriptError(f"expected a schema-qualified name, got {name!r}", f"{where}.name")
    if identity not in REPLICA_IDENTITIES:
        raise ScriptError(
            f"expected one of {', '.join(REPLICA_IDENTITIES)}, got {identity!r}",
            f"{where}.replica_identity",
        )
    cols = compiled_columns(catalog, pg_version, columns, f"{where}.columns")
    if identity == "index" and not any(c.key for c in cols):
        raise ScriptError("REPLICA IDENTITY INDEX needs key columns", f"{where}.columns")
    real_oid = oid if oid is not None else fresh_oid()
    code, toast = _IDENTITY_CODE[identity], needs_toast_table(cols, len(cols))
    return TableVersion(name, schema, relname, real_oid, code, cols, len(cols), toast)


def compiled_columns(
    catalog: TypeCatalog, pg_version: int, columns: Sequence[Column], where: str
) -> tuple[CColumn, ...]:
    """A table's columns (or those ALTER TABLE adds) with their types resolved and
    attribute numbers from 1."""
    out: list[CColumn] = []
    seen: set[str] = set()
    for j, c in enumerate(columns):
        if not c.name:
            raise ScriptError("expected a column name", f"{where}[{j}].name")
        if c.name in seen:
            raise ScriptError(f"column {c.name} is declared twice", f"{where}[{j}].name")
        seen.add(c.name)
        try:
            ctype, typmod = catalog.resolve(c.type)
        except ValueError as err:
            raise ScriptError(str(err), f"{where}[{j}].type") from None
        kind = _GENERATED_CODE.get(c.generated)
        if kind is None:
            raise ScriptError(
                f"expected stored or virtual, got {c.generated!r}", f"{where}[{j}].generated"
            )
        if kind == "v" and pg_version < 18:
            raise ScriptError(
                "virtual generated columns need PostgreSQL 18 or later",
                f"{where}[{j}].generated",
            )
        if kind and c.key:
            raise ScriptError(
                "a generated column as replica identity is not modelled", f"{where}[{j}].key"
            )
        out.append(CColumn(c.name, ctype, typmod, c.key, kind, j + 1))
    return tuple(out)


# --- publications and slots --------------------------------------------------------------


def declare_publications(
    publications: Sequence[Publication],
    tables: Mapping[str, TableVersion],
    pg_version: int,
    *,
    where: str | None = None,
) -> PublicationDeclarations:
    """The script's publications over its declared ``tables`` (``where``: the place of
    a single one, a create_publication step's)."""
    listed: dict[str, frozenset[str] | None] = {}
    published: dict[str, dict[str, PublishedTable]] = {}
    gencols: dict[str, str] = {}
    actions: dict[str, frozenset[str]] = {}
    places = where
    for i, p in enumerate(publications):
        where = places or f"publications[{i}]"
        if p.name in listed:
            raise ScriptError(f"publication {p.name} is declared twice", f"{where}.name")
        for j, name in enumerate(p.tables):
            if name not in tables:
                raise ScriptError(f"no table {name}", f"{where}.tables[{j}]")
        if p.all_tables and p.tables:
            raise ScriptError("all_tables and tables exclude each other", where)
        listed[p.name] = None if p.all_tables else frozenset(p.tables)
        gencols[p.name] = _gencols(p, pg_version, f"{where}.generated_columns")
        published[p.name] = _published(p, tables, pg_version, where)
        _full_identity(p, tables, pg_version, gencols[p.name], where)
        actions[p.name] = (
            PUBLISH_ACTIONS
            if p.publish is None
            else publish_actions(p.publish, pg_version, f"{where}.publish")
        )
    return PublicationDeclarations(listed, published, gencols, actions)


def publish_actions(publish: Sequence[str], pg_version: int, where: str) -> frozenset[str]:
    """WITH (publish = ...), checked as parse_publication_options checks it."""
    for action in publish:
        if action not in PUBLISH_ACTIONS:
            problem = (
                f'unrecognized "publish" value: "{action}"'
                if pg_version < 15
                else f'unrecognized value for publication option "publish": "{action}"'
            )
            raise ScriptError(problem, where)
    return frozenset(publish)


def _gencols(p: Publication, pg_version: int, where: str) -> str:
    """pubgencols of ``WITH (publish_generated_columns = …)``, checked as CREATE
    PUBLICATION checks it (publicationcmds.c parse_publication_options)."""
    if p.generated_columns is None:
        return "n"
    if pg_version < 18:
        raise ScriptError(
            'unrecognized publication parameter: "publish_generated_columns" '
            "(PostgreSQL 18 or later)",
            where,
        )
    value = str(p.generated_columns).lower()
    if value not in PUBLISH_GENERATED:
        raise ScriptError(
            'invalid value for publication parameter "publish_generated_columns": '
            f'"{p.generated_columns}" (expected none or stored)',
            where,
        )
    return "s" if value == "stored" else "n"


def _full_identity(
    p: Publication, tables: Mapping[str, TableVersion], pg_version: int, gencols: str, where: str
) -> None:
    """18 refuses UPDATE and DELETE of a REPLICA IDENTITY FULL table whose old row
    would hold a generated column it does not publish (publicationcmds.c
    pub_contains_invalid_column): refused here, as column lists are."""
    if pg_version < 18:
        return
    for name in tables if p.all_tables else p.tables:
        table = tables[name]
        if table.identity != "f" or name in p.columns:
            continue
        if any(
            c.generated == "v" or (c.generated == "s" and gencols != "s") for c in table.columns
        ):
            raise ScriptError(
                f"{name} has REPLICA IDENTITY FULL and generated columns the publication "
                "does not publish (PostgreSQL 18 refuses UPDATE and DELETE on the table "
                "then: Replica identity must not contain unpublished generated columns)",
                f"{where}.generated_columns",
            )


def _published(
    p: Publication, tables: Mapping[str, TableVersion], pg_version: int, where: str
) -> dict[str, PublishedTable]:
    """A publication's column lists and row filters, checked as CREATE PUBLICATION and
    a later UPDATE/DELETE on the publisher check them."""
    out: dict[str, PublishedTable] = {}
    for name in sorted(set(p.columns) | set(p.where)):
        at = f"{where}.tables.{name}"
        if name not in p.tables:
            raise ScriptError(f"{name} is not one of the publication's tables", at)
        if pg_version < 15:
            raise ScriptError("column lists and row filters need PostgreSQL 15 or later", at)
        table = tables[name]
        by_name = {c.name: c for c in table.columns}
        # The replica identity: a key, or (FULL) every column.
        identity = {c.name for c in table.stored if c.key or table.identity == "f"}
        if table.identity == "f" and pg_version < 18:
            identity = {c.name for c in table.published}
        keys = identity if table.identity in "dif" else None
        listed = p.columns.get(name)
        if listed is not None:
            for column in listed:
                if column not in by_name:
                    raise ScriptError(f"no column {column!r} in {name}", f"{at}.columns")
                kind = by_name[column].generated
                if kind and pg_version < 18:
                    # pg_publication.c publication_translate_columns (15–17): 42P10.
                    raise ScriptError(
                        f'cannot use generated column "{column}" in publication column list',
                        f"{at}.columns",
                    )
                if kind == "v":
                    raise ScriptError(
                        f'cannot use virtual generated column "{column}" in publication '
                        "column list",
                        f"{at}.columns",
                    )
            if keys is not None and not keys <= set(listed):
                raise ScriptError(
                    "the column list does not cover the replica identity (PostgreSQL "
                    "refuses UPDATE and DELETE on the table then)",
                    f"{at}.columns",
                )
            listed = tuple(c.name for c in table.stored if c.name in listed)
        condition = None
        if name in p.where:
            try:
                condition = RowFilter(p.where[name])
            except RowFilterError as err:
                raise ScriptError(str(err), f"{at}.where") from None
            for column in sorted(condition.columns):
                if column not in by_name:
                    raise ScriptError(f"no column {column!r} in {name}", f"{at}.where")
                if by_name[column].generated == "v":
                    # 18 expands it into its expression, which scripts do not model.
                    raise ScriptError(
                        f"the row filter reads virtual generated column {column!r}: "
                        "pgwire-mock does not evaluate generation expressions",
                        f"{at}.where",
                    )
            if keys is not None and not condition.columns <= identity:
                raise ScriptError(
                    "the row filter uses columns outside the replica identity (PostgreSQL "
                    "refuses UPDATE and DELETE on the table then)",
                    f"{at}.where",
                )
        out[name] = PublishedTable(listed, condition)
    return out


def declare_slots(script: Script) -> dict[str, int]:
    """The script's slots: name → confirmed_flush (the start LSN unless given)."""
    slots: dict[str, int] = {}
    for i, s in enumerate(script.slots):
        where = f"slots[{i}]"
        problem = slot_name_problem(s.name)
        if problem is not None:
            raise ScriptError(problem, f"{where}.name")
        if s.plugin != "pgoutput":
            raise ScriptError(f"expected plugin pgoutput, got {s.plugin!r}", f"{where}.plugin")
        if s.name in slots:
            raise ScriptError(f"slot {s.name} is declared twice", f"{where}.name")
        if s.two_phase and script.server.pg_version < 15:
            raise ScriptError("two_phase slots need PostgreSQL 15 or later", f"{where}.two_phase")
        slots[s.name] = (
            s.confirmed_flush if s.confirmed_flush is not None else script.server.start_lsn
        )
    return slots
