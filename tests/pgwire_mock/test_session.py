"""The fake walsender's state machine, driven without a network or a clock."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from codec.replication import (
    HotStandbyFeedback,
    PrimaryKeepalive,
    StandbyStatusUpdate,
    XLogData,
    decode_server_copy_data,
)
from codec.replication import encode as encode_replication
from codec.wire import (
    AuthenticationCleartextPassword,
    AuthenticationMD5Password,
    AuthenticationOk,
    AuthenticationSASL,
    AuthenticationSASLContinue,
    AuthenticationSASLFinal,
    BackendKeyData,
    BackendReader,
    CancelRequest,
    CommandComplete,
    CopyBothResponse,
    CopyData,
    CopyDone,
    DataRow,
    EmptyQueryResponse,
    ErrorResponse,
    GSSENCRequest,
    NoticeResponse,
    ParameterStatus,
    Parse,
    PasswordMessage,
    Query,
    ReadyForQuery,
    RowDescription,
    SASLInitialResponse,
    SASLResponse,
    SSLRequest,
    StartupMessage,
    Sync,
    Terminate,
)
from pgwire_mock.client.auth import ScramSha256, md5_password
from pgwire_mock.server import VERSIONS, error
from pgwire_mock.server.auth import User
from pgwire_mock.server.session import Phase, SessionConfig, WalSenderSession, pg_time
from pgwire_mock.server.source import RecordingSource
from pgwire_mock.server.state import ServerState
from pgwire_mock.streamfile import read_stream

GOLDEN = Path(__file__).parent.parent / "data" / "golden"
MAJORS = tuple(VERSIONS)
T0 = 1_700_000_000.0


def recording(major: int, name: str = "streaming.v2-stream") -> RecordingSource:
    return RecordingSource.from_file(GOLDEN / f"pg{major}" / f"{name}.jsonl")


def payloads(major: int, name: str = "streaming.v2-stream") -> list[bytes]:
    with (GOLDEN / f"pg{major}" / f"{name}.jsonl").open("rb") as f:
        return [e.payload for e in read_stream(f)]


def counter_bytes() -> object:
    """Deterministic 'random' bytes: 0, 1, 2, ... (fixed salts and nonces)."""
    counter = itertools.count()

    def random_bytes(n: int) -> bytes:
        return bytes(next(counter) % 256 for _ in range(n))

    return random_bytes


class Client:
    """Drives a session like a client would, decoding every reply."""

    def __init__(self, session: WalSenderSession) -> None:
        self.session = session
        self.reader = BackendReader()
        self.now = T0

    def send(self, *messages: object) -> list[object]:
        data = b"".join(m.encode() for m in messages)  # type: ignore[attr-defined]
        self.session.receive_data(data, self.now)
        return self.replies()

    def replies(self) -> list[object]:
        self.reader.feed(self.session.data_to_send())
        out: list[object] = []
        for message in self.reader:
            if isinstance(message, CopyData):
                out.append(decode_server_copy_data(bytes(message.data)))
            else:
                out.append(message)
        return out

    def query(self, text: str) -> list[object]:
        return self.send(Query(text))

    def pump(self) -> list[object]:
        self.session.produce(1 << 20, self.now)
        return self.replies()

    def tick(self, seconds: float) -> list[object]:
        self.now += seconds
        self.session.tick(self.now)
        return self.replies()


def make(
    major: int = 16,
    *,
    state: ServerState | None = None,
    source: RecordingSource | None = None,
    **config: object,
) -> tuple[Client, ServerState]:
    if state is None:
        state = ServerState()
        if source is not None:
            state.wal_lsn = source.start_lsn
            state.declare(source.slots, source.publications)
    cfg = SessionConfig(major=major, source=source, random_bytes=counter_bytes(), **config)  # type: ignore[arg-type]
    return Client(WalSenderSession(cfg, state, now=T0)), state


def connect(
    major: int = 16,
    replication: str = "database",
    **kwargs: object,
) -> tuple[Client, ServerState]:
    client, state = make(major, **kwargs)  # type: ignore[arg-type]
    replies = client.send(
        StartupMessage(
            (("user", "postgres"), ("database", "postgres"), ("replication", replication))
        )
    )
    assert isinstance(replies[0], AuthenticationOk)
    assert replies[-1] == ReadyForQuery("I")
    return client, state


def errors(replies: list[object]) -> list[tuple[tuple[str, str], ...]]:
    return [m.fields for m in replies if isinstance(m, ErrorResponse)]


def rows(replies: list[object]) -> list[tuple[str | None, ...]]:
    return [
        tuple(None if v is None else bytes(v).decode() for v in m.values)
        for m in replies
        if isinstance(m, DataRow)
    ]


# --- startup ------------------------------------------------------------------------------


@pytest.mark.parametrize("major", MAJORS)
def test_startup_sends_the_versions_parameter_status_in_order(major: int) -> None:
    """After AuthenticationOk: ParameterStatus in the version's order, BackendKeyData, 'I'."""
    client, _ = make(major)
    replies = client.send(
        StartupMessage(
            (
                ("user", "alice"),
                ("database", "db"),
                ("replication", "database"),
                ("application_name", "app"),
            )
        )
    )
    assert isinstance(replies[0], AuthenticationOk)
    statuses = [(m.name, m.value) for m in replies if isinstance(m, ParameterStatus)]
    assert [n for n, _ in statuses] == [n for n, _ in VERSIONS[major].parameter_status]
    values = dict(statuses)
    assert values["server_version"] == VERSIONS[major].server_version
    assert values["integer_datetimes"] == "on"
    assert values["application_name"] == "app"
    assert values["session_authorization"] == "alice"
    assert ("scram_iterations" in values) == (major >= 16)
    assert isinstance(replies[-2], BackendKeyData)
    assert replies[-1] == ReadyForQuery("I")


