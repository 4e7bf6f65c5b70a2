"""Golden pgoutput bytes from real PostgreSQL, captured through the SQL interface.

For each server version and each scenario of :mod:`conformance.scenarios`: run the
scenario's setup, create the publication and temporary logical slots (one plain, and on
15+ one created with ``two_phase``), run the steps, then decode the same WAL once per
option set with ``pg_logical_slot_peek_binary_changes`` (peek leaves the slot where it
is, so every option set sees the same transactions). Each row is one pgoutput message.

Output, one JSON Lines file per scenario and option set::

    <out>/pg<major>/<scenario>.<option set>.jsonl
    {"meta": {"server_version": "17.10", "major": 17, "scenario": "types", ...}}
    {"lsn": "0/16B3748", "xid": 735, "data": "42000000000..."}

Run ``python -m conformance.capture --out tests/data/golden [--versions 14,15,16,17]``.
Servers are provisioned (or taken from ``PGWIRE_MOCK_DSN_<major>``) by
:mod:`conformance.provision`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import psycopg

from conformance import provision
from conformance.scenarios import EXPECTED_TAGS, SCENARIOS, OptionSet, Scenario, option_sets
from pgwire_mock import cli as pgwire_cli
from pgwire_mock.cli_common import CommandError, one_line

__all__ = [
    "CaptureError",
    "GoldenFile",
    "GoldenMessage",
    "capture_corpus",
    "capture_server",
    "load",
    "main",
    "tags_by_major",
]

_SLOT: Final = "pgwm_capture"
_SLOT_2PC: Final = "pgwm_capture_2pc"


class CaptureError(Exception):
    """A scenario failed, or the captured messages miss a message type they must have."""


@dataclass(frozen=True, slots=True)
class GoldenMessage:
    """One pgoutput message as the server produced it."""

    lsn: str
    xid: int
    data: bytes

    @property
    def tag(self) -> str:
        return chr(self.data[0]) if self.data else ""


@dataclass(frozen=True, slots=True)
class GoldenFile:
    """A corpus file: its ``meta`` header and its messages in order."""

    path: Path
    meta: Mapping[str, Any]
    messages: tuple[GoldenMessage, ...]

    @property
    def major(self) -> int:
        return int(self.meta["major"])


def load(path: Path) -> GoldenFile:
    """Read one corpus file written by :func:`capture_server`."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines:
        raise CaptureError(f"{path}: empty file")
    head = json.loads(lines[0])
    if not isinstance(head, dict) or "meta" not in head:
        raise CaptureError(f"{path}: first line is not a meta header")
    messages = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            row = json.loads(line)
            messages.append(GoldenMessage(row["lsn"], int(row["xid"]), bytes.fromhex(row["data"])))
        except (ValueError, KeyError, TypeError) as err:
            raise CaptureError(f"{path}:{number}: bad message line: {err}") from err
    return GoldenFile(path, head["meta"], tuple(messages))


def tags_by_major(files: Iterable[GoldenFile]) -> dict[int, set[str]]:
    """The message types (first byte of each message) seen per major version."""
    seen: dict[int, set[str]] = {}
    for f in files:
        seen.setdefault(f.major, set()).update(m.tag for m in f.messages)
    return seen


# --------------------------------------------------------------------------------------


def _run(conn: psycopg.Connection[tuple[object, ...]], sql: str, where: str) -> None:
    try:
        # No parameters: psycopg sends a simple Query, so one step may hold many statements.
        conn.execute(sql.encode())
    except psycopg.Error as err:
        raise CaptureError(f"{where}: {one_line(err)}\n  SQL: {sql[:300]}") from err


def _cleanup(server: provision.Server, scenario: Scenario) -> None:
    """Remove what an earlier, interrupted run may have left (matters for user servers)."""
    with server.connect() as conn:
        for (gid,) in conn.execute(
            "SELECT gid FROM pg_prepared_xacts "
            "WHERE gid LIKE 'pgwm\\_%' AND database = current_database()"
        ).fetchall():
            _run(conn, f"ROLLBACK PREPARED '{gid}'", "cleanup")
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name LIKE 'pgwm\\_capture%' AND NOT active"
        )
        _run(conn, f"DROP PUBLICATION IF EXISTS {scenario.publication}", "cleanup")
        for sql in scenario.teardown:
            _run(conn, sql, f"{scenario.name} teardown")


def _peek(
    conn: psycopg.Connection[tuple[object, ...]], slot: str, options: Mapping[str, str]
) -> list[GoldenMessage]:
    flat = [item for pair in options.items() for item in pair]
    rows = conn.execute(
        "SELECT lsn::text, xid::text::bigint, data "
        "FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, VARIADIC %s::text[])",
        (slot, flat),
    ).fetchall()
    messages = []
    for lsn, xid, data in rows:
        if not isinstance(data, bytes):
            raise CaptureError(f"decoding returned {type(data).__name__}, not bytes")
        messages.append(GoldenMessage(str(lsn), int(str(xid)), data))
    return messages


