"""A ``pgwire-mock serve`` process stopped and started again on its ``--state-file``
with ``--slot-saves postgresql`` (conformance.serve_sides), against real PostgreSQL
14-18 restarted the same way: SIGINT then a new start (the fast restart story of
conformance.server_restart) and SIGQUIT then a new start (the crash story of
conformance.server_crash). Where the in-process restart keeps the server's memory, these
bring back only what the state file and the WAL journal kept, as PostgreSQL brings back
what its disk kept."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from conformance import provision, server_crash, server_restart
from conformance.live import new_names
from conformance.serve_sides import serve_restart_side
from conformance.server_restart import real_restart_side

OPTION_SETS: tuple[Mapping[str, str], ...] = (
    {"proto_version": "1"},
    {"proto_version": "2", "streaming": "on"},
)
SAVES = ("--slot-saves", "postgresql")


@pytest.mark.parametrize("options", OPTION_SETS, ids=["proto1", "streaming"])
def test_a_serve_process_restarted_fast_is_the_same_as_postgres(
    own_cluster: provision.Cluster, options: Mapping[str, str], tmp_path: Path
) -> None:
    names = new_names()
    with real_restart_side(own_cluster, names) as side:
        real = server_restart.observed(server_restart.run_restart_story(side, options))
    with serve_restart_side(own_cluster.version, names, tmp_path, *SAVES) as side:
        fake = server_restart.observed(server_restart.run_restart_story(side, options))
    # 14-16 bring back the confirmed_flush last saved, 17+ the one of the clean stop.
    assert real["confirmed_flush_is_last_confirmed"] == (own_cluster.version >= 17), real
    assert real["keepalives_after_restart"] == [True, True], real
    assert fake == real


@pytest.mark.parametrize("options", OPTION_SETS, ids=["proto1", "streaming"])
def test_a_serve_process_killed_and_started_again_is_the_same_as_postgres(
    own_cluster: provision.Cluster, options: Mapping[str, str], tmp_path: Path
) -> None:
    names = new_names()
    with real_restart_side(own_cluster, names) as side:
        real = server_crash.observed(server_crash.run_crash_story(side, options))
    with serve_restart_side(own_cluster.version, names, tmp_path, *SAVES) as side:
        fake = server_crash.observed(server_crash.run_crash_story(side, options))
    assert real["confirmed_flush_before_the_first_commit"], real
    assert [m["type"] for m in real["after"]].count("Commit") == 3, real
    assert fake == real
