"""The replication client against real PostgreSQL 14–17 (the ``pg_server`` fixture).

Each test uses its own slot, table and publication names and removes them afterwards.
Publications are ``FOR TABLE`` the test's own table, not ``FOR ALL TABLES``: other
tests write to the same server at the same time, and their changes would otherwise
interleave with the exact message sequences asserted here.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from codec import pgoutput
from codec.values import LSN
from conformance import provision
from conformance.provision import Server
from pgwire_mock.client import (
    CommandResult,
    Keepalive,
    Notice,
    Ready,
    ReplicationConnection,
    ServerError,
    State,
    StreamEnded,
    StreamStarted,
    WalData,
    capture_via_walsender,
    pgoutput_options,
)

# pgoutput's LOGICALREP_PROTO_MAX_VERSION_NUM per major.
MAX_PROTO = {14: 2, 15: 3, 16: 4, 17: 4, 18: 4}
INT4_OID, INT8_OID = 23, 20


@dataclass
class Names:
    slot: str
    table: str
    publication: str


@pytest.fixture
def names(pg_server: Server) -> Iterator[Names]:
    """Unique names; the slot, publication and table are dropped afterwards if they exist."""
    tag = uuid.uuid4().hex[:10]
    created = Names(f"client_slot_{tag}", f"client_t_{tag}", f"client_pub_{tag}")
    yield created
    with pg_server.connect() as conn:
        for _ in range(50):  # a just-closed walsender may hold the slot for a moment
            row = conn.execute(
                "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (created.slot,)
            ).fetchone()
            if row is None:
                break
            if not row[0]:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (created.slot,))
                break
            time.sleep(0.1)
        conn.execute(f'DROP PUBLICATION IF EXISTS "{created.publication}"')
        conn.execute(f'DROP TABLE IF EXISTS "{created.table}"')


@pytest.fixture
def published(pg_server: Server, names: Names) -> Names:
    with pg_server.connect() as conn:
        conn.execute(f'CREATE TABLE "{names.table}" (id int PRIMARY KEY, v text)')
        conn.execute(f'CREATE PUBLICATION "{names.publication}" FOR TABLE "{names.table}"')
    return names


def insert_rows(server: Server, table: str, ids: list[int]) -> LSN:
    """One committed transaction per id; returns the WAL position after the last one."""
    with server.connect() as conn:
        for i in ids:
            conn.execute(f'INSERT INTO "{table}" VALUES (%s, %s)', (i, f"row {i}"))
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    return LSN.parse(str(row[0]))


def confirmed_flush(server: Server, slot: str) -> LSN:
    with server.connect() as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (slot,),
        ).fetchone()
    assert row is not None
    return LSN.parse(str(row[0]))


def test_identify_system_row_shape(pg_server: Server) -> None:
    """IDENTIFY_SYSTEM: one row of four columns; timeline is int4 on 14/15, int8 on 16/17."""
    with ReplicationConnection.connect(pg_server.replication_dsn) as conn:
        assert conn.session.server_version_major == pg_server.version
        result = conn.execute("IDENTIFY_SYSTEM")
        identity = conn.identify_system()
    assert result.command_tag == "IDENTIFY_SYSTEM"
    assert result.column_names == ("systemid", "timeline", "xlogpos", "dbname")
    types = [column.type_oid for column in result.columns]
    assert types == [25, INT4_OID if pg_server.version < 16 else INT8_OID, 25, 25]
    assert all(c.table_oid == 0 and c.column_number == 0 for c in result.columns)
    assert identity.timeline == 1
    assert identity.dbname == "postgres"
    with pg_server.connect() as sql:
        row = sql.execute("SELECT system_identifier::text FROM pg_control_system()").fetchone()
    assert row is not None and identity.systemid == row[0]


def test_startup_reports_the_parameters_clients_check(pg_server: Server) -> None:
    with ReplicationConnection.connect(pg_server.replication_dsn) as conn:
        params = conn.session.parameters
        assert conn.session.process_id is not None
        assert conn.show("wal_sender_timeout") == "1min"
    assert params["integer_datetimes"] == "on"
    assert params["client_encoding"] == "UTF8"
    assert params["DateStyle"].startswith("ISO")
    assert params["application_name"] == "pgwire-mock"
    assert ("scram_iterations" in params) == (pg_server.version >= 16)


def test_create_slot_returns_name_point_null_snapshot_and_plugin(
    pg_server: Server, names: Names
) -> None:
    """CREATE_REPLICATION_SLOT in the version's syntax gives one all-text row."""
    with ReplicationConnection.connect(pg_server.replication_dsn) as conn:
        result = conn.execute("IDENTIFY_SYSTEM")
        before = LSN.parse(str(result.rows[0][2]))
        slot = conn.create_slot(names.slot)
        with pytest.raises(ServerError) as info:
            conn.create_slot(names.slot)
        assert info.value.sqlstate == "42710"
        conn.drop_slot(names.slot)
        assert conn.identify_system().dbname == "postgres"  # still usable
    assert slot.slot_name == names.slot
    assert slot.consistent_point >= before
    assert slot.snapshot_name is None
    assert slot.output_plugin == "pgoutput"


