"""``pgwire-mock serve --control``: a test outside Python writes the WAL over HTTP while a
real client streams, reads the slots and injects faults; bad requests get one-line
errors, and a control endpoint that cannot listen stops the server with one line."""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest
from psycopg2 import extras

from codec.values import LSN
from conformance.serve_process import ServeProcess
from pgwire_mock.client import ConnectionLostError, ReplicationConnection, WalData

SCRIPT = """\
format_version: 1
server: {pg_version: 16}
tables:
  - name: public.t
    columns: [{name: id, type: int4, key: true}, {name: v, type: text}]
publications: [{name: pub, tables: [public.t]}]
slots: [{name: s}]
steps:
  - transaction: [{insert: public.t, values: {id: 1, v: a}}]
"""
GOLDEN = Path(__file__).parent.parent / "data" / "golden"


class Served(ServeProcess):
    def __init__(self, script: Path, *extra: str) -> None:
        super().__init__(["--script", str(script), *extra])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    path = tmp_path / "live.yaml"
    path.write_text(SCRIPT)
    server = Served(path)
    yield server
    server.stop()


def _commits(cur: object, conn: object, count: int) -> list[bytes]:
    tags: list[bytes] = []
    deadline = time.monotonic() + 10
    while tags.count(b"C") < count:
        assert time.monotonic() < deadline, tags
        message = cur.read_message()  # type: ignore[attr-defined]
        if message is None:
            select.select([conn], [], [], 0.05)
            continue
        tags.append(bytes(message.payload)[:1])
    return tags


def test_post_wal_reaches_a_streaming_client_and_get_wal_shows_positions(
    served: Served,
) -> None:
    status, before = served.request("GET", "/wal")
    assert status == 200 and before["held_at"] is None
    assert before["slots"]["s"] == {
        "confirmed_flush": "0/1500000",
        "restart_lsn": "0/1500000",
        "active_pid": None,
    }
    conn = psycopg2.connect(
        f"host=127.0.0.1 port={served.port} user=postgres dbname=postgres",
        connection_factory=extras.LogicalReplicationConnection,
    )
    cur = conn.cursor()
    cur.start_replication(
        slot_name="s", decode=False, options={"proto_version": "1", "publication_names": "pub"}
    )
    assert _commits(cur, conn, 1) == [b"B", b"R", b"I", b"C"]
    status, after = served.request(
        "POST", "/wal", "- transaction: [{update: public.t, values: {id: 1, v: b}}]\n"
    )
    assert status == 200 and after["end_lsn"] > before["end_lsn"]
    assert after["slots"]["s"]["active_pid"] is not None
    assert _commits(cur, conn, 1) == [b"B", b"U", b"C"]
    status, answer = served.request(
        "POST",
        "/wal",
        '{"steps": [{"message": {"prefix": "p", "content": "c"}}]}',
    )
    assert status == 200 and answer["end_lsn"] > after["end_lsn"]
    conn.close()


def test_bad_steps_and_faults_get_one_line_errors(served: Served) -> None:
    status, answer = served.request("POST", "/wal", "transaction: [{insert: public.nope}]")
    assert status == 400 and "no table 'public.nope'" in answer["error"]
    assert "\n" not in answer["error"]
    status, answer = served.request("POST", "/wal", "- {sleep: 1, fault: x}")
    assert status == 400 and "exactly one of" in answer["error"]
    status, answer = served.request("POST", "/wal", "[unclosed")
    assert status == 400 and "not valid YAML" in answer["error"]
    status, answer = served.request("POST", "/faults", "bogus")
    assert status == 400 and "unknown fault 'bogus'" in answer["error"]
    # Nested past the parsers' recursion: a 400 like any bad body, not an HTML 500.
    deep = "[" * 100_000 + "]" * 100_000
    for path, said in (("/wal", "nested too deeply"), ("/snapshot", "expected a body")):
        status, answer = served.request("POST", path, deep)
        assert status == 400 and said in answer["error"], (path, answer)
    assert served.request("POST", "/faults", "pause:1s") == (200, {"applied": False})


def test_a_recording_cannot_grow() -> None:
    server = Served(GOLDEN / "pg16" / "messages.v2-stream.jsonl")
    try:
        status, answer = server.request("POST", "/wal", "- sleep: 1")
        assert status == 409 and "not a script" in answer["error"]
        assert server.request("GET", "/wal")[0] == 200
    finally:
        server.stop()


