"""Where a logical slot moves and is saved (conformance.slot_saves): real PostgreSQL 14-18
against the fake, with running-xacts records written by ``pg_log_standby_snapshot()``
(16+) or ``CHECKPOINT`` (14, 15) and the server restarted fast or crashed."""

from __future__ import annotations

from conformance import provision
from conformance.live import new_names
from conformance.live_sides import fake_story_server
from conformance.server_restart import fake_restart_side, real_restart_side
from conformance.slot_saves import observed, run_saves_story

STORIES = (
    ({"proto_version": "1"}, False),
    ({"proto_version": "2", "streaming": "on"}, True),
)


def test_slots_move_and_are_saved_at_running_xacts_records_on_postgres_and_on_the_fake(
    own_cluster: provision.Cluster,
) -> None:
    """A confirmed commit leaves restart_lsn where it was; a record the client confirmed
    moves it there at once, one it has not waits for the confirmation; a transaction
    open across a record holds it; a fast restart of 14-16 and any crash bring the
    slot back to the confirmation a record last saved; a transaction the crash left
    open holds nothing after it."""
    major = own_cluster.version
    for options, crash in STORIES:
        names = new_names()
        with real_restart_side(own_cluster, names) as side:
            real = observed(run_saves_story(side, options, crash=crash))
        with fake_restart_side(major, names) as side:
            fake = observed(run_saves_story(side, options, crash=crash))
        # What PostgreSQL does, checked here so that the comparison cannot pass vacuously.
        slot = real["slot"]
        assert slot["2_commit_confirmed"] == ["c1", "r1"], real
        assert slot["3_record_before_its_confirmation"] == ["c1", "r1"], real
        assert slot["3_confirmed_short_of_it"] == ["c2_start", "r1"], real
        assert slot["3_confirmed"] == ["r2", "r2"], real
        assert slot["4_record_inside_an_open_transaction"] == ["r3_end", "r2"], real
        kept = major >= 17 and not crash
        assert slot["5_after_the_restart"] == (["c3", "r2"] if kept else ["r2", "r2"]), real
        if crash:
            assert slot["6_record_r4_after_the_crash"] == ["r5", "r4"], real
        assert real["records_follow_commits"] == [True, True], real
        assert real["record_sizes"] == [56 if major >= 16 else 176] * 3, real
        assert fake == real, (options, crash)


def test_checkpoint_and_a_standby_snapshot_write_as_much_on_postgres_as_on_the_fake(
    own_cluster: provision.Cluster,
) -> None:
    """CHECKPOINT's records (17+ begin with the redo point's) and, on 16+,
    pg_log_standby_snapshot()'s: the end of WAL moves as far on both."""
    major = own_cluster.version
    commands = ["CHECKPOINT"] + (["SELECT pg_log_standby_snapshot()"] if major >= 16 else [])
    real: dict[str, int] = {}
    with own_cluster.connect() as conn:
        conn.autocommit = True

        def end() -> int:
            return int(conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'").fetchone()[0])

        for command in commands:
            moved = []
            for _ in range(3):  # the least: the background writer may add its record
                conn.execute("SELECT txid_current()")
                before = end()
                conn.execute(command)
                moved.append(end() - before)
            real[command] = min(moved)
    server, _ = fake_story_server(major, new_names())
    try:
        fake: dict[str, int] = {}
        for command in commands:
            before = server.end_of_wal
            write = server.checkpoint if command == "CHECKPOINT" else server.log_standby_snapshot
            fake[command] = write() - before
    finally:
        server.stop()
    assert real["CHECKPOINT"] == (208 if major >= 17 else 176), real
    assert fake == real
