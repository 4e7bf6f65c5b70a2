"""Where a logical slot moves and is saved (conformance.slot_saves): real PostgreSQL 14-18
against the fake, with running-xacts records written by ``pg_log_standby_snapshot()``
(16+) or ``CHECKPOINT`` (14, 15) and the server restarted fast or crashed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from codec.values import LSN
from conformance import provision
from conformance.live import new_names
from conformance.live_sides import fake_story_server
from conformance.serve_sides import serve_restart_side
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
        with serve_restart_side(major, names) as side:
            served = observed(run_saves_story(side, options, crash=crash))
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
        assert served == real, (options, crash)  # a serve process, started again


def test_checkpoint_and_a_standby_snapshot_are_the_same_sql_on_postgres_and_on_the_fake(
    own_cluster: provision.Cluster,
) -> None:
    """``CHECKPOINT`` (17+ begin with the redo point's record) and ``SELECT
    pg_log_standby_snapshot()`` (16+; 14/15 answer 42883) on a replication connection:
    the same answers, and the end of WAL moves as far on both."""
    real = _sql_answers(own_cluster.replication_dsn, None)
    server, _ = fake_story_server(own_cluster.version, new_names())
    try:
        fake = _sql_answers(server.dsn(), lambda: server.end_of_wal)
    finally:
        server.stop()
    checkpoint = real["CHECKPOINT"]
    assert checkpoint[:2] == ("CHECKPOINT", 208 if own_cluster.version >= 17 else 176), real
    assert fake == real


def _sql_answers(dsn: str, end_of_wal: Callable[[], int] | None) -> dict[str, tuple[Any, ...]]:
    """Each statement's tag, how far it moved the end of WAL (the least of three: the
    background writer may add a record) and its rows, or its error's fields."""
    out: dict[str, tuple[Any, ...]] = {}
    with psycopg.connect(dsn, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:

        def end() -> int:
            if end_of_wal is not None:
                return end_of_wal()
            # PostgreSQL's: where the next record goes (pg_current_wal_lsn() waits for
            # the WAL writer's flush), read on a connection of its own.
            with psycopg.connect(dsn.replace("replication=database", "")) as other:
                row = other.execute("SELECT pg_current_wal_insert_lsn() - '0/0'").fetchone()
                assert row is not None
                return int(row[0])

        for statement in ("CHECKPOINT", "SELECT pg_log_standby_snapshot()"):
            moved, shape = [], ()
            for _ in range(3):
                before = end()
                try:
                    cur = conn.execute(statement)
                except psycopg.Error as err:
                    diag = err.diag
                    shape = (diag.sqlstate, diag.message_primary, diag.message_hint)
                    shape += (diag.statement_position, diag.source_file, diag.source_line)
                    shape += (diag.source_function,)
                    break
                after = end()
                moved.append(after - before)
                rows = cur.fetchall() if cur.description else []
                columns = [(c.name, c.type_code) for c in cur.description or []]
                # pg_log_standby_snapshot() answers where its record ends.
                shape = (cur.statusmessage, columns, [int(LSN.parse(r[0])) == after for r in rows])
            out[statement] = (shape[0], min(moved, default=None), *shape[1:])
    return out
