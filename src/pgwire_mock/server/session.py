"""The fake walsender's connection state machine, without I/O (sans-IO).

A :class:`WalSenderSession` is fed the client's bytes (:meth:`~WalSenderSession.receive_data`)
and the passing of time (:meth:`~WalSenderSession.tick`, with ``now`` in Unix seconds —
the session never reads a clock); it queues the bytes PostgreSQL would answer, which the
caller takes with :meth:`~WalSenderSession.data_to_send`. Stream output is produced only
when asked (:meth:`~WalSenderSession.produce`), so a transport can stop pulling when its
client stops reading. :attr:`~WalSenderSession.close_requested` and
:meth:`~WalSenderSession.take_start_tls` tell the transport what to do.

Which message a phase accepts, and what handles it, is the one table :data:`TRANSITIONS`.
The handlers live in mixins, one file each, so that this module holds only the
connection's state machine (the transport's side, the stream's output and timers, and
the ends of a command or of the backend):

* :mod:`~pgwire_mock.server.startup`: everything before the first command;
* :mod:`~pgwire_mock.server.queries`: Query, the extended protocol, SQL and its results;
* :mod:`~pgwire_mock.server.slot_commands`: CREATE / DROP / READ / ALTER_REPLICATION_SLOT;
* :mod:`~pgwire_mock.server.logical_commands`: a logical START_REPLICATION and its stream;
* :mod:`~pgwire_mock.server.physical_commands`: physical replication and BASE_BACKUP;
* :mod:`~pgwire_mock.server.fault_injection`: faults acting on a running stream.

Facts reproduced here (``walsender.c``, ``postgres.c``):

* Any ERROR drops the session's temporary slots (``ReplicationSlotCleanup``).
* XLogData carries wal_start = wal_end = the record's LSN, or 0/0 (see
  :mod:`pgwire_mock.server.source`); sentPtr starts at the slot's confirmed_flush.
* Keepalives: one with reply_requested=0 whenever the walsender waits for WAL while the
  client has not confirmed sentPtr (``WalSndWaitForWal``): first before anything is
  decoded, at the slot's confirmed_flush, then each time it catches up, at the end of
  WAL; one with reply_requested=1 after wal_sender_timeout/2 without client messages,
  silent close at the full timeout.
"""

from __future__ import annotations

import secrets
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from codec import DecodeError
from codec.replication import StandbyStatusUpdate
from codec.wire import (
    Bind,
    CancelRequest,
    Close,
    CopyData,
    CopyDone,
    CopyFail,
    Describe,
    ErrorResponse,
    Execute,
    Flush,
    FrontendReader,
    FunctionCall,
    GSSENCRequest,
    NoticeResponse,
    ParameterStatus,
    Parse,
    PasswordMessage,
    Query,
    ReadyForQuery,
    SASLInitialResponse,
    SASLResponse,
    SecretKey,
    SSLRequest,
    StartupMessage,
    Sync,
    Terminate,
    UnsupportedStartupMessage,
)
from pgwire_mock.server.auth import AuthMethod, Exchange, User
from pgwire_mock.server.basebackup import BackupReplay
from pgwire_mock.server.catalog import CatalogQueries
from pgwire_mock.server.errors import ServerError
from pgwire_mock.server.extended import ExtendedQuery
from pgwire_mock.server.fault_injection import FaultInjection
from pgwire_mock.server.faults import Fault
from pgwire_mock.server.grammar import format_lsn
from pgwire_mock.server.logical_commands import LogicalCommands, LogicalStream
from pgwire_mock.server.phase import Phase, pg_time
from pgwire_mock.server.physical import PhysicalStream
from pgwire_mock.server.physical_commands import PhysicalCommands
from pgwire_mock.server.queries import QueryHandling
from pgwire_mock.server.slot_commands import SlotCommands
from pgwire_mock.server.source import (
    CaughtUp,
    CheckPublications,
    Emit,
    FaultEvent,
    Pause,
    SourceError,
    StreamSource,
)
from pgwire_mock.server.sql import SqlLayer
from pgwire_mock.server.sql_result import CannedAnswer
from pgwire_mock.server.startup import StartupHandling
from pgwire_mock.server.state import ServerState, WalSenderStatus
from pgwire_mock.server.versions import VERSIONS, error

