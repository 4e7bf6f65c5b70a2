"""spark.read.format("pgoutput") over golden recordings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pgwire_mock.spark import SparkSideError, decode_stream
from pgwire_mock.spark.source import _scan_json_fast, _scan_json_lines
from pgwire_mock.synth import Synth, load_spec, write_recording
from spark.spark_helpers import TYPES_OPTIONS, entries, golden, same

MAJOR = 17
CASES = [
    ("types", "v4-parallel-2pc-bin", "public.pgwm_types"),
    ("streaming", "v4-parallel-2pc-bin", "public.pgwm_stream"),
    ("two_phase", "v3-stream-2pc", "pgwm_2pc"),
    ("toast", "v1", "public.pgwm_toast_full"),
]


def _load(spark: SparkSession, path: str, table: str, partitions: int):  # type: ignore[no-untyped-def]
    return (
        spark.read.format("pgoutput")
        .option("path", path)
        .option("table", table)
        .option("partitions", str(partitions))
        .option("array_dims", json.dumps({"c_int4_2d": 2}))
        .load()
    )


@pytest.mark.parametrize(("scenario", "option_set", "table"), CASES)
def test_one_two_and_four_partitions_read_the_same_rows(
    spark: SparkSession, scenario: str, option_set: str, table: str
) -> None:
    path = str(golden(MAJOR, scenario, option_set))
    name = table if "." in table else f"public.{table}"
    expected = decode_stream(entries(golden(MAJOR, scenario, option_set)), TYPES_OPTIONS)[name]
    results = []
    for partitions in (1, 2, 4):
        df = _load(spark, path, table, partitions)
        rows = df.orderBy("_commit_lsn", "_position").toArrow().to_pylist()
        results.append(rows)
    assert len(results[0]) == expected.num_rows
    assert same(results[0], results[1])
    assert same(results[0], results[2])
    # Spark hands maps back as lists of pairs too; timestamps as aware UTC datetimes.
    assert same([r["id"] for r in results[0]], [r["id"] for r in expected.to_pylist()])


def test_schema_carries_key_flags_and_postgres_types(spark: SparkSession) -> None:
    df = _load(spark, str(golden(MAJOR, "replica_identity", "v1")), "pgwm_ri_index", 2)
    fields = {f.name: f for f in df.schema.fields}
    assert fields["code"].metadata == {"pgoutput.key": True, "pgoutput.type": "text"}
    assert fields["id"].metadata["pgoutput.key"] is False
    assert df.columns[:7] == [
        "_op",
        "_commit_lsn",
        "_position",
        "_xid",
        "_commit_time",
        "_toast_unchanged",
        "_special",
    ]


def test_special_values_reach_spark(spark: SparkSession) -> None:
    df = _load(spark, str(golden(MAJOR, "types", "v1")), "pgwm_types", 2)
    row = df.where("id = 2 AND _op = 'insert'").collect()[0]
    assert row["c_timestamptz"] is None
    assert row["_special"]["c_timestamptz"] == "infinity"
    assert row["c_interval"]["months"] == -2136000000


def test_a_table_not_in_the_stream_is_an_error(spark: SparkSession) -> None:
    with pytest.raises(Exception, match="does not appear"):
        _load(spark, str(golden(MAJOR, "toast", "v1")), "public.nope", 1).schema  # noqa: B018


def test_a_directory_reads_every_file(spark: SparkSession, tmp_path) -> None:  # type: ignore[no-untyped-def]
    for option_set in ("v1", "v1-binary"):
        src = golden(MAJOR, "toast", option_set)
        (tmp_path / src.name).write_bytes(src.read_bytes())
    df = _load(spark, str(tmp_path), "pgwm_toast", 2)
    assert df.count() == 10


def test_missing_table_option() -> None:
    from pgwire_mock.spark.source import _options

    with pytest.raises(SparkSideError, match="table"):
        _options({})


@pytest.mark.parametrize(
    "recording",
    [
        "pg17/streaming.v4-parallel-2pc-bin",
        "pg17/two_phase.v3-stream-2pc",
        "pg16/toast.v1",
        "pg15/types.v2-stream",
        "synthetic",
    ],
)
def test_the_fast_scan_cuts_only_where_the_full_scan_may(recording: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The regular-expression scan of JSON Lines sees Begins only where it wants a cut
    and no Commit at all; every cut it makes is a cut the message-by-message scan makes,
    with the same Relation and Type caches, and it finds the same first Relations."""
    if recording == "synthetic":
        spec = Path(__file__).resolve().parents[2] / "examples" / "synth-spec.yaml"
        synth = Synth(load_spec(spec), seed=3, changes=30_000)
        path = tmp_path / "synthetic.jsonl"
        with path.open("w") as out:
            write_recording(out, synth.meta(), synth.stream())
    else:
        major, name = recording.split("/")
        path = golden(int(major[2:]), *name.split(".", 1))
    fast, full = _scan_json_fast(str(path)), _scan_json_lines(str(path))
    assert fast is not None
    allowed = {c.at: c.caches for c in full.cuts}
    assert all(allowed.get(c.at) == c.caches for c in fast.cuts)
    assert (fast.caches, fast.first, fast.end) == (full.caches, full.first, full.end)
    if recording == "synthetic":
        assert len(fast.cuts) > 100  # one near every 1/4096 of the file, where allowed
