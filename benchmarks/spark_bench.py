"""Speed and memory of the Spark side on a synthetic recording.

    .venv/bin/python benchmarks/spark_bench.py [--changes 2000000] [--partitions 2]
        [--cases read,apply,stream] [--stream-changes 400000] [--stream-warm 400000]
        [--pg-version 17]

One run generates ``--changes`` committed changes of examples/synth-spec.yaml (seed 1)
as a JSON Lines recording, then measures:

(a) read: ``spark.read.format("pgoutput")`` of every table of the spec, to typed rows,
    into the ``noop`` sink (Spark ``local[2]``; the driver's scan and planning included,
    session start-up and a small warm-up read excluded), against the codec decoding the
    same recording in this one process (``streamfile.read_stream`` + ``pgoutput.Decoder``
    over every payload). Both as committed changes/s; the ratio Spark / codec (target
    >= 1x). Spark reads one table per query, so each query decodes the whole file.
(b) apply: the same reads followed by ``apply_changes`` to a Parquet target, one batch
    per table (routed, materialised and written on the executors), against (a)'s read
    time: the ratio materialise / read (target <= 2x).
(c) proof: each materialised Parquet table is compared, key by key and value by value,
    with the generator's expected final state (``--no-verify`` skips it; not timed).
(d) memory: the peak RSS of this process (``getrusage``), the JVM's peak (``VmHWM`` of
    the pid py4j reports) and the peak of the JVM plus its Python workers, sampled every
    0.2 s.
(e) stream: ``spark.readStream.format("pgoutput")`` of ``public.accounts`` (the spec's
    wide table) under ``Trigger.AvailableNow`` with ``max_rows_per_batch``
    ``--stream-batch``, every batch counted in ``foreachBatch``: from ``pgwire-mock
    serve`` replaying a recording of ``--stream-changes`` changes, and from a
    provisioned PostgreSQL ``--pg-version`` after a SQL workload making about as many
    changes to a table of the same columns; against the decoder alone
    (``ChangeDecoder`` turning the same recording's rows into Arrow batches in this one
    process). Two figures per stream: *end to end*, every row over the time from
    start() to the query's end (the source runner's start-up, the wait for the first
    batch's rows and every batch's planning and commit included), and *steady state*,
    the rows of the batches after the first over those batches' ``triggerExecution``
    time (from ``query.recentProgress``, as Spark's ``processedRowsPerSecond``). Before
    them a warm-up query streams ``--stream-warm`` other changes (seed + 1), so that the
    JVM has compiled its row and planning paths as a long-running stream's JVM has (it
    still compiles during the measured run: Spark's JIT takes minutes to settle).
    Targets: >= 50,000 changes/s from the fake, the decoder alone at most 1.5x as fast;
    both are printed for both figures, the end-to-end one first. The fake's rows must
    equal the decoder's. The CPU time of each process during the stream from the fake
    is printed (sampled from /proc, the sampler's own time on its own line).
    SPARK_BENCH_PROGRESS=1 prints each batch's durations.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
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


def batch_case(spark, tmp: Path, args: argparse.Namespace, apply: bool) -> None:  # type: ignore[no-untyped-def]
    """(a) to (d)."""
    from pgwire_mock.spark import ParquetTarget, apply_changes

    recording = tmp / "stream.jsonl"
    tables, gen_s = generate(recording, args.changes, args.seed)
    size_mb = recording.stat().st_size / 1e6
    print(f"recording: {args.changes:,} changes, {size_mb:,.0f} MB, generated in {gen_s:.1f} s")

    messages, codec_s = codec_decode(recording)
    codec_rate = args.changes / codec_s
    print(f"codec, 1 process : {codec_s:8.1f} s  {messages:,} messages")

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
        if apply
    }
    sampler.stop()
    # Before the check, which loads the expected state and the materialised tables.
    driver_peak = _proc_kib(os.getpid(), "VmHWM")
    jvm_peak = _proc_kib(jvm_pid, "VmHWM")
    verdicts = {} if args.no_verify or not apply else verify(tmp, tables, args.changes, args.seed)

    print()
    print(f"{'step':<34}{'seconds':>10}{'changes/s':>14}")
    print(f"{'codec decode, 1 process':<34}{codec_s:>10.1f}{codec_rate:>14,.0f}")
    for t in tables:
        print(f"{'spark read ' + t:<34}{read_s[t]:>10.1f}")
    print(f"{'spark read, all tables (noop)':<34}{spark_read:>10.1f}{spark_rate:>14,.0f}")
    spark_apply = sum(apply_s.values())
    for t, seconds in apply_s.items():
        print(f"{'spark read+apply ' + t:<34}{seconds:>10.1f}")
    if apply:
        rate = args.changes / spark_apply
        print(f"{'spark read+apply, all tables':<34}{spark_apply:>10.1f}{rate:>14,.0f}")
    print()
    read_ratio = spark_rate / codec_rate
    print(f"{'ratio':<44}{'value':>8}{'target':>10}")
    print(f"{'(a) spark read / codec decode (changes/s)':<44}{read_ratio:>7.2f}x{'>= 1x':>10}")
    if apply:
        apply_ratio = spark_apply / spark_read
        print(f"{'(b) materialise / read only (time)':<44}{apply_ratio:>7.2f}x{'<= 2x':>10}")
    for table, verdict in verdicts.items():
        print(f"(c) {table}: {verdict}")
    print()
    print("(d) peak memory (generation, decode, read and apply; the check excluded):")
    print(f"  driver (this process, VmHWM)       {driver_peak / 1024:8,.0f} MiB")
    print(f"  JVM (VmHWM, pid {jvm_pid})".ljust(38) + f"{jvm_peak / 1024:8,.0f} MiB")
    print(f"  JVM + Python workers (sampled)     {sampler.peak / 1024:8,.0f} MiB")


# --- (e) stream ---------------------------------------------------------------------

STREAM_TABLE = "public.accounts"  # the spec's wide table: 7 columns, 22 Arrow fields
STREAM_OPTIONS = {
    "slot": "bench",
    "publication": "synth",
    "proto_version": "4",
    "streaming": "parallel",
    "two_phase": "true",
    "messages": "true",
}


def decoder_alone(path: Path, table: str) -> tuple[int, float]:
    """The peer of the stream: ChangeDecoder over the recording's payloads (read into
    memory first), every row of ``table`` converted to Arrow, in this one process."""
    from pgwire_mock.spark.decode import ChangeDecoder, DecodeOptions
    from pgwire_mock.streamfile import read_stream

    with path.open("rb") as f:
        entries = [(e.lsn, e.payload) for e in read_stream(f, str(path))]
    start = time.perf_counter()
    decoder = ChangeDecoder(DecodeOptions(tables=frozenset({table})))
    rows = 0
    for lsn, payload in entries:
        decoder.feed(lsn, payload)
        if decoder.has_batches:
            rows += sum(b.num_rows for b in decoder.take())
    rows += sum(b.num_rows for b in decoder.flush())
    return rows, time.perf_counter() - start


def serve_fake(path: Path) -> tuple[subprocess.Popen[str], int]:
    """``pgwire-mock serve`` of the recording in its own process, slot "bench" at its start."""
    cli = Path(sys.executable).with_name("pgwire-mock")
    server = subprocess.Popen(
        [str(cli), "serve", "--port", "0", "--script", str(path), "--slot", "bench"],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert server.stderr is not None
    for line in server.stderr:
        match = re.search(r"listening on [0-9.]+:([0-9]+)", line)
        if match:
            threading.Thread(target=server.stderr.read, daemon=True).start()  # drain
            return server, int(match.group(1))
    raise SystemExit(f"pgwire-mock serve did not start: exit {server.wait()}")


# What the fake's recording does to public.accounts, in PostgreSQL's own terms: per
# step an insert, every second step an update, every seventh a delete, a commit every
# third step: ~1.64 changes per step, transactions of ~5 changes.
WORKLOAD = """
CREATE TABLE public.accounts (id int8 PRIMARY KEY, owner text, balance numeric,
    tags text[], profile jsonb, notes text, updated_at timestamptz);
