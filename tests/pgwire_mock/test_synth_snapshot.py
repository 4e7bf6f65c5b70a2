"""The synthetic generator's initial snapshot: ``initial_rows`` per table.

A spec table with ``initial_rows: N`` starts with N rows. The recording (shard 0) holds
them after its meta line as ``record --snapshot`` writes a snapshot, the stream updates
and deletes them like any other row, and the expected state starts from them.
"""

from __future__ import annotations

import io
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_synth import FULL_SPEC, OUTPUTS, Applier

from codec.pgoutput import UNCHANGED_TOAST, Decoder, Update
from codec.values import LSN, decode_text
from pgwire_mock.cli import main
from pgwire_mock.pytest_plugin import start_walsender
from pgwire_mock.streamfile import read_meta, read_snapshot, read_stream
from pgwire_mock.synth import Shard, SpecError, StateDelta, Synth, parse_spec
from pgwire_mock.synth.output import snapshot_lines, write_recording
from synth_specs import small_specs

INITIAL = {"public.accounts": 700, "audit.events": 45}


def _spec_text(initial: dict[str, int] = INITIAL, **extra: object) -> str:
    data = yaml.safe_load(FULL_SPEC)
    for table in data["tables"]:
        if table["name"] in initial:
            table["initial_rows"] = initial[table["name"]]
    data.update(extra)
    return yaml.safe_dump(data)


def _recording(synth: Synth, shard: Shard | None = None) -> bytes:
    out = io.StringIO()
    first = shard is None or shard.index == 0
    lines = snapshot_lines(synth) if first and synth.spec.snapshot else ()
    write_recording(out, synth.meta(shard), synth.stream(shard), snapshot=lines)
    return out.getvalue().encode()


def _applied_with_snapshot(data: bytes) -> dict[str, dict[object, tuple[object, ...]]]:
    """The snapshot's rows as the tables' initial state, then the stream applied by the
    checking applier (inserts of new keys only, updates and deletes of existing ones)."""
    meta = read_meta(io.BytesIO(data))
    assert meta is not None
    tables = {f"{t['schema']}.{t['name']}": t["columns"] for t in meta["snapshot"]["tables"]}
    applier = Applier()
    for row in read_snapshot(io.BytesIO(data)):
        columns = tables[row.table]
        values = tuple(
            None if v is None else decode_text(c["type_oid"], v.decode())
            for c, v in zip(columns, row.values, strict=True)
        )
        key = next(i for i, c in enumerate(columns) if c["key"])
        assert values[key] not in applier.tables[row.table]
        applier.tables[row.table][values[key]] = values
    for entry in read_stream(io.BytesIO(data)):
        applier.feed(entry.payload)
    return dict(applier.tables)


@pytest.mark.parametrize("output", OUTPUTS, ids=lambda o: f"v{o.proto_version}-{o.streaming}")
def test_snapshot_then_stream_is_valid_and_gives_the_expected_state(output: Any) -> None:
    """For every output option set: the snapshot's rows, then the stream applied with
    checks, give exactly the expected state; the stream updates and deletes snapshot
    rows, and a key update takes one."""
    synth = Synth(parse_spec(_spec_text()), 11, 900, output=output)
    data = _recording(synth)
    applied = _applied_with_snapshot(data)
    expected = synth.expected_state()
    for name, rows in expected.tables.items():
        assert applied.get(name, {}) == dict(rows), name
    # The snapshot's ids are hot_keys .. hot_keys + initial_rows - 1.
    accounts = synth.tables[0]
    snapshot_ids = set(range(accounts.hot, accounts.hot + INITIAL["public.accounts"]))
    initial = synth.initial_delta().tables["public.accounts"].rows
    assert set(initial) == snapshot_ids
    final = expected.tables["public.accounts"]
    kept = [k for k in snapshot_ids if k in final]
    assert len(kept) < len(snapshot_ids)  # deleted (or key-updated away)
    assert any(final[k] != initial[k] for k in kept)  # updated


