"""``pgwire-mock serve`` in a process of its own, with ``--control``: what a test outside
Python sees (stories that signal or restart the process, the control interface)."""

from __future__ import annotations

import codecs
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

__all__ = ["ServeProcess"]


class ServeProcess:
    """``python -m pgwire_mock.serve --port 0 ARGS [--control tcp:0:...]``, started: its
    ports read off the log lines that announce them."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        control: bool = True,
        timeout: float = 20.0,
        python_code: str | None = None,
    ) -> None:
        """``python_code``: run instead of ``-m pgwire_mock.serve`` (``python -c``), given
        the same arguments (a test that changes something in the process first)."""
        wanted = ("pg", "http") if control else ("pg",)
        program = ["-m", "pgwire_mock.serve"] if python_code is None else ["-c", python_code]
        self.process = subprocess.Popen(
            [
                sys.executable,
                *program,
                "--port",
                "0",
                *args,
                *(["--control", "tcp:0:interface=127.0.0.1"] if control else []),
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stderr is not None
        self.log: list[str] = []
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        ports: dict[str, int] = {}
        deadline = time.monotonic() + timeout
        while len(ports) < len(wanted) and time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line:
                break
            self.log.append(line)
            for key, pattern in (
                ("pg", r"listening on 127\.0\.0\.1:(\d+)"),
                ("http", r"control interface on http://127\.0\.0\.1:(\d+)"),
            ):
                match = re.search(pattern, line)
                if match:
                    ports[key] = int(match.group(1))
        if len(ports) < len(wanted):
            self.process.kill()
            raise RuntimeError("serve did not start: " + "".join(self.log))
        self.port, self.http = ports["pg"], ports.get("http")

    def wait_for_line(self, text: str, timeout: float = 10.0) -> None:
        """Read the log until a line holds ``text`` (kept in :attr:`log`): the server
        has got that far (a signal handled, say). TimeoutError if it does not come.
        Reads the pipe itself, unbuffered: communicate() reads it so too, later."""
        assert self.process.stderr is not None
        fd = self.process.stderr.fileno()
        deadline = time.monotonic() + timeout
        while text not in "".join(self.log):
            left = deadline - time.monotonic()
            chunk = os.read(fd, 65536) if select.select([fd], [], [], max(left, 0))[0] else b""
            if not chunk:
                raise TimeoutError(f"serve did not log {text!r}: " + "".join(self.log))
            self.log.append(self._decoder.decode(chunk))

    def dsn(self, **params: str) -> str:
        """A libpq DSN for user postgres and database postgres, with ``params``
        (``replication="database"``, say)."""
        extra = "".join(f" {key}={value}" for key, value in params.items())
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres{extra}"

    def request(self, method: str, path: str, body: str | None = None) -> tuple[int, Any]:
        """The control interface's status and JSON answer."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.http}{path}",
            data=None if body is None else body.encode(),
            method=method,
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def wait(self, timeout: float) -> int:
        """The exit status, once the process has ended (its log kept)."""
        _, rest = self.process.communicate(timeout=timeout)
        self.log.append(rest)
        return int(self.process.returncode)

    def stop(self, timeout: float = 10.0) -> str:
        """A fast shutdown (SIGINT), then a kill if it takes longer than ``timeout``;
        the whole log."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                _, rest = self.process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                _, rest = self.process.communicate()
            self.log.append(rest or "")
        return "".join(self.log)
