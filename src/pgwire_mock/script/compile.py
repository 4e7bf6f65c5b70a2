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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Final

from codec.errors import CodecError
from codec.pgoutput import UNCHANGED_TOAST
from codec.values import datetime_to_pg_timestamp, decode_text, type_by_name
from pgwire_mock.script.errors import ScriptError
from pgwire_mock.script.model import (
    PUBLISH_GENERATED,
    REPLICA_IDENTITIES,
    STREAM_MODES,
    AlterTable,
    BeginTransaction,
    Change,
    Column,
    CommitPrepared,
    Delete,
    EndTransaction,
    Fault,
    Insert,
    LogicalMessage,
    Publication,
    ReleaseSavepoint,
    RollbackPrepared,
    RollbackToSavepoint,
    Savepoint,
    Script,
    Sleep,
    Step,
    Transaction,
    Truncate,
    Update,
    WaitFor,
    WriteTransaction,
)
from pgwire_mock.script.rowfilter import RowFilter, RowFilterError
from pgwire_mock.script.types import (
    ColumnType,
    TypeCatalog,
    UserType,
    ValueProblem,
    convert,
    encode_value,
)
from pgwire_mock.script.wal import (
    OPEN,
    CColumn,
    CompiledScript,
    OpenTxn,
    PublishedTable,
    Row,
    SubTxn,
    TableVersion,
    WalItem,
    WChange,
    WFinishPrepared,
    WMarker,
    WMessage,
    WSubAbort,
    WTxn,
)
from pgwire_mock.server.faults import Fault as ServerFault
from pgwire_mock.server.faults import FaultError
from pgwire_mock.server.versions import MAJORS

__all__ = ["Compiler", "compile_script", "type_length"]

FIRST_USER_OID: Final = 16384
_IDENTITY_CODE: Final = {"default": "d", "full": "f", "index": "i", "nothing": "n"}
_GENERATED_CODE: Final = {"": "", "stored": "s", "virtual": "v"}

# Estimated record sizes (bytes, before alignment).
_HEAP_RECORD: Final = 64
_DELETE_RECORD: Final = 56
_TRUNCATE_RECORD: Final = 56
_MESSAGE_RECORD: Final = 40
_DDL_RECORDS: Final = 1400  # catalog tuples, invalidations
_ABORT_RECORD: Final = 48
_COMMIT_RECORD: Final = 48
_PREPARE_RECORD: Final = 200
_FINISH_PREPARED_RECORD: Final = 64
# ReorderBuffer memory accounting (reorderbuffer.c, ReorderBufferChangeSize).
_CHANGE_STRUCT: Final = 80
_HEAP_TUPLE_DATA: Final = 24
_DDL_CHANGE_MEMORY: Final = 80 + 16 * 12


def _align(n: int) -> int:
    return (n + 7) & ~7


# --- the compiler ----------------------------------------------------------------------


def compile_script(script: Script) -> CompiledScript:
    """Check ``script`` and lay out its WAL; raise ScriptError naming the first problem."""
    return Compiler.start(script).compiled