if TYPE_CHECKING:  # the script package loads YAML: only scripts need it
    from pgwire_mock.script.wal import RunningXacts

__all__ = [
    "TRANSITIONS",
    "Phase",
    "SessionConfig",
    "WalSenderSession",
    "pg_time",
]

# CopyData ('d', int32 length) around XLogData ('w', wal_start, wal_end, send_time): one
# pack call makes the whole 30-byte header of a streamed message; the payload follows.
_XLOG_FRAME: Final = struct.Struct("!cIcQQq")
_XLOG_LENGTH: Final = _XLOG_FRAME.size - 1  # the length word counts itself, not the 'd'
_XLOG_OVERHEAD: Final = _XLOG_FRAME.size


_EXTENDED: Final = (Parse, Bind, Describe, Execute, Close)

# (phase, message class) → handler method name. A message a phase does not list goes to
# the phase's "*" entry.
TRANSITIONS: Final[Mapping[tuple[Phase, type | str], str]] = {
    (Phase.STARTUP, SSLRequest): "_on_ssl_request",
    (Phase.STARTUP, UnsupportedStartupMessage): "_on_unsupported_startup",
    (Phase.STARTUP, GSSENCRequest): "_on_gssenc_request",
    (Phase.STARTUP, CancelRequest): "_on_cancel_request",
    (Phase.STARTUP, StartupMessage): "_on_startup",
    (Phase.AUTHENTICATING, PasswordMessage): "_on_password",
    (Phase.AUTHENTICATING, SASLInitialResponse): "_on_password",
    (Phase.AUTHENTICATING, SASLResponse): "_on_password",
    (Phase.AUTHENTICATING, Terminate): "_on_terminate",
    (Phase.AUTHENTICATING, "*"): "_on_auth_violation",
    (Phase.READY, Query): "_on_query",
    (Phase.READY, Terminate): "_on_terminate",
    **{(Phase.READY, cls): "_on_extended" for cls in _EXTENDED},
    (Phase.READY, Sync): "_on_sync",
    (Phase.READY, Flush): "_on_ignore",
    (Phase.READY, FunctionCall): "_on_function_call",
    # "Accept but ignore these messages, per protocol spec" (PostgresMain).
    (Phase.READY, CopyData): "_on_ignore",
    (Phase.READY, CopyDone): "_on_ignore",
    (Phase.READY, CopyFail): "_on_ignore",
    (Phase.IGNORE_TILL_SYNC, Sync): "_on_sync",
    (Phase.IGNORE_TILL_SYNC, Terminate): "_on_terminate",
    (Phase.IGNORE_TILL_SYNC, "*"): "_on_ignore",
    (Phase.STREAMING, CopyData): "_on_copy_data",
    (Phase.STREAMING, CopyDone): "_on_copy_done",
    (Phase.STREAMING, Terminate): "_on_terminate",
    (Phase.STREAMING, "*"): "_on_invalid_standby_message",
    (Phase.CLOSED, "*"): "_on_ignore",
}


