"""Hypothesis strategies for protocol 3.0/3.2 messages and replication CopyData payloads.

One strategy per message class, named after it in snake_case (``bind()``,
``data_row()``, ``error_response()``, ``x_log_data()``...), plus unions per direction::

    from hypothesis import given
    from codec.strategies.wire import backend_messages
    from codec.wire import BackendReader, encode

    @given(st.lists(backend_messages(typed_only=True)))
    def test_client_survives_any_server(messages):
        reader = BackendReader()
        reader.feed(b"".join(encode(m) for m in messages))
        assert list(reader) == messages

Messages without fields get ``st.just(...)`` rather than ``@st.composite``: Hypothesis
deprecates composite strategies that never call ``draw``.

Every value drawn is valid for its field (ranges, no NUL in strings), so ``encode``
never raises on them and decoding gives back an equal message.
"""

from __future__ import annotations

from hypothesis import strategies as st

from codec.replication import (
    ClientCopyData,
    HotStandbyFeedback,
    PrimaryKeepalive,
    ReplicationMessage,
    ServerCopyData,
    StandbyStatusUpdate,
    XLogData,
)
from codec.wire import (
    MAX_SECRET_KEY_LENGTH,
    MIN_SECRET_KEY_LENGTH,
    PROTOCOL_3_0,
    PROTOCOL_3_2,
    AuthenticationCleartextPassword,
    AuthenticationGSS,
    AuthenticationGSSContinue,
    AuthenticationKerberosV5,
    AuthenticationMD5Password,
    AuthenticationOk,
    AuthenticationSASL,
    AuthenticationSASLContinue,
    AuthenticationSASLFinal,
    AuthenticationSSPI,
    BackendKeyData,
    BackendMessage,
    Bind,
    BindComplete,
    CancelRequest,
    Close,
    CloseComplete,
    CommandComplete,
    CopyBothResponse,
    CopyData,
    CopyDone,
    CopyFail,
    CopyInResponse,
    CopyOutResponse,
    DataRow,
    Describe,
    EmptyQueryResponse,
    ErrorResponse,
    Execute,
    FieldDescription,
    Flush,
    FrontendMessage,
    FunctionCall,
    FunctionCallResponse,
    GSSENCRequest,
    GSSENCResponse,
    GSSResponse,
    NegotiateProtocolVersion,
    NoData,
    NoticeResponse,
    NotificationResponse,
    ParameterDescription,
    ParameterStatus,
    Parse,
    ParseComplete,
    PasswordMessage,
    PortalSuspended,
    Query,
    ReadyForQuery,
    RowDescription,
    SASLInitialResponse,
    SASLResponse,
    SecretKey,
    SSLRequest,
    SSLResponse,
    StartupMessage,
    StartupPacket,
    Sync,
    Terminate,
)

__all__ = [
    "authentication_cleartext_password",
    "authentication_gss",
    "authentication_gss_continue",
    "authentication_kerberos_v5",
    "authentication_md5_password",
    "authentication_ok",
    "authentication_sasl",
    "authentication_sasl_continue",
    "authentication_sasl_final",
    "authentication_sspi",
    "backend_key_data",
    "backend_messages",
    "bind",
    "bind_complete",
    "cancel_request",
    "client_copy_data",
    "close",
    "close_complete",
    "command_complete",
    "copy_both_response",
    "copy_data",
    "copy_done",
    "copy_fail",
    "copy_in_response",
    "copy_out_response",
    "data_row",
    "describe",
    "empty_query_response",
    "error_response",
    "execute",
    "field_description",
    "flush",
    "frontend_messages",
    "function_call",
    "function_call_response",
    "gss_response",
    "gssenc_request",
    "gssenc_response",
    "hot_standby_feedback",
    "lsns",
    "negotiate_protocol_version",
    "no_data",
    "notice_response",
    "notification_response",
    "parameter_description",
    "parameter_status",
    "parse",
    "parse_complete",
    "password_message",
    "portal_suspended",
    "primary_keepalive",
    "protocol_versions",
    "query",
    "ready_for_query",
    "replication_messages",
    "row_description",
    "sasl_initial_response",
    "sasl_response",
    "secret_keys",
    "server_copy_data",
    "ssl_request",
    "ssl_response",
    "standby_status_update",
    "startup_message",
    "startup_packets",
    "sync",
    "terminate",
    "texts",
    "timestamps",
    "x_log_data",
]

