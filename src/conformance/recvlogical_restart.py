"""pg_recvlogical across a fast restart of its server, on real PostgreSQL and on the fake.

Debian's ``/usr/bin/pg_recvlogical`` streams into a file (``-f``, ``-F 1``: flushed and
confirmed every second), without ``--no-loop``: two commits reach it, the server restarts
fast (``pg_ctl restart -m fast``; the fake's ``WalSender.restart``), pg_recvlogical
finds its stream ended, waits its 5 s and connects again from the position it had
written, and a third commit reaches it; then it is stopped with SIGINT. What it wrote
(:func:`conformance.live_observed.plain_message` of each payload,
:mod:`pgwire_mock.recvlogical` reading the file) and what it said on stderr (``-v``,
positions taken out, the per-second confirmations left out) must be the same.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from codec import DecodeError
from codec.pgoutput import Commit, Decoder
from conformance.live_observed import plain_message
from conformance.live_types import TRANSACTIONS
from conformance.server_restart import RestartSide
from pgwire_mock.recvlogical import read_recvlogical
from pgwire_mock.streamfile import StreamFileError

__all__ = ["PG_RECVLOGICAL", "observed_recvlogical_restart"]

PG_RECVLOGICAL = Path("/usr/bin/pg_recvlogical")
_LSN = re.compile(r"\b[0-9A-F]{1,8}/[0-9A-F]{1,8}\b")


def observed_recvlogical_restart(
    side: RestartSide, options: Mapping[str, str], out: Path, *, timeout: float = 40.0
) -> dict[str, Any]:
    """The story of the module docstring on one side, as pg_recvlogical saw it."""
    args = [str(PG_RECVLOGICAL), "-d", side.dsn, "-S", side.slot, "--start", "-f", str(out)]
    args += ["-F", "1", "-s", "1", "-v", "-o", f"publication_names={side.publication}"]
    for key, value in options.items():
        args += ["-o", f"{key}={value}"]
    process = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    try:
        side.commit(TRANSACTIONS[0])
        side.commit(TRANSACTIONS[1])
        before = _wait_for(out, lambda got: _commits(got) >= 2, timeout)
        time.sleep(1.5)  # its flush and confirmation of the second (-F 1)
        side.begin_shutdown()
        side.start_again()
        side.commit(TRANSACTIONS[3])
        payloads = _wait_for(out, lambda got: any(b"four" in p for p in got), timeout)
        time.sleep(1.5)
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=timeout)
    decoder = Decoder()
    messages = [decoder.decode(p) for p in payloads]
    last_before = [m for m in messages[: len(before)] if isinstance(m, Commit)][-1]
    starts = [line for line in stderr.splitlines() if "starting log streaming at" in line]
    return {
        "messages": [plain_message(m) for m in messages],
        "stderr": [
            _LSN.sub("<lsn>", line)
            for line in stderr.splitlines()
            if "confirming write up to" not in line  # once a second: its clock's
        ],
        # It comes back from what it wrote: the end of the last commit before.
        "restarted_at_its_last_commit": _LSN.findall(starts[-1])[-1]
        == _format(last_before.end_lsn),
    }


def _format(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def _commits(payloads: list[bytes]) -> int:
    return sum(p[:1] == b"C" for p in payloads)


def _wait_for(out: Path, done: Callable[[list[bytes]], bool], timeout: float) -> list[bytes]:
    """The payloads pg_recvlogical wrote, once ``done`` holds for them."""
    deadline = time.monotonic() + timeout
    while True:
        payloads = _payloads(out)
        if done(payloads):
            return payloads
        if time.monotonic() > deadline:
            raise AssertionError(f"pg_recvlogical wrote {len(payloads)} messages only")
        time.sleep(0.1)


def _payloads(out: Path) -> list[bytes]:
    if not out.exists():
        return []
    try:
        with out.open("rb") as source:
            return list(read_recvlogical(source, str(out)))
    except (DecodeError, StreamFileError):
        return []  # a message half written: read again
