"""The small SQL layer of a logical replication connection.

A ``replication=database`` walsender runs any text that is not a replication command as
SQL (``exec_simple_query``). CDC clients send a handful of statements there; this module
answers those from the server state, plus user-supplied canned answers (exact text →
rows), and refuses the rest with ``0A000`` instead of hanging:

* ``SELECT pg_catalog.set_config('n', 'v', false)`` (pg_recvlogical, libpq clients),
  ``SET n TO v``, ``SHOW n`` (lower-case ``show`` is SQL; ``SHOW`` is the replication
  command and gives the same reply);
* ``BEGIN`` / ``START TRANSACTION`` / ``COMMIT`` / ``END`` / ``ROLLBACK`` / ``ABORT``
  with PostgreSQL's warnings when there is (no) transaction in progress;
* ``SELECT version()`` (the emulated release's text), ``pg_current_wal_lsn()``,
  ``pg_is_in_recovery()``, ``current_database()``, ``current_user`` / ``session_user`` /
  ``user``, ``current_setting('n')``, ``pg_backend_pid()``, ``SELECT <integer>``;
* ``SELECT pg_log_standby_snapshot()`` (16+; 14/15 have no such function) and
  ``CHECKPOINT``, which write their records to a served script's live WAL;
* ``SELECT cols|*|count(*|1|col) FROM pg_replication_slots | pg_stat_replication |
  pg_publication | pg_publication_tables [WHERE col = 'v' [AND ...]]`` from the shared
  state and the live walsenders;
* ``CREATE PUBLICATION p FOR ALL TABLES | FOR TABLE a, b``, ``ALTER PUBLICATION p ADD |
  DROP | SET TABLE a, b``, ``DROP PUBLICATION [IF EXISTS] p``
  (:mod:`~pgwire_mock.server.sql_publications`).

This module holds the dispatch (one table of patterns, each with its handler), the
session's settings and the handlers for the statements above but the catalog selects,
which :mod:`~pgwire_mock.server.catalog_views` answers. The statement text is cut and
normalized by :mod:`~pgwire_mock.server.sql_text`; replies are
:mod:`~pgwire_mock.server.sql_result`'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from pgwire_mock.server.catalog_views import CATALOG_SELECT, CatalogViews
from pgwire_mock.server.errors import ServerError
from pgwire_mock.server.grammar import format_lsn
from pgwire_mock.server.live import ShuttingDownError
from pgwire_mock.server.sql_publications import PublicationCommands
from pgwire_mock.server.sql_result import CannedAnswer, Column, Result
from pgwire_mock.server.sql_text import LITERAL, check_syntax, normalize
from pgwire_mock.server.state import ServerState
from pgwire_mock.server.versions import VERSIONS

if TYPE_CHECKING:  # the script package loads YAML: only scripts need it
    from pgwire_mock.script.wal import RunningXacts

__all__ = ["SqlLayer", "gucs_for"]


def gucs_for(major: int, wal_sender_timeout_ms: int) -> dict[str, str]:
    """Settings SHOW knows: canonical name → value (as ``SHOW`` prints it)."""
    facts = VERSIONS[major]
    timeout = wal_sender_timeout_ms
    shown = (
        f"{timeout // 60000}min"
        if timeout and timeout % 60000 == 0
        else f"{timeout // 1000}s"
        if timeout and timeout % 1000 == 0
        else f"{timeout}ms"
        if timeout
        else "0"
    )
    values = dict(facts.parameter_status)
    values.update(
        {
            "server_version_num": str(facts.server_version_num),
            "data_directory_mode": "0700",
            "wal_sender_timeout": shown,
            "wal_level": "logical",
            "max_wal_senders": "10",
            "max_replication_slots": "10",
            "wal_segment_size": "16MB",
            "block_size": "8192",
            "statement_timeout": "0",
            "lock_timeout": "0",
            "idle_in_transaction_session_timeout": "0",
            "search_path": '"$user", public',
            "transaction_isolation": "read committed",
            "max_connections": "100",
            "logical_decoding_work_mem": "64MB",
            "wal_keep_size": "0",
            "hot_standby_feedback": "off",
            "port": "5432",
            "listen_addresses": "localhost",
            "ssl": "off",
            "password_encryption": "scram-sha-256",
            "lc_messages": "C",
            "max_slot_wal_keep_size": "-1",
        }
    )
    return values


class SqlLayer:
    """Answers SQL statements for one session."""

    def __init__(
        self,
        major: int,
        state: ServerState,
        *,
        canned: Mapping[str, CannedAnswer] | None = None,
        settings: Mapping[str, str] | None = None,
        user: str = "postgres",
        database: str = "postgres",
        pid: int = 0,
        log_running_xacts: Callable[[], RunningXacts | None] | None = None,
        checkpoint: Callable[[], RunningXacts | None] | None = None,
        catalog_step: Callable[[object], None] | None = None,
    ) -> None:
        self.major = major
        self._publications = PublicationCommands(major, state, user, catalog_step)
        # What writes WAL for pg_log_standby_snapshot() and CHECKPOINT (a live WAL).
        self._log_running_xacts = log_running_xacts
        self._write_checkpoint = checkpoint
        self._statement = ""
        self.state = state
        self.canned = {normalize(k): v for k, v in (canned or {}).items()}
        self.settings = dict(settings or gucs_for(major, 60000))
        self.user = user
        self.database = database
        self.pid = pid
        # Settings changed by SET / set_config, in order, for ReportChangedGUCOptions.
        self.changed: list[str] = []
        self._handlers: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], Result]], ...] = (
            (re.compile(r"(?:begin|start transaction)(?: .*)?", re.I), self._begin),
            (re.compile(r"(?:commit|end)(?: transaction| work)?", re.I), self._commit),
            (re.compile(r"(?:rollback|abort)(?: transaction| work)?", re.I), self._rollback),
            (
                re.compile(
                    r"select (?:pg_catalog\.)?set_config ?\( ?"
                    + LITERAL
                    + r" ?, ?"
                    + LITERAL
                    + r" ?, ?(true|false) ?\)",
                    re.I,
                ),
                self._set_config,
            ),
            (re.compile(r"set (?:session )?(time zone) (.+)", re.I), self._set),
            (re.compile(r"set (?:session )?(\S+) ?(?:to|=) ?(.+)", re.I), self._set),
            (re.compile(r"show (\S+)", re.I), self._show),
            (re.compile(r"select (?:pg_catalog\.)?version ?\( ?\)", re.I), self._version),
            (
                re.compile(r"select (?:pg_catalog\.)?pg_current_wal_lsn ?\( ?\)", re.I),
                self._current_lsn,
            ),
            (
                re.compile(
                    r"select (?:pg_catalog\.)?(pg_is_in_recovery|current_database|pg_backend_pid)"
                    r" ?\( ?\)",
                    re.I,
                ),
                self._function,
            ),
            (re.compile(r"select (current_user|session_user|user)", re.I), self._user),
            (
                re.compile(
                    r"select (?:pg_catalog\.)?current_setting ?\( ?" + LITERAL + r" ?\)", re.I
                ),
                self._current_setting,
            ),
            (
                re.compile(r"select ((?:pg_catalog\.)?pg_log_standby_snapshot) ?\( ?\)", re.I),
                self._log_standby_snapshot,
            ),
            (re.compile(r"checkpoint", re.I), self._checkpoint),
            (re.compile(r"select (-?[0-9]{1,9})", re.I), self._select_int),
            (CATALOG_SELECT, self._select_catalog),
            *self._publications.patterns(),
        )

    # --- entry point -----------------------------------------------------------------

    def execute(self, statement: str, *, in_transaction: bool) -> Result:
        """Run one statement; raises ServerError."""
        self._in_transaction = in_transaction
        self._statement = statement
        text = normalize(statement)
        canned = self.canned.get(text)
        if canned is not None:
            return canned.result()
        for pattern, handler in self._handlers:
            match = pattern.fullmatch(text)
            if match is not None:
                return handler(match)
        check_syntax(text, self.major)
        raise ServerError(
            "ERROR",
            "0A000",
            "pgwire-mock does not emulate this SQL statement",
            f"Statement: {text[:200]}",
            "Give the fake server a canned answer for this exact text (--sql-answers).",
        )

    # --- transactions --------------------------------------------------------------------

    def _begin(self, _: re.Match[str]) -> Result:
        notices: tuple[ServerError, ...] = ()
        if self._in_transaction:
            notices = (
                ServerError("WARNING", "25001", "there is already a transaction in progress"),
            )
        return Result("BEGIN", notices=notices, transaction="begin")

    def _commit(self, _: re.Match[str]) -> Result:
        notices: tuple[ServerError, ...] = ()
        if not self._in_transaction:
            notices = (ServerError("WARNING", "25P01", "there is no transaction in progress"),)
        return Result("COMMIT", notices=notices, transaction="commit")

    def _rollback(self, _: re.Match[str]) -> Result:
        notices: tuple[ServerError, ...] = ()
        if not self._in_transaction:
            notices = (ServerError("WARNING", "25P01", "there is no transaction in progress"),)
        return Result("ROLLBACK", notices=notices, transaction="rollback")

    # --- settings ------------------------------------------------------------------------

    def _canonical(self, name: str) -> str:
        lowered = name.lower()
        for key in self.settings:
            if key.lower() == lowered:
                return key
        raise ServerError("ERROR", "42704", f'unrecognized configuration parameter "{lowered}"')

    def show(self, name: str) -> Result:
        """``SHOW name``: one text column named after the setting, tag SHOW."""
        if name.lower() == "all":
            rows = tuple((k, v, "") for k, v in sorted(self.settings.items()))
            columns = (Column("name"), Column("setting"), Column("description"))
            return Result("SHOW", columns, rows)
        key = self._canonical(name)
        return Result("SHOW", (Column(key),), ((self.settings[key],),))

    def _show(self, match: re.Match[str]) -> Result:
        return self.show(match.group(1).strip('"'))

    def _set_config(self, match: re.Match[str]) -> Result:
        name = match.group(1).replace("''", "'")
        value = match.group(2).replace("''", "'")
        try:
            self._assign(self._canonical(name), value)
        except ServerError:
            if "." not in name:  # custom "a.b" settings may be created
                raise
            self._assign(name, value)
        return Result("SELECT 1", (Column("set_config"),), ((value,),))

    def _assign(self, key: str, value: str) -> None:
        self.settings[key] = value
        if key not in self.changed:
            self.changed.append(key)

    def _set(self, match: re.Match[str]) -> Result:
        name = match.group(1)
        raw = match.group(2).strip()
        value = raw[1:-1].replace("''", "'") if raw.startswith("'") and raw.endswith("'") else raw
        if name.lower() == "time zone":  # SET TIME ZONE x is SET timezone = x
            name = "TimeZone"
        if name.lower() == "datestyle" and value.upper() == "ISO":
            value = "ISO, MDY"
        self._assign(self._canonical(name), value)
        return Result("SET")

    # --- functions ----------------------------------------------------------------------

    def _version(self, _: re.Match[str]) -> Result:
        return Result("SELECT 1", (Column("version"),), ((VERSIONS[self.major].version_text,),))

    def _function(self, match: re.Match[str]) -> Result:
        name = match.group(1).lower()
        if name == "pg_is_in_recovery":
            column, value = Column(name, "bool"), "f"  # a primary, never a standby
        elif name == "current_database":
            column, value = Column(name, "name"), self.database
        else:
            column, value = Column(name, "int4"), str(self.pid)
        return Result("SELECT 1", (column,), ((value,),))

    def _user(self, match: re.Match[str]) -> Result:
        # SQL-standard functions without parentheses, each column named as written.
        return Result("SELECT 1", (Column(match.group(1).lower(), "name"),), ((self.user,),))

    def _current_setting(self, match: re.Match[str]) -> Result:
        key = self._canonical(match.group(1).replace("''", "'"))
        return Result("SELECT 1", (Column("current_setting"),), ((self.settings[key],),))

    def _current_lsn(self, _: re.Match[str]) -> Result:
        return Result(
            "SELECT 1",
            (Column("pg_current_wal_lsn", "pg_lsn"),),
            ((format_lsn(self.state.wal_lsn),),),
        )

    def _log_standby_snapshot(self, match: re.Match[str]) -> Result:
        """pg_log_standby_snapshot() (16+): a running-xacts record; its end."""
        name = match.group(1).lower()
        if self.major < 16:
            raise ServerError(
                "ERROR",
                "42883",
                f"function {name}() does not exist",
                None,
                "No function matches the given name and argument types. "
                "You might need to add explicit type casts.",
                position=self._statement.lower().find(name) + 1,
                file="parse_func.c",
                line=636,
                routine="ParseFuncOrColumn",
            )
        record = _write_record(self._log_running_xacts, "pg_log_standby_snapshot()")
        return Result(
            "SELECT 1",
            (Column("pg_log_standby_snapshot", "pg_lsn"),),
            ((format_lsn(record.end_lsn),),),
        )

    def _checkpoint(self, _: re.Match[str]) -> Result:
        _write_record(self._write_checkpoint, "CHECKPOINT")
        return Result("CHECKPOINT")

    def _select_int(self, match: re.Match[str]) -> Result:
        return Result("SELECT 1", (Column("?column?", "int4"),), ((str(int(match.group(1))),),))

    # --- catalogs --------------------------------------------------------------------------

    def _select_catalog(self, match: re.Match[str]) -> Result:
        views = CatalogViews(self.major, self.state, self.settings.get("TimeZone", "UTC"))
        return views.select(match)


def _write_record(write: Callable[[], RunningXacts | None] | None, what: str) -> RunningXacts:
    """The running-xacts record ``write`` wrote (pg_log_standby_snapshot() or
    CHECKPOINT's); 57P03 while the server restarts, _cannot_write's error when nothing
    can be written (a recording, or a wait_for step holding the WAL)."""
    try:
        record = write() if write is not None else None
    except ShuttingDownError as err:
        raise ServerError("ERROR", "57P03", str(err)) from None
    if record is None:
        raise _cannot_write(what)
    return record


def _cannot_write(what: str) -> ServerError:
    return ServerError(
        "ERROR",
        "0A000",
        f"pgwire-mock cannot run {what} here",
        "The served stream is a recording, or a wait_for step holds the WAL back.",
        "Serve a script to have WAL written while clients stream.",
    )
