"""Writing synthetic streams: recordings (JSON Lines with a meta line) and expected state."""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Iterable
from itertools import chain, islice, repeat
from typing import IO, Final

from pgwire_mock.synth.generator import StreamItem
from pgwire_mock.synth.state import ExpectedState

__all__ = ["write_expected", "write_recording"]


def write_recording(
    out: IO[str],
    meta: dict[str, object],
    events: Iterable[StreamItem],
    progress: Callable[[int], None] | None = None,
    every: int = 65536,
) -> int:
    """Write ``{"meta": ...}`` and one ``{"lsn", "data"}`` line per event (the format
    :func:`pgwire_mock.streamfile.read_stream` reads); return the number of events."""
    out.write(json.dumps({"meta": meta}) + "\n")
    count = 0
    reported = 0
    events = iter(events)
    while batch := list(islice(events, _BATCH)):
        out.write(_lines(batch))
        count += len(batch)
        if progress is not None and count - reported >= every:
            reported = count - count % every
            progress(reported)
    return count


# One line per event, the LSN printed as codec.values.LSN prints it (X/Y, upper-case hex).
_LINE: Final = '{"lsn": "%X/%X", "data": "%s"}\n'
_BATCH: Final = 4096
_LOW: Final = 0xFFFFFFFF


def _lines(batch: list[StreamItem]) -> str:
    """The lines of ``batch``: one ``%`` over a template repeated per event (measured
    several times faster than an f-string per line)."""
    lsns = [lsn for lsn, _ in batch]
    fields = zip(
        map(operator.rshift, lsns, repeat(32)),
        map(operator.and_, lsns, repeat(_LOW)),
        map(bytes.hex, map(operator.itemgetter(1), batch)),
        strict=True,
    )
    return _LINE * len(batch) % tuple(chain.from_iterable(fields))


def write_expected(out: IO[str], state: ExpectedState) -> int:
    """Write the expected state as JSON Lines, one row per line; return the row count."""
    return state.write_jsonl(out)
