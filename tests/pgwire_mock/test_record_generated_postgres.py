"""``record --snapshot`` of a table with a stored generated column that real PostgreSQL 18
publishes (``publish_generated_columns = stored``): the stream replays byte for byte,
the snapshot holds the generated column's values, as the stream's Relation lists it,
and the fake describes the publication to a subscriber as the real server did."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from codec.pgoutput import Decoder, Relation
from conformance import provision
from conformance.provision import Server
from pgwire_mock.client import ReplicationConnection, capture_via_walsender, pgoutput_options
from pgwire_mock.pytest_plugin import start_walsender
from pgwire_mock.record import record
from pgwire_mock.server.source import RecordingSource
from pgwire_mock.streamfile import read_stream

pytestmark = pytest.mark.postgres

# What an 18 subscriber asks of the publisher before it copies a table (tablesync.c).
_PUBLISHED = (
    "SELECT DISTINCT t.schemaname, t.tablename, t.attnames FROM "
    "pg_catalog.pg_publication_tables t WHERE t.pubname IN ('pgwm_rg_pub')"
)


def _ask(dsn: str) -> list[tuple[str | None, ...]]:
    with ReplicationConnection.connect(dsn + " replication=database") as conn:
        return list(conn.execute(_PUBLISHED).rows)


@pytest.fixture(scope="module")
def pg18() -> Iterator[Server]:
    reason = provision.opted_out()
    if reason:
        pytest.skip(reason)
    with provision.provide(18) as server:
        yield server


def test_a_recorded_generated_column_replays_and_is_in_the_snapshot(
    pg18: Server, tmp_path: Path
) -> None:
    out = tmp_path / "generated.jsonl"
    options = {k: str(v) for k, v in pgoutput_options(["pgwm_rg_pub"], proto_version=1).items()}
    with pg18.connect() as conn:
        conn.execute("DROP PUBLICATION IF EXISTS pgwm_rg_pub")
        conn.execute("DROP TABLE IF EXISTS pgwm_rg")
        conn.execute(
            "CREATE TABLE pgwm_rg (id int PRIMARY KEY, a int, "
            "b int GENERATED ALWAYS AS (a * 2) STORED)"
        )
        conn.execute("INSERT INTO pgwm_rg (id, a) VALUES (1, 10), (2, 20)")
        conn.execute(
            "CREATE PUBLICATION pgwm_rg_pub FOR TABLE pgwm_rg "
            "WITH (publish_generated_columns = stored)"
        )

        def after() -> None:
            conn.execute("INSERT INTO pgwm_rg (id, a) VALUES (3, 30)")
            conn.execute("UPDATE pgwm_rg SET a = 11 WHERE id = 1")

        try:
            count = record(
                pg18.dsn, "pgwm_rg_slot", out, options, snapshot=True, after_snapshot=after
            )
            real = conn.execute("SELECT id, a, b FROM pgwm_rg ORDER BY id").fetchall()
            real_published = _ask(pg18.dsn)
        finally:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = 'pgwm_rg_slot'"
            )
            conn.execute("DROP PUBLICATION pgwm_rg_pub")
            conn.execute("DROP TABLE pgwm_rg")
    assert count >= 6  # B R I C, B U C at least

    lines = [json.loads(line) for line in out.read_text().splitlines()]
    columns = lines[0]["meta"]["snapshot"]["tables"][0]["columns"]
    assert [(c["name"], c.get("generated")) for c in columns] == [
        ("id", None),
        ("a", None),
        ("b", "s"),
    ]
    assert [line["copy"] for line in lines if "table" in line] == ["1\t10\t20", "2\t20\t40"]

    with out.open("rb") as f:
        recorded = [entry.payload for entry in read_stream(f, str(out))]
    decoder = Decoder()
    relation = next(m for m in map(decoder.decode, recorded) if isinstance(m, Relation))
    assert [c.name for c in relation.columns] == ["id", "a", "b"]

    server = start_walsender(out, databases=["postgres"], slots=["replay"])
    try:
        dsn = f"host=127.0.0.1 port={server.port} user=postgres dbname=postgres"
        replayed = capture_via_walsender(dsn, "replay", 0, options, idle_timeout=1.0)
    finally:
        server.stop()
    assert [payload for _, payload in replayed] == recorded
    assert lines[0]["meta"]["publications"] == [
        {
            "name": "pgwm_rg_pub",
            "all_tables": False,
            "tables": ["public.pgwm_rg"],
            "insert": True,
            "update": True,
            "delete": True,
            "truncate": True,
            "generated_columns": "s",
        }
    ]
    server = start_walsender(out, databases=["postgres"], pg_version=18)
    try:
        fake_published = _ask(f"host=127.0.0.1 port={server.port} user=postgres dbname=postgres")
    finally:
        server.stop()
    assert real_published == [("public", "pgwm_rg", "{id,a,b}")]
    assert fake_published == real_published

    # The recorded snapshot, then the recorded stream: the real table, b included.
    source = RecordingSource.from_file(out)
    state = source.tables_at(1 << 62)["public.pgwm_rg"]  # type: ignore[attr-defined]
    assert [c.name for c in state.version.stored] == ["id", "a", "b"]
    assert sorted(state.rows) == [tuple(r) for r in real]
