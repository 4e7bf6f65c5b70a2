"""A TCP relay between PostgreSQL's subscriber and a publisher, for the subscriber stories.

It keeps what the publisher streamed on each connection (XLogData payloads, for
``subscriber_live.shape``) and can take one timing out of a story: where the subscriber
confirmed a streamed transaction that fails to apply. The apply worker reports the last
position it received each time it has read all there is (a Standby Status Update with
flush = that position when nothing it applied waits for a local flush), and the walsender
takes it as confirmed_flush. A stream block's Stream Stop carries its last change's LSN,
so if the subscriber reads the last block's Stream Stop and its Stream Commit apart, it
confirms that change before the commit fails, and a walsender started again may not
stream the transaction before reaching it (ReorderBufferCanStartStreaming): the whole
transaction comes in one block. Read together, nothing inside is confirmed and the
blocks come as the first time. :class:`Tap` with ``confirm_before_stream_commit`` holds
each Stream Commit until the subscriber has reported what came before it, so both
servers see the first case, every run.
"""

from __future__ import annotations

import socket
import threading
from contextlib import suppress

from codec.errors import DecodeError
from codec.replication import (
    StandbyStatusUpdate,
    XLogData,
    decode_client_copy_data,
    decode_server_copy_data,
)
from codec.wire import BackendReader, CopyBothResponse, CopyData, FrontendReader

__all__ = ["Tap"]

#: pgoutput's Stream Commit message type.
_STREAM_COMMIT = ord("c")
#: How long a held Stream Commit waits for the subscriber's report.
_HOLD_TIMEOUT = 10.0


class _Connection:
    """One relayed connection: what the publisher streamed, and how far the subscriber
    said it had written."""

    def __init__(self) -> None:
        self.payloads: list[bytes] = []
        self.reported = 0
        self.changed = threading.Condition()

    def report(self, lsn: int) -> None:
        with self.changed:
            self.reported = max(self.reported, lsn)
            self.changed.notify_all()

    def wait_for_report(self, lsn: int) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: self.reported >= lsn, _HOLD_TIMEOUT)


class Tap:
    """A TCP relay between the subscriber and a publisher (SSL and GSS encryption off)
    that keeps, for each connection, the XLogData payloads the publisher sent; with
    ``confirm_before_stream_commit``, see the module docstring. :attr:`held` lists, for
    each Stream Commit held, whether the subscriber's report came in time."""

    def __init__(self, conninfo: str, *, confirm_before_stream_commit: bool = False) -> None:
        from psycopg import conninfo as info  # noqa: PLC0415 - a test-time dependency

        params = info.conninfo_to_dict(conninfo)
        self.upstream = (str(params["host"]), int(str(params["port"])))
        self.listener = socket.create_server(("127.0.0.1", 0))
        port = self.listener.getsockname()[1]
        self.conninfo = info.make_conninfo(
            conninfo, host="127.0.0.1", port=str(port), sslmode="disable", gssencmode="disable"
        )
        self.hold = confirm_before_stream_commit
        self.lock = threading.Lock()
        self.connections: list[_Connection] = []
        self.held: list[bool] = []
        threading.Thread(target=self._accept, name="subscriber tap", daemon=True).start()

    @property
    def received(self) -> list[list[bytes]]:
        with self.lock:
            return [list(c.payloads) for c in self.connections]

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
                server = socket.create_connection(self.upstream)
            except OSError:
                return
            connection = _Connection()
            with self.lock:
                self.connections.append(connection)
            for target, args in (
                (self._from_subscriber, (client, server, connection)),
                (self._from_publisher, (server, client, connection)),
            ):
                threading.Thread(target=target, args=args, daemon=True).start()

    def _from_subscriber(
        self, source: socket.socket, sink: socket.socket, connection: _Connection
    ) -> None:
        reader: FrontendReader | None = FrontendReader(max_message_size=1 << 30)
        try:
            while data := source.recv(1 << 16):
                sink.sendall(data)
                if reader is None:
                    continue
                try:
                    reader.feed(data)
                    for message in reader:
                        if isinstance(message, CopyData):
                            status = decode_client_copy_data(message.data)
                            if isinstance(status, StandbyStatusUpdate):
                                connection.report(status.written_lsn)
                except DecodeError:
                    reader = None  # a password exchange the reader was not told of
        except OSError:
            pass
        finally:
            _shut(source, sink)

    def _from_publisher(
        self, source: socket.socket, sink: socket.socket, connection: _Connection
    ) -> None:
        reader = BackendReader(max_message_size=1 << 30)
        keep = True
        streaming = False  # CopyData after CopyBothResponse; a table sync's COPY is not
        last_start = 0  # the last XLogData's position
        try:
            while data := source.recv(1 << 16):
                if not keep:
                    sink.sendall(data)
                    continue
                sent = 0  # how much of data is sent
                try:
                    reader.feed(data)
                    while (message := reader.next_message()) is not None:
                        streaming = streaming or isinstance(message, CopyBothResponse)
                        if not (streaming and isinstance(message, CopyData)):
                            continue
                        copied = decode_server_copy_data(message.data)
                        if not isinstance(copied, XLogData):
                            continue
                        with self.lock:
                            connection.payloads.append(copied.data)
                        if self.hold and copied.data[:1] == bytes((_STREAM_COMMIT,)):
                            # Send what came before this message (a part of it sent
                            # with an earlier chunk is no use alone), then wait.
                            end = len(data) - reader.buffered
                            start = max(sent, end - 5 - len(message.data))
                            sink.sendall(data[sent:start])
                            sent = start
                            reported = connection.wait_for_report(last_start)
                            with self.lock:
                                self.held.append(reported)
                        last_start = copied.wal_start
                except DecodeError:
                    with self.lock:
                        connection.payloads.append(b"undecodable")  # shape() fails on it
                    keep = False
                sink.sendall(data[sent:])
        except OSError:
            pass
        finally:
            _shut(source, sink)

    def close(self) -> None:
        self.listener.close()

    def __enter__(self) -> Tap:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _shut(*ends: socket.socket) -> None:
    for end in ends:
        with suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)
