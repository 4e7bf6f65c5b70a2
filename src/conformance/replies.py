"""What a walsender replies to our client's commands, in a form two servers can be compared in.

:func:`probe` runs one fixed sequence through :class:`pgwire_mock.client.ReplicationConnection`
and records the *shape* of each answer, never the server-specific values:

- ``IDENTIFY_SYSTEM``: the RowDescription (name, type OID, size, modifier, format, table
  OID, column number of every column), the row count, which values are NULL, the tag;
- ``CREATE_REPLICATION_SLOT`` (the client's syntax for the version): the same;
- the ErrorResponse (severity, SQLSTATE, message) for START_REPLICATION on a missing slot,
  on a slot another connection is streaming (55006), with ``proto_version`` 99, with an
  unknown pgoutput option, and with a publication that does not exist (reported after
  CopyBothResponse, when pgoutput decodes the first change).

Messages with a backend PID in them (``is active for PID n``) have the number replaced by
``<pid>``. The caller supplies a slot that has a change to decode (``changed_slot``) for
the missing-publication probe: on real PostgreSQL a slot created before an INSERT, on the
fake the slot of a recording.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from pgwire_mock.client import (
    CommandResult,
    ReplicationClientError,
    ReplicationConnection,
    ServerError,
    create_replication_slot_command,
)

__all__ = [
    "MISSING_PUBLICATION",
    "MISSING_SLOT",
    "ErrorShape",
    "Replies",
    "ResultShape",
    "probe",
]

MISSING_SLOT: Final = "pgwm_matrix_no_such_slot"
MISSING_PUBLICATION: Final = "pgwm_no_such_publication"
_PID: Final = re.compile(r"\bPID \d+")


@dataclass(frozen=True, slots=True)
class ResultShape:
    """A result set without its values."""

    columns: tuple[tuple[str, int, int, int, int, int, int], ...]
    rows: int
    nulls: tuple[tuple[bool, ...], ...]
    tag: str | None

    @classmethod
    def of(cls, result: CommandResult) -> ResultShape:
        return cls(
            tuple(
                (
                    c.name,
                    c.type_oid,
                    c.type_size,
                    c.type_modifier,
                    c.format_code,
                    c.table_oid,
                    c.column_number,
                )
                for c in result.columns
            ),
            len(result.rows),
            tuple(tuple(v is None for v in row) for row in result.rows),
            result.command_tag,
        )

    def describe(self) -> str:
        cols = ", ".join(f"{name} {oid}" for name, oid, *_ in self.columns)
        return f"({cols}) × {self.rows} [{self.tag}]"


@dataclass(frozen=True, slots=True)
class ErrorShape:
    """An ErrorResponse's severity (the non-localized ``V``), SQLSTATE and message."""

    severity: str
    sqlstate: str
    message: str

    @classmethod
    def of(cls, err: ServerError) -> ErrorShape:
        return cls(err.severity, err.sqlstate, _PID.sub("PID <pid>", err.message))

    def describe(self) -> str:
        return f"{self.severity} {self.sqlstate} {self.message!r}"


#: What a probe got: a result's shape, an error's, or a one-line note (no error, or a
#: client failure).
Reply = ResultShape | ErrorShape | str


@dataclass(frozen=True, slots=True)
class Replies:
    """Probe name -> reply, in probe order."""

    replies: Mapping[str, Reply] = field(default_factory=dict)

    def differences(self, other: Replies, other_name: str, mine: str) -> list[str]:
        out = []
        for name in dict.fromkeys([*self.replies, *other.replies]):
            want = self.replies.get(name, "not probed")
            got = other.replies.get(name, "not probed")
            if want != got:
                out.append(f"{name}: {other_name} {_describe(got)}, {mine} {_describe(want)}")
        return out


def _describe(reply: Reply) -> str:
    return reply if isinstance(reply, str) else reply.describe()


def _error_of(run: Callable[[], object]) -> Reply:
    try:
        run()
    except ServerError as err:
        return ErrorShape.of(err)
    except ReplicationClientError as err:
        return f"client error {type(err).__name__}: {err}"
    return "no error"


def _start_and_read(
    conn: ReplicationConnection, slot: str, options: Mapping[str, str]
) -> Callable[[], object]:
    def run() -> None:
        conn.start_replication(slot, 0, options)
        # Errors after CopyBothResponse arrive in the stream; give the server a moment.
        for _ in range(20):
            conn.read_stream(0.25)
        conn.stop()

    return run


def probe(
    dsn: str,
    *,
    major: int,
    probe_slot: str,
    changed_slot: str,
    publication: str,
    after_create: Callable[[], None] | None = None,
) -> Replies:
    """Run the probe sequence against the walsender at ``dsn``.

    ``probe_slot`` is created here (persistent) and left for the caller to drop;
    ``after_create`` runs once it exists (real servers: write a change for it).
    ``changed_slot`` must have a change to decode, and is not moved.
    """
    replies: dict[str, Reply] = {}
    too_high = {"proto_version": "99", "publication_names": publication}
    unknown = {"proto_version": "1", "publication_names": publication, "pgwm_bogus": "1"}
    valid = {"proto_version": "1", "publication_names": publication}
    missing_pub = {"proto_version": "1", "publication_names": MISSING_PUBLICATION}
    with ReplicationConnection.connect(dsn) as conn:
        replies["IDENTIFY_SYSTEM"] = ResultShape.of(conn.execute("IDENTIFY_SYSTEM"))
        create = create_replication_slot_command(probe_slot, major)
        replies[create.replace(probe_slot, "<slot>")] = ResultShape.of(conn.execute(create))
        if after_create is not None:
            after_create()
        replies["missing slot"] = _error_of(lambda: conn.start_replication(MISSING_SLOT, 0, valid))
        replies["proto_version 99"] = _error_of(
            lambda: conn.start_replication(probe_slot, 0, too_high)
        )
        replies["unknown option"] = _error_of(
            lambda: conn.start_replication(probe_slot, 0, unknown)
        )
        with ReplicationConnection.connect(dsn) as holder:
            holder.start_replication(probe_slot, 0, valid)
            replies["active slot"] = _error_of(lambda: conn.start_replication(probe_slot, 0, valid))
            holder.stop()
        replies["missing publication"] = _error_of(_start_and_read(conn, changed_slot, missing_pub))
    return Replies(replies)
