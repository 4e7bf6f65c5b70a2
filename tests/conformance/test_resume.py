"""The resume check (:mod:`conformance.resume`): positions, diffs, and real PostgreSQL.

The unit tests need no server. The tests on ``pg_server`` run the check itself: real
PostgreSQL and the fake walsender, stopped and restarted at the same positions, must
send the same bytes at the same XLogData positions afterwards. They assert equality
everywhere, except that in the scenarios of BLOCK_BOUNDARIES a restart may differ in
where stream blocks start and stop (conformance.resume.block_boundaries_only), which a
recording cannot settle.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from codec import pgoutput as po
from codec.values import LSN
from conformance import resume
from conformance.provision import Server
from conformance.restart_points import (
    PG_RECVLOGICAL,
    PSYCOPG2,
    Received,
    RestartPoint,
    restart_points,
    sample,
)
from conformance.resume import CellResume, PositionResult, compare, describe_difference
from conformance.resume_targets import Attempt, FakeTarget, RealTarget
from conformance.scenarios import (
    MAX_PROTO_VERSION,
    RESUME_SCENARIOS,
    SCENARIOS,
    OptionSet,
    option_sets,
)
from conformance.subjects import SqlInterface, StreamMessage, prepare_scenario

REL = po.Relation(16400, "public", "t", "d", (po.RelationColumn(1, "id", 23, -1),))
REL2 = po.Relation(16401, "public", "u", "d", (po.RelationColumn(1, "id", 23, -1),))


def _stream(*items: tuple[int, po.PgOutputMessage]) -> list[Received]:
    return [Received(LSN(lsn), LSN(lsn), po.encode(m)) for lsn, m in items]


def _ins(xid: int | None = None, value: str = "1", rel: int = 16400) -> po.Insert:
    return po.Insert(rel, (value,), xid=xid)


# A straight stream as PostgreSQL 16 sends it with streaming and two_phase on: a plain
# transaction, a non-transactional message, a streamed transaction with an aborted
# subtransaction, a prepared transaction and its COMMIT PREPARED, an aborted stream.
STREAM: list[Received] = _stream(
    (0x100, po.Begin(0x120, 0, 700)),
    (0, REL),
    (0x100, _ins()),
    (0x120, po.Commit(0, 0x120, 0x150, 0)),
    (0x160, po.Message(0, 0x160, "p", b"x")),
    (0x200, po.StreamStart(701, True)),
    (0, po.Relation(16400, "public", "t", "d", REL.columns, xid=701)),
    (0x200, _ins(701, "a")),
    (0x210, _ins(701, "b")),
    (0x220, _ins(702, "c")),
    (0x230, po.StreamStop()),
    (0x240, po.StreamAbort(701, 702)),
    (0x250, po.StreamStart(701, False)),
    (0x260, _ins(701, "d")),
    (0x270, po.StreamStop()),
    (0x280, po.StreamCommit(701, 0, 0x280, 0x290, 0)),
    (0x300, po.BeginPrepare(0x330, 0x340, 0, 703, "g")),
    (0, REL2),
    (0x300, _ins(rel=16401)),
    (0x310, _ins(value="2", rel=16401)),
    (0x320, _ins(value="3", rel=16401)),
    (0x330, po.Prepare(0, 0x330, 0x340, 0, 703, "g")),
    (0x350, po.CommitPrepared(0, 0x350, 0x360, 0, 703, "g")),
    (0x400, po.StreamStart(704, True)),
    (0x400, _ins(704, "e")),
    (0x410, po.StreamStop()),
    (0x420, po.StreamAbort(704, 704)),
)


def _by_lsn(points: Sequence[RestartPoint]) -> dict[int, RestartPoint]:
    return {int(p.lsn): p for p in points}


def test_positions_are_every_boundary_and_points_inside_streamed_and_prepared() -> None:
    """Commits, the non-transactional message, stream blocks (start, middle, stop),
    around a subtransaction's Stream Abort, a prepared transaction's first and middle
    change, Prepare, Commit Prepared and the top-level Stream Abort; never 0/0."""
    points = _by_lsn(restart_points(STREAM))
    assert sorted(points) == [
        0x120, 0x160, 0x200, 0x210, 0x230, 0x240, 0x250, 0x260, 0x270, 0x280,
        0x300, 0x310, 0x330, 0x350, 0x400, 0x410, 0x420,
    ]  # fmt: skip
    assert points[0x120].reasons == ("Commit",) and not points[0x120].inside
    assert points[0x160].reasons == ("non-transactional Message",)
    assert points[0x200].reasons == ("Stream Start of block 1",) and points[0x200].inside
    assert points[0x210].reasons == ("middle of block 1",)
    # The last positioned message before the subtransaction's abort is the Stream Stop.
    assert points[0x230].reasons == (
        "Stream Stop of block 1",
        "right before a subtransaction's Stream Abort",
    )
    assert points[0x240].reasons == ("subtransaction's Stream Abort",)
    assert points[0x260].reasons == ("middle of block 2",)
    assert points[0x280].reasons == ("Stream Commit",) and not points[0x280].inside
    assert points[0x300].reasons == ("first change of prepared transaction 1",)
    assert points[0x310].reasons == ("middle of prepared transaction 1",)
    assert points[0x330].reasons == ("Prepare",) and points[0x330].inside
    assert points[0x350].reasons == ("Commit Prepared",)
    assert points[0x400].reasons == ("Stream Start of block 3", "middle of block 3")
    assert points[0x420].reasons == ("Stream Abort",) and not points[0x420].inside
    assert points[0x120].index == 3 and points[0x200].index == 5


def test_transactional_messages_and_plain_changes_are_not_positions() -> None:
    stream = _stream(
        (0x100, po.Begin(0x120, 0, 1)),
        (0x100, po.Message(1, 0x100, "p", b"t")),
        (0x110, _ins()),
        (0x120, po.Commit(0, 0x120, 0x130, 0)),
    )
    assert [int(p.lsn) for p in restart_points(stream)] == [0x120]


def test_the_sample_keeps_every_inside_position_with_both_consumers() -> None:
    """By default every position is tried with both consumers. The sample: inside
    positions with both; boundaries the first two, the last, and the one before a new
    relation's first change, alternating the consumer."""
    points = restart_points(STREAM)
    pairs = sample(points, STREAM, full=False)
    inside = [p for p in points if p.inside]
    for point in inside:
        assert [c for p, c in pairs if p is point] == [PG_RECVLOGICAL, PSYCOPG2]
    boundaries = [(int(p.lsn), c.name) for p, c in pairs if not p.inside]
    # 0x280 (the Stream Commit) is the last boundary before REL2 first appears.
    assert boundaries == [
        (0x120, "pg_recvlogical"),
        (0x160, "psycopg2"),
        (0x280, "pg_recvlogical"),
        (0x420, "psycopg2"),
    ]
    full = sample(points, STREAM)
    assert len(full) == 2 * len(points)