def _write(path: Path, meta: Mapping[str, Any], messages: Sequence[GoldenMessage]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        f.write(json.dumps({"meta": meta}, ensure_ascii=False) + "\n")
        for m in messages:
            f.write(json.dumps({"lsn": m.lsn, "xid": m.xid, "data": m.data.hex()}) + "\n")


def capture_scenario(
    server: provision.Server,
    scenario: Scenario,
    out_dir: Path,
    sets: Sequence[OptionSet] | None = None,
) -> list[Path]:
    """Run one scenario on ``server`` and write one file per option set."""
    sets = option_sets(server.version) if sets is None else sets
    _cleanup(server, scenario)
    paths: list[Path] = []
    seen: set[str] = set()
    try:
        with server.connect() as conn:
            where = f"PostgreSQL {server.version} {scenario.name}"
            for sql in scenario.setup:
                _run(conn, sql, f"{where} setup")
            _run(
                conn,
                scenario.create_publication(),
                f"{where} publication",
            )
            # Temporary slots vanish with this connection, even if we crash.
            _run(
                conn,
                f"SELECT pg_create_logical_replication_slot('{_SLOT}', 'pgoutput', true)",
                where,
            )
            if any(s.two_phase for s in sets):
                _run(
                    conn,
                    f"SELECT pg_create_logical_replication_slot("
                    f"'{_SLOT_2PC}', 'pgoutput', true, true)",
                    where,
                )
            for number, sql in enumerate(scenario.steps, start=1):
                _run(conn, sql, f"{where} step {number}")
            # Peeking decodes only flushed WAL, and an abort (or a non-transactional
            # message) is not flushed at once: without this the tail of a scenario
            # would depend on the WAL writer's timing.
            _run(conn, "CHECKPOINT", f"{where} flush")
            for opt in sets:
                options = opt.options(scenario.publication)
                try:
                    messages = _peek(conn, _SLOT_2PC if opt.two_phase else _SLOT, options)
                except psycopg.Error as err:
                    raise CaptureError(
                        f"{where} {opt.name}: decoding failed: {one_line(err)}"
                    ) from err
                seen.update(m.tag for m in messages)
                meta = {
                    "server_version": server.full_version,
                    "major": server.version,
                    "scenario": scenario.name,
                    "option_set": opt.name,
                    "options": options,
                    "slot_two_phase": opt.two_phase,
                    "description": scenario.description,
                }
                path = out_dir / f"pg{server.version}" / f"{scenario.name}.{opt.name}.jsonl"
                _write(path, meta, messages)
                paths.append(path)
    finally:
        with contextlib.suppress(psycopg.Error, CaptureError):
            _cleanup(server, scenario)
    missing = scenario.emits - seen
    if missing:
        raise CaptureError(
            f"PostgreSQL {server.version} {scenario.name}: no {''.join(sorted(missing))} "
            f"messages were decoded (saw {''.join(sorted(seen))})"
        )
    return paths


def capture_server(server: provision.Server, out_dir: Path) -> list[Path]:
    """Capture every scenario on one server into ``out_dir/pg<major>/`` (replacing it)."""
    version_dir = out_dir / f"pg{server.version}"
    if version_dir.is_dir():
        for stale in version_dir.glob("*.jsonl"):
            stale.unlink()
    paths: list[Path] = []
    for scenario in SCENARIOS:
        if scenario.min_version <= server.version:
            paths.extend(capture_scenario(server, scenario, out_dir))
    seen = tags_by_major(load(p) for p in paths).get(server.version, set())
    missing = EXPECTED_TAGS.get(server.version, frozenset()) - seen
    if missing:
        raise CaptureError(
            f"PostgreSQL {server.version}: corpus lacks message types {''.join(sorted(missing))}"
        )
    return paths


def capture_corpus(out_dir: Path, versions: Sequence[int] = provision.MAJORS) -> list[Path]:
    """Capture the golden corpus for ``versions`` into ``out_dir``; return the files written.

    Starts a server per version (one at a time) unless ``PGWIRE_MOCK_DSN_<major>`` names
    one, and stops what it started.
    """
    paths: list[Path] = []
    for major in versions:
        with provision.provide(major) as server:
            paths.extend(capture_server(server, out_dir))
    return paths


def add_command(commands: Any) -> None:
    """Register ``pgwire-mock capture`` (called through the pgwire_mock.commands entry point)."""
    parser = commands.add_parser(
        "capture",
        help="capture a golden pgoutput corpus from real PostgreSQL 14-18",
        description="Run every scenario on real PostgreSQL (started here, or named by "
        "PGWIRE_MOCK_DSN_<major>) under each option set and write the pgoutput messages "
        "as JSON Lines, one file per version, scenario and option set.",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("tests/data/golden"), help="corpus directory"
    )
    parser.add_argument(
        "--versions",
        default=",".join(str(m) for m in provision.MAJORS),
        help="comma-separated majors (default: %(default)s)",
    )
    parser.set_defaults(run=_run_capture)


def _run_capture(args: argparse.Namespace) -> int:
    try:
        versions = _parse_versions(args.versions)
    except provision.ProvisionError as err:
        raise CommandError(str(err)) from None
    try:  # before any server starts: a bad --out is found in a second, not a minute
        args.out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise CommandError(f"--out {args.out}: not a directory") from None
    except OSError as err:
        raise CommandError(f"--out {args.out}: {err.strerror}") from None
    try:
        paths = capture_corpus(args.out, versions)
    except (provision.ProvisionError, CaptureError) as err:
        raise CommandError(str(err)) from None
    except OSError as err:
        raise CommandError(f"cannot write {err.filename or args.out}: {err.strerror}") from None
    for major, tags in sorted(tags_by_major(load(p) for p in paths).items()):
        count = sum(1 for p in paths if p.parent.name == f"pg{major}")
        print(f"PostgreSQL {major}: {count} files, message types {''.join(sorted(tags))}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return pgwire_cli.main(["capture", *(sys.argv[1:] if argv is None else argv)])


def _parse_versions(text: str) -> list[int]:
    out = []
    for part in text.replace(" ", ",").split(","):
        if not part:
            continue
        if not part.isdigit() or int(part) not in provision.PINNED:
            raise provision.ProvisionError(f"unsupported PostgreSQL major {part!r}")
        out.append(int(part))
    return out


if __name__ == "__main__":
    sys.exit(main())
