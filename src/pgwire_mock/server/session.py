"""The fake walsender's connection state machine, without I/O (sans-IO).

A :class:`WalSenderSession` is fed the client's bytes (:meth:`~WalSenderSession.receive_data`)
and the passing of time (:meth:`~WalSenderSession.tick`, with ``now`` in Unix seconds —
the session never reads a clock); it queues the bytes PostgreSQL would answer, which the
caller takes with :meth:`~WalSenderSession.data_to_send`. Stream output is produced only
when asked (:meth:`~WalSenderSession.produce`), so a transport can stop pulling when its
client stops reading. :attr:`~WalSenderSession.close_requested` and
:meth:`~WalSenderSession.take_start_tls` tell the transport what to do.

Which message a phase accepts, and what handles it, is the one table :data:`TRANSITIONS`.
Facts reproduced (``walsender.c``, ``postgres.c``, ``postmaster.c``/``backend_startup.c``):

* On a replication connection extended-protocol messages get 08P01 and then everything
  up to Sync is ignored (the ``ignore_till_sync`` rule of ``PostgresMain``); Sync then
  answers ReadyForQuery. A plain connection speaks the extended protocol
  (:mod:`pgwire_mock.server.extended`), with the same skip to Sync after an error.
* START_REPLICATION errors (slot, options) come before CopyBothResponse, as
  ErrorResponse + ReadyForQuery; a missing publication comes after, at the first change.
* Any ERROR drops the session's temporary slots (``ReplicationSlotCleanup``).
* XLogData carries wal_start = wal_end = the record's LSN, or 0/0 (see
  :mod:`pgwire_mock.server.source`); sentPtr starts at the slot's confirmed_flush.
* Keepalives: one with reply_requested=0 whenever the walsender waits for WAL while the
  client has not confirmed sentPtr (``WalSndWaitForWal``), one with reply_requested=1
  after wal_sender_timeout/2 without client messages, silent close at the full timeout.
* Client CopyDone → CopyDone, (a last keepalive if the client lags), ``COPY 0``,
  ``START_REPLICATION``, ReadyForQuery. The "done" flags are never reset for logical
  replication (only ``StartReplication`` resets them), so a second logical
  START_REPLICATION on the connection ends at once after CopyBothResponse.
"""

from __future__ import annotations

import secrets
import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

