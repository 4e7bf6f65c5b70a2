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

from conformance.spark_check import (
    SynthRows,
    expected_synthetic_rows,
    materialised_synthetic_rows,
    synthetic_mismatch,
)
from pgwire_mock.spark import ParquetTarget, apply_changes, read_parquet_target
from pgwire_mock.synth import ExpectedState, Synth, load_spec, write_recording

SPEC = Path(__file__).resolve().parents[2] / "examples" / "synth-spec.yaml"
SEED = 7
CHANGES = 20_000


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, ExpectedState]]:
    """The recording file and the generator's expected final state."""
    synth = Synth(load_spec(SPEC), seed=SEED, changes=CHANGES)
    path = tmp_path_factory.mktemp("synth") / "stream.jsonl"
    with path.open("w") as out:
        write_recording(out, synth.meta(), synth.stream())
    yield path, synth.expected_state()


def expected_rows(state: ExpectedState, table: str) -> SynthRows:
    """Key text -> {column: PostgreSQL text}, from the generator."""
    return expected_synthetic_rows(state, table)


def materialised_rows(target: ParquetTarget, state: ExpectedState, table: str) -> SynthRows:
    """Key text -> {column: PostgreSQL text}, from the Parquet target."""
    return materialised_synthetic_rows(read_parquet_target(target), state, table)


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
        assert result.applied and result.rows == len(expected_rows(state, table)) > 100
        assert synthetic_mismatch(read_parquet_target(target), state, table) is None


LOAD_CHANGES = 200_000


def test_a_load_test_sized_stream_gives_the_expected_state(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Ten times the size above (200,000 changes, ~100 MB, dozens of streamed, aborted
    and two-phase transactions and a truncate), read in 2 partitions: still exact."""
    synth = Synth(load_spec(SPEC), seed=SEED + 1, changes=LOAD_CHANGES)
    path = tmp_path / "load.jsonl"
    with path.open("w") as out:
        write_recording(out, synth.meta(), synth.stream())
    state = synth.expected_state()
    for table in state.columns:
        df = spark.read.format("pgoutput").option("path", str(path)).option("table", table).load()
        target = ParquetTarget(str(tmp_path / table))
        apply_changes(df, target, batch_id=0)
        assert synthetic_mismatch(read_parquet_target(target), state, table) is None
