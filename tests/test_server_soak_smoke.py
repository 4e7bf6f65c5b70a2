"""benchmarks/server_soak.py at a tiny scale: it runs every scenario and fails when the
server does not hold (issue #14)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import provision

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "server_soak.py"
SCENARIOS = (
    "garbage",
    "oversized",
    "preauth",
    "slowloris",
    "concurrent",
    "stalled",
    "disconnect",
    "ack-storm",
    "kill-9",
)
# A tiny stream makes timing ratios noise: the ack-storm ratio is not held to a bound here.
TINY = ["--no-peer", "--scale", "0.01", "--changes", "300", "--stall", "0.5"]
TINY += ["--ack-ratio-limit", "1000"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("pg_recvlogical") is None and not provision.in_ci(),
        reason="needs pg_recvlogical (postgresql-client)",
    ),
]


def _soak(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *TINY, *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def _rows(output: str) -> dict[str, str]:
    """Scenario name -> its PASS/FAIL, from the table's rows."""
    rows = {}
    for line in output.splitlines():
        words = line.split()
        if words and words[0] in SCENARIOS:
            rows[words[0]] = words[-1]
    return rows


def test_every_scenario_runs_and_passes_against_the_fake() -> None:
    """At a tiny scale the soak prints one row per scenario, each PASS, and exits 0."""
    done = _soak("--auth-timeout", "0.5")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _rows(done.stdout) == dict.fromkeys(SCENARIOS, "PASS"), done.stdout


def test_a_server_that_keeps_slowloris_connections_fails_the_run() -> None:
    """With an authentication timeout longer than the soak waits, the half-sent startups
    stay open: the slowloris row says FAIL and the exit status is 1."""
    done = _soak("--only", "slowloris", "--auth-timeout", "60", "--expect", "0.5")
    assert done.returncode == 1, done.stdout + done.stderr
    assert _rows(done.stdout) == {"slowloris": "FAIL"}, done.stdout
    assert "not closed x1" in done.stdout