@pytest.mark.parametrize("value", ["bogus", "2", "databases"])
def test_invalid_replication_parameter_is_fatal(value: str) -> None:
    """replication=<not database nor a Boolean> is FATAL 22023, and the connection closes."""
    client, _ = make(15)
    replies = client.send(StartupMessage((("user", "u"), ("replication", value))))
    assert errors(replies) == [error(15, "invalid_replication_parameter", value=value).fields()]
    assert client.session.close_requested


@pytest.mark.parametrize(
    ("value", "mode"),
    [
        ("true", "physical"),
        ("on", "physical"),
        ("1", "physical"),
        ("no", "plain"),
        ("database", "database"),
    ],
)
def test_replication_parameter_values(value: str, mode: str) -> None:
    client, _ = make()
    client.send(StartupMessage((("user", "u"), ("replication", value))))
    assert client.session.replication == mode


def test_ssl_request_is_refused_without_tls_and_gssenc_always() -> None:
    """SSLRequest → 'N' when no certificate is configured; GSSENCRequest → 'N'."""
    client, _ = make()
    client.session.receive_data(SSLRequest().encode(), T0)
    assert client.session.data_to_send() == b"N"
    client.session.receive_data(GSSENCRequest().encode(), T0)
    assert client.session.data_to_send() == b"N"
    assert not client.session.take_start_tls()
    assert client.session.phase is Phase.STARTUP


def test_ssl_request_with_tls_asks_for_the_handshake() -> None:
    """With TLS configured: 'S', then the transport must start TLS before reading on."""
    client, _ = make(tls=True)
    client.session.receive_data(SSLRequest().encode(), T0)
    assert client.session.data_to_send() == b"S"
    assert client.session.take_start_tls()
    assert not client.session.take_start_tls()


def test_unencrypted_bytes_after_ssl_request_are_fatal() -> None:
    """CVE-2021-23214: data pipelined after SSLRequest is refused."""
    client, _ = make(tls=True)
    startup = StartupMessage((("user", "u"),))
    client.session.receive_data(SSLRequest().encode() + startup.encode(), T0)
    out = client.session.data_to_send()
    assert out[:1] == b"S"
    client.reader.feed(out[1:])
    assert [m.message for m in client.reader if isinstance(m, ErrorResponse)] == [
        "received unencrypted data after SSL request"
    ]
    assert client.session.close_requested


