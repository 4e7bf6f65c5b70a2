"""How faults act on a running stream: run-time injection (:meth:`FaultInjection.inject`),
a script's fault step when the stream reaches it, what each fault changes once active,
the wait of ``shutdown`` / ``redeliver`` for the client to confirm everything sent, and
the timers of ``pause`` and ``silent_timeout``.

A mixin of :class:`~pgwire_mock.server.session.WalSenderSession`, kept apart so the
session module stays about its connection's state machine; the faults themselves (their
parameters and the per-stream state they leave) are :mod:`pgwire_mock.server.faults`,
their effect on a physical stream :mod:`pgwire_mock.server.physical_commands`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from codec.wire import CommandComplete
from pgwire_mock.server.errors import ServerError
from pgwire_mock.server.faults import Fault, FaultError
from pgwire_mock.server.logical_commands import LogicalStream
from pgwire_mock.server.phase import Phase
from pgwire_mock.server.physical import PhysicalStream
from pgwire_mock.server.source import FaultEvent
from pgwire_mock.server.state import ServerState

if TYPE_CHECKING:
    from pgwire_mock.server.session import SessionConfig

__all__ = ["FaultInjection"]


class FaultInjection:
    """The fault handlers; the session provides the attributes and methods below."""

    config: SessionConfig
    state: ServerState
    phase: Phase
    _now: float
    _held: bytearray
    _stream: LogicalStream | None
    _physical: PhysicalStream | None
    _log: Callable[[str], None]

    if TYPE_CHECKING:

        def receive_data(self, data: bytes, now: float) -> None: ...
        def _send(self, *messages: object) -> None: ...
        def _finish(self) -> None: ...
        def _stream_error(self, err: ServerError) -> None: ...
        def _keepalive(self, s: LogicalStream, now: float, *, reply: bool) -> None: ...
        def _physical_faults(
            self, stream: PhysicalStream, faults: list[Fault], *, injected: bool = False
        ) -> None: ...

    def inject(self, fault: Fault, now: float) -> bool:
        """Apply ``fault`` to the running stream; False when not streaming."""
        self._now = now
        if self._physical is not None and self.phase is Phase.STREAMING:
            self._physical_faults(self._physical, [fault], injected=True)
            return True
        s = self._stream
        if self.phase is not Phase.STREAMING or s is None:
            return False
        self._activate(s, fault, now)
        return True

    def _fault(self, s: LogicalStream, event: FaultEvent, now: float) -> None:
        try:
            fault = Fault.from_params(event.name, event.params)
        except FaultError as err:
            self._stream_error(ServerError("ERROR", "XX000", f"pgwire-mock: bad fault: {err}"))
            return
        # A script's fault is an incident at one point of the WAL: it happens once, not
        # again each time a client resumes from before that point.
        if not self.state.fire_once(s.slot.name, fault.name, event.lsn):
            return
        if fault.name in ("shutdown", "redeliver"):
            s.faults.hold = True  # the WAL ends here (shutdown checkpoint, crash)
        self._activate(s, fault, now)

    def _activate(self, s: LogicalStream, fault: Fault, now: float) -> None:
        self._log(f"fault: {fault}")
        f = s.faults
        name = fault.name
        if name == "error":
            self._stream_error(fault.server_error())
        elif name == "close_after":
            f.messages_left, f.bytes_left = fault.messages, fault.bytes
            if not (fault.messages or fault.bytes):
                self._finish()
        elif name == "pause":
            f.stalled_until = now + (fault.seconds or 0.0)
        elif name == "stop_keepalives":
            f.keepalives = False
        elif name == "silent_timeout":
            timeout = fault.seconds
            if timeout is None:
                timeout = self.config.wal_sender_timeout or 60.0
            f.silent_until = now + timeout
        elif name == "slow":
            f.rate, f.budget, f.budget_at = fault.rate, 0.0, now
        elif name == "wal_removed":
            self._log("fault wal_removed acts on physical streams; error:58P01 on logical ones")
        elif name == "timeline_switch":
            self._log("fault timeline_switch acts on a served physical recording only")
        elif name == "redeliver":
            self.state.hold_persisted(s.slot.name, fault.lsn)
            f.redeliver = True
            if not fault.wait:
                self._crash(s)
            else:
                self._check_confirmed(s, now)
        elif name == "shutdown":
            # The shutdown checkpoint is the last WAL: nothing more to decode.
            f.shutdown = True
            if not fault.wait:
                self._send(CommandComplete("COPY 0"))
                self._finish()
            else:
                self._check_confirmed(s, now)

    def _check_confirmed(self, s: LogicalStream, now: float) -> None:
        """shutdown / redeliver: act once the client has confirmed everything sent."""
        f = s.faults
        if not (f.shutdown or f.redeliver) or not (s.exhausted or f.hold):
            return
        # WalSndDone: replicatedPtr is the flush position, or write when flush is unset.
        replicated = s.client_flush or s.client_write
        slot = self.state.slots.get(s.slot.name)
        persisted = slot.persisted_flush if slot is not None else None
        if replicated >= s.sent_ptr and (
            f.shutdown or (persisted is not None and replicated > persisted)
        ):
            if f.shutdown:
                self._log("fault shutdown: client caught up; COPY 0 without CopyDone")
                self._send(CommandComplete("COPY 0"))
                self._finish()
            else:
                self._crash(s)
            return
        if f.shutdown and not s.waiting_for_ping:
            self._keepalive(s, now, reply=True)
            s.waiting_for_ping = True

    def _crash(self, s: LogicalStream) -> None:
        """redeliver: the server dies (no ErrorResponse); the slot keeps the disk position."""
        self._log("fault redeliver: server crash; the slot restarts from its persisted position")
        self._finish()

    def _fault_tick(self, s: LogicalStream, now: float) -> bool:
        """Time passes for the faults; True when the tick ends here."""
        f = s.faults
        if f.silent_until is not None:
            if now >= f.silent_until:
                self._log("terminating walsender process due to replication timeout")
                self._finish()
            return True
        if f.stalled_until is not None:
            if now < f.stalled_until:
                return True
            f.stalled_until = None
            held = bytes(self._held)
            self._held.clear()
            if held:
                self.receive_data(held, now)
            if self._stream is not s:
                return True
        if f.throttled_until is not None and now >= f.throttled_until:
            f.throttled_until = None
        return False
