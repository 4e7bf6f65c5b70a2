"""A recording resumed at any position, as a new walsender would send it.

The differential proof (the same restarts against real PostgreSQL) is the conformance
resume check; these tests pin the rules on the golden corpus without a server.
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from psycopg2 import extras

from codec.pgoutput import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Decoder,
    Delete,
    Insert,
    Message,
    PgOutputMessage,
    Prepare,
    Relation,
    RelationColumn,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    encode,
)
from codec.values import LSN
from conformance.replay import replay
from pgwire_mock.pytest_plugin import WalSender
from pgwire_mock.script import (
    Script,
    Send,
    StreamOptions,
    column,
    compile_script,
    encode_stream,
    insert,
    rollback_to_savepoint,
    savepoint,
)
from pgwire_mock.server.resume import RecordedStream, resume
from pgwire_mock.streamfile import StreamEntry, read_stream

GOLDEN = sorted(Path(__file__).parents[1].joinpath("data", "golden").glob("pg*/*.jsonl"))


def _load(path: Path) -> tuple[int, list[StreamEntry]]:
    with path.open("rb") as f:
        return int(path.parent.name[2:]), list(read_stream(f, str(path)))


def _resumed(entries: list[StreamEntry], major: int, at: int) -> list[tuple[int, bytes]]:
    return [out for unit in resume(RecordedStream(entries), at, major=major) for out in unit]


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_resuming_at_the_start_gives_the_recording_back(path: Path) -> None:
    """From the slot's start, the derived stream is the recording, byte for byte: the
    transaction model loses nothing (schema messages, origins, invalidations)."""
    major, entries = _load(path)
    assert _resumed(entries, major, 0) == [(e.lsn, e.payload) for e in entries]


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_resume_point_delivers_each_transaction_once(path: Path) -> None:
    """At every position: what committed before it plus what the resumed stream sends
    applies to the same tables as the whole recording (nothing lost, nothing twice), and
    the resumed stream is one a stateful decoder reads: every stream block's messages
    carry the xid, each transaction's first block has first_segment set, and each
    relation is described before its first change."""
    major, entries = _load(path)
    _check_resumes([(e.lsn, e.payload) for e in entries], lambda at: _resumed(entries, major, at))


def _big_script() -> Script:
    """Transactions over logical_decoding_work_mem (64kB) with savepoints rolled back
    before, between and after the blocks are streamed, around small ones."""
    script = Script(pg_version=16, logical_decoding_work_mem=64).table(
        "public.t", columns=[column("id", "int4", key=True), column("v", "text")]
    )
    script = script.publication("pub", tables=["public.t"])
    ids = iter(range(1, 100_000))
    for rounds in (1, 3):
        script = script.transaction([insert("public.t", id=next(ids), v="small")])
        changes: list[Any] = []
        for r in range(rounds):
            changes += [insert("public.t", id=next(ids), v="x" * 400) for _ in range(150)]
            changes += [savepoint(f"s{r}")]
            changes += [insert("public.t", id=next(ids), v="y" * 400) for _ in range(100)]
            changes += [rollback_to_savepoint(f"s{r}")]
        script = script.transaction(changes)
        script = script.transaction([insert("public.t", id=next(ids), v="after")])
    return script


@pytest.mark.parametrize("streaming", ["on", "parallel"])
def test_a_script_resumed_anywhere_delivers_each_transaction_once(streaming: str) -> None:
    """The script encoder follows the same rules as a resumed recording."""
    script = _big_script()
    options = StreamOptions(proto_version=4, publication_names=("pub",), streaming=streaming)

    def encoded(at: int) -> list[tuple[int, bytes]]:
        return [
            (e.wal_start, e.payload)
            for e in encode_stream(script, options, from_lsn=at)
            if isinstance(e, Send)
        ]

    whole = encoded(0)
    assert sum(1 for _, p in whole if p[:1] == b"S") > 4  # it does stream, in blocks
    _check_resumes(whole, encoded)


def _check_resumes(
    whole: list[tuple[int, bytes]], resumed_at: Callable[[int], list[tuple[int, bytes]]]
) -> None:
    if not whole:
        return
    decoder = Decoder()
    messages = [decoder.decode(payload) for _, payload in whole]
    final = _final_lsns(
        tuple((lsn, payload, m) for (lsn, payload), m in zip(whole, messages, strict=True))
    )
    tables = _rows(replay(payload for _, payload in whole))
    lsns = sorted({lsn for lsn, _ in whole if lsn})
    # Long streams: every boundary (commits, block edges, aborts), every 7th position.
    edges = {lsn for lsn, payload in whole if payload[:1] in (b"C", b"c", b"A", b"S", b"E")}
    for at in sorted(edges.union(lsns[:: 1 if len(lsns) <= 200 else 7]) - {0}):
        resumed = resumed_at(at)
        before = [payload for (_, payload), f in zip(whole, final, strict=True) if f < at]
        got = replay([*before, *(payload for _, payload in resumed)])
        assert _rows(got) == tables, f"resumed at {at:X}"
        decoder = Decoder()
        described: set[int] = set()
        started: set[int] = set()
        for _, payload in resumed:
            message = decoder.decode(payload)
            if isinstance(message, StreamStart):
                assert message.first_segment == (message.xid not in started), f"at {at:X}"
                started.add(message.xid)
            elif isinstance(message, Relation):
                described.add(message.oid)
                assert (message.xid is not None) == decoder.in_stream, f"at {at:X}"
            oid = getattr(message, "relation_oid", None)
            if oid is not None:
                assert oid in described, f"change before its Relation, resumed at {at:X}"
                assert (message.xid is not None) == decoder.in_stream  # type: ignore[attr-defined]


def _final_lsns(entries: tuple[tuple[int, bytes, PgOutputMessage], ...]) -> list[int]:
    """For each entry, the LSN that decides whether a consumer stopped at a position had
    applied it: the commit (or prepare, or abort) record's start for messages of a
    transaction, the message's own LSN for non-transactional messages. The test's own
    oracle, kept apart from the server's rule (pgwire_mock.server.resume)."""
    end_of: dict[int, int] = {}  # streamed xid → its commit / prepare / abort LSN
    for lsn, _, m in entries:
        if isinstance(m, StreamCommit):
            end_of[m.xid] = m.commit_lsn
        elif isinstance(m, StreamPrepare):
            end_of[m.xid] = m.prepare_lsn
        elif isinstance(m, StreamAbort) and m.xid == m.subxid:
            end_of[m.xid] = m.abort_lsn if m.abort_lsn is not None else lsn
    out: list[int] = []
    current: int | None = None  # final LSN of the open Begin / Begin Prepare
    streaming: int | None = None  # xid of the open stream block
    for lsn, _, m in entries:
        if isinstance(m, Begin):
            current = m.final_lsn
        elif isinstance(m, BeginPrepare):
            current = m.prepare_lsn
        elif isinstance(m, StreamStart):
            streaming = m.xid
        if isinstance(m, StreamStart | StreamAbort | StreamCommit | StreamPrepare):
            xid = m.xid
            out.append(end_of.get(xid, lsn))
        elif streaming is not None:
            out.append(end_of.get(streaming, lsn))
        elif current is not None:
            out.append(current)
        elif isinstance(m, Message):
            out.append(m.lsn)
        elif isinstance(m, CommitPrepared):
            out.append(m.commit_lsn)
        elif isinstance(m, RollbackPrepared):
            out.append(m.rollback_end_lsn)
        else:
            out.append(lsn)
        if isinstance(m, Commit | Prepare):
            current = None
        elif isinstance(m, StreamStop):
            streaming = None
    return out


