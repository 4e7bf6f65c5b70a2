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

The work is split as PostgreSQL splits it. This module walks the WAL in order and
decides what each transaction's end means for the client (``decode.c``);
:mod:`~pgwire_mock.script.reorder` holds the transactions' changes, counts their memory
and streams, spills or replays them (``reorderbuffer.c``);
:mod:`~pgwire_mock.script.output_plugin` turns one change into pgoutput messages for
the requested publications (``pgoutput.c``). The options are parsed in
:mod:`~pgwire_mock.script.options` and the events yielded are defined in
:mod:`~pgwire_mock.script.events`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from codec.pgoutput import CommitPrepared, Message, PgOutputMessage, RollbackPrepared
from pgwire_mock.script.compile import compile_script
from pgwire_mock.script.events import EndOfWal, Fault, Send, Sleep, StreamEvent
from pgwire_mock.script.model import Fault as ScriptFault
from pgwire_mock.script.model import Script
from pgwire_mock.script.model import Sleep as ScriptSleep
from pgwire_mock.script.options import StreamOptions
from pgwire_mock.script.output_plugin import OutputPlugin
from pgwire_mock.script.reorder import ReorderBuffer, TxnState
from pgwire_mock.script.sizes import distributed_changes
from pgwire_mock.script.wal import (
    CRASHED,
    OPEN,
    CompiledScript,
    WChange,
    WFinishPrepared,
    WMessage,
    WSubAbort,
    WTxn,
    xid_of,
)

__all__ = ["encode_stream"]


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


