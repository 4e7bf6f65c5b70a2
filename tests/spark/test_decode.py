"""Golden pgoutput streams to Arrow change batches, without Spark."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from codec import replication, wire
from codec.pgoutput import Decoder, Insert, Relation
from pgwire_mock.spark import (
    ChangeDecoder,
    DecodeOptions,
    SchemaChangeError,
    decode_stream,
)
from pgwire_mock.spark.source import plan_partitions, read_partition
from spark.spark_helpers import TYPES_OPTIONS, entries, golden, same

MAJOR = 17
OPTION_SETS = ("v1", "v1-binary", "v2-stream", "v3-stream-2pc", "v4-parallel-2pc-bin")
META = ("_commit_lsn", "_position", "_xid", "_commit_time")


def _rows(scenario: str, option_set: str, options: DecodeOptions | None = None) -> dict:
    tables = decode_stream(entries(golden(MAJOR, scenario, option_set)), options)
    return {name: t.to_pylist() for name, t in tables.items()}


def _without(rows: list[dict], names: tuple[str, ...]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in names} for r in rows]


@pytest.mark.parametrize(
    "scenario",
    ["types", "replica_identity", "toast", "truncate", "streaming", "two_phase", "origin"],
)
def test_every_option_set_gives_the_same_rows(scenario: str) -> None:
    """Text or binary, streamed or not, two-phase or not: the committed rows are equal
    (and in the same order; only commit LSNs/times/xids/positions may differ)."""
    options = TYPES_OPTIONS if scenario == "types" else None
    reference = _rows(scenario, "v1", options)
    for option_set in OPTION_SETS[1:]:
        got = _rows(scenario, option_set, options)
        assert got.keys() == reference.keys()
        for name in reference:
            assert same(_without(got[name], META), _without(reference[name], META)), (
                option_set,
                name,
            )


def test_values_equal_the_codec_decoding() -> None:
    """Each inserted value is what column_type makes of the codec's value."""
    path = golden(MAJOR, "types", "v1-binary")
    decoder = ChangeDecoder(TYPES_OPTIONS)
    pg = Decoder()
    expected = []
    for lsn, payload in entries(path):
        message = pg.decode(payload)
        decoder.feed(lsn, payload)
        if isinstance(message, Relation):
            relation = message
        if isinstance(message, Insert):
            types = decoder.column_types("public.pgwm_types")
            row = {}
            for column, raw in zip(relation.columns, message.new_tuple, strict=True):
                row[column.name] = None if raw is None else types[column.name].convert(raw)[0]
            expected.append(row)
    got = [r for r in _rows("types", "v1-binary", TYPES_OPTIONS)["public.pgwm_types"]]
    inserts = [{k: r[k] for k in expected[0]} for r in got if r["_op"] == "insert"]
    assert same(inserts, expected)


def test_metadata_columns() -> None:
    rows = _rows("types", "v1", TYPES_OPTIONS)["public.pgwm_types"]
    assert [r["_op"] for r in rows] == ["insert"] * 6 + ["update"] * 3 + ["delete"]
    assert [r["_position"] for r in rows[:2]] == [0, 1]
    ordered = sorted(rows, key=lambda r: (r["_commit_lsn"], r["_position"]))
    assert ordered == rows
    assert rows[1]["_special"] == [
        ("c_date", "4713-01-01 BC"),
        ("c_timestamp", "-infinity"),
        ("c_timestamptz", "infinity"),
    ]
    assert rows[1]["c_timestamp"] is None
    assert rows[-1]["id"] == 2  # a delete's row is its old key


@pytest.mark.parametrize("option_set", OPTION_SETS)
def test_unchanged_toast_is_marked_not_null(option_set: str) -> None:
    """An unchanged TOASTed column is named in _toast_unchanged, not passed off as NULL."""
    rows = _rows("toast", option_set)
    update = next(r for r in rows["public.pgwm_toast"] if r["_op"] == "update" and r["id"] == 1)
    assert update["_toast_unchanged"] == ["big"]
    assert update["big"] is None
    short = next(r for r in rows["public.pgwm_toast"] if r["_op"] == "update" and r["id"] == 2)
    assert short["_toast_unchanged"] == []
    full = next(r for r in rows["public.pgwm_toast_full"] if r["_op"] == "update")
    assert full["_toast_unchanged"] == ["big"]
    assert full["_before"]["big"].startswith("TOAST?")


