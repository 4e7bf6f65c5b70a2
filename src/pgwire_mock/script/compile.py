"""Checking a script and laying it out as WAL.

:func:`compile_script` walks the steps once, checks every name and value (raising a
one-line :class:`ScriptError` naming the place), and produces the script's *WAL*
(:mod:`pgwire_mock.script.wal`): the records a real server would have written, with
their LSNs, transaction ids and timestamps. The WAL does not depend on the client, so
every client (and every reconnection) sees the same positions;
:mod:`pgwire_mock.script.encoder` then decodes it for one client's options, as logical
decoding does.

LSN layout. Records are 8-byte aligned and follow one another without gaps. Sizes are
estimates of what PostgreSQL writes (a heap insert is about 64 bytes plus the tuple),
good enough to look real; nobody can tell a few bytes apart. A record's end is the next
record's start, which is why a transactional message's LSN (the end of its record,
``buf->endptr`` in ``decode.c``) equals the commit LSN when it is the last thing before
COMMIT, exactly as on a real server.

The work is split by what it checks. This module holds the :class:`Compiler`: the
script's steps in order, the records that end transactions (commit, abort, prepare,
COMMIT/ROLLBACK PREPARED), non-transactional messages and markers, and the transactions
a live WAL keeps open. The catalogue is checked by
:mod:`~pgwire_mock.script.declarations`; the changes inside a transaction are checked
and written by :class:`~pgwire_mock.script.changes.ChangeWriter`, which the compiler
extends; the record sizes and the memory they count are in
:mod:`~pgwire_mock.script.sizes`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Final, cast

from pgwire_mock.script.changes import ChangeWriter, count_subxacts, parse_timestamptz
from pgwire_mock.script.declarations import (
    declare_publications,
    declare_slots,
    declare_tables,
    declare_types,
)
from pgwire_mock.script.errors import ScriptError
from pgwire_mock.script.model import (
    STREAM_MODES,
    AlterPublication,
    AlterTable,
    BeginTransaction,
    Change,
    CommitPrepared,
    CreatePublication,
    DropPublication,
    EndTransaction,
    Fault,
    LogicalMessage,
    RollbackPrepared,
    Script,
    Sleep,
    Step,
    Transaction,
    WaitFor,
    WriteTransaction,
)
from pgwire_mock.script.publication_changes import PublicationCatalog
from pgwire_mock.script.sizes import (
    ABORT_RECORD,
    CHECKPOINT_REDO_RECORD,
    COMMIT_RECORD,
    FINISH_PREPARED_RECORD,
    MESSAGE_RECORD,
    ONLINE_CHECKPOINT_RECORD,
    PREPARE_RECORD,
    RUNNING_XACTS_RECORD,
    SHUTDOWN_CHECKPOINT_RECORD,
    distributed_changes,
)
from pgwire_mock.script.wal import (
    CRASHED,
    OPEN,
    CatalogCommit,
    CompiledScript,
    OpenTxn,
    PublicationChange,
    RunningXacts,
    SubTxn,
    WalItem,
    WChange,
    WFinishPrepared,
    WMarker,
    WMessage,
    WSubAbort,
    WTxn,
    change_locks,
)
from pgwire_mock.server.faults import Fault as ServerFault
from pgwire_mock.server.faults import FaultError
from pgwire_mock.server.versions import MAJORS

__all__ = ["Compiler", "compile_script"]

FIRST_USER_OID: Final = 16384


# --- the compiler ----------------------------------------------------------------------


def compile_script(script: Script) -> CompiledScript:
    """Check ``script`` and lay out its WAL; raise ScriptError naming the first problem."""
    return Compiler.start(script).compiled


class Compiler(ChangeWriter):
    """Lays out a script's WAL (:attr:`compiled`), and steps appended to it later
    (:meth:`append`), each where the WAL ended: the compiler of a live WAL."""

    compiled: CompiledScript

    def __init__(self, script: Script) -> None:
        self.script = script
        server = script.server
        if server.pg_version not in MAJORS:
            raise ScriptError(
                f"expected one of {', '.join(map(str, MAJORS))}, got {server.pg_version!r}",
                "server.pg_version",
            )
        if server.logical_decoding_work_mem < 64:
            raise ScriptError(
                f"expected at least 64 (kB), got {server.logical_decoding_work_mem}",
                "server.logical_decoding_work_mem",
            )
        clock = parse_timestamptz(server.start_time, "server.start_time")
        super().__init__(server.pg_version, server.start_lsn, server.first_xid, clock)
        self.next_oid = FIRST_USER_OID
        self.used_oids: set[int] = set()
        self.wal: list[WalItem] = []
        self.prepared: dict[str, WTxn] = {}
        self.open_named: dict[str, OpenTxn] = {}  # the begin steps' transactions still open
        self.running: list[WTxn] = []  # CompiledScript.running
        self.begun: list[OpenTxn] = []  # every begin()'s transaction, ended or not
        self.prepares: list[WTxn] = []  # CompiledScript.prepares
        self.publication_changes: list[PublicationChange] = []  # and its publication_changes
        self.catalog_commits: list[CatalogCommit] = []  # CompiledScript.catalog_commits
        self.publications = PublicationCatalog()  # at the end of WAL

    @classmethod
    def start(cls, script: Script) -> Compiler:
        """Compile ``script``; raise ScriptError naming the first problem."""
        try:
            compiler = cls(script)
            compiler.compiled = compiler.run()
        except ScriptError as err:
            raise err.located(script.source) from err.__cause__
        return compiler

    def append(self, step: Step) -> None:
        """Compile ``step`` after the others and add it to the script; ScriptError (and
        nothing changed) if it does not fit the script (an unknown table, a bad value)."""
        where = f"steps[{len(self.script.steps)}]"
        saved = (self.lsn, self.next_xid, self.clock, self.next_oid, len(self.wal))
        prepares = len(self.prepares)
        used_oids, prepared, tables = set(self.used_oids), dict(self.prepared), dict(self.tables)
        open_named = dict(self.open_named)
        publications = (self.publications.copy(), len(self.publication_changes))
        catalog_commits = len(self.catalog_commits)
        try:
            self.step(step, where)
        except ScriptError as err:
            self.lsn, self.next_xid, self.clock, self.next_oid, count = saved
            self.used_oids, self.prepared, self.tables = used_oids, prepared, tables
            self.open_named = open_named
            self.publications = publications[0]
            del self.publication_changes[publications[1] :]
            del self.catalog_commits[catalog_commits:]
            del self.wal[count:]
            del self.prepares[prepares:]
            raise err.located(self.script.source) from err.__cause__
        self.script.steps.append(step)
        self.compiled.end_lsn = self.lsn

    def begin(
        self, *, stream: str = "auto", origin: str | None = None, origin_lsn: int | None = None
    ) -> OpenTxn:
        """A transaction that stays open while :meth:`write` adds its changes at the end
        of WAL, between other transactions' records, until :meth:`finish` ends it."""
        where = f"open transaction {len(self.running) + 1}"
        if stream not in STREAM_MODES:
            raise ScriptError(
                f"expected one of {', '.join(STREAM_MODES)}, got {stream!r}", f"{where}.stream"
            )
        if origin is not None and not origin:
            raise ScriptError("expected an origin name", f"{where}.origin")
        top = SubTxn(None)
        wtxn = WTxn(top, [], 0, OPEN, 0, 0, 0, origin, origin_lsn or 0, stream, where=where)
        wtxn.running = True
        txn = OpenTxn(wtxn, [top])
        self.begun = [t for t in self.begun if not t.ended]
        self.begun.append(txn)
        return txn

    def named(self, name: str, where: str) -> OpenTxn:
        txn = self.open_named.get(name)
        if txn is None:
            raise ScriptError(f"no open transaction {name!r}", where)
        return txn

    def write(self, txn: OpenTxn, changes: Sequence[Change], where: str | None = None) -> None:
        """Write ``changes`` of an open transaction at the end of WAL (``where``: the
        step giving them); ScriptError (and nothing written) for one that does not fit,
        or after the transaction ended."""
        wtxn = txn.wtxn
        if txn.ended:
            raise ScriptError("the transaction has ended", wtxn.where)
        start, next_xid, clock, count = self.lsn, self.next_xid, self.clock, len(wtxn.items)
        stack, released = list(txn.stack), [len(s.released) for s in txn.stack]
        # An ALTER TABLE changes the one version of the table every step sees: its lock
        # keeps other transactions off it until this one ends (_wait_for_locks), and a
        # rollback restores it (restore_tables).
        tables = dict(self.tables)
        try:
            for i, change in enumerate(changes):
                if where is None:
                    here = f"{wtxn.where}.changes[{txn.written + i}]"
                else:
                    here = f"{where}.changes[{i}]"
                self.change(change, txn.stack, wtxn.items, here)
            self._wait_for_locks(change_locks(wtxn.items[count:]), wtxn, where or wtxn.where)
        except ScriptError as err:
            subs = {id(s): s for s in (*stack, *txn.stack)}
            subs.update((id(c.sub), c.sub) for c in wtxn.items[count:] if isinstance(c, WChange))
            for sub in subs.values():
                if sub.xid is not None and sub.xid >= next_xid:
                    sub.xid = None
            for sub, n in zip(stack, released, strict=True):
                del sub.released[n:]
            for sub in subs.values():
                sub.altered[:] = [a for a in sub.altered if a[0] < start]
            txn.stack[:] = stack
            self.tables = tables
            del wtxn.items[count:]
            self.lsn, self.next_xid, self.clock = start, next_xid, clock
            raise err.located(self.script.source) from err.__cause__
        txn.written += len(changes)
        if count == 0 and wtxn.items:
            wtxn.first_lsn = start
            self.running.append(wtxn)
        self._moved()

    def finish(
        self,
        txn: OpenTxn,
        *,
        rollback: bool = False,
        prepare: str | None = None,
        commit_time: str | None = None,
    ) -> None:
        """End an open transaction: its commit, abort or PREPARE TRANSACTION ``prepare``
        record at the end of WAL (a prepared one is finished by a commit_prepared or
        rollback_prepared step)."""
        wtxn = txn.wtxn
        if txn.ended:
            raise ScriptError("the transaction has ended", wtxn.where)
        if prepare is not None and rollback:
            raise ScriptError("prepare and rollback exclude each other", wtxn.where)
        if prepare is not None and (prepare in self.prepared or not prepare):
            raise ScriptError(
                f"prepared transaction {prepare!r} already exists", f"{wtxn.where}.prepare"
            )
        kind = "prepare" if prepare is not None else "abort" if rollback else "commit"
        saved = (self.lsn, self.next_xid, self.clock, len(self.wal))
        if prepare is not None:
            self.assign(wtxn.top)  # PREPARE TRANSACTION takes an xid, even without writes
        if wtxn.top.xid is None:
            wtxn.kind = kind  # nothing written: no xid, no record, nothing to decode
            return
        if not wtxn.items:
            wtxn.first_lsn = self.lsn
        wtxn.gid = prepare
        try:
            self.end(wtxn, kind, commit_time)
            if kind == "commit":
                self.catalog_commit(wtxn)
            elif kind == "abort":
                self.undo_alters(wtxn)
        except ScriptError as err:
            self.lsn, self.next_xid, self.clock, count = saved
            del self.wal[count:]
            wtxn.kind, wtxn.gid = OPEN, None
            if not wtxn.items:
                wtxn.top.xid = None
            raise err.located(self.script.source) from err.__cause__
        self._moved()

    def abort_open(self) -> int:
        """Roll back every transaction still open, as a fast shutdown's backends do
        (each writes its abort record); returns how many there were."""
        return self._end_open(lambda txn: self.finish(txn, rollback=True))

    def crash_open(self) -> int:
        """The server crashed: every transaction still open stays as it was written, with
        no end record ever (:data:`CRASHED`); returns how many there were."""
        return self._end_open(self._crash)

    def _crash(self, txn: OpenTxn) -> None:
        txn.wtxn.kind = CRASHED
        self.undo_alters(txn.wtxn)

    def undo_alters(self, wtxn: WTxn) -> None:
        """``wtxn`` rolled back (or never to end): the tables it altered are as before."""
        subs = {id(c.sub): c.sub for c in wtxn.items if isinstance(c, WChange)}
        self.restore_tables(list(subs.values()))

    def _end_open(self, end: Callable[[OpenTxn], object]) -> int:
        """``end`` each transaction still open (begun or named by a script step)."""
        open_txns = [t for t in self.begun if not t.ended]
        for txn in open_txns:
            end(txn)
        self.open_named = {n: t for n, t in self.open_named.items() if not t.ended}
        self.begun = []
        return len(open_txns)

    def checkpoint(self) -> None:
        """A shutdown checkpoint's record at the end of WAL: nothing to decode, but the
        end of WAL moves past it (120 bytes on 14-18, measured)."""
        self.record(SHUTDOWN_CHECKPOINT_RECORD)
        self._moved()

    def log_running_xacts(self) -> RunningXacts:
        """An xl_running_xacts record at the end of WAL (LogStandbySnapshot), listing the
        transactions in progress; nothing to decode, but it is where a slot's
        restart_lsn and catalog_xmin may move (:class:`RunningXacts`)."""
        compiled = self.compiled
        xids = compiled.running_xids()
        oldest = compiled.oldest_running_lsn()
        start, end = self.record(RUNNING_XACTS_RECORD + 4 * len(xids))
        restart = (
            start
            if oldest is None
            else max((r.lsn for r in compiled.snapshots if r.lsn <= oldest), default=None)
        )
        record = RunningXacts(start, end, restart, min(xids, default=self.next_xid))
        compiled.snapshots.append(record)
        self._moved()
        return record

    def online_checkpoint(self) -> RunningXacts:
        """CHECKPOINT: on 17+ the redo point's record, then a running-xacts record (which
        it returns) and the checkpoint's own (176 bytes in all when nothing is running
        on 14 and 15, 208 on 17 and 18, measured)."""
        if self.pg_version >= 17:
            self.record(CHECKPOINT_REDO_RECORD)
        running = self.log_running_xacts()
        self.record(ONLINE_CHECKPOINT_RECORD)
        self._moved()
        return running

    def _moved(self) -> None:
        # The end of WAL moved outside a step (once the script is compiled).
        compiled: CompiledScript | None = getattr(self, "compiled", None)
        if compiled is not None:
            compiled.end_lsn = self.lsn

    # helpers

    def oid(self, wanted: int | None, where: str) -> int:
        if wanted is not None:
            if wanted in self.used_oids or wanted < FIRST_USER_OID or wanted > 0xFFFFFFFF:
                raise ScriptError(f"OID {wanted} is taken or not a user OID (>= 16384)", where)
            self.used_oids.add(wanted)
            return wanted
        while self.next_oid in self.used_oids:
            self.next_oid += 1
        self.used_oids.add(self.next_oid)
        return self.next_oid

    # catalogue

    def run(self) -> CompiledScript:
        script = self.script
        for t in script.tables:
            if t.oid is not None:
                self.used_oids.add(t.oid)
        for ut in script.types:
            for o in (ut.oid, ut.array_oid):
                if o is not None:
                    self.used_oids.add(o)
        self.catalog = declare_types(script.types, self._fresh_oid)
        self.tables = declare_tables(script.tables, self.catalog, self.pg_version, self._fresh_oid)
        initial = {
            t.name: (
                self.tables[t.name],
                [
                    self.row(
                        self.tables[t.name], row, f"tables[{i}].rows[{j}]", require_all_keys=True
                    )
                    for j, row in enumerate(t.rows)
                ],
            )
            for i, t in enumerate(script.tables)
        }

        declared = declare_publications(script.publications, self.tables, self.pg_version)
        self.publications = PublicationCatalog(declared)
        slots = declare_slots(script)

        for i, step in enumerate(script.steps):
            self.step(step, f"steps[{i}]")
        return CompiledScript(
            script,
            self.catalog,
            declared.listed,
            self.wal,
            self.lsn,
            slots,
            initial,
            declared.published,
            generated_columns=declared.generated_columns,
            publication_actions=declared.actions,
            publication_changes=self.publication_changes,
            running=self.running,
            prepares=self.prepares,
            catalog_commits=self.catalog_commits,
        )

    def publication_ddl(
        self, step: CreatePublication | AlterPublication | DropPublication, where: str
    ) -> None:
        """CREATE, ALTER or DROP PUBLICATION: a catalog transaction (an xid, its catalog
        records, a commit; 14 decodes it as an empty transaction), and the change of the
        catalog at its commit (CompiledScript.publication_changes)."""
        change = self.publications.change(step, self.tables, self.pg_version, where)
        # OpenTableList: SHARE UPDATE EXCLUSIVE on each table named, and on those SET
        # removes.
        if isinstance(step, CreatePublication):
            locked = change.listed or frozenset()
        elif isinstance(step, AlterPublication) and step.action != "publish":
            locked = frozenset(step.tables) | (change.invalidated or frozenset())
        else:
            locked = frozenset()
        self._wait_for_locks(dict.fromkeys(sorted(locked), False), None, where)
        index = len(self.publication_changes)
        self.publication_changes.append(change)  # its LSN once committed
        changes = cast("tuple[Change, ...]", (step,))
        self.transaction(Transaction(changes), where, ddl_step=True, publication_change=index)
        commit = self.wal[-1]
        assert isinstance(commit, WTxn)
        self.publication_changes[index] = dataclasses.replace(change, lsn=commit.lsn)

    def catalog_commit(
        self, wtxn: WTxn, publication_change: int | None = None, *, lsn: int | None = None
    ) -> None:
        """``wtxn`` committed (its record written; at ``lsn`` for COMMIT PREPARED): if it
        changed the catalog, each other transaction still open with a change written (a
        base snapshot) gets a new catalog snapshot and the commit's invalidations among
        its changes (SnapBuildDistributeSnapshotAndInval), which count against its
        memory and run where its decoding reaches them: those of publication change
        ``publication_change``, or of the tables ALTER TABLE or TRUNCATE changed. A
        prepared one gets them only from a walsender that did not decode its PREPARE
        (the encoder's)."""
        changes = wtxn.catalog_changes()
        if not changes:
            return
        if publication_change is not None:
            messages = self.publication_changes[publication_change].messages
        else:
            messages = sum(c.invalidations for c in changes)
        tables = tuple(t for c in changes for t in c.tables)
        commit = CatalogCommit(
            wtxn.lsn if lsn is None else lsn, messages, tables, publication_change
        )
        self.catalog_commits.append(commit)
        index = len(self.catalog_commits) - 1
        for running in self.running:
            if running.kind == OPEN and running.items:
                running.items.extend(
                    distributed_changes(self.pg_version, self.catalog_commits, index, running)
                )

    def _wait_for_locks(self, needed: Mapping[str, bool], own: WTxn | None, where: str) -> None:
        """The lock manager, for the table locks ``needed`` (name → ACCESS EXCLUSIVE, or
        a weaker lock): a row change takes ROW EXCLUSIVE on its table, TRUNCATE and ALTER
        TABLE take ACCESS EXCLUSIVE, which conflicts with any other lock, a publication
        command SHARE UPDATE EXCLUSIVE on the tables it lists, and a transaction holds
        them until it ends (a prepared one until COMMIT or ROLLBACK PREPARED). The weaker
        ones conflict here only with ACCESS EXCLUSIVE (a publication command runs in a
        transaction of its own, which holds nothing after it). PostgreSQL would wait
        for the holder; a script cannot, so a step that would wait is refused."""
        if not needed:
            return
        holders = [t for t in self.running if t.kind == OPEN and t is not own]
        holders += [t for t in self.prepared.values() if t is not own]
        for holder in holders:
            held = holder.locks()
            for table, exclusive in needed.items():
                if table in held and (exclusive or held[table]):
                    raise ScriptError(
                        f"{table} is locked by {self._describe(holder)} until it ends "
                        "(PostgreSQL would wait for it here)",
                        where,
                    )

    def _describe(self, txn: WTxn) -> str:
        if txn.kind != OPEN:
            return f"prepared transaction {txn.gid!r}"
        names = [n for n, t in self.open_named.items() if t.wtxn is txn]
        return f"open transaction {names[0]!r}" if names else f"the {txn.where}"

    def _fresh_oid(self) -> int:
        return self.oid(None, "")

    # steps

    def step(self, step: Step, where: str) -> None:
        if isinstance(step, Transaction):
            self.transaction(step, where)
        elif isinstance(step, CommitPrepared | RollbackPrepared):
            txn = self.prepared.pop(step.gid, None)
            if txn is None:
                raise ScriptError(f"no prepared transaction {step.gid!r}", where)
            size = FINISH_PREPARED_RECORD + len(step.gid)
            start, end = self.record(size)
            if isinstance(step, CommitPrepared):
                time = self.tick(step.commit_time, f"{where}.commit_time")
            else:
                time = self.tick(step.rollback_time, f"{where}.rollback_time")
            self.wal.append(
                WFinishPrepared(txn, isinstance(step, CommitPrepared), start, end, time)
            )
            txn.finished_at = start
            if isinstance(step, CommitPrepared):
                self.catalog_commit(txn, lsn=start)
            else:
                self.undo_alters(txn)
        elif isinstance(step, LogicalMessage):
            size = MESSAGE_RECORD + len(step.prefix.encode()) + 1 + len(step.content)
            start, end = self.record(size)
            self.wal.append(WMessage(start, end, step.prefix, step.content))
        elif isinstance(step, AlterTable):
            self.transaction(Transaction((step,)), where, ddl_step=True)
        elif isinstance(step, CreatePublication | AlterPublication | DropPublication):
            self.publication_ddl(step, where)
        elif isinstance(step, Sleep):
            if not isinstance(step.seconds, int | float) or step.seconds < 0:
                raise ScriptError(f"expected seconds >= 0, got {step.seconds!r}", where)
            self.clock += int(step.seconds * 1_000_000)
            self.wal.append(WMarker("sleep", self.lsn, step))
        elif isinstance(step, Fault):
            # The rules --fault applies, so a bad step fails here and not mid-stream.
            try:
                ServerFault.from_params(step.name, step.params)
            except FaultError as err:
                raise ScriptError(str(err), where) from None
            self.wal.append(WMarker("fault", self.lsn, step))
        elif isinstance(step, BeginTransaction):
            if not step.name or step.name in self.open_named:
                raise ScriptError(
                    f"expected a name no open transaction has, got {step.name!r}", where
                )
            begun = self.begin(stream=step.stream, origin=step.origin, origin_lsn=step.origin_lsn)
            begun.wtxn.where = where
            self.open_named[step.name] = begun
        elif isinstance(step, WriteTransaction):
            self.write(self.named(step.name, where), step.changes, where)
        elif isinstance(step, EndTransaction):
            self.finish(
                self.named(step.name, where),
                rollback=step.rollback,
                prepare=step.prepare,
                commit_time=step.commit_time,
            )
            del self.open_named[step.name]
        elif isinstance(step, WaitFor):
            for name, value in (("seconds", step.seconds), ("timeout", step.timeout)):
                if value is not None and (not isinstance(value, int | float) or value < 0):
                    raise ScriptError(f"expected {name} >= 0, got {value!r}", where)
            self.wal.append(WMarker("wait", self.lsn, step))
        else:  # pragma: no cover - the loader builds only the classes above
            raise ScriptError(f"unknown step {type(step).__name__}", where)

    def transaction(
        self,
        txn: Transaction,
        where: str,
        *,
        ddl_step: bool = False,
        publication_change: int | None = None,
    ) -> None:
        if txn.stream not in STREAM_MODES:
            raise ScriptError(
                f"expected one of {', '.join(STREAM_MODES)}, got {txn.stream!r}", f"{where}.stream"
            )
        if txn.prepare is not None and txn.rollback:
            raise ScriptError("prepare and rollback exclude each other", where)
        if txn.prepare is not None and (txn.prepare in self.prepared or not txn.prepare):
            raise ScriptError(
                f"prepared transaction {txn.prepare!r} already exists", f"{where}.prepare"
            )
        saved_tables = dict(self.tables)
        top = SubTxn(None)
        stack = [top]
        items: list[WChange | WSubAbort] = []
        first_lsn = self.lsn
        cwhere = f"{where}.changes" if not ddl_step else where
        for i, change in enumerate(txn.changes):
            here = f"{cwhere}[{i}]" if not ddl_step else where
            self.change(change, stack, items, here)
        self._wait_for_locks(change_locks(items), None, where)
        if top.xid is None and txn.prepare is not None:
            self.assign(top)
        if top.xid is None:
            # No write, no xid, no WAL: PostgreSQL has nothing to decode either.
            self.tables = saved_tables if txn.rollback else self.tables
            return
        kind = "prepare" if txn.prepare is not None else "abort" if txn.rollback else "commit"
        if txn.origin is not None and not txn.origin:
            raise ScriptError("expected an origin name", f"{where}.origin")
        wtxn = WTxn(
            top,
            items,
            first_lsn,
            OPEN,
            0,
            0,
            0,
            txn.origin,
            txn.origin_lsn or 0,
            txn.stream,
            txn.prepare,
            where,
            txn.long_running,
        )
        self.end(wtxn, kind, txn.commit_time)
        if kind == "abort":
            self.tables = saved_tables
        elif kind == "commit":
            self.catalog_commit(wtxn, publication_change)

    def end(self, wtxn: WTxn, kind: str, commit_time: str | None) -> None:
        """Write the record that ends ``wtxn`` (commit, abort or prepare) and put the
        transaction in the WAL there, where logical decoding decodes it."""
        nsubs = count_subxacts(wtxn.top)
        if kind == "prepare":
            start, end = self.record(PREPARE_RECORD + 4 * nsubs + len(wtxn.gid or ""))
        elif kind == "abort":
            start, end = self.record(ABORT_RECORD + 4 * nsubs)
        else:
            start, end = self.record(COMMIT_RECORD + 4 * nsubs)
        wtxn.time = self.tick(commit_time, f"{wtxn.where}.commit_time")
        wtxn.kind, wtxn.lsn, wtxn.end_lsn = kind, start, end
        if wtxn.gid is not None:
            self.prepared[wtxn.gid] = wtxn
            self.prepares.append(wtxn)
        self.wal.append(wtxn)
