"""The resume check's two sides, stopped at a position and resumed: one consumer's
stop-and-restart on any walsender (:func:`stop_and_resume`), on real PostgreSQL
(:class:`RealTarget`, a fresh copy of the cell's slot per attempt) and on the fake
(:class:`FakeTarget`, a fresh server state per attempt)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import psycopg

from codec.values import LSN
from conformance import fake
from conformance.restart_points import Consumer, Received, RestartPoint
from conformance.scenarios import OptionSet
from conformance.subjects import SLOT_PREFIX, ScenarioError, ScenarioRun, Stream
from pgwire_mock.cli_common import one_line
from pgwire_mock.client import (
    Keepalive,
    ReplicationConnection,
    ReplicationTimeoutError,
    ServerError,
    State,
    WalData,
)
from pgwire_mock.client.commands import OptionValue
from pgwire_mock.server import RecordingSource, ServerState, SessionConfig, SlotState

__all__ = [
    "COPY_SLOT",
    "Attempt",
    "FakeTarget",
    "RealTarget",
    "ResumeError",
    "stop_and_resume",
]

#: The copies of the pristine slot; SLOT_PREFIX, so a leftover is dropped by the next
#: prepare_scenario.
COPY_SLOT: Final = SLOT_PREFIX + "resume_copy"
_RELEASE_WAIT: Final = 10.0
_ZERO: Final = LSN(0)


# --------------------------------------------------------------------------------------
# Stopping at P and resuming, against any walsender


class ResumeError(Exception):
    """One side could not be stopped at P or resumed; the message says where."""


@dataclass(frozen=True, slots=True)
class Attempt:
    """What one side did for one position and consumer.

    ``acknowledged`` is the highest LSN the consumer acknowledged before stopping (P
    unless the walsender never delivered a message at P); ``confirmed_flush`` the slot's
    confirmed_flush after the stop, as that side reports it; ``received`` what the
    walsender sent after the restart; ``error`` why the attempt failed, if it did.
    """

    acknowledged: LSN = _ZERO
    confirmed_flush: LSN | None = None
    received: tuple[Received, ...] = ()
    error: str | None = None
    seconds: float = 0.0


def _start(
    conn: ReplicationConnection,
    slot: str,
    options: Mapping[str, OptionValue],
    wait: float,
) -> None:
    """START_REPLICATION from 0/0, retrying while the previous walsender still holds the
    slot (55006: it releases the slot only once it has noticed the disconnect)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            conn.start_replication(slot, 0, options)
        except ServerError as err:
            if err.sqlstate != "55006" or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)
            continue
        return


def _stop_at(
    dsn: str,
    slot: str,
    options: Mapping[str, OptionValue],
    point: LSN,
    consumer: Consumer,
    end: LSN,
    timeout: float,
    current_flush: Callable[[], LSN | None] | None = None,
) -> LSN:
    """Stream, acknowledge as ``consumer`` until exactly ``point``, stop; the LSN acked.

    A message whose acknowledgement would pass ``point`` is not processed (a consumer
    stopping at P has not processed it); a keepalive at or past ``end`` means nothing at
    P will come.
    """
    acked = LSN(0)
    with ReplicationConnection.connect(dsn, timeout=timeout) as conn:
        _start(conn, slot, options, timeout)

        def idle() -> str:
            return (
                f"nothing received for {timeout}s before acknowledging {point} "
                f"(acknowledged {acked})"
            )

        for event in _wal_until(conn, end, timeout, idle):
            value = consumer.ack_value(event)
            if value > point:
                break
            if value > acked:
                acked = value
                if consumer.feedback_each_message:
                    conn.send_status(write=acked, flush=acked, apply=0)
            if acked == point:
                break
        else:
            if conn.session.state is not State.STREAMING:
                raise ResumeError("the walsender ended the stream before P")
        if consumer.stop == "copydone":
            if acked:
                conn.send_status(write=acked, flush=acked, apply=0)
            conn.stop()
        elif acked and consumer.confirm_before_close and current_flush is not None:
            # send_feedback(reply=True), then close only once the slot shows the update
            # (see Consumer.confirm_before_close). Waiting for the answering keepalive is
            # not enough: an idle keepalive sent before the update looks the same.
            conn.send_status(write=acked, flush=acked, apply=0, reply_requested=True)
            deadline = time.monotonic() + min(timeout, 2.0)
            while time.monotonic() < deadline:
                flushed = current_flush()
                if flushed is not None and flushed >= acked:
                    break
                conn.read_stream(0.005)
    return acked


