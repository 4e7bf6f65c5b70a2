"""The command line's rough edges of issue #14 item 9, each as the reporter saw it."""

from __future__ import annotations

import io
import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg2
import psycopg2.extras
import pytest

from codec.values import LSN
from conformance import provision
from pgwire_mock.recvlogical import read_recvlogical
from pgwire_mock.serve import _EPILOG
from pgwire_mock.streamfile import read_stream

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "golden"


@contextmanager
def serving(*args: str) -> Iterator[int]:
    """``pgwire-mock serve --port 0 ARGS`` in a subprocess; yields its port."""
    server = subprocess.Popen(
        [sys.executable, "-m", "pgwire_mock.serve", "--port", "0", *args],
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert server.stderr is not None
        first = server.stderr.readline()
        match = re.search(r"listening on [\d.]+:(\d+)", first)
        assert match, first
        yield int(match.group(1))
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.mark.skipif(
    shutil.which("pg_recvlogical") is None and not provision.in_ci(), reason="needs pg_recvlogical"
)
def test_the_help_examples_pg_recvlogical_reads_the_help_examples_recording(
    tmp_path: Path,
) -> None:
    """serve --help's first example served, its pg_recvlogical command (with -E to stop
    and -f to a file) gets every recorded message: the plugin and publication are right."""
    examples = [line.strip() for line in _EPILOG.replace("\\\n", " ").splitlines()]
    serve = next(line for line in examples if line.startswith("pgwire-mock serve"))
    reader = next(line for line in examples if line.startswith("pg_recvlogical"))
    serve_args = shlex.split(serve)[2:]
    recording = Path(ROOT, serve_args[serve_args.index("--script") + 1])
    with recording.open("rb") as f:
        entries = list(read_stream(f))
    expected = [entry.payload for entry in entries]
    last = str(LSN(max(entry.lsn for entry in entries)))
    with serving(*serve_args) as port:
        command = shlex.split(reader)
        command[command.index("-p") + 1] = str(port)
        command[command.index("-f") + 1] = str(tmp_path / "out.bin")
        result = subprocess.run(
            [*command, "-E", last],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    with (tmp_path / "out.bin").open("rb") as f:
        assert list(read_recvlogical(f)) == expected, result.stderr


def test_serve_refuses_a_protocol_4_recording_to_a_protocol_1_client() -> None:
    """As the Python API (Recording.check) does: 0A000, the recording's protocol named."""
    recording = GOLDEN / "pg17" / "streaming.v4-parallel-2pc-bin.jsonl"
    with serving("--script", str(recording)) as port:
        conn = psycopg2.connect(
            host="127.0.0.1",
            port=port,
            user="u",
            dbname="d",
            connection_factory=psycopg2.extras.LogicalReplicationConnection,
        )
        try:
            cur = conn.cursor()
            cur.create_replication_slot("s", output_plugin="pgoutput")
            with pytest.raises(psycopg2.Error) as caught:
                cur.start_replication(
                    slot_name="s",
                    decode=False,
                    options={"proto_version": "1", "publication_names": "pgwm_streaming"},
                )
                while cur.read_message() is None:
                    pass
        finally:
            conn.close()
    assert caught.value.pgcode == "0A000"
    assert "was recorded with proto_version=4, the client asked for proto_version=1" in str(
        caught.value
    )


def test_record_of_a_lone_begin_is_one_line_and_status_1(tmp_path: Path) -> None:
    """--endpos just past a Begin used to leave a recording of that Begin (and the
    Relation and Type messages after it) alone, and exit 0. At the Begin itself, the slot's
    start, the keepalive every stream starts with (at the slot's confirmed_flush) ends
    the recording before anything, as it ends pg_recvlogical's on PostgreSQL."""
    out = tmp_path / "cut.jsonl"
    with serving("--script", "examples/demo.yaml") as port:
        dsn = f"postgresql://u@127.0.0.1:{port}/shop"
        base = [sys.executable, "-m", "pgwire_mock.cli", "record", "--dsn", dsn]
        base += ["--publication", "demo_pub", "--create-slot", "--out", str(out)]
        cut = subprocess.run(
            [*base, "--slot", "a", "--endpos", "0/1500001"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        whole = subprocess.run(
            [*base, "--slot", "b"], capture_output=True, text=True, timeout=60, check=False
        )
    assert cut.returncode == 1
    assert cut.stderr.splitlines() == [
        f"pgwire-mock record: {out} ends inside a transaction: BEGIN of xid 750 with no "
        "COMMIT, in the 7 messages written; record up to an --endpos after its end"
    ]
    assert whole.returncode == 0, whole.stderr
    assert whole.stdout.startswith("recorded 35 messages")


@pytest.mark.parametrize(
    ("keep", "expected"),
    [
        (lambda tags: tags.index(b"B") + 1, "BEGIN of xid"),
        (lambda tags: tags.index(b"b") + 2, "BEGIN PREPARE of xid"),
        (lambda tags: tags.index(b"S") + 2, "STREAM START of xid"),
        (lambda tags: tags.index(b"E") + 1, None),  # a streamed block ended: not cut
        (len, None),
    ],
    ids=["begin", "begin-prepare", "stream-start", "after-stream-stop", "whole"],
)
def test_unfinished_names_what_a_cut_recording_ends_inside(
    keep: object, expected: str | None
) -> None:
    from pgwire_mock.record import unfinished

    with (GOLDEN / "pg17" / "streaming.v4-parallel-2pc-bin.jsonl").open("rb") as f:
        payloads = [entry.payload for entry in read_stream(f)]
    with (GOLDEN / "pg17" / "two_phase.v3-stream-2pc.jsonl").open("rb") as f:
        payloads += [entry.payload for entry in read_stream(f)]
    tags = [p[:1] for p in payloads]
    found = unfinished(payloads[: keep(tags)])  # type: ignore[operator]
    if expected is None:
        assert found is None
    else:
        assert found is not None and found.startswith(expected), found


def test_synth_checks_expected_before_generating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad --expected path used to fail only after the whole stream was written."""
    from pgwire_mock.cli import main

    out = tmp_path / "stream.jsonl"
    spec = ROOT / "examples" / "synth-spec.yaml"
    args = ["synth", "--spec", str(spec), "--seed", "1", "--changes", "200", "--out", str(out)]
    assert main([*args, "--expected", str(tmp_path / "missing" / "expected.json")]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"pgwire-mock synth: --expected {tmp_path}/missing/expected.json: "
        f"directory {tmp_path}/missing does not exist"
    ]
    assert not out.exists()  # nothing was generated
    assert main([*args, "--expected", str(tmp_path)]) == 1
    assert capsys.readouterr().err.endswith(f"--expected {tmp_path}: is a directory\n")
    assert main([*args, "--expected", str(tmp_path / "expected.json")]) == 0
    assert out.exists() and (tmp_path / "expected.json").exists()


def test_conformance_without_the_spark_extra_skips_one_check_in_one_line(
    pg_server: provision.Server,
) -> None:
    """Without pyarrow every cell of spark-values used to fail; now that column is left
    out with one line naming the extra, and the rest passes (exit 0)."""
    code = (
        "import sys; sys.modules['pyarrow'] = None\n"
        "from pgwire_mock.cli import main\n"
        f"sys.exit(main(['conformance', '--dsn', '{pg_server.version}={pg_server.dsn}', "
        "'--scenarios', 'types']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        "pgwire-mock conformance: skipping the spark-values check, which needs the spark "
        "extra (pip install -e '.[spark]' in a checkout): "
    )
    assert "spark-values" not in result.stdout
    assert result.stdout.splitlines()[-1].startswith("all ")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("tty", [True, False], ids=["terminal", "pipe"])
def test_conformance_shows_progress_on_a_terminal_only(
    pg_server: provision.Server, tty: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pgwire_mock.cli import main

    err = Terminal() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    dsn = f"{pg_server.version}={pg_server.dsn}"
    assert main(["conformance", "--dsn", dsn, "--scenarios", "types,toast"]) == 0
    shown = err.getvalue()
    if not tty:
        assert shown == ""
        return
    v = pg_server.version
    assert shown.split("\r\x1b[K") == [
        "",
        f"conformance: PostgreSQL {v}: connecting…",
        f"conformance: PostgreSQL {v}: types (1/2)…",
        f"conformance: PostgreSQL {v}: toast (2/2)…",
        "",  # cleared before the results
    ]


def test_the_docker_images_default_command_serves_the_demo(tmp_path: Path) -> None:
    """docker/Dockerfile's CMD (its files mapped back to the repository) starts serve,
    and docker/README.md's pg_recvlogical command reads from it; the docs no longer say
    that serve does not exist."""
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    readme = (ROOT / "docker" / "README.md").read_text()
    for text in (dockerfile, readme):
        assert "does not exist" not in text
    (entrypoint,) = json.loads(re.search(r"^ENTRYPOINT (.*)$", dockerfile, re.M)[1])  # type: ignore[index]
    assert entrypoint == "pgwire-mock"
    command = json.loads(re.search(r"^CMD (.*)$", dockerfile, re.M)[1])  # type: ignore[index]
    copied = dict(
        (dest, str(ROOT / src))
        for src, dest in re.findall(r"^COPY (\S+) (/\S+)$", dockerfile, re.M)
    )
    assert command[0] == "serve"
    args = [copied.get(arg, arg) for arg in command[1:]]
    reader = readme.split("docker run --rm -p 5433:5433 pgwire-mock\n", 1)[1]
    reader = reader.split("```", 1)[0].replace("\\\n", " ")
    with serving(*args, "--host", "127.0.0.1", "--port", "0") as port:
        words = shlex.split(reader)
        words[words.index("-p") + 1] = str(port)
        words[words.index("-f") + 1] = str(tmp_path / "out.bin")
        result = subprocess.run(
            [*words, "-E", "0/1500001"], capture_output=True, text=True, timeout=30, check=False
        )
    assert result.returncode == 0, result.stderr
    with (tmp_path / "out.bin").open("rb") as f:
        assert next(read_recvlogical(f))[:1] == b"B"
