"""A Hypothesis state machine drives two sans-IO sessions sharing one server state with
random valid and invalid client actions, and checks PostgreSQL's invariants after each."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from codec.replication import HotStandbyFeedback, StandbyStatusUpdate
from codec.replication import encode as encode_replication
from codec.wire import (
    BackendReader,
    CopyBothResponse,
    CopyData,
    CopyDone,
    CopyFail,
    Flush,
    Parse,
    Query,
    ReadyForQuery,
    StartupMessage,
    Sync,
    Terminate,
)
from pgwire_mock.server.session import Phase, SessionConfig, WalSenderSession
from pgwire_mock.server.source import RecordingSource
from pgwire_mock.server.state import ServerState

GOLDEN = Path(__file__).parent.parent / "data" / "golden"
SOURCE = RecordingSource.from_file(GOLDEN / "pg16" / "streaming.v2-stream.jsonl")
T0 = 1_700_000_000.0
START = (
    "START_REPLICATION SLOT {slot} LOGICAL {lsn} "
    "(proto_version '2', publication_names 'pgwm_streaming', streaming 'on')"
)
QUERIES = st.one_of(
    st.sampled_from(
        [
            "IDENTIFY_SYSTEM",
            "SHOW wal_sender_timeout",
            "CREATE_REPLICATION_SLOT a LOGICAL pgoutput",
            "CREATE_REPLICATION_SLOT b TEMPORARY LOGICAL pgoutput (SNAPSHOT 'nothing')",
            "DROP_REPLICATION_SLOT a",
            "DROP_REPLICATION_SLOT b",
            "READ_REPLICATION_SLOT a",
            "SELECT 1",
            "BEGIN",
            "COMMIT",
            "ROLLBACK",
            "",
            ";",
            "START_REPLICATION SLOT a LOGICAL 0/0 (proto_version '9', publication_names 'p')",
            "START_REPLICATION SLOT nope LOGICAL 0/0 (proto_version '1', publication_names 'p')",
            "TIMELINE_HISTORY 1",
            "BASE_BACKUP",
        ]
    ),
    st.builds(
        START.format,
        slot=st.sampled_from(["a", "b"]),
        lsn=st.sampled_from(["0/0", "0/1000000", "FFFFFFFF/0"]),
    ),
    # Surrogates (Cs) have no UTF-8 encoding: no client can send them in a Query.
    st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=40),
)
LSNS = st.one_of(st.just(0), st.integers(0, 1 << 40))
STRAY = st.sampled_from(
    [
        Parse("", "SELECT 1", ()).encode(),
        Sync().encode(),
        Flush().encode(),
        CopyFail("stop").encode(),
        b"X\x00\x00\x00\x04",
        b"?\x00\x00\x00\x04",
        b"\x00\x00\x00\x04",
        CopyData(b"zz").encode(),
    ]
)


class Client:
    def __init__(self, state: ServerState, config: SessionConfig) -> None:
        self.session = WalSenderSession(config, state, now=T0)
        self.reader = BackendReader()
        self.session.receive_data(
            StartupMessage((("user", "postgres"), ("replication", "database"))).encode(), T0
        )
        self.replies()

    def replies(self) -> list[object]:
        self.reader.feed(self.session.data_to_send())
        return list(self.reader)


class Sessions(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.state = ServerState()
        self.state.wal_lsn = SOURCE.start_lsn
        self.state.declare([], SOURCE.publications)
        self.config = SessionConfig(major=16, source=SOURCE, wal_sender_timeout=10.0)
        self.clients = [Client(self.state, self.config), Client(self.state, self.config)]
        self.confirmed: dict[str, int] = {}

    def client(self, index: int) -> Client:
        return self.clients[index]

    @rule(index=st.integers(0, 1), text=QUERIES)
    def query(self, index: int, text: str) -> None:
        client = self.client(index)
        ready = client.session.phase is Phase.READY
        client.session.receive_data(Query(text).encode(), self.now)
        replies = client.replies()
        if ready and not client.session.closed:
            rfq = [m for m in replies if isinstance(m, ReadyForQuery)]
            if client.session.streaming:
                assert CopyBothResponse(0, ()) in replies and not rfq
            else:
                assert len(rfq) == 1 and replies[-1] is rfq[0], replies

    @rule(index=st.integers(0, 1), write=LSNS, flush=LSNS, reply=st.booleans())
    def status_update(self, index: int, write: int, flush: int, reply: bool) -> None:
        update = StandbyStatusUpdate(write, flush, 0, 0, reply_requested=reply)
        self.client(index).session.receive_data(
            CopyData(encode_replication(update)).encode(), self.now
        )
        self.client(index).replies()

    @rule(index=st.integers(0, 1))
    def feedback(self, index: int) -> None:
        message = CopyData(encode_replication(HotStandbyFeedback(0, 0, 0, 0, 0)))
        self.client(index).session.receive_data(message.encode(), self.now)
        self.client(index).replies()

    @rule(index=st.integers(0, 1), data=STRAY)
    def stray(self, index: int, data: bytes) -> None:
        self.client(index).session.receive_data(data, self.now)
        self.client(index).replies()

    @rule(index=st.integers(0, 1))
    def copy_done(self, index: int) -> None:
        self.client(index).session.receive_data(CopyDone().encode(), self.now)
        self.client(index).replies()

    @rule(index=st.integers(0, 1), size=st.integers(1, 1 << 16))
    def produce(self, index: int, size: int) -> None:
        self.client(index).session.produce(size, self.now)
        self.client(index).replies()

    @rule(seconds=st.floats(0, 20))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        for client in self.clients:
            client.session.tick(self.now)
            client.replies()

    @rule(index=st.integers(0, 1), terminate=st.booleans())
    def goes_away(self, index: int, terminate: bool) -> None:
        session = self.client(index).session
        if terminate:
            session.receive_data(Terminate().encode(), self.now)
        session.receive_eof(self.now)
        assert session.closed

    @precondition(lambda self: any(c.session.closed for c in self.clients))
    @rule()
    def reconnect(self) -> None:
        self.clients = [
            Client(self.state, self.config) if c.session.closed else c for c in self.clients
        ]

    @invariant()
    def a_slot_is_held_by_at_most_one_live_session(self) -> None:
        for slot in self.state.slots.values():
            holders = [
                c.session
                for c in self.clients
                if c.session.streaming
                and c.session._stream is not None
                and c.session._stream.slot.name == slot.name
            ]
            assert len(holders) <= 1
            if holders:
                assert slot.active_pid == holders[0].pid
            elif slot.temporary:
                # A temporary slot is in use by the session that made it, streaming or not.
                assert slot.active_pid == slot.owner_pid
            else:
                assert slot.active_pid is None

    @invariant()
    def confirmed_flush_never_moves_back(self) -> None:
        # LogicalConfirmReceivedLocation only moves forward: a lower flush is ignored.
        for name, slot in self.state.slots.items():
            assert slot.confirmed_flush >= self.confirmed.get(name, 0)
        self.confirmed = {n: s.confirmed_flush for n, s in self.state.slots.items()}


Sessions.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_sessions = Sessions.TestCase
