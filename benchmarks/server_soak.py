"""Attacks and load on ``pgwire-mock serve`` over loopback, in bounded time (issue #14).

    .venv/bin/python benchmarks/server_soak.py [--scale 1] [--only NAME ...] [--no-peer]
                                               [--changes 60000] [--auth-timeout 2]
                                               [--expect SECONDS] [--stall 5]

One fake walsender (``python -m pgwire_mock.serve`` with ``--auth md5``, a state file,
``--authentication-timeout``) serves one stream for the whole run and is measured from
/proc: VmRSS before and after each scenario, the peak (VmHWM, reset before each
scenario through /proc/PID/clear_refs), open descriptors, and tracebacks in its log.
With the peer (the default) the stream is a table of ``--changes`` rows inserted into
PostgreSQL 17 (``conformance.provision``) and recorded from it, so both servers stream
the same bytes; with ``--no-peer`` it is ``pgwire-mock synth`` output of as many changes.

Before the first scenario Debian's ``pg_recvlogical`` reads the whole stream on a new
slot; after each scenario it does so again from the same server ("real client OK" when
the output is byte-identical to that first read and to the recording). Scenarios, with
their counts at ``--scale 1`` (``--scale 5`` gives the issue's figures):

garbage     2,000 connections sending random bytes, random startup packets, HTTP, TLS
            records or cancel requests, then EOF; each must be closed by the server.
oversized   200 startup packets whose length word is 10,001 bytes to 1 GiB, followed by
            up to 1 MiB; each must be closed without the server buffering it.
preauth     20 clients that, asked for an MD5 password, send the header of a 1 GiB ``p``
            or ``Q``, wait a second for an answer, then push the body (up to 64 MiB):
            PostgreSQL's pre-authentication limits must close them on the header (FATAL
            08P01 for ``Q``) and RSS must not grow by 64 MiB.
slowloris   120 connections sending nothing, a bare length word, or half a startup
            packet, then holding still: ``--authentication-timeout`` must close every
            one within ``--expect`` seconds (counted, with when).
concurrent  20 pg_recvlogical processes reading the whole stream at once, each on its
            own new slot: every output byte-identical to the recording.
stalled     20 clients that start streaming with a 32 KiB receive buffer and never read,
            for ``--stall`` seconds; the real-client check runs while they hang on.
            RSS growth must stay under 1 MiB per client + 32 MiB (buffering the stream
            for each would be the stream's size per client).
disconnect  200 clients on temporary slots that read a random prefix of the stream and
            hang up, half with a reset (SO_LINGER 0); descriptors must come back.
ack-storm   a consumer that acknowledges every message, against the main fake (with
            --state-file), a second fake without one, and PostgreSQL: msg/s (best of
            two each) and ratios.
            Fails if the state file costs more than ``--ack-ratio-limit`` (2x; it cost
            84x before the fix).
kill-9      3 rounds, each on a new slot: kill -9 while a consumer acknowledges every
            message (twice), then once after it acknowledged the whole stream; each time
            the server restarts on the same state file. It must start, the slot's
            confirmed_flush_lsn (read back through SQL) must be at least what the file
            held just before the kill, in the last round exactly the stream's end, and the
            kill must leave no temporary file.

The named peer is PostgreSQL 17 in the same run, for garbage and oversized (connections
per second, what the client sees, the postmaster's RSS), slowloris (what
authentication_timeout closes, and when), concurrent (seconds, ratio) and ack-storm
(msg/s, ratio). Without peer: preauth (the provisioned server trusts loopback, so it never
asks for a password and has no pre-authentication phase to attack), stalled and
disconnect (PostgreSQL serves each connection from its own forked backend, so one
process's RSS and descriptors say nothing comparable), kill-9 (PostgreSQL writes
confirmed_flush only at checkpoints, so after a crash it may go back by design).

Every scenario prints: connections, seconds, RSS before -> after (peak) in MB, open
descriptors before -> after, errors seen by kind (what the clients saw; "traceback"
for one in the server's log), real client OK, and PASS/FAIL. Exit status 1 when any
scenario fails, 0 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import re
import select
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codec.values import LSN
from pgwire_mock.client import (
    ReplicationClientError,
    ReplicationConnection,
    WalData,
    md5_password,
)

ROOT = Path(__file__).resolve().parent.parent
USER, PASSWORD = "postgres", "soak"
MB = 1 << 20
PROTOCOL_3 = 196608
CANCEL_REQUEST = 80877102
SSL_REQUEST = 80877103
SCENARIOS = (
    "garbage",
    "oversized",
    "preauth",
    "slowloris",
    "concurrent",
    "stalled",
    "disconnect",
    "ack-storm",
    "kill-9",
)


# --- the stream --------------------------------------------------------------------------


@dataclass
class Stream:
    """A recording and what pg_recvlogical writes when it reads all of it."""

    path: Path
    options: dict[str, str]
    end: int  # the last message's position: pg_recvlogical's --endpos
    expected: bytes  # each payload and a newline, as pg_recvlogical -f writes
    messages: int
    major: int

    @classmethod
    def load(cls, path: Path) -> Stream:
        lines = path.read_text().splitlines()
        meta = json.loads(lines[0])["meta"]
        payloads, end = [], 0
        for line in lines[1:]:
            entry = json.loads(line)
            payloads.append(bytes.fromhex(entry["data"]))
            end = max(end, int(LSN.parse(entry["lsn"])))
        expected = b"".join(p + b"\n" for p in payloads)
        options = {k: str(v) for k, v in meta["options"].items()}
        return cls(path, options, end, expected, len(payloads), int(meta["major"]))


def _synth(folder: Path, changes: int) -> Path:
    out = folder / "soak.jsonl"
    spec = ROOT / "examples" / "synth-spec.yaml"
    command = [sys.executable, "-m", "pgwire_mock.cli", "synth", "--spec", str(spec)]
    command += ["--seed", "1", "--changes", str(changes), "--out", str(out)]
    subprocess.run(command, check=True, stderr=subprocess.DEVNULL)
    return out


class Peer:
    """PostgreSQL 17 holding the stream's table, with a slot made before the data for each
    reader (a new slot would start at the end of WAL and see nothing)."""

    TABLE, PUBLICATION = "soak", "soak_pub"

    def __init__(self, readers: int, auth_timeout: float) -> None:
        from conformance import provision

        external = provision.server_from_env(17)
        if external is not None:
            self.server: Any = external
        else:
            settings = {
                "max_wal_senders": str(readers + 10),
                "max_replication_slots": str(readers + 10),
                "authentication_timeout": f"{max(1, round(auth_timeout))}s",
            }
            installed = provision.install(17).installation
            self.server = provision.Cluster(installed, settings=settings).start()
        self.readers = readers
        self.host, self.port = self.server.host, self.server.port
        process = getattr(self.server, "_proc", None)
        self.postmaster_pid: int | None = process.pid if process is not None else None
        self.auth_timeout = auth_timeout

    def record(self, folder: Path, changes: int) -> Path:
        from conformance.fake import write_recording
        from pgwire_mock.client import capture_via_walsender

        with self.server.connect() as conn:
            self.auth_timeout = _seconds(conn.execute("SHOW authentication_timeout").fetchone())
            conn.execute(f"DROP PUBLICATION IF EXISTS {self.PUBLICATION}")
            conn.execute(f"DROP TABLE IF EXISTS {self.TABLE}")
            conn.execute(
                f"CREATE TABLE {self.TABLE} (id int PRIMARY KEY, name text, amount numeric, "
                "note text)"
            )
            conn.execute(f"CREATE PUBLICATION {self.PUBLICATION} FOR TABLE {self.TABLE}")
            for slot in ["soak_record", "peer_ack0", "peer_ack1", *self.reader_slots()]:
                conn.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                    "WHERE slot_name = %s",
                    (slot,),
                )
                conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
            for first in range(1, changes + 1, 100):  # transactions of 100 rows
                last = min(first + 99, changes)
                conn.execute(
                    f"INSERT INTO {self.TABLE} SELECT g, 'customer ' || g, g * 1.25, "
                    f"repeat(md5(g::text), 4) FROM generate_series({first}, {last}) g"
                )
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        options = {"proto_version": "1", "publication_names": self.PUBLICATION}
        captured = capture_via_walsender(
            self.server.replication_dsn,
            "soak_record",
            0,
            options,
            until_lsn=LSN(str(row[0])),
            idle_timeout=60,
        )
        meta = {
            "server_version": self.server.full_version,
            "major": 17,
            "scenario": "server_soak",
            "options": options,
            "description": f"{changes} inserts in transactions of 100",
        }
        return write_recording(folder / "soak.jsonl", meta, captured)

    def reader_slots(self) -> list[str]:
        return [f"peer_c{i}" for i in range(self.readers)]

    def rss_kib(self) -> int | None:
        return _status(self.postmaster_pid, "VmRSS") if self.postmaster_pid else None

    def stop(self) -> None:
        self.server.stop()


def _seconds(row: Any) -> float:
    text = str(row[0])
    match = re.fullmatch(r"(\d+)(ms|s|min)?", text)
    if match is None:
        return 60.0
    return float(match.group(1)) * {"ms": 0.001, "s": 1.0, "min": 60.0, None: 1.0}[match.group(2)]


# --- the fake under test ---------------------------------------------------------------


def _status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {key} for {pid}")


class Fake:
    """``python -m pgwire_mock.serve`` on a free port, its log in a file."""

    def __init__(self, folder: Path, name: str, args: list[str]) -> None:
        self.args = args
        self.log_path = folder / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.start()

    def start(self) -> None:
        log = self.log_path.open("ab")
        offset = log.tell()
        command = [sys.executable, "-m", "pgwire_mock.serve", "--port", "0", *self.args]
        self.process = subprocess.Popen(command, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            text = self.log_path.read_bytes()[offset:].decode(errors="replace")
            match = re.search(r"listening on 127\.0\.0\.1:(\d+)", text)
            if match:
                self.port = int(match.group(1))
                return
            if self.process.poll() is not None:
                raise SystemExit(f"the fake did not start:\n{text}")
            time.sleep(0.05)
        raise SystemExit("the fake did not start in 120 s")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def rss_kib(self) -> int:
        return _status(self.pid, "VmRSS")

    def reset_peak(self) -> None:
        with contextlib.suppress(OSError):  # not every kernel lets us: then peak = after
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")

    def peak_kib(self) -> int:
        return _status(self.pid, "VmHWM")

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def log_size(self) -> int:
        return self.log_path.stat().st_size

    def tracebacks_since(self, offset: int) -> int:
        with self.log_path.open("rb") as log:
            log.seek(offset)
            return log.read().count(b"Traceback (most recent call last)")

    def kill9(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# --- raw protocol ----------------------------------------------------------------------


def _startup(params: dict[str, str], code: int = PROTOCOL_3) -> bytes:
    body = struct.pack("!i", code)
    body += b"".join(k.encode() + b"\0" + v.encode() + b"\0" for k, v in params.items())
    body += b"\0"
    return struct.pack("!i", len(body) + 4) + body


def _message(tag: bytes, body: bytes) -> bytes:
    return tag + struct.pack("!i", len(body) + 4) + body


def _query(sql: str) -> bytes:
    return _message(b"Q", sql.encode() + b"\0")


class Wire:
    """Backend messages from a blocking socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.seen: list[bytes] = []

    def next(self) -> tuple[bytes, bytes] | None:
        """The next whole message, or None at EOF."""
        while True:
            if len(self.buffer) >= 5:
                (length,) = struct.unpack_from("!i", self.buffer, 1)
                if len(self.buffer) >= 1 + length:
                    tag, body = bytes(self.buffer[:1]), bytes(self.buffer[5 : 1 + length])
                    del self.buffer[: 1 + length]
                    self.seen.append(tag)
                    return tag, body
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                return None
            self.buffer += chunk

    def until(self, tags: bytes) -> bytes:
        """Read to a message whose tag is in ``tags``; its body. Errors raise."""
        while True:
            message = self.next()
            if message is None:
                raise ConnectionError("closed by the server")
            tag, body = message
            if tag == b"E":
                raise ConnectionError(_error_kind(body))
            if tag in tags:
                return body