# --- field values -----------------------------------------------------------------

int16s = st.integers(-(1 << 15), (1 << 15) - 1)
int32s = st.integers(-(1 << 31), (1 << 31) - 1)
uint32s = st.integers(0, (1 << 32) - 1)
#: Format codes: mostly the real ones (0 text, 1 binary), sometimes any int16.
format_codes = st.one_of(st.sampled_from((0, 1)), int16s)
#: Column or parameter values: bytes, or None for SQL NULL.
values = st.one_of(st.none(), st.binary(max_size=64))
payloads = st.binary(max_size=256)


def secret_keys() -> st.SearchStrategy[SecretKey]:
    """Cancel keys: the 3.0 Int32, PostgreSQL 18's 32 bytes, or any 4-256 bytes.

    Four drawn bytes come out as the int they spell (the message normalizes them).
    """
    return st.one_of(
        int32s,
        st.binary(min_size=32, max_size=32),
        st.binary(min_size=MIN_SECRET_KEY_LENGTH, max_size=MAX_SECRET_KEY_LENGTH),
    )


def protocol_versions() -> st.SearchStrategy[int]:
    """Protocol version numbers: mostly 3.0 and 3.2, sometimes any 3.x or any uint32."""
    return st.one_of(
        st.sampled_from((PROTOCOL_3_0, PROTOCOL_3_2)),
        st.integers(0, 0xFFFF).map(lambda minor: PROTOCOL_3_0 | minor),
        uint32s,
    )


def texts(min_size: int = 0, max_size: int = 40) -> st.SearchStrategy[str]:
    """Protocol strings: any Unicode that UTF-8 can carry, without NUL."""
    return st.text(
        st.characters(codec="utf-8", exclude_characters="\0"), min_size=min_size, max_size=max_size
    )


def lsns() -> st.SearchStrategy[int]:
    """WAL positions: unsigned 64-bit, with the edges PostgreSQL actually uses."""
    return st.one_of(st.sampled_from((0, 1, (1 << 64) - 1)), st.integers(0, (1 << 64) - 1))


def timestamps() -> st.SearchStrategy[int]:
    """TimestampTz: signed 64-bit microseconds since 2000-01-01 UTC (may be negative)."""
    return st.integers(-(1 << 63), (1 << 63) - 1)


# --- startup phase ----------------------------------------------------------------


@st.composite
def startup_message(draw: st.DrawFn) -> StartupMessage:
    # Settings, and sometimes "_pq_." protocol options, which a server answers with
    # NegotiateProtocolVersion.
    names = texts(min_size=1, max_size=20) | texts(max_size=10).map(lambda s: "_pq_." + s)
    parameters = draw(st.lists(st.tuples(names, texts()), max_size=6))
    minor = draw(st.one_of(st.sampled_from((0, 2)), st.integers(0, 0xFFFF)))
    return StartupMessage(tuple(parameters), PROTOCOL_3_0 | minor)


def ssl_request() -> st.SearchStrategy[SSLRequest]:
    return st.just(SSLRequest())


def gssenc_request() -> st.SearchStrategy[GSSENCRequest]:
    return st.just(GSSENCRequest())


@st.composite
def cancel_request(draw: st.DrawFn) -> CancelRequest:
    return CancelRequest(draw(int32s), draw(secret_keys()))


def startup_packets() -> st.SearchStrategy[StartupPacket]:
    """Any untyped startup-phase packet."""
    return st.one_of(startup_message(), ssl_request(), gssenc_request(), cancel_request())


# --- frontend, typed --------------------------------------------------------------


@st.composite
def password_message(draw: st.DrawFn) -> PasswordMessage:
    return PasswordMessage(draw(texts()))


@st.composite
def sasl_initial_response(draw: st.DrawFn) -> SASLInitialResponse:
    mechanism = draw(st.sampled_from(("SCRAM-SHA-256", "SCRAM-SHA-256-PLUS")) | texts())
    return SASLInitialResponse(mechanism, draw(st.none() | payloads))