def test_cancel_request_cancels_a_running_stream() -> None:
    """A CancelRequest with the right key ends START_REPLICATION with 57014 and 'I'."""
    client, state = connect(16, source=recording(16))
    client.query('CREATE_REPLICATION_SLOT "s" LOGICAL "pgoutput"')
    client.query(
        "START_REPLICATION SLOT s LOGICAL 0/0 "
        "(proto_version '2', publication_names 'pgwm_streaming')"
    )
    key = client.session.secret_key
    other = Client(WalSenderSession(client.session.config, state, now=T0))
    other.send(CancelRequest(client.session.pid, key))
    assert other.session.close_requested
    replies = client.replies()
    assert [m.sqlstate for m in replies if isinstance(m, ErrorResponse)] == ["57014"]
    assert replies[-1] == ReadyForQuery("I")
    assert state.slots["s"].active_pid is None


# --- authentication -----------------------------------------------------------------------


def test_cleartext_password() -> None:
    client, _ = make(auth="password", users={"app": User("app", "secret")})
    replies = client.send(StartupMessage((("user", "app"), ("replication", "database"))))
    assert replies == [AuthenticationCleartextPassword()]
    replies = client.send(PasswordMessage("secret"))
    assert isinstance(replies[0], AuthenticationOk)
    assert replies[-1] == ReadyForQuery("I")


@pytest.mark.parametrize("method", ["password", "md5", "scram-sha-256"])
def test_wrong_password_is_fatal_28p01(method: str) -> None:
    """Every method reports a wrong password the same way, then closes."""
    client, _ = make(auth=method, users={"app": User("app", "secret")})
    first = client.send(StartupMessage((("user", "app"), ("replication", "database"))))
    if method == "scram-sha-256":
        scram = ScramSha256("wrong", nonce="clientnonce")
        server_first = client.send(
            SASLInitialResponse("SCRAM-SHA-256", scram.client_first_message())
        )
        assert isinstance(server_first[0], AuthenticationSASLContinue)
        replies = client.send(SASLResponse(scram.client_final_message(server_first[0].data)))
    elif method == "md5":
        assert isinstance(first[0], AuthenticationMD5Password)
        replies = client.send(PasswordMessage(md5_password("app", "wrong", first[0].salt)))
    else:
        replies = client.send(PasswordMessage("wrong"))
    assert [
        (m.severity, m.sqlstate, m.message) for m in replies if isinstance(m, ErrorResponse)
    ] == [("FATAL", "28P01", 'password authentication failed for user "app"')]
    assert client.session.close_requested


def test_md5_password() -> None:
    client, _ = make(auth="md5", users={"app": User("app", "secret")})
    replies = client.send(StartupMessage((("user", "app"), ("replication", "database"))))
    request = replies[0]
    assert isinstance(request, AuthenticationMD5Password)
    assert request.salt == bytes([4, 5, 6, 7])  # after the 4 bytes of the cancel key
    replies = client.send(PasswordMessage(md5_password("app", "secret", request.salt)))
    assert isinstance(replies[0], AuthenticationOk)


def test_scram_sha_256_with_a_fixed_nonce() -> None:
    """The server's SCRAM: salt and nonce from the injected randomness; the client checks
    the server signature, so both sides agree on the whole exchange."""
    client, _ = make(auth="scram-sha-256", users={"app": User("app", "secret")})
    replies = client.send(StartupMessage((("user", "app"), ("replication", "database"))))
    assert replies == [AuthenticationSASL(("SCRAM-SHA-256",))]
    scram = ScramSha256("secret", nonce="fyko+d2lbbFgONRv9qkxdawL")
    replies = client.send(SASLInitialResponse("SCRAM-SHA-256", scram.client_first_message()))
    server_first = replies[0]
    assert isinstance(server_first, AuthenticationSASLContinue)
    text = server_first.data.decode()
    assert text.startswith("r=fyko+d2lbbFgONRv9qkxdawL")
    assert text.endswith(",i=4096")
    replies = client.send(SASLResponse(scram.client_final_message(server_first.data)))
    assert isinstance(replies[0], AuthenticationSASLFinal)
    scram.verify_server_final(replies[0].data)
    assert isinstance(replies[1], AuthenticationOk)
    assert replies[-1] == ReadyForQuery("I")


def test_scram_for_an_unknown_user_fails_like_a_wrong_password() -> None:
    client, _ = make(auth="scram-sha-256", users={"app": User("app", "secret")})
    client.send(StartupMessage((("user", "mallory"), ("replication", "database"))))
    scram = ScramSha256("secret", nonce="abc")
    first = client.send(SASLInitialResponse("SCRAM-SHA-256", scram.client_first_message()))
    replies = client.send(SASLResponse(scram.client_final_message(first[0].data)))  # type: ignore[attr-defined]
    assert [m.sqlstate for m in replies if isinstance(m, ErrorResponse)] == ["28P01"]


