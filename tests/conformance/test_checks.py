"""The matrix's checks on hand-made streams: each passes a good cell and CAN fail.

No server: the streams are encoded here, the server's tables written out by hand.
"""

from __future__ import annotations

import dataclasses
import math
from decimal import Decimal
from ipaddress import ip_interface, ip_network

import pytest

from codec import pgoutput as po
from codec.values import LSN, decode_text, encode_binary, type_by_name
from conformance.checks import (
    CHECKS,
    Captured,
    CheckContext,
    DeclaredTypes,
    RoundTrip,
    SameMessages,
    Values,
    accepted_forms,
    same_value,
    walsender_position_ok,
)
from conformance.replay import ReplayError, replay
from conformance.scenarios import OptionSet, Scenario
from conformance.subjects import Positions, ServerTable, Stream, StreamMessage

OID = 16384
INT4, TEXT = 23, 25
REL = po.Relation(
    OID,
    "public",
    "t",
    "d",
    (po.RelationColumn(1, "id", INT4, -1), po.RelationColumn(0, "v", TEXT, -1)),
)
SCENARIO = Scenario(
    name="unit",
    description="hand-made",
    publish=("t",),
    setup=(),
    steps=(),
    teardown=(),
    emits=frozenset("BCRIU"),
)
V1 = OptionSet("v1", 1)


def stream(*messages: po.PgOutputMessage, start: int = 0x1000) -> Stream:
    """The messages encoded, at positions 0x10 apart from ``start + 0x10``."""
    return tuple(
        StreamMessage(LSN(start + 0x10 * (i + 1)), po.encode(m)) for i, m in enumerate(messages)
    )


GOOD = stream(
    po.Begin(0x2000, 0, 700),
    REL,
    po.Insert(OID, ("1", "one")),
    po.Insert(OID, ("2", "two")),
    po.Update(OID, ("2", "deux")),
    po.Commit(0, 0x2000, 0x2010, 0),
)


def table(*rows: tuple[int, str | None]) -> ServerTable:
    return ServerTable(
        OID,
        "public.t",
        ("id", "v"),
        (INT4, TEXT),
        tuple((str(i), v) for i, v in rows),
        tuple((encode_binary(INT4, i), None if v is None else v.encode()) for i, v in rows),
    )


TABLES = {OID: table((1, "one"), (2, "deux"))}


def context(
    walsender: Stream | None = GOOD,
    *,
    sql: Stream = GOOD,
    tables: dict[int, ServerTable] | None = None,
    scenario: Scenario = SCENARIO,
    options: OptionSet = V1,
) -> CheckContext:
    streams = {"sql": sql}
    errors = {}
    if walsender is None:
        errors["walsender"] = "START_REPLICATION failed: boom"
    else:
        streams["walsender"] = walsender
    return CheckContext(
        major=16,
        scenario=scenario,
        options=options,
        reference="sql",
        streams=streams,
        errors=errors,
        positions={"sql": Positions.SAME, "walsender": Positions.WALSENDER},
        tables=TABLES if tables is None else tables,
    )


def results(ctx: CheckContext) -> dict[str, tuple[bool, str]]:
    return {check.name: (r.ok, r.detail) for check in CHECKS for r in [check.run(ctx)]}


def test_a_good_cell_passes_every_check() -> None:
    assert all(ok for ok, _ in results(context()).values()), results(context())


def test_a_dropped_message_fails_same_messages_and_values() -> None:
    """The walsender path lost the Update: the streams differ and the replayed row is stale."""
    dropped = GOOD[:4] + GOOD[5:]
    got = results(context(dropped))
    assert got["same-messages"][0] is False
    assert got["same-messages"][1].startswith("walsender: message 4:")
    assert got["values"][0] is False
    assert "v: stream 'two' != server 'deux'" in got["values"][1]
    assert got["roundtrip"][0] and got["capture"][0]


