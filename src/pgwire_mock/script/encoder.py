"""Decoding a script's WAL the way pgoutput would, for one client's options.

:func:`encode_stream` yields :class:`Send` (one pgoutput message and the WAL position a
walsender reports for it), :class:`Sleep` and :class:`Fault` events. What it reproduces,
with the PostgreSQL source it comes from:

* Relation (and Type, first, for each column of a non-built-in type) before the first
  change to a table in the session, after the table was altered or truncated (a relcache
  invalidation resets ``schema_sent``), and — inside streamed transactions — once per
  streamed top-level transaction, again after a Stream Abort (``maybe_send_schema``,
  ``cleanup_rel_sync_cache`` in ``pgoutput.c``). A domain's Type message carries its base
  type's name (``logicalrep_write_typ``).
* 15+: BEGIN is sent with the first change, so transactions whose changes are all
  filtered out are skipped; 14 sends BEGIN/COMMIT for every decoded transaction.
  Prepared and streamed transactions are never skipped.
* Streaming (proto ≥ 2, ``streaming`` on/parallel): a transaction is streamed in blocks
  when its changes exceed ``logical_decoding_work_mem`` (``ReorderBufferCheckMemoryLimit``),
  or always/never as the script says. Changes in a block carry the xid of the
  (sub)transaction that made them; transactional messages carry the top-level xid
  (``ReorderBufferApplyMessage`` passes the top transaction). A rolled-back
  subtransaction whose changes were already streamed gets a Stream Abort (with abort
  LSN and time only for ``streaming=parallel``); otherwise its changes just vanish.
* Two-phase (``two_phase``, 15+): Begin Prepare…Prepare (or Stream Prepare), then Commit
  or Rollback Prepared. Without it the transaction is decoded at COMMIT PREPARED as an
  ordinary one (its streamed blocks, if any, were sent when the memory limit hit) and
  not at all when rolled back (Stream Abort if it had been streamed).
* Origin after Begin / Begin Prepare / the first Stream Start (with LSN 0 there);
  ``origin=none`` (16+) skips transactions that have an origin.
* Resuming: a transaction whose commit (or prepare) record starts before ``from_lsn`` is
  skipped, as ``SnapBuildXactNeedsSkip`` does (``ptr < start_decoding_at``). One still
  in progress there is decoded again from its first change; it may be streamed only from
  a change at or after ``from_lsn`` (``ReorderBufferCanStartStreaming``), so its first
  block then holds everything before (first_segment set), and one not streamed again
  before its commit is sent as an ordinary transaction.

The memory accounting counts every transaction the reorder buffer holds at once (the one
being decoded, those written change by change, read as the WAL grows, and those prepared
without two-phase decoding, held until their COMMIT or ROLLBACK PREPARED as ``decode.c``
holds them when ``FilterPrepare`` is true), as ``ReorderBufferCheckMemoryLimit`` does: a
prepared one may be the transaction streamed (or spilled) when a later one passes the
limit, then ends in Stream Commit or Stream Abort.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

from codec.pgoutput import (
    UNCHANGED_TOAST,
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    Message,
    Origin,
    PgOutputMessage,
    Prepare,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    Update,
    encode,
)
from pgwire_mock.script.compile import compile_script
from pgwire_mock.script.errors import OptionError, PublicationMissingError
from pgwire_mock.script.model import Fault as ScriptFault
from pgwire_mock.script.model import Script
from pgwire_mock.script.model import Sleep as ScriptSleep
from pgwire_mock.script.rowfilter import RowFilter
from pgwire_mock.script.wal import (
    OPEN,
    CompiledScript,
    PublishedTable,
    Row,
    SubTxn,
    TableVersion,
    WChange,
    WFinishPrepared,
    WMessage,
    WSubAbort,
    WTxn,
    encode_row,
)

__all__ = [
    "MAX_PROTO_VERSION",
    "EndOfWal",
    "Fault",
    "PublicationsSkipped",
    "Send",
    "Sleep",
    "StreamEvent",
    "StreamOptions",
    "encode_stream",
]

MAX_PROTO_VERSION: Final[Mapping[int, int]] = {14: 2, 15: 3, 16: 4, 17: 4, 18: 4}


# --- events ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    """Send ``message`` in an XLogData whose ``wal_start`` is this position.

    ``payload`` is the message's bytes (for recordings, the recorded bytes).
    """

    wal_start: int
    message: PgOutputMessage
    payload: bytes = b""

    def __post_init__(self) -> None:
        if not self.payload:
            object.__setattr__(self, "payload", encode(self.message))


@dataclass(frozen=True, slots=True)
class Sleep:
    """Pause the stream for ``seconds`` (the WAL position is ``lsn``)."""

    seconds: float
    lsn: int = 0


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault for the server to act on, at WAL position ``lsn``."""

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)
    lsn: int = 0


@dataclass(frozen=True, slots=True)
class EndOfWal:
    """A live WAL's end so far (``lsn``): the stream goes on when more is written."""

    lsn: int


@dataclass(frozen=True, slots=True)
class PublicationsSkipped:
    """18: requested publications that do not exist, skipped with a WARNING when pgoutput
    first loads the publications (``LoadPublications``), at the change at ``lsn``."""

    names: tuple[str, ...]
    lsn: int


StreamEvent: TypeAlias = Send | Sleep | Fault | EndOfWal | PublicationsSkipped