def test_trust_with_an_unknown_role() -> None:
    """trust: AuthenticationOk first, then FATAL 28000 role does not exist."""
    client, _ = make(users={"app": User("app")})
    replies = client.send(StartupMessage((("user", "nobody"), ("replication", "database"))))
    assert isinstance(replies[0], AuthenticationOk)
    assert [m.message for m in replies if isinstance(m, ErrorResponse)] == [
        'role "nobody" does not exist'
    ]


# --- commands -------------------------------------------------------------------------------


@pytest.mark.parametrize("major", MAJORS)
def test_identify_system_timeline_type(major: int) -> None:
    """IDENTIFY_SYSTEM: int4 timeline on 14/15, int8 on 16/17; dbname on a database walsender."""
    client, state = connect(major)
    replies = client.query("IDENTIFY_SYSTEM")
    description = replies[0]
    assert isinstance(description, RowDescription)
    assert [f.name for f in description.fields] == ["systemid", "timeline", "xlogpos", "dbname"]
    assert description.fields[1].type_oid == (23 if major < 16 else 20)
    assert all(f.table_oid == 0 and f.column_number == 0 for f in description.fields)
    assert rows(replies) == [(str(state.system_identifier), "1", "0/1000000", "postgres")]
    assert replies[-2:] == [CommandComplete("IDENTIFY_SYSTEM"), ReadyForQuery("I")]


def test_show() -> None:
    client, _ = connect()
    replies = client.query("SHOW data_directory_mode")
    assert rows(replies) == [("0700",)]
    assert replies[-2:] == [CommandComplete("SHOW"), ReadyForQuery("I")]
    replies = client.query("SHOW wal_sender_timeout")
    assert rows(replies) == [("1min",)]
    assert [m.sqlstate for m in client.query("SHOW nope") if isinstance(m, ErrorResponse)] == [
        "42704"
    ]


@pytest.mark.parametrize("major", MAJORS)
def test_create_replication_slot_result_row(major: int) -> None:
    """CREATE_REPLICATION_SLOT: slot_name, consistent_point, snapshot_name, output_plugin."""
    client, state = connect(major)
    replies = client.query('CREATE_REPLICATION_SLOT "s" LOGICAL "pgoutput"')
    assert [f.name for f in replies[0].fields] == [  # type: ignore[attr-defined]
        "slot_name",
        "consistent_point",
        "snapshot_name",
        "output_plugin",
    ]
    ((name, point, snapshot, plugin),) = rows(replies)
    assert (name, point, plugin) == ("s", "0/1000000", "pgoutput")
    assert snapshot is not None  # EXPORT_SNAPSHOT is the default
    assert replies[-2:] == [CommandComplete("CREATE_REPLICATION_SLOT"), ReadyForQuery("I")]
    nothing = "( SNAPSHOT 'nothing')" if major >= 15 else "NOEXPORT_SNAPSHOT"
    replies = client.query(f'CREATE_REPLICATION_SLOT "t" LOGICAL "pgoutput" {nothing}')
    assert rows(replies)[0][2] is None
    assert set(state.slots) == {"s", "t"}


@pytest.mark.parametrize("major", MAJORS)
def test_slot_errors(major: int) -> None:
    client, _ = connect(major)
    client.query("CREATE_REPLICATION_SLOT s LOGICAL pgoutput")
    assert errors(client.query("CREATE_REPLICATION_SLOT s LOGICAL pgoutput")) == [
        error(major, "slot_already_exists", slot="s").fields()
    ]
    assert errors(client.query('CREATE_REPLICATION_SLOT "Bad" LOGICAL pgoutput')) == [
        error(major, "slot_name_invalid_character", slot="Bad").fields()
    ]
    assert errors(client.query("DROP_REPLICATION_SLOT nope")) == [
        error(major, "slot_does_not_exist", slot="nope").fields()
    ]
    replies = client.query(
        "START_REPLICATION SLOT nope LOGICAL 0/0 (proto_version '1', publication_names 'p')"
    )
    assert errors(replies) == [error(major, "slot_does_not_exist", slot="nope").fields()]
    assert replies[-1] == ReadyForQuery("I")
    assert client.query("DROP_REPLICATION_SLOT s")[-2:] == [
        CommandComplete("DROP_REPLICATION_SLOT"),
        ReadyForQuery("I"),
    ]


