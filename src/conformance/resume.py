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

:data:`EXTRA_CELLS` (``--extra``) adds cells the matrix does not have, sampled: two-phase
without streaming, and the resume-only scenario ``prepared_subxacts`` (large prepared
transactions with a subtransaction rolled back) streamed and not; a few seconds a
version.

A side that cannot be stopped or resumed (a timeout, a server error) fails that
position; after ``max_errors`` such failures in one cell the rest of the cell is reported
as not tried, so a fake that hangs cannot make the check run for hours.

The stream model, the positions and the consumers are in
:mod:`conformance.restart_points`; the two sides and the stop-and-resume itself in
:mod:`conformance.resume_targets`; the comparison, the cells and the command line here.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import psycopg

from codec import pgoutput as po
from conformance import provision
from conformance.matrix import select_scenarios
from conformance.restart_points import (
    CHANGE_TAGS,
    CONSUMERS,
    Consumer,
    Received,
    RestartPoint,
    decode_all,
    restart_points,
    sample,
)
from conformance.resume_targets import Attempt, FakeTarget, RealTarget
from conformance.scenarios import (
    OPTION_SETS,
    RESUME_SCENARIOS,
    SCENARIOS,
    TWO_PHASE_UNSTREAMED,
    OptionSet,
    Scenario,
    option_sets,
)
from conformance.subjects import ScenarioError, ScenarioRun, SqlInterface, prepare_scenario
from pgwire_mock.cli_common import one_line

__all__ = [
    "EXTRA_CELLS",
    "CellResume",
    "PositionResult",
    "block_boundaries_only",
    "compare",
    "describe_difference",
    "extra_cells",
    "main",
    "resume_cell",
    "resume_extra",
    "resume_version",
]

_HEX_LIMIT: Final = 96
_DESCRIPTION_LIMIT: Final = 200


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
    real_decoded = decode_all([r.payload for r in real])
    fake_decoded = decode_all([r.payload for r in fake_side])
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
        decoded = decode_all([r.payload for r in stream])
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
            if getattr(message, "xid", None) in subxids and received.tag in CHANGE_TAGS:
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
        cell.error = one_line(err)
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


def _sets(*names: str) -> tuple[OptionSet, ...]:
    known = {o.name: o for o in (*OPTION_SETS, TWO_PHASE_UNSTREAMED)}
    return tuple(known[name] for name in names)


#: Cells beyond scenario × option set, tried sampled (``full=False``): two-phase
#: without streaming on the ``two_phase`` scenario (a large prepared transaction whole,
#: restarted inside it), and every streaming and two-phase decoding of
#: ``prepared_subxacts`` (a subtransaction rolled back inside a prepared transaction:
#: Stream Abort before Stream Prepare, or left out of Begin Prepare..Prepare).
EXTRA_CELLS: Final[tuple[tuple[str, tuple[OptionSet, ...]], ...]] = (
    ("two_phase", _sets("v3-2pc")),
    ("prepared_subxacts", _sets("v2-stream", "v3-2pc", "v3-stream-2pc", "v4-parallel-2pc-bin")),
)


def extra_cells(major: int) -> list[tuple[Scenario, tuple[OptionSet, ...]]]:
    """:data:`EXTRA_CELLS` that ``major`` can decode: each scenario with its option sets
    (14 has neither two_phase nor protocol 3, so only ``prepared_subxacts`` streamed)."""
    scenarios = {s.name: s for s in (*SCENARIOS, *RESUME_SCENARIOS)}
    out = []
    for name, sets in EXTRA_CELLS:
        runnable = tuple(o for o in sets if o.min_version <= major)
        if runnable and scenarios[name].min_version <= major:
            out.append((scenarios[name], runnable))
    return out


def resume_extra(
    server: provision.Server,
    *,
    full: bool = False,
    on_cell: Callable[[CellResume], None] | None = None,
) -> list[CellResume]:
    """The resume check on :data:`EXTRA_CELLS` (sampled unless ``full``)."""
    cells: list[CellResume] = []
    for scenario, sets in extra_cells(server.version):
        cells += resume_version(server, [scenario], sets=sets, full=full, on_cell=on_cell)
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
    parser.add_argument(
        "--extra",
        action="store_true",
        help="only the cells beyond scenario x option set (EXTRA_CELLS), sampled",
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

            if args.extra:
                all_cells.extend(resume_extra(server, on_cell=show))
            else:
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