def _error_kind(body: bytes) -> str:
    fields = {f[:1]: f[1:].decode(errors="replace") for f in body.split(b"\0") if f}
    return f"{fields.get(b'V', fields.get(b'S', '?'))} {fields.get(b'C', '?')}"


def _outcome(sock: socket.socket, timeout: float) -> str:
    """What the client sees until the server closes: "FATAL 08P01" (the first error),
    "closed" (EOF and no message), "closed after R" (EOF after other messages), "reset",
    or "not closed" (still open after ``timeout``)."""
    wire = Wire(sock)
    sock.settimeout(timeout)
    try:
        while True:
            message = wire.next()
            if message is None:
                break
            if message[0] == b"E":
                return _error_kind(message[1])
    except TimeoutError:
        return "not closed"
    except ConnectionResetError:
        return "reset"
    tags = "".join(sorted({t.decode(errors="replace") for t in wire.seen}))
    return f"closed after {tags}" if tags else "closed"


def _login(sock: socket.socket, wire: Wire, password: str | None) -> None:
    sock.sendall(_startup({"user": USER, "database": "postgres", "replication": "database"}))
    while True:
        body = wire.until(b"RZ")
        if wire.seen[-1] == b"Z":
            return
        (code,) = struct.unpack_from("!i", body)
        if code == 5:  # AuthenticationMD5Password
            answer = md5_password(USER, password or "", body[4:8])
            sock.sendall(_message(b"p", answer.encode() + b"\0"))
        elif code == 3:  # AuthenticationCleartextPassword
            sock.sendall(_message(b"p", (password or "").encode() + b"\0"))
        elif code != 0:
            raise ConnectionError(f"authentication request {code} not spoken here")


