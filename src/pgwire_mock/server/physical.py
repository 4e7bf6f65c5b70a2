"""Physical replication from a recording: what a physical walsender streams.

A :class:`PhysicalRecording` is what ``pgwire-mock record --physical`` wrote (the format
is documented in ``docs/physical.md``): the server's IDENTIFY_SYSTEM row, its timeline
history files, and its WAL from a start position to the flush position at the end of the
recording. :class:`PhysicalStream` streams it to one client as a physical walsender does
(``StartReplication`` / ``WalSndLoop`` / ``XLogSendPhysical`` in walsender.c); it is
sans-IO, driven by the session (:mod:`pgwire_mock.server.session`), which hands it the
client's CopyData and the passing of time and sends the frames it returns.

Facts reproduced, each checked against real 14–18 (``tests/pgwire_mock/
test_physical_postgres.py``):

* Before CopyBothResponse: an unknown timeline, XX000 ``requested timeline N is not in
  this server's history`` (timeline.c ``tliSwitchPoint``). After it: a start beyond the
  flush position, XX000 ``requested starting point X is ahead of the WAL flush position
  of this server Y``; a start before the WAL the server still has, 58P01 ``requested WAL
  segment … has already been removed``; both followed by ReadyForQuery.
* XLogData: ``wal_start`` the first byte's position, ``wal_end`` the flush position, at
  most ``MAX_SEND_SIZE`` (16 WAL pages) per message, cut at a page boundary unless it
  reaches the flush position.
* At the end of the WAL the walsender waits: no keepalives but the reply-requested one
  after wal_sender_timeout/2 of silence from the client, and an exit without a word at the
  full timeout (``WalSndKeepaliveIfNecessary``, ``WalSndCheckTimeOut``).
* A status update's flush position becomes a physical slot's restart_lsn, forwards or
  backwards (``PhysicalConfirmReceivedLocation``); a reply request is answered at once.
* The client's CopyDone: CopyDone, CommandComplete ``START_STREAMING`` then
  ``START_REPLICATION``, ReadyForQuery.
* An older timeline of the recording's history, up to its switch point: ``wal_end`` the
  switch point, then CopyDone; after the client's, the ``next_tli`` row and
  START_STREAMING; from the switch point itself no COPY at all
  (``test_physical_timeline_postgres.py``, a server promoted to timeline 2).
* Faults (:mod:`pgwire_mock.server.faults`): WAL removed under a stream fails as
  ``CheckXLogRemoved`` (XX000) inside the segment being read and as
  ``WalSndSegmentOpen`` (58P01) for one to open (``test_physical_faults_postgres.py``).
  ``timeline_switch`` promotes the recording (:mod:`pgwire_mock.server.promotion`): a
  stream on the old timeline then ends at the switch point as above
  (``test_physical_promotion_postgres.py``: real promotions and standbys).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

from codec import DecodeError
from codec.replication import (
    PrimaryKeepalive,
    StandbyStatusUpdate,
    XLogData,
    decode_client_copy_data,
)
from codec.values import LSN
from codec.wire import (
    CommandComplete,
    CopyData,
    CopyDone,
    DataRow,
    FieldDescription,
    RowDescription,
)
from pgwire_mock import json_text
from pgwire_mock.server.basebackup import RecordedBackup
from pgwire_mock.server.errors import ServerError
from pgwire_mock.server.faults import PHYSICAL_FAULTS, ActiveFaults, Fault, FaultError
from pgwire_mock.server.pgoutput_options import PgOutputOptions
from pgwire_mock.server.promotion import (
    PromotionError,
    history_content,
    promote,
    record_ends,
    redo_pointer,
    switch_index,
)
from pgwire_mock.server.source import StreamEvent
from pgwire_mock.server.state import PublicationState, ServerState, SlotState
from pgwire_mock.server.versions import ErrorFact, error, format_error

__all__ = [
    "FORMAT",
    "MAX_SEND_SIZE",
    "HistoryFile",
    "PhysicalRecording",
    "PhysicalRecordingError",
    "PhysicalStream",
    "physical_error",
    "segment_file_name",
    "start_physical",
    "timeline_history_result",
    "timeline_of_point",
]

FORMAT: Final = "pgwire-mock physical recording 2"
_FORMATS: Final = ("pgwire-mock physical recording 1", FORMAT)
"""1 held the WAL in hex and no base backups; 2 holds it in base64 and may hold some."""
XLOG_BLCKSZ: Final = 8192
MAX_SEND_SIZE: Final = XLOG_BLCKSZ * 16
"""walsender.c: the most WAL one XLogData carries."""

# (sqlstate, message, file, routine, line per major), as real servers send them; the
# errors the logical side shares (WAL removed, no history file) are in versions.ERRORS.
_ERRORS: Final[dict[str, ErrorFact]] = {
    "ahead_of_flush": ErrorFact(
        "XX000",
        "requested starting point {start} is ahead of the WAL flush position of this "
        "server {flush}",
        "walsender.c",
        "StartReplication",
        {14: 741, 15: 848, 16: 836, 17: 986, 18: 958},
    ),
    # The segment was removed while WALRead had it open: the read succeeds, then
    # CheckXLogRemoved fails with errcode_for_file_access() of a stale errno (XX000, read
    # off real 14-18 whose walsender was mid-segment when a checkpoint removed it).
    "wal_removed_open_segment": ErrorFact(
        "XX000",
        "requested WAL segment {segment} has already been removed",
        "xlog.c",
        "CheckXLogRemoved",
        {14: 4040, 15: 3473, 16: 3460, 17: 3721, 18: 3741},
    ),
    "timeline_not_in_history": ErrorFact(
        "XX000",
        "requested timeline {timeline} is not in this server's history",
        "timeline.c",
        "tliSwitchPoint",
        dict.fromkeys((14, 15, 16, 17, 18), 590),
    ),
}


def physical_error(major: int, kind: str, **args: object) -> ServerError:
    """The ServerError PostgreSQL ``major`` sends for ``kind`` (a key of ``_ERRORS``)."""
    return format_error(_ERRORS[kind], major, args)


def segment_file_name(timeline: int, lsn: int, segment_size: int) -> str:
    """``XLogFileName``: the segment file holding ``lsn``."""
    segment = lsn // segment_size
    per_id = 0x1_0000_0000 // segment_size
    return f"{timeline:08X}{segment // per_id:08X}{segment % per_id:08X}"


class PhysicalRecordingError(ValueError):
    """A physical recording file that cannot be read (the message says where and why)."""


@dataclass(frozen=True, slots=True)
class HistoryFile:
    """A timeline history file as TIMELINE_HISTORY sends it."""

    timeline: int
    filename: str
    content: str

    def switch_points(self) -> dict[int, int]:
        """Timeline -> where the server switched off it (``readTimeLineHistory``)."""
        points: dict[int, int] = {}
        for line in self.content.splitlines():
            fields = line.split()
            if len(fields) < 2 or not fields[0].isdigit():
                continue  # comments and blank lines, as readTimeLineHistory skips them
            points[int(fields[0])] = int(LSN.parse(fields[1]))
        return points


@dataclass(slots=True)
class PhysicalRecording:
    """A recorded physical stream: the WAL ``[start, end)`` of one timeline."""

    server_version: str
    major: int | None
    system_identifier: int
    timeline: int
    start_lsn: int
    end_lsn: int
    """The server's flush position when recorded: the fake's end of WAL."""
    wal_data: bytes
    segment_size: int = 16 * 1024 * 1024
    histories: Sequence[HistoryFile] = ()
    backups: Sequence[RecordedBackup] = ()
    """BASE_BACKUPs as the server answered them (:mod:`pgwire_mock.server.basebackup`)."""
    # What serve expects of every source (pgwire_mock.server.source.StreamSource).
    slots: Sequence[SlotState] = ()
    publications: Sequence[PublicationState] = ()
    removed_before: int = field(default=0, compare=False)
    """The server's WAL before this (a segment start) is gone: the ``wal_removed`` fault
    (XLogCtl->lastRemovedSegNo + 1). Not part of the file: a serve's state."""
    promotions: set[Fault] = field(default_factory=set, compare=False)
    """The ``timeline_switch`` faults that promoted it (each acts once)."""

    def remove_wal(self, lsn: int | None) -> int:
        """Remove the segments before the one holding ``lsn`` (default and at most: the
        one holding the end of WAL, which a checkpoint never removes); the new start."""
        end = self.end_lsn - self.end_lsn % self.segment_size
        target = end if lsn is None else min(end, lsn - lsn % self.segment_size)
        self.removed_before = max(self.removed_before, target)
        return self.removed_before

    def switch_at(self, lsn: int | None) -> int:
        """Where a ``timeline_switch`` fault promotes: ``lsn``, or the end of the last
        whole record; FaultError (one line) unless that is the end of a record of the
        current timeline."""
        records = record_ends(self.wal_data, self.start_lsn, self.segment_size)
        at = lsn if lsn is not None else (records[-1].end if records else self.start_lsn)
        history = self.history(self.timeline)
        begin = max(history.switch_points().values(), default=0) if history else 0
        if at < begin:
            raise FaultError(
                f"timeline_switch: {LSN(at)} is before timeline {self.timeline} began at "
                f"{LSN(begin)}"
            )
        try:
            switch_index(records, at, self.start_lsn)
        except PromotionError as err:
            raise FaultError(f"timeline_switch: {err}") from None
        return at

    def timeline_first_segment(self) -> int:
        """Where the current timeline's first segment starts (the one holding its switch
        point; 0 on timeline 1): the server has no file of it for older segments."""
        history = self.history(self.timeline)
        begin = max(history.switch_points().values(), default=0) if history else 0
        return begin - begin % self.segment_size

    def check_fault(self, fault: Fault) -> None:
        """FaultError now for a fault this recording cannot take (``serve --fault``,
        ``inject()``): a ``timeline_switch`` at no record's end."""
        if fault.name == "timeline_switch" and fault not in self.promotions:
            self.switch_at(fault.lsn)

    def promote(self, fault: Fault, end_time: int) -> bool:
        """``timeline_switch``: a promotion at the fault's switch point
        (:mod:`pgwire_mock.server.promotion`): the next timeline's history file, its WAL
        from the switch point, the new end of WAL. False when this fault did it already."""
        if fault in self.promotions:
            return False
        at = self.switch_at(fault.lsn)
        promoted = promote(
            self.wal_data,
            self.start_lsn,
            segment_size=self.segment_size,
            system_identifier=self.system_identifier,
            at=at,
            timeline=self.timeline,
            major=self.major or 16,
            end_time=end_time,
        )
        parent = self.history(self.timeline)
        new = self.timeline + 1
        content = history_content(parent.content if parent else None, self.timeline, at)
        self.histories = (*self.histories, HistoryFile(new, f"{new:08X}.history", content))
        self.wal_data, self.end_lsn, self.timeline = promoted.wal, promoted.end, new
        self.promotions.add(fault)
        return True

    def events(self, options: PgOutputOptions, major: int, from_lsn: int) -> Iterator[StreamEvent]:
        """A logical START_REPLICATION on a physical recording streams nothing."""
        return iter(())

    def history(self, timeline: int) -> HistoryFile | None:
        return next((h for h in self.histories if h.timeline == timeline), None)

    # --- the file format (docs/physical.md) ---------------------------------------------

    def write(self, out: IO[str]) -> None:
        meta = {
            "format": FORMAT,
            "server_version": self.server_version,
            "major": self.major,
            "system_identifier": str(self.system_identifier),
            "timeline": self.timeline,
            "start": str(LSN(self.start_lsn)),
            "end": str(LSN(self.end_lsn)),
            "wal_segment_size": self.segment_size,
        }
        out.write(json.dumps({"physical": meta}) + "\n")
        for h in self.histories:
            history = {"timeline": h.timeline, "filename": h.filename, "content": h.content}
            out.write(json.dumps({"timeline_history": history}) + "\n")
        # One line per 128 kB: the file stays greppable and lines stay short.
        for offset in range(0, len(self.wal_data), MAX_SEND_SIZE):
            chunk = self.wal_data[offset : offset + MAX_SEND_SIZE]
            wal_start = str(LSN(self.start_lsn + offset))
            line = {"wal_start": wal_start, "base64": base64.b64encode(chunk).decode()}
            out.write(json.dumps(line) + "\n")
        for backup in self.backups:
            for item in backup.to_lines():
                out.write(json.dumps(item) + "\n")

    @classmethod
    def read(cls, source: IO[str], name: str) -> PhysicalRecording:
        """Parse a recording; raises :class:`PhysicalRecordingError` with the line number."""
        meta: dict[str, Any] | None = None
        histories: list[HistoryFile] = []
        wal = bytearray()
        backups: list[RecordedBackup] = []
        head: dict[str, Any] | None = None
        messages: list[bytes] = []
        for number, line in enumerate(source, 1):
            if not line.strip():
                continue
            where = f"{name}:{number}"
            try:
                obj = json_text.loads(line)
                if meta is None:
                    meta = obj["physical"]
                    if meta.get("format") not in _FORMATS:
                        raise PhysicalRecordingError(
                            f"{where}: not a {FORMAT!r} file (format {meta.get('format')!r})"
                        )
                    start = int(LSN.parse(meta["start"]))
                elif "timeline_history" in obj:
                    h = obj["timeline_history"]
                    histories.append(
                        HistoryFile(int(h["timeline"]), str(h["filename"]), str(h["content"]))
                    )
                elif "message" in obj:
                    if head is None:
                        raise PhysicalRecordingError(f"{where}: a message outside a base backup")
                    messages.append(base64.b64decode(obj["message"], validate=True))
                elif "base_backup" in obj:
                    if head is not None:
                        backups.append(RecordedBackup.from_head(head, messages))
                    head, messages = obj["base_backup"], []
                else:
                    at = int(LSN.parse(obj["wal_start"]))
                    if at != start + len(wal):
                        raise PhysicalRecordingError(
                            f"{where}: WAL at {LSN(at)} does not follow {LSN(start + len(wal))}"
                        )
                    if "base64" in obj:
                        wal += base64.b64decode(obj["base64"], validate=True)
                    else:
                        wal += bytes.fromhex(obj["data"])
            except PhysicalRecordingError:
                raise
            except (ValueError, KeyError, TypeError, AttributeError) as err:
                raise PhysicalRecordingError(f"{where}: bad line: {err!r}") from None
        if meta is None:
            raise PhysicalRecordingError(f"{name}: empty, no physical meta line")
        try:
            if head is not None:
                backups.append(RecordedBackup.from_head(head, messages))
            recording = cls(
                server_version=str(meta["server_version"]),
                major=int(meta["major"]),
                system_identifier=int(meta["system_identifier"]),
                timeline=int(meta["timeline"]),
                start_lsn=int(LSN.parse(meta["start"])),
                end_lsn=int(LSN.parse(meta["end"])),
                wal_data=bytes(wal),
                segment_size=int(meta.get("wal_segment_size", 16 * 1024 * 1024)),
                histories=tuple(histories),
                backups=tuple(backups),
            )
        except (ValueError, KeyError, TypeError) as err:
            raise PhysicalRecordingError(f"{name}: bad meta line or base backup: {err!r}") from None
        if recording.start_lsn + len(recording.wal_data) != recording.end_lsn:
            raise PhysicalRecordingError(
                f"{name}: WAL from {LSN(recording.start_lsn)} ends at "
                f"{LSN(recording.start_lsn + len(recording.wal_data))}, "
                f"not at {LSN(recording.end_lsn)}"
            )
        return recording

    @classmethod
    def from_file(cls, path: Path) -> PhysicalRecording:
        with path.open() as f:
            return cls.read(f, str(path))

    @staticmethod
    def is_physical(path: Path) -> bool:
        """True when ``path`` starts with a physical recording's meta line."""
        try:
            with path.open("rb") as f:
                return f.read(len(b'{"physical"')) == b'{"physical"'
        except OSError:
            return False


