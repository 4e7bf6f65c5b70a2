"""Every fact in pgwire_mock.server.versions (and the grammar's errors), asked of real servers.

A small raw-socket client (codec.wire) talks to the real walsender so the tests see the
exact ErrorResponse fields, RowDescription type OIDs and ParameterStatus order.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator, Sequence

import pytest
from psycopg import conninfo

from codec.wire import (
    BackendKeyData,
    BackendReader,
    CopyBothResponse,
    ErrorResponse,
    NoticeResponse,
    ParameterStatus,
    Parse,
    Query,
    ReadyForQuery,
    RowDescription,
    StartupMessage,
    Sync,
)
from conformance.provision import Server
from pgwire_mock.server import (
    VERSIONS,
    BackendCrashError,
    PluginOption,
    ServerError,
    SqlCommand,
    error,
    parameter_status,
    parse_command,
    validate_start_replication,
)

pytestmark = pytest.mark.postgres


class RawConnection:
    """Just enough of a frontend to see every message a walsender sends."""

    def __init__(self, server: Server, replication: str = "database") -> None:
        info = conninfo.conninfo_to_dict(server.dsn)
        self.user = str(info.get("user") or "postgres")
        params = [("user", self.user), ("database", str(info.get("dbname") or "postgres"))]
        params.append(("replication", replication))
        self.sock = socket.create_connection((str(info["host"]), int(str(info["port"]))))
        self.sock.settimeout(30)
        self.reader = BackendReader()
        self.sock.sendall(StartupMessage(tuple(params)).encode())
        self.startup = self.until_ready()

    def messages(self) -> Iterator[object]:
        while True:
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                data = b""
            if not data:
                yield "EOF"
                return
            self.reader.feed(data)
            yield from self.reader

    def until_ready(self) -> list[object]:
        out: list[object] = []
        for message in self.messages():
            out.append(message)
            if isinstance(message, ReadyForQuery | CopyBothResponse) or message == "EOF":
                break
        return out

    def query(self, text: str) -> list[object]:
        self.sock.sendall(Query(text).encode())
        return self.until_ready()

    @property
    def pid(self) -> int:
        return next(m.process_id for m in self.startup if isinstance(m, BackendKeyData))

    def close(self) -> None:
        self.sock.close()


def errors_in(messages: Sequence[object]) -> list[tuple[tuple[str, str], ...]]:
    return [m.fields for m in messages if isinstance(m, ErrorResponse)]


def outcome(messages: Sequence[object]) -> object:
    """The first ErrorResponse's fields, or 'CopyBoth'."""
    errors = errors_in(messages)
    if errors:
        return errors[0]
    assert any(isinstance(m, CopyBothResponse) for m in messages), messages
    return "CopyBoth"


@pytest.fixture
def logical_slot(pg_server: Server) -> Iterator[str]:
    name = f"vt_{uuid.uuid4().hex[:10]}"
    with pg_server.connect() as conn:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (name,))
    yield name
    with pg_server.connect() as conn:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
            " WHERE slot_name = %s AND NOT active",
            (name,),
        )


def run(server: Server, text: str, replication: str = "database") -> list[object]:
    conn = RawConnection(server, replication)
    try:
        return conn.query(text)
    finally:
        conn.close()


# --- connection facts -----------------------------------------------------------------


def test_parameter_status_order_and_values(pg_server: Server) -> None:
    """ParameterStatus after authentication: the table's names, order and values."""
    conn = RawConnection(pg_server)
    conn.close()
    got = tuple((m.name, m.value) for m in conn.startup if isinstance(m, ParameterStatus))
    real = dict(got)
    expected = parameter_status(
        pg_server.version,
        {"TimeZone": real["TimeZone"], "session_authorization": conn.user},
    )
    assert got == expected
    assert real["server_version"] == VERSIONS[pg_server.version].server_version


def test_parameter_status_on_a_physical_walsender(pg_server: Server) -> None:
    """replication=true binds no database: encodings are SQL_ASCII, order unchanged."""
    conn = RawConnection(pg_server, replication="true")
    conn.close()
    got = tuple((m.name, m.value) for m in conn.startup if isinstance(m, ParameterStatus))
    expected = parameter_status(
        pg_server.version,
        {"TimeZone": dict(got)["TimeZone"], "session_authorization": conn.user},
        replication_database=False,
    )
    assert got == expected