def test_a_control_endpoint_that_cannot_listen_stops_serve(tmp_path: Path) -> None:
    path = tmp_path / "live.yaml"
    path.write_text(SCRIPT)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = f"tcp:{taken.getsockname()[1]}:interface=127.0.0.1"
    for endpoint, code in ((busy, 1), ("nonsense:x", 2)):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pgwire_mock.serve",
                "--port",
                "0",
                "--script",
                str(path),
                "--control",
                endpoint,
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        # One line: not even "listening on" for the port that did open.
        [error] = result.stderr.splitlines()
        assert result.returncode == code, result.stderr
        assert error.startswith("pgwire-mock serve:"), result.stderr
    taken.close()


def test_a_transaction_left_open_over_http_survives_a_consumer_restart(served: Served) -> None:
    """POST /wal with a begin step opens one; its write steps reach the WAL at once (the
    end of WAL moves, nothing is sent); the consumer confirms a position inside it and
    restarts, and gets it whole at its commit step. Bad steps get one-line errors."""
    dsn = f"host=127.0.0.1 port={served.port} user=postgres dbname=postgres"
    options = {"proto_version": "1", "publication_names": "pub"}

    def consumer() -> tuple[object, object]:
        conn = psycopg2.connect(dsn, connection_factory=extras.LogicalReplicationConnection)
        cur = conn.cursor()
        cur.start_replication(slot_name="s", decode=False, options=options)
        return conn, cur

    conn, cur = consumer()
    assert _commits(cur, conn, 1) == [b"B", b"R", b"I", b"C"]
    status, begun = served.request("POST", "/wal", "- begin: t1")
    assert status == 200 and begun["end_lsn"] == served.request("GET", "/wal")[1]["end_lsn"]
    status, written = served.request(
        "POST", "/wal", "- write: t1\n  changes: [{insert: public.t, values: {id: 2, v: b}}]"
    )
    assert status == 200 and written["end_lsn"] > begun["end_lsn"]
    status, answer = served.request("POST", "/wal", "{write: t1, changes: [{insert: public.no}]}")
    assert status == 400 and "no table 'public.no'" in answer["error"]
    assert answer["end_lsn"] == written["end_lsn"]  # nothing of it written
    cur.send_feedback(flush_lsn=LSN.parse(written["end_lsn"]), force=True)  # type: ignore[attr-defined]
    time.sleep(0.2)
    slot = served.request("GET", "/wal")[1]["slots"]["s"]
    assert slot["confirmed_flush"] == written["end_lsn"]
    assert LSN.parse(slot["restart_lsn"]) <= LSN.parse(begun["end_lsn"])  # held at its first change
    conn.close()  # type: ignore[attr-defined]
    served.request(
        "POST", "/wal", '{"write": "t1", "changes": [{"update": "public.t", "values": {"id": 1}}]}'
    )
    conn, cur = consumer()
    assert served.request("POST", "/wal", "- commit: t1")[0] == 200
    assert _commits(cur, conn, 1) == [b"B", b"R", b"I", b"U", b"C"]
    conn.close()  # type: ignore[attr-defined]
    status, answer = served.request("POST", "/wal", "- commit: t1")
    assert status == 400 and "no open transaction 't1'" in answer["error"]
    # One that ends prepared, finished by a commit_prepared step.
    steps = "[{begin: t2}, {write: t2, changes: [{insert: public.t, values: {id: 3}}]}]"
    assert served.request("POST", "/wal", steps)[0] == 200
    status, answer = served.request("POST", "/wal", "- prepare: t2")
    assert status == 400 and "missing gid" in answer["error"]
    status, prepared = served.request("POST", "/wal", "- {prepare: t2, gid: g1}")
    assert status == 200
    status, answer = served.request("POST", "/wal", "- commit_prepared: g1")
    assert status == 200 and answer["end_lsn"] > prepared["end_lsn"]


def _streaming_client(served: Served) -> tuple[object, object]:
    conn = ReplicationConnection.connect(
        f"host=127.0.0.1 port={served.port} user=postgres dbname=postgres replication=database",
        timeout=10,
        auto_reply=False,
    )
    events = conn.start_replication("s", 0, {"proto_version": "1", "publication_names": "pub"})
    for event in events:
        if isinstance(event, WalData) and event.payload[:1] == b"C":
            return conn, event
    raise AssertionError("no commit")


