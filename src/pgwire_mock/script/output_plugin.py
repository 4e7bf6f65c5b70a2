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
        # The catalog as the change being decoded sees it (its historic snapshot): the
        # script's publications, then those steps created or dropped, applied once the
        # walsender decodes past their commit (catch_up).
        self.listed = dict(compiled.publications)
        self.listed_tables = dict(compiled.published)
        self.gencols = dict(compiled.generated_columns)
        self.actions = dict(compiled.publication_actions)
        self.changes_applied = 0
        self.oids = {name: version.oid for name, (version, _) in compiled.initial.items()}
        self.skipped_at: int | None = None  # the lookup's LSN, until the warning is yielded
        self.views: dict[int, _View] = {}  # by table OID, for one TableVersion
        self.load_publications()
        self.schema_sent: dict[int, bool] = {}
        self.stream_schema: dict[int, set[int]] = {}
        # Tables with a valid entry in pgoutput's RelationSyncCache (looked up, published
        # or not, and not invalidated since): reading them needs no catalog access.
        self.looked_up: set[int] = set()

    def load_publications(self) -> None:
        """LoadPublications: the requested publications the catalog has, and what they
        publish. Up to 17 a missing one fails the first lookup (get_publication_oid);
        18 warns and goes on, at every load."""
        missing = tuple(p for p in self.options.publication_names if p not in self.listed)
        self.missing = missing[0] if missing and self.version < 18 else None
        self.skipped_publications = missing if self.version >= 18 else ()
        published: set[str] = set()
        self.all_tables = False
        for name in self.options.publication_names:
            tables = self.listed.get(name)
            if tables is None:
                self.all_tables = self.all_tables or name in self.listed
            else:
                published |= tables
        self.published = published

    def catch_up(self, lsn: int) -> None:
        """Apply the publications created or dropped by transactions committed before
        ``lsn``: their invalidation reloads the publications and every table's entry
        (publication_invalidation_cb, rel_sync_cache_publication_cb)."""
        changes = self.compiled.publication_changes
        start = self.changes_applied
        while self.changes_applied < len(changes) and changes[self.changes_applied].lsn < lsn:
            change = changes[self.changes_applied]
            self.changes_applied += 1
            if change.dropped:
                for catalog in (self.listed, self.listed_tables, self.gencols, self.actions):
                    catalog.pop(change.name, None)
            else:
                self.listed[change.name] = change.listed
                self.listed_tables[change.name] = change.published
                self.gencols[change.name] = change.generated_columns
                self.actions[change.name] = change.actions
            # The tables whose Relation is sent again. rel_sync_cache_relation_cb resets
            # schema_sent for the relcache entries the change invalidates (for every
            # table from 15 on: 14's looks the invalid OID of CacheInvalidateRelcacheAll
            # up and finds none). 15-17 also reset it for every table whose entry
            # get_rel_sync_entry rebuilds after any publication change (measured: ALTER
            # PUBLICATION ... DROP TABLE b sends a's Relation again on 15-17 only).
            if change.invalidated is None or 15 <= self.version <= 17:
                invalidated = list(self.schema_sent) if self.version >= 15 else []
            else:
                invalidated = [self.oids[t] for t in change.invalidated if t in self.oids]
            for oid in invalidated:
                self.invalidate(oid)
        if self.changes_applied != start:
            self.load_publications()
            self.views.clear()
            self.looked_up.clear()

    def is_published(self, table: TableVersion, lsn: int) -> bool:
        self.catch_up(lsn)
        self.looked_up.add(table.oid)
        if self.missing is not None:
            raise PublicationMissingError(self.missing)
        if self.skipped_publications:
            self.skipped_at = lsn
            self.skipped_publications = ()
        return self.all_tables or table.name in self.published

    def view(self, table: TableVersion) -> _View:
        """The columns and row filters of the requested publications that publish
        ``table`` (check_and_init_gencol, pgoutput_column_list_init,
        pgoutput_row_filter_init), checked when pgoutput builds its relation entry: at
        the table's first change."""
        view = self.views.get(table.oid)
        if view is not None and view.table is table:
            return view
        entries: list[tuple[PublishedTable, str]] = []  # with the publication's pubgencols
        actions: list[frozenset[str]] = []  # each one's
        for name in self.options.publication_names:
            tables = self.listed.get(name, frozenset())
            if tables is not None and table.name not in tables:
                continue
            published = self.listed_tables.get(name, {}).get(table.name, PublishedTable())
            entries.append((published, self.gencols.get(name, "n")))
            actions.append(self.actions.get(name, PUBLISH_ACTIONS))
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
        missing = (p for p in self.options.publication_names if p not in self.listed)
        yield PublicationsSkipped(tuple(missing), self.skipped_at)
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