def test_a_changed_value_fails_same_messages_and_values() -> None:
    changed = (
        *GOOD[:2],
        StreamMessage(GOOD[2].lsn, po.encode(po.Insert(OID, ("1", "uno")))),
        *GOOD[3:],
    )
    got = results(context(changed))
    assert got["same-messages"] == (
        False,
        "walsender: message 2: 'I' Insert where sql has 'I' Insert (bytes differ from offset 19)",
    )
    assert got["values"] == (False, "walsender: public.t id=1 v: stream 'uno' != server 'one'")


def test_the_server_holding_other_values_fails_values_for_every_subject() -> None:
    ctx = context(tables={OID: table((1, "one"), (2, "two"))})
    result = Values().run(ctx)
    ok, detail = result.ok, result.detail
    assert not ok
    assert detail == "sql: public.t id=2 v: stream 'deux' != server 'two' (+1 more)"


def test_rows_missing_on_either_side_are_named() -> None:
    result = Values().run(context(tables={OID: table((1, "one"), (3, "three"))}))
    ok, detail = result.ok, result.detail
    assert not ok
    assert "server rows id=3 not streamed; streamed rows id=2 not on server" in detail


def test_binary_values_compare_with_the_servers_text_through_codec_values() -> None:
    binary = stream(
        po.Begin(0x2000, 0, 700),
        REL,
        po.Insert(OID, (encode_binary(INT4, 1), b"one")),
        po.Insert(OID, (encode_binary(INT4, 2), b"deux")),
        po.Commit(0, 0x2000, 0x2010, 0),
    )
    assert Values.compare(binary, TABLES) is None
    wrong = stream(
        po.Begin(0x2000, 0, 700),
        REL,
        po.Insert(OID, (encode_binary(INT4, 1), b"one")),
        po.Insert(OID, (encode_binary(INT4, 2), b"two")),
        po.Commit(0, 0x2000, 0x2010, 0),
    )
    assert Values.compare(wrong, TABLES) == "public.t id=2 v: stream 'two' != server 'deux'"


def test_a_missing_declared_type_fails_declared_types() -> None:
    without_update = GOOD[:4] + GOOD[5:]
    result = DeclaredTypes().run(context(without_update, sql=without_update))
    ok, detail = result.ok, result.detail
    assert not ok
    assert detail == "sql: declared message types U missing (saw BCIR) (+1 more)"


def test_a_scenario_that_produced_nothing_fails_declared_types() -> None:
    result = DeclaredTypes().run(context((), sql=()))
    ok, detail = result.ok, result.detail
    assert not ok
    assert detail.startswith("sql: no messages at all")


def test_two_phase_option_sets_accept_prepared_transaction_boundaries() -> None:
    two_phase = OptionSet("v3-stream-2pc", 3, streaming="on", two_phase=True)
    assert accepted_forms("B", two_phase) == {"B", "b"}
    assert accepted_forms("C", two_phase) == {"C", "K"}
    assert accepted_forms("C", V1) == {"C"}
    assert accepted_forms("I", two_phase) == {"I"}


def test_bytes_that_do_not_re_encode_identically_fail_roundtrip() -> None:
    padded = (*GOOD[:1], StreamMessage(GOOD[1].lsn, GOOD[1].payload + b"\0"), *GOOD[2:])
    result = RoundTrip().run(context(padded))
    ok, detail = result.ok, result.detail
    assert not ok
    assert detail.startswith("walsender: message 1 ('R' Relation):")


def test_a_failed_capture_fails_capture_and_every_check_needing_that_stream() -> None:
    got = results(context(None))
    assert got["capture"] == (False, "walsender: START_REPLICATION failed: boom")
    for name in ("roundtrip", "same-messages", "values", "declared-types"):
        assert got[name] == (False, "walsender: not captured")
    assert Captured().run(context()).ok


