"""Writing synthetic streams: recordings (JSON Lines with a meta line, the snapshot's
rows when the spec has one) and expected state."""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain, islice, repeat
from typing import IO, Final

import numpy as np
import numpy.typing as npt

from codec.copy import encode_text_row
from codec.values import encode_text
from pgwire_mock.synth.generator import StreamItem, Synth
from pgwire_mock.synth.state import ExpectedState

__all__ = ["snapshot_lines", "write_expected", "write_recording"]


def write_recording(
    out: IO[str],
    meta: dict[str, object],
    events: Iterable[StreamItem],
    progress: Callable[[int], None] | None = None,
    every: int = 65536,
    snapshot: Iterable[str] = (),
) -> int:
    """Write ``{"meta": ...}``, the ``snapshot`` lines (:func:`snapshot_lines`, for a
    meta with a snapshot) and one ``{"lsn", "data"}`` line per event (the format
    :mod:`pgwire_mock.streamfile` reads); return the number of events."""
    out.write(json.dumps({"meta": meta}) + "\n")
    for lines in _batches(snapshot):
        out.write("".join(lines))
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


def _batches(lines: Iterable[str]) -> Iterator[list[str]]:
    it = iter(lines)
    while batch := list(islice(it, _BATCH)):
        yield batch


def snapshot_lines(synth: Synth) -> Iterator[str]:
    """The snapshot's rows as ``record --snapshot`` writes them: per table in spec
    order, one ``{"table": "schema.name", "copy": "<COPY text row>"}`` line per row
    (byte for byte what ``json.dumps`` writes for that object; a test checks), the values
    in PostgreSQL's text output form, as the expected state writes them.

    Each pool and TOAST entry is COPY-escaped and JSON-escaped once; a row is then its
    fields joined (a tab inside the JSON string is ``\\t``)."""
    for t in synth.tables:
        if not t.initial:
            continue
        head = '{"table": ' + json.dumps(t.name) + ', "copy": "'
        # Per column: (0 key / 1 pool / 2 TOAST, its fields by pool or TOAST entry).
        kinds = [kind for kind, *_ in t.plan]
        entries: list[npt.NDArray[np.object_]] = []
        pools = iter(t.parts.pools)
        toasts = iter(c for c in t.toasts if c is not None)
        for column, kind in zip(t.spec.columns, kinds, strict=True):
            oid = column.type.oid
            values: Sequence[object] = ()
            if kind == 1:
                values = [v for v, _ in next(pools)]
            elif kind == 2:
                values = next(toasts).values.tolist()
            entries.append(_fields([None if v is None else encode_text(oid, v) for v in values]))
        for rows in synth.initial_rows(t.index):
            columns: list[list[str]] = []
            pool = toast = 0
            for kind, fields in zip(kinds, entries, strict=True):
                if kind == 0:
                    columns.append(_fields([t.key.text(k) for k in rows.kids.tolist()]).tolist())
                elif kind == 1:
                    columns.append(fields.take(rows.picks[:, pool]).tolist())
                    pool += 1
                else:
                    columns.append(fields.take(rows.toast[toast]).tolist())
                    toast += 1
            yield from map(f'{head}%s"}}\n'.__mod__, map("\\t".join, zip(*columns, strict=True)))


def _fields(texts: Sequence[str | None]) -> npt.NDArray[np.object_]:
    """Each value's text (None: NULL) as a field of a COPY text row, escaped for a JSON
    string: what ``json.dumps`` writes for it inside the row's string, quotes left out."""
    out = [
        json.dumps(
            encode_text_row([None if v is None else v.encode("utf-8", "surrogateescape")])[
                :-1
            ].decode("utf-8", "surrogateescape")
        )[1:-1]
        for v in texts
    ]
    return np.array(out, dtype=object)