def test_active_slot_is_refused_with_the_holders_pid() -> None:
    """If the slot is active, START_REPLICATION fails with 55006 and the stream is not started."""
    source = recording(16)
    first, state = connect(16, source=source)
    first.query("CREATE_REPLICATION_SLOT s LOGICAL pgoutput")
    first.query(
        "START_REPLICATION SLOT s LOGICAL 0/0 "
        "(proto_version '2', publication_names 'pgwm_streaming')"
    )
    second = Client(WalSenderSession(first.session.config, state, now=T0))
    second.send(StartupMessage((("user", "postgres"), ("replication", "database"))))
    replies = second.query(
        "START_REPLICATION SLOT s LOGICAL 0/0 (proto_version '2', publication_names 'x')"
    )
    assert errors(replies) == [error(16, "slot_active", slot="s", pid=first.session.pid).fields()]
    assert not any(isinstance(m, CopyBothResponse) for m in replies)
    assert replies[-1] == ReadyForQuery("I")


@pytest.mark.parametrize("major", (15, 16, 17))
def test_streaming_with_two_phase_marks_the_slot_two_phase(major: int) -> None:
    """As CreateDecodingContext does on 15+: the first START_REPLICATION with the
    two_phase option marks the slot two-phase (pg_replication_slots.two_phase) for good;
    streaming without it does not."""
    client, state = connect(major, source=recording(major, "two_phase.v3-stream-2pc"))
    client.query("CREATE_REPLICATION_SLOT a LOGICAL pgoutput")
    client.query("CREATE_REPLICATION_SLOT b LOGICAL pgoutput")
    for slot, extra in (("a", ", two_phase 'on'"), ("b", "")):
        replies = client.query(
            f"START_REPLICATION SLOT {slot} LOGICAL 0/0 "
            f"(proto_version '3', publication_names 'pgwm_2pc'{extra})"
        )
        assert any(isinstance(m, CopyBothResponse) for m in replies)
        client.send(CopyDone())
        client.replies()
    assert (state.slots["a"].two_phase, state.slots["b"].two_phase) == (True, False)


@pytest.mark.parametrize("major", MAJORS)
def test_too_high_proto_version_is_refused_before_copy_both(major: int) -> None:
    client, _ = connect(major)
    client.query("CREATE_REPLICATION_SLOT s LOGICAL pgoutput")
    replies = client.query(
        "START_REPLICATION SLOT s LOGICAL 0/0 (proto_version '99', publication_names 'p')"
    )
    context = 'slot "s", output plugin "pgoutput", in the startup callback'
    expected = error(
        major,
        "pgoutput_proto_version_too_high",
        context=context,
        value=99,
        max=VERSIONS[major].max_proto_version,
    )
    assert errors(replies) == [expected.fields()]
    assert replies[-1] == ReadyForQuery("I")


def test_read_replication_slot_on_15_and_later() -> None:
    client, _ = connect(15)
    replies = client.query("READ_REPLICATION_SLOT nope")
    assert rows(replies) == [(None, None, None)]
    client.query("CREATE_REPLICATION_SLOT l LOGICAL pgoutput")
    assert errors(client.query("READ_REPLICATION_SLOT l")) == [
        error(15, "read_replication_slot_logical").fields()
    ]
    client14, _ = connect(14)
    assert [
        m.sqlstate
        for m in client14.query("READ_REPLICATION_SLOT x")
        if isinstance(m, ErrorResponse)
    ] == ["42601"]


def test_timeline_history_physical_and_base_backup_are_refused() -> None:
    client, _ = connect(16)
    assert errors(client.query("TIMELINE_HISTORY 1")) == [
        error(16, "timeline_history_missing", timeline=1).fields()
    ]
    for text in ("START_REPLICATION 0/0", "BASE_BACKUP"):
        replies = client.query(text)
        assert [m.sqlstate for m in replies if isinstance(m, ErrorResponse)] == ["0A000"]
        assert replies[-1] == ReadyForQuery("I")


