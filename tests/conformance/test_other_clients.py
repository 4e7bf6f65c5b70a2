"""Real third-party replication clients read the same stream as our own client.

For each client (pgjdbc, pg-logical-replication, a jackc/pgconn program) and each server
version: a few committed transactions are read once by the client and once by
:func:`pgwire_mock.client.capture_via_walsender`, from two slots created together; the
payloads must be byte-identical, node's own decoding must agree with
:class:`codec.pgoutput.Decoder`, and the slot must have moved to what the client
acknowledged. The clients are built by ``scripts/install-clients``; a missing build is an
error (outside CI, ``PGWIRE_MOCK_SKIP_CLIENTS=1`` turns it into a skip).

Today the walsender is real PostgreSQL (the ``pg_server`` fixture); pointing the same
clients at the fake only needs its DSN.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import pytest

from codec.pgoutput import (
    Begin,
    Commit,
    Decoder,
    Delete,
    Insert,
    PgOutputMessage,
    Relation,
    TupleData,
    Update,
)
from codec.values import LSN
from conformance import clients
from conformance.provision import Server
from pgwire_mock.client import capture_via_walsender

pytestmark = pytest.mark.slow

PROTO_VERSION = 1  # pg-logical-replication's parser knows protocol 1 and 2 only
UNIX_TO_PG_EPOCH_US = 946_684_800_000_000
IDENTITY = {"default": "d", "nothing": "n", "full": "f", "index": "i"}


@dataclass(frozen=True, slots=True)
class Stream:
    """A publication, two slots created together, and what the reference client read."""

    server: Server
    publication: str
    slot: str
    reference: list[tuple[LSN, bytes]]
    last_commit: LSN


def _slot_state(server: Server, slot: str) -> tuple[bool, LSN] | None:
    with server.connect() as conn:
        row = conn.execute(
            "SELECT active, confirmed_flush_lsn::text FROM pg_replication_slots"
            " WHERE slot_name = %s",
            (slot,),
        ).fetchone()
    return None if row is None else (bool(row[0]), LSN(str(row[1])))


def _drop(server: Server, name: str) -> None:
    with server.connect() as conn:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
            " WHERE slot_name IN (%s, %s) AND NOT active",
            (name, f"{name}_ref"),
        )
        conn.execute(f"DROP PUBLICATION IF EXISTS {name}")
        conn.execute(f"DROP TABLE IF EXISTS {name}")


@pytest.fixture
def stream(pg_server: Server, client: str) -> Iterator[Stream]:
    """Three committed transactions (insert, update incl. a key change, delete) over
    int, text, numeric, bool, timestamptz, bytea and jsonb columns and NULLs."""
    name = f"occ_{client}"
    _drop(pg_server, name)
    with pg_server.connect() as conn:
        conn.execute(
            f"CREATE TABLE {name} (id int PRIMARY KEY, name text, price numeric,"
            " ok bool, at timestamptz, raw bytea, doc jsonb)"
        )
        conn.execute(f"CREATE PUBLICATION {name} FOR TABLE {name}")
        conn.execute(
            "SELECT pg_create_logical_replication_slot(%s, 'pgoutput'),"
            " pg_create_logical_replication_slot(%s, 'pgoutput')",
            (name, f"{name}_ref"),
        )
        with conn.transaction():
            conn.execute(
                f"INSERT INTO {name} VALUES"
                " (1, 'one', 1.50, true, '2024-02-29 12:34:56.789+00', '\\x00ff', '{\"a\": [1]}'),"
                " (2, 'två', NULL, false, NULL, NULL, 'null')"
            )
        with conn.transaction():
            conn.execute(f"UPDATE {name} SET name = 'uno', price = price * 2 WHERE id = 1")
            conn.execute(f"UPDATE {name} SET id = 20 WHERE id = 2")
        with conn.transaction():
            conn.execute(f"DELETE FROM {name} WHERE id = 1")
        end = LSN(str(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]))  # type: ignore[index]
    try:
        options = {"proto_version": str(PROTO_VERSION), "publication_names": name}
        reference = capture_via_walsender(
            pg_server.dsn, f"{name}_ref", 0, options, until_lsn=end, idle_timeout=10
        )
        decoder = Decoder()
        kinds = [type(decoder.decode(payload)).__name__ for _, payload in reference]
        assert kinds.count("Commit") == 3, kinds
        assert kinds[-1] == "Commit", kinds
        yield Stream(pg_server, name, name, reference, reference[-1][0])
    finally:
        _wait_inactive(pg_server, name)
        _drop(pg_server, name)


def _wait_inactive(server: Server, slot: str, timeout: float = 15.0) -> LSN | None:
    """The slot's confirmed_flush_lsn once no walsender holds it (None: no such slot)."""
    deadline = time.monotonic() + timeout
    while True:
        state = _slot_state(server, slot)
        if state is None:
            return None
        active, confirmed = state
        if not active:
            return confirmed
        if time.monotonic() > deadline:
            raise AssertionError(f"slot {slot} still active after {timeout}s")
        time.sleep(0.05)