def test_stream_decode_confirm_and_stop(pg_server: Server, published: Names) -> None:
    """Committed inserts stream as Begin/Relation/Insert/Commit; a flush status moves
    confirmed_flush_lsn; CopyDone brings the connection back to idle."""
    dsn = pg_server.replication_dsn
    with ReplicationConnection.connect(dsn, decode_pgoutput=True, timeout=20) as conn:
        slot = conn.create_slot(published.slot)
        insert_rows(pg_server, published.table, [1, 2, 3])
        options = pgoutput_options(published.publication, proto_version=1)
        data: list[WalData] = []
        events = conn.start_replication(published.slot, 0, options)
        for event in events:
            if isinstance(event, WalData):
                data.append(event)
                if sum(isinstance(d.message, pgoutput.Commit) for d in data) == 3:
                    break
        kinds = [type(d.message).__name__ for d in data]
        assert (
            kinds == ["Begin", "Relation", "Insert", "Commit"] + ["Begin", "Insert", "Commit"] * 2
        )
        relation = data[1].message
        assert isinstance(relation, pgoutput.Relation)
        assert relation.relation_name == published.table
        assert [c.name for c in relation.columns] == ["id", "v"]
        inserts = [d.message for d in data if isinstance(d.message, pgoutput.Insert)]
        assert [i.new_tuple for i in inserts] == [("1", "row 1"), ("2", "row 2"), ("3", "row 3")]
        commits = [d for d in data if isinstance(d.message, pgoutput.Commit)]
        for commit in commits:
            assert isinstance(commit.message, pgoutput.Commit)
            # The walsender stamps a commit's XLogData with the commit record's end.
            assert commit.wal_start == commit.wal_end == commit.message.end_lsn
            assert commit.wal_start > slot.consistent_point
        # Confirm only the first two transactions.
        assert confirmed_flush(pg_server, published.slot) == slot.consistent_point
        target = commits[1].wal_end
        conn.send_status(flush=target)
        stopped = conn.stop()
        assert StreamEnded(by_server=False) in stopped
        tags = [e.command_tag for e in stopped if isinstance(e, CommandResult)]
        assert tags == ["COPY 0", "START_REPLICATION"]
        assert stopped[-1] == Ready("I")
        # Anything else is data or keepalives still in flight (a keepalive may even
        # follow the server's CopyDone).
        others = [e for e in stopped if not isinstance(e, (StreamEnded, CommandResult, Ready))]
        assert all(isinstance(e, (WalData, Keepalive)) for e in others)
        assert conn.session.state is State.IDLE
        assert confirmed_flush(pg_server, published.slot) == target
        assert conn.identify_system().dbname == "postgres"
        conn.drop_slot(published.slot)


