"""A script's fault steps are checked at load time by the same rules as ``--fault``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pgwire_mock.script import ScriptError, loads_script
from pgwire_mock.server.faults import Fault, FaultError

BASE = """
format_version: 1
server: {pg_version: 16}
publications: [{name: pub, tables: [public.t]}]
tables:
  - name: public.t
    columns: [id int4 key]
steps:
  - transaction:
      - insert: public.t
        values: {id: 1}
"""

# (script step, the same fault on the command line)
BAD = [
    ("  - fault: close_after\n", "close_after"),
    ("  - fault: close_after\n    messages: -1\n", "close_after:messages=-1"),
    ("  - fault: close_after\n    messages: 1\n    bytes: 2\n", "close_after:messages=1,bytes=2"),
    ("  - fault: slow\n    rate: 0\n", "slow:rate=0"),
    ("  - fault: pause\n", "pause"),
    ("  - fault: pause\n    seconds: soon\n", "pause:seconds=soon"),
    ("  - fault: error\n    sqlstate: oops\n", "error:sqlstate=oops"),
    ("  - fault: error\n    severity: warning\n", "error:severity=warning"),
    ("  - fault: redeliver\n    lsn: 12\n    wait: maybe\n", "redeliver:lsn=0/C,wait=maybe"),
    ("  - fault: shutdown\n    bogus: 1\n", "shutdown:bogus=1"),
    ("  - fault: explode\n", "explode"),
]


@pytest.mark.parametrize(("step", "command_line"), BAD)
def test_a_bad_fault_step_fails_at_load_with_the_command_lines_reason(
    step: str, command_line: str
) -> None:
    """A fault step that ``--fault`` would refuse is refused when the script loads, with
    the same reason, instead of failing mid-stream."""
    with pytest.raises(FaultError) as refused:
        Fault.parse(command_line)
    with pytest.raises(ScriptError) as info:
        loads_script(BASE + step, source="script.yaml")
    assert str(info.value) == f"script.yaml: steps[1]: {refused.value}"


def test_good_fault_steps_load() -> None:
    """Every parameter form the command line takes loads from a script too."""
    script = loads_script(
        BASE
        + "  - fault: close_after\n    bytes: 10\n"
        + "  - fault: slow\n    rate: 2kb\n"
        + "  - fault: error\n    sqlstate: 57P01\n"
        + "  - fault: redeliver\n    lsn: 0/1500000\n",
        source="script.yaml",
    )
    assert len(script.steps) == 5


def test_serve_refuses_a_script_with_a_bad_fault_at_start(tmp_path: Path) -> None:
    """``serve`` exits 1 with one line at start, as it does for a bad ``--fault``."""
    path = tmp_path / "bad.yaml"
    path.write_text(BASE + "  - fault: slow\n    rate: -5\n")
    result = subprocess.run(
        [sys.executable, "-m", "pgwire_mock.cli", "serve", "--script", str(path), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"pgwire-mock serve: {path}: steps[1]: slow needs rate=BYTES_PER_SECOND > 0"
    ]
