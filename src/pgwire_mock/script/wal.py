"""A compiled script: its tables as the catalogue holds them at each point, and its WAL
as :class:`~pgwire_mock.script.compile.Compiler` lays it out — transactions with their
changes, LSNs and xids, non-transactional messages, markers — which
:mod:`pgwire_mock.script.encoder` decodes for one client's options."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from codec.pgoutput import UNCHANGED_TOAST, Relation, RelationColumn, Type
from pgwire_mock.script.model import Fault, Script, Sleep, WaitFor
from pgwire_mock.script.rowfilter import RowFilter
from pgwire_mock.script.types import ColumnType, TypeCatalog, encode_value

__all__ = [
    "OPEN",
    "CColumn",
    "CompiledScript",
    "OpenTxn",
    "PublicationChange",
    "PublishedTable",
    "Row",
    "RunningXacts",
    "SubTxn",
    "TableVersion",
    "WChange",
    "WFinishPrepared",
    "WMarker",
    "WMessage",
    "WSubAbort",
    "WTxn",
    "WalItem",
    "add_locks",
    "change_locks",
    "encode_row",
    "xid_of",
]


# --- compiled catalogue ------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class CColumn:
    name: str
    ctype: ColumnType
    typmod: int
    key: bool
    generated: str
    """pg_attribute.attgenerated: '' (not generated), 's' (stored) or 'v' (virtual, 18)."""
    attnum: int = 0
    """pg_attribute.attnum: its place when it was added (a dropped column keeps its own)."""


@dataclass(frozen=True, slots=True, eq=False)
class TableVersion:
    """A table as defined at one point of the script (ALTER TABLE makes a new one)."""

    name: str
    namespace: str
    relname: str
    oid: int
    identity: str  # relreplident: d, f, i, n
    columns: tuple[CColumn, ...]
    natts: int = 0
    """pg_class.relnatts: columns ever added, dropped ones included."""
    toast: bool = False
    """Whether it has a TOAST table (sizes.needs_toast_table, at its creation or since)."""

    @property
    def published(self) -> tuple[CColumn, ...]:
        """The columns pgoutput always publishes (without a column list): the ordinary
        ones, as 14–17 do and 18 does unless ``publish_generated_columns = stored``."""
        return tuple(c for c in self.columns if not c.generated)

    @property
    def stored(self) -> tuple[CColumn, ...]:
        """The columns a :data:`Row` holds: all but virtual generated ones."""
        return tuple(c for c in self.columns if c.generated != "v")

    @property
    def has_key(self) -> bool:
        return self.identity in "di" and any(c.key for c in self.published)

    def publishes(self, columns: tuple[str, ...] | None, gencols: str = "n") -> tuple[str, ...]:
        """The columns sent with a column list (exactly its columns), or without one
        those a publication with ``pubgencols`` ``gencols`` sends: the ordinary ones, and
        the stored generated ones when it is ``s`` (proto.c
        logicalrep_should_publish_column, 18; 14–17 know no generated ones here)."""
        if columns is not None:
            return tuple(c.name for c in self.stored if c.name in columns)
        return tuple(
            c.name
            for c in self.stored
            if not c.generated or (c.generated == "s" and gencols == "s")
        )

    def sent(self, columns: tuple[str, ...] | None) -> tuple[CColumn, ...]:
        """The columns of ``columns`` (from :meth:`publishes`); None: the ordinary ones."""
        if columns is None:
            return self.published
        return tuple(c for c in self.stored if c.name in columns)

    def relation(self, xid: int | None, columns: tuple[str, ...] | None = None) -> Relation:
        full = self.identity == "f"
        described = tuple(
            RelationColumn(
                1 if full or (self.identity in "di" and c.key) else 0,
                c.name,
                c.ctype.oid,
                c.typmod,
            )
            for c in self.sent(columns)
        )
        namespace = "" if self.namespace == "pg_catalog" else self.namespace
        return Relation(self.oid, namespace, self.relname, self.identity, described, xid=xid)

    def type_messages(self, xid: int | None, columns: tuple[str, ...] | None = None) -> list[Type]:
        out = []
        for c in self.sent(columns):
            if c.ctype.is_user_defined:
                namespace, name = c.ctype.type_message_names
                namespace = "" if namespace == "pg_catalog" else namespace
                out.append(Type(c.ctype.oid, namespace, name, xid=xid))
        return out


Row = tuple[object, ...]
"""One entry per :attr:`TableVersion.stored` column: value, None or UNCHANGED_TOAST."""


def encode_row(
    table: TableVersion, row: Row, *, binary: bool, columns: tuple[str, ...] | None = None
) -> tuple[object, ...]:
    """The TupleData of ``row`` in text or binary format: the columns ``columns`` names
    (:meth:`TableVersion.publishes`), or the ordinary columns when it is None."""
    out: list[object] = []
    for c, v in zip(table.stored, row, strict=True):
        if (c.name not in columns) if columns is not None else bool(c.generated):
            continue
        if v is None or v is UNCHANGED_TOAST:
            out.append(v)
        else:
            out.append(encode_value(c.ctype, v, binary=binary))
    return tuple(out)


# --- WAL items ------------------------------------------------------------------------


@dataclass(eq=False)
class SubTxn:
    """A (sub)transaction; ``xid`` is assigned at its first write, parents first."""

    parent: SubTxn | None
    name: str | None = None
    xid: int | None = None
    released: list[SubTxn] = field(default_factory=list)
    # The tables it altered: where, which, and its version before (restored if it is
    # rolled back).
    altered: list[tuple[int, str, TableVersion]] = field(default_factory=list)

    @property
    def top(self) -> SubTxn:
        t = self
        while t.parent is not None:
            t = t.parent
        return t


def xid_of(sub: SubTxn) -> int:
    """The xid of a (sub)transaction that wrote something, as every one decoded has."""
    assert sub.xid is not None
    return sub.xid


@dataclass(eq=False)
class WChange:
    """One decodable record of a transaction (a row change, TRUNCATE, a transactional
    message, or a catalog change that invalidates ``tables``)."""

    kind: str  # insert, update, delete, truncate, message, ddl, snapshot, invalidation
    lsn: int
    sub: SubTxn
    size: int  # reorder buffer memory
    table: TableVersion | None = None
    tables: tuple[TableVersion, ...] = ()
    new: Row | None = None
    old: Row | None = None
    old_kind: str | None = None  # "K" or "O"
    options: int = 0
    prefix: str = ""
    content: bytes = b""
    # snapshot and invalidation: what a catalog transaction committed while this one
    # ran queues among its changes (SnapBuildDistributeSnapshotAndInval); the
    # invalidation's publication change (an index of CompiledScript.publication_changes),
    # or else the tables whose relcache entries it invalidates.
    publication_change: int | None = None
    # ddl and truncate: how many invalidation messages the command adds to its commit.
    invalidations: int = 0


@dataclass(frozen=True)
class CatalogCommit:
    """A commit that changed the catalog, at ``lsn`` (its commit record, or COMMIT
    PREPARED's): what SnapBuildDistributeSnapshotAndInval queues in each other
    transaction in progress with a change written, as a new snapshot and its
    invalidations: ``messages`` of them, those of publication change
    ``publication_change``, or else of ``tables``' relcache entries."""

    lsn: int
    messages: int
    tables: tuple[TableVersion, ...] = ()
    publication_change: int | None = None


@dataclass(eq=False)
class WSubAbort:
    """The abort record of a subtransaction (ROLLBACK TO SAVEPOINT): ``subs`` are the
    aborted xids in the record's order, released descendants first."""

    end_lsn: int
    subs: tuple[SubTxn, ...]
    time: int


OPEN: Final = "open"
"""A transaction's kind until the record that ends it is written."""
CRASHED: Final = "crashed"
"""The kind of one that was open when the server crashed (an immediate shutdown): no
record ever ends it, and CLOG shows it neither running nor committed."""


@dataclass(eq=False)
class WTxn:
    """A transaction: its changes (and subtransaction aborts) in WAL order, ``first_lsn``
    its first record's start, ``lsn``/``end_lsn`` the record that ends it (``kind``
    commit, prepare or abort; OPEN until written)."""

    top: SubTxn
    items: list[WChange | WSubAbort]
    first_lsn: int
    kind: str  # commit, prepare, abort; OPEN until its end is written
    lsn: int
    end_lsn: int
    time: int
    origin: str | None
    origin_lsn: int
    stream: str
    gid: str | None = None
    where: str = ""
    long_running: bool = False
    running: bool = False
    """Written change by change (:meth:`Compiler.begin`), so other transactions' records
    may come between its own: a walsender reads it by LSN, as the WAL grows."""
    finished_at: int | None = None
    """A prepared one's COMMIT or ROLLBACK PREPARED record (its start), once compiled."""
    _sub_xids: set[int] = field(default_factory=set, repr=False)
    _sub_xids_read: int = field(default=0, repr=False)
    _locks: dict[str, bool] = field(default_factory=dict, repr=False)
    _locks_read: int = field(default=0, repr=False)
    _aborted: set[int] = field(default_factory=set, repr=False)

    def xids(self) -> set[int]:
        """Its xid and those of its subtransactions that wrote a change. Each change is
        looked at once: a running-xacts record asks again every 15 s of an open
        transaction's life. (A failed write takes back only changes added since the
        last call, so what was read stays true.)"""
        if self._sub_xids_read > len(self.items):  # cannot happen; start again if so
            self._sub_xids, self._sub_xids_read = set(), 0
        for item in self.items[self._sub_xids_read :]:
            if isinstance(item, WChange) and item.sub.xid is not None:
                self._sub_xids.add(item.sub.xid)
        self._sub_xids_read = len(self.items)
        top = self.top.xid
        return self._sub_xids if top is None else self._sub_xids | {top}

    def catalog_changes(self) -> list[WChange]:
        """Its changes to the catalog (ALTER TABLE, TRUNCATE, a publication command)
        outside the subtransactions rolled back: what its commit makes other
        transactions' snapshots see."""
        aborted = self.rolled_back()
        return [
            i
            for i in self.items
            if isinstance(i, WChange)
            and i.kind in ("ddl", "truncate")
            and not within(i.sub, aborted)
        ]

    def rolled_back(self) -> set[int]:
        """The id() of its subtransactions rolled back so far (ROLLBACK TO SAVEPOINT)."""
        return {id(s) for i in self.items if isinstance(i, WSubAbort) for s in i.subs}

    def locks(self) -> dict[str, bool]:
        """The tables it holds a lock on until it ends, by name: True for ACCESS
        EXCLUSIVE (TRUNCATE, ALTER TABLE), False for ROW EXCLUSIVE (a row change). A
        subtransaction rolled back released its own. Read as xids() is: new items only,
        unless one is a rollback, which has it read again from the start."""
        new = self.items[self._locks_read :]
        if len(self.items) < self._locks_read or any(isinstance(i, WSubAbort) for i in new):
            self._locks, new, self._aborted = {}, self.items, self.rolled_back()
        add_locks(self._locks, new, self._aborted)
        self._locks_read = len(self.items)
        return self._locks


def change_locks(items: Sequence[WChange | WSubAbort]) -> dict[str, bool]:
    """The table locks the changes among ``items`` take (as :func:`add_locks`)."""
    locks: dict[str, bool] = {}
    add_locks(locks, items, set())
    return locks


def add_locks(
    locks: dict[str, bool], items: Sequence[WChange | WSubAbort], aborted: set[int]
) -> None:
    """Add to ``locks`` those the changes among ``items`` take (as WTxn.locks), except
    in the (sub)transactions ``aborted`` (their id())."""
    for item in items:
        if not isinstance(item, WChange) or within(item.sub, aborted):
            continue
        exclusive = item.kind in ("truncate", "ddl")
        tables = item.tables if exclusive else (item.table,) if item.table else ()
        for table in tables:
            locks[table.name] = locks.get(table.name, False) or exclusive


def within(sub: SubTxn | None, subs: set[int]) -> bool:
    """Whether ``sub`` or a transaction above it is one of ``subs`` (their id())."""
    while sub is not None:
        if id(sub) in subs:
            return True
        sub = sub.parent
    return False


@dataclass(eq=False)
class OpenTxn:
    """A transaction in progress that :meth:`Compiler.write` adds changes to and
    :meth:`Compiler.finish` ends; ``written`` counts the changes given so far."""

    wtxn: WTxn
    stack: list[SubTxn]
    written: int = 0

    @property
    def ended(self) -> bool:
        return self.wtxn.kind != OPEN


@dataclass(frozen=True, slots=True)
class RunningXacts:
    """An xl_running_xacts record (LogStandbySnapshot): written at a slot's creation,
    by ``pg_log_standby_snapshot()`` and CHECKPOINT, and by the background writer every
    15 s of activity. Decoding one is the only time a logical slot's restart_lsn and
    catalog_xmin move (SnapBuildProcessRunningXacts), once the client confirms ``lsn``."""

    lsn: int  # where it starts: the position a slot's restart_lsn may take
    end_lsn: int
    restart_lsn: int | None
    """Where decoding could restart to see every transaction in progress: this record
    with none in progress, else the last running-xacts record before the oldest one's
    first record (ReorderBufferTXN.restart_decoding_lsn); None if there is none."""
    xmin: int  # oldestRunningXid: the slot's next catalog_xmin


@dataclass(eq=False)
class WFinishPrepared:
    txn: WTxn
    commit: bool
    lsn: int
    end_lsn: int
    time: int


@dataclass(eq=False)
class WMessage:
    """A non-transactional logical message; ``lsn`` is its record's end, ``start`` its start."""

    start: int
    lsn: int
    prefix: str
    content: bytes


@dataclass(eq=False)
class WMarker:
    """A sleep, fault or wait_for step, at the WAL position where the script reaches it."""

    kind: str  # sleep, fault, wait
    lsn: int
    step: Sleep | Fault | WaitFor


WalItem = WTxn | WFinishPrepared | WMessage | WMarker


@dataclass(frozen=True, slots=True, eq=False)
class PublishedTable:
    """How a publication publishes one listed table (15+ column list and row filter)."""

    columns: tuple[str, ...] | None = None
    filter: RowFilter | None = None


@dataclass(frozen=True, slots=True)
class PublicationChange:
    """A publication created (``listed``: its tables, None for all) or dropped
    (``dropped``) by the catalog transaction whose commit record starts at ``lsn``;
    ``invalidated``: the tables whose relcache entry it invalidates, the publication's
    (CacheInvalidateRelcache; None: every table, CacheInvalidateRelcacheAll)."""

    lsn: int
    name: str
    listed: frozenset[str] | None = None
    published: Mapping[str, PublishedTable] = field(default_factory=dict)
    generated_columns: str = "n"
    dropped: bool = False
    invalidated: frozenset[str] | None = frozenset()
    actions: frozenset[str] = frozenset()  # those it publishes (a dropped one: none)
    messages: int = 0  # the invalidation messages of its commit (sizes.publication_invalidations)


@dataclass(eq=False)
class CompiledScript:
    script: Script
    catalog: TypeCatalog
    publications: Mapping[str, frozenset[str] | None]  # None: all tables
    wal: list[WalItem]
    end_lsn: int
    slots_confirmed: Mapping[str, int]
    initial: Mapping[str, tuple[TableVersion, list[Row]]] = field(default_factory=dict)
    """Each table as declared, with its rows before the first step."""
    published: Mapping[str, Mapping[str, PublishedTable]] = field(default_factory=dict)
    """Publication → listed table → its column list and row filter."""
    generated_columns: Mapping[str, str] = field(default_factory=dict)
    """Publication → pg_publication.pubgencols: ``n`` (none) or ``s`` (stored, 18)."""
    publication_actions: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Publication → the actions it publishes (all four when missing)."""
    publication_changes: list[PublicationChange] = field(default_factory=list)
    """Publications created and dropped by steps, in WAL order (the three maps above are
    the script's own, before its first step)."""
    live: bool = False
    """A served script's WAL grows: steps are appended, and a wait_for step holds back
    what follows it until its condition holds. Only the first ``available`` items of a
    live WAL are written; a walsender that reaches them waits for more."""
    available: int = 0
    running: list[WTxn] = field(default_factory=list)
    """Transactions written change by change (:meth:`Compiler.begin`), in the order
    their first records were written; those still OPEN have changes in the WAL but no
    end yet."""
    prepares: list[WTxn] = field(default_factory=list)
    """The transactions ended by PREPARE TRANSACTION, in WAL order."""
    snapshots: list[RunningXacts] = field(default_factory=list)
    """The running-xacts records written, in WAL order (they decode to nothing)."""
    catalog_commits: list[CatalogCommit] = field(default_factory=list)
    """The commits that changed the catalog, in WAL order."""

    def written_end(self) -> int:
        """Where the written WAL ends: a live WAL's wait_for step holds back what
        follows it (its records are compiled, not yet written)."""
        if self.live and self.available < len(self.wal):
            return self.wal[self.available].lsn
        return self.end_lsn

    def in_progress(self) -> list[WTxn]:
        """The transactions written change by change whose end is not written yet."""
        end = self.written_end()
        return [t for t in self.running if t.kind == OPEN or t.lsn >= end]

    def prepared_unfinished(self) -> list[WTxn]:
        """The prepared transactions whose PREPARE is written and whose COMMIT or
        ROLLBACK PREPARED is not yet."""
        end = self.written_end()
        return [
            t
            for t in self.prepares
            if t.lsn < end and (t.finished_at is None or t.finished_at >= end)
        ]

    def oldest_running_lsn(self) -> int | None:
        """The first record of the oldest transaction still in progress, or prepared and
        not yet finished: a slot's restart_lsn stays at or before it, since decoding must
        start there to see it. A prepared transaction stays in the reorder buffer until
        COMMIT or ROLLBACK PREPARED, its prepare decoded (two-phase) or not
        (ReorderBufferPrepare truncates its changes, ReorderBufferFinishPrepared cleans it
        up), and SnapBuildProcessRunningXacts takes restart_lsn from the oldest there."""
        held = (*self.in_progress(), *self.prepared_unfinished())
        return min((t.first_lsn for t in held), default=None)

    def running_xids(self) -> list[int]:
        """The xids a running-xacts record written now lists: the transactions in
        progress and the prepared ones not yet finished (top-level and subtransactions)."""
        xids: set[int] = set()
        for txn in (*self.in_progress(), *self.prepared_unfinished()):
            xids |= txn.xids()
        return sorted(xids)
