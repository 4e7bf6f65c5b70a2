"""Writing synthetic streams: recordings (JSON Lines with a meta line) and expected state."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import IO

from codec.values import LSN
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
    lines: list[str] = []
    for lsn, payload in events:
        lines.append(f'{{"lsn": "{LSN(lsn)}", "data": "{payload.hex()}"}}\n')
        count += 1
        if len(lines) >= 4096:
            out.write("".join(lines))
            lines.clear()
        if progress is not None and count % every == 0:
            progress(count)
    out.write("".join(lines))
    return count


def write_expected(out: IO[str], state: ExpectedState) -> int:
    """Write the expected state as JSON Lines, one row per line; return the row count."""
    return state.write_jsonl(out)
