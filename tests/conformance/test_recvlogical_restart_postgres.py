"""pg_recvlogical across a fast restart of its server (conformance.recvlogical_restart):
real PostgreSQL 14-18 restarted with SIGINT, the fake with ``WalSender.restart``."""

from __future__ import annotations

import tempfile
from pathlib import Path

from conformance import provision
from conformance.live import new_names
from conformance.recvlogical_restart import PG_RECVLOGICAL, observed_recvlogical_restart
from conformance.server_restart import fake_restart_side, real_restart_side


def test_pg_recvlogical_across_a_fast_restart_is_the_same_on_postgres_and_on_the_fake(
    own_cluster: provision.Cluster,
) -> None:
    """It writes each transaction once on both: it connects again from the end of the
    last commit it wrote, so the slot's confirmed_flush (back where it was saved, on
    14-16) does not matter to it."""
    assert PG_RECVLOGICAL.exists(), "pg_recvlogical is not installed (Debian postgresql-client)"
    options = {"proto_version": "1"}
    names = new_names()
    with tempfile.TemporaryDirectory(prefix="pgwm-recvlogical-") as tmp:
        with real_restart_side(own_cluster, names) as side:
            real = observed_recvlogical_restart(side, options, Path(tmp) / "real")
        with fake_restart_side(own_cluster.version, names) as side:
            fake = observed_recvlogical_restart(side, options, Path(tmp) / "fake")
    # What PostgreSQL does, checked here so that the comparison cannot pass vacuously.
    assert [m["type"] for m in real["messages"]].count("Commit") == 3, real
    assert real["restarted_at_its_last_commit"], real
    assert any("disconnected; waiting 5 seconds" in line for line in real["stderr"]), real
    assert fake == real
