"""The Twisted side of the fake walsender: a thin Protocol around :class:`WalSenderSession`.

``dataReceived`` feeds the session; :meth:`WalSenderProtocol._send` is the only caller of
``transport.write``; time comes from an injected ``IReactorTime`` (never the global
reactor). The protocol is a streaming ``IPushProducer`` registered on its transport: when
the client stops reading and the transport's buffer fills, ``pauseProducing`` stops the
protocol pulling stream data from the session, so memory stays bounded whatever the
stream's size. Services are built from endpoint strings (``tcp:5433:interface=127.0.0.1``,
``unix:/tmp/.s.PGSQL.5433``, ``ssl:...``) with ``serverFromString``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from typing import Protocol as TypingProtocol

from twisted.application.internet import StreamServerEndpointService
from twisted.internet.address import UNIXAddress
from twisted.internet.defer import Deferred, maybeDeferred, succeed
from twisted.internet.endpoints import serverFromString
from twisted.internet.interfaces import (
    IHandshakeListener,
    IListeningPort,
    IOpenSSLServerConnectionCreator,
    IPushProducer,
)
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure
from zope.interface import implementer  # type: ignore[import-untyped]  # no stubs shipped

from pgwire_mock.server.faults import Fault
from pgwire_mock.server.live import LOG_SNAPSHOT_INTERVAL, WalWriter
from pgwire_mock.server.session import Phase, SessionConfig, WalSenderSession
from pgwire_mock.server.state import ServerState

__all__ = [
    "ALPN_PROTOCOL",
    "AUTHENTICATION_TIMEOUT",
    "CHUNK_SIZE",
    "SAVE_INTERVAL",
    "SHUTDOWN_MODES",
    "TLSFiles",
    "WalSenderFactory",
    "WalSenderProtocol",
    "build_service",
    "listen",
]

CHUNK_SIZE: Final = 256 * 1024
"""Bytes of stream produced per pull; the transport's buffer decides when to pause.

A Twisted transport pauses its producer as soon as its buffer passes 64 KiB, so every pull
costs a reactor round trip (write, drain, resume): a 256 KiB pull needs a quarter of the
round trips of a 64 KiB one, while a connection still holds at most about one pull."""
AUTHENTICATION_TIMEOUT: Final = 60.0
"""PostgreSQL's ``authentication_timeout`` default, in seconds."""
SAVE_INTERVAL: Final = 0.1
"""Seconds between writes of a state file (``ServerState.coalesce_saves``)."""
SHUTDOWN_MODES: Final = ("smart", "fast", "immediate")
"""``pg_ctl stop -m``'s modes, weakest first: what SIGTERM, SIGINT and SIGQUIT ask for."""
_POLL: Final = 0.01
"""Seconds between looks at the connections left while the server stops."""
_CHUNKS_PER_TURN: Final = 16
"""Pulls before yielding to the reactor, so one fast stream cannot starve the others."""


class DelayedCall(TypingProtocol):
    def active(self) -> bool: ...
    def cancel(self) -> None: ...


class Clock(TypingProtocol):
    """What the protocol needs of ``IReactorTime`` (a reactor, or ``task.Clock`` in tests).

    Spelled as a typing Protocol because mypy reads zope interfaces' methods as unbound.
    """

    def seconds(self) -> float: ...
    def callLater(  # noqa: N802 - Twisted's name
        self, delay: float, callable: Callable[..., object], *args: object, **kw: object
    ) -> DelayedCall: ...


