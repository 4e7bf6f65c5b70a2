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
from codec.pgoutput import Decoder, PgOutputMessage
from pgwire_mock.script.errors import OptionError, ScriptError
from pgwire_mock.script.events import Send, StreamEvent
from pgwire_mock.script.options import StreamOptions
from pgwire_mock.server.resume import RecordedStream, resume
from pgwire_mock.streamfile import StreamEntry, StreamFileError, read_meta, read_stream

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
        """The recorded payloads, unchanged, from a walsender starting at ``from_lsn``."""
        self.check(options)
        lsns = [lsn for lsn, _, _ in self.entries if lsn]
        if not lsns or from_lsn <= min(lsns):
            for lsn, payload, message in self.entries:
                yield Send(lsn, message, payload)
            return
        stream = RecordedStream([StreamEntry(lsn, payload) for lsn, payload, _ in self.entries])
        major = server_version or self.pg_version or 16
        decoder = Decoder()  # again: a resumed stream's blocks are not the recorded ones
        for unit in resume(stream, from_lsn, major=major):
            for lsn, payload in unit:
                yield Send(lsn, decoder.decode(payload), payload)

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