def _capture(
    dsn: str,
    slot: str,
    options: Mapping[str, OptionValue],
    end: LSN,
    timeout: float,
) -> tuple[Received, ...]:
    """Every XLogData from a restart at 0/0 up to ``end`` (nothing acknowledged).

    It ends like ``pg_recvlogical --endpos``: a message starting after ``end`` is not
    kept, a keepalive at or past ``end`` proves nothing earlier is left. A transaction
    left open at the end (an unrelated one straddling it) is cut, as
    :func:`conformance.subjects.whole_transactions` does for the matrix.
    """
    out: list[Received] = []
    with ReplicationConnection.connect(dsn, timeout=timeout) as conn:
        _start(conn, slot, options, timeout)

        def idle() -> str:
            return (
                f"stream idle for {timeout}s after the restart before reaching {end} "
                f"({len(out)} messages so far)"
            )

        for event in _wal_until(conn, end, timeout, idle):
            if event.wal_start > end:
                break
            out.append(Received(event.wal_start, event.wal_end, event.payload))
    return _whole(out)


def _wal_until(
    conn: ReplicationConnection, end: LSN, timeout: float, idle: Callable[[], str]
) -> Iterator[WalData]:
    """The XLogData of a started stream until a keepalive at or past ``end`` proves
    nothing earlier is left, or until the walsender ends the stream (the caller reads
    ``conn.session.state``); ResumeError(idle()) when nothing comes for ``timeout``."""
    while True:
        events = conn.read_stream(timeout)
        if not events:
            raise ResumeError(idle())
        for event in events:
            if isinstance(event, WalData):
                yield event
            elif isinstance(event, Keepalive) and event.wal_end >= end:
                return
        if conn.session.state is not State.STREAMING:
            return


def _whole(received: Sequence[Received]) -> tuple[Received, ...]:
    open_at: int | None = None
    for index, message in enumerate(received):
        if message.tag in ("B", "b", "S") and open_at is None:
            open_at = index
        elif message.tag in ("C", "P", "E"):
            open_at = None
    return tuple(received if open_at is None else received[:open_at])


def stop_and_resume(
    dsn: str,
    slot: str,
    options: Mapping[str, OptionValue],
    point: LSN,
    consumer: Consumer,
    end: LSN,
    confirmed_flush: Callable[[], LSN | None],
    *,
    current_flush: Callable[[], LSN | None] | None = None,
    timeout: float = 5.0,
) -> Attempt:
    """The dance on one walsender: stream, ack ``point``, stop, restart, capture.

    ``confirmed_flush`` reads the slot's confirmed_flush once the first walsender has
    released it; ``current_flush`` reads it at once (see Consumer.confirm_before_close).
    """
    started = time.monotonic()
    acked = LSN(0)
    confirmed: LSN | None = None
    try:
        acked = _stop_at(dsn, slot, options, point, consumer, end, timeout, current_flush)
        confirmed = confirmed_flush()
        received = _capture(dsn, slot, options, end, timeout)
    except (ResumeError, ServerError, ReplicationTimeoutError, OSError) as err:
        return Attempt(acked, confirmed, (), one_line(err), time.monotonic() - started)
    except Exception as err:  # any client failure is this position's failure
        return Attempt(
            acked,
            confirmed,
            (),
            f"{type(err).__name__}: {one_line(err)}",
            time.monotonic() - started,
        )
    return Attempt(acked, confirmed, received, None, time.monotonic() - started)


# --------------------------------------------------------------------------------------
# The two sides


