"""Catalog commits while a transaction is prepared (conformance.live_step_stories), on
real PostgreSQL and on the fake: for each connection of the consumer, the same
messages."""

from __future__ import annotations

from conformance.live_step_stories import CATALOG_COMMITS_WHILE_PREPARED, differences
from conformance.provision import Server


def test_catalog_commits_while_a_transaction_is_prepared(pg_server: Server) -> None:
    assert differences(pg_server, CATALOG_COMMITS_WHILE_PREPARED) == []
