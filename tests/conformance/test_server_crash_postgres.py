"""A server crashed under a streaming consumer (conformance.server_crash): real
PostgreSQL 14-18 stopped with SIGQUIT and started again, the fake with
``WalSender.restart(immediate=True)`` and a ``serve`` process stopped with SIGQUIT and
started again on its state file and WAL journal; what the consumer sees must be the
same."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from conformance import provision
from conformance.live import new_names
from conformance.serve_sides import serve_restart_side
from conformance.server_crash import observed, run_crash_story
from conformance.server_restart import fake_restart_side, real_restart_side

OPTION_SETS: tuple[Mapping[str, str], ...] = (
    {"proto_version": "1"},
    {"proto_version": "2", "streaming": "on"},
)


@pytest.mark.parametrize("options", OPTION_SETS, ids=["proto1", "streaming"])
def test_a_crash_under_a_consumer_is_the_same_on_postgres_and_on_the_fake(
    own_cluster: provision.Cluster, options: Mapping[str, str]
) -> None:
    names = new_names()
    with real_restart_side(own_cluster, names) as side:
        real = observed(run_crash_story(side, options))
    with fake_restart_side(own_cluster.version, names) as side:
        fake = observed(run_crash_story(side, options))
    # What PostgreSQL does, checked here so that the comparison cannot pass vacuously.
    assert real["during"] == ["closed"], real
    assert real["confirmed_flush_before_the_first_commit"], real
    kinds = [m["type"] for m in real["after"]]
    assert kinds[:2] == ["Begin", "Relation"] and kinds.count("Commit") == 3, kinds
    streamed_again = options.get("streaming") and own_cluster.version < 18
    assert ("StreamStart" in kinds) == bool(streamed_again), kinds
    assert "StreamAbort" not in kinds, kinds
    assert fake == real
    if options.get("streaming"):  # a serve process killed with SIGQUIT, started again
        with serve_restart_side(own_cluster.version, names) as side:
            assert observed(run_crash_story(side, options)) == real