def _rows(tables: dict[int, object]) -> dict[int, list[object]]:
    return {oid: sorted(map(repr, t.rows)) for oid, t in tables.items()}  # type: ignore[attr-defined]


def test_identify_system_and_keepalives_report_the_end_of_wal(
    make_walsender: Callable[..., WalSender],
) -> None:
    """IDENTIFY_SYSTEM's xlogpos is the end of the WAL the fake holds (a client streaming
    to it gets everything), and once caught up the keepalives carry that position and do
    not move while nothing is written."""
    script = _big_script()
    server = make_walsender(script, pg_version=16, slots=["s"], idle_keepalive_interval=0.05)
    end = compile_script(script).end_lsn
    conn = psycopg2.connect(server.dsn(), connection_factory=extras.LogicalReplicationConnection)
    cur = conn.cursor()
    cur.execute("IDENTIFY_SYSTEM")
    assert LSN.parse(cur.fetchone()[2]) == end
    cur.start_replication(
        slot_name="s", decode=False, options={"proto_version": "1", "publication_names": "pub"}
    )
    commits: list[int] = []
    deadline = time.monotonic() + 10
    while cur.wal_end < end and time.monotonic() < deadline:
        message = cur.read_message()
        if message is None:
            select.select([conn], [], [], 0.05)
        elif bytes(message.payload)[:1] == b"C":
            commits.append(message.data_start)
    assert cur.wal_end == end == commits[-1]
    time.sleep(0.3)
    while cur.read_message() is not None:
        pass
    assert cur.wal_end == end  # idle: the end of WAL stays where it is
    conn.close()


