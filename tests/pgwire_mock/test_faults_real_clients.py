"""Every fault, seen by real clients: psycopg2 against the in-process fake (the pytest
plugin), and Debian's pg_recvlogical against ``pgwire-mock serve --fault``.

The assertions record what the real programs do, which is what a consumer written on
them will see in production when the incident happens.
"""

from __future__ import annotations

import json
import select
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from psycopg2 import extras
from test_real_clients import FakeServer

from pgwire_mock.pytest_plugin import WalSender, make_walsender
from pgwire_mock.script import (
    Script,
    Send,
    StreamOptions,
    column,
    dump_script,
    encode_stream,
    insert,
)
from pgwire_mock.server import MAJORS

__all__ = ["make_walsender"]  # the plugin's fixture, used below without -p


OPTIONS = {"proto_version": "1", "publication_names": "pub"}


def shop(transactions: int = 3, *faults: tuple[str, dict[str, Any]]) -> Script:
    script = (
        Script(pg_version=16)
        .slot("s")
        .publication("pub", tables=["public.t"])
        .table("public.t", columns=[column("id", "int4", key=True), column("v", "text")])
    )
    for i in range(transactions):
        script = script.transaction([insert("public.t", id=i, v=f"row {i}")])
    for name, params in faults:
        script = script.fault(name, **params)
    return script


