"""A CREATE_REPLICATION_SLOT that waits for a transaction (PostgreSQL's rule for where a
new slot starts) while its client goes away, driven without a network: the Twisted
protocol over a StringTransport, the live WAL written between the client's bytes.

PostgreSQL's walsender does not read its client while the snapshot builder waits on a
transaction's lock; once the transaction ends it reads WAL, and while it waits for WAL it
reads what the client sent meanwhile (WalSndWaitForWal, ProcessRepliesIfAny). A
Terminate found there, or the end of the connection, ends it before
ReplicationSlotPersist: the slot, still ephemeral, is dropped and nothing is answered
(measured on 14, 17 and 18). Until then a client that is gone changes nothing: the slot
stays listed, active for the walsender, which stays in pg_stat_replication. The same
story over real sockets: test_open_transaction.py; against real PostgreSQL:
test_slot_creation_client_gone_postgres.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from codec.wire import BackendReader, DataRow, Query, ReadyForQuery, StartupMessage, Terminate
from pgwire_mock.script import (
    CommitPrepared,
    RollbackPrepared,
    Script,
    Transaction,
    column,
    insert,
)
from pgwire_mock.script.wal import OpenTxn
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


def lose(protocol: WalSenderProtocol) -> None:
    """The client's connection ends (a FIN or a reset), as Twisted reports it."""
    protocol.connectionLost(Failure(ConnectionDone()))


Ending = Callable[[WalWriter, OpenTxn], object]
ENDINGS: dict[str, Ending] = {
    "commit": lambda w, t: w.finish(t, rollback=False),
    "rollback": lambda w, t: w.finish(t, rollback=True),
    "commit prepared": lambda w, _t: w.append([CommitPrepared("g1")]),
    "rollback prepared": lambda w, _t: w.append([RollbackPrepared("g1")]),
}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_a_client_gone_while_the_slot_waits_leaves_it_listed_until_the_transaction_ends(
    ending: str,
) -> None:
    """The walsender reads nothing while it waits: the slot stays listed, active for it,
    and the backend stays (pg_stat_replication, max_wal_senders) until the transaction
    (or the prepared one's COMMIT / ROLLBACK PREPARED) ends; then both are gone, the
    slot dropped, not made."""
    factory, writer = serve()
    txn = writer.begin()
    writer.write(txn, [insert(TABLE, id=1, v="open")])
    if "prepared" in ending:
        writer.finish(txn, prepare="g1")
    protocol, transport = connect(factory)
    assert protocol.session is not None
    session, pid = protocol.session, protocol.session.pid
    protocol.dataReceived(Query("CREATE_REPLICATION_SLOT gone LOGICAL pgoutput").encode())
    lose(protocol)
    state = factory.state
    assert state.creating["gone"].active_pid == pid
    assert pid in state.sessions and pid in state.backends
    assert factory.detached == [session] and factory.protocols == []
    writer.append([Transaction((insert(TABLE, id=2, v="other"),))])  # still waiting
    assert "gone" in state.creating and factory.detached == [session]
    ENDINGS[ending](writer, txn)
    assert "gone" not in state.creating and "gone" not in state.slots
    assert pid not in state.sessions and pid not in state.backends
    assert factory.detached == [] and answers(transport) == []


def test_a_client_gone_while_the_slot_waits_is_noticed_when_the_first_wait_ends() -> None:
    """A transaction that began while the slot waited would be waited for next (the
    second round), but the walsender reads its client before: the slot is dropped when
    the first transaction ends (measured on 17)."""
    factory, writer = serve()
    first = writer.begin()
    writer.write(first, [insert(TABLE, id=1, v="first")])
    protocol, _ = connect(factory)
    protocol.dataReceived(Query("CREATE_REPLICATION_SLOT gone LOGICAL pgoutput").encode())
    second = writer.begin()
    writer.write(second, [insert(TABLE, id=2, v="second")])
    lose(protocol)
    writer.finish(first, rollback=False)
    assert "gone" not in factory.state.creating and factory.detached == []
    writer.finish(second, rollback=False)
    assert "gone" not in factory.state.slots


def test_a_server_that_stops_ends_a_slot_creation_whose_client_is_gone() -> None:
    """Stopping the server does not wait for the transaction: the backend ends, its
    slot is dropped, nothing of it is left in the server state."""
    factory, writer = serve()
    txn = writer.begin()
    writer.write(txn, [insert(TABLE, id=1, v="open")])
    protocol, _ = connect(factory)
    assert protocol.session is not None
    pid = protocol.session.pid
    protocol.dataReceived(Query("CREATE_REPLICATION_SLOT gone LOGICAL pgoutput").encode())
    lose(protocol)
    assert factory.detached != []
    factory.stopFactory()
    state = factory.state
    assert factory.detached == [] and state.creating == {}
    assert pid not in state.sessions and pid not in state.backends
    writer.finish(txn, rollback=False)
    assert "gone" not in state.slots


def test_a_server_that_drops_its_connections_ends_their_slot_creations() -> None:
    """disconnect_all (a server stopping): the connection of a waiting slot creation is
    lost after it returns; the session is ended then, not kept waiting."""
    factory, writer = serve()
    txn = writer.begin()
    writer.write(txn, [insert(TABLE, id=1, v="open")])
    protocol, _ = connect(factory)
    protocol.dataReceived(Query("CREATE_REPLICATION_SLOT gone LOGICAL pgoutput").encode())
    factory.disconnect_all()
    lose(protocol)  # what the aborted transport reports next
    assert factory.detached == [] and factory.state.creating == {}
    assert factory.state.sessions == {}


def test_a_cancel_ends_a_slot_creation_whose_client_is_gone() -> None:
    """A cancel (a CancelRequest with the backend's key) still interrupts the wait: the
    slot is dropped with the error, and the walsender, reading next, finds its client
    gone and ends."""
    factory, writer = serve()
    txn = writer.begin()
    writer.write(txn, [insert(TABLE, id=1, v="open")])
    protocol, _ = connect(factory)
    session = protocol.session
    assert session is not None
    protocol.dataReceived(Query("CREATE_REPLICATION_SLOT gone LOGICAL pgoutput").encode())
    lose(protocol)
    session.cancel()
    state = factory.state
    assert session.closed and state.creating == {} and state.sessions == {}
    writer.finish(txn, rollback=False)
    assert "gone" not in state.slots and factory.detached == []
