"""``pgwire-mock record --snapshot`` of a real server, read with Spark and applied: the
tables equal ``SELECT * FROM t`` on the server at the end, value by value.

The server holds, before the slot exists, a table with a primary key (text with tabs,
newlines, backslashes and non-ASCII, numeric with NaN, bytea, timestamptz with infinity,
and a TOASTed text column stored out of line), a table without a primary key under
REPLICA IDENTITY FULL holding identical rows, and a keyed table that will be truncated.
After the slot exists (and its snapshot is taken), transactions insert, update (a key
change, updates that leave the TOASTed value unchanged, an update and a delete of one of
two identical rows) and delete, and one truncates and refills the third table. The
recording (text, and binary tuple data) is read with ``format("pgoutput")`` in 1 and 3
partitions and applied to Parquet and to Delta in one batch.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from psycopg import sql
from pyspark.sql import SparkSession

from conformance.provision import Server
from pgwire_mock.client import pgoutput_options
from pgwire_mock.record import record
from pgwire_mock.spark import (
    ChangeDecoder,
    DeltaTarget,
    ParquetTarget,
    apply_changes,
    read_parquet_target,
)
from pgwire_mock.spark.snapshot import meta_relation
from spark.spark_helpers import same

BIG = "".join(chr(0x41 + (i * 7) % 26) for i in range(3000))  # stored out of line
PK_COLUMNS = "id int PRIMARY KEY, t text, n numeric(12,3), b bytea, ts timestamptz, big text"
INITIAL = [
    (1, "plain", "1.5", b"\x00\x01", "2024-02-29 12:00:00+00", BIG),
    (2, "tab\there, newline\nthere, back\\slash", "-0.001", b"", "1999-12-31 23:59:59.5+00", None),
    (3, "héllo ✓", "NaN", b"\xff" * 40, "infinity", BIG[::-1]),
    (4, None, "123456789.125", None, None, "short"),
    *[(i, f"row {i}", f"{i}.25", bytes([i]) * 3, "2020-01-01 00:00:00+00", BIG)
      for i in range(5, 30)],
]  # fmt: skip
FULL_ROWS = [(1, "dup", "1.0"), (1, "dup", "1.0"), (2, "two", None), (3, "three", "NaN")] + [
    (i, f"full {i}", f"{i}") for i in range(4, 20)
]


def _create(conn: Any, pk: str, full: str, trunc: str) -> None:
    conn.execute(f"CREATE TABLE {pk} ({PK_COLUMNS})")
    conn.execute(f"ALTER TABLE {pk} ALTER COLUMN big SET STORAGE EXTERNAL")
    conn.execute(f"CREATE TABLE {full} (id int, t text, n numeric)")
    conn.execute(f"ALTER TABLE {full} REPLICA IDENTITY FULL")
    conn.execute(f"CREATE TABLE {trunc} (id int PRIMARY KEY, v text)")
    with conn.cursor() as cur:
        cur.executemany(f"INSERT INTO {pk} VALUES (%s, %s, %s, %s, %s, %s)", INITIAL)
        cur.executemany(f"INSERT INTO {full} VALUES (%s, %s, %s)", FULL_ROWS)
        cur.executemany(f"INSERT INTO {trunc} VALUES (%s, %s)", [(i, f"v{i}") for i in range(9)])


def _after(conn: Any, pk: str, full: str, trunc: str) -> None:
    """The transactions committed after the slot (and its snapshot) exists."""
    with conn.transaction():
        conn.execute(
            f"INSERT INTO {pk} VALUES (100, 'new', 7.125, '\\xdeadbeef', "
            "'2024-06-01 10:00:00+02', 'x')"
        )
        conn.execute(f"UPDATE {pk} SET t = 'changed\\there', n = NULL WHERE id = 1")  # big: 'u'
        conn.execute(f"UPDATE {pk} SET ts = '2000-01-01 00:00:00+00' WHERE id BETWEEN 10 AND 15")
    conn.execute(f"UPDATE {pk} SET id = 200, b = '\\x00' WHERE id = 2")  # the key changes
    conn.execute(f"UPDATE {pk} SET id = 300 WHERE id = 5")  # the key, and big unchanged
    conn.execute(f"DELETE FROM {pk} WHERE id IN (3, 29)")
    conn.execute(f"INSERT INTO {full} VALUES (1, 'dup', 1.0), (50, 'fifty', 50)")
    # One of the three identical rows is deleted, another updated.
    one = f"(SELECT ctid FROM {full} WHERE id = 1 LIMIT 1)"
    conn.execute(f"DELETE FROM {full} WHERE ctid = {one}")
    conn.execute(f"UPDATE {full} SET t = 'was dup' WHERE ctid = {one}")
    conn.execute(f"UPDATE {full} SET n = 'NaN' WHERE id = 2")
    conn.execute(f"DELETE FROM {full} WHERE id IN (4, 5)")
    with conn.transaction():
        conn.execute(f"INSERT INTO {trunc} VALUES (100, 'before the truncate')")
        conn.execute(f"TRUNCATE {trunc}")
        conn.execute(f"INSERT INTO {trunc} VALUES (1, 'after'), (2, NULL)")
    conn.execute(f"UPDATE {trunc} SET v = 'again' WHERE id = 2")


def _server_texts(conn: Any, table: str) -> list[list[str | None]]:
    """Every row of ``table`` as the type output functions print its values."""
    columns = [d.name for d in conn.execute(f"SELECT * FROM {table} LIMIT 0").description]
    query = sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(
            sql.SQL("CASE WHEN {0} IS NULL THEN NULL ELSE format('%s', {0}) END").format(
                sql.Identifier(c)
            )
            for c in columns
        ),
        sql.Identifier(table),
    )
    return [list(r) for r in conn.execute(query).fetchall()]


Row = dict[str, Any]


def _expected(meta: dict[str, Any], table: str, texts: list[list[str | None]]) -> list[Row]:
    """The server's rows, each value converted as the Spark side converts that text."""
    described = next(t for t in meta["snapshot"]["tables"] if t["name"] == table)
    relation = meta_relation(described)
    decoder = ChangeDecoder(relations=[relation])
    types = decoder.column_types(f"public.{table}")
    rows = []
    for values in texts:
        row: Row = {}
        special = {}
        for (name, column), text in zip(types.items(), values, strict=True):
            value, exact = (None, None) if text is None else column.convert(text)
            row[name] = value
            if exact is not None:
                special[name] = exact
        row["_special"] = special
        rows.append(row)
    return sorted(rows, key=repr)