class Reader:
    """A psycopg2 LogicalReplicationConnection that confirms every message it reads."""

    def __init__(self, server: WalSender) -> None:
        self.conn = psycopg2.connect(
            server.dsn(), connection_factory=extras.LogicalReplicationConnection
        )
        self.cur = self.conn.cursor()
        self.messages: list[tuple[int, bytes]] = []
        self.cur.start_replication(slot_name="s", decode=False, options=OPTIONS)

    def read(
        self,
        seconds: float,
        until: Callable[[Reader], bool] | None = None,
        *,
        confirm: bool = True,
    ) -> None:
        """Read (and confirm) for ``seconds``, or until ``until(self)``; errors propagate."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not (until is not None and until(self)):
            message = self.cur.read_message()
            if message is None:
                select.select([self.conn], [], [], 0.05)
                continue
            self.messages.append((message.data_start, bytes(message.payload)))
            if confirm and message.data_start:
                self.cur.send_feedback(flush_lsn=message.data_start, force=True)

    @property
    def commits(self) -> list[int]:
        return [lsn for lsn, payload in self.messages if payload[:1] == b"C"]

    def close(self) -> None:
        self.conn.close()


def payloads(script: Script) -> list[bytes]:
    events = encode_stream(script, StreamOptions(1, ("pub",)))
    return [e.payload for e in events if isinstance(e, Send)]


def has_commits(n: int) -> Callable[[Reader], bool]:
    return lambda r: len(r.commits) >= n


# --- psycopg2 ----------------------------------------------------------------------------------


@pytest.mark.parametrize("major", MAJORS)
def test_close_after_psycopg2_sees_a_dead_connection_without_sqlstate(
    make_walsender: Callable[..., WalSender], major: int
) -> None:
    server = make_walsender(shop(3), pg_version=major, faults=["close_after:4"])
    reader = Reader(server)
    with pytest.raises(psycopg2.DatabaseError) as raised:
        # Not confirming: feedback written to the closed socket draws a TCP reset, and a
        # reset discards what the client had not read yet (as it would in production).
        reader.read(10, confirm=False)
    assert raised.value.pgcode is None  # no ErrorResponse: only the TCP close
    assert "no message from the libpq" in str(raised.value)
    assert len(reader.messages) == 4
    assert reader.conn.closed
    server.wait_until(lambda s: not s.slots["s"].active)


@pytest.mark.parametrize("major", MAJORS)
@pytest.mark.parametrize(
    ("sqlstate", "exception", "closes"),
    [
        ("57P01", "AdminShutdown", True),
        ("58P01", "UndefinedFile", False),
        ("53100", "DiskFull", False),
    ],
)
def test_error_reaches_psycopg2_with_its_sqlstate(
    make_walsender: Callable[..., WalSender],
    major: int,
    sqlstate: str,
    exception: str,
    closes: bool,
) -> None:
    """FATAL closes the connection; ERROR returns the walsender to command mode."""
    server = make_walsender(shop(2, ("error", {"sqlstate": sqlstate})), pg_version=major)
    reader = Reader(server)
    with pytest.raises(psycopg2.Error) as raised:
        # Not confirming: a feedback write racing the server's close would lose the
        # ErrorResponse (libpq then reports only the dead socket), as with a real server.
        reader.read(10, confirm=False)
    assert raised.value.pgcode == sqlstate
    assert type(raised.value).__name__ == exception
    assert len(reader.commits) == 2  # everything before the fault arrived
    if closes:
        server.wait_until(lambda s: s.open_connections == 0)
    else:
        reader.cur.execute("IDENTIFY_SYSTEM")  # still a working connection
        assert len(reader.cur.fetchone()) == 4
    reader.close()


def test_pause_stops_even_keepalives_then_streaming_resumes(
    make_walsender: Callable[..., WalSender],
) -> None:
    server = make_walsender(shop(3), idle_keepalive_interval=0.1, idle_wal_advance=56)
    reader = Reader(server)
    reader.read(1.0)
    moving = reader.cur.wal_end
    reader.read(0.5)
    assert reader.cur.wal_end > moving  # idle keepalives move wal_end on
    assert server.inject("pause:1.5")
    reader.read(0.2)
    paused_at = reader.cur.wal_end
    reader.read(1.0)
    assert reader.cur.wal_end == paused_at  # nothing at all from the server
    reader.read(1.0)
    assert reader.cur.wal_end > paused_at  # and then it carries on
    assert not reader.conn.closed
    reader.close()


@pytest.mark.parametrize("major", MAJORS)
def test_stop_keepalives_leaves_wal_end_at_the_last_message(
    make_walsender: Callable[..., WalSender], major: int
) -> None:
    """A client that takes its flush position from keepalives never moves past the data."""
    healthy = make_walsender(
        shop(2), pg_version=major, idle_keepalive_interval=0.1, idle_wal_advance=56
    )
    reader = Reader(healthy)
    reader.read(1.0)
    assert reader.cur.wal_end > reader.commits[-1]  # idle keepalives move wal_end on
    reader.close()
    stalled = make_walsender(
        shop(2),
        pg_version=major,
        idle_keepalive_interval=0.1,
        idle_wal_advance=56,
        faults=["stop_keepalives"],
    )
    reader = Reader(stalled)
    reader.read(1.0)
    assert len(reader.commits) == 2
    assert reader.cur.wal_end == reader.commits[-1]
    reader.close()


def test_silent_timeout_closes_after_wal_sender_timeout_without_an_error(
    make_walsender: Callable[..., WalSender],
) -> None:
    server = make_walsender(shop(2), wal_sender_timeout=1.5)
    reader = Reader(server)
    reader.read(5, until=has_commits(2))
    server.inject("silent_timeout")
    start = time.monotonic()
    with pytest.raises(psycopg2.DatabaseError) as raised:
        reader.read(10)
    elapsed = time.monotonic() - start
    assert raised.value.pgcode is None
    assert 1.0 < elapsed < 4.0
    assert [u for u in server.acknowledged if u.flushed_lsn > reader.commits[-1]] == []


def test_redeliver_sends_confirmed_transactions_again_after_the_reconnect(
    make_walsender: Callable[..., WalSender],
) -> None:
    server = make_walsender(shop(3))
    server.inject("redeliver")
    persisted = server.slots["s"].confirmed_flush
    reader = Reader(server)
    with pytest.raises(psycopg2.DatabaseError):
        reader.read(10)  # the "primary" dies once everything is confirmed
    first = reader.commits
    assert len(first) == 3
    assert any(u.flushed_lsn == first[-1] for u in server.acknowledged)
    server.wait_until(lambda s: not s.slots["s"].active)
    assert server.slots["s"].confirmed_flush == persisted
    again = Reader(server)
    again.read(5, until=has_commits(3))
    assert again.commits == first  # already confirmed, delivered again
    again.close()


def test_slow_paces_the_stream(make_walsender: Callable[..., WalSender]) -> None:
    server = make_walsender(shop(30), faults=["slow:rate=4000"])
    reader = Reader(server)
    start = time.monotonic()
    reader.read(30, until=has_commits(30))
    elapsed = time.monotonic() - start
    size = sum(len(p) + 25 + 5 for _, p in reader.messages)  # XLogData and CopyData headers
    assert len(reader.commits) == 30
    assert elapsed > size / 4000 - 1.2, (size, elapsed)
    reader.close()


@pytest.mark.parametrize("major", MAJORS)
def test_shutdown_psycopg2_gets_everything_then_copy_ends(
    make_walsender: Callable[..., WalSender], major: int
) -> None:
    """COPY 0 without CopyDone: psycopg2's next feedback finds no COPY in progress."""
    server = make_walsender(shop(3), pg_version=major, faults=["shutdown"])
    reader = Reader(server)
    # Which error depends on whether psycopg2's feedback write or its read sees the end
    # first; neither carries a SQLSTATE.
    with pytest.raises(
        psycopg2.DatabaseError, match=r"no COPY in progress|no message from the libpq"
    ) as raised:
        reader.read(10)
    assert raised.value.pgcode is None
    assert len(reader.commits) == 3
    server.wait_until(lambda s: s.slots["s"].confirmed_flush >= reader.commits[-1])
    server.wait_until(lambda s: s.open_connections == 0)
    reader.close()