def redo_pointer_of(source: object) -> int | None:
    """Where a physical slot made with RESERVE_WAL starts on a physical recording: the
    last checkpoint's redo in its WAL (GetRedoRecPtr), else the recording's start, the
    oldest WAL the fake has. None for other sources (the slot starts as new slots do)."""
    if not isinstance(source, PhysicalRecording):
        return None
    try:
        redo = redo_pointer(record_ends(source.wal_data, source.start_lsn, source.segment_size))
    except DecodeError:  # WAL that is not PostgreSQL's (a hand-made recording)
        redo = None
    return source.start_lsn if redo is None or redo < source.start_lsn else redo


def timeline_of_point(source: object, lsn: int, current: int) -> int:
    """tliOfPointInHistory (timeline.c): the timeline ``lsn`` lies on in the history of
    a physical recording's timeline (a switch point belongs to the next one); without a
    physical recording, ``current``."""
    history = None
    if isinstance(source, PhysicalRecording):
        current = source.timeline
        history = source.history(current)
    if history is not None:
        for timeline, switch in sorted(history.switch_points().items()):
            if lsn < switch:
                return timeline
    return current


def timeline_history_result(
    major: int, recording: PhysicalRecording | None, timeline: int
) -> tuple[tuple[tuple[str | None, ...], ...], ServerError | None]:
    """TIMELINE_HISTORY's row, or the error that follows its RowDescription: the real
    server describes the result before it opens the file (``SendTimeLineHistory``)."""
    history = recording.history(timeline) if recording is not None else None
    if history is None:
        return (), error(major, "timeline_history_missing", timeline=timeline)
    return ((history.filename, history.content),), None