def test_server_version_num(pg_server: Server) -> None:
    rows = [m for m in run(pg_server, "SHOW server_version_num") if hasattr(m, "values")]
    assert rows[0].values == (str(VERSIONS[pg_server.version].server_version_num).encode(),)


def test_identify_system_column_types(pg_server: Server) -> None:
    """IDENTIFY_SYSTEM's timeline is int4 on 14/15 and int8 on 16/17."""
    replies = run(pg_server, "IDENTIFY_SYSTEM")
    description = next(m for m in replies if isinstance(m, RowDescription))
    assert [f.name for f in description.fields] == ["systemid", "timeline", "xlogpos", "dbname"]
    types = tuple(f.type_oid for f in description.fields)
    assert types == VERSIONS[pg_server.version].identify_system_types
    assert all(f.table_oid == 0 and f.column_number == 0 for f in description.fields)


def test_commands_known_to_each_version(pg_server: Server) -> None:
    """Each command keyword of the table is a replication command there; others are SQL."""
    facts = VERSIONS[pg_server.version]
    for word in ("READ_REPLICATION_SLOT", "ALTER_REPLICATION_SLOT", "UPLOAD_MANIFEST"):
        fields = errors_in(run(pg_server, f"{word} x"))
        # SQL's scanner reports "at or near" from scan.l; the walsender's own errors don't.
        went_to_sql = bool(fields) and ("F", "scan.l") in fields[0]
        assert went_to_sql == (word not in facts.commands), word


# --- grammar errors -------------------------------------------------------------------

GRAMMAR_CASES = [
    "IDENTIFY_SYSTEM;;",
    "IDENTIFY_SYSTEM x",
    "IDENTIFY_SYSTEM -- comment",
    "IDENTIFY_SYSTEM%",
    "SHOW",
    "SHOW 'x'",
    "SHOW x y",
    'SHOW "Date""Style"',
    "'abc",
    '"abc',
    "TIMELINE_HISTORY 0",
    "TIMELINE_HISTORY 0 x",
    "TIMELINE_HISTORY 4294967296",
    "START_REPLICATION 0/0 TIMELINE 0 x",
    "START_REPLICATION SLOT x LOGICAL 0/0G",
    "START_REPLICATION SLOT x LOGICAL 0/0 ()",
    "START_REPLICATION SLOT x LOGICAL 0/0 (a 'b' 'c')",
    "START_REPLICATION SLOT x LOGICAL 0/0 TIMELINE 1",
    "CREATE_REPLICATION_SLOT x TEMPORARY LOGICAL pgoutput ()",
    "CREATE_REPLICATION_SLOT x TEMPORARY LOGICAL pgoutput (SNAPSHOT WAIT)",
    "CREATE_REPLICATION_SLOT x TEMPORARY LOGICAL pgoutput (READ_REPLICATION_SLOT)",
    "CREATE_REPLICATION_SLOT x TEMPORARY LOGICAL pgoutput TWO_PHASE x",
    "DROP_REPLICATION_SLOT",
    "BASE_BACKUP LABEL 'x' FAST BOGUS",
    "\vIDENTIFY_SYSTEM x",
]


@pytest.mark.parametrize("text", GRAMMAR_CASES)
def test_grammar_errors_match_the_server(pg_server: Server, text: str) -> None:
    """A malformed replication command fails with the real server's exact fields."""
    real = errors_in(run(pg_server, text))
    try:
        command = parse_command(text, pg_server.version)
    except ServerError as err:
        assert real == [err.fields()]
    else:
        assert isinstance(command, SqlCommand), command
        assert real and ("F", "scan.l") in real[0]


SQL_CASES = ["identify_system", '"IDENTIFY_SYSTEM"', "-- c\nIDENTIFY_SYSTEM", "IDENTIFY_SYSTEMX"]


@pytest.mark.parametrize("text", SQL_CASES)
def test_non_keywords_fall_through_to_sql(pg_server: Server, text: str) -> None:
    """Text not starting with an upper-case command word is handed to the SQL parser."""
    assert parse_command(text, pg_server.version) == SqlCommand(text)
    fields = errors_in(run(pg_server, text))
    assert fields and ("F", "scan.l") in fields[0]


