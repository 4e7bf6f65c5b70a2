"""``record --physical --base-backup OPTIONS``: a real BASE_BACKUP, message by message.

OPTIONS is BASE_BACKUP's option list as 15+ writes it (``LABEL 'x', PROGRESS, WAL,
MANIFEST 'yes'``), checked as PostgreSQL checks it; the recorder sends it in the server's
own syntax (14's keywords or 15+'s list) and keeps every backend message of the answer as
received (:class:`pgwire_mock.server.basebackup.RecordedBackup`).
"""

from __future__ import annotations

from codec.wire import ErrorResponse
from pgwire_mock.client import ReplicationConnection
from pgwire_mock.server.backup_options import BackupOptions, parse_backup_options
from pgwire_mock.server.basebackup import RecordedBackup
from pgwire_mock.server.errors import ServerError
from pgwire_mock.server.grammar import BaseBackup, parse_command

__all__ = ["BackupSpecError", "parse_backup_spec", "record_base_backup"]

PG_BASEBACKUP_DEFAULT = "LABEL 'pg_basebackup base backup', PROGRESS, WAIT 0, MANIFEST 'yes'"
"""What pg_basebackup 15 sends for ``-Fp -X stream`` (TARGET 'client' and CHECKPOINT
aside); recorded with PROGRESS, it answers ``--no-estimate-size`` (no PROGRESS) too."""


class BackupSpecError(ValueError):
    """--base-backup OPTIONS that BASE_BACKUP would refuse (the message is the server's)."""


def parse_backup_spec(text: str) -> BackupOptions:
    """``LABEL 'x', WAL, ...`` -> the options, or :class:`BackupSpecError`."""
    try:
        command = parse_command(f"BASE_BACKUP ({text})" if text.strip() else "BASE_BACKUP", 18)
        if not isinstance(command, BaseBackup):
            raise BackupSpecError(f"not a BASE_BACKUP option list: {text!r}")
        return parse_backup_options(18, command.options)
    except ServerError as err:
        raise BackupSpecError(f"--base-backup {text!r}: {err.message}") from None


def record_base_backup(
    conn: ReplicationConnection, options: BackupOptions, timeout: float
) -> RecordedBackup:
    """Run BASE_BACKUP with ``options`` on ``conn`` and keep its answer, as sent."""
    major = conn.session.server_version_major
    try:
        command = options.command(major)
    except ValueError as err:
        raise BackupSpecError(str(err)) from None
    messages = []
    for message in conn.exchange(command, timeout):
        if isinstance(message, ErrorResponse):
            # The server refused (a target it lacks, a backup already running...).
            fields = dict(message.fields)
            raise BackupSpecError(f"{command}: ERROR {fields.get('C')}: {fields.get('M')}")
        messages.append(message.encode())
    return RecordedBackup(options, command, tuple(messages))