@pytest.mark.parametrize("option_set", OPTION_SETS)
def test_aborted_transactions_and_subtransactions_are_dropped(option_set: str) -> None:
    rows = _rows("streaming", option_set)["public.pgwm_stream"]
    ids = {r["id"] for r in rows if r["_op"] == "insert"}
    assert ids == {*range(1, 9), 50, 300}  # not the rolled-back subxact 100.. or xact 200..
    assert {r["id"] for r in rows if r["_op"] == "delete"} == {3}


@pytest.mark.parametrize("option_set", OPTION_SETS)
def test_prepared_transactions_count_once_committed(option_set: str) -> None:
    rows = _rows("two_phase", option_set)["public.pgwm_2pc"]
    assert {r["id"] for r in rows} == {1, *range(100, 108)}


def test_a_schema_change_names_the_table() -> None:
    with pytest.raises(SchemaChangeError, match=r"public\.pgwm_ddl"):
        decode_stream(entries(golden(MAJOR, "ddl", "v1")))


def test_other_tables_schema_changes_do_not_matter() -> None:
    tables = decode_stream(
        entries(golden(MAJOR, "ddl", "v1")), DecodeOptions(tables=frozenset({"public.nope"}))
    )
    assert tables == {}


def test_key_changes_carry_the_old_key() -> None:
    rows = _rows("replica_identity", "v1")
    change = [r for r in rows["public.pgwm_ri_default"] if r["_op"] == "update"][1]
    assert change["id"] == 10
    assert change["_before"]["id"] == 1


def as_wire(stream: list[tuple[int, bytes]]) -> bytes:
    """A stream as a walsender sends it (what `pgwire-mock record` writes): CopyData
    messages of XLogData, a keepalive after each."""
    out = bytearray()
    for lsn, payload in stream:
        xlog = replication.XLogData(wal_start=lsn, wal_end=lsn, send_time=0, data=payload)
        out += wire.encode(wire.CopyData(replication.encode(xlog)))
        keepalive = replication.PrimaryKeepalive(lsn, 0, False)
        out += wire.encode(wire.CopyData(replication.encode(keepalive)))
    return bytes(out)


@pytest.mark.parametrize("layout", ["json-lines", "wire"])
@pytest.mark.parametrize("partitions", [1, 2, 4])
@pytest.mark.parametrize("scenario", ["streaming", "two_phase", "types"])
def test_partitions_at_transaction_boundaries_give_the_same_rows(
    scenario: str, partitions: int, layout: str, tmp_path: Path
) -> None:
    """Cutting a file (at byte offsets, each piece read from its own offset) and decoding
    each piece with the Relations before it preloaded."""
    table = {"streaming": "public.pgwm_stream", "two_phase": "public.pgwm_2pc"}.get(
        scenario, "public.pgwm_types"
    )
    options = DecodeOptions(tables=frozenset({table}), array_dims={"c_int4_2d": 2})
    path = golden(MAJOR, scenario, "v4-parallel-2pc-bin")
    whole = decode_stream(entries(path), options)[table].to_pylist()
    if layout == "wire":
        path = tmp_path / "stream.bin"
        path.write_bytes(as_wire(entries(golden(MAJOR, scenario, "v4-parallel-2pc-bin"))))
    plans, _ = plan_partitions(str(path), table, partitions)
    assert plans[0].start == 0 and plans[-1].stop == path.stat().st_size
    assert all(a.stop == b.start for a, b in itertools.pairwise(plans))
    pieces = [b for plan in plans for b in read_partition(plan, options)]
    rows = [r for b in pieces for r in b.to_pylist()]
    assert same(rows, whole)
    if scenario == "types" and partitions > 1:
        assert len(plans) > 1
