"""The fake walsender against real PostgreSQL, streaming the same changes to pg_recvlogical.

    .venv/bin/python benchmarks/walsender_bench.py [--changes 1000000] [--batch 10000]
                                                   [--stall 30] [--keep DIR] [--major 18]

1. Starts PostgreSQL ``--major`` (18 unless given; conformance.provision), creates a
   published table and two pgoutput slots, then inserts ``--changes`` rows in
   transactions of ``--batch`` rows.
2. Real: Debian's ``pg_recvlogical --start -o proto_version=1 -o publication_names=...
   --endpos <last commit> -f /dev/null`` on the first slot, timed from start to exit.
3. Records the second slot through ``pgwire_mock.client.capture_via_walsender`` into a
   JSON Lines recording (meta + one line per message).
4. Fake: ``python -m pgwire_mock.serve --pg-version <major> --script <recording>`` as a
   subprocess (timing starts once it listens, so loading the recording is not counted);
   the same pg_recvlogical command, the same end position.
5. Back-pressure: the fake again, and a raw-socket client that sends START_REPLICATION,
   reads about 4 MB, then stops reading for ``--stall`` seconds; the server's VmRSS is
   sampled from /proc every 0.5 s. It must stay flat (the protocol is a push producer
   that pauses when the socket buffer is full).

Prints one table: changes/s and MB/s (pgoutput payload bytes) for both, and the ratio,
then the RSS figures.
"""

from __future__ import annotations

import argparse
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from codec.values import LSN
from conformance import provision
from conformance.fake import write_recording
from pgwire_mock.client import capture_via_walsender

TABLE = "bench"
PUBLICATION = "bench_pub"
REAL_SLOT = "bench_real"
RECORD_SLOT = "bench_record"
FAKE_SLOT = "bench_fake"
STALL_SLOT = "bench_stall"


def _recvlogical(host: str, port: int, slot: str, endpos: LSN) -> float:
    """Run pg_recvlogical to ``endpos``; the wall time in seconds."""
    command = [
        "pg_recvlogical",
        "-h",
        host,
        "-p",
        str(port),
        "-U",
        "postgres",
        "-d",
        "postgres",
        "-S",
        slot,
        "--start",
        "-P",
        "pgoutput",
        "-o",
        "proto_version=1",
        "-o",
        f"publication_names={PUBLICATION}",
        "--endpos",
        str(endpos),
        "--no-loop",
        "-f",
        "/dev/null",
    ]
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=3600)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"pg_recvlogical failed ({result.returncode}): {result.stderr.strip()}")
    return elapsed


def _prepare(server: provision.Server, changes: int, batch: int) -> LSN:
    with server.connect() as conn:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
            " WHERE slot_name LIKE 'bench\\_%'"
        )
        conn.execute(f"DROP PUBLICATION IF EXISTS {PUBLICATION}")
        conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
        conn.execute(f"CREATE TABLE {TABLE} (id int PRIMARY KEY, name text, amount numeric)")
        conn.execute(f"CREATE PUBLICATION {PUBLICATION} FOR TABLE {TABLE}")
        for slot in (REAL_SLOT, RECORD_SLOT):
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        for first in range(1, changes + 1, batch):
            last = min(first + batch - 1, changes)
            conn.execute(
                f"INSERT INTO {TABLE} SELECT g, 'customer ' || g, g * 1.25"
                f" FROM generate_series({first}, {last}) g"
            )
        conn.execute("CHECKPOINT")
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    return LSN(str(row[0]))


