"""The sans-IO replication client session, driven by hand-built server bytes.

Server messages are built with the codec's encoders; what the session sends is decoded
with the codec's FrontendReader, so both directions are checked on the wire.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from codec import pgoutput, replication, wire
from codec.values import LSN
from pgwire_mock.client import (
    TRANSITIONS,
    AuthenticationError,
    CommandResult,
    ConnectionClosed,
    ConnectionReady,
    CreatedSlot,
    ErrorReceived,
    InvalidStateError,
    Keepalive,
    Notice,
    ParameterChanged,
    ProtocolViolationError,
    Ready,
    ReplicationSession,
    ScramSha256,
    ServerError,
    State,
    StreamEnded,
    SystemIdentity,
    Trigger,
    WalData,
    create_replication_slot_command,
    md5_password,
    parse_dsn,
    pgoutput_options,
    saslprep,
    start_replication_command,
)

NONCE = "rOprNGfwEbeRWgbNEkqO"  # RFC 7677's client nonce
SERVER_NONCE = NONCE + "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
SERVER_FIRST = f"r={SERVER_NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".encode()


def enc(*messages: wire.BackendMessage) -> bytes:
    return b"".join(wire.encode(m) for m in messages)


def sent(
    session: ReplicationSession,
    *,
    startup: bool = False,
    password_kind: wire.PasswordKind = wire.PasswordMessage,
) -> list[wire.FrontendMessage]:
    """Decode what the session queued, as a server would ('p' needs to be told)."""
    reader = wire.FrontendReader(startup_phase=startup)
    reader.expect_password(password_kind)
    reader.feed(session.data_to_send())
    messages = list(reader)
    assert reader.buffered == 0
    return messages


def status_updates(messages: list[wire.FrontendMessage]) -> list[replication.StandbyStatusUpdate]:
    out = []
    for message in messages:
        assert isinstance(message, wire.CopyData)
        update = replication.decode_client_copy_data(message.data)
        assert isinstance(update, replication.StandbyStatusUpdate)
        out.append(update)
    return out


def new_session(**kwargs: object) -> ReplicationSession:
    options: dict[str, object] = {
        "user": "user",
        "database": "db",
        "password": "pencil",
        "nonce_factory": lambda: NONCE,
    }
    options.update(kwargs)
    return ReplicationSession(**options)  # type: ignore[arg-type]


STARTUP_REPLY = enc(
    wire.AuthenticationOk(),
    wire.ParameterStatus("server_version", "17.2"),
    wire.ParameterStatus("client_encoding", "UTF8"),
    wire.BackendKeyData(4242, 99),
    wire.ReadyForQuery("I"),
)


def idle_session(**kwargs: object) -> ReplicationSession:
    session = new_session(**kwargs)
    session.connect()
    session.receive_data(STARTUP_REPLY)
    session.data_to_send()
    assert session.state is State.IDLE
    return session


def streaming_session(**kwargs: object) -> ReplicationSession:
    session = idle_session(**kwargs)
    session.start_replication("s", "0/0", pgoutput_options("p"))
    session.receive_data(enc(wire.CopyBothResponse()))
    session.data_to_send()
    assert session.state is State.STREAMING
    return session


def keepalive(wal_end: int, reply: bool, send_time: int = 777) -> wire.CopyData:
    return wire.CopyData(replication.PrimaryKeepalive(wal_end, send_time, reply).encode())


def xlog(start: int, message: pgoutput.PgOutputMessage) -> wire.CopyData:
    return wire.CopyData(replication.XLogData(start, start, 555, pgoutput.encode(message)).encode())


def scram_server_check(client_final: bytes) -> bytes:
    """An independent server side: verify the client proof, return server-final data."""
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", SALT, 4096)
    client_key = hmac.digest(salted, b"Client Key", "sha256")
    stored_key = hashlib.sha256(client_key).digest()
    without_proof, _, proof_part = client_final.rpartition(b",p=")
    auth_message = f"n=,r={NONCE}".encode() + b"," + SERVER_FIRST + b"," + without_proof
    signature = hmac.digest(stored_key, auth_message, "sha256")
    proof = base64.b64decode(proof_part)
    recovered = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
    assert hashlib.sha256(recovered).digest() == stored_key, "client proof does not verify"
    server_key = hmac.digest(salted, b"Server Key", "sha256")
    return b"v=" + base64.b64encode(hmac.digest(server_key, auth_message, "sha256"))


# --- startup and authentication ---------------------------------------------------------


def test_connect_sends_a_logical_replication_startup_message() -> None:
    """The StartupMessage carries user, database, replication=database, application_name."""
    session = new_session(application_name="capture")
    session.connect()
    [startup] = sent(session, startup=True)
    assert isinstance(startup, wire.StartupMessage)
    assert dict(startup.parameters) == {
        "user": "user",
        "database": "db",
        "replication": "database",
        "application_name": "capture",
    }
    assert session.state is State.AUTHENTICATING


def test_trust_startup_collects_parameters_and_key_then_is_idle() -> None:
    """With trust auth, ParameterStatus and BackendKeyData arrive before ReadyForQuery."""
    session = new_session()
    session.connect()
    session.data_to_send()
    events = session.receive_data(STARTUP_REPLY)
    assert events == [
        ConnectionReady({"server_version": "17.2", "client_encoding": "UTF8"}, 4242, 99)
    ]
    assert session.state is State.IDLE
    assert session.server_version_major == 17
    assert (session.process_id, session.secret_key) == (4242, 99)
    assert session.data_to_send() == b""


def test_cleartext_password_is_sent_as_is() -> None:
    session = new_session()
    session.connect()
    session.data_to_send()
    session.receive_data(enc(wire.AuthenticationCleartextPassword()))
    assert sent(session) == [wire.PasswordMessage("pencil")]
    assert session.state is State.AUTHENTICATING


def test_md5_password_matches_postgresql() -> None:
    """The value PostgreSQL computes: SELECT 'md5' || md5(md5('pencil' || 'user') || 'abcd')."""
    expected = "md5d621238dc9a10c6c869b264c13379ee7"
    assert md5_password("user", "pencil", b"abcd") == expected
    session = new_session()
    session.connect()
    session.data_to_send()
    session.receive_data(enc(wire.AuthenticationMD5Password(b"abcd")))
    assert sent(session) == [wire.PasswordMessage(expected)]


def test_scram_matches_rfc_7677_test_vector() -> None:
    """RFC 7677 section 3: user "user", password "pencil", the RFC's nonces and salt."""
    scram = ScramSha256("pencil", username="user", nonce=NONCE)
    assert scram.client_first_message() == b"n,,n=user,r=" + NONCE.encode()
    assert scram.client_final_message(SERVER_FIRST) == (
        b"c=biws,r=" + SERVER_NONCE.encode() + b",p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    scram.verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


def test_scram_exchange_through_the_session() -> None:
    """SASL → SASLContinue → SASLFinal → Ok, with an empty SCRAM user name as libpq sends."""
    session = new_session()
    session.connect()
    session.data_to_send()
    session.receive_data(enc(wire.AuthenticationSASL(("SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"))))
    assert session.state is State.SASL_CONTINUE
    [initial] = sent(session, password_kind=wire.SASLInitialResponse)
    assert initial == wire.SASLInitialResponse("SCRAM-SHA-256", f"n,,n=,r={NONCE}".encode())
    session.receive_data(enc(wire.AuthenticationSASLContinue(SERVER_FIRST)))
    assert session.state is State.SASL_FINAL
    [response] = sent(session, password_kind=wire.SASLResponse)
    assert isinstance(response, wire.SASLResponse)
    server_final = scram_server_check(response.data)
    session.receive_data(enc(wire.AuthenticationSASLFinal(server_final)))
    assert session.state is State.AUTHENTICATING
    session.receive_data(STARTUP_REPLY)
    assert session.state is State.IDLE


def test_scram_refuses_a_server_that_cannot_prove_the_password() -> None:
    session = new_session()
    session.connect()
    session.receive_data(enc(wire.AuthenticationSASL(("SCRAM-SHA-256",))))
    session.receive_data(enc(wire.AuthenticationSASLContinue(SERVER_FIRST)))
    with pytest.raises(AuthenticationError, match="signature"):
        session.receive_data(enc(wire.AuthenticationSASLFinal(b"v=" + base64.b64encode(b"x" * 32))))
    assert session.state is State.ERROR


def test_scram_refuses_a_server_nonce_that_does_not_extend_ours() -> None:
    scram = ScramSha256("pencil", nonce=NONCE)
    with pytest.raises(AuthenticationError, match="nonce"):
        scram.client_final_message(b"r=other,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")


def test_saslprep_maps_and_rejects_like_rfc_4013() -> None:
    assert saslprep("I\u00adX") == "IX"  # soft hyphen mapped to nothing
    assert saslprep("\u00aa") == "a"  # NFKC
    assert saslprep("user\u00a0x") == "user x"  # non-ASCII space to space
    assert saslprep("\u0007") is None  # control character
    assert saslprep("\u0627\u0031") is None  # RandAL text must end with RandAL


@pytest.mark.parametrize(
    ("request_", "match"),
    [
        (wire.AuthenticationCleartextPassword(), "no.* given"),
        (wire.AuthenticationGSS(), "unsupported"),
        (wire.AuthenticationSASL(("SCRAM-SHA-256-PLUS",)), "no supported SASL"),
    ],
)
def test_authentication_that_cannot_proceed_raises(
    request_: wire.BackendMessage, match: str
) -> None:
    session = new_session(password=None if match.startswith("no.*") else "pencil")
    session.connect()
    with pytest.raises(AuthenticationError, match=match):
        session.receive_data(enc(request_))
    assert session.state is State.ERROR


def test_fatal_error_during_authentication_closes_the_session() -> None:
    session = new_session()
    session.connect()
    error = wire.ErrorResponse.build(
        "FATAL", "28P01", 'password authentication failed for user "user"'
    )
    [event] = session.receive_data(enc(error))
    assert isinstance(event, ErrorReceived)
    assert event.error.fatal and event.error.sqlstate == "28P01"
    assert session.state is State.CLOSED


# --- commands ---------------------------------------------------------------------


IDENTIFY_REPLY = enc(
    wire.RowDescription(
        (
            wire.FieldDescription("systemid"),
            wire.FieldDescription("timeline", type_oid=23, type_size=4),
            wire.FieldDescription("xlogpos"),
            wire.FieldDescription("dbname"),
        )
    ),
    wire.DataRow((b"7400000000000000001", b"1", b"0/16B3748", b"db")),
    wire.CommandComplete("IDENTIFY_SYSTEM"),
    wire.ReadyForQuery("I"),
)


def test_identify_system_gives_a_typed_result() -> None:
    session = idle_session()
    session.identify_system()
    assert sent(session) == [wire.Query("IDENTIFY_SYSTEM")]
    assert session.state is State.QUERY
    result, ready = session.receive_data(IDENTIFY_REPLY)
    assert isinstance(result, CommandResult) and ready == Ready("I")
    assert result.column_names == ("systemid", "timeline", "xlogpos", "dbname")
    assert result.command_tag == "IDENTIFY_SYSTEM"
    assert SystemIdentity.from_result(result) == SystemIdentity(
        "7400000000000000001", 1, LSN.parse("0/16B3748"), "db"
    )
    assert session.state is State.IDLE


def test_create_slot_result_with_null_snapshot() -> None:
    session = idle_session()
    session.create_slot("s")
    assert sent(session) == [
        wire.Query('CREATE_REPLICATION_SLOT "s" LOGICAL "pgoutput" ( SNAPSHOT \'nothing\' )')
    ]
    reply = enc(
        wire.RowDescription(
            tuple(
                wire.FieldDescription(n)
                for n in ("slot_name", "consistent_point", "snapshot_name", "output_plugin")
            )
        ),
        wire.DataRow((b"s", b"0/1A2B3C4", None, b"pgoutput")),
        wire.CommandComplete("CREATE_REPLICATION_SLOT"),
        wire.ReadyForQuery("I"),
    )
    result, _ = session.receive_data(reply)
    assert isinstance(result, CommandResult)
    assert CreatedSlot.from_result(result) == CreatedSlot(
        "s", LSN.parse("0/1A2B3C4"), None, "pgoutput"
    )


@pytest.mark.parametrize(
    ("major", "kwargs", "command"),
    [
        (14, {}, 'CREATE_REPLICATION_SLOT "s" LOGICAL "pgoutput" NOEXPORT_SNAPSHOT'),
        (
            14,
            {"temporary": True, "snapshot": "export"},
            'CREATE_REPLICATION_SLOT "s" TEMPORARY LOGICAL "pgoutput" EXPORT_SNAPSHOT',
        ),
        (15, {}, 'CREATE_REPLICATION_SLOT "s" LOGICAL "pgoutput" ( SNAPSHOT \'nothing\' )'),
        (
            16,
            {"two_phase": True},
            'CREATE_REPLICATION_SLOT "s" LOGICAL "pgoutput" ( SNAPSHOT \'nothing\', TWO_PHASE )',
        ),
        (
            17,
            {"failover": True, "snapshot": "use"},
            'CREATE_REPLICATION_SLOT "s" LOGICAL "pgoutput" ( SNAPSHOT \'use\', FAILOVER )',
        ),
    ],
)
def test_create_slot_syntax_follows_the_server_version(
    major: int, kwargs: dict[str, object], command: str
) -> None:
    assert create_replication_slot_command("s", major, **kwargs) == command  # type: ignore[arg-type]


def test_two_phase_slots_are_refused_before_15() -> None:
    with pytest.raises(ValueError, match="15"):
        create_replication_slot_command("s", 14, two_phase=True)


def test_start_replication_quotes_names_and_values() -> None:
    options = pgoutput_options(['My "Pub"', "b,c"], proto_version=2, streaming=True)
    options["odd'option"] = None
    assert start_replication_command('sl"ot', LSN.parse("1/ABCDEF"), options) == (
        'START_REPLICATION SLOT "sl""ot" LOGICAL 1/ABCDEF ('
        "\"proto_version\" '2', "
        '"publication_names" \'"My ""Pub""","b,c"\', '
        "\"streaming\" 'true', "
        '"odd\'option")'
    )


def test_error_before_copy_both_is_an_event_then_idle() -> None:
    """If the slot is missing, START_REPLICATION fails with 42704 and no stream starts."""
    session = idle_session()
    session.start_replication("missing", 0, pgoutput_options("p"))
    session.data_to_send()
    error = wire.ErrorResponse.build("ERROR", "42704", 'replication slot "missing" does not exist')
    events = session.receive_data(enc(error, wire.ReadyForQuery("I")))
    assert events == [
        ErrorReceived(
            ServerError("42704", 'replication slot "missing" does not exist', error.fields)
        ),
        Ready("I"),
    ]
    assert isinstance(events[0], ErrorReceived)
    assert (
        str(events[0].error) == 'ERROR: replication slot "missing" does not exist (SQLSTATE 42704)'
    )
    assert session.state is State.IDLE


def test_notices_and_parameter_changes_are_reported_in_any_started_state() -> None:
    session = idle_session()
    notice = wire.NoticeResponse.build("WARNING", "01000", "careful")
    events = session.receive_data(enc(notice, wire.ParameterStatus("application_name", "x")))
    assert events == [
        Notice("WARNING", "01000", "careful", notice.fields),
        ParameterChanged("application_name", "x"),
    ]
    assert session.parameters["application_name"] == "x"


# --- streaming ------------------------------------------------------------------------


def test_xlogdata_events_carry_positions_payload_and_decoded_message() -> None:
    session = streaming_session(decode_pgoutput=True)
    begin = pgoutput.Begin(final_lsn=0x16B3748, commit_timestamp=0, xid=735)
    [event] = session.receive_data(enc(xlog(0x16B3700, begin)))
    assert event == WalData(
        LSN(0x16B3700), LSN(0x16B3700), 555, pgoutput.encode(begin), message=begin
    )
    assert session.received_lsn == 0x16B3700


def test_keepalive_with_reply_requested_is_answered_with_the_last_positions() -> None:
    """The answer repeats what send_status reported; 'now' stamps it."""
    session = streaming_session()
    session.send_status(0x100, 0x80, 0x80, 1000)
    assert status_updates(sent(session)) == [
        replication.StandbyStatusUpdate(0x100, 0x80, 0x80, 1000, False)
    ]
    now = datetime(2000, 1, 1, 0, 0, 1, tzinfo=UTC)
    events = session.receive_data(enc(keepalive(0x200, True), keepalive(0x210, False)), now=now)
    assert events == [
        Keepalive(LSN(0x200), 777, reply_requested=True, answered=True),
        Keepalive(LSN(0x210), 777, reply_requested=False, answered=False),
    ]
    assert status_updates(sent(session)) == [
        replication.StandbyStatusUpdate(0x100, 0x80, 0x80, 1_000_000, False)
    ]
    assert session.received_lsn == 0x210


def test_keepalive_is_not_answered_when_auto_reply_is_off() -> None:
    session = streaming_session(auto_reply=False)
    [event] = session.receive_data(enc(keepalive(0x200, True)))
    assert event == Keepalive(LSN(0x200), 777, True, answered=False)
    assert session.data_to_send() == b""


def test_send_status_with_reply_requested() -> None:
    session = streaming_session()
    session.send_status(LSN.parse("0/10"), 0x10, 0x8, datetime(2000, 1, 1, tzinfo=UTC), True)
    assert status_updates(sent(session)) == [
        replication.StandbyStatusUpdate(0x10, 0x10, 0x8, 0, True)
    ]


def test_copydone_shutdown_sequence_returns_to_idle() -> None:
    """Client CopyDone; the server may still send data, then CopyDone, a stale keepalive
    (seen on real servers), CommandComplete COPY 0 and START_REPLICATION, ReadyForQuery."""
    session = streaming_session()
    session.stop()
    assert sent(session) == [wire.CopyDone()]
    assert session.state is State.STOPPING
    events = session.receive_data(
        enc(
            keepalive(0x300, True),
            wire.CopyDone(),
            keepalive(0x300, False),
            wire.CommandComplete("COPY 0"),
            wire.CommandComplete("START_REPLICATION"),
            wire.ReadyForQuery("I"),
        )
    )
    assert events == [
        Keepalive(LSN(0x300), 777, True, answered=False),  # CopyData may not follow CopyDone
        StreamEnded(by_server=False),
        Keepalive(LSN(0x300), 777, False),
        CommandResult((), (), "COPY 0"),
        CommandResult((), (), "START_REPLICATION"),
        Ready("I"),
    ]
    assert session.data_to_send() == b""
    assert session.state is State.IDLE
    session.query("SELECT 1")  # commands work again


def test_copydone_from_the_server_is_answered() -> None:
    session = streaming_session()
    [event] = session.receive_data(enc(wire.CopyDone()))
    assert event == StreamEnded(by_server=True)
    assert sent(session) == [wire.CopyDone()]
    assert session.state is State.COPY_DONE


def test_shutdown_without_copydone_then_eof() -> None:
    """A stopping walsender sends CommandComplete COPY 0 with no CopyDone, then closes."""
    session = streaming_session()
    events = session.receive_data(enc(wire.CommandComplete("COPY 0")))
    assert events == [StreamEnded(by_server=True), CommandResult((), (), "COPY 0")]
    assert session.receive_data(b"") == [ConnectionClosed()]
    assert session.state is State.CLOSED


def test_error_during_streaming_is_an_event_then_idle() -> None:
    """A missing publication is reported after CopyBoth, when the first change decodes."""
    session = streaming_session()
    error = wire.ErrorResponse.build("ERROR", "42704", 'publication "p" does not exist')
    events = session.receive_data(enc(keepalive(1, False), error, wire.ReadyForQuery("I")))
    assert events[1] == ErrorReceived(
        ServerError("42704", 'publication "p" does not exist', error.fields)
    )
    assert events[2] == Ready("I")
    assert session.state is State.IDLE


def test_terminate_sends_x_and_closes() -> None:
    session = streaming_session()
    session.terminate()
    assert sent(session) == [wire.Terminate()]
    assert session.state is State.CLOSED
    assert session.receive_data(b"") == []


# --- protocol errors --------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        enc(wire.DataRow((b"1",))),
        enc(keepalive(1, False)),
        enc(wire.CopyBothResponse()),
        b"?\x00\x00\x00\x04",  # no such message type
        enc(wire.ReadyForQuery("I"))[:-1] + b"X",  # bad transaction status
    ],
)
def test_bytes_that_do_not_fit_idle_raise_protocol_violation(data: bytes) -> None:
    session = idle_session()
    with pytest.raises(ProtocolViolationError):
        session.receive_data(data)
    assert session.state is State.ERROR
    with pytest.raises(ProtocolViolationError):
        session.receive_data(enc(wire.ReadyForQuery("I")))


