"""The committed golden corpus covers every pgoutput message each server version sends.

Checked from the bytes alone (the first byte of each message is its type); nothing here
decodes pgoutput. Regenerate with ``python -m conformance.capture --out tests/data/golden``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"

BASE = set("BMCORYIUDTSEcA")
TWO_PHASE = set("bPKrp")
# What each major's pgoutput can send: two-phase messages need protocol 3 (15+).
EXPECTED = {14: BASE, 15: BASE | TWO_PHASE, 16: BASE | TWO_PHASE, 17: BASE | TWO_PHASE}
MAX_PROTO = {14: 2, 15: 3, 16: 4, 17: 4}


def _files(major: int) -> list[Path]:
    return sorted((GOLDEN / f"pg{major}").glob("*.jsonl"))


def _read(path: Path) -> tuple[dict[str, Any], list[bytes]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    meta = json.loads(lines[0])["meta"]
    data = [bytes.fromhex(json.loads(line)["data"]) for line in lines[1:]]
    return meta, data


def _messages(major: int) -> Iterator[tuple[dict[str, Any], bytes]]:
    for path in _files(major):
        meta, data = _read(path)
        for message in data:
            yield meta, message


@pytest.mark.parametrize("major", sorted(EXPECTED))
def test_corpus_exists_for_every_version(major: int) -> None:
    """Each supported major has captured files whose header names that major."""
    files = _files(major)
    assert files, f"no golden files for PostgreSQL {major} in {GOLDEN}"
    for path in files:
        meta, data = _read(path)
        assert meta["major"] == major, path
        assert str(meta["server_version"]).startswith(f"{major}."), path
        assert path.name.startswith(f"{meta['scenario']}."), path
        assert all(data), f"{path}: empty message"


@pytest.mark.parametrize("major", sorted(EXPECTED))
def test_every_message_type_is_covered(major: int) -> None:
    """The first bytes seen are exactly the message types that major can send."""
    seen = {chr(message[0]) for _, message in _messages(major)}
    assert seen == EXPECTED[major], (
        f"PostgreSQL {major}: missing {sorted(EXPECTED[major] - seen)}, "
        f"unexpected {sorted(seen - EXPECTED[major])}"
    )


@pytest.mark.parametrize("major", sorted(EXPECTED))
def test_every_protocol_version_and_tuple_format_is_captured(major: int) -> None:
    """Protocol versions 1..max and both binary=false and binary=true appear per major."""
    options = [_read(path)[0]["options"] for path in _files(major)]
    assert {int(o["proto_version"]) for o in options} == set(range(1, MAX_PROTO[major] + 1))
    assert {o["binary"] for o in options} == {"true", "false"}
    assert {o["streaming"] != "off" for o in options} == {True, False}
    if major >= 15:
        assert any(o.get("two_phase") == "true" for o in options)


@pytest.mark.parametrize("major", sorted(EXPECTED))
def test_stream_abort_carries_lsn_and_time_only_in_parallel_mode(major: int) -> None:
    """Stream Abort is 9 bytes (tag, xid, subxid), 25 with streaming=parallel (16+)."""
    lengths: dict[bool, set[int]] = {True: set(), False: set()}
    for meta, message in _messages(major):
        if message[:1] == b"A":
            parallel = meta["options"]["streaming"] == "parallel"
            lengths[parallel].add(len(message))
    assert lengths[False] == {9}
    assert lengths[True] == ({25} if major >= 16 else set())


def test_corpus_stays_small() -> None:
    """The committed corpus stays within a few megabytes."""
    total = sum(p.stat().st_size for p in GOLDEN.rglob("*.jsonl"))
    assert total < 3 * 1024 * 1024, f"golden corpus is {total} bytes"
