"""The server stopped by a signal under its clients — ``pg_ctl stop -m smart`` (SIGTERM),
``-m fast`` (SIGINT), ``-m immediate`` (SIGQUIT) — told to a real postmaster and to a
``pgwire-mock serve`` process, compared as the clients see it.

The story (:func:`run_stop_story`): a regular session is open, an idle replication
connection waits and a consumer streams and confirms a commit. The signal comes; a new
connection is then refused (FATAL 57P03). In a smart shutdown everything else goes on
while the regular session lives: the idle connection answers, a commit made meanwhile
streams, the session answers; once it ends the shutdown goes on as a fast one. A fast
one ends the session (FATAL 57P01 at its next query) and the idle connection; the
consumer, holding a commit it has not confirmed, reads a keepalive asking for a reply,
answers with the keepalive's position, and gets ``COPY 0`` and the close. An immediate
one drops every connection. The server process exits (status 0 on 14-18, each mode).
"""

from __future__ import annotations

import signal
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codec.pgoutput import Decoder
from conformance.live_observed import plain_message
from conformance.live_sides import apply_rows, create_story_objects
from conformance.live_types import TRANSACTIONS, Row
from conformance.serve_process import ServeProcess
from conformance.serve_sides import row_steps, write_script
from conformance.server_restart import (
    begin_story,
    error_fields,
    idle_connection_end,
    plain_events,
    read_until,
    refused_connection,
)
from pgwire_mock.client import (
    ConnectionLostError,
    Keepalive,
    ServerError,
    WalData,
)

__all__ = [
    "MODES",
    "StopRun",
    "StopSide",
    "fake_stop_side",
    "observed",
    "real_stop_side",
    "run_stop_story",
]

#: pg_ctl's modes and the signal each sends the postmaster.
MODES: Mapping[str, signal.Signals] = {
    "smart": signal.SIGTERM,
    "fast": signal.SIGINT,
    "immediate": signal.SIGQUIT,
}


@dataclass
class StopSide:
    """One server of the story: its table, publication and slot have the same names on
    both; ``session`` is the regular session it keeps open (psycopg, autocommit)."""

    dsn: str  # a replication connection
    slot: str
    publication: str
    session: Any
    commit: Callable[[Sequence[Row]], object]  # works while the session is open
    send_signal: Callable[[signal.Signals], None]
    exit_code: Callable[[float], int]  # waits for the server process to exit


@dataclass
class StopRun:
    mode: str
    refused: dict[str, str | None]  # a new connection once the signal arrived
    meanwhile: dict[str, Any]  # smart: what still worked while the session lived
    session_end: dict[str, str | None] | str  # the session's next query after the signal
    idle_end: dict[str, str | None] | str  # the idle connection's next command
    before: list[WalData]
    during: list[object]  # the consumer's events from the signal (smart: the session's end) on
    exit_code: int


def run_stop_story(
    side: StopSide, mode: str, options: Mapping[str, str], *, timeout: float = 30.0
) -> StopRun:
    """The story of the module docstring, on one side."""
    stream_options = {**options, "publication_names": side.publication}
    idle, consumer, events, before = begin_story(side, stream_options, timeout)
    if mode != "smart":  # read, not confirmed: the walsender waits for it
        side.commit(TRANSACTIONS[1])
        before += read_until(events, b"C")
    side.send_signal(MODES[mode])
    refused = refused_connection(side.dsn, timeout)
    meanwhile: dict[str, Any] = {}
    if mode == "smart":
        meanwhile["idle_answers"] = idle.identify_system().dbname
        side.commit(TRANSACTIONS[1])
        streamed = read_until(events, b"C")  # not confirmed: the walsender waits for it
        decoder = Decoder()
        meanwhile["streamed"] = [plain_message(decoder.decode(e.payload)) for e in streamed]
        meanwhile["session_answers"] = side.session.execute("SELECT 1").fetchone()[0]
        side.session.close()
        session_end: dict[str, str | None] | str = "closed by the client"
    else:
        session_end = _session_end(side.session, timeout)
    idle_end = idle_connection_end(idle, timeout)
    during: list[object] = []
    try:
        for event in events:
            during.append(event)
            if isinstance(event, Keepalive) and event.reply_requested:
                consumer.send_status(flush=int(event.wal_end))
    except ConnectionLostError:
        during.append("closed")
    consumer.close()
    return StopRun(
        mode, refused, meanwhile, session_end, idle_end, before, during, side.exit_code(timeout)
    )


