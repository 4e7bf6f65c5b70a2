"""The ``timeline_switch`` fault without a real server: WAL pages and records as
PostgreSQL writes them (codec.wal), the promotion written into a recording
(pgwire_mock.server.promotion), and a physical stream that follows it.

The CRCs are checked against records of real WAL (PostgreSQL 15.18, recorded with
``record --physical``): ``xl_crc`` as the server computed it.
``test_physical_promotion_postgres.py`` compares the result with real promotions.
"""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_session import Client, make

from codec import DecodeError, replication
from codec.values import LSN
from codec.wal import (
    XLOG_BLCKSZ,
    XLOG_END_OF_RECOVERY,
    XLOG_SWITCH,
    XLP_BKP_REMOVABLE,
    XLP_FIRST_IS_CONTRECORD,
    XLP_LONG_HEADER,
    WalWriter,
    assemble_record,
    page_header,
    read_records,
    record_crc,
    with_header,
)
from codec.wire import (
    CommandComplete,
    CopyBothResponse,
    CopyDone,
    DataRow,
    ErrorResponse,
    ReadyForQuery,
)
from codec.wire import StartupMessage as Startup
from pgwire_mock.server.faults import Fault, FaultError
from pgwire_mock.server.physical import PhysicalRecording
from pgwire_mock.server.promotion import (
    PromotionError,
    end_of_recovery_data,
    history_content,
    promote,
)

# Real records of PostgreSQL 15.18's WAL (lsn, bytes): a shutdown checkpoint, NEXTOID, a
# commit, a heap insert (a block reference), an online checkpoint.
REAL = {
    0x1000028: "72000000000000000000000000000000000000003e4105c2ff58280000010000000001000000"
    "01000000010000000000000003000000000000001027000001000000000000000300000001000000"
    "010000000100000000000000687e096b0000000000000000000000000000000000000000",
    0x10000A0: "1e00000001000000280000010000000030000000e0177845ff0410470000",
    0x1311EF8: "2200000007020000b01e3101000000000001000058f04035ff08eab8ea6140040300",
    0x10BD0B0: "c30000000500000080d00b0100000000000a0000db05449b002092007f060000010000002e0a"
    "000000000000ff031a00030820ffff070000000000008427000070675f70726f635f70726f6e616d"
    "655f617267735f6e73705f696e6465780000000000000000000000000000000000000000000000"
    "00000000000000000000000b00000075000001e704000000000000830a0000000000000000000020"
    "2020010000000001370100000000000000150000000300000001000000020014000300020000",
    0x14EDC80: "72000000cc02000048dc4e01000000001000000042043bebff5848dc4e01000000000100000001"
    "0000000100000000000000cd02000000000000e04e00000100000000000000cc020000010000000100"
    "00000100000000000000697e096b000000000000000000000000cc02000000000000",
}
SMALL_SEGMENT = 4 * XLOG_BLCKSZ
SYSID = 7712834824078468619
MAGIC = 0xD110  # 15's XLOG_PAGE_MAGIC


@pytest.mark.parametrize("lsn", sorted(REAL))
def test_the_crc_of_real_records_is_the_servers(lsn: int) -> None:
    record = bytes.fromhex(REAL[lsn])
    assert record_crc(record) == struct.unpack_from("<I", record, 20)[0]


@pytest.mark.parametrize("lsn", sorted(REAL))
def test_a_new_prev_link_gets_the_crc_a_full_computation_gives(lsn: int) -> None:
    record = bytes.fromhex(REAL[lsn])
    moved = with_header(record, prev=0x2_0123_4568)
    assert moved[8:16] == (0x2_0123_4568).to_bytes(8, "little")
    assert moved[24:] == record[24:] and moved[:8] == record[:8]
    assert struct.unpack_from("<I", moved, 20)[0] == record_crc(moved) != record_crc(record)


