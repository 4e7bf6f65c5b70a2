"""The logical replication of a walsender session: START_REPLICATION ... LOGICAL (its
checks of the slot and options, in the emulated major's order), the running stream's
state (:class:`LogicalStream`), keepalives, the client's standby status updates and
CopyDone, and an error in the middle of a stream, as ``walsender.c`` and ``logical.c``
do them.

* START_REPLICATION errors (slot, options) come before CopyBothResponse, as
  ErrorResponse + ReadyForQuery; a missing publication comes after, at the first change.
* Client CopyDone → CopyDone, (a last keepalive if the client lags), ``COPY 0``,
  ``START_REPLICATION``, ReadyForQuery. The "done" flags are never reset for logical
  replication (only ``StartReplication`` resets them), so a second logical
  START_REPLICATION on the connection ends at once after CopyBothResponse.

A mixin of :class:`~pgwire_mock.server.session.WalSenderSession`, kept apart so the
session module stays about its connection's state machine; the session's
:meth:`~pgwire_mock.server.session.WalSenderSession.produce` sends the stream's
XLogData, :mod:`pgwire_mock.server.fault_injection` applies its faults.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from codec import DecodeError
from codec.replication import (
    HotStandbyFeedback,
    PrimaryKeepalive,
    StandbyStatusUpdate,
    decode_client_copy_data,
)
from codec.replication import encode as encode_replication
from codec.wire import CommandComplete, CopyBothResponse, CopyData, CopyDone
from pgwire_mock.server.errors import BackendCrashError, ServerError
from pgwire_mock.server.faults import ActiveFaults, Fault
from pgwire_mock.server.grammar import StartLogicalReplication, format_lsn
from pgwire_mock.server.pgoutput_options import PgOutputOptions, validate_start_replication
from pgwire_mock.server.phase import Phase, pg_time
from pgwire_mock.server.physical import PhysicalStream
from pgwire_mock.server.source import ScriptSource, StreamEvent
from pgwire_mock.server.state import ServerState, SlotState, StateError
from pgwire_mock.server.versions import error

if TYPE_CHECKING:
    from pgwire_mock.script.wal import RunningXacts
    from pgwire_mock.server.session import SessionConfig

__all__ = ["LogicalCommands", "LogicalStream"]


@dataclass(slots=True)
class LogicalStream:
    """A logical START_REPLICATION's state, from CopyBothResponse to its end."""

    slot: SlotState
    options: PgOutputOptions
    events: Iterator[StreamEvent] | None
    sent_ptr: int
    last_reply: float
    waiting_for_ping: bool = False
    client_write: int = 0
    client_flush: int = 0
    paused_until: float | None = None
    exhausted: bool = False
    next_idle: float | None = None
    faults: ActiveFaults = field(default_factory=ActiveFaults)
    caught_up: bool = False  # reached the end of WAL once: pg_stat_replication 'streaming'
    first_wait: bool = True  # nothing read yet (LogicalCommands._first_wait)
    running_xacts_read: int = 0
    """How many of the served WAL's running-xacts records this walsender has read."""