CREATE PUBLICATION synth FOR TABLE public.accounts;
SELECT pg_create_logical_replication_slot('bench', 'pgoutput');
"""
STEPS = """
DO $$
BEGIN
  FOR i IN 1..{steps} LOOP
    INSERT INTO public.accounts VALUES (i, 'owner ' || i, i * 1.25,
        ARRAY['red', 'tag ' || i], jsonb_build_object('k', i, 'name', 'n' || i),
        repeat('note ', 20), now());
    IF i % 2 = 0 THEN
      UPDATE public.accounts SET balance = balance + 1, updated_at = now() WHERE id = i - 1;
    END IF;
    IF i % 7 = 0 THEN DELETE FROM public.accounts WHERE id = i - 3; END IF;
    IF i % 3 = 0 THEN COMMIT; END IF;
  END LOOP;
END $$;
"""


class Rate:
    """A stream's rows and seconds end to end (start() to the query's end), and in the
    steady state: the batches after the first, by their triggerExecution time."""

    def __init__(self, rows: int, seconds: float, progress: list[dict]) -> None:  # type: ignore[type-arg]
        self.rows, self.seconds = rows, seconds
        later = progress[1:]
        self.steady_rows = sum(p["numInputRows"] for p in later)
        self.steady_s = sum(p["durationMs"]["triggerExecution"] for p in later) / 1000

    @property
    def rate(self) -> float:
        return self.rows / self.seconds

    @property
    def steady(self) -> float:
        return self.steady_rows / self.steady_s if self.steady_s else float("nan")


def stream_rate(spark, dsn: str, options: dict[str, str], checkpoint: Path) -> Rate:  # type: ignore[no-untyped-def]
    """readStream of STREAM_TABLE from ``dsn`` under Trigger.AvailableNow, each batch
    counted in foreachBatch."""
    reader = spark.readStream.format("pgoutput").option("dsn", dsn).option("table", STREAM_TABLE)
    for name, value in options.items():
        reader = reader.option(name, value)
    df = reader.load()
    counts: list[int] = []
    start = time.perf_counter()
    query = (
        df.writeStream.foreachBatch(lambda frame, _id: counts.append(frame.count()))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.perf_counter() - start
    if query.exception() is not None:
        raise SystemExit(f"stream from {dsn}: {query.exception()}")
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    if os.environ.get("SPARK_BENCH_PROGRESS"):
        for p in progress:
            print(f"  batch {p['batchId']}: {p['numInputRows']:,} rows, {p['durationMs']}")
    return Rate(sum(counts), seconds, progress)


# What each process of a local[2] stream does, by its command line.
STREAM_ROLES = (
    ("python_streaming_source_runner", "source runner (pump thread, planning, pickling)"),
    ("pyspark.worker", "Python workers (unpickling, conversion to Arrow)"),
    ("pyspark.daemon", "other Spark Python processes"),
    ("java", "JVM (driver and executors, JIT, GC)"),
    ("serve", "pgwire-mock serve"),
)


class CpuSampler(threading.Thread):
    """CPU seconds (user + system) of each process under ``root`` while it runs, sampled
    every 0.1 s (a process that ends loses at most its last 0.1 s), summed by role. The
    process tree is walked once a second (walking all of /proc every 0.1 s cost this
    process ~0.3 s of CPU a run, taken from the stream it measures); ``own`` is the
    sampler's own CPU time."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.names: dict[int, str] = {}
        self.pids: list[int] = []
        self.own = 0.0
        self._done = threading.Event()
        self._sample(initial=True)

    def _sample(self, initial: bool = False, walk: bool = True) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        if walk:
            self.pids = _descendants(self.root)
        for pid in self.pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                if pid not in self.names:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                    self.names[pid] = cmdline.replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            cpu = (int(fields[11]) + int(fields[12])) / tick
            self.first.setdefault(pid, cpu if initial else 0.0)
            self.last[pid] = cpu

    def run(self) -> None:
        start = time.thread_time()
        ticks = 0
        while not self._done.wait(0.1):
            ticks += 1
            self._sample(walk=ticks % 10 == 0)
        self.own = time.thread_time() - start

    def stop(self) -> dict[str, float]:
        self._done.set()
        self.join()
        self._sample()
        out: dict[str, float] = {}
        for pid, cpu in self.last.items():
            name = self.names.get(pid, "")
            role = "this process (foreachBatch)" if pid == self.root else "other"
            role = next((r for key, r in STREAM_ROLES if key in name), role)
            out[role] = out.get(role, 0.0) + cpu - self.first[pid]
        if self.root in self.last:
            out["this process (foreachBatch)"] -= self.own
            out["this process: the CPU sampler itself"] = self.own
        return out