# --- options --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """pgoutput options of START_REPLICATION (``streaming``: off, on or parallel)."""

    proto_version: int = 1
    publication_names: tuple[str, ...] = ()
    binary: bool = False
    messages: bool = False
    streaming: str = "off"
    two_phase: bool = False
    origin: str = "any"

    @classmethod
    def from_pgoutput(
        cls, options: Mapping[str, str] | Iterable[tuple[str, str]], *, server_version: int
    ) -> StreamOptions:
        """Parse START_REPLICATION options as pgoutput does, with its errors
        (:class:`OptionError` with PostgreSQL's SQLSTATE and message)."""
        pairs = list(options.items()) if isinstance(options, Mapping) else list(options)
        seen: set[str] = set()
        values: dict[str, Any] = {}
        for name, value in pairs:
            if name in seen:
                raise OptionError("conflicting or redundant options", sqlstate="42601")
            seen.add(name)
            known = {"proto_version", "publication_names", "binary", "messages", "streaming"}
            if server_version >= 15:
                known.add("two_phase")
            if server_version >= 16:
                known.add("origin")
            if name not in known:
                raise OptionError(f"unrecognized pgoutput option: {name}", sqlstate="XX000")
            if name == "proto_version":
                if not value.isdigit():
                    raise OptionError("invalid proto_version", sqlstate="22023")
                values[name] = int(value)
            elif name == "publication_names":
                values[name] = _split_identifiers(value)
            elif name == "streaming":
                if server_version >= 16 and value.lower() == "parallel":
                    values[name] = "parallel"
                else:
                    values[name] = "on" if _parse_bool(name, value) else "off"
            elif name == "origin":
                if value.lower() not in ("none", "any"):
                    raise OptionError(f'unrecognized origin value: "{value}"', sqlstate="22023")
                values[name] = value.lower()
            else:
                values[name] = _parse_bool(name, value)
        if server_version >= 17:
            for required in ("proto_version", "publication_names"):
                if required not in values:
                    raise OptionError(f'option "{required}" missing', sqlstate="22023")
        result = cls(
            proto_version=values.get("proto_version", 0),
            publication_names=values.get("publication_names", ()),
            binary=values.get("binary", False),
            messages=values.get("messages", False),
            streaming=values.get("streaming", "off"),
            two_phase=values.get("two_phase", False),
            origin=values.get("origin", "any"),
        )
        result.check(server_version, publication_names_given="publication_names" in values)
        return result

    def check(self, server_version: int, *, publication_names_given: bool = True) -> None:
        """Raise :class:`OptionError` for what ``pgoutput_startup`` refuses."""
        top = MAX_PROTO_VERSION.get(server_version, 4)
        who = "we only support" if server_version < 16 else "server only supports"
        if self.proto_version > top:
            raise OptionError(
                f"client sent proto_version={self.proto_version} but {who} protocol {top} or lower",
                sqlstate="0A000",
            )
        if self.proto_version < 1:
            raise OptionError(
                f"client sent proto_version={self.proto_version} but {who} protocol 1 or higher",
                sqlstate="0A000",
            )
        if not publication_names_given:
            raise OptionError("publication_names parameter missing", sqlstate="22023")
        if self.streaming == "on" and self.proto_version < 2:
            raise OptionError(
                f"requested proto_version={self.proto_version} does not support streaming, "
                "need 2 or higher",
                sqlstate="22023",
            )
        if self.streaming == "parallel" and self.proto_version < 4:
            raise OptionError(
                f"requested proto_version={self.proto_version} does not support parallel "
                "streaming, need 4 or higher",
                sqlstate="22023",
            )
        if self.two_phase and self.proto_version < 3:
            raise OptionError(
                f"requested proto_version={self.proto_version} does not support two-phase "
                "commit, need 3 or higher",
                sqlstate="22023",
            )

    def as_pgoutput(self) -> dict[str, str]:
        """The options as START_REPLICATION / ``pg_logical_slot_get_binary_changes`` take them."""
        out = {
            "proto_version": str(self.proto_version),
            "publication_names": ",".join(self.publication_names),
            "binary": _bool(self.binary),
            "messages": _bool(self.messages),
            "streaming": self.streaming,
        }
        if self.two_phase:
            out["two_phase"] = "true"
        if self.origin != "any":
            out["origin"] = self.origin
        return out


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _parse_bool(name: str, value: str) -> bool:
    # parse_bool (src/backend/utils/adt/bool.c): any unique prefix of true/false/yes/no,
    # on/off (two letters at least) and 1/0.
    v = value.strip().lower()
    if v and ("true".startswith(v) or "yes".startswith(v) or v in {"1", "on"}):
        return True
    if v and (
        "false".startswith(v)
        or "no".startswith(v)
        or v == "0"
        or (len(v) >= 2 and "off".startswith(v))
    ):
        return False
    raise OptionError(f"{name} requires a Boolean value", sqlstate="22023")