# --- pg_recvlogical ---------------------------------------------------------------------------


def recvlogical(server: FakeServer, *extra: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [
            "pg_recvlogical",
            "-d",
            server.dsn(),
            "-S",
            "s",
            "--start",
            "-o",
            "proto_version=1",
            "-o",
            "publication_names=pub",
            "-f",
            "-",
            "--no-loop",
            "--status-interval=1",
            "--fsync-interval=0",
            *extra,
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def shop_file(tmp_path: Path) -> Path:
    path = tmp_path / "shop.yaml"
    path.write_text(dump_script(shop(3)))
    return path


CLOSED = (
    "pg_recvlogical: error: could not receive data from WAL stream: server closed the "
    "connection unexpectedly"
)


@pytest.mark.parametrize(
    ("fault", "stderr", "lines"),
    [
        ("close_after:3", CLOSED, 3),
        (
            "error:57P01",
            "pg_recvlogical: error: unexpected termination of replication stream: FATAL:  "
            "terminating connection due to administrator command",
            0,
        ),
        (
            "error:58P01",
            "pg_recvlogical: error: unexpected termination of replication stream: ERROR:  "
            "requested WAL segment 000000010000000000000001 has already been removed",
            0,
        ),
        ("silent_timeout:1", CLOSED, 0),
    ],
)
@pytest.mark.parametrize("major", [14, 17])
def test_pg_recvlogical_reports_the_fault_and_exits_1(
    shop_file: Path, fault: str, stderr: str, lines: int, major: int
) -> None:
    server = FakeServer(major, shop_file, "--fault", fault)
    try:
        result = recvlogical(server)
    finally:
        log = server.stop()
    err = result.stderr.decode()
    assert result.returncode == 1, err + log
    assert err.startswith(stderr), err
    assert err.endswith("pg_recvlogical: error: disconnected\n")
    assert len(result.stdout.splitlines()) == lines


def test_pg_recvlogical_after_shutdown_confirms_and_ends_as_disconnected(shop_file: Path) -> None:
    """pg_recvlogical 15 treats the server's COPY 0 as a clean end of the stream: no
    error line, only "disconnected" — and with --no-loop that is exit status 1 (without
    it, it reconnects after 5 s). It confirmed everything before the server left."""
    server = FakeServer(
        16, shop_file, "--fault", "shutdown", "--state-file", str(shop_file.with_suffix(".state"))
    )
    try:
        result = recvlogical(server)
    finally:
        log = server.stop()
    assert result.returncode == 1, result.stderr.decode() + log
    assert result.stderr.decode() == "pg_recvlogical: error: disconnected\n"
    assert result.stdout == b"".join(p + b"\n" for p in payloads(shop(3)))
    state = json.loads(shop_file.with_suffix(".state").read_text())
    assert state["slots"][0]["confirmed_flush"] == max(
        e.wal_start for e in encode_stream(shop(3), StreamOptions(1, ("pub",)))
    )
    assert "client caught up; COPY 0 without CopyDone" in log


def test_pg_recvlogical_gets_confirmed_transactions_again_after_redeliver(
    shop_file: Path,
) -> None:
    server = FakeServer(16, shop_file, "--fault", "redeliver")
    try:
        first = recvlogical(server)
        second = recvlogical(server)
    finally:
        log = server.stop()
    assert first.returncode == second.returncode == 1, log
    assert first.stderr.decode().startswith(CLOSED)
    assert first.stdout and second.stdout == first.stdout, log
    assert log.count("server crash; the slot restarts from its persisted position") == 2