@st.composite
def sasl_response(draw: st.DrawFn) -> SASLResponse:
    return SASLResponse(draw(payloads))


@st.composite
def gss_response(draw: st.DrawFn) -> GSSResponse:
    return GSSResponse(draw(payloads))


@st.composite
def query(draw: st.DrawFn) -> Query:
    return Query(draw(texts(max_size=200)))


@st.composite
def parse(draw: st.DrawFn) -> Parse:
    oids = draw(st.lists(uint32s, max_size=8))
    return Parse(draw(texts()), draw(texts(max_size=200)), tuple(oids))


@st.composite
def bind(draw: st.DrawFn) -> Bind:
    return Bind(
        draw(texts()),
        draw(texts()),
        tuple(draw(st.lists(format_codes, max_size=6))),
        tuple(draw(st.lists(values, max_size=6))),
        tuple(draw(st.lists(format_codes, max_size=6))),
    )


@st.composite
def describe(draw: st.DrawFn) -> Describe:
    return Describe(draw(st.sampled_from(("S", "P"))), draw(texts()))


@st.composite
def execute(draw: st.DrawFn) -> Execute:
    return Execute(draw(texts()), draw(st.one_of(st.just(0), int32s)))


@st.composite
def close(draw: st.DrawFn) -> Close:
    return Close(draw(st.sampled_from(("S", "P"))), draw(texts()))


def sync() -> st.SearchStrategy[Sync]:
    return st.just(Sync())


def flush() -> st.SearchStrategy[Flush]:
    return st.just(Flush())


def terminate() -> st.SearchStrategy[Terminate]:
    return st.just(Terminate())


@st.composite
def copy_data(draw: st.DrawFn) -> CopyData:
    return CopyData(draw(payloads))


def copy_done() -> st.SearchStrategy[CopyDone]:
    return st.just(CopyDone())


@st.composite
def copy_fail(draw: st.DrawFn) -> CopyFail:
    return CopyFail(draw(texts()))


@st.composite
def function_call(draw: st.DrawFn) -> FunctionCall:
    return FunctionCall(
        draw(uint32s),
        tuple(draw(st.lists(format_codes, max_size=4))),
        tuple(draw(st.lists(values, max_size=4))),
        draw(format_codes),
    )


def frontend_messages(
    *, startup: bool = True, password: bool = True
) -> st.SearchStrategy[FrontendMessage]:
    """Any message a client sends.

    ``startup=False`` leaves out the untyped startup packets; ``password=False`` leaves
    out SASLInitialResponse/SASLResponse/GSSResponse, whose 'p' tag decodes as a
    PasswordMessage unless the reader is told otherwise.
    """
    typed: list[st.SearchStrategy[FrontendMessage]] = [
        password_message(),
        query(),
        parse(),
        bind(),
        describe(),
        execute(),
        close(),
        sync(),
        flush(),
        terminate(),
        copy_data(),
        copy_done(),
        copy_fail(),
        function_call(),
    ]
    if password:
        typed += [sasl_initial_response(), sasl_response(), gss_response()]
    if startup:
        typed.append(startup_packets())
    return st.one_of(typed)


# --- backend ----------------------------------------------------------------------


@st.composite
def ssl_response(draw: st.DrawFn) -> SSLResponse:
    return SSLResponse(draw(st.booleans()))


@st.composite
def gssenc_response(draw: st.DrawFn) -> GSSENCResponse:
    return GSSENCResponse(draw(st.booleans()))


def authentication_ok() -> st.SearchStrategy[AuthenticationOk]:
    return st.just(AuthenticationOk())


def authentication_kerberos_v5() -> st.SearchStrategy[AuthenticationKerberosV5]:
    return st.just(AuthenticationKerberosV5())


def authentication_cleartext_password() -> st.SearchStrategy[AuthenticationCleartextPassword]:
    return st.just(AuthenticationCleartextPassword())


@st.composite
def authentication_md5_password(draw: st.DrawFn) -> AuthenticationMD5Password:
    return AuthenticationMD5Password(draw(st.binary(min_size=4, max_size=4)))