def test_walsender_positions_may_be_zero_only_where_pgoutput_did_not_write_last() -> None:
    """Relation and Type messages, and a Begin followed by Origin, come at 0/0 from a
    walsender (WalSndPrepareWrite with last_write = false); nothing else may."""
    zeroed = tuple(StreamMessage(LSN(0), m.payload) if m.tag == "R" else m for m in GOOD)
    assert SameMessages.compare(GOOD, zeroed, Positions.WALSENDER) is None
    assert SameMessages.compare(GOOD, zeroed, Positions.SAME) is not None
    begin_zero = (StreamMessage(LSN(0), GOOD[0].payload), *GOOD[1:])
    assert SameMessages.compare(GOOD, begin_zero, Positions.WALSENDER) == (
        "message 0 ('B' Begin) at 0/0, reference has it at 0/1010"
    )
    with_origin = stream(po.Begin(0x2000, 0, 700), po.Origin(0x1234, "up"), REL)
    assert walsender_position_ok(with_origin, 0, 0)
    assert not walsender_position_ok(with_origin, 1, 0)
    assert walsender_position_ok(with_origin, 2, 0)
    moved = (*GOOD[:2], StreamMessage(LSN(GOOD[2].lsn + 1), GOOD[2].payload), *GOOD[3:])
    assert SameMessages.compare(GOOD, moved, Positions.WALSENDER) is not None
    assert SameMessages.compare(GOOD, moved, Positions.NONE) is None


def test_same_value_is_exact() -> None:
    assert same_value(math.nan, math.nan)
    assert not same_value(0.0, -0.0)
    assert not same_value(Decimal("1.50"), Decimal("1.5"))
    assert same_value(Decimal("NaN"), Decimal("NaN"))
    assert same_value([1, None, [2.5]], [1, None, [2.5]])
    assert not same_value([1, 2], [1, 2, 3])
    assert not same_value(1, True)
    assert not same_value(1, 1.0)
    # inet/cidr decode to lazy subclasses: the same as the plain ipaddress values.
    inets = decode_text(type_by_name("inet").array_oid, "{10.0.0.1/24,::1}")
    assert same_value(inets, [ip_interface("10.0.0.1/24"), ip_interface("::1")])
    assert not same_value(inets, [ip_interface("10.0.0.1/25"), ip_interface("::1")])
    cidrs = decode_text(type_by_name("cidr").array_oid, "{10.0.0.0/24}")
    assert same_value(cidrs, [ip_network("10.0.0.0/24")])
    assert not same_value(cidrs, [ip_interface("10.0.0.0/24")])


# --- replay ---------------------------------------------------------------------------


def test_replay_applies_streamed_commits_and_drops_aborted_subtransactions() -> None:
    messages = stream(
        po.StreamStart(800, True),
        dataclasses.replace(REL, xid=800),
        po.Insert(OID, ("1", "top"), xid=800),
        po.Insert(OID, ("2", "sub"), xid=801),
        po.StreamStop(),
        po.StreamAbort(800, 801),
        po.StreamStart(900, True),
        po.Insert(OID, ("3", "aborted"), xid=900),
        po.StreamStop(),
        po.StreamAbort(900, 900),
        po.StreamCommit(800, 0, 0x3000, 0x3010, 0),
    )
    tables = replay(m.payload for m in messages)
    assert [row["id"][1] for row in tables[OID].rows] == ["1"]


def test_replay_applies_commit_prepared_and_drops_rollback_prepared() -> None:
    messages = stream(
        po.BeginPrepare(0x2000, 0x2010, 0, 700, "a"),
        REL,
        po.Insert(OID, ("1", "kept")),
        po.Prepare(0, 0x2000, 0x2010, 0, 700, "a"),
        po.BeginPrepare(0x2100, 0x2110, 0, 701, "b"),
        po.Insert(OID, ("2", "dropped")),
        po.Prepare(0, 0x2100, 0x2110, 0, 701, "b"),
        po.RollbackPrepared(0, 0x2110, 0x2200, 0, 0, 701, "b"),
        po.CommitPrepared(0, 0x2300, 0x2310, 0, 700, "a"),
    )
    tables = replay(m.payload for m in messages)
    assert [row["v"][1] for row in tables[OID].rows] == ["kept"]


