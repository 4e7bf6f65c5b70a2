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
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import serverFromString
from twisted.internet.interfaces import IListeningPort, IPushProducer
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure
from zope.interface import implementer  # type: ignore[import-untyped]  # no stubs shipped

from pgwire_mock.server.faults import Fault
from pgwire_mock.server.live import WalWriter
from pgwire_mock.server.session import SessionConfig, WalSenderSession
from pgwire_mock.server.state import ServerState

__all__ = [
    "CHUNK_SIZE",
    "SAVE_INTERVAL",
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
SAVE_INTERVAL: Final = 0.1
"""Seconds between writes of a state file (``ServerState.coalesce_saves``)."""
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

    def context_factory(self) -> Any:
        """A Twisted TLS context factory (needs pyOpenSSL: ``twisted[tls]``)."""
        from twisted.internet import ssl  # noqa: PLC0415 - pyOpenSSL is optional

        pem = self.certificate.read_bytes() + b"\n" + self.key.read_bytes()
        return ssl.PrivateCertificate.loadPEM(pem).options()  # type: ignore[no-untyped-call]


@implementer(IPushProducer)
class WalSenderProtocol(Protocol):
    """One client connection."""

    def __init__(self, factory: WalSenderFactory) -> None:
        self.factory = factory
        self.clock = factory.clock
        self.session: WalSenderSession | None = None
        self._paused = False
        self._timer: DelayedCall | None = None
        self._pump_call: DelayedCall | None = None
        self._peer = "?"

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
        host, port = getattr(peer, "host", None), getattr(peer, "port", None)
        if isinstance(host, str) and isinstance(port, int):  # not a Unix-domain socket
            session.client_address = (host, port)
        self.session = session
        factory.connected(self)
        self._log("connection opened")
        transport.registerProducer(self, True)

    def dataReceived(self, data: bytes) -> None:  # noqa: N802 - Twisted's name
        session = self.session
        if session is None:
            return
        session.receive_data(data, self.clock.seconds())
        self._after()
        # An acknowledgement or a new slot may meet a wait_for step's condition.
        writer = self.factory.wal_writer
        if writer is not None:
            writer.check()

    def connectionLost(self, reason: Failure | None = None) -> None:  # noqa: N802
        for call in (self._timer, self._pump_call):
            if call is not None and call.active():
                call.cancel()
        self._timer = self._pump_call = None
        self.factory.disconnected(self)
        session = self.session
        if session is not None and not session.closed:
            session.receive_eof(self.clock.seconds())
        self._log("connection closed")

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
        pid = self.session.pid if self.session is not None else "-"
        self.factory.log(f"[{self._peer} pid={pid}] {line}")

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

    def wake(self) -> None:
        """More WAL was written: stream it if this connection waits at the old end."""
        session = self.session
        if session is not None and session.streaming:
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
    ) -> None:
        self.config = config
        self.state = state
        self.clock = clock
        self.tls = tls
        self.log: Callable[[str], None] = log or (lambda _line: None)
        self._tls_context: Any = None
        #: Open connections, oldest first.
        self.protocols: list[WalSenderProtocol] = []
        #: Connections accepted so far.
        self.connections = 0
        if tls is not None:
            config.tls = True
        state.coalesce_saves(clock.callLater, save_interval, self.log)
        wal = getattr(config.source, "wal", None)
        #: Writes a served script's live WAL (None: a recording, or nothing served).
        self.wal_writer = (
            WalWriter(wal, state, clock, self._wal_written, self.log) if wal is not None else None
        )

    def startFactory(self) -> None:  # noqa: N802 - Twisted's name
        if self.wal_writer is not None:
            self.wal_writer.check()  # a script may start with a wait_for step

    def stopFactory(self) -> None:  # noqa: N802 - Twisted's name
        if self.wal_writer is not None:
            self.wal_writer.stop()
        self.state.flush()

    def _wal_written(self) -> None:
        for protocol in list(self.protocols):
            protocol.wake()

    def tls_context(self) -> Any:
        if self._tls_context is None:
            if self.tls is None:  # pragma: no cover - the session only asks when configured
                raise RuntimeError("TLS requested but no certificate configured")
            self._tls_context = self.tls.context_factory()
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
        next stream that starts (False)."""
        for protocol in reversed(self.protocols):
            if protocol.inject(fault):
                return True
        self.config.next_faults.append(fault)
        return False

    def disconnect_all(self) -> None:
        """Drop every open connection (a server stopping)."""
        for protocol in list(self.protocols):
            transport: Any = protocol.transport
            if transport is not None:
                transport.abortConnection()


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