def _materialized(rows: list[Row]) -> list[Row]:
    for r in rows:
        r.pop("_commit_lsn")
        r["_special"] = dict(r["_special"] or [])
    return sorted(rows, key=repr)


def _check(got: list[Row], expected: list[Row], where: object) -> None:
    if not same(got, expected):
        differ = [(g, e) for g, e in zip(got, expected, strict=False) if not same(g, e)]
        raise AssertionError(f"{where}: {len(got)} rows, {len(expected)} expected; {differ[:2]}")


@pytest.fixture(scope="module")
def recordings(
    pg_server: Server, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[dict[str, Path], dict[str, list[list[str | None]]], tuple[str, ...]]]:
    """Two recordings of the same work (text and binary tuple data), each made with
    record --snapshot after the initial rows, and the server's tables at the end."""
    tag = uuid.uuid4().hex[:8]
    tables = (f"sp_{tag}_pk", f"sp_{tag}_full", f"sp_{tag}_trunc")
    publication = f"sp_pub_{tag}"
    out = tmp_path_factory.mktemp("snapshot_pg")
    paths: dict[str, Path] = {}
    with pg_server.connect() as conn:
        try:
            for binary in (False, True):
                name = "binary" if binary else "text"
                for table in tables:
                    conn.execute(f"DROP TABLE IF EXISTS {table}")
                conn.execute(f"DROP PUBLICATION IF EXISTS {publication}")
                _create(conn, *tables)
                conn.execute(f"CREATE PUBLICATION {publication} FOR TABLE {', '.join(tables)}")
                slot = f"sp_{tag}_{name}"
                options = {
                    k: str(v)
                    for k, v in pgoutput_options(
                        [publication], proto_version=1, binary=binary or None
                    ).items()
                }
                paths[name] = out / f"{name}.jsonl"
                try:
                    record(
                        pg_server.dsn,
                        slot,
                        paths[name],
                        options,
                        snapshot=True,
                        after_snapshot=lambda: _after(conn, *tables),
                    )
                finally:
                    conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            final = {table: _server_texts(conn, table) for table in tables}
        finally:
            conn.execute(f"DROP PUBLICATION IF EXISTS {publication}")
            for table in tables:
                conn.execute(f"DROP TABLE IF EXISTS {table}")
    yield paths, final, tables


def test_snapshot_plus_changes_applied_equal_the_servers_tables(
    spark: SparkSession,
    recordings: tuple[dict[str, Path], dict[str, list[list[str | None]]], tuple[str, ...]],
    tmp_path: Path,
) -> None:
    """Read with Spark in 1 and 3 partitions and applied to Parquet and to Delta, each
    table (keyed, REPLICA IDENTITY FULL with identical rows, truncated and refilled)
    equals the server's table at the end, value by value; its snapshot rows are the
    initial rows the server held."""
    paths, final, tables = recordings
    pk, full, trunc = tables
    for name, path in paths.items():
        meta = json.loads(path.read_text().splitlines()[0])["meta"]
        initial = {pk: len(INITIAL), full: len(FULL_ROWS), trunc: 9}
        for table in tables:
            expected = _expected(meta, table, final[table])
            for partitions in (1, 3):
                df = (
                    spark.read.format("pgoutput")
                    .option("path", str(path))
                    .option("table", table)
                    .option("partitions", str(partitions))
                    .load()
                    .cache()  # one read for the checks and both targets
                )
                counts = df.groupBy("_op").count().collect()
                assert {r["_op"]: r["count"] for r in counts}["snapshot"] == initial[table]
                snapshot = df.where("_op = 'snapshot'")
                assert snapshot.select("_commit_lsn").distinct().count() == 1
                where = tmp_path / name / table / str(partitions)
                parquet = ParquetTarget(str(where / "parquet"))
                apply_changes(df, parquet, batch_id=0)
                got = _materialized(read_parquet_target(parquet).to_pylist())
                _check(got, expected, (name, table, partitions, "parquet"))
                delta = DeltaTarget(str(where / "delta"))
                apply_changes(df, delta, batch_id=0)
                got = _materialized(DeltaTable(delta.path).to_pyarrow_table().to_pylist())
                _check(got, expected, (name, table, partitions, "delta"))
                if table == pk:  # updates that left the TOASTed value to the snapshot's
                    assert df.where("size(_toast_unchanged) > 0").count() >= 2
                df.unpersist()
    # What the test is about: the identical rows, the TOASTed value kept from the
    # snapshot, and the truncate.
    texts = {r[0]: r for r in final[pk]}
    assert texts["1"][5] == BIG and texts["300"][5] == BIG
    assert sorted(r[1] for r in final[full] if r[0] == "1") == ["dup", "was dup"]
    assert sorted(r[0] for r in final[trunc]) == ["1", "2"]