@dataclass(frozen=True, slots=True)
class TLSFiles:
    """A PEM certificate (chain) and key for answering SSLRequest with 'S'."""

    certificate: Path
    key: Path

    def context_factory(self, major: int = 16) -> Any:
        """A TLS context factory for ``startTLS`` set up as PostgreSQL ``major``'s
        (be-secure-openssl.c), loading the files now so that a bad pair fails at start.

        Built on pyOpenSSL (``twisted[tls]``) directly: Twisted's CertificateOptions always
        installs an ALPN callback that, with no protocols configured, answers every client
        offering ALPN (libpq 17+) with alert 80. 14-16 install none (ALPN ignored); 17+
        select "postgresql" and refuse any other offer with no_application_protocol.
        """
        from OpenSSL import SSL  # noqa: PLC0415 - pyOpenSSL is optional

        context = SSL.Context(SSL.TLS_SERVER_METHOD)
        context.set_min_proto_version(SSL.TLS1_2_VERSION)  # ssl_min_protocol_version
        context.set_options(SSL.OP_NO_TICKET)
        context.set_session_cache_mode(SSL.SESS_CACHE_OFF)
        context.use_certificate_chain_file(str(self.certificate))
        context.use_privatekey_file(str(self.key))
        context.check_privatekey()
        if major >= 17:

            def select(_connection: object, offered: list[bytes]) -> bytes:
                if ALPN_PROTOCOL in offered:
                    return ALPN_PROTOCOL
                # An exception makes pyOpenSSL answer SSL_TLSEXT_ERR_ALERT_FATAL: the
                # no_application_protocol alert, as alpn_cb. Twisted catches SSL.Error and
                # reads its argument as OpenSSL's error queue: (library, function, reason).
                raise SSL.Error([("SSL routines", "alpn", "no application protocol")])

            context.set_alpn_select_callback(select)
        return _ServerTLS(context)


ALPN_PROTOCOL: Final = b"postgresql"
"""What PostgreSQL 17+ accept in ALPN (PG_ALPN_PROTOCOL), and require of direct TLS."""


@implementer(IOpenSSLServerConnectionCreator)
@dataclass(frozen=True, slots=True)
class _ServerTLS:
    """Server TLS connections from one pyOpenSSL context, for ``startTLS``."""

    context: Any

    def serverConnectionForTLS(self, _protocol: object) -> Any:  # noqa: N802 - Twisted's name
        from OpenSSL import SSL  # noqa: PLC0415 - pyOpenSSL is optional

        return SSL.Connection(self.context)


_UNAUTHENTICATED: Final = (Phase.STARTUP, Phase.AUTHENTICATING)
_TLS_HANDSHAKE: Final = 0x16
"""The first byte of a TLS ClientHello record; no startup packet starts with it (that
length would be hundreds of megabytes)."""


