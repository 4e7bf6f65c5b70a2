"""ALTER TABLE inside an open transaction (conformance.live_step_stories), on real
PostgreSQL and on the fake: for each connection of the consumer, the same messages."""

from __future__ import annotations

from conformance.live_step_stories import ALTER_IN_OPEN_TRANSACTIONS, differences
from conformance.provision import Server


def test_alter_table_inside_open_transactions(pg_server: Server) -> None:
    assert differences(pg_server, ALTER_IN_OPEN_TRANSACTIONS) == []
