"""A CREATE_REPLICATION_SLOT that waits for a transaction (PostgreSQL's rule for where a
new slot starts) while its client goes away, driven without a network: the Twisted
protocol over a StringTransport, the live WAL written between the client's bytes.

PostgreSQL's walsender does not read its client while the snapshot builder waits on a
transaction's lock; once the transaction ends it reads WAL, and while it waits for WAL it
reads what the client sent meanwhile (WalSndWaitForWal, ProcessRepliesIfAny). A
Terminate found there ends it before ReplicationSlotPersist: the slot, still
ephemeral, is dropped and nothing is answered (measured on 14, 17 and 18). The same
story over real sockets: test_open_transaction.py."""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from codec.wire import BackendReader, DataRow, Query, ReadyForQuery, StartupMessage, Terminate
from pgwire_mock.script import Script, column, insert
from pgwire_mock.server.live import WalWriter
from pgwire_mock.server.protocol import WalSenderFactory, WalSenderProtocol
from pgwire_mock.server.session import SessionConfig
from pgwire_mock.server.source import ScriptSource
from pgwire_mock.server.state import ServerState

TABLE = "public.t"


def serve() -> tuple[WalSenderFactory, WalWriter]:
    script = (
        Script(pg_version=16)
        .table(TABLE, columns=[column("id", "int4", key=True), column("v", "text")])
        .publication("pub", tables=[TABLE])
    )
    source = ScriptSource(script)
    state = ServerState(new_slot_lsn=None)  # new slots start at the end of WAL
    state.wal_lsn = source.start_lsn
    state.declare(source.slots, source.publications)
    factory = WalSenderFactory(SessionConfig(major=16, source=source), state, Clock())
    assert factory.wal_writer is not None
    return factory, factory.wal_writer


def connect(factory: WalSenderFactory) -> tuple[WalSenderProtocol, StringTransport]:
    protocol = factory.buildProtocol(None)
    transport = StringTransport()
    protocol.makeConnection(transport)
    startup = StartupMessage((("user", "u"), ("database", "postgres"), ("replication", "database")))
    protocol.dataReceived(startup.encode())
    assert isinstance(answers(transport)[-1], ReadyForQuery)
    return protocol, transport


def answers(transport: StringTransport) -> list[object]:
    reader = BackendReader()
    reader.feed(transport.value())
    transport.clear()
    return list(reader)


def test_a_terminate_sent_while_the_slot_waits_drops_it_when_the_wait_ends() -> None:
    """Read only once the transaction ended, the Terminate ends the walsender: the slot
    is dropped, nothing is answered, and the connection closes."""
    factory, writer = serve()
    txn = writer.begin()
    writer.write(txn, [insert(TABLE, id=1, v="open")])
    protocol, transport = connect(factory)
    protocol.dataReceived(Query("CREATE_REPLICATION_SLOT gone LOGICAL pgoutput").encode())
    protocol.dataReceived(Terminate().encode())
    assert "gone" in factory.state.creating  # listed while it waits
    assert answers(transport) == [] and not transport.disconnecting
    writer.finish(txn, rollback=False)
    assert "gone" not in factory.state.creating and "gone" not in factory.state.slots
    assert answers(transport) == [] and transport.disconnecting


def test_without_a_terminate_the_slot_is_created_once_the_wait_ends() -> None:
    """The same without the Terminate: the slot is made, and the command answers."""
    factory, writer = serve()
    txn = writer.begin()
    writer.write(txn, [insert(TABLE, id=1, v="open")])
    protocol, transport = connect(factory)
    protocol.dataReceived(Query("CREATE_REPLICATION_SLOT made LOGICAL pgoutput").encode())
    assert answers(transport) == []
    writer.finish(txn, rollback=False)
    assert "made" in factory.state.slots and not transport.disconnecting
    replies = answers(transport)
    assert [type(m) for m in replies][-1] is ReadyForQuery
    rows = [m for m in replies if isinstance(m, DataRow)]
    assert len(rows) == 1 and rows[0].values[0] == b"made"
