"""pgoutput's side of decoding a script: what the requested publications send, and how.

:class:`OutputPlugin` holds what ``pgoutput.c`` keeps for one walsender — the tables
the publications publish (with their column lists and row filters, checked when a
table's first change is decoded), the RelationSyncCache (whether a table's Relation and
Type messages went out, in the session and per streamed transaction) and the missing
publications 17 refuses and 18 skips — and turns one decoded change into its pgoutput
messages (``pgoutput_change``, ``maybe_send_schema``, ``pgoutput_row_filter``).

It is apart from the reorder buffer (:mod:`pgwire_mock.script.reorder`), which decides
when a transaction's changes are sent, and from the WAL walk
(:mod:`pgwire_mock.script.encoder`), as ``pgoutput.c`` is apart from
``reorderbuffer.c`` and ``decode.c``: it decides nothing about memory or about when a
transaction is sent; it is handed begins and changes and answers with messages.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TypeAlias

from codec.pgoutput import (
    UNCHANGED_TOAST,
    Delete,
    Insert,
    Message,
    Origin,
    PgOutputMessage,
    Truncate,
    Update,
)
from pgwire_mock.script.declarations import PUBLISH_ACTIONS
from pgwire_mock.script.errors import OptionError, PublicationMissingError
from pgwire_mock.script.events import PublicationsSkipped, Send, StreamEvent
from pgwire_mock.script.options import StreamOptions
from pgwire_mock.script.rowfilter import RowFilter
from pgwire_mock.script.wal import (
    CompiledScript,
    PublicationChange,
    PublishedTable,
    Row,
    TableVersion,
    WChange,
    WTxn,
    encode_row,
    xid_of,
)

__all__ = ["Out", "OutputPlugin"]

Out: TypeAlias = list[tuple[int, PgOutputMessage]]
"""Messages and the WAL position each is sent at."""


class OutputPlugin:
    """pgoutput for one walsender: its publications, its relation cache, its messages."""

    def __init__(self, compiled: CompiledScript, options: StreamOptions, version: int) -> None:
        self.compiled = compiled
        self.options = options
        self.version = version
        self.binary = options.binary
        # The publications as each historic snapshot sees them: catalogs[k] after the
        # first k publication changes (CompiledScript.publication_changes), made as asked.
        self.catalogs = [
            _Catalog(
                dict(compiled.publications),
                dict(compiled.published),
                dict(compiled.generated_columns),
                dict(compiled.publication_actions),
            )
        ]
        # How many publication changes the WAL read has passed the commit of: their
        # invalidations ran (publication_invalidation_cb, rel_sync_cache_*_cb).
        self.passed_changes = 0
        self.oids = {name: version.oid for name, (version, _) in compiled.initial.items()}
        # LoadPublications: the requested publications found, in the catalog of the
        # lookup that loaded them; loaded again after any publication change.
        self.publications_valid = False
        self.loaded: tuple[str, ...] = ()
        self.loaded_catalog = self.catalogs[0]
        self.missing: str | None = None  # 14-17: the lookup fails
        self.skipped_at: int | None = None  # 18: the lookup's LSN, until the warning is yielded
        self.skipped_names: tuple[str, ...] = ()
        # pgoutput's RelationSyncCache entries (replicate_valid): whether the table is
        # published, and the catalog it was looked up in. They stand until a publication
        # change invalidates them, whatever snapshot a later change has: a transaction
        # decoded after one that began later uses entries that one built.
        self.entries: dict[int, tuple[bool, int]] = {}
        self.views: dict[int, _View] = {}  # by table OID, for one TableVersion
        self.schema_sent: dict[int, bool] = {}
        self.stream_schema: dict[int, set[int]] = {}
        # Tables with a valid entry in pgoutput's RelationSyncCache (looked up, published
        # or not, and not invalidated since): reading them needs no catalog access.
        self.looked_up: set[int] = set()

    def catalog_at(self, lsn: int) -> int:
        """How many publication changes committed before ``lsn``: the catalog a change
        there sees (its transaction's snapshot, which each catalog commit during the
        transaction moves on: SnapBuildDistributeSnapshotAndInval)."""
        return bisect_left(self.compiled.publication_changes, lsn, key=_change_lsn)

    def catalog(self, index: int) -> _Catalog:
        changes = self.compiled.publication_changes
        while len(self.catalogs) <= index:
            self.catalogs.append(self.catalogs[-1].after(changes[len(self.catalogs) - 1]))
        return self.catalogs[index]

    def passed(self, lsn: int) -> None:
        """The WAL read reached ``lsn``: the publication changes committed there or
        before have had their invalidations run."""
        changes = self.compiled.publication_changes
        while self.passed_changes < len(changes) and changes[self.passed_changes].lsn <= lsn:
            self.invalidate_for(self.passed_changes)
            self.passed_changes += 1

    def invalidate_for(self, index: int) -> None:
        """The invalidations of publication change ``index``, run where the WAL read
        passes its commit, again where it falls inside a transaction being decoded, and
        once more when that transaction is done (ReorderBufferProcessTXN). Every entry
        looks its publications up again, and the publications are loaded again
        (rel_sync_cache_publication_cb, publication_invalidation_cb); the Relation goes
        again for the tables whose relcache entry it invalidates
        (rel_sync_cache_relation_cb resets schema_sent): the publication's, or every
        table's from 15 on for FOR ALL TABLES (14's callback looks the invalid OID of
        CacheInvalidateRelcacheAll up and finds none); 15-17 also reset it for every
        entry they rebuild after any publication change (measured: ALTER PUBLICATION ...
        DROP TABLE b sends a's Relation again on 15-17 only)."""
        change = self.compiled.publication_changes[index]
        if change.invalidated is None or 15 <= self.version <= 17:
            # Every entry: those whose schema went in a streamed transaction too.
            invalidated = [*self.schema_sent, *self.stream_schema] if self.version >= 15 else []
        else:
            invalidated = [self.oids[t] for t in change.invalidated if t in self.oids]
        for oid in invalidated:
            self.invalidate(oid)
        self.publications_valid = False
        self.entries.clear()
        self.views.clear()
        self.looked_up.clear()

    def load_publications(self, catalog: _Catalog, lsn: int) -> None:
        """LoadPublications in the catalog of the change at ``lsn``: the requested
        publications it has. Up to 17 a missing one fails the lookup
        (get_publication_oid); 18 warns and goes on, at every load."""
        names = self.options.publication_names
        missing = tuple(p for p in names if p not in catalog.listed)
        self.missing = missing[0] if missing and self.version < 18 else None
        if missing and self.version >= 18:
            self.skipped_at, self.skipped_names = lsn, missing
        self.loaded = tuple(p for p in names if p in catalog.listed)
        self.loaded_catalog = catalog
        self.publications_valid = True

    def is_published(self, table: TableVersion, lsn: int) -> bool:
        """get_rel_sync_entry for a change at ``lsn``: a valid entry as it is, or one
        looked up in the change's catalog."""
        index = self.catalog_at(lsn)
        catalog = self.catalog(index)
        if not self.publications_valid:
            self.load_publications(catalog, lsn)
        self.looked_up.add(table.oid)
        if self.missing is not None:
            raise PublicationMissingError(self.missing)
        entry = self.entries.get(table.oid)
        if entry is None:
            published = any(
                self.loaded_catalog.listed[name] is None
                or table.name in (catalog.listed.get(name) or ())
                for name in self.loaded
            )
            entry = self.entries[table.oid] = (published, index)
        return entry[0]

    def view(self, table: TableVersion) -> _View:
        """The columns and row filters of the requested publications that publish
        ``table`` (check_and_init_gencol, pgoutput_column_list_init,
        pgoutput_row_filter_init), checked when pgoutput builds its relation entry: at
        the table's first change."""
        view = self.views.get(table.oid)
        if view is not None and view.table is table:
            return view
        # The entry's catalog for its tables, the loaded publications for their options.
        catalog, loaded = self.catalog(self.entries[table.oid][1]), self.loaded_catalog
        entries: list[tuple[PublishedTable, str]] = []  # with the publication's pubgencols
        actions: list[frozenset[str]] = []  # each one's
        for name in self.loaded:
            if loaded.listed[name] is not None and table.name not in (
                catalog.listed.get(name) or ()
            ):
                continue
            published = catalog.tables.get(name, {}).get(table.name, PublishedTable())
            entries.append((published, loaded.gencols.get(name, "n")))
            actions.append(loaded.actions.get(name, PUBLISH_ACTIONS))
        qualified = f'"{table.namespace}.{table.relname}"'
        # check_and_init_gencol (18): the publications without a column list must agree
        # on publish_generated_columns, if the table has generated columns at all.
        gencols = "n"
        if any(c.generated for c in table.columns):
            values = {g for p, g in entries if p.columns is None}
            if len(values) > 1:
                raise OptionError(
                    "cannot use different values of publish_generated_columns for table "
                    f"{qualified} in different publications",
                    sqlstate="0A000",
                )
            gencols = values.pop() if values else "n"
        # pgoutput_column_list_init: a publication without a list stands for the columns
        # it would send; all must be the same set. None: no list, the default rule.
        sets = {frozenset(table.publishes(p.columns, gencols)) for p, _ in entries}
        if len(sets) > 1:
            raise OptionError(
                f"cannot use different column lists for table {qualified} in different "
                "publications",
                sqlstate="0A000",
            )
        listed = any(p.columns is not None for p, _ in entries)
        columns = table.publishes(None, gencols)
        if listed:
            columns = next(p.columns for p, _ in entries if p.columns is not None)
            columns = table.publishes(columns)
        # pgoutput_row_filter_init: an action's filters are those of the publications
        # that publish it; one without a filter publishes every row.
        filters: dict[str, tuple[RowFilter, ...] | None] = {}
        for action in PUBLISH_ACTIONS - {"truncate"}:
            chosen = [p for (p, _), a in zip(entries, actions, strict=True) if action in a]
            if chosen:
                found = tuple(p.filter for p in chosen if p.filter is not None)
                filters[action] = found if len(found) == len(chosen) else None
        view = _View(table, columns, frozenset().union(*actions), filters)
        self.views[table.oid] = view
        return view

    def invalidate(self, oid: int) -> None:
        self.looked_up.discard(oid)
        self.schema_sent[oid] = False
        self.stream_schema.pop(oid, None)

    def cleanup(self, top_xid: int, *, commit: bool) -> None:
        """A streamed transaction ended: the tables whose schema it sent count as sent
        in the session if it committed (``cleanup_rel_sync_cache``)."""
        for oid, xids in self.stream_schema.items():
            if top_xid in xids:
                if commit:
                    self.schema_sent[oid] = True
                xids.discard(top_xid)

    def skipped(self, txn: WTxn) -> bool:
        """``origin=none`` (16+) skips a transaction that has an origin."""
        return bool(txn.origin) and self.options.origin == "none" and self.version >= 16

    def skipped_warning(self) -> Iterator[StreamEvent]:
        assert self.skipped_at is not None
        yield PublicationsSkipped(self.skipped_names, self.skipped_at)
        self.skipped_at = None

    def begin(self, txn: WTxn, wal: int, message: PgOutputMessage) -> Iterator[StreamEvent]:
        yield Send(wal, message)
        if txn.origin:
            yield Send(wal, Origin(txn.origin_lsn, txn.origin))

    def change(
        self, change: WChange, invalidated: set[int], *, in_stream: bool, top_xid: int
    ) -> Out:
        """The messages for one change, updating the relation cache; the tables it
        invalidates are added to ``invalidated``, the transaction's invalidations."""
        out: Out = []
        kind = change.kind
        xid = xid_of(change.sub) if in_stream else None
        if kind == "ddl":
            for t in change.tables:
                self.invalidate(t.oid)
                invalidated.add(t.oid)
            return out
        if kind == "message":
            if self.options.messages:
                msg_xid = top_xid if in_stream else None
                out.append(
                    (change.lsn, Message(1, change.lsn, change.prefix, change.content, xid=msg_xid))
                )
            return out
        if kind == "truncate":
            # TRUNCATE's catalog update is visible (and invalidates) before its record,
            # and the table is invalidated again when the transaction is done.
            for t in change.tables:
                self.invalidate(t.oid)
                invalidated.add(t.oid)
            sent = [
                t
                for t in change.tables
                if self.is_published(t, change.lsn) and "truncate" in self.view(t).actions
            ]
            for t in sent:
                out.extend(self.schema(t, change.lsn, xid, in_stream, top_xid))
            if sent:
                oids = tuple(t.oid for t in sent)
                out.append((change.lsn, Truncate(change.options, oids, xid=xid)))
            return out
        table = change.table
        assert table is not None
        if not self.is_published(table, change.lsn):
            return out
        view = self.view(table)
        if kind not in view.actions:  # pubinsert, pubupdate, pubdelete
            return out
        if kind == "delete" and change.old is None:
            return out  # "didn't send DELETE change because of missing oldtuple"
        if view.filters.get(kind) is not None:
            filtered = view.filtered(table, kind, change.old, change.new)
            if filtered is None:
                return out
            kind = filtered
        out.extend(self.schema(table, change.lsn, xid, in_stream, top_xid))
        binary, columns = self.binary, view.columns
        new = (
            encode_row(table, change.new, binary=binary, columns=columns)
            if change.new is not None
            else None
        )
        old = (
            encode_row(table, change.old, binary=binary, columns=columns)
            if change.old is not None
            else None
        )
        if kind == "insert":
            assert new is not None
            out.append((change.lsn, Insert(table.oid, new, xid=xid)))  # type: ignore[arg-type]
        elif kind == "update":
            assert new is not None
            key = old if change.old_kind == "K" else None
            full = old if change.old_kind == "O" else None
            out.append((change.lsn, Update(table.oid, new, key, full, xid=xid)))  # type: ignore[arg-type]
        else:
            key = old if change.old_kind == "K" else None
            full = old if change.old_kind == "O" else None
            out.append((change.lsn, Delete(table.oid, key, full, xid=xid)))  # type: ignore[arg-type]
        return out

    def schema(
        self, table: TableVersion, lsn: int, xid: int | None, in_stream: bool, top_xid: int
    ) -> Out:
        if in_stream:
            sent = top_xid in self.stream_schema.get(table.oid, set())
        else:
            sent = self.schema_sent.get(table.oid, False)
        if sent:
            return []
        columns = self.view(table).columns
        out: Out = [(lsn, m) for m in table.type_messages(xid, columns)]
        out.append((lsn, table.relation(xid, columns)))
        if in_stream:
            self.stream_schema.setdefault(table.oid, set()).add(top_xid)
        else:
            self.schema_sent[table.oid] = True
        return out


@dataclass(frozen=True, slots=True)
class _Catalog:
    """The publications as one historic snapshot sees them: each one's tables (None:
    all), its listed tables' column lists and row filters, pubgencols and actions."""

    listed: Mapping[str, frozenset[str] | None]
    tables: Mapping[str, Mapping[str, PublishedTable]]
    gencols: Mapping[str, str]
    actions: Mapping[str, frozenset[str]]

    def after(self, change: PublicationChange) -> _Catalog:
        listed, tables = dict(self.listed), dict(self.tables)
        gencols, actions = dict(self.gencols), dict(self.actions)
        if change.dropped:
            for catalog in (listed, tables, gencols, actions):
                catalog.pop(change.name, None)
        else:
            listed[change.name] = change.listed
            tables[change.name] = change.published
            gencols[change.name] = change.generated_columns
            actions[change.name] = change.actions
        return _Catalog(listed, tables, gencols, actions)


def _change_lsn(change: PublicationChange) -> int:
    return change.lsn


@dataclass(frozen=True, slots=True)
class _View:
    """What the requested publications publish of one table: the columns sent
    (:meth:`TableVersion.publishes`), the actions, and each action's row filters (None:
    every row; else a row must pass one of them)."""

    table: TableVersion
    columns: tuple[str, ...]
    actions: frozenset[str]
    filters: Mapping[str, tuple[RowFilter, ...] | None]

    def filtered(
        self, table: TableVersion, kind: str, old: Row | None, new: Row | None
    ) -> str | None:
        """pgoutput_row_filter: the change to send (an UPDATE whose old row passes and new
        one does not goes as DELETE, the other way round as INSERT), or None to skip it."""
        names = [c.name for c in table.stored]

        def passes(row: Row) -> bool:
            values = {
                n: (None if v is UNCHANGED_TOAST else v) for n, v in zip(names, row, strict=True)
            }
            return any(f.matches(values) for f in self.filters.get(kind) or ())

        if kind == "insert" or (kind == "update" and old is None):
            # An UPDATE that kept its replica identity has no old row: the new one decides.
            return kind if new is not None and passes(new) else None
        if kind == "delete":
            return kind if old is not None and passes(old) else None
        assert old is not None and new is not None
        merged = tuple(o if n is UNCHANGED_TOAST else n for o, n in zip(old, new, strict=True))
        old_passes, new_passes = passes(old), passes(merged)
        if old_passes and new_passes:
            return "update"
        if old_passes:
            return "delete"
        return "insert" if new_passes else None
