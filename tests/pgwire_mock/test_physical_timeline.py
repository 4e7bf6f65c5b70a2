"""A historic timeline from a recording made after a promotion, without a real server:
the stream stops at the switch point with the server's CopyDone, the next timeline's row
follows the client's CopyDone, and a start at the switch point opens no COPY at all
(``test_physical_timeline_postgres.py`` compares all of it with promoted real servers)."""

from __future__ import annotations

from test_session import Client, make

from codec import replication
from codec.wire import (
    CommandComplete,
    CopyBothResponse,
    CopyData,
    CopyDone,
    DataRow,
    ErrorResponse,
    FieldDescription,
    ReadyForQuery,
    RowDescription,
    StartupMessage,
)
from pgwire_mock.server.physical import MAX_SEND_SIZE, HistoryFile, PhysicalRecording

START = 0x3000000
SWITCH = START + MAX_SEND_SIZE + 0x1234  # timeline 1 ends here, inside the segment
WAL = bytes(range(256)) * 2048  # 512 kB: past the switch on timeline 2


def _client(timeline: int = 2, history: str = f"1\t0/{SWITCH:X}\tno recovery target\n") -> Client:
    histories = (HistoryFile(timeline, f"{timeline:08X}.history", history),)
    recording = PhysicalRecording(
        "16.4", 16, 7, timeline, START, START + len(WAL), WAL, histories=histories
    )
    client, _ = make(16, source=recording)  # type: ignore[arg-type]
    replies = client.send(
        StartupMessage((("user", "postgres"), ("database", "x"), ("replication", "true")))
    )
    assert replies[-1] == ReadyForQuery("I")
    return client


def _next_tli(timeline: int, switch: int) -> list[object]:
    columns = (
        FieldDescription("next_tli", type_oid=20, type_size=8),
        FieldDescription("next_tli_startpos", type_oid=25),
    )
    return [
        RowDescription(columns),
        DataRow((str(timeline).encode(), f"0/{switch:X}".encode())),
        CommandComplete("START_STREAMING"),
        CommandComplete("START_REPLICATION"),
        ReadyForQuery("I"),
    ]


def test_timeline_1_streams_to_the_switch_point_then_copydone_and_the_next_timeline() -> None:
    client = _client()
    assert client.query(f"START_REPLICATION 0/{START:X} TIMELINE 1") == [CopyBothResponse(0, ())]
    replies = client.pump()
    xlog = [r for r in replies if isinstance(r, replication.XLogData)]
    assert [(x.wal_start, x.wal_end) for x in xlog] == [
        (START, SWITCH),
        (START + MAX_SEND_SIZE, SWITCH),
    ]
    assert b"".join(x.data for x in xlog) == WAL[: SWITCH - START]
    assert replies[-1] == CopyDone()
    assert client.pump() == []  # nothing after the server's CopyDone
    assert client.send(CopyDone()) == _next_tli(2, SWITCH)


def test_a_client_copydone_before_the_switch_gets_copydone_back_and_the_row() -> None:
    client = _client()
    client.query(f"START_REPLICATION 0/{START:X} TIMELINE 1")
    assert client.send(CopyDone()) == [CopyDone(), *_next_tli(2, SWITCH)]


def test_at_the_switch_point_there_is_no_copy_at_all() -> None:
    client = _client()
    assert client.query(f"START_REPLICATION 0/{SWITCH:X} TIMELINE 1") == _next_tli(2, SWITCH)


def test_past_the_switch_point_is_not_in_this_servers_history() -> None:
    client = _client()
    replies = client.query(f"START_REPLICATION 0/{SWITCH + 1:X} TIMELINE 1")
    (err,) = [r for r in replies if isinstance(r, ErrorResponse)]
    assert dict(err.fields)["D"] == f"This server's history forked from timeline 1 at 0/{SWITCH:X}."


def test_two_promotions_name_the_timeline_that_follows() -> None:
    """On timeline 3, timeline 1 is followed by 2 (not by the current 3)."""
    history = f"1\t0/{START:X}\tfirst\n2\t0/{SWITCH:X}\tsecond\n"
    client = _client(3, history)
    assert client.query(f"START_REPLICATION 0/{START:X} TIMELINE 1") == _next_tli(2, START)
    client.query(f"START_REPLICATION 0/{START:X} TIMELINE 2")
    replies = client.pump()
    assert replies[-1] == CopyDone()
    assert client.send(CopyDone()) == _next_tli(3, SWITCH)


def test_read_replication_slot_names_the_timeline_of_its_restart_lsn() -> None:
    """tliOfPointInHistory: before the switch point timeline 1, from it on timeline 2."""
    client = _client()
    client.query("CREATE_REPLICATION_SLOT s PHYSICAL RESERVE_WAL")  # restart_lsn = START
    rows = [r for r in client.query("READ_REPLICATION_SLOT s") if isinstance(r, DataRow)]
    assert rows == [DataRow((b"physical", f"0/{START:X}".encode(), b"1"))]
    client.query(f"START_REPLICATION SLOT s PHYSICAL 0/{SWITCH:X}")
    update = replication.StandbyStatusUpdate(SWITCH, SWITCH, 0, 0, False)
    client.send(CopyData(update.encode()), CopyDone())
    rows = [r for r in client.query("READ_REPLICATION_SLOT s") if isinstance(r, DataRow)]
    assert rows == [DataRow((b"physical", f"0/{SWITCH:X}".encode(), b"2"))]