class RealTarget:
    """Real PostgreSQL: each attempt on a fresh copy of the cell's pristine slot.

    ``pg_copy_logical_replication_slot(src, dst, false)`` copies restart_lsn and
    confirmed_flush but, on 14-17, not ``two_phase``; START_REPLICATION with the
    ``two_phase`` option then turns it on at the copy's confirmed_flush (``logical.c``),
    the position the pristine slot was created at, which decodes the scenario's
    prepared transactions as the pristine slot would. One SQL connection serves every
    copy of a cell.
    """

    name: Final = "real"

    def __init__(
        self,
        run: ScenarioRun,
        options: OptionSet,
        sql: psycopg.Connection[tuple[object, ...]],
        *,
        timeout: float = 5.0,
    ) -> None:
        self.run = run
        self.options = options
        self.sql = sql
        self.timeout = timeout
        self.plugin_options = options.options(run.scenario.publication)

    @contextlib.contextmanager
    def copy_slot(self) -> Iterator[str]:
        """A fresh copy of the pristine slot for the block's duration, then dropped."""
        self._drop(COPY_SLOT)
        self.sql.execute(
            "SELECT pg_copy_logical_replication_slot(%s, %s, false)",
            (self.run.slot(self.options), COPY_SLOT),
        )
        try:
            yield COPY_SLOT
        finally:
            self._drop(COPY_SLOT)

    def _drop(self, slot: str) -> None:
        deadline = time.monotonic() + _RELEASE_WAIT
        while True:
            row = self.sql.execute(
                "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)
            ).fetchone()
            if row is None:
                return
            if not row[0] or time.monotonic() >= deadline:
                self.sql.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                return
            time.sleep(0.005)

    def _confirmed_flush(self, slot: str, *, wait: bool = True) -> LSN | None:
        deadline = time.monotonic() + (_RELEASE_WAIT if wait else 0.0)
        while True:
            row = self.sql.execute(
                "SELECT active, confirmed_flush_lsn::text FROM pg_replication_slots "
                "WHERE slot_name = %s",
                (slot,),
            ).fetchone()
            if row is None:
                return None
            # Read once the walsender has let go: it may still be applying the update.
            if not row[0] or time.monotonic() >= deadline:
                return None if row[1] is None else LSN.parse(str(row[1]))
            time.sleep(0.005)

    def straight(self) -> tuple[Received, ...]:
        """The straight stream, read from 0/0 on a copy to the run's end."""
        with self.copy_slot() as slot:
            try:
                return _capture(
                    self.run.server.replication_dsn,
                    slot,
                    self.plugin_options,
                    self.run.end_lsn,
                    self.timeout,
                )
            except (ResumeError, ServerError, ReplicationTimeoutError, OSError) as err:
                raise ScenarioError(f"straight stream: {one_line(err)}") from err

    def attempt(self, point: RestartPoint, consumer: Consumer) -> Attempt:
        with self.copy_slot() as slot:
            return stop_and_resume(
                self.run.server.replication_dsn,
                slot,
                self.plugin_options,
                point.lsn,
                consumer,
                self.run.end_lsn,
                lambda: self._confirmed_flush(slot),
                current_flush=lambda: self._confirmed_flush(slot, wait=False),
                timeout=self.timeout,
            )


class FakeTarget:
    """The fake walsender serving the SQL interface's recording of the cell, as
    :class:`conformance.subjects.FakeWalsender` does (same meta, slot at the recording's
    first LSN, WAL position at the run's end, 20 ms idle keepalives); a fresh
    :class:`~pgwire_mock.server.ServerState` and listener per attempt."""

    name: Final = "fake"

    def __init__(
        self,
        run: ScenarioRun,
        options: OptionSet,
        recorded: Stream,
        directory: Path,
        *,
        timeout: float = 5.0,
    ) -> None:
        self.run = run
        self.options = options
        self.timeout = timeout
        publication = run.scenario.publication
        self.plugin_options = options.options(publication)
        path = fake.write_recording(
            directory / f"{run.scenario.name}.{options.name}.jsonl",
            {
                "server_version": run.server.full_version,
                "major": run.server.version,
                "scenario": run.scenario.name,
                "option_set": options.name,
                "options": self.plugin_options,
                "slot_two_phase": options.two_phase,
                "description": "sql capture replayed by the resume check",
            },
            ((m.lsn, m.payload) for m in recorded),
        )
        self.path = path

    def _state(self) -> tuple[SessionConfig, ServerState]:
        source = RecordingSource.from_file(self.path)
        state = ServerState(wal_lsn=max(int(self.run.end_lsn), source.end_lsn))
        start = source.start_lsn
        slot = SlotState(
            self.run.slot(self.options),
            "pgoutput",
            state.database,
            start,
            start,
            two_phase=self.options.two_phase,
        )
        state.declare([slot], source.publications)
        config = SessionConfig(
            major=self.run.server.version, source=source, idle_keepalive_interval=0.02
        )
        return config, state

    @contextlib.contextmanager
    def serve(self) -> Iterator[fake.FakeServer]:
        """A fake with a fresh state (the slot at the recording's start) for the block."""
        config, state = self._state()
        with fake.host().serve(config, state) as server:
            yield server

    def attempt(self, point: RestartPoint, consumer: Consumer) -> Attempt:
        config, state = self._state()
        slot = self.run.slot(self.options)

        def confirmed() -> LSN | None:
            found = state.slots.get(slot)
            return None if found is None else LSN(found.confirmed_flush)

        try:
            with fake.host().serve(config, state) as server:
                return stop_and_resume(
                    server.dsn(),
                    slot,
                    self.plugin_options,
                    point.lsn,
                    consumer,
                    self.run.end_lsn,
                    confirmed,
                    current_flush=confirmed,
                    timeout=self.timeout,
                )
        except Exception as err:  # a fake that cannot serve fails this position
            return Attempt(error=f"fake: {type(err).__name__}: {one_line(err)}")
