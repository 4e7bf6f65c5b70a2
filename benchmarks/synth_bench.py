"""Speed of the synthetic stream generator, against dbldatagen in the same run.

    .venv/bin/python benchmarks/synth_bench.py [--changes 300000,1000000] [--repeat 3]
                                               [--skip-spark]

Prints, for a table of the same shape (int8 key, int4, numeric, nullable text,
timestamptz, text):

* synth, one process: pgoutput events/s and committed changes/s (iterating the
  in-memory (lsn, payload) stream, every payload fully encoded);
* synth, two processes (shards 0/2 and 1/2, as ``--shard`` runs them): total rate;
* dbldatagen on Spark local[2]: rows/s generating the same number of rows into the
  ``noop`` sink (session start-up excluded, planning and generation included);
* synth through Spark, in the same local[2] session: ``spark.read.format("pgoutput")``
  with the ``synth_*`` options, every table of the spec (each read generates the whole
  stream), 2 partitions, into the ``noop`` sink, timed the same way: events/s and
  changes/s of the stream;
* the ratios synth changes/s ÷ dbldatagen rows/s.

Each figure is the best of ``--repeat`` runs (this 2-core VM's wall-clock times vary by
up to 40% from run to run; both sides get the same number of tries), for each stream
size in ``--changes``: dbldatagen's rate grows with the row count (its fixed cost is
spread thinner), so one size alone would flatter one side.
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from codec_bench import best_of  # this directory: one best-of-N timer for the benchmarks

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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


def bench_synth(changes: int, repeat: int) -> tuple[int, float, float, float]:
    """(events in the stream, events/s and changes/s in one process, changes/s in two)."""
    events = _run_shard((changes, 0, 1))
    single = best_of(repeat, lambda: _run_shard((changes, 0, 1)))
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        pool.map(_run_shard, [(1000, 0, 2), (1000, 1, 2)])  # warm up the workers
        total = sum(pool.map(_run_shard, [(changes, 0, 2), (changes, 1, 2)]))
        double = best_of(repeat, lambda: pool.map(_run_shard, [(changes, 0, 2), (changes, 1, 2)]))
    assert total == events
    return events, events / single, changes / single, changes / double


def start_spark() -> SparkSession:
    import os
    import sys

    from pyspark.sql import SparkSession

    import pgwire_mock.spark

    # Spark's Python workers must run this interpreter (the one with dbldatagen and
    # pgwire_mock).
    os.environ["PYSPARK_PYTHON"] = sys.executable

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("synth-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    pgwire_mock.spark.register(spark)
    return spark


def bench_dbldatagen(spark: SparkSession, rows: int, repeat: int) -> float:
    import dbldatagen as dg

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
    return rows / best_of(
        repeat, lambda: spec.build().write.format("noop").mode("overwrite").save()
    )


def bench_synth_spark(
    spark: SparkSession, changes: int, events: int, repeat: int
) -> tuple[float, float]:
    """(events/s, changes/s) of the stream read through ``format("pgoutput")`` straight
    from the spec: every table (each read generates the whole stream), into ``noop``."""
    from pgwire_mock.synth import parse_spec

    tables = [t.qualified_name for t in parse_spec(SPEC_TEXT).tables]
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "spec.yaml"
        spec.write_text(SPEC_TEXT)

        def read_all(count: int) -> None:
            for table in tables:
                (
                    spark.read.format("pgoutput")
                    .option("synth_spec", str(spec))
                    .option("synth_seed", "42")
                    .option("synth_changes", str(count))
                    .option("table", table)
                    .option("partitions", "2")
                    .load()
                    .write.format("noop")
                    .mode("overwrite")
                    .save()
                )

        read_all(2000)  # warm-up: the Python workers start
        elapsed = best_of(repeat, lambda: read_all(changes))
    return events / elapsed, changes / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", default="300000,1000000", help="comma-separated sizes")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-spark", action="store_true")
    args = parser.parse_args()
    sizes = [int(x) for x in args.changes.split(",")]
    spark = None if args.skip_spark else start_spark()
    try:
        for changes in sizes:
            report(spark, changes, args.repeat)
    finally:
        if spark is not None:
            spark.stop()


def report(spark: SparkSession | None, changes: int, repeat: int) -> None:
    events, events_s, changes_s, changes_2p = bench_synth(changes, repeat)
    print(f"--- {changes:,} changes ({events:,} events), best of {repeat}")
    print(f"synth, 1 process : {events_s:12,.0f} events/s  {changes_s:12,.0f} changes/s")
    print(f"synth, 2 shards  : {changes_2p:12,.0f} changes/s total")
    if spark is None:
        return
    rows_s = bench_dbldatagen(spark, changes, repeat)
    spark_events_s, spark_changes_s = bench_synth_spark(spark, changes, events, repeat)
    print(f"dbldatagen local[2]: {rows_s:10,.0f} rows/s")
    print(
        f"synth via Spark local[2]: {spark_events_s:12,.0f} events/s  "
        f"{spark_changes_s:12,.0f} changes/s"
    )
    print(f"ratio synth 1 process / dbldatagen : {changes_s / rows_s:.2f}x")
    print(f"ratio synth 2 shards  / dbldatagen : {changes_2p / rows_s:.2f}x")
    print(f"ratio synth via Spark / dbldatagen : {spark_changes_s / rows_s:.2f}x", flush=True)


if __name__ == "__main__":
    main()
