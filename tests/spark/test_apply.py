"""Materialized tables equal what the real server holds after each scenario."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from psycopg import sql
from pyspark.sql import SparkSession

from conformance import provision
from conformance.scenarios import SCENARIOS, Scenario, option_sets
from pgwire_mock.spark import (
    ApplyError,
    ChangeDecoder,
    DeltaTarget,
    ParquetTarget,
    apply_changes,
    decode_stream,
    read_parquet_target,
)
from spark.spark_helpers import TYPES_OPTIONS, entries, golden, same

COMPARED = (
    "types",
    "replica_identity",
    "toast",
    "truncate",
    "messages",
    "custom_types",
    "streaming",
    "two_phase",
    "origin",
)
Row = dict[str, Any]


def _scenario(name: str) -> Scenario:
    return next(s for s in SCENARIOS if s.name == name)


def _server_tables(
    server: provision.Server, scenario: Scenario
) -> dict[str, list[list[str | None]]]:
    """Run the scenario from scratch and read every published table as text."""
    out: dict[str, list[list[str | None]]] = {}
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        for statement in (*scenario.teardown, *scenario.setup, *scenario.steps):
            conn.execute(statement)  # type: ignore[arg-type]  # the scenarios' own SQL
        for table in scenario.publish:
            schema, _, name = table.rpartition(".")
            qualified = f"{schema or 'public'}.{name}"
            cur = conn.execute(
                sql.SQL("SELECT * FROM {} LIMIT 0").format(sql.Identifier(schema or "public", name))
            )
            columns = [d.name for d in cur.description or []]
            query = sql.SQL("SELECT {} FROM {}").format(
                # format() prints with the type's output function; ::text would trim bpchar.
                sql.SQL(", ").join(
                    sql.SQL("CASE WHEN {0} IS NULL THEN NULL ELSE format('%s', {0}) END").format(
                        sql.Identifier(c)
                    )
                    for c in columns
                ),
                sql.Identifier(schema or "public", name),
            )
            out[qualified] = [list(r) for r in conn.execute(query).fetchall()]
        for statement in scenario.teardown:
            conn.execute(statement)  # type: ignore[arg-type]
    return out


_SERVER_CACHE: dict[tuple[int, str], dict[str, list[list[str | None]]]] = {}


def _server(server: provision.Server, name: str) -> dict[str, list[list[str | None]]]:
    key = (server.version, name)
    if key not in _SERVER_CACHE:
        _SERVER_CACHE[key] = _server_tables(server, _scenario(name))
    return _SERVER_CACHE[key]


def _expected(path: Path, table: str, texts: list[list[str | None]]) -> list[Row]:
    """The server's rows converted the way the decoder converts the stream's values."""
    decoder = ChangeDecoder(TYPES_OPTIONS)
    for lsn, payload in entries(path):
        decoder.feed(lsn, payload)
    types = decoder.column_types(table)
    rows = []
    for values in texts:
        row: Row = {}
        special = {}
        for (name, ct), text in zip(types.items(), values, strict=True):
            value, spec = (None, None) if text is None else ct.convert(text)
            row[name] = value
            if spec is not None:
                special[name] = spec
        row["_special"] = special
        rows.append(row)
    return sorted(rows, key=repr)


def _materialized(table: pa.Table) -> list[Row]:
    rows = table.to_pylist()
    for r in rows:
        r.pop("_commit_lsn")
        r["_special"] = dict(r["_special"] or [])
    return sorted(rows, key=repr)


def _split(changes: pa.Table) -> tuple[pa.Table, pa.Table]:
    """Two batches cut between transactions, so each batch holds whole transactions."""
    lsns = sorted(set(changes.column("_commit_lsn").to_pylist()))
    if len(lsns) < 2:
        return changes, changes.slice(0, 0)
    cut = lsns[len(lsns) // 2]
    mask = pc.less(changes.column("_commit_lsn"), cut)
    return changes.filter(mask), changes.filter(pc.invert(mask))


@pytest.mark.parametrize("name", COMPARED)
def test_materialized_tables_equal_the_server(
    pg_server: provision.Server, name: str, tmp_path: Path
) -> None:
    """For every option set: Parquet (two batches) and Delta (two batches, the second
    applied twice) hold exactly the rows the server holds, value by value."""
    server_tables = _server(pg_server, name)
    for option_set in option_sets(pg_server.version):
        if name == "custom_types" and "bin" in option_set.name:
            continue  # binary composites/enum arrays are kept as hex: nothing to compare
        path = golden(pg_server.version, name, option_set.name)
        changes = decode_stream(entries(path), TYPES_OPTIONS)
        assert set(changes) <= set(server_tables)
        for table, texts in server_tables.items():
            expected = _expected(path, table, texts) if table in changes else []
            if table not in changes:
                assert not texts, (option_set.name, table)
                continue
            first, second = _split(changes[table])
            where = tmp_path / option_set.name / table
            parquet = ParquetTarget(str(where / "parquet"))
            apply_changes(first, parquet, 0)
            apply_changes(second, parquet, 1)
            got = _materialized(read_parquet_target(parquet))
            assert same(got, expected), (option_set.name, table, "parquet")
            if option_set.name in ("v1", "v4-parallel-2pc-bin"):
                delta = DeltaTarget(str(where / "delta"))
                apply_changes(first, delta, 0)
                apply_changes(second, delta, 1)
                assert not apply_changes(second, delta, 1).applied
                got = _materialized(DeltaTable(delta.path).to_pyarrow_table())
                assert same(got, expected), (option_set.name, table, "delta")


def test_reapplying_a_batch_id_changes_nothing(tmp_path: Path) -> None:
    changes = decode_stream(entries(golden(17, "toast", "v1")))["public.pgwm_toast"]
    first, second = _split(changes)
    for target in (ParquetTarget(str(tmp_path / "p")), DeltaTarget(str(tmp_path / "d"))):
        assert apply_changes(first, target, 7).applied
        again = apply_changes(first, target, 7)
        assert not again.applied
        assert again.rows == 2
        assert not apply_changes(second, target, 6).applied
        assert apply_changes(second, target, 8).applied
    rows = read_parquet_target(ParquetTarget(str(tmp_path / "p"))).to_pylist()
    assert sorted((r["id"], r["counter"], r["big"]) for r in rows) == [
        (1, 1, "now short"),
        (2, 1, "short"),
    ]
    assert (
        DeltaTable(str(tmp_path / "d")).transaction_version("pgwire_mock:" + str(tmp_path / "d"))
        == 8
    )


def test_unchanged_toast_without_a_row_fails_rather_than_writing_null(tmp_path: Path) -> None:
    changes = decode_stream(entries(golden(17, "toast", "v1")))["public.pgwm_toast"]
    updates = changes.filter(pc.equal(changes.column("_op"), "update"))
    with pytest.raises(ApplyError, match="big"):
        apply_changes(updates, ParquetTarget(str(tmp_path / "p")), 0)


@pytest.fixture(scope="module")
def spark_session(spark: SparkSession) -> SparkSession:
    return spark


def test_a_spark_dataframe_applies_like_arrow(spark_session: SparkSession, tmp_path: Path) -> None:
    """The DataFrame from format("pgoutput") (key flags from its schema metadata) and
    foreachBatch-style application give the same table as the Arrow path."""
    path = golden(17, "replica_identity", "v2-stream")
    df = (
        spark_session.read.format("pgoutput")
        .option("path", str(path))
        .option("table", "pgwm_ri_index")
        .load()
    )
    target = ParquetTarget(str(tmp_path / "spark"))
    apply_changes(df, target, 0)
    arrow = ParquetTarget(str(tmp_path / "arrow"))
    apply_changes(decode_stream(entries(path))["public.pgwm_ri_index"], arrow, 0)
    assert _materialized(read_parquet_target(target)) == _materialized(read_parquet_target(arrow))
    assert [r["code"] for r in read_parquet_target(target).to_pylist()] == ["k10"]
