"""A live WAL: a script whose WAL is written while clients stream it.

A served script is written up to its first ``wait_for`` step; what follows is written when
the server finds the step's condition met (:meth:`LiveWal.release`), and steps appended
later (:meth:`LiveWal.append`: a test committing transactions) are written at once unless
a wait holds them back too. A transaction can also stay open (:meth:`LiveWal.begin`):
its changes are written as they are given, between other transactions' records, and its
commit or rollback when it ends, so a consumer can stop and restart in the middle of it.
Every walsender streams the same compiled WAL, each from its own start point; one that
reaches the end of what is written waits there
(:class:`~pgwire_mock.script.events.EndOfWal`) until more is.

A :attr:`LiveWal.journal` hears of every change as an operation that
:meth:`LiveWal.replay` repeats on the same script to build the same WAL again (``serve``
keeps them beside its state file, so that a server started again has the WAL the last
one wrote).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from pgwire_mock.script.compile import Compiler
from pgwire_mock.script.errors import ScriptError
from pgwire_mock.script.loader import step_from_dict, step_to_dict
from pgwire_mock.script.model import Change, Script, Step, WaitFor
from pgwire_mock.script.wal import CompiledScript, OpenTxn, RunningXacts, WMarker

__all__ = ["RECORD_OPERATIONS", "LiveWal"]

#: What a journal records besides steps ({"do": name}): LiveWal's methods that write
#: records of their own.
RECORD_OPERATIONS: Final = (
    "release",
    "abort_open",
    "crash_open",
    "checkpoint",
    "log_running_xacts",
    "online_checkpoint",
)


class LiveWal:
    """A script's WAL that grows: :meth:`append` and :meth:`release` write more of it."""

    def __init__(self, script: Script) -> None:
        # What is appended joins the served script's steps: a copy, so the caller's
        # Script (one a test module shares between its tests' servers) stays as given.
        script = copy.copy(script)
        script.steps = list(script.steps)
        self._compiler = Compiler.start(script)
        self.compiled: CompiledScript = self._compiler.compiled
        self.compiled.live = True
        #: Told of every change to the WAL as a JSON-able operation (:meth:`replay`).
        self.journal: Callable[[dict[str, Any]], None] | None = None
        self._write()

    def replay(self, operations: Iterable[Mapping[str, Any]]) -> None:
        """Do again, in order, what a journal was told (ScriptError for an operation
        that does not fit this script, the journal being another script's, or that
        is none of the journal's)."""
        journal, self.journal = self.journal, None
        try:
            for i, operation in enumerate(operations):
                if "append" in operation:
                    step = step_from_dict(operation["append"], f"journal[{i}]")
                    self._compiler.append(step)
                    self._write()
                elif operation.get("do") in RECORD_OPERATIONS and len(operation) == 1:
                    getattr(self, operation["do"])()
                else:
                    raise ScriptError(f"journal[{i}]: not an operation: {dict(operation)}")
        finally:
            self.journal = journal

    def declare_publications(self, names: Iterable[str]) -> None:
        """FOR ALL TABLES publications that exist before the script's first change
        (declared outside it, as ``serve --publication``): part of the catalog the
        walsenders start from, and ones a drop_publication step may drop."""
        compiled = self.compiled
        added = {name: None for name in names if name not in compiled.publications}
        compiled.publications = {**compiled.publications, **added}
        for name in added:
            self._compiler.publications.declare_all_tables(name)

    def _note(self, operation: dict[str, Any]) -> None:
        if self.journal is not None:
            self.journal(operation)

    def _refuse_journaled(self) -> None:
        if self.journal is not None:
            raise RuntimeError("a journaled WAL takes open transactions as steps (begin, write)")

    @property
    def end_lsn(self) -> int:
        """The end of the WAL written so far (IDENTIFY_SYSTEM's xlogpos)."""
        return self.compiled.written_end()

    @property
    def held(self) -> WMarker | None:
        """The wait_for step holding the rest of the WAL back, if any."""
        compiled = self.compiled
        if compiled.available < len(compiled.wal):
            item = compiled.wal[compiled.available]
            if isinstance(item, WMarker):  # always: _write stops at a wait only
                return item
        return None

    def wait(self) -> WaitFor | None:
        held = self.held
        return held.step if held is not None and isinstance(held.step, WaitFor) else None

    def append(self, steps: Iterable[Step]) -> int:
        """Compile ``steps`` after the script's (ScriptError for one that does not fit; the
        ones before it stay), write what no wait holds back; returns :attr:`end_lsn`."""
        for step in steps:
            self._compiler.append(step)
            if self.journal is not None:
                self.journal({"append": step_to_dict(step, self.compiled)})
        self._write()
        return self.end_lsn

    def begin(
        self, *, stream: str = "auto", origin: str | None = None, origin_lsn: int | None = None
    ) -> OpenTxn:
        """A transaction that stays open: :meth:`write` adds its changes, :meth:`finish`
        ends it. (Not while journaled: a journal keeps steps, and ``begin`` steps open
        transactions too.)"""
        self._refuse_journaled()
        return self._compiler.begin(stream=stream, origin=origin, origin_lsn=origin_lsn)

    def write(self, txn: OpenTxn, changes: Sequence[Change]) -> int:
        """Write an open transaction's ``changes`` now; returns :attr:`end_lsn`.
        ScriptError (and nothing written) for one that does not fit. While a wait_for
        step holds the WAL back, they are written when it is released, as what follows
        it is."""
        self._refuse_journaled()
        self._compiler.write(txn, changes)
        return self.end_lsn

    def finish(
        self,
        txn: OpenTxn,
        *,
        rollback: bool = False,
        prepare: str | None = None,
        commit_time: str | None = None,
    ) -> int:
        """Commit, roll back or prepare (as ``prepare``) an open transaction; returns the
        end of the record that ends it (what a consumer confirms once it applied it), or
        the end of WAL if it wrote nothing."""
        self._refuse_journaled()
        self._compiler.finish(txn, rollback=rollback, prepare=prepare, commit_time=commit_time)
        self._write()
        return txn.wtxn.end_lsn or self.end_lsn

    def abort_open(self) -> int:
        """Roll back every open transaction (a fast shutdown); returns how many."""
        aborted = self._compiler.abort_open()
        self._write()
        if aborted:
            self._note({"do": "abort_open"})
        return aborted

    def crash_open(self) -> int:
        """Leave every open transaction without an end (a crash); returns how many."""
        crashed = self._compiler.crash_open()
        if crashed:
            self._note({"do": "crash_open"})
        return crashed

    def checkpoint(self) -> None:
        """Write a shutdown checkpoint's record at the end of WAL."""
        self._compiler.checkpoint()
        self._write()
        self._note({"do": "checkpoint"})

    def log_running_xacts(self) -> RunningXacts | None:
        """Write a running-xacts record at the end of WAL; None (nothing written) while
        a wait_for step holds compiled records back, which must come first."""
        if self.held is not None:
            return None
        record = self._compiler.log_running_xacts()
        self._write()
        self._note({"do": "log_running_xacts"})
        return record

    def online_checkpoint(self) -> RunningXacts | None:
        """CHECKPOINT's records (a running-xacts record, returned, and the checkpoint);
        None, as :meth:`log_running_xacts`, while a wait holds records back."""
        if self.held is not None:
            return None
        record = self._compiler.online_checkpoint()
        self._write()
        self._note({"do": "online_checkpoint"})
        return record

    def release(self) -> None:
        """The held wait_for step's condition holds: write on, to the next one."""
        if self.held is not None:
            self.compiled.available += 1
            self._write()
            self._note({"do": "release"})

    def _write(self) -> None:
        compiled = self.compiled
        wal = compiled.wal
        i = compiled.available
        while i < len(wal):
            item = wal[i]
            if isinstance(item, WMarker) and item.kind == "wait":
                break
            i += 1
        compiled.available = i
