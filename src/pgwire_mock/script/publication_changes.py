"""What CREATE, ALTER and DROP PUBLICATION steps do to a script's catalog.

The compiler writes each as a catalog transaction; :class:`PublicationCatalog` checks the
step as publicationcmds.c does (the same refusals, in PostgreSQL's words where a client
sees them through SQL) and answers the :class:`~pgwire_mock.script.wal.PublicationChange`
its commit makes: the publication's new definition and the tables whose relcache entry
the change invalidates (publication_add_relation, PublicationDropTables: the tables
added or removed; CacheInvalidateRelcacheAll for FOR ALL TABLES).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from pgwire_mock.script.declarations import (
    PUBLISH_ACTIONS,
    PublicationDeclarations,
    declare_publications,
    publish_actions,
)
from pgwire_mock.script.errors import ScriptError
from pgwire_mock.script.model import AlterPublication, CreatePublication, DropPublication
from pgwire_mock.script.sizes import publication_invalidations
from pgwire_mock.script.wal import PublicationChange, PublishedTable, TableVersion

__all__ = ["PublicationCatalog"]


@dataclass(frozen=True, slots=True)
class _Definition:
    listed: frozenset[str] | None  # None: all tables
    published: Mapping[str, PublishedTable]
    generated_columns: str
    actions: frozenset[str]


class PublicationCatalog:
    """The publications at the end of a script's WAL, as its steps change them."""

    def __init__(self, declared: PublicationDeclarations | None = None) -> None:
        self.definitions: dict[str, _Definition] = {}
        for name, tables in (declared.listed if declared is not None else {}).items():
            assert declared is not None
            self.definitions[name] = _Definition(
                tables,
                declared.published.get(name, {}),
                declared.generated_columns.get(name, "n"),
                declared.actions.get(name, PUBLISH_ACTIONS),
            )

    def copy(self) -> PublicationCatalog:
        other = PublicationCatalog()
        other.definitions = dict(self.definitions)
        return other

    def declare_all_tables(self, name: str) -> None:
        """A FOR ALL TABLES publication that exists from the start."""
        self.definitions.setdefault(name, _Definition(None, {}, "n", PUBLISH_ACTIONS))

    def change(
        self,
        step: CreatePublication | AlterPublication | DropPublication,
        tables: Mapping[str, TableVersion],
        pg_version: int,
        where: str,
    ) -> PublicationChange:
        """Check ``step`` and apply it; the change its commit makes (at LSN 0: the
        compiler sets it). ScriptError, nothing changed, for a step PostgreSQL refuses."""
        if isinstance(step, CreatePublication):
            name = step.publication.name
            if name in self.definitions:
                raise ScriptError(f'publication "{name}" already exists', where)
            declared = declare_publications([step.publication], tables, pg_version, where=where)
            new = _Definition(
                declared.listed[name],
                declared.published[name],
                declared.generated_columns[name],
                declared.actions[name],
            )
            self.definitions[name] = new
            return PublicationChange(
                0,
                name,
                new.listed,
                new.published,
                new.generated_columns,
                invalidated=new.listed,
                actions=new.actions,
                messages=_messages("create", new.listed),
            )
        old = self.definitions.get(step.name)
        if old is None:
            raise ScriptError(f'publication "{step.name}" does not exist', where)
        if isinstance(step, DropPublication):
            del self.definitions[step.name]
            return PublicationChange(
                0,
                step.name,
                dropped=True,
                invalidated=old.listed,
                messages=_messages("drop", old.listed),
            )
        if step.action == "publish":
            # AlterPublicationOptions invalidates the relcache of the publication's
            # tables (of every table for FOR ALL TABLES).
            new = dataclasses.replace(
                old, actions=publish_actions(step.publish, pg_version, f"{where}.publish")
            )
            invalidated = old.listed
            command = "publish"
        else:
            altered = self._altered(step, old, tables, where)
            kept = {t: p for t, p in old.published.items() if t in altered}
            new = dataclasses.replace(old, listed=altered, published=kept)
            assert old.listed is not None  # _altered refuses FOR ALL TABLES
            invalidated = old.listed ^ altered
            command = "alter"
        self.definitions[step.name] = new
        return PublicationChange(
            0,
            step.name,
            new.listed,
            new.published,
            new.generated_columns,
            invalidated=invalidated,
            actions=new.actions,
            messages=_messages(command, invalidated),
        )

    @staticmethod
    def _altered(
        step: AlterPublication,
        old: _Definition,
        tables: Mapping[str, TableVersion],
        where: str,
    ) -> frozenset[str]:
        if step.action not in ("add", "drop", "set"):
            raise ScriptError(f"expected add, drop, set or publish, got {step.action!r}", where)
        if old.listed is None:
            raise ScriptError(f'publication "{step.name}" is defined as FOR ALL TABLES', where)
        for j, name in enumerate(step.tables):
            if name not in tables:
                raise ScriptError(f"no table {name}", f"{where}.tables[{j}]")
        named = frozenset(step.tables)
        if step.action == "set":
            return named
        relname = {name: tables[name].relname for name in named}
        if step.action == "add":
            for name in step.tables:
                if name in old.listed:
                    raise ScriptError(
                        f'relation "{relname[name]}" is already member of publication '
                        f'"{step.name}"',
                        where,
                    )
            return old.listed | named
        for name in step.tables:
            if name not in old.listed:
                raise ScriptError(
                    f'relation "{relname[name]}" is not part of the publication', where
                )
        return old.listed - named


def _messages(command: str, tables: frozenset[str] | None) -> int:
    return publication_invalidations(command, None if tables is None else len(tables))