class Compiler:
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
        self.lsn = server.start_lsn
        self.next_xid = server.first_xid
        self.clock = _timestamp(server.start_time, "server.start_time")
        self.next_oid = FIRST_USER_OID
        self.used_oids: set[int] = set()
        self.wal: list[WalItem] = []
        self.prepared: dict[str, WTxn] = {}
        self.tables: dict[str, TableVersion] = {}
        self.open_named: dict[str, OpenTxn] = {}  # the begin steps' transactions still open
        self.running: list[WTxn] = []  # CompiledScript.running
        self.prepares: list[WTxn] = []  # CompiledScript.prepares

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
        try:
            self.step(step, where)
        except ScriptError as err:
            self.lsn, self.next_xid, self.clock, self.next_oid, count = saved
            self.used_oids, self.prepared, self.tables = used_oids, prepared, tables
            self.open_named = open_named
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
        return OpenTxn(wtxn, [top])

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
        try:
            for i, change in enumerate(changes):
                if where is None:
                    here = f"{wtxn.where}.changes[{txn.written + i}]"
                else:
                    here = f"{where}.changes[{i}]"
                if isinstance(change, AlterTable):
                    # Its lock would make every other writer of the table wait for it,
                    # and the compiler keeps one version of each table for all.
                    raise ScriptError("alter_table is not supported in an open transaction", here)
                self.change(change, txn.stack, wtxn.items, here)
        except ScriptError as err:
            subs = {id(s): s for s in (*stack, *txn.stack)}
            subs.update((id(c.sub), c.sub) for c in wtxn.items[count:] if isinstance(c, WChange))
            for sub in subs.values():
                if sub.xid is not None and sub.xid >= next_xid:
                    sub.xid = None
            for sub, n in zip(stack, released, strict=True):
                del sub.released[n:]
            txn.stack[:] = stack
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
        except ScriptError as err:
            self.lsn, self.next_xid, self.clock, count = saved
            del self.wal[count:]
            wtxn.kind, wtxn.gid = OPEN, None
            if not wtxn.items:
                wtxn.top.xid = None
            raise err.located(self.script.source) from err.__cause__
        self._moved()

    def _moved(self) -> None:
        # The end of WAL moved outside a step (once the script is compiled).
        compiled: CompiledScript | None = getattr(self, "compiled", None)
        if compiled is not None:
            compiled.end_lsn = self.lsn

    # helpers

    def record(self, size: int) -> tuple[int, int]:
        start = self.lsn
        self.lsn = start + _align(size)
        return start, self.lsn

    def assign(self, sub: SubTxn) -> None:
        if sub.xid is None:
            if sub.parent is not None:
                self.assign(sub.parent)
            sub.xid = self.next_xid
            self.next_xid += 1

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

    def tick(self, given: str | None, where: str, step_us: int = 1000) -> int:
        if given is not None:
            # A later time moves the clock on; an earlier one (an origin's commit time)
            # is used for that transaction only.
            stamp = _timestamp(given, where)
            self.clock = max(self.clock, stamp)
            return stamp
        self.clock += step_us
        return self.clock

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
        oids: dict[str, tuple[int, int]] = {}
        declared: list[UserType] = []
        for i, decl in enumerate(script.types):
            where = f"types[{i}]"
            if "." not in decl.name:
                raise ScriptError(
                    f"expected a schema-qualified name, got {decl.name!r}", f"{where}.name"
                )
            if decl.name in oids:
                raise ScriptError(f"type {decl.name} is declared twice", f"{where}.name")
            if decl.kind not in ("enum", "domain", "composite"):
                raise ScriptError(f"expected enum, domain or composite, got {decl.kind!r}", where)
            array_oid = decl.array_oid if decl.array_oid is not None else self._fresh_oid()
            oid = decl.oid if decl.oid is not None else self._fresh_oid()
            oids[decl.name] = (oid, array_oid)
            declared.append(
                UserType(decl.name, decl.kind, decl.labels, decl.base, decl.fields, oid, array_oid)
            )
            try:
                self.catalog = TypeCatalog(declared, oids)
            except ValueError as err:
                raise ScriptError(str(err), where) from None
        self.catalog = TypeCatalog(declared, oids)

        for i, t in enumerate(script.tables):
            where = f"tables[{i}]"
            if t.name in self.tables:
                raise ScriptError(f"table {t.name} is declared twice", f"{where}.name")
            self.tables[t.name] = self._table(t.name, t.columns, t.replica_identity, t.oid, where)
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

        publications: dict[str, frozenset[str] | None] = {}
        published: dict[str, dict[str, PublishedTable]] = {}
        gencols: dict[str, str] = {}
        for i, p in enumerate(script.publications):
            where = f"publications[{i}]"
            if p.name in publications:
                raise ScriptError(f"publication {p.name} is declared twice", f"{where}.name")
            for j, name in enumerate(p.tables):
                if name not in self.tables:
                    raise ScriptError(f"no table {name}", f"{where}.tables[{j}]")
            if p.all_tables and p.tables:
                raise ScriptError("all_tables and tables exclude each other", where)
            publications[p.name] = None if p.all_tables else frozenset(p.tables)
            gencols[p.name] = self._gencols(p, f"{where}.generated_columns")
            published[p.name] = self._published(p, where)
            self._full_identity(p, gencols[p.name], where)

        slots: dict[str, int] = {}
        for i, s in enumerate(script.slots):
            where = f"slots[{i}]"
            if s.plugin != "pgoutput":
                raise ScriptError(f"expected plugin pgoutput, got {s.plugin!r}", f"{where}.plugin")
            if s.name in slots:
                raise ScriptError(f"slot {s.name} is declared twice", f"{where}.name")
            if s.two_phase and script.server.pg_version < 15:
                raise ScriptError(
                    "two_phase slots need PostgreSQL 15 or later", f"{where}.two_phase"
                )
            slots[s.name] = (
                s.confirmed_flush if s.confirmed_flush is not None else script.server.start_lsn
            )

        for i, step in enumerate(script.steps):
            self.step(step, f"steps[{i}]")
        return CompiledScript(
            script,
            self.catalog,
            publications,
            self.wal,
            self.lsn,
            slots,
            initial,
            published,
            generated_columns=gencols,
            running=self.running,
            prepares=self.prepares,
        )

    def _gencols(self, p: Publication, where: str) -> str:
        """pubgencols of ``WITH (publish_generated_columns = …)``, checked as CREATE
        PUBLICATION checks it (publicationcmds.c parse_publication_options)."""
        if p.generated_columns is None:
            return "n"
        if self.script.server.pg_version < 18:
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

    def _full_identity(self, p: Publication, gencols: str, where: str) -> None:
        """18 refuses UPDATE and DELETE of a REPLICA IDENTITY FULL table whose old row
        would hold a generated column it does not publish (publicationcmds.c
        pub_contains_invalid_column): refused here, as column lists are."""
        if self.script.server.pg_version < 18:
            return
        for name in self.tables if p.all_tables else p.tables:
            table = self.tables[name]
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

    def _published(self, p: Publication, where: str) -> dict[str, PublishedTable]:
        """A publication's column lists and row filters, checked as CREATE PUBLICATION and
        a later UPDATE/DELETE on the publisher check them."""
        out: dict[str, PublishedTable] = {}
        for name in sorted(set(p.columns) | set(p.where)):
            at = f"{where}.tables.{name}"
            if name not in p.tables:
                raise ScriptError(f"{name} is not one of the publication's tables", at)
            if self.script.server.pg_version < 15:
                raise ScriptError("column lists and row filters need PostgreSQL 15 or later", at)
            table = self.tables[name]
            by_name = {c.name: c for c in table.columns}
            # The replica identity: a key, or (FULL) every column.
            identity = {c.name for c in table.stored if c.key or table.identity == "f"}
            if table.identity == "f" and self.script.server.pg_version < 18:
                identity = {c.name for c in table.published}
            keys = identity if table.identity in "dif" else None
            listed = p.columns.get(name)
            if listed is not None:
                for column in listed:
                    if column not in by_name:
                        raise ScriptError(f"no column {column!r} in {name}", f"{at}.columns")
                    kind = by_name[column].generated
                    if kind and self.script.server.pg_version < 18:
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

    def _fresh_oid(self) -> int:
        return self.oid(None, "")

    def _table(
        self,
        name: str,
        columns: Sequence[Column],
        identity: str,
        oid: int | None,
        where: str,
        namespace_check: bool = True,
    ) -> TableVersion:
        schema, dot, relname = name.rpartition(".")
        if namespace_check and (not dot or not schema or not relname):
            raise ScriptError(f"expected a schema-qualified name, got {name!r}", f"{where}.name")
        if identity not in REPLICA_IDENTITIES:
            raise ScriptError(
                f"expected one of {', '.join(REPLICA_IDENTITIES)}, got {identity!r}",
                f"{where}.replica_identity",
            )
        cols = self._columns(columns, f"{where}.columns")
        if identity == "index" and not any(c.key for c in cols):
            raise ScriptError("REPLICA IDENTITY INDEX needs key columns", f"{where}.columns")
        real_oid = oid if oid is not None else self._fresh_oid()
        return TableVersion(
            name, schema, relname, real_oid, _IDENTITY_CODE[identity], cols, len(cols)
        )

    def _columns(self, columns: Sequence[Column], where: str) -> tuple[CColumn, ...]:
        out: list[CColumn] = []
        seen: set[str] = set()
        for j, c in enumerate(columns):
            if not c.name:
                raise ScriptError("expected a column name", f"{where}[{j}].name")
            if c.name in seen:
                raise ScriptError(f"column {c.name} is declared twice", f"{where}[{j}].name")
            seen.add(c.name)
            try:
                ctype, typmod = self.catalog.resolve(c.type)
            except ValueError as err:
                raise ScriptError(str(err), f"{where}[{j}].type") from None
            kind = _GENERATED_CODE.get(c.generated)
            if kind is None:
                raise ScriptError(
                    f"expected stored or virtual, got {c.generated!r}", f"{where}[{j}].generated"
                )
            if kind == "v" and self.script.server.pg_version < 18:
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

    # steps

    def step(self, step: Step, where: str) -> None:
        if isinstance(step, Transaction):
            self.transaction(step, where)
        elif isinstance(step, CommitPrepared | RollbackPrepared):
            txn = self.prepared.pop(step.gid, None)
            if txn is None:
                raise ScriptError(f"no prepared transaction {step.gid!r}", where)
            size = _FINISH_PREPARED_RECORD + len(step.gid)
            start, end = self.record(size)
            if isinstance(step, CommitPrepared):
                time = self.tick(step.commit_time, f"{where}.commit_time")
            else:
                time = self.tick(step.rollback_time, f"{where}.rollback_time")
            self.wal.append(
                WFinishPrepared(txn, isinstance(step, CommitPrepared), start, end, time)
            )
            txn.finished_at = start
        elif isinstance(step, LogicalMessage):
            size = _MESSAGE_RECORD + len(step.prefix.encode()) + 1 + len(step.content)
            start, end = self.record(size)
            self.wal.append(WMessage(start, end, step.prefix, step.content))
        elif isinstance(step, AlterTable):
            self.transaction(Transaction((step,)), where, ddl_step=True)
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

    def transaction(self, txn: Transaction, where: str, *, ddl_step: bool = False) -> None:
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

    def end(self, wtxn: WTxn, kind: str, commit_time: str | None) -> None:
        """Write the record that ends ``wtxn`` (commit, abort or prepare) and put the
        transaction in the WAL there, where logical decoding decodes it."""
        nsubs = _count_subxacts(wtxn.top)
        if kind == "prepare":
            start, end = self.record(_PREPARE_RECORD + 4 * nsubs + len(wtxn.gid or ""))
        elif kind == "abort":
            start, end = self.record(_ABORT_RECORD + 4 * nsubs)
        else:
            start, end = self.record(_COMMIT_RECORD + 4 * nsubs)
        wtxn.time = self.tick(commit_time, f"{wtxn.where}.commit_time")
        wtxn.kind, wtxn.lsn, wtxn.end_lsn = kind, start, end
        if wtxn.gid is not None:
            self.prepared[wtxn.gid] = wtxn
            self.prepares.append(wtxn)
        self.wal.append(wtxn)

    def change(
        self,
        change: Change,
        stack: list[SubTxn],
        items: list[WChange | WSubAbort],
        where: str,
    ) -> None:
        sub = stack[-1]
        if isinstance(change, Insert):
            table = self.table(change.table, f"{where}.insert")
            new = self.row(table, change.values, f"{where}.values", require_all_keys=False)
            self.assign(sub)
            size = _tuple_size(table, new)
            lsn, _ = self.record(_HEAP_RECORD + size)
            items.append(WChange("insert", lsn, sub, _memory(size), table, new=new))
        elif isinstance(change, Update):
            self.update(change, sub, items, where)
        elif isinstance(change, Delete):
            self.delete(change, sub, items, where)
        elif isinstance(change, Truncate):
            if not change.tables:
                raise ScriptError("expected at least one table", f"{where}.truncate")
            tables = tuple(
                self.table(name, f"{where}.truncate[{j}]") for j, name in enumerate(change.tables)
            )
            options = (1 if change.cascade else 0) | (2 if change.restart_identity else 0)
            self.assign(sub)
            lsn, _ = self.record(_TRUNCATE_RECORD + 4 * len(tables))
            memory = _CHANGE_STRUCT + 4 * len(tables)
            items.append(WChange("truncate", lsn, sub, memory, tables=tables, options=options))
        elif isinstance(change, LogicalMessage):
            self.assign(sub)
            size = _MESSAGE_RECORD + len(change.prefix.encode()) + 1 + len(change.content)
            _, end = self.record(size)
            memory = _CHANGE_STRUCT + len(change.prefix.encode()) + 1 + len(change.content) + 16
            items.append(
                WChange("message", end, sub, memory, prefix=change.prefix, content=change.content)
            )
        elif isinstance(change, Savepoint):
            if not change.name:
                raise ScriptError("expected a savepoint name", where)
            stack.append(SubTxn(sub, change.name))
        elif isinstance(change, ReleaseSavepoint):
            level = _find_savepoint(stack, change.name, where)
            while len(stack) > level:
                done = stack.pop()
                if done.xid is not None or done.released:
                    stack[-1].released.append(done)
        elif isinstance(change, RollbackToSavepoint):
            level = _find_savepoint(stack, change.name, where)
            time = self.tick(None, where, step_us=50)
            while len(stack) > level:
                done = stack.pop()
                subs = (*_released_with_xid(done), *([done] if done.xid is not None else []))
                if done.xid is not None:
                    _, end = self.record(_ABORT_RECORD + 4 * len(subs))
                    items.append(WSubAbort(end, subs, time))
            # ROLLBACK TO keeps the savepoint: a new subtransaction starts under it.
            stack.append(SubTxn(stack[-1], change.name))
        elif isinstance(change, AlterTable):
            self.alter(change, sub, items, where)
        else:  # pragma: no cover
            raise ScriptError(f"unknown change {type(change).__name__}", where)

    def table(self, name: str, where: str) -> TableVersion:
        table = self.tables.get(name)
        if table is None:
            raise ScriptError(f"no table {name!r}", where)
        return table

    def row(
        self,
        table: TableVersion,
        values: Mapping[str, object] | None,
        where: str,
        *,
        require_all_keys: bool,
        only_keys: bool = False,
        unchanged: Sequence[str] = (),
    ) -> Row:
        values = values or {}
        if not isinstance(values, Mapping):
            raise ScriptError("expected a mapping of column names to values", where)
        names = {c.name: c for c in table.columns}
        for key in values:
            col = names.get(key)
            if col is None:
                raise ScriptError(f"no column {key!r} in {table.name}", where)
            if col.generated == "v":
                raise ScriptError(
                    f"column {key!r} is a virtual generated column: never stored nor sent, it "
                    "takes no value",
                    f"{where}.{key}",
                )
            if only_keys and not col.key:
                raise ScriptError(
                    f"column {key!r} is not a replica identity column", f"{where}.{key}"
                )
        out: list[object] = []
        for c in table.stored:
            if c.name in unchanged:
                out.append(UNCHANGED_TOAST)
                continue
            if only_keys and not c.key:
                out.append(None)
                continue
            if require_all_keys and c.key and c.name not in values:
                raise ScriptError(f"missing replica identity column {c.name!r}", where)
            try:
                out.append(convert(c.ctype, c.typmod, values.get(c.name)))
            except ValueProblem as err:
                raise ScriptError(str(err), f"{where}.{c.name}") from err.__cause__
        return tuple(out)

    def update(
        self, change: Update, sub: SubTxn, items: list[WChange | WSubAbort], where: str
    ) -> None:
        table = self.table(change.table, f"{where}.update")
        for j, name in enumerate(change.unchanged):
            if name not in {c.name for c in table.stored}:
                raise ScriptError(f"no column {name!r} in {table.name}", f"{where}.unchanged[{j}]")
            if name in change.values:
                raise ScriptError(
                    f"column {name!r} has a value and is unchanged", f"{where}.unchanged[{j}]"
                )
        new = self.row(
            table,
            change.values,
            f"{where}.values",
            require_all_keys=False,
            unchanged=change.unchanged,
        )
        old, old_kind = self.old_tuple(table, change, where, key_required=False)
        self.assign(sub)
        size = _tuple_size(table, new) + (_tuple_size(table, old) if old else 0)
        lsn, _ = self.record(_HEAP_RECORD + size)
        memory = _memory(_tuple_size(table, new)) + (
            _HEAP_TUPLE_DATA + _tuple_size(table, old) if old else 0
        )
        items.append(
            WChange("update", lsn, sub, memory, table, new=new, old=old, old_kind=old_kind)
        )

    def old_tuple(
        self, table: TableVersion, change: Update | Delete, where: str, *, key_required: bool
    ) -> tuple[Row | None, str | None]:
        """The old row a change carries and its kind: the whole row ('O') under REPLICA
        IDENTITY FULL, else the replica identity key ('K'), which a DELETE always carries
        and an UPDATE only when it changed the key (the script then gives key:)."""
        if table.identity == "f":
            if change.key is not None:
                raise ScriptError("REPLICA IDENTITY FULL takes old:, not key:", f"{where}.key")
            if change.old is None:
                raise ScriptError("REPLICA IDENTITY FULL needs the old row (old:)", where)
            return self.row(table, change.old, f"{where}.old", require_all_keys=False), "O"
        if change.old is not None:
            raise ScriptError("old: is only for REPLICA IDENTITY FULL; use key:", f"{where}.old")
        if change.key is None:
            if key_required and table.has_key:
                raise ScriptError("a DELETE needs the old key (key:)", where)
            return None, None
        if not table.has_key:
            raise ScriptError(f"{table.name} has no replica identity columns", f"{where}.key")
        key = self.row(table, change.key, f"{where}.key", require_all_keys=True, only_keys=True)
        return key, "K"

    def delete(
        self, change: Delete, sub: SubTxn, items: list[WChange | WSubAbort], where: str
    ) -> None:
        table = self.table(change.table, f"{where}.delete")
        old, old_kind = self.old_tuple(table, change, where, key_required=True)
        self.assign(sub)
        size = _tuple_size(table, old) if old else 0
        lsn, _ = self.record(_DELETE_RECORD + size)
        memory = _CHANGE_STRUCT + (_HEAP_TUPLE_DATA + size if old else 0)
        items.append(WChange("delete", lsn, sub, memory, table, old=old, old_kind=old_kind))

    def alter(
        self, change: AlterTable, sub: SubTxn, items: list[WChange | WSubAbort], where: str
    ) -> None:
        table = self.table(change.table, f"{where}.alter_table")
        columns = list(table.columns)
        names = [c.name for c in columns]
        for j, name in enumerate(change.drop_columns):
            if name not in names:
                raise ScriptError(
                    f"no column {name!r} in {table.name}", f"{where}.drop_columns[{j}]"
                )
            index = names.index(name)
            del columns[index], names[index]
        added = tuple(
            dataclasses.replace(c, attnum=table.natts + c.attnum)
            for c in self._columns(change.add_columns, f"{where}.add_columns")
        )
        for j, c in enumerate(added):
            if c.name in names:
                raise ScriptError(
                    f"column {c.name!r} already exists", f"{where}.add_columns[{j}].name"
                )
            names.append(c.name)
        new = TableVersion(
            table.name,
            table.namespace,
            table.relname,
            table.oid,
            table.identity,
            (*columns, *added),
            table.natts + len(added),
        )
        if new.identity == "i" and not any(c.key for c in new.columns):
            raise ScriptError("REPLICA IDENTITY INDEX needs key columns", where)
        self.tables[table.name] = new
        self.assign(sub)
        lsn, _ = self.record(_DDL_RECORDS)
        items.append(WChange("ddl", lsn, sub, _DDL_CHANGE_MEMORY, new, tables=(new,)))


