"""What a walsender streams of a transaction it decodes after the fact, when a part of
it was rolled back or a catalog commit came after its PREPARE (compared with real 14-18
in tests/conformance/test_live_rolled_back_savepoints_postgres.py and
test_live_prepared_catalog_postgres.py)."""

from __future__ import annotations

from codec.pgoutput import Decoder, StreamAbort
from pgwire_mock.script import (
    Script,
    Send,
    StreamOptions,
    column,
    encode_stream,
    insert,
    rollback_to_savepoint,
    savepoint,
)

A, B = "public.a", "public.b"
STREAMING = StreamOptions(proto_version=2, streaming="on", publication_names=("pub",))
TWO_PHASE = StreamOptions(
    proto_version=3, streaming="on", two_phase=True, publication_names=("pub",)
)


def script() -> Script:
    columns = [column("id", "int4", key=True), column("v", "text")]
    return (
        Script(pg_version=16, logical_decoding_work_mem=64)
        .table(A, columns=columns)
        .table(B, columns=columns)
        .publication("pub", tables=[A])
        .slot("s")
    )


def rows(first: int, count: int) -> list:  # type: ignore[type-arg]
    return [insert(A, id=first + i, v="row " + "x" * 40) for i in range(count)]


def shape(s: Script, options: StreamOptions = STREAMING) -> str:
    """The messages by name, a run of equal names as one with its length."""
    decoder = Decoder()
    out: list[list[object]] = []
    for event in encode_stream(s, options):
        if isinstance(event, Send):
            name = type(decoder.decode(event.payload)).__name__
            if out and out[-1][0] == name:
                out[-1][1] = int(str(out[-1][1])) + 1
            else:
                out.append([name, 1])
    return " ".join(str(n) if c == 1 else f"{n}x{c}" for n, c in out)


def test_a_rolled_back_savepoint_ends_the_block_at_its_first_lookup() -> None:
    s = script().transaction(
        [savepoint("p"), *rows(1, 600), rollback_to_savepoint("p"), *rows(1000, 5)]
    )
    # The cut: an empty block, the Stream Abort of the savepoint, then the later rows.
    assert shape(s) == (
        "StreamStart StreamStop StreamAbort StreamStart Relation Insertx5 StreamStop StreamCommit"
    )


def test_a_table_looked_up_before_the_savepoint_streams_the_rolled_back_rows() -> None:
    s = script().transaction(
        [*rows(1, 5), savepoint("p"), *rows(10, 600), rollback_to_savepoint("p")]
    )
    streamed = shape(s)
    assert streamed.startswith("StreamStart Relation Insertx"), streamed
    assert streamed.endswith("StreamStop StreamAbort StreamCommit"), streamed
    decoder = Decoder()
    aborts = [
        m
        for e in encode_stream(s, STREAMING)
        if isinstance(e, Send) and isinstance(m := decoder.decode(e.payload), StreamAbort)
    ]
    assert len(aborts) == 1 and aborts[0].xid != aborts[0].subxid


def catalog_commits_while_prepared(count: int) -> Script:
    s = script().transaction(rows(1, 354), prepare="g")
    for i in range(count):
        s.alter_table(B, add=[column(f"c{i}", "int4")])
    return s.commit_prepared("g")


def test_catalog_commits_after_a_prepare_count_without_two_phase() -> None:
    # Each queues a snapshot and invalidations in the prepared transaction: 7 push it
    # past the memory limit, and those after the block are a block of their own.
    assert shape(catalog_commits_while_prepared(12)) == (
        "StreamStart Relation Insertx354 StreamStop StreamStart StreamStop StreamCommit"
    )
    assert shape(catalog_commits_while_prepared(6)) == "Begin Relation Insertx354 Commit"


def test_a_two_phase_walsender_queues_nothing_after_the_prepare() -> None:
    assert shape(catalog_commits_while_prepared(12), TWO_PHASE) == (
        "BeginPrepare Relation Insertx354 Prepare CommitPrepared"
    )
