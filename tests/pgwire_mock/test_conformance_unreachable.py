"""``pgwire-mock conformance`` with one server reachable and one not: the reachable
version's table is printed, the other is named on one line as unreachable, and the
exit is non-zero (issue #14)."""

from __future__ import annotations

import subprocess
import sys

from conformance import provision

NOWHERE = "postgresql://u@127.0.0.1:1/x"  # nothing listens on port 1


def test_an_unreachable_server_is_one_line_and_fails_the_run(pg_server: provision.Server) -> None:
    """The reachable server's scenarios run and pass; the unreachable one gets no table
    of failed cells but one stderr line saying it was not checked and why; exit 1."""
    other = 16 if pg_server.version != 16 else 17
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pgwire_mock.cli",
            "conformance",
            "--versions",
            f"{other},{pg_server.version}",
            "--dsn",
            f"{pg_server.version}={pg_server.dsn}",
            "--dsn",
            f"{other}={NOWHERE}",
            "--scenarios",
            "types",
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert f"PostgreSQL {pg_server.full_version}:" in result.stdout
    assert f"PostgreSQL {other}:" not in result.stdout  # no table of failed cells
    assert result.stdout.rstrip().endswith(
        f"cells passed; not checked (server unreachable): PostgreSQL {other}"
    ), result.stdout
    [line] = [line for line in result.stderr.splitlines() if f"PostgreSQL {other}" in line]
    assert line.startswith(
        f"pgwire-mock conformance: PostgreSQL {other} not checked, its server is unreachable: "
        "cannot connect to"
    ), line
    assert "Traceback" not in result.stderr