# --- the rules, on small recordings --------------------------------------------------------

REL = Relation(16400, "public", "t", "d", (RelationColumn(1, "id", 23, -1),))


def _entries(*items: tuple[int, PgOutputMessage]) -> list[StreamEntry]:
    return [StreamEntry(lsn, encode(m)) for lsn, m in items]


def _tags(out: list[tuple[int, bytes]]) -> list[tuple[int, str]]:
    """Each message's position and tag (Relation and Type messages left out)."""
    return [(lsn, chr(payload[0])) for lsn, payload in out if payload[:1] not in (b"R", b"Y")]


def _streamed(xid: int, end: PgOutputMessage, end_lsn: int) -> list[StreamEntry]:
    """A transaction streamed in two blocks that ran out of memory (0x100-0x180 and
    0x200-0x280, changes at 0x140 and 0x240), then ended at ``end_lsn``."""
    return _entries(
        (0x100, StreamStart(xid, True)),
        (0, Relation(16400, "public", "t", "d", REL.columns, xid=xid)),
        (0x140, Insert(16400, ("1",), xid=xid)),
        (0x180, StreamStop()),
        (0x200, StreamStart(xid, False)),
        (0x240, Insert(16400, ("2",), xid=xid)),
        (0x280, StreamStop()),
        (end_lsn, end),
    )


def test_a_spilled_transaction_streams_at_its_first_change_after_the_start_point() -> None:
    """Restarted at a change inside the second block, the first block spills (it ended
    before the start point) and the transaction streams at that change, once on 16+
    may start streaming (ReorderBufferProcessPartialChange): one block up to it, the
    rest with the commit. On 14/15 the test is the record's end, so the block ends at
    the change before."""
    entries = _streamed(7, StreamCommit(7, 0, 0x300, 0x340, 0), 0x340)
    resumed = _resumed(entries, 16, 0x240)
    assert _tags(resumed) == [
        (0x100, "S"),
        (0x140, "I"), (0x240, "I"), (0x240, "E"), (0x280, "S"), (0x280, "E"), (0x340, "c"),
    ]  # fmt: skip
    # On 14 the record before 0x240 (the block's start, 0x200) ends there: stream at it.
    assert _tags(_resumed(entries, 14, 0x240))[1:4] == [(0x140, "I"), (0x200, "E"), (0x240, "S")]
    # Restarted at the second block's start: 16+ streams at that change, 14 streams the
    # first block where it was, the record of its last change ending at the start point.
    assert _tags(_resumed(entries, 16, 0x200))[1:3] == [(0x140, "I"), (0x200, "E")]
    assert _tags(_resumed(entries, 14, 0x200)) == _tags([(e.lsn, e.payload) for e in entries])


