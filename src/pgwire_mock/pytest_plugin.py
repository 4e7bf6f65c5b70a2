"""pytest fixtures that run the fake walsender in-process.

Enable with ``-p pgwire_mock.pytest_plugin`` (or the ``pytest11`` entry point)::

    def test_consumer_survives_a_crash(make_walsender):
        server = make_walsender(script="examples/demo.yaml", pg_version=16)
        run_my_consumer(server.dsn)               # replication=database is in the DSN
        server.inject("redeliver")                # or Fault("redeliver", wait=False)
        ...
        assert server.slots["demo_slot"].confirmed_flush == ...

    @pytest.mark.walsender(script="examples/demo.yaml", pg_version=15)
    def test_with_the_default_server(walsender):
        ...

Each server gets its own Twisted reactor instance (not the global one), run in a thread
of its own on a free loopback port. ``stop()`` (called at teardown) drops the
connections, closes the listening port, stops the reactor, joins the thread and closes
the reactor's file descriptors, so nothing is left behind and servers in one test
session never share state. Everything the handle reads is taken on the reactor thread.

In-process servers do not offer TLS: Twisted's ``startTLS`` schedules its writes on the
global reactor, which this plugin deliberately leaves alone; run ``pgwire-mock serve
--tls-cert ... --tls-key ...`` as a subprocess for TLS.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from codec.replication import StandbyStatusUpdate
from pgwire_mock.script.model import Change, Script, Step, Transaction
from pgwire_mock.script.wal import OpenTxn
from pgwire_mock.server.auth import AuthMethod, User
from pgwire_mock.server.faults import Fault
from pgwire_mock.server.live import LOG_SNAPSHOT_INTERVAL, WalWriter
from pgwire_mock.server.physical import PhysicalRecording
from pgwire_mock.server.protocol import AUTHENTICATION_TIMEOUT, WalSenderFactory, listen
from pgwire_mock.server.session import SessionConfig
from pgwire_mock.server.source import ScriptSource, StreamSource, load_source
from pgwire_mock.server.sql_result import CannedAnswer
from pgwire_mock.server.state import PublicationState, ServerState, SlotState

__all__ = [
    "OpenTransaction",
    "SlotInfo",
    "WalSender",
    "make_walsender",
    "start_walsender",
    "walsender",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SlotInfo:
    """A slot as ``pg_replication_slots`` would show it, at the time it was read."""

    name: str
    plugin: str | None
    confirmed_flush: int
    restart_lsn: int
    active: bool
    active_pid: int | None
    temporary: bool
    two_phase: bool
    persisted_flush: int
    """The position on disk: what a crash (the ``redeliver`` fault) falls back to."""


def _new_reactor() -> Any:
    try:
        from twisted.internet.epollreactor import EPollReactor  # noqa: PLC0415 - Linux only

        return EPollReactor()  # type: ignore[no-untyped-call]
    except ImportError:  # pragma: no cover - not Linux
        from twisted.internet.selectreactor import SelectReactor  # noqa: PLC0415

        return SelectReactor()


class WalSender:
    """A running in-process fake walsender (see :func:`start_walsender`)."""

    def __init__(
        self,
        config: SessionConfig,
        state: ServerState,
        *,
        host: str,
        authentication_timeout: float = AUTHENTICATION_TIMEOUT,
        snapshot_interval: float = LOG_SNAPSHOT_INTERVAL,
    ) -> None:
        self.config = config
        self._state = state
        self.host = host
        self.pg_version = config.major
        self.log: list[str] = []
        self._acknowledged: list[StandbyStatusUpdate] = []
        config.on_status_update = lambda _pid, update: self._acknowledged.append(update)
        self._reactor = _new_reactor()
        self._factory = WalSenderFactory(
            config,
            state,
            self._reactor,
            log=self.log.append,
            authentication_timeout=authentication_timeout,
            snapshot_interval=snapshot_interval,
        )
        self._port: Any = None
        self._thread = threading.Thread(
            target=self._reactor.run,
            kwargs={"installSignalHandlers": False},
            name=f"pgwire-mock walsender {host}",
            daemon=True,
        )
        self._thread.start()
        self.port = 0
        try:
            self._port = self._call(
                lambda: listen(self._reactor, f"tcp:0:interface={host}", self._factory)
            )
            self.port = int(self._port.getHost().port)
        except BaseException:
            self.stop()
            raise
        self.stopped = False

    # --- what a test reads ------------------------------------------------------------------

    def dsn(self, **params: str) -> str:
        """A libpq DSN for a logical replication connection (``replication=database``)."""
        base = {
            "host": self.host,
            "port": str(self.port),
            "user": "postgres",
            "dbname": "postgres",
            "replication": "database",
            **params,
        }
        return " ".join(f"{k}={v}" for k, v in base.items() if v != "")

    @property
    def slots(self) -> dict[str, SlotInfo]:
        def read() -> dict[str, SlotInfo]:
            return {
                s.name: SlotInfo(
                    s.name,
                    s.plugin,
                    s.confirmed_flush,
                    s.restart_lsn,
                    s.active_pid is not None,
                    s.active_pid,
                    s.temporary,
                    s.two_phase,
                    s.confirmed_flush if s.persisted_flush is None else s.persisted_flush,
                )
                for s in self._state.slots.values()
            }

        return self._call(read)

    @property
    def acknowledged(self) -> list[StandbyStatusUpdate]:
        """Every standby status update the server read, in order."""
        return self._call(lambda: list(self._acknowledged))

    @property
    def connections(self) -> int:
        """Connections accepted so far."""
        return self._call(lambda: self._factory.connections)

    @property
    def open_connections(self) -> int:
        return self._call(lambda: len(self._factory.protocols))

    def inject(self, fault: Fault | str) -> bool:
        """Apply a fault (a :class:`Fault` or the command line's ``NAME[:ARGS]``) to the
        streaming connection now (True), or else to the next one that starts (False)."""
        value = Fault.parse(fault) if isinstance(fault, str) else fault
        return self._call(lambda: self._factory.inject(value))

    # --- a live WAL ---------------------------------------------------------------------

    @property
    def end_of_wal(self) -> int:
        """The end of the WAL written so far (IDENTIFY_SYSTEM's xlogpos)."""
        return self._call(lambda: self._state.wal_lsn)

    def commit(self, changes: Sequence[Change], **options: Any) -> int:
        """Commit one transaction now, while clients stream: ``changes`` and ``options``
        (origin, commit_time, stream, prepare, rollback, ...) as for
        ``Script.transaction``. Streaming clients receive it at once. Returns the new end
        of WAL: the position a consumer confirms once it has applied the transaction."""
        return self.append(Transaction(tuple(changes), **options))

    def append(self, *steps: Step | Script) -> int:
        """Write steps after the script's while clients stream (a ``Script``'s steps are
        taken in order, so a builder can give them): transactions, ``commit_prepared``,
        messages, ``alter_table``, ``wait_for``... Raises ScriptError for a step that does
        not fit the served script (the steps before it are written). Returns the new end
        of WAL."""
        flat: list[Step] = []
        for step in steps:
            flat.extend(step.steps if isinstance(step, Script) else [step])
        writer = self._writer()
        return self._call(lambda: writer.append(flat))

    def begin(self, **options: Any) -> OpenTransaction:
        """Begin a transaction that stays open: each ``write`` puts its changes in the WAL
        at once, between other transactions' commits, so a consumer can stop and restart
        in the middle of it. ``options``: stream, origin, origin_lsn (as for
        ``Script.transaction``). While a wait_for step holds the WAL back, its writes
        and its end wait with the rest."""
        writer = self._writer()
        return OpenTransaction(self, writer, self._call(lambda: writer.begin(**options)))

    def log_standby_snapshot(self) -> int:
        """Write a running-xacts record now, as ``SELECT pg_log_standby_snapshot()``
        (16+) does; returns the new end of WAL. A walsender that decodes it moves its
        slot's restart_lsn (and catalog_xmin) there once the client confirms the
        record, saving the slot with the confirmed position: what a restart of 14-16, or
        a crash, comes back to. The background writer writes one every 15 s of activity
        (``snapshot_interval``). Raises RuntimeError while a wait_for step holds WAL."""
        writer = self._writer()
        if self._call(writer.log_running_xacts) is None:
            raise RuntimeError("a wait_for step holds the WAL back")
        return self.end_of_wal

    def checkpoint(self) -> int:
        """``CHECKPOINT``: a running-xacts record (see :meth:`log_standby_snapshot`),
        then the checkpoint's record; returns the new end of WAL."""
        writer = self._writer()
        if self._call(writer.online_checkpoint) is None:
            raise RuntimeError("a wait_for step holds the WAL back")
        return self.end_of_wal

    def _writer(self) -> WalWriter:
        writer = self._factory.wal_writer
        if writer is None:
            raise TypeError("the served stream is not a script, so it cannot grow")
        return writer

    def wait_confirmed(self, slot: str, lsn: int | None = None, timeout: float = 10.0) -> None:
        """Wait until ``slot``'s confirmed_flush reaches ``lsn`` (default: the end of WAL)."""
        target = self.end_of_wal if lsn is None else lsn
        self.wait_until(
            lambda s: slot in s.slots and s.slots[slot].confirmed_flush >= target, timeout
        )

    def invalidate_slot(self, slot: str, cause: str = "wal_removed") -> None:
        """Invalidate an inactive slot, as a checkpoint does once the WAL it needs is past
        max_slot_wal_keep_size (``wal_removed``) or, on 18, once it was idle longer than
        idle_replication_slot_timeout (``idle_timeout``): ``pg_replication_slots`` shows it
        lost, and the next START_REPLICATION on it fails with the emulated major's error.
        Raises SlotActiveError while a client streams from it, ValueError for a cause the
        major does not have."""
        if cause == "idle_timeout" and self.pg_version < 18:
            raise ValueError(
                f"idle_timeout invalidation needs PostgreSQL 18, not {self.pg_version}"
            )
        self._call(lambda: self._state.invalidate_slot(slot, cause))

    def with_state(self, function: Callable[[ServerState], T]) -> T:
        """Run ``function`` on the server state, on the reactor thread."""
        return self._call(lambda: function(self._state))

    def wait_until(
        self, predicate: Callable[[WalSender], bool], timeout: float = 10.0, interval: float = 0.02
    ) -> None:
        """Poll ``predicate(self)`` until true; AssertionError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not predicate(self):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"condition not met within {timeout}s; server log:\n" + "\n".join(self.log)
                )
            time.sleep(interval)

    # --- lifetime -------------------------------------------------------------------------

    def restart(self, timeout: float = 60.0, *, immediate: bool = False) -> None:
        """Restart the server as ``pg_ctl restart -m fast`` does, on the same port.

        New connections get FATAL 57P03 at once; transactions still open (:meth:`begin`)
        roll back, and their abort records are decoded (a streaming client gets Stream
        Abort); every connection that is not streaming ends with FATAL 57P01. A
        streaming walsender sends the rest of the WAL, then waits until its client has
        confirmed everything sent (``CommandComplete`` ``COPY 0``, no CopyDone), or its
        ``wal_sender_timeout`` passes without a reply. Then the shutdown checkpoint's
        record is written after the WAL (120 bytes: IDENTIFY_SYSTEM's xlogpos moves past
        the last commit), every slot is saved as the emulated major saves it (14-16:
        confirmed_flush as it was last saved), temporary slots are gone with their
        sessions, and the port listens again (meanwhile ``commit``, ``append``,
        ``begin`` and an open transaction's writes raise ShuttingDownError, as a
        session would be refused or ended). A client that keeps
        answering without confirming holds the shutdown forever, on PostgreSQL too:
        TimeoutError after ``timeout`` seconds, the server still shutting down.

        ``immediate=True`` is ``pg_ctl restart -m immediate`` (or a crash): every
        connection drops at once without a message, transactions still open never end
        (14-17 stream them again to a streaming client after the restart, without an
        end; 18 drops them), the end-of-recovery checkpoint's record follows the WAL, and
        every slot comes back with confirmed_flush as it was last saved, on every major.
        """

        def reopen() -> Any:
            # Down: the port is closed, as the postmaster's, then opened again.
            closing = self._port.stopListening()
            where = f"tcp:{self.port}:interface={self.host}"
            closing.addCallback(lambda _: listen(self._reactor, where, self._factory))
            closing.addCallback(lambda port: setattr(self, "_port", port))
            return closing

        self._call(lambda: self._factory.restart(timeout, reopen, immediate=immediate))

    def stop(self) -> None:
        """Drop connections, close the port, stop the reactor and join its thread."""
        if getattr(self, "stopped", False):
            return
        self.stopped = True
        reactor = self._reactor
        if self._thread.is_alive():

            def shutdown() -> Any:
                self._factory.disconnect_all()
                if self._port is not None:
                    return self._port.stopListening()
                return None

            try:
                self._call(shutdown)
            finally:
                reactor.callFromThread(reactor.stop)
                self._thread.join(timeout=10)
        if self._thread.is_alive():  # pragma: no cover - a wedged reactor
            raise RuntimeError("the walsender's reactor thread did not stop")
        # A reactor instance keeps its waker pipe and poller open after it stops.
        waker = getattr(reactor, "waker", None)
        if waker is not None:
            reactor.removeReader(waker)
            waker.connectionLost(None)
        poller = getattr(reactor, "_poller", None)
        if poller is not None and hasattr(poller, "close"):
            poller.close()

    def __enter__(self) -> WalSender:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _call(self, function: Callable[[], T]) -> T:
        from twisted.internet.threads import blockingCallFromThread  # noqa: PLC0415

        if not self._thread.is_alive():
            # Stopped: nothing else touches the state any more.
            result = function()
            if hasattr(result, "addCallback"):
                raise RuntimeError("the walsender is stopped")
            return result
        return blockingCallFromThread(self._reactor, function)


class OpenTransaction:
    """A transaction in progress on the served WAL (:meth:`WalSender.begin`).

    Each :meth:`write` reaches the WAL when it is called, as each statement of an open
    transaction does on PostgreSQL: walsenders read it at once (a streaming client gets a
    block when the transaction passes logical_decoding_work_mem; others get nothing until
    the commit), keepalives carry the new end of WAL, and a slot's restart_lsn stays at
    the transaction's first change however far the consumer confirms, so a consumer
    restarted before the commit receives the whole transaction. As a context manager it
    commits at the end of the block, or rolls back if the block raised.
    """

    def __init__(self, sender: WalSender, writer: WalWriter, txn: OpenTxn) -> None:
        self._sender = sender
        self._writer = writer
        self._txn = txn

    def write(self, changes: Sequence[Change]) -> int:
        """Write ``changes`` (inserts, updates, savepoints... as in ``Script.transaction``)
        now; returns the new end of WAL. ScriptError for a change that does not fit the
        script: none of ``changes`` is written then."""
        return self._sender._call(lambda: self._writer.write(self._txn, changes))

    def commit(self, *, commit_time: str | None = None) -> int:
        """Commit; returns the commit's end_lsn, the position a consumer confirms once it
        has applied the transaction (the end of WAL if it wrote nothing)."""
        return self._finish(rollback=False, commit_time=commit_time)

    def rollback(self) -> int:
        """Roll back; returns the end of WAL after the abort record."""
        return self._finish(rollback=True)

    def prepare(self, gid: str, *, prepare_time: str | None = None) -> int:
        """PREPARE TRANSACTION ``gid``; returns the end of its record. Finish it with
        ``walsender.append(CommitPrepared(gid))`` (or RollbackPrepared) later."""
        return self._finish(prepare=gid, commit_time=prepare_time)

    def _finish(self, **how: Any) -> int:
        writer, txn = self._writer, self._txn
        return self._sender._call(lambda: writer.finish(txn, **how))

    @property
    def open(self) -> bool:
        return not self._txn.ended

    def __enter__(self) -> OpenTransaction:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if self.open:
            self._finish(rollback=kind is not None)


def _source(script: str | Path | StreamSource | Any) -> StreamSource:
    if isinstance(script, str | Path):
        if PhysicalRecording.is_physical(Path(script)):  # record --physical's file
            return PhysicalRecording.from_file(Path(script))
        return load_source(Path(script))
    if hasattr(script, "events"):
        return script
    return ScriptSource(script)  # a pgwire_mock.script.Script


def start_walsender(
    script: str | Path | StreamSource | Any = None,
    pg_version: int | None = None,
    users: Mapping[str, str | None] | Iterable[User] | None = None,
    *,
    auth: AuthMethod = "trust",
    slots: Iterable[str | tuple[str, int]] = (),
    publications: Iterable[str] = (),
    faults: Iterable[Fault | str] = (),
    wal_sender_timeout: float = 60.0,
    idle_keepalive_interval: float = 10.0,
    idle_wal_advance: int = 0,
    sql_answers: Mapping[str, CannedAnswer] | None = None,
    roles: Iterable[str] | None = None,
    databases: Iterable[str] = (),
    max_connections: int = 100,
    max_wal_senders: int = 10,
    new_slots: str = "stream_start",
    host: str = "127.0.0.1",
    authentication_timeout: float = AUTHENTICATION_TIMEOUT,
    snapshot_interval: float = LOG_SNAPSHOT_INTERVAL,
) -> WalSender:
    """Start a fake walsender on a free loopback port; ``stop()`` it when done.

    ``script``: a script or recording path, a ``Script``, or any ``StreamSource``.
    ``users``: name → password (or ``User`` objects); none: anyone may connect.
    ``slots``: names (confirmed at the stream's start) or (name, LSN) pairs.
    ``faults``: applied to every streaming connection, like ``serve --fault``.
    ``idle_wal_advance``: bytes of WAL written per idle keepalive (a busy server's
    background records); 0, as an idle PostgreSQL, keeps the end of WAL still.
    ``new_slots``: where a slot a client creates starts: ``"stream_start"`` (it reads the
    whole stream) or ``"end_of_wal"`` (as on PostgreSQL: only what is written later,
    its snapshot seeing everything before).
    ``roles``, ``databases``, ``max_connections``, ``max_wal_senders``: as ``serve --role``,
    ``--database`` (the first holds the declared slots), ``--max-connections`` and
    ``--max-wal-senders``. ``authentication_timeout``: seconds from connecting to the end
    of authentication before the server closes the connection (0: never), as
    ``--authentication-timeout``. ``snapshot_interval``: seconds between the background
    writer's running-xacts records while WAL is written (PostgreSQL's 15; 0: none), as
    ``--snapshot-interval``; a served script's WAL only.
    """
    source = _source(script) if script is not None else None
    state = ServerState()
    databases = list(databases)
    state.declare_databases(databases)
    if databases:
        state.database = databases[0]
    if source is not None:
        state.wal_lsn = source.start_lsn
        state.advance_wal(getattr(source, "end_lsn", source.start_lsn))  # its WAL is written
        if new_slots not in ("stream_start", "end_of_wal"):
            raise ValueError(f"new_slots: expected stream_start or end_of_wal, got {new_slots!r}")
        state.new_slot_lsn = source.start_lsn if new_slots == "stream_start" else None
        if isinstance(source, ScriptSource | PhysicalRecording):
            state.system_identifier = source.system_identifier
            state.timeline = source.timeline
        state.declare(
            (dataclasses.replace(s, database=state.database) for s in source.slots),
            source.publications,
        )
    for slot in slots:
        start = state.new_slot_lsn or state.wal_lsn
        name, lsn = (slot, start) if isinstance(slot, str) else slot
        state.declare([SlotState(name, "pgoutput", state.database, lsn, lsn)], [])
    publications = list(publications)
    state.declare([], [PublicationState(p, all_tables=True) for p in publications])
    if isinstance(source, ScriptSource):
        source.declare_publications(publications)
    if users is None:
        user_map: dict[str, User] = {}
    elif isinstance(users, Mapping):
        user_map = {name: User(name, password) for name, password in users.items()}
    else:
        user_map = {u.name: u for u in users}
    major = pg_version or (source.major if source is not None and source.major else 16)
    config = SessionConfig(
        major=major,
        auth=auth,
        users=user_map,
        roles=None if roles is None else frozenset(roles),
        max_connections=max_connections,
        max_wal_senders=max_wal_senders,
        wal_sender_timeout=wal_sender_timeout,
        idle_keepalive_interval=idle_keepalive_interval,
        idle_wal_advance=idle_wal_advance,
        sql_answers=dict(sql_answers or {}),
        source=source,
        faults=tuple(Fault.parse(f) if isinstance(f, str) else f for f in faults),
    )
    return WalSender(
        config,
        state,
        host=host,
        authentication_timeout=authentication_timeout,
        snapshot_interval=snapshot_interval,
    )


@pytest.fixture
def make_walsender() -> Iterator[Callable[..., WalSender]]:
    """A factory: ``make_walsender(script=..., pg_version=16, users=..., **options)``
    (the arguments of :func:`start_walsender`); every server stops at teardown."""
    started: list[WalSender] = []

    def make(*args: Any, **kwargs: Any) -> WalSender:
        server = start_walsender(*args, **kwargs)
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture
def walsender(
    request: pytest.FixtureRequest, make_walsender: Callable[..., WalSender]
) -> WalSender:
    """One fake walsender; ``@pytest.mark.walsender(**options)`` configures it."""
    marker = request.node.get_closest_marker("walsender")
    kwargs: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    return make_walsender(*(marker.args if marker is not None else ()), **kwargs)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "walsender(script=None, pg_version=None, **options): options of the walsender fixture",
    )
