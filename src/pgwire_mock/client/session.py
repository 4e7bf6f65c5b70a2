"""A sans-IO logical replication client session (the client half of a walsender chat).

The session never touches a socket or a clock. The caller feeds it what arrived::

    session = ReplicationSession(user="postgres", database="postgres")
    session.connect()
    sock.sendall(session.data_to_send())
    while session.state is not State.IDLE:
        for event in session.receive_data(sock.recv(65536)):
            ...
        sock.sendall(session.data_to_send())

and calls methods (``query``, ``start_replication``, ``send_status``, ``stop``, ...) that
queue bytes for :meth:`ReplicationSession.data_to_send`. ``receive_data(b"")`` means the
server closed the connection. Every legal move is in :data:`TRANSITIONS`; a server
message or a call that is not there raises :class:`ProtocolViolationError` or
:class:`InvalidStateError` (as ``h11._state`` does).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from codec import replication, wire
from codec.errors import CodecError
from codec.pgoutput import Decoder, PgOutputMessage
from codec.values import LSN, PgInfinity, PgTimestamp, pg_timestamp_to_datetime
from codec.values import datetime_to_pg_timestamp as _to_pg_timestamp
from pgwire_mock.client.auth import SCRAM_SHA_256, ScramSha256, md5_password, random_nonce
from pgwire_mock.client.commands import (
    OptionValue,
    Snapshot,
    create_replication_slot_command,
    drop_replication_slot_command,
    server_major,
    start_replication_command,
)
from pgwire_mock.client.errors import (
    AuthenticationError,
    InvalidStateError,
    ProtocolViolationError,
    ServerError,
)

# --- events ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConnectionReady:
    """Startup finished: the server's parameters and the key a CancelRequest needs."""

    parameters: Mapping[str, str]
    process_id: int | None
    secret_key: int | bytes | None


@dataclass(frozen=True, slots=True)
class ParameterChanged:
    """A ParameterStatus after startup (e.g. after ``SET application_name``)."""

    name: str
    value: str


@dataclass(frozen=True, slots=True)
class Notice:
    """A NoticeResponse (WARNING, NOTICE, ...): informational, the session goes on."""

    severity: str | None
    sqlstate: str | None
    message: str | None
    fields: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Notification:
    """A NotificationResponse (LISTEN/NOTIFY)."""

    process_id: int
    channel: str
    payload: str


@dataclass(frozen=True, slots=True)
class CommandResult:
    """One statement's outcome: its columns, rows as text (None is NULL) and command tag.

    ``command_tag`` is None for an empty query string (EmptyQueryResponse).
    """

    columns: tuple[wire.FieldDescription, ...]
    rows: tuple[tuple[str | None, ...], ...]
    command_tag: str | None

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.columns)


@dataclass(frozen=True, slots=True)
class ErrorReceived:
    """An ErrorResponse; if ``error.fatal`` the server is closing the connection."""

    error: ServerError


@dataclass(frozen=True, slots=True)
class Ready:
    """ReadyForQuery: the session is idle again; 'I', 'T' (in a block) or 'E' (failed)."""

    transaction_status: str


@dataclass(frozen=True, slots=True)
class StreamStarted:
    """CopyBothResponse: START_REPLICATION succeeded and the stream begins."""


@dataclass(frozen=True, slots=True)
class WalData:
    """XLogData; ``message`` is the decoded pgoutput message when decoding is on."""

    wal_start: LSN
    wal_end: LSN
    send_time: int
    payload: bytes
    message: PgOutputMessage | None = None

    @property
    def sent_at(self) -> datetime | PgTimestamp | PgInfinity:
        return pg_timestamp_to_datetime(self.send_time)


@dataclass(frozen=True, slots=True)
class WalRun:
    """XLogData in a row, for a session made with ``wal_runs=True`` (instead of one
    :class:`WalData` each): ``(wal_start, wal_end, send_time, payload)`` per message, in
    order. A reader that handles thousands of messages a second saves an object each."""

    messages: replication.XLogRun


@dataclass(frozen=True, slots=True)
class Keepalive:
    """PrimaryKeepalive; ``answered`` says the session queued a status update for it."""

    wal_end: LSN
    send_time: int
    reply_requested: bool
    answered: bool = False