def _find_savepoint(stack: list[SubTxn], name: str, where: str) -> int:
    for level in range(len(stack) - 1, 0, -1):
        if stack[level].name == name:
            return level
    raise ScriptError(f"savepoint {name!r} does not exist", where)


def _released_with_xid(sub: SubTxn) -> list[SubTxn]:
    out: list[SubTxn] = []
    for child in sub.released:
        out.extend(_released_with_xid(child))
        if child.xid is not None:
            out.append(child)
    return out


def _count_subxacts(top: SubTxn) -> int:
    return len(_released_with_xid(top))


# Fixed-length built-in types on disk: OID → (typlen, typalign) (pg_type.dat).
_FIXED_TYPES: Final = {
    16: (1, 1),  # bool
    18: (1, 1),  # char
    19: (64, 1),  # name
    20: (8, 8),  # int8
    21: (2, 2),  # int2
    23: (4, 4),  # int4
    26: (4, 4),  # oid
    28: (4, 4),  # xid
    700: (4, 4),  # float4
    701: (8, 8),  # float8
    790: (8, 8),  # money
    1082: (4, 4),  # date
    1083: (8, 8),  # time
    1114: (8, 8),  # timestamp
    1184: (8, 8),  # timestamptz
    1186: (16, 8),  # interval
    1266: (12, 8),  # timetz
    2950: (16, 1),  # uuid
    3220: (8, 8),  # pg_lsn
}
_ENUM: Final = (4, 4)  # an enum value is its label's OID on disk