def test_temporary_slots_are_dropped_on_error_and_at_the_end() -> None:
    client, state = connect()
    client.query("CREATE_REPLICATION_SLOT t TEMPORARY LOGICAL pgoutput")
    client.query("CREATE_REPLICATION_SLOT p LOGICAL pgoutput")
    assert "t" in state.slots
    client.query("IDENTIFY_SYSTEM x")  # a syntax error is an ERROR: cleanup runs
    assert set(state.slots) == {"p"}
    client.query("CREATE_REPLICATION_SLOT t2 TEMPORARY LOGICAL pgoutput")
    client.send(Terminate())
    assert set(state.slots) == {"p"}
    assert client.session.close_requested


# --- SQL ------------------------------------------------------------------------------------------


def test_sql_layer() -> None:
    client, state = connect(17)
    replies = client.query("SELECT pg_catalog.set_config('search_path', '', false);")
    assert rows(replies) == [("",)]
    assert replies[-2:] == [CommandComplete("SELECT 1"), ReadyForQuery("I")]
    assert client.query("BEGIN")[-1] == ReadyForQuery("T")
    assert client.query("COMMIT")[-1] == ReadyForQuery("I")
    replies = client.query("COMMIT")
    assert [m.sqlstate for m in replies if isinstance(m, NoticeResponse)] == ["25P01"]
    assert rows(client.query("SELECT version()"))[0][0].startswith("PostgreSQL 17.")  # type: ignore[union-attr]
    assert rows(client.query("SELECT pg_current_wal_lsn()")) == [("0/1000000",)]
    assert client.query("")[:1] == [EmptyQueryResponse()]
    client.query("CREATE PUBLICATION pub FOR TABLE public.t1, t2")
    assert state.publications["pub"].tables == ("public.t1", "public.t2")
    assert rows(client.query("SELECT pubname, puballtables FROM pg_publication")) == [("pub", "f")]
    assert rows(
        client.query("select tablename from pg_publication_tables where pubname = 'pub'")
    ) == [
        ("t1",),
        ("t2",),
    ]
    client.query("CREATE_REPLICATION_SLOT s LOGICAL pgoutput")
    assert rows(client.query("SELECT slot_name, plugin, active FROM pg_replication_slots")) == [
        ("s", "pgoutput", "f")
    ]


def test_unknown_sql_is_an_error_not_a_hang_and_aborts_the_transaction() -> None:
    client, _ = connect()
    client.query("BEGIN")
    replies = client.query("SELECT * FROM somewhere")
    assert [m.sqlstate for m in replies if isinstance(m, ErrorResponse)] == ["0A000"]
    assert replies[-1] == ReadyForQuery("E")
    assert [m.sqlstate for m in client.query("SELECT 1") if isinstance(m, ErrorResponse)] == [
        "25P02"
    ]
    assert client.query("ROLLBACK")[-2:] == [CommandComplete("ROLLBACK"), ReadyForQuery("I")]


def test_canned_sql_answers() -> None:
    from pgwire_mock.server.sql_result import CannedAnswer, Column

    answers = {"SELECT answer FROM t": CannedAnswer((Column("answer", "int4"),), (("42",),))}
    client, _ = connect(sql_answers=answers)
    replies = client.query(
        "select answer from t;".replace("select", "SELECT").replace("from", "FROM")
    )
    assert rows(replies) == [("42",)]
    assert replies[0].fields[0].type_oid == 23  # type: ignore[attr-defined]


def test_extended_protocol_is_refused_and_skipped_until_sync() -> None:
    """Parse → 08P01; everything up to Sync is ignored (even a Query); Sync → 'I'."""
    client, _ = connect(14)
    replies = client.send(Parse("", "IDENTIFY_SYSTEM"), Query("IDENTIFY_SYSTEM"))
    assert errors(replies) == [error(14, "extended_query_protocol").fields()]
    assert not any(isinstance(m, ReadyForQuery) for m in replies)
    assert client.send(Sync()) == [ReadyForQuery("I")]
    assert isinstance(client.query("IDENTIFY_SYSTEM")[0], RowDescription)


# --- streaming ------------------------------------------------------------------------------