def test_replay_keeps_unchanged_toast_values_and_finds_rows_by_key_tuple() -> None:
    messages = stream(
        po.Begin(0x2000, 0, 700),
        REL,
        po.Insert(OID, ("1", "big value")),
        po.Update(OID, ("1", po.UNCHANGED_TOAST)),
        po.Update(OID, ("10", po.UNCHANGED_TOAST), key_tuple=("1", None)),
        po.Commit(0, 0x2000, 0x2010, 0),
    )
    tables = replay(m.payload for m in messages)
    assert tables[OID].rows == [{"id": (INT4, "10"), "v": (TEXT, "big value")}]


@pytest.mark.parametrize(
    ("messages", "reason"),
    [
        ((REL, po.Insert(OID, ("1", "x"))), "Insert outside a transaction"),
        (
            (po.Begin(1, 0, 7), REL, po.Delete(OID, key_tuple=("9", None)), po.Commit(0, 1, 2, 0)),
            "Delete on t: no row matches {'id': '9'}",
        ),
        ((po.CommitPrepared(0, 1, 2, 0, 7, "nope"),), "Commit Prepared of unknown transaction"),
    ],
)
def test_replay_refuses_streams_it_cannot_apply(
    messages: tuple[po.PgOutputMessage, ...], reason: str
) -> None:
    with pytest.raises(ReplayError, match=reason.replace("{", r"\{").replace("}", r"\}")):
        replay(m.payload for m in stream(*messages))


def test_a_walsender_stream_cut_inside_a_transaction_loses_that_transaction() -> None:
    """Stopping at an LSN can leave a lone Begin (PostgreSQL 14 sends empty transactions);
    the SQL interface's upto_lsn leaves that transaction out, so the walsender subject does."""
    from conformance.subjects import whole_transactions

    cut = (*GOOD, *stream(po.Begin(0x3000, 0, 701)))
    assert whole_transactions(cut) == GOOD
    assert whole_transactions(GOOD) == GOOD
    segment = stream(po.StreamStart(800, True), po.Insert(OID, ("1", "x"), xid=800))
    assert whole_transactions((*GOOD, *segment)) == GOOD


# --- the Spark side -------------------------------------------------------------------


def test_a_reference_stream_that_lost_an_update_fails_spark_values() -> None:
    """The Spark side materialises the reference's stream: if it lost the Update, the
    Parquet table holds the stale value and spark-values names the row and column."""
    from conformance.checks import SparkTables

    assert SparkTables().run(context()).ok
    dropped = GOOD[:4] + GOOD[5:]
    result = SparkTables().run(context(sql=dropped))
    assert not result.ok
    assert result.detail == "sql: spark: public.t id=2 v: stream 'two' != server 'deux'"


def test_spark_values_reports_missing_rows_and_unpublished_tables() -> None:
    from conformance.checks import SparkTables

    without_second = GOOD[:3] + GOOD[5:]
    assert SparkTables.compare(without_second, TABLES) == (
        "spark: public.t: server rows id=2 not streamed"
    )
    assert SparkTables.compare(GOOD, {}) == "spark: changes for public.t, which is not published"


def test_spark_values_requires_the_documented_refusal_for_excluded_scenarios() -> None:
    """An excluded scenario (ddl) passes only because the Spark side refuses it with
    SchemaChangeError; a stream it applies fine fails the cell."""
    from conformance.checks import SparkTables

    ddl = dataclasses.replace(SCENARIO, name="ddl")
    applied = SparkTables().run(context(scenario=ddl))
    assert not applied.ok
    assert applied.detail == "sql: spark: expected SchemaChangeError, the stream was applied"
    wider = dataclasses.replace(REL, columns=(*REL.columns, po.RelationColumn(0, "w", INT4, -1)))
    changed = (*GOOD[:-1], *stream(wider, po.Insert(OID, ("3", "x", "1")), start=0x1100), GOOD[-1])
    refused = SparkTables().run(context(sql=changed, scenario=ddl))
    assert refused.ok and refused.detail.startswith("excluded: ")
    assert not SparkTables().run(context(sql=changed)).ok