def test_events_before_a_violation_are_kept_on_the_error() -> None:
    session = idle_session()
    notice = wire.NoticeResponse.build("NOTICE", "00000", "hi")
    with pytest.raises(ProtocolViolationError) as info:
        session.receive_data(enc(notice, wire.CopyDone()))
    assert info.value.events == (Notice("NOTICE", "00000", "hi", notice.fields),)


def test_datarow_must_match_the_row_description() -> None:
    session = idle_session()
    session.query("SELECT 1")
    with pytest.raises(ProtocolViolationError, match="2 values for 1 columns"):
        session.receive_data(
            enc(wire.RowDescription((wire.FieldDescription("a"),)), wire.DataRow((b"1", b"2")))
        )


def test_undecodable_copy_data_is_a_protocol_violation() -> None:
    session = streaming_session()
    with pytest.raises(ProtocolViolationError, match="undecodable"):
        session.receive_data(enc(wire.CopyData(b"z123")))


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.query("SELECT 1"),
        lambda s: s.start_replication("s"),
        lambda s: s.connect(),
    ],
)
def test_commands_while_streaming_are_refused(call: Callable[[ReplicationSession], None]) -> None:
    session = streaming_session()
    with pytest.raises(InvalidStateError):
        call(session)
    assert session.state is State.STREAMING
    assert session.data_to_send() == b""


