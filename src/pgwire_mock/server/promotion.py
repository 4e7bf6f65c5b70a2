"""A promotion written into a recording's WAL: the ``timeline_switch`` fault.

What a standby promoted at ``at`` (the end of the last record it replayed, EndOfLog)
leaves for physical clients, as PostgreSQL 14–18 write it (xlog.c ``StartupXLOG`` /
``PerformRecoveryXLogAction`` / ``CreateEndOfRecoveryRecord``, timeline.c
``writeTimeLineHistory``):

* the new timeline's history file: the parent's content, a blank line when there was a
  parent file, then ``parentTLI<TAB>X/X<TAB>no recovery target specified``;
* the new timeline's WAL: the page holding ``at`` copied up to it (its header keeps the
  old timeline, as ``StartupXLOG`` copies the last partial page), an ``XLOG_END_OF_RECOVERY``
  record at ``at`` (``xl_end_of_recovery``: ``end_time``, ``ThisTimeLineID``,
  ``PrevTimeLineID``, and ``wal_level`` from 17 on; ``xl_prev`` the last replayed record),
  then the recording's records after ``at``, as the promoted server would go on writing
  them: laid out again after it (new page headers with the new timeline, continuations,
  segment ends), each ``xl_prev`` chained to the one before and its CRC redone;
  checkpoint records get the new timeline (``xlog_redo`` panics on another) and their
  redo pointer moved with the record it names.

The records' own bodies are otherwise kept: block references, full-page images and
commit records hold no WAL position of their own (the page LSN a replay sets is the
record's new LSN).
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from dataclasses import dataclass
from typing import Final

from codec.values import LSN
from codec.wal import (
    RM_XLOG_ID,
    SIZE_OF_XLOG_RECORD,
    XLOG_BLCKSZ,
    XLOG_CHECKPOINT_ONLINE,
    XLOG_CHECKPOINT_REDO,
    XLOG_CHECKPOINT_SHUTDOWN,
    XLOG_END_OF_RECOVERY,
    Record,
    WalWriter,
    assemble_record,
    page_header,
    read_records,
    record_crc,
)

__all__ = [
    "REASON",
    "Promoted",
    "PromotionError",
    "end_of_recovery_data",
    "history_content",
    "promote",
    "record_ends",
    "redo_pointer",
    "switch_index",
]

REASON: Final = "no recovery target specified"
"""writeTimeLineHistory's reason for a promotion without a recovery target."""
WAL_LEVEL_REPLICA: Final = 1
_EOR: Final = struct.Struct("<qII")
_CHECKPOINT_HEAD: Final = struct.Struct("<QII")
"""CheckPoint's first fields: redo, ThisTimeLineID, PrevTimeLineID."""


class PromotionError(ValueError):
    """A switch point the recording cannot be promoted at (the message says why)."""


@dataclass(frozen=True, slots=True)
class Promoted:
    """The recording's WAL with the new timeline written from ``at`` on."""

    wal: bytes
    """From the recording's start, as before up to ``at``."""
    end: int
    """The new end of WAL (after the last record)."""
    end_of_recovery: int
    """Where the XLOG_END_OF_RECOVERY record starts."""


def history_content(parent: str | None, parent_tli: int, at: int) -> str:
    """writeTimeLineHistory: the parent's file, a newline when there was one, the line."""
    line = f"{parent_tli}\t{LSN(at)}\t{REASON}\n"
    return line if parent is None else f"{parent}\n{line}"


def end_of_recovery_data(
    *, end_time: int, timeline: int, prev_timeline: int, major: int, wal_level: int
) -> bytes:
    """``sizeof(xl_end_of_recovery)`` bytes: 16, and 24 from 17 on, whose struct gained
    ``wal_level`` (an int, then 4 bytes of padding to the struct's 8-byte alignment)."""
    data = _EOR.pack(end_time, timeline, prev_timeline)
    if major >= 17:
        data += struct.pack("<i4x", wal_level)
    return data


def record_ends(wal: bytes, start: int, segment_size: int) -> list[Record]:
    """The recording's whole records, in order (their ``end``: the switch points a
    promotion can have, EndOfLog after each)."""
    return list(read_records(wal, start, segment_size))


def _main_data_at(record: bytes) -> int | None:
    """Where the main data of a record without block references starts."""
    if len(record) > SIZE_OF_XLOG_RECORD + 1 and record[SIZE_OF_XLOG_RECORD] == 255:
        return SIZE_OF_XLOG_RECORD + 2
    if len(record) > SIZE_OF_XLOG_RECORD + 4 and record[SIZE_OF_XLOG_RECORD] == 254:
        return SIZE_OF_XLOG_RECORD + 5
    return None


def _is_checkpoint(record: Record) -> bool:
    return record.is_xlog(XLOG_CHECKPOINT_ONLINE) or record.is_xlog(XLOG_CHECKPOINT_SHUTDOWN)