def test_sampling_of_a_long_plain_stream_keeps_few_boundaries() -> None:
    items: list[tuple[int, po.PgOutputMessage]] = []
    for n in range(20):
        base = 0x1000 * (n + 1)
        items += [
            (base, po.Begin(base + 8, 0, n)),
            (base, _ins()),
            (base + 8, po.Commit(0, base + 8, base + 16, 0)),
        ]
    items.insert(1, (0, REL))
    stream = _stream(*items)
    pairs = sample(restart_points(stream), stream, full=False)
    assert [int(p.lsn) for p, _ in pairs] == [0x1008, 0x2008, 0x14008]


def _received(*rows: tuple[int, bytes]) -> tuple[Received, ...]:
    return tuple(Received(LSN(lsn), LSN(lsn), payload) for lsn, payload in rows)


def test_the_difference_names_index_tag_positions_hex_and_decoded_messages() -> None:
    start = po.encode(po.StreamStart(9, True))
    real = _received((0x10, start), (0x20, po.encode(_ins(9, "x"))))
    fake = _received((0x10, start), (0x28, po.encode(_ins(9, "y"))))
    text = describe_difference(real, fake)
    assert text is not None
    lines = text.splitlines()
    assert lines[0] == (
        "message 1 of 2 (real) / 2 (fake): payload differs from byte 17, positions differ"
    )
    want = po.encode(_ins(9, "x")).hex()
    assert lines[1] == f"    real: 'I' wal 0/20..0/20 {len(want) // 2} bytes {want}"
    assert lines[2] == "      Insert(relation_oid=16400, new_tuple=('x',), xid=9)"
    assert lines[3].startswith("    fake: 'I' wal 0/28..0/28 ")
    assert lines[4] == "      Insert(relation_oid=16400, new_tuple=('y',), xid=9)"
    assert describe_difference(real, real) is None


def test_a_missing_or_extra_message_is_named_and_long_payloads_are_cut() -> None:
    big = po.encode(po.Message(0, 0x30, "p", b"z" * 200))
    real = _received((0x10, po.encode(po.StreamStop())), (0x30, big))
    text = describe_difference(real, real[:1])
    assert text is not None
    assert text.startswith("the fake sent 1 messages, real 2; first missing, message 1:")
    assert "…(+" in text and "Message(flags=0" in text
    text = describe_difference(real[:1], real)
    assert text is not None and "first extra, message 1:" in text


