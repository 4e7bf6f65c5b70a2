"""Speed and memory of the Spark side on a synthetic recording.

    .venv/bin/python benchmarks/spark_bench.py [--changes 2000000] [--partitions 2]

One run generates ``--changes`` committed changes of examples/synth-spec.yaml (seed 1)
as a JSON Lines recording, then measures:

(a) read: ``spark.read.format("pgoutput")`` of every table of the spec, to typed rows,
    into the ``noop`` sink (Spark ``local[2]``; the driver's scan and planning included,
    session start-up and a small warm-up read excluded), against the codec decoding the
    same recording in this one process (``streamfile.read_stream`` + ``pgoutput.Decoder``
    over every payload). Both as committed changes/s; the ratio Spark / codec (target
    >= 1x). Spark reads one table per query, so each query decodes the whole file.
(b) apply: the same reads followed by ``apply_changes`` to a Parquet target, one batch
    per table (collect, materialise, write), against (a)'s read time: the ratio
    materialise / read (target <= 2x).
(c) proof: each materialised Parquet table is compared, key by key and value by value,
    with the generator's expected final state (``--no-verify`` skips it; not timed).
(d) memory: the peak RSS of this process (``getrusage``), the JVM's peak (``VmHWM`` of
    the pid py4j reports) and the peak of the JVM plus its Python workers, sampled every
    0.2 s.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "examples" / "synth-spec.yaml"


def _proc_kib(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _descendants(root: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(parents.get(pid, []))
    return out


class TreeSampler(threading.Thread):
    """Peak RSS (KiB) of a process and its descendants, summed, sampled every 0.2 s."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.2):
            total = sum(_proc_kib(p, "VmRSS") for p in _descendants(self.pid))
            self.peak = max(self.peak, total)

    def stop(self) -> None:
        self._done.set()
        self.join()


def generate(path: Path, changes: int, seed: int) -> tuple[list[str], float]:
    from pgwire_mock.synth import write_recording

    start = time.perf_counter()
    synth = synthesizer(changes, seed)
    with path.open("w") as out:
        write_recording(out, synth.meta(), synth.stream())
    return [t.name for t in synth.tables], time.perf_counter() - start


def synthesizer(changes: int, seed: int):  # type: ignore[no-untyped-def]
    from pgwire_mock.synth import Synth, load_spec

    return Synth(load_spec(SPEC), seed=seed, changes=changes)


def codec_decode(path: Path) -> tuple[int, float]:
    """Read and decode every payload of ``path`` in this process: (messages, seconds)."""
    from codec.pgoutput import Decoder
    from pgwire_mock.streamfile import read_stream

    start = time.perf_counter()
    decode = Decoder().decode
    count = 0
    with path.open("rb") as f:
        for entry in read_stream(f, str(path)):
            decode(entry.payload)
            count += 1
    return count, time.perf_counter() - start


def verify(tmp: Path, tables: list[str], changes: int, seed: int) -> dict[str, str]:
    """Each materialised table against the generator's expected state."""
    from conformance.spark_check import synthetic_mismatch
    from pgwire_mock.spark import ParquetTarget, read_parquet_target

    state = synthesizer(changes, seed).expected_state()
    out = {}
    for table in tables:
        materialised = read_parquet_target(ParquetTarget(str(tmp / "out" / table)))
        mismatch = synthetic_mismatch(materialised, state, table)
        rows = f"{materialised.num_rows:,} rows"
        out[table] = (
            f"{rows} equal the generator's expected state"
            if mismatch is None
            else (f"MISMATCH: {mismatch}")
        )
    return out


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=2_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=2, help="per table read")
    parser.add_argument("--no-verify", action="store_true", help="skip the exactness check")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import pgwire_mock.spark
    from pgwire_mock.spark import ParquetTarget, apply_changes

    tmp = Path(tempfile.mkdtemp(prefix="pgwm-spark-bench-"))
    try:
        recording = tmp / "stream.jsonl"
        tables, gen_s = generate(recording, args.changes, args.seed)
        size_mb = recording.stat().st_size / 1e6
        print(f"recording: {args.changes:,} changes, {size_mb:,.0f} MB, generated in {gen_s:.1f} s")

        messages, codec_s = codec_decode(recording)
        codec_rate = args.changes / codec_s
        print(f"codec, 1 process : {codec_s:8.1f} s  {messages:,} messages")

        spark = (
            SparkSession.builder.master("local[2]")
            .appName("spark-bench")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.driver.memory", "4g")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        pgwire_mock.spark.register(spark)
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        jvm_pid = int(jvm.java.lang.ProcessHandle.current().pid())
        sampler = TreeSampler(jvm_pid)
        sampler.start()

        def reader(table: str, path: Path):  # type: ignore[no-untyped-def]
            return (
                spark.read.format("pgoutput")
                .option("path", str(path))
                .option("table", table)
                .option("partitions", str(args.partitions))
                .load()
            )

        # Warm-up: Python workers, the data source, the noop sink.
        warm = tmp / "warm.jsonl"
        generate(warm, 2_000, args.seed)
        for table in tables:
            reader(table, warm).write.format("noop").mode("overwrite").save()

        read_s = {
            t: timed(lambda t=t: reader(t, recording).write.format("noop").mode("overwrite").save())
            for t in tables
        }
        spark_read = sum(read_s.values())
        spark_rate = args.changes / spark_read

        apply_s = {
            t: timed(
                lambda t=t: apply_changes(
                    reader(t, recording), ParquetTarget(str(tmp / "out" / t)), batch_id=0
                )
            )
            for t in tables
        }
        spark_apply = sum(apply_s.values())
        sampler.stop()
        verdicts = {} if args.no_verify else verify(tmp, tables, args.changes, args.seed)
        jvm_peak = _proc_kib(jvm_pid, "VmHWM")
        spark.stop()
        driver_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux

        print()
        print(f"{'step':<34}{'seconds':>10}{'changes/s':>14}")
        print(f"{'codec decode, 1 process':<34}{codec_s:>10.1f}{codec_rate:>14,.0f}")
        for t in tables:
            print(f"{'spark read ' + t:<34}{read_s[t]:>10.1f}")
        print(f"{'spark read, all tables (noop)':<34}{spark_read:>10.1f}{spark_rate:>14,.0f}")
        for t in tables:
            print(f"{'spark read+apply ' + t:<34}{apply_s[t]:>10.1f}")
        rate = args.changes / spark_apply
        print(f"{'spark read+apply, all tables':<34}{spark_apply:>10.1f}{rate:>14,.0f}")
        print()
        read_ratio = spark_rate / codec_rate
        apply_ratio = spark_apply / spark_read
        print(f"{'ratio':<44}{'value':>8}{'target':>10}")
        print(f"{'(a) spark read / codec decode (changes/s)':<44}{read_ratio:>7.2f}x{'>= 1x':>10}")
        print(f"{'(b) materialise / read only (time)':<44}{apply_ratio:>7.2f}x{'<= 2x':>10}")
        for table, verdict in verdicts.items():
            print(f"(c) {table}: {verdict}")
        print()
        print("peak memory:")
        print(f"  driver (this process, getrusage)   {driver_peak / 1024:8,.0f} MiB")
        print(f"  JVM (VmHWM, pid {jvm_pid})".ljust(38) + f"{jvm_peak / 1024:8,.0f} MiB")
        print(f"  JVM + Python workers (sampled)     {sampler.peak / 1024:8,.0f} MiB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