def test_on_18_a_rolled_back_subtransaction_evicted_before_the_start_point_is_truncated() -> None:
    """Memory runs out twice before the start point: first the top transaction is the
    largest (spilled with its subtransactions), then subtransaction 8 alone. 14-17 spill
    it, and stream at its next change after the start point (the rest of its block is
    below the limit and goes with the next, discarded by the abort); 18 finds it rolled back
    and truncates it (ReorderBufferCheckAndTruncateAbortedTXN): its later changes are
    dropped, nothing streams, and the transaction goes whole at its commit, without 8."""
    entries = _entries(
        (0x100, StreamStart(7, True)),
        (0, Relation(16400, "public", "t", "d", REL.columns, xid=7)),
        (0x140, Insert(16400, ("1",), xid=7)),
        (0x180, StreamStop()),
        (0x1A0, StreamStart(7, False)),
        (0x1A0, Insert(16400, ("2",), xid=8)),
        (0x280, StreamStop()),
        (0x300, StreamStart(7, False)),
        (0x340, Insert(16400, ("3",), xid=8)),
        (0x380, StreamStop()),
        (0x3A0, StreamAbort(7, 8)),
        (0x400, StreamStart(7, False)),
        (0x400, Insert(16400, ("4",), xid=9)),
        (0x440, StreamStop()),
        (0x480, StreamCommit(7, 0, 0x460, 0x480, 0)),
    )
    assert _tags(_resumed(entries, 17, 0x300)) == [
        (0x100, "S"), (0x140, "I"), (0x1A0, "I"), (0x300, "E"), (0x3A0, "A"),
        (0x400, "S"), (0x400, "I"), (0x440, "E"), (0x480, "c"),
    ]  # fmt: skip
    assert _tags(_resumed(entries, 18, 0x300)) == [
        (0x140, "B"), (0x140, "I"), (0x400, "I"), (0x480, "C"),
    ]  # fmt: skip


def test_a_lone_stream_abort_is_kept_where_it_was() -> None:
    """18 sends a Stream Abort for a subtransaction of a transaction it truncated as
    rolled back, streaming or not (test_script_vs_postgres[aborted_savepoint]); resumed
    before it, it comes again; after it, not."""
    entries = _entries(
        (0x180, StreamAbort(5, 6)),
        (0x200, Begin(0x220, 0, 8)),
        (0, REL),
        (0x200, Insert(16400, ("1",))),
        (0x228, Commit(0, 0x220, 0x228, 0)),
    )
    assert _tags(_resumed(entries, 18, 0x100)) == [
        (0x180, "A"),
        (0x200, "B"),
        (0x200, "I"),
        (0x228, "C"),
    ]
    assert _tags(_resumed(entries, 18, 0x190)) == [(0x200, "B"), (0x200, "I"), (0x228, "C")]


def test_a_rolled_back_transaction_stops_at_its_first_relation_lookup() -> None:
    """A new walsender that meets a transaction rolled back by then, and has not looked
    its relation up before, stops decoding it there (a concurrent abort): an empty
    stream block then the Stream Abort; a Begin Prepare then its Prepare."""
    aborted = _streamed(7, StreamAbort(7, 7), 0x300)
    assert _tags(_resumed(aborted, 17, 0x180)) == [(0x100, "S"), (0x140, "E"), (0x300, "A")]
    prepared = _entries(
        (0x100, BeginPrepare(0x120, 0x130, 0, 8, "g")),
        (0, REL),
        (0x100, Insert(16400, ("1",))),
        (0x130, Prepare(0, 0x120, 0x130, 0, 8, "g")),
        (0x150, RollbackPrepared(0, 0x130, 0x150, 0, 0, 8, "g")),
    )
    assert _tags(_resumed(prepared, 16, 0x110)) == [(0x100, "b"), (0x130, "P"), (0x150, "r")]
    # Committed, the same prepared transaction is decoded whole.
    committed = [
        *prepared[:4],
        StreamEntry(0x150, encode(CommitPrepared(0, 0x140, 0x150, 0, 8, "g"))),
    ]
    assert [t for _, t in _tags(_resumed(committed, 16, 0x110))] == ["b", "I", "P", "K"]


