"""A fast restart of the server under a streaming consumer (conformance.server_restart):
real PostgreSQL 14-18 restarted with SIGINT, the fake with ``WalSender.restart`` and a
``serve`` process stopped with SIGINT and started again on its state file and WAL journal
(conformance.serve_sides); what the consumer, a connection refused meanwhile and an idle
connection see must be the same."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from conformance import live, provision
from conformance.live import new_names
from conformance.serve_sides import serve_restart_side
from conformance.server_restart import (
    fake_restart_side,
    observed,
    real_restart_side,
    run_psycopg2_story,
    run_restart_story,
)

OPTION_SETS: tuple[tuple[int, Mapping[str, str]], ...] = (
    (14, {"proto_version": "1"}),
    (14, {"proto_version": "2", "streaming": "on"}),
    (16, {"proto_version": "4", "streaming": "parallel"}),
)


def _option_sets(major: int) -> list[Mapping[str, str]]:
    return [options for least, options in OPTION_SETS if major >= least]


def test_a_fast_restart_under_a_consumer_is_the_same_on_postgres_and_on_the_fake(
    own_cluster: provision.Cluster,
) -> None:
    for options in _option_sets(own_cluster.version):
        _restart_compared(own_cluster, options)


def _restart_compared(cluster: provision.Cluster, options: Mapping[str, str]) -> None:
    names = new_names()
    with real_restart_side(cluster, names) as side:
        real = observed(run_restart_story(side, options))
    with fake_restart_side(cluster.version, names) as side:
        fake = observed(run_restart_story(side, options))
    # What PostgreSQL does, checked here so that the comparison cannot pass vacuously.
    assert real["refused"]["C"] == "57P03", real
    assert real["idle_ended"]["C"] == "57P01", real
    assert real["during"][-3:] == ["StreamEnded(by_server=True)", "COPY 0", "closed"], real
    # 14-16 save a logical slot at the shutdown checkpoint only if something besides
    # confirmed_flush moved: the restarted consumer gets what it confirmed again.
    assert real["confirmed_flush_is_last_confirmed"] == (cluster.version >= 17), real
    assert real["xlogpos_a_checkpoint_past_last_confirmed"], real
    assert real["keepalives_after_restart"] == [True, True], real
    assert real["asked_for_a_reply_again"], real
    streamed = bool(options.get("streaming"))
    assert [m["type"] for m in real["during"][:-3]] == (["StreamAbort"] if streamed else [])
    assert fake == real, options
    if options.get("streaming") != "parallel":  # the process's restart: as for "on"
        with serve_restart_side(cluster.version, names) as side:
            assert observed(run_restart_story(side, options)) == real, options


@pytest.mark.parametrize("options", [o for _, o in OPTION_SETS[:2]], ids=["proto1", "streaming"])
def test_a_psycopg2_consumer_across_a_fast_restart_is_the_same_on_postgres_and_on_the_fake(
    own_cluster: provision.Cluster, options: Mapping[str, str]
) -> None:
    """psycopg2 acknowledges the last data it got, so it answers the shutdown's reply
    request with the keepalive's position and the shutdown ends; after the restart 14-16
    send what it had acknowledged again, 17+ do not."""
    names = new_names()
    with real_restart_side(own_cluster, names) as side:
        real_run, real_end = run_psycopg2_story(side, options)
    with fake_restart_side(own_cluster.version, names) as side:
        fake_run, fake_end = run_psycopg2_story(side, options)
    real, fake = live.observed(real_run), live.observed(fake_run)
    assert real_end.startswith("DatabaseError None"), real_end
    again = [m["type"] for m in real["after_restart"]["messages"]].count("Commit")
    assert again == (1 if own_cluster.version >= 17 else 3), real
    assert (fake_end, fake) == (real_end, real)
