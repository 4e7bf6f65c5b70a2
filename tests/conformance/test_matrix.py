"""The conformance matrix against real PostgreSQL 14–17 (the ``pg_server`` fixture).

The first test is the CI proof: every scenario × option set × check passes on every
version, through the SQL interface and through the walsender. The others show that the
pipeline can fail (a subject that drops a message is caught) and that the command line
reports and exits as documented.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from conformance.checks import CHECKS
from conformance.matrix import MatrixResult, render_text, run_matrix, run_version
from conformance.provision import Server
from conformance.scenarios import SCENARIOS, OptionSet, option_sets
from conformance.subjects import SUBJECTS, ScenarioRun, SqlInterface, Stream
from pgwire_mock import cli


def test_every_cell_of_the_matrix_passes(pg_server: Server) -> None:
    """Every scenario, under every option set the version supports, passes every check."""
    cells = run_version(pg_server)
    failures = [f"{c.scenario} {c.option_set} {c.check}: {c.detail}" for c in cells if not c.ok]
    assert not failures, "\n".join(failures)
    # Nothing silently left out: one cell per scenario, option set and check.
    runnable = [s for s in SCENARIOS if s.min_version <= pg_server.version]
    assert len(cells) == len(runnable) * len(option_sets(pg_server.version)) * len(CHECKS)
    assert {c.check for c in cells} == {c.name for c in CHECKS}


@dataclass
class DroppingSubject:
    """The SQL interface, minus the second Insert of each stream: a broken implementation."""

    name: str = "dropping"
    consumes_slot: bool = False
    positions: str = "same"

    def capture(self, run: ScenarioRun, options: OptionSet) -> Stream:
        stream = SqlInterface().capture(run, options)
        inserts = [i for i, m in enumerate(stream) if m.tag == "I"]
        return stream[: inserts[1]] + stream[inserts[1] + 1 :]


def test_a_subject_that_drops_a_message_fails_its_cells(pg_server: Server) -> None:
    types = [s for s in SCENARIOS if s.name == "types"]
    cells = run_version(pg_server, types, (*SUBJECTS, DroppingSubject()))
    failed = {c.check for c in cells if not c.ok}
    assert failed == {"same-messages", "values"}
    detail = next(c.detail for c in cells if c.check == "same-messages")
    assert detail.startswith("dropping: message 3: 'C' Commit where sql has 'I' Insert")


def test_the_command_prints_the_matrix_and_exits_zero(
    pg_server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    status = cli.main(
        ["conformance", "--dsn", f"{pg_server.version}={pg_server.dsn}", "--scenarios", "toast"]
    )
    out = capsys.readouterr().out
    assert status == 0, out
    assert f"PostgreSQL {pg_server.full_version}: 1 scenarios" in out
    assert "toast" in out and "✗" not in out
    assert out.rstrip().endswith("cells passed")


def test_the_command_writes_json(pg_server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    status = cli.main(
        [
            "conformance",
            "--json",
            "--dsn",
            f"{pg_server.version}={pg_server.dsn}",
            "--scenarios",
            "messages",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert status == 0
    assert data["ok"] is True
    assert {c["scenario"] for c in data["cells"]} == {"messages"}
    assert data["timings"][0]["major"] == pg_server.version


def test_an_unreachable_server_fails_every_cell_with_its_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = cli.main(
        [
            "conformance",
            "--dsn",
            "16=postgresql://postgres@127.0.0.1:1/postgres",
            "--scenarios",
            "types",
        ]
    )
    out = capsys.readouterr().out
    assert status == 1
    assert "✗ types capture,roundtrip,same-messages,values,declared-types" in out
    assert "server: cannot connect" in out
    assert out.rstrip().endswith("25 of 25 cells failed")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--scenarios", "nope"], "unknown scenario nope"),
        (["--versions", "13"], "unsupported PostgreSQL major '13'"),
        (["--dsn", "sixteen"], "expected MAJOR=DSN"),
        (["--versions", "14", "--dsn", "16=postgresql://x/"], "--dsn given for 16"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_one(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["conformance", *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("pgwire-mock conformance: ") and message in err
    assert err.count("\n") == 1


def test_the_text_output_lists_each_failure_once_per_reason() -> None:
    from io import StringIO

    from conformance.matrix import CellResult, VersionTimings

    result = MatrixResult(
        [
            CellResult(16, "types", "v1", "capture", True),
            CellResult(16, "types", "v1", "values", False, "walsender: bad"),
            CellResult(16, "types", "v1-binary", "values", False, "walsender: bad"),
        ],
        [VersionTimings(16, "16.14", server=1.0)],
    )
    out = StringIO()
    render_text(result, out)
    text = out.getvalue()
    assert "  ✗ types values [v1,v1-binary]: walsender: bad\n" in text
    assert text.endswith("2 of 3 cells failed\n")
    assert not result.ok
    assert not run_matrix([], {}).ok  # an empty matrix proves nothing