def test_identifier_truncation_notice(pg_server: Server) -> None:
    """A 70-character name draws NOTICE 42622 and is cut to 63 bytes."""
    text = f"DROP_REPLICATION_SLOT {'a' * 70}"
    notices: list[ServerError] = []
    parse_command(text, pg_server.version, notices)
    real = [m.fields for m in run(pg_server, text) if isinstance(m, NoticeResponse)]
    assert real == [n.fields() for n in notices]


# --- walsender errors -----------------------------------------------------------------


def test_slot_errors(pg_server: Server, logical_slot: str) -> None:
    """Unknown, duplicate, badly named and busy slots: SQLSTATE, text, hint and F/L/R."""
    major = pg_server.version

    def real(text: str, replication: str = "database") -> object:
        return errors_in(run(pg_server, text, replication))[0]

    assert (
        real("DROP_REPLICATION_SLOT nosuch")
        == error(major, "slot_does_not_exist", slot="nosuch").fields()
    )
    assert (
        real("START_REPLICATION SLOT nosuch LOGICAL 0/0")
        == error(major, "slot_does_not_exist", slot="nosuch").fields()
    )
    assert (
        real(f"CREATE_REPLICATION_SLOT {logical_slot} LOGICAL pgoutput")
        == error(major, "slot_already_exists", slot=logical_slot).fields()
    )
    assert (
        real('CREATE_REPLICATION_SLOT "Bad-Name" TEMPORARY LOGICAL pgoutput')
        == error(major, "slot_name_invalid_character", slot="Bad-Name").fields()
    )
    assert (
        real('CREATE_REPLICATION_SLOT "" TEMPORARY LOGICAL pgoutput')
        == error(major, "slot_name_too_short", slot="").fields()
    )
    assert (
        real(f"START_REPLICATION SLOT {logical_slot} PHYSICAL 0/0")
        == error(major, "logical_slot_for_physical_replication").fields()
    )
    assert (
        real("CREATE_REPLICATION_SLOT x TEMPORARY LOGICAL pgoutput", "true")
        == error(major, "logical_decoding_requires_database").fields()
    )
    assert real("SELECT 1", "true") == error(major, "sql_in_physical_walsender").fields()
    assert (
        real("TIMELINE_HISTORY 2") == error(major, "timeline_history_missing", timeline=2).fields()
    )
    if major >= 15:
        assert (
            real(f"READ_REPLICATION_SLOT {logical_slot}")
            == error(major, "read_replication_slot_logical").fields()
        )
    if major >= 17:
        assert (
            real("CREATE_REPLICATION_SLOT x TEMPORARY LOGICAL pgoutput (FAILOVER)")
            == error(major, "failover_temporary_slot").fields()
        )

    streaming = RawConnection(pg_server)
    try:
        started = streaming.query(
            f"START_REPLICATION SLOT {logical_slot} LOGICAL 0/0"
            " (\"proto_version\" '1', \"publication_names\" 'p')"
        )
        assert outcome(started) == "CopyBoth"
        busy = error(major, "slot_active", slot=logical_slot, pid=streaming.pid).fields()
        assert real(f"START_REPLICATION SLOT {logical_slot} LOGICAL 0/0") == busy
        assert real(f"DROP_REPLICATION_SLOT {logical_slot}") == busy
        # Any non-CopyData message while streaming is FATAL, then the socket closes.
        streaming.sock.sendall(Query("SELECT 1").encode())
        replies = streaming.until_ready()
        assert errors_in(replies) == [
            error(major, "invalid_standby_message_type", type="Q").fields()
        ]
        assert replies[-1] == "EOF"
    finally:
        streaming.close()


def test_copy_lock_and_slot_kind_errors(pg_server: Server) -> None:
    """COPY of a missing table or column, LOCK outside a transaction, a physical slot
    used for logical decoding: each error's fields as the server sends them."""
    major = pg_server.version
    table, physical = f"ct_{uuid.uuid4().hex[:10]}", f"ps_{uuid.uuid4().hex[:10]}"
    with pg_server.connect() as admin:
        admin.execute(f"CREATE TABLE {table} (a int)")
        admin.execute(f"SELECT pg_create_physical_replication_slot('{physical}', true)")
    try:
        cases = {
            "COPY missing_t TO STDOUT": error(major, "copy_undefined_table", relation="missing_t"),
            "COPY public.missing_t TO STDOUT": error(
                major, "copy_undefined_qualified_table", relation="public.missing_t"
            ),
            f"COPY {table} (nope) TO STDOUT": error(
                major, "copy_undefined_column", column="nope", relation=table
            ),
            f"LOCK TABLE {table}": error(major, "lock_table_outside_block"),
            f"START_REPLICATION SLOT {physical} LOGICAL 0/0": error(
                major, "physical_slot_for_logical_decoding"
            ),
        }
        for text, expected in cases.items():
            assert errors_in(run(pg_server, text)) == [expected.fields()], text
    finally:
        with pg_server.connect() as admin:
            admin.execute(f"DROP TABLE {table}")
            admin.execute(f"SELECT pg_drop_replication_slot('{physical}')")


