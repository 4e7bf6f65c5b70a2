"""A raw physical-replication client for the differential tests (trust auth only), and
the steps those tests share: Debian's pg_receivewal, a provisioned server restarted as a
standby, the switch point of timeline 2.

The client speaks codec.wire over a blocking socket and returns every backend message as
decoded, so that a test can compare the real server's answer and the fake's message by
message.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from codec import replication
from codec.values import LSN
from codec.wire import (
    AuthenticationOk,
    BackendMessage,
    BackendReader,
    CommandComplete,
    CopyBothResponse,
    CopyData,
    CopyDone,
    DataRow,
    ErrorResponse,
    Query,
    ReadyForQuery,
    StartupMessage,
    Terminate,
)
from conformance import provision

PG_RECEIVEWAL = Path("/usr/bin/pg_receivewal")


class RawPhysical:
    """One ``replication=true`` connection; messages as the server sent them."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = BackendReader()

    def send(self, *messages: object) -> None:
        self.sock.sendall(b"".join(m.encode() for m in messages))  # type: ignore[attr-defined]

    def next(self, timeout: float = 10.0) -> BackendMessage | None:
        """The next message, or None after ``timeout`` seconds of silence or at EOF."""
        deadline = time.monotonic() + timeout
        while True:
            message = self.reader.next_message()
            if message is not None:
                return message
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                return None
            if not data:
                return None
            self.reader.feed(data)

    def until_ready(self, timeout: float = 10.0) -> list[BackendMessage]:
        out: list[BackendMessage] = []
        while True:
            message = self.next(timeout)
            assert message is not None, f"no ReadyForQuery; got {out}"
            out.append(message)
            if isinstance(message, ReadyForQuery):
                return out

    def command(self, sql: str) -> list[BackendMessage]:
        self.send(Query(sql))
        return self.until_ready()

    def start(self, sql: str) -> list[BackendMessage]:
        """Send START_REPLICATION; the messages up to CopyBothResponse or ReadyForQuery."""
        self.send(Query(sql))
        out: list[BackendMessage] = []
        while True:
            message = self.next()
            assert message is not None, f"no answer to {sql}; got {out}"
            out.append(message)
            if isinstance(message, CopyBothResponse | ReadyForQuery):
                return out

    def xlog(self, count: int, timeout: float = 10.0) -> list[replication.ServerCopyData]:
        """The next ``count`` XLogData (keepalives skipped)."""
        out: list[replication.ServerCopyData] = []
        while len(out) < count:
            message = self.next(timeout)
            assert isinstance(message, CopyData), message
            decoded = replication.decode_server_copy_data(message.data)
            if isinstance(decoded, replication.XLogData):
                out.append(decoded)
        return out

    def finish(self) -> list[BackendMessage]:
        """CopyDone; what follows up to ReadyForQuery, CopyData (in flight) left out."""
        self.send(CopyDone())
        return [m for m in self.until_ready() if not isinstance(m, CopyData)]


@contextmanager
def physical_connection(
    host: str, port: int, user: str = "postgres", replication: str = "true"
) -> Iterator[RawPhysical]:
    """``replication="database"``: a logical walsender connected to database postgres."""
    sock = socket.create_connection((host, port), timeout=10)
    conn = RawPhysical(sock)
    try:
        params = (("user", user), ("database", "postgres"), ("replication", replication))
        conn.send(StartupMessage(params))
        messages = conn.until_ready()
        assert isinstance(messages[0], AuthenticationOk), messages[0]
        yield conn
        conn.send(Terminate())
    finally:
        sock.close()


def error_fields(messages: list[BackendMessage]) -> dict[str, str]:
    """The fields of the one ErrorResponse among ``messages``, file/line/routine included."""
    errors = [m for m in messages if isinstance(m, ErrorResponse)]
    assert len(errors) == 1, messages
    return dict(errors[0].fields)


def tags(messages: list[BackendMessage]) -> list[str]:
    return [m.command_tag for m in messages if isinstance(m, CommandComplete)]


def receivewal(
    dsn: str, directory: Path, endpos: int, slot: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Debian's pg_receivewal 15 into ``directory`` until it has WAL past ``endpos``."""
    directory.mkdir(exist_ok=True)
    command = [PG_RECEIVEWAL, "-D", directory, "-d", dsn, "-E", str(LSN(endpos))]
    if slot is not None:
        command += ["-S", slot]
    return subprocess.run(
        [*command, "-n", "--no-sync"], capture_output=True, text=True, timeout=60, check=False
    )


def server_prefix(server: provision.Cluster) -> Path:
    """Where ``server``'s binaries are: its staged copy when it runs as another user."""
    assert server.run_dir is not None
    staged = server.run_dir / "pg"
    return staged if staged.exists() else server.installation.prefix


def restart_as_standby(server: provision.Cluster) -> None:
    """A fast shutdown (timeline 1 ends with its checkpoint), then a start with
    ``standby.signal``: a standby with no primary, in recovery at the end of its WAL."""
    server._terminate()
    signal = server.data_dir / "standby.signal"
    signal.write_text("")
    if server._user is not None:
        os.chown(signal, server._user.uid, server._user.gid)
    server._launch(server_prefix(server))


def switch_point(host: str, port: int) -> int:
    """Where timeline 1 ends, from the server's ``TIMELINE_HISTORY 2``."""
    with physical_connection(host, port) as conn:
        row = conn.command("TIMELINE_HISTORY 2")[1]
    assert isinstance(row, DataRow), row
    return int(LSN.parse(bytes(row.values[1] or b"").decode().split()[1]))