@pytest.mark.parametrize(("major", "size"), [(14, 42), (16, 42), (17, 50), (18, 50)])
def test_the_end_of_recovery_record_is_laid_out_as_xloginsert_does(major: int, size: int) -> None:
    """XLogRecord (24 bytes), XLR_BLOCK_ID_DATA_SHORT and the length, then
    sizeof(xl_end_of_recovery): 16 bytes, 24 from 17 on (wal_level and padding)."""
    data = end_of_recovery_data(
        end_time=123456789, timeline=2, prev_timeline=1, major=major, wal_level=2
    )
    record = assemble_record(
        rmid=0, info=XLOG_END_OF_RECOVERY, xid=0, prev=0x3000120, main_data=data
    )
    tot_len, xid, prev, info, rmid, crc = struct.unpack_from("<IIQBBxxI", record)
    assert (tot_len, xid, prev, info, rmid) == (size, 0, 0x3000120, 0x90, 0)
    assert len(record) == size and record[24:26] == bytes((255, size - 26))
    assert struct.unpack_from("<qII", record, 26) == (123456789, 2, 1)
    if major >= 17:
        assert struct.unpack_from("<i", record, 42) == (2,) and record[46:] == bytes(4)
    assert crc == record_crc(record)


def _records(count: int, size: int = 100) -> list[bytes]:
    """Heap-like records of ``size`` bytes (header + filler), their CRC right."""
    out = []
    for i in range(count):
        record = struct.pack("<IIQBBxxI", size, 700 + i, 0, 0, 10, 0) + bytes([i % 256]) * (
            size - 24
        )
        out.append(_crc(record))
    return out


def _crc(record: bytes) -> bytes:
    return record[:20] + record_crc(record).to_bytes(4, "little") + record[24:]


def _write(
    records: list[bytes], *, tli: int = 1, start: int = 0x1000000, segment: int = SMALL_SEGMENT
) -> WalWriter:
    writer = WalWriter(
        start,
        b"",
        tli=tli,
        magic=MAGIC,
        info=XLP_BKP_REMOVABLE,
        sysid=SYSID,
        segment_size=segment,
    )
    for record in records:
        writer.chained(record)
    return writer


def test_records_laid_out_over_pages_and_segments_read_back_as_written() -> None:
    """Long headers at a segment's start, continuation flags and xlp_rem_len, MAXALIGN,
    XLOG_SWITCH zeroing the rest of its segment; read back with the same LSNs, links and
    valid CRCs."""
    switch = _crc(struct.pack("<IIQBBxxI", 24, 0, 0, XLOG_SWITCH, 0, 0))
    records = [*_records(20, 1000), switch, *_records(5, 3000)]
    writer = _write(records)
    wal = bytes(writer.out)
    read = list(read_records(wal, 0x1000000, SMALL_SEGMENT))
    assert len(read) == len(records)
    assert [r.data[24:] for r in read] == [r[24:] for r in records]
    assert all(record_crc(r.data) == r.crc for r in read)
    assert all(b.prev == a.lsn for a, b in itertools.pairwise(read))
    after_switch = read[21]
    assert after_switch.lsn == 0x1000000 + SMALL_SEGMENT + 40  # a long header first
    assert read[20].end == 0x1000000 + SMALL_SEGMENT
    switch_at = read[20].lsn - 0x1000000
    assert switch_at < SMALL_SEGMENT - XLOG_BLCKSZ  # whole pages follow it
    assert not any(wal[switch_at + 24 : SMALL_SEGMENT])  # zeroed, page headers too
    for offset in range(0, len(wal), XLOG_BLCKSZ):
        header = page_header(wal, offset)
        if offset % SMALL_SEGMENT == 0:
            assert header.info & XLP_LONG_HEADER and header.sysid == SYSID
            assert header.seg_size == SMALL_SEGMENT and header.xlog_blcksz == XLOG_BLCKSZ
        if header.magic:  # not a page zeroed after the switch
            assert (header.pageaddr, header.tli) == (0x1000000 + offset, 1)
        if header.info & XLP_FIRST_IS_CONTRECORD:
            assert header.rem_len > 0
    # A record is cut by the second page's header: the rest is what xlp_rem_len says.
    second = page_header(wal, XLOG_BLCKSZ)
    crossing = next(r for r in read if r.lsn < 0x1002000 < r.lsn + len(r.data))
    assert second.rem_len == crossing.lsn + len(crossing.data) - 0x1002000


def test_a_page_header_that_lies_is_a_decode_error() -> None:
    wal = bytearray(_write(_records(200, 200)).out)
    wal[XLOG_BLCKSZ + 8 : XLOG_BLCKSZ + 16] = (0x7777000).to_bytes(8, "little")
    with pytest.raises(DecodeError, match=r"WAL page header at byte 8192: xlp_pageaddr 7777000"):
        list(read_records(bytes(wal), 0x1000000, SMALL_SEGMENT))