def authentication_gss() -> st.SearchStrategy[AuthenticationGSS]:
    return st.just(AuthenticationGSS())


@st.composite
def authentication_gss_continue(draw: st.DrawFn) -> AuthenticationGSSContinue:
    return AuthenticationGSSContinue(draw(payloads))


def authentication_sspi() -> st.SearchStrategy[AuthenticationSSPI]:
    return st.just(AuthenticationSSPI())


@st.composite
def authentication_sasl(draw: st.DrawFn) -> AuthenticationSASL:
    mechanisms = draw(
        st.lists(st.sampled_from(("SCRAM-SHA-256", "SCRAM-SHA-256-PLUS")) | texts(min_size=1))
    )
    return AuthenticationSASL(tuple(mechanisms))


@st.composite
def authentication_sasl_continue(draw: st.DrawFn) -> AuthenticationSASLContinue:
    return AuthenticationSASLContinue(draw(payloads))


@st.composite
def authentication_sasl_final(draw: st.DrawFn) -> AuthenticationSASLFinal:
    return AuthenticationSASLFinal(draw(payloads))


@st.composite
def parameter_status(draw: st.DrawFn) -> ParameterStatus:
    return ParameterStatus(draw(texts()), draw(texts()))


@st.composite
def backend_key_data(draw: st.DrawFn) -> BackendKeyData:
    return BackendKeyData(draw(int32s), draw(secret_keys()))


@st.composite
def ready_for_query(draw: st.DrawFn) -> ReadyForQuery:
    return ReadyForQuery(draw(st.sampled_from(("I", "T", "E"))))


@st.composite
def negotiate_protocol_version(draw: st.DrawFn) -> NegotiateProtocolVersion:
    options = draw(st.lists(texts(min_size=1).map(lambda s: "_pq_." + s), max_size=4))
    return NegotiateProtocolVersion(draw(protocol_versions()), tuple(options))


def parse_complete() -> st.SearchStrategy[ParseComplete]:
    return st.just(ParseComplete())


def bind_complete() -> st.SearchStrategy[BindComplete]:
    return st.just(BindComplete())


def close_complete() -> st.SearchStrategy[CloseComplete]:
    return st.just(CloseComplete())


def no_data() -> st.SearchStrategy[NoData]:
    return st.just(NoData())


def portal_suspended() -> st.SearchStrategy[PortalSuspended]:
    return st.just(PortalSuspended())


def empty_query_response() -> st.SearchStrategy[EmptyQueryResponse]:
    return st.just(EmptyQueryResponse())


@st.composite
def parameter_description(draw: st.DrawFn) -> ParameterDescription:
    return ParameterDescription(tuple(draw(st.lists(uint32s, max_size=8))))


@st.composite
def field_description(draw: st.DrawFn) -> FieldDescription:
    return FieldDescription(
        draw(texts()),
        draw(uint32s),
        draw(int16s),
        draw(uint32s),
        draw(int16s),
        draw(int32s),
        draw(format_codes),
    )


@st.composite
def row_description(draw: st.DrawFn) -> RowDescription:
    return RowDescription(tuple(draw(st.lists(field_description(), max_size=6))))


@st.composite
def data_row(draw: st.DrawFn) -> DataRow:
    return DataRow(tuple(draw(st.lists(values, max_size=8))))


@st.composite
def command_complete(draw: st.DrawFn) -> CommandComplete:
    tag = draw(st.sampled_from(("SELECT 1", "INSERT 0 1", "BEGIN", "COMMIT")) | texts())
    return CommandComplete(tag)


def _notice_fields() -> st.SearchStrategy[list[tuple[str, str]]]:
    # Known codes most of the time, any non-NUL Latin-1 code now and then (round trip
    # of fields a future PostgreSQL may add).
    codes = st.sampled_from("SVCMDHPpqWstcdnFLR") | st.characters(
        min_codepoint=1, max_codepoint=255
    )
    return st.lists(st.tuples(codes, texts()), max_size=8)


@st.composite
def error_response(draw: st.DrawFn) -> ErrorResponse:
    return ErrorResponse(tuple(draw(_notice_fields())))


