"""WAL as PostgreSQL writes it: pages, records, CRC-32C (sans-IO byte format work).

Layouts, from ``src/include/access/xlog_internal.h`` and ``xlogrecord.h`` (the same on
PostgreSQL 14–18, little-endian, 8-byte MAXALIGN, 8 kB pages):

* ``XLogPageHeaderData`` (24 bytes): ``xlp_magic`` u16, ``xlp_info`` u16, ``xlp_tli``
  u32, ``xlp_pageaddr`` u64, ``xlp_rem_len`` u32, 4 bytes of padding; a segment's first
  page has ``XLogLongPageHeaderData`` (40 bytes): that, then ``xlp_sysid`` u64,
  ``xlp_seg_size`` u32, ``xlp_xlog_blcksz`` u32.
* ``XLogRecord`` (24 bytes): ``xl_tot_len`` u32, ``xl_xid`` u32, ``xl_prev`` u64,
  ``xl_info`` u8, ``xl_rmid`` u8, 2 bytes of padding (zero), ``xl_crc`` u32. A record
  starts MAXALIGNed; only ``xl_tot_len`` is sure to be on its first page, the rest
  continues after the next page's header (``XLP_FIRST_IS_CONTRECORD``, ``xlp_rem_len``
  the bytes of the record still to come).
* ``xl_crc``: CRC-32C (Castagnoli) over the record after its header, then over the
  header up to ``xl_crc`` (``XLogRecordAssemble`` and ``XLogInsertRecord``).

:func:`read_records` walks the records of a stretch of WAL as ``XLogReadRecord`` does;
:class:`WalWriter` lays records out as ``CopyXLogRecordToWAL`` does (page headers,
continuation, the rest of a segment after ``XLOG_SWITCH`` zeroed). Nothing here does
I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from codec.errors import DecodeError

__all__ = [
    "RM_XLOG_ID",
    "SIZE_OF_XLOG_RECORD",
    "XLOG_BLCKSZ",
    "XLOG_CHECKPOINT_ONLINE",
    "XLOG_CHECKPOINT_REDO",
    "XLOG_CHECKPOINT_SHUTDOWN",
    "XLOG_END_OF_RECOVERY",
    "XLOG_SWITCH",
    "XLP_BKP_REMOVABLE",
    "XLP_FIRST_IS_CONTRECORD",
    "XLP_LONG_HEADER",
    "PageHeader",
    "Record",
    "WalWriter",
    "assemble_record",
    "crc32c",
    "page_header",
    "read_records",
    "record_crc",
    "with_header",
]

XLOG_BLCKSZ: Final = 8192
SIZE_OF_SHORT_PHD: Final = 24
SIZE_OF_LONG_PHD: Final = 40
SIZE_OF_XLOG_RECORD: Final = 24
XLP_FIRST_IS_CONTRECORD: Final = 0x0001
XLP_LONG_HEADER: Final = 0x0002
XLP_BKP_REMOVABLE: Final = 0x0004
RM_XLOG_ID: Final = 0
XLOG_CHECKPOINT_SHUTDOWN: Final = 0x00
XLOG_CHECKPOINT_ONLINE: Final = 0x10
XLOG_SWITCH: Final = 0x40
XLOG_END_OF_RECOVERY: Final = 0x90
XLOG_CHECKPOINT_REDO: Final = 0xE0  # 17+: where an online checkpoint's redo begins
XLR_INFO_MASK: Final = 0x0F
XLR_BLOCK_ID_DATA_SHORT: Final = 255
XLR_BLOCK_ID_DATA_LONG: Final = 254

_PAGE: Final = struct.Struct("<HHIQI4x")
_LONG: Final = struct.Struct("<QII")
_RECORD: Final = struct.Struct("<IIQBBxxI")
_TOT_LEN: Final = struct.Struct("<I")
_CRC_AT: Final = 20
"""offsetof(XLogRecord, xl_crc): the header bytes the CRC covers."""


def _table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC_TABLE: Final = _table()


def crc32c(data: bytes | memoryview, crc: int = 0xFFFFFFFF) -> int:
    """COMP_CRC32C: ``crc`` carried on over ``data`` (no final XOR; start from
    INIT_CRC32C, 0xFFFFFFFF, and XOR the end with it for FIN_CRC32C)."""
    table = _CRC_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc


def record_crc(record: bytes) -> int:
    """``xl_crc`` of a whole record: its data after the header, then the header."""
    crc = crc32c(memoryview(record)[SIZE_OF_XLOG_RECORD:])
    return crc32c(memoryview(record)[:_CRC_AT], crc) ^ 0xFFFFFFFF


def with_header(record: bytes, *, prev: int) -> bytes:
    """``record`` with ``xl_prev`` = ``prev`` and ``xl_crc`` made right again without
    reading its data: the CRC is affine in its input, and only header bytes (the last
    ones it covers) changed, so the new CRC is the old one XOR the CRC, from zero and
    without the final XOR, of the header's change."""
    old = int.from_bytes(record[8:16], "little")
    crc = int.from_bytes(record[20:24], "little")
    change = bytes(8) + (old ^ prev).to_bytes(8, "little") + bytes(4)
    new_crc = crc ^ crc32c(change, 0)
    return b"".join(
        (
            record[:8],
            prev.to_bytes(8, "little"),
            record[16:20],
            new_crc.to_bytes(4, "little"),
            record[SIZE_OF_XLOG_RECORD:],
        )
    )


