"""A recording's snapshot read as the tables' initial state (``_op = "snapshot"``), and
``apply_changes`` building the final tables from snapshot + changes.

The recordings here come from the synthetic generator (``initial_rows``), which writes
its snapshot in ``record --snapshot``'s format; tests/spark/test_snapshot_postgres.py
reads one recorded from a real server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import yaml
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.datasource import InputPartition

from codec.pgoutput import Relation, RelationColumn
from codec.values import LSN
from conformance.spark_check import materialised_synthetic_rows
from pgwire_mock.cli import main
from pgwire_mock.spark import (
    DecodeOptions,
    DeltaTarget,
    ParquetTarget,
    PgOutputDataSource,
    SchemaChangeError,
    apply_changes,
    decode_stream,
    read_parquet_target,
    table_schema,
)
from pgwire_mock.spark.snapshot import SnapshotPartition
from pgwire_mock.spark.source import _scan, _scan_json_fast, _scan_json_lines
from pgwire_mock.spark.synthetic import SynthSnapshotPartition
from pgwire_mock.streamfile import StreamFileError
from pgwire_mock.synth import Synth, parse_spec
from spark.spark_helpers import entries, golden, same

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "synth-spec.yaml"
SEED, CHANGES = 5, 5000
INITIAL = {"public.accounts": 2500, "audit.events": 300}
TABLES = tuple(INITIAL)


def _spec_text() -> str:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["block_size"] = 250
    for table in data["tables"]:
        table["initial_rows"] = INITIAL[table["name"]]
    # audit.events is truncated after 3,000 changes: its snapshot rows are gone then.
    data["tables"][1]["truncate_every"] = 3000
    return yaml.safe_dump(data)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path]]:
    """(spec, recording, --expected file), written by ``pgwire-mock synth``."""
    root = tmp_path_factory.mktemp("snapshot")
    spec, out, expected = root / "spec.yaml", root / "stream.jsonl", root / "expected.jsonl"
    spec.write_text(_spec_text())
    args = ["synth", "--spec", str(spec), "--seed", str(SEED), "--changes", str(CHANGES)]
    assert main([*args, "--out", str(out), "--expected", str(expected)]) == 0
    yield spec, out, expected


def _synth(spec: Path) -> Synth:
    return Synth(parse_spec(spec.read_text()), SEED, CHANGES)


def _read(options: dict[str, str]) -> tuple[list[InputPartition], pa.Table]:
    """What ``spark.read.format("pgoutput")`` plans and reads, without a JVM: the data
    source's partitions, read one after the other as executors would."""
    source = PgOutputDataSource(options)
    source.schema()
    reader = source.reader(None)  # type: ignore[arg-type]
    plans = list(reader.partitions())
    batches = [batch for plan in plans for batch in reader.read(plan)]
    return plans, pa.Table.from_batches(batches, source._arrow)


def _snapshot_rows(table: pa.Table) -> pa.Table:
    rows = table.filter(pc.equal(table.column("_op"), "snapshot"))
    return rows.take(pc.sort_indices(rows, [("_position", "ascending")]))


def _expected_file(path: Path, table: str) -> dict[str, dict[str, Any]]:
    """Key text -> row, from ``--expected``."""
    rows = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record["table"] == table:
            rows[str(record["row"]["id"])] = record["row"]
    return rows


def _materialised(state: pa.Table, synth: Synth, table: str) -> dict[str, dict[str, Any]]:
    return materialised_synthetic_rows(state, synth.expected_state(), table)


# --------------------------------------------------------------------------- reading


