"""A slot invalidated because the WAL it needed was removed, on real PostgreSQL 14-18
and on the fake (``WalSender.invalidate_slot``): what pg_replication_slots shows and
what START_REPLICATION (and, on 18, ALTER_REPLICATION_SLOT) answers, field by field.

The real slot is invalidated as in production: max_slot_wal_keep_size = 1MB, a few WAL
segments written and switched, a CHECKPOINT.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from psycopg import conninfo
from test_checks_postgres import Raw, seen

from conformance.provision import Server
from pgwire_mock.pytest_plugin import WalSender, start_walsender
from pgwire_mock.server.state import SlotActiveError

pytestmark = pytest.mark.postgres

START = "START_REPLICATION SLOT {slot} LOGICAL 0/0 (proto_version '1', publication_names 'p')"


def _columns(major: int) -> str:
    cols = "slot_name, wal_status, restart_lsn, safe_wal_size"
    if major >= 16:
        cols += ", conflicting"
    if major >= 17:
        cols += ", invalidation_reason"
    return cols


@pytest.fixture
def invalidated_real_slot(pg_server: Server) -> Iterator[str]:
    slot = f"inv_{uuid.uuid4().hex[:8]}"
    table = f"inv_t_{uuid.uuid4().hex[:8]}"
    with pg_server.connect() as conn:
        conn.execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
        conn.execute("SELECT pg_reload_conf()")
        time.sleep(0.3)
        conn.execute(f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')")
        conn.execute(f"CREATE TABLE {table} (a int, pad text)")
        for _ in range(4):
            conn.execute(
                f"INSERT INTO {table} SELECT g, repeat('x', 500) FROM generate_series(1, 3000) g"
            )
            conn.execute("SELECT pg_switch_wal()")
        conn.execute("CHECKPOINT")
    try:
        yield slot
    finally:
        with pg_server.connect() as conn:
            conn.execute(f"SELECT pg_drop_replication_slot('{slot}')")
            conn.execute(f"DROP TABLE {table}")
            conn.execute("ALTER SYSTEM RESET max_slot_wal_keep_size")
            conn.execute("SELECT pg_reload_conf()")


def _answers(host: str, port: int, slot: str, major: int) -> list[object]:
    conn = Raw(
        host, port, [("user", "postgres"), ("database", "postgres"), ("replication", "database")]
    )
    try:
        out = seen(
            conn.query(
                f"SELECT {_columns(major)} FROM pg_replication_slots WHERE slot_name = '{slot}'"
            )
        )
        out += seen(conn.query(START.format(slot=slot)))
        if major >= 18:
            out += seen(conn.query(f"ALTER_REPLICATION_SLOT {slot} (FAILOVER false)"))
        return out
    finally:
        conn.close()


def test_an_invalidated_slot_is_reported_as_postgres_reports_it(
    pg_server: Server, invalidated_real_slot: str
) -> None:
    major = pg_server.version
    slot = invalidated_real_slot
    fake: WalSender = start_walsender(pg_version=major, slots=[slot])
    try:
        fake.invalidate_slot(slot)
        info = conninfo.conninfo_to_dict(pg_server.dsn)
        real = _answers(str(info["host"]), int(str(info["port"])), slot, major)
        mock = _answers(fake.host, fake.port, slot, major)
    finally:
        fake.stop()
    assert mock == real
    assert any(isinstance(m, tuple) and m[0] == "Error" for m in real)


def test_a_slot_in_use_is_not_invalidated_behind_its_walsender() -> None:
    fake = start_walsender(slots=["busy"])
    try:
        fake.with_state(lambda s: s.acquire("busy", 4242))
        with pytest.raises(SlotActiveError):
            fake.invalidate_slot("busy")
        with pytest.raises(ValueError, match="cause must be one of wal_removed"):
            fake.invalidate_slot("busy", "rows_removed")
    finally:
        fake.stop()