def test_extended_query_protocol_is_refused(pg_server: Server) -> None:
    conn = RawConnection(pg_server)
    try:
        conn.sock.sendall(Parse("", "IDENTIFY_SYSTEM").encode() + Sync().encode())
        replies = conn.until_ready()
    finally:
        conn.close()
    assert errors_in(replies) == [error(pg_server.version, "extended_query_protocol").fields()]


def test_invalid_replication_startup_parameter_is_fatal(pg_server: Server) -> None:
    conn = RawConnection(pg_server, replication="bogus")
    conn.close()
    assert errors_in(conn.startup) == [
        error(pg_server.version, "invalid_replication_parameter", value="bogus").fields()
    ]
    assert conn.startup[-1] == "EOF"


def test_missing_publication_is_reported_after_copy_both(
    pg_server: Server, logical_slot: str
) -> None:
    """An unknown publication is looked up only once a change is decoded: 14-17 fail
    with 42704 there; 18 skips it with a WARNING (a NoticeResponse in the stream)."""
    table = f"vt_{uuid.uuid4().hex[:10]}"
    with pg_server.connect() as admin:
        admin.execute(f"CREATE TABLE {table} (a int)")
    conn = RawConnection(pg_server)
    try:
        started = conn.query(
            f"START_REPLICATION SLOT {logical_slot} LOGICAL 0/0"
            " (\"proto_version\" '1', \"publication_names\" 'nopub')"
        )
        assert outcome(started) == "CopyBoth"
        with pg_server.connect() as admin:
            admin.execute(f"INSERT INTO {table} VALUES (1)")
        got = None
        for message in conn.messages():
            if isinstance(message, ErrorResponse | NoticeResponse) or message == "EOF":
                got = message
                break
    finally:
        conn.close()
        with pg_server.connect() as admin:
            admin.execute(f"DROP TABLE {table}")
    if pg_server.version >= 18:
        assert isinstance(got, NoticeResponse)
        expected = error(pg_server.version, "publication_skipped", publication="nopub")
    else:
        assert isinstance(got, ErrorResponse)
        expected = error(pg_server.version, "publication_does_not_exist", publication="nopub")
    real = dict(got.fields)
    assert real["W"].startswith(
        f'slot "{logical_slot}", output plugin "pgoutput", in the change callback'
    )
    assert tuple(f for f in got.fields if f[0] != "W") == expected.fields()


# --- pgoutput options -----------------------------------------------------------------

