"""`pgwire-mock decode` reads what `pg_recvlogical -P pgoutput -f FILE` writes: each
message's bytes and a newline, no positions, no lengths. The files under
tests/data/recvlogical/ were written by real pg_recvlogical 15 reading real PostgreSQL
17 (see capture() below, which the postgres test runs again against every version)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from codec.pgoutput import Decoder
from conformance import provision
from pgwire_mock.cli import main
from pgwire_mock.client import parse_dsn
from pgwire_mock.recvlogical import read_recvlogical
from pgwire_mock.streamfile import StreamFileError

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "recvlogical"

# Changes that make pgoutput write every message type it has: Relation and Type, the
# three row kinds with key and old tuples, Truncate, logical messages, an Origin,
# streamed transactions (committed, with a rolled-back subtransaction, aborted) and
# two-phase ones (committed, rolled back, streamed and prepared). Values hold newline
# bytes on purpose: pg_recvlogical's separator is no boundary by itself.
SETUP = """
CREATE TYPE mood AS ENUM ('ok', 'sad');
CREATE TABLE t (id int PRIMARY KEY, v text, m mood, b bytea);
CREATE TABLE u (id int, v text);
ALTER TABLE u REPLICA IDENTITY FULL;
CREATE PUBLICATION pub FOR TABLE t, u;
"""
CHANGES = [
    "INSERT INTO t VALUES (1, E'a\\nb', 'ok', '\\x0a0a000a'), (10, E'\\n', NULL, NULL)",
    "UPDATE t SET id = 2, v = E'\\n\\n' WHERE id = 1",
    "INSERT INTO u VALUES (1, 'x'); UPDATE u SET v = E'y\\n'; DELETE FROM u",
    "DELETE FROM t WHERE id = 10",
    "SELECT pg_logical_emit_message(false, 'p', E'hello\\nworld')",
    "BEGIN; SELECT pg_logical_emit_message(true, E'p\\n', '\\x0a'::bytea); "
    "INSERT INTO t VALUES (3, 'm'); COMMIT",
    "SELECT pg_replication_origin_create('o1'); SELECT pg_replication_origin_session_setup('o1');"
    " BEGIN; SELECT pg_replication_origin_xact_setup('0/AA', now()); "
    "INSERT INTO t VALUES (4, 'origin'); COMMIT; SELECT pg_replication_origin_session_reset()",
    # Streamed (logical_decoding_work_mem is 64 kB): one with a rolled-back
    # subtransaction, one aborted as a whole.
    "BEGIN; INSERT INTO t SELECT g, E'y\\n' FROM generate_series(100, 800) g; "
    "SAVEPOINT s; INSERT INTO t SELECT g, 'gone' FROM generate_series(2000, 2700) g; "
    "ROLLBACK TO SAVEPOINT s; COMMIT",
    "BEGIN; INSERT INTO t SELECT g, 'aborted' FROM generate_series(5000, 5700) g; ROLLBACK",
    "TRUNCATE t",
]
TWO_PHASE = [
    "BEGIN; INSERT INTO t VALUES (20, 'prepared'); PREPARE TRANSACTION 'g1'",
    "COMMIT PREPARED 'g1'",
    "BEGIN; INSERT INTO t VALUES (21, E'rolled\\nback'); PREPARE TRANSACTION 'g2'",
    "ROLLBACK PREPARED 'g2'",
    "BEGIN; INSERT INTO t SELECT g, 'big' FROM generate_series(8000, 8700) g; "
    "PREPARE TRANSACTION 'g3'",
    "COMMIT PREPARED 'g3'",
]


def options_for(major: int, binary: bool) -> dict[str, str]:
    """The most each version's pgoutput can be asked for."""
    options = {
        "proto_version": {14: "2", 15: "3"}.get(major, "4"),
        "publication_names": "pub",
        "messages": "true",
        "streaming": "on" if major < 16 else "parallel",
        "binary": "true" if binary else "false",
    }
    if major >= 15:
        options["two_phase"] = "true"
    return options


def capture(server: provision.Server, out: Path) -> dict[str, list[bytes]]:
    """Run the changes, then for a text and a binary slot write what pg_recvlogical
    writes into ``out/NAME.bin``; return the same stream from the SQL interface."""
    expected: dict[str, list[bytes]] = {}
    with server.connect() as conn:
        for statement in SETUP.strip().split(";\n"):
            conn.execute(statement)
        for name in ("text", "binary"):
            two_phase = server.version >= 15
            conn.execute(
                "SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, %s)",
                (name, two_phase),
            )
        for statement in CHANGES + (TWO_PHASE if server.version >= 15 else []):
            conn.execute(statement)
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        end = str(row[0])
        dsn = parse_dsn(server.dsn)
        for name in ("text", "binary"):
            options = options_for(server.version, name == "binary")
            flat = [item for pair in options.items() for item in pair]
            rows = conn.execute(
                "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
                + ", ".join(["%s"] * len(flat))
                + ")",
                [name, *flat],
            ).fetchall()
            expected[name] = [bytes(row[0]) for row in rows]  # type: ignore[call-overload]
            command = [
                "pg_recvlogical",
                *("-h", dsn.host, "-p", str(dsn.port), "-U", dsn.user, "-d", dsn.dbname),
                *("-S", name, "-P", "pgoutput", "--start", "-E", end),
                *(f"-o{key}={value}" for key, value in options.items()),
                *("-f", str(out / f"{name}.bin")),
            ]
            subprocess.run(command, check=True, capture_output=True, timeout=60)
        for name in ("text", "binary"):
            conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))
        conn.execute("DROP PUBLICATION pub")
        conn.execute("DROP TABLE t, u")
        conn.execute("DROP TYPE mood")
        conn.execute("SELECT pg_replication_origin_drop('o1')")
    return expected