def _checkpoint(redo: int) -> bytes:
    """The real online checkpoint with another redo pointer (and its CRC redone)."""
    record = bytearray.fromhex(REAL[0x14EDC80])
    record[26:34] = redo.to_bytes(8, "little")
    return _crc(bytes(record))


def _timeline_1(later: int = 40) -> tuple[bytes, list[int]]:
    """Timeline 1's WAL: records over two small segments, an online checkpoint whose
    redo pointer names a record after the switch point used below."""
    writer = _write(_records(20, 700))
    redo = writer.pos
    writer.chained(_records(1, 700)[0])
    writer.chained(_checkpoint(redo))
    for record in _records(later, 1500):
        writer.chained(record)
    read = list(read_records(bytes(writer.out), 0x1000000, SMALL_SEGMENT))
    return bytes(writer.out), [r.end for r in read]


def test_promotion_writes_end_of_recovery_then_rechains_the_later_records() -> None:
    wal, ends = _timeline_1()
    at = ends[14]
    promoted = promote(
        wal,
        0x1000000,
        segment_size=SMALL_SEGMENT,
        system_identifier=SYSID,
        at=at,
        timeline=1,
        major=15,
        end_time=800000000000000,
    )
    new = promoted.wal
    assert new[: at - 0x1000000] == wal[: at - 0x1000000]
    old = list(read_records(wal, 0x1000000, SMALL_SEGMENT))
    read = list(read_records(new, 0x1000000, SMALL_SEGMENT))
    assert len(read) == len(old) + 1
    assert all(record_crc(r.data) == r.crc for r in read)
    assert all(b.prev == a.lsn for a, b in itertools.pairwise(read))
    eor = read[15]
    assert (eor.lsn, eor.rmid, eor.info, eor.prev) == (at, 0, XLOG_END_OF_RECOVERY, old[14].lsn)
    assert struct.unpack_from("<qII", eor.data, 26) == (800000000000000, 2, 1)
    assert promoted.end == read[-1].end and promoted.end_of_recovery == at
    assert [r.data[24:] for r in read[16:]] != []
    for before, after in zip(old[15:], read[16:], strict=True):
        if after.rmid == 0:  # the checkpoint: timeline 2, the redo moved with its record
            redo, this, prev = struct.unpack_from("<QII", after.data, 26)
            assert (this, prev) == (2, 2)
            assert redo == read[old.index(before) + 1 - 1].lsn
            continue
        assert after.data[24:] == before.data[24:]
    # The page holding the switch point keeps timeline 1's header; the later ones have 2.
    page = at - at % XLOG_BLCKSZ
    for offset in range(0, promoted.end - 0x1000000, XLOG_BLCKSZ):
        tli = page_header(new, offset).tli
        assert tli == (1 if 0x1000000 + offset <= page else 2), hex(offset)


