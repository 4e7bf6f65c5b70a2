"""``pgwire-mock serve`` processes as sides of the stories that stop or restart a server:
the story's script written to a file, rows posted as steps over ``--control``, and a
restart that is a new process on the same port and ``--state-file`` (what a test outside
Python does), where conformance.server_restart's fake side restarts in its process."""

from __future__ import annotations

import json
import signal
import socket
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from codec.values import LSN
from conformance.live_sides import story_script
from conformance.live_types import Row
from conformance.serve_process import ServeProcess
from conformance.server_restart import RestartSide

__all__ = ["ServedServer", "row_changes", "row_steps", "serve_restart_side", "write_script"]


def write_script(directory: Path, major: int, names: tuple[str, str, str]) -> Path:
    """The story's script (conformance.live_sides.story_script) as a file in
    ``directory``."""
    from pgwire_mock.script import dump_script  # noqa: PLC0415

    path = directory / "script.yaml"
    path.write_text(dump_script(story_script(major, names)))
    return path


def row_changes(table: str, rows: Sequence[Row]) -> list[dict[str, Any]]:
    """The story's rows as a script's changes, in their YAML/JSON form."""
    name = f"public.{table}"
    return [
        {"delete": name, "key": {"id": key}}
        if kind == "delete"
        else {kind: name, "values": {"id": key, "v": value}}
        for kind, key, value in rows
    ]


def row_steps(table: str, rows: Sequence[Row]) -> str:
    """One transaction of the story's rows, as ``POST /wal`` takes it."""
    return json.dumps([{"transaction": row_changes(table, rows)}])


class ServedServer:
    """A ``serve`` process that a story stops and starts again: every start on the same
    port (picked free once) with the same arguments."""

    def __init__(self, args: Sequence[str]) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        self.args = ["--port", str(self.port), *args]
        self.process = ServeProcess(self.args)

    def post(self, path: str, body: object) -> dict[str, Any]:
        text = body if isinstance(body, str) else json.dumps(body)
        status, answer = self.process.request("POST", path, text)
        if status != 200:
            raise AssertionError(f"POST {path}: {status} {answer}")
        result: dict[str, Any] = answer
        return result

    def status(self) -> dict[str, Any]:
        _, answer = self.process.request("GET", "/wal")
        result: dict[str, Any] = answer
        return result

    def send_signal(self, signum: int) -> None:
        self.process.process.send_signal(signum)

    def start_again(self, timeout: float = 60.0) -> None:
        """Wait for the process to end, then start a new one."""
        self.process.wait(timeout)
        self.process = ServeProcess(self.args)

    def stop(self) -> None:
        self.process.stop()


class _OpenTransaction:
    """A transaction left open over HTTP: ``begin``, ``write`` and end steps."""

    def __init__(self, server: ServedServer, table: str, name: str) -> None:
        self.server, self.table, self.name = server, table, name
        server.post("/wal", [{"begin": name}])

    def write(self, rows: Sequence[Row]) -> None:
        changes = row_changes(self.table, rows)
        self.server.post("/wal", [{"write": self.name, "changes": changes}])

    def commit(self) -> None:
        self.server.post("/wal", [{"commit": self.name}])

    def rollback(self) -> None:
        self.server.post("/wal", [{"rollback": self.name}])

    def prepare(self, gid: str) -> None:
        self.server.post("/wal", [{"prepare": self.name, "gid": gid}])


@contextmanager
def serve_restart_side(
    major: int, names: tuple[str, str, str], *extra: str
) -> Iterator[RestartSide]:
    """A ``serve`` process emulating ``major`` with the story's script and a state file
    kept as PostgreSQL keeps its disk (``--slot-saves postgresql``; ``extra``: more of
    its options); stopped by its signals and started again as a new process, which has
    only what the state file and the WAL journal kept."""
    with (
        tempfile.TemporaryDirectory(prefix="pgwire-mock-serve-") as directory,
        _serve_restart_side(major, names, Path(directory), extra) as side,
    ):
        yield side


@contextmanager
def _serve_restart_side(
    major: int, names: tuple[str, str, str], directory: Path, extra: Sequence[str]
) -> Iterator[RestartSide]:
    table, publication, slot = names
    script = write_script(directory, major, names)
    state = directory / "state.json"
    saves = ["--state-file", str(state), "--slot-saves", "postgresql"]
    server = ServedServer(["--script", str(script), *saves, *extra])
    opened = iter(range(1, 1_000_000))

    def slot_positions() -> tuple[int, int]:
        positions = server.status()["slots"][slot]
        return int(LSN(positions["confirmed_flush"])), int(LSN(positions["restart_lsn"]))

    try:
        yield RestartSide(
            f"host=127.0.0.1 port={server.port} user=postgres dbname=postgres replication=database",
            slot,
            publication,
            lambda rows: server.post("/wal", row_steps(table, rows)),
            lambda: _OpenTransaction(server, table, f"t{next(opened)}"),
            slot_positions,
            lambda: server.send_signal(signal.SIGINT),
            server.start_again,
            lambda: server.send_signal(signal.SIGQUIT),
            lambda: server.post("/snapshot", {"checkpoint": major < 16}),
            lambda: int(LSN(server.status()["end_lsn"])),
            # Its background writer's first record comes 15 s after it started.
            lambda: None,
        )
    finally:
        server.stop()