@st.composite
def notice_response(draw: st.DrawFn) -> NoticeResponse:
    return NoticeResponse(tuple(draw(_notice_fields())))


@st.composite
def notification_response(draw: st.DrawFn) -> NotificationResponse:
    return NotificationResponse(draw(int32s), draw(texts()), draw(texts()))


@st.composite
def function_call_response(draw: st.DrawFn) -> FunctionCallResponse:
    return FunctionCallResponse(draw(values))


@st.composite
def copy_in_response(draw: st.DrawFn) -> CopyInResponse:
    overall = draw(st.sampled_from((0, 1)) | st.integers(-128, 127))
    return CopyInResponse(overall, tuple(draw(st.lists(format_codes, max_size=6))))


@st.composite
def copy_out_response(draw: st.DrawFn) -> CopyOutResponse:
    overall = draw(st.sampled_from((0, 1)) | st.integers(-128, 127))
    return CopyOutResponse(overall, tuple(draw(st.lists(format_codes, max_size=6))))


@st.composite
def copy_both_response(draw: st.DrawFn) -> CopyBothResponse:
    overall = draw(st.sampled_from((0, 1)) | st.integers(-128, 127))
    return CopyBothResponse(overall, tuple(draw(st.lists(format_codes, max_size=6))))


def backend_messages(*, typed_only: bool = False) -> st.SearchStrategy[BackendMessage]:
    """Any message a server sends; ``typed_only`` leaves out the one-byte SSL/GSS answers
    (which a BackendReader reads only after expect_ssl_response/expect_gssenc_response).
    """
    typed: list[st.SearchStrategy[BackendMessage]] = [
        authentication_ok(),
        authentication_kerberos_v5(),
        authentication_cleartext_password(),
        authentication_md5_password(),
        authentication_gss(),
        authentication_gss_continue(),
        authentication_sspi(),
        authentication_sasl(),
        authentication_sasl_continue(),
        authentication_sasl_final(),
        parameter_status(),
        backend_key_data(),
        ready_for_query(),
        negotiate_protocol_version(),
        parse_complete(),
        bind_complete(),
        close_complete(),
        no_data(),
        portal_suspended(),
        empty_query_response(),
        parameter_description(),
        row_description(),
        data_row(),
        command_complete(),
        error_response(),
        notice_response(),
        notification_response(),
        function_call_response(),
        copy_in_response(),
        copy_out_response(),
        copy_both_response(),
        copy_data(),
        copy_done(),
    ]
    if not typed_only:
        typed += [ssl_response(), gssenc_response()]
    return st.one_of(typed)


# --- replication CopyData payloads --------------------------------------------------


@st.composite
def x_log_data(draw: st.DrawFn) -> XLogData:
    return XLogData(draw(lsns()), draw(lsns()), draw(timestamps()), draw(payloads))


@st.composite
def primary_keepalive(draw: st.DrawFn) -> PrimaryKeepalive:
    return PrimaryKeepalive(draw(lsns()), draw(timestamps()), draw(st.booleans()))


@st.composite
def standby_status_update(draw: st.DrawFn) -> StandbyStatusUpdate:
    return StandbyStatusUpdate(
        draw(lsns()), draw(lsns()), draw(lsns()), draw(timestamps()), draw(st.booleans())
    )


@st.composite
def hot_standby_feedback(draw: st.DrawFn) -> HotStandbyFeedback:
    return HotStandbyFeedback(
        draw(timestamps()), draw(uint32s), draw(uint32s), draw(uint32s), draw(uint32s)
    )


def server_copy_data() -> st.SearchStrategy[ServerCopyData]:
    """What a walsender puts in CopyData: XLogData and PrimaryKeepalive."""
    return st.one_of(x_log_data(), primary_keepalive())


def client_copy_data() -> st.SearchStrategy[ClientCopyData]:
    """What a replication client puts in CopyData: status updates and feedback."""
    return st.one_of(standby_status_update(), hot_standby_feedback())


def replication_messages() -> st.SearchStrategy[ReplicationMessage]:
    """Any replication CopyData payload, either direction."""
    return st.one_of(server_copy_data(), client_copy_data())
