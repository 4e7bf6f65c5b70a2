"""``format("pgoutput")`` over a generator spec (pgwire_mock.spark.synthetic): the shards
the executors generate decode to exactly the rows of the whole stream, and to the rows a
recording of that stream gives.

The stream is test_synth_spark's: examples/synth-spec.yaml at 20,000 changes, seed 7.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from pgwire_mock.spark import (
    DecodeOptions,
    ParquetTarget,
    SparkSideError,
    apply_changes,
    decode_stream,
    table_schema,
)
from pgwire_mock.spark.options import is_synthetic
from pgwire_mock.spark.source import plan_partitions, read_partition
from pgwire_mock.spark.synthetic import (
    SynthPartition,
    plan_synthetic,
    read_synthetic,
)
from pgwire_mock.synth import Synth, load_spec, parse_spec, write_recording
from spark.spark_helpers import same
from spark.test_synth_spark import CHANGES, SEED, SPEC, expected_rows, materialised_rows
from synth_specs import small_specs

OPTIONS = {"synth_spec": str(SPEC), "synth_seed": str(SEED), "synth_changes": str(CHANGES)}
TABLES = ("public.accounts", "audit.events")

Rows = list[dict[str, object]]


@pytest.fixture(scope="module")
def whole() -> dict[str, pa.Table]:
    """Every table's rows, decoded from the whole single-process stream."""
    return decode_stream(Synth(load_spec(SPEC), seed=SEED, changes=CHANGES).stream())


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    synth = Synth(load_spec(SPEC), seed=SEED, changes=CHANGES)
    path = tmp_path_factory.mktemp("synth") / "stream.jsonl"
    with path.open("w") as out:
        write_recording(out, synth.meta(), synth.stream())
    yield path


def _decode_options(table: str) -> DecodeOptions:
    return DecodeOptions(tables=frozenset({table}))


def synthetic_rows(
    options: dict[str, str], table: str, partitions: int
) -> tuple[list[SynthPartition], Rows]:
    """The partitions planned for ``table`` and their rows, read one after the other as
    Spark would on executors (cast to the planned schema)."""
    plans, relation, user_types = plan_synthetic(options, table, partitions)
    decode_options = _decode_options(table)
    arrow = table_schema(relation, user_types, decode_options)
    rows = [
        row
        for plan in plans
        for batch in read_synthetic(plan, decode_options, arrow)
        for row in batch.to_pylist()
    ]
    return plans, rows


@pytest.mark.parametrize("partitions", [1, 2, 4])
@pytest.mark.parametrize("table", TABLES)
def test_shards_give_the_rows_of_the_whole_stream_and_of_a_recording(
    whole: dict[str, pa.Table], recording: Path, table: str, partitions: int
) -> None:
    """Row for row what decoding the single-process stream gives, and what reading a
    recording of it cut in as many partitions gives."""
    plans, rows = synthetic_rows(OPTIONS, table, partitions)
    assert [(p.shard, p.shards) for p in plans] == [(k, partitions) for k in range(partitions)]
    expected = whole[table].to_pylist()
    assert len(rows) == len(expected) > 1000
    assert same(rows, expected)

    parts, scan = plan_partitions(str(recording), table, partitions)
    relation, user_types = scan.first[table]
    arrow = table_schema(relation, user_types, _decode_options(table))
    recorded = [
        row
        for part in parts
        for batch in read_partition(part, _decode_options(table), arrow)
        for row in batch.to_pylist()
    ]
    assert same(rows, recorded)


@pytest.mark.parametrize("table", TABLES)
def test_the_planned_schema_is_the_streams(whole: dict[str, pa.Table], table: str) -> None:
    _, relation, user_types = plan_synthetic(OPTIONS, table, 2)
    assert table_schema(relation, user_types) == whole[table].schema
    assert user_types == {}


def test_partitions_are_preloaded_with_every_tables_relation() -> None:
    plans, _, _ = plan_synthetic(OPTIONS, "audit.events", 4)
    for plan in plans:
        names = [f"{r.namespace}.{r.relation_name}" for r in plan.relations]
        assert names == list(TABLES)
        assert plan.types == ()
        assert plan.spec == SPEC.read_text()


def test_partitions_are_at_most_the_blocks() -> None:
    plans, _, _ = plan_synthetic({**OPTIONS, "synth_changes": "2500"}, "public.accounts", 8)
    assert [(p.shard, p.shards) for p in plans] == [(0, 3), (1, 3), (2, 3)]  # 1000 a block
    plans, _, _ = plan_synthetic(OPTIONS, "public.accounts", 0)
    assert len(plans) == 1


def test_a_bare_table_name_is_in_public() -> None:
    _, relation, _ = plan_synthetic(OPTIONS, "accounts", 1)
    assert (relation.namespace, relation.relation_name) == ("public", "accounts")