def test_client_reads_the_same_payloads_and_moves_the_slot(client: str, stream: Stream) -> None:
    """The client sees byte-identical XLogData payloads, at the same wal_start positions, up
    to the last commit; after it exits 0 the slot's confirmed_flush_lsn is the LSN it
    acknowledged last, which covers that commit."""
    run = clients.run_client(
        client,
        dsn=stream.server.dsn,
        slot=stream.slot,
        publication=stream.publication,
        proto_version=PROTO_VERSION,
        until_lsn=stream.last_commit,
        idle_timeout=20,
    )
    assert run.returncode == 0
    assert [p for _, p in run.payloads] == [p for _, p in stream.reference]
    assert [lsn for lsn, _ in run.payloads] == [lsn for lsn, _ in stream.reference]
    assert run.acknowledged is not None, run.stderr
    assert run.acknowledged >= stream.last_commit
    assert _wait_inactive(stream.server, stream.slot) == run.acknowledged
    if clients.CLIENTS[client].decodes:
        assert len(run.decoded) == len(run.payloads)
        decoder = Decoder()
        relations: dict[int, Relation] = {}
        for (_, payload), theirs in zip(run.payloads, run.decoded, strict=True):
            ours = decoder.decode(payload)
            if isinstance(ours, Relation):
                relations[ours.oid] = ours
            _assert_same_view(ours, theirs, relations)


def test_missing_slot_is_reported_with_42704(client: str, pg_server: Server) -> None:
    """START_REPLICATION on a slot that does not exist: the client prints the server's
    SQLSTATE 42704 and message and exits 1."""
    with pytest.raises(clients.ClientError) as caught:
        clients.run_client(
            client,
            dsn=pg_server.dsn,
            slot="occ_no_such_slot",
            publication="occ_no_such_publication",
            proto_version=PROTO_VERSION,
            expect_messages=1,
            idle_timeout=20,
        )
    err = caught.value
    assert err.returncode == 1, err.stderr
    assert err.sqlstate == "42704", err.stderr
    assert err.message == 'replication slot "occ_no_such_slot" does not exist', err.stderr


# pg-logical-replication's decoded view against ours -----------------------------------


def _lsn_text(value: object) -> LSN:
    """The library prints LSNs as zero-padded ``XXXXXXXX/XXXXXXXX``."""
    assert isinstance(value, str), value
    return LSN(value.replace("00000000/", "0/") if value.startswith("00000000/") else value)


