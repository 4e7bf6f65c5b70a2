"""The README's first command works: a real client reads the demo stream from the fake."""

from __future__ import annotations

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