@pytest.mark.parametrize("table", TABLES)
def test_snapshot_rows_come_first_and_read_alike_in_any_partitions(
    synthetic: tuple[Path, Path, Path], table: str
) -> None:
    """A recording's snapshot rows have _op snapshot, the consistent point as commit
    LSN, xid 0, positions 0..n-1 in file order, no TOAST or _before; they are planned
    as their own partitions (at most ``partitions``, before the stream's) and read the
    same rows however many there are."""
    spec, path, _ = synthetic
    synth = _synth(spec)
    results = []
    for partitions in (1, 2, 4, 7):
        options = {"path": str(path), "table": table, "partitions": str(partitions)}
        plans, rows = _read(options)
        kinds = [isinstance(p, SnapshotPartition) for p in plans]
        assert kinds == sorted(kinds, reverse=True)  # the snapshot's first
        assert 1 <= sum(kinds) <= partitions
        results.append(rows)
    snapshot = _snapshot_rows(results[0])
    n = INITIAL[table]
    assert snapshot.column("_position").to_pylist() == list(range(n))
    assert set(snapshot.column("_commit_lsn").to_pylist()) == {synth.spec.start_lsn}
    assert set(snapshot.column("_xid").to_pylist()) == {0}
    assert set(map(str, snapshot.column("_commit_time").to_pylist())) == {
        "2000-01-01 00:00:00+00:00"
    }
    assert snapshot.column("_before").null_count == n
    assert set(map(len, snapshot.column("_toast_unchanged").to_pylist())) == {0}
    # The snapshot's first row is the generator's first: key id hot_keys.
    generated = next(t for t in synth.tables if t.name == table)
    assert str(snapshot.column("id")[0].as_py()) == generated.key.text(generated.hot)
    ordered = [
        r.take(pc.sort_indices(r, [("_op", "ascending"), ("_commit_lsn", "ascending"),
                                   ("_position", "ascending")])).to_pylist()
        for r in results
    ]  # fmt: skip
    assert all(same(o, ordered[0]) for o in ordered[1:])
    # The changes are the ones decoding the stream alone gives.
    changes = results[0].filter(pc.not_equal(results[0].column("_op"), "snapshot"))
    alone = decode_stream(entries(path), DecodeOptions(tables=frozenset({table})))[table]
    assert changes.num_rows == alone.num_rows


@pytest.mark.parametrize("table", TABLES)
def test_a_synth_spec_reads_the_snapshot_rows_its_recording_has(
    synthetic: tuple[Path, Path, Path], table: str
) -> None:
    """Reading the spec itself (synth_spec, generated on the executors) gives the
    recording's snapshot rows, value for value, in its own snapshot partitions."""
    spec, path, _ = synthetic
    file_rows = _snapshot_rows(_read({"path": str(path), "table": table})[1])
    options = {"synth_spec": str(spec), "synth_seed": str(SEED), "synth_changes": str(CHANGES)}
    for partitions in (1, 3):
        plans, rows = _read({**options, "table": table, "partitions": str(partitions)})
        assert sum(isinstance(p, SynthSnapshotPartition) for p in plans) == partitions
        assert same(_snapshot_rows(rows).to_pylist(), file_rows.to_pylist())


