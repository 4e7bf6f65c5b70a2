"""``pgwire-mock serve`` stops on SIGTERM, SIGINT and SIGQUIT as the postmaster does
(smart, fast, immediate; compared with PostgreSQL in
tests/conformance/test_server_stop_postgres.py): here, what that comparison cannot wait
for — a shutdown held by a session or by a client that never confirms, and a stronger
signal taking over."""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from test_serve_control import SCRIPT

from conformance.serve_process import ServeProcess
from pgwire_mock.client import ConnectionLostError, ReplicationConnection, ServerError, WalData
from pgwire_mock.server.wal_journal import journal_path


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServeProcess]:
    path = tmp_path / "live.yaml"
    path.write_text(SCRIPT)
    server = ServeProcess(["--script", str(path)])
    yield server
    if server.process.poll() is None:
        server.process.kill()
        server.process.communicate()


def _refused(served: ServeProcess) -> str | None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            ReplicationConnection.connect(served.dsn(replication="database"), timeout=5).close()
        except ServerError as err:
            return err.get("C")
        time.sleep(0.02)
    return None


def _still_running(served: ServeProcess, seconds: float) -> bool:
    time.sleep(seconds)
    return served.process.poll() is None


def test_sigterm_waits_for_the_regular_sessions_and_sigint_ends_them(
    served: ServeProcess,
) -> None:
    session = psycopg.connect(served.dsn(), autocommit=True)
    served.process.send_signal(signal.SIGHUP)  # PostgreSQL reloads; nothing to reload here
    assert _still_running(served, 0.3)
    assert session.execute("SELECT 1").fetchone() == (1,)
    served.process.send_signal(signal.SIGTERM)
    # (A connection the server accepts before it handles the signal is still
    # authenticating, and held the shutdown too: PostgreSQL counts it as well.)
    served.wait_for_line("received smart shutdown request")
    assert _refused(served) == "57P03"
    assert _still_running(served, 0.5)
    assert session.execute("SELECT 1").fetchone() == (1,)  # smart: sessions go on
    served.process.send_signal(signal.SIGINT)  # fast takes over
    # Ended: FATAL 57P01 (AdminShutdown) if libpq reads it before it finds the socket
    # closed, else the close itself; either on PostgreSQL too, by timing.
    with pytest.raises(psycopg.OperationalError):
        for _ in range(100):
            session.execute("SELECT 1")
            time.sleep(0.05)
    session.close()
    assert served.wait(10) == 0
    log = "".join(served.log)
    assert "received SIGHUP, reloading configuration files" in log
    assert "received smart shutdown request" in log
    assert "waiting for 1 session(s) to end" in log
    assert "received fast shutdown request" in log
    assert "database system is shut down" in log


def test_a_fast_shutdown_waits_for_a_client_that_never_confirms_until_sigquit(
    served: ServeProcess,
) -> None:
    consumer = ReplicationConnection.connect(
        served.dsn(replication="database"), timeout=10, auto_reply=False
    )
    events = consumer.start_replication("s", 0, {"proto_version": "1", "publication_names": "pub"})
    assert any(isinstance(e, WalData) and e.payload[:1] == b"C" for e in events)
    served.process.send_signal(signal.SIGINT)
    assert _still_running(served, 1.0)  # the walsender waits for its confirmation
    served.process.send_signal(signal.SIGTERM)  # weaker: changes nothing
    assert _still_running(served, 0.3)
    served.process.send_signal(signal.SIGQUIT)
    assert served.wait(10) == 0
    with pytest.raises(ConnectionLostError):
        for _ in events:
            pass
    consumer.close()
    assert "received immediate shutdown request" in "".join(served.log)


def test_a_smart_shutdown_waits_for_a_connection_still_authenticating(
    served: ServeProcess,
) -> None:
    """PostgreSQL counts it a regular backend until it is known to be a walsender."""
    silent = socket.create_connection(("127.0.0.1", served.port))
    time.sleep(0.2)  # accepted
    served.process.send_signal(signal.SIGTERM)
    assert _still_running(served, 0.5)
    silent.close()
    assert served.wait(10) == 0


# serve with a reactor slow to start: the window in which a serve that said it listens
# before its signal handlers were in place took SIGINT as Python's KeyboardInterrupt.
_SLOW_START = """
import sys, time
from twisted.internet import reactor
run = reactor.run
reactor.run = lambda *a, **k: (time.sleep(1.0), run(*a, **k))[1]
from pgwire_mock.serve import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_signal_sent_once_serve_says_it_listens_is_a_clean_shutdown(tmp_path: Path) -> None:
    """The "listening" line comes once the shutdown modes are in place: a process
    manager (or a test) that signals on that line gets a fast shutdown, its shutdown
    checkpoint written and the journal marked clean, not a crash."""
    script = tmp_path / "live.yaml"
    script.write_text(SCRIPT)
    state = tmp_path / "state.json"
    args = ["--script", str(script), "--state-file", str(state)]
    server = ServeProcess(args, control=False, python_code=_SLOW_START)
    server.process.send_signal(signal.SIGINT)
    log = server.stop()
    assert server.process.returncode == 0, log
    assert "received fast shutdown request" in log and "Traceback" not in log, log
    assert journal_path(state).read_text().splitlines()[-1] == '{"stopped":"cleanly"}'
