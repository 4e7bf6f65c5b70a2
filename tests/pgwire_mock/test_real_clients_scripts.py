"""examples/demo.yaml through real clients: what pg_recvlogical and psycopg2 decode from
the fake equals ``encode_stream`` for the same options, on every emulated version.

Each version gets the richest options it supports: proto 2 with streaming on 14, proto 3
with two_phase on 15, proto 4 with parallel streaming on 16 and 17 (plus messages).
"""

from __future__ import annotations

import select
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest
from psycopg2 import extras
from test_real_clients import FakeServer

from codec.values import LSN
from pgwire_mock.script import Send, StreamOptions, encode_stream, load_script
from pgwire_mock.server import MAJORS

DEMO = Path(__file__).parent.parent.parent / "examples" / "demo.yaml"
OPTIONS: dict[int, dict[str, str]] = {
    14: {"proto_version": "2", "streaming": "on"},
    15: {"proto_version": "3", "streaming": "on", "two_phase": "true"},
    16: {"proto_version": "4", "streaming": "parallel", "two_phase": "true"},
    17: {"proto_version": "4", "streaming": "parallel", "two_phase": "true"},
    18: {"proto_version": "4", "streaming": "parallel", "two_phase": "true"},
}


def options(major: int) -> dict[str, str]:
    return {**OPTIONS[major], "publication_names": "demo_pub", "messages": "true"}


def expected(major: int) -> list[tuple[int, bytes]]:
    """The encoder's messages at the XLogData positions a walsender sends them:
    ``WalSndPrepareWrite`` writes 0/0 for what pgoutput does not write last — Relation
    and Type messages, and a message an Origin message follows."""
    opts = StreamOptions.from_pgoutput(options(major), server_version=major)
    events = encode_stream(load_script(DEMO), opts, server_version=major)
    sends = [(e.wal_start, e.payload) for e in events if isinstance(e, Send)]
    following = [payload[:1] for _, payload in sends[1:]] + [b""]
    return [
        (0 if payload[:1] in (b"R", b"Y") or after == b"O" else wal, payload)
        for (wal, payload), after in zip(sends, following, strict=True)
    ]


@pytest.fixture(params=MAJORS, ids=[f"pg{m}" for m in MAJORS])
def demo(request: pytest.FixtureRequest) -> Iterator[tuple[int, FakeServer]]:
    server = FakeServer(request.param, DEMO, "--pg-version", str(request.param))
    yield request.param, server
    server.stop()


def test_expected_streams_use_every_message_type_on_16() -> None:
    tags = {payload[:1] for _, payload in expected(16)}
    assert len(tags) == 19, sorted(tags)


def test_pg_recvlogical_decodes_the_demo_script(demo: tuple[int, FakeServer]) -> None:
    major, server = demo
    stream = expected(major)
    endpos = max(lsn for lsn, _ in stream)
    argv = ["pg_recvlogical", "-d", server.dsn(), "-S", "demo_slot", "--start", "-f", "-"]
    for key, value in options(major).items():
        argv += ["-o", f"{key}={value}"]
    result = subprocess.run(
        [*argv, "--endpos", str(LSN(endpos)), "--no-loop"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    log = server.stop()
    assert result.returncode == 0, result.stderr.decode() + log
    assert result.stdout == b"".join(payload + b"\n" for _, payload in stream)


def test_psycopg2_decodes_the_demo_script(demo: tuple[int, FakeServer]) -> None:
    major, server = demo
    stream = expected(major)
    conn = psycopg2.connect(server.dsn(), connection_factory=extras.LogicalReplicationConnection)
    got: list[tuple[int, bytes]] = []
    try:
        cur = conn.cursor()
        cur.start_replication(slot_name="demo_slot", decode=False, options=options(major))
        deadline = time.monotonic() + 30
        while len(got) < len(stream) and time.monotonic() < deadline:
            message = cur.read_message()
            if message is None:
                select.select([conn], [], [], 0.5)
                continue
            got.append((message.data_start, bytes(message.payload)))
    finally:
        conn.close()
    assert [p for _, p in got] == [p for _, p in stream]
    assert [w for w, _ in got] == [w for w, _ in stream]
