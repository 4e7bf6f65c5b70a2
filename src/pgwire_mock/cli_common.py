"""What every ``pgwire-mock`` command shares, kept apart from :mod:`pgwire_mock.cli` so
that the modules the command line loads (``record``, ``synth``, ``conformance``) need not
import it back: :class:`CommandError` (one line on stderr, exit status 1),
:func:`check_output` and :func:`one_line`."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CommandError", "check_output", "one_line"]


class CommandError(Exception):
    """A failure to report as one line and exit status 1."""


def check_output(path: str | Path, option: str) -> None:
    """Raise :class:`CommandError` now if ``path`` (``-``: standard output) cannot be
    written, so that a command fails before its work rather than after it."""
    if str(path) == "-":
        return
    target = Path(path)
    if target.is_dir():
        raise CommandError(f"{option} {target}: is a directory")
    folder = target.parent
    if not folder.is_dir():
        raise CommandError(f"{option} {target}: directory {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (
        target.exists() and not os.access(target, os.W_OK)
    ):
        raise CommandError(f"{option} {target}: permission denied")


def one_line(err: BaseException) -> str:
    """``err``'s message on one line (a server's error text may span several), or its
    type's name when it has none."""
    return " ".join(str(err).split()) or type(err).__name__
