"""The client's exceptions: one root, :class:`ReplicationClientError`.

:class:`ServerError` carries an ErrorResponse the server sent; the others say the client
or the bytes it received went wrong. Sessions never raise a bare ``DecodeError``: it is
chained under :class:`ProtocolViolationError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pgwire_mock.client.session import Event


class ReplicationClientError(Exception):
    """Root of every error the replication client raises on purpose."""


class ServerError(ReplicationClientError):
    """An ErrorResponse from the server: SQLSTATE, primary message and every field.

    ``fields`` keeps the (code, value) pairs in wire order, unknown codes included.
    Two errors with the same fields compare equal, so events carrying them do too.
    """

    def __init__(self, sqlstate: str, message: str, fields: Sequence[tuple[str, str]] = ()) -> None:
        self.sqlstate = sqlstate
        self.message = message
        self.fields: tuple[tuple[str, str], ...] = tuple(fields)
        super().__init__(sqlstate, message, self.fields)

    def get(self, code: str) -> str | None:
        """The value of the first field with this one-character code ('D', 'H', ...)."""
        for key, value in self.fields:
            if key == code:
                return value
        return None

    @property
    def severity(self) -> str:
        """The non-localized severity ('V', PostgreSQL 9.6+), else the localized one."""
        return self.get("V") or self.get("S") or "ERROR"

    @property
    def fatal(self) -> bool:
        """True when the server closes the connection after this error."""
        return self.severity in ("FATAL", "PANIC")

    @property
    def detail(self) -> str | None:
        return self.get("D")

    @property
    def hint(self) -> str | None:
        return self.get("H")

    def __str__(self) -> str:
        return f"{self.severity}: {self.message} (SQLSTATE {self.sqlstate})"

    def __repr__(self) -> str:
        return f"ServerError({self.sqlstate!r}, {self.message!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ServerError):
            return NotImplemented
        return (self.sqlstate, self.message, self.fields) == (
            other.sqlstate,
            other.message,
            other.fields,
        )

    def __hash__(self) -> int:
        return hash((self.sqlstate, self.message, self.fields))


class ProtocolViolationError(ReplicationClientError):
    """The server sent bytes that do not fit the session's state (or do not decode).

    The session is unusable afterwards, as a real client would drop the connection.
    ``events`` holds what the same ``receive_data`` call produced before the violation.
    """

    def __init__(self, reason: str, events: Sequence[Event] = ()) -> None:
        self.reason = reason
        self.events: tuple[Event, ...] = tuple(events)
        super().__init__(reason)


class InvalidStateError(ReplicationClientError):
    """The caller asked for something the session's current state does not allow."""


class AuthenticationError(ReplicationClientError):
    """Authentication cannot go on: no password, an unsupported method, or a server
    whose SCRAM proof does not check out."""


class ConnectionLostError(ReplicationClientError):
    """The server closed the connection (or the socket failed) before we were done."""


class ReplicationTimeoutError(ReplicationClientError, TimeoutError):
    """Nothing arrived from the server within the read timeout."""
