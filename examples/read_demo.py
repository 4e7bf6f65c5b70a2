"""The README's first command: a real client reads a scripted stream from the fake walsender.

Starts ``pgwire-mock serve`` on a free loopback port with examples/demo.yaml (a small shop
whose stream holds every pgoutput message type) emulating PostgreSQL 16, then reads it
with psycopg2's LogicalReplicationConnection, the client many CDC consumers use, exactly
as it would read a real server: START_REPLICATION with pgoutput options, one line per
message, a standby status update after each. Stops when the stream has been idle for a
second. The server's own log (one line per connection and command) goes to stderr.

    .venv/bin/python examples/read_demo.py [--pg-version 14|15|16|17]
"""

from __future__ import annotations

import argparse
import re
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg2
import psycopg2.extras

from codec.values import LSN
from pgwire_mock.describe import StreamDescriber

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "demo.yaml"
# What each emulated version's pgoutput accepts (protocol 4 and parallel from 16,
# two-phase from 15).
OPTIONS = {
    14: {"proto_version": "2", "streaming": "on"},
    15: {"proto_version": "3", "streaming": "on", "two_phase": "on"},
    16: {"proto_version": "4", "streaming": "parallel", "two_phase": "on"},
    17: {"proto_version": "4", "streaming": "parallel", "two_phase": "on"},
}
IDLE_SECONDS = 1.0


def start_server(pg_version: int) -> tuple[subprocess.Popen[str], int]:
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pgwire_mock.serve",
            "--port",
            "0",
            "--script",
            str(SCRIPT),
            "--pg-version",
            str(pg_version),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert server.stderr is not None
    first = server.stderr.readline()
    sys.stderr.write(first)
    match = re.search(r"listening on [\d.]+:(\d+)", first)
    if match is None:
        server.kill()
        sys.exit(f"read_demo: the server did not start: {first.strip()}")
    # Pass the server's log through while we read.
    threading.Thread(target=lambda: sys.stderr.writelines(server.stderr), daemon=True).start()
    return server, int(match.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg-version", type=int, choices=sorted(OPTIONS), default=16)
    args = parser.parse_args()
    server, port = start_server(args.pg_version)
    describer = StreamDescriber()
    kinds: set[str] = set()
    try:
        conn = psycopg2.connect(
            host="127.0.0.1",
            port=port,
            user="demo",
            dbname="shop",
            connection_factory=psycopg2.extras.LogicalReplicationConnection,
        )
        cur = conn.cursor()
        options = {"publication_names": "demo_pub", "messages": "true", **OPTIONS[args.pg_version]}
        cur.start_replication(slot_name="demo_slot", decode=False, options=options)
        last = time.monotonic()
        while time.monotonic() - last < IDLE_SECONDS:
            message = cur.read_message()
            if message is None:
                select.select([cur], [], [], 0.2)
                continue
            last = time.monotonic()
            decoded = describer.decode(bytes(message.payload))
            kinds.add(type(decoded).__name__)
            print(f"{LSN(message.data_start)!s:>12} {describer.text(decoded)}")
            cur.send_feedback(flush_lsn=message.data_start)
        conn.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
    print(
        f"-- psycopg2 read {len(kinds)} kinds of pgoutput message from the fake "
        f"PostgreSQL {args.pg_version}: {', '.join(sorted(kinds))}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
