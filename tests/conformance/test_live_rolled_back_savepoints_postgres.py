"""Savepoints rolled back and decoded after the fact (conformance.live_step_stories),
on real PostgreSQL and on the fake: for each connection of the consumer, the same
messages."""

from __future__ import annotations

from conformance.live_step_stories import ROLLED_BACK_SAVEPOINTS, differences
from conformance.provision import Server


def test_savepoints_rolled_back_and_decoded_after_the_fact(pg_server: Server) -> None:
    assert differences(pg_server, ROLLED_BACK_SAVEPOINTS) == []
