"""Errors the fake walsender reports to its client, shaped like PostgreSQL's.

:class:`ServerError` carries every field of an ErrorResponse (or NoticeResponse) and
:meth:`ServerError.fields` lists them in the order ``send_message_to_frontend``
(``src/backend/utils/error/elog.c``) writes them: S, V, C, M, D, H, P, W, F, L, R.
Real servers send F/L/R (source file, line, routine) on every error; the version table in
:mod:`pgwire_mock.server.versions` fills them in per major so replies can be byte-identical.
"""

from __future__ import annotations

__all__ = ["BackendCrashError", "ServerError"]


class ServerError(Exception):
    """An error (or notice) as PostgreSQL reports it: severity, SQLSTATE and text.

    ``severity`` is the non-localized one (``ERROR``, ``FATAL``, ``NOTICE``); real servers
    running with ``lc_messages=C`` send the same word in both S and V.
    """

    def __init__(
        self,
        severity: str,
        sqlstate: str,
        message: str,
        detail: str | None = None,
        hint: str | None = None,
        *,
        position: int | None = None,
        context: str | None = None,
        file: str | None = None,
        line: int | None = None,
        routine: str | None = None,
    ) -> None:
        super().__init__(message)
        self.severity = severity
        self.sqlstate = sqlstate
        self.message = message
        self.detail = detail
        self.hint = hint
        self.position = position
        self.context = context
        self.file = file
        self.line = line
        self.routine = routine
        #: Notices the server sends before this error (a WARNING, then the ERROR).
        self.notices: tuple[ServerError, ...] = ()

    def after(self, *notices: ServerError) -> ServerError:
        """This error, sent after ``notices``."""
        self.notices = notices
        return self

    @property
    def fatal(self) -> bool:
        """True when PostgreSQL closes the connection after sending this error."""
        return self.severity in ("FATAL", "PANIC")

    def fields(self) -> tuple[tuple[str, str], ...]:
        """The (code, value) pairs of the ErrorResponse, in PostgreSQL's wire order."""
        pairs: list[tuple[str, str]] = [
            ("S", self.severity),
            ("V", self.severity),
            ("C", self.sqlstate),
            ("M", self.message),
        ]
        optional: tuple[tuple[str, object], ...] = (
            ("D", self.detail),
            ("H", self.hint),
            ("P", self.position),
            ("W", self.context),
            ("F", self.file),
            ("L", self.line),
            ("R", self.routine),
        )
        pairs.extend((code, str(value)) for code, value in optional if value is not None)
        return tuple(pairs)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ServerError):
            return NotImplemented
        return self.fields() == other.fields()

    def __hash__(self) -> int:
        return hash(self.fields())

    def __repr__(self) -> str:
        return f"ServerError({self.severity!r}, {self.sqlstate!r}, {self.message!r})"

    def __str__(self) -> str:
        return f"{self.severity}: {self.message} (SQLSTATE {self.sqlstate})"


class BackendCrashError(Exception):
    """The real backend dies here (a NULL dereference), so the client gets no reply.

    Example: ``START_REPLICATION ... ("proto_version")`` without a value makes pgoutput
    call ``strVal(NULL)`` on PostgreSQL 14–17; the client sees the socket close. The
    session should close the connection without an ErrorResponse.
    """
