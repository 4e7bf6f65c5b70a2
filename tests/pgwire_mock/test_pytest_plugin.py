"""The pytest plugin: fixtures, the handle, and a clean stop (no thread, no port left)."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg2
import pytest
from psycopg2 import extras

from pgwire_mock.pytest_plugin import WalSender, start_walsender
from pgwire_mock.server.faults import Fault

# make_walsender and walsender come from the installed pytest11 entry point.
pytest_plugins = ["pytester"]
DEMO = Path(__file__).parent.parent.parent / "examples" / "demo.yaml"


def replication(server: WalSender, **params: str) -> object:
    return psycopg2.connect(
        server.dsn(**params), connection_factory=extras.LogicalReplicationConnection
    )


def test_the_plugin_loads_with_p_and_the_marker_configures_walsender(
    pytester: pytest.Pytester,
) -> None:
    """A user's test suite gets the fixtures from the installed pytest11 entry point."""
    pytester.makepyfile(
        f"""
        import psycopg2, psycopg2.extras, pytest

        @pytest.mark.walsender(script={str(DEMO)!r}, pg_version=15)
        def test_it(walsender):
            assert walsender.pg_version == 15
            conn = psycopg2.connect(
                walsender.dsn(), connection_factory=psycopg2.extras.LogicalReplicationConnection
            )
            assert conn.server_version // 10000 == 15
            conn.close()
            assert set(walsender.slots) == {{"demo_slot"}}
            assert walsender.connections == 1
        """
    )
    result = pytester.runpytest_subprocess("--strict-markers")
    result.assert_outcomes(passed=1)


def test_the_handle_sees_slots_and_status_updates(
    make_walsender: Callable[..., WalSender],
) -> None:
    server = make_walsender(script=DEMO)
    conn = replication(server)
    try:
        cur = conn.cursor()  # type: ignore[attr-defined]
        cur.start_replication(
            slot_name="demo_slot",
            decode=False,
            options={"proto_version": "1", "publication_names": "demo_pub"},
        )
        server.wait_until(lambda s: s.slots["demo_slot"].active)
        last = 0
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            message = cur.read_message()
            if message is None:
                select.select([conn], [], [], 0.1)
                continue
            if message.payload[:1] == b"C":
                last = message.data_start
                cur.send_feedback(flush_lsn=last, force=True)
                break
        server.wait_until(lambda s: s.slots["demo_slot"].confirmed_flush == last)
        assert [u.flushed_lsn for u in server.acknowledged][-1] == last
    finally:
        conn.close()  # type: ignore[attr-defined]
    server.wait_until(lambda s: not s.slots["demo_slot"].active)


def test_inject_applies_to_the_next_stream_when_none_runs(
    make_walsender: Callable[..., WalSender],
) -> None:
    server = make_walsender(script=DEMO)
    assert server.inject(Fault("error", sqlstate="57P01")) is False
    conn = replication(server)
    try:
        cur = conn.cursor()  # type: ignore[attr-defined]
        cur.start_replication(
            slot_name="demo_slot",
            decode=False,
            options={"proto_version": "1", "publication_names": "demo_pub"},
        )
        select.select([conn], [], [], 5)
        with pytest.raises(psycopg2.errors.AdminShutdown):
            cur.read_message()
    finally:
        conn.close()  # type: ignore[attr-defined]


def test_users_need_their_password(make_walsender: Callable[..., WalSender]) -> None:
    server = make_walsender(users={"app": "secret"}, auth="scram-sha-256")
    with pytest.raises(psycopg2.OperationalError):
        replication(server, user="app", password="wrong")
    conn = replication(server, user="app", password="secret")
    conn.close()  # type: ignore[attr-defined]


def test_stop_leaves_no_thread_and_no_port() -> None:
    threads = threading.active_count()
    server = start_walsender(script=DEMO)
    port = server.port
    conn = replication(server)
    assert threading.active_count() == threads + 1
    server.stop()
    server.stop()  # idempotent
    assert threading.active_count() == threads
    conn.close()  # type: ignore[attr-defined]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))  # the port is free again
    assert server.slots["demo_slot"].active is False  # still readable after stop