from codec import DecodeError
from codec.replication import (
    HotStandbyFeedback,
    PrimaryKeepalive,
    StandbyStatusUpdate,
    decode_client_copy_data,
)
from codec.replication import encode as encode_replication
from codec.wire import (
    Bind,
    CancelRequest,
    Close,
    CommandComplete,
    CopyBothResponse,
    CopyData,
    CopyDone,
    CopyFail,
    CopyOutResponse,
    DataRow,
    Describe,
    EmptyQueryResponse,
    ErrorResponse,
    Execute,
    FieldDescription,
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
    RowDescription,
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
from pgwire_mock.server.catalog import CatalogQueries, CopyOut
from pgwire_mock.server.errors import BackendCrashError, ServerError
from pgwire_mock.server.extended import ExtendedQuery, Host
from pgwire_mock.server.faults import ActiveFaults, Fault, FaultError
from pgwire_mock.server.grammar import (
    AlterReplicationSlot,
    BaseBackup,
    Command,
    CreateReplicationSlot,
    DropReplicationSlot,
    IdentifySystem,
    ReadReplicationSlot,
    Show,
    SqlCommand,
    StartLogicalReplication,
    StartPhysicalReplication,
    TimelineHistory,
    UploadManifest,
    format_lsn,
    parse_command,
)
from pgwire_mock.server.pgoutput_options import PgOutputOptions, validate_start_replication
from pgwire_mock.server.phase import Phase, pg_time
from pgwire_mock.server.physical import (
    PhysicalRecording,
    PhysicalStream,
)
from pgwire_mock.server.physical_commands import PhysicalCommands
from pgwire_mock.server.slot_commands import SlotCommands
from pgwire_mock.server.source import (
    CaughtUp,
    CheckPublications,
    Emit,
    FaultEvent,
    Pause,
    SourceError,
    StreamEvent,
    StreamSource,
)
from pgwire_mock.server.sql import (
    CannedAnswer,
    Result,
    SqlLayer,
    normalize,
    split_statements,
)
from pgwire_mock.server.startup import StartupHandling
from pgwire_mock.server.state import (
    ServerState,
    SlotState,
    StateError,
    WalSenderStatus,
)
from pgwire_mock.server.versions import (
    VERSIONS,
    error,
)

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
    random_bytes: Callable[[int], bytes] = secrets.token_bytes
    max_message_size: int = 1 << 30


@dataclass(slots=True)
class _Stream:
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


class WalSenderSession(StartupHandling, SlotCommands, PhysicalCommands):
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
        self.transaction_status: str = "I"
        self._reader = FrontendReader(config.max_message_size)
        self._out: list[bytes] = []
        self._start_tls = False
        self._exchange: Exchange | None = None
        self._stream: _Stream | None = None
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
        self._last_stream: _Stream | None = None
        self._reported = (0, 0, 0, 0)
        self._extended = ExtendedQuery()

    # --- the transport's side -------------------------------------------------------------

    def receive_data(self, data: bytes, now: float) -> None:
        """Feed bytes from the client and act on every whole message."""
        self._now = now
        if self.closed:
            return
        s = self._stream
        if self._backup is not None:
            self._held += data  # a walsender sending a backup reads nothing meanwhile
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
        """The client went away (EOF or reset): release the slot, drop temporary slots."""
        self._now = now
        if self.phase is not Phase.CLOSED:
            self._log("client closed the connection")
        self._finish()

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
                missing = [
                    p for p in s.options.publication_names if p not in self.state.publications
                ]
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

    def wake(self) -> None:
        """More WAL was written: a walsender waiting at the end of a live WAL goes on."""
        s = self._stream
        if self.phase is Phase.STREAMING and s is not None and s.events is not None:
            s.exhausted = False

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
        """A CancelRequest for this backend: cancels a running START_REPLICATION."""
        if self.phase is Phase.STREAMING:
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

    # --- startup --------------------------------------------------------------------------

    # --- the command loop -----------------------------------------------------------------

    def _on_ignore(self, _: object) -> None:
        pass

    def _on_terminate(self, _: Terminate) -> None:
        self._log("client sent Terminate")
        self._finish()

    def _on_sync(self, _: Sync) -> None:
        self.phase = Phase.READY
        self._extended.synced(self.transaction_status)
        self._ready()

    def _on_extended(self, message: object) -> None:
        # An ERROR while doing_extended_query_message: the backend skips everything up
        # to Sync, which then gets ReadyForQuery.
        if self.replication != "plain":  # forbidden_in_wal_sender
            err = error(self.major, "extended_query_protocol")
        else:
            try:
                host = Host(
                    self._statement,
                    self._describe_statement,
                    self._send,
                    self._send_copy,
                    self.transaction_status,
                )
                self._extended.handle(message, host)
                return
            except ServerError as failed:
                err = failed
            except Exception as exc:  # a bug of the fake: report it and stay up
                self._log(f"internal error answering {message!r:.200}: {exc!r}")
                text = f"pgwire-mock internal error: {type(exc).__name__}: {exc}"
                err = ServerError("ERROR", "XX000", text)
            self._log(f"{err.severity}: {err.message}")
            for notice in err.notices:
                self._notice(notice)
            self._extended.failed(self.transaction_status)
        self._send_error(err)
        if err.fatal:
            self._finish()
            return
        self._error_cleanup()
        self.phase = Phase.IGNORE_TILL_SYNC

    def _on_function_call(self, _: FunctionCall) -> None:
        self._send_error(
            ServerError(
                "ERROR",
                "08P01",
                "fastpath function calls not supported in a replication connection",
            )
        )
        self._error_cleanup()
        self._ready()

    def _on_query(self, message: Query) -> None:
        text = message.query
        if self.replication == "plain":
            self._extended.simple_query()
            self._run_sql(text)
            self._extended.synced(self.transaction_status)
            self._ready()
            return
        notices: list[ServerError] = []
        try:
            command = parse_command(text, self.major, notices)
        except ServerError as err:
            for notice in notices:
                self._notice(notice)
            self._command_error(err)
            return
        for notice in notices:
            self._notice(notice)
        self._log(f"command: {text.strip()[:200]}")
        if isinstance(command, SqlCommand):
            if self.replication == "physical":
                self._command_error(error(self.major, "sql_in_physical_walsender"))
                return
            self._run_sql(text)
            self._ready()
            return
        if self.transaction_status == "E":
            self._command_error(
                ServerError(
                    "ERROR",
                    "25P02",
                    "current transaction is aborted, commands ignored until end of "
                    "transaction block",
                )
            )
            return
        try:
            self._run_command(command)
        except BackendCrashError as crash:
            self._log(f"backend crash emulated: {crash}")
            self._finish()
        except ServerError as err:
            self._command_error(err)

    def _command_error(self, err: ServerError) -> None:
        self._log(f"{err.severity}: {err.message}")
        self._send_error(err)
        if err.fatal:
            self._finish()
            return
        self._error_cleanup()
        self._ready()

    def _run_sql(self, text: str) -> None:
        assert self._sql is not None
        statements = split_statements(text)
        if not statements:
            self._send(EmptyQueryResponse())
            return
        for statement in statements:
            if self.transaction_status == "E" and not _is_txn_end(statement):
                err = ServerError(
                    "ERROR",
                    "25P02",
                    "current transaction is aborted, commands ignored until end of "
                    "transaction block",
                )
                self._send_error(err)
                self._error_cleanup()
                return
            try:
                result = self._statement(statement)
            except ServerError as err:
                self._log(f"{err.severity}: {err.message}")
                for notice in err.notices:
                    self._notice(notice)
                self._send_error(err)
                self._error_cleanup()
                return
            except Exception as exc:  # a bug of the fake: report it and stay up
                self._log(f"internal error answering {statement[:200]!r}: {exc!r}")
                message = f"pgwire-mock internal error: {type(exc).__name__}: {exc}"
                self._send_error(ServerError("ERROR", "XX000", message))
                self._error_cleanup()
                return
            if isinstance(result, CopyOut):
                self._send_copy(result)
                continue
            self._send_result(result)

    def _statement(self, statement: str) -> Result | CopyOut:
        """Run one statement: its notices sent, the transaction status moved on."""
        result = self._execute(statement)
        if isinstance(result, CopyOut):
            return result
        for notice in result.notices:
            self._notice(notice)
        if result.transaction == "begin":
            self.transaction_status = "T"
        elif result.transaction is not None:
            if self.transaction_status == "E":
                result = Result("ROLLBACK", notices=(), transaction="rollback")
            self.transaction_status = "I"
        return result

    def _describe_statement(self, statement: str) -> Result:
        """A row-returning statement run only for its columns: settings and the
        transaction's snapshot state are left as they were."""
        assert self._sql is not None and self._catalog is not None
        settings, changed = dict(self._sql.settings), list(self._sql.changed)
        queried = self._catalog.queried
        try:
            result = self._execute(statement)
        finally:
            self._sql.settings, self._sql.changed = settings, changed
            self._catalog.queried = queried
        if isinstance(result, CopyOut):  # pragma: no cover - only row statements come here
            raise ServerError("ERROR", "XX000", "pgwire-mock: COPY where rows were expected")
        return result

    def _execute(self, statement: str) -> Result | CopyOut:
        """One statement: reading tables or a subscriber's catalog query, else SQL."""
        assert self._sql is not None and self._catalog is not None
        in_transaction = self.transaction_status != "I"
        answer = self._catalog.answer(normalize(statement), in_transaction=in_transaction)
        if answer is not None:
            return answer
        result = self._sql.execute(statement, in_transaction=in_transaction)
        if result.transaction == "begin":
            self._catalog.transaction_began(normalize(statement))
        elif result.transaction is not None:
            self._catalog.transaction_ended()
        return result

    def _send_copy(self, copy: CopyOut) -> None:
        """COPY … TO STDOUT: CopyOutResponse, a CopyData per payload, CopyDone, the tag."""
        fmt = 1 if copy.binary else 0
        self._send(CopyOutResponse(fmt, (fmt,) * copy.columns))
        self._send(*(CopyData(payload) for payload in copy.payloads))
        self._send(CopyDone(), CommandComplete(copy.tag))

    def _send_result(self, result: Result) -> None:
        if result.columns is not None:
            self._send(
                RowDescription(
                    tuple(
                        FieldDescription(
                            c.name,
                            c.table_oid,
                            c.column_number,
                            c.type_oid,
                            c.type_size,
                            c.typmod,
                            0,
                        )
                        for c in result.columns
                    )
                )
            )
            self._send(
                *(
                    DataRow(tuple(None if v is None else v.encode() for v in row))
                    for row in result.rows
                )
            )
        self._send(CommandComplete(result.tag))

    def _run_command(self, command: Command) -> None:
        if isinstance(command, IdentifySystem):
            self._identify_system()
        elif isinstance(command, Show):
            assert self._sql is not None
            self._send_result(self._sql.show(command.name))
            self._ready()
        elif isinstance(command, CreateReplicationSlot):
            self._create_slot(command)
        elif isinstance(command, DropReplicationSlot):
            self._drop_slot(command)
        elif isinstance(command, ReadReplicationSlot):
            self._read_slot(command)
        elif isinstance(command, AlterReplicationSlot):
            self._alter_slot(command)
        elif isinstance(command, StartLogicalReplication):
            self._start_logical(command)
        elif isinstance(command, StartPhysicalReplication):
            self._start_physical(command)
        elif isinstance(command, TimelineHistory):
            self._timeline_history(command)
        elif isinstance(command, BaseBackup):
            self._base_backup(command)
        elif isinstance(command, UploadManifest):
            raise ServerError(
                "ERROR",
                "0A000",
                f"pgwire-mock is a logical-only walsender: {type(command).TAG} is not emulated",
            )
        else:  # pragma: no cover - parse_command returns only the classes above
            raise ServerError("ERROR", "XX000", f"unhandled command {command!r}")

    def _rows(
        self,
        tag: str,
        columns: tuple[tuple[str, int, int], ...],
        rows: tuple[tuple[str | None, ...], ...],
    ) -> None:
        self._send(
            RowDescription(
                tuple(FieldDescription(n, 0, 0, oid, size, -1, 0) for n, oid, size in columns)
            )
        )
        self._send(*(DataRow(tuple(None if v is None else v.encode() for v in r)) for r in rows))
        self._send(CommandComplete(tag))
        self._ready()

    def _identify_system(self) -> None:
        timeline_oid = self.facts.identify_system_timeline_oid
        self._rows(
            "IDENTIFY_SYSTEM",
            (
                ("systemid", 25, -1),
                ("timeline", timeline_oid, 4 if timeline_oid == 23 else 8),
                ("xlogpos", 25, -1),
                ("dbname", 25, -1),
            ),
            (
                (
                    str(self.state.system_identifier),
                    str(self.state.timeline),
                    format_lsn(self.state.wal_lsn),
                    self.database if self.replication == "database" else None,
                ),
            ),
        )

    def _start_physical(self, command: StartPhysicalReplication) -> None:
        if command.slot_name is not None:
            slot = self.state.slots.get(command.slot_name)
            if slot is None:
                raise error(self.major, "slot_does_not_exist", slot=command.slot_name)
            if slot.logical:
                raise error(self.major, "logical_slot_for_physical_replication")
        if isinstance(self.config.source, PhysicalRecording):
            self._start_physical_recording(self.config.source, command)
            return
        raise ServerError(
            "ERROR",
            "0A000",
            "pgwire-mock is a logical-only walsender: physical replication is not emulated",
        )

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
        source = self.config.source
        events = source.events(options, self.major, from_lsn) if source is not None else iter(())
        self._stream = _Stream(
            slot=slot,
            options=options,
            events=events,
            sent_ptr=slot.confirmed_flush,
            last_reply=now,
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

    # --- streaming --------------------------------------------------------------------------

    def _send_xlog(self, s: _Stream, event: Emit, send_time: int) -> int:
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

    def _keepalive(self, s: _Stream, now: float, *, reply: bool) -> None:
        if not s.faults.sends_keepalives():
            return
        payload = encode_replication(PrimaryKeepalive(s.sent_ptr, pg_time(now), reply))
        self._send(CopyData(payload))

    def _maybe_idle_keepalive(self, s: _Stream, now: float) -> None:
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
        # (pg_recvlogical --endpos) stops at once.
        s.sent_ptr = max(s.sent_ptr, self.state.wal_lsn)
        s.caught_up = True
        if self.config.idle_keepalive_interval > 0 and not s.faults.shutdown:
            s.next_idle = now + self.config.idle_keepalive_interval
        self._maybe_idle_keepalive(s, now)
        self._check_confirmed(s, now)

    # --- faults (pgwire_mock.server.faults) ------------------------------------------------

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

    def _fault(self, s: _Stream, event: FaultEvent, now: float) -> None:
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

    def _activate(self, s: _Stream, fault: Fault, now: float) -> None:
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

    def _check_confirmed(self, s: _Stream, now: float) -> None:
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

    def _crash(self, s: _Stream) -> None:
        """redeliver: the server dies (no ErrorResponse); the slot keeps the disk position."""
        self._log("fault redeliver: server crash; the slot restarts from its persisted position")
        self._finish()

    def _fault_tick(self, s: _Stream, now: float) -> bool:
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

    def _stream_error(self, err: ServerError) -> None:
        self._log(f"{err.severity}: {err.message}")
        self._send_error(err)
        if err.fatal:
            self._finish()
            return
        self._error_cleanup()
        self.phase = Phase.READY
        self._ready()

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
                self.state.confirm(s.slot.name, reply.flushed_lsn, s.sent_ptr)
            if reply.reply_requested:
                self._keepalive(s, now, reply=False)
            elif s.exhausted:
                self._maybe_idle_keepalive(s, now)
            self._check_confirmed(s, now)
        elif isinstance(reply, HotStandbyFeedback):
            pass  # accepted; a logical slot's xmin is not emulated

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


def _is_txn_end(statement: str) -> bool:
    first = statement.split(None, 1)[0].lower() if statement.split() else ""
    return first in ("rollback", "abort", "commit", "end")