def _fields(err: Any) -> dict[str, str | None]:
    """:func:`error_fields` of our client's error or of psycopg's."""
    if isinstance(err, ServerError):
        return error_fields(err)
    diag = err.diag
    return {
        "S": diag.severity_nonlocalized or diag.severity,
        "V": diag.severity_nonlocalized,
        "C": diag.sqlstate,
        "M": diag.message_primary,
        "F": diag.source_file,
        "L": diag.source_line,
        "R": diag.source_function,
    }


def _session_end(session: Any, timeout: float) -> dict[str, str | None] | str:
    """The error the regular session's next query gets once its backend was told to
    end (it may still answer one the signal has not reached yet: try again)."""
    import psycopg  # noqa: PLC0415 - a test-time dependency

    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                session.execute("SELECT 1")
            except psycopg.errors.AdminShutdown as err:
                return _fields(err)
            except psycopg.OperationalError as err:
                return f"closed: {type(err).__name__}"
            time.sleep(0.02)
    finally:
        session.close()
    raise AssertionError("the regular session was not ended")


def observed(run: StopRun) -> dict[str, Any]:
    """What the clients of ``run`` can rely on, equal on any two conforming servers."""
    decoder = Decoder()
    refused: Any = run.refused
    if run.mode == "immediate":  # gone, or refusing while it went (timing): the same
        refused = "not let in" if "closed" in refused or refused.get("C") == "57P03" else refused
    return {
        "refused": refused,
        "meanwhile": run.meanwhile,
        "session_end": run.session_end,
        "idle_end": run.idle_end,
        "before": [plain_message(decoder.decode(e.payload)) for e in run.before],
        "during": plain_events(run.during),
        "asked_for_a_reply": any(
            isinstance(e, Keepalive) and e.reply_requested for e in run.during
        ),
        "exit_code": run.exit_code,
    }


# --- the two sides ------------------------------------------------------------------------


@contextmanager
def real_stop_side(cluster: Any, names: tuple[str, str, str]) -> Iterator[StopSide]:
    """The story's table, publication and slot on a cluster of its own
    (``conformance.provision.Cluster``), which the story stops."""
    _, publication, slot = names
    with cluster.connect() as conn:
        ident = create_story_objects(conn, names)
    session = cluster.connect()

    def commit(rows: Sequence[Row]) -> None:
        # Through the open session: once the signal came, no other connection is let in.
        with session.transaction():
            apply_rows(session, ident, rows)

    try:
        yield StopSide(
            cluster.replication_dsn,
            slot,
            publication,
            session,
            commit,
            cluster.send_signal,
            cluster.exit_status,
        )
    finally:
        session.close()


@contextmanager
def fake_stop_side(major: int, names: tuple[str, str, str]) -> Iterator[StopSide]:
    """A ``serve`` process emulating ``major`` with a script of the same names; commits
    written over its control interface."""
    import psycopg  # noqa: PLC0415 - a test-time dependency

    table, publication, slot = names
    with tempfile.TemporaryDirectory(prefix="pgwire-mock-stop-") as directory:
        script = write_script(Path(directory), major, names)
        served = ServeProcess(["--script", str(script), "--new-slots", "end-of-wal"])
        session = psycopg.connect(served.dsn(), autocommit=True)

        def commit(rows: Sequence[Row]) -> None:
            status, answer = served.request("POST", "/wal", row_steps(table, rows))
            assert status == 200, answer

        try:
            yield StopSide(
                served.dsn(replication="database"),
                slot,
                publication,
                session,
                commit,
                served.process.send_signal,
                served.wait,
            )
        finally:
            session.close()
            served.stop()