def test_on_18_a_rolled_back_prepared_transaction_truncated_as_aborted_is_sent_as_left() -> None:
    """Recorded on 18 with its changes beginning far past its start, a transaction
    rolled back prepared was truncated as aborted when the memory limit picked it: a
    new walsender truncates it too and sends what is left, looked up or not. 15-17
    stop it at its first lookup."""
    entries = _entries(
        (0x100, BeginPrepare(0x9000, 0x9010, 0, 8, "g")),
        (0, REL),
        (0x8000, Insert(16400, ("250",))),
        (0x9010, Prepare(0, 0x9000, 0x9010, 0, 8, "g")),
        (0x9030, RollbackPrepared(0, 0x9010, 0x9030, 0, 0, 8, "g")),
    )
    assert [t for _, t in _tags(_resumed(entries, 18, 0x110))] == ["b", "I", "P", "r"]
    assert [t for _, t in _tags(_resumed(entries, 17, 0x110))] == ["b", "P", "r"]


def test_a_rolled_back_stream_goes_on_with_its_subtransactions_after_a_failed_lookup() -> None:
    """A concurrent abort ends the block and drops the transaction's own later changes
    (ReorderBufferResetTXN, then concurrent_abort), but its subtransactions' changes
    still fill memory and stream in later blocks, each cut at its first lookup that
    fails again; a subtransaction that had some in memory gets its Stream Abort
    (measured on 15-17 with the resume check's prepared_subxacts)."""
    entries = _entries(
        (0x100, StreamStart(7, True)),
        (0, Relation(16400, "public", "t", "d", REL.columns, xid=7)),
        (0x140, Insert(16400, ("1",), xid=7)),
        (0x180, StreamStop()),
        (0x200, StreamStart(7, False)),
        (0x220, Insert(16400, ("2",), xid=7)),
        (0x240, Insert(16400, ("3",), xid=8)),
        (0x280, StreamStop()),
        (0x290, StreamAbort(7, 8)),
        (0x300, StreamStart(7, False)),
        (0x320, Insert(16400, ("4",), xid=7)),
        (0x380, StreamStop()),
        (0x400, StreamAbort(7, 7)),
    )
    assert _tags(_resumed(entries, 17, 0x110)) == [
        (0x100, "S"), (0x140, "E"),
        (0x200, "S"), (0x240, "E"),
        (0x290, "A"),
        (0x400, "A"),
    ]  # fmt: skip


def test_a_rolled_back_transaction_is_sent_when_its_relation_was_looked_up_before() -> None:
    """The same rolled-back stream after a committed transaction on the same table that
    the new walsender decoded: the lookup hits the cache, nothing stops it."""
    entries = [
        *_entries(
            (0x10, Begin(0x20, 0, 6)), (0, REL), (0x10, Insert(16400, ("0",))),
            (0x20, Commit(0, 0x20, 0x28, 0)),
        ),
        *_streamed(7, StreamAbort(7, 7), 0x300),
    ]  # fmt: skip
    tags = [t for _, t in _tags(_resumed(entries, 17, 0x20))]
    assert tags == ["B", "I", "C", "S", "I", "E", "S", "I", "E", "A"]


