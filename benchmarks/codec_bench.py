"""Codec throughput, with pypgoutput measured on the same messages in the same run.

    .venv/bin/python benchmarks/codec_bench.py [--repeat 5] [--synthetic 200000]

Streams measured:
  captured   every pgoutput payload in tests/data/golden (PostgreSQL 14-17, all options)
  synthetic  a seeded v1 text stream of transactions over two tables (realistic rows)

For each stream: decode and encode rate (messages/s, MB/s) with codec.pgoutput. Then,
on the messages pypgoutput understands (v1 text Begin, Commit, Relation, Insert,
Update, Delete, Truncate), both decoders decode the same payload list and the ratio of
messages/s is printed. Before timing, the two decoders' outputs are cross-checked so a
decoder that fails fast cannot win. Each figure is the best of --repeat runs.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from codec.pgoutput import (
    Begin,
    Commit,
    Decoder,
    Delete,
    Insert,
    PgOutputMessage,
    Relation,
    RelationColumn,
    Truncate,
    Update,
    encode,
)

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "data" / "golden"
PYPGOUTPUT_TAGS = frozenset(b"BCRIUDT")


def load_captured() -> tuple[list[list[bytes]], list[bytes]]:
    """All golden streams (one payload list per file) and the v1 text payloads among them."""
    streams: list[list[bytes]] = []
    v1_text: list[bytes] = []
    for path in sorted(GOLDEN.glob("pg*/*.jsonl")):
        payloads: list[bytes] = []
        options: dict[str, Any] = {}
        with path.open() as lines:
            for line in lines:
                record = json.loads(line)
                if "meta" in record:
                    options = record["meta"].get("options", {})
                    continue
                payloads.append(bytes.fromhex(record["data"]))
        streams.append(payloads)
        plain = str(options.get("proto_version")) == "1" and str(
            options.get("binary", "false")
        ).lower() in ("false", "off", "0")
        if plain:
            v1_text += [p for p in payloads if p[0] in PYPGOUTPUT_TAGS]
    return streams, v1_text


def synthetic_stream(changes: int, seed: int = 1) -> list[bytes]:
    """A v1 text stream: Relation messages, then transactions of 1-20 changes."""
    rng = random.Random(seed)
    orders = Relation(
        16384,
        "public",
        "orders",
        "d",
        (
            RelationColumn(1, "id", 20, -1),
            RelationColumn(0, "customer", 1043, 68),
            RelationColumn(0, "amount", 1700, 655366),
            RelationColumn(0, "created_at", 1184, -1),
            RelationColumn(0, "status", 25, -1),
            RelationColumn(0, "note", 25, -1),
        ),
    )
    items = Relation(
        16390,
        "public",
        "items",
        "f",
        (
            RelationColumn(0, "order_id", 20, -1),
            RelationColumn(0, "sku", 25, -1),
            RelationColumn(0, "qty", 23, -1),
        ),
    )
    out: list[PgOutputMessage] = [orders, items]
    lsn = 0x1_0000_0000
    when = 785_000_000_000_000
    xid = 1000
    made = 0

    def order_row(key: int) -> tuple[str | None, ...]:
        return (
            str(key),
            f"customer-{rng.randrange(10_000)}",
            f"{rng.randrange(100_000)}.{rng.randrange(100):02d}",
            f"2024-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d} "
            f"{rng.randrange(24):02d}:{rng.randrange(60):02d}:00.{rng.randrange(10**6):06d}+00",
            rng.choice(["new", "paid", "shipped", "cancelled"]),
            None if rng.random() < 0.5 else "leave at the door " * rng.randrange(1, 4),
        )

    while made < changes:
        xid += 1
        size = rng.randrange(1, 21)
        lsn += 64
        begin_at = lsn
        body: list[PgOutputMessage] = []
        for _ in range(size):
            lsn += rng.randrange(40, 400)
            key = rng.randrange(1_000_000)
            pick = rng.random()
            if pick < 0.5:
                body.append(Insert(16384, order_row(key)))
            elif pick < 0.7:
                body.append(Insert(16390, (str(key), f"SKU-{rng.randrange(999)}", "2")))
            elif pick < 0.85:
                body.append(Update(16384, order_row(key)))
            elif pick < 0.9:
                body.append(Update(16384, order_row(key + 1), key_tuple=(str(key), *[None] * 5)))
            elif pick < 0.99:
                body.append(Delete(16384, key_tuple=(str(key), *[None] * 5)))
            else:
                body.append(Truncate(0, (16390,)))
        lsn += 48
        when += rng.randrange(1000, 100_000)
        out += [Begin(lsn, when, xid), *body, Commit(0, lsn, lsn + 48, when)]
        made += size
        del begin_at
    return [encode(m) for m in out]


def best_of(repeat: int, run: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def decode_all(streams: Sequence[Sequence[bytes]]) -> None:
    for payloads in streams:
        decode = Decoder().decode
        for payload in payloads:
            decode(payload)


def pypgoutput_decoders() -> dict[int, Any]:
    from pypgoutput import decoders as pd

    return {
        ord("B"): pd.Begin,
        ord("C"): pd.Commit,
        ord("R"): pd.Relation,
        ord("I"): pd.Insert,
        ord("U"): pd.Update,
        ord("D"): pd.Delete,
        ord("T"): pd.Truncate,
    }


def pypgoutput_all(payloads: Sequence[bytes], table: dict[int, Any]) -> None:
    for payload in payloads:
        table[payload[0]](payload)


def cross_check(payloads: Sequence[bytes], table: dict[int, Any]) -> None:
    """Both decoders must agree on what matters before their speed is compared."""
    decode = Decoder().decode
    for payload in payloads:
        ours = decode(payload)
        theirs = table[payload[0]](payload)
        if isinstance(ours, Insert | Update | Delete):
            assert theirs.relation_id == ours.relation_oid, (ours, theirs)
        if isinstance(ours, Insert):
            values = [c.col_data for c in theirs.new_tuple.column_data]
            assert values == [v if isinstance(v, str) else None for v in ours.new_tuple]
        if isinstance(ours, Begin):
            assert theirs.tx_xid == ours.xid
        if isinstance(ours, Relation):
            assert theirs.relation_name == ours.relation_name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--synthetic", type=int, default=200_000, help="changes to generate")
    args = parser.parse_args()

    captured, captured_v1 = load_captured()
    synthetic = synthetic_stream(args.synthetic)
    print(f"python {sys.version.split()[0]}; best of {args.repeat} runs\n")

    print(
        f"{'stream':<12}{'messages':>10}{'MB':>8}{'decode msg/s':>15}{'MB/s':>8}"
        f"{'encode msg/s':>15}{'MB/s':>8}"
    )
    for name, streams in (("captured", captured), ("synthetic", [synthetic])):
        count = sum(len(s) for s in streams)
        if not count:
            print(f"{name:<12}{'(none: run pgwire-mock capture)':>40}")
            continue
        size = sum(len(p) for s in streams for p in s) / 1e6
        # Decode is timed before the decoded messages are kept for the encode run: a
        # heap of a million live objects makes every cyclic-GC pass slower, which would
        # measure this script rather than the codec.
        t_decode = best_of(args.repeat, lambda streams=streams: decode_all(streams))
        flat = [m for s in streams for d in [Decoder()] for m in map(d.decode, s)]
        t_encode = best_of(args.repeat, lambda flat=flat: [m.encode() for m in flat])
        del flat
        gc.collect()
        print(
            f"{name:<12}{count:>10,}{size:>8.1f}{count / t_decode:>15,.0f}{size / t_decode:>8.1f}"
            f"{count / t_encode:>15,.0f}{size / t_encode:>8.1f}"
        )

    table = pypgoutput_decoders()
    print("\nversus pypgoutput 0.0.3 on the same v1 text B/C/R/I/U/D/T messages:")
    print(f"{'stream':<12}{'messages':>10}{'ours msg/s':>14}{'pypgoutput msg/s':>18}{'ratio':>8}")
    for name, payloads in (
        ("captured", captured_v1),
        ("synthetic", [p for p in synthetic if p[0] in PYPGOUTPUT_TAGS]),
    ):
        if not payloads:
            continue
        cross_check(payloads, table)
        t_ours = best_of(args.repeat, lambda payloads=payloads: decode_all([payloads]))
        t_theirs = best_of(args.repeat, lambda payloads=payloads: pypgoutput_all(payloads, table))
        n = len(payloads)
        ratio = t_theirs / t_ours
        print(f"{name:<12}{n:>10,}{n / t_ours:>14,.0f}{n / t_theirs:>18,.0f}{ratio:>7.1f}x")

    # ru_maxrss is in KiB on Linux. Not tracemalloc: tracing every allocation would
    # slow the timed loops several-fold.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak resident memory: {peak:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
