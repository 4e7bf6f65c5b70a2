"""``pgwire-mock serve``: help, and one clear line for bad input."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pgwire_mock.cli import main


def test_help_explains_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for option in (
        "--listen",
        "--pg-version",
        "--script",
        "--user",
        "--auth",
        "--tls-cert",
        "--wal-sender-timeout",
        "--state-file",
        "pg_recvlogical",
    ):
        assert option in out


def test_bad_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--pg-version", "13"])
    assert exit_info.value.code == 2
    assert "--pg-version" in capsys.readouterr().err


def test_bad_script_is_one_line_and_status_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"lsn": "nope", "data": "zz"}\n')
    assert main(["serve", "--script", str(bad)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pgwire-mock serve: ")


def test_missing_script_and_auth_without_users(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--script", str(tmp_path / "missing.jsonl")]) == 1
    assert "cannot read" in capsys.readouterr().err
    assert main(["serve", "--auth", "md5"]) == 1
    assert "--user" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["in use", "bad host"])
def test_serve_exits_with_one_line_when_it_cannot_listen(where: str) -> None:
    """Issue #14 item 7: a failed listen used to leave serve running with no listener."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    args = (
        ["--port", str(taken.getsockname()[1])]
        if where == "in use"
        else ["--host", "256.1.1.1", "--port", "5999"]
    )
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pgwire_mock.serve", *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    finally:
        taken.close()
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pgwire-mock serve: cannot listen on"), lines
