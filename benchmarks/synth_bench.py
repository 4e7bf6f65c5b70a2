"""Speed of the synthetic stream generator, against dbldatagen in the same run.

    .venv/bin/python benchmarks/synth_bench.py [--changes 300000] [--skip-spark]

Prints, for a table of the same shape (int8 key, int4, numeric, nullable text,
timestamptz, text):

* synth, one process: pgoutput events/s and committed changes/s (iterating the
  in-memory (lsn, payload) stream, every payload fully encoded);
* synth, two processes (shards 0/2 and 1/2, as ``--shard`` runs them): total rate;
* dbldatagen on Spark local[2]: rows/s generating the same number of rows into the
  ``noop`` sink (session start-up excluded, planning and generation included);
* the ratios synth changes/s ÷ dbldatagen rows/s.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time

SPEC_TEXT = """
tables:
  - name: public.orders
    columns:
      - {name: id, type: int8, key: true}
      - {name: customer, type: int4}
      - {name: amount, type: numeric}
      - {name: status, type: text, null_ratio: 0.1}
      - {name: created, type: timestamptz}
      - {name: note, type: text}
operations: {insert: 0.6, update: 0.25, delete: 0.15}
"""


def _synth(changes: int):  # type: ignore[no-untyped-def]
    from pgwire_mock.synth import Synth, parse_spec

    return Synth(parse_spec(SPEC_TEXT), 42, changes)


def _run_shard(args: tuple[int, int, int]) -> int:
    from pgwire_mock.synth import Shard

    changes, k, n = args
    return sum(1 for _ in _synth(changes).stream(Shard(k, n)))


def bench_synth(changes: int) -> tuple[float, float, float]:
    start = time.perf_counter()
    events = _run_shard((changes, 0, 1))
    single = time.perf_counter() - start
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        pool.map(_run_shard, [(1000, 0, 2), (1000, 1, 2)])  # warm up the workers
        start = time.perf_counter()
        total = sum(pool.map(_run_shard, [(changes, 0, 2), (changes, 1, 2)]))
        double = time.perf_counter() - start
    assert total == events
    return events / single, changes / single, changes / double


def bench_dbldatagen(rows: int) -> float:
    import os
    import sys

    import dbldatagen as dg
    from pyspark.sql import SparkSession

    # Spark's Python workers must run this interpreter (the one with dbldatagen).
    os.environ["PYSPARK_PYTHON"] = sys.executable

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("synth-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        spec = (
            dg.DataGenerator(spark, rows=rows, partitions=2, randomSeed=42)
            .withIdOutput()
            .withColumn("customer", "int", minValue=1, maxValue=1 << 20, random=True)
            .withColumn("amount", "decimal(12,2)", minValue=-1e6, maxValue=1e6, random=True)
            .withColumn(
                "status", "string", values=["new", "paid", "sent"], percentNulls=0.1, random=True
            )
            .withColumn(
                "created",
                "timestamp",
                begin="2020-01-01 00:00:00",
                end="2024-12-31 23:59:59",
                interval="1 second",
                random=True,
            )
            .withColumn("note", "string", template=r"\\w \\w \\w", random=True)
        )
        spec.build().write.format("noop").mode("overwrite").save()  # warm-up
        start = time.perf_counter()
        spec.build().write.format("noop").mode("overwrite").save()
        return rows / (time.perf_counter() - start)
    finally:
        spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=300_000)
    parser.add_argument("--skip-spark", action="store_true")
    args = parser.parse_args()
    events_s, changes_s, changes_2p = bench_synth(args.changes)
    print(f"synth, 1 process : {events_s:12,.0f} events/s  {changes_s:12,.0f} changes/s")
    print(
        f"synth, 2 shards  : {changes_2p:12,.0f} changes/s total "
        f"({changes_2p / changes_s:.2f}x one process)"
    )
    if args.skip_spark:
        return
    rows_s = bench_dbldatagen(args.changes)
    print(f"dbldatagen local[2]: {rows_s:10,.0f} rows/s")
    print(f"ratio synth 1 process / dbldatagen : {changes_s / rows_s:.2f}x")
    print(f"ratio synth 2 shards  / dbldatagen : {changes_2p / rows_s:.2f}x")


if __name__ == "__main__":
    main()
