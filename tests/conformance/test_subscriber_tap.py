"""conformance.subscriber_tap's relay keeps the order in which connections' bytes came:
what an apply worker sent before it went (its Terminate) reaches the publisher before
the next worker's connection does, as without a relay. A relay thread per connection let
a late thread's bytes through after the next connection (about 3 in 100 here), and once
in CI the next worker's START_REPLICATION, which the publisher then refused."""

from __future__ import annotations

import selectors
import socket
import threading
from collections.abc import Iterator

import pytest

from codec.replication import XLogData
from codec.wire import CopyBothResponse, CopyData
from conformance.subscriber_tap import Tap

_GREETING = b"startup"
_TERMINATE = b"X\x00\x00\x00\x04"


class _Publisher:
    """A one-thread server, as the fake's reactor: it logs, in order, each connection
    accepted and each read, and answers a greeting."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.events: list[tuple[int, bytes]] = []  # (connection number, b"accept" or data)
        self.lock = threading.Lock()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.listener, selectors.EVENT_READ, 0)
        self._stopped = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        accepted = 0
        while not self._stopped:
            for key, _ in self._selector.select(0.1):
                if key.data == 0:
                    conn, _ = self.listener.accept()
                    accepted += 1
                    self._log(accepted, b"accept")
                    self._selector.register(conn, selectors.EVENT_READ, accepted)
                    continue
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                data = sock.recv(1 << 16)
                self._log(key.data, data)
                if not data:
                    self._selector.unregister(sock)
                    sock.close()
                elif data.startswith(_GREETING):
                    sock.sendall(b"ok")

    def _log(self, number: int, event: bytes) -> None:
        with self.lock:
            self.events.append((number, event))

    def stop(self) -> None:
        self._stopped = True
        self._thread.join()
        self.listener.close()


@pytest.fixture
def publisher() -> Iterator[_Publisher]:
    server = _Publisher()
    yield server
    server.stop()


def _greet(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(_GREETING)
    assert sock.recv(2) == b"ok"
    return sock


def test_a_connections_last_bytes_reach_the_publisher_before_the_next_connection(
    publisher: _Publisher,
) -> None:
    rounds = 100
    with Tap(f"host=127.0.0.1 port={publisher.port}") as tap:
        port = int(tap.conninfo.split("port=")[1].split()[0])
        for _ in range(rounds):
            leaving = _greet(port)
            leaving.sendall(_TERMINATE)
            leaving.close()
            _greet(port).close()  # the next worker, at once
    late = []
    with publisher.lock:
        events = list(publisher.events)
    for gone, coming in ((2 * i + 1, 2 * i + 2) for i in range(rounds)):
        terminate = events.index((gone, _TERMINATE))
        accepted = events.index((coming, b"accept"))
        if terminate > accepted:
            late.append(gone)
    assert late == []


def _xlog(payload: bytes) -> bytes:
    return CopyData(XLogData(0x1000, 0x1000, 0, payload).encode()).encode()


def test_what_the_publisher_sends_after_the_subscriber_hung_up_is_kept() -> None:
    """A walsender sends a decoded transaction whole before it reads the Terminate of a
    subscriber that failed at its first change: the relay keeps the rest (here sent only
    after the Terminate came, the slowest case) until the publisher hangs up."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    sent_after: list[bytes] = []

    def publish() -> None:
        conn, _ = listener.accept()
        with conn:
            assert conn.recv(len(_GREETING)) == _GREETING
            conn.sendall(CopyBothResponse().encode() + _xlog(b"first"))
            assert conn.recv(len(_TERMINATE)) == _TERMINATE
            rest = _xlog(b"second") + _xlog(b"third")
            conn.sendall(rest)
            sent_after.append(rest)
            assert conn.recv(1) == b""  # the relay passed the hang-up on

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    with Tap(f"host=127.0.0.1 port={port}") as tap:
        sock = socket.create_connection(
            ("127.0.0.1", int(tap.conninfo.split("port=")[1].split()[0]))
        )
        sock.sendall(_GREETING)
        reader = b""
        while len(reader) < len(CopyBothResponse().encode() + _xlog(b"first")):
            reader += sock.recv(1 << 16)
        sock.sendall(_TERMINATE)
        sock.close()
        thread.join(5)
        assert sent_after
        deadline = 50
        while tap.received[0] != [b"first", b"second", b"third"] and deadline:
            threading.Event().wait(0.1)
            deadline -= 1
        assert tap.received == [[b"first", b"second", b"third"]]
    listener.close()