def test_post_restart_restarts_once_the_client_confirmed_and_answers_the_new_end(
    served: Served,
) -> None:
    """The client confirmed everything: COPY 0 at once, and the answer comes when the
    server takes connections again, its end of WAL past the shutdown checkpoint."""
    conn, commit = _streaming_client(served)
    conn.send_status(flush=commit.wal_start)  # type: ignore[attr-defined]
    time.sleep(0.2)
    _, before = served.request("GET", "/wal")
    status, after = served.request("POST", "/restart", "")
    assert status == 200, after
    assert int(LSN.parse(after["end_lsn"])) == int(LSN.parse(before["end_lsn"])) + 120
    assert after["slots"]["s"]["active_pid"] is None
    seen: list[object] = []
    with pytest.raises(ConnectionLostError):
        for _ in range(5):
            seen += conn.read_stream(2)  # type: ignore[attr-defined]
    assert [getattr(e, "command_tag", None) for e in seen if hasattr(e, "command_tag")] == [
        "COPY 0"
    ]
    ReplicationConnection.connect(
        f"host=127.0.0.1 port={served.port} user=postgres dbname=postgres", timeout=10
    ).close()


def test_post_restart_gives_up_on_a_client_that_never_confirms(served: Served) -> None:
    conn, _ = _streaming_client(served)  # confirms nothing: the walsender waits for it
    bad = (400, {"error": 'expected a body {"timeout": SECONDS, "immediate": BOOL}'})
    assert served.request("POST", "/restart", "{") == bad
    assert served.request("POST", "/restart", '{"immediate": "yes"}') == bad
    assert served.request("POST", "/restart", '{"timeout": 0}')[0] == 400
    status, answer = served.request("POST", "/restart", '{"timeout": 0.5}')
    assert status == 504 and "did not shut down within 0.5s" in answer["error"], answer
    assert served.request("POST", "/restart", "") == (
        409,
        {"error": "the server is shutting down already"},
    )
    conn.close()  # type: ignore[attr-defined]


def test_post_restart_immediate_crashes_the_server_at_once(served: Served) -> None:
    """A client that confirmed nothing does not hold a crash: its connection drops,
    and the slot is where it was last saved."""
    conn, _ = _streaming_client(served)
    status, after = served.request("POST", "/restart", '{"immediate": true}')
    assert status == 200, after
    assert after["slots"]["s"]["confirmed_flush"] == "0/1500000"
    with pytest.raises(ConnectionLostError):
        for _ in range(5):
            conn.read_stream(2)  # type: ignore[attr-defined]


def test_post_snapshot_writes_a_running_xacts_record_that_moves_the_slot(served: Served) -> None:
    """A record the client has confirmed the start of moves restart_lsn there at once
    (the same rules against real 14-18: tests/conformance/test_slot_saves_postgres.py)."""
    conn, commit = _streaming_client(served)
    conn.send_status(flush=commit.wal_start)  # type: ignore[attr-defined]
    time.sleep(0.2)
    before = served.request("GET", "/wal")[1]
    assert before["slots"]["s"]["restart_lsn"] == "0/1500000", before
    status, after = served.request("POST", "/snapshot", "")
    assert status == 200, after
    end = int(LSN.parse(before["end_lsn"]))
    assert after["end_lsn"] == str(LSN(end + 56)), after
    assert after["slots"]["s"]["restart_lsn"] == before["end_lsn"], after
    status, after = served.request("POST", "/snapshot", '{"checkpoint": true}')
    assert (status, after["end_lsn"]) == (200, str(LSN(end + 56 + 176))), after
    bad = (400, {"error": 'expected a body {"checkpoint": BOOL}'})
    assert served.request("POST", "/snapshot", '{"checkpoint": 1}') == bad
    assert served.request("POST", "/snapshot", "[") == bad
    conn.close()  # type: ignore[attr-defined]


def test_a_recording_takes_no_snapshot() -> None:
    server = Served(GOLDEN / "pg16" / "messages.v2-stream.jsonl")
    try:
        status, answer = server.request("POST", "/snapshot", "")
        assert status == 409 and "not a script" in answer["error"]
    finally:
        server.stop()