# --- every transition of the table ---------------------------------------------------


def _scram_final_for(session: ReplicationSession) -> bytes:
    [response] = sent(session, password_kind=wire.SASLResponse)
    assert isinstance(response, wire.SASLResponse)
    return scram_server_check(response.data)


PATHS: dict[State, Callable[[], ReplicationSession]] = {}


Build = Callable[[], ReplicationSession]


def _path(state: State) -> Callable[[Build], Build]:
    """Register how to bring a fresh session into ``state``."""

    def register(build: Build) -> Build:
        PATHS[state] = build
        return build

    return register


@_path(State.NEW)
def _new() -> ReplicationSession:
    return new_session()


@_path(State.AUTHENTICATING)
def _authenticating() -> ReplicationSession:
    session = new_session()
    session.connect()
    session.data_to_send()
    return session


@_path(State.SASL_CONTINUE)
def _sasl_continue() -> ReplicationSession:
    session = _authenticating()
    session.receive_data(enc(wire.AuthenticationSASL(("SCRAM-SHA-256",))))
    session.data_to_send()
    return session


@_path(State.SASL_FINAL)
def _sasl_final() -> ReplicationSession:
    session = _sasl_continue()
    session.receive_data(enc(wire.AuthenticationSASLContinue(SERVER_FIRST)))
    return session