def start(client: Client, major: int, start_lsn: str = "0/0", extra: str = "") -> list[object]:
    client.query("CREATE_REPLICATION_SLOT s LOGICAL pgoutput")
    return client.query(
        f"START_REPLICATION SLOT s LOGICAL {start_lsn} (proto_version '2', "
        f"publication_names 'pgwm_streaming', streaming 'on'{extra})"
    )


@pytest.mark.parametrize("major", MAJORS)
def test_streaming_replays_the_recording_byte_for_byte(major: int) -> None:
    client, _ = connect(major, source=recording(major))
    assert start(client, major) == [CopyBothResponse(0, ())]
    out = client.pump()
    xlog = [m for m in out if isinstance(m, XLogData)]
    assert [bytes(m.data) for m in xlog] == payloads(major)
    for m in xlog:
        tag = bytes(m.data)[:1]
        assert m.wal_start == m.wal_end
        if tag in (b"R", b"Y"):
            assert m.wal_start == 0  # WalSndPrepareWrite with last_write false
        assert m.send_time == pg_time(T0)
    assert isinstance(out[-1], PrimaryKeepalive)  # caught up, client confirmed nothing
    assert out[-1].wal_end == max(m.wal_end for m in xlog)
    assert not out[-1].reply_requested


def test_commit_xlogdata_carries_the_commit_end_lsn() -> None:
    client, _ = connect(16, source=recording(16, "types.v1"))
    client.query("CREATE_REPLICATION_SLOT s LOGICAL pgoutput")
    client.query(
        "START_REPLICATION SLOT s LOGICAL 0/0 (proto_version '1', publication_names 'pgwm_types')"
    )
    for m in client.pump():
        if isinstance(m, XLogData) and bytes(m.data)[:1] == b"C":
            end_lsn = int.from_bytes(bytes(m.data)[10:18], "big")
            assert m.wal_start == m.wal_end == end_lsn


def test_resume_skips_confirmed_transactions() -> None:
    source = recording(16, "types.v1")
    client, state = connect(16, source=source)
    client.query("CREATE_REPLICATION_SLOT s LOGICAL pgoutput")
    text = (
        "START_REPLICATION SLOT s LOGICAL 0/0 (proto_version '1', publication_names 'pgwm_types')"
    )
    client.query(text)
    first = [m for m in client.pump() if isinstance(m, XLogData)]
    commits = [m.wal_end for m in first if bytes(m.data)[:1] == b"C"]
    assert len(commits) >= 2
    client.send(CopyData(encode_replication(StandbyStatusUpdate(commits[0], commits[0], 0, 0))))
    assert state.slots["s"].confirmed_flush == commits[0]
    client.send(CopyDone())
    client.query(text)  # a second logical START_REPLICATION ends at once
    client.send(Terminate())
    again, _ = Client(WalSenderSession(client.session.config, state, now=T0)), None
    again.send(StartupMessage((("user", "postgres"), ("replication", "database"))))
    again.query(text)
    resumed = [m for m in again.pump() if isinstance(m, XLogData)]
    resumed_commits = [m.wal_end for m in resumed if bytes(m.data)[:1] == b"C"]
    assert resumed_commits == commits[1:]
    # The Relation messages of skipped transactions are sent again before the first change.
    assert bytes(resumed[1].data)[:1] in (b"R", b"Y")


def test_missing_publication_is_reported_after_copy_both() -> None:
    client, state = connect(16, source=recording(16))
    client.query("CREATE_REPLICATION_SLOT s LOGICAL pgoutput")
    replies = client.query(
        "START_REPLICATION SLOT s LOGICAL 0/0 (proto_version '2', publication_names 'nopub')"
    )
    assert replies == [CopyBothResponse(0, ())]
    out = client.pump()
    err = [m for m in out if isinstance(m, ErrorResponse)]
    assert [(m.sqlstate, m.message) for m in err] == [
        ("42704", 'publication "nopub" does not exist')
    ]
    assert err[0].where is not None and "in the change callback" in err[0].where
    assert out[-1] == ReadyForQuery("I")
    assert state.slots["s"].active_pid is None


