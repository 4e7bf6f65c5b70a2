"""The three real client programs stopped and restarted, on real PostgreSQL and on the fake.

:mod:`conformance.resume` stops and restarts *emulated* consumers; this module does it
with the real third-party programs of :mod:`conformance.clients` (pgjdbc, node's
``pg-logical-replication``, a jackc/pgconn program), each acknowledging in its own
library's way: pgjdbc the last message's ``wal_start``, node ``wal_start + 1``, Go
``wal_start + len(payload)`` like pglogrepl's example. Those acknowledgements land
where the emulated consumers' never do: past a Commit's position into the next
transaction's first record (its first change starts where the Commit's record ends),
at ``0/1`` or ``0/<len>`` after a Relation sent at 0/0, and, for a change whose payload
is longer than its WAL record (a value compressed in the WAL, whole in the payload),
past the rest of its transaction and the commits of the next ones.

For one stop point (:class:`StopPoint`: after ``messages`` XLogData of the straight
stream) and one client, on each side (:class:`RealSide`, a fresh copy of the scenario's
pristine slot, made with :class:`conformance.resume_targets.RealTarget`;
:class:`FakeSide`, the fake serving the SQL interface's recording of the same run with a
fresh state, :class:`conformance.resume_targets.FakeTarget`), :func:`restart` runs

1. the client with ``expect_messages = messages`` (it acknowledges and exits), then
   reads the slot's ``confirmed_flush_lsn`` from ``pg_replication_slots``;
2. the client again from 0/0 (the slot's confirmed_flush), until a keepalive shows the
   walsender has nothing before the run's end left to send (``--until-keepalive``, as
   ``pg_recvlogical --endpos`` ends), and the slot again;
3. the client from ``--start-lsn`` = what the first run acknowledged, on a slot as
   the scenario left it: an application that stores its own LSN and stopped before its
   acknowledgement reached the server (pgjdbc sends its status updates every 10 s)
   restarts there, and PostgreSQL starts decoding at that LSN instead of
   confirmed_flush (``CreateDecodingContext``). Not run when nothing was acknowledged
   (it would be run 2 again). On the slot the first run left, the same LSN is at or
   before its confirmed_flush (each client acknowledges once more on exit), which
   PostgreSQL takes as 0/0, so that is run 2.

:func:`compare` lists every difference between the two sides: each run's lines
(``wal_start`` and payload, byte for byte), the keepalives the client got before its
first XLogData (node and Go report them; pgjdbc hides them), the ``acknowledged`` LSN,
the slot's ``confirmed_flush_lsn`` after it, and the error (SQLSTATE and message) if the
client failed. Slot positions are read with SQL on a replication connection on both
sides, as ``tests/conformance/test_other_clients_fake.py`` reads the fake's.

The keepalives are where the fake differed: PostgreSQL starts every stream, a restart's
included, with a keepalive at the slot's confirmed_flush (where the walsender's sentPtr
starts, whatever LSN START_REPLICATION named), before it decodes anything
(``WalSndWaitForWal``'s first call in a new walsender; pglogrepl-style clients take
their position from it); and once caught up its keepalives carry the end of WAL even
when a client had confirmed beyond it (:func:`keepalives_after_overshoot`).

:data:`SCENARIO` is the scenario all this runs on (protocol 1, :data:`OPTIONS`: node's
parser knows protocols 1 and 2 only); :func:`stop_points` names its stop points;
:func:`sample` picks which ones each client tries on each major: a Go run costs a few
milliseconds, a Java run (a JVM) about half a second, a node run as much (it waits
300 ms before closing so that its last status update is read).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

import psycopg

from codec.values import LSN
from conformance import clients, provision
from conformance.restart_points import Received
from conformance.resume_targets import FakeTarget, RealTarget
from conformance.scenarios import OptionSet, Scenario
from conformance.subjects import ScenarioRun, Stream
from pgwire_mock.client import Keepalive, ReplicationConnection, WalData

__all__ = [
    "OPTIONS",
    "SCENARIO",
    "STOP_KINDS",
    "FakeSide",
    "Outcome",
    "RealSide",
    "Restart",
    "Side",
    "Slot",
    "StopPoint",
    "compare",
    "confirmed_flush",
    "keepalives_after_overshoot",
    "restart",
    "sample",
    "stop_points",
]

_ZERO: Final = LSN(0)

#: The value compressed in the WAL and whole in the payload: with pglz it takes a few
#: dozen bytes of its record, so Go's wal_start + len(payload) passes what follows.
_LARGE_VALUE: Final = 3000

SCENARIO: Final = Scenario(
    name="client_restart",
    description="Small transactions, one of several changes with a value compressed in "
    "the WAL, unpublished WAL, a small one after it: real clients stopped and restarted",
    publish=("pgwm_cr_a", "pgwm_cr_b"),
    setup=(
        "CREATE TABLE pgwm_cr_a (id int PRIMARY KEY, v text)",
        "CREATE TABLE pgwm_cr_b (id int PRIMARY KEY, n int)",
        "CREATE TABLE pgwm_cr_pad (pad text)",
    ),
    steps=(
        "INSERT INTO pgwm_cr_a VALUES (1, 'one')",
        "INSERT INTO pgwm_cr_a VALUES (2, 'two')",
        "BEGIN; INSERT INTO pgwm_cr_b VALUES (1, 10); "
        "UPDATE pgwm_cr_a SET v = 'uno' WHERE id = 1; "
        f"INSERT INTO pgwm_cr_a VALUES (3, repeat('x', {_LARGE_VALUE})); "
        "INSERT INTO pgwm_cr_b VALUES (2, 20); COMMIT",
        "UPDATE pgwm_cr_b SET n = 11 WHERE id = 1",
        # About 10kB of WAL nothing is published from (md5 text does not compress), so
        # the last transaction starts beyond what Go acknowledges after the large value.
        "INSERT INTO pgwm_cr_pad SELECT string_agg(md5(i::text), '') "
        "FROM generate_series(1, 300) AS i",
        "DELETE FROM pgwm_cr_a WHERE id = 2",
    ),
    teardown=("DROP TABLE IF EXISTS pgwm_cr_a, pgwm_cr_b, pgwm_cr_pad",),
)

OPTIONS: Final = OptionSet("v1", 1)

#: The stop points, by name; see stop_points().
STOP_KINDS: Final = ("begin", "relation", "middle", "large", "commit", "last")


@dataclass(frozen=True, slots=True)
class StopPoint:
    """Stop after ``messages`` XLogData of the straight stream; ``last`` is the last one."""

    kind: str
    messages: int
    last: Received

    def label(self) -> str:
        last = self.last
        return f"{self.kind} (after message {self.messages}, {last.tag!r} at {last.wal_start})"


def stop_points(straight: Sequence[Received]) -> dict[str, StopPoint]:
    """The stop points in the straight stream of :data:`SCENARIO`, by kind, in the
    transaction of several changes: right after its Begin (``begin``), after its Relation
    (``relation``, sent at 0/0), after its Update (``middle``), after its change with the
    large value (``large``), after its Commit (``commit``); and after the last message
    (``last``). 14 also sends the unpublished transaction, as a Begin and a Commit."""
    tags = "".join(r.tag for r in straight)
    begin = tags.find("BRIUIIC")
    large = max(range(len(straight)), key=lambda i: len(straight[i].payload))
    if begin < 0 or not tags.endswith("BDC") or large != begin + 4:
        raise ValueError(f"the straight stream is not SCENARIO's: {tags!r}")
    at = {
        "begin": begin,
        "relation": begin + 1,
        "middle": begin + 3,
        "large": large,
        "commit": begin + 6,
        "last": len(straight) - 1,
    }
    return {kind: StopPoint(kind, index + 1, straight[index]) for kind, index in at.items()}


#: Per client, the stop points it tries on each major in turn (``sample``): every one for
#: Go (a run costs milliseconds), two a major for node and one for Java (half a second a
#: run), those where its acknowledgement is most unlike the others' first.
_ORDER: Final = {
    "go": STOP_KINDS,
    "node": ("commit", "relation", "last", "begin", "middle", "large"),
    "java": ("relation", "commit", "large", "last", "begin", "middle"),
}
_PER_MAJOR: Final = {"go": len(STOP_KINDS), "node": 2, "java": 1}


def sample(client: str, major: int) -> tuple[str, ...]:
    """The stop points ``client`` tries on ``major``, rotating with the major: Go every
    one; node two, all six over 14-16; Java one, over 14-18 all but ``middle`` (for
    pgjdbc, which acknowledges a change's own position, the same as ``large``)."""
    order = _ORDER[client]
    count = _PER_MAJOR[client]
    first = ((major - provision.MAJORS[0]) * count) % len(order)
    return tuple(order[(first + i) % len(order)] for i in range(count))


# --------------------------------------------------------------------------------------
# One run, one restart


@dataclass(frozen=True, slots=True)
class Outcome:
    """One client run as compared: the lines it printed, the keepalives it got before its
    first XLogData, what it acknowledged, the slot's confirmed_flush_lsn once it had
    gone, and its error (SQLSTATE and message) if it failed."""

    lines: tuple[tuple[LSN, bytes], ...] = ()
    keepalives: tuple[LSN, ...] = ()
    acknowledged: LSN | None = None
    confirmed_flush: LSN | None = None
    error: str | None = None
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class Restart:
    """One side's three runs for one client and stop point (see the module doc);
    ``own_lsn`` is None when the first run acknowledged nothing."""

    stop: Outcome
    resumed: Outcome
    own_lsn: Outcome | None

    @property
    def seconds(self) -> float:
        own = self.own_lsn.seconds if self.own_lsn is not None else 0.0
        return self.stop.seconds + self.resumed.seconds + own


@dataclass(frozen=True, slots=True)
class Slot:
    """Where a client finds a slot: its DSN (the clients add ``replication=database``
    themselves), the same with it for reading the slot with SQL, and the slot's name."""

    dsn: str
    replication_dsn: str
    name: str


class Side(Protocol):
    """A walsender with a slot as :data:`SCENARIO` left it, fresh for each ``slot()``."""

    @property
    def name(self) -> str: ...

    def slot(self) -> contextlib.AbstractContextManager[Slot]:
        """A fresh slot, on a walsender, for the block's duration."""
        ...


class RealSide:
    """Real PostgreSQL: each ``slot()`` a fresh copy of the scenario's pristine slot."""

    name: Final = "real"

    def __init__(self, run: ScenarioRun, sql: psycopg.Connection[tuple[object, ...]]) -> None:
        self.target = RealTarget(run, OPTIONS, sql)
        self.server = run.server

    @contextlib.contextmanager
    def slot(self) -> Iterator[Slot]:
        with self.target.copy_slot() as name:
            yield Slot(self.server.dsn, self.server.replication_dsn, name)


class FakeSide:
    """The fake serving the SQL interface's recording of the run: each ``slot()`` a new
    listener with a fresh state, the slot at the recording's start."""

    name: Final = "fake"

    def __init__(self, run: ScenarioRun, recorded: Stream, directory: Path) -> None:
        self.target = FakeTarget(run, OPTIONS, recorded, directory)
        self.slot_name = run.slot(OPTIONS)

    @contextlib.contextmanager
    def slot(self) -> Iterator[Slot]:
        with self.target.serve() as server:
            yield Slot(server.dsn(replication=False), server.dsn(), self.slot_name)


def confirmed_flush(slot: Slot, timeout: float = 15.0) -> LSN | None:
    """The slot's ``confirmed_flush_lsn`` once no walsender holds it, read with SQL on a
    replication connection, as a client would."""
    query = (
        "SELECT active, confirmed_flush_lsn FROM pg_replication_slots "
        f"WHERE slot_name = '{slot.name}'"
    )
    deadline = time.monotonic() + timeout
    with ReplicationConnection.connect(slot.replication_dsn) as conn:
        while True:
            rows = conn.execute(query).rows
            if not rows:
                return None
            active, confirmed = rows[0]
            if active == "f" or time.monotonic() >= deadline:
                return None if confirmed is None else LSN.parse(str(confirmed))
            time.sleep(0.01)


def _run(
    client: str,
    slot: Slot,
    *,
    start_lsn: LSN = _ZERO,
    messages: int | None = None,
    end: LSN | None = None,
    idle_timeout: float,
) -> Outcome:
    started = time.monotonic()
    try:
        done = clients.run_client(
            client,
            dsn=slot.dsn,
            slot=slot.name,
            publication=SCENARIO.publication,
            proto_version=OPTIONS.proto_version,
            start_lsn=start_lsn,
            expect_messages=messages,
            until_keepalive=end,
            idle_timeout=idle_timeout,
        )
    except clients.ClientNotInstalledError:
        raise
    except clients.ClientError as err:
        state = err.sqlstate or "-"
        return Outcome(
            error=f"{state} {err.message}",
            confirmed_flush=confirmed_flush(slot),
            seconds=time.monotonic() - started,
        )
    return Outcome(
        tuple(done.payloads),
        done.keepalives,
        done.acknowledged,
        confirmed_flush(slot),
        seconds=time.monotonic() - started,
    )


def restart(
    side: Side, client: str, point: StopPoint, end: LSN, *, idle_timeout: float = 10.0
) -> Restart:
    """``client``'s three runs for ``point`` on ``side`` (see the module doc); ``end`` is
    where the resumed runs stop (the run's end LSN: a keepalive there means nothing is
    left)."""
    with side.slot() as slot:
        stop = _run(client, slot, messages=point.messages, idle_timeout=idle_timeout)
        resumed = _run(client, slot, end=end, idle_timeout=idle_timeout)
    own: Outcome | None = None
    if stop.acknowledged:
        with side.slot() as slot:
            own = _run(
                client, slot, start_lsn=stop.acknowledged, end=end, idle_timeout=idle_timeout
            )
    return Restart(stop, resumed, own)


# --------------------------------------------------------------------------------------
# Comparing


def _line(line: tuple[LSN, bytes]) -> str:
    lsn, payload = line
    text = payload[:48].hex() + ("…" if len(payload) > 48 else "")
    return f"{payload[:1].decode('latin-1')!r} at {lsn} ({len(payload)} bytes) {text}"


def _lines_difference(
    real: Sequence[tuple[LSN, bytes]], fake: Sequence[tuple[LSN, bytes]]
) -> str | None:
    for index, (want, got) in enumerate(zip(real, fake, strict=False)):
        if want != got:
            return f"line {index + 1}: real {_line(want)}, fake {_line(got)}"
    if len(real) == len(fake):
        return None
    index = min(len(real), len(fake))
    if len(real) > index:
        return f"the fake printed {len(fake)} lines, real {len(real)}; missing {_line(real[index])}"
    return f"the fake printed {len(fake)} lines, real {len(real)}; extra {_line(fake[index])}"


def _outcome_differences(run: str, real: Outcome, fake: Outcome) -> list[str]:
    out = []
    if real.error != fake.error:
        out.append(f"{run}: error real {real.error!r}, fake {fake.error!r}")
    if real.keepalives != fake.keepalives:
        out.append(
            f"{run}: keepalives before the first XLogData real "
            f"{[str(k) for k in real.keepalives]}, fake {[str(k) for k in fake.keepalives]}"
        )
    lines = _lines_difference(real.lines, fake.lines)
    if lines is not None:
        out.append(f"{run}: {lines}")
    if real.acknowledged != fake.acknowledged:
        out.append(f"{run}: acknowledged real {real.acknowledged}, fake {fake.acknowledged}")
    if real.confirmed_flush != fake.confirmed_flush:
        out.append(
            f"{run}: confirmed_flush_lsn after it real {real.confirmed_flush}, "
            f"fake {fake.confirmed_flush}"
        )
    return out


def compare(real: Restart, fake: Restart) -> list[str]:
    """Every difference between the two sides' runs (empty: indistinguishable)."""
    out = _outcome_differences("stop", real.stop, fake.stop)
    out += _outcome_differences("restart at 0/0", real.resumed, fake.resumed)
    if (real.own_lsn is None) != (fake.own_lsn is None):
        out.append("restart at the acknowledged LSN: run on one side only")
    elif real.own_lsn is not None and fake.own_lsn is not None:
        lsn = real.stop.acknowledged
        out += _outcome_differences(f"restart at {lsn}", real.own_lsn, fake.own_lsn)
    return out


# --------------------------------------------------------------------------------------
# Keepalives after an acknowledgement beyond the end of WAL


def keepalives_after_overshoot(side: Side, beyond: LSN, timeout: float = 5.0) -> tuple[LSN, ...]:
    """Acknowledge ``beyond`` (past the end of WAL, as Go's ``wal_start + len(payload)``
    does after a change whose payload is longer than what is left of the WAL), stop,
    restart from 0/0 and return the positions of the first two keepalives; no XLogData
    may come (every commit is before the slot's confirmed_flush). The clients stop at
    the first (``--until-keepalive``), so they cannot tell the second."""
    options = OPTIONS.options(SCENARIO.publication)
    with side.slot() as slot:
        with ReplicationConnection.connect(slot.replication_dsn, timeout=timeout) as conn:
            conn.start_replication(slot.name, 0, options)
            conn.send_status(write=beyond, flush=beyond, apply=0)
            conn.stop()
        if confirmed_flush(slot) != beyond:
            raise AssertionError(f"{side.name}: the slot did not take {beyond}")
        seen: list[LSN] = []
        with ReplicationConnection.connect(slot.replication_dsn, timeout=timeout) as conn:
            conn.start_replication(slot.name, 0, options)
            deadline = time.monotonic() + timeout
            while len(seen) < 2 and time.monotonic() < deadline:
                for event in conn.read_stream(timeout):
                    if isinstance(event, WalData):
                        raise AssertionError(f"{side.name}: XLogData after {beyond}: {event}")
                    if isinstance(event, Keepalive):
                        seen.append(LSN(event.wal_end))
        return tuple(seen[:2])