@dataclass(slots=True)
class PhysicalStream:
    """One physical START_REPLICATION being streamed from a recording."""

    recording: PhysicalRecording
    state: ServerState
    slot: SlotState | None
    sent_ptr: int
    last_reply: float
    wal_sender_timeout: float
    error: ServerError | None = None
    """Sent right after CopyBothResponse, ending the stream (the start was unusable)."""
    waiting_for_ping: bool = False
    done_sending: bool = False
    reported: tuple[int, int, int, int] = (0, 0, 0, 0)
    on_status_update: Callable[[StandbyStatusUpdate], None] | None = field(default=None)
    major: int = 16
    faults: ActiveFaults = field(default_factory=ActiveFaults)
    closing: bool = False
    """``close_after`` has run out: the connection drops, without an ErrorResponse."""
    open_segment: int | None = None
    """The segment WALRead read last, still open: its removal shows only afterwards, in
    CheckXLogRemoved; any other segment is opened first (WalSndSegmentOpen)."""
    switch_point: int | None = None
    """A historic timeline's end (sendTimeLineValidUpto): the stream stops there."""
    next_timeline: int = 0
    """The timeline that follows a historic one (sendTimeLineNextTLI)."""
    timeline: int = 0
    """The timeline streamed (0: the recording's when it started)."""

    @property
    def send_upto(self) -> int:
        """XLogSendPhysical's SendRqstPtr: the flush position, or the switch point."""
        return self.recording.end_lsn if self.switch_point is None else self.switch_point

    @property
    def caught_up(self) -> bool:
        return self.sent_ptr >= self.send_upto

    @property
    def can_produce(self) -> bool:
        self._follow_promotion()
        if self.error is not None or self.done_sending or self.closing:
            return False
        # A historic timeline's end is reached by producing: the server's CopyDone.
        return self.switch_point is not None or not self.caught_up

    def ready(self, now: float) -> bool:
        """:attr:`can_produce`, and no fault (``slow``) holds the stream back now."""
        return self.can_produce and not self.faults.blocks_production(now)

    def produce(self, max_bytes: int, send_time: int, now: float = 0.0) -> list[bytes]:
        """XLogData frames, about ``max_bytes`` of them (XLogSendPhysical, repeatedly).
        A removed segment sets :attr:`error`; ``close_after`` cuts the stream short and
        sets :attr:`closing`."""
        faults = self.faults
        max_bytes = faults.budget_for(max_bytes, now)
        counting = faults.messages_left is not None or faults.bytes_left is not None
        frames: list[bytes] = []
        produced = 0
        flush = self.send_upto
        base = self.recording.start_lsn
        wal = self.recording.wal_data
        while produced < max_bytes and self.can_produce:
            start = self.sent_ptr
            if self.switch_point is not None and start >= flush:
                # XLogSendPhysical at the end of a historic timeline: CopyDone, then
                # wait for the client's (StartReplication sends the next timeline).
                frames.append(CopyDone().encode())
                self.done_sending = True
                break
            end = start + MAX_SEND_SIZE
            if flush <= end:
                end = flush
            else:
                end -= end % XLOG_BLCKSZ
            self.error = self._removed(start)
            if self.error is not None:
                break
            self.open_segment = (end - 1) // self.recording.segment_size
            payload = XLogData(start, flush, send_time, wal[start - base : end - base]).encode()
            frame = CopyData(payload).encode()
            if counting:
                frame, self.closing = faults.cut(frame)
            frames.append(frame)
            produced += len(frame)
            self.sent_ptr = end
        faults.spent(produced, now)
        if self.caught_up and self.error is None:
            frames += self.walsnd_done(send_time)
        return frames

    def _follow_promotion(self) -> None:
        """A ``timeline_switch`` since this stream started: the timeline it streams is now
        a historic one, which ends at the switch point (a stream already past it is one
        the promoted server would not have: it gets the error a reconnect would)."""
        current = self.recording.timeline
        if self.switch_point is not None or not self.timeline or self.timeline == current:
            return
        history = self.recording.history(current)
        points = history.switch_points() if history is not None else {}
        switch = points.get(self.timeline)
        if switch is None:
            return
        self.switch_point = switch
        self.next_timeline = min((t for t in points if t > self.timeline), default=current)
        if self.sent_ptr > switch and self.error is None:
            self.error = forked_error(self.timeline, self.sent_ptr, switch)

    def end_messages(self) -> list[bytes]:
        """After the client's CopyDone (StartReplication after WalSndLoop): CopyDone
        unless already sent, a historic timeline's ``next_tli`` row, START_STREAMING."""
        out = [] if self.done_sending else [CopyDone().encode()]
        self.done_sending = True
        if self.switch_point is not None:
            columns = (
                FieldDescription("next_tli", type_oid=20, type_size=8),
                FieldDescription("next_tli_startpos", type_oid=25),
            )
            row = (str(self.next_timeline).encode(), str(LSN(self.switch_point)).encode())
            out += [RowDescription(columns).encode(), DataRow(row).encode()]
        out.append(CommandComplete("START_STREAMING").encode())
        return out

    def _removed(self, start: int) -> ServerError | None:
        """WALRead at ``start`` in a removed segment: WalSndSegmentOpen's ENOENT (58P01)
        when it must open it, CheckXLogRemoved's XX000 when it has it open already."""
        if start >= self.recording.removed_before:
            return None
        segment_size = self.recording.segment_size
        name = segment_file_name(self.recording.timeline, start, segment_size)
        if start // segment_size == self.open_segment:
            return physical_error(self.major, "wal_removed_open_segment", segment=name)
        return error(self.major, "wal_segment_removed", segment=name)

    def activate(
        self, fault: Fault, now: float, send_time: int = 0, *, injected: bool = False
    ) -> list[bytes] | None:
        """Put ``fault`` in force (:mod:`pgwire_mock.server.faults`); the frames to send
        now, or None when it does not apply to a physical stream. The session then sends
        :attr:`error` or closes for :attr:`closing`. ``injected`` (at run time, not at
        START_REPLICATION): a ``timeline_switch`` before what was sent is a FaultError."""
        f = self.faults
        name = fault.name
        if name not in PHYSICAL_FAULTS:
            return None
        if name == "timeline_switch":
            self.switch_timeline(fault, send_time, injected=injected)
            return []
        if name == "shutdown":
            # The recording's end stands for the shutdown checkpoint: the last WAL.
            f.shutdown = True
            if not fault.wait:
                self.closing = True
                return [CommandComplete("COPY 0").encode()]
            return self.walsnd_done(send_time)
        if name == "wal_removed":
            self.recording.remove_wal(fault.lsn)
        elif name == "close_after":
            f.messages_left, f.bytes_left = fault.messages, fault.bytes
            self.closing = not (fault.messages or fault.bytes)
        elif name == "slow":
            f.rate, f.budget, f.budget_at = fault.rate, 0.0, now
        elif name == "stop_keepalives":
            f.keepalives = False
        elif name == "error":
            self.error = fault.server_error()
        return []

    def switch_timeline(self, fault: Fault, send_time: int, *, injected: bool) -> None:
        """The server promotes (``timeline_switch``): IDENTIFY_SYSTEM's timeline and end of
        WAL move on, and a stream on the old timeline ends at the switch point."""
        recording = self.recording
        timeline = self.timeline or recording.timeline
        if injected and fault not in recording.promotions and timeline == recording.timeline:
            at = recording.switch_at(fault.lsn)
            if at < self.sent_ptr:
                raise FaultError(
                    f"timeline_switch: {LSN(at)} is before the client's position "
                    f"{LSN(self.sent_ptr)} on timeline {timeline}"
                )
        if recording.promote(fault, send_time):
            self.state.timeline = recording.timeline
            self.state.wal_lsn = recording.end_lsn
            self.state.save()
        self._follow_promotion()

    def walsnd_done(self, send_time: int) -> list[bytes]:
        """WalSndDone under a ``shutdown`` fault, once all WAL is sent: CommandComplete
        ``COPY 0`` without CopyDone and a close when the client's write position (its
        flush, if it reports no write) has reached it, else one reply request."""
        if not self.faults.shutdown or not self.caught_up or self.closing:
            return []
        write, flush = self.reported[0], self.reported[1]
        if (write or flush) >= self.sent_ptr:
            self.closing = True
            return [CommandComplete("COPY 0").encode()]
        if self.waiting_for_ping:
            return []
        self.waiting_for_ping = True
        return [self.keepalive(send_time, reply=True)]

    def keepalive(self, send_time: int, *, reply: bool) -> bytes:
        """WalSndKeepalive: the position sent so far."""
        return CopyData(PrimaryKeepalive(self.sent_ptr, send_time, reply).encode()).encode()

    def receive(self, payload: bytes, now: float, send_time: int) -> list[bytes] | None:
        """A CopyData from the client (ProcessRepliesIfAny); None: close the connection
        (an unknown message is a COMMERROR: logged, then the walsender exits)."""
        try:
            reply = decode_client_copy_data(payload)
        except DecodeError:
            return None
        self.last_reply = now
        self.waiting_for_ping = False
        if not isinstance(reply, StandbyStatusUpdate):
            return []  # hot standby feedback: a physical slot's xmin is not emulated
        self.reported = (
            reply.written_lsn,
            reply.flushed_lsn,
            reply.applied_lsn,
            reply.send_time,
        )
        if self.on_status_update is not None:
            self.on_status_update(reply)
        if (
            self.slot is not None
            and reply.flushed_lsn
            and self.slot.restart_lsn != reply.flushed_lsn
        ):
            # PhysicalConfirmReceivedLocation: restart_lsn is the client's flush position,
            # even when it moves back.
            self.slot.restart_lsn = reply.flushed_lsn
            self.state.save()
        done = self.walsnd_done(send_time)
        if not (reply.reply_requested and self.faults.keepalives):
            return done
        return [self.keepalive(send_time, reply=False), *done]

    def next_deadline(self) -> float | None:
        times = self.faults.deadlines()
        # stop_keepalives turns the replication timeout off too, as on a logical stream.
        if self.wal_sender_timeout > 0 and self.faults.keepalives:
            if self.waiting_for_ping:
                times.append(self.last_reply + self.wal_sender_timeout)
            else:
                times.append(self.last_reply + self.wal_sender_timeout / 2)
        return min(times) if times else None

    def tick(self, now: float, send_time: int) -> list[bytes] | None:
        """WalSndCheckTimeOut then WalSndKeepaliveIfNecessary; None: the timeout passed
        and the walsender exits without an ErrorResponse."""
        f = self.faults
        if f.throttled_until is not None and now >= f.throttled_until:
            f.throttled_until = None
        timeout = self.wal_sender_timeout
        if timeout <= 0 or not f.keepalives:
            return []
        if now >= self.last_reply + timeout:
            return None
        if not self.waiting_for_ping and now >= self.last_reply + timeout / 2:
            self.waiting_for_ping = True
            return [self.keepalive(send_time, reply=True)]
        return []