def test_other_layouts_blank_lines_and_interleaved_tables_read_the_same(
    synthetic: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """Snapshot lines in another JSON layout (found with json.loads), blank lines and
    tables interleaved line by line give the same rows, positions included."""
    _, path, _ = synthetic
    lines = path.read_text().splitlines(keepends=True)
    head = [lines[0]]
    accounts = [x for x in lines if x.startswith('{"table": "public.accounts"')]
    events = [x for x in lines if x.startswith('{"table": "audit.events"')]
    stream = lines[1 + len(accounts) + len(events) :]
    mixed: list[str] = []
    for i, line in enumerate(accounts):
        written = line
        if i % 7 == 0:
            record = json.loads(line)
            swapped = {"copy": record["copy"], "table": record["table"]}
            written = json.dumps(swapped, separators=(",", ":")) + "\n"
        mixed.append(written)
        if i % 11 == 0:
            mixed.append("\n")
        if i < len(events):
            mixed.append(events[i])
    other = tmp_path / "mixed.jsonl"
    other.write_text("".join(head + mixed + stream))
    for table in TABLES:
        want = _snapshot_rows(_read({"path": str(path), "table": table})[1])
        for partitions in (1, 5):
            options = {"path": str(other), "table": table, "partitions": str(partitions)}
            got = _snapshot_rows(_read(options)[1])
            assert same(got.to_pylist(), want.to_pylist()), (table, partitions)


def test_the_scans_start_where_the_snapshot_ends(synthetic: tuple[Path, Path, Path]) -> None:
    """The snapshot's lines are scanned apart; the stream's fast and full scans begin
    after them and agree as without a snapshot; the tables' rows are counted."""
    _, path, _ = synthetic
    scan = _scan(str(path))
    assert scan.snapshot is not None
    assert scan.snapshot.rows == INITIAL
    start = scan.snapshot.end
    assert path.read_bytes()[start:].startswith(b'{"lsn"')
    fast, full = _scan_json_fast(str(path), start), _scan_json_lines(str(path), start)
    assert fast is not None and fast.cuts[0].at == full.cuts[0].at == start
    allowed = {c.at: c.caches for c in full.cuts}
    assert all(allowed.get(c.at) == c.caches for c in fast.cuts)
    assert (fast.caches, fast.first, fast.end) == (full.caches, full.first, full.end)
    assert scan.cuts == fast.cuts


def test_a_recording_without_a_snapshot_reads_as_before() -> None:
    """No snapshot in the meta: no snapshot partition, no snapshot row, the rows
    decoding gives."""
    path = golden(17, "toast", "v1")
    assert _scan(str(path)).snapshot is None
    plans, rows = _read({"path": str(path), "table": "public.pgwm_toast", "partitions": "3"})
    assert not any(isinstance(p, SnapshotPartition) for p in plans)
    alone = decode_stream(entries(path))["public.pgwm_toast"]
    assert sorted(rows.column("_position").to_pylist()) == sorted(
        alone.column("_position").to_pylist()
    )
    assert "snapshot" not in rows.column("_op").to_pylist()


def _with_meta(path: Path, out: Path, edit: Any) -> Path:
    lines = path.read_text().splitlines(keepends=True)
    record = json.loads(lines[0])
    edit(record["meta"])
    out.write_text(json.dumps(record) + "\n" + "".join(lines[1:]))
    return out


def test_a_table_only_the_snapshot_has_is_read_from_its_definition(
    synthetic: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """A table with snapshot rows and no change (no Relation message in the stream)
    takes its schema, key flags included, from the meta's definition."""
    _, path, _ = synthetic

    def add(meta: dict[str, Any]) -> None:
        meta["snapshot"]["tables"].append(
            {"schema": "public", "name": "quiet", "oid": 99999, "relreplident": "f",
             "relnatts": 2, "columns": [
                 {"attnum": 1, "name": "k", "type_oid": 23, "typmod": -1, "key": False},
                 {"attnum": 2, "name": "v", "type_oid": 25, "typmod": -1, "key": False}]}
        )  # fmt: skip

    edited = _with_meta(path, tmp_path / "quiet.jsonl", add)
    lines = edited.read_text().splitlines(keepends=True)
    quiet = [
        '{"table": "public.quiet", "copy": "1\\tone"}\n',
        '{"table": "public.quiet", "copy": "2\\t\\\\N"}\n',
    ]
    edited.write_text("".join(lines[:1] + quiet + lines[1:]))
    source = PgOutputDataSource({"path": str(edited), "table": "quiet", "partitions": "2"})
    schema = source.schema()
    assert [(f.name, f.metadata.get("pgoutput.key")) for f in schema.fields[7:9]] == [
        ("k", True),
        ("v", True),
    ]
    _, table = _read({"path": str(edited), "table": "quiet", "partitions": "2"})
    assert [(r["_op"], r["k"], r["v"], r["_position"]) for r in table.to_pylist()] == [
        ("snapshot", 1, "one", 0),
        ("snapshot", 2, None, 1),
    ]


def test_a_snapshot_that_describes_a_table_otherwise_than_the_stream_is_refused(
    synthetic: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """The meta's columns must be the Relation message's: one schema per read."""
    _, path, _ = synthetic

    def retype(meta: dict[str, Any]) -> None:
        meta["snapshot"]["tables"][0]["columns"][2]["type_oid"] = 701

    edited = _with_meta(path, tmp_path / "retyped.jsonl", retype)
    with pytest.raises(SchemaChangeError, match=r"public\.accounts has other columns"):
        PgOutputDataSource({"path": str(edited), "table": "public.accounts"}).schema()


def test_bad_snapshot_lines_are_errors_naming_the_line(
    synthetic: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """A row that is not COPY text, has another column count or is of a table the meta
    does not describe fails the read with the file's line number; snapshot rows where
    the stream is fail the scan."""
    _, path, _ = synthetic
    lines = path.read_text().splitlines(keepends=True)
    bad = tmp_path / "bad.jsonl"
    broken = list(lines)
    broken[5] = '{"table": "public.accounts", "copy": "1\\tends in a backslash\\\\"}\n'
    bad.write_text("".join(broken))
    with pytest.raises(StreamFileError, match=r"bad.jsonl, line 6: .*backslash"):
        _read({"path": str(bad), "table": "public.accounts"})
    broken[5] = '{"table": "public.accounts", "copy": "1\\ttoo few"}\n'
    bad.write_text("".join(broken))
    with pytest.raises(StreamFileError, match=r"line 6: public.accounts has 7 columns, the "):
        _read({"path": str(bad), "table": "public.accounts", "partitions": "3"})
    broken[5] = '{"table": "public.nope", "copy": "1"}\n'
    bad.write_text("".join(broken))
    with pytest.raises(StreamFileError, match=r"line 6: no table public\.nope in meta"):
        _read({"path": str(bad), "table": "public.accounts"})
    no_meta = _with_meta(path, tmp_path / "no_meta.jsonl", lambda m: m.pop("snapshot"))
    with pytest.raises(StreamFileError, match="its meta line has no snapshot"):
        _read({"path": str(no_meta), "table": "public.accounts"})


# --------------------------------------------------------------------------- applying


def _change_table(rows: list[dict[str, Any]], relation: Relation) -> pa.Table:
    schema = table_schema(relation)
    defaults = {
        "_xid": 1,
        "_commit_time": 0,
        "_toast_unchanged": [],
        "_special": [],
        "_before": None,
    }
    return pa.Table.from_pylist([defaults | r for r in rows], schema=schema)


FULL = Relation(
    1, "public", "f", "f", (RelationColumn(1, "id", 23, -1), RelationColumn(1, "v", 25, -1))
)
KEYED = Relation(
    2, "public", "k", "d", (RelationColumn(1, "id", 23, -1), RelationColumn(0, "v", 25, -1))
)


def _applied(changes: pa.Table, tmp_path: Path, name: str) -> list[list[tuple[Any, ...]]]:
    """The rows of a Parquet and of a Delta target after ``changes``, sorted."""
    parquet, delta = ParquetTarget(str(tmp_path / f"{name}.p")), DeltaTarget(str(tmp_path / name))
    apply_changes(changes, parquet, 0)
    apply_changes(changes, delta, 0)
    out = []
    for table in (read_parquet_target(parquet), DeltaTable(delta.path).to_pyarrow_table()):
        out.append(sorted((r["id"], r["v"]) for r in table.to_pylist()))
    return out


def test_snapshot_rows_are_applied_before_every_change(tmp_path: Path) -> None:
    """Snapshot rows are the initial state whatever their LSN or the rows' order: a
    change at the same LSN comes after them, and a truncate removes them."""
    rows = [
        {"_op": "update", "_commit_lsn": 100, "_position": 0, "id": 1, "v": "changed"},
        {"_op": "snapshot", "_commit_lsn": 100, "_position": 1, "id": 1, "v": "initial"},
        {"_op": "snapshot", "_commit_lsn": 100, "_position": 0, "id": 2, "v": "initial"},
        {"_op": "delete", "_commit_lsn": 150, "_position": 0, "id": 2, "v": None},
        {"_op": "snapshot", "_commit_lsn": 100, "_position": 2, "id": 3, "v": "kept"},
    ]
    assert (
        _applied(_change_table(rows, KEYED), tmp_path, "keyed")
        == [[(1, "changed"), (3, "kept")]] * 2
    )
    truncated = [*rows, {"_op": "truncate", "_commit_lsn": 200, "_position": 0, "id": None,
                         "v": None}]  # fmt: skip
    assert _applied(_change_table(truncated, KEYED), tmp_path, "truncated") == [[]] * 2


def test_identical_rows_of_a_table_without_a_key_are_each_kept(tmp_path: Path) -> None:
    """Under REPLICA IDENTITY FULL (every column a key) identical rows are separate
    rows, as in PostgreSQL: a delete or an update takes one of them."""
    row = {"id": 1, "v": "same"}
    rows = [
        {"_op": "snapshot", "_commit_lsn": 10, "_position": 0, **row},
        {"_op": "snapshot", "_commit_lsn": 10, "_position": 1, **row},
        {"_op": "insert", "_commit_lsn": 20, "_position": 0, **row},
        {"_op": "insert", "_commit_lsn": 20, "_position": 1, "id": 2, "v": "other"},
        {"_op": "delete", "_commit_lsn": 30, "_position": 0, **row},
        {"_op": "update", "_commit_lsn": 40, "_position": 0, "id": 1, "v": "new",
         "_before": row},
    ]  # fmt: skip
    assert (
        _applied(_change_table(rows, FULL), tmp_path, "full")
        == [[(1, "new"), (1, "same"), (2, "other")]] * 2
    )


# ------------------------------------------------------------------------------ Spark


@pytest.mark.parametrize("partitions", [1, 2, 4])
def test_spark_read_and_apply_of_a_synth_recording_equal_its_expected_file(
    spark: SparkSession, synthetic: tuple[Path, Path, Path], tmp_path: Path, partitions: int
) -> None:
    """Each table of the recording, read in ``partitions`` partitions and applied to
    Parquet (and, once, Delta), holds exactly ``--expected``'s rows, value for value."""
    spec, path, expected = synthetic
    synth = _synth(spec)
    for table in TABLES:
        df = (
            spark.read.format("pgoutput")
            .option("path", str(path))
            .option("table", table)
            .option("partitions", str(partitions))
            .load()
        )
        assert df.where("_op = 'snapshot'").count() == INITIAL[table]
        want = _expected_file(expected, table)
        parquet = ParquetTarget(str(tmp_path / table / "parquet"))
        assert apply_changes(df, parquet, batch_id=0).rows == len(want)
        assert _materialised(read_parquet_target(parquet), synth, table) == want
        if partitions == 2:
            delta = DeltaTarget(str(tmp_path / table / "delta"))
            apply_changes(df, delta, batch_id=0)
            state = DeltaTable(delta.path).to_pyarrow_table()
            assert _materialised(state, synth, table) == want
    # The truncate emptied audit.events of its snapshot rows; accounts kept some.
    first = str(synth.tables[0].hot + INITIAL["public.accounts"] - 1)
    assert first in _expected_file(expected, "public.accounts")


def test_spark_reads_a_spec_with_initial_rows_directly(
    spark: SparkSession, synthetic: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """synth_spec with initial_rows: snapshot partitions, then shards; applied, the
    expected state."""
    spec, _, expected = synthetic
    synth = _synth(spec)
    for table in TABLES:
        df = (
            spark.read.format("pgoutput")
            .option("synth_spec", str(spec))
            .option("synth_seed", str(SEED))
            .option("synth_changes", str(CHANGES))
            .option("table", table)
            .option("partitions", "2")
            .load()
        )
        target = ParquetTarget(str(tmp_path / table))
        apply_changes(df, target, batch_id=0)
        want = _expected_file(expected, table)
        assert _materialised(read_parquet_target(target), synth, table) == want


def test_consistent_point_is_the_specs_start_lsn(synthetic: tuple[Path, Path, Path]) -> None:
    spec, path, _ = synthetic
    meta = json.loads(path.read_text().splitlines()[0])["meta"]
    assert meta["snapshot"]["consistent_point"] == str(LSN(_synth(spec).spec.start_lsn))
