"""Slot positions, slot ownership and pg_stat_replication rows, without a network.

The rules are those test_positions_postgres.py checks against real PostgreSQL; here they
are pinned at the state and SQL layer, where each edge case is cheap to reach.
"""

from __future__ import annotations

import pytest

from pgwire_mock.server.pgoutput_options import PgOutputOptions
from pgwire_mock.server.source import RecordingSource, SourceError
from pgwire_mock.server.sql import SqlLayer, gucs_for
from pgwire_mock.server.state import (
    ServerState,
    SlotActiveError,
    WalSenderStatus,
    wal_file_name,
)
from pgwire_mock.streamfile import StreamEntry


class _Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.25

    def __call__(self) -> float:
        return self.now


def test_confirmed_flush_only_moves_forward_and_restart_lsn_only_at_running_xacts() -> None:
    """An older flush leaves the slot alone; a flush beyond the end of WAL is kept as it
    is; restart_lsn moves only to a running-xacts record's candidate (measured on 14 and
    16: a confirmed commit leaves it at the slot's creation)."""
    state = ServerState(wal_lsn=0x2000000)
    slot = state.create_slot("s", "pgoutput")
    state.confirm("s", 0x2000100)
    assert (slot.restart_lsn, slot.confirmed_flush) == (0x2000000, 0x2000100)
    state.confirm("s", 0x2000080)
    assert (slot.restart_lsn, slot.confirmed_flush) == (0x2000000, 0x2000100)
    state.confirm("s", 0x3000000)
    assert (slot.restart_lsn, slot.confirmed_flush) == (0x2000000, 0x3000000)


def test_a_running_xacts_record_moves_restart_lsn_once_confirmed_and_saves_the_slot() -> None:
    """LogicalIncreaseRestartDecodingForSlot: a record the client has not confirmed
    leaves a candidate, taken (and the slot saved with the confirmed position) once it
    is; one already confirmed is taken at once, saved with confirmed_flush then."""
    state = ServerState(wal_lsn=0x1000)
    slot = state.create_slot("s", "pgoutput")
    state.confirm("s", 0x1100)
    assert slot.saved_position == (0x1000, 0x1000)  # memory only
    state.running_xacts("s", 0x1200, 0x1200, 740)
    assert (slot.restart_lsn, slot.catalog_xmin) == (0x1000, None)
    state.confirm("s", 0x1238)
    assert (slot.restart_lsn, slot.catalog_xmin, slot.saved_position) == (0x1200, 740, None)
    state.confirm("s", 0x1300)
    assert slot.saved_position == (0x1238, 0x1200)
    # Confirmed before it is read (a keepalive's position): taken at once.
    state.running_xacts("s", 0x1300, 0x1300, 741)
    assert (slot.restart_lsn, slot.catalog_xmin, slot.saved_position) == (0x1300, 741, None)
    state.restarted(saved_at_shutdown=False)
    assert (slot.confirmed_flush, slot.restart_lsn) == (0x1300, 0x1300)


def test_a_candidate_waiting_for_its_confirmation_keeps_later_records_out() -> None:
    """Only increase if the previous values have been applied: while the first record's
    candidate waits, a second record's is dropped, so the slot moves to the first."""
    state = ServerState(wal_lsn=0x1000)
    slot = state.create_slot("s", "pgoutput")
    state.running_xacts("s", 0x1100, 0x1100, 740)
    state.running_xacts("s", 0x1200, 0x1200, 741)
    state.confirm("s", 0x1300)
    assert (slot.restart_lsn, slot.catalog_xmin) == (0x1100, 740)
    # A record whose restart point is not past restart_lsn (a transaction in progress
    # since before it) moves nothing and saves nothing.
    state.running_xacts("s", 0x1400, 0x1100, 740)
    state.confirm("s", 0x1500)
    assert (slot.restart_lsn, slot.saved_position) == (0x1100, (0x1300, 0x1100))


def test_a_temporary_slot_stays_active_for_its_session() -> None:
    """ReplicationSlotRelease keeps a temporary slot's active_pid: another session gets
    55006 naming the owner, even while the owner streams nothing."""
    state = ServerState()
    slot = state.create_slot("t", "pgoutput", temporary=True, owner_pid=7)
    assert slot.active_pid == 7
    state.acquire("t", 7)
    state.release("t", 7)
    assert slot.active_pid == 7
    with pytest.raises(SlotActiveError) as caught:
        state.acquire("t", 8)
    assert caught.value.pid == 7
    assert state.drop_temporary(7) == ["t"]


