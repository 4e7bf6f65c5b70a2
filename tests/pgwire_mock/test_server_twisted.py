"""The Twisted adapter: StringTransport, task.Clock, flow control."""

from __future__ import annotations

from pathlib import Path

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from codec.replication import PrimaryKeepalive, XLogData, decode_server_copy_data
from codec.wire import BackendReader, CopyData, Query, ReadyForQuery, StartupMessage
from pgwire_mock.server.protocol import CHUNK_SIZE, WalSenderFactory, WalSenderProtocol
from pgwire_mock.server.session import SessionConfig
from pgwire_mock.server.source import Emit, RecordingSource
from pgwire_mock.server.state import PublicationState, ServerState

GOLDEN = Path(__file__).parent.parent / "data" / "golden"


class BigSource:
    """A long stream: many 1 KiB logical messages."""

    start_lsn = 0x1000000
    major = None
    slots = ()
    publications = (PublicationState("p", all_tables=True),)

    def __init__(self, count: int) -> None:
        self.count = count
        self.pulled = 0

    def events(self, options: object, major: int, from_lsn: int):  # type: ignore[no-untyped-def]
        for i in range(self.count):
            self.pulled += 1
            yield Emit(self.start_lsn + i * 8, self.start_lsn + i * 8, b"M" + b"x" * 1024)


class BufferingTransport(StringTransport):
    """Pauses its producer above a high-water mark, like a real transport's write buffer."""

    high_water = 4 * CHUNK_SIZE

    def write(self, data: bytes) -> None:
        super().write(data)
        if self.producer is not None and len(self.value()) > self.high_water:
            self.producer.pauseProducing()


def setup(
    source: object, **config: object
) -> tuple[WalSenderProtocol, StringTransport, Clock, list[str]]:
    clock = Clock()
    clock.advance(1_700_000_000)
    state = ServerState()
    state.wal_lsn = source.start_lsn  # type: ignore[attr-defined]
    state.declare(source.slots, source.publications)  # type: ignore[attr-defined]
    log: list[str] = []
    factory = WalSenderFactory(
        SessionConfig(major=16, source=source, **config), state, clock, log=log.append
    )  # type: ignore[arg-type]
    protocol = factory.buildProtocol(None)
    transport = BufferingTransport()
    protocol.makeConnection(transport)
    return protocol, transport, clock, log


def messages(transport: StringTransport) -> list[object]:
    reader = BackendReader()
    reader.feed(transport.value())
    transport.clear()
    out: list[object] = []
    for m in reader:
        out.append(decode_server_copy_data(bytes(m.data)) if isinstance(m, CopyData) else m)
    return out


def login_and_start(protocol: WalSenderProtocol, transport: StringTransport) -> None:
    protocol.dataReceived(StartupMessage((("user", "u"), ("replication", "database"))).encode())
    protocol.dataReceived(Query("CREATE_REPLICATION_SLOT s LOGICAL pgoutput").encode())
    assert messages(transport)[-1] == ReadyForQuery("I")
    protocol.dataReceived(
        Query(
            "START_REPLICATION SLOT s LOGICAL 0/0 (proto_version '1', publication_names 'p')"
        ).encode()
    )


def test_the_protocol_registers_as_a_streaming_producer() -> None:
    protocol, transport, _, log = setup(BigSource(1))
    assert transport.producer is protocol
    assert transport.streaming
    assert any("connection opened" in line for line in log)


def test_a_paused_transport_stops_production() -> None:
    """When the client stops reading, the transport pauses the protocol, which stops
    pulling from the session: memory stays bounded; resuming continues the stream."""
    source = BigSource(10_000)
    protocol, transport, clock, _ = setup(source)
    login_and_start(protocol, transport)
    clock.advance(0)
    pulled = source.pulled
    assert 0 < pulled < 10_000
    assert len(transport.value()) <= BufferingTransport.high_water + CHUNK_SIZE + 2048
    clock.advance(1)
    assert source.pulled == pulled  # paused: nothing more is produced
    while source.pulled < 10_000:
        transport.clear()  # the client reads everything
        protocol.resumeProducing()
        clock.advance(0)
    assert isinstance(messages(transport)[-1], PrimaryKeepalive)


def test_keepalive_and_timeout_with_a_fake_clock() -> None:
    source = RecordingSource.from_file(GOLDEN / "pg16" / "streaming.v2-stream.jsonl")
    protocol, transport, clock, log = setup(
        source, wal_sender_timeout=10.0, idle_keepalive_interval=0.0
    )
    protocol.dataReceived(StartupMessage((("user", "u"), ("replication", "database"))).encode())
    protocol.dataReceived(Query("CREATE_REPLICATION_SLOT s LOGICAL pgoutput").encode())
    protocol.dataReceived(
        Query(
            "START_REPLICATION SLOT s LOGICAL 0/0 (proto_version '2', publication_names "
            "'pgwm_streaming', streaming 'on')"
        ).encode()
    )
    out = messages(transport)
    assert any(isinstance(m, XLogData) for m in out)
    clock.advance(5)
    pings = messages(transport)
    assert len(pings) == 1 and isinstance(pings[0], PrimaryKeepalive) and pings[0].reply_requested
    clock.advance(5)
    assert transport.disconnecting
    assert messages(transport) == []
    assert any("replication timeout" in line for line in log)
    protocol.connectionLost(None)
    assert clock.getDelayedCalls() == []