def test_a_rolled_back_prepared_transaction_stops_where_unpublished_changes_were() -> None:
    """Its relation looked up before (a commit the new walsender sent), a prepared
    transaction rolled back by then is sent up to the first change after a WAL gap wider
    than two full pages: the changes of some unpublished table lie there, looked up for
    the first time, and the lookup is a concurrent abort (measured on 15-17 with the
    resume check's prepared_subxacts). A narrower gap holds no such change."""

    def entries(gap: int) -> list[StreamEntry]:
        second = 0x200 + gap
        return _entries(
            (0x100, Begin(0x120, 0, 6)), (0, REL), (0x100, Insert(16400, ("0",))),
            (0x120, Commit(0, 0x120, 0x128, 0)),
            (0x200, BeginPrepare(second + 0x20, second + 0x30, 0, 8, "g")),
            (0x200, Insert(16400, ("1",))),
            (second, Insert(16400, ("2",))),
            (second + 0x30, Prepare(0, second + 0x20, second + 0x30, 0, 8, "g")),
            (second + 0x50, RollbackPrepared(0, second + 0x30, second + 0x50, 0, 0, 8, "g")),
        )  # fmt: skip

    wide = [t for _, t in _tags(_resumed(entries(0x4800), 17, 0x110))]
    assert wide == ["B", "I", "C", "b", "I", "P", "r"]
    narrow = [t for _, t in _tags(_resumed(entries(0x800), 17, 0x110))]
    assert narrow == ["B", "I", "C", "b", "I", "I", "P", "r"]


def test_a_change_published_through_the_root_is_given_its_partition() -> None:
    """The partition of a change sent without a schema: the only one described, or the
    one whose rows share its partition key value; after a restart its Relation (the
    root's, then the partition's) goes before it."""
    root = Relation(
        16384,
        "public",
        "p",
        "d",
        (RelationColumn(1, "id", 23, -1), RelationColumn(1, "region", 25, -1)),
    )
    eu = Relation(16389, "public", "p_eu", "d", root.columns)
    us = Relation(16396, "public", "p_us", "d", root.columns)
    entries = _entries(
        (0x10, Begin(0x40, 0, 1)),
        (0, root), (0, eu), (0x10, Insert(16384, ("1", "eu"))),
        (0, root), (0, us), (0x20, Insert(16384, ("2", "us"))),
        (0x30, Insert(16384, ("3", "eu"))),
        (0x40, Commit(0, 0x40, 0x48, 0)),
        (0x50, Begin(0x70, 0, 2)),
        (0x50, Delete(16384, ("1", "eu"))),
        (0x60, Insert(16384, ("1", "us"))),
        (0x70, Commit(0, 0x70, 0x78, 0)),
    )  # fmt: skip
    keys = [c.keys for u in RecordedStream(entries).units for c in getattr(u, "changes", [])]
    assert keys == [(16389,), (16396,), (16389,), (16389,), (16396,)]
    relations = [
        Decoder().decode(p).relation_name for _, p in _resumed(entries, 17, 0x48) if p[:1] == b"R"
    ]  # type: ignore[attr-defined]
    assert relations == ["p", "p_eu", "p", "p_us"]


def test_a_resumed_script_ends_its_first_block_where_a_resumed_recording_does() -> None:
    """One rule for scripts and recordings: resumed inside a transaction that spilled
    before the start point, the script encoder streams at the first change it may
    stream (ReorderBufferProcessPartialChange), where server.resume cuts the same stream
    read as a recording — not at the next memory limit."""
    script = _big_script()
    options = StreamOptions(proto_version=2, publication_names=("pub",), streaming="on")
    whole = [
        (e.wal_start, e.payload) for e in encode_stream(script, options) if isinstance(e, Send)
    ]
    parsed = RecordedStream([StreamEntry(lsn, payload) for lsn, payload in whole])
    starts = [lsn for lsn, payload in whole if payload[:1] == b"S"]
    later = starts[1:]  # a Stream Start after the first block of its transaction
    assert later

    def first_block(stream: list[tuple[int, bytes]]) -> list[int]:
        out: list[int] = []
        inside = False
        for lsn, payload in stream:
            if payload[:1] == b"S":
                inside = True
            elif payload[:1] == b"E" and inside:
                return out
            elif inside:
                out.append(lsn)
        return out

    for at in later:
        ours = [
            (e.wal_start, e.payload)
            for e in encode_stream(script, options, from_lsn=at)
            if isinstance(e, Send)
        ]
        theirs = [pair for unit in resume(parsed, at, major=16) for pair in unit]
        assert first_block(ours) == first_block(theirs), f"resumed at {at:X}"