class LogicalCommands:
    """The logical stream's handlers; the session provides the attributes and methods
    below."""

    config: SessionConfig
    state: ServerState
    major: int
    pid: int
    phase: Phase
    database: str
    replication: str
    transaction_status: str
    _now: float
    _stream: LogicalStream | None
    _last_stream: LogicalStream | None
    _physical: PhysicalStream | None
    _done_receiving: bool
    _done_sending: bool
    _reported: tuple[int, int, int, int]
    _log: Callable[[str], None]

    if TYPE_CHECKING:

        def _send(self, *messages: object) -> None: ...
        def _send_error(self, err: ServerError) -> None: ...
        def _command_error(self, err: ServerError) -> None: ...
        def _ready(self) -> None: ...
        def _fatal(self, err: ServerError) -> None: ...
        def _finish(self) -> None: ...
        def _error_cleanup(self) -> None: ...
        def _slot_error(self, err: StateError) -> ServerError: ...
        def _activate(self, s: LogicalStream, fault: Fault, now: float) -> None: ...
        def _check_confirmed(self, s: LogicalStream, now: float) -> None: ...
        def _physical_copy_data(self, stream: PhysicalStream, message: CopyData) -> None: ...
        def _physical_copy_done(self) -> None: ...

    def _start_logical(self, command: StartLogicalReplication) -> None:
        if self.replication != "database":
            raise error(self.major, "logical_decoding_requires_database")
        if self.transaction_status != "I":
            raise ServerError(
                "ERROR", "25001", "START_REPLICATION cannot run inside a transaction block"
            )
        try:
            slot = self.state.acquire(command.slot_name, self.pid)
        except StateError as err:
            raise self._slot_error(err) from None
        now = self._now
        try:
            if slot.invalidated is not None and self.major >= 18:
                # ReplicationSlotAcquire(..., error_if_invalid) (18).
                raise error(self.major, "slot_invalidated", slot=slot.name, cause=slot.invalidated)
            if self.major < 16 and not slot.restart_lsn:
                # 14/15 StartLogicalReplication looks at the slot's WAL before its kind
                # (16 moved the check after it into CreateDecodingContext).
                raise error(self.major, "slot_invalidated_cannot_read", slot=slot.name)
            if not slot.logical:
                raise error(self.major, "physical_slot_for_logical_decoding")
            if self.state.databases_declared and slot.database != self.database:
                raise error(self.major, "slot_other_database", slot=slot.name)
            if slot.invalidated is not None:
                # CreateDecodingContext (16, 17), after the slot's kind and database.
                raise error(self.major, "slot_invalidated", slot=slot.name, cause=slot.invalidated)
            options = validate_start_replication(self.major, slot.name, command.options)
        except (ServerError, BackendCrashError):
            self.state.release(slot.name, self.pid)
            raise
        # CreateDecodingContext: 0/0 or an older point means "from confirmed_flush".
        from_lsn = max(command.start_lsn, slot.confirmed_flush)
        if options.two_phase and not slot.two_phase:
            # CreateDecodingContext (15+): a slot first streamed with two_phase is marked
            # two-phase for good, and the mark is saved with the slot.
            slot.two_phase = True
            slot.two_phase_at = from_lsn
            self.state.save()
        if slot.two_phase and self.major >= 15:
            # Measured on 15-18 (tests/conformance/test_live_wal_postgres.py): a
            # client restarted without two_phase, even at protocol 1, still gets Commit
            # and Rollback Prepared for a PREPARE it confirmed before.
            options = replace(options, slot_two_phase_at=slot.two_phase_at or 0)
        source = self.config.source
        events = source.events(options, self.major, from_lsn) if source is not None else iter(())
        self._stream = LogicalStream(
            slot=slot,
            options=options,
            events=events,
            sent_ptr=slot.confirmed_flush,
            last_reply=now,
            # Decoding starts at restart_lsn: the records from there are read again.
            running_xacts_read=bisect_left(
                self._running_xacts(), slot.restart_lsn, key=lambda r: r.lsn
            ),
        )
        self._last_stream = self._stream
        self.phase = Phase.STREAMING
        faults = [*self.config.faults, *self.config.next_faults]
        self.config.next_faults.clear()
        self._log(
            f"streaming slot {slot.name} from {format_lsn(from_lsn)} "
            f"(proto_version {options.proto_version}, publications "
            f"{','.join(options.publication_names)})"
        )
        self._send(CopyBothResponse(0, ()))
        if self._done_receiving and self._done_sending:
            # StartLogicalReplication does not reset the flags: the loop exits at once.
            self._end_stream()
            return
        for fault in faults:
            if self._stream is None:
                break
            self._activate(self._stream, fault, now)

    def _keepalive(self, s: LogicalStream, now: float, *, reply: bool) -> None:
        if not s.faults.sends_keepalives():
            return
        payload = encode_replication(PrimaryKeepalive(s.sent_ptr, pg_time(now), reply))
        self._send(CopyData(payload))

    def _first_wait(self, s: LogicalStream, now: float) -> None:
        """The keepalive a new walsender sends before it decodes anything.

        XLogSendLogical's first page read calls WalSndWaitForWal, whose fast path needs
        the flush position it remembers (a static RecentFlushPtr, unset in a new
        walsender process); so it goes round its loop once, and there "before sleeping,
        we send a ping containing the flush location": a keepalive at sentPtr, which
        StartLogicalReplication set to the slot's confirmed_flush (even when the client
        asked for a later start), as the client has confirmed nothing on this connection
        (MyWalSnd's write and flush are unset). Measured on 14-18: the first message of
        every stream, a restart's included, is that keepalive
        (``tests/conformance/test_other_clients_restart.py``). After a
        CREATE_REPLICATION_SLOT on the same connection (which cached the flush position)
        PostgreSQL sends it once it reads past the WAL flushed at the slot's creation,
        at about that position, which is the slot's start: sent here at once.
        """
        s.first_wait = False
        self._maybe_idle_keepalive(s, now)

    def _maybe_idle_keepalive(self, s: LogicalStream, now: float) -> None:
        # WalSndWaitForWal: "before sleeping, we send a ping containing the flush location".
        if (
            s.faults.sends_keepalives()
            and s.client_flush < s.sent_ptr
            and s.client_write < s.sent_ptr
            and not s.waiting_for_ping
        ):
            self._keepalive(s, now, reply=False)

    def _caught_up(self, now: float) -> None:
        s = self._stream
        if s is None:
            return
        # XLogSendLogical sets sentPtr to the reader's EndRecPtr after every record, whether
        # it decoded to a change or not (a checkpoint, another database's transaction), so
        # once caught up sentPtr is the flush position: what IDENTIFY_SYSTEM reported as
        # xlogpos. WalSndWaitForWal's keepalive carries it, and a client stopping there
        # (pg_recvlogical --endpos) stops at once. Also when the slot's confirmed_flush,
        # where sentPtr started, is beyond it (a client acknowledged past the end of WAL):
        # the keepalive at the start said confirmed_flush, this one the end of WAL.
        s.sent_ptr = self.state.wal_lsn
        s.caught_up = True
        self._read_running_xacts(s)
        if self.config.idle_keepalive_interval > 0 and not s.faults.shutdown:
            s.next_idle = now + self.config.idle_keepalive_interval
        self._maybe_idle_keepalive(s, now)
        self._check_confirmed(s, now)

    def _stream_error(self, err: ServerError) -> None:
        """An error ending the stream ends it as one ending a command, back to READY
        unless FATAL (neither _command_error nor what it calls reads the phase)."""
        if not err.fatal:
            self.phase = Phase.READY
        self._command_error(err)

    def _on_copy_data(self, message: CopyData) -> None:
        if self._physical is not None:
            self._physical_copy_data(self._physical, message)
            return
        s = self._stream
        assert s is not None
        now = self._now
        try:
            reply = decode_client_copy_data(bytes(message.data))
        except DecodeError as err:
            # "unexpected message type" is a COMMERROR: logged, then the backend exits.
            self._log(f"invalid standby message: {err}")
            self._finish()
            return
        s.last_reply = now
        s.waiting_for_ping = False
        if isinstance(reply, StandbyStatusUpdate):
            s.client_write = reply.written_lsn
            s.client_flush = reply.flushed_lsn
            self._reported = (
                reply.written_lsn,
                reply.flushed_lsn,
                reply.applied_lsn,
                reply.send_time,
            )
            if self.config.on_status_update is not None:
                self.config.on_status_update(self.pid, reply)
            if reply.flushed_lsn:
                self._read_running_xacts(s)
                self.state.confirm(s.slot.name, reply.flushed_lsn)
            if reply.reply_requested:
                self._keepalive(s, now, reply=False)
            elif s.exhausted:
                self._maybe_idle_keepalive(s, now)
            self._check_confirmed(s, now)
        elif isinstance(reply, HotStandbyFeedback):
            pass  # accepted; a logical slot's xmin is not emulated

    def _running_xacts(self) -> list[RunningXacts]:
        """The running-xacts records of the served live WAL (none for a recording)."""
        source = self.config.source
        if not isinstance(source, ScriptSource) or source.wal is None:
            return []
        return source.wal.compiled.snapshots

    def _read_running_xacts(self, s: LogicalStream) -> None:
        """SnapBuildProcessRunningXacts for each running-xacts record the walsender has
        read since the last call (its sentPtr is past it): the slot's candidates."""
        records = self._running_xacts()
        while s.running_xacts_read < len(records):
            record = records[s.running_xacts_read]
            if record.end_lsn > s.sent_ptr:
                return
            s.running_xacts_read += 1
            self.state.running_xacts(s.slot.name, record.lsn, record.restart_lsn, record.xmin)

    def _on_copy_done(self, _: CopyDone) -> None:
        if self._physical is not None:
            self._physical_copy_done()
            return
        s = self._stream
        assert s is not None
        self._log("client sent CopyDone")
        if not self._done_sending:
            self._send(CopyDone())
            self._done_sending = True
        self._done_receiving = True
        s.last_reply = self._now
        if s.exhausted and s.client_flush < s.sent_ptr and s.client_write < s.sent_ptr:
            self._keepalive(s, self._now, reply=False)
        self._end_stream()

    def _end_stream(self) -> None:
        s = self._stream
        if s is not None:
            self.state.release(s.slot.name, self.pid)
        self._stream = None
        self.phase = Phase.READY
        self._send(CommandComplete("COPY 0"), CommandComplete("START_REPLICATION"))
        self._ready()

    def _on_invalid_standby_message(self, message: object) -> None:
        tag = getattr(type(message), "TAG", b"?")
        letter = tag.decode("latin-1") if isinstance(tag, bytes) else str(tag)
        self._fatal(error(self.major, "invalid_standby_message_type", type=letter))