def test_copy_done_ends_the_stream_and_a_second_start_ends_at_once() -> None:
    client, _ = connect(16, source=recording(16))
    start(client, 16)
    client.pump()
    replies = client.send(CopyDone())
    assert replies[0] == CopyDone()
    # The client confirmed nothing: one more keepalive after CopyDone (WalSndWaitForWal).
    assert isinstance(replies[1], PrimaryKeepalive)
    assert replies[2:] == [
        CommandComplete("COPY 0"),
        CommandComplete("START_REPLICATION"),
        ReadyForQuery("I"),
    ]
    replies = client.query(
        "START_REPLICATION SLOT s LOGICAL 0/0 "
        "(proto_version '2', publication_names 'pgwm_streaming')"
    )
    assert replies == [
        CopyBothResponse(0, ()),
        CommandComplete("COPY 0"),
        CommandComplete("START_REPLICATION"),
        ReadyForQuery("I"),
    ]


def test_keepalives_and_the_replication_timeout() -> None:
    """reply_requested=1 at timeout/2 without client messages; silent close at timeout."""
    client, state = connect(
        16, source=recording(16), wal_sender_timeout=10.0, idle_keepalive_interval=0.0
    )
    start(client, 16)
    client.pump()
    assert client.session.next_deadline() == T0 + 5
    replies = client.tick(5)
    assert (
        len(replies) == 1
        and isinstance(replies[0], PrimaryKeepalive)
        and replies[0].reply_requested
    )
    assert client.tick(4.9) == []
    replies = client.tick(0.1)
    assert replies == []  # no ErrorResponse
    assert client.session.close_requested
    assert state.slots["s"].active_pid is None


def test_status_updates_reset_the_timeout_and_reply_requests_are_answered() -> None:
    client, state = connect(
        16, source=recording(16), wal_sender_timeout=10.0, idle_keepalive_interval=0.0
    )
    start(client, 16)
    last = [m for m in client.pump() if isinstance(m, XLogData)][-1].wal_end
    client.tick(4)
    update = StandbyStatusUpdate(last, last, 0, 0, reply_requested=True)
    replies = client.send(CopyData(encode_replication(update)))
    assert len(replies) == 1 and isinstance(replies[0], PrimaryKeepalive)
    assert not replies[0].reply_requested and replies[0].wal_end == last
    assert state.slots["s"].confirmed_flush == last
    client.send(CopyData(encode_replication(HotStandbyFeedback(0, 0, 0, 0, 0))))
    assert client.tick(4) == []  # 4 s since the last message: no ping yet
    assert client.tick(1)[0].reply_requested  # type: ignore[attr-defined]


def test_idle_keepalives_advance_wal_end_only_on_a_server_writing_wal() -> None:
    client, _ = connect(
        16,
        source=recording(16),
        idle_keepalive_interval=2.0,
        wal_sender_timeout=0,
        idle_wal_advance=56,
    )
    start(client, 16)
    first = client.pump()[-1]
    assert isinstance(first, PrimaryKeepalive)
    second = client.tick(2)
    assert isinstance(second[0], PrimaryKeepalive)
    assert second[0].wal_end > first.wal_end and not second[0].reply_requested


def test_other_messages_while_streaming_are_fatal() -> None:
    client, state = connect(15, source=recording(15))
    start(client, 15)
    replies = client.query("IDENTIFY_SYSTEM")
    assert errors(replies) == [error(15, "invalid_standby_message_type", type="Q").fields()]
    assert client.session.close_requested
    assert state.slots["s"].active_pid is None


def test_terminate_and_eof_release_the_slot() -> None:
    client, state = connect(16, source=recording(16))
    start(client, 16)
    assert state.slots["s"].active_pid == client.session.pid
    client.session.receive_eof(T0)
    assert state.slots["s"].active_pid is None


def test_flow_control_produces_only_when_asked() -> None:
    """The session queues no stream data until produce(), and about max_bytes per call."""
    client, _ = connect(16, source=recording(16))
    start(client, 16)
    assert client.session.data_to_send() == b""
    assert client.session.can_produce
    produced = client.session.produce(1, T0)
    assert 0 < produced < 200
    assert len([m for m in client.replies() if isinstance(m, XLogData)]) == 1


def test_state_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    state = ServerState.load(path)
    state.create_slot("s", "pgoutput")
    state.create_slot("t", "pgoutput", temporary=True, owner_pid=1)
    state.confirm("s", 0x2000000)
    loaded = ServerState.load(path)
    assert set(loaded.slots) == {"s"}
    assert loaded.slots["s"].confirmed_flush == 0x2000000
    assert json.loads(path.read_text())["format"] == 1
