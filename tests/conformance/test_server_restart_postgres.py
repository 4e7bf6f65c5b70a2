"""A fast restart of the server under a streaming consumer (conformance.server_restart):
real PostgreSQL 14-18 restarted with SIGINT, the fake with ``WalSender.restart``; what the
consumer, a connection refused meanwhile and an idle connection see must be the same."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from conformance import live, provision
from conformance.live import new_names
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


@pytest.fixture(scope="module")
def restart_cluster(pg_server: provision.Server) -> Iterator[provision.Cluster]:
    """A cluster of pg_server's major for this module alone: a restart ends every
    connection to it."""
    installation = provision.install(pg_server.version).installation
    with provision.Cluster(installation) as cluster:
        yield cluster


@pytest.mark.parametrize("least_and_options", OPTION_SETS, ids=["proto1", "streaming", "parallel"])
def test_a_fast_restart_under_a_consumer_is_the_same_on_postgres_and_on_the_fake(
    restart_cluster: provision.Cluster,
    least_and_options: tuple[int, Mapping[str, str]],
) -> None:
    least, options = least_and_options
    if restart_cluster.version < least:
        pytest.skip(f"{dict(options)} needs PostgreSQL {least}")
    names = new_names()
    with real_restart_side(restart_cluster, names) as side:
        real = observed(run_restart_story(side, options))
    with fake_restart_side(restart_cluster.version, names) as side:
        fake = observed(run_restart_story(side, options))
    # What PostgreSQL does, checked here so that the comparison cannot pass vacuously.
    assert real["refused"]["C"] == "57P03", real
    assert real["idle_ended"]["C"] == "57P01", real
    assert real["during"][-3:] == ["StreamEnded(by_server=True)", "COPY 0", "closed"], real
    # 14-16 save a logical slot at the shutdown checkpoint only if something besides
    # confirmed_flush moved: the restarted consumer gets what it confirmed again.
    assert real["confirmed_flush_is_last_confirmed"] == (restart_cluster.version >= 17), real
    assert real["xlogpos_a_checkpoint_past_last_confirmed"], real
    assert real["keepalives_after_restart"] == [True, True], real
    assert real["asked_for_a_reply_again"], real
    streamed = bool(options.get("streaming"))
    assert [m["type"] for m in real["during"][:-3]] == (["StreamAbort"] if streamed else [])
    assert fake == real


@pytest.mark.parametrize("least_and_options", OPTION_SETS[:2], ids=["proto1", "streaming"])
def test_a_psycopg2_consumer_across_a_fast_restart_is_the_same_on_postgres_and_on_the_fake(
    restart_cluster: provision.Cluster,
    least_and_options: tuple[int, Mapping[str, str]],
) -> None:
    """psycopg2 acknowledges the last data it got, so it answers the shutdown's reply
    request with the keepalive's position and the shutdown ends; after the restart 14-16
    send what it had acknowledged again, 17+ do not."""
    _, options = least_and_options
    names = new_names()
    with real_restart_side(restart_cluster, names) as side:
        real_run, real_end = run_psycopg2_story(side, options)
    with fake_restart_side(restart_cluster.version, names) as side:
        fake_run, fake_end = run_psycopg2_story(side, options)
    real, fake = live.observed(real_run), live.observed(fake_run)
    assert real_end.startswith("DatabaseError None"), real_end
    again = [m["type"] for m in real["after_restart"]["messages"]].count("Commit")
    assert again == (1 if restart_cluster.version >= 17 else 3), real
    assert (fake_end, fake) == (real_end, real)
