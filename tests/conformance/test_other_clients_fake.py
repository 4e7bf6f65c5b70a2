"""Real third-party replication clients against the fake walsender, for every emulated major.

The fake (in this process, :mod:`conformance.fake`) replays a golden capture of real
PostgreSQL 14–17 (``tests/data/golden/pg<major>/<scenario>.v1.jsonl``, recorded through
the SQL interface) while emulating that major. Each client of :mod:`conformance.clients`
(pgjdbc, pg-logical-replication, a jackc/pgconn program) reads it up to its last Commit;
the payloads must be the recording's, byte for byte, at the positions a real walsender
would use, and once the client has gone the fake's slot must be confirmed exactly where
the client acknowledged (as ``pg_replication_slots`` on the fake says). A missing slot
must take each client down its 42704 error path. No real server is needed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from codec.values import LSN
from conformance import clients, fake
from conformance.checks import walsender_position_ok
from conformance.subjects import StreamMessage
from pgwire_mock.client import ReplicationConnection
from pgwire_mock.server import MAJORS, RecordingSource, ServerState, SessionConfig, SlotState

pytestmark = pytest.mark.slow

GOLDEN = Path(__file__).parent.parent / "data" / "golden"

SCENARIO = "replica_identity.v1"  # inserts, updates with old keys/tuples, deletes; proto 1
SLOT = "occ_fake"
PROTO_VERSION = 1  # pg-logical-replication's parser knows protocol 1 and 2 only


@dataclass(frozen=True, slots=True)
class Served:
    server: fake.FakeServer
    source: RecordingSource
    publication: str
    last_commit: LSN


@pytest.fixture(params=MAJORS, ids=[f"pg{m}" for m in MAJORS])
def served(request: pytest.FixtureRequest) -> Iterator[Served]:
    major: int = request.param
    source = RecordingSource.from_file(GOLDEN / f"pg{major}" / f"{SCENARIO}.jsonl")
    state = ServerState(wal_lsn=source.end_lsn)
    start = source.start_lsn
    state.declare([SlotState(SLOT, "pgoutput", state.database, start, start)], source.publications)
    commits = [e.lsn for e in source.entries if e.payload[:1] == b"C"]
    with fake.host().serve(SessionConfig(major=major, source=source), state) as server:
        yield Served(server, source, source.publications[0].name, LSN(commits[-1]))


def _slot_on_fake(server: fake.FakeServer, timeout: float = 15.0) -> LSN:
    """The fake's confirmed_flush_lsn for the slot once no walsender holds it, read with
    SQL on a replication connection like a client would."""
    deadline = time.monotonic() + timeout
    with ReplicationConnection.connect(server.dsn()) as conn:
        while True:
            result = conn.execute(
                "SELECT active, confirmed_flush_lsn FROM pg_replication_slots"
                f" WHERE slot_name = '{SLOT}'"
            )
            (active, confirmed) = result.rows[0]
            if active == "f":
                assert confirmed is not None
                return LSN(confirmed)
            assert time.monotonic() < deadline, f"slot {SLOT} still active after {timeout}s"
            time.sleep(0.05)


def test_client_reads_the_recording_from_the_fake(client: str, served: Served) -> None:
    """The client gets the recording's payloads byte for byte, each at the position a
    real walsender sends it at (the record's LSN, 0/0 for Relation messages), and the fake
    ends with the slot confirmed at the LSN the client acknowledged last."""
    run = clients.run_client(
        client,
        dsn=served.server.dsn(replication=False),
        slot=SLOT,
        publication=served.publication,
        proto_version=PROTO_VERSION,
        until_lsn=served.last_commit,
        idle_timeout=20,
    )
    recorded = [e for e in served.source.entries if e.lsn <= served.last_commit]
    assert [p for _, p in run.payloads] == [e.payload for e in recorded]
    reference = tuple(StreamMessage(LSN(e.lsn), e.payload) for e in recorded)
    for index, (lsn, _) in enumerate(run.payloads):
        assert walsender_position_ok(reference, index, lsn), (index, lsn, reference[index])
    assert run.acknowledged is not None, run.stderr
    assert run.acknowledged >= served.last_commit
    assert _slot_on_fake(served.server) == run.acknowledged


def test_missing_slot_is_reported_with_42704_by_the_fake(client: str, served: Served) -> None:
    """START_REPLICATION on a slot the fake does not have: the client prints SQLSTATE
    42704 and PostgreSQL's message, and exits 1."""
    with pytest.raises(clients.ClientError) as caught:
        clients.run_client(
            client,
            dsn=served.server.dsn(replication=False),
            slot="occ_no_such_slot",
            publication=served.publication,
            proto_version=PROTO_VERSION,
            expect_messages=1,
            idle_timeout=20,
        )
    err = caught.value
    assert err.returncode == 1, err.stderr
    assert err.sqlstate == "42704", err.stderr
    assert err.message == 'replication slot "occ_no_such_slot" does not exist', err.stderr
