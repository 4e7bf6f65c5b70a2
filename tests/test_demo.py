"""The README's first command works: a real client reads the demo stream from the fake."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ALL_KINDS = 19
# Protocol 2 on 14 has no two-phase messages (b, P, K, r, p).
EXPECTED = {14: ALL_KINDS - 5, 15: ALL_KINDS, 16: ALL_KINDS, 17: ALL_KINDS}


@pytest.mark.parametrize("pg_version", sorted(EXPECTED))
def test_psycopg2_reads_every_message_kind_from_the_fake(pg_version: int) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "read_demo.py"), "--pg-version", str(pg_version)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    summary = result.stdout.splitlines()[-1]
    assert f"read {EXPECTED[pg_version]} kinds of pgoutput message" in summary, summary
    assert "START_REPLICATION" in result.stderr  # the server logged the client's command
    assert "Traceback" not in result.stderr
    messages = result.stdout.splitlines()[:-1]
    assert messages
    for line in messages:  # positions as PostgreSQL writes them, not integers
        assert re.fullmatch(r" *[0-9A-F]+/[0-9A-F]+ \S.*", line), line


@pytest.mark.slow
def test_scripts_demo_sets_up_only_what_the_demo_needs(tmp_path: Path) -> None:
    """scripts/demo on a machine with no virtualenv yet: it creates one with pgwire-mock
    and psycopg2 only (not the test toolchain: no pytest, Spark, Java, Go or Node), runs
    the demo, and the second run installs nothing."""
    venv = tmp_path / "venv"
    env = {**os.environ, "PGWIRE_MOCK_VENV": str(venv)}
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = os.pathsep.join(
        p for p in env["PATH"].split(os.pathsep) if not p.startswith(str(ROOT / ".venv"))
    )
    runs = [
        subprocess.run(
            [str(ROOT / "scripts" / "demo")],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr
        assert "read 19 kinds of pgoutput message" in run.stdout.splitlines()[-1]
    assert "demo: installing pgwire-mock and psycopg2-binary" in runs[0].stderr
    assert "demo: installing" not in runs[1].stderr
    for step in ("setup:", "install-clients:", "java:", "go:", "node:"):
        assert step not in runs[0].stderr
    installed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.lower()
    assert "psycopg2-binary==" in installed and "pgwire-mock==" in installed
    for heavy in ("pytest", "pyspark", "pyarrow", "hypothesis", "mypy", "ruff"):
        assert f"\n{heavy}==" not in f"\n{installed}", heavy