@dataclass(slots=True)
class SessionConfig:
    """How one fake server behaves (shared by its sessions)."""

    major: int = 16
    auth: AuthMethod = "trust"
    users: Mapping[str, User] = field(default_factory=dict)
    roles: frozenset[str] | None = None
    """Roles that exist besides ``users``; others get 28000. None: only ``users`` when
    some are given, else any name (a fake that does not model roles)."""
    max_connections: int = 100
    """Plain (non-replication) connections at once; one more gets 53300."""
    max_wal_senders: int = 10
    """Replication connections (logical and physical) at once; one more gets 53300."""
    tls: bool = False
    wal_sender_timeout: float = 60.0
    """Seconds; 0 disables the timeout and the reply-requested keepalives."""
    idle_keepalive_interval: float = 10.0
    """Seconds between the reply_requested=0 keepalives of an idle stream."""
    idle_wal_advance: int = 0
    """Bytes of WAL an idle server writes between idle keepalives; 0 (PostgreSQL with
    nothing to do writes none) keeps wal_end at the end of WAL."""
    sql_answers: Mapping[str, CannedAnswer] = field(default_factory=dict)
    source: StreamSource | None = None
    faults: tuple[Fault, ...] = ()
    """Applied to every stream at START_REPLICATION (``serve --fault``)."""
    next_faults: list[Fault] = field(default_factory=list)
    """Applied to the next stream that starts, then forgotten (run-time injection)."""
    on_status_update: Callable[[int, StandbyStatusUpdate], None] | None = None
    """Told (pid, update) of every standby status update a session reads."""
    log_running_xacts: Callable[[], RunningXacts | None] | None = None
    """Writes a running-xacts record at the end of the served live WAL, as a logical
    slot's creation does (the factory's WalWriter); None: the source cannot grow."""
    checkpoint: Callable[[], RunningXacts | None] | None = None
    """Writes CHECKPOINT's records at the end of the served live WAL (False: a wait_for
    step holds it back); None: the source cannot grow."""
    catalog_step: Callable[[object], None] | None = None
    """Writes a catalog step (CREATE / DROP PUBLICATION's) at the end of the served live
    WAL; None: the source cannot grow."""
    random_bytes: Callable[[int], bytes] = secrets.token_bytes
    max_message_size: int = 1 << 30


