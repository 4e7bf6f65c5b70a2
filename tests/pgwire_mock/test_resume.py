"""A recording resumed at any position, as a new walsender would send it.

The differential proof (the same restarts against real PostgreSQL) is the conformance
resume check; these tests pin the rules on the golden corpus without a server.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from codec.pgoutput import Decoder, Relation, StreamStart
from conformance.replay import replay
from pgwire_mock.script.recording import _final_lsns
from pgwire_mock.server.resume import RecordedStream, resume
from pgwire_mock.streamfile import StreamEntry, read_stream

GOLDEN = sorted(Path(__file__).parents[1].joinpath("data", "golden").glob("pg*/*.jsonl"))


def _load(path: Path) -> tuple[int, list[StreamEntry]]:
    with path.open("rb") as f:
        return int(path.parent.name[2:]), list(read_stream(f, str(path)))


def _resumed(entries: list[StreamEntry], major: int, at: int) -> list[tuple[int, bytes]]:
    return [out for unit in resume(RecordedStream(entries), at, major=major) for out in unit]


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_resuming_at_the_start_gives_the_recording_back(path: Path) -> None:
    """From the slot's start, the derived stream is the recording, byte for byte: the
    transaction model loses nothing (schema messages, origins, invalidations)."""
    major, entries = _load(path)
    assert _resumed(entries, major, 0) == [(e.lsn, e.payload) for e in entries]


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_resume_point_delivers_each_transaction_once(path: Path) -> None:
    """At every position: what committed before it plus what the resumed stream sends
    applies to the same tables as the whole recording (nothing lost, nothing twice), and
    the resumed stream is one a stateful decoder reads: every stream block's messages
    carry the xid, each transaction's first block has first_segment set, and each
    relation is described before its first change."""
    major, entries = _load(path)
    if not entries:
        return
    decoder = Decoder()
    messages = [decoder.decode(e.payload) for e in entries]
    final = _final_lsns(
        tuple((e.lsn, e.payload, m) for e, m in zip(entries, messages, strict=True))
    )
    whole = replay(e.payload for e in entries)
    for at in sorted({e.lsn for e in entries if e.lsn}):
        resumed = _resumed(entries, major, at)
        before = [e.payload for e, f in zip(entries, final, strict=True) if f < at]
        tables = replay([*before, *(payload for _, payload in resumed)])
        assert _rows(tables) == _rows(whole), f"resumed at {at:X}"
        decoder = Decoder()
        described: set[int] = set()
        started: set[int] = set()
        for _, payload in resumed:
            message = decoder.decode(payload)
            if isinstance(message, StreamStart):
                assert message.first_segment == (message.xid not in started), f"at {at:X}"
                started.add(message.xid)
            elif isinstance(message, Relation):
                described.add(message.oid)
                assert (message.xid is not None) == decoder.in_stream, f"at {at:X}"
            oid = getattr(message, "relation_oid", None)
            if oid is not None:
                assert oid in described, f"change before its Relation, resumed at {at:X}"
                assert (message.xid is not None) == decoder.in_stream  # type: ignore[attr-defined]


def _rows(tables: dict[int, object]) -> dict[int, list[object]]:
    return {oid: sorted(map(repr, t.rows)) for oid, t in tables.items()}  # type: ignore[attr-defined]
