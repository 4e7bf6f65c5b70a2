"""The fake walsender, served in this process for the conformance suite.

The matrix starts a fake per cell, so starting one must cost milliseconds, not the second
or so a ``pgwire-mock serve`` subprocess needs to import Twisted. :class:`FakeHost` runs
one private Twisted reactor (never the global one: library code must not install it) in a
daemon thread for the life of the process; :meth:`FakeHost.serve` listens on a fresh
loopback port with a given :class:`~pgwire_mock.server.SessionConfig` and
:class:`~pgwire_mock.server.ServerState`, and stops listening when the ``with`` block
ends. Clients connect over real TCP, exactly as they would to ``pgwire-mock serve``.

A reactor cannot be restarted once stopped, hence one per process (:func:`host`).
The state belongs to the reactor thread while connections are open; read it from the
caller's thread only once the client has finished.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from codec.values import LSN
from pgwire_mock.server import ServerState, SessionConfig
from pgwire_mock.server.protocol import WalSenderFactory, listen

__all__ = ["FakeHost", "FakeServer", "host", "write_recording"]

_HOST: Final = "127.0.0.1"
_CALL_TIMEOUT: Final = 10.0


@dataclass(slots=True)
class FakeServer:
    """One listening fake: where it is, its shared state and its log lines."""

    port: int
    config: SessionConfig
    state: ServerState
    log: list[str] = field(default_factory=list)

    @property
    def host(self) -> str:
        return _HOST

    def dsn(self, *, replication: bool = True, user: str = "postgres") -> str:
        """A libpq key=value DSN (``replication=database`` unless told otherwise)."""
        extra = " replication=database" if replication else ""
        return f"host={_HOST} port={self.port} user={user} dbname=postgres{extra}"


class FakeHost:
    """A private reactor in a daemon thread that fake walsenders listen on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reactor: Any = None

    def _ensure_running(self) -> Any:
        with self._lock:
            if self._reactor is None:
                # A reactor of our own, not installed as twisted.internet.reactor.
                from twisted.internet.selectreactor import SelectReactor  # noqa: PLC0415

                reactor: Any = SelectReactor()
                started = threading.Event()
                reactor.callWhenRunning(started.set)
                thread = threading.Thread(
                    target=reactor.run,
                    kwargs={"installSignalHandlers": False},
                    name="pgwire-mock-fake-reactor",
                    daemon=True,
                )
                thread.start()
                if not started.wait(_CALL_TIMEOUT):
                    raise RuntimeError("the fake's reactor thread did not start")
                self._reactor = reactor
            return self._reactor

    def call(self, function: Any, *args: object) -> Any:
        """Run ``function(*args)`` in the reactor thread and wait for its (deferred) result."""
        from twisted.internet.threads import blockingCallFromThread  # noqa: PLC0415

        reactor = self._ensure_running()
        return blockingCallFromThread(reactor, function, *args)

    @contextlib.contextmanager
    def serve(self, config: SessionConfig, state: ServerState) -> Iterator[FakeServer]:
        """Listen on a free loopback port until the block ends (open connections stay)."""
        reactor = self._ensure_running()
        server = FakeServer(0, config, state)
        factory = WalSenderFactory(config, state, reactor, log=server.log.append)
        port = self.call(listen, reactor, f"tcp:0:interface={_HOST}", factory)
        server.port = int(port.getHost().port)
        try:
            yield server
        finally:
            self.call(port.stopListening)


_HOST_SINGLETON: FakeHost | None = None
_HOST_LOCK: Final = threading.Lock()


def host() -> FakeHost:
    """The process's :class:`FakeHost` (its reactor thread starts on first use)."""
    global _HOST_SINGLETON  # noqa: PLW0603 - one reactor per process, see the module doc
    with _HOST_LOCK:
        if _HOST_SINGLETON is None:
            _HOST_SINGLETON = FakeHost()
        return _HOST_SINGLETON


def write_recording(
    path: Path,
    meta: Mapping[str, object],
    messages: Iterable[tuple[LSN | int, bytes]],
) -> Path:
    """Write a JSON Lines recording (``{"meta": ...}`` then ``{"lsn", "data"}`` lines),
    the format ``pgwire-mock capture`` writes and ``pgwire-mock serve`` replays."""
    with path.open("w", encoding="ascii") as out:
        out.write(json.dumps({"meta": dict(meta)}) + "\n")
        for lsn, payload in messages:
            out.write(json.dumps({"lsn": str(LSN(lsn)), "data": payload.hex()}) + "\n")
    return path