def test_restarting_from_the_slot_skips_confirmed_transactions(
    pg_server: Server, published: Names
) -> None:
    """After confirming the first transaction, a new connection from 0/0 starts with the second."""
    with ReplicationConnection.connect(pg_server.replication_dsn, decode_pgoutput=True) as conn:
        conn.create_slot(published.slot)
    until = insert_rows(pg_server, published.table, [1, 2])
    options = pgoutput_options(published.publication, proto_version=1)
    first = capture_via_walsender(
        pg_server.replication_dsn, published.slot, 0, options, until_lsn=until
    )
    decoder = pgoutput.Decoder()
    messages = [decoder.decode(payload) for _, payload in first]
    assert [type(m).__name__ for m in messages] == [
        "Begin",
        "Relation",
        "Insert",
        "Commit",
        "Begin",
        "Insert",
        "Commit",
    ]
    last_commit = messages[-1]
    assert isinstance(last_commit, pgoutput.Commit)
    assert confirmed_flush(pg_server, published.slot) == last_commit.end_lsn
    until = insert_rows(pg_server, published.table, [3])
    second = capture_via_walsender(
        pg_server.replication_dsn, published.slot, 0, options, until_lsn=until
    )
    decoder = pgoutput.Decoder()
    inserts = [m for m in (decoder.decode(p) for _, p in second) if isinstance(m, pgoutput.Insert)]
    assert [i.new_tuple for i in inserts] == [("3", "row 3")]


def test_capture_with_idle_timeout_returns_everything_and_releases_the_slot(
    pg_server: Server, published: Names
) -> None:
    with ReplicationConnection.connect(pg_server.replication_dsn) as conn:
        conn.create_slot(published.slot)
    insert_rows(pg_server, published.table, [7])
    options = pgoutput_options(published.publication, proto_version=1)
    captured = capture_via_walsender(
        pg_server.replication_dsn, published.slot, 0, options, idle_timeout=1.5
    )
    assert [p[:1] for _, p in captured] == [b"B", b"R", b"I", b"C"]
    positions = [lsn for lsn, payload in captured if payload[:1] != b"R"]
    assert positions == sorted(positions)
    with pg_server.connect() as sql:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            row = sql.execute(
                "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (published.slot,)
            ).fetchone()
            assert row is not None
            if not row[0]:
                break
            time.sleep(0.05)
        assert row is not None and row[0] is False


def test_missing_slot_fails_before_streaming(pg_server: Server) -> None:
    """If the slot does not exist, START_REPLICATION fails with 42704 and no stream starts."""
    with ReplicationConnection.connect(pg_server.replication_dsn) as conn:
        with pytest.raises(ServerError) as info:
            conn.start_replication("no_such_slot_xyz", 0, pgoutput_options("p", proto_version=1))
        assert info.value.sqlstate == "42704"
        assert info.value.message == 'replication slot "no_such_slot_xyz" does not exist'
        assert conn.session.state is State.IDLE
        assert conn.identify_system().timeline == 1


@pytest.mark.parametrize("excess", [1, 5])
def test_too_high_proto_version_is_0a000(pg_server: Server, names: Names, excess: int) -> None:
    """The wording changed in 16: "we only support" (14/15), "server only supports" (16/17)."""
    top = MAX_PROTO[pg_server.version]
    asked = top + excess
    with ReplicationConnection.connect(pg_server.replication_dsn) as conn:
        conn.create_slot(names.slot)
        with pytest.raises(ServerError) as info:
            conn.start_replication(names.slot, 0, pgoutput_options("p", proto_version=asked))
        assert conn.session.state is State.IDLE
        # The highest supported version is accepted (the stream starts, then we stop).
        events = conn.start_replication(names.slot, 0, pgoutput_options("p", proto_version=top))
        assert isinstance(next(events), StreamStarted)
        conn.stop()
        conn.drop_slot(names.slot)
    who = "we only support" if pg_server.version < 16 else "server only supports"
    assert info.value.sqlstate == "0A000"
    assert info.value.message == (
        f"client sent proto_version={asked} but {who} protocol {top} or lower"
    )


