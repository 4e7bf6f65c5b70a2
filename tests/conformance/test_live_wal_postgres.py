"""The live-WAL story (conformance.live) against real PostgreSQL and the fake: a consumer
reads commits made while it runs, is killed before acknowledging one, misses two more,
restarts; what it receives, and the slot's confirmed_flush, must be the same."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

import psycopg2

from conformance import live
from conformance.provision import Server


def _option_sets(major: int) -> list[Mapping[str, str]]:
    return [options for least, options in live.OPTION_SETS if major >= least]


def _start_refused(side: live.Side, options: Mapping[str, str]) -> tuple[str | None, str | None]:
    """The SQLSTATE and primary message a consumer's START_REPLICATION fails with."""
    try:
        live.Consumer(side, options, 5.0).kill()
    except psycopg2.Error as err:
        return err.diag.sqlstate, err.diag.message_primary
    return None, None


def _observed_on_both(
    server: Server, options: Mapping[str, str], story: Callable[..., live.LiveRun]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``story`` told with ``options`` on the real server, then on the fake emulating it."""
    names = live.new_names()
    with live.real_side(server, names) as side:
        real = live.observed(story(side, options))
    with live.fake_side(server.version, names) as side:
        fake = live.observed(story(side, options))
    return real, fake


def test_the_live_story_is_the_same_on_postgres_and_on_the_fake(pg_server: Server) -> None:
    for options in _option_sets(pg_server.version):
        real, fake = _observed_on_both(pg_server, options, live.run_story)
        assert real["confirmed_flush_is_last_acknowledged_end"], options
        # T1 was not acknowledged: it comes again, then T2 and T3 (the 600-row one streams
        # under streaming=on/parallel).
        assert len([m for m in real["after_restart"]["messages"] if "Commit" in m["type"]]) == 3
        assert fake == real, options


def test_observed_tells_a_resent_acknowledged_transaction_apart() -> None:
    """The comparison can fail: a server that sent T0 again after the restart, or put a
    Relation at a position, is told apart."""
    begin = b"B" + (0x100).to_bytes(8, "big") + bytes(8) + (7).to_bytes(4, "big")
    commit = b"C\x00" + (0x100).to_bytes(8, "big") + (0x180).to_bytes(8, "big") + bytes(8)
    good = live.LiveRun(
        [live.Received(0x80, 0x80, begin), live.Received(0x180, 0x180, commit)],
        [live.Received(0x80, 0x80, begin), live.Received(0x180, 0x180, commit)],
        0x180,
    )
    assert live.observed(good)["confirmed_flush_is_last_acknowledged_end"]
    late = dataclasses.replace(good, confirmed_flush=0x100)
    assert live.observed(late) != live.observed(good)
    twice = dataclasses.replace(good, after_restart=good.after_restart * 2)
    assert live.observed(twice) != live.observed(good)
    moved = dataclasses.replace(
        good, first=[live.Received(0, 0, begin), live.Received(0x180, 0x180, commit)]
    )
    assert live.observed(moved) != live.observed(good)


def test_long_transactions_decoded_while_they_run_then_after_a_restart(pg_server: Server) -> None:
    """Two long transactions (a savepoint rolled back in each, the first rolled back
    whole) run while the consumer waits: decoded as they run, streaming clients get their
    blocks and a Stream Abort per rollback; restarted without acknowledging, the consumer
    gets them decoded after the fact (14-17: the rolled-back one cut short at its first
    catalog lookup; 18: truncated). The fake, given them as long_running, sends the same."""
    for options in _option_sets(pg_server.version):
        real, fake = _observed_on_both(pg_server, options, live.run_long_story)
        assert real["confirmed_flush_is_last_acknowledged_end"], options
        types = [m["type"] for m in real["first"]["messages"]]
        if options.get("streaming"):
            assert types.count("StreamAbort") >= 3, types  # two savepoints, one ROLLBACK
        assert fake == real, options


def test_a_consumer_restarted_inside_an_open_transaction(pg_server: Server) -> None:
    """A transaction stays open (600 rows) while a short one commits; the consumer
    acknowledges the short one, a position inside the open one, and dies; the open one
    writes more, the consumer restarts, the open one commits. Decoded again from its
    first change: all 610 rows come after the restart (streaming clients: their blocks
    again, first_segment set, nothing streamed from before the confirmed position). The
    fake, given it as ``WalSender.begin``, sends the same."""
    for options in _option_sets(pg_server.version):
        real, fake = _observed_on_both(pg_server, options, live.run_open_story)
        assert real["confirmed_flush_is_last_acknowledged_end"], options
        # Confirmed inside the open transaction, restart_lsn stayed before its start.
        assert real["restart_lsn_at_or_before_what_comes_again"], options
        after = real["after_restart"]["messages"]
        assert sum(m["type"] == "Insert" for m in after) == 610, options
        if options.get("streaming"):
            assert "StreamStart" in [m["type"] for m in real["first"]["messages"]], options
        assert fake == real, options


def test_two_transactions_open_at_once_share_the_memory_limit(pg_server: Server) -> None:
    """Two open transactions write 300 rows each in turn, twice: the reorder buffer
    counts their memory together, so at the limit the larger one streams (blocks of 300
    rows, not of what one transaction alone would reach). Both commit, the consumer
    restarts without acknowledging and gets both again the same way."""
    for options in _option_sets(pg_server.version):
        real, fake = _observed_on_both(pg_server, options, live.run_two_open_story)
        if options.get("streaming"):
            first = [m["type"] for m in real["first"]["messages"]]
            assert first.count("StreamStart") == 4, first
        assert fake == real, options


def test_a_two_phase_consumer_restarted_before_the_prepare(pg_server: Server) -> None:
    """15+: a two-phase consumer dies inside an open transaction, which is prepared while
    it is down: the restarted consumer gets the prepared transaction whole (streaming: its
    blocks again, then Stream Prepare), then its COMMIT PREPARED."""
    sets = [options for least, options in live.TWO_PHASE_OPTION_SETS if pg_server.version >= least]
    for options in sets:
        real, fake = _observed_on_both(pg_server, options, live.run_prepared_story)
        types = [m["type"] for m in real["after_restart"]["messages"]]
        assert types[-1] == "CommitPrepared" and types.count("Insert") == 610, types
        assert fake == real, options


def test_a_prepared_transaction_counts_until_finished_without_two_phase(
    pg_server: Server,
) -> None:
    """Without two-phase decoding a prepared transaction stays in the reorder buffer until
    COMMIT or ROLLBACK PREPARED: its memory still counts, so when a later transaction
    brings the total past the limit, the prepared one (the larger) is streamed; committed
    it ends in Stream Commit, rolled back in Stream Abort. The fake sends the same."""
    for rollback in (False, True):
        for options in _option_sets(pg_server.version):
            story = functools.partial(live.run_held_prepared_story, rollback=rollback)
            real, fake = _observed_on_both(pg_server, options, story)
            if options.get("streaming"):
                first = real["first"]["messages"]
                starts = [m for m in first if m["type"] == "StreamStart"]
                assert len(starts) >= 3, (rollback, options, [m["type"] for m in first])
            assert fake == real, (rollback, options)


def test_a_prepared_transaction_holds_restart_lsn_until_finished(pg_server: Server) -> None:
    """A prepared transaction holds the slot's restart_lsn at or before its first change
    however far the consumer confirms past it and whatever running-xacts records were
    decoded, with and without two-phase decoding: the restarted walsender decodes it
    again (whole without two-phase; with two-phase its PREPARE was confirmed, and only
    COMMIT PREPARED comes). Once finished, restart_lsn moves past it."""
    sets = _option_sets(pg_server.version) + [
        options for least, options in live.TWO_PHASE_OPTION_SETS if pg_server.version >= least
    ]
    for options in sets:
        real, fake = _observed_on_both(pg_server, options, live.run_prepared_restart_lsn_story)
        types = [m["type"] for m in real["after_restart"]["messages"]]
        if options.get("two_phase") == "on":
            assert types == ["CommitPrepared"], (options, types)
        else:
            assert types[0] == "Begin" and types.count("Insert") == 5, (options, types)
        assert real["restart_lsn_at_or_before_what_comes_again"], options
        assert real["restart_lsn_at_or_before_prepared_finished_after"], options
        assert real["final_restart_lsn_at_or_past_what_came_again"], options
        assert fake == real, options


def test_a_slot_created_while_a_transaction_is_open(pg_server: Server) -> None:
    """CREATE_REPLICATION_SLOT waits until the open transaction ends, and the new slot
    does not decode it: only the next transaction. Meanwhile pg_replication_slots lists
    the slot (ephemeral, active for its walsender, no confirmed_flush_lsn) and another
    session can neither drop it nor create one of its name. A prepared transaction not
    yet committed prepared holds the creation the same way."""
    for prepared in (False, True):
        _check_slot_creation(pg_server, prepared=prepared)


def _check_slot_creation(pg_server: Server, *, prepared: bool) -> None:
    names = live.new_names()
    options = {"proto_version": "1"}
    with live.real_side(pg_server, names) as side:
        real = live.run_slot_creation_story(side, options, prepared=prepared)
    with live.fake_side(pg_server.version, names) as side:
        fake = live.run_slot_creation_story(side, options, prepared=prepared)
    assert real["blocked_while_open"] and real["created_after_its_end"]
    assert [m["type"] for m in real["messages"]] == ["Begin", "Relation", "Update", "Commit"]
    # Listed while it waits: held by the creating walsender, WAL reserved, nothing
    # confirmed yet; its name taken (14, 17, 18 measured the same).
    during = real["listed_while_waiting"]
    assert during is not None
    assert during["active"] and during["active_pid"] == "creator", during
    assert during["restart_lsn"] == "set" and during["confirmed_flush_lsn"] is None, during
    assert real["restart_lsn_kept"] and real["restart_lsn_before_consistent_point"]
    refused = real["refused_while_waiting"]
    assert refused["DROP_REPLICATION_SLOT"][0] == "55006", refused
    assert refused["CREATE_REPLICATION_SLOT"][0] == "42710", refused
    assert fake == real, prepared


def test_a_two_phase_consumer_that_did_not_confirm_the_prepare(pg_server: Server) -> None:
    """15+: A stays open while T0 commits; a two-phase consumer confirms T0 (a position
    inside A, up to A's PREPARE record), receives A's Begin Prepare…Prepare without
    confirming it, and dies; A is committed or rolled back prepared before the consumer
    comes back, or once it has restarted. The restarted walsender decodes A's PREPARE
    again (confirmed_flush is still T0's end, restart_lsn before A's first change), at
    the same positions, then Commit or Rollback Prepared. Rolled back before the restart,
    A has aborted when it is decoded again: its first catalog lookup stops it, and only
    Begin Prepare and Prepare come (no changes). The fake sends the same.

    One two-phase option set per version (proto 3, two_phase on): streaming changes
    nothing for a 5-row transaction, and the test stays at a few seconds per version.
    The consumer that confirmed the PREPARE is test_a_two_phase_consumer_that_confirmed_
    the_prepare."""
    options = live.TWO_PHASE_OPTION_SETS[0][1]
    if pg_server.version < 15:
        _check_two_phase_refused_alike(pg_server, options)
        return
    again = ["BeginPrepare", "Relation", *["Insert"] * 5, "Prepare"]
    for rollback in (False, True):
        for finish_first in (True, False):
            story = functools.partial(
                live.run_unconfirmed_prepare_story, rollback=rollback, finish_first=finish_first
            )
            real, fake = _observed_on_both(pg_server, options, story)
            case = (rollback, finish_first)
            types = [m["type"] for m in real["after_restart"]["messages"]]
            if rollback and finish_first:
                assert types == ["BeginPrepare", "Prepare", "RollbackPrepared"], (case, types)
            else:
                finish = "RollbackPrepared" if rollback else "CommitPrepared"
                assert types == [*again, finish], (case, types)
            two_phase = real["two_phase"]
            # Sent again exactly as before (same positions and LSNs), each at its end.
            assert two_phase["after_restart"] == [
                ("BeginPrepare", True),
                ("Prepare", True, True),
                ("RollbackPrepared" if rollback else "CommitPrepared", True, True),
            ], case
            assert two_phase["confirmed_at_restart_is_end"] == [True, False], case
            assert two_phase["confirmed_at_restart_before_prepare"] == [True], case
            assert real["restart_lsn_at_or_before_prepared_finished_after"], case
            assert real["confirmed_flush_is_last_acknowledged_end"], case
            assert fake == real, case


def _check_two_phase_refused_alike(pg_server: Server, options: Mapping[str, str]) -> None:
    """14's pgoutput has neither protocol 3 nor two_phase: the consumer's
    START_REPLICATION is refused, by the fake as by PostgreSQL."""
    names = live.new_names()
    with live.real_side(pg_server, names) as side:
        real_refusal = _start_refused(side, options)
    with live.fake_side(pg_server.version, names) as side:
        fake_refusal = _start_refused(side, options)
    assert real_refusal[0] is not None and fake_refusal == real_refusal


#: (rollback, finish_first, restart_options) of the confirmed-PREPARE test: ROLLBACK
#: PREPARED before the restart, COMMIT PREPARED before it, ROLLBACK PREPARED after it;
#: then a restart without two_phase (protocol 3: COMMIT PREPARED after it; protocol 1:
#: ROLLBACK PREPARED before it).
_CONFIRMED_CASES: tuple[tuple[bool, bool, Mapping[str, str] | None], ...] = (
    (True, True, None),
    (False, True, None),
    (True, False, None),
    (False, False, {"proto_version": "3"}),
    (True, True, {"proto_version": "1"}),
)


def test_a_two_phase_consumer_that_confirmed_the_prepare(pg_server: Server) -> None:
    """15+: A stays open while T0 commits; a two-phase consumer confirms T0, receives
    A's Begin Prepare…Prepare, confirms the Prepare (flush = its end_lsn) and dies; A is
    rolled back or committed prepared while the consumer is down, or once it is back.
    The restarted walsender starts at confirmed_flush, past A's PREPARE record, so it
    does not send A again, yet decodes A from restart_lsn (before A's first change) and
    sends only Rollback or Commit Prepared, at its end, then T1 (the story's last
    transaction). The slot stays two-phase: a consumer restarted without two_phase (at
    protocol 3, or even 1) gets the same (15-18 alike). The fake sends the same."""
    options = live.TWO_PHASE_OPTION_SETS[0][1]
    if pg_server.version < 15:
        _check_two_phase_refused_alike(pg_server, options)
        return
    for rollback, finish_first, restart_options in _CONFIRMED_CASES:
        story = functools.partial(
            live.run_unconfirmed_prepare_story,
            rollback=rollback,
            finish_first=finish_first,
            confirm=True,
            restart_options=restart_options,
        )
        real, fake = _observed_on_both(pg_server, options, story)
        case = (rollback, finish_first, restart_options)
        finish = "RollbackPrepared" if rollback else "CommitPrepared"
        types = [m["type"] for m in real["after_restart"]["messages"]]
        assert types == [finish, "Begin", "Relation", "Update", "Commit"], (case, types)
        two_phase = real["two_phase"]
        assert two_phase["after_restart"] == [(finish, True, True)], case
        # confirmed_flush at the restart is the Prepare's end (not T0's), past the
        # PREPARE record.
        assert two_phase["confirmed_at_restart_is_end"] == [False, True], case
        assert two_phase["confirmed_at_restart_before_prepare"] == [False], case
        assert real["restart_lsn_at_or_before_prepared_finished_after"], case
        assert real["confirmed_flush_is_last_acknowledged_end"], case
        assert fake == real, case


def test_a_slot_made_two_phase_after_a_prepare_its_consumer_confirmed(pg_server: Server) -> None:
    """15+: A is prepared and T0 commits while a consumer without two_phase reads; it
    confirms T0, past A's PREPARE, which it never got, and restarts with two_phase: the
    slot decodes two-phase from there (two_phase_at). Committed prepared then, A comes
    whole first — Begin Prepare, its changes and Prepare at the PREPARE's positions,
    before confirmed_flush — then Commit Prepared (ReorderBufferFinishPrepared: the
    PREPARE is before two_phase_at); rolled back prepared, only Rollback Prepared. The
    fake sends the same."""
    options = live.TWO_PHASE_OPTION_SETS[0][1]
    if pg_server.version < 15:
        _check_two_phase_refused_alike(pg_server, options)
        return
    for rollback in (False, True):
        story = functools.partial(live.run_late_two_phase_story, rollback=rollback)
        real, fake = _observed_on_both(pg_server, options, story)
        types = [m["type"] for m in real["after_restart"]["messages"]]
        marker = ["Begin", "Update", "Commit"]
        if rollback:
            assert types == ["RollbackPrepared", "Begin", "Relation", "Update", "Commit"], types
        else:
            a = ["BeginPrepare", "Relation", *["Insert"] * 5, "Prepare", "CommitPrepared"]
            assert types == [*a, *marker], types
            assert real["two_phase"]["after_restart"] == [
                ("BeginPrepare", False),
                ("Prepare", True, False),  # at its end; not sent before
                ("CommitPrepared", True, True),
            ]
            assert real["two_phase"]["confirmed_at_restart_before_prepare"] == [False]
        assert real["restart_lsn_at_or_before_what_comes_again"], rollback
        assert real["confirmed_flush_is_last_acknowledged_end"], rollback
        assert fake == real, rollback
