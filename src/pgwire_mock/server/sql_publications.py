"""CREATE, ALTER and DROP PUBLICATION in the SQL layer (:mod:`pgwire_mock.server.sql`).

Each changes the server's catalog (``pg_publication``, ``pg_publication_tables``) and,
on a served script, writes its catalog transaction to the live WAL (a
``create_publication`` / ``alter_publication`` / ``drop_publication`` step), so that
walsenders publish through the publication as it is at each change they decode. The
refusals are publicationcmds.c's, in its words (compared with PostgreSQL 14-18 in
tests/conformance/test_publication_ddl_postgres.py).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any, Final

from pgwire_mock.server.errors import ServerError
from pgwire_mock.server.live import ShuttingDownError
from pgwire_mock.server.sql_result import Result
from pgwire_mock.server.state import PUBLICATION_ACTIONS, PublicationState, ServerState

__all__ = ["IDENT", "PublicationCommands", "ident"]

IDENT: Final = r'(?:"((?:[^"]|"")+)"|([A-Za-z_][A-Za-z0-9_$]*))'

# The step's refusals that PostgreSQL makes too, by their text: SQLSTATE.
_REFUSALS: Final = (
    (re.compile(r"relation .* is already member of publication .*"), "42710"),
    (re.compile(r"relation .* is not part of the publication"), "42704"),
)


def _split_options(text: str) -> list[str]:
    """``a = 'x, y', b`` at its top-level commas (not those inside quotes)."""
    return re.findall(r"(?:'(?:[^']|'')*'|[^,'])+", text)


def ident(quoted: str | None, bare: str | None) -> str:
    """An identifier as PostgreSQL reads it: quoted as written, bare in lower case."""
    if quoted is not None:
        return quoted.replace('""', '"')
    return (bare or "").lower()


def _tables(text: str | None) -> tuple[str, ...]:
    """``a, public.b, "C"`` as schema-qualified names (public when unqualified)."""
    names = (part.strip().strip('"') for part in (text or "").split(","))
    return tuple(name if "." in name else f"public.{name}" for name in names if name)


class PublicationCommands:
    """The publication statements of one session."""

    def __init__(
        self,
        major: int,
        state: ServerState,
        user: str,
        catalog_step: Callable[[object], None] | None,
    ) -> None:
        self.major = major
        self.state = state
        self.user = user
        self._catalog_step = catalog_step

    def patterns(self) -> tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], Result]], ...]:
        return (
            (
                # [^()] rather than a lazy .+?: a table list followed by many " with ("
                # made the lazy form quadratic (160 kB: 10 s).
                re.compile(
                    r"create publication " + IDENT + r"(?: for (all tables|table ([^()]+?)))?"
                    r"(?: with ?\(([^()]*)\))?",
                    re.I,
                ),
                self.create,
            ),
            (
                re.compile(r"alter publication " + IDENT + r" (add|drop|set) table (.+)", re.I),
                self.alter,
            ),
            (
                re.compile(r"alter publication " + IDENT + r" set ?\((.*)\)", re.I),
                self.alter_options,
            ),
            (re.compile(r"drop publication (if exists )?" + IDENT, re.I), self.drop),
        )

    def create(self, match: re.Match[str]) -> Result:
        name = ident(match.group(1), match.group(2))
        if name in self.state.publications:
            raise ServerError("ERROR", "42710", f'publication "{name}" already exists')
        target = (match.group(3) or "").lower()
        tables = _tables(match.group(4)) if target.startswith("table") else ()
        options = self._options(match.group(5) or "")
        generated = "s" if options.get("publish_generated_columns") == "stored" else "n"
        publication = PublicationState(
            name,
            all_tables=target == "all tables",
            tables=tables,
            owner=self.user,
            generated_columns=generated,
        ).publishing(options.get("publish", PUBLICATION_ACTIONS))
        self._write(publication)
        self.state.add_publication(publication)
        return Result("CREATE PUBLICATION")

    def alter(self, match: re.Match[str]) -> Result:
        name = ident(match.group(1), match.group(2))
        publication = self._existing(name)
        if publication.all_tables:
            raise ServerError(
                "ERROR",
                "55000",
                f'publication "{name}" is defined as FOR ALL TABLES',
                "Tables cannot be added to or dropped from FOR ALL TABLES publications.",
            )
        action, tables = match.group(3).lower(), _tables(match.group(4))
        if self._catalog_step is not None:
            self._write((name, action, tables, ()))
        else:  # no WAL to check them against: the catalog's own refusals
            for table in tables:
                relname = table.rpartition(".")[2]
                if action == "add" and table in publication.tables:
                    raise ServerError(
                        "ERROR",
                        "42710",
                        f'relation "{relname}" is already member of publication "{name}"',
                    )
                if action == "drop" and table not in publication.tables:
                    raise ServerError(
                        "ERROR", "42704", f'relation "{relname}" is not part of the publication'
                    )
        if action == "set":
            listed = dict.fromkeys(tables)
        elif action == "add":
            listed = dict.fromkeys((*publication.tables, *tables))
        else:
            listed = {t: None for t in publication.tables if t not in tables}
        self.state.add_publication(dataclasses.replace(publication, tables=tuple(listed)))
        return Result("ALTER PUBLICATION")

    def alter_options(self, match: re.Match[str]) -> Result:
        name = ident(match.group(1), match.group(2))
        publication = self._existing(name)
        options = self._options(match.group(3))
        changed = publication
        if "publish" in options:
            publish = options["publish"]
            changed = changed.publishing(publish)
            if self._catalog_step is not None:
                self._write((name, "publish", (), changed.actions))
        if "publish_generated_columns" in options:
            stored = options["publish_generated_columns"] == "stored"
            changed = dataclasses.replace(changed, generated_columns="s" if stored else "n")
        self.state.add_publication(changed)
        return Result("ALTER PUBLICATION")

    def _existing(self, name: str) -> PublicationState:
        publication = self.state.publications.get(name)
        if publication is None:
            raise ServerError("ERROR", "42704", f'publication "{name}" does not exist')
        return publication

    def _options(self, text: str) -> dict[str, Any]:
        """``name [= value], ...`` of WITH (...) or SET (...), checked as
        parse_publication_options checks them: publish (a set of actions),
        publish_via_partition_root, and publish_generated_columns on 18."""
        found: dict[str, Any] = {}
        for raw in filter(None, (part.strip() for part in _split_options(text))):
            key, _, value = (part.strip() for part in raw.partition("="))
            key = key.lower()
            value = value[1:-1].replace("''", "'") if value[:1] == "'" else value
            known = {"publish", "publish_via_partition_root"}
            if self.major >= 18:
                known.add("publish_generated_columns")
            if key not in known:
                raise ServerError("ERROR", "42601", f'unrecognized publication parameter: "{key}"')
            if key in found:
                raise ServerError("ERROR", "42601", "conflicting or redundant options")
            if key == "publish":
                actions = {a.strip().lower() for a in value.split(",") if a.strip()}
                for action in sorted(actions - set(PUBLICATION_ACTIONS)):
                    raise ServerError(
                        "ERROR",
                        "42601",
                        f'unrecognized "publish" value: "{action}"'
                        if self.major < 15
                        else f'unrecognized value for publication option "publish": "{action}"',
                    )
                found[key] = actions
            elif key == "publish_generated_columns":
                found[key] = value.lower() or "stored"
            else:
                found[key] = value
        return found

    def drop(self, match: re.Match[str]) -> Result:
        name = ident(match.group(2), match.group(3))
        if name not in self.state.publications:
            if match.group(1):
                notice = ServerError(
                    "NOTICE", "00000", f'publication "{name}" does not exist, skipping'
                )
                return Result("DROP PUBLICATION", notices=(notice,))
            raise ServerError("ERROR", "42704", f'publication "{name}" does not exist')
        self._write(name)
        del self.state.publications[name]
        self.state.save()
        return Result("DROP PUBLICATION")

    def _write(
        self,
        change: PublicationState | tuple[str, str, tuple[str, ...], tuple[str, ...]] | str,
    ) -> None:
        """A served script's WAL gets the statement's catalog transaction: a publication
        created, altered (name, action, tables) or dropped (a name)."""
        if self._catalog_step is None:
            return
        from pgwire_mock.script import (  # noqa: PLC0415 - scripts load YAML
            AlterPublication,
            CreatePublication,
            DropPublication,
            Publication,
            ScriptError,
        )

        step: object
        if isinstance(change, str):
            step = DropPublication(change)
        elif isinstance(change, tuple):
            step = AlterPublication(*change)
        else:
            step = CreatePublication(
                Publication(
                    change.name,
                    change.tables,
                    change.all_tables,
                    generated_columns="stored" if change.generated_columns == "s" else None,
                    publish=None if change.actions == PUBLICATION_ACTIONS else change.actions,
                )
            )
        try:
            self._catalog_step(step)
        except ShuttingDownError as err:
            raise ServerError("ERROR", "57P03", str(err)) from None
        except ScriptError as err:
            missing = re.fullmatch(r"no table '?([^' ]+)'?", err.problem)
            if missing is not None:
                relation = missing.group(1).removeprefix("public.")
                raise ServerError(
                    "ERROR", "42P01", f'relation "{relation}" does not exist'
                ) from None
            for pattern, sqlstate in _REFUSALS:
                if pattern.fullmatch(err.problem):
                    raise ServerError("ERROR", sqlstate, err.problem) from None
            if isinstance(change, str):  # known to the server, not to the script's WAL
                return
            raise ServerError("ERROR", "XX000", err.problem) from None
