"""The three real client programs stopped and restarted, on PostgreSQL and on the fake.

For every major and client (pgjdbc, pg-logical-replication, a jackc/pgconn program), the
scenario of :mod:`conformance.client_restart` (small transactions, one of several changes
with a value compressed in the WAL, unpublished WAL, a last small one; protocol 1) runs on
real PostgreSQL, and the fake serves the SQL interface's recording of it. At the stop
points :func:`conformance.client_restart.sample` picks (after the Begin, the Relation, the
Update and the large change of the transaction of several changes, after its Commit, after
the last message), the client is stopped after that many messages and restarted from 0/0,
and from the LSN it acknowledged on a slot that never got that acknowledgement; the lines
it prints, the keepalives before its first XLogData (node, Go), what it acknowledges, the
slot's confirmed_flush_lsn after each run and its errors must be the same on both sides.

The clients are built by ``scripts/install-clients``; a missing build is an error (outside
CI, ``PGWIRE_MOCK_SKIP_CLIENTS=1`` turns it into a skip), as in test_other_clients.py.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from codec.values import LSN
from conformance import client_restart as cr
from conformance.provision import MAJORS, Server
from conformance.restart_points import Received
from conformance.subjects import ScenarioRun, SqlInterface, prepare_scenario


@dataclass(frozen=True, slots=True)
class Prepared:
    run: ScenarioRun
    real: cr.RealSide
    fake: cr.FakeSide
    straight: tuple[Received, ...]
    points: dict[str, cr.StopPoint]
    start: LSN  # the pristine slot's confirmed_flush


@pytest.fixture(scope="module")
def prepared(pg_server: Server) -> Iterator[Prepared]:
    """SCENARIO run once per major; both sides serve a fresh slot per run from it."""
    with (
        prepare_scenario(pg_server, cr.SCENARIO, [cr.OPTIONS]) as run,
        pg_server.connect() as sql,
        tempfile.TemporaryDirectory(prefix="pgwm-occ-restart-") as tmp,
    ):
        recorded = SqlInterface().capture(run, cr.OPTIONS)
        real = cr.RealSide(run, sql)
        fake = cr.FakeSide(run, recorded, Path(tmp))
        straight = real.target.straight()
        with real.slot() as slot:
            start = cr.confirmed_flush(slot)
        assert start is not None
        yield Prepared(run, real, fake, straight, cr.stop_points(straight), start)


def _report(client: str, point: cr.StopPoint, real: cr.Restart, differences: list[str]) -> str:
    runs = [("stop", real.stop), ("restart at 0/0", real.resumed)]
    if real.own_lsn is not None:
        runs.append((f"restart at {real.stop.acknowledged}", real.own_lsn))
    shown = "; ".join(
        f"{name}: {len(o.lines)} lines, acknowledged {o.acknowledged}, "
        f"confirmed_flush {o.confirmed_flush}, error {o.error}"
        for name, o in runs
    )
    return f"{client} stopped at {point.label()} (PostgreSQL: {shown}):\n  " + "\n  ".join(
        differences
    )


@pytest.mark.slow
def test_a_client_stopped_and_restarted_sees_the_fake_as_postgres(
    client: str, prepared: Prepared
) -> None:
    """At each stop point sampled for this client and major: the same lines, keepalives,
    acknowledgements, confirmed_flush_lsn and errors on the fake as on PostgreSQL, for
    the stopped run, the restart from 0/0 and the restart from the acknowledged LSN."""
    major = prepared.run.server.version
    end = prepared.run.end_lsn
    failures = []
    for kind in cr.sample(client, major):
        point = prepared.points[kind]
        real = cr.restart(prepared.real, client, point, end)
        fake = cr.restart(prepared.fake, client, point, end)
        # What the check exercises, on PostgreSQL.
        assert real.stop.error is None and real.resumed.error is None, real
        assert real.stop.lines == tuple(
            (r.wal_start, r.payload) for r in prepared.straight[: point.messages]
        )
        if client != "java":  # pgjdbc hides keepalives
            assert real.stop.keepalives == (prepared.start,), real.stop
        differences = cr.compare(real, fake)
        if differences:
            failures.append(_report(client, point, real, differences))
    assert not failures, "\n".join(failures)


@pytest.mark.slow
def test_go_acknowledging_past_commits_loses_them_on_both(
    go_client: str, prepared: Prepared
) -> None:
    """What makes the sample's Go stop points worth trying, on PostgreSQL: after the
    change with the large value Go acknowledges wal_start + len(payload), past the
    Commit of its transaction and of the next one, and the restart skips both; after a
    Commit, the Commit's position + its length, inside the next transaction's first
    record, and the restart sends that transaction whole."""
    end = prepared.run.end_lsn
    straight = prepared.straight
    large = prepared.points["large"]
    commit = prepared.points["commit"]
    real = cr.restart(prepared.real, go_client, large, end)
    acked = real.stop.acknowledged
    assert acked == large.last.wal_start + len(large.last.payload)
    skipped = [r for r in straight[large.messages :] if r.tag == "C" and r.wal_start < acked]
    assert len(skipped) >= 2  # its own Commit and the next transaction's
    assert not set(real.resumed.lines) & {(r.wal_start, r.payload) for r in skipped}
    real = cr.restart(prepared.real, go_client, commit, end)
    assert real.stop.acknowledged == commit.last.wal_start + len(commit.last.payload)
    following = straight[commit.messages]
    assert real.resumed.lines[0] == (following.wal_start, following.payload)


@pytest.mark.slow
def test_keepalives_after_an_acknowledgement_beyond_the_end_of_wal(prepared: Prepared) -> None:
    """A slot confirmed past the end of WAL (Go's arithmetic after a large last change):
    the restarted walsender's first keepalive says confirmed_flush, where sentPtr
    starts; once it has read the WAL, the next says the end of WAL, before it (sentPtr
    is the reader's position). The fake used to stay at confirmed_flush."""
    end = prepared.run.end_lsn
    beyond = LSN(int(end) + 0x10000)
    real = cr.keepalives_after_overshoot(prepared.real, beyond)
    fake = cr.keepalives_after_overshoot(prepared.fake, beyond)
    assert real[0] == fake[0] == beyond
    # PostgreSQL's end of WAL may have moved on since (a running-xacts record).
    assert end <= real[1] < beyond, real
    assert fake[1] == end, fake


# --------------------------------------------------------------------------------------
# Without a server


def _received(tags: str) -> list[Received]:
    out = []
    large = tags.find("BRIUIIC") + 4
    for index, tag in enumerate(tags):
        size = 3000 if index == large else 20
        lsn = LSN(0 if tag == "R" else 0x1000 + 0x10 * index)
        out.append(Received(lsn, lsn, tag.encode() + bytes(size)))
    return out


def test_stop_points_name_the_transaction_of_several_changes() -> None:
    for tags in ("BRICBICBRIUIICBUCBDC", "BRICBICBRIUIICBUCBCBDC"):  # 15+, 14
        points = cr.stop_points(_received(tags))
        assert [(k, p.messages, p.last.tag) for k, p in points.items()] == [
            ("begin", 8, "B"),
            ("relation", 9, "R"),
            ("middle", 11, "U"),
            ("large", 12, "I"),
            ("commit", 14, "C"),
            ("last", len(tags), "C"),
        ]
    with pytest.raises(ValueError, match="not SCENARIO's"):
        cr.stop_points(_received("BRICBIC"))


def test_the_sample_tries_every_stop_point_for_each_client_across_the_majors() -> None:
    assert all(cr.sample("go", m) == cr.STOP_KINDS for m in MAJORS)
    assert [len(cr.sample("node", m)) for m in MAJORS] == [2] * len(MAJORS)
    assert {k for m in MAJORS for k in cr.sample("node", m)} == set(cr.STOP_KINDS)
    java = [cr.sample("java", m) for m in MAJORS]
    assert [len(k) for k in java] == [1] * len(MAJORS)
    assert {"relation", "commit", "large", "last"} <= {k for ks in java for k in ks}


def test_compare_names_every_field_that_differs() -> None:
    line = (LSN(0x100), b"B" + bytes(20))
    real = cr.Outcome((line,), (LSN(0x80),), LSN(0x101), LSN(0x101))
    same = cr.Restart(real, real, None)
    assert cr.compare(same, same) == []
    other = cr.Outcome((), (), LSN(0x80), LSN(0x80), error="42704 no slot")
    differences = cr.compare(same, cr.Restart(real, other, None))
    assert [d.split(":")[0] for d in differences] == ["restart at 0/0"] * 5
    assert "error real None, fake '42704 no slot'" in differences[0]
    assert "keepalives before the first XLogData real ['0/80'], fake []" in differences[1]
    assert "the fake printed 0 lines, real 1; missing 'B' at 0/100" in differences[2]
    assert differences[3].endswith("acknowledged real 0/101, fake 0/80")
    assert differences[4].endswith("confirmed_flush_lsn after it real 0/101, fake 0/80")
    own = cr.compare(cr.Restart(real, real, real), cr.Restart(real, real, None))
    assert own == ["restart at the acknowledged LSN: run on one side only"]
