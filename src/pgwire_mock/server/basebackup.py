"""BASE_BACKUP from a recording: the messages a real server sent, replayed.

``pgwire-mock record --physical --base-backup OPTIONS`` keeps every backend message a real
BASE_BACKUP sent, as sent (:class:`RecordedBackup`): the start position's result set, the
tablespace list, the archives and the manifest, the end position's result set, the notices
in between. Their framing is the recorded server's (walsender.c, basebackup_copy.c):

* 14: one CopyOutResponse ... CopyDone per tablespace (raw tar bytes), then one for the
  manifest;
* 15+: one CopyOutResponse for everything, each CopyData starting with a type byte
  (:mod:`codec.basebackup`: new archive, manifest, data, progress).

A request is answered by a recorded backup whose content options agree with it
(:meth:`BackupOptions.content`: label, WAL, WAIT, tablespace map, manifest and its
checksums, compression), or else the one closest to it whose differences
:mod:`pgwire_mock.server.backup_rewrite` can derive (label, manifest, tablespace map, WAL
dropped); otherwise 0A000, saying what was recorded. Also derived: PROGRESS off from a
backup recorded with it (the tablespace sizes become NULL, as without the size
estimate), and 15+'s ``TARGET 'blackhole'`` from ``'client'`` (the same messages without
the archive and manifest data, as ``bbsink_copystream`` with ``send_to_client`` false).
CHECKPOINT, VERIFY_CHECKSUMS and MAX_RATE change when and how fast, not what: MAX_RATE
throttles the replay to about that many kB/s. A fake emulating 14 does not send a
backup recorded on 15+, nor the reverse (0A000): their framing differs.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from codec.values import LSN
from codec.wire import DataRow
from pgwire_mock.server.backup_options import BackupOptions
from pgwire_mock.server.backup_rewrite import derivable, derive
from pgwire_mock.server.errors import ServerError

__all__ = ["BackupReplay", "RecordedBackup", "choose", "replay_frames"]

_HEADER: Final = struct.Struct("!cI")


@dataclass(frozen=True, slots=True)
class RecordedBackup:
    """One BASE_BACKUP as a real server answered it."""

    options: BackupOptions
    command: str
    """The command as sent (in the recorded server's syntax)."""
    messages: tuple[bytes, ...]
    """Each backend message, encoded as received, up to (without) ReadyForQuery."""

    @property
    def modern(self) -> bool:
        """15+'s framing (one COPY, typed CopyData): recorded with the option list."""
        return self.command.startswith("BASE_BACKUP (")

    @property
    def tablespaces(self) -> int:
        """Rows of the tablespace list (SendTablespaceList), the data directory's included."""
        rows = (DataRow.decode_body(f[5:]) for f in self.messages if f[:1] == b"D")
        return sum(len(r.values) == 3 for r in rows)

    @property
    def start_lsn(self) -> int:
        """The backup's start position: the first result set's ``recptr``."""
        for frame in self.messages:
            if frame[:1] == b"D":
                value = DataRow.decode_body(frame[5:]).values[0]
                if value is not None:
                    return int(LSN.parse(value.decode()))
        raise ValueError("the recorded BASE_BACKUP has no start position")

    def to_lines(self) -> Iterator[dict[str, Any]]:
        head = {
            "command": self.command,
            "options": self.options.to_json(),
            "messages": len(self.messages),
        }
        yield {"base_backup": head}
        for frame in self.messages:
            yield {"message": base64.b64encode(frame).decode()}

    @classmethod
    def from_head(cls, head: dict[str, Any], messages: Sequence[bytes]) -> RecordedBackup:
        if len(messages) != int(head["messages"]):
            raise ValueError(f"{len(messages)} messages, the header says {head['messages']}")
        for frame in messages:
            if len(frame) < 5 or _HEADER.unpack_from(frame)[1] != len(frame) - 1:
                raise ValueError(f"not one whole backend message: {frame[:16]!r}...")
        return cls(BackupOptions.from_json(head["options"]), str(head["command"]), tuple(messages))


def _unmatched(backups: Sequence[RecordedBackup], wanted: BackupOptions) -> ServerError:
    recorded = "; ".join(b.command for b in backups) or "none"
    return ServerError(
        "ERROR",
        "0A000",
        "pgwire-mock: the recording holds no base backup taken with these options",
        f"Requested: {wanted.command(15)}. Recorded: {recorded}.",
        "Record one with pgwire-mock record --physical --base-backup OPTIONS.",
    )


def choose(
    backups: Sequence[RecordedBackup],
    wanted: BackupOptions,
    *,
    recorded_major: int | None = None,
    major: int | None = None,
) -> RecordedBackup:
    """The recorded backup that answers ``wanted``, or 0A000 naming what was recorded.

    A backup recorded on 14 is not sent by a fake emulating 15+, nor the reverse: the
    framing differs (one COPY per archive against one for all), and rewriting it is not
    done (15+'s progress messages count bytes a 14 recording does not say)."""
    if backups and recorded_major and major and (recorded_major < 15) != (major < 15):
        raise ServerError(
            "ERROR",
            "0A000",
            f"pgwire-mock: the base backups were recorded on PostgreSQL {recorded_major}, "
            f"whose BASE_BACKUP framing PostgreSQL {major} does not share",
            hint=f"Serve the recording with --pg-version {recorded_major}.",
        )
    if wanted.target == "server" or wanted.incremental:
        # Files written on the server, a backup relative to an uploaded manifest: what
        # the client receives depends on more than a recording holds.
        raise _unmatched(backups, wanted)
    want = wanted.content()

    def differences(backup: RecordedBackup) -> int:
        return sum(v != want[k] for k, v in backup.options.content().items())

    # The recorded backup that needs the fewest rewrites (none: sent as recorded).
    usable = sorted(
        (
            b
            for b in backups
            if (b.options.progress or not wanted.progress)
            and derivable(b.options, wanted, tablespaces=b.tablespaces)
        ),
        key=differences,
    )
    if not usable:
        raise _unmatched(backups, wanted)
    return usable[0]


def replay_frames(backup: RecordedBackup, wanted: BackupOptions) -> Iterator[bytes]:
    """The recorded messages, adjusted to what ``wanted`` asks for; a recording that
    cannot be rewritten fails here, before anything is sent."""
    frames: Iterable[bytes] = backup.messages
    if backup.options.content() != wanted.content():
        try:
            frames = derive(backup.messages, backup.options, wanted, modern=backup.modern)
        except ValueError as err:
            raise ServerError(
                "ERROR",
                "XX000",
                f"pgwire-mock: the recorded base backup cannot be rewritten: {err}",
                f"Recorded: {backup.command}.",
            ) from err
    return _adjusted(frames, backup.options, wanted)


def _adjusted(
    frames: Iterable[bytes], have: BackupOptions, wanted: BackupOptions
) -> Iterator[bytes]:
    null_sizes = have.progress and not wanted.progress
    blackhole = wanted.target == "blackhole"
    results = 0
    for frame in frames:
        kind = frame[:1]
        if kind == b"T":
            results += 1
        elif kind == b"D" and null_sizes and results == 2:
            # The tablespace list (SendTablespaceList): size is NULL without PROGRESS.
            values = DataRow.decode_body(frame[5:]).values
            frame = DataRow((*values[:2], None)).encode()  # noqa: PLW2901 - the adjusted copy
        elif kind == b"d" and blackhole and frame[5:6] == b"d":
            continue  # archive or manifest data: not sent when not sent to the client
        yield frame


@dataclass(slots=True)
class BackupReplay:
    """One BASE_BACKUP being sent; about ``max_rate`` kB/s when throttled (basebackup.c
    ``throttle``: it sleeps whenever the bytes sent run ahead of the rate)."""

    frames: Iterator[bytes]
    started: float
    max_rate: int = 0
    sent: int = 0
    done: bool = False

    def ready_at(self, now: float) -> float | None:
        """None when frames may go now (or none are left); else when they may: once the
        rate covers what was sent, less one throttling sample (1/8 s worth,
        THROTTLING_FREQUENCY) that may go ahead at once."""
        if self.done or not self.max_rate:
            return None
        rate = self.max_rate * 1024
        at = self.started + (self.sent - rate / 8) / rate
        return None if now >= at else at

    def produce(self, max_bytes: int, now: float) -> list[bytes]:
        out: list[bytes] = []
        produced = 0
        while produced < max_bytes and self.ready_at(now) is None and not self.done:
            frame = next(self.frames, None)
            if frame is None:
                self.done = True
                break
            out.append(frame)
            produced += len(frame)
            self.sent += len(frame)
        return out