@_path(State.STARTING)
def _starting() -> ReplicationSession:
    session = _authenticating()
    session.receive_data(enc(wire.AuthenticationOk(), wire.ParameterStatus("server_version", "16")))
    return session


PATHS[State.IDLE] = idle_session
PATHS[State.STREAMING] = streaming_session


@_path(State.QUERY)
def _query() -> ReplicationSession:
    session = idle_session()
    session.query("SELECT")
    session.data_to_send()
    return session


@_path(State.STOPPING)
def _stopping() -> ReplicationSession:
    session = streaming_session()
    session.stop()
    session.data_to_send()
    return session


@_path(State.COPY_DONE)
def _copy_done() -> ReplicationSession:
    session = _stopping()
    session.receive_data(enc(wire.CopyDone()))
    return session


@_path(State.ENDING)
def _ending() -> ReplicationSession:
    session = _copy_done()
    session.receive_data(enc(wire.CommandComplete("COPY 0")))
    return session


@_path(State.CLOSED)
def _closed() -> ReplicationSession:
    session = idle_session()
    session.terminate()
    session.data_to_send()
    return session


@_path(State.ERROR)
def _error() -> ReplicationSession:
    session = idle_session()
    with pytest.raises(ProtocolViolationError):
        session.receive_data(enc(wire.CopyDone()))
    return session