def test_snapshot_lines_are_what_json_dumps_writes_and_streamfile_reads() -> None:
    """Each snapshot line is byte for byte json.dumps({"table", "copy"}) as record writes
    it; streamfile reads every row back; the meta describes each table as record does."""
    synth = Synth(parse_spec(_spec_text()), 3, 200)
    data = _recording(synth)
    lines = data.decode().splitlines()
    meta = json.loads(lines[0])["meta"]
    snapshot = meta["snapshot"]
    assert snapshot["consistent_point"] == str(LSN(synth.spec.start_lsn))
    described = {f"{t['schema']}.{t['name']}": t for t in snapshot["tables"]}
    assert list(described) == ["public.accounts", "audit.events"]
    accounts = described["public.accounts"]
    assert accounts["oid"] == synth.tables[0].spec.oid and accounts["relreplident"] == "d"
    assert [(c["attnum"], c["name"], c["type_oid"], c["typmod"], c["key"]) for c in
            accounts["columns"][:3]] == [(1, "id", 20, -1, True), (2, "owner", 25, -1, False),
                                         (3, "balance", 1700, -1, False)]  # fmt: skip
    rows = lines[1 : 1 + sum(INITIAL.values())]
    for line in rows:
        record = json.loads(line)
        assert set(record) == {"table", "copy"}
        assert json.dumps(record) == line
    assert '"lsn"' in lines[1 + len(rows)]
    read = read_snapshot(io.BytesIO(data))
    assert [r.table for r in read] == ["public.accounts"] * 700 + ["audit.events"] * 45
    # Row by row, the values of the expected state's snapshot, in COPY's text form.
    initial = synth.initial_delta()
    rows = initial.tables["public.accounts"].rows.items()
    for row, (kid, values) in zip(read[:700], rows, strict=True):
        decoded = [
            None if v is None else decode_text(c["type_oid"], v.decode())
            for c, v in zip(accounts["columns"], row.values, strict=True)
        ]
        assert decoded == list(values) and decoded[0] == kid


def test_a_toasted_value_of_the_snapshot_is_sent_unchanged_by_updates() -> None:
    """A snapshot row's TOAST-sized value is in the snapshot in full; the stream's
    updates of that row leave it unchanged (``u``), as PostgreSQL's do."""
    synth = Synth(parse_spec(_spec_text()), 11, 900)
    data = _recording(synth)
    big = {
        int(r.values[0] or b"")
        for r in read_snapshot(io.BytesIO(data))
        if r.table == "public.accounts" and len(r.values[5] or b"") == 2500
    }
    assert big  # toast_ratio 0.3 of 700 rows
    decoder = Decoder()
    unchanged = {
        int(m.new_tuple[0])
        for e in read_stream(io.BytesIO(data))
        if isinstance(m := decoder.decode(e.payload), Update)
        and m.relation_oid == synth.tables[0].spec.oid
        and m.new_tuple[5] is UNCHANGED_TOAST
    }
    assert unchanged & big


def test_without_initial_rows_nothing_changes() -> None:
    """A spec without initial_rows writes no snapshot (its meta has none, no row lines),
    and its stream is the one with initial_rows: 0 given explicitly."""
    plain = Synth(parse_spec(FULL_SPEC), 5, 300)
    zero = Synth(parse_spec(_spec_text({"public.accounts": 0})), 5, 300)
    assert "snapshot" not in plain.meta()
    data = _recording(plain)
    assert read_snapshot(io.BytesIO(data)) == []
    assert list(plain.stream()) == list(zero.stream())


def test_an_empty_snapshot_can_be_asked_for() -> None:
    """snapshot: true without initial rows describes the tables with no rows (for
    subscribers that copy the tables first)."""
    synth = Synth(parse_spec(_spec_text({}, snapshot=True)), 5, 300)
    data = _recording(synth)
    meta = read_meta(io.BytesIO(data))
    assert meta is not None and len(meta["snapshot"]["tables"]) == 2
    assert read_snapshot(io.BytesIO(data)) == []


@pytest.mark.parametrize("n", [2, 3, 5])
def test_only_shard_zero_has_the_snapshot_and_shards_still_merge(n: int) -> None:
    """Shard 0's recording holds the snapshot (meta and rows), the others none;
    concatenated, the shards are the single recording's rows and stream; the shards'
    deltas merge to the whole expected state (shard 0's starts from the snapshot)."""
    synth = Synth(parse_spec(_spec_text()), 7, 500)
    whole = _recording(synth)
    parts = [_recording(synth, Shard(k, n)) for k in range(n)]
    for k, part in enumerate(parts):
        meta = read_meta(io.BytesIO(part))
        assert meta is not None and ("snapshot" in meta) == (k == 0)
        assert (read_snapshot(io.BytesIO(part)) != []) == (k == 0)
    joined = b"".join(parts)
    assert read_snapshot(io.BytesIO(joined)) == read_snapshot(io.BytesIO(whole))
    assert list(read_stream(io.BytesIO(joined))) == list(read_stream(io.BytesIO(whole)))
    merged = StateDelta.merge(synth.expected_delta(Shard(k, n)) for k in range(n))
    assert synth.expected_state(merged).tables == synth.expected_state().tables