def stream_case(spark, tmp: Path, args: argparse.Namespace) -> list[str]:  # type: ignore[no-untyped-def]
    """(e): readStream from the fake and from PostgreSQL, and the decoder alone."""
    from conformance import provision

    recording = tmp / "stream-source.jsonl"
    generate(recording, args.stream_changes, args.seed)
    options = {**STREAM_OPTIONS, "max_rows_per_batch": str(args.stream_batch)}
    dec_rows, dec_s = decoder_alone(recording, STREAM_TABLE)

    # Warm-up: the Python workers, and the JVM's row and planning paths (see the
    # module docstring); other changes than the measured ones.
    warm = tmp / "stream-warm.jsonl"
    generate(warm, args.stream_warm, args.seed + 1)
    server, port = serve_fake(warm)
    try:
        dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
        stream_rate(spark, dsn, options, tmp / "ckpt-warm")
    finally:
        server.terminate()
        server.wait()

    server, port = serve_fake(recording)
    try:
        fake_dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
        sampler = CpuSampler(os.getpid())
        sampler.start()
        fake = stream_rate(spark, fake_dsn, options, tmp / "ckpt-fake")
        cpu = sampler.stop()
    finally:
        server.terminate()
        server.wait()
    print(f"stream from the fake: {fake.rows:,} rows in {fake.seconds:.1f} s", flush=True)
    if fake.rows != dec_rows:
        raise SystemExit(f"the stream from the fake gave {fake.rows} rows, the decoder {dec_rows}")

    lines = []
    with provision.provide(args.pg_version) as server_pg:
        with server_pg.connect() as conn:
            for statement in WORKLOAD.split(";")[:-1]:
                conn.execute(statement.encode())
            steps = round(fake.rows / (1 + 1 / 2 + 1 / 7))
            conn.execute(STEPS.format(steps=steps).encode())
        pg = stream_rate(spark, server_pg.replication_dsn, options, tmp / "ckpt-pg")
        pg_name = f"PostgreSQL {server_pg.full_version}"

    dec_rate = dec_rows / dec_s
    lines.append(
        f"(e) stream of {STREAM_TABLE}, Trigger.AvailableNow, local[2], "
        f"max_rows_per_batch {args.stream_batch:,}, counted in foreachBatch, after a "
        f"warm-up stream of {args.stream_warm:,} changes:"
    )
    lines.append(
        f"{'step':<46}{'rows':>10}{'seconds':>9}{'rows/s':>9}"
        f"{'steady rows':>13}{'seconds':>9}{'rows/s':>9}"
    )
    lines.append(
        f"{'decoder alone (ChangeDecoder -> Arrow)':<46}"
        f"{dec_rows:>10,}{dec_s:>9.1f}{dec_rate:>9,.0f}"
    )
    for name, r in (
        ("readStream from the fake (pgwire-mock serve)", fake),
        (f"readStream from {pg_name}", pg),
    ):
        lines.append(
            f"{name:<46}{r.rows:>10,}{r.seconds:>9.1f}{r.rate:>9,.0f}"
            f"{r.steady_rows:>13,}{r.steady_s:>9.1f}{r.steady:>9,.0f}"
        )
    lines.append(
        "(end to end: start() to the query's end; steady: the batches after the first, "
        "by their triggerExecution)"
    )
    lines.append(f"{'ratio':<60}{'value':>8}{'target':>12}")
    for label, rate in (("end to end", fake.rate), ("steady state", fake.steady)):
        lines.append(
            f"{f'(e1) stream from the fake, changes/s, {label}':<60}{rate:>8,.0f}{'>= 50,000':>12}"
        )
        lines.append(
            f"{f'(e2) decoder alone / stream from the fake, {label}':<60}"
            f"{dec_rate / rate:>7.2f}x{'<= 1.5x':>12}"
        )
    lines.append(
        f"{'(e3) stream from PostgreSQL / from the fake, end to end':<60}"
        f"{pg.rate / fake.rate:>7.2f}x"
    )
    lines.append(
        f"CPU seconds during the stream from the fake, by process ({os.cpu_count()} cores, "
        f"{fake.seconds:.1f} s wall):"
    )
    for role, seconds in sorted(cpu.items(), key=lambda item: -item[1]):
        if seconds >= 0.05:
            lines.append(f"  {role:<52}{seconds:>6.2f}")
    lines.append(f"  {'total':<52}{sum(cpu.values()):>6.2f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=2_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=2, help="per table read")
    parser.add_argument("--no-verify", action="store_true", help="skip the exactness check")
    parser.add_argument(
        "--cases", default="read,apply,stream", help="comma list of read, apply, stream"
    )
    parser.add_argument("--stream-changes", type=int, default=400_000)
    parser.add_argument("--stream-batch", type=int, default=100_000, help="max_rows_per_batch")
    parser.add_argument(
        "--stream-warm", type=int, default=400_000, help="changes of the stream's warm-up"
    )
    parser.add_argument("--pg-version", type=int, default=17, help="PostgreSQL for (e)")
    args = parser.parse_args()
    cases = set(args.cases.split(","))
    if not cases <= {"read", "apply", "stream"}:
        parser.error(f"--cases: read, apply or stream, not {args.cases}")
    if "apply" in cases:
        cases.add("read")  # (b) is against (a)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import pgwire_mock.spark

    tmp = Path(tempfile.mkdtemp(prefix="pgwm-spark-bench-"))
    try:
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
        if "read" in cases:
            batch_case(spark, tmp, args, "apply" in cases)
        if "stream" in cases:
            print()
            print("\n".join(stream_case(spark, tmp, args)))
        spark.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
