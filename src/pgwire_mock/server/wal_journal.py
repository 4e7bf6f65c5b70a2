"""The live WAL of a served script, kept beside ``serve --state-file`` so that a server
started again on the same file has the WAL the last one wrote.

PostgreSQL's WAL outlives its server: a consumer that confirmed less than it was sent
gets the rest after a restart. A served script's WAL is compiled in memory and grows
with ``POST /wal`` steps and the server's own records (running-xacts records, checkpoints,
open transactions rolled back at a shutdown), so a new process would start from the
script alone, and the transactions written since would be gone while the slots still
point past them. The journal (``FILE.wal``, JSON Lines) keeps each change
(:attr:`pgwire_mock.script.live.LiveWal.journal`), written and fsynced before the server
goes on, as PostgreSQL flushes a commit's WAL before it answers; a new server replays it
(:meth:`~pgwire_mock.script.live.LiveWal.replay`) before it listens. If the last server
did not stop cleanly (killed, or SIGQUIT), its open transactions never end and an
end-of-recovery checkpoint follows, as after PostgreSQL's crash recovery.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Final

from pgwire_mock import json_text
from pgwire_mock.script.errors import ScriptError
from pgwire_mock.script.live import RECORD_OPERATIONS, LiveWal
from pgwire_mock.script.loader import dump_script

__all__ = ["JournalError", "WalJournal", "journal_path"]

_FORMAT: Final = 1
_STOPPED: Final = {"stopped": "cleanly"}


class JournalError(ValueError):
    """A journal that cannot be used: another script's, or not a journal."""


def journal_path(state_file: Path) -> Path:
    return state_file.with_name(state_file.name + ".wal")


def _fingerprint(wal: LiveWal) -> str:
    """The served script's identity: a journal replays on the script that wrote it only."""
    text = dump_script(wal.compiled.script)
    return hashlib.sha256(text.encode()).hexdigest()


class WalJournal:
    """The journal of one served script's WAL at ``path``."""

    def __init__(self, path: Path, file: IO[str]) -> None:
        self.path = path
        self._file = file
        #: Hears, once, that a write failed (disk full, say): PostgreSQL PANICs when it
        #: cannot write WAL, and a journal that lost a change would replay another
        #: WAL. None: the OSError is raised.
        self.on_failure: Callable[[str], None] | None = None
        self._failed = False

    @classmethod
    def open(cls, path: Path, wal: LiveWal, *, fresh: bool) -> WalJournal:
        """Replay the journal at ``path`` into ``wal`` (none if ``fresh``: the state
        file is new, so a journal beside it is no one's), then keep what ``wal`` writes
        from now on. JournalError for another script's journal, or not a journal."""
        fingerprint = _fingerprint(wal)  # before anything is appended to the script
        file = path.open("a+", encoding="utf-8")
        try:
            # One server per journal, as postmaster.pid keeps a second postmaster out.
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.close()
            raise JournalError(f"{path}: in use by another pgwire-mock serve") from None
        journal = cls(path, file)
        operations: list[dict[str, Any]] | None = None
        try:
            if not fresh and path.stat().st_size:
                operations = _read(path, fingerprint)
                wal.replay(op for op in operations if op != _STOPPED)
            else:
                file.truncate(0)
                journal._write({"journal": _FORMAT, "script": fingerprint})
        except (JournalError, ScriptError) as err:
            file.close()
            if isinstance(err, JournalError):
                raise
            raise JournalError(f"{path}: does not replay on this script: {err}") from None
        wal.journal = journal._write
        if operations is not None and operations[-1:] != [_STOPPED]:
            # The last server did not stop cleanly: recovery leaves its open
            # transactions without an end and writes an end-of-recovery checkpoint.
            wal.crash_open()
            wal.checkpoint()
        return journal

    def stopped(self) -> None:
        """The server stopped cleanly (its shutdown checkpoint is written)."""
        self._write(_STOPPED)

    def close(self) -> None:
        self._file.close()

    def _write(self, operation: dict[str, Any]) -> None:
        if self._failed:
            return
        try:
            self._file.write(json.dumps(operation, separators=(",", ":")) + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as err:
            if self.on_failure is None:
                raise
            self._failed = True
            self.on_failure(f"could not write to the WAL journal {self.path}: {err.strerror}")


def _read(path: Path, fingerprint: str) -> list[dict[str, Any]]:
    """The operations of the journal at ``path``, checked against the script's
    fingerprint; a last line cut short (a kill in the middle of a write) is dropped."""
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as err:
        raise JournalError(f"{path}: not UTF-8 text (byte {err.start})") from None
    operations: list[dict[str, Any]] = []
    for number, line in enumerate(lines, 1):
        if not line:
            continue
        try:
            operation = json_text.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):  # no newline after it: a write cut short
                break
            raise JournalError(f"{path}: line {number} is not JSON") from None
        if not operations:  # the header
            if not isinstance(operation, dict) or operation.get("journal") != _FORMAT:
                break
        elif not _is_operation(operation):
            raise JournalError(f"{path}: line {number} is not an operation")
        operations.append(operation)
    if not operations:
        raise JournalError(f"{path}: not a pgwire-mock WAL journal")
    if operations[0].get("script") != fingerprint:
        raise JournalError(
            f"{path}: written for another script (remove it and the state file to start afresh)"
        )
    return operations[1:]


def _is_operation(line: object) -> bool:
    """What a journal holds after its first line: a step appended, a record written, or
    a clean stop."""
    if not isinstance(line, dict) or len(line) != 1:
        return False
    ((key, value),) = line.items()
    if key == "append":
        return isinstance(value, dict)
    return (key, value) in {("do", name) for name in RECORD_OPERATIONS} or line == _STOPPED