SAMPLES: dict[type[wire.BackendMessage], wire.BackendMessage] = {
    wire.AuthenticationOk: wire.AuthenticationOk(),
    wire.AuthenticationCleartextPassword: wire.AuthenticationCleartextPassword(),
    wire.AuthenticationMD5Password: wire.AuthenticationMD5Password(b"abcd"),
    wire.AuthenticationSASL: wire.AuthenticationSASL(("SCRAM-SHA-256",)),
    wire.AuthenticationSASLContinue: wire.AuthenticationSASLContinue(SERVER_FIRST),
    wire.AuthenticationKerberosV5: wire.AuthenticationKerberosV5(),
    wire.AuthenticationGSS: wire.AuthenticationGSS(),
    wire.AuthenticationGSSContinue: wire.AuthenticationGSSContinue(b"t"),
    wire.AuthenticationSSPI: wire.AuthenticationSSPI(),
    wire.BackendKeyData: wire.BackendKeyData(1, 2),
    wire.ReadyForQuery: wire.ReadyForQuery("I"),
    wire.RowDescription: wire.RowDescription(()),
    wire.DataRow: wire.DataRow(()),
    wire.CommandComplete: wire.CommandComplete("SELECT 0"),
    wire.EmptyQueryResponse: wire.EmptyQueryResponse(),
    wire.ErrorResponse: wire.ErrorResponse.build("ERROR", "XX000", "boom"),
    wire.CopyBothResponse: wire.CopyBothResponse(),
    wire.CopyData: keepalive(5, False),
    wire.CopyDone: wire.CopyDone(),
    wire.ParameterStatus: wire.ParameterStatus("TimeZone", "UTC"),
    wire.NoticeResponse: wire.NoticeResponse.build("NOTICE", "00000", "n"),
    wire.NotificationResponse: wire.NotificationResponse(1, "c", "p"),
    wire.CopyInResponse: wire.CopyInResponse(),
    wire.NoData: wire.NoData(),
}
ACTIONS: dict[Trigger, Callable[[ReplicationSession], object]] = {
    Trigger.CONNECT: lambda s: s.connect(),
    Trigger.QUERY: lambda s: s.query("SELECT 1"),
    Trigger.START_REPLICATION: lambda s: s.start_replication("s", 0, {"proto_version": "1"}),
    Trigger.SEND_STATUS: lambda s: s.send_status(1, 1, 1, 0),
    Trigger.STOP: lambda s: s.stop(),
    Trigger.TERMINATE: lambda s: s.terminate(),
    Trigger.SERVER_FATAL: lambda s: s.receive_data(
        enc(wire.ErrorResponse.build("FATAL", "57P01", "terminating connection"))
    ),
    Trigger.SERVER_EOF: lambda s: s.receive_data(b""),
}