def assemble_record(*, rmid: int, info: int, xid: int, prev: int, main_data: bytes) -> bytes:
    """A record with main data and no block references (XLogRecordAssemble: the
    ``XLR_BLOCK_ID_DATA_SHORT``/``LONG`` header, the data), its CRC set."""
    if len(main_data) < 256:
        body = bytes((XLR_BLOCK_ID_DATA_SHORT, len(main_data))) + main_data
    else:
        body = bytes((XLR_BLOCK_ID_DATA_LONG,)) + _TOT_LEN.pack(len(main_data)) + main_data
    head = _RECORD.pack(SIZE_OF_XLOG_RECORD + len(body), xid, prev, info, rmid, 0)
    record = head + body
    crc = record_crc(record)
    return record[:_CRC_AT] + crc.to_bytes(4, "little") + body


@dataclass(frozen=True, slots=True)
class PageHeader:
    """XLogPageHeaderData, and the long header's fields on a segment's first page."""

    magic: int
    info: int
    tli: int
    pageaddr: int
    rem_len: int
    sysid: int | None = None
    seg_size: int | None = None
    xlog_blcksz: int | None = None

    @property
    def size(self) -> int:
        return SIZE_OF_LONG_PHD if self.info & XLP_LONG_HEADER else SIZE_OF_SHORT_PHD


def page_header(data: bytes | memoryview, offset: int = 0) -> PageHeader:
    """The page header at ``offset``; DecodeError when it is not one."""
    if len(data) - offset < SIZE_OF_SHORT_PHD:
        raise DecodeError("WAL page header", offset, "fewer than 24 bytes")
    magic, info, tli, pageaddr, rem_len = _PAGE.unpack_from(data, offset)
    if not info & XLP_LONG_HEADER:
        return PageHeader(magic, info, tli, pageaddr, rem_len)
    if len(data) - offset < SIZE_OF_LONG_PHD:
        raise DecodeError("WAL long page header", offset, "fewer than 40 bytes")
    sysid, seg_size, blcksz = _LONG.unpack_from(data, offset + SIZE_OF_SHORT_PHD)
    return PageHeader(magic, info, tli, pageaddr, rem_len, sysid, seg_size, blcksz)


def _maxalign(n: int) -> int:
    return (n + 7) & ~7


@dataclass(frozen=True, slots=True)
class Record:
    """One WAL record: where it starts, ``EndRecPtr`` (where the next one starts, or
    the page boundary before its header; for XLOG_SWITCH the segment's end), its bytes
    without the page headers that cut it."""

    lsn: int
    end: int
    data: bytes

    @property
    def rmid(self) -> int:
        return self.data[17]

    @property
    def info(self) -> int:
        return self.data[16]

    @property
    def prev(self) -> int:
        return int.from_bytes(self.data[8:16], "little")

    @property
    def crc(self) -> int:
        return int.from_bytes(self.data[20:24], "little")

    def is_xlog(self, info: int) -> bool:
        return self.rmid == RM_XLOG_ID and self.info & ~XLR_INFO_MASK == info