def digest(payloads: list[bytes]) -> dict[str, object]:
    """What the test keeps of the SQL interface's stream: the count, each length and a
    hash of them all, which pins every byte without storing the stream twice."""
    hashed = hashlib.sha256()
    for payload in payloads:
        hashed.update(len(payload).to_bytes(4, "big") + payload)
    return {
        "messages": len(payloads),
        "lengths": [len(p) for p in payloads],
        "sha256": hashed.hexdigest(),
    }


def payloads_of(path: Path) -> list[bytes]:
    with path.open("rb") as source:
        return list(read_recvlogical(source, str(path)))


@pytest.mark.parametrize("name", ["text", "binary"])
def test_a_real_pg_recvlogical_file_gives_the_sql_interfaces_messages(name: str) -> None:
    """Every payload of a real pg_recvlogical file, in order, equal to what the SQL
    interface returned for the same slot and options."""
    expected = json.loads((DATA / f"pg17.{name}.json").read_text())
    payloads = payloads_of(DATA / f"pg17.{name}.bin")
    assert digest(payloads) == expected
    decoder = Decoder()
    tags = {decoder.decode(p).TAG[0] for p in payloads}
    assert tags == set(b"ABCDEIKMOPRSTUYbcpr")  # every pgoutput message type


def test_decode_prints_a_pg_recvlogical_file(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's pg_recvlogical -f output decodes: one line per message, no position."""
    path = DATA / "pg17.text.bin"
    assert main(["decode", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(payloads_of(path))
    assert lines[0].startswith("- BEGIN "), lines[0]
    assert any("INSERT: id[int4]:1 v[text]:'a\\nb'" in line for line in lines)
    assert main(["decode", "--json", str(path)]) == 0
    first = json.loads(capsys.readouterr().out.splitlines()[0])
    assert first["lsn"] is None and first["type"] == "Begin"


def test_decode_reads_a_pg_recvlogical_file_from_stdin() -> None:
    data = (DATA / "pg17.binary.bin").read_bytes()
    result = subprocess.run(
        [sys.executable, "-m", "pgwire_mock.cli", "decode", "-"],
        input=data,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == len(payloads_of(DATA / "pg17.binary.bin"))


@pytest.mark.parametrize(
    ("cut", "expected"),
    [
        (lambda b: b[:-1], "ends in the middle of a message"),
        (lambda b: b[:21] + b"X" + b[22:], "at byte 21: expected the newline"),
        (lambda b: b + b"Z", "expected a pgoutput message type"),
    ],
    ids=["truncated", "no-newline", "garbage"],
)
def test_a_damaged_file_is_one_error_naming_the_byte(cut: object, expected: str) -> None:
    data = cut((DATA / "pg17.text.bin").read_bytes())  # type: ignore[operator]
    with pytest.raises(StreamFileError, match=expected):
        list(read_recvlogical(io.BytesIO(data), "f"))


def test_one_long_message_of_newlines_reads_in_linear_time() -> None:
    """A 4 MB logical message of newline bytes: the reader does not try every newline."""
    content = b"\n" * (4 << 20)
    payload = b"M\x00" + bytes(8) + b"p\x00" + len(content).to_bytes(4, "big") + content

    class Counting(io.BytesIO):
        reads = 0

        def read(self, size: int | None = -1) -> bytes:
            Counting.reads += 1
            return super().read(size)

    source = Counting(payload + b"\n")
    assert list(read_recvlogical(source, "f")) == [payload]
    assert Counting.reads < 20  # the buffer doubles; it is not re-read per newline


@pytest.mark.skipif(
    shutil.which("pg_recvlogical") is None and not provision.in_ci(), reason="needs pg_recvlogical"
)
def test_real_pg_recvlogical_output_decodes(pg_server: provision.Server, tmp_path: Path) -> None:
    """Against each version: real pg_recvlogical's file equals the SQL interface's stream."""
    expected = capture(pg_server, tmp_path)
    for name, payloads in expected.items():
        assert payloads, name
        assert payloads_of(tmp_path / f"{name}.bin") == payloads, name


if __name__ == "__main__":  # regenerate tests/data/recvlogical from PostgreSQL 17
    with provision.provide(17) as server:
        DATA.mkdir(exist_ok=True)
        for key, payloads in capture(server, DATA).items():
            os.replace(DATA / f"{key}.bin", DATA / f"pg17.{key}.bin")
            (DATA / f"pg17.{key}.json").write_text(json.dumps(digest(payloads)) + "\n")