def _apply(session: ReplicationSession, key: object) -> None:
    if isinstance(key, Trigger):
        ACTIONS[key](session)
    elif key is wire.AuthenticationSASLFinal:
        session.receive_data(enc(wire.AuthenticationSASLFinal(_scram_final_for(session))))
    else:
        assert isinstance(key, type)
        session.receive_data(enc(SAMPLES[key]))


LEGAL = [(state, key, target) for state, row in TRANSITIONS.items() for key, target in row.items()]


def test_every_state_has_a_path_and_a_row() -> None:
    assert set(PATHS) == set(State) == set(TRANSITIONS)
    for state, build in PATHS.items():
        assert build().state is state


@pytest.mark.parametrize(
    ("state", "key", "target"),
    LEGAL,
    ids=[f"{s.name}-{getattr(k, '__name__', k)}" for s, k, _ in LEGAL],
)
def test_every_legal_transition_reaches_its_target(
    state: State, key: object, target: State
) -> None:
    session = PATHS[state]()
    if target is State.ERROR:  # unsupported authentication methods
        with pytest.raises(AuthenticationError):
            _apply(session, key)
    else:
        _apply(session, key)
    assert session.state is target


ILLEGAL = [
    (state, key)
    for state in State
    for key in [*SAMPLES, *ACTIONS]
    if key not in TRANSITIONS[state]
    and not (state is State.CLOSED and key is Trigger.SERVER_EOF)  # EOF twice is harmless
]