def forked_error(timeline: int, start: int, switch: int) -> ServerError:
    """StartReplication for a start past a historic timeline's switch point."""
    return ServerError(
        "ERROR",
        "XX000",
        f"requested starting point {LSN(start)} on timeline {timeline} is not in this "
        "server's history",
        f"This server's history forked from timeline {timeline} at {LSN(switch)}.",
    )


def start_physical(
    major: int,
    recording: PhysicalRecording,
    state: ServerState,
    slot: SlotState | None,
    start_lsn: int,
    timeline: int,
    *,
    now: float,
    wal_sender_timeout: float,
) -> PhysicalStream:
    """StartReplication for a recording: raises the errors that come before
    CopyBothResponse; those after it are the stream's :attr:`PhysicalStream.error`."""
    current = recording.timeline
    switch: int | None = None
    points: dict[int, int] = {}
    if timeline and timeline != current:
        history = recording.history(current)
        points = history.switch_points() if history is not None else {}
        if timeline not in points:
            raise physical_error(major, "timeline_not_in_history", timeline=timeline)
        switch = points[timeline]
        if switch < start_lsn:
            raise forked_error(timeline, start_lsn, switch)
    stream = PhysicalStream(
        recording=recording,
        state=state,
        slot=slot,
        sent_ptr=start_lsn,
        last_reply=now,
        wal_sender_timeout=wal_sender_timeout,
        major=major,
        timeline=timeline or current,
    )
    sent_timeline = timeline or current
    historic = switch is not None and recording.start_lsn <= start_lsn
    if switch is not None and historic:
        # A historic timeline: its WAL up to the switch point is the recorded WAL there
        # (the new timeline's first segment copies the old one's up to the switch).
        stream.switch_point = switch
        stream.next_timeline = min((t for t in points if t > timeline), default=current)
    if recording.end_lsn < start_lsn:
        stream.error = physical_error(
            major,
            "ahead_of_flush",
            start=LSN(start_lsn),
            flush=LSN(recording.end_lsn),
        )
    elif (
        start_lsn < max(recording.start_lsn, recording.removed_before)
        or (sent_timeline != current and not historic)
        or (sent_timeline == current and start_lsn < recording.timeline_first_segment())
    ):
        # The recording holds no older WAL (nor another timeline's, nor the current
        # timeline's before its first segment, which exists only on the older one): as a
        # server whose pg_wal has no such segment.
        segment = segment_file_name(sent_timeline, start_lsn, recording.segment_size)
        stream.error = error(major, "wal_segment_removed", segment=segment)
    return stream
