"""A slot invalidated because the WAL it needed was removed, on real PostgreSQL 14-18
and on the fake (``WalSender.invalidate_slot``): what pg_replication_slots shows and
what START_REPLICATION (and, on 18, ALTER_REPLICATION_SLOT) answers, field by field;
on 18 also a slot idle longer than idle_replication_slot_timeout.

The real slot is invalidated as in production: max_slot_wal_keep_size = 1MB, a few WAL
segments written and switched, a CHECKPOINT (or the timeout at 1 s, then a CHECKPOINT).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from psycopg import conninfo
from test_checks_postgres import Raw, seen

from codec.values import LSN
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


def test_an_idle_slot_is_invalidated_on_18_as_postgres_invalidates_it(pg_server: Server) -> None:
    major = pg_server.version
    slot = f"idle_{uuid.uuid4().hex[:8]}"
    fake: WalSender = start_walsender(pg_version=major, slots=[slot])
    try:
        if major < 18:  # no idle_replication_slot_timeout before 18
            with pytest.raises(ValueError, match="needs PostgreSQL 18"):
                fake.invalidate_slot(slot, "idle_timeout")
            return
        with pg_server.connect() as conn:
            conn.execute("ALTER SYSTEM SET idle_replication_slot_timeout = 1")
            conn.execute("SELECT pg_reload_conf()")
            try:
                conn.execute(f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')")
                time.sleep(2.2)
                conn.execute("CHECKPOINT")
            finally:
                conn.execute("ALTER SYSTEM RESET idle_replication_slot_timeout")
                conn.execute("SELECT pg_reload_conf()")
        try:
            info = conninfo.conninfo_to_dict(pg_server.dsn)
            real = _answers(str(info["host"]), int(str(info["port"])), slot, major)
        finally:
            with pg_server.connect() as conn:
                conn.execute(f"SELECT pg_drop_replication_slot('{slot}')")
        fake.with_state(lambda s: setattr(s.slots[slot], "restart_lsn", _restart_lsn(real, slot)))
        fake.invalidate_slot(slot, "idle_timeout")
        mock = _answers(fake.host, fake.port, slot, major)
    finally:
        fake.stop()
    assert mock == real
    assert ("idle_timeout" in str(real)) and any(
        isinstance(m, tuple) and m[0] == "Error" for m in real
    )


def _restart_lsn(answers: list[object], slot: str) -> int:
    """The real slot's restart_lsn from its pg_replication_slots row (kept on 18)."""
    row = next(a for a in answers if isinstance(a, tuple) and a[0] == slot.encode())
    assert isinstance(row[2], bytes), row
    return int(LSN.parse(row[2].decode()))


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