@pytest.mark.parametrize(
    ("state", "key"), ILLEGAL, ids=[f"{s.name}-{getattr(k, '__name__', k)}" for s, k in ILLEGAL]
)
def test_everything_else_raises_a_typed_error(state: State, key: object) -> None:
    session = PATHS[state]()
    expected = (
        InvalidStateError
        if isinstance(key, Trigger) and not key.name.startswith("SERVER_")
        else ProtocolViolationError
    )
    session.data_to_send()  # whatever the path to the state left queued
    with pytest.raises(expected):
        _apply(session, key)
    if expected is InvalidStateError:
        assert session.state is state
        assert session.data_to_send() == b"", "a refused call must not queue bytes"
    else:
        assert session.state is State.ERROR


# --- framing ----------------------------------------------------------------------------


def _phases() -> list[tuple[Callable[[ReplicationSession], object], bytes]]:
    """(what the client does, what the server answers), for a whole capture."""
    begin = pgoutput.Begin(final_lsn=0x200, commit_timestamp=5, xid=9)
    commit = pgoutput.Commit(flags=0, commit_lsn=0x200, end_lsn=0x230, commit_timestamp=5)
    stream = enc(
        wire.CopyBothResponse(),
        xlog(0x100, begin),
        keepalive(0x180, True),
        xlog(0x230, commit),
        wire.CopyDone(),
        wire.CommandComplete("COPY 0"),
        wire.CommandComplete("START_REPLICATION"),
        wire.ReadyForQuery("I"),
    )
    return [
        (lambda s: s.connect(), STARTUP_REPLY),
        (lambda s: s.identify_system(), IDENTIFY_REPLY),
        (lambda s: s.start_replication("s", 0, pgoutput_options("p")), stream),
    ]


