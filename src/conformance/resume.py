"""The resume check: real PostgreSQL and the fake, stopped and restarted at the same places.

A CDC consumer stops (a deploy, a crash) and comes back; what it receives after the
restart must not depend on whether the walsender is real. For one prepared scenario
(:func:`conformance.subjects.prepare_scenario`), one option set and one major, this
module:

1. reads the **straight stream** of the real walsender (on a copy of the scenario's
   slot) and chooses **restart positions** in it (:func:`restart_points`): every
   transaction boundary (the XLogData position of each Commit ``C``, Stream Commit ``c``,
   Prepare ``P``, Stream Prepare ``p``, Commit Prepared ``K``, Rollback Prepared ``r``,
   top-level Stream Abort ``A`` and non-transactional Message ``M``) and points inside
   every streamed and prepared transaction (each stream block's Stream Start, a change
   in its middle and its Stream Stop; the first and a middle change of each Begin
   Prepare…Prepare; the message right before and the position of each subtransaction's
   Stream Abort);
2. for each position P and each consumer (:data:`CONSUMERS`), on **both** sides
   (:class:`RealTarget`: a fresh ``pg_copy_logical_replication_slot`` of the pristine
   slot, which is never streamed itself; :class:`FakeTarget`: the fake walsender serving
   the SQL interface's recording exactly as :class:`conformance.subjects.FakeWalsender`
   does, with a fresh state per P), streams from 0/0, acknowledges as the consumer does
   until it has acknowledged exactly P, stops, reconnects with ``START_REPLICATION ...
   LOGICAL 0/0`` and the same options, and records every XLogData
   ``(wal_start, wal_end, payload)`` up to the run's end LSN (:func:`stop_and_resume`);
3. compares the two lists, and the slot's confirmed_flush after the stop
   (:func:`compare`); :func:`describe_difference` names the first differing message
   (index, tag, wal_start/wal_end, hex of both payloads, both decoded).

The consumers (:data:`CONSUMERS`) acknowledge and stop as the real programs do:

``pg_recvlogical``
    one standby status update, write = flush = the ``wal_end`` of the last XLogData
    processed, apply = 0, then CopyDone (``--endpos``: ``flushAndSendFeedback``, then
    ``PQputCopyEnd``);
``psycopg2``
    ``send_feedback(flush_lsn=msg.data_start)`` after every message, then the connection
    is closed (Terminate, no CopyDone).

A real walsender sends XLogData with ``wal_start == wal_end`` (``WalSndPrepareWrite``
writes the same LSN twice), and 0/0 for messages not written last (Relation, Type), so
on PostgreSQL both acknowledge the same LSN; the fake is held to the same.

Cost, and what is tried
-----------------------

Measured on this project's 2-core reference machine, one restart costs about 12 ms on
real PostgreSQL (slot copy, two connections and two streams, drop; ~22 ms for
psycopg2's reply-requested final update) and 3-5 ms on the fake. Every position with
both consumers, for every scenario × option set, takes 32 s on PostgreSQL 17 (1,022
restarts a side, most of the time spent running the scenarios' SQL), 24 s on 14; about
2 minutes for 14-17. That is within the budget, so **nothing is sampled** by default:
every position is tried with every consumer (``full=True``).

:func:`sample` with ``full=False`` (``--sample``) is the cheaper rule for quick local
runs: every position inside a streamed or prepared transaction or next to a Stream Abort
with both consumers (where a walsender must decode again from the transaction's start),
and of the plain transaction boundaries the first two, the last and every one followed
by a relation's first Relation message (the Relation cache is per walsender), the
consumer alternating. It keeps about half of the restarts.

A side that cannot be stopped or resumed (a timeout, a server error) fails that
position; after ``max_errors`` such failures in one cell the rest of the cell is reported
as not tried, so a fake that hangs cannot make the check run for hours.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

import psycopg

from codec import CodecError
from codec import pgoutput as po
from codec.values import LSN
from conformance import fake, provision
from conformance.scenarios import OptionSet, Scenario, option_sets
from conformance.subjects import (
    SLOT_PREFIX,
    ScenarioError,
    ScenarioRun,
    SqlInterface,
    Stream,
    prepare_scenario,
)
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
    "CONSUMERS",
    "PG_RECVLOGICAL",
    "PSYCOPG2",
    "Attempt",
    "CellResume",
    "Consumer",
    "FakeTarget",
    "PositionResult",
    "RealTarget",
    "Received",
    "RestartPoint",
    "block_boundaries_only",
    "compare",
    "describe_difference",
    "main",
    "restart_points",
    "resume_cell",
    "resume_version",
    "sample",
    "stop_and_resume",
]

#: The copies of the pristine slot; SLOT_PREFIX, so a leftover is dropped by the next
#: prepare_scenario.
COPY_SLOT: Final = SLOT_PREFIX + "resume_copy"
_RELEASE_WAIT: Final = 10.0
_HEX_LIMIT: Final = 96
_ZERO: Final = LSN(0)
_DESCRIPTION_LIMIT: Final = 200


# --------------------------------------------------------------------------------------
# What is received, where it is stopped, who stops it


@dataclass(frozen=True, slots=True)
class Received:
    """One XLogData: its positions and its pgoutput payload (send time left out)."""

    wal_start: LSN
    wal_end: LSN
    payload: bytes

    @property
    def tag(self) -> str:
        return chr(self.payload[0]) if self.payload else ""


@dataclass(frozen=True, slots=True)
class RestartPoint:
    """A position to acknowledge and restart at, and why it was chosen.

    ``inside`` is true when P lies inside a streamed or prepared transaction or next to
    a Stream Abort (see :func:`sample`); ``index`` is the straight stream's index of the
    first message acknowledged at P.
    """

    lsn: LSN
    reasons: tuple[str, ...]
    inside: bool
    index: int

    def label(self) -> str:
        return f"{self.lsn} ({'; '.join(self.reasons)})"


@dataclass(frozen=True, slots=True)
class Consumer:
    """How a consumer acknowledges and stops (see the module docstring)."""

    name: str
    #: Which XLogData field is acknowledged: ``wal_end`` or ``data_start`` (wal_start).
    ack: Literal["wal_end", "data_start"]
    #: A status update after every message (psycopg2) or once before stopping.
    feedback_each_message: bool
    #: CopyDone and wait for the server, or Terminate and close.
    stop: Literal["copydone", "close"]
    #: Before closing, send the last update with reply_requested and wait (up to 2 s)
    #: until the slot shows it. Without it the close races the update: closing a socket
    #: with unread data makes the kernel send RST, and PostgreSQL then never reads the
    #: update and Terminate still in its receive buffer; confirmed_flush stays at an
    #: earlier update (measured on 17: lost at the first position of every streamed
    #: cell tried). That is real consumer behaviour, but not a deterministic one.
    confirm_before_close: bool = True

    def ack_value(self, data: WalData) -> LSN:
        return data.wal_end if self.ack == "wal_end" else data.wal_start


PG_RECVLOGICAL: Final = Consumer("pg_recvlogical", "wal_end", False, "copydone")
PSYCOPG2: Final = Consumer("psycopg2", "data_start", True, "close")
CONSUMERS: Final[tuple[Consumer, ...]] = (PG_RECVLOGICAL, PSYCOPG2)


# --------------------------------------------------------------------------------------
# Choosing positions

_BOUNDARY_TAGS: Final[Mapping[str, str]] = {
    "C": "Commit",
    "c": "Stream Commit",
    "P": "Prepare",
    "p": "Stream Prepare",
    "K": "Commit Prepared",
    "r": "Rollback Prepared",
}
_CHANGE_TAGS: Final = frozenset("IUDTM")


def _decode_all(payloads: Sequence[bytes]) -> list[po.PgOutputMessage | None]:
    """Each payload decoded in order by one Decoder (None where it does not decode)."""
    decoder = po.Decoder()
    out: list[po.PgOutputMessage | None] = []
    for payload in payloads:
        try:
            out.append(decoder.decode(payload))
        except CodecError:
            out.append(None)
    return out


def restart_points(stream: Sequence[Received]) -> tuple[RestartPoint, ...]:
    """The positions of the module docstring, chosen in a walsender's straight ``stream``.

    Positions are XLogData ``wal_start`` values (never 0/0); a position chosen for
    several reasons appears once, with all of them, in stream order.
    """
    marks: dict[int, tuple[list[str], list[bool], int]] = {}

    def mark(index: int, why: str, inside: bool) -> None:
        lsn = int(stream[index].wal_start)
        if not lsn:
            return
        reasons, flags, _ = marks.setdefault(lsn, ([], [], index))
        if why not in reasons:
            reasons.append(why)
        flags.append(inside)

    decoded = _decode_all([r.payload for r in stream])
    in_transaction = False  # between Begin/Begin Prepare and Commit/Prepare
    prepared: list[int] | None = None  # change indexes of the open Begin Prepare
    blocks: dict[int, list[int]] = {}  # stream block changes by xid
    block_xid: int | None = None
    last_positioned: int | None = None
    number = {"block": 0, "prepared": 0}
    for index, (received, message) in enumerate(zip(stream, decoded, strict=True)):
        tag = received.tag
        if tag == "B":
            in_transaction = True
        elif tag == "b":
            in_transaction = True
            prepared = []
            number["prepared"] += 1
        elif tag in _BOUNDARY_TAGS:
            mark(index, _BOUNDARY_TAGS[tag], tag == "P")
            if tag == "P" and prepared is not None:
                n = number["prepared"]
                if prepared:
                    mark(prepared[0], f"first change of prepared transaction {n}", True)
                    mark(prepared[len(prepared) // 2], f"middle of prepared transaction {n}", True)
                prepared = None
            if tag in "CP":
                in_transaction = False
        elif tag == "S":
            number["block"] += 1
            block_xid = message.xid if isinstance(message, po.StreamStart) else -1
            blocks[block_xid] = []
            mark(index, f"Stream Start of block {number['block']}", True)
        elif tag == "E":
            changes = blocks.get(block_xid if block_xid is not None else -1, [])
            if changes:
                mark(changes[len(changes) // 2], f"middle of block {number['block']}", True)
            mark(index, f"Stream Stop of block {number['block']}", True)
            block_xid = None
        elif tag == "A":
            top = isinstance(message, po.StreamAbort) and message.xid == message.subxid
            if top or message is None:
                mark(index, "Stream Abort", False)
            else:
                if last_positioned is not None:
                    mark(last_positioned, "right before a subtransaction's Stream Abort", True)
                mark(index, "subtransaction's Stream Abort", True)
        elif (
            isinstance(message, po.Message)
            and not message.flags & 1
            and not in_transaction
            and block_xid is None
        ):
            mark(index, "non-transactional Message", False)
        if tag in _CHANGE_TAGS:
            if block_xid is not None:
                blocks[block_xid].append(index)
            elif prepared is not None:
                prepared.append(index)
        if received.wal_start:
            last_positioned = index
    ordered = sorted(marks.items())
    return tuple(
        RestartPoint(LSN(lsn), tuple(reasons), any(flags), first)
        for lsn, (reasons, flags, first) in ordered
    )


def _new_relations_after(stream: Sequence[Received], points: Sequence[RestartPoint]) -> set[int]:
    """Positions whose next messages bring a Relation the stream had not sent before."""
    out: set[int] = set()
    seen: set[bytes] = set()
    relation_at: list[int] = []  # indexes of Relation messages naming a new relation
    decoded = _decode_all([r.payload for r in stream])
    for index, message in enumerate(decoded):
        if isinstance(message, po.Relation):
            key = str(message.oid).encode()
            if key not in seen:
                seen.add(key)
                relation_at.append(index)
    for point, following in itertools.pairwise(points):
        if any(point.index < r < following.index for r in relation_at):
            out.add(int(point.lsn))
    return out


def sample(
    points: Sequence[RestartPoint],
    stream: Sequence[Received] = (),
    *,
    full: bool = True,
    consumers: Sequence[Consumer] = CONSUMERS,
) -> list[tuple[RestartPoint, Consumer]]:
    """The (position, consumer) pairs to try: all of them, or with ``full=False`` the
    sample described in the module docstring."""
    if full:
        return [(p, c) for p in points for c in consumers]
    boundaries = [p for p in points if not p.inside]
    keep = {int(p.lsn) for p in boundaries[:2] + boundaries[-1:]}
    keep |= _new_relations_after(stream, boundaries)
    pairs: list[tuple[RestartPoint, Consumer]] = []
    turn = 0
    for point in points:
        if point.inside:
            pairs.extend((point, c) for c in consumers)
        elif int(point.lsn) in keep:
            pairs.append((point, consumers[turn % len(consumers)]))
            turn += 1
    return pairs


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


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


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
        done = False
        while not done:
            events = conn.read_stream(timeout)
            if not events:
                raise ResumeError(
                    f"nothing received for {timeout}s before acknowledging {point} "
                    f"(acknowledged {acked})"
                )
            for event in events:
                if isinstance(event, WalData):
                    value = consumer.ack_value(event)
                    if value > point:
                        done = True
                        break
                    if value > acked:
                        acked = value
                        if consumer.feedback_each_message:
                            conn.send_status(write=acked, flush=acked, apply=0)
                    if acked == point:
                        done = True
                        break
                elif isinstance(event, Keepalive) and event.wal_end >= end:
                    done = True
                    break
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
        done = False
        while not done:
            events = conn.read_stream(timeout)
            if not events:
                raise ResumeError(
                    f"stream idle for {timeout}s after the restart before reaching {end} "
                    f"({len(out)} messages so far)"
                )
            for event in events:
                if isinstance(event, WalData):
                    if event.wal_start > end:
                        done = True
                        break
                    out.append(Received(event.wal_start, event.wal_end, event.payload))
                elif isinstance(event, Keepalive) and event.wal_end >= end:
                    done = True
                    break
            if conn.session.state is not State.STREAMING:
                break
    return _whole(out)


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
        return Attempt(acked, confirmed, (), _one_line(err), time.monotonic() - started)
    except Exception as err:  # any client failure is this position's failure
        return Attempt(
            acked,
            confirmed,
            (),
            f"{type(err).__name__}: {_one_line(err)}",
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
                raise ScenarioError(f"straight stream: {_one_line(err)}") from err

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
            return Attempt(error=f"fake: {type(err).__name__}: {_one_line(err)}")


# --------------------------------------------------------------------------------------
# Comparing


@dataclass(frozen=True, slots=True)
class PositionResult:
    point: RestartPoint
    consumer: Consumer
    real: Attempt
    fake: Attempt
    difference: str | None

    @property
    def ok(self) -> bool:
        return self.difference is None

    @property
    def block_boundaries_only(self) -> bool:
        """Differs, but only as :func:`block_boundaries_only` allows (same positions
        acknowledged and confirmed, no error)."""
        real, fake_side = self.real, self.fake
        return (
            not self.ok
            and real.error is None
            and fake_side.error is None
            and real.acknowledged == fake_side.acknowledged
            and real.confirmed_flush == fake_side.confirmed_flush
            and real.received != fake_side.received
            and block_boundaries_only(real.received, fake_side.received)
        )


def _hex(payload: bytes) -> str:
    text = payload[:_HEX_LIMIT].hex()
    return text + (f"…(+{len(payload) - _HEX_LIMIT} bytes)" if len(payload) > _HEX_LIMIT else "")


def _short(text: str) -> str:
    return text if len(text) <= _DESCRIPTION_LIMIT else text[: _DESCRIPTION_LIMIT - 1] + "…"


def _message_line(side: str, received: Received, decoded: po.PgOutputMessage | None) -> str:
    described = "undecodable" if decoded is None else _short(repr(decoded))
    return (
        f"{side}: {received.tag!r} wal {received.wal_start}..{received.wal_end} "
        f"{len(received.payload)} bytes {_hex(received.payload)}\n      {described}"
    )


def describe_difference(real: Sequence[Received], fake_side: Sequence[Received]) -> str | None:
    """The first message where the two differ (index, tag, positions, hex, decoded), or
    None when they are equal. Both lists are decoded from their start, so a message
    inside a stream block is read with its xid."""
    real_decoded = _decode_all([r.payload for r in real])
    fake_decoded = _decode_all([r.payload for r in fake_side])
    for index, (want, got) in enumerate(zip(real, fake_side, strict=False)):
        if want == got:
            continue
        what = []
        if want.payload != got.payload:
            common = min(len(want.payload), len(got.payload))
            offset = next((i for i in range(common) if want.payload[i] != got.payload[i]), common)
            what.append(f"payload differs from byte {offset}")
        if (want.wal_start, want.wal_end) != (got.wal_start, got.wal_end):
            what.append("positions differ")
        return (
            f"message {index} of {len(real)} (real) / {len(fake_side)} (fake): "
            + ", ".join(what)
            + "\n    "
            + _message_line("real", want, real_decoded[index])
            + "\n    "
            + _message_line("fake", got, fake_decoded[index])
        )
    if len(real) == len(fake_side):
        return None
    index = min(len(real), len(fake_side))
    if len(real) > index:
        return (
            f"the fake sent {len(fake_side)} messages, real {len(real)}; first missing, "
            f"message {index}:\n    " + _message_line("real", real[index], real_decoded[index])
        )
    return (
        f"the fake sent {len(fake_side)} messages, real {len(real)}; first extra, "
        f"message {index}:\n    " + _message_line("fake", fake_side[index], fake_decoded[index])
    )


def block_boundaries_only(real: Sequence[Received], fake_side: Sequence[Received]) -> bool:
    """True when the two streams differ at most where stream blocks start and stop, and
    in which changes of a subtransaction that is rolled back (its Stream Abort) were
    streamed before that: every other message equal, at the same positions, in order.

    That is what a recording cannot settle after a restart: where the reorder buffer
    runs out of memory again depends on the size of every change, published or not,
    and the recording has only the published ones (docs/clients.md, "Restart and
    resume"). A consumer applies the same rows either way.
    """

    def kept(stream: Sequence[Received]) -> list[Received]:
        decoded = _decode_all([r.payload for r in stream])
        rolled_back = {
            (m.xid, m.subxid)
            for m in decoded
            if isinstance(m, po.StreamAbort) and m.xid != m.subxid
        }
        subxids = {sub for _, sub in rolled_back}
        out = []
        for received, message in zip(stream, decoded, strict=True):
            if received.tag in ("S", "E"):
                continue
            if getattr(message, "xid", None) in subxids and received.tag in _CHANGE_TAGS:
                continue
            out.append(received)
        return out

    return kept(real) == kept(fake_side)


def compare(
    point: RestartPoint, consumer: Consumer, real: Attempt, fake_side: Attempt
) -> str | None:
    """Why the fake's attempt differs from the real one (None: equal)."""
    if real.error is not None:
        return f"real: {real.error}"
    if fake_side.error is not None:
        return f"fake: {fake_side.error}"
    problems = []
    if real.acknowledged != fake_side.acknowledged:
        problems.append(
            f"acknowledged real {real.acknowledged}, fake {fake_side.acknowledged} "
            "(the fake sent no XLogData at P)"
        )
    if real.confirmed_flush != fake_side.confirmed_flush:
        problems.append(
            f"confirmed_flush after the stop: real {real.confirmed_flush}, "
            f"fake {fake_side.confirmed_flush}"
        )
    diff = describe_difference(real.received, fake_side.received)
    if diff is not None:
        problems.append(diff)
    return "; ".join(problems) if problems else None


# --------------------------------------------------------------------------------------
# Cells and versions


@dataclass(slots=True)
class CellResume:
    """The resume check for one version × scenario × option set."""

    major: int
    scenario: str
    option_set: str
    positions: int = 0  # positions chosen before sampling
    results: list[PositionResult] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    real_seconds: float = 0.0
    fake_seconds: float = 0.0

    @property
    def tried(self) -> int:
        return len(self.results)

    @property
    def equal(self) -> int:
        return sum(1 for r in self.results if r.ok)

    @property
    def ok(self) -> bool:
        return self.error is None and all(r.ok for r in self.results)

    @property
    def failures(self) -> list[PositionResult]:
        return [r for r in self.results if not r.ok]

    @property
    def boundaries_only(self) -> int:
        """Restarts that differ only in stream block boundaries (block_boundaries_only)."""
        return sum(1 for r in self.results if r.block_boundaries_only)

    def report(self, limit: int = 3) -> str:
        """The failing positions, the first ``limit`` with their whole difference."""
        head = f"PostgreSQL {self.major} {self.scenario} {self.option_set}"
        if self.error is not None:
            return f"{head}: {self.error}"
        lines = [f"{head}: {self.tried - self.equal} of {self.tried} restarts differ"]
        for result in self.failures[:limit]:
            only = " [block boundaries only]" if result.block_boundaries_only else ""
            lines.append(
                f"  restart at {result.point.label()} as {result.consumer.name}{only}: "
                f"{result.difference}"
            )
        rest = self.failures[limit:]
        if rest:
            lines.append(
                "  also at: " + ", ".join(f"{r.point.lsn} {r.consumer.name}" for r in rest)
            )
        return "\n".join(lines)

    def to_json(self) -> dict[str, object]:
        return {
            "major": self.major,
            "scenario": self.scenario,
            "option_set": self.option_set,
            "positions": self.positions,
            "tried": self.tried,
            "equal": self.equal,
            "boundaries_only": self.boundaries_only,
            "error": self.error,
            "seconds": round(self.seconds, 3),
            "real_seconds": round(self.real_seconds, 3),
            "fake_seconds": round(self.fake_seconds, 3),
            "failures": [
                {
                    "lsn": str(r.point.lsn),
                    "reasons": list(r.point.reasons),
                    "consumer": r.consumer.name,
                    "difference": r.difference,
                    "block_boundaries_only": r.block_boundaries_only,
                    "confirmed_flush": {
                        "real": None
                        if r.real.confirmed_flush is None
                        else str(r.real.confirmed_flush),
                        "fake": None
                        if r.fake.confirmed_flush is None
                        else str(r.fake.confirmed_flush),
                    },
                }
                for r in self.failures
            ],
        }


def resume_cell(
    run: ScenarioRun,
    options: OptionSet,
    *,
    full: bool = True,
    consumers: Sequence[Consumer] = CONSUMERS,
    timeout: float = 5.0,
    fake_timeout: float = 2.0,
    max_errors: int = 3,
) -> CellResume:
    """The resume check on one prepared cell; the pristine slot is left where it is."""
    started = time.monotonic()
    cell = CellResume(run.server.version, run.scenario.name, options.name)
    try:
        recorded = run.streams.get((SqlInterface.name, options.name))
        if recorded is None:
            recorded = SqlInterface().capture(run, options)
        with (
            run.server.connect() as sql,
            tempfile.TemporaryDirectory(prefix="pgwm-resume-") as tmp,
        ):
            real = RealTarget(run, options, sql, timeout=timeout)
            fake_side = FakeTarget(run, options, recorded, Path(tmp), timeout=fake_timeout)
            straight = real.straight()
            points = restart_points(straight)
            cell.positions = len(points)
            errors = 0
            for point, consumer in sample(points, straight, full=full, consumers=consumers):
                if errors >= max_errors:
                    skipped = Attempt(error=f"not tried after {errors} failed attempts")
                    cell.results.append(
                        PositionResult(point, consumer, skipped, skipped, skipped.error)
                    )
                    continue
                real_attempt = real.attempt(point, consumer)
                fake_attempt = fake_side.attempt(point, consumer)
                if real_attempt.error is not None or fake_attempt.error is not None:
                    errors += 1
                cell.real_seconds += real_attempt.seconds
                cell.fake_seconds += fake_attempt.seconds
                cell.results.append(
                    PositionResult(
                        point,
                        consumer,
                        real_attempt,
                        fake_attempt,
                        compare(point, consumer, real_attempt, fake_attempt),
                    )
                )
    except (ScenarioError, psycopg.Error) as err:
        cell.error = _one_line(err)
    cell.seconds = time.monotonic() - started
    return cell


def resume_version(
    server: provision.Server,
    scenarios: Sequence[Scenario],
    *,
    sets: Sequence[OptionSet] | None = None,
    full: bool = True,
    on_cell: Callable[[CellResume], None] | None = None,
) -> list[CellResume]:
    """The resume check for every runnable scenario × option set on ``server``."""
    chosen = tuple(sets) if sets is not None else option_sets(server.version)
    cells: list[CellResume] = []
    for scenario in scenarios:
        if scenario.min_version > server.version:
            continue
        try:
            with prepare_scenario(server, scenario, chosen) as run:
                for options in chosen:
                    cell = resume_cell(run, options, full=full)
                    cells.append(cell)
                    if on_cell is not None:
                        on_cell(cell)
        except ScenarioError as err:
            for options in chosen:
                cell = CellResume(server.version, scenario.name, options.name, error=str(err))
                cells.append(cell)
                if on_cell is not None:
                    on_cell(cell)
    return cells


# --------------------------------------------------------------------------------------
# Command line: python -m conformance.resume --versions 17 --scenarios streaming


def _line(cell: CellResume) -> str:
    mark = "✓" if cell.ok else "✗"
    return (
        f"  {mark} {cell.scenario:<20} {cell.option_set:<20} positions {cell.positions:>3}  "
        f"tried {cell.tried:>3}  equal {cell.equal:>3}"
        + (f" (+{cell.boundaries_only} block boundaries)" if cell.boundaries_only else "")
        + f"  {cell.seconds:6.2f}s "
        f"(real {cell.real_seconds:.2f}s, fake {cell.fake_seconds:.2f}s)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    from conformance.matrix import select_scenarios  # noqa: PLC0415 - matrix imports us

    parser = argparse.ArgumentParser(
        prog="python -m conformance.resume",
        description="Stop and restart real PostgreSQL and the fake walsender at the same "
        "positions and compare what each sends after the restart.",
    )
    parser.add_argument("--versions", default=",".join(str(m) for m in provision.MAJORS))
    parser.add_argument("--scenarios", help="comma-separated scenario names (default: all)")
    parser.add_argument("--option-sets", help="comma-separated option set names (default: all)")
    parser.add_argument("--dsn", action="append", default=[], metavar="MAJOR=DSN")
    parser.add_argument(
        "--sample", action="store_true", help="a sample of the positions (see the module doc)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per cell")
    parser.add_argument("--details", type=int, default=3, help="failures shown in full per cell")
    args = parser.parse_args(argv)
    try:
        versions = [int(v) for v in args.versions.split(",") if v]
        scenarios = select_scenarios(args.scenarios.split(",") if args.scenarios else None)
    except (ValueError, KeyError) as err:
        parser.error(str(err))
    dsns = {int(k): v for k, _, v in (d.partition("=") for d in args.dsn)}
    all_cells: list[CellResume] = []
    started = time.monotonic()
    for major in versions:
        sets = option_sets(major)
        if args.option_sets:
            wanted = set(args.option_sets.split(","))
            sets = tuple(o for o in sets if o.name in wanted)
        dsn = dsns.get(major)
        server = (
            provision.ExternalServer(dsn, expect_major=major) if dsn else provision.provide(major)
        )
        try:
            if not args.json:
                print(f"PostgreSQL {server.full_version}:", flush=True)

            def show(cell: CellResume) -> None:
                if args.json:
                    print(json.dumps(cell.to_json()), flush=True)
                else:
                    print(_line(cell), flush=True)

            all_cells.extend(
                resume_version(server, scenarios, sets=sets, full=not args.sample, on_cell=show)
            )
        finally:
            server.stop()
    bad = [c for c in all_cells if not c.ok]
    if not args.json:
        for cell in bad:
            print(cell.report(args.details))
        tried = sum(c.tried for c in all_cells)
        equal = sum(c.equal for c in all_cells)
        boundaries = sum(c.boundaries_only for c in all_cells)
        print(
            f"{equal} of {tried} restarts equal ({boundaries} more differ only in stream "
            f"block boundaries), {len(bad)} of {len(all_cells)} cells differ, "
            f"{time.monotonic() - started:.1f}s"
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