def test_inactive_since_is_set_at_creation_and_release_and_cleared_while_active() -> None:
    clock = _Clock()
    state = ServerState(clock=clock)
    slot = state.create_slot("s", "pgoutput")
    assert slot.inactive_since == clock.now
    state.acquire("s", 5)
    assert slot.inactive_since is None
    clock.now += 10
    state.release("s", 5)
    assert slot.inactive_since == clock.now


@pytest.mark.parametrize(
    ("restart", "end", "status"),
    [
        (0, 0x5000000, None),  # a physical slot that reserved no WAL
        (0x1000000, 0x1000000 + (1 << 30), "reserved"),  # 64 segments behind
        (0x1000000, 0x1000000 + (1 << 30) + (1 << 24), "reserved"),  # 65: keepSegs
        (0x1000000, 0x1000000 + (1 << 30) + (2 << 24), "extended"),
    ],
)
def test_wal_status_counts_whole_segments_against_max_wal_size(
    restart: int, end: int, status: str | None
) -> None:
    state = ServerState(wal_lsn=end)
    slot = state.create_slot("p", None, reserve_wal=True)
    slot.restart_lsn = restart
    assert state.wal_status(slot) == status


def test_a_physical_slot_reserves_wal_only_when_asked() -> None:
    state = ServerState(wal_lsn=0x3000000)
    assert state.create_slot("p", None).restart_lsn == 0
    assert state.create_slot("r", None, reserve_wal=True).restart_lsn == 0x3000000


class _Walsender:
    secret_key = 0

    def __init__(self, status: WalSenderStatus | None) -> None:
        self.status = status

    def cancel(self) -> None:
        pass

    def walsender_status(self) -> WalSenderStatus | None:
        return self.status


def test_pg_stat_replication_lists_walsenders_with_their_reported_positions() -> None:
    """One row per walsender (plain backends have none), NULL for unknown positions, the
    client's reply time as timestamptz in the session's TimeZone."""
    state = ServerState()
    state.sessions[41] = _Walsender(
        WalSenderStatus(
            pid=41,
            user="postgres",
            application_name="app",
            backend_start=946_684_800.5,
            client_addr="127.0.0.1",
            client_port=5000,
            state="streaming",
            sent_lsn=0x1000200,
            write_lsn=0x1000200,
            flush_lsn=0x1000100,
            reply_time=12_345,
        )
    )
    state.sessions[42] = _Walsender(None)
    state.sessions[43] = _Walsender(WalSenderStatus(43, "other", "", 0.0, None, None, "startup"))
    settings = gucs_for(16, 60_000)
    settings["TimeZone"] = "Asia/Kolkata"
    sql = SqlLayer(16, state, settings=settings)
    result = sql.execute(
        "SELECT pid, usename, client_addr, client_port, state, sent_lsn, write_lsn, "
        "flush_lsn, replay_lsn, reply_time, backend_start FROM pg_stat_replication",
        in_transaction=False,
    )
    assert result.rows == (
        (
            "41",
            "postgres",
            "127.0.0.1",
            "5000",
            "streaming",
            "0/1000200",
            "0/1000200",
            "0/1000100",
            None,
            "2000-01-01 05:30:00.012345+05:30",
            "2000-01-01 05:30:00.5+05:30",
        ),
        (
            "43",
            "other",
            None,
            "-1",
            "startup",
            None,
            None,
            None,
            None,
            None,
            "1970-01-01 05:30:00+05:30",
        ),
    )


def test_datoid_is_the_database_oid_of_the_major() -> None:
    state = ServerState()
    state.create_slot("s", "pgoutput", database="postgres")
    wanted = {14: "13695", 15: "5", 16: "5", 17: "5"}
    for major, oid in wanted.items():
        sql = SqlLayer(major, state)
        rows = sql.execute("SELECT datoid FROM pg_replication_slots", in_transaction=False).rows
        assert rows == ((oid,),)


def test_a_recording_that_cannot_be_resumed_reports_missing_wal() -> None:
    """Past its start, a recording of payloads that are not pgoutput cannot be decoded
    again: 58P01 naming the segment of the start position, as WalSndSegmentOpen says."""
    entries = [StreamEntry(0x3000000 + 0x100 * i, b"\xff") for i in range(3)]
    source = RecordingSource(entries)
    events = list(source.events(PgOutputOptions(1, ("p",)), 16, 0x5000010))
    assert len(events) == 1 and isinstance(events[0], SourceError)
    err = events[0].error
    assert (err.sqlstate, err.message, err.routine) == (
        "58P01",
        "requested WAL segment 000000010000000000000005 has already been removed",
        "WalSndSegmentOpen",
    )
    assert wal_file_name(2, 0x1_2300_0000) == "000000020000000100000023"
