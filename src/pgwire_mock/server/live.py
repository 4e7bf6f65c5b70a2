"""The server side of a live WAL: writing a served script's WAL while clients stream it.

:class:`WalWriter` writes steps a test appends (the pytest handle's ``commit`` and
``append``, ``serve --control``'s ``POST /wal``) and, when a ``wait_for`` step holds the
rest of the script back, checks its condition whenever a client's message may have
changed it (an acknowledgement, a new slot) and when its time comes. Each write moves the
server's end of WAL (IDENTIFY_SYSTEM, ``pg_current_wal_lsn()``, idle keepalives) and wakes
the walsenders waiting at the old end, so they stream the new transactions at once, as
PostgreSQL's walsenders do when WAL is flushed. It also writes transactions that stay
open (``begin``, ``write``, ``finish``): each change reaches the WAL when it is given.

It is the background writer too: 15 s after it starts, and then whenever 15 s have passed
and WAL was written since (checked at its next wake-up, 200 ms after a write that follows
a quiet spell), it writes a running-xacts record (LogStandbySnapshot,
LOG_SNAPSHOT_INTERVAL_MS), the record at which logical slots' restart_lsn moves and
their state is saved (measured on 16: records at start + 15.0 s, 0.23 s after a write
that came 15 s later, and 15.0 s after that).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

from pgwire_mock.server.grammar import format_lsn
from pgwire_mock.server.state import ServerState

if TYPE_CHECKING:  # the script package loads YAML: only scripts need it
    from pgwire_mock.script.live import LiveWal
    from pgwire_mock.script.model import Change, Step, WaitFor
    from pgwire_mock.script.wal import OpenTxn, RunningXacts

__all__ = ["BGWRITER_DELAY", "LOG_SNAPSHOT_INTERVAL", "ShuttingDownError", "WalWriter"]

#: Seconds between the background writer's running-xacts records (LOG_SNAPSHOT_INTERVAL_MS).
LOG_SNAPSHOT_INTERVAL: Final = 15.0
#: bgwriter_delay: how soon after a write the background writer, woken, looks again.
BGWRITER_DELAY: Final = 0.2


class ShuttingDownError(RuntimeError):
    """WAL written while the server restarts: on PostgreSQL the session that would
    write it is refused (57P03) or ended (57P01) meanwhile."""

    def __init__(self) -> None:
        super().__init__("the database system is shutting down")


class WalWriter:
    """Writes a :class:`LiveWal` for one server; ``wake`` tells its walsenders."""

    def __init__(
        self,
        wal: LiveWal,
        state: ServerState,
        clock: Any,
        wake: Callable[[], None],
        log: Callable[[str], None],
        snapshot_interval: float = LOG_SNAPSHOT_INTERVAL,
    ) -> None:
        self.wal = wal
        self.state = state
        self.clock = clock
        self._wake = wake
        self._log = log
        self._held_since: float | None = None
        self._timer: Any = None
        #: Seconds between the background writer's running-xacts records; 0: none.
        self.snapshot_interval = snapshot_interval
        self._snapshot_timer: Any = None
        self._last_snapshot = 0.0
        self._written_since_snapshot = False

    @property
    def end_lsn(self) -> int:
        return self.wal.end_lsn

    def append(self, steps: Iterable[Step]) -> int:
        """Write ``steps`` (after any held back); returns the end of WAL. ScriptError for
        a step that does not fit the script: the steps before it are written;
        ShuttingDownError while the server restarts."""
        self._refuse_while_down()
        try:
            self.wal.append(steps)
        finally:
            self._written()
            self.check()
        return self.wal.end_lsn

    def begin(self, **options: Any) -> OpenTxn:
        """A transaction that stays open (LiveWal.begin's options)."""
        self._refuse_while_down()
        return self.wal.begin(**options)

    def write(self, txn: OpenTxn, changes: Sequence[Change]) -> int:
        """Write an open transaction's changes now; returns the end of WAL."""
        self._refuse_while_down()
        try:
            return self.wal.write(txn, changes)
        finally:
            self._written()

    def finish(self, txn: OpenTxn, **how: Any) -> int:
        """End an open transaction (LiveWal.finish's rollback, prepare, commit_time);
        returns the end of the record that ends it."""
        self._refuse_while_down()
        try:
            return self.wal.finish(txn, **how)
        finally:
            self._written()

    def abort_open(self) -> int:
        """Roll back every open transaction, as a fast shutdown's backends do; returns
        how many were open."""
        try:
            return self.wal.abort_open()
        finally:
            self._written()

    def crash_open(self) -> int:
        """The server crashed: open transactions never end (no abort record); returns
        how many were open."""
        return self.wal.crash_open()

    def checkpoint(self) -> None:
        """The shutdown checkpoint's record: the end of WAL moves past it."""
        try:
            self.wal.checkpoint()
        finally:
            self._written()

    def catalog_step(self, step: object) -> None:
        """Write a catalog step (CreatePublication, DropPublication) at the end of WAL,
        as the SQL command commits it; ScriptError if it does not fit the script,
        ShuttingDownError while the server restarts."""
        self.append([cast("Step", step)])

    def log_running_xacts(self) -> RunningXacts | None:
        """A running-xacts record at the end of WAL, as ``pg_log_standby_snapshot()``
        (16+) and a logical slot's creation write; None, nothing written, while a
        wait_for step holds WAL back. ShuttingDownError while the server restarts."""
        self._refuse_while_down()
        record = self.wal.log_running_xacts()
        if record is not None:
            self._written(important=False)
        return record

    def online_checkpoint(self) -> RunningXacts | None:
        """CHECKPOINT's records: a running-xacts record (returned), then the checkpoint;
        None while a wait_for step holds WAL back. ShuttingDownError while the server
        restarts."""
        self._refuse_while_down()
        record = self.wal.online_checkpoint()
        if record is not None:
            self._written()
        return record

    def _refuse_while_down(self) -> None:
        if self.state.shutting_down:
            raise ShuttingDownError

    def start_bgwriter(self) -> None:
        """The server (re)starts: the background writer's first running-xacts record
        is due in :attr:`snapshot_interval` seconds, written or not (its last record's
        position starts invalid, so the condition holds once)."""
        self._last_snapshot = self.clock.seconds()
        self._written_since_snapshot = True
        self._cancel_snapshot()
        self._schedule_snapshot()

    def _schedule_snapshot(self) -> None:
        if self.snapshot_interval <= 0 or self._snapshot_timer is not None:
            return
        now = self.clock.seconds()
        delay = max(self._last_snapshot + self.snapshot_interval - now, BGWRITER_DELAY)
        self._snapshot_timer = self.clock.callLater(delay, self._bgwriter)

    def _bgwriter(self) -> None:
        self._snapshot_timer = None
        if self.state.shutting_down or not self._written_since_snapshot:
            return
        if self.log_running_xacts() is None:  # a wait holds WAL back: the next wake-up
            self._snapshot_timer = self.clock.callLater(BGWRITER_DELAY, self._bgwriter)
            return
        self._last_snapshot = self.clock.seconds()
        self._written_since_snapshot = False

    def _cancel_snapshot(self) -> None:
        if self._snapshot_timer is not None and self._snapshot_timer.active():
            self._snapshot_timer.cancel()
        self._snapshot_timer = None

    def check(self) -> None:
        """Write on past every wait_for step whose condition holds now."""
        while True:
            held = self.wal.held
            wait = self.wal.wait()
            if held is None or wait is None:
                return
            now = self.clock.seconds()
            if self._held_since is None:
                self._held_since = now
                self._schedule(wait, now)
            if not self._met(wait, held.lsn, now):
                return
            self._held_since = None
            self._cancel()
            self.wal.release()
            self._written()

    def _met(self, wait: WaitFor, lsn: int, now: float) -> bool:
        assert self._held_since is not None
        elapsed = now - self._held_since
        if elapsed < wait.seconds:
            return False
        if not wait.confirmed or self._confirmed(wait.slot, lsn):
            return True
        if wait.timeout is not None and elapsed >= wait.timeout:
            who = f"slot {wait.slot}" if wait.slot else "the slots"
            self._log(
                f"wait_for: {who} did not confirm {format_lsn(lsn)} within "
                f"{wait.timeout:g} s; writing on"
            )
            return True
        return False

    def _confirmed(self, slot: str | None, lsn: int) -> bool:
        slots = self.state.slots
        if slot is not None:
            found = slots.get(slot)
            return found is not None and found.confirmed_flush >= lsn
        logical = [s for s in slots.values() if s.logical]
        return bool(logical) and all(s.confirmed_flush >= lsn for s in logical)

    def _schedule(self, wait: WaitFor, now: float) -> None:
        """A timer for the times the wait's outcome may change without a message."""
        delays = [d for d in (wait.seconds, wait.timeout) if d]
        self._cancel()
        if delays:
            # Each firing re-checks and, if still held, schedules the later deadline.
            held_since = self._held_since if self._held_since is not None else now
            due = [held_since + d for d in delays if held_since + d > now]
            if due:
                self._timer = self.clock.callLater(min(due) - now, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        held = self.wal.held
        self.check()
        wait = self.wal.wait()
        if wait is not None and self.wal.held is held and self._held_since is not None:
            self._schedule(wait, self.clock.seconds())

    def _cancel(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _written(self, *, important: bool = True) -> None:
        self.state.advance_wal(self.wal.end_lsn)
        if important:  # a running-xacts record alone does not call for another
            self._written_since_snapshot = True
            self._schedule_snapshot()
        self._wake()

    def stop(self) -> None:
        self._cancel()
        self._cancel_snapshot()
