"""The server stopped by a signal under its clients (conformance.server_stop): a real
postmaster of 14-18 and a ``pgwire-mock serve`` process each get SIGTERM (smart), SIGINT
(fast) or SIGQUIT (immediate); what a regular session, an idle replication connection, a
streaming consumer and a connection refused meanwhile see must be the same, and so must
the process's exit."""

from __future__ import annotations

import pytest

from conformance import provision
from conformance.live import new_names
from conformance.server_stop import (
    MODES,
    fake_stop_side,
    observed,
    real_stop_side,
    run_stop_story,
)

_ENDED = {"C": "57P01", "M": "terminating connection due to administrator command"}


@pytest.mark.parametrize("mode", list(MODES))
def test_a_signal_stops_the_fake_as_it_stops_postgres(
    own_cluster: provision.Cluster, mode: str
) -> None:
    names = new_names()
    options = {"proto_version": "1"}
    try:
        with real_stop_side(own_cluster, names) as side:
            real = observed(run_stop_story(side, mode, options))
    finally:
        own_cluster.start_again()  # for the next mode
    with fake_stop_side(own_cluster.version, names) as side:
        fake = observed(run_stop_story(side, mode, options))
    # What PostgreSQL does, checked here so that the comparison cannot pass vacuously.
    assert real["exit_code"] == 0, real
    if mode == "immediate":
        assert real["during"] == ["closed"] and real["idle_end"] == "closed", real
        assert real["session_end"] == "closed: OperationalError", real
    else:
        assert real["refused"]["C"] == "57P03", real
        assert real["during"] == ["StreamEnded(by_server=True)", "COPY 0", "closed"], real
        assert real["asked_for_a_reply"], real
        assert {k: real["idle_end"][k] for k in "CM"} == _ENDED, real
    if mode == "smart":
        # Everything went on until the regular session ended.
        assert real["meanwhile"]["session_answers"] == 1, real
        assert [m["type"] for m in real["meanwhile"]["streamed"]] == ["Begin", "Update", "Commit"]
    if mode == "fast":
        assert {k: real["session_end"][k] for k in "CM"} == _ENDED, real
    assert fake == real