def redo_pointer(records: list[Record]) -> int | None:
    """GetRedoRecPtr at the end of ``records``: where the last checkpoint's redo starts
    (a physical slot made with RESERVE_WAL starts there, ``ReplicationSlotReserveWal``).
    On 17+ an online checkpoint marks it first with XLOG_CHECKPOINT_REDO, and the shared
    pointer moves then; before 17 it moves when the checkpoint begins, which the WAL shows
    only at its end record. None: no checkpoint in the records."""
    redo = None
    for record in records:
        if record.is_xlog(XLOG_CHECKPOINT_REDO):
            redo = record.lsn
        elif _is_checkpoint(record):
            at = _main_data_at(record.data)
            if at is not None and len(record.data) >= at + 8:
                redo = max(redo or 0, int(struct.unpack_from("<Q", record.data, at)[0]))
    return redo


def _wal_level(records: list[Record], major: int) -> int:
    """The server's wal_level, from the last checkpoint record (17+'s CheckPoint holds it
    after ``fullPageWrites``); replica when the recording has none."""
    for record in reversed(records):
        at = _main_data_at(record.data) if _is_checkpoint(record) else None
        if at is not None and major >= 17 and len(record.data) >= at + 24:
            return int(struct.unpack_from("<i", record.data, at + 20)[0])
    return WAL_LEVEL_REPLICA


def _checkpoint_moved(record: bytes, old: int, new: int, moved: dict[int, int]) -> bytes:
    """A checkpoint record on the new timeline: ThisTimeLineID (and PrevTimeLineID, which
    equals it but in an end-of-recovery checkpoint), the redo pointer moved with its
    record. The CRC is redone by the caller."""
    at = _main_data_at(record)
    if at is None or len(record) < at + _CHECKPOINT_HEAD.size:
        return record
    redo, this, prev = _CHECKPOINT_HEAD.unpack_from(record, at)
    head = _CHECKPOINT_HEAD.pack(
        moved.get(redo, redo), new if this == old else this, new if prev == old else prev
    )
    return record[:at] + head + record[at + _CHECKPOINT_HEAD.size :]


def _with_prev_and_crc(record: bytes, prev: int) -> bytes:
    out = bytearray(record)
    out[8:16] = prev.to_bytes(8, "little")
    out[20:24] = record_crc(bytes(out)).to_bytes(4, "little")
    return bytes(out)


def switch_index(records: list[Record], at: int, start: int) -> int:
    """The record ``at`` ends (EndOfLog after it); PromotionError when none does."""
    ends = [r.end for r in records]
    index = bisect_left(ends, at)
    if index < len(ends) and ends[index] == at:
        return index
    if not records or at < ends[0] or at > ends[-1]:
        first = LSN(ends[0]) if records else LSN(start)
        last = LSN(ends[-1]) if records else LSN(start)
        raise PromotionError(
            f"{LSN(at)} is outside the recording's WAL (switch points: the ends of its "
            f"records, from {first} to {last})"
        )
    raise PromotionError(
        f"{LSN(at)} is not a record boundary (the records around it end at "
        f"{LSN(ends[index - 1])} and {LSN(ends[index])})"
    )


def promote(
    wal: bytes,
    start: int,
    *,
    segment_size: int,
    system_identifier: int,
    at: int,
    timeline: int,
    major: int,
    end_time: int,
) -> Promoted:
    """The WAL ``[start, …)`` of ``timeline`` promoted to ``timeline + 1`` at ``at``;
    PromotionError when ``at`` is not the end of a whole record of it."""
    records = record_ends(wal, start, segment_size)
    index = switch_index(records, at, start)
    last = records[index]
    page = at - at % XLOG_BLCKSZ
    template = page_header(wal, (page if page < at else page - XLOG_BLCKSZ) - start)
    new = timeline + 1
    writer = WalWriter(
        at,
        wal[page - start : at - start],
        tli=new,
        magic=template.magic,
        info=template.info,
        sysid=system_identifier,
        segment_size=segment_size,
    )
    data = end_of_recovery_data(
        end_time=end_time,
        timeline=new,
        prev_timeline=timeline,
        major=major,
        wal_level=_wal_level(records[: index + 1], major),
    )
    eor = assemble_record(
        rmid=RM_XLOG_ID, info=XLOG_END_OF_RECOVERY, xid=0, prev=last.lsn, main_data=data
    )
    eor_lsn = writer.append(eor)
    moved: dict[int, int] = {}
    for record in records[index + 1 :]:
        if _is_checkpoint(record):
            body = _checkpoint_moved(record.data, timeline, new, moved)
            moved[record.lsn] = writer.append(_with_prev_and_crc(body, writer.prev))
        else:
            moved[record.lsn] = writer.chained(record.data)
    return Promoted(wal[: page - start] + bytes(writer.out), writer.pos, eor_lsn)