class WalSenderSession(
    StartupHandling,
    QueryHandling,
    SlotCommands,
    LogicalCommands,
    PhysicalCommands,
    FaultInjection,
):
    """One client connection to the fake walsender."""

    def __init__(
        self,
        config: SessionConfig,
        state: ServerState,
        *,
        now: float,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.state = state
        self.major = config.major
        self.facts = VERSIONS[config.major]
        self.phase = Phase.STARTUP
        self.pid = state.allocate_pid()
        self.secret_key: SecretKey = int.from_bytes(config.random_bytes(4), "big", signed=True)
        self.user = ""
        self.database = ""
        self.replication: str = "database"  # database | physical | plain
        self.application_name = ""
        self.tls_active = False
        self.unix_socket = False  # set by the transport: a Unix-domain socket connection
        self.close_requested = False
        #: The client's connection ended while the backend was not reading it (a slot
        #: creation waiting for transactions): the backend goes on until the wait ends.
        self.client_gone = False
        self.transaction_status: str = "I"
        self._reader = FrontendReader(config.max_message_size)
        self._out: list[bytes] = []
        self._start_tls = False
        self._exchange: Exchange | None = None
        self._stream: LogicalStream | None = None
        self._physical: PhysicalStream | None = None  # a physical START_REPLICATION
        self._backup: BackupReplay | None = None  # a BASE_BACKUP being sent
        self._done_receiving = False
        self._done_sending = False
        self._log = log or (lambda _line: None)
        self._sql: SqlLayer | None = None
        self._catalog: CatalogQueries | None = None
        self._startup_params: dict[str, str] = {}
        self._guc_reported: dict[str, str] = {}  # ParameterStatus values last sent
        self._now = now
        self._held = bytearray()  # client bytes a stalled walsender has not read yet
        #: Called when output appears outside receive_data/tick/produce (a cancel).
        self.on_output: Callable[[], None] | None = None
        #: The client's (host, port), set by the transport; None: a Unix-domain socket.
        self.client_address: tuple[str, int] | None = None
        self.backend_start = state.clock()
        # WalSnd's positions for pg_stat_replication: the last stream (sentPtr outlives
        # it) and the last status update (write, flush, apply, time), never reset.
        self._last_stream: LogicalStream | None = None
        self._reported = (0, 0, 0, 0)
        self._extended = ExtendedQuery(self.major)

    # --- the transport's side -------------------------------------------------------------

    def receive_data(self, data: bytes, now: float) -> None:
        """Feed bytes from the client and act on every whole message."""
        self._now = now
        if self.closed:
            return
        s = self._stream
        if self._backup is not None or self._slot_creation is not None:
            # A walsender sending a backup, or creating a slot, reads nothing meanwhile.
            self._held += data
            return
        if s is not None and s.faults.deaf:
            if s.faults.silent_until is None:
                self._held += data  # a stalled process reads them later
            return
        self._reader.feed(data)
        while not self.closed and not self._start_tls:
            if self.phase is Phase.AUTHENTICATING and self._refused_before_auth():
                return
            try:
                message = self._reader.next_message()
            except DecodeError as err:
                if self._reader.in_startup_phase and err.offset == 0:
                    # A startup packet's bad length word: "invalid length of startup
                    # packet" is a COMMERROR (ProcessStartupPacket): logged, then the
                    # backend exits without a word to the client.
                    self._log(f"invalid length of startup packet: {err}")
                    self._finish()
                    return
                # A framing error loses the connection, as PostgreSQL's "invalid frontend
                # message type" / "invalid message length" (COMMERROR, then exit).
                self._log(f"protocol violation: {err}")
                self._fatal(ServerError("FATAL", "08P01", f"invalid frontend message: {err}"))
                return
            if message is None:
                return
            handler = TRANSITIONS.get((self.phase, type(message))) or TRANSITIONS.get(
                (self.phase, "*")
            )
            if handler is None:
                self._fatal(
                    ServerError("FATAL", "08P01", f"unexpected message {type(message).__name__}")
                )
                return
            getattr(self, handler)(message)

    def receive_eof(self, now: float) -> None:
        """The client went away (EOF or reset): release the slot, drop temporary slots.
        A walsender whose CREATE_REPLICATION_SLOT waits for transactions reads nothing, so
        it learns of it only when the wait ends (:attr:`detached` till then)."""
        self._now = now
        if self._slot_creation is not None and not self.closed:
            # The snapshot builder waits on the transactions' locks (XactLockTableWait),
            # not on the socket: the slot stays listed, active for this backend, and
            # the backend in pg_stat_replication, until the wait ends and the walsender
            # reads its client again (WalSndWaitForWal, ProcessRepliesIfAny: "unexpected
            # EOF on standby connection"); measured on 14, 17 and 18.
            self.client_gone = True
            self._log("client closed the connection; the slot creation waits on")
            return
        if self.phase is not Phase.CLOSED:
            self._log("client closed the connection")
        self._finish()

    @property
    def detached(self) -> bool:
        """Its client is gone, and it has not noticed yet: the transport's part is over,
        but the backend lives on until its slot creation's wait ends (:meth:`wake`)."""
        return self.client_gone and not self.closed

    def end(self) -> None:
        """The backend is ended from outside (the server stops): what any exit does,
        its slots released, a slot it was still creating dropped."""
        if not self.closed:
            self._slot_creation = None
            self._log("backend ended by the server")
            self._finish()

    def shut_down(self, now: float) -> None:
        """A fast shutdown reaches this backend. A streaming walsender sends the rest of
        the WAL, then waits for its client to confirm all it sent (WalSndDone: ``COPY 0``
        once it has; the replication timeout if it never answers); any other backend, an
        idle walsender's included, ends with FATAL 57P01 (HandleWalSndInitStopping: "if
        replication has not yet started, die like with SIGTERM")."""
        self._now = now
        if self.closed or self.inject(Fault.parse("shutdown"), now):
            return
        self._slot_creation = None  # its snapshot wait is interrupted too
        self._fatal(error(self.major, "admin_shutdown"))

    def data_to_send(self) -> bytes:
        """Everything queued for the client so far."""
        out = b"".join(self._out)
        self._out.clear()
        return out

    def take_start_tls(self) -> bool:
        """True once, right after 'S' was queued: start TLS before feeding more bytes."""
        if self._start_tls:
            self._start_tls = False
            self.tls_active = True
            return True
        return False

    @property
    def closed(self) -> bool:
        return self.phase is Phase.CLOSED

    @property
    def streaming(self) -> bool:
        return self.phase is Phase.STREAMING

    @property
    def can_produce(self) -> bool:
        """True when :meth:`produce` would queue stream data now."""
        if self._backup is not None:
            return not self.closed and self._backup.ready_at(self._now) is None
        if self._physical is not None:
            return self.phase is Phase.STREAMING and self._physical.ready(self._now)
        s = self._stream
        return (
            self.phase is Phase.STREAMING
            and s is not None
            and not s.exhausted
            and s.paused_until is None
            and not s.faults.blocks_production(self._now)
        )

    def produce(self, max_bytes: int, now: float) -> int:
        """Queue stream data (about ``max_bytes``); returns the bytes queued."""
        self._now = now
        if self._backup is not None:
            return self._backup_produce(self._backup, max_bytes, now)
        if self._physical is not None:
            return self._physical_produce(self._physical, max_bytes, now)
        s = self._stream
        if not self.can_produce or s is None or s.events is None:
            return 0
        if s.first_wait:
            self._first_wait(s, now)
        faults = s.faults
        max_bytes = faults.budget_for(max_bytes, now)
        events = s.events
        # One clock reading per call: ``now`` does not change during it, so every XLogData
        # of the batch carries the same send_time.
        send_time = pg_time(now)
        append = self._out.append
        pack = _XLOG_FRAME.pack
        produced = 0
        while produced < max_bytes:
            event = next(events, None)
            if faults.messages_left is None and faults.bytes_left is None:
                # The replay hot path: a run of Emits, with no close_after fault to count
                # them against. Nothing in a run can change the phase, the faults or a
                # pause, so can_produce is checked once per run, not per message, and
                # sentPtr and the server's WAL position are published when the run ends.
                top = 0
                while type(event) is Emit:
                    payload = event.payload
                    size = len(payload)
                    append(pack(b"d", size + _XLOG_LENGTH, b"w", event.wal, event.wal, send_time))
                    append(payload)
                    produced += size + _XLOG_OVERHEAD
                    if event.lsn > top:  # noqa: PLR1730 - per message, cheaper than max()
                        top = event.lsn
                    if produced >= max_bytes:
                        break
                    event = next(events, None)
                s.sent_ptr = max(s.sent_ptr, top)
                self.state.advance_wal(top)
                if produced >= max_bytes:
                    break  # the run used up the budget; its last event was sent
            if event is None or type(event) is CaughtUp:
                # The end of the WAL: for good, or of a live WAL until wake() is called.
                s.exhausted = True
                if event is None:
                    s.events = None
                self._caught_up(now)
                break
            if isinstance(event, Emit):
                produced += self._send_xlog(s, event, send_time)
            elif isinstance(event, Pause):
                s.paused_until = now + event.seconds
                break
            elif isinstance(event, CheckPublications):
                missing = event.missing
                if missing is None:
                    missing = tuple(
                        p for p in s.options.publication_names if p not in self.state.publications
                    )
                if missing:
                    context = (
                        f'slot "{s.slot.name}", output plugin "pgoutput", in the change '
                        f"callback, associated LSN {format_lsn(event.lsn)}"
                    )
                    if self.major >= 18:
                        # LoadPublications (18) skips each with a WARNING and decodes on.
                        for name in missing:
                            warning = error(
                                self.major,
                                "publication_skipped",
                                context=context,
                                publication=name,
                            )
                            self._send(NoticeResponse(warning.fields()))
                    else:
                        self._stream_error(
                            error(
                                self.major,
                                "publication_does_not_exist",
                                context=context,
                                publication=missing[0],
                            )
                        )
                        break
            elif isinstance(event, SourceError):
                self._stream_error(event.error)
                break
            elif isinstance(event, FaultEvent):
                self._fault(s, event, now)
            if not (self.phase is Phase.STREAMING and self.can_produce):
                break
        faults.spent(produced, now)
        return produced

    @property
    def waits_for_wal(self) -> bool:
        """Streaming, or creating a logical slot that waits for transactions to end."""
        return self.phase is Phase.STREAMING or self._slot_creation is not None

    def wake(self) -> None:
        """More WAL was written: a walsender waiting at the end of a live WAL goes on, and
        a slot creation waiting for transactions in progress checks them again."""
        s = self._stream
        if self.phase is Phase.STREAMING and s is not None and s.events is not None:
            s.exhausted = False
        self._check_slot_creation()

    def _read_held(self) -> None:
        """Read the client bytes held while the backend was busy."""
        held, self._held = bytes(self._held), bytearray()
        if held:
            self.receive_data(held, self._now)

    def next_deadline(self) -> float | None:
        """When :meth:`tick` next has something to do (None: nothing pending)."""
        if self._backup is not None:
            return self._backup.ready_at(self._now)
        if self._physical is not None:
            return self._physical.next_deadline() if self.phase is Phase.STREAMING else None
        s = self._stream
        if self.phase is not Phase.STREAMING or s is None:
            return None
        times = s.faults.deadlines()
        timeout = self.config.wal_sender_timeout
        if timeout > 0 and s.faults.keepalives and not s.faults.mute:
            times.append(s.last_reply + timeout)
            if not s.waiting_for_ping:
                times.append(s.last_reply + timeout / 2)
        if s.paused_until is not None:
            times.append(s.paused_until)
        if s.next_idle is not None and not s.faults.mute:
            times.append(s.next_idle)
        return min(times) if times else None

    def tick(self, now: float) -> None:
        """Let time pass: keepalives, the replication timeout, the end of a pause."""
        self._now = now
        if self._physical is not None and self.phase is Phase.STREAMING:
            self._physical_tick(self._physical, now)
            return
        s = self._stream
        if self.phase is not Phase.STREAMING or s is None:
            return
        if self._fault_tick(s, now):
            return
        timeout = self.config.wal_sender_timeout
        if timeout > 0 and s.faults.keepalives:
            if now >= s.last_reply + timeout:
                # WalSndCheckTimeOut: COMMERROR (log only), then exit: no ErrorResponse.
                self._log("terminating walsender process due to replication timeout")
                self._finish()
                return
            if not s.waiting_for_ping and now >= s.last_reply + timeout / 2:
                self._keepalive(s, now, reply=True)
                s.waiting_for_ping = True
        if s.paused_until is not None and now >= s.paused_until:
            s.paused_until = None
        if s.next_idle is not None and now >= s.next_idle:
            s.next_idle = now + self.config.idle_keepalive_interval
            if self.config.idle_wal_advance:
                self.state.advance_wal(
                    max(self.state.wal_lsn, s.sent_ptr) + self.config.idle_wal_advance
                )
                s.sent_ptr = max(s.sent_ptr, self.state.wal_lsn)
            self._maybe_idle_keepalive(s, now)

    def walsender_status(self) -> WalSenderStatus | None:
        """This backend's pg_stat_replication row (None unless a replication connection
        past authentication: InitWalSender gives every walsender its WalSnd slot)."""
        if self.replication == "plain" or self._sql is None or self.closed:
            return None
        s, last = self._stream, self._last_stream
        state = "startup"
        if s is not None:
            state = "stopping" if s.faults.shutdown else "streaming" if s.caught_up else "catchup"
        write, flush, apply, reply_time = self._reported
        host, port = self.client_address or (None, None)
        return WalSenderStatus(
            pid=self.pid,
            user=self.user,
            application_name=self._sql.settings.get("application_name", ""),
            backend_start=self.backend_start,
            client_addr=host,
            client_port=port,
            state=state,
            sent_lsn=last.sent_ptr if last is not None else 0,
            write_lsn=write,
            flush_lsn=flush,
            replay_lsn=apply,
            reply_time=reply_time,
        )

    def cancel(self) -> None:
        """A CancelRequest for this backend: cancels a running START_REPLICATION or a
        slot creation waiting for transactions."""
        if self._cancel_slot_creation():
            if self.on_output is not None:
                self.on_output()
        elif self.phase is Phase.STREAMING:
            self._stream_error(
                ServerError("ERROR", "57014", "canceling statement due to user request")
            )
            if self.on_output is not None:
                self.on_output()

    # --- output helpers ---------------------------------------------------------------

    def _send(self, *messages: object) -> None:
        for message in messages:
            self._out.append(message.encode())  # type: ignore[attr-defined]

    def _send_error(self, err: ServerError) -> None:
        self._send(ErrorResponse(err.fields()))

    def _notice(self, err: ServerError) -> None:
        self._send(NoticeResponse(err.fields()))

    def _ready(self) -> None:
        self._report_changed_settings()
        self._send(ReadyForQuery(self.transaction_status))  # type: ignore[arg-type]

    def _report_changed_settings(self) -> None:
        """ReportChangedGUCOptions (guc.c), before each ReadyForQuery: a ParameterStatus
        for every reported setting whose value differs from the one last sent. 14/15 walk
        the name-sorted GUC array; 16+ a list each change pushes at its head."""
        if self._sql is None or not self._sql.changed:
            return
        names = [name for name in self._sql.changed if name in self._guc_reported]
        if self.major < 16:
            names.sort(key=str.lower)
        else:
            names.reverse()
        self._sql.changed.clear()
        for name in names:
            value = self._sql.settings[name]
            if self._guc_reported[name] != value:
                self._guc_reported[name] = value
                self._send(ParameterStatus(name, value))

    def _fatal(self, err: ServerError) -> None:
        self._log(f"{err.severity}: {err.message}")
        self._send_error(err)
        self._finish()

    def _finish(self) -> None:
        """End of the backend: release the slot, drop temporary slots, close."""
        self._physical_release()
        if self._stream is not None:
            if self._stream.faults.redeliver:
                self.state.crash_slot(self._stream.slot.name)
            self.state.release(self._stream.slot.name, self.pid)
            self._stream = None
        dropped = self.state.drop_temporary(self.pid)
        if dropped:
            self._log(f"dropped temporary slots {', '.join(dropped)}")
        self.state.drop_reserved(self.pid)  # a slot it was still creating
        self.state.release_all(self.pid)
        self.state.sessions.pop(self.pid, None)
        self.state.backends.pop(self.pid, None)
        self.phase = Phase.CLOSED
        self.close_requested = True

    def _error_cleanup(self) -> None:
        """After any ERROR: release the slot, drop temporary slots (PostgresMain)."""
        self._physical_release()
        if self._stream is not None:
            self.state.release(self._stream.slot.name, self.pid)
            self._stream = None
        dropped = self.state.drop_temporary(self.pid)
        if dropped:
            self._log(f"dropped temporary slots {', '.join(dropped)}")
        if self.transaction_status == "T":
            self.transaction_status = "E"

    # --- the command loop -----------------------------------------------------------------

    def _on_ignore(self, _: object) -> None:
        pass

    def _on_terminate(self, _: Terminate) -> None:
        self._log("client sent Terminate")
        self._finish()

    # --- streaming --------------------------------------------------------------------------

    def _send_xlog(self, s: LogicalStream, event: Emit, send_time: int) -> int:
        """One XLogData under a close_after fault (:meth:`produce` sends the others)."""
        header = _XLOG_FRAME.pack(
            b"d", len(event.payload) + _XLOG_LENGTH, b"w", event.wal, event.wal, send_time
        )
        data, close = s.faults.cut(header + event.payload)
        self._out.append(data)
        s.sent_ptr = max(s.sent_ptr, event.lsn)
        self.state.advance_wal(event.lsn)
        if close:
            self._log("fault close_after: closing the connection mid-stream")
            self._finish()
        return len(data)