def type_length(ctype: ColumnType) -> int:
    """pg_type.typlen: bytes of a fixed-length type, -1 for a varlena."""
    while ctype.kind == "domain" and ctype.base is not None:
        ctype = ctype.base
    fixed = _ENUM if ctype.kind == "enum" else _FIXED_TYPES.get(ctype.oid)
    return fixed[0] if fixed is not None else -1


def _tuple_size(table: TableVersion, row: Row | None) -> int:
    """The heap tuple's length (t_len) as heap_form_tuple lays it out: a MAXALIGNed
    header (with a null bitmap when a value is null), then each value at its type's
    alignment; a varlena of up to 126 bytes takes a 1-byte header and no alignment.
    Values whose disk form differs from their binary send form (numeric, jsonb, arrays,
    composites) are counted at their send length."""
    if row is None:
        return 0
    header = 23 + ((len(row) + 7) // 8 if any(v is None for v in row) else 0)
    size = _align(header)
    for c, v in zip(table.stored, row, strict=True):
        if v is None or v is UNCHANGED_TOAST:
            continue
        ctype = c.ctype
        while ctype.kind == "domain" and ctype.base is not None:
            ctype = ctype.base
        fixed = _ENUM if ctype.kind == "enum" else _FIXED_TYPES.get(ctype.oid)
        if fixed is not None:
            length, align = fixed
            size = -(-size // align) * align + length
            continue
        length = len(encode_value(c.ctype, v, binary=True))
        if length + 1 <= 127:
            size += length + 1
        else:
            size = -(-size // 4) * 4 + length + 4
    return size


def _memory(tuple_size: int) -> int:
    return _CHANGE_STRUCT + _HEAP_TUPLE_DATA + tuple_size


def _timestamp(text: str, where: str) -> int:
    try:
        value = decode_text(type_by_name("timestamptz").oid, str(text))
        return datetime_to_pg_timestamp(value)  # type: ignore[arg-type]
    except (CodecError, TypeError, ValueError, OverflowError):
        raise ScriptError(f"expected a timestamp with time zone, got {text!r}", where) from None
