"""What the script encoder yields: the events of a stream, in the order a walsender acts on them.

:class:`Send` (one pgoutput message and the WAL position a walsender reports for it),
:class:`Sleep`, :class:`Fault`, :class:`EndOfWal` (the end of a live WAL so far) and
:class:`PublicationsSkipped` (18's warning). They have a module of their own because
more than the encoder speaks them: a recording replays its payloads as Send events,
and the server's stream sources act on every kind, without needing the decoding rules
of :mod:`pgwire_mock.script.encoder`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from codec.pgoutput import PgOutputMessage, encode

__all__ = ["EndOfWal", "Fault", "PublicationsSkipped", "Send", "Sleep", "StreamEvent"]


@dataclass(frozen=True, slots=True)
class Send:
    """Send ``message`` in an XLogData whose ``wal_start`` is this position.

    ``payload`` is the message's bytes (for recordings, the recorded bytes).
    """

    wal_start: int
    message: PgOutputMessage
    payload: bytes = b""

    def __post_init__(self) -> None:
        if not self.payload:
            object.__setattr__(self, "payload", encode(self.message))


@dataclass(frozen=True, slots=True)
class Sleep:
    """Pause the stream for ``seconds`` (the WAL position is ``lsn``)."""

    seconds: float
    lsn: int = 0


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault for the server to act on, at WAL position ``lsn``."""

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)
    lsn: int = 0


@dataclass(frozen=True, slots=True)
class EndOfWal:
    """A live WAL's end so far (``lsn``): the stream goes on when more is written."""

    lsn: int


@dataclass(frozen=True, slots=True)
class PublicationsSkipped:
    """18: requested publications that do not exist, skipped with a WARNING when pgoutput
    first loads the publications (``LoadPublications``), at the change at ``lsn``."""

    names: tuple[str, ...]
    lsn: int


StreamEvent: TypeAlias = Send | Sleep | Fault | EndOfWal | PublicationsSkipped