def _run(byte_at_a_time: bool) -> tuple[list[object], bytes]:
    session = new_session(decode_pgoutput=True)
    events: list[object] = []
    out = b""
    for act, reply in _phases():
        act(session)
        chunks = [reply[i : i + 1] for i in range(len(reply))] if byte_at_a_time else [reply]
        for chunk in chunks:
            events.extend(session.receive_data(chunk, now=0))
            out += session.data_to_send()
        assert session.state is State.IDLE
    return events, out


def test_whole_and_byte_at_a_time_give_the_same_events_and_replies() -> None:
    whole = _run(byte_at_a_time=False)
    assert _run(byte_at_a_time=True) == whole
    events, out = whole
    assert sum(isinstance(e, WalData) for e in events) == 2
    assert any(isinstance(e, Keepalive) and e.answered for e in events)
    assert StreamEnded(by_server=True) in events
    reader = wire.FrontendReader()
    reader.feed(out)
    assert [type(m) for m in reader] == [
        wire.StartupMessage,
        wire.Query,
        wire.Query,
        wire.CopyData,  # the keepalive's answer
        wire.CopyDone,  # ours, after the server's
    ]


# --- connection strings -------------------------------------------------------------------


def test_keyword_value_dsn_with_quotes_and_escapes() -> None:
    params = parse_dsn(
        "host=127.0.0.1 port = 5433 user=postgres dbname='my db' password='it\\'s' "
        "application_name=cap replication=database sslmode=disable"
    )
    assert (params.host, params.port, params.user, params.dbname) == (
        "127.0.0.1",
        5433,
        "postgres",
        "my db",
    )
    assert (params.password, params.application_name) == ("it's", "cap")


def test_uri_dsn_with_percent_escapes_and_query_parameters() -> None:
    params = parse_dsn("postgresql://us%40er:p%3Ass@[::1]:6543/d%20b?application_name=x")
    assert (params.host, params.port, params.user, params.password, params.dbname) == (
        "::1",
        6543,
        "us@er",
        "p:ss",
        "d b",
    )
    assert params.application_name == "x"
    assert parse_dsn("postgres:///?host=/tmp").socket_path == "/tmp/.s.PGSQL.5432"


@pytest.mark.parametrize(
    "dsn", ["host", "replication=true", "sslmode=require", "password='open", "port=x"]
)
def test_bad_or_unsupported_dsns_are_refused(dsn: str) -> None:
    with pytest.raises(ValueError):
        parse_dsn(dsn)