def test_compare_reports_errors_acknowledgement_and_confirmed_flush() -> None:
    point = RestartPoint(LSN(0x20), ("Commit",), False, 3)
    same = _received((0x30, po.encode(po.StreamStop())))
    good = Attempt(LSN(0x20), LSN(0x20), same)
    assert compare(point, PSYCOPG2, good, good) is None
    assert compare(point, PSYCOPG2, Attempt(error="boom"), good) == "real: boom"
    assert compare(point, PSYCOPG2, good, Attempt(error="bang")) == "fake: bang"
    lagging = Attempt(LSN(0x10), LSN(0x10), same)
    assert compare(point, PSYCOPG2, good, lagging) == (
        "acknowledged real 0/20, fake 0/10 (the fake sent no XLogData at P); "
        "confirmed_flush after the stop: real 0/20, fake 0/10"
    )


def test_a_cell_reports_its_failures_with_the_whole_difference() -> None:
    point = RestartPoint(LSN(0x20), ("Commit",), False, 3)
    ok = PositionResult(point, PG_RECVLOGICAL, Attempt(), Attempt(), None)
    bad = PositionResult(point, PSYCOPG2, Attempt(), Attempt(), "message 0 differs")
    cell = CellResume(17, "types", "v1", 1, [ok, bad])
    assert (cell.tried, cell.equal, cell.ok) == (2, 1, False)
    assert cell.report() == (
        "PostgreSQL 17 types v1: 1 of 2 restarts differ\n"
        "  restart at 0/20 (Commit) as psycopg2: message 0 differs"
    )


def test_block_boundaries_only_allows_moved_blocks_and_nothing_else() -> None:
    """Blocks that start and stop elsewhere, and a rolled-back subtransaction's change
    streamed or not before its Stream Abort, pass; a lost change of a committed
    transaction, or a message at another position, does not."""
    real = _stream(
        (0x200, po.StreamStart(701, True)),
        (0x200, _ins(701, "a")),
        (0x210, _ins(702, "b")),
        (0x210, po.StreamStop()),
        (0x220, po.StreamStart(701, False)),
        (0x230, _ins(701, "c")),
        (0x240, po.StreamStop()),
        (0x250, po.StreamAbort(701, 702)),
        (0x280, po.StreamCommit(701, 0, 0x280, 0x290, 0)),
    )
    moved = (
        [real[i] for i in (0, 1, 3)]
        + _stream(
            (0x210, po.StreamStart(701, False)),
            (0x230, _ins(701, "c")),
            (0x238, po.StreamStop()),
        )
        + real[7:]
    )
    assert resume.block_boundaries_only(real, moved)
    lost = [m for m in real if m.payload != po.encode(_ins(701, "c"))]
    assert not resume.block_boundaries_only(real, lost)
    shifted = [*real[:-1], Received(LSN(0x288), LSN(0x288), real[-1].payload)]
    assert not resume.block_boundaries_only(real, shifted)


# --------------------------------------------------------------------------------------
# On real PostgreSQL


def _failures(cells: Sequence[CellResume]) -> str:
    return "\n".join(c.report() for c in cells if not c.ok)


# Scenarios with transactions streamed over logical_decoding_work_mem in blocks, where a
# restart inside one may move the blocks after the first one it sends again: where the
# reorder buffer runs out of memory then depends on the size of unpublished changes,
# which a recording does not have (docs/clients.md, "Restart and resume").
BLOCK_BOUNDARIES = frozenset({"streaming", "two_phase", "origin"})


def test_the_fake_resumes_like_postgres_on_every_scenario(pg_server: Server) -> None:
    """Every scenario × option set: stopped at every position, acknowledging as
    pg_recvlogical and as psycopg2 do, the fake sends after the restart what PostgreSQL
    sends, at the same positions, and leaves the same confirmed_flush. In the scenarios
    of BLOCK_BOUNDARIES a restart may differ only in stream block boundaries (printed)."""
    cells = resume.resume_version(pg_server, SCENARIOS)
    runnable = [s for s in SCENARIOS if s.min_version <= pg_server.version]
    assert len(cells) == len(runnable) * len(option_sets(pg_server.version))
    assert all(c.error is None for c in cells), _failures(cells)
    assert all(c.tried > 0 for c in cells)
    print(_failures([c for c in cells if c.scenario in BLOCK_BOUNDARIES]))
    wrong = [
        c
        for c in cells
        if not c.ok
        and (
            c.scenario not in BLOCK_BOUNDARIES
            or any(not r.block_boundaries_only for r in c.failures)
        )
    ]
    assert not wrong, _failures(wrong)