def test_any_range_of_snapshot_rows_is_the_slice_of_all_of_them() -> None:
    """initial_rows(table, start, stop) gives the rows all of them give there, across
    the generator's 4096-row chunks."""
    synth = Synth(parse_spec(_spec_text({"public.accounts": 9000})), 1, 50)
    whole = [v for rows in synth.initial_rows(0) for v in synth.initial_values(rows)]
    assert len(whole) == 9000
    for start, stop in [(0, 1), (4095, 4097), (100, 8999), (8000, 20000), (5, 5)]:
        part = [
            v for rows in synth.initial_rows(0, start, stop) for v in synth.initial_values(rows)
        ]
        assert part == whole[start:stop]
        starts = [rows.start for rows in synth.initial_rows(0, start, stop)]
        assert starts == sorted(starts) and (not starts or starts[0] == start)


def test_cli_writes_the_snapshot_and_the_expected_state_with_it(tmp_path: Path) -> None:
    """``pgwire-mock synth`` writes the snapshot after the meta line, and --expected
    holds the snapshot's surviving rows; with --shard, shard 0's delta holds them."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(_spec_text())
    out, expected = tmp_path / "all.jsonl", tmp_path / "expected.jsonl"
    common = ["synth", "--spec", str(spec), "--seed", "4", "--changes", "300"]
    assert main([*common, "--out", str(out), "--expected", str(expected)]) == 0
    synth = Synth(parse_spec(spec.read_text()), 4, 300)
    assert out.read_bytes() == _recording(synth)
    written = [json.loads(line) for line in expected.read_text().splitlines()]
    assert written == list(synth.expected_state().records())
    last = str(synth.tables[0].hot + INITIAL["public.accounts"] - 1)  # deletes take the first
    ids = {r["row"]["id"] for r in written if r["table"] == "public.accounts"}
    assert last in ids

    delta = tmp_path / "delta0.jsonl"
    args = ["--out", str(tmp_path / "s0.jsonl"), "--shard", "0/3", "--expected", str(delta)]
    assert main([*common, *args]) == 0
    rows = [json.loads(line) for line in delta.read_text().splitlines()[1:]]
    shard_ids = {r["row"]["id"] for r in rows if r.get("table") == "public.accounts" and "row" in r}
    assert last in shard_ids


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"initial_rows": -1},
            "spec.yaml: tables[0].initial_rows: must be in [0, 1.09951e+12], got -1",
        ),
        (
            {"initial_rows": 3, "snapshot": False},
            "spec.yaml: tables[0].initial_rows: initial rows are the recording's snapshot: "
            "not with snapshot: false",
        ),
    ],
)
def test_bad_initial_rows_are_one_line_errors(change: dict[str, Any], message: str) -> None:
    data = yaml.safe_load(FULL_SPEC)
    data["tables"][0]["initial_rows"] = change["initial_rows"]
    if "snapshot" in change:
        data["snapshot"] = change["snapshot"]
    with pytest.raises(SpecError) as info:
        parse_spec(yaml.safe_dump(data), source="spec.yaml")
    assert str(info.value) == message


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=small_specs(),
    initial=st.lists(st.integers(0, 60), min_size=3, max_size=3),
    seed=st.integers(0, 2**32),
    changes=st.integers(0, 120),
)
def test_random_specs_with_snapshots(
    data: dict[str, Any], initial: list[int], seed: int, changes: int
) -> None:
    """Random small specs with random initial rows: the snapshot, then the stream, is
    valid and gives the expected state (also with no change at all)."""
    for table, rows in zip(data["tables"], initial, strict=False):
        table["initial_rows"] = rows
    data["snapshot"] = True
    synth = Synth(parse_spec(yaml.safe_dump(data)), seed, changes)
    applied = _applied_with_snapshot(_recording(synth))
    for name, rows in synth.expected_state().tables.items():
        assert applied.get(name, {}) == dict(rows), name


# --- served by the fake to a real subscriber -------------------------------------------------

SUBSCRIBED = """
publication: {publication}
server_version: {major}
block_size: 100
pool_size: 64
tables:
  - name: public.{prefix}_accounts
    hot_keys: 4
    initial_rows: 150
    columns:
      - {{name: id, type: int8, key: true}}
      - {{name: owner, type: text, null_ratio: 0.2}}
      - {{name: balance, type: numeric}}
      - {{name: tags, type: "text[]"}}
      - {{name: doc, type: jsonb}}
      - {{name: note, type: text, toast_ratio: 0.3, toast_size: 3000}}
      - {{name: updated, type: timestamptz}}
  - name: public.{prefix}_events
    initial_rows: 40
    truncate_every: 400
    columns:
      - {{name: id, type: uuid, key: true}}
      - {{name: scores, type: "int4[]"}}
      - {{name: at, type: timestamp}}
      - {{name: blob, type: bytea}}
