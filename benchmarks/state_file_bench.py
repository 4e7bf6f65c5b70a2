"""Acknowledgement throughput of the fake walsender with and without ``--state-file``.

    .venv/bin/python benchmarks/state_file_bench.py [--acks 50000] [--rounds 3]

Starts ``pgwire-mock serve --slot bench`` twice in the same run (without, then with a state
file in a temporary directory), and from a raw-socket client sends START_REPLICATION and
then ``--acks`` standby status updates, each confirming a further position, the last one
asking for a reply; the time runs until that reply arrives, so every acknowledgement was
processed. A consumer that acks each message behaves like this. Prints acks/s for both
and their ratio (best of ``--rounds``), and checks that the state file holds the last
confirmed position once the server stops.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from codec.replication import StandbyStatusUpdate
from codec.wire import CopyData

START = 0x1000000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _startup(params: dict[str, str]) -> bytes:
    body = struct.pack("!i", 196608)
    for key, value in params.items():
        body += key.encode() + b"\0" + value.encode() + b"\0"
    body += b"\0"
    return struct.pack("!i", len(body) + 4) + body


def _query(sql: str) -> bytes:
    data = sql.encode() + b"\0"
    return b"Q" + struct.pack("!i", len(data) + 4) + data


def _read_until(sock: socket.socket, tag: bytes, buf: bytearray) -> None:
    """Read messages until one with ``tag``."""
    while True:
        while len(buf) >= 5:
            (length,) = struct.unpack_from("!i", buf, 1)
            if len(buf) < 1 + length:
                break
            message = bytes(buf[: 1 + length])
            del buf[: 1 + length]
            if message[:1] == b"E":
                raise RuntimeError(f"server error: {message!r}")
            if message[:1] == tag:
                return
        data = sock.recv(1 << 16)
        if not data:
            raise RuntimeError("server closed the connection")
        buf += data


def _run(port: int, acks: int) -> float:
    """Acks per second through one connection."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        buf = bytearray()
        sock.sendall(
            _startup({"user": "postgres", "database": "postgres", "replication": "database"})
        )
        _read_until(sock, b"Z", buf)
        options = "proto_version '1', publication_names 'bench'"
        sock.sendall(_query(f"START_REPLICATION SLOT bench LOGICAL 0/0 ({options})"))
        _read_until(sock, b"W", buf)
        updates = b"".join(
            CopyData(StandbyStatusUpdate(START + i, START + i, START + i, 0).encode()).encode()
            for i in range(1, acks + 1)
        )
        began = time.perf_counter()
        sock.sendall(updates + b"c\0\0\0\4")  # CopyDone: answered after every update
        _read_until(sock, b"c", buf)
        return acks / (time.perf_counter() - began)


def _serve(port: int, *extra: str) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pgwire_mock.serve",
            "--port",
            str(port),
            "--pg-version",
            "17",
            "--slot",
            f"bench@0/{START:X}",
            "--publication",
            "bench",
            *extra,
        ],
        stderr=subprocess.PIPE,
    )
    assert server.stderr is not None
    for line in server.stderr:
        if b"listening on" in line:
            return server
    raise RuntimeError("the server did not start")


def _measure(acks: int, rounds: int, *extra: str) -> float:
    best = 0.0
    for _ in range(rounds):
        port = _free_port()
        server = _serve(port, *extra)
        try:
            best = max(best, _run(port, acks))
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=30)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--acks", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state.json"
        without = _measure(args.acks, args.rounds)
        with_file = _measure(args.acks, args.rounds, "--state-file", str(state))
        saved = {s["name"]: s["confirmed_flush"] for s in json.loads(state.read_text())["slots"]}
        leftovers = sorted(p.name for p in Path(tmp).iterdir() if p != state)
    print(f"{args.acks} acknowledgements, one connection, best of {args.rounds}")
    print(f"  without --state-file: {without:12,.0f} acks/s")
    print(f"  with --state-file:    {with_file:12,.0f} acks/s")
    print(f"  ratio:                {without / with_file:12.2f}x slower with the state file")
    print(
        f"  saved confirmed_flush: {saved.get('bench', 0) - START} past the start "
        f"(expected {args.acks}); temporary files left: {leftovers or 'none'}"
    )
    return 0 if saved.get("bench") == START + args.acks and not leftovers else 1


if __name__ == "__main__":
    sys.exit(main())