def test_the_fake_resumes_like_postgres_inside_prepared_and_streamed_transactions(
    pg_server: Server,
) -> None:
    """The cells beyond scenario × option set (resume.EXTRA_CELLS), restart positions
    sampled: two-phase without streaming (large prepared transactions whole, one with a
    subtransaction rolled back, one rolled back prepared before the restart), and
    ``prepared_subxacts`` streamed at protocol 2, 3 (Stream Abort of a subtransaction,
    then Stream Prepare) and 4 (parallel). The fake sends what PostgreSQL sends at every
    restart, also for the transaction rolled back prepared that the new walsender
    decodes again (a concurrent abort at a lookup; on 18 truncated as aborted);
    streamed cells may differ in stream block boundaries only. 14 has only protocol 2."""
    cells = resume.resume_extra(pg_server)
    want = [
        (scenario.name, options.name)
        for scenario, sets in resume.extra_cells(pg_server.version)
        for options in sets
    ]
    assert [(c.scenario, c.option_set) for c in cells] == want
    assert len(want) == {14: 1, 15: 4}.get(pg_server.version, 5)
    assert all(c.error is None and c.tried > 0 for c in cells), _failures(cells)
    streamed = {o.name for o in option_sets(pg_server.version) if o.streaming != "off"}
    print(_failures(cells))
    wrong = [
        c
        for c in cells
        if not c.ok
        and (c.option_set not in streamed or any(not r.block_boundaries_only for r in c.failures))
    ]
    assert not wrong, _failures(wrong)


def test_a_cell_the_version_lacks_is_refused_as_postgres_refuses_it(pg_server: Server) -> None:
    """The option sets of EXTRA_CELLS that this major cannot decode (two_phase and
    protocol 3 on 14, protocol 4 and parallel on 14 and 15), and on every major a
    two-phase protocol one past its highest: START_REPLICATION on a copy of the cell's
    slot is refused by the fake with PostgreSQL's error, before anything streams."""
    major = pg_server.version
    lacking = {o.name: o for _, sets in resume.EXTRA_CELLS for o in sets if o.min_version > major}
    beyond = OptionSet("beyond", MAX_PROTO_VERSION[major] + 1, streaming="on", two_phase=True)
    sets = [*lacking.values(), beyond]
    assert len(sets) == {14: 4, 15: 2}.get(major, 1)
    scenario = RESUME_SCENARIOS[0]
    with (
        prepare_scenario(pg_server, scenario, sets) as run,
        pg_server.connect() as sql,
        tempfile.TemporaryDirectory() as tmp,
    ):
        point = RestartPoint(run.end_lsn, ("refused",), False, 0)
        for options in sets:
            real = RealTarget(run, options, sql).attempt(point, PG_RECVLOGICAL)
            fake = FakeTarget(run, options, [], Path(tmp)).attempt(point, PG_RECVLOGICAL)
            assert real.error is not None and not real.received, options.name
            assert (fake.error, fake.received) == (real.error, ()), options.name


def test_the_real_side_is_deterministic_and_a_broken_fake_is_caught(pg_server: Server) -> None:
    """The harness itself: two restarts of real PostgreSQL at the same position agree,
    and a fake serving a recording that lost an Insert differs at that Insert."""
    scenario = next(s for s in SCENARIOS if s.name == "types")
    options = option_sets(pg_server.version)[0]
    with prepare_scenario(pg_server, scenario, [options]) as run, pg_server.connect() as sql:
        import tempfile
        from pathlib import Path

        real = RealTarget(run, options, sql)
        straight = real.straight()
        point = restart_points(straight)[0]
        first, second = real.attempt(point, PG_RECVLOGICAL), real.attempt(point, PSYCOPG2)
        assert first.error is None and first.received
        assert compare(point, PSYCOPG2, first, second) is None
        assert first.confirmed_flush == point.lsn
        recorded = SqlInterface().capture(run, options)
        inserts = [i for i, m in enumerate(recorded) if m.tag == "I"]
        broken = recorded[: inserts[-1]] + recorded[inserts[-1] + 1 :]
        assert all(isinstance(m, StreamMessage) for m in broken)
        with tempfile.TemporaryDirectory() as tmp:
            fake = FakeTarget(run, options, broken, Path(tmp))
            difference = compare(point, PG_RECVLOGICAL, first, fake.attempt(point, PG_RECVLOGICAL))
    assert difference is not None
    assert "'I' wal" in difference and "Insert(" in difference


def test_the_command_prints_a_line_per_cell_and_exits_by_the_result(
    pg_server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    status = resume.main(
        [
            "--versions",
            str(pg_server.version),
            "--dsn",
            f"{pg_server.version}={pg_server.dsn}",
            "--scenarios",
            "generated",
            "--option-sets",
            "v1",
        ]
    )
    out = capsys.readouterr().out
    assert f"PostgreSQL {pg_server.full_version}:" in out
    assert "generated" in out and "positions" in out and "tried" in out
    assert out.rstrip().splitlines()[-1].endswith("s")
    assert status == (0 if "✗" not in out else 1)
