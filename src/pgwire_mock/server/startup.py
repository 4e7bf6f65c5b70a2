"""The start of a walsender session, before its first command: SSLRequest,
GSSENCRequest, CancelRequest, the startup packet (protocol version, ``replication``,
user and database), admission (max_connections / max_wal_senders), authentication and
what follows it (ParameterStatus, BackendKeyData), as ``backend_startup.c``,
``postmaster.c``, ``auth.c`` and ``postinit.c`` do them.

A mixin of :class:`~pgwire_mock.server.session.WalSenderSession`, kept apart so the
session module stays about its connection's state machine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from codec.wire import (
    PG_MAX_AUTH_TOKEN_LENGTH,
    PROTOCOL_3_2,
    AuthenticationOk,
    AuthenticationSASLFinal,
    BackendKeyData,
    CancelRequest,
    FrontendReader,
    GSSENCRequest,
    GSSENCResponse,
    LegacyErrorResponse,
    NegotiateProtocolVersion,
    ParameterStatus,
    PasswordMessage,
    SASLInitialResponse,
    SASLResponse,
    SecretKey,
    SSLRequest,
    SSLResponse,
    StartupMessage,
    UnsupportedStartupMessage,
)
from pgwire_mock.server.auth import AuthFailedError, Exchange, start_exchange
from pgwire_mock.server.catalog import CatalogQueries, ServedTables
from pgwire_mock.server.errors import ServerError
from pgwire_mock.server.grammar import parse_bool
from pgwire_mock.server.phase import Phase
from pgwire_mock.server.sql import SqlLayer, gucs_for
from pgwire_mock.server.state import ServerState, WalSenderStatus
from pgwire_mock.server.versions import VersionFacts, error, parameter_status

if TYPE_CHECKING:
    from pgwire_mock.server.session import SessionConfig

__all__ = ["StartupHandling"]


class StartupHandling:
    """The startup handlers; the session provides the attributes and methods below."""

    config: SessionConfig
    state: ServerState
    major: int
    facts: VersionFacts
    pid: int
    phase: Phase
    secret_key: SecretKey
    user: str
    database: str
    replication: str
    application_name: str
    tls_active: bool
    unix_socket: bool
    close_requested: bool
    _reader: FrontendReader
    _start_tls: bool
    _exchange: Exchange | None
    _startup_params: dict[str, str]
    _guc_reported: dict[str, str]
    _sql: SqlLayer | None
    _catalog: CatalogQueries | None
    _log: Callable[[str], None]

    if TYPE_CHECKING:

        def cancel(self) -> None: ...
        def walsender_status(self) -> WalSenderStatus | None: ...
        def _send(self, *messages: object) -> None: ...
        def _ready(self) -> None: ...
        def _fatal(self, err: ServerError) -> None: ...
        def _finish(self) -> None: ...

    def _on_ssl_request(self, _: SSLRequest) -> None:
        # ProcessStartupPacket: 'S' only when TLS is configured, not yet on, and the
        # connection is not a Unix-domain socket (laddr family != AF_UNIX).
        willing = self.config.tls and not self.tls_active and not self.unix_socket
        self._send(SSLResponse(willing))
        if willing:
            if self._reader.buffered:
                # CVE-2021-23214: bytes sent before the handshake were not encrypted.
                self._fatal(
                    ServerError(
                        "FATAL",
                        "08P01",
                        "received unencrypted data after SSL request",
                        "This could be either a client-software bug or evidence of an "
                        "attempted man-in-the-middle attack.",
                    )
                )
                return
            self._start_tls = True

    def _on_gssenc_request(self, _: GSSENCRequest) -> None:
        self._send(GSSENCResponse(False))

    def _on_cancel_request(self, message: CancelRequest) -> None:
        # The postmaster signals the backend and closes this connection without a reply.
        target = self.state.sessions.get(message.process_id)
        if target is not None and target.secret_key == message.secret_key:
            self._log(f"cancel request for PID {message.process_id}")
            target.cancel()
        self.phase = Phase.CLOSED
        self.close_requested = True

    def _on_unsupported_startup(self, message: UnsupportedStartupMessage) -> None:
        """ProcessStartupPacket refuses a protocol major other than 3 before it reads the
        parameters; below 3.0 in protocol 2.0's form, which such a client can read."""
        err = error(
            self.major,
            "unsupported_frontend_protocol",
            requested=f"{message.major_version}.{message.minor_version}",
            latest=f"3.{self.facts.latest_protocol & 0xFFFF}",
        )
        if message.major_version < 3:
            self._log(f"FATAL: {err.message}")
            self._send(LegacyErrorResponse(f"FATAL:  {err.message}\n"))
            self._finish()
            return
        self._fatal(err)

    def _on_startup(self, message: StartupMessage) -> None:
        latest = self.facts.latest_protocol
        params = dict(message.parameters)
        # 14-17 speak 3.0 only, 18 up to 3.2: a newer minor or any _pq_. option is answered.
        negotiate = NegotiateProtocolVersion.for_startup(message, latest)
        if negotiate is not None:
            self._send(negotiate)
        if latest >= PROTOCOL_3_2 and message.protocol_version >= PROTOCOL_3_2:
            # PostgresMain (18): MAX_CANCEL_KEY_LENGTH bytes when the client *asked* for
            # 3.2 or newer, the 4-byte Int32 key otherwise.
            self.secret_key = self.config.random_bytes(32)
        replication = params.get("replication")
        if replication is not None:
            if replication == "database":
                self.replication = "database"
            else:
                flag = parse_bool(replication)
                if flag is None:
                    self._fatal(
                        error(self.major, "invalid_replication_parameter", value=replication)
                    )
                    return
                self.replication = "physical" if flag else "plain"
        else:
            self.replication = "plain"
        user = params.get("user")
        if not user:
            self._fatal(
                ServerError("FATAL", "28000", "no PostgreSQL user name specified in startup packet")
            )
            return
        self.user = user
        self.database = params.get("database") or user
        self.application_name = params.get("application_name", "")
        self._startup_params = params
        self._log(
            f"connection: user={user} database={self.database} replication={self.replication}"
            f" application_name={self.application_name!r}"
        )
        if not self.state.accepts_connections:  # canAcceptConnections: CAC_SHUTDOWN
            self._fatal(error(self.major, "shutting_down"))
            return
        if not self._admit():
            return
        exchange = start_exchange(
            self.config.auth, user, self.config.users, self.config.random_bytes
        )
        if exchange is None:
            self._authenticated()
            return
        self._exchange = exchange
        self.phase = Phase.AUTHENTICATING
        self._reader.expect_password_for(exchange.first)
        self._send(exchange.first)

    def _admit(self) -> bool:
        """InitProcess: a free PGPROC, walsenders from their own max_wal_senders pool
        (all roles are superusers, so no reserved slots apply). Before authentication."""
        walsender = self.replication != "plain"
        busy = sum(1 for w in self.state.backends.values() if w == walsender)
        if walsender and busy >= self.config.max_wal_senders:
            self._fatal(error(self.major, "too_many_walsenders", max=self.config.max_wal_senders))
            return False
        if not walsender and busy >= self.config.max_connections:
            self._fatal(error(self.major, "too_many_clients"))
            return False
        self.state.backends[self.pid] = walsender
        return True

    def _on_password(self, message: PasswordMessage | SASLInitialResponse | SASLResponse) -> None:
        assert self._exchange is not None
        try:
            reply = self._exchange.respond(message)
        except AuthFailedError as failed:
            self._fatal(failed.error)
            return
        if reply is not None:
            self._reader.expect_password_for(reply)
            self._send(reply)
            if not isinstance(reply, AuthenticationSASLFinal):
                return
        self._authenticated()

    def _refused_before_auth(self) -> bool:
        """recv_password_packet (auth.c) and CheckSASLAuth (auth-sasl.c) read the type
        byte first: anything but 'p' is FATAL 08P01 at once, whatever length follows. A
        'p' longer than PG_MAX_AUTH_TOKEN_LENGTH is "invalid message length", a
        COMMERROR: the connection closes, with 28P01 after SASL (checked on 14-18). So an
        unauthenticated client cannot make the server buffer more than 64 KiB."""
        head = self._reader.peek_header()
        if head is None:
            return False
        tag, length = head
        sasl = self._reader.password_kind is not PasswordMessage
        if tag != ord("p"):
            what = "SASL" if sasl else "password"
            self._fatal(
                ServerError("FATAL", "08P01", f"expected {what} response, got message type {tag}")
            )
            return True
        if length is None or length <= PG_MAX_AUTH_TOKEN_LENGTH:
            return False
        self._log("invalid message length")
        if sasl:
            self._fatal(
                ServerError(
                    "FATAL", "28P01", f'password authentication failed for user "{self.user}"'
                )
            )
        else:
            self._finish()
        return True

    def _on_auth_violation(self, message: object) -> None:
        self._fatal(
            ServerError(
                "FATAL",
                "08P01",
                f"expected password response, got message type {type(message).__name__}",
            )
        )

    def _authenticated(self) -> None:
        self._exchange = None
        self._send(AuthenticationOk())
        roles, users = self.config.roles, self.config.users
        closed = roles is not None or bool(users)
        if closed and self.user not in users and self.user not in (roles or ()):
            # InitializeSessionUserId, after authentication succeeded (trust).
            self._fatal(error(self.major, "role_does_not_exist", role=self.user))
            return
        if self.replication != "physical" and not self.state.has_database(self.database):
            # InitPostgres; a physical walsender connects to no database.
            self._fatal(error(self.major, "database_does_not_exist", database=self.database))
            return
        overrides = {"session_authorization": self.user}
        reported = {name.lower(): name for name, _ in self.facts.parameter_status}
        for name, given in self._startup_params.items():
            canonical = reported.get(name.lower())
            if canonical is None or canonical in ("server_version", "server_encoding"):
                continue
            value = given
            if canonical == "client_encoding" and given.lower().replace("-", "") in (
                "utf8",
                "unicode",
            ):
                value = "UTF8"
            if canonical == "DateStyle" and given.strip().upper() == "ISO":
                value = "ISO, MDY"
            overrides[canonical] = value
        params = parameter_status(
            self.major, overrides, replication_database=self.replication != "physical"
        )
        self._send(*(ParameterStatus(name, value) for name, value in params))
        self._guc_reported = dict(params)
        self._send(BackendKeyData(self.pid, self.secret_key))
        self.phase = Phase.READY
        self.state.sessions[self.pid] = self
        settings = gucs_for(self.major, round(self.config.wal_sender_timeout * 1000))
        settings.update(dict(params))
        settings["max_connections"] = str(self.config.max_connections)
        settings["max_wal_senders"] = str(self.config.max_wal_senders)
        self._sql = SqlLayer(
            self.major,
            self.state,
            canned=self.config.sql_answers,
            settings=settings,
            user=self.user,
            database=self.database,
            pid=self.pid,
            log_running_xacts=self.config.log_running_xacts,
            checkpoint=self.config.checkpoint,
            catalog_step=self.config.catalog_step,
        )
        tables = self.config.source if isinstance(self.config.source, ServedTables) else None
        source = self.config.source
        self._catalog = CatalogQueries(
            self.major, self.state, tables, getattr(source, "next_xid", None)
        )
        self._ready()