def _split_identifiers(text: str) -> tuple[str, ...]:
    # SplitIdentifierString: comma-separated, optionally double-quoted, bare ones downcased.
    names: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i < n and text[i] == '"':
            j = i + 1
            buf = []
            while True:
                if j >= n:
                    raise OptionError("invalid publication_names syntax", sqlstate="42602")
                if text[j] == '"':
                    if j + 1 < n and text[j + 1] == '"':
                        buf.append('"')
                        j += 2
                        continue
                    break
                buf.append(text[j])
                j += 1
            name = "".join(buf)
            i = j + 1
        else:
            j = i
            while j < n and text[j] != "," and not text[j].isspace():
                j += 1
            name = text[i:j].lower()
            i = j
        if not name:
            raise OptionError("invalid publication_names syntax", sqlstate="42602")
        names.append(name)
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            return tuple(names)
        if text[i] != ",":
            raise OptionError("invalid publication_names syntax", sqlstate="42602")
        i += 1


# --- the encoder ----------------------------------------------------------------------------


def encode_stream(
    source: Script | CompiledScript | Any,
    options: StreamOptions,
    *,
    server_version: int | None = None,
    from_lsn: int = 0,
    two_phase_at: int | None = None,
) -> Iterator[StreamEvent]:
    """What pgoutput sends to a client with ``options`` that starts at ``from_lsn``.

    ``source`` is a :class:`~pgwire_mock.script.Script`, a compiled one (a live WAL:
    at the end of what is written so far the stream yields :class:`EndOfWal` and goes on
    when resumed after more is written), or a recording from
    :func:`~pgwire_mock.script.load_recording`. ``server_version`` defaults to the
    script's ``pg_version``; ``from_lsn`` is the effective start point (the server has
    already moved it up to the slot's confirmed_flush). Raises :class:`ScriptError` for
    a bad script, :class:`OptionError` for options pgoutput refuses, and
    :class:`PublicationMissingError` when the first change is decoded if a requested
    publication does not exist — the same point a real server reports it; 18 skips such
    publications instead, and the stream yields :class:`PublicationsSkipped` there.
    ``two_phase_at``: the slot is marked two-phase since that position (0: not known),
    so prepared transactions are decoded in two phases even if ``options`` do not ask
    for it (15+, any protocol); one prepared before it, which no client got as
    prepared, comes whole at its COMMIT PREPARED.
    """
    if isinstance(source, CompiledScript):
        compiled = source
    elif isinstance(source, Script):
        compiled = compile_script(source)
    else:
        yield from source.encode(options, server_version=server_version, from_lsn=from_lsn)
        return
    version = server_version if server_version is not None else compiled.script.server.pg_version
    options.check(version)
    yield from _Session(compiled, options, version, from_lsn, two_phase_at).run()


@dataclass(eq=False)
class _TxnState:
    pending: list[WChange] = field(default_factory=list)
    memory: int = 0
    spilled: int = 0  # pending[:spilled] went to disk (counted in memory no more)
    serialized: set[int] = field(default_factory=set)  # id() of SubTxns with spilled changes
    streamed: bool = False
    streamed_subs: set[int] = field(default_factory=set)  # id() of SubTxn
    invalidated: set[int] = field(default_factory=set)  # table OIDs, flushed at the end
    # 18 evicts one (sub)transaction at a time: id() of the WChanges it spilled, and of
    # the (sub)transactions it found aborted and truncated (their changes are dropped).
    on_disk: set[int] = field(default_factory=set)
    dropped: set[int] = field(default_factory=set)
    aborted: bool = False  # the top transaction was truncated as aborted
    live: bool = False  # decoded while it runs (a long_running one appended to a waiting walsender)


Out: TypeAlias = list[tuple[int, PgOutputMessage]]


