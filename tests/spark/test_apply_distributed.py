"""A Spark DataFrame is routed by Spark expressions on the executors, an Arrow table by
Python in this process: both give the same table, and refuse the same batches with the
same message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import DataFrame, SparkSession

from pgwire_mock.spark import (
    ApplyError,
    DeltaTarget,
    ParquetTarget,
    apply_changes,
    decode_stream,
    read_parquet_target,
)
from spark.spark_helpers import entries, golden

RECORDINGS = [
    ("replica_identity", "v1"),
    ("replica_identity", "v4-parallel-2pc-bin"),
    ("toast", "v1"),
    ("toast", "v4-parallel-2pc-bin"),
    ("truncate", "v1"),
]
# Identity columns when Spark's createDataFrame drops the decoder's key flags.
KEYS = {"public.pgwm_toast": ["id"], "public.pgwm_toast_full": ["id", "counter", "big"]}


def _tables(scenario: str, option_set: str) -> dict[str, pa.Table]:
    return decode_stream(entries(golden(17, scenario, option_set)))


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    rows = table.to_pylist()
    for r in rows:
        r["_special"] = sorted(r["_special"] or [])
    return sorted(rows, key=repr)


def _read(target: ParquetTarget | DeltaTarget) -> pa.Table:
    if isinstance(target, ParquetTarget):
        return read_parquet_target(target)
    from deltalake import DeltaTable  # only the Delta cases need it

    return DeltaTable(target.path).to_pyarrow_table()


def _halves(table: pa.Table) -> tuple[pa.Table, pa.Table]:
    """Two batches cut between transactions (the second finds the first's rows)."""
    lsns = sorted(set(table.column("_commit_lsn").to_pylist()))
    cut = lsns[len(lsns) // 2]
    first = pc.less(table.column("_commit_lsn"), cut)
    return table.filter(first), table.filter(pc.invert(first))


def _frame(spark: SparkSession, table: pa.Table) -> DataFrame:
    return spark.createDataFrame(table)


def _key_change_keeping_toast() -> pa.Table:
    """pgwm_toast with its unchanged-TOAST update of id 1 turned into a key change to
    id 10: the new row must take ``big`` from the old one (an identity change joining
    two groups)."""
    table = _tables("toast", "v1")["public.pgwm_toast"]
    rows = table.to_pylist()
    for r in rows:
        if r["_op"] == "update" and r["_toast_unchanged"] == ["big"]:
            r["_before"] = {"id": r["id"], "counter": None, "big": None}
            r["id"] = 10
    return pa.Table.from_pylist(rows, schema=table.schema)


def _cases() -> list[tuple[str, pa.Table, list[str] | None]]:
    out: list[tuple[str, pa.Table, list[str] | None]] = []
    for scenario, option_set in RECORDINGS:
        for name, table in _tables(scenario, option_set).items():
            out.append((f"{scenario}.{option_set}:{name}", table, KEYS.get(name)))
    out.append(("key change keeping TOAST", _key_change_keeping_toast(), ["id"]))
    return out


@pytest.mark.parametrize("kind", ["parquet", "delta"])
def test_a_dataframe_and_its_arrow_table_apply_to_the_same_table(
    spark: SparkSession, tmp_path: Path, kind: str
) -> None:
    """Every table of the recordings, in two batches (the second applied over the
    first's rows) and in 3 partitions: the DataFrame path equals the Arrow path. (Delta
    only differs in the writer: the TOAST tables are enough for it.)"""
    for i, (label, table, key) in enumerate(_cases()):
        if kind == "delta" and "toast" not in label.lower():
            continue
        keys = key or [f.name for f in table.schema if (f.metadata or {}).get(b"pgoutput.key")]
        first, second = _halves(table)
        targets, results = [], []
        for source in ("arrow", "spark"):
            where = str(tmp_path / f"{i}-{source}")
            target = ParquetTarget(where) if kind == "parquet" else DeltaTarget(where)
            for batch_id, part in enumerate((first, second)):
                if not part.num_rows:  # createDataFrame refuses an empty Arrow table
                    continue
                changes = part if source == "arrow" else _frame(spark, part)
                results.append(apply_changes(changes, target, batch_id, key=keys, partitions=3))
            targets.append(target)
        arrow, spark_side = (_rows(_read(t)) for t in targets)
        assert spark_side == arrow, label
        half = len(results) // 2
        assert results[half:] == results[:half], label  # rows and changes counted alike
        if label == "key change keeping TOAST":
            inserted = next(r["big"] for r in table.to_pylist() if r["_op"] == "insert")
            assert [r["big"] for r in arrow if r["id"] == 10] == [inserted]


def _keyless() -> tuple[pa.Table, list[str]]:
    return _tables("toast", "v1")["public.pgwm_toast"], []


def _full_without_old_value() -> tuple[pa.Table, list[str]]:
    """A REPLICA IDENTITY FULL update leaving ``big`` unchanged whose old tuple has no
    value for it."""
    table = _tables("toast", "v1")["public.pgwm_toast_full"]
    rows = table.to_pylist()
    for r in rows:
        if r["_before"] is not None:
            r["_before"]["big"] = None
    return pa.Table.from_pylist(rows, schema=table.schema), KEYS["public.pgwm_toast_full"]


def _toast_without_row() -> tuple[pa.Table, list[str]]:
    table = _tables("toast", "v1")["public.pgwm_toast"]
    return table.filter(pc.equal(table.column("_op"), "update")), ["id"]


@pytest.mark.parametrize("case", [_keyless, _full_without_old_value, _toast_without_row])
def test_a_batch_the_arrow_path_refuses_the_dataframe_path_refuses_alike(
    spark: SparkSession, tmp_path: Path, case: Any
) -> None:
    """Same ApplyError, same first line, and nothing written."""
    table, keys = case()
    with pytest.raises(ApplyError) as local:
        apply_changes(table, ParquetTarget(str(tmp_path / "arrow")), 0, key=keys)
    with pytest.raises(ApplyError) as distributed:
        apply_changes(_frame(spark, table), ParquetTarget(str(tmp_path / "spark")), 0, key=keys)
    assert str(distributed.value) == str(local.value)
    assert not (tmp_path / "spark" / "_pgwire_mock_latest.json").exists()
