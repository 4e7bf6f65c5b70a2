"""`pgwire-mock decode`: real captured streams in, one line per message out; bad input
gives one readable line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from codec import replication, wire
from codec.pgoutput import Decoder
from codec.values import LSN
from pgwire_mock.cli import main

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "golden"
TYPES_STREAM = GOLDEN / "pg17" / "types.v1.jsonl"
STREAMED = GOLDEN / "pg17" / "streaming.v4-parallel-2pc-bin.jsonl"


def golden_entries(path: Path) -> list[tuple[int, bytes]]:
    entries = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if "meta" not in record:
            entries.append((int(LSN.parse(record["lsn"])), bytes.fromhex(record["data"])))
    return entries


def as_wire(entries: list[tuple[int, bytes]]) -> bytes:
    """The same stream as a walsender sends it: CopyData(XLogData), with a keepalive."""
    out = bytearray()
    for lsn, payload in entries:
        xlog = replication.XLogData(wal_start=lsn, wal_end=lsn, send_time=0, data=payload)
        out += wire.encode(wire.CopyData(replication.encode(xlog)))
        out += wire.encode(
            wire.CopyData(replication.encode(replication.PrimaryKeepalive(lsn, 0, False)))
        )
    return bytes(out)


def test_decode_prints_one_line_per_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["decode", str(TYPES_STREAM)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(golden_entries(TYPES_STREAM))
    assert any("BEGIN" in line for line in lines)
    inserts = [line for line in lines if ": INSERT: " in line]
    assert inserts, lines[:5]
    assert "table public.pgwm_types: INSERT: id[int4]:1 " in inserts[0]


def test_decode_json_lines_name_columns(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["decode", "--json", str(TYPES_STREAM)]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    insert = next(r for r in records if r["type"] == "Insert")
    assert insert["relation"] == "public.pgwm_types"
    assert insert["new_tuple"]["id"] == "1"
    assert LSN.parse(insert["lsn"]) > 0


def test_decode_reads_the_wire_format_from_stdin(tmp_path: Path) -> None:
    """The raw CopyData bytes a walsender sends decode to the same lines as the JSON file."""
    entries = golden_entries(STREAMED)
    result = subprocess.run(
        [sys.executable, "-m", "pgwire_mock.cli", "decode", "-"],
        input=as_wire(entries),
        capture_output=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    from_json = subprocess.run(
        [sys.executable, "-m", "pgwire_mock.cli", "decode", str(STREAMED)],
        capture_output=True,
        check=True,
    )
    assert result.stdout == from_json.stdout
    assert b"STREAM ABORT" in result.stdout


def run_cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "pgwire_mock.cli", *args],
        input=stdin,
        capture_output=True,
        check=False,
    )


@pytest.mark.parametrize(
    ("stdin", "expected"),
    [
        (b'{"lsn": "0/10", "data": "49"}\n', b"pgoutput Insert ('I') at byte 1"),
        (b'{"lsn": "0/10", "data": "zz"}\n', b"<stdin>, line 1"),
        (b"{not json\n", b"<stdin>, line 1"),
        (b"d\x00\x00\x00\x05wxyz", b"<stdin>"),
        (b"Z\x00\x00\x00\x05I", b"expected only CopyData messages"),
        (b"d\x00\x00\x00\x09w\x00\x00\x00", b"ends in the middle of a message"),
    ],
)
def test_malformed_input_is_one_line_and_exit_1(stdin: bytes, expected: bytes) -> None:
    result = run_cli("decode", "-", stdin=stdin)
    assert result.returncode == 1
    assert result.stdout == b"" or result.stdout.count(b"\n") >= 0
    assert result.stderr.count(b"\n") == 1, result.stderr
    assert result.stderr.startswith(b"pgwire-mock decode: ")
    assert expected in result.stderr
    assert b"Traceback" not in result.stderr


def test_missing_file_and_bad_option_are_one_line() -> None:
    missing = run_cli("decode", "/nonexistent/stream.jsonl")
    assert missing.returncode == 1
    assert (
        missing.stderr == b"pgwire-mock decode: cannot read /nonexistent/stream.jsonl: "
        b"No such file or directory\n"
    )
    bad = run_cli("decode", "--bogus", "x")
    assert bad.returncode == 2
    assert bad.stderr.count(b"\n") == 1 and b"--bogus" in bad.stderr


def test_every_golden_stream_decodes_through_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    """The readable form has a description for every message of every captured stream."""
    for path in sorted(GOLDEN.glob("pg*/*.jsonl")):
        assert main(["decode", str(path)]) == 0, path
        assert main(["decode", "--json", str(path)]) == 0, path
    assert capsys.readouterr().err == ""


def test_decoder_state_is_per_stream() -> None:
    """Decoding a file twice in one process gives the same result (no leaked stream state)."""
    entries = golden_entries(STREAMED)
    first = [Decoder().decode(p) for _, p in entries[:1]]
    assert first


def test_bundled_demo_stream_decodes(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's first command decodes the demo shipped inside the package."""
    from importlib.resources import files

    demo = files("pgwire_mock") / "data" / "demo.jsonl"
    assert demo.is_file()
    assert main(["decode", str(demo)]) == 0
    out = capsys.readouterr().out
    for word in ("BEGIN", "INSERT", "STREAM ABORT", "BEGIN PREPARE", "COMMIT PREPARED"):
        assert word in out