operations: {{insert: 0.45, update: 0.3, key_update: 0.1, delete: 0.15}}
"""


def _subscribed_tables(
    cluster: Any, port: int, publication: str, tables: dict[str, str]
) -> tuple[dict[str, list[list[str | None]]], list[str]]:
    """Subscribe with copy_data=true to the fake on ``port``; every table's rows (as the
    output functions print them) once every table is ready and nothing changes."""
    name = f"s_{uuid.uuid4().hex[:10]}"
    conninfo = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    with cluster.connect() as conn:
        for table, columns in tables.items():
            conn.execute(f"CREATE TABLE {table} ({columns})")
        conn.execute(
            f"CREATE SUBSCRIPTION {name} CONNECTION '{conninfo}' PUBLICATION {publication} "
            "WITH (copy_data = true)"
        )
        try:
            states_query = (
                "SELECT srsubstate FROM pg_subscription_rel r JOIN pg_subscription s "
                "ON s.oid = r.srsubid WHERE s.subname = %s"
            )
            deadline = time.monotonic() + 90
            previous: object = None
            while True:
                states = sorted(str(r[0]) for r in conn.execute(states_query, (name,)))
                got = {table: _texts(conn, table) for table in tables}
                if (states == ["r"] * len(tables) and got == previous) or (
                    time.monotonic() > deadline
                ):
                    return got, states
                previous = got
                time.sleep(0.5)
        finally:
            conn.execute(f"ALTER SUBSCRIPTION {name} DISABLE")
            conn.execute(f"ALTER SUBSCRIPTION {name} SET (slot_name = NONE)")
            conn.execute(f"DROP SUBSCRIPTION {name}")
            for table in tables:
                conn.execute(f"DROP TABLE {table}")


def _texts(conn: Any, table: str) -> list[list[str | None]]:
    columns = [d.name for d in conn.execute(f"SELECT * FROM {table} LIMIT 0").description]
    shown = ", ".join(
        f"CASE WHEN {c} IS NULL THEN NULL ELSE format('%s', {c}) END" for c in columns
    )
    return sorted(
        (list(r) for r in conn.execute(f"SELECT {shown} FROM {table}").fetchall()),
        key=lambda r: str(r[0]),
    )


def test_a_real_subscriber_copies_the_snapshot_of_a_synth_recording(
    pg_server: Any, subscriber_cluster: Any, tmp_path: Path
) -> None:
    """``serve --script`` of a synth recording with initial rows: a real PostgreSQL
    subscriber (copy_data=true; new slots at the recording's start, where COPY gives
    the snapshot's rows and the stream the rest, or at its end, where COPY gives
    everything) ends with exactly the tables of ``--expected``, value for value."""
    prefix = "syn"
    publication = "synth_pub"
    spec = tmp_path / "spec.yaml"
    text = SUBSCRIBED.format(publication=publication, major=pg_server.version, prefix=prefix)
    spec.write_text(text)
    out, expected = tmp_path / "stream.jsonl", tmp_path / "expected.jsonl"
    args = ["synth", "--spec", str(spec), "--seed", "9", "--changes", "600"]
    assert main([*args, "--out", str(out), "--expected", str(expected)]) == 0
    synth = Synth(parse_spec(text), 9, 600)
    sql_types = {
        "int8": "int8", "text": "text", "numeric": "numeric", "_text": "text[]",
        "jsonb": "jsonb", "timestamptz": "timestamptz", "uuid": "uuid", "_int4": "int4[]",
        "timestamp": "timestamp", "bytea": "bytea",
    }  # fmt: skip
    tables = {
        t.name: ", ".join(
            f"{c.name} {sql_types[c.type.name]}{' PRIMARY KEY' if c.key else ''}"
            for c in t.spec.columns
        )
        for t in synth.tables
    }
    want: dict[str, list[list[object]]] = {t.name: [] for t in synth.tables}
    for line in expected.read_text().splitlines():
        record = json.loads(line)
        want[record["table"]].append(list(record["row"].values()))
    # The accounts' snapshot rows that survive reach the subscriber through COPY alone.
    accounts = synth.tables[0]
    first = accounts.hot + 149
    assert any(row[0] == str(first) for row in want[accounts.name])

    def decoded(name: str, rows: list[list[Any]]) -> list[list[object]]:
        oids = [c.type.oid for c in next(t for t in synth.tables if t.name == name).spec.columns]
        out = [
            [None if v is None else decode_text(o, v) for o, v in zip(oids, row, strict=True)]
            for row in rows
        ]
        return sorted(out, key=lambda r: str(r[0]))

    for new_slots in ("stream_start", "end_of_wal"):
        server = start_walsender(out, databases=["postgres"], new_slots=new_slots)
        try:
            got, states = _subscribed_tables(subscriber_cluster, server.port, publication, tables)
        finally:
            server.stop()
        assert states == ["r", "r"], new_slots
        for name in tables:
            assert decoded(name, got[name]) == decoded(name, want[name]), (new_slots, name)
