"""Synthetic streams through Spark: ``format("pgoutput")`` + ``apply_changes`` give exactly
the generator's expected state, however many partitions the recording is cut into.

The stream is examples/synth-spec.yaml (protocol 4, parallel streaming, two-phase, logical
messages, unchanged-TOAST updates, key-changing updates) at 20,000 changes, seed 7.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from conformance.spark_check import tuple_value
from pgwire_mock.spark import ParquetTarget, apply_changes, read_parquet_target
from pgwire_mock.synth import ExpectedState, Synth, load_spec, write_recording

SPEC = Path(__file__).resolve().parents[2] / "examples" / "synth-spec.yaml"
SEED = 7
CHANGES = 20_000

Table = dict[str, dict[str, str | bytes | None]]


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, ExpectedState]]:
    """The recording file and the generator's expected final state."""
    synth = Synth(load_spec(SPEC), seed=SEED, changes=CHANGES)
    path = tmp_path_factory.mktemp("synth") / "stream.jsonl"
    with path.open("w") as out:
        write_recording(out, synth.meta(), synth.stream())
    yield path, synth.expected_state()


def expected_rows(state: ExpectedState, table: str) -> Table:
    """Key text -> {column: PostgreSQL text}, from the generator."""
    rows: Table = {}
    key = state.columns[table][0]
    for record in state.records():
        if record["table"] == table:
            row = record["row"]
            rows[str(row[key])] = row
    return rows


def materialised_rows(target: ParquetTarget, state: ExpectedState, table: str) -> Table:
    """Key text -> {column: PostgreSQL text}, from the Parquet target (docs/spark.md's
    mapping in reverse, NULL + ``_special`` included)."""
    names = state.columns[table]
    oids = state.type_oids[table]
    rows: Table = {}
    for record in read_parquet_target(target).to_pylist():
        special = dict(record["_special"] or [])
        row = {
            n: tuple_value(o, record[n], special.get(n)) for n, o in zip(names, oids, strict=True)
        }
        rows[str(row[names[0]])] = row
    return rows


@pytest.mark.parametrize("partitions", [1, 2, 4])
def test_spark_read_and_apply_give_the_generators_expected_state(
    spark: SparkSession,
    synthetic: tuple[Path, ExpectedState],
    tmp_path: Path,
    partitions: int,
) -> None:
    """Every table read with ``partitions`` partitions and applied to Parquet in one batch
    holds exactly the rows (keys and every value) the generator says it must."""
    path, state = synthetic
    for table in state.columns:
        df = (
            spark.read.format("pgoutput")
            .option("path", str(path))
            .option("table", table)
            .option("partitions", str(partitions))
            .load()
        )
        assert df.rdd.getNumPartitions() == partitions
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