def test_a_switch_point_must_be_a_records_end_inside_the_recording() -> None:
    wal, ends = _timeline_1()
    kwargs = {"segment_size": SMALL_SEGMENT, "system_identifier": SYSID, "timeline": 1}
    with pytest.raises(PromotionError, match=r"0/1000500 is not a record boundary"):
        promote(wal, 0x1000000, at=0x1000500, major=15, end_time=0, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(PromotionError, match=r"is outside the recording's WAL"):
        promote(wal, 0x1000000, at=ends[-1] + 8, major=15, end_time=0, **kwargs)  # type: ignore[arg-type]


def test_the_history_file_is_writetimelinehistorys() -> None:
    assert history_content(None, 1, 0x3000158) == "1\t0/3000158\tno recovery target specified\n"
    parent = "1\t0/3000158\tno recovery target specified\n"
    assert history_content(parent, 2, 0x5000060) == (
        parent + "\n2\t0/5000060\tno recovery target specified\n"
    )


# --- the fault on a served recording ----------------------------------------------------


def _served(wal: bytes) -> tuple[Client, PhysicalRecording]:
    recording = PhysicalRecording(
        "15.18", 15, SYSID, 1, 0x1000000, 0x1000000 + len(wal), wal, SMALL_SEGMENT
    )
    client, _ = make(15, source=recording)  # type: ignore[arg-type]
    replies = client.send(Startup((("user", "postgres"), ("replication", "true"))))
    assert replies[-1] == ReadyForQuery("I")
    return client, recording


def test_the_fault_parses_with_at_and_checks_the_recording() -> None:
    wal, ends = _timeline_1()
    fault = Fault.parse(f"timeline_switch:{LSN(ends[3])}")
    assert (fault.name, fault.lsn) == ("timeline_switch", ends[3])
    assert Fault.parse(f"timeline_switch:at={LSN(ends[3])}") == fault
    _, recording = _served(wal)
    recording.check_fault(fault)
    with pytest.raises(FaultError, match=r"^timeline_switch: 0/1000500 is not a record boundary"):
        recording.check_fault(Fault.parse("timeline_switch:0/1000500"))
    with pytest.raises(FaultError, match=r"^timeline_switch: 0/9000000 is outside"):
        recording.check_fault(Fault.parse("timeline_switch:0/9000000"))


def test_a_stream_on_the_old_timeline_ends_at_the_switch_point_and_the_next_follows() -> None:
    """Injected while streaming timeline 1: XLogData up to the switch point (wal_end it),
    the server's CopyDone, then the next_tli row; IDENTIFY_SYSTEM and TIMELINE_HISTORY
    2 show the promotion, and timeline 2 streams the new WAL from the switch point."""
    wal, ends = _timeline_1(200)  # 300 kB: more than one XLogData
    at = ends[150]
    client, recording = _served(wal)
    assert isinstance(client.query("START_REPLICATION 0/1000000 TIMELINE 1")[0], CopyBothResponse)
    client.session.produce(1, client.now)  # one XLogData
    assert len(client.replies()) == 1
    first = ends[0]
    with pytest.raises(FaultError, match=rf"^timeline_switch: {LSN(first)} is before the client's"):
        client.session.inject(Fault("timeline_switch", lsn=first), client.now)
    assert recording.timeline == 1  # nothing changed
    assert client.session.inject(Fault("timeline_switch", lsn=at), client.now)
    replies = client.replies() + client.pump()
    xlog = [r for r in replies if isinstance(r, replication.XLogData)]
    assert xlog and {x.wal_end for x in xlog} == {at}
    assert xlog[-1].wal_start + len(xlog[-1].data) == at
    assert replies[-1] == CopyDone()
    replies = client.send(CopyDone())
    rows = [r for r in replies if isinstance(r, DataRow)]
    assert rows[0].values == (b"2", str(LSN(at)).encode())
    assert replies[-3:-1] == [
        CommandComplete("START_STREAMING"),
        CommandComplete("START_REPLICATION"),
    ]
    identify = next(r for r in client.query("IDENTIFY_SYSTEM") if isinstance(r, DataRow))
    assert identify.values[1:3] == (b"2", str(LSN(recording.end_lsn)).encode())
    history = next(r for r in client.query("TIMELINE_HISTORY 2") if isinstance(r, DataRow))
    assert history.values == (
        b"00000002.history",
        f"1\t{LSN(at)}\tno recovery target specified\n".encode(),
    )
    assert isinstance(client.query(f"START_REPLICATION {LSN(at)} TIMELINE 2")[0], CopyBothResponse)
    new = [r for r in client.pump() if isinstance(r, replication.XLogData)]
    assert new[0].wal_start == at and new[0].wal_end == recording.end_lsn
    data = b"".join(x.data for x in new)
    assert struct.unpack_from("<IIQBB", data) == (42, 0, read_before(wal, at), 0x90, 0)


def read_before(wal: bytes, at: int) -> int:
    """The LSN of the record that ends at ``at``."""
    return next(r.lsn for r in read_records(wal, 0x1000000, SMALL_SEGMENT) if r.end == at)


def test_the_command_line_fault_promotes_at_the_first_start_and_once() -> None:
    """``serve --fault timeline_switch`` (no position: the end of the last record): the
    first START_REPLICATION on timeline 1 promotes and streams to the switch; a later
    START_REPLICATION on timeline 2 does not promote again."""
    wal, ends = _timeline_1()
    recording = PhysicalRecording(
        "15.18", 15, SYSID, 1, 0x1000000, 0x1000000 + len(wal), wal, SMALL_SEGMENT
    )
    fault = Fault.parse("timeline_switch")
    client, _ = make(15, source=recording, faults=(fault,))  # type: ignore[arg-type]
    client.send(Startup((("user", "postgres"), ("replication", "true"))))
    client.query("START_REPLICATION 0/1000000 TIMELINE 1")
    replies = client.pump()
    assert recording.timeline == 2 and replies[-1] == CopyDone()
    client.send(CopyDone())
    end = recording.end_lsn
    client.query(f"START_REPLICATION {LSN(ends[-1])} TIMELINE 2")
    assert recording.timeline == 2 and recording.end_lsn == end
    assert [h.timeline for h in recording.histories] == [2]


def test_a_second_switch_promotes_the_new_timeline_again() -> None:
    """Timeline 2's history holds timeline 1's line; timeline 3's is it, a blank line
    (writeTimeLineHistory with a parent file), then 2's line. A switch point before
    timeline 2 began is refused."""
    wal, ends = _timeline_1()
    client, recording = _served(wal)
    first, second = Fault("timeline_switch", lsn=ends[10]), Fault("timeline_switch", lsn=None)
    client.query("START_REPLICATION 0/1000000 TIMELINE 1")
    client.session.inject(first, client.now)
    assert recording.timeline == 2
    with pytest.raises(FaultError, match=r"^timeline_switch: .* is before timeline 2 began at"):
        recording.check_fault(Fault("timeline_switch", lsn=ends[5]))
    recording.promote(second, 0)
    read = list(read_records(recording.wal_data, 0x1000000, SMALL_SEGMENT))
    eors = [r for r in read if r.is_xlog(XLOG_END_OF_RECOVERY)]
    assert [struct.unpack_from("<II", r.data, 34) for r in eors] == [(2, 1), (3, 2)]
    assert all(record_crc(r.data) == r.crc for r in read)
    history = recording.history(3)
    assert history is not None and history.content == (
        f"1\t{LSN(ends[10])}\tno recovery target specified\n\n"
        f"2\t{LSN(eors[1].lsn)}\tno recovery target specified\n"
    )
    assert eors[1].lsn == read[-2].end and recording.end_lsn == read[-1].end


@given(
    edits=st.lists(
        st.tuples(st.integers(0, 3 * XLOG_BLCKSZ), st.integers(0, 255)), min_size=1, max_size=8
    ),
    cut=st.integers(0, 3 * XLOG_BLCKSZ),
)
@settings(max_examples=200, deadline=None)
def test_damaged_wal_reads_as_records_or_a_decode_error(
    edits: list[tuple[int, int]], cut: int
) -> None:
    """The codec's contract: any bytes either read or raise DecodeError, in linear time
    (a lying xl_tot_len meets a page header that does not continue it)."""
    wal = bytearray(_write(_records(60, 300)).out)
    for offset, value in edits:
        if offset < len(wal):
            wal[offset] = value
    try:
        for record in read_records(bytes(wal[:cut]), 0x1000000, SMALL_SEGMENT):
            assert len(record.data) >= 24 and record.end > record.lsn
    except DecodeError:
        pass


def test_the_new_timeline_has_no_segment_before_the_one_holding_the_switch() -> None:
    """After a switch in the recording's second segment, timeline 2 from the first one is
    58P01 for 00000002's file of it (only timeline 1 has that segment); timeline 1 there
    streams to the switch point, and timeline 2 from its first segment's start streams."""
    wal, ends = _timeline_1(200)
    at = next(end for end in ends if end > 0x1000000 + SMALL_SEGMENT + XLOG_BLCKSZ)
    client, recording = _served(wal)
    recording.promote(Fault("timeline_switch", lsn=at), 0)
    replies = client.query("START_REPLICATION 0/1000000 TIMELINE 2")
    assert isinstance(replies[0], CopyBothResponse)
    (error,) = [r for r in replies if isinstance(r, ErrorResponse)]
    assert dict(error.fields)["C"] == "58P01"
    assert dict(error.fields)["M"] == (
        "requested WAL segment 000000020000000000000200 has already been removed"
    )
    assert replies[-1] == ReadyForQuery("I")
    second = 0x1000000 + SMALL_SEGMENT
    assert isinstance(
        client.query(f"START_REPLICATION {LSN(second)} TIMELINE 2")[0], CopyBothResponse
    )
    xlog = [r for r in client.pump() if isinstance(r, replication.XLogData)]
    assert xlog[0].wal_start == second and xlog[-1].wal_end == recording.end_lsn
