"""The reorder buffer's side of decoding a script: when a transaction's changes go out.

:class:`ReorderBuffer` holds the changes of the transactions being decoded
(:class:`TxnState`, one per transaction) and follows ``reorderbuffer.c``: it counts
their memory together against ``logical_decoding_work_mem``
(``ReorderBufferCheckMemoryLimit``), streams the largest transaction in blocks
(Stream Start…Stop) or spills it, cuts short or truncates one that CLOG already shows
aborted (``HandleConcurrentAbort`` on 14–17, ``ReorderBufferCheckAndTruncateAbortedTXN``
on 18), and replays a finished transaction through the output plugin: Begin…Commit,
Begin Prepare…Prepare, or the last block and Stream Commit / Stream Prepare.

It is apart from the WAL walk (:mod:`pgwire_mock.script.encoder`), which reads the
records in order and decides what each transaction's end means for this client, and
from pgoutput's side (:mod:`pgwire_mock.script.output_plugin`), which turns each change
into messages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from codec.pgoutput import (
    Begin,
    BeginPrepare,
    Commit,
    Origin,
    Prepare,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
)
from pgwire_mock.script.events import Send, StreamEvent
from pgwire_mock.script.options import StreamOptions
from pgwire_mock.script.output_plugin import OutputPlugin
from pgwire_mock.script.wal import (
    CRASHED,
    CompiledScript,
    WChange,
    WFinishPrepared,
    WSubAbort,
    WTxn,
    within,
    xid_of,
)

__all__ = ["ReorderBuffer", "TxnState"]


@dataclass(eq=False)
class TxnState:
    """What the reorder buffer holds of one transaction being decoded (a ReorderBufferTXN
    and its subtransactions)."""

    pending: list[WChange] = field(default_factory=list)
    memory: int = 0
    spilled: int = 0  # pending[:spilled] went to disk (counted in memory no more)
    serialized: set[int] = field(default_factory=set)  # id() of SubTxns with spilled changes
    streamed: bool = False
    streamed_subs: set[int] = field(default_factory=set)  # id() of SubTxn
    invalidated: set[int] = field(default_factory=set)  # table OIDs, flushed at the end
    # The publication changes whose invalidations were queued among its changes and
    # have run (indexes of CompiledScript.publication_changes), run again at the end.
    distributed: list[int] = field(default_factory=list)
    # 18 evicts one (sub)transaction at a time: id() of the WChanges it spilled, and of
    # the (sub)transactions it found aborted and truncated (their changes are dropped).
    on_disk: set[int] = field(default_factory=set)
    dropped: set[int] = field(default_factory=set)
    aborted: bool = False  # the top transaction was truncated as aborted
    live: bool = False  # decoded while it runs (a long_running one appended to a waiting walsender)


class ReorderBuffer:
    """The transactions one walsender's reorder buffer holds, and what it sends of them."""

    def __init__(
        self,
        compiled: CompiledScript,
        plugin: OutputPlugin,
        options: StreamOptions,
        version: int,
        from_lsn: int,
    ) -> None:
        self.compiled = compiled
        self.plugin = plugin
        self.version = version
        self.from_lsn = from_lsn
        self.parallel = options.streaming == "parallel"
        self.can_stream = options.streaming != "off"
        self.limit = compiled.script.server.logical_decoding_work_mem * 1024
        # The transactions whose changes the reorder buffer holds now, by id(WTxn), in
        # the order their decoding began (the current one and those read record by
        # record): their memory counts together against logical_decoding_work_mem.
        self.queued: dict[int, tuple[WTxn, TxnState]] = {}
        self.finished: dict[int, bool] = {}  # id(WTxn) → committed, of finished prepared ones
        self.finish_scanned = 0

    def queue_change(
        self, txn: WTxn, state: TxnState, change: WChange, streamable: bool
    ) -> Iterator[StreamEvent]:
        """ReorderBufferQueueChange: ``change`` joins ``txn``'s changes in memory, then
        what the memory limit asks for is sent (18: :meth:`queue_change_18`)."""
        self.plugin.passed(change.lsn)
        if self.version >= 18:
            yield from self.queue_change_18(txn, state, change, streamable)
            return
        if state.aborted or id(change.sub) in state.dropped:
            return  # txn->concurrent_abort: no more changes are collected
        state.pending.append(change)
        state.memory += change.size
        if self.queued_memory() >= self.limit:
            yield from self.memory_limit(change)
        elif (
            streamable
            and txn.stream == "auto"
            and id(change.sub) in state.serialized
            and change.lsn >= self.from_lsn
            and change.kind != "ddl"
        ):
            # ReorderBufferProcessPartialChange: a spilled (sub)transaction streams
            # at its first change that may stream, not at the next memory limit
            # (the rule server/resume.py applies to recordings).
            yield from self.stream_or_abort(txn, state, change.lsn)

    def queue_change_18(
        self, txn: WTxn, state: TxnState, change: WChange, streamable: bool
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

    def stream_or_abort(self, txn: WTxn, state: TxnState, lsn: int) -> Iterator[StreamEvent]:
        """ReorderBufferStreamTXN at ``lsn``: a block, or cut short if CLOG already shows
        the transaction aborted (HandleConcurrentAbort at its first catalog access), or a
        subtransaction of it whose change needs one (SetupCheckXidLive checks the xid of
        each change's own subtransaction)."""
        if self.aborted_after_the_fact(txn, state):
            yield from self.concurrent_abort(txn, state, lsn)
            return
        cut = self.aborted_sub_lookup(txn, state, lsn)
        if cut is None:
            yield from self.stream_block(txn, state)
        else:
            yield from self.concurrent_abort(txn, state, lsn, cut)

    def aborted_sub_lookup(self, txn: WTxn, state: TxnState, lsn: int) -> int | None:
        """The index in ``state.pending`` of the first change of a subtransaction CLOG
        shows aborted at ``lsn`` that needs a catalog access; None if none."""
        aborted = self.aborted_subs(txn, state, lsn)
        if not aborted:
            return None
        return self.first_lookup(state.pending, lambda change: within(change.sub, aborted))

    @staticmethod
    def aborted_subs(txn: WTxn, state: TxnState, lsn: int) -> set[int]:
        """The id() of ``txn``'s subtransactions CLOG shows aborted when the walsender
        is at ``lsn``: all those rolled back, or while it runs only those whose abort
        record is written by then."""
        return {
            id(s)
            for i in txn.items
            if isinstance(i, WSubAbort) and not (state.live and i.end_lsn > lsn)
            for s in i.subs
        }

    def spill_largest(self, change: WChange) -> None:
        """18's ReorderBufferLargestTXN: the largest (sub)transaction in memory goes to
        disk, or is truncated if CLOG shows it (or its top transaction) aborted."""
        sizes: dict[tuple[int, int], int] = {}
        owners: dict[int, tuple[WTxn, TxnState]] = {}
        for txn, state in self.queued.values():
            for c in state.pending:
                if id(c) not in state.on_disk:
                    key = (id(txn), id(c.sub))
                    sizes[key] = sizes.get(key, 0) + c.size
            owners[id(txn)] = (txn, state)
        key = max(sizes, key=sizes.__getitem__)
        txn, state = owners[key[0]]
        largest = key[1]
        if self.aborted_after_the_fact(txn, state) or largest in self.aborted_subs(
            txn, state, change.lsn
        ):
            self.truncate(txn, state, None if largest == id(txn.top) else largest)
        else:
            state.on_disk.update(id(c) for c in state.pending if id(c.sub) == largest)
            state.serialized.add(largest)
            state.memory -= sizes[key]

    def concurrent_abort(
        self, txn: WTxn, state: TxnState, lsn: int, cut: int | None = None
    ) -> Iterator[StreamEvent]:
        """14-17 stream a transaction that CLOG already shows aborted; the walsender
        notices at its first catalog access (a table not in pgoutput's cache), ends the
        block there (empty if that is its first change), and collects none of the
        transaction's later changes (HandleConcurrentAbort, ``txn->concurrent_abort``).
        ReorderBufferTruncateTXN then marks streamed every subtransaction that had changes
        collected, so each gets its Stream Abort at its abort record.

        With ``cut`` (any major), the transaction runs and only the subtransaction of
        ``state.pending[cut]`` is aborted: the block ends before that change, every change
        held is discarded, and that subtransaction alone collects no more (the flag is
        set on the change's own ReorderBufferTXN)."""
        collected = {id(c.sub) for c in state.pending if c.sub is not txn.top}
        if cut is None:
            sent = self.before_lookup(state.pending)
        else:
            sent = state.pending[:cut]
            state.dropped.add(id(state.pending[cut].sub))
        if sent:
            state.pending = sent
            yield from self.stream_block(txn, state)
        else:
            yield Send(lsn, StreamStart(xid_of(txn.top), not state.streamed))
            yield Send(lsn, StreamStop())
            state.streamed = True
        state.streamed_subs |= collected
        state.pending = []
        state.memory = 0
        state.aborted = state.aborted or cut is None

    def before_lookup(self, changes: Sequence[WChange]) -> list[WChange]:
        """The changes before the first that needs a catalog access: where
        HandleConcurrentAbort stops an aborted transaction."""
        cut = self.first_lookup(changes)
        return list(changes if cut is None else changes[:cut])

    def first_lookup(
        self, changes: Sequence[WChange], counts: Callable[[WChange], bool] = lambda _: True
    ) -> int | None:
        """The index of the first of ``changes`` for which ``counts`` holds that needs a
        catalog access when streamed: a table neither in pgoutput's cache nor looked up
        by a change before it (queued invalidations run on the way empty the cache)."""
        cached = set(self.plugin.looked_up)
        for index, change in enumerate(changes):
            tables = change.tables or ((change.table,) if change.table is not None else ())
            if change.kind == "invalidation":
                if change.publication_change is not None:
                    cached.clear()
                cached.difference_update(t.oid for t in tables)
            elif change.kind not in ("message", "snapshot"):
                if counts(change) and any(t.oid not in cached for t in tables):
                    return index
                cached.update(t.oid for t in tables)
        return None

    def truncate(self, txn: WTxn, state: TxnState, sub: int | None) -> None:
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

    def aborted_after_the_fact(self, txn: WTxn, state: TxnState) -> bool:
        """Whether CLOG shows ``txn`` aborted when the walsender reads it: rolled back,
        or prepared and already rolled back (a prepared one still open is in progress);
        never while it runs (``state.live``)."""
        if state.live:
            return False
        if txn.kind == CRASHED:
            # No abort record: 14-17 check TransactionIdDidAbort, which says no, and
            # stream it; 18 truncates what is neither running nor committed (measured).
            return self.version >= 18
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

    def stream_block(self, txn: WTxn, state: TxnState) -> Iterator[StreamEvent]:
        """ReorderBufferStreamTXN: the changes held so far as one Stream Start…Stop block."""
        if not state.pending:
            return
        top_xid = xid_of(txn.top)
        first = not state.streamed
        start = state.pending[0].lsn
        yield Send(start, StreamStart(top_xid, first))
        if first and txn.origin:
            yield Send(start, Origin(0, txn.origin))
        for change in state.pending:
            state.streamed_subs.add(id(change.sub))
            if self.run_distributed(state, change):
                continue
            for wal, message in self.plugin.change(
                change, state.invalidated, in_stream=True, top_xid=top_xid
            ):
                yield Send(wal, message)
        yield Send(state.pending[-1].lsn, StreamStop())
        state.streamed = True
        state.pending = []
        state.memory = 0
        state.spilled = 0
        state.serialized.clear()  # ReorderBufferTruncateTXN: streamed, no longer on disk
        state.on_disk.clear()
        self.flush_invalidations(state)

    def flush_invalidations(self, state: TxnState) -> None:
        # "make sure there's no cache pollution": ReorderBufferProcessTXN runs the
        # transaction's invalidations when it is done with it, those distributed to it
        # included (measured: the next transaction gets the Relation again).
        for oid in state.invalidated:
            self.plugin.invalidate(oid)
        for index in state.distributed:
            self.plugin.invalidate_for(index)

    def run_distributed(self, state: TxnState, change: WChange) -> bool:
        """Whether ``change`` is a snapshot or invalidations another transaction's commit
        queued (SnapBuildDistributeSnapshotAndInval): the reorder buffer's, not the
        output plugin's. The new snapshot is the catalog the later changes see
        (OutputPlugin.catalog_at); the invalidations run here."""
        if change.kind == "invalidation" and change.publication_change is not None:
            self.plugin.invalidate_for(change.publication_change)
            state.distributed.append(change.publication_change)
        elif change.kind == "invalidation":  # ALTER TABLE's or TRUNCATE's relcache entries
            for table in change.tables:
                self.plugin.invalidate(table.oid)
                state.invalidated.add(table.oid)
        return change.kind in ("snapshot", "invalidation")

    def finish(
        self, txn: WTxn, state: TxnState, commit_lsn: int, end_lsn: int, time: int
    ) -> Iterator[StreamEvent]:
        """ReorderBufferCommit: Begin…Commit (15+: none if no change is sent), or the last
        block and Stream Commit for a streamed transaction."""
        xid = xid_of(txn.top)
        self.plugin.passed(commit_lsn)
        streamable = self.can_stream and txn.stream != "never"
        if state.streamed or (streamable and txn.stream == "always" and state.pending):
            yield from self.stream_block(txn, state)
            yield Send(end_lsn, StreamCommit(xid, 0, commit_lsn, end_lsn, time))
            self.plugin.cleanup(xid, commit=True)
            return
        begin_sent = False
        if self.version < 15:
            yield from self.plugin.begin(txn, txn.first_lsn, Begin(commit_lsn, time, xid))
            begin_sent = True
        for change in state.pending:
            if self.run_distributed(state, change):
                continue
            for wal, message in self.plugin.change(
                change, state.invalidated, in_stream=False, top_xid=xid
            ):
                if not begin_sent:
                    yield from self.plugin.begin(txn, wal, Begin(commit_lsn, time, xid))
                    begin_sent = True
                yield Send(wal, message)
        self.flush_invalidations(state)
        if begin_sent:
            yield Send(end_lsn, Commit(0, commit_lsn, end_lsn, time))

    def prepare(self, txn: WTxn, state: TxnState) -> Iterator[StreamEvent]:
        """ReorderBufferPrepare: Begin Prepare…Prepare, or the last block and Stream Prepare."""
        xid = xid_of(txn.top)
        gid = txn.gid or ""
        self.plugin.passed(txn.lsn)
        streamable = self.can_stream and txn.stream != "never"
        if state.streamed or (streamable and txn.stream == "always" and state.pending):
            yield from self.stream_block(txn, state)
            yield Send(txn.end_lsn, StreamPrepare(0, txn.lsn, txn.end_lsn, txn.time, xid, gid))
            return
        yield from self.plugin.begin(
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
            if self.run_distributed(state, change):
                continue
            for wal, message in self.plugin.change(
                change, state.invalidated, in_stream=False, top_xid=xid
            ):
                yield Send(wal, message)
        self.flush_invalidations(state)
        yield Send(txn.end_lsn, Prepare(0, txn.lsn, txn.end_lsn, txn.time, xid, gid))
