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

One event loop relays every connection, so bytes reach the publisher in the order they
reached the relay: an apply worker that exits sends Terminate before the launcher starts
the next one, and the publisher must see that Terminate (and release the slot) before
the next worker's START_REPLICATION, as it does without a relay. With a thread per
connection, a thread the scheduler left waiting once let the new worker's command
through first ("replication slot … is active"), a timing neither server has alone.

When the subscriber hangs up (an apply error), the relay passes that on and keeps what
the publisher still sends until it hangs up too: a walsender sends a decoded transaction
whole before it reads the subscriber's Terminate, and whether the relay had read its
Commit when the subscriber left was the machine's timing (a CI run kept Begin, Relation,
Insert from PostgreSQL and the Commit as well from the fake).
"""

from __future__ import annotations

import asyncio
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
#: How much the relay reads at a time.
_CHUNK = 1 << 16
#: How long the relay keeps reading a publisher after the subscriber hung up.
_DRAIN_TIMEOUT = 10.0


class _Connection:
    """One relayed connection: what the publisher streamed, and how far the subscriber
    said it had written. Its condition belongs to the relay's event loop."""

    def __init__(self) -> None:
        self.payloads: list[bytes] = []
        self.reported = 0
        self.subscriber_gone = False
        self.changed = asyncio.Condition()

    async def report(self, lsn: int) -> None:
        async with self.changed:
            self.reported = max(self.reported, lsn)
            self.changed.notify_all()

    async def wait_for_report(self, lsn: int) -> bool:
        async with self.changed:
            try:
                await asyncio.wait_for(
                    self.changed.wait_for(lambda: self.reported >= lsn), _HOLD_TIMEOUT
                )
            except TimeoutError:
                return False
            return True


class Tap:
    """A TCP relay between the subscriber and a publisher (SSL and GSS encryption off)
    that keeps, for each connection, the XLogData payloads the publisher sent; with
    ``confirm_before_stream_commit``, see the module docstring. :attr:`held` lists, for
    each Stream Commit held, whether the subscriber's report came in time. Closing it
    stops new connections; those relayed end when their ends close."""

    def __init__(self, conninfo: str, *, confirm_before_stream_commit: bool = False) -> None:
        from psycopg import conninfo as info  # noqa: PLC0415 - a test-time dependency

        params = info.conninfo_to_dict(conninfo)
        self.upstream = (str(params["host"]), int(str(params["port"])))
        self.hold = confirm_before_stream_commit
        self.lock = threading.Lock()  # the lists below, read from other threads
        self.connections: list[_Connection] = []
        self.held: list[bool] = []
        self._relays = 0
        self._closed = False
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._run, name="subscriber tap", daemon=True).start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._relay, "127.0.0.1", 0), self._loop
        ).result()
        port = self._server.sockets[0].getsockname()[1]
        self.conninfo = info.make_conninfo(
            conninfo, host="127.0.0.1", port=str(port), sslmode="disable", gssencmode="disable"
        )

    @property
    def received(self) -> list[list[bytes]]:
        with self.lock:
            return [list(c.payloads) for c in self.connections]

    def _run(self) -> None:
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    async def _relay(self, client: asyncio.StreamReader, to_client: asyncio.StreamWriter) -> None:
        self._relays += 1
        try:
            try:
                server, to_server = await asyncio.open_connection(*self.upstream)
            except OSError:
                to_client.close()
                return
            connection = _Connection()
            with self.lock:
                self.connections.append(connection)
            ends = (to_client, to_server)
            await asyncio.gather(
                self._from_subscriber(client, to_server, connection, ends),
                self._from_publisher(server, to_client, connection, ends),
            )
        finally:
            self._relays -= 1
            self._stop_when_idle()

    async def _from_subscriber(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        connection: _Connection,
        ends: tuple[asyncio.StreamWriter, ...],
    ) -> None:
        reader: FrontendReader | None = FrontendReader(max_message_size=1 << 30)
        try:
            while data := await source.read(_CHUNK):
                sink.write(data)
                await sink.drain()
                if reader is None:
                    continue
                try:
                    reader.feed(data)
                    for message in reader:
                        if isinstance(message, CopyData):
                            status = decode_client_copy_data(message.data)
                            if isinstance(status, StandbyStatusUpdate):
                                await connection.report(status.written_lsn)
                except DecodeError:
                    reader = None  # a password exchange the reader was not told of
        except OSError:
            pass
        finally:
            connection.subscriber_gone = True
            to_client, to_server = ends
            to_client.close()
            # Pass the hang-up on, keep reading the publisher (_from_publisher), and close
            # it after a while if it does not hang up.
            with suppress(OSError, RuntimeError):
                to_server.write_eof()
            asyncio.get_running_loop().call_later(_DRAIN_TIMEOUT, to_server.close)

    async def _from_publisher(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        connection: _Connection,
        ends: tuple[asyncio.StreamWriter, ...],
    ) -> None:
        reader = BackendReader(max_message_size=1 << 30)
        keep = True
        streaming = False  # CopyData after CopyBothResponse; a table sync's COPY is not
        last_start = 0  # the last XLogData's position
        try:
            while data := await source.read(_CHUNK):
                if not keep:
                    await _forward(sink, data, connection)
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
                        commit = copied.data[:1] == bytes((_STREAM_COMMIT,))
                        if self.hold and commit and not connection.subscriber_gone:
                            # Send what came before this message (a part of it sent
                            # with an earlier chunk is no use alone), then wait.
                            end = len(data) - reader.buffered
                            start = max(sent, end - 5 - len(message.data))
                            await _forward(sink, data[sent:start], connection)
                            sent = start
                            reported = await connection.wait_for_report(last_start)
                            with self.lock:
                                self.held.append(reported)
                        last_start = copied.wal_start
                except DecodeError:
                    with self.lock:
                        connection.payloads.append(b"undecodable")  # shape() fails on it
                    keep = False
                await _forward(sink, data[sent:], connection)
        except OSError:
            pass
        finally:
            _close(ends)

    def _stop_when_idle(self) -> None:
        if self._closed and self._relays == 0:
            self._loop.stop()

    def close(self) -> None:
        def stop_accepting() -> None:
            self._closed = True
            self._server.close()
            self._stop_when_idle()

        with suppress(RuntimeError):  # closed twice: the loop may be gone
            self._loop.call_soon_threadsafe(stop_accepting)

    def __enter__(self) -> Tap:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


async def _forward(sink: asyncio.StreamWriter, data: bytes, connection: _Connection) -> None:
    """Relay publisher bytes to the subscriber, unless it has hung up."""
    if connection.subscriber_gone:
        return
    sink.write(data)
    await sink.drain()


def _close(ends: tuple[asyncio.StreamWriter, ...]) -> None:
    """One direction ended: close both sockets (after what is buffered for them), so
    the other direction ends too, as a relayed connection does."""
    for end in ends:
        end.close()