class _Session:
    def __init__(
        self,
        compiled: CompiledScript,
        options: StreamOptions,
        version: int,
        from_lsn: int,
        two_phase_at: int | None = None,
    ) -> None:
        self.compiled = compiled
        self.options = options
        self.version = version
        self.from_lsn = from_lsn
        self.binary = options.binary
        self.parallel = options.streaming == "parallel"
        self.can_stream = options.streaming != "off"
        # ctx->twophase: asked for now, or the slot marked by an earlier start.
        self.two_phase = (options.two_phase or two_phase_at is not None) and version >= 15
        self.two_phase_at = two_phase_at or 0
        self.limit = compiled.script.server.logical_decoding_work_mem * 1024
        missing = tuple(p for p in options.publication_names if p not in compiled.publications)
        # Up to 17 the first lookup fails (get_publication_oid); 18 warns once and goes on.
        self.missing = missing[0] if missing and version < 18 else None
        self.skipped_publications = missing if version >= 18 else ()
        self.skipped_at: int | None = None  # the lookup's LSN, until the warning is yielded
        published: set[str] = set()
        self.all_tables = False
        for name in options.publication_names:
            tables = compiled.publications.get(name)
            if tables is None:
                self.all_tables = self.all_tables or name in compiled.publications
            else:
                published |= tables
        self.published = published
        self.views: dict[int, _View] = {}  # by table OID, for one TableVersion
        self.schema_sent: dict[int, bool] = {}
        self.stream_schema: dict[int, set[int]] = {}
        self.deferred: dict[int, _TxnState] = {}  # id(WTxn) → state, prepared without 2PC
        self.finished: dict[int, bool] = {}  # id(WTxn) → committed, of finished prepared ones
        self.finish_scanned = 0
        # Tables with a valid entry in pgoutput's RelationSyncCache (looked up, published
        # or not, and not invalidated since): reading them needs no catalog access.
        self.looked_up: set[int] = set()
        # Where the WAL ended when this walsender first waited there (None: not yet).
        self.waited_at: int | None = None
        # Transactions written change by change (CompiledScript.running) are read record
        # by record: the reading of each begun, the index of the next item each reads,
        # and the position up to which the WAL is read (their items before it).
        self.reading: dict[int, Iterator[StreamEvent | None]] = {}
        # The transactions whose changes the reorder buffer holds now, by id(WTxn), in
        # the order their decoding began (the current one and those read record by
        # record): their memory counts together against logical_decoding_work_mem.
        self.queued: dict[int, tuple[WTxn, _TxnState]] = {}
        self.next_item: dict[int, int] = {}
        self.running_read = 0  # CompiledScript.running[:running_read] are read whole
        self.horizon = _NO_HORIZON

    # helpers

    def is_published(self, table: TableVersion, lsn: int) -> bool:
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
        compiled = self.compiled
        entries: list[tuple[PublishedTable, str]] = []  # with the publication's pubgencols
        for name in self.options.publication_names:
            tables = compiled.publications.get(name, frozenset())
            if tables is not None and table.name not in tables:
                continue
            published = compiled.published.get(name, {}).get(table.name, PublishedTable())
            entries.append((published, compiled.generated_columns.get(name, "n")))
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
        filters: list[RowFilter] | None = []
        for published, _ in entries:
            if published.filter is None:
                filters = None  # a publication without a filter publishes every row
            elif filters is not None:
                filters.append(published.filter)
        view = _View(table, columns, tuple(filters) if filters else None)
        self.views[table.oid] = view
        return view

    def invalidate(self, oid: int) -> None:
        self.looked_up.discard(oid)
        self.schema_sent[oid] = False
        self.stream_schema.pop(oid, None)

    def cleanup(self, top_xid: int, *, commit: bool) -> None:
        for oid, xids in self.stream_schema.items():
            if top_xid in xids:
                if commit:
                    self.schema_sent[oid] = True
                xids.discard(top_xid)

    def skipped(self, txn: WTxn) -> bool:
        return bool(txn.origin) and self.options.origin == "none" and self.version >= 16

    def forget(self, txn: WTxn) -> None:
        # A skipped transaction's invalidations still run (ReorderBufferForget).
        for item in txn.items:
            if isinstance(item, WChange) and item.kind in ("ddl", "truncate"):
                for t in item.tables:
                    self.invalidate(t.oid)

    # the walk

    def run(self) -> Iterator[StreamEvent]:
        compiled = self.compiled
        wal = compiled.wal
        i = 0
        while True:
            if i >= (compiled.available if compiled.live else len(wal)):
                # The records of transactions still open up to the end of what is
                # written: a wait_for step holds back those after it too.
                yield from self.read_running(compiled.written_end())
                if not compiled.live:
                    return
                # The end of the WAL written so far: the caller resumes this generator
                # once more is written.
                if self.waited_at is None:
                    self.waited_at = compiled.end_lsn
                yield EndOfWal(compiled.end_lsn)
                continue
            item = wal[i]
            i += 1
            if compiled.running:
                yield from self.read_running(item.start if isinstance(item, WMessage) else item.lsn)
            if isinstance(item, WTxn):
                begun = self.reading.pop(id(item), None)  # a running one read so far
                yield from self.with_warning(self.txn(item) if begun is None else begun)
            elif isinstance(item, WFinishPrepared):
                yield from self.finish_prepared(item)
            elif isinstance(item, WMessage):
                if item.start >= self.from_lsn and self.options.messages:
                    yield Send(item.lsn, Message(0, item.lsn, item.prefix, item.content))
            elif item.lsn >= self.from_lsn:
                step = item.step
                if isinstance(step, ScriptSleep):
                    yield Sleep(float(step.seconds), item.lsn)
                elif isinstance(step, ScriptFault):
                    yield Fault(step.name, dict(step.params), item.lsn)

    def with_warning(self, events: Iterator[StreamEvent | None]) -> Iterator[StreamEvent]:
        """A transaction's events, to its end, with 18's warning about skipped
        publications before the event that looked them up."""
        self.horizon = _NO_HORIZON
        for event in events:
            if self.skipped_at is not None:
                yield from self.skipped_warning()
            if event is not None:
                yield event
        if self.skipped_at is not None:
            yield from self.skipped_warning()

    def read_running(self, horizon: int) -> Iterator[StreamEvent]:
        """Read the records before ``horizon`` of the transactions written change by
        change, in LSN order across them, as the walsender reads the WAL: one in progress
        streams a block when its memory reaches the limit, before anything the WAL holds
        after that change. Each ends where the WAL ends it (:meth:`run`)."""
        running = self.compiled.running
        while True:
            # Those at the front read to their end are done with for good.
            while self.running_read < len(running):
                done = running[self.running_read]
                if done.kind == OPEN or self.next_item.get(id(done), 0) < len(done.items):
                    break
                self.next_item.pop(id(done), None)
                self.running_read += 1
            found: tuple[int, WTxn] | None = None
            for k in range(self.running_read, len(running)):
                txn = running[k]
                j = self.next_item.get(id(txn), 0)
                if j < len(txn.items):
                    lsn = _item_lsn(txn.items[j])
                    if lsn < horizon and (found is None or lsn < found[0]):
                        found = (lsn, txn)
            if found is None:
                return
            lsn, txn = found
            events = self.reading.get(id(txn))
            if events is None:
                events = self.reading[id(txn)] = self.txn(txn)
            self.horizon = lsn + 1  # that one record
            for event in events:
                if self.skipped_at is not None:
                    yield from self.skipped_warning()
                if event is None:
                    break
                yield event

    def items(self, txn: WTxn) -> Iterator[WChange | WSubAbort | None]:
        """``txn``'s items; for one written change by change, those before
        :attr:`horizon` and None (read no further for now) at it, and the end once its
        end record is before it."""
        if not txn.running:
            yield from txn.items
            return
        j = 0
        while True:
            if j < len(txn.items) and _item_lsn(txn.items[j]) < self.horizon:
                self.next_item[id(txn)] = j + 1
                yield txn.items[j]
                j += 1
            elif j == len(txn.items) and txn.kind != OPEN and txn.lsn < self.horizon:
                return
            else:
                yield None

    def skipped_warning(self) -> Iterator[StreamEvent]:
        assert self.skipped_at is not None
        missing = (p for p in self.options.publication_names if p not in self.compiled.publications)
        yield PublicationsSkipped(tuple(missing), self.skipped_at)
        self.skipped_at = None

    def txn(self, txn: WTxn) -> Iterator[StreamEvent | None]:
        """Decode ``txn``; None where one written change by change is read no further
        for now (:meth:`items`)."""
        if self.skipped(txn):
            for item in self.items(txn):
                if item is None:
                    yield None
            self.forget(txn)
            return
        # A long-running transaction written after this walsender waited at the end of
        # WAL is decoded while it runs: CLOG shows it (and a subtransaction not yet rolled
        # back) in progress, so it streams as a committed one would, and a rollback at
        # its end is a Stream Abort.
        state = _TxnState(
            live=txn.long_running and self.waited_at is not None and txn.first_lsn >= self.waited_at
        )
        self.queued[id(txn)] = (txn, state)
        held = False
        try:
            yield from self.decode(txn, state)
            # Prepared without two-phase decoding: it stays in the reorder buffer, its
            # changes counted, until COMMIT or ROLLBACK PREPARED (finish_prepared).
            held = id(txn) in self.deferred
        finally:
            if not held:
                del self.queued[id(txn)]

    def decode(self, txn: WTxn, state: _TxnState) -> Iterator[StreamEvent | None]:
        streamable = self.can_stream and txn.stream != "never"
        top_xid = _xid(txn.top)
        for item in self.items(txn):
            if item is None:
                yield None
                continue
            if txn.running:
                # What CLOG shows as the record is read: in progress until its end is
                # written (one a wait_for step holds back is not yet).
                state.live = txn.kind == OPEN or txn.lsn >= self.compiled.written_end()
            if isinstance(item, WChange) and self.version >= 18:
                yield from self.queue_change(txn, state, item, streamable)
                continue
            if isinstance(item, WChange):
                if state.aborted:
                    continue  # txn->concurrent_abort: no more changes are collected
                state.pending.append(item)
                state.memory += item.size
                if self.queued_memory() >= self.limit:
                    yield from self.memory_limit(item)
                elif (
                    streamable
                    and txn.stream == "auto"
                    and id(item.sub) in state.serialized
                    and item.lsn >= self.from_lsn
                    and item.kind != "ddl"
                ):
                    # ReorderBufferProcessPartialChange: a spilled (sub)transaction streams
                    # at its first change that may stream, not at the next memory limit
                    # (the rule server/resume.py applies to recordings).
                    yield from self.stream_or_abort(txn, state, item.lsn)
                continue
            aborted = {id(s) for s in item.subs}
            if (
                streamable
                and txn.stream == "always"
                and item.end_lsn >= self.from_lsn
                and any(id(c.sub) in aborted for c in state.pending)
            ):
                yield from self.stream_block(txn, state)
            kept = [c for c in state.pending if id(c.sub) not in aborted]
            in_memory = [c for c in state.pending[state.spilled :] if id(c) not in state.on_disk]
            state.memory -= sum(c.size for c in in_memory if id(c.sub) in aborted)
            state.spilled -= sum(1 for c in state.pending[: state.spilled] if id(c.sub) in aborted)
            state.pending = kept
            sent = False
            for sub in item.subs:
                if id(sub) in state.streamed_subs:
                    yield Send(
                        item.end_lsn, self.stream_abort(top_xid, _xid(sub), item.end_lsn, item.time)
                    )
                    sent = True
            if sent:
                self.cleanup(top_xid, commit=False)
        if txn.kind == "commit":
            if txn.lsn < self.from_lsn:
                self.forget(txn)
                return
            yield from self.finish(txn, state, txn.lsn, txn.end_lsn, txn.time)
        elif txn.kind == "abort":
            # DecodeAbort: ReorderBufferAbort of each subtransaction still open, then of
            # the top one; each one marked streamed gets its Stream Abort.
            rolled_back = {id(s) for i in txn.items if isinstance(i, WSubAbort) for s in i.subs}
            open_subs = {id(c.sub): c.sub for c in txn.items if isinstance(c, WChange)}
            for key, sub in sorted(open_subs.items(), key=lambda kv: _xid(kv[1])):
                if key in state.streamed_subs and key not in rolled_back and sub is not txn.top:
                    yield Send(
                        txn.end_lsn, self.stream_abort(top_xid, _xid(sub), txn.end_lsn, txn.time)
                    )
            if state.streamed:
                yield Send(txn.end_lsn, self.stream_abort(top_xid, top_xid, txn.end_lsn, txn.time))
                self.cleanup(top_xid, commit=False)
        elif self.two_phase:
            if txn.lsn < self.from_lsn and txn.lsn < self.two_phase_at:
                # Prepared before the slot decoded two-phase: no client got its PREPARE,
                # so ReorderBufferFinishPrepared replays it whole at COMMIT PREPARED
                # (final_lsn < two_phase_at); the reorder buffer holds it until then.
                state.live = False
                self.deferred[id(txn)] = state
                return
            if txn.lsn < self.from_lsn:
                self.forget(txn)
                return
            yield from self.prepare(txn, state)
        else:
            # decode.c: FilterPrepare, so only ReorderBufferProcessXid; the transaction is
            # in progress for CLOG until finished, which aborted_after_the_fact reads off
            # the WAL written by then.
            state.live = False
            self.deferred[id(txn)] = state

    def finish_prepared(self, item: WFinishPrepared) -> Iterator[StreamEvent]:
        txn = item.txn
        # The reorder buffer lets go of a transaction prepared without two-phase decoding
        # at its COMMIT or ROLLBACK PREPARED, decoded or skipped (ReorderBufferForget).
        self.queued.pop(id(txn), None)
        if self.skipped(txn) or item.lsn < self.from_lsn:
            self.deferred.pop(id(txn), None)
            return
        xid = _xid(txn.top)
        gid = txn.gid or ""
        if self.two_phase:
            state = self.deferred.pop(id(txn), None)
            if item.commit:
                if state is not None:
                    # Prepared before two_phase_at (decode): Begin Prepare…Prepare with
                    # its PREPARE's LSNs first. A rollback is not replayed.
                    yield from self.prepare(txn, state)
                message: PgOutputMessage = CommitPrepared(
                    0, item.lsn, item.end_lsn, item.time, xid, gid
                )
            else:
                message = RollbackPrepared(
                    0, txn.end_lsn, item.end_lsn, txn.time, item.time, xid, gid
                )
            yield Send(item.end_lsn, message)
            return
        state = self.deferred.pop(id(txn), None)
        if state is None:
            return
        if item.commit:
            yield from self.finish(txn, state, item.lsn, item.end_lsn, item.time)
        elif state.streamed:
            yield Send(item.end_lsn, self.stream_abort(xid, xid, item.end_lsn, item.time))
            self.cleanup(xid, commit=False)

    def queue_change(
        self, txn: WTxn, state: _TxnState, change: WChange, streamable: bool
    ) -> Iterator[StreamEvent]:
        """ReorderBufferQueueChange as 18 runs it, for a stream decoded after the fact
        (a script's transactions are complete when the walsender reads them): at the
        memory limit, ReorderBufferCheckAndTruncateAbortedTXN truncates a transaction
        that CLOG already shows aborted instead of streaming or spilling it, and later
        changes of an aborted (sub)transaction are dropped as they are queued."""
        if state.aborted or id(change.sub) in state.dropped:
            return
        state.pending.append(change)
        state.memory += change.size
        can_stream = streamable and txn.stream == "auto" and change.lsn >= self.from_lsn
        if can_stream and id(change.sub) in state.serialized and change.kind != "ddl":
            # ReorderBufferProcessPartialChange, before the memory check.
            yield from self.stream_or_abort(txn, state, change.lsn)
            return
        if self.queued_memory() >= self.limit:
            yield from self.memory_limit(change)

    def queued_memory(self) -> int:
        """rb->size: the memory of every transaction the reorder buffer holds."""
        return sum(state.memory for _, state in self.queued.values())

    def memory_limit(self, change: WChange) -> Iterator[StreamEvent]:
        """ReorderBufferCheckMemoryLimit once ``change`` is queued and the transactions
        held together reach the limit: until under it, stream the largest top
        transaction that may stream (ReorderBufferLargestTopTXN, the older of equals),
        if the walsender may start streaming at ``change`` (ReorderBufferCanStartStreaming:
        not before its start point), else spill the largest to disk, which empties its
        memory as streaming would. A transaction CLOG already shows aborted is cut short
        when streamed (14-17, HandleConcurrentAbort) or truncated first (18,
        ReorderBufferCheckAndTruncateAbortedTXN)."""
        total = self.queued_memory()
        while total >= self.limit:
            held = [ts for ts in self.queued.values() if ts[1].memory > 0]
            streamable = [ts for ts in held if self.can_stream and ts[0].stream == "auto"]
            if change.lsn >= self.from_lsn and streamable:
                txn, state = max(streamable, key=lambda ts: ts[1].memory)
                if self.version >= 18 and self.aborted_after_the_fact(txn, state):
                    self.truncate(txn, state, None)
                else:
                    yield from self.stream_or_abort(txn, state, change.lsn)
            elif self.version >= 18:
                self.spill_largest(change)
            else:
                txn, state = max(held, key=lambda ts: ts[1].memory)
                state.memory = 0
                state.spilled = len(state.pending)
                state.serialized.update(id(c.sub) for c in state.pending)
            before, total = total, self.queued_memory()
            if total >= before:  # nothing left to evict (never, if the sizes add up)
                return

    def stream_or_abort(self, txn: WTxn, state: _TxnState, lsn: int) -> Iterator[StreamEvent]:
        """ReorderBufferStreamTXN at ``lsn``: a block, or cut short if CLOG already shows
        the transaction aborted (HandleConcurrentAbort at its first catalog access)."""
        if self.aborted_after_the_fact(txn, state):
            yield from self.concurrent_abort(txn, state, lsn)
        else:
            yield from self.stream_block(txn, state)

    def spill_largest(self, change: WChange) -> None:
        """18's ReorderBufferLargestTXN: the largest (sub)transaction in memory goes to
        disk, or is truncated if CLOG shows it (or its top transaction) aborted."""
        sizes: dict[tuple[int, int], int] = {}
        owners: dict[int, tuple[WTxn, _TxnState]] = {}
        for txn, state in self.queued.values():
            for c in state.pending:
                if id(c) not in state.on_disk:
                    key = (id(txn), id(c.sub))
                    sizes[key] = sizes.get(key, 0) + c.size
            owners[id(txn)] = (txn, state)
        key = max(sizes, key=sizes.__getitem__)
        txn, state = owners[key[0]]
        largest = key[1]
        aborted_subs = {
            id(s)
            for i in txn.items
            if isinstance(i, WSubAbort) and not (state.live and i.end_lsn > change.lsn)
            for s in i.subs
        }
        if self.aborted_after_the_fact(txn, state) or largest in aborted_subs:
            self.truncate(txn, state, None if largest == id(txn.top) else largest)
        else:
            state.on_disk.update(id(c) for c in state.pending if id(c.sub) == largest)
            state.serialized.add(largest)
            state.memory -= sizes[key]

    def concurrent_abort(self, txn: WTxn, state: _TxnState, lsn: int) -> Iterator[StreamEvent]:
        """14-17 stream a transaction that CLOG already shows aborted; the walsender
        notices at its first catalog access (a table not in pgoutput's cache), ends the
        block there (empty if that is its first change), and collects none of the
        transaction's later changes (HandleConcurrentAbort, ``txn->concurrent_abort``).
        ReorderBufferTruncateTXN then marks streamed every subtransaction that had changes
        collected, so each gets its Stream Abort at its abort record."""
        collected = {id(c.sub) for c in state.pending if c.sub is not txn.top}
        sent = self.before_lookup(state.pending)
        if sent:
            state.pending = sent
            yield from self.stream_block(txn, state)
        else:
            yield Send(lsn, StreamStart(_xid(txn.top), not state.streamed))
            yield Send(lsn, StreamStop())
            state.streamed = True
        state.streamed_subs |= collected
        state.pending = []
        state.memory = 0
        state.aborted = True

    def before_lookup(self, changes: Sequence[WChange]) -> list[WChange]:
        """The changes before the first that needs a catalog access (a table not in
        pgoutput's cache): where HandleConcurrentAbort stops an aborted transaction."""
        for index, change in enumerate(changes):
            tables = change.tables or ((change.table,) if change.table is not None else ())
            if change.kind != "message" and any(t.oid not in self.looked_up for t in tables):
                return list(changes[:index])
        return list(changes)

    def truncate(self, txn: WTxn, state: _TxnState, sub: int | None) -> None:
        """ReorderBufferTruncateTXN of the top transaction (``sub`` None: all its
        changes) or of one subtransaction, marked aborted.

        Truncating the top transaction marks each subtransaction with changes in memory
        streamed (``ReorderBufferMaybeMarkTXNStreamed``), streaming or not: 18.4 then
        sends a Stream Abort for it at its abort record, to protocol 1 clients too."""
        gone = [c for c in state.pending if sub is None or id(c.sub) == sub]
        if sub is None and txn.end_lsn >= self.from_lsn:
            state.streamed_subs.update(
                id(c.sub) for c in gone if c.sub is not txn.top and id(c) not in state.on_disk
            )
        state.memory -= sum(c.size for c in gone if id(c) not in state.on_disk)
        state.on_disk.difference_update(id(c) for c in gone)
        kept = {id(c) for c in gone}
        state.pending = [c for c in state.pending if id(c) not in kept]
        if sub is None:
            state.aborted = True
        else:
            state.dropped.add(sub)

    def aborted_after_the_fact(self, txn: WTxn, state: _TxnState) -> bool:
        """Whether CLOG shows ``txn`` aborted when the walsender reads it: rolled back,
        or prepared and already rolled back (a prepared one still open is in progress);
        never while it runs (``state.live``)."""
        if state.live:
            return False
        if txn.kind != "prepare":
            return txn.kind == "abort"
        wal = self.compiled.wal
        end = self.compiled.available if self.compiled.live else len(wal)
        for item in wal[self.finish_scanned : end]:  # once over the WAL, as it grows
            if isinstance(item, WFinishPrepared):
                self.finished[id(item.txn)] = item.commit
        self.finish_scanned = max(self.finish_scanned, end)
        return self.finished.get(id(txn)) is False

    def stream_abort(self, xid: int, subxid: int, lsn: int, time: int) -> StreamAbort:
        if self.parallel:
            return StreamAbort(xid, subxid, lsn, time)
        return StreamAbort(xid, subxid)

    def stream_block(self, txn: WTxn, state: _TxnState) -> Iterator[StreamEvent]:
        if not state.pending:
            return
        top_xid = _xid(txn.top)
        first = not state.streamed
        start = state.pending[0].lsn
        yield Send(start, StreamStart(top_xid, first))
        if first and txn.origin:
            yield Send(start, Origin(0, txn.origin))
        for change in state.pending:
            state.streamed_subs.add(id(change.sub))
            for wal, message in self.change(change, state, in_stream=True, top_xid=top_xid):
                yield Send(wal, message)
        yield Send(state.pending[-1].lsn, StreamStop())
        state.streamed = True
        state.pending = []
        state.memory = 0
        state.spilled = 0
        state.serialized.clear()  # ReorderBufferTruncateTXN: streamed, no longer on disk
        state.on_disk.clear()
        self.flush_invalidations(state)

    def flush_invalidations(self, state: _TxnState) -> None:
        # "make sure there's no cache pollution": ReorderBufferProcessTXN runs the
        # transaction's invalidations when it is done with it.
        for oid in state.invalidated:
            self.invalidate(oid)

    def finish(
        self, txn: WTxn, state: _TxnState, commit_lsn: int, end_lsn: int, time: int
    ) -> Iterator[StreamEvent]:
        xid = _xid(txn.top)
        streamable = self.can_stream and txn.stream != "never"
        if state.streamed or (streamable and txn.stream == "always" and state.pending):
            yield from self.stream_block(txn, state)
            yield Send(end_lsn, StreamCommit(xid, 0, commit_lsn, end_lsn, time))
            self.cleanup(xid, commit=True)
            return
        begin_sent = False
        if self.version < 15:
            yield from self.begin(txn, txn.first_lsn, Begin(commit_lsn, time, xid))
            begin_sent = True
        for change in state.pending:
            for wal, message in self.change(change, state, in_stream=False, top_xid=xid):
                if not begin_sent:
                    yield from self.begin(txn, wal, Begin(commit_lsn, time, xid))
                    begin_sent = True
                yield Send(wal, message)
        self.flush_invalidations(state)
        if begin_sent:
            yield Send(end_lsn, Commit(0, commit_lsn, end_lsn, time))

    def prepare(self, txn: WTxn, state: _TxnState) -> Iterator[StreamEvent]:
        xid = _xid(txn.top)
        gid = txn.gid or ""
        streamable = self.can_stream and txn.stream != "never"
        if state.streamed or (streamable and txn.stream == "always" and state.pending):
            yield from self.stream_block(txn, state)
            yield Send(txn.end_lsn, StreamPrepare(0, txn.lsn, txn.end_lsn, txn.time, xid, gid))
            return
        yield from self.begin(
            txn, txn.first_lsn, BeginPrepare(txn.lsn, txn.end_lsn, txn.time, xid, gid)
        )
        changes = state.pending
        if self.aborted_after_the_fact(txn, state):
            # Rolled back prepared before this walsender decodes its PREPARE (a consumer
            # back after ROLLBACK PREPARED): the first catalog access fails
            # (HandleConcurrentAbort), ReorderBufferProcessTXN stops there, and
            # ReorderBufferPrepare sends the Prepare all the same (measured on 15-18).
            changes = self.before_lookup(changes)
        for change in changes:
            for wal, message in self.change(change, state, in_stream=False, top_xid=xid):
                yield Send(wal, message)
        self.flush_invalidations(state)
        yield Send(txn.end_lsn, Prepare(0, txn.lsn, txn.end_lsn, txn.time, xid, gid))

    def begin(self, txn: WTxn, wal: int, message: PgOutputMessage) -> Iterator[StreamEvent]:
        yield Send(wal, message)
        if txn.origin:
            yield Send(wal, Origin(txn.origin_lsn, txn.origin))

    def change(self, change: WChange, state: _TxnState, *, in_stream: bool, top_xid: int) -> Out:
        """The messages for one change, updating the relation cache."""
        out: Out = []
        kind = change.kind
        xid = _xid(change.sub) if in_stream else None
        if kind == "ddl":
            for t in change.tables:
                self.invalidate(t.oid)
                state.invalidated.add(t.oid)
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
                state.invalidated.add(t.oid)
            sent = [t for t in change.tables if self.is_published(t, change.lsn)]
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
        if kind == "delete" and change.old is None:
            return out  # "didn't send DELETE change because of missing oldtuple"
        view = self.view(table)
        if view.filters is not None:
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
    (:meth:`TableVersion.publishes`) and row filters (None: every row; else a row must
    pass one of them)."""

    table: TableVersion
    columns: tuple[str, ...]
    filters: tuple[RowFilter, ...] | None

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
            return any(f.matches(values) for f in self.filters or ())

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


_NO_HORIZON: Final = 1 << 64  # past any LSN


def _item_lsn(item: WChange | WSubAbort) -> int:
    """A position inside the item's record: its start, or the byte before its end for
    the records known by their end (a message, a subtransaction's abort)."""
    if isinstance(item, WSubAbort):
        return item.end_lsn - 1
    return item.lsn - 1 if item.kind == "message" else item.lsn


def _xid(sub: SubTxn) -> int:
    assert sub.xid is not None
    return sub.xid


def options_from(
    proto_version: int,
    publication_names: Sequence[str],
    *,
    binary: bool = False,
    messages: bool = False,
    streaming: str = "off",
    two_phase: bool = False,
    origin: str = "any",
) -> StreamOptions:
    """Shorthand for :class:`StreamOptions`."""
    return StreamOptions(
        proto_version, tuple(publication_names), binary, messages, streaming, two_phase, origin
    )