def read_records(wal: bytes, start: int, segment_size: int) -> Iterator[Record]:
    """The whole records of ``wal`` (WAL from LSN ``start``), in order, from the first
    that starts on a page in it (a continuation at the top of that page is skipped by its
    ``xlp_rem_len``); an incomplete last record and anything after an ``xl_tot_len`` of
    zero are not records. DecodeError (``offset``: in ``wal``) for a page header whose
    address is wrong, a continuation where none belongs, or a record shorter than its
    header."""
    end = start + len(wal)
    view = memoryview(wal)
    pos = start + (-start) % XLOG_BLCKSZ

    def header_at(at: int) -> PageHeader:
        header = page_header(view, at - start)
        if header.pageaddr != at:
            raise DecodeError(
                "WAL page header", at - start, f"xlp_pageaddr {header.pageaddr:X}, not {at:X}"
            )
        return header

    # Skip a record that began before the first whole page.
    while pos + SIZE_OF_SHORT_PHD <= end:
        header = header_at(pos)
        if not header.info & XLP_FIRST_IS_CONTRECORD:
            break
        room = XLOG_BLCKSZ - header.size
        if header.rem_len <= room:
            pos += header.size + _maxalign(header.rem_len)
            break
        pos += XLOG_BLCKSZ
    while True:
        if pos % XLOG_BLCKSZ == 0:
            if pos + SIZE_OF_SHORT_PHD > end:
                return
            header = header_at(pos)
            if header.info & XLP_FIRST_IS_CONTRECORD:
                raise DecodeError("WAL page header", pos - start, "continuation before a record")
            pos += header.size
        if pos + 4 > end:
            return
        (tot_len,) = _TOT_LEN.unpack_from(view, pos - start)
        if tot_len == 0:
            return
        if tot_len < SIZE_OF_XLOG_RECORD:
            raise DecodeError("XLogRecord", pos - start, f"xl_tot_len {tot_len} < 24")
        parts: list[memoryview] = []
        at, remaining = pos, tot_len
        while True:
            take = min(remaining, XLOG_BLCKSZ - at % XLOG_BLCKSZ)
            if at + take > end:
                return
            parts.append(view[at - start : at - start + take])
            at += take
            remaining -= take
            if not remaining:
                break
            if at + SIZE_OF_SHORT_PHD > end:
                return
            header = header_at(at)
            if not header.info & XLP_FIRST_IS_CONTRECORD or header.rem_len != remaining:
                raise DecodeError(
                    "WAL page header",
                    at - start,
                    f"expected a continuation of {remaining} bytes, found xlp_info "
                    f"{header.info:#x} xlp_rem_len {header.rem_len}",
                )
            at += header.size
        data = b"".join(parts)
        record_end = _maxalign(at)
        record = Record(pos, record_end, data)
        if record.is_xlog(XLOG_SWITCH):
            record_end += (-record_end) % segment_size
            record = Record(pos, record_end, data)
        yield record
        pos = record_end


class WalWriter:
    """Records laid out as XLogInsert lays them out, from ``start`` on: a page header at
    each page (long at a segment's first), ``XLP_FIRST_IS_CONTRECORD`` and ``xlp_rem_len``
    on the pages a record continues onto, records MAXALIGNed, the rest of the segment
    zeroed after XLOG_SWITCH. ``head`` is the page holding ``start`` up to it, kept as it
    is (the page a promotion copies from the old timeline)."""

    def __init__(
        self,
        start: int,
        head: bytes,
        *,
        tli: int,
        magic: int,
        info: int,
        sysid: int,
        segment_size: int,
    ) -> None:
        if (start - len(head)) % XLOG_BLCKSZ or start % 8:
            raise ValueError(f"{start:X} with {len(head)} bytes before it is not a page's start")
        self.start = start - len(head)
        self.pos = start
        self.out = bytearray(head)
        self.tli, self.magic, self.sysid = tli, magic, sysid
        self.info = info & ~(XLP_FIRST_IS_CONTRECORD | XLP_LONG_HEADER)
        self.segment_size = segment_size
        self.prev = 0
        """Where the last record appended starts (the next one's ``xl_prev``)."""

    def _page_header(self, rem_len: int) -> None:
        first = self.pos % self.segment_size == 0
        info = self.info | (XLP_FIRST_IS_CONTRECORD if rem_len else 0)
        info |= XLP_LONG_HEADER if first else 0
        header = _PAGE.pack(self.magic, info, self.tli, self.pos, rem_len)
        if first:
            header += _LONG.pack(self.sysid, self.segment_size, XLOG_BLCKSZ)
        self.out += header
        self.pos += len(header)

    def append(self, record: bytes) -> int:
        """Write ``record`` (its ``xl_prev`` and CRC already right); its LSN."""
        if self.pos % XLOG_BLCKSZ == 0:
            self._page_header(0)
        lsn = self.pos
        done, size = 0, len(record)
        while done < size:
            take = min(size - done, XLOG_BLCKSZ - self.pos % XLOG_BLCKSZ)
            self.out += record[done : done + take]
            self.pos += take
            done += take
            if done < size:
                self._page_header(size - done)
        pad = (-self.pos) % 8
        tot_len, info, rmid = _TOT_LEN.unpack_from(record)[0], record[16], record[17]
        if rmid == RM_XLOG_ID and info & ~XLR_INFO_MASK == XLOG_SWITCH and tot_len:
            pad = (-self.pos) % self.segment_size
        self.out += bytes(pad)
        self.pos += pad
        self.prev = lsn
        return lsn

    def chained(self, record: bytes) -> int:
        """``record`` with ``xl_prev`` the last record appended (CRC redone), appended."""
        return self.append(with_header(record, prev=self.prev))