class FakeProcess:
    """``python -m pgwire_mock.serve`` on a free port, until :meth:`stop`."""

    def __init__(self, recording: Path, major: int, *slots: str) -> None:
        command = [
            sys.executable,
            "-m",
            "pgwire_mock.serve",
            "--port",
            "0",
            "--pg-version",
            str(major),
            "--script",
            str(recording),
        ]
        for slot in slots:
            command += ["--slot", slot]
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        assert self.process.stderr is not None
        lines = []
        while True:
            line = self.process.stderr.readline()
            if not line:
                raise SystemExit("the fake did not start:\n" + "".join(lines))
            lines.append(line)
            match = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
            if match:
                self.port = int(match.group(1))
                break
        # Keep draining the log so the server never blocks on a full stderr pipe.
        self._drain = subprocess.Popen(
            ["cat"], stdin=self.process.stderr, stdout=subprocess.DEVNULL
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._drain.wait()


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def _message(tag: bytes, body: bytes) -> bytes:
    return tag + struct.pack("!I", len(body) + 4) + body


def _read_until(sock: socket.socket, tags: bytes) -> tuple[bytes, bytes]:
    """Read whole backend messages until one whose type is in ``tags``; (tag, rest)."""
    buffer = b""
    while True:
        while len(buffer) >= 5:
            tag = buffer[:1]
            (length,) = struct.unpack("!I", buffer[1:5])
            if len(buffer) < 1 + length:
                break
            body, buffer = buffer[5 : 1 + length], buffer[1 + length :]
            if tag == b"E":
                raise SystemExit(f"server error: {body!r}")
            if tag in tags:
                return tag, buffer
        chunk = sock.recv(65536)
        if not chunk:
            raise SystemExit("server closed the connection")
        buffer += chunk


def _stall(
    recording: Path, major: int, seconds: float, read_first: int
) -> tuple[int, int, int, int]:
    """(RSS before START, RSS when the client stops reading, peak, last) in KiB."""
    server = FakeProcess(recording, major, STALL_SLOT)
    try:
        before = _rss_kib(server.pid)
        sock = socket.create_connection(("127.0.0.1", server.port))
        params = b"".join(
            k + b"\0" + v + b"\0"
            for k, v in (
                (b"user", b"postgres"),
                (b"database", b"postgres"),
                (b"replication", b"database"),
                (b"client_encoding", b"UTF8"),
            )
        )
        body = struct.pack("!I", 196608) + params + b"\0"
        sock.sendall(struct.pack("!I", len(body) + 4) + body)
        _read_until(sock, b"Z")
        start = (
            f'START_REPLICATION SLOT "{STALL_SLOT}" LOGICAL 0/0 '
            f"(proto_version '1', publication_names '{PUBLICATION}')"
        )
        sock.sendall(_message(b"Q", start.encode() + b"\0"))
        _read_until(sock, b"W")
        received = 0
        while received < read_first:
            chunk = sock.recv(65536)
            if not chunk:
                raise SystemExit("the fake closed the stream early")
            received += len(chunk)
        at_stall = _rss_kib(server.pid)
        samples = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(0.5)
            samples.append(_rss_kib(server.pid))
        sock.close()
        return before, at_stall, max(samples), samples[-1]
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=1_000_000, help="rows inserted")
    parser.add_argument("--batch", type=int, default=10_000, help="rows per transaction")
    parser.add_argument("--stall", type=float, default=30.0, help="seconds the client stalls")
    parser.add_argument("--keep", type=Path, help="write the recording here and keep it")
    parser.add_argument(
        "--major", type=int, default=18, choices=provision.MAJORS, help="PostgreSQL major"
    )
    args = parser.parse_args(argv)
    if shutil.which("pg_recvlogical") is None:
        raise SystemExit("pg_recvlogical not found (Debian postgresql-client)")

    with provision.provide(args.major) as server, tempfile.TemporaryDirectory() as tmp:
        print(f"PostgreSQL {server.full_version}: inserting {args.changes} rows ...", flush=True)
        t0 = time.perf_counter()
        end = _prepare(server, args.changes, args.batch)
        print(f"  done in {time.perf_counter() - t0:.1f} s (WAL end {end})", flush=True)

        print("recording through capture_via_walsender ...", flush=True)
        t0 = time.perf_counter()
        options = {"proto_version": "1", "publication_names": PUBLICATION}
        captured = capture_via_walsender(
            server.replication_dsn, RECORD_SLOT, 0, options, until_lsn=end, idle_timeout=60
        )
        recording = (args.keep or Path(tmp)) / "walsender_bench.jsonl"
        recording.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "server_version": server.full_version,
            "major": args.major,
            "scenario": "walsender_bench",
            "options": options,
            "description": f"{args.changes} single-row inserts in batches of {args.batch}",
        }
        write_recording(recording, meta, captured)
        inserts = sum(1 for _, p in captured if p[:1] == b"I")
        payload_bytes = sum(len(p) for _, p in captured)
        last_commit = max(lsn for lsn, p in captured if p[:1] == b"C")
        del captured
        print(
            f"  {inserts} inserts, {payload_bytes / 1e6:.1f} MB of pgoutput in "
            f"{time.perf_counter() - t0:.1f} s -> {recording}",
            flush=True,
        )
        if inserts != args.changes:
            raise SystemExit(f"recorded {inserts} inserts, expected {args.changes}")

        print(f"pg_recvlogical from PostgreSQL {args.major} ...", flush=True)
        real = _recvlogical(server.host, server.port, REAL_SLOT, last_commit)
        print(f"  {real:.2f} s", flush=True)

        print("pg_recvlogical from the fake ...", flush=True)
        fake_server = FakeProcess(recording, args.major, FAKE_SLOT)
        try:
            fake = _recvlogical("127.0.0.1", fake_server.port, FAKE_SLOT, last_commit)
            print(f"  {fake:.2f} s", flush=True)
        finally:
            fake_server.stop()

        print(f"stalled client for {args.stall:g} s against the fake ...", flush=True)
        read_first = min(4 << 20, payload_bytes // 4)
        before, at_stall, peak, last = _stall(recording, args.major, args.stall, read_first)

    rows = [
        (f"PostgreSQL {args.major}", real),
        ("pgwire-mock fake", fake),
    ]
    print()
    print(f"{'server':<18} {'seconds':>9} {'changes/s':>12} {'MB/s':>8}")
    for name, seconds in rows:
        print(
            f"{name:<18} {seconds:>9.2f} {args.changes / seconds:>12,.0f} "
            f"{payload_bytes / 1e6 / seconds:>8.1f}"
        )
    ratio = real / fake
    print(f"{'ratio fake/real':<18} {'':>9} {ratio:>11.2f}x {ratio:>7.2f}x  (target >= 3x)")
    print()
    print(f"fake RSS (KiB), client stalled {args.stall:g} s after reading {read_first:,} bytes:")
    print(f"  before START {before:,}  at stall {at_stall:,}  peak {peak:,}  last {last:,}")
    growth = peak - at_stall
    print(f"  growth during the stall: {growth:,} KiB ({growth / max(at_stall, 1):.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