@dataclass(frozen=True, slots=True)
class StreamEnded:
    """The copy stream is over: the server sent CopyDone (or, at shutdown, only
    CommandComplete). ``by_server`` is False when it answers our own CopyDone."""

    by_server: bool


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The server closed the connection (``receive_data(b"")``)."""


Event = (
    ConnectionReady
    | ParameterChanged
    | Notice
    | Notification
    | CommandResult
    | ErrorReceived
    | Ready
    | StreamStarted
    | WalData
    | WalRun
    | Keepalive
    | StreamEnded
    | ConnectionClosed
)

# --- the state table --------------------------------------------------------------------


class State(enum.Enum):
    NEW = "NEW"  # nothing sent yet
    AUTHENTICATING = "AUTHENTICATING"  # StartupMessage (or a password) sent
    SASL_CONTINUE = "SASL_CONTINUE"  # SASLInitialResponse sent
    SASL_FINAL = "SASL_FINAL"  # SASLResponse sent
    STARTING = "STARTING"  # AuthenticationOk received; parameters until ReadyForQuery
    IDLE = "IDLE"  # ReadyForQuery received; a command may be sent
    QUERY = "QUERY"  # a simple query (or START_REPLICATION) is running
    STREAMING = "STREAMING"  # CopyBoth mode, both directions open
    STOPPING = "STOPPING"  # our CopyDone sent; the server may still send CopyData
    COPY_DONE = "COPY_DONE"  # the server's CopyDone received; CommandComplete next
    ENDING = "ENDING"  # copy over; CommandComplete(s) until ReadyForQuery
    CLOSED = "CLOSED"  # Terminate sent, FATAL received or the server hung up
    ERROR = "ERROR"  # the server broke the protocol, or authentication failed


class Trigger(enum.Enum):
    """What moves the session besides a server message (those are keyed by class)."""

    CONNECT = "connect()"
    QUERY = "query()"
    START_REPLICATION = "start_replication()"
    SEND_STATUS = "send_status()"
    STOP = "stop()"
    TERMINATE = "terminate()"
    SERVER_FATAL = "FATAL or PANIC ErrorResponse"
    SERVER_EOF = "end of stream from the server"


Key = type[wire.BackendMessage] | Trigger
_S = State

# Messages any started session may get at any moment (protocol docs, "Asynchronous
# Operations"); they never change the state.
_ASYNC: Final = (wire.ParameterStatus, wire.NoticeResponse, wire.NotificationResponse)
_UNSUPPORTED_AUTH: Final = (
    wire.AuthenticationKerberosV5,
    wire.AuthenticationGSS,
    wire.AuthenticationGSSContinue,
    wire.AuthenticationSSPI,
)


def _build_transitions() -> dict[State, dict[Key, State]]:
    table: dict[State, dict[Key, State]] = {
        _S.NEW: {Trigger.CONNECT: _S.AUTHENTICATING},
        _S.AUTHENTICATING: {
            wire.AuthenticationOk: _S.STARTING,
            wire.AuthenticationCleartextPassword: _S.AUTHENTICATING,
            wire.AuthenticationMD5Password: _S.AUTHENTICATING,
            wire.AuthenticationSASL: _S.SASL_CONTINUE,
            # Refused with AuthenticationError by the handler.
            **dict.fromkeys(_UNSUPPORTED_AUTH, _S.ERROR),
        },
        _S.SASL_CONTINUE: {wire.AuthenticationSASLContinue: _S.SASL_FINAL},
        _S.SASL_FINAL: {wire.AuthenticationSASLFinal: _S.AUTHENTICATING},
        _S.STARTING: {
            wire.BackendKeyData: _S.STARTING,
            wire.ReadyForQuery: _S.IDLE,
        },
        _S.IDLE: {
            Trigger.QUERY: _S.QUERY,
            Trigger.START_REPLICATION: _S.QUERY,
        },
        _S.QUERY: {
            wire.RowDescription: _S.QUERY,
            wire.DataRow: _S.QUERY,
            wire.CommandComplete: _S.QUERY,
            wire.EmptyQueryResponse: _S.QUERY,
            # Errors of START_REPLICATION (missing slot, bad option) come here, before
            # CopyBothResponse, followed by ReadyForQuery.
            wire.ErrorResponse: _S.QUERY,
            wire.CopyBothResponse: _S.STREAMING,
            wire.ReadyForQuery: _S.IDLE,
        },
        _S.STREAMING: {
            wire.CopyData: _S.STREAMING,
            Trigger.SEND_STATUS: _S.STREAMING,
            Trigger.STOP: _S.STOPPING,
            # The server ended the copy: the handler answers with our CopyDone.
            wire.CopyDone: _S.COPY_DONE,
            # A shutting-down walsender sends CommandComplete "COPY 0" without CopyDone
            # (walsender.c WalSndDone), then closes.
            wire.CommandComplete: _S.ENDING,
            # e.g. 42704 publication does not exist, raised when the first change is
            # decoded; ReadyForQuery follows (PostgresMain's error recovery).
            wire.ErrorResponse: _S.ENDING,
        },
        _S.STOPPING: {
            # CopyData already in flight when our CopyDone left.
            wire.CopyData: _S.STOPPING,
            wire.CopyDone: _S.COPY_DONE,
            wire.CommandComplete: _S.ENDING,
            wire.ErrorResponse: _S.ENDING,
        },
        _S.COPY_DONE: {
            # Real walsenders (seen on 14–17) may still send a keepalive after their
            # CopyDone: WalSndWaitForWal pings without checking streamingDoneSending.
            # It is reported, never answered (we cannot send CopyData any more).
            wire.CopyData: _S.COPY_DONE,
            # "COPY 0" (walsender.c StartLogicalReplication).
            wire.CommandComplete: _S.ENDING,
            wire.ErrorResponse: _S.ENDING,
        },
        _S.ENDING: {
            # "START_REPLICATION" after "COPY 0" (exec_replication_command).
            wire.CommandComplete: _S.ENDING,
            wire.ErrorResponse: _S.ENDING,
            wire.ReadyForQuery: _S.IDLE,
        },
        _S.CLOSED: {},
        _S.ERROR: {},
    }
    live = (
        _S.AUTHENTICATING,
        _S.SASL_CONTINUE,
        _S.SASL_FINAL,
        _S.STARTING,
        _S.IDLE,
        _S.QUERY,
        _S.STREAMING,
        _S.STOPPING,
        _S.COPY_DONE,
        _S.ENDING,
    )
    for state in live:
        row = table[state]
        row[Trigger.TERMINATE] = _S.CLOSED
        row[Trigger.SERVER_FATAL] = _S.CLOSED
        row[Trigger.SERVER_EOF] = _S.CLOSED
        if state not in (_S.AUTHENTICATING, _S.SASL_CONTINUE, _S.SASL_FINAL):
            for cls in _ASYNC:
                row[cls] = state
    return table


#: state -> {server message class or Trigger -> next state}. Anything missing is illegal.
TRANSITIONS: Final = _build_transitions()


_lsn: Final = int.__new__


def _pg_time(now: datetime | int) -> int:
    return now if isinstance(now, int) else _to_pg_timestamp(now)


class ReplicationSession:
    """The client side of one replication connection, driven by bytes and calls.

    ``auto_reply`` answers keepalives that request a reply with a status update
    repeating the last positions given to :meth:`send_status` (zeros, which the server
    ignores, until then), as psycopg2 and pg_recvlogical do; without it the caller must
    answer within ``wal_sender_timeout`` or the server drops the connection.
    ``decode_pgoutput`` puts the decoded pgoutput message on each :class:`WalData`;
    ``wal_runs`` reports XLogData as :class:`WalRun` events instead (undecoded).
    """

    def __init__(
        self,
        *,
        user: str,
        database: str,
        password: str | None = None,
        application_name: str | None = "pgwire-mock",
        auto_reply: bool = True,
        decode_pgoutput: bool = False,
        wal_runs: bool = False,
        startup_options: Mapping[str, str] | None = None,
        nonce_factory: Callable[[], str] = random_nonce,
        max_message_size: int = wire.DEFAULT_MAX_MESSAGE_SIZE,
    ) -> None:
        if wal_runs and decode_pgoutput:
            raise ValueError("wal_runs hands over undecoded payloads: not with decode_pgoutput")
        self.user = user
        self.database = database
        self.application_name = application_name
        self.auto_reply = auto_reply
        self.decode_pgoutput = decode_pgoutput
        self.wal_runs = wal_runs
        self._password = password
        self._startup_options = dict(startup_options or {})
        self._nonce_factory = nonce_factory
        self._reader = wire.BackendReader(max_message_size)
        self._outgoing = bytearray()
        self._state = State.NEW
        self._parameters: dict[str, str] = {}
        self._process_id: int | None = None
        self._secret_key: int | bytes | None = None
        self._transaction_status = "I"
        self._scram: ScramSha256 | None = None
        self._columns: tuple[wire.FieldDescription, ...] = ()
        self._rows: list[tuple[str | None, ...]] = []
        self._decoder = Decoder()
        self._reported = (0, 0, 0)  # write, flush, apply as last sent
        self._received_lsn = LSN(0)

    # --- inspection ----------------------------------------------------------------

    @property
    def state(self) -> State:
        return self._state

    @property
    def parameters(self) -> Mapping[str, str]:
        """ParameterStatus values received so far (server_version, client_encoding, ...)."""
        return dict(self._parameters)

    @property
    def server_version_major(self) -> int:
        version = self._parameters.get("server_version")
        if version is None:
            raise InvalidStateError("server_version is not known before startup completes")
        return server_major(version)

    @property
    def process_id(self) -> int | None:
        return self._process_id

    @property
    def secret_key(self) -> int | bytes | None:
        return self._secret_key

    @property
    def transaction_status(self) -> str:
        return self._transaction_status

    @property
    def received_lsn(self) -> LSN:
        """The highest wal_end seen in XLogData or keepalives of the current stream."""
        return self._received_lsn

    def data_to_send(self) -> bytes:
        """Everything queued for the server since the last call (possibly b"")."""
        out = bytes(self._outgoing)
        self._outgoing.clear()
        return out

    # --- transitions ------------------------------------------------------------------

    def _next_state(self, key: Key) -> State:
        next_state = TRANSITIONS[self._state].get(key)
        if next_state is None:
            name = key.value if isinstance(key, Trigger) else key.__name__
            if isinstance(key, Trigger) and not key.name.startswith("SERVER_"):
                raise InvalidStateError(f"cannot {name} in state {self._state.name}")
            raise ProtocolViolationError(f"unexpected {name} in state {self._state.name}")
        return next_state

    def _client(self, trigger: Trigger, message: wire.FrontendMessage) -> None:
        next_state = self._next_state(trigger)
        self._outgoing += message.encode()
        self._state = next_state

    # --- client actions ---------------------------------------------------------------

    def connect(self) -> None:
        """Queue the StartupMessage of a logical replication connection."""
        params = {"user": self.user, "database": self.database, "replication": "database"}
        if self.application_name is not None:
            params["application_name"] = self.application_name
        params.update(self._startup_options)
        self._client(Trigger.CONNECT, wire.StartupMessage(tuple(params.items())))

    def query(self, sql: str) -> None:
        """Queue a simple query: a replication command or SQL (several statements allowed)."""
        self._client(Trigger.QUERY, wire.Query(sql))
        self._columns, self._rows = (), []

    def identify_system(self) -> None:
        self.query("IDENTIFY_SYSTEM")

    def create_slot(
        self,
        slot_name: str,
        *,
        plugin: str = "pgoutput",
        temporary: bool = False,
        snapshot: Snapshot = "nothing",
        two_phase: bool = False,
        failover: bool = False,
    ) -> None:
        """Queue CREATE_REPLICATION_SLOT in the syntax of the connected server's version."""
        command = create_replication_slot_command(
            slot_name,
            self.server_version_major,
            plugin=plugin,
            temporary=temporary,
            snapshot=snapshot,
            two_phase=two_phase,
            failover=failover,
        )
        self.query(command)

    def drop_slot(self, slot_name: str, *, wait: bool = False) -> None:
        self.query(drop_replication_slot_command(slot_name, wait=wait))

    def start_replication(
        self,
        slot_name: str,
        start_lsn: LSN | int | str = 0,
        options: Mapping[str, OptionValue] | None = None,
    ) -> None:
        """Queue START_REPLICATION SLOT ... LOGICAL; 0/0 starts at the slot's confirmed flush."""
        command = start_replication_command(slot_name, start_lsn, options)
        self._client(Trigger.START_REPLICATION, wire.Query(command))
        self._columns, self._rows = (), []

    def send_status(
        self,
        write: LSN | int,
        flush: LSN | int,
        apply: LSN | int,
        now: datetime | int,
        reply_requested: bool = False,
    ) -> None:
        """Queue a StandbyStatusUpdate; ``now`` is a datetime or µs since 2000-01-01 UTC.

        A non-zero ``flush`` lets the server advance the slot's confirmed_flush_lsn.
        """
        update = replication.StandbyStatusUpdate(
            int(write), int(flush), int(apply), _pg_time(now), reply_requested
        )
        payload = update.encode()
        self._client(Trigger.SEND_STATUS, wire.CopyData(payload))
        self._reported = (update.written_lsn, update.flushed_lsn, update.applied_lsn)

    def stop(self) -> None:
        """Queue CopyDone: ask the server to end the stream and return to idle."""
        self._client(Trigger.STOP, wire.CopyDone())

    def terminate(self) -> None:
        """Queue Terminate; the caller then closes the connection."""
        self._client(Trigger.TERMINATE, wire.Terminate())

    # --- server input ---------------------------------------------------------------------

    def receive_data(self, data: bytes, now: datetime | int | None = None) -> list[Event]:
        """Feed bytes from the server (b"" at end of stream) and return the events.

        ``now`` stamps automatic keepalive answers; without it they carry the keepalive's
        own send_time (the server accepts any time, and it keeps the session clock-free).
        """
        if self._state is State.ERROR:
            raise ProtocolViolationError("the session already failed; open a new connection")
        if not data and self._state is State.CLOSED:
            return []
        events: list[Event] = []
        try:
            if not data:
                self._state = self._next_state(Trigger.SERVER_EOF)
                return [ConnectionClosed()]
            reader = self._reader
            reader.feed(data)
            while True:
                if self._state is State.STREAMING:
                    self._receive_wal(reader.take_run(replication.split_xlog_data), events)
                message = reader.next_message()
                if message is None:
                    break
                self._receive(message, events, now)
        except CodecError as err:
            self._state = State.ERROR
            raise ProtocolViolationError(f"undecodable server data: {err}", events) from err
        except ProtocolViolationError as err:
            self._state = State.ERROR
            raise ProtocolViolationError(err.reason, events) from err
        except AuthenticationError:
            self._state = State.ERROR
            raise
        return events

    def _receive_wal(self, run: replication.XLogRun, events: list[Event]) -> None:
        """The fast path of STREAMING (where CopyData keeps the state): what
        :meth:`_on_copy_data` does for each XLogData of ``run``, in one loop."""
        if not run:
            return
        if self.wal_runs:
            received = max(wal_end for _, wal_end, _, _ in run)
            if received > self._received_lsn:
                self._received_lsn = _lsn(LSN, received)
            events.append(WalRun(run))
            return
        decode = self._decoder.decode if self.decode_pgoutput else None
        append = events.append
        received = int(self._received_lsn)
        for wal_start, wal_end, send_time, data in run:
            received = max(received, wal_end)
            # Unpacked as unsigned 64-bit: in range, so LSN's own check is skipped.
            append(
                WalData(
                    _lsn(LSN, wal_start),
                    _lsn(LSN, wal_end),
                    send_time,
                    data,
                    None if decode is None else decode(data),
                )
            )
        if received > self._received_lsn:
            self._received_lsn = _lsn(LSN, received)

    def _receive(
        self, message: wire.BackendMessage, events: list[Event], now: datetime | int | None
    ) -> None:
        key: Key = type(message)
        if isinstance(message, wire.ErrorResponse):
            error = ServerError(message.sqlstate or "", message.message or "", message.fields)
            if error.fatal:
                key = Trigger.SERVER_FATAL
        next_state = self._next_state(key)
        handler = _HANDLERS.get(type(message))
        if handler is not None:
            handler(self, message, events, now)
        self._state = next_state

    # --- message handlers (state already checked against TRANSITIONS) ---------------

    def _need_password(self) -> str:
        if self._password is None:
            raise AuthenticationError("the server asked for a password and none was given")
        return self._password

    def _on_cleartext(self, _msg: object, _events: list[Event], _now: object) -> None:
        self._outgoing += wire.PasswordMessage(self._need_password()).encode()

    def _on_md5(self, msg: object, _events: list[Event], _now: object) -> None:
        assert isinstance(msg, wire.AuthenticationMD5Password)
        hashed = md5_password(self.user, self._need_password(), msg.salt)
        self._outgoing += wire.PasswordMessage(hashed).encode()

    def _on_sasl(self, msg: object, _events: list[Event], _now: object) -> None:
        assert isinstance(msg, wire.AuthenticationSASL)
        if SCRAM_SHA_256 not in msg.mechanisms:
            # SCRAM-SHA-256-PLUS alone means channel binding is required: TLS first.
            raise AuthenticationError(f"no supported SASL mechanism in {list(msg.mechanisms)}")
        self._scram = ScramSha256(self._need_password(), nonce=self._nonce_factory())
        first = self._scram.client_first_message()
        self._outgoing += wire.SASLInitialResponse(SCRAM_SHA_256, first).encode()

    def _on_sasl_continue(self, msg: object, _events: list[Event], _now: object) -> None:
        assert isinstance(msg, wire.AuthenticationSASLContinue) and self._scram is not None
        final = self._scram.client_final_message(msg.data)
        self._outgoing += wire.SASLResponse(final).encode()

    def _on_sasl_final(self, msg: object, _events: list[Event], _now: object) -> None:
        assert isinstance(msg, wire.AuthenticationSASLFinal) and self._scram is not None
        self._scram.verify_server_final(msg.data)
        self._scram = None

    def _on_unsupported_auth(self, msg: object, _events: list[Event], _now: object) -> None:
        raise AuthenticationError(f"unsupported authentication method {type(msg).__name__}")

    def _on_parameter_status(self, msg: object, events: list[Event], _now: object) -> None:
        assert isinstance(msg, wire.ParameterStatus)
        self._parameters[msg.name] = msg.value
        if self._state is not State.STARTING:
            events.append(ParameterChanged(msg.name, msg.value))

    def _on_backend_key(self, msg: object, _events: list[Event], _now: object) -> None:
        assert isinstance(msg, wire.BackendKeyData)
        self._process_id, self._secret_key = msg.process_id, msg.secret_key

    def _on_notice(self, msg: object, events: list[Event], _now: object) -> None:
        assert isinstance(msg, wire.NoticeResponse)
        events.append(Notice(msg.severity, msg.sqlstate, msg.message, msg.fields))

    def _on_notification(self, msg: object, events: list[Event], _now: object) -> None:
        assert isinstance(msg, wire.NotificationResponse)
        events.append(Notification(msg.process_id, msg.channel, msg.payload))

    def _on_ready(self, msg: object, events: list[Event], _now: object) -> None:
        assert isinstance(msg, wire.ReadyForQuery)
        self._transaction_status = msg.transaction_status
        if self._state is State.STARTING:
            events.append(
                ConnectionReady(dict(self._parameters), self._process_id, self._secret_key)
            )
        else:
            events.append(Ready(msg.transaction_status))

    def _on_row_description(self, msg: object, _events: list[Event], _now: object) -> None:
        assert isinstance(msg, wire.RowDescription)
        self._columns, self._rows = msg.fields, []

    def _on_data_row(self, msg: object, _events: list[Event], _now: object) -> None:
        assert isinstance(msg, wire.DataRow)
        try:
            row = tuple(None if v is None else v.decode("utf-8") for v in msg.values)
        except UnicodeDecodeError as err:
            raise ProtocolViolationError(f"DataRow value is not UTF-8: {err}") from err
        if len(row) != len(self._columns):
            raise ProtocolViolationError(
                f"DataRow has {len(row)} values for {len(self._columns)} columns"
            )
        self._rows.append(row)

    def _on_command_complete(self, msg: object, events: list[Event], _now: object) -> None:
        assert isinstance(msg, wire.CommandComplete)
        if self._state in (State.STREAMING, State.STOPPING):
            events.append(StreamEnded(by_server=self._state is State.STREAMING))
        events.append(CommandResult(self._columns, tuple(self._rows), msg.command_tag))
        self._columns, self._rows = (), []

    def _on_empty_query(self, _msg: object, events: list[Event], _now: object) -> None:
        events.append(CommandResult((), (), None))

    def _on_error(self, msg: object, events: list[Event], _now: object) -> None:
        assert isinstance(msg, wire.ErrorResponse)
        error = ServerError(msg.sqlstate or "", msg.message or "", msg.fields)
        events.append(ErrorReceived(error))
        self._columns, self._rows = (), []

    def _on_copy_both(self, _msg: object, events: list[Event], _now: object) -> None:
        self._decoder = Decoder()
        self._received_lsn = LSN(0)
        events.append(StreamStarted())

    def _on_copy_done(self, _msg: object, events: list[Event], _now: object) -> None:
        by_server = self._state is State.STREAMING
        if by_server:
            # The server ended the copy first; the protocol wants ours back before it
            # completes the command.
            self._outgoing += wire.CopyDone().encode()
        events.append(StreamEnded(by_server=by_server))

    def _on_copy_data(self, msg: object, events: list[Event], now: datetime | int | None) -> None:
        assert isinstance(msg, wire.CopyData)
        data = replication.decode_server_copy_data(msg.data)
        if data.wal_end > self._received_lsn:
            self._received_lsn = LSN(data.wal_end)
        if isinstance(data, replication.XLogData) and self.wal_runs:
            events.append(WalRun([(data.wal_start, data.wal_end, data.send_time, data.data)]))
            return
        if isinstance(data, replication.XLogData):
            decoded = None
            if self.decode_pgoutput:
                decoded = self._decoder.decode(data.data)
            events.append(
                WalData(LSN(data.wal_start), LSN(data.wal_end), data.send_time, data.data, decoded)
            )
            return
        answer = data.reply_requested and self.auto_reply and self._state is State.STREAMING
        if answer:
            write, flush, apply = self._reported
            stamp = data.send_time if now is None else _pg_time(now)
            update = replication.StandbyStatusUpdate(write, flush, apply, stamp, False)
            self._outgoing += wire.CopyData(update.encode()).encode()
        events.append(Keepalive(LSN(data.wal_end), data.send_time, data.reply_requested, answer))