class _Session:
    """One walsender's decoding of a compiled script, as ``decode.c`` drives it: the WAL
    read in order (the records of transactions written change by change interleaved by
    LSN), each transaction's items handed to the reorder buffer, and what its end record
    means for this client (commit, abort, prepare with or without two-phase decoding)."""

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
        self.can_stream = options.streaming != "off"
        # ctx->twophase: asked for now, or the slot marked by an earlier start.
        self.two_phase = (options.two_phase or two_phase_at is not None) and version >= 15
        self.two_phase_at = two_phase_at or 0
        self.plugin = OutputPlugin(compiled, options, version)
        self.buffer = ReorderBuffer(compiled, self.plugin, options, version, from_lsn)
        self.deferred: dict[int, TxnState] = {}  # id(WTxn) → state, prepared without 2PC
        # Where the WAL ended when this walsender first waited there (None: not yet).
        self.waited_at: int | None = None
        # Transactions written change by change (CompiledScript.running) are read record
        # by record: the reading of each begun, the index of the next item each reads,
        # and the position up to which the WAL is read (their items before it).
        self.reading: dict[int, Iterator[StreamEvent | None]] = {}
        self.next_item: dict[int, int] = {}
        self.running_read = 0  # CompiledScript.running[:running_read] are read whole
        self.horizon = _NO_HORIZON
        self.distributed = 0  # CompiledScript.catalog_commits[:distributed] are read

    def forget(self, txn: WTxn) -> None:
        # A skipped transaction's invalidations still run (ReorderBufferForget).
        for item in txn.items:
            if not isinstance(item, WChange):
                continue
            if item.publication_change is not None:
                self.plugin.invalidate_for(item.publication_change)
            elif item.kind in ("ddl", "truncate", "invalidation"):
                for t in item.tables:
                    self.plugin.invalidate(t.oid)

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
            if isinstance(item, WTxn | WFinishPrepared):
                yield from self.distribute(item)
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

    def distribute(self, item: WTxn | WFinishPrepared) -> Iterator[StreamEvent]:
        """The catalog commits up to ``item``'s record, read before it is decoded
        (DecodeCommit's SnapBuildCommitTxn): each queues a snapshot and invalidations in
        the transactions prepared that this walsender holds without having decoded
        their PREPARE (no two-phase decoding: only a decoded or skipped PREPARE marks
        one prepared in the reorder buffer). The compiler queued them in the open ones."""
        commits = self.compiled.catalog_commits
        while self.distributed < len(commits) and commits[self.distributed].lsn <= item.lsn:
            index = self.distributed
            self.distributed += 1
            if self.two_phase:
                continue
            for key, state in list(self.deferred.items()):
                txn, _ = self.buffer.queued[key]
                if txn is item or (isinstance(item, WFinishPrepared) and txn is item.txn):
                    continue
                streamable = self.can_stream and txn.stream != "never"
                for change in distributed_changes(self.version, commits, index, txn):
                    yield from self.buffer.queue_change(txn, state, change, streamable)

    def with_warning(self, events: Iterator[StreamEvent | None]) -> Iterator[StreamEvent]:
        """A transaction's events, to its end, with 18's warning about skipped
        publications before the event that looked them up."""
        self.horizon = _NO_HORIZON
        for event in events:
            if self.plugin.skipped_at is not None:
                yield from self.plugin.skipped_warning()
            if event is not None:
                yield event
        if self.plugin.skipped_at is not None:
            yield from self.plugin.skipped_warning()

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
                if self.plugin.skipped_at is not None:
                    yield from self.plugin.skipped_warning()
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

    def txn(self, txn: WTxn) -> Iterator[StreamEvent | None]:
        """Decode ``txn``; None where one written change by change is read no further
        for now (:meth:`items`)."""
        if txn.kind == "prepare" and not txn.items:
            # PREPARE TRANSACTION with nothing written: an xid and a prepare record, but
            # no ReorderBufferTXN, so ReorderBufferPrepare and ReorderBufferFinishPrepared
            # find no transaction and send nothing (measured on 15: with two_phase, no
            # Begin Prepare, Prepare or Commit Prepared).
            return
        if self.plugin.skipped(txn):
            for item in self.items(txn):
                if item is None:
                    yield None
            self.forget(txn)
            return
        # A long-running transaction written after this walsender waited at the end of
        # WAL is decoded while it runs: CLOG shows it (and a subtransaction not yet rolled
        # back) in progress, so it streams as a committed one would, and a rollback at
        # its end is a Stream Abort.
        state = TxnState(
            live=txn.long_running and self.waited_at is not None and txn.first_lsn >= self.waited_at
        )
        self.buffer.queued[id(txn)] = (txn, state)
        held = False
        try:
            yield from self.decode(txn, state)
            # Prepared without two-phase decoding: it stays in the reorder buffer, its
            # changes counted, until COMMIT or ROLLBACK PREPARED (finish_prepared).
            held = id(txn) in self.deferred
        finally:
            if not held:
                del self.buffer.queued[id(txn)]

    def decode(self, txn: WTxn, state: TxnState) -> Iterator[StreamEvent | None]:
        streamable = self.can_stream and txn.stream != "never"
        top_xid = xid_of(txn.top)
        for item in self.items(txn):
            if item is None:
                yield None
                continue
            if txn.running:
                # What CLOG shows as the record is read: in progress until its end is
                # written (one a wait_for step holds back is not yet).
                state.live = txn.kind == OPEN or txn.lsn >= self.compiled.written_end()
            if isinstance(item, WChange):
                yield from self.buffer.queue_change(txn, state, item, streamable)
                continue
            aborted = {id(s) for s in item.subs}
            if (
                streamable
                and txn.stream == "always"
                and item.end_lsn >= self.from_lsn
                and any(id(c.sub) in aborted for c in state.pending)
            ):
                yield from self.buffer.stream_block(txn, state)
            kept = [c for c in state.pending if id(c.sub) not in aborted]
            # The catalog changes rolled back are not run, but their invalidations join
            # the transaction's, which run when it is done (measured: the next
            # transaction gets the table's Relation again).
            state.invalidated.update(
                t.oid
                for c in state.pending
                if id(c.sub) in aborted and c.kind in ("ddl", "truncate")
                for t in c.tables
            )
            in_memory = [c for c in state.pending[state.spilled :] if id(c) not in state.on_disk]
            state.memory -= sum(c.size for c in in_memory if id(c.sub) in aborted)
            state.spilled -= sum(1 for c in state.pending[: state.spilled] if id(c.sub) in aborted)
            state.pending = kept
            sent = False
            for sub in item.subs:
                if id(sub) in state.streamed_subs:
                    yield Send(
                        item.end_lsn,
                        self.buffer.stream_abort(top_xid, xid_of(sub), item.end_lsn, item.time),
                    )
                    sent = True
            if sent:
                self.plugin.cleanup(top_xid, commit=False)
        if txn.kind == CRASHED:
            # Open when the server crashed: it never ends, and nothing says so (a
            # running-xacts record later lets the reorder buffer drop it, silently).
            return
        if txn.kind == "commit":
            if txn.lsn < self.from_lsn:
                self.forget(txn)
                return
            yield from self.buffer.finish(txn, state, txn.lsn, txn.end_lsn, txn.time)
        elif txn.kind == "abort":
            # DecodeAbort: ReorderBufferAbort of each subtransaction still open, then of
            # the top one; each one marked streamed gets its Stream Abort.
            rolled_back = txn.rolled_back()
            open_subs = {id(c.sub): c.sub for c in txn.items if isinstance(c, WChange)}
            for key, sub in sorted(open_subs.items(), key=lambda kv: xid_of(kv[1])):
                if key in state.streamed_subs and key not in rolled_back and sub is not txn.top:
                    yield Send(
                        txn.end_lsn,
                        self.buffer.stream_abort(top_xid, xid_of(sub), txn.end_lsn, txn.time),
                    )
            if state.streamed:
                yield Send(
                    txn.end_lsn, self.buffer.stream_abort(top_xid, top_xid, txn.end_lsn, txn.time)
                )
                self.plugin.cleanup(top_xid, commit=False)
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
            yield from self.buffer.prepare(txn, state)
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
        self.buffer.queued.pop(id(txn), None)
        if self.plugin.skipped(txn) or item.lsn < self.from_lsn or not txn.items:
            self.deferred.pop(id(txn), None)
            return
        xid = xid_of(txn.top)
        gid = txn.gid or ""
        if self.two_phase:
            state = self.deferred.pop(id(txn), None)
            if item.commit:
                if state is not None:
                    # Prepared before two_phase_at (decode): Begin Prepare…Prepare with
                    # its PREPARE's LSNs first. A rollback is not replayed.
                    yield from self.buffer.prepare(txn, state)
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
            yield from self.buffer.finish(txn, state, item.lsn, item.end_lsn, item.time)
        elif state.streamed:
            yield Send(item.end_lsn, self.buffer.stream_abort(xid, xid, item.end_lsn, item.time))
            self.plugin.cleanup(xid, commit=False)


_NO_HORIZON: Final = 1 << 64  # past any LSN


def _item_lsn(item: WChange | WSubAbort) -> int:
    """A position inside the item's record: its start, or the byte before its end for
    the records known by their end (a message, a subtransaction's abort)."""
    if isinstance(item, WSubAbort):
        return item.end_lsn - 1
    return item.lsn - 1 if item.kind == "message" else item.lsn