def test_a_json_spec_reads_like_its_yaml(tmp_path: Path) -> None:
    """A ``.json`` spec is parsed as JSON on the driver and shipped as YAML: values PyYAML
    would misread in JSON text (``1e-05`` is a string to YAML 1.1) and tab indentation
    reach the executors intact."""
    data = yaml.safe_load(SPEC.read_text())
    data["messages"]["ratio"] = 1e-05
    json_spec = tmp_path / "spec.json"
    json_spec.write_text(json.dumps(data, indent="\t"))
    yaml_spec = tmp_path / "spec.yaml"
    yaml_spec.write_text(yaml.safe_dump(data, sort_keys=False))
    options = {"synth_seed": "3", "synth_changes": "3000"}
    _, from_json = synthetic_rows({**options, "synth_spec": str(json_spec)}, TABLES[0], 2)
    _, from_yaml = synthetic_rows({**options, "synth_spec": str(yaml_spec)}, TABLES[0], 2)
    assert len(from_json) > 1000
    assert same(from_json, from_yaml)


def test_is_synthetic() -> None:
    assert is_synthetic(OPTIONS)
    assert not is_synthetic({"path": "stream.jsonl", "table": "t"})


BAD_SPEC = "tables: [{name: t, columns: [{name: id, type: int5, key: true}]}]\n"
INT4_KEY = "tables: [{name: t, columns: [{name: id, type: int4, key: true}]}]\n"


@pytest.mark.parametrize(
    ("options", "table", "message"),
    [
        ({"synth_spec": "/nonexistent/spec.yaml", "synth_changes": "10"}, "t", "cannot read"),
        ({"synth_spec": "", "synth_changes": "10"}, "t", "needs the path of a spec file"),
        ({"synth_spec": "{BAD}", "synth_changes": "10"}, "t", "bad synth_spec: .*'int5'"),
        ({"synth_spec": "{INT4}", "synth_changes": str(1 << 40)}, "t", "int4"),
        ({**OPTIONS, "synth_seed": "x"}, TABLES[0], "synth_seed must be an integer, got 'x'"),
        ({"synth_spec": str(SPEC)}, TABLES[0], '"synth_changes" is required'),
        ({**OPTIONS, "synth_changes": "0"}, TABLES[0], "synth_changes must be a positive"),
        ({**OPTIONS, "synth_changes": "1e6"}, TABLES[0], "positive integer, got '1e6'"),
        (OPTIONS, "public.nope", r"public.nope is not in synth_spec .*\(public.accounts, audit"),
        ({**OPTIONS, "path": "stream.jsonl"}, TABLES[0], '"path" or "synth_spec", not both'),
    ],
)
def test_bad_options_are_one_line_errors(
    tmp_path: Path, options: dict[str, str], table: str, message: str
) -> None:
    for name, text in (("{BAD}", BAD_SPEC), ("{INT4}", INT4_KEY)):
        if options.get("synth_spec") == name:
            spec = tmp_path / "spec.yaml"
            spec.write_text(text)
            options = {**options, "synth_spec": str(spec)}
    with pytest.raises(SparkSideError, match=message) as raised:
        plan_synthetic(options, table, 2)
    assert "\n" not in str(raised.value)
    assert str(raised.value).startswith("pgoutput: ")


def test_spark_reads_a_spec_directly(spark: SparkSession, tmp_path: Path) -> None:
    """Every table read straight from the spec with 4 partitions and applied to Parquet
    holds exactly the generator's expected state."""
    state = Synth(load_spec(SPEC), seed=SEED, changes=CHANGES).expected_state()
    for table in state.columns:
        df = (
            spark.read.format("pgoutput")
            .option("synth_spec", str(SPEC))
            .option("synth_seed", "7")
            .option("synth_changes", "20000")
            .option("table", table)
            .option("partitions", "4")
            .load()
        )
        assert df.rdd.getNumPartitions() == 4
        target = ParquetTarget(str(tmp_path / table))
        result = apply_changes(df, target, batch_id=0)
        want = expected_rows(state, table)
        got = materialised_rows(target, state, table)
        assert result.applied and result.rows == len(want) > 100
        missing = sorted(want.keys() - got.keys())[:5]
        extra = sorted(got.keys() - want.keys())[:5]
        assert not missing and not extra, f"{table}: missing {missing}, extra {extra}"
        differing = [k for k in want if want[k] != got[k]]
        assert not differing, f"{table} {differing[0]}: {got[differing[0]]} != {want[differing[0]]}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_specs(), st.integers(0, 2**32), st.integers(1, 150), st.integers(1, 4))
def test_random_specs_give_the_rows_decoding_gives(
    data: dict[str, Any], seed: int, changes: int, partitions: int
) -> None:
    """The rows the executors build from the generator's log (no pgoutput decoded) equal,
    row for row, the rows decoding the whole stream gives: every type, key type, TOAST,
    truncates, key updates, streamed, prepared and aborted work, binary output."""
    spec_text = json.dumps(data)
    synth = Synth(parse_spec(spec_text, json_only=True), seed, changes)
    whole_rows = decode_stream(synth.stream())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.json"
        path.write_text(spec_text)
        options = {"synth_spec": str(path), "synth_seed": str(seed), "synth_changes": str(changes)}
        for table in (t.name for t in synth.tables):
            _, rows = synthetic_rows(options, table, partitions)
            expected = whole_rows[table].to_pylist() if table in whole_rows else []
            assert same(rows, expected), table
