"""pg_basebackup from the fake replaying a recorded BASE_BACKUP vs from PostgreSQL itself.

    .venv/bin/python benchmarks/basebackup_bench.py [--pg 15] [--rows 300000] [--runs 3]

Fills a table of ``--rows`` rows in a provisioned PostgreSQL (``conformance.provision``;
pg_basebackup 15 takes 14 and 15), records one BASE_BACKUP with the options
``pg_basebackup -Fp -X stream`` sends (``record --physical --base-backup``), serves it,
and runs Debian's pg_basebackup against both, alternating, ``--runs`` times each. Prints
the backup's size, the best time and MB/s of each, and the fake's time over the real one
(lower is faster). The recording's size and the time the fake takes to load it (from
start to listening) are printed too.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from conformance import provision
from pgwire_mock.record import record_physical
from pgwire_mock.record_backup import PG_BASEBACKUP_DEFAULT, parse_backup_spec

PG_BASEBACKUP = "/usr/bin/pg_basebackup"


def _serve(major: int, path: Path) -> tuple[subprocess.Popen[str], int]:
    """``pgwire-mock serve`` on a free port; returns once it listens."""
    command = [sys.executable, "-m", "pgwire_mock.serve", "--port", "0"]
    process = subprocess.Popen(
        [*command, "--pg-version", str(major), "--script", str(path)],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    for line in process.stderr:
        match = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if match:
            # Keep reading its log so that it never blocks on a full pipe.
            threading.Thread(target=process.stderr.read, daemon=True).start()
            return process, int(match.group(1))
    raise SystemExit("the fake did not start")


def _backup(dsn: str, directory: Path) -> float:
    shutil.rmtree(directory, ignore_errors=True)
    started = time.perf_counter()
    options = ["-Fp", "-X", "stream", "-c", "fast", "--no-sync"]
    subprocess.run(
        [PG_BASEBACKUP, "-D", directory, "-d", dsn, *options],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", type=int, default=15, choices=(14, 15))
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with provision.provide(args.pg) as server, tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with server.connect() as conn:
            conn.execute("DROP TABLE IF EXISTS pgwm_bench")
            conn.execute(
                "CREATE TABLE pgwm_bench AS SELECT g AS id, md5(g::text) AS t "
                "FROM generate_series(1, %s) g",
                (args.rows,),
            )
        path = work / "backup.jsonl"
        recording = record_physical(
            server.dsn, path, base_backups=[parse_backup_spec(PG_BASEBACKUP_DEFAULT)]
        )
        size = sum(len(m) for m in recording.backups[0].messages)
        file_size = path.stat().st_size
        started = time.perf_counter()
        fake, port = _serve(args.pg, path)
        load = time.perf_counter() - started
        fake_dsn = f"host=127.0.0.1 port={port} user=postgres"
        try:
            times: dict[str, list[float]] = {"postgres": [], "fake": []}
            for _ in range(args.runs):
                times["postgres"].append(_backup(server.dsn, work / "real"))
                times["fake"].append(_backup(fake_dsn, work / "fake"))
        finally:
            fake.terminate()
            fake.wait(10)
    print(f"PostgreSQL {args.pg}, {args.rows} rows: BASE_BACKUP sends {size / 1e6:.1f} MB")
    print(f"recording {path.name}: {file_size / 1e6:.1f} MB, fake up in {load:.2f} s")
    for name, values in times.items():
        best = min(values)
        print(f"{name:9} best {best:.3f} s  {size / best / 1e6:7.1f} MB/s  (runs {values})")
    ratio = min(times["fake"]) / min(times["postgres"])
    print(f"fake / postgres time: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
