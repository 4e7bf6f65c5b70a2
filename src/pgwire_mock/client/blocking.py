"""A blocking socket driver for :class:`ReplicationSession`: the only code that does I/O.

::

    with ReplicationConnection.connect(server.replication_dsn) as conn:
        slot = conn.create_slot("s")
        for event in conn.start_replication("s", slot.consistent_point, options):
            ...
            conn.send_status(flush=event.wal_end)   # confirm what is safely stored

Server errors are raised as :class:`ServerError` once the server is ready again, so the
connection stays usable after e.g. a missing slot. TLS would slot in at
:func:`_open_stream` (SSLRequest, then ``ssl.SSLContext.wrap_socket``) without touching
the rest.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from types import TracebackType
from typing import Final, Self

from codec.values import LSN
from codec.wire import BackendMessage, BackendReader, Query, ReadyForQuery
from pgwire_mock.client.commands import (
    CreatedSlot,
    OptionValue,
    Snapshot,
    SystemIdentity,
    quote_identifier,
)
from pgwire_mock.client.dsn import ConnectionParameters, parse_dsn
from pgwire_mock.client.errors import (
    ConnectionLostError,
    InvalidStateError,
    ReplicationTimeoutError,
    ServerError,
)
from pgwire_mock.client.session import (
    CommandResult,
    ErrorReceived,
    Event,
    ReplicationSession,
    State,
    StreamStarted,
)

_RECV_SIZE: Final = 1 << 16
DEFAULT_TIMEOUT: Final = 10.0


def _open_stream(params: ConnectionParameters, timeout: float) -> socket.socket:
    path = params.socket_path
    try:
        if path is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(timeout)
                sock.connect(path)
            except BaseException:
                sock.close()
                raise
            return sock
        sock = socket.create_connection((params.host, params.port), timeout=timeout)
    except OSError as err:
        where = path or f"{params.host}:{params.port}"
        raise ConnectionLostError(f"cannot connect to {where}: {err}") from err
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class ReplicationConnection:
    """One logical replication connection over a blocking socket.

    ``read_timeout`` bounds each wait for the server; :class:`ReplicationTimeoutError` is
    raised when it passes with nothing received (the session is still usable).
    """

    def __init__(
        self, sock: socket.socket, session: ReplicationSession, *, read_timeout: float
    ) -> None:
        self._sock = sock
        self.session = session
        self.read_timeout = read_timeout
        # Stream events read while waiting for CopyBothResponse, handed out by poll().
        self._pending: list[Event] = []

    @classmethod
    def connect(
        cls,
        dsn: str | None = None,
        *,
        host: str | None = None,
        port: int | None = None,
        user: str | None = None,
        dbname: str | None = None,
        password: str | None = None,
        application_name: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        decode_pgoutput: bool = False,
        wal_runs: bool = False,
        auto_reply: bool = True,
        startup_options: Mapping[str, str] | None = None,
    ) -> ReplicationConnection:
        """Open, authenticate and wait for ReadyForQuery; keyword arguments override ``dsn``.

        ``startup_options`` go into the startup packet; ``{"replication": "true"}`` asks
        for a physical walsender (no database)."""
        params = parse_dsn(dsn) if dsn else ConnectionParameters()
        params = replace(
            params,
            host=params.host if host is None else host,
            port=params.port if port is None else port,
            user=params.user if user is None else user,
            dbname=params.dbname if dbname is None else dbname,
            password=params.password if password is None else password,
            application_name=params.application_name
            if application_name is None
            else application_name,
        )
        params = params.with_defaults()
        sock = _open_stream(params, params.connect_timeout or timeout)
        session = ReplicationSession(
            user=params.user,
            database=params.dbname,
            password=params.password,
            application_name=params.application_name or "pgwire-mock",
            auto_reply=auto_reply,
            decode_pgoutput=decode_pgoutput,
            wal_runs=wal_runs,
            startup_options=startup_options,
        )
        conn = cls(sock, session, read_timeout=timeout)
        try:
            session.connect()
            conn._finish_command()
        except BaseException:
            conn.close()
            raise
        return conn

    # --- plumbing ------------------------------------------------------------------------

    def _send(self) -> None:
        """The only writer to the socket: flush whatever the session queued."""
        data = self.session.data_to_send()
        if data:
            try:
                self._sock.sendall(data)
            except OSError as err:
                raise ConnectionLostError(f"sending to the server failed: {err}") from err

    def poll(self, timeout: float | None = None) -> list[Event]:
        """Send what is queued, then read until at least one event arrives; [] when
        ``timeout`` (default: read_timeout) passes first."""
        if self._pending:
            events, self._pending = self._pending, []
            return events
        wait = self.read_timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        while True:
            self._send()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            self._sock.settimeout(remaining)
            try:
                data = self._sock.recv(_RECV_SIZE)
            except TimeoutError:
                return []
            except OSError as err:
                self.session.receive_data(b"")
                raise ConnectionLostError(f"receiving from the server failed: {err}") from err
            if not data:
                self.session.receive_data(b"")
                raise ConnectionLostError("the server closed the connection")
            events = self.session.receive_data(data, now=datetime.now(UTC))
            self._send()  # automatic keepalive answers, our CopyDone after the server's
            if events:
                return events

    def _finish_command(self) -> list[Event]:
        """Read until ReadyForQuery; raise the first server error after it arrives."""
        deadline = time.monotonic() + self.read_timeout
        events: list[Event] = []
        while self.session.state is not State.IDLE:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ReplicationTimeoutError(
                    f"no ReadyForQuery within {self.read_timeout}s "
                    f"(state {self.session.state.name})"
                )
            batch = self.poll(remaining)
            events.extend(batch)
            for event in batch:
                if isinstance(event, ErrorReceived) and event.error.fatal:
                    raise event.error
        for event in events:
            if isinstance(event, ErrorReceived):
                raise event.error
        return events

    def _command(self, send: Callable[[], None]) -> list[CommandResult]:
        send()
        events = self._finish_command()
        return [event for event in events if isinstance(event, CommandResult)]

    def exchange(self, sql: str, timeout: float | None = None) -> Iterator[BackendMessage]:
        """Send ``sql`` as a simple Query and yield every backend message it brings, as
        decoded, up to ReadyForQuery (not yielded): for commands whose answer the session
        does not model (BASE_BACKUP's result sets and COPY OUT). ``timeout`` bounds each
        wait for data; the connection is idle again once the iterator is exhausted."""
        if self.session.state is not State.IDLE:
            raise InvalidStateError(f"exchange needs an idle session, not {self.session.state}")
        wait = self.read_timeout if timeout is None else timeout
        reader = BackendReader()
        try:
            self._sock.sendall(Query(sql).encode())
        except OSError as err:
            raise ConnectionLostError(f"sending to the server failed: {err}") from err
        while True:
            message = reader.next_message()
            if message is None:
                self._sock.settimeout(wait)
                try:
                    data = self._sock.recv(_RECV_SIZE)
                except TimeoutError:
                    raise ReplicationTimeoutError(f"no answer to {sql!r} within {wait}s") from None
                except OSError as err:
                    raise ConnectionLostError(f"receiving from the server failed: {err}") from err
                if not data:
                    raise ConnectionLostError("the server closed the connection")
                reader.feed(data)
            elif isinstance(message, ReadyForQuery):
                return
            else:
                yield message

    # --- commands ------------------------------------------------------------------------

    def execute(self, sql: str) -> CommandResult:
        """Run a replication command or SQL; the result of its last statement."""
        results = self._command(lambda: self.session.query(sql))
        if not results:
            raise ConnectionLostError(f"no result for {sql!r}")
        return results[-1]

    def identify_system(self) -> SystemIdentity:
        return SystemIdentity.from_result(self.execute("IDENTIFY_SYSTEM"))

    def show(self, name: str) -> str | None:
        """SHOW on the replication connection (quoted, so any GUC name works)."""
        result = self.execute(f"SHOW {quote_identifier(name)}")
        return result.rows[0][0] if result.rows else None

    def create_slot(
        self,
        slot_name: str,
        *,
        plugin: str = "pgoutput",
        temporary: bool = False,
        snapshot: Snapshot = "nothing",
        two_phase: bool = False,
        failover: bool = False,
    ) -> CreatedSlot:
        results = self._command(
            lambda: self.session.create_slot(
                slot_name,
                plugin=plugin,
                temporary=temporary,
                snapshot=snapshot,
                two_phase=two_phase,
                failover=failover,
            )
        )
        return CreatedSlot.from_result(results[-1])

    def drop_slot(self, slot_name: str, *, wait: bool = False) -> None:
        self._command(lambda: self.session.drop_slot(slot_name, wait=wait))

    # --- streaming ------------------------------------------------------------------------

    def start_replication(
        self,
        slot_name: str,
        start_lsn: LSN | int | str = 0,
        options: Mapping[str, OptionValue] | None = None,
    ) -> Iterator[Event]:
        """Start streaming; errors before CopyBothResponse raise here, at once.

        The iterator yields every event (WalData, Keepalive, ...) and raises
        :class:`ReplicationTimeoutError` when nothing arrives within ``read_timeout``, or
        :class:`ServerError` when the server ends the stream with an error (the
        connection is idle again by then). It ends when the stream ends.
        """
        self.session.start_replication(slot_name, start_lsn, options)
        deadline = time.monotonic() + self.read_timeout
        early: list[Event] = []
        while self.session.state is State.QUERY:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ReplicationTimeoutError("START_REPLICATION got no answer in time")
            early.extend(self.poll(remaining))
        if self.session.state is State.IDLE:
            for event in early:
                if isinstance(event, StreamStarted):
                    break  # an error after CopyBoth ended the stream: _stream raises it
                if isinstance(event, ErrorReceived):
                    raise event.error
        self._pending = early
        return self._stream()

    def _stream(self) -> Iterator[Event]:
        while self._pending or self.session.state not in (State.IDLE, State.CLOSED):
            batch = self.poll(None)
            if not batch and self.session.state is State.STREAMING:
                raise ReplicationTimeoutError(f"nothing received for {self.read_timeout}s")
            # What came before an ErrorResponse in the same read is the stream's too
            # (a transaction sent whole before the change that failed).
            for event in batch:
                if isinstance(event, ErrorReceived):
                    self.wait_idle()
                    raise event.error
                yield event

    def read_stream(self, timeout: float | None = None) -> list[Event]:
        """One batch of stream events, [] after ``timeout`` quiet seconds.

        An ErrorResponse ends the stream: this reads on to ReadyForQuery, so the
        connection is usable again, and raises it as :class:`ServerError`.
        """
        events = self.poll(timeout)
        self._raise_stream_error(events)
        return events

    def _raise_stream_error(self, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, ErrorReceived):
                self.wait_idle()
                raise event.error

    def wait_idle(self) -> list[Event]:
        """Read until the server is idle (or gone); the events read, errors included."""
        deadline = time.monotonic() + self.read_timeout
        events: list[Event] = []
        while self.session.state not in (State.IDLE, State.CLOSED):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ReplicationTimeoutError(f"server not idle after {self.read_timeout}s")
            events.extend(self.poll(remaining))
        return events

    def send_status(
        self,
        write: LSN | int | None = None,
        flush: LSN | int = 0,
        apply: LSN | int | None = None,
        *,
        now: datetime | None = None,
        reply_requested: bool = False,
    ) -> None:
        """Send a StandbyStatusUpdate now; write and apply default to ``flush``."""
        self.session.send_status(
            flush if write is None else write,
            flush,
            flush if apply is None else apply,
            now or datetime.now(UTC),
            reply_requested,
        )
        self._send()

    def stop(self) -> list[Event]:
        """Send CopyDone and read until the server is idle; returns the events read
        (data still in flight, StreamEnded, the two CommandCompletes, Ready)."""
        self.session.stop()
        deadline = time.monotonic() + self.read_timeout
        events: list[Event] = []
        while self.session.state is not State.IDLE:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ReplicationTimeoutError("the server did not finish the stream in time")
            batch = self.poll(remaining)
            events.extend(batch)
        for event in events:
            if isinstance(event, ErrorReceived):
                raise event.error
        return events

    # --- closing -----------------------------------------------------------------------------

    def close(self) -> None:
        """Send Terminate if the session is still open, then close the socket."""
        if self.session.state not in (State.NEW, State.CLOSED, State.ERROR):
            self.session.terminate()
            with contextlib.suppress(ConnectionLostError):  # closing anyway
                self._send()
        self._sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


__all__ = ["DEFAULT_TIMEOUT", "ReplicationConnection", "ServerError"]