def test_missing_publication_is_reported_after_copy_both(
    pg_server: Server, published: Names
) -> None:
    """42704 for a missing publication comes once a change is decoded, inside the stream;
    18 sends a WARNING there instead and streams on."""
    with ReplicationConnection.connect(pg_server.replication_dsn, timeout=20) as conn:
        conn.create_slot(published.slot)
        events = conn.start_replication(
            published.slot, 0, pgoutput_options("no_such_publication", proto_version=1)
        )
        assert isinstance(next(events), StreamStarted)
        insert_rows(pg_server, published.table, [1])
        if pg_server.version >= 18:
            notice = next(e for e in events if isinstance(e, Notice))
            assert (notice.sqlstate, notice.message) == (
                "55000",
                'skipped loading publication "no_such_publication"',
            )
            conn.stop()
            conn.drop_slot(published.slot)
            return
        with pytest.raises(ServerError) as info:
            for _ in events:
                pass
        assert conn.session.state is State.IDLE
        assert conn.identify_system().dbname == "postgres"
        conn.drop_slot(published.slot)
    assert info.value.sqlstate == "42704"
    assert info.value.message == 'publication "no_such_publication" does not exist'


def test_second_stream_on_the_same_connection_ends_at_once(pg_server: Server, names: Names) -> None:
    """A walsender quirk on 14–17: StartLogicalReplication does not reset the CopyDone
    flags, so after a stream ended with CopyDone a new START_REPLICATION on the same
    connection completes at once (COPY 0 without CopyDone). New streams need new
    connections."""
    options = pgoutput_options("p", proto_version=1)
    with ReplicationConnection.connect(pg_server.replication_dsn) as conn:
        conn.create_slot(names.slot)
        assert isinstance(next(conn.start_replication(names.slot, 0, options)), StreamStarted)
        conn.stop()
        events = list(conn.start_replication(names.slot, 0, options))
        assert conn.session.state is State.IDLE
        assert events[0] == StreamStarted()
        assert StreamEnded(by_server=True) in events
        tags = [e.command_tag for e in events if isinstance(e, CommandResult)]
        assert tags == ["COPY 0", "START_REPLICATION"]
        with contextlib.suppress(ServerError):
            conn.drop_slot(names.slot)


# --- password authentication, on a server of our own ---------------------------------

_HBA = """\
local   all          all                          trust
host    all          postgres     127.0.0.1/32    trust
host    all          md5_user     127.0.0.1/32    md5
host    replication  md5_user     127.0.0.1/32    md5
host    all          plain_user   127.0.0.1/32    password
host    replication  plain_user   127.0.0.1/32    password
host    all          all          127.0.0.1/32    scram-sha-256
host    replication  all          127.0.0.1/32    scram-sha-256
"""


@pytest.fixture(scope="module")
def password_server(pg_server: Server) -> Iterator[provision.Cluster]:
    """A separate cluster of the same major whose pg_hba.conf asks for passwords.

    The shared servers trust loopback, and rewriting their pg_hba.conf would change
    what every other test sees.
    """
    cluster = provision.Cluster(provision.install(pg_server.version).installation).start()
    try:
        (cluster.data_dir / "pg_hba.conf").write_text(_HBA)
        with cluster.connect() as conn:
            conn.execute("SET password_encryption = 'md5'")
            conn.execute("CREATE ROLE md5_user LOGIN REPLICATION PASSWORD 'md5 secret'")
            conn.execute("CREATE ROLE plain_user LOGIN REPLICATION PASSWORD 'plain'")
            conn.execute("SET password_encryption = 'scram-sha-256'")
            conn.execute("CREATE ROLE scram_user LOGIN REPLICATION PASSWORD 'pâss wörd'")
            conn.execute("SELECT pg_reload_conf()")
        time.sleep(0.5)  # the postmaster reloads pg_hba.conf asynchronously
        yield cluster
    finally:
        cluster.stop()


@pytest.mark.parametrize(
    ("user", "password"),
    [("scram_user", "pâss wörd"), ("md5_user", "md5 secret"), ("plain_user", "plain")],
)
def test_password_authentication(
    password_server: provision.Cluster, user: str, password: str
) -> None:
    """SCRAM-SHA-256 (server signature checked), MD5 and cleartext against the real server."""
    host, port = password_server.host, password_server.port
    with ReplicationConnection.connect(
        f"postgresql://{user}@{host}:{port}/postgres", password=password
    ) as conn:
        assert conn.identify_system().dbname == "postgres"
    with pytest.raises(ServerError) as info:
        ReplicationConnection.connect(
            host=host, port=port, user=user, dbname="postgres", password="wrong"
        )
    assert info.value.sqlstate == "28P01"
    assert info.value.fatal