def _start_stream(
    host: str, port: int, password: str | None, stream: Stream, name: str, *, rcvbuf: int = 0
) -> tuple[socket.socket, Wire]:
    """A raw connection streaming a new temporary slot, after CopyBothResponse."""
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(30)
    try:
        sock.connect((host, port))
        wire = Wire(sock)
        _login(sock, wire, password)
        sock.sendall(_query(f'CREATE_REPLICATION_SLOT "{name}" TEMPORARY LOGICAL pgoutput'))
        wire.until(b"Z")
        options = ", ".join(f"\"{k}\" '{v}'" for k, v in stream.options.items())
        sock.sendall(_query(f'START_REPLICATION SLOT "{name}" LOGICAL 0/0 ({options})'))
        wire.until(b"W")
    except BaseException:
        sock.close()
        raise
    return sock, wire


# --- pg_recvlogical ----------------------------------------------------------------------


def _recvlogical(
    host: str, port: int, slot: str, stream: Stream, out: Path, *, create: bool, extra: str = ""
) -> list[str]:
    command = ["pg_recvlogical", "-h", host, "-p", str(port), "-U", USER, "-d", "postgres"]
    command += ["-S", slot, "--start", "-P", "pgoutput", "--no-loop", "-f", str(out)]
    command += ["--endpos", str(LSN(stream.end))]
    if create:
        command.append("--create-slot")
    for key, value in stream.options.items():
        command += ["-o", f"{key}={value}"]
    return command


def _env() -> dict[str, str]:
    return {**os.environ, "PGPASSWORD": PASSWORD, "PGCONNECT_TIMEOUT": "30"}


