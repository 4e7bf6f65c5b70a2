"""conformance.physical against real PostgreSQL: the fake's WAL and BASE_BACKUP answers,
as recorded and derived, agree with the real server's. (That the comparison catches a
lost member or message: tests/pgwire_mock/test_backup_rewrite.py.)"""

from __future__ import annotations

from conformance import physical, provision


def test_every_physical_check_agrees(pg_server: provision.Server) -> None:
    outcomes = physical.check_server(pg_server)
    names = [o.check for o in outcomes]
    assert names[:3] == ["wal", "backup as recorded", "backup WAL dropped"]
    assert ("backup gzip" in names) == (pg_server.version >= 15)
    assert all(o.ok for o in outcomes), [o for o in outcomes if not o.ok]
