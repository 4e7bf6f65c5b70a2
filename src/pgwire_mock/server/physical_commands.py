"""The physical replication commands of a walsender session: TIMELINE_HISTORY, a physical
START_REPLICATION (its stream, faults, status updates and CopyDone) and BASE_BACKUP, all
served from a :class:`~pgwire_mock.server.physical.PhysicalRecording`.

A mixin of :class:`~pgwire_mock.server.session.WalSenderSession`, kept apart so the
session module stays about its connection's state machine; the stream itself is
:mod:`pgwire_mock.server.physical`, the backup :mod:`pgwire_mock.server.basebackup`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from codec.wire import (
    CommandComplete,
    CopyBothResponse,
    CopyData,
    DataRow,
    FieldDescription,
    RowDescription,
)
from pgwire_mock.server.backup_options import in_transaction_block, parse_backup_options
from pgwire_mock.server.basebackup import BackupReplay, choose, replay_frames
from pgwire_mock.server.errors import ServerError
from pgwire_mock.server.faults import Fault
from pgwire_mock.server.grammar import (
    BaseBackup,
    StartPhysicalReplication,
    TimelineHistory,
    format_lsn,
)
from pgwire_mock.server.phase import Phase, pg_time
from pgwire_mock.server.physical import (
    PhysicalRecording,
    PhysicalStream,
    start_physical,
    timeline_history_result,
)
from pgwire_mock.server.state import ServerState, StateError
from pgwire_mock.server.versions import error

if TYPE_CHECKING:
    from pgwire_mock.server.session import SessionConfig

__all__ = ["PhysicalCommands"]


class PhysicalCommands:
    """The physical commands; the session provides the attributes and methods below."""

    config: SessionConfig
    state: ServerState
    major: int
    pid: int
    phase: Phase
    transaction_status: str
    _out: list[bytes]
    _now: float
    _physical: PhysicalStream | None
    _backup: BackupReplay | None
    _done_receiving: bool
    _done_sending: bool
    _reported: tuple[int, int, int, int]
    _log: Callable[[str], None]

    if TYPE_CHECKING:

        @property
        def can_produce(self) -> bool: ...
        def _read_held(self) -> None: ...
        def _send(self, *messages: object) -> None: ...
        def _ready(self) -> None: ...
        def _finish(self) -> None: ...
        def _stream_error(self, err: ServerError) -> None: ...
        def _slot_error(self, err: StateError) -> ServerError: ...

    def _timeline_history(self, command: TimelineHistory) -> None:
        recording = self.config.source
        rows, err = timeline_history_result(
            self.major,
            recording if isinstance(recording, PhysicalRecording) else None,
            command.timeline,
        )
        # 14/15 describe both text columns with typmod 0, 16+ with -1.
        typmod = 0 if self.major < 16 else -1
        self._send(
            RowDescription(
                tuple(
                    FieldDescription(name, 0, 0, 25, -1, typmod, 0)
                    for name in ("filename", "content")
                )
            )
        )
        if err is not None:
            raise err
        self._send(*(DataRow(tuple(None if v is None else v.encode() for v in r)) for r in rows))
        self._send(CommandComplete("TIMELINE_HISTORY"))
        self._ready()

    def _start_physical(self, command: StartPhysicalReplication) -> None:
        if command.slot_name is not None:
            slot = self.state.slots.get(command.slot_name)
            if slot is None:
                raise error(self.major, "slot_does_not_exist", slot=command.slot_name)
            if slot.logical:
                raise error(self.major, "logical_slot_for_physical_replication")
        if isinstance(self.config.source, PhysicalRecording):
            self._start_physical_recording(self.config.source, command)
            return
        raise ServerError(
            "ERROR",
            "0A000",
            "pgwire-mock is a logical-only walsender: physical replication is not emulated",
        )

    def _start_physical_recording(
        self, recording: PhysicalRecording, command: StartPhysicalReplication
    ) -> None:
        slot = None
        if command.slot_name is not None:
            try:
                slot = self.state.acquire(command.slot_name, self.pid)
            except StateError as err:
                raise self._slot_error(err) from None
        try:
            stream = start_physical(
                self.major,
                recording,
                self.state,
                slot,
                command.start_lsn,
                command.timeline,
                now=self._now,
                wal_sender_timeout=self.config.wal_sender_timeout,
            )
        except ServerError:
            if slot is not None:
                self.state.release(slot.name, self.pid)
            raise
        if stream.switch_point == command.start_lsn and stream.error is None:
            # StartReplication: at a historic timeline's end there is nothing to stream,
            # so no COPY at all: the next timeline's row straight away.
            stream.done_sending = True
            self._out.extend(stream.end_messages())
            if slot is not None:
                self.state.release(slot.name, self.pid)
            self._send(CommandComplete("START_REPLICATION"))
            self._ready()
            return
        self._physical = stream
        self._done_receiving = self._done_sending = False
        self.phase = Phase.STREAMING
        self._log(f"streaming WAL from {format_lsn(command.start_lsn)} (physical)")
        self._send(CopyBothResponse(0, ()))
        if stream.error is not None:
            self._stream_error(stream.error)
            return
        faults = [*self.config.faults, *self.config.next_faults]
        self.config.next_faults.clear()
        self._physical_faults(stream, faults)

    def _physical_faults(
        self, stream: PhysicalStream, faults: list[Fault], *, injected: bool = False
    ) -> None:
        for fault in faults:
            self._log(f"fault: {fault}")
            frames = stream.activate(fault, self._now, pg_time(self._now), injected=injected)
            if frames is None:
                self._log(f"fault {fault.name} does not act on a physical stream")
            else:
                self._out.extend(frames)
        self._physical_outcome(stream)

    def _physical_outcome(self, stream: PhysicalStream) -> None:
        """A fault or a removed segment ended the stream: the error, or a silent close."""
        if stream.error is not None:
            self._stream_error(stream.error)
        elif stream.closing:
            self._log("fault: closing the connection (close_after, or shutdown's COPY 0)")
            self._finish()

    def _physical_produce(self, stream: PhysicalStream, max_bytes: int, now: float) -> int:
        if not self.can_produce:
            return 0
        frames = stream.produce(max_bytes, pg_time(now), now)
        self._out.extend(frames)
        self.state.advance_wal(stream.sent_ptr)
        self._physical_outcome(stream)
        return sum(len(f) for f in frames)

    def _physical_tick(self, stream: PhysicalStream, now: float) -> None:
        frames = stream.tick(now, pg_time(now))
        if frames is None:
            self._log("terminating walsender process due to replication timeout")
            self._finish()
            return
        self._out.extend(frames)

    def _physical_copy_data(self, stream: PhysicalStream, message: CopyData) -> None:
        frames = stream.receive(bytes(message.data), self._now, pg_time(self._now))
        if frames is None:
            self._log("invalid standby message")
            self._finish()
            return
        self._reported = stream.reported
        self._out.extend(frames)
        self._physical_outcome(stream)

    def _physical_copy_done(self) -> None:
        """StartReplication after WalSndLoop: CopyDone back, release the slot,
        "START_STREAMING" then exec_replication_command's "START_REPLICATION"."""
        self._log("client sent CopyDone")
        if self._physical is not None:
            self._out.extend(self._physical.end_messages())
        self._physical_release()
        self.phase = Phase.READY
        self._send(CommandComplete("START_REPLICATION"))
        self._ready()

    def _base_backup(self, command: BaseBackup) -> None:
        """SendBaseBackup from a recording (pgwire_mock.server.basebackup): the options
        are checked as the real server checks them, then a recorded backup that answers
        them is sent, throttled by MAX_RATE; ReadyForQuery after its last message."""
        if self.transaction_status != "I":
            raise in_transaction_block(self.major)
        options = parse_backup_options(self.major, command.options)
        source = self.config.source
        recording = source if isinstance(source, PhysicalRecording) else None
        backup = choose(
            recording.backups if recording is not None else (),
            options,
            recorded_major=recording.major if recording is not None else None,
            major=self.major,
        )
        self._log(f"sending the recorded base backup {backup.command}")
        frames = replay_frames(backup, options)
        self._backup = BackupReplay(frames, self._now, options.max_rate)

    def _backup_produce(self, replay: BackupReplay, max_bytes: int, now: float) -> int:
        frames = replay.produce(max_bytes, now)
        self._out.extend(frames)
        if replay.done:
            self._backup = None
            self._ready()
            self._now = now
            self._read_held()
        return sum(len(f) for f in frames)

    def _physical_release(self) -> None:
        stream, self._physical = self._physical, None
        if stream is not None and stream.slot is not None:
            self.state.release(stream.slot.name, self.pid)