_Handler = Callable[[ReplicationSession, object, list[Event], "datetime | int | None"], None]
_HANDLERS: Final[dict[type[wire.BackendMessage], _Handler]] = {
    wire.AuthenticationCleartextPassword: ReplicationSession._on_cleartext,
    wire.AuthenticationMD5Password: ReplicationSession._on_md5,
    wire.AuthenticationSASL: ReplicationSession._on_sasl,
    wire.AuthenticationSASLContinue: ReplicationSession._on_sasl_continue,
    wire.AuthenticationSASLFinal: ReplicationSession._on_sasl_final,
    **dict.fromkeys(_UNSUPPORTED_AUTH, ReplicationSession._on_unsupported_auth),
    wire.ParameterStatus: ReplicationSession._on_parameter_status,
    wire.BackendKeyData: ReplicationSession._on_backend_key,
    wire.NoticeResponse: ReplicationSession._on_notice,
    wire.NotificationResponse: ReplicationSession._on_notification,
    wire.ReadyForQuery: ReplicationSession._on_ready,
    wire.RowDescription: ReplicationSession._on_row_description,
    wire.DataRow: ReplicationSession._on_data_row,
    wire.CommandComplete: ReplicationSession._on_command_complete,
    wire.EmptyQueryResponse: ReplicationSession._on_empty_query,
    wire.ErrorResponse: ReplicationSession._on_error,
    wire.CopyBothResponse: ReplicationSession._on_copy_both,
    wire.CopyDone: ReplicationSession._on_copy_done,
    wire.CopyData: ReplicationSession._on_copy_data,
}

__all__ = [
    "TRANSITIONS",
    "CommandResult",
    "ConnectionClosed",
    "ConnectionReady",
    "ErrorReceived",
    "Event",
    "Keepalive",
    "Notice",
    "Notification",
    "ParameterChanged",
    "Ready",
    "ReplicationSession",
    "State",
    "StreamEnded",
    "StreamStarted",
    "Trigger",
    "WalData",
    "WalRun",
]