def _assert_same_view(
    ours: PgOutputMessage, theirs: dict[str, object], relations: dict[int, Relation]
) -> None:
    tag = theirs["tag"]
    if isinstance(ours, Begin):
        assert tag == "begin"
        assert _lsn_text(theirs["commitLsn"]) == ours.final_lsn
        assert theirs["xid"] == ours.xid
        assert int(str(theirs["commitTime"])) == ours.commit_timestamp + UNIX_TO_PG_EPOCH_US
    elif isinstance(ours, Commit):
        assert tag == "commit"
        assert theirs["flags"] == ours.flags
        assert _lsn_text(theirs["commitLsn"]) == ours.commit_lsn
        assert _lsn_text(theirs["commitEndLsn"]) == ours.end_lsn
        assert int(str(theirs["commitTime"])) == ours.commit_timestamp + UNIX_TO_PG_EPOCH_US
    elif isinstance(ours, Relation):
        assert tag == "relation"
        assert theirs["relationOid"] == ours.oid
        assert theirs["schema"] == ours.namespace
        assert theirs["name"] == ours.relation_name
        assert IDENTITY[str(theirs["replicaIdentity"])] == ours.replica_identity
        columns = theirs["columns"]
        assert isinstance(columns, list)
        assert [(c["flags"], c["name"], c["typeOid"], c["typeMod"]) for c in columns] == [
            (c.flags, c.name, c.type_oid, c.type_modifier) for c in ours.columns
        ]
    elif isinstance(ours, Insert):
        assert tag == "insert"
        relation = relations[ours.relation_oid]
        _assert_relation_ref(theirs, relation)
        _assert_same_tuple(theirs["new"], ours.new_tuple, relation)
    elif isinstance(ours, Update):
        assert tag == "update"
        relation = relations[ours.relation_oid]
        _assert_relation_ref(theirs, relation)
        _assert_same_tuple(theirs["new"], ours.new_tuple, relation)
        _assert_same_key(theirs["key"], ours.key_tuple, relation)
        assert (theirs["old"] is None) == (ours.old_tuple is None)
    elif isinstance(ours, Delete):
        assert tag == "delete"
        relation = relations[ours.relation_oid]
        _assert_relation_ref(theirs, relation)
        _assert_same_key(theirs["key"], ours.key_tuple, relation)
        assert (theirs["old"] is None) == (ours.old_tuple is None)
    else:
        raise AssertionError(f"the scenario sends no {type(ours).__name__}")


def _assert_relation_ref(theirs: dict[str, object], relation: Relation) -> None:
    ref = theirs["relation"]
    assert isinstance(ref, dict)
    assert ref["relationOid"] == relation.oid
    assert ref["name"] == relation.relation_name


def _assert_same_key(theirs: object, ours: TupleData | None, relation: Relation) -> None:
    if ours is None:
        assert theirs is None
        return
    assert isinstance(theirs, dict)
    key_columns = [i for i, c in enumerate(relation.columns) if c.flags & 1]
    assert set(theirs) == {relation.columns[i].name for i in key_columns}
    for i in key_columns:
        column = relation.columns[i]
        assert _typed(ours[i], column.type_oid) == theirs[column.name], column.name


def _assert_same_tuple(theirs: object, ours: TupleData, relation: Relation) -> None:
    assert isinstance(theirs, dict)
    assert list(theirs) == [c.name for c in relation.columns]
    for column, value in zip(relation.columns, ours, strict=True):
        assert _typed(value, column.type_oid) == theirs[column.name], column.name


def _typed(value: object, type_oid: int) -> object:
    """Our text value as node-postgres' type parsers (then JSON) present it."""
    if value is None:
        return None
    assert isinstance(value, str), value
    if type_oid == 23:  # int4
        return int(value)
    if type_oid == 16:  # bool
        return value == "t"
    if type_oid == 17:  # bytea: Buffer, printed as hex
        return value.removeprefix("\\x")
    if type_oid == 3802:  # jsonb: parsed
        return json.loads(value)
    if type_oid == 1184:  # timestamptz: a JS Date, millisecond precision, ISO in UTC
        moment = datetime.fromisoformat(value)
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    return value  # text, numeric (kept as text by node-postgres)
