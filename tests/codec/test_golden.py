"""Golden bytes captured from real PostgreSQL 14-17 decode and re-encode exactly.

The corpus in tests/data/golden is written by ``pgwire-mock capture`` through the SQL
interface (``pg_logical_slot_get_binary_changes``). These tests read only the files,
so they run without a server; they fail if the corpus is missing or incomplete.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from codec.pgoutput import (
    Begin,
    BeginPrepare,
    Commit,
    Decoder,
    Delete,
    Insert,
    PgOutputMessage,
    Relation,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Update,
    encode,
)

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden"
FILES = sorted(GOLDEN.glob("pg*/*.jsonl"))
VERSIONS = (14, 15, 16, 17, 18)
# What each major can emit (protocol 3 two-phase from 15; 14 has no b/P/K/r/p).
EXPECTED_TAGS = {
    14: set("BMCORYIUDTSEcA"),
    15: set("BMCORYIUDTSEcAbPKrp"),
    16: set("BMCORYIUDTSEcAbPKrp"),
    17: set("BMCORYIUDTSEcAbPKrp"),
    18: set("BMCORYIUDTSEcAbPKrp"),
}


def load(path: Path) -> tuple[dict[str, Any], list[bytes]]:
    meta: dict[str, Any] = {}
    payloads = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if "meta" in record:
            meta = record["meta"]
        else:
            payloads.append(bytes.fromhex(record["data"]))
    return meta, payloads


def test_corpus_covers_every_version() -> None:
    """The corpus exists for 14, 15, 16 and 17; a missing corpus is a failure, not a skip."""
    majors = {int(path.parent.name.removeprefix("pg")) for path in FILES}
    assert majors == set(VERSIONS), f"golden corpus has {sorted(majors)}; run pgwire-mock capture"


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_golden_stream_round_trips_byte_for_byte(path: Path) -> None:
    """Every captured payload decodes with one stateful Decoder and re-encodes to itself."""
    _, payloads = load(path)
    assert payloads, f"{path} holds no messages"
    decoder = Decoder()
    for index, payload in enumerate(payloads):
        message = decoder.decode(payload)
        assert encode(message) == payload, f"message {index} ({type(message).__name__})"
        assert (
            decoder.decode(encode(message)) == message
            if not isinstance(message, StreamStart | StreamStop)
            else True
        )


@pytest.mark.parametrize("major", VERSIONS)
def test_each_version_emits_every_message_it_supports(major: int) -> None:
    """Across its files a version's corpus holds every pgoutput message type it can send."""
    seen: Counter[str] = Counter()
    for path in FILES:
        if path.parent.name == f"pg{major}":
            seen.update(chr(p[0]) for p in load(path)[1])
    missing = EXPECTED_TAGS[major] - set(seen)
    assert not missing, f"PostgreSQL {major} corpus lacks {sorted(missing)}"


def _decode_file(path: Path) -> list[PgOutputMessage]:
    decoder = Decoder()
    return [decoder.decode(p) for p in load(path)[1]]


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_golden_stream_obeys_pgoutput_invariants(path: Path) -> None:
    """What real servers guarantee: Begin's final LSN is its Commit's LSN, a change
    follows its relation's Relation, and inside a stream every change carries an xid:
    the transaction's own, or that of the subtransaction that made it (pgoutput.c uses
    ``change->txn->xid``), which a later Stream Abort may name as its ``subxid``."""
    announced: dict[int, Relation] = {}
    open_lsn: int | None = None
    stream_xid: int | None = None
    xids_in_stream: dict[int, set[int]] = {}
    for message in _decode_file(path):
        match message:
            case Begin() | BeginPrepare():
                open_lsn = message.final_lsn if isinstance(message, Begin) else None
            case Commit():
                if open_lsn is not None:
                    assert message.commit_lsn == open_lsn
                assert message.end_lsn > message.commit_lsn
                open_lsn = None
            case StreamStart():
                stream_xid = message.xid
                xids_in_stream.setdefault(message.xid, {message.xid})
            case StreamStop():
                stream_xid = None
            case StreamCommit() | StreamAbort() | StreamPrepare():
                assert stream_xid is None, "stream end inside a Stream Start/Stop block"
                if isinstance(message, StreamAbort) and message.subxid != message.xid:
                    assert message.xid in xids_in_stream
            case Relation():
                assert (message.xid is None) == (stream_xid is None)
                announced[message.oid] = message
            case Insert() | Update() | Delete():
                assert (message.xid is None) == (stream_xid is None)
                if stream_xid is not None and message.xid is not None:
                    assert message.xid >= stream_xid, "a subtransaction's xid follows its parent's"
                    xids_in_stream[stream_xid].add(message.xid)
                relation = announced[message.relation_oid]
                rows = (
                    [message.key_tuple, message.old_tuple]
                    if not isinstance(message, Insert)
                    else []
                )
                if not isinstance(message, Delete):
                    rows.append(message.new_tuple)
                for row in rows:
                    if row is not None:
                        assert len(row) == len(relation.columns)
