"""The conformance matrix: version × scenario × option set × check, over every subject.

For each PostgreSQL version, each scenario of :mod:`conformance.scenarios` is run once
(:func:`conformance.subjects.prepare_scenario`: setup, publication, one slot per option
set, steps); then every subject (:data:`conformance.subjects.SUBJECTS`: the SQL interface,
the walsender) captures the stream of each option set, and every check
(:data:`conformance.checks.CHECKS`) judges the cell. Adding a subject or a check is adding
it to its table, or passing your own to :func:`run_matrix` / :func:`run_version`.

Command line (registered through the ``pgwire_mock.commands`` entry point)::

    pgwire-mock conformance [--versions 14,15,16,17] [--dsn 16=postgresql://...]
                            [--scenarios types,toast] [--json]

prints one table per version (scenario × check, ✓/✗), one line per failure, and the
time spent, and exits 1 if any cell failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import IO, Any, Final

from conformance import docker, provision
from conformance.checks import CHECKS, Check, CheckContext, CheckResult, SparkTables
from conformance.scenarios import SCENARIOS, OptionSet, Scenario, option_sets
from conformance.subjects import SUBJECTS, ScenarioError, Subject, ordered, prepare_scenario
from pgwire_mock.cli_common import CommandError

__all__ = [
    "CellResult",
    "MatrixResult",
    "Progress",
    "VersionTimings",
    "add_command",
    "render_text",
    "run_matrix",
    "run_version",
    "select_scenarios",
    "spark_side_missing",
]

OK_MARK: Final = "✓"
FAIL_MARK: Final = "✗"


@dataclass(frozen=True, slots=True)
class CellResult:
    """One check on one version, scenario and option set."""

    major: int
    scenario: str
    option_set: str
    check: str
    ok: bool
    detail: str = ""


@dataclass(slots=True)
class VersionTimings:
    """Seconds spent on one version, by phase.

    ``server`` is getting a server (initdb and start, or connecting to the user's);
    ``scenarios`` running the scenarios' SQL, reading the tables and cleaning up;
    ``capture`` each subject's capturing; ``checks`` each check; ``stop`` stopping the
    server (zero for the user's own).
    """

    major: int
    server_version: str = ""
    server: float = 0.0
    scenarios: float = 0.0
    capture: dict[str, float] = field(default_factory=dict)
    checks: dict[str, float] = field(default_factory=dict)
    stop: float = 0.0

    @property
    def total(self) -> float:
        phases = (self.server, self.scenarios, *self.capture.values(), *self.checks.values())
        return sum(phases) + self.stop


@dataclass(slots=True)
class MatrixResult:
    cells: list[CellResult] = field(default_factory=list)
    timings: list[VersionTimings] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.cells) and bool(self.cells)

    @property
    def failures(self) -> list[CellResult]:
        return [c for c in self.cells if not c.ok]

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "cells": [asdict(c) for c in self.cells],
            "timings": [{**asdict(t), "total": t.total} for t in self.timings],
        }


def select_scenarios(names: Iterable[str] | None) -> tuple[Scenario, ...]:
    """The scenarios called ``names`` (all when None), in the suite's order."""
    if names is None:
        return SCENARIOS
    wanted = [n for n in names if n]
    known = {s.name for s in SCENARIOS}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise KeyError(f"unknown scenario {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    return tuple(s for s in SCENARIOS if s.name in wanted)


def _cells_for_error(
    major: int, scenario: str, sets: Sequence[OptionSet], checks: Sequence[Check], detail: str
) -> list[CellResult]:
    return [
        CellResult(major, scenario, opt.name, check.name, False, detail)
        for opt in sets
        for check in checks
    ]


def _run_check(check: Check, ctx: CheckContext) -> CheckResult:
    try:
        return check.run(ctx)
    except Exception as err:  # a crashing check is that cell's failure, not the run's
        return CheckResult(False, f"check crashed: {type(err).__name__}: {err}")


def run_version(
    server: provision.Server,
    scenarios: Sequence[Scenario] = SCENARIOS,
    subjects: Sequence[Subject] = SUBJECTS,
    checks: Sequence[Check] = CHECKS,
    timings: VersionTimings | None = None,
    progress: Callable[[str], object] | None = None,
) -> list[CellResult]:
    """Every scenario (that this version can run) × option set × check on ``server``.

    The first of ``subjects`` is the reference the others are compared with;
    ``progress`` is told each scenario as it starts.
    """
    if not subjects:
        raise ValueError("run_version needs at least one subject")
    timings = timings or VersionTimings(server.version)
    timings.server_version = server.full_version
    reference = subjects[0].name
    positions = {s.name: s.positions for s in subjects}
    sets = option_sets(server.version)
    cells: list[CellResult] = []
    runnable = [s for s in scenarios if s.min_version <= server.version]
    for number, scenario in enumerate(runnable, start=1):
        if progress is not None:
            progress(f"PostgreSQL {server.version}: {scenario.name} ({number}/{len(runnable)})")
        started = time.monotonic()
        spent_inside = 0.0
        try:
            with prepare_scenario(server, scenario, sets) as run:
                inside = time.monotonic()
                errors: dict[tuple[str, str], str] = {}
                for subject in ordered(subjects):
                    for opt in sets:
                        t0 = time.monotonic()
                        try:
                            run.streams[subject.name, opt.name] = subject.capture(run, opt)
                        except ScenarioError as err:
                            errors[subject.name, opt.name] = str(err)
                        timings.capture[subject.name] = (
                            timings.capture.get(subject.name, 0.0) + time.monotonic() - t0
                        )
                for opt in sets:
                    ctx = CheckContext(
                        major=server.version,
                        scenario=scenario,
                        options=opt,
                        reference=reference,
                        streams={
                            s.name: run.streams[s.name, opt.name]
                            for s in subjects
                            if (s.name, opt.name) in run.streams
                        },
                        errors={
                            s.name: errors[s.name, opt.name]
                            for s in subjects
                            if (s.name, opt.name) in errors
                        },
                        positions=positions,
                        tables=run.tables,
                        replies={
                            s.name: run.replies[s.name] for s in subjects if s.name in run.replies
                        },
                    )
                    for check in checks:
                        t0 = time.monotonic()
                        result = _run_check(check, ctx)
                        timings.checks[check.name] = (
                            timings.checks.get(check.name, 0.0) + time.monotonic() - t0
                        )
                        cells.append(
                            CellResult(
                                server.version,
                                scenario.name,
                                opt.name,
                                check.name,
                                result.ok,
                                result.detail,
                            )
                        )
                spent_inside = time.monotonic() - inside
        except ScenarioError as err:
            cells.extend(_cells_for_error(server.version, scenario.name, sets, checks, str(err)))
        # Setup, steps, reading the tables and cleanup; capture and checks are apart.
        timings.scenarios += time.monotonic() - started - spent_inside
    return cells


def run_matrix(
    versions: Sequence[int] = provision.MAJORS,
    dsns: Mapping[int, str] | None = None,
    scenarios: Sequence[Scenario] = SCENARIOS,
    subjects: Sequence[Subject] = SUBJECTS,
    checks: Sequence[Check] = CHECKS,
    progress: Callable[[str], object] | None = None,
) -> MatrixResult:
    """The whole matrix; a server per version from ``dsns``, else :func:`provision.provide`.

    A version whose server cannot be had fails every one of its cells with the reason.
    ``progress`` is told what is being done as each server and scenario starts.
    """
    result = MatrixResult()
    for major in versions:
        timings = VersionTimings(major)
        result.timings.append(timings)
        t0 = time.monotonic()
        dsn = (dsns or {}).get(major)
        if progress is not None:
            progress(f"PostgreSQL {major}: " + ("connecting" if dsn else "starting a server"))
        try:
            server = (
                provision.ExternalServer(dsn, expect_major=major)
                if dsn
                else provision.provide(major)
            )
        except provision.ProvisionError as err:
            timings.server = time.monotonic() - t0
            for scenario in scenarios:
                if scenario.min_version <= major:
                    result.cells.extend(
                        _cells_for_error(
                            major, scenario.name, option_sets(major), checks, f"server: {err}"
                        )
                    )
            continue
        timings.server = time.monotonic() - t0
        try:
            result.cells.extend(run_version(server, scenarios, subjects, checks, timings, progress))
        finally:
            t0 = time.monotonic()
            server.stop()
            timings.stop = time.monotonic() - t0
    return result


# --------------------------------------------------------------------------------------
# Output


def _summary(
    cells: Sequence[CellResult],
) -> dict[tuple[int, str, str], list[CellResult]]:
    grouped: dict[tuple[int, str, str], list[CellResult]] = {}
    for cell in cells:
        grouped.setdefault((cell.major, cell.scenario, cell.check), []).append(cell)
    return grouped


def render_text(result: MatrixResult, out: IO[str], unchecked: Sequence[int] = ()) -> None:
    """One table per version (scenario × check), the failures, and the timings;
    ``unchecked`` names the versions left out because their server was unreachable."""
    grouped = _summary(result.cells)
    for timing in result.timings:
        major = timing.major
        cells = [c for c in result.cells if c.major == major]
        scenarios = list(dict.fromkeys(c.scenario for c in cells))
        checks = list(dict.fromkeys(c.check for c in cells))
        sets = list(dict.fromkeys(c.option_set for c in cells))
        version = timing.server_version or str(major)
        out.write(
            f"PostgreSQL {version}: {len(scenarios)} scenarios × {len(sets)} option sets "
            f"({', '.join(sets)})\n"
        )
        width = max([len("scenario"), *(len(s) for s in scenarios)])
        out.write("  " + "scenario".ljust(width) + "  " + "  ".join(checks) + "\n")
        for scenario in scenarios:
            marks = []
            for check in checks:
                group = grouped.get((major, scenario, check), [])
                mark = OK_MARK if group and all(c.ok for c in group) else FAIL_MARK
                marks.append(mark.center(len(check)))
            out.write("  " + scenario.ljust(width) + "  " + "  ".join(marks) + "\n")
        # One line per scenario and reason: a scenario that could not run fails every
        # check for the same reason, and that reason is worth printing once.
        reasons: dict[tuple[str, str], list[CellResult]] = {}
        for cell in cells:
            if not cell.ok:
                reasons.setdefault((cell.scenario, cell.detail), []).append(cell)
        for (scenario, detail), bad in reasons.items():
            failed_checks = ",".join(dict.fromkeys(c.check for c in bad))
            failed_sets = ",".join(dict.fromkeys(c.option_set for c in bad))
            out.write(f"  {FAIL_MARK} {scenario} {failed_checks} [{failed_sets}]: {detail}\n")
        if not cells:
            out.write("  (no cells)\n")
    out.write(_timing_text(result.timings))
    total = len(result.cells)
    failed = len(result.failures)
    missing = ""
    if unchecked:
        majors = ", ".join(str(major) for major in unchecked)
        missing = f"; not checked (server unreachable): PostgreSQL {majors}"
    if result.ok:
        out.write(f"all {total} cells passed{missing}\n")
    else:
        out.write(f"{failed} of {total} cells failed{missing}\n")


def _timing_text(timings: Sequence[VersionTimings]) -> str:
    lines = ["time (s):"]
    for t in timings:
        capture = ", ".join(f"{name} {secs:.1f}" for name, secs in t.capture.items())
        checks = sum(t.checks.values())
        lines.append(
            f"  {t.major}: server {t.server:.1f}, scenarios {t.scenarios:.1f}, "
            f"capture {capture or '0.0'}, checks {checks:.1f}, stop {t.stop:.1f}, "
            f"total {t.total:.1f}"
        )
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------
# Command line


def _parse_versions(text: str) -> list[int]:
    out = []
    for part in text.replace(" ", ",").split(","):
        if not part:
            continue
        if not part.isdigit() or int(part) not in provision.PINNED:
            known = ",".join(str(m) for m in provision.MAJORS)
            raise CommandError(f"unsupported PostgreSQL major {part!r} (known: {known})")
        out.append(int(part))
    if not out:
        raise CommandError("--versions names no version")
    return out


def _parse_dsns(items: Sequence[str]) -> dict[int, str]:
    dsns: dict[int, str] = {}
    for item in items:
        major, sep, dsn = item.partition("=")
        if not sep or not major.strip().isdigit() or not dsn:
            example = f"{docker.SERVICES[0].major}={docker.SERVICES[0].dsn}"
            raise CommandError(f"--dsn {item!r}: expected MAJOR=DSN, e.g. {example}")
        dsns[int(major)] = dsn
    return dsns


def add_command(commands: Any) -> None:
    """Register ``pgwire-mock conformance`` (through the pgwire_mock.commands entry point)."""
    docker_dsns = " ".join(s.cli_option for s in docker.SERVICES)
    parser = commands.add_parser(
        "conformance",
        help="run the conformance matrix against real PostgreSQL 14-18",
        description="Run every scenario on real PostgreSQL under each option set, capture "
        "it through the SQL interface and through the walsender, and check that every "
        "message round-trips, that both paths deliver the same messages, that the "
        "replayed tables equal the server's, and that each scenario's declared message "
        "types appear. Servers are started here (conformance.provision) unless given "
        "with --dsn or PGWIRE_MOCK_DSN_<major>.",
        epilog="Against the containers of docker/compose.yaml: pgwire-mock conformance "
        + docker_dsns,
    )
    parser.add_argument(
        "--versions",
        help="comma-separated majors (default: the majors given with --dsn, else "
        + ",".join(str(m) for m in provision.MAJORS)
        + ")",
    )
    parser.add_argument(
        "--dsn",
        action="append",
        default=[],
        metavar="MAJOR=DSN",
        help="use this server for MAJOR instead of starting one (repeatable)",
    )
    parser.add_argument("--scenarios", help="comma-separated scenario names (default: all)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.set_defaults(run=_run_conformance)


class Progress:
    """One status line on ``stream`` when it is a terminal, rewritten in place as the
    matrix goes (a run takes 20 s or more and prints its tables only at the end);
    nothing at all when it is not, so logs and pipes get the results only."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream if stream.isatty() else None
        self.shown = False

    def __call__(self, text: str) -> None:
        if self.stream is not None:
            self.stream.write(f"\r\x1b[Kconformance: {text}…")
            self.stream.flush()
            self.shown = True

    def clear(self) -> None:
        if self.stream is not None and self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False


def spark_side_missing() -> str | None:
    """Why the spark-values check cannot run here (the ``spark`` extra is not installed),
    or None when it can."""
    try:
        from conformance import spark_check  # noqa: F401, PLC0415 - optional: the spark extra
        from pgwire_mock import spark  # noqa: F401, PLC0415 - as above
    except ImportError as err:
        return str(err)
    return None


def _run_conformance(args: argparse.Namespace) -> int:
    dsns = _parse_dsns(args.dsn)
    if args.versions:
        versions = _parse_versions(args.versions)
    elif dsns:
        versions = sorted(dsns)
    else:
        versions = list(provision.MAJORS)
    stray = sorted(set(dsns) - set(versions))
    if stray:
        raise CommandError(f"--dsn given for {stray[0]}, which --versions leaves out")
    try:
        scenarios = select_scenarios(args.scenarios.split(",") if args.scenarios else None)
    except KeyError as err:
        raise CommandError(str(err.args[0])) from None
    checks: Sequence[Check] = CHECKS
    missing = spark_side_missing()
    if missing is not None:
        # Every other check needs only the base install; one missing extra should not
        # fail every cell of one column.
        checks = tuple(c for c in CHECKS if c.name != SparkTables.name)
        print(
            f"pgwire-mock conformance: skipping the {SparkTables.name} check, which needs "
            f"the spark extra (pip install -e '.[spark]' in a checkout): {missing}",
            file=sys.stderr,
        )
    progress = Progress(sys.stderr)
    try:
        result = run_matrix(versions, dsns, scenarios, checks=checks, progress=progress)
    finally:
        progress.clear()
    gone = unreachable(result)
    if gone and all(c.major in gone for c in result.cells):
        # No version had a server: no matrix to show, only why (one line).
        (major, reason), *others = gone.items()
        more = f" (and {len(others)} more versions)" if others else ""
        raise CommandError(f"PostgreSQL {major}: {reason}{more}")
    if args.json:
        json.dump(result.to_json(), sys.stdout, ensure_ascii=False, indent=1)
        sys.stdout.write("\n")
    else:
        # The versions that ran get their tables; the others one line each below.
        render_text(
            MatrixResult(
                [c for c in result.cells if c.major not in gone],
                [t for t in result.timings if t.major not in gone],
            ),
            sys.stdout,
            unchecked=list(gone),
        )
    sys.stdout.flush()
    for major, reason in gone.items():
        print(
            f"pgwire-mock conformance: PostgreSQL {major} not checked, its server is "
            f"unreachable: {reason}",
            file=sys.stderr,
        )
    return 0 if result.ok else 1


def unreachable(result: MatrixResult) -> dict[int, str]:
    """The versions whose server could not be had (every cell failed for that), with
    the reason on one line."""
    reasons: dict[int, str] = {}
    for major in dict.fromkeys(c.major for c in result.cells):
        cells = [c for c in result.cells if c.major == major]
        if all(c.detail.startswith("server: ") for c in cells):
            reasons[major] = " ".join(cells[0].detail.removeprefix("server: ").split())
    return reasons