@implementer(IPushProducer, IHandshakeListener)
class WalSenderProtocol(Protocol):
    """One client connection."""

    def __init__(self, factory: WalSenderFactory) -> None:
        self.factory = factory
        self.clock = factory.clock
        self.session: WalSenderSession | None = None
        self._paused = False
        self._timer: DelayedCall | None = None
        self._pump_call: DelayedCall | None = None
        self._auth_timer: DelayedCall | None = None
        self._first_bytes = True
        self._direct_tls = False
        self._peer = "?"
        self._pid: int | str = "-"

    # --- Protocol ---------------------------------------------------------------------

    def connectionMade(self) -> None:  # noqa: N802 - Twisted's name
        transport: Any = self.transport
        peer = transport.getPeer()
        self._peer = f"{getattr(peer, 'host', '')}:{getattr(peer, 'port', '')}".strip(":") or str(
            peer
        )
        factory = self.factory
        session = WalSenderSession(
            factory.config, factory.state, now=self.clock.seconds(), log=self._log
        )
        session.on_output = self._after
        self._pid = session.pid
        host, port = getattr(peer, "host", None), getattr(peer, "port", None)
        if isinstance(host, str) and isinstance(port, int):  # not a Unix-domain socket
            session.client_address = (host, port)
        else:
            session.unix_socket = isinstance(peer, UNIXAddress)
        self.session = session
        factory.connected(self)
        self._log("connection opened")
        transport.registerProducer(self, True)
        if factory.authentication_timeout > 0:
            # authentication_timeout: from accept to the end of authentication.
            self._auth_timer = self.clock.callLater(
                factory.authentication_timeout, self._authentication_timeout
            )

    def dataReceived(self, data: bytes) -> None:  # noqa: N802 - Twisted's name
        session = self.session
        if session is None:
            return
        if self._first_bytes:
            self._first_bytes = False
            if data[:1] == bytes((_TLS_HANDSHAKE,)) and self._start_direct_tls(data):
                return
        session.receive_data(data, self.clock.seconds())
        self._after()
        # An acknowledgement or a new slot may meet a wait_for step's condition.
        writer = self.factory.wal_writer
        if writer is not None:
            writer.check()

    def connectionLost(self, reason: Failure | None = None) -> None:  # noqa: N802
        for call in (self._timer, self._pump_call, self._auth_timer):
            if call is not None and call.active():
                call.cancel()
        self._timer = self._pump_call = self._auth_timer = None
        self.factory.disconnected(self)
        session = self.session
        if session is not None and not session.closed:
            session.receive_eof(self.clock.seconds())
            if session.detached:
                self.factory.detach(session)
        self._log("connection closed")
        if session is not None:
            # The session holds this protocol (on_output, its log) and the protocol the
            # session: a cycle that refcounting cannot free, so whatever the session
            # buffered would stay until a full garbage collection. Break it.
            session.on_output = None
            self.session = None

    # --- TLS ------------------------------------------------------------------------------

    def _start_direct_tls(self, data: bytes) -> bool:
        """A ClientHello instead of a startup packet: direct TLS (17+, ProcessSSLStartup).
        Started when emulating 17+ with a certificate over TCP; otherwise False, and the
        session takes the bytes as a startup packet of absurd length and closes without a
        word, as both 14-16 and a 17+ without SSL do."""
        factory, transport = self.factory, self._transport()
        if factory.config.major < 17 or factory.tls is None or not hasattr(transport, "startTLS"):
            return False
        if isinstance(transport.getHost(), UNIXAddress):
            return False
        self._direct_tls = True
        assert self.session is not None
        self.session.tls_active = True  # an SSLRequest inside TLS gets 'N'
        transport.startTLS(factory.tls_context())
        # startTLS put a TLS protocol between the transport and this one; the ClientHello
        # already read is its first input.
        transport.protocol.dataReceived(data)
        return True

    def handshakeCompleted(self) -> None:  # noqa: N802 - Twisted's name
        if not self._direct_tls:
            return
        # The TLS layer startTLS put in front of this protocol knows what ALPN chose.
        negotiated = getattr(self._transport().protocol, "negotiatedProtocol", None)
        if negotiated != ALPN_PROTOCOL:
            # COMMERROR: logged only; the client sees the connection close.
            self._log(
                "received direct SSL connection request without ALPN protocol negotiation extension"
            )
            self._hang_up()

    def _hang_up(self) -> None:
        """Close as an exiting backend does: its socket, at once. Through Twisted's TLS
        layer a close would reset a connection mid-handshake, or wait for the client's
        close_notify after it; below that layer it is a plain FIN, as PostgreSQL's."""
        transport = self._transport()
        layer = getattr(transport, "protocol", None) if getattr(transport, "TLS", False) else None
        below = getattr(layer, "transport", None)
        (below if below is not None else transport).loseConnection()

    def _authentication_timeout(self) -> None:
        self._auth_timer = None
        session = self.session
        if session is None or session.phase not in _UNAUTHENTICATED:
            return
        # StartupPacketTimeoutHandler exits at once; during authentication the FATAL
        # "canceling authentication due to timeout" goes to the log only. Either way the
        # client sees the connection close, nothing else (checked on 14-18).
        self._log("canceling authentication due to timeout")
        self._hang_up()

    # --- IPushProducer -------------------------------------------------------------------

    def pauseProducing(self) -> None:  # noqa: N802 - Twisted's name
        self._paused = True

    def resumeProducing(self) -> None:  # noqa: N802 - Twisted's name
        self._paused = False
        self._pump_soon()

    def stopProducing(self) -> None:  # noqa: N802 - Twisted's name
        self._paused = True
        self._transport().loseConnection()

    # --- plumbing -------------------------------------------------------------------------

    def _log(self, line: str) -> None:
        # The session's pid outlives the connection: a detached session still logs.
        self.factory.log(f"[{self._peer} pid={self._pid}] {line}")

    def _transport(self) -> Any:
        # Typed Any: mypy reads ITransport's zope methods as unbound functions.
        return self.transport

    def _send(self, data: bytes) -> None:
        """The one place that writes to the transport."""
        if data and self.transport is not None:
            self._transport().write(data)

    def inject(self, fault: Fault) -> bool:
        """Apply ``fault`` to this connection's stream; False when it is not streaming."""
        session = self.session
        if session is None or not session.inject(fault, self.clock.seconds()):
            return False
        self._after()
        return True

    def shut_down(self) -> None:
        """A fast shutdown reaches this connection's backend (WalSenderSession.shut_down)."""
        session = self.session
        if session is not None:
            session.shut_down(self.clock.seconds())
            self._after()

    def wake(self) -> None:
        """More WAL was written: stream it if this connection waits at the old end (or
        go on creating a slot that waited for transactions to end)."""
        session = self.session
        if session is not None and session.waits_for_wal:
            session.wake()
            self._after()

    def _after(self) -> None:
        """Flush the session's output, then act on what it asks for."""
        session = self.session
        if session is None:
            return
        self._send(session.data_to_send())
        if session.take_start_tls():
            self._transport().startTLS(self.factory.tls_context())
        if session.close_requested:
            self._cancel_timer()
            self._transport().loseConnection()
            return
        if self._auth_timer is not None and session.phase not in _UNAUTHENTICATED:
            if self._auth_timer.active():
                self._auth_timer.cancel()
            self._auth_timer = None
        self._pump()
        self._reschedule()

    def _pump_soon(self) -> None:
        if self._pump_call is None or not self._pump_call.active():
            self._pump_call = self.clock.callLater(0, self._pump_turn)

    def _pump_turn(self) -> None:
        self._pump_call = None
        self._pump()
        self._reschedule()

    def _pump(self) -> None:
        session = self.session
        if session is None:
            return
        for _ in range(_CHUNKS_PER_TURN):
            if self._paused or not session.can_produce:
                break
            session.produce(CHUNK_SIZE, self.clock.seconds())
            self._send(session.data_to_send())
            if session.close_requested:
                self._transport().loseConnection()
                return
        else:
            if not self._paused and session.can_produce:
                self._pump_soon()
        # Producing may have ended the stream (an error): flush any reply.
        self._send(session.data_to_send())

    def _cancel_timer(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _reschedule(self) -> None:
        self._cancel_timer()
        session = self.session
        if session is None or session.closed:
            return
        deadline = session.next_deadline()
        if deadline is not None:
            delay = max(0.0, deadline - self.clock.seconds())
            self._timer = self.clock.callLater(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        session = self.session
        if session is None:
            return
        session.tick(self.clock.seconds())
        self._after()


class WalSenderFactory(Factory):
    """Builds :class:`WalSenderProtocol` s sharing one config and one server state."""

    protocol = WalSenderProtocol

    def __init__(
        self,
        config: SessionConfig,
        state: ServerState,
        clock: Clock,
        *,
        tls: TLSFiles | None = None,
        log: Callable[[str], None] | None = None,
        save_interval: float = SAVE_INTERVAL,
        authentication_timeout: float = AUTHENTICATION_TIMEOUT,
        snapshot_interval: float = LOG_SNAPSHOT_INTERVAL,
    ) -> None:
        self.config = config
        self.state = state
        #: Seconds a client has from connecting to the end of authentication; 0: no limit.
        self.authentication_timeout = authentication_timeout
        self.clock = clock
        self.tls = tls
        self.log: Callable[[str], None] = log or (lambda _line: None)
        self._tls_context: Any = None
        #: Open connections, oldest first.
        self.protocols: list[WalSenderProtocol] = []
        #: Sessions whose connection ended while they did not read it (a slot creation
        #: waiting for transactions): woken by WAL writes until they end.
        self.detached: list[WalSenderSession] = []
        self._stopping = False
        self._stop_mode: str | None = None  # a signal's shutdown under way (stop())
        #: Fires once a :meth:`stop` has ended every connection.
        self.stop_deferred: Deferred[None] = Deferred()
        #: Connections accepted so far.
        self.connections = 0
        if tls is not None:
            config.tls = True
        state.coalesce_saves(clock.callLater, save_interval, self.log)
        wal = getattr(config.source, "wal", None)
        #: Writes a served script's live WAL (None: a recording, or nothing served).
        self.wal_writer = (
            WalWriter(wal, state, clock, self._wal_written, self.log, snapshot_interval)
            if wal is not None
            else None
        )
        if self.wal_writer is not None:
            config.log_running_xacts = self.wal_writer.log_running_xacts
            config.checkpoint = self.wal_writer.online_checkpoint
            config.catalog_step = self.wal_writer.catalog_step

    def startFactory(self) -> None:  # noqa: N802 - Twisted's name
        self._stopping = False
        if self.wal_writer is not None:
            self.wal_writer.start_bgwriter()
            self.wal_writer.check()  # a script may start with a wait_for step

    def stopFactory(self) -> None:  # noqa: N802 - Twisted's name
        if self.wal_writer is not None:
            self.wal_writer.stop()
        self._stopping = True
        self._end_detached()
        self.state.flush()

    def _wal_written(self) -> None:
        for protocol in list(self.protocols):
            protocol.wake()
        for session in list(self.detached):
            session.wake()
        self.detached = [s for s in self.detached if s.detached]

    def detach(self, session: WalSenderSession) -> None:
        """Keep ``session``, whose connection ended, until it notices (:meth:`_wal_written`);
        a server that stops ends it at once."""
        self.detached = [s for s in self.detached if s.detached]
        self.detached.append(session)
        if self._stopping:
            self._end_detached()

    def _end_detached(self) -> None:
        """The server stops: backends still running without a client end with it."""
        for session in self.detached:
            session.end()
        self.detached = []

    def tls_context(self) -> Any:
        if self._tls_context is None:
            if self.tls is None:  # pragma: no cover - the session only asks when configured
                raise RuntimeError("TLS requested but no certificate configured")
            self._tls_context = self.tls.context_factory(self.config.major)
        return self._tls_context

    def buildProtocol(self, addr: object) -> WalSenderProtocol:  # noqa: N802 - Twisted's name
        return WalSenderProtocol(self)

    def connected(self, protocol: WalSenderProtocol) -> None:
        self.connections += 1
        self.protocols.append(protocol)

    def disconnected(self, protocol: WalSenderProtocol) -> None:
        if protocol in self.protocols:
            self.protocols.remove(protocol)

    def inject(self, fault: Fault) -> bool:
        """Apply ``fault`` to the newest streaming connection now (True), or else to the
        next stream that starts (False). FaultError for a fault the served source cannot
        take (a ``timeline_switch`` at no record's end)."""
        check = getattr(self.config.source, "check_fault", None)
        if check is not None:
            check(fault)
        for protocol in reversed(self.protocols):
            if protocol.inject(fault):
                return True
        self.config.next_faults.append(fault)
        return False

    def restart(
        self,
        timeout: float,
        while_down: Callable[[], Any] | None = None,
        *,
        immediate: bool = False,
    ) -> Deferred[None]:
        """Restart as ``pg_ctl restart -m fast`` does (:meth:`shut_down`, then
        :meth:`start_again` once every connection has ended), or ``-m immediate``
        (:meth:`crash`); ``while_down`` runs in between (it may return a Deferred: the
        fixture reopens its port there). Fires when the server takes connections again;
        TimeoutError if connections are left after ``timeout`` seconds (a client
        answering without confirming holds a walsender, on PostgreSQL too), the server
        still shutting down."""
        done: Deferred[None] = Deferred()
        deadline = self.clock.seconds() + timeout
        if immediate:
            self.crash()
        else:
            self.shut_down()

        def down() -> None:
            if not self.protocols:
                ending = maybeDeferred(while_down) if while_down is not None else succeed(None)
                ending.addCallback(lambda _: self.start_again(clean=not immediate))
                ending.chainDeferred(done)
            elif self.clock.seconds() < deadline:
                self.clock.callLater(_POLL, down)
            else:
                done.errback(
                    TimeoutError(
                        f"the server did not shut down within {timeout:g}s: "
                        f"{len(self.protocols)} connection(s) left, walsenders waiting "
                        "for their clients to confirm everything sent"
                    )
                )

        down()
        return done

    def stop(self, mode: str) -> Deferred[None]:
        """Stop as the postmaster does on a signal (``pmdie``): ``smart`` (SIGTERM)
        refuses new connections and lets everything else go on until the last regular
        session ends, then goes on as ``fast`` (SIGINT, :meth:`shut_down`);
        ``immediate`` (SIGQUIT) is :meth:`crash`. A stronger mode than the one under
        way takes over, a weaker one changes nothing. Fires once every connection has
        ended (a walsender whose client never confirms holds it until the replication
        timeout, as on PostgreSQL)."""
        rank = SHUTDOWN_MODES.index(mode)
        if self._stop_mode is not None and rank <= SHUTDOWN_MODES.index(self._stop_mode):
            return self.stop_deferred
        first = self._stop_mode is None
        self._stop_mode = mode
        if mode == "immediate":
            self.crash()
        elif mode == "fast":
            self.shut_down()
        else:
            self.state.smart_shutdown = True
        if first:
            self._wait_stopped()
        return self.stop_deferred

    @property
    def stop_mode(self) -> str | None:
        """The mode of the shutdown :meth:`stop` began (None before one)."""
        return self._stop_mode

    @property
    def regular_sessions(self) -> int:
        """What a smart shutdown waits for: backends that are not walsenders, and
        connections still authenticating (PostgreSQL marks a backend a walsender only
        once it starts; authentication_timeout bounds the wait for them)."""
        starting = sum(
            p.session is not None and p.session.phase in _UNAUTHENTICATED for p in self.protocols
        )
        return self.state.regular_backends + starting

    def _wait_stopped(self) -> None:
        if self._stop_mode == "smart" and not self.regular_sessions:
            self._stop_mode = "fast"
            self.shut_down()
        if self.protocols or self._stop_mode == "smart":
            self.clock.callLater(_POLL, self._wait_stopped)
        else:
            self.stop_deferred.callback(None)

    def shut_down(self) -> None:
        """Begin a fast shutdown: new connections get 57P03; open transactions roll back
        (their backends write abort records, which walsenders still decode); then every
        backend is told (WalSenderSession.shut_down)."""
        self.state.shutting_down = True
        if self.wal_writer is not None:
            self.wal_writer.abort_open()
        for protocol in list(self.protocols):
            protocol.shut_down()
        self._end_detached()

    def crash(self) -> None:
        """An immediate shutdown (``pg_ctl stop -m immediate``, or the server killed):
        every connection is dropped at once, without a message (measured on 14-18: the
        client reads the close), and transactions still open never end."""
        self.state.shutting_down = True
        if self.wal_writer is not None:
            self.wal_writer.crash_open()
        for protocol in list(self.protocols):
            transport: Any = protocol.transport
            if transport is not None:
                transport.abortConnection()
        self._end_detached()

    def start_again(self, *, clean: bool = True) -> None:
        """The shutdown checkpoint (after a crash, the end-of-recovery one) is written:
        the end of WAL moves past its record, 120 bytes on 14-18. Slots come back as the
        major saved them: all of memory after a clean shutdown of 17+, else their
        confirmed_flush as last saved. New connections are taken again."""
        if self.wal_writer is not None:
            self.wal_writer.checkpoint()
            self.wal_writer.start_bgwriter()
        self.state.restarted(saved_at_shutdown=clean and self.config.major >= 17)
        self.log("database system is ready to accept connections (restarted)")

    def disconnect_all(self) -> None:
        """Drop every open connection (a server stopping)."""
        for protocol in list(self.protocols):
            transport: Any = protocol.transport
            if transport is not None:
                transport.abortConnection()
        # Their connectionLost comes later: a waiting slot creation's session is ended then.
        self._stopping = True
        self._end_detached()


def listen(reactor: Any, description: str, factory: WalSenderFactory) -> Deferred[IListeningPort]:
    """Listen on an endpoint description (``tcp:0:interface=127.0.0.1``, ``unix:/path``)."""
    endpoint: Any = serverFromString(reactor, description)  # type: ignore[no-untyped-call]
    listening: Deferred[IListeningPort] = endpoint.listen(factory)
    return listening


def build_service(
    description: str, reactor: Any, factory: WalSenderFactory
) -> StreamServerEndpointService:
    """A Twisted service serving ``factory`` on an endpoint description."""
    endpoint = serverFromString(reactor, description)  # type: ignore[no-untyped-call]
    return StreamServerEndpointService(endpoint, factory)  # type: ignore[no-untyped-call]
