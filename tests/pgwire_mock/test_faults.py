"""Faults, driven without a network: the Fault model, and what each does to a session."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from codec.replication import (
    PrimaryKeepalive,
    StandbyStatusUpdate,
    XLogData,
    decode_server_copy_data,
)
from codec.replication import encode as encode_replication
from codec.wire import (
    BackendReader,
    CommandComplete,
    CopyBothResponse,
    CopyData,
    CopyDone,
    ErrorResponse,
    Query,
    ReadyForQuery,
    StartupMessage,
)
from pgwire_mock.script import Script, column, insert
from pgwire_mock.server.faults import FAULT_NAMES, FAULTS, Fault, FaultError
from pgwire_mock.server.protocol import WalSenderFactory
from pgwire_mock.server.session import SessionConfig, WalSenderSession
from pgwire_mock.server.source import ScriptSource
from pgwire_mock.server.state import ServerState

T0 = 1_700_000_000.0


class Client:
    """Drives a session like a client would, decoding every reply."""

    def __init__(self, session: WalSenderSession) -> None:
        self.session = session
        self.reader = BackendReader()
        self.now = T0

    def send(self, *messages: Any) -> list[object]:
        self.session.receive_data(b"".join(m.encode() for m in messages), self.now)
        return self.replies()

    def replies(self) -> list[object]:
        self.reader.feed(self.session.data_to_send())
        return [
            decode_server_copy_data(bytes(m.data)) if isinstance(m, CopyData) else m
            for m in self.reader
        ]

    def query(self, text: str) -> list[object]:
        return self.send(Query(text))

    def pump(self) -> list[object]:
        self.session.produce(1 << 20, self.now)
        return self.replies()

    def tick(self, seconds: float) -> list[object]:
        self.now += seconds
        self.session.tick(self.now)
        return self.replies()


START = "START_REPLICATION SLOT s LOGICAL 0/0 (proto_version '1', publication_names 'pub')"


def shop(transactions: int = 3, *faults: tuple[str, dict[str, Any]]) -> Script:
    """A small script: ``transactions`` one-row inserts, then the given fault steps."""
    script = (
        Script(pg_version=16)
        .slot("s")
        .publication("pub", tables=["public.t"])
        .table("public.t", columns=[column("id", "int4", key=True), column("v", "text")])
    )
    for i in range(transactions):
        script = script.transaction([insert("public.t", id=i, v="x" * 10)])
    for name, params in faults:
        script = script.fault(name, **params)
    return script


def streaming(
    script: Script | None = None, *, state: ServerState | None = None, **config: Any
) -> tuple[Client, ServerState]:
    source = ScriptSource(script or shop())
    if state is None:
        state = ServerState()
        state.wal_lsn = source.start_lsn
        state.declare(source.slots, source.publications)
    cfg = SessionConfig(major=16, source=source, **config)
    client = Client(WalSenderSession(cfg, state, now=T0))
    client.send(StartupMessage((("user", "postgres"), ("replication", "database"))))
    assert client.query(START) == [CopyBothResponse(0, ())]
    return client, state


def xlog(replies: list[object]) -> list[XLogData]:
    return [m for m in replies if isinstance(m, XLogData)]


def confirm(client: Client, lsn: int, *, reply: bool = False) -> list[object]:
    update = StandbyStatusUpdate(lsn, lsn, lsn, 0, reply_requested=reply)
    return client.send(CopyData(encode_replication(update)))


def commits(replies: list[object]) -> list[int]:
    return [m.wal_end for m in xlog(replies) if bytes(m.data)[:1] == b"C"]


# --- the model -----------------------------------------------------------------------------


def test_every_fault_has_a_table_row_and_the_script_knows_every_name() -> None:
    from pgwire_mock.script import FAULT_NAMES as SCRIPT_NAMES

    # wal_removed and timeline_switch act on physical streams only, which scripts do not
    # describe.
    physical_only = {"wal_removed", "timeline_switch"}
    assert set(FAULTS) == set(FAULT_NAMES) == set(SCRIPT_NAMES) | physical_only
    assert all(spec.incident for spec in FAULTS.values())


@pytest.mark.parametrize(
    ("text", "fault"),
    [
        ("close_after:3", Fault("close_after", messages=3)),
        ("close_after:bytes=5000", Fault("close_after", bytes=5000)),
        ("pause:30s", Fault("pause", seconds=30.0)),
        ("pause:seconds=250ms", Fault("pause", seconds=0.25)),
        ("error:57P01", Fault("error", sqlstate="57P01")),
        (
            "error:sqlstate=53100,message=disk full, really,severity=fatal",
            Fault("error", sqlstate="53100", message="disk full, really", severity="FATAL"),
        ),
        ("stop_keepalives", Fault("stop_keepalives")),
        ("silent_timeout", Fault("silent_timeout")),
        ("silent_timeout:2", Fault("silent_timeout", seconds=2.0)),
        ("redeliver", Fault("redeliver")),
        ("redeliver:0/1500000", Fault("redeliver", lsn=0x1500000)),
        ("redeliver:wait=false", Fault("redeliver", wait=False)),
        ("slow:2kb", Fault("slow", rate=2000.0)),
        ("slow:rate=512", Fault("slow", rate=512.0)),
        ("shutdown", Fault("shutdown")),
    ],
)
def test_command_line_syntax(text: str, fault: Fault) -> None:
    assert Fault.parse(text) == fault
    assert Fault.parse(str(fault)) == fault


@pytest.mark.parametrize(
    "text",
    ["explode", "close_after", "close_after:x", "pause", "slow:0", "error:bad", "pause:a=1"],
)
def test_bad_faults_are_refused_with_a_reason(text: str) -> None:
    with pytest.raises(FaultError):
        Fault.parse(text)


def test_script_parameters_use_the_same_names() -> None:
    assert Fault.from_params("close_after", {"after_messages": 3}) == Fault(
        "close_after", messages=3
    )
    assert Fault.from_params("error", {"sqlstate": "58P01"}).server_error().fields()[:4] == (
        ("S", "ERROR"),
        ("V", "ERROR"),
        ("C", "58P01"),
        ("M", "requested WAL segment 000000010000000000000001 has already been removed"),
    )


# --- each fault in a session -------------------------------------------------------------------


def test_close_after_messages_closes_without_an_error() -> None:
    """close_after N: N more XLogData, then the socket closes with no ErrorResponse."""
    client, state = streaming(faults=(Fault("close_after", messages=4),))
    out = client.pump()
    assert len(xlog(out)) == 4
    assert not [m for m in out if isinstance(m, ErrorResponse)]
    assert client.session.close_requested
    assert state.slots["s"].active_pid is None


def test_close_after_bytes_cuts_a_message_short() -> None:
    """100 bytes of XLogData, after the keepalive every stream starts with."""
    client, _ = streaming(faults=(Fault("close_after", bytes=100),))
    client.session.produce(1 << 20, T0)
    data = client.session.data_to_send()
    keepalive = 1 + 4 + 18  # CopyData around a PrimaryKeepalive
    assert data[:1] == b"d" and data[5:6] == b"k"
    assert len(data) == keepalive + 100
    assert client.session.close_requested


def test_a_script_fault_happens_once_per_slot_and_position() -> None:
    script = shop(2, ("close_after", {"messages": 0}))
    client, state = streaming(script)
    client.pump()
    assert client.session.close_requested
    again = Client(WalSenderSession(client.session.config, state, now=T0))
    again.send(StartupMessage((("user", "postgres"), ("replication", "database"))))
    again.query(START)
    again.pump()
    assert not again.session.close_requested


def test_pause_sends_nothing_not_even_keepalives_then_reads_what_was_held() -> None:
    client, state = streaming(wal_sender_timeout=10.0, idle_keepalive_interval=1.0)
    last = commits(client.pump())[-1]
    assert client.session.inject(Fault("pause", seconds=30), client.now)
    assert client.session.next_deadline() == T0 + 30
    assert confirm(client, last, reply=True) == []  # held, not read
    assert state.slots["s"].confirmed_flush < last
    for _ in range(29):
        assert client.tick(1) == []  # no keepalive, no timeout
    out = client.tick(1)
    assert state.slots["s"].confirmed_flush == last
    assert isinstance(out[0], PrimaryKeepalive)  # the held reply request is answered
    assert not client.session.closed


def test_error_fault_with_error_severity_returns_to_command_mode() -> None:
    client, state = streaming(shop(2, ("error", {"sqlstate": "53100"})))
    out = client.pump()
    err = [m for m in out if isinstance(m, ErrorResponse)]
    assert [(m.severity, m.sqlstate) for m in err] == [("ERROR", "53100")]
    assert out[-1] == ReadyForQuery("I")
    assert not client.session.closed
    assert state.slots["s"].active_pid is None


def test_error_fault_with_fatal_severity_closes() -> None:
    client, _ = streaming(shop(2, ("error", {"sqlstate": "57P01"})))
    out = client.pump()
    err = [m for m in out if isinstance(m, ErrorResponse)]
    assert [(m.severity, m.sqlstate, m.message) for m in err] == [
        ("FATAL", "57P01", "terminating connection due to administrator command")
    ]
    assert not isinstance(out[-1], ReadyForQuery)
    assert client.session.close_requested


def test_stop_keepalives_streams_data_but_never_a_keepalive() -> None:
    client, _ = streaming(
        faults=(Fault("stop_keepalives"),), wal_sender_timeout=10.0, idle_keepalive_interval=1.0
    )
    out = client.pump()
    assert xlog(out) and not [m for m in out if isinstance(m, PrimaryKeepalive)]
    assert confirm(client, 1, reply=True) == []
    for _ in range(20):
        assert client.tick(1) == []
    assert not client.session.closed


def test_silent_timeout_ignores_the_client_and_closes_without_an_error() -> None:
    client, state = streaming(wal_sender_timeout=10.0)
    last = commits(client.pump())[-1]
    client.session.inject(Fault("silent_timeout"), client.now)
    assert confirm(client, last, reply=True) == []
    assert state.slots["s"].confirmed_flush < last  # never read
    assert client.tick(9.9) == []
    assert client.tick(0.1) == []
    assert client.session.close_requested
    assert state.slots["s"].active_pid is None


def test_redeliver_crashes_once_everything_is_confirmed_and_the_slot_falls_back() -> None:
    client, state = streaming(faults=(Fault("redeliver"),))
    first = client.pump()
    sent = commits(first)
    persisted = state.slots["s"].confirmed_flush
    confirm(client, sent[0])
    assert not client.session.closed  # not everything confirmed yet
    assert state.slots["s"].confirmed_flush == sent[0]
    confirm(client, sent[-1])
    assert client.session.close_requested
    assert state.slots["s"].confirmed_flush == persisted
    client.session.config.faults = ()
    again = Client(WalSenderSession(client.session.config, state, now=T0))
    again.send(StartupMessage((("user", "postgres"), ("replication", "database"))))
    again.query(START)
    assert commits(again.pump()) == sent  # the confirmed transactions, again


def test_shutdown_waits_for_the_client_then_sends_copy_0_without_copy_done() -> None:
    client, _ = streaming(shop(2, ("shutdown", {})), wal_sender_timeout=10.0)
    out = client.pump()
    assert isinstance(out[-1], PrimaryKeepalive) and out[-1].reply_requested
    last = commits(out)[-1]
    replies = confirm(client, last)
    assert replies == [CommandComplete("COPY 0")]
    assert CopyDone() not in replies
    assert client.session.close_requested


def test_shutdown_from_the_command_line_drains_the_stream_first() -> None:
    client, _ = streaming(faults=(Fault("shutdown"),))
    out = client.pump()
    assert len(commits(out)) == 3
    assert confirm(client, commits(out)[-1]) == [CommandComplete("COPY 0")]


def test_next_faults_apply_to_one_stream_only() -> None:
    client, _ = streaming(next_faults=[Fault("close_after", messages=1)])
    client.pump()
    assert client.session.close_requested
    assert client.session.config.next_faults == []


def test_slow_throttles_on_the_reactor_clock() -> None:
    """slow: about ``rate`` bytes per second, paced by the injected clock."""
    clock = Clock()
    clock.advance(T0)
    source = ScriptSource(shop(40))
    state = ServerState()
    state.wal_lsn = source.start_lsn
    state.declare(source.slots, source.publications)
    config = SessionConfig(
        major=16, source=source, faults=(Fault("slow", rate=500),), idle_keepalive_interval=0
    )
    factory = WalSenderFactory(config, state, clock)
    protocol = factory.buildProtocol(None)
    transport = StringTransport()
    protocol.makeConnection(transport)
    protocol.dataReceived(StartupMessage((("user", "u"), ("replication", "database"))).encode())
    protocol.dataReceived(Query(START).encode())
    transport.clear()
    sizes = []
    for _ in range(10):
        clock.advance(1)
        sizes.append(len(transport.value()))
    assert sizes[0] > 0
    rates = [b - a for a, b in itertools.pairwise(sizes)]
    assert all(0 < r < 500 + 200 for r in rates), rates
    assert protocol.session is not None and protocol.session.can_produce is False
