"""Recorded streams as scripts: replaying captured pgoutput payloads byte for byte.

A recording (JSON Lines from ``pgwire-mock capture`` or raw CopyData from ``record``,
read by :func:`pgwire_mock.streamfile.read_stream`) already *is* the output of pgoutput
for one set of options. Its encoder sends the recorded payloads unchanged, at their
recorded WAL positions; it checks the client's options against the recording's ``meta``
(where the file has one) instead of applying them, and skips the transactions a real
server would skip when the client resumes at ``from_lsn``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codec import DecodeError
from codec.pgoutput import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Decoder,
    Message,
    PgOutputMessage,
    Prepare,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
)
from pgwire_mock.script.encoder import Send, StreamEvent, StreamOptions
from pgwire_mock.script.errors import OptionError, ScriptError
from pgwire_mock.streamfile import StreamFileError, read_meta, read_stream

__all__ = ["Recording", "load_recording"]


@dataclass(frozen=True, eq=False)
class Recording:
    """A recorded pgoutput stream; ``meta`` is the file's header (``{}`` if none)."""

    source: str
    meta: Mapping[str, Any]
    entries: tuple[tuple[int, bytes, PgOutputMessage], ...]

    @property
    def pg_version(self) -> int | None:
        major = self.meta.get("major")
        return int(major) if isinstance(major, int | str) and str(major).isdigit() else None

    def encode(
        self,
        options: StreamOptions,
        *,
        server_version: int | None = None,
        from_lsn: int = 0,
    ) -> Iterator[StreamEvent]:
        """The recorded payloads, unchanged, minus what ``from_lsn`` skips."""
        self.check(options)
        final = _final_lsns(self.entries)
        for index, (lsn, payload, message) in enumerate(self.entries):
            if final[index] < from_lsn:
                continue
            yield Send(lsn, message, payload)

    def check(self, options: StreamOptions) -> None:
        """Raise :class:`OptionError` if ``options`` differ from the recording's."""
        recorded = self.meta.get("options")
        if not isinstance(recorded, Mapping):
            return
        wanted = options.as_pgoutput()
        for key in ("proto_version", "binary", "messages", "streaming", "two_phase", "origin"):
            if key not in recorded:
                continue
            have = str(recorded[key]).lower()
            want = wanted.get(key, "false" if key == "two_phase" else "any")
            if have != want.lower():
                raise OptionError(
                    f"{self.source} was recorded with {key}={recorded[key]}, "
                    f"the client asked for {key}={want}",
                    sqlstate="0A000",
                )
        if "publication_names" in recorded:
            have_pubs = sorted(str(recorded["publication_names"]).split(","))
            if have_pubs != sorted(options.publication_names):
                raise OptionError(
                    f"{self.source} was recorded for publication_names="
                    f"{recorded['publication_names']}, the client asked for "
                    f"{','.join(options.publication_names)}",
                    sqlstate="0A000",
                )


def load_recording(path: str | Path) -> Recording:
    """Read a recording; raise :class:`ScriptError` if it is not one."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            first = f.read(1)
            f.seek(0)
            meta = (read_meta(f) if first == b"{" else None) or {}
            f.seek(0)
            decoder = Decoder()
            entries = []
            for number, entry in enumerate(read_stream(f, str(p)), start=1):
                try:
                    message = decoder.decode(entry.payload)
                except DecodeError as err:
                    raise ScriptError(f"message {number}: {err}", source=str(p)) from None
                entries.append((entry.lsn, entry.payload, message))
    except OSError as err:
        raise ScriptError(f"cannot read: {err.strerror}", source=str(p)) from None
    except StreamFileError as err:
        raise ScriptError(str(err)) from None
    return Recording(str(p), meta, tuple(entries))


def _final_lsns(entries: tuple[tuple[int, bytes, PgOutputMessage], ...]) -> list[int]:
    """For each entry, the LSN that decides whether a resuming client gets it: the
    commit (or prepare, or abort) record's start for messages of a transaction, the
    message's own LSN for non-transactional messages."""
    end_of: dict[int, int] = {}  # streamed xid → its commit / prepare / abort LSN
    for lsn, _, m in entries:
        if isinstance(m, StreamCommit):
            end_of[m.xid] = m.commit_lsn
        elif isinstance(m, StreamPrepare):
            end_of[m.xid] = m.prepare_lsn
        elif isinstance(m, StreamAbort) and m.xid == m.subxid:
            end_of[m.xid] = m.abort_lsn if m.abort_lsn is not None else lsn
    out: list[int] = []
    current: int | None = None  # final LSN of the open Begin / Begin Prepare
    streaming: int | None = None  # xid of the open stream block
    for lsn, _, m in entries:
        if isinstance(m, Begin):
            current = m.final_lsn
        elif isinstance(m, BeginPrepare):
            current = m.prepare_lsn
        elif isinstance(m, StreamStart):
            streaming = m.xid
        if isinstance(m, StreamStart | StreamAbort | StreamCommit | StreamPrepare):
            xid = m.xid
            out.append(end_of.get(xid, lsn))
        elif streaming is not None:
            out.append(end_of.get(streaming, lsn))
        elif current is not None:
            out.append(current)
        elif isinstance(m, Message):
            out.append(m.lsn)
        elif isinstance(m, CommitPrepared):
            out.append(m.commit_lsn)
        elif isinstance(m, RollbackPrepared):
            out.append(m.rollback_end_lsn)
        else:
            out.append(lsn)
        if isinstance(m, Commit | Prepare):
            current = None
        elif isinstance(m, StreamStop):
            streaming = None
    return out
