"""The query cycle of a walsender session: a simple Query (a replication command, or SQL
on a connection that allows it), the extended-protocol messages up to Sync, and
FunctionCall; running SQL statements and sending their rows, COPY data and command tags,
as ``postgres.c`` (``exec_simple_query``, ``PostgresMain``) and ``walsender.c``
(``exec_replication_command``) do.

* On a replication connection extended-protocol messages get 08P01 and then everything
  up to Sync is ignored (the ``ignore_till_sync`` rule of ``PostgresMain``); Sync then
  answers ReadyForQuery. A plain connection speaks the extended protocol
  (:mod:`pgwire_mock.server.extended`), with the same skip to Sync after an error.

A mixin of :class:`~pgwire_mock.server.session.WalSenderSession`, kept apart so the
session module stays about its connection's state machine; what the statements answer
is :mod:`pgwire_mock.server.sql` and :mod:`pgwire_mock.server.catalog`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from codec.wire import (
    CommandComplete,
    CopyData,
    CopyDone,
    CopyOutResponse,
    DataRow,
    EmptyQueryResponse,
    FieldDescription,
    FunctionCall,
    Query,
    RowDescription,
    Sync,
)
from pgwire_mock.server.catalog import CatalogQueries, CopyOut
from pgwire_mock.server.errors import BackendCrashError, ServerError
from pgwire_mock.server.extended import ExtendedQuery, Host
from pgwire_mock.server.grammar import (
    AlterReplicationSlot,
    BaseBackup,
    Command,
    CreateReplicationSlot,
    DropReplicationSlot,
    IdentifySystem,
    ReadReplicationSlot,
    Show,
    SqlCommand,
    StartLogicalReplication,
    StartPhysicalReplication,
    TimelineHistory,
    UploadManifest,
    format_lsn,
    parse_command,
)
from pgwire_mock.server.phase import Phase
from pgwire_mock.server.sql import SqlLayer
from pgwire_mock.server.sql_result import Result
from pgwire_mock.server.sql_text import normalize, source_offsets, split_statements_at
from pgwire_mock.server.state import ServerState
from pgwire_mock.server.versions import VersionFacts, error

__all__ = ["QueryHandling"]


class QueryHandling:
    """The query handlers; the session provides the attributes and methods below."""

    state: ServerState
    major: int
    facts: VersionFacts
    phase: Phase
    database: str
    replication: str
    transaction_status: str
    _sql: SqlLayer | None
    _catalog: CatalogQueries | None
    _extended: ExtendedQuery
    _log: Callable[[str], None]

    if TYPE_CHECKING:

        def _send(self, *messages: object) -> None: ...
        def _send_error(self, err: ServerError) -> None: ...
        def _notice(self, err: ServerError) -> None: ...
        def _ready(self) -> None: ...
        def _finish(self) -> None: ...
        def _error_cleanup(self) -> None: ...
        def _create_slot(self, command: CreateReplicationSlot) -> None: ...
        def _drop_slot(self, command: DropReplicationSlot) -> None: ...
        def _read_slot(self, command: ReadReplicationSlot) -> None: ...
        def _alter_slot(self, command: AlterReplicationSlot) -> None: ...
        def _start_logical(self, command: StartLogicalReplication) -> None: ...
        def _start_physical(self, command: StartPhysicalReplication) -> None: ...
        def _timeline_history(self, command: TimelineHistory) -> None: ...
        def _base_backup(self, command: BaseBackup) -> None: ...

    def _on_sync(self, _: Sync) -> None:
        self.phase = Phase.READY
        self._extended.synced(self.transaction_status)
        self._ready()

    def _on_extended(self, message: object) -> None:
        # An ERROR while doing_extended_query_message: the backend skips everything up
        # to Sync, which then gets ReadyForQuery.
        if self.replication != "plain":  # forbidden_in_wal_sender
            err = error(self.major, "extended_query_protocol")
        else:
            try:
                host = Host(
                    self._statement,
                    self._describe_statement,
                    self._send,
                    self._send_copy,
                    self.transaction_status,
                )
                self._extended.handle(message, host)
                return
            except ServerError as failed:
                err = failed
            except Exception as exc:  # a bug of the fake: report it and stay up
                self._log(f"internal error answering {message!r:.200}: {exc!r}")
                text = f"pgwire-mock internal error: {type(exc).__name__}: {exc}"
                err = ServerError("ERROR", "XX000", text)
            self._log(f"{err.severity}: {err.message}")
            for notice in err.notices:
                self._notice(notice)
            self._extended.failed(self.transaction_status)
        self._send_error(err)
        if err.fatal:
            self._finish()
            return
        self._error_cleanup()
        self.phase = Phase.IGNORE_TILL_SYNC

    def _on_function_call(self, _: FunctionCall) -> None:
        self._send_error(
            ServerError(
                "ERROR",
                "08P01",
                "fastpath function calls not supported in a replication connection",
            )
        )
        self._error_cleanup()
        self._ready()

    def _on_query(self, message: Query) -> None:
        text = message.query
        if self.replication == "plain":
            self._extended.simple_query()
            self._run_sql(text)
            self._extended.synced(self.transaction_status)
            self._ready()
            return
        notices: list[ServerError] = []
        try:
            command = parse_command(text, self.major, notices)
        except ServerError as err:
            for notice in notices:
                self._notice(notice)
            self._command_error(err)
            return
        for notice in notices:
            self._notice(notice)
        self._log(f"command: {text.strip()[:200]}")
        if isinstance(command, SqlCommand):
            if self.replication == "physical":
                self._command_error(error(self.major, "sql_in_physical_walsender"))
                return
            self._run_sql(text)
            self._ready()
            return
        if self.transaction_status == "E":
            self._command_error(
                ServerError(
                    "ERROR",
                    "25P02",
                    "current transaction is aborted, commands ignored until end of "
                    "transaction block",
                )
            )
            return
        try:
            self._run_command(command)
        except BackendCrashError as crash:
            self._log(f"backend crash emulated: {crash}")
            self._finish()
        except ServerError as err:
            self._command_error(err)

    def _command_error(self, err: ServerError) -> None:
        self._log(f"{err.severity}: {err.message}")
        self._send_error(err)
        if err.fatal:
            self._finish()
            return
        self._error_cleanup()
        self._ready()

    def _run_sql(self, text: str) -> None:
        assert self._sql is not None
        statements = split_statements_at(text)
        if not statements:
            self._send(EmptyQueryResponse())
            return
        for start, statement in statements:
            if self.transaction_status == "E" and not _is_txn_end(statement):
                err = ServerError(
                    "ERROR",
                    "25P02",
                    "current transaction is aborted, commands ignored until end of "
                    "transaction block",
                )
                self._send_error(err)
                self._error_cleanup()
                return
            try:
                result = self._statement(statement)
            except ServerError as err:
                if err.position is not None:
                    # Found in the normalized statement; PostgreSQL counts characters of
                    # the whole query string as the client sent it.
                    offsets = source_offsets(statement)
                    if offsets is not None and 0 < err.position <= len(offsets):
                        err.position = start + offsets[err.position - 1] + 1
                self._log(f"{err.severity}: {err.message}")
                for notice in err.notices:
                    self._notice(notice)
                self._send_error(err)
                self._error_cleanup()
                return
            except Exception as exc:  # a bug of the fake: report it and stay up
                self._log(f"internal error answering {statement[:200]!r}: {exc!r}")
                message = f"pgwire-mock internal error: {type(exc).__name__}: {exc}"
                self._send_error(ServerError("ERROR", "XX000", message))
                self._error_cleanup()
                return
            if isinstance(result, CopyOut):
                self._send_copy(result)
                continue
            self._send_result(result)

    def _statement(self, statement: str) -> Result | CopyOut:
        """Run one statement: its notices sent, the transaction status moved on."""
        result = self._execute(statement)
        if isinstance(result, CopyOut):
            return result
        for notice in result.notices:
            self._notice(notice)
        if result.transaction == "begin":
            self.transaction_status = "T"
        elif result.transaction is not None:
            if self.transaction_status == "E":
                result = Result("ROLLBACK", notices=(), transaction="rollback")
            self.transaction_status = "I"
        return result

    def _describe_statement(self, statement: str) -> Result:
        """A row-returning statement run only for its columns: settings and the
        transaction's snapshot state are left as they were."""
        assert self._sql is not None and self._catalog is not None
        settings, changed = dict(self._sql.settings), list(self._sql.changed)
        queried = self._catalog.queried
        try:
            result = self._execute(statement)
        finally:
            self._sql.settings, self._sql.changed = settings, changed
            self._catalog.queried = queried
        if isinstance(result, CopyOut):  # pragma: no cover - only row statements come here
            raise ServerError("ERROR", "XX000", "pgwire-mock: COPY where rows were expected")
        return result

    def _execute(self, statement: str) -> Result | CopyOut:
        """One statement: reading tables or a subscriber's catalog query, else SQL."""
        assert self._sql is not None and self._catalog is not None
        in_transaction = self.transaction_status != "I"
        answer = self._catalog.answer(normalize(statement), in_transaction=in_transaction)
        if answer is not None:
            return answer
        result = self._sql.execute(statement, in_transaction=in_transaction)
        if result.transaction == "begin":
            self._catalog.transaction_began(normalize(statement))
        elif result.transaction is not None:
            self._catalog.transaction_ended()
        return result

    def _send_copy(self, copy: CopyOut) -> None:
        """COPY … TO STDOUT: CopyOutResponse, a CopyData per payload, CopyDone, the tag."""
        fmt = 1 if copy.binary else 0
        self._send(CopyOutResponse(fmt, (fmt,) * copy.columns))
        self._send(*(CopyData(payload) for payload in copy.payloads))
        self._send(CopyDone(), CommandComplete(copy.tag))

    def _send_result(self, result: Result) -> None:
        if result.columns is not None:
            self._send(
                RowDescription(
                    tuple(
                        FieldDescription(
                            c.name,
                            c.table_oid,
                            c.column_number,
                            c.type_oid,
                            c.type_size,
                            c.typmod,
                            0,
                        )
                        for c in result.columns
                    )
                )
            )
            self._send(
                *(
                    DataRow(tuple(None if v is None else v.encode() for v in row))
                    for row in result.rows
                )
            )
        self._send(CommandComplete(result.tag))

    def _run_command(self, command: Command) -> None:
        if isinstance(command, IdentifySystem):
            self._identify_system()
        elif isinstance(command, Show):
            assert self._sql is not None
            self._send_result(self._sql.show(command.name))
            self._ready()
        elif isinstance(command, CreateReplicationSlot):
            self._create_slot(command)
        elif isinstance(command, DropReplicationSlot):
            self._drop_slot(command)
        elif isinstance(command, ReadReplicationSlot):
            self._read_slot(command)
        elif isinstance(command, AlterReplicationSlot):
            self._alter_slot(command)
        elif isinstance(command, StartLogicalReplication):
            self._start_logical(command)
        elif isinstance(command, StartPhysicalReplication):
            self._start_physical(command)
        elif isinstance(command, TimelineHistory):
            self._timeline_history(command)
        elif isinstance(command, BaseBackup):
            self._base_backup(command)
        elif isinstance(command, UploadManifest):
            raise ServerError(
                "ERROR",
                "0A000",
                f"pgwire-mock is a logical-only walsender: {type(command).TAG} is not emulated",
            )
        else:  # pragma: no cover - parse_command returns only the classes above
            raise ServerError("ERROR", "XX000", f"unhandled command {command!r}")

    def _rows(
        self,
        tag: str,
        columns: tuple[tuple[str, int, int], ...],
        rows: tuple[tuple[str | None, ...], ...],
    ) -> None:
        self._send(
            RowDescription(
                tuple(FieldDescription(n, 0, 0, oid, size, -1, 0) for n, oid, size in columns)
            )
        )
        self._send(*(DataRow(tuple(None if v is None else v.encode() for v in r)) for r in rows))
        self._send(CommandComplete(tag))
        self._ready()

    def _identify_system(self) -> None:
        timeline_oid = self.facts.identify_system_timeline_oid
        self._rows(
            "IDENTIFY_SYSTEM",
            (
                ("systemid", 25, -1),
                ("timeline", timeline_oid, 4 if timeline_oid == 23 else 8),
                ("xlogpos", 25, -1),
                ("dbname", 25, -1),
            ),
            (
                (
                    str(self.state.system_identifier),
                    str(self.state.timeline),
                    format_lsn(self.state.wal_lsn),
                    self.database if self.replication == "database" else None,
                ),
            ),
        )


def _is_txn_end(statement: str) -> bool:
    first = statement.split(None, 1)[0].lower() if statement.split() else ""
    return first in ("rollback", "abort", "commit", "end")
