"""Every command-line failure is one readable line on stderr and a non-zero exit, and none
hangs: each subcommand given missing files, directories for files, bad ports, bad values
and bad paths (issue #14). Usage errors exit 2, failures found while running exit 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pgwire_mock.cli import main

ROOT = Path(__file__).resolve().parents[2]
SPEC = str(ROOT / "examples" / "synth-spec.yaml")
NOWHERE = "postgresql://u@127.0.0.1:1/x"  # nothing listens on port 1
RECORD = ["record", "--dsn", NOWHERE, "--slot", "s", "--publication", "p"]
SYNTH = ["synth", "--spec", SPEC, "--seed", "1", "--changes", "10"]

CASES: list[tuple[str, list[str], int, str]] = [
    ("no command", [], 2, "pgwire-mock: the following arguments are required: COMMAND"),
    ("unknown command", ["nosuch"], 2, "invalid choice: 'nosuch'"),
    ("decode: no file", ["decode"], 2, "required: FILE"),
    ("decode: missing", ["decode", "missing.jsonl"], 1, "cannot read missing.jsonl: No such"),
    ("decode: directory", ["decode", "adir"], 1, "cannot read adir: Is a directory"),
    ("decode: garbage", ["decode", "bad.bin"], 1, "bad.bin: near byte 0"),
    ("decode: bad json", ["decode", "empty.json"], 1, "empty.json, line 1: expected"),
    ("decode: nested too deeply", ["decode", "deep.jsonl"], 1, "nested too deeply"),
    ("serve: a script nested too deeply", ["serve", "--script", "deep.yaml"], 1, "too deeply"),
    ("serve: JSON nested too deeply", ["serve", "--script", "deep.json"], 1, "too deeply"),
    ("serve: a state file nested too deeply", ["serve", "--state-file", "deep.json"], 1, "deeply"),
    ("serve: answers nested too deeply", ["serve", "--sql-answers", "deep.json"], 1, "deeply"),
    (
        "synth: a spec nested too deeply",
        [*SYNTH[:1], "--spec", "deep.yaml", *SYNTH[3:], "--out", "o"],
        1,
        "deeply",
    ),
    ("serve: port too big", ["serve", "--port", "99999"], 2, "a TCP port is 0-65535"),
    ("serve: negative port", ["serve", "--port", "-1"], 2, "a TCP port is 0-65535"),
    ("serve: port not a number", ["serve", "--port", "abc"], 2, "expected a TCP port number"),
    (
        "serve: unknown host",
        ["serve", "--host", "nosuch.invalid", "--port", "0"],
        1,
        "cannot listen on tcp:0:interface=nosuch.invalid",
    ),
    ("serve: missing script", ["serve", "--script", "missing.yaml"], 1, "cannot read"),
    ("serve: script directory", ["serve", "--script", "adir"], 1, "Is a directory"),
    ("serve: bad yaml", ["serve", "--script", "bad.yaml"], 1, "bad.yaml: expected a mapping"),
    ("serve: bad recording", ["serve", "--script", "bad.bin"], 1, "bad.bin: near byte 0"),
    (
        "serve: missing sql answers",
        ["serve", "--sql-answers", "missing.json"],
        1,
        "cannot read --sql-answers missing.json: No such file or directory",
    ),
    (
        "serve: state file directory",
        ["serve", "--state-file", "adir"],
        1,
        "--state-file adir: is a directory",
    ),
    (
        "serve: state file in no folder",
        ["serve", "--state-file", "nodir/s.json"],
        1,
        "directory nodir does not exist",
    ),
    (
        "serve: tls directories",
        ["serve", "--tls-cert", "adir", "--tls-key", "adir"],
        1,
        "cannot read adir",
    ),
    (
        "serve: tls garbage",
        ["serve", "--tls-cert", "bad.bin", "--tls-key", "bad.bin"],
        1,
        "cannot use the TLS certificate/key",
    ),
    ("serve: bad endpoint", ["serve", "--listen", "nonsense:foo"], 2, "bad endpoint"),
    ("serve: bad control", ["serve", "--control", "nonsense:foo"], 2, "bad endpoint"),
    (
        "serve: control port too big",
        ["serve", "--port", "0", "--control", "tcp:99999"],
        1,
        "cannot listen on tcp:99999 for --control: bind(): port must be 0-65535",
    ),
    ("serve: max connections", ["serve", "--max-connections", "0"], 2, "must be at least 1"),
    ("serve: max wal senders", ["serve", "--max-wal-senders", "-1"], 2, "must be at least 0"),
    ("serve: negative timeout", ["serve", "--wal-sender-timeout", "-3"], 2, "not be negative"),
    ("serve: bad timeout", ["serve", "--authentication-timeout", "x"], 2, "expected seconds"),
    ("serve: unknown fault", ["serve", "--fault", "nosuch"], 2, "unknown fault 'nosuch'"),
    ("serve: bad slot", ["serve", "--slot", "s@zz"], 2, "bad LSN 'zz'"),
    (
        "serve: a slot name PostgreSQL refuses",
        ["serve", "--slot", "my-slot"],
        2,
        'replication slot name "my-slot" contains invalid character',
    ),
    ("serve: a slot name too long", ["serve", "--slot", "s" * 64], 2, "is too long"),
    (
        "serve: seconds that are not a number",
        ["serve", "--snapshot-interval", "nan"],
        2,
        "expected a finite number of seconds, got 'nan'",
    ),
    (
        "serve: endless seconds",
        ["serve", "--wal-sender-timeout", "inf"],
        2,
        "expected a finite number of seconds, got 'inf'",
    ),
    ("serve: empty user", ["serve", "--user", ":pw"], 2, "expected NAME[:PASSWORD]"),
    ("serve: unknown version", ["serve", "--pg-version", "99"], 2, "invalid choice: 99"),
    ("cert: out is a file", ["cert", "--out", "bad.bin"], 1, "cannot write to bad.bin"),
    ("cert: negative days", ["cert", "--days", "-5", "--out", "certs"], 2, "at least 1"),
    ("record: no server", [*RECORD, "--out", "o.jsonl"], 1, "cannot connect to 127.0.0.1:1"),
    (
        "record: bad dsn",
        ["record", "--dsn", "nonsense", "--slot", "s", "--publication", "p", "--out", "o.jsonl"],
        1,
        'missing "=" after "nonsense"',
    ),
    ("record: out in no folder", [*RECORD, "--out", "nodir/o.jsonl"], 1, "does not exist"),
    ("record: out directory", [*RECORD, "--out", "adir"], 1, "--out adir: is a directory"),
    ("record: bad start", [*RECORD, "--out", "o", "--start", "zz"], 2, "--start: expected an LSN"),
    ("record: bad endpos", [*RECORD, "--out", "o", "--endpos", "1"], 2, "expected an LSN"),
    ("record: bad idle", [*RECORD, "--out", "o", "--idle", "-1"], 2, "expected seconds > 0"),
    ("capture: bad version", ["capture", "--versions", "99"], 1, "unsupported PostgreSQL major"),
    ("capture: out is a file", ["capture", "--out", "bad.bin"], 1, "--out bad.bin: not a dir"),
    ("capture: out nowhere", ["capture", "--out", "/proc/x/y"], 1, "--out /proc/x/y: No such"),
    ("conformance: bad version", ["conformance", "--versions", "9"], 1, "unsupported"),
    ("conformance: bad dsn", ["conformance", "--dsn", "bad"], 1, "expected MAJOR=DSN"),
    ("conformance: scenario", ["conformance", "--scenarios", "nosuch"], 1, "unknown scenario"),
    (
        "conformance: no server",
        ["conformance", "--dsn", f"17={NOWHERE}", "--scenarios", "types"],
        1,
        "PostgreSQL 17: cannot connect to",
    ),
    (
        "synth: missing spec",
        ["synth", "--spec", "missing.yaml", "--seed", "1", "--changes", "1", "--out", "o"],
        1,
        "missing.yaml: cannot read: No such file",
    ),
    (
        "synth: spec directory",
        ["synth", "--spec", "adir", "--seed", "1", "--changes", "1", "--out", "o"],
        1,
        "adir: cannot read: Is a directory",
    ),
    (
        "synth: bad spec",
        ["synth", "--spec", "bad.yaml", "--seed", "1", "--changes", "1", "--out", "o"],
        1,
        "bad.yaml: expected a mapping",
    ),
    ("synth: negative changes", [*SYNTH[:-1], "-10", "--out", "o"], 1, "changes must be >= 0"),
    ("synth: out directory", [*SYNTH, "--out", "adir"], 1, "--out adir: is a directory"),
    ("synth: bad shard", [*SYNTH, "--out", "o", "--shard", "3/2"], 1, "shard must be K/N"),
    (
        "synth: bad seed",
        ["synth", "--spec", SPEC, "--seed", "x", "--changes", "1", "--out", "o"],
        2,
        "invalid int value: 'x'",
    ),
    (
        "synth: expected in no folder",
        [*SYNTH, "--out", "o", "--expected", "nodir/e.json"],
        1,
        "--expected nodir/e.json: directory nodir does not exist",
    ),
]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bad-inputs")
    (folder / "adir").mkdir()
    (folder / "bad.bin").write_bytes(b"x")
    (folder / "bad.yaml").write_text("garbage\n")
    (folder / "empty.json").write_text("{}\n")
    # Nested past the parsers' recursion (json and PyYAML recurse once per level).
    (folder / "deep.json").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    (folder / "deep.jsonl").write_text('{"a":' * 100_000 + "1" + "}" * 100_000 + "\n")
    (folder / "deep.yaml").write_text("format_version: 1\nsteps: " + "[" * 50_000 + "\n")
    return folder


# Run in a process of their own, with a deadline: a listen that fails after the
# reactor is set up. The others run in-process (2 s of imports saved per case) with the
# reactor's run() made to fail, so a command that would serve instead of failing cannot
# hang the test either.
IN_A_PROCESS = {"serve: unknown host", "serve: control port too big"}


@pytest.mark.parametrize(
    ("name", "args", "status", "expected"),
    [pytest.param(*case, id=case[0]) for case in CASES],
)
def test_a_bad_input_is_one_line_and_a_non_zero_exit(
    inputs: Path,
    name: str,
    args: list[str],
    status: int,
    expected: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if name in IN_A_PROCESS:
        try:
            result = subprocess.run(
                [sys.executable, "-m", "pgwire_mock.cli", *args],
                cwd=inputs,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"pgwire-mock {' '.join(args)} did not end within 60 s")
        returncode, out, err = result.returncode, result.stdout, result.stderr
    else:
        from twisted.internet import reactor

        def serving() -> None:
            raise AssertionError(f"pgwire-mock {' '.join(args)} started serving")

        monkeypatch.setattr(reactor, "run", serving)
        monkeypatch.chdir(inputs)
        try:
            returncode = main(args)
        except SystemExit as exit_:  # argparse's usage errors
            returncode = int(exit_.code or 0)
        out, err = capsys.readouterr()
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("pgwire-mock"), lines[0]
    assert expected in lines[0], lines[0]
    assert returncode == status, lines[0]
    assert out == ""


def test_decode_into_a_closed_pipe_is_quiet() -> None:
    """`pgwire-mock decode FILE | head -1`: no 'Broken pipe' line, exit 0."""
    golden = ROOT / "tests" / "data" / "golden" / "pg17" / "types.v1.jsonl"
    result = subprocess.run(
        f"'{sys.executable}' -m pgwire_mock.cli decode '{golden}' | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.stderr == ""
    assert result.stdout.count("\n") == 1
