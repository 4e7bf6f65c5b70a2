"""Provisioned (or user-given) servers are real PostgreSQL ready for logical decoding."""

from __future__ import annotations

import psycopg
import pytest

from conformance import provision

pytestmark = pytest.mark.postgres


def test_server_reports_its_version(pg_server: provision.Server) -> None:
    """SHOW server_version names the major the fixture was asked for."""
    with pg_server.connect() as conn:
        row = conn.execute("SHOW server_version").fetchone()
    assert row is not None
    assert str(row[0]).split(".")[0] == str(pg_server.version)
    assert row[0] == pg_server.full_version


def test_wal_level_is_logical(pg_server: provision.Server) -> None:
    """The server runs with wal_level=logical, so logical slots can be created."""
    with pg_server.connect() as conn:
        row = conn.execute("SHOW wal_level").fetchone()
    assert row == ("logical",)


def test_pgoutput_decodes_through_sql(pg_server: provision.Server) -> None:
    """pg_logical_slot_get_binary_changes returns Begin, Relation, Insert, Commit bytes."""
    with pg_server.connect() as conn:
        conn.execute("DROP PUBLICATION IF EXISTS pgwm_t_pub")
        conn.execute("DROP TABLE IF EXISTS pgwm_t_provision")
        conn.execute("CREATE TABLE pgwm_t_provision (id int PRIMARY KEY, v text)")
        conn.execute("CREATE PUBLICATION pgwm_t_pub FOR TABLE pgwm_t_provision")
        conn.execute("SELECT pg_create_logical_replication_slot('pgwm_t_slot', 'pgoutput', true)")
        conn.execute("INSERT INTO pgwm_t_provision VALUES (1, 'one')")
        rows = conn.execute(
            "SELECT lsn::text, xid::text, data FROM pg_logical_slot_get_binary_changes("
            "'pgwm_t_slot', NULL, NULL, 'proto_version', '1', 'publication_names', 'pgwm_t_pub')"
        ).fetchall()
        conn.execute("DROP PUBLICATION pgwm_t_pub")
        conn.execute("DROP TABLE pgwm_t_provision")
    assert [bytes(data)[:1] for _, _, data in rows] == [b"B", b"R", b"I", b"C"]


def test_replication_dsn_opens_a_walsender(pg_server: provision.Server) -> None:
    """replication_dsn connects as a logical walsender: IDENTIFY_SYSTEM names the database."""
    with psycopg.connect(pg_server.replication_dsn, autocommit=True) as conn:
        row = conn.execute("IDENTIFY_SYSTEM").fetchone()
    assert row is not None
    assert row[3] == "postgres"


def test_postgres_18_starts_and_reports_its_version() -> None:
    """The pinned 18 build installs (or is cached), starts, and says it is 18.4.

    18 is not in the default matrix yet, so this test asks for it by name.
    """
    reason = provision.opted_out()
    if reason:
        pytest.skip(reason)
    with provision.provide(18) as server, server.connect() as conn:
        row = conn.execute("SHOW server_version").fetchone()
        level = conn.execute("SHOW wal_level").fetchone()
    assert server.version == 18
    assert row == ("18.4",)
    assert level == ("logical",)