OPTION_CASES: dict[str, list[tuple[str, str | None]]] = {
    "none": [],
    "proto only": [("proto_version", "1")],
    "publications only": [("publication_names", "p")],
    "proto too high": [("proto_version", "99"), ("publication_names", "p")],
    "proto uint32 max": [("proto_version", "4294967295"), ("publication_names", "p")],
    "proto zero": [("proto_version", "0"), ("publication_names", "p")],
    "proto not a number": [("proto_version", "abc"), ("publication_names", "p")],
    "proto too big": [("proto_version", "4294967296"), ("publication_names", "p")],
    "proto negative": [("proto_version", "-1"), ("publication_names", "p")],
    "proto empty": [("proto_version", ""), ("publication_names", "p")],
    "proto blank": [("proto_version", " "), ("publication_names", "p")],
    "proto leading blank": [("proto_version", " 1"), ("publication_names", "p")],
    "proto trailing blank": [("proto_version", "1 "), ("publication_names", "p")],
    "proto plus": [("proto_version", "+1"), ("publication_names", "p")],
    "proto hex": [("proto_version", "0x2"), ("publication_names", "p")],
    "streaming proto 1": [("proto_version", "1"), ("publication_names", "p"), ("streaming", "on")],
    "streaming bogus": [("proto_version", "2"), ("publication_names", "p"), ("streaming", "x")],
    "streaming no value": [("proto_version", "1"), ("publication_names", "p"), ("streaming", None)],
    "two_phase proto 2": [("proto_version", "2"), ("publication_names", "p"), ("two_phase", "on")],
    "parallel proto 3": [
        ("proto_version", "3"),
        ("publication_names", "p"),
        ("streaming", "parallel"),
    ],
    "parallel proto 4": [
        ("proto_version", "4"),
        ("publication_names", "p"),
        ("streaming", "Parallel"),
    ],
    "origin bogus": [("proto_version", "1"), ("publication_names", "p"), ("origin", "x")],
    "origin no value": [("proto_version", "1"), ("publication_names", "p"), ("origin", None)],
    "origin NONE": [("proto_version", "1"), ("publication_names", "p"), ("origin", "NONE")],
    "binary maybe": [("proto_version", "1"), ("publication_names", "p"), ("binary", "maybe")],
    "binary no value": [("proto_version", "1"), ("publication_names", "p"), ("binary", None)],
    "messages 1": [("proto_version", "1"), ("publication_names", "p"), ("messages", "1")],
    "unknown option": [("proto_version", "1"), ("publication_names", "p"), ("x", "y")],
    "proto twice": [("proto_version", "1"), ("proto_version", "2")],
    "publications twice": [("publication_names", "p"), ("publication_names", "q")],
    "binary twice": [("binary", "on"), ("binary", "off")],
    "messages twice": [("messages", "on"), ("messages", "off")],
    "streaming twice": [("streaming", "on"), ("streaming", "off")],
    "two_phase twice": [("two_phase", "on"), ("two_phase", "off")],
    "origin twice": [("origin", "any"), ("origin", "any")],
    "publications empty item": [("proto_version", "1"), ("publication_names", "a,,b")],
    "publications open quote": [("proto_version", "1"), ("publication_names", '"a')],
    "publications empty": [("proto_version", "1"), ("publication_names", "")],
    "publications quoted": [("proto_version", "1"), ("publication_names", ' p , "Q r" ,x')],
    "unknown before bad proto": [
        ("publication_names", "p"),
        ("proto_version", "99"),
        ("x", "y"),
    ],
    "proto too high before streaming": [
        ("proto_version", "99"),
        ("publication_names", "p"),
        ("streaming", "on"),
    ],
    "no publications before streaming": [("proto_version", "1"), ("streaming", "on")],
    "streaming before two_phase": [
        ("proto_version", "1"),
        ("publication_names", "p"),
        ("two_phase", "on"),
        ("streaming", "on"),
    ],
    "bad boolean before unknown": [("binary", "maybe"), ("x", "y")],
    "maximum protocol": [("proto_version", "MAX"), ("publication_names", "p")],
}


def render_options(options: Sequence[PluginOption]) -> str:
    if not options:
        return ""
    parts = []
    for option in options:
        text = f'"{option.name}"'
        if option.value is not None:
            text += " '" + option.value.replace("'", "''") + "'"
        parts.append(text)
    return " (" + ", ".join(parts) + ")"


@pytest.mark.parametrize("case", sorted(OPTION_CASES))
def test_pgoutput_options_match_the_server(pg_server: Server, logical_slot: str, case: str) -> None:
    """validate_start_replication accepts what the server accepts and fails identically."""
    major = pg_server.version
    max_proto = str(VERSIONS[major].max_proto_version)
    options = tuple(
        PluginOption(name, max_proto if value == "MAX" else value)
        for name, value in OPTION_CASES[case]
    )
    real = outcome(
        run(
            pg_server,
            f"START_REPLICATION SLOT {logical_slot} LOGICAL 0/0" + render_options(options),
        )
    )
    try:
        validate_start_replication(major, logical_slot, options)
    except ServerError as err:
        assert real == err.fields()
    else:
        assert real == "CopyBoth"


def test_option_without_value_crashes_the_backend() -> None:
    """proto_version without a value dereferences NULL in pgoutput (14–17); not replayed
    against the shared servers, which would restart every connection."""
    for major in VERSIONS:
        with pytest.raises(BackendCrashError):
            validate_start_replication(major, "s", (PluginOption("proto_version"),))