def _read_all(
    host: str, port: int, stream: Stream, folder: Path, label: str, *, create: bool = True
) -> tuple[bool, str]:
    """pg_recvlogical reads the whole stream on a new slot (dropped after); (ok, why not)."""
    out = folder / f"{label}.out"
    out.unlink(missing_ok=True)
    command = _recvlogical(host, port, label, stream, out, create=create)
    try:
        done = subprocess.run(
            command, check=False, env=_env(), capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired:
        return False, "pg_recvlogical timed out"
    if create:
        drop = ["pg_recvlogical", "-h", host, "-p", str(port), "-U", USER, "-d", "postgres"]
        subprocess.run(
            [*drop, "-S", label, "--drop-slot"], check=False, env=_env(), capture_output=True
        )
    if done.returncode != 0:
        return False, f"pg_recvlogical exit {done.returncode}: {done.stderr.strip()[:200]}"
    data = out.read_bytes() if out.exists() else b""
    out.unlink(missing_ok=True)
    if data != stream.expected:
        return False, f"output differs: {len(data):,} bytes, expected {len(stream.expected):,}"
    return True, ""


# --- scenarios ---------------------------------------------------------------------------


@dataclass
class Outcome:
    """What a scenario found, before the harness adds the server's side."""

    connections: int
    errors: Counter[str] = field(default_factory=Counter)
    passed: bool = True
    figures: str = ""
    peer: str = ""


@dataclass
class Context:
    fake: Fake
    stream: Stream
    folder: Path
    scale: float
    seed: int
    auth_timeout: float
    expect: float
    stall: float
    peer: Peer | None
    state_file: Path
    fake_args: list[str]
    ack_ratio_limit: float

    def count(self, base: int) -> int:
        return max(1, round(base * self.scale))


def _pool(work: Callable[[int], str], n: int, workers: int = 32) -> Counter[str]:
    with ThreadPoolExecutor(workers) as pool:
        return Counter(pool.map(work, range(n)))


def _garbage_payload(rng: random.Random) -> bytes:
    kind = rng.randrange(6)
    if kind == 0:
        return rng.randbytes(rng.randint(1, 512))
    if kind == 1:  # a plausible length word, then junk
        body = rng.randbytes(rng.randint(4, 600))
        return struct.pack("!i", len(body) + 4) + body
    if kind == 2:  # a startup packet with a random protocol code and parameters
        params = {rng.randbytes(8).hex(): rng.randbytes(8).hex() for _ in range(3)}
        return _startup(params, rng.randint(0, (1 << 31) - 1))
    if kind == 3:
        return b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"
    if kind == 4:  # a TLS record header and junk
        return b"\x16\x03\x01" + rng.randbytes(rng.randint(2, 300))
    key = rng.randbytes(8)
    return struct.pack("!ii", 16, CANCEL_REQUEST) + key


def _garbage_client(host: str, port: int, payload: bytes) -> str:
    try:
        with socket.create_connection((host, port), timeout=30) as sock:
            with contextlib.suppress(OSError):  # the server may have closed already
                sock.sendall(payload)
                sock.shutdown(socket.SHUT_WR)
            return _outcome(sock, 30)
    except OSError as err:
        return f"connect: {type(err).__name__}"


def _rate_run(
    host: str, port: int, payloads: list[bytes], client: Callable[[str, int, bytes], str]
) -> tuple[Counter[str], float]:
    began = time.perf_counter()
    seen = _pool(lambda i: client(host, port, payloads[i]), len(payloads))
    return seen, time.perf_counter() - began


def _peer_rate(
    ctx: Context, payloads: list[bytes], client: Callable[[str, int, bytes], str], ours: float
) -> str:
    peer = ctx.peer
    if peer is None:
        return ""
    before = peer.rss_kib()
    seen, seconds = _rate_run(peer.host, peer.port, payloads, client)
    after = peer.rss_kib()
    rate = len(payloads) / seconds
    rss = f"; postmaster RSS {before / 1024:.1f} -> {after / 1024:.1f} MB" if before else ""
    return (
        f"PostgreSQL 17: {rate:,.0f} conn/s, fake/real {ours / rate:.2f}x; "
        f"it saw {_kinds(seen)}{rss}"
    )


def scenario_garbage(ctx: Context) -> Outcome:
    rng = random.Random(ctx.seed)
    payloads = [_garbage_payload(rng) for _ in range(ctx.count(2000))]
    seen, seconds = _rate_run("127.0.0.1", ctx.fake.port, payloads, _garbage_client)
    rate = len(payloads) / seconds
    return Outcome(
        len(payloads),
        seen,
        passed="not closed" not in seen and not any(k.startswith("connect") for k in seen),
        figures=f"{rate:,.0f} conn/s",
        peer=_peer_rate(ctx, payloads, _garbage_client, rate),
    )


def _push(sock: socket.socket, limit: int) -> tuple[int, str | None]:
    """Send zeros until the server reacts or ``limit`` bytes went; (bytes sent, outcome
    if the server answered or closed meanwhile)."""
    chunk, sent = bytes(1 << 16), 0
    while sent < limit:
        readable, _, _ = select.select([sock], [], [], 0)
        if readable:
            return sent, _outcome(sock, 30)
        try:
            sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            return sent, "reset"
        sent += len(chunk)
    return sent, None


def _oversized_client(host: str, port: int, header: bytes) -> str:
    try:
        with socket.create_connection((host, port), timeout=30) as sock:
            sock.sendall(header)
            _sent, outcome = _push(sock, MB)
            return outcome or _outcome(sock, 30)
    except OSError as err:
        return f"connect: {type(err).__name__}"


def scenario_oversized(ctx: Context) -> Outcome:
    rng = random.Random(ctx.seed + 1)
    n = ctx.count(200)
    headers = [struct.pack("!ii", rng.randint(10_001, 1 << 30), PROTOCOL_3) for _ in range(n)]
    seen, seconds = _rate_run("127.0.0.1", ctx.fake.port, headers, _oversized_client)
    rate = n / seconds
    return Outcome(
        n,
        seen,
        passed=all(k in ("closed", "reset") for k in seen),
        figures=f"{rate:,.0f} conn/s",
        peer=_peer_rate(ctx, headers, _oversized_client, rate),
    )


def scenario_preauth(ctx: Context) -> Outcome:
    limit = 64 * MB
    sent_most = Counter[str]()
    lock = threading.Lock()

    def client(i: int) -> str:
        tag = b"pQ"[i % 2 : i % 2 + 1]
        try:
            with socket.create_connection(("127.0.0.1", ctx.fake.port), timeout=30) as sock:
                wire = Wire(sock)
                sock.sendall(_startup({"user": USER, "database": "postgres"}))
                body = wire.until(b"R")
                if struct.unpack_from("!i", body)[0] != 5:
                    return "not asked for an MD5 password"
                sock.sendall(tag + struct.pack("!i", 1 << 30))
                # PostgreSQL answers the header alone; give the server a second to do so
                # before pushing the body, so that its answer is not lost to a reset.
                sent, outcome = 0, None
                if select.select([sock], [], [], 1.0)[0]:
                    outcome = _outcome(sock, 30)
                else:
                    sent, outcome = _push(sock, limit)
                with lock:
                    sent_most[tag.decode()] = max(sent_most[tag.decode()], sent)
                return f"{tag.decode()}: {outcome or _outcome(sock, 30)}"
        except OSError as err:
            return f"{type(err).__name__}: {err}"

    n = ctx.count(20)
    before = ctx.fake.rss_kib()
    seen = _pool(client, n, workers=4)
    held = [k for k in seen if k.endswith("not closed")]
    growth = (ctx.fake.peak_kib() - before) * 1024
    return Outcome(
        n,
        seen,
        passed=not held and max(sent_most.values(), default=0) < limit and growth < limit,
        figures="most sent before the close: "
        + ", ".join(f"{tag} {sent / MB:.1f} MiB" for tag, sent in sorted(sent_most.items())),
    )


def _slowloris(host: str, port: int, n: int, wait: float) -> tuple[list[float], Counter[str]]:
    """Open ``n`` connections that stall before authenticating; the seconds after which
    the server closed each one (those it closed within ``wait``), and what they saw."""
    startup = _startup({"user": USER, "database": "postgres"})
    sockets: dict[socket.socket, float] = {}
    seen: Counter[str] = Counter()
    closed: list[float] = []
    selector = selectors.DefaultSelector()
    try:
        for i in range(n):
            sock = socket.create_connection((host, port), timeout=30)
            sock.sendall((b"", startup[:4], startup[: len(startup) // 2])[i % 3])
            sock.setblocking(False)
            sockets[sock] = time.monotonic()
            selector.register(sock, selectors.EVENT_READ)
        deadline = time.monotonic() + wait
        while sockets and time.monotonic() < deadline:
            for key, _ in selector.select(max(0.0, deadline - time.monotonic())):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(1 << 16)
                except ConnectionResetError:
                    data = b""
                    seen["reset"] += 1
                else:
                    if data:
                        seen[f"answered {data[:1]!r}"] += 1
                        continue
                    seen["closed"] += 1
                closed.append(time.monotonic() - sockets.pop(sock))
                selector.unregister(sock)
                sock.close()
        if sockets:
            seen["not closed"] += len(sockets)
    finally:
        for sock in sockets:
            sock.close()
        selector.close()
    return closed, seen


def _spread(times: list[float]) -> str:
    if not times:
        return "none"
    times = sorted(times)
    return f"{times[0]:.2f}/{times[len(times) // 2]:.2f}/{times[-1]:.2f} s (min/median/max)"


def scenario_slowloris(ctx: Context) -> Outcome:
    n = ctx.count(120)
    closed, seen = _slowloris("127.0.0.1", ctx.fake.port, n, ctx.expect)
    peer = ""
    if ctx.peer is not None:
        timeout = ctx.peer.auth_timeout
        p_closed, p_seen = _slowloris(ctx.peer.host, ctx.peer.port, n, timeout + 10)
        peer = (
            f"PostgreSQL 17 (authentication_timeout {timeout:g} s): closed "
            f"{len(p_closed)}/{n} after {_spread(p_closed)}; saw {_kinds(p_seen)}"
        )
    return Outcome(
        n,
        seen,
        passed=len(closed) == n,
        figures=f"closed {len(closed)}/{n} within {ctx.expect:g} s, after {_spread(closed)} "
        f"(--authentication-timeout {ctx.auth_timeout:g})",
        peer=peer,
    )


def _concurrent(host: str, port: int, ctx: Context, slots: list[str], create: bool) -> tuple:
    outs = [ctx.folder / f"{slot}.out" for slot in slots]
    began = time.perf_counter()
    processes = [
        subprocess.Popen(
            _recvlogical(host, port, slot, ctx.stream, out, create=create),
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for slot, out in zip(slots, outs, strict=True)
    ]
    seen: Counter[str] = Counter()
    for process in processes:
        _, err = process.communicate(timeout=600)
        if process.returncode != 0:
            seen[f"pg_recvlogical exit {process.returncode}: {err.decode()[:80].strip()}"] += 1
    seconds = time.perf_counter() - began
    for out in outs:
        data = out.read_bytes() if out.exists() else None
        if data is not None and data != ctx.stream.expected:
            seen["output differs"] += 1
        out.unlink(missing_ok=True)
    return seconds, seen


def scenario_concurrent(ctx: Context) -> Outcome:
    n = ctx.count(20)
    slots = [f"conc_{i}" for i in range(n)]
    seconds, seen = _concurrent("127.0.0.1", ctx.fake.port, ctx, slots, create=True)
    with ReplicationConnection.connect(
        host="127.0.0.1", port=ctx.fake.port, user=USER, password=PASSWORD, dbname="postgres"
    ) as conn:
        for slot in slots:
            conn.drop_slot(slot)
    total = n * len(ctx.stream.expected) / MB
    peer = ""
    if ctx.peer is not None:
        p_seconds, p_seen = _concurrent(
            ctx.peer.host, ctx.peer.port, ctx, ctx.peer.reader_slots()[:n], create=False
        )
        peer = (
            f"PostgreSQL 17: {p_seconds:.2f} s ({total / p_seconds:,.1f} MB/s), fake/real "
            f"{p_seconds / seconds:.2f}x; errors there: {_kinds(p_seen)}"
        )
    return Outcome(
        n,
        seen,
        passed=not seen,
        figures=f"all {n} outputs byte-identical: {not seen}; {seconds:.2f} s, "
        f"{total / seconds:,.1f} MB/s in all",
        peer=peer,
    )


def scenario_stalled(ctx: Context) -> Outcome:
    n = ctx.count(20)
    sockets: list[socket.socket] = []
    seen: Counter[str] = Counter()
    samples: list[int] = []
    try:
        for i in range(n):
            try:
                sock, _ = _start_stream(
                    "127.0.0.1", ctx.fake.port, PASSWORD, ctx.stream, f"stall_{i}", rcvbuf=32768
                )
            except (OSError, ConnectionError) as err:
                seen[f"start: {err}"] += 1
                continue
            sockets.append(sock)
        started = ctx.fake.rss_kib()
        deadline = time.monotonic() + ctx.stall
        while time.monotonic() < deadline:
            time.sleep(0.25)
            samples.append(ctx.fake.rss_kib())
        # The real client, while they all hang on.
        ok, why = _read_all("127.0.0.1", ctx.fake.port, ctx.stream, ctx.folder, "chk_stalled")
        if not ok:
            seen[f"real client during the stall: {why}"] += 1
        samples.append(ctx.fake.rss_kib())
    finally:
        for sock in sockets:
            sock.close()
    bound = n * 1024 + 32 * 1024
    growth = max(samples, default=started) - started
    return Outcome(
        n,
        seen,
        passed=not seen and growth <= bound,
        figures=f"RSS over the {ctx.stall:g} s stall: {started / 1024:.1f} MB at start, peak "
        f"{max(samples) / 1024:.1f} MB (growth {growth / 1024:.1f} MB, bound {bound / 1024:.0f}"
        f" MB; the stream is {len(ctx.stream.expected) / MB:.1f} MB per client)",
    )


def scenario_disconnect(ctx: Context) -> Outcome:
    rng = random.Random(ctx.seed + 2)
    n = ctx.count(200)
    cut = [rng.randint(0, len(ctx.stream.expected)) for _ in range(n)]
    fds = ctx.fake.fds()

    def client(i: int) -> str:
        try:
            sock, wire = _start_stream("127.0.0.1", ctx.fake.port, PASSWORD, ctx.stream, f"d{i}")
        except (OSError, ConnectionError) as err:
            return f"start: {err}"
        with sock:
            got = len(wire.buffer)
            while got < cut[i]:
                chunk = sock.recv(1 << 16)
                if not chunk:
                    return "closed by the server"
                got += len(chunk)
            if i % 2:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return "hung up (reset)" if i % 2 else "hung up"

    seen = _pool(client, n, workers=16)
    # The server notices the last hang-ups a moment later.
    deadline = time.monotonic() + 10
    while ctx.fake.fds() > fds and time.monotonic() < deadline:
        time.sleep(0.1)
    after = ctx.fake.fds()
    return Outcome(
        n,
        seen,
        passed=set(seen) <= {"hung up", "hung up (reset)"} and after <= fds,
        figures=f"descriptors {fds} -> {after}",
    )


def _ack_consumer(
    host: str,
    port: int,
    password: str | None,
    slot: str,
    create: bool,
    stream: Stream,
    stop: threading.Event | None = None,
) -> tuple[int, float, int]:
    """Stream ``slot`` acknowledging every message; (messages, seconds, last acked)."""
    messages, acked = 0, 0
    with ReplicationConnection.connect(
        host=host, port=port, user=USER, password=password, dbname="postgres", timeout=30
    ) as conn:
        if create:
            conn.create_slot(slot)
        began = last = time.perf_counter()
        for event in conn.start_replication(slot, 0, stream.options):
            if not isinstance(event, WalData):
                # Keepalives keep the connection alive; they must not keep us waiting.
                if time.perf_counter() - last > 30:
                    raise TimeoutError(f"no data for 30 s after {LSN(acked)}")
                continue
            messages += 1
            last = time.perf_counter()
            acked = int(event.wal_start)
            conn.send_status(flush=acked)
            if acked >= stream.end:
                break
        seconds = time.perf_counter() - began
        # CopyDone, and read what is in flight: closing with unread data would reset the
        # connection, and a reset drops the last acknowledgements still in the server's
        # receive buffer (on PostgreSQL too).
        with contextlib.suppress(ReplicationClientError):
            conn.stop()
        return messages, seconds, acked


def scenario_ack_storm(ctx: Context) -> Outcome:
    """Best of two runs each, the machine being shared."""
    seen: Counter[str] = Counter()
    stream = ctx.stream

    def best(host: str, port: int, password: str | None, slots: list[str], create: bool) -> float:
        rates = []
        for slot in slots:
            count, seconds, _ = _ack_consumer(host, port, password, slot, create, stream)
            if count != stream.messages:
                seen[f"read {count} of {stream.messages} messages"] += 1
            rates.append(count / seconds)
        return max(rates)

    rate_file = best("127.0.0.1", ctx.fake.port, PASSWORD, ["ack_state0", "ack_state1"], True)
    plain_fake = Fake(ctx.folder, "fake-no-state", list(_without_state(ctx.fake_args)))
    try:
        rate_plain = best("127.0.0.1", plain_fake.port, PASSWORD, ["ack0", "ack1"], True)
    finally:
        plain_fake.stop()
    ratio = rate_plain / rate_file
    peer = ""
    if ctx.peer is not None:
        rate_real = best(ctx.peer.host, ctx.peer.port, None, ["peer_ack0", "peer_ack1"], False)
        peer = (
            f"PostgreSQL 17: {rate_real:,.0f} msg/s; fake/real {rate_file / rate_real:.2f}x "
            f"with the state file, {rate_plain / rate_real:.2f}x without"
        )
    return Outcome(
        6 if ctx.peer else 4,
        seen,
        passed=not seen and ratio <= ctx.ack_ratio_limit,
        figures=f"{stream.messages:,} messages, each acked: {rate_file:,.0f} msg/s with "
        f"--state-file, {rate_plain:,.0f} without ({ratio:.2f}x)",
        peer=peer,
    )


def _without_state(args: list[str]) -> Iterable[str]:
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == "--state-file":
            skip = True
            continue
        yield arg


def _saved_flush(path: Path, slot: str) -> int | None:
    try:
        slots = json.loads(path.read_text())["slots"]
    except (OSError, ValueError, KeyError):
        return None
    return next((int(s["confirmed_flush"]) for s in slots if s["name"] == slot), None)


def _served_flush(port: int, slot: str) -> int | None:
    with ReplicationConnection.connect(
        host="127.0.0.1", port=port, user=USER, password=PASSWORD, dbname="postgres"
    ) as conn:
        result = conn.execute(
            f"SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '{slot}'"
        )
    return int(LSN.parse(result.rows[0][0])) if result.rows and result.rows[0][0] else None


def scenario_kill9(ctx: Context) -> Outcome:
    rng = random.Random(ctx.seed + 3)
    seen: Counter[str] = Counter()
    rounds, notes = 3, []
    fake = ctx.fake
    for r in range(rounds):
        last, slot = r == rounds - 1, f"ack_kill{r}"
        with ReplicationConnection.connect(
            host="127.0.0.1", port=fake.port, user=USER, password=PASSWORD, dbname="postgres"
        ) as conn:
            conn.create_slot(slot)
        result: dict[str, Any] = {}

        def consume(port: int = fake.port, name: str = slot, box: dict[str, Any] = result) -> None:
            try:
                box["done"] = _ack_consumer("127.0.0.1", port, PASSWORD, name, False, ctx.stream)
            except Exception as err:  # the server dies under it: expected
                box["error"] = type(err).__name__

        consumer = threading.Thread(target=consume)
        consumer.start()
        if last:
            consumer.join()
            time.sleep(0.5)  # past the save coalescing interval (0.1 s)
        else:
            time.sleep(rng.uniform(0.3, 1.0))
        saved = _saved_flush(ctx.state_file, slot) or 0
        fake.kill9()
        consumer.join()
        left = len(list(ctx.state_file.parent.glob(f".{ctx.state_file.name}.*.tmp")))
        if left:
            seen["temporary files left by the kill"] += left
        fake.start()
        served = _served_flush(fake.port, slot)
        if served is None or served < saved:
            seen[f"confirmed_flush went back: {saved:X} -> {served}"] += 1
        if last and served != ctx.stream.end:
            seen[f"confirmed_flush {served} after a settled stream, expected {ctx.stream.end}"] += 1
        done = result.get("done")
        how = result.get("error") or f"acked {done[0]:,} messages to {LSN(done[2])}"
        notes.append(f"{LSN(saved)} -> {LSN(served or 0)} ({how})")
    return Outcome(
        rounds,
        seen,
        passed=not seen,
        figures="kill -9, restart; confirmed_flush in the file before -> served after: "
        + ", ".join(notes),
    )


RUNNERS: dict[str, Callable[[Context], Outcome]] = {
    "garbage": scenario_garbage,
    "oversized": scenario_oversized,
    "preauth": scenario_preauth,
    "slowloris": scenario_slowloris,
    "concurrent": scenario_concurrent,
    "stalled": scenario_stalled,
    "disconnect": scenario_disconnect,
    "ack-storm": scenario_ack_storm,
    "kill-9": scenario_kill9,
}


# --- the harness -------------------------------------------------------------------------


def _kinds(seen: Counter[str]) -> str:
    return ", ".join(f"{kind} x{count}" for kind, count in seen.most_common()) or "none"


@dataclass
class Row:
    name: str
    outcome: Outcome
    seconds: float
    rss: tuple[int, int, int]  # KiB: before, after, peak
    fds: tuple[int, int]
    client_ok: bool
    client_why: str
    passed: bool


def _run(name: str, ctx: Context) -> Row:
    fake = ctx.fake
    rss_before, fds_before, log_at = fake.rss_kib(), fake.fds(), fake.log_size()
    fake.reset_peak()
    began = time.perf_counter()
    try:
        outcome = RUNNERS[name](ctx)
    except Exception as err:  # a scenario that breaks is a failure, reported as one
        outcome = Outcome(0, Counter({f"scenario raised {type(err).__name__}: {err}": 1}))
        outcome.passed = False
    seconds = time.perf_counter() - began
    if not fake.alive:
        outcome.errors["server died"] += 1
        return Row(name, outcome, seconds, (rss_before, 0, 0), (fds_before, 0), False, "", False)
    # After kill-9 the fake is a new process: the log offset still counts its tracebacks.
    tracebacks = fake.tracebacks_since(log_at)
    if tracebacks:
        outcome.errors["traceback in the server log"] += tracebacks
    rss = (rss_before, fake.rss_kib(), max(fake.peak_kib(), fake.rss_kib()))
    ok, why = _read_all(
        "127.0.0.1", fake.port, ctx.stream, ctx.folder, f"chk_{name}".replace("-", "_")
    )
    passed = outcome.passed and ok and not tracebacks
    return Row(name, outcome, seconds, rss, (fds_before, fake.fds()), ok, why, passed)


def _print(row: Row) -> None:
    before, after, peak = (v / 1024 for v in row.rss)
    o = row.outcome
    print(
        f"{row.name:<11} {o.connections:>6} {row.seconds:>7.1f} "
        f"{before:>7.1f} {after:>7.1f} {peak:>7.1f} {row.fds[0]:>4}->{row.fds[1]:<4} "
        f"{'yes' if row.client_ok else 'NO':<9} {'PASS' if row.passed else 'FAIL'}",
        flush=True,
    )
    print(f"    errors: {_kinds(o.errors)}")
    if o.figures:
        print(f"    {o.figures}")
    if o.peer:
        print(f"    peer: {o.peer}")
    if not row.client_ok and row.client_why:
        print(f"    real client: {row.client_why}")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every count")
    parser.add_argument("--only", action="append", choices=SCENARIOS, help="run only these")
    parser.add_argument("--no-peer", dest="peer", action="store_false", help="no PostgreSQL")
    parser.add_argument("--changes", type=int, default=60_000, help="rows in the stream")
    parser.add_argument(
        "--auth-timeout", type=float, default=2.0, help="the fake's --authentication-timeout"
    )
    parser.add_argument(
        "--expect", type=float, help="seconds slowloris waits for closes (auth timeout + 8)"
    )
    parser.add_argument("--stall", type=float, default=5.0, help="seconds readers stall")
    parser.add_argument(
        "--ack-ratio-limit",
        type=float,
        default=2.0,
        help="fail ack-storm when the state file costs more than this factor (default 2)",
    )
    parser.add_argument("--seed", type=int, default=14)
    args = parser.parse_args(argv)
    if shutil.which("pg_recvlogical") is None:
        raise SystemExit("pg_recvlogical not found (Debian's postgresql-client)")
    names = [n for n in SCENARIOS if args.only is None or n in args.only]
    expect = args.expect if args.expect is not None else args.auth_timeout + 8

    with tempfile.TemporaryDirectory(prefix="server-soak-") as tmp:
        folder = Path(tmp)
        peer: Peer | None = None
        fake: Fake | None = None
        try:
            began = time.perf_counter()
            if args.peer:
                readers = max(1, round(20 * args.scale))
                peer = Peer(readers, args.auth_timeout)
                recording = peer.record(folder, args.changes)
            else:
                recording = _synth(folder, args.changes)
            stream = Stream.load(recording)
            state_file = folder / "state" / "state.json"
            state_file.parent.mkdir()
            fake_args = ["--script", str(recording), "--auth", "md5", "--user"]
            fake_args += [f"{USER}:{PASSWORD}", "--state-file", str(state_file)]
            fake_args += ["--authentication-timeout", f"{args.auth_timeout:g}"]
            fake_args += ["--max-connections", "100000", "--max-wal-senders", "100000"]
            fake = Fake(folder, "fake", fake_args)
            ok, why = _read_all("127.0.0.1", fake.port, stream, folder, "chk_start")
            digest = hashlib.sha256(stream.expected).hexdigest()[:12]
            print(
                f"stream: {stream.messages:,} messages, {len(stream.expected) / MB:.1f} MB "
                f"(sha256 {digest}), PostgreSQL {stream.major} "
                f"{'recorded from the peer' if peer else 'synthetic'}; "
                f"setup {time.perf_counter() - began:.1f} s; first read OK: {ok} {why}"
            )
            if not ok:
                return 1
            ctx = Context(
                fake,
                stream,
                folder,
                args.scale,
                args.seed,
                args.auth_timeout,
                expect,
                args.stall,
                peer,
                state_file,
                fake_args,
                args.ack_ratio_limit,
            )
            print(
                f"{'scenario':<11} {'conns':>6} {'seconds':>7} {'RSS MB':>7} {'after':>7} "
                f"{'peak':>7} {'fds':<10} {'client OK':<9} result"
            )
            rows = []
            for name in names:
                row = _run(name, ctx)
                rows.append(row)
                _print(row)
                if not fake.alive:
                    print("the server died: stopping (its log follows)")
                    print(fake.log_path.read_text()[-3000:])
                    break
            total = time.perf_counter() - began
            failed = [r.name for r in rows if not r.passed]
            print(
                f"total {total:.0f} s; {len(rows) - len(failed)}/{len(names)} passed"
                + (f"; FAILED: {', '.join(failed)}" if failed else "")
            )
            return 1 if failed or len(rows) < len(names) else 0
        finally:
            if fake is not None:
                fake.stop()
            if peer is not None:
                peer.stop()


if __name__ == "__main__":
    sys.exit(main())
