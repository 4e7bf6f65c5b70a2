"""decode_text on 1 MB hostile values, per type, against two peers in the same run.

    .venv/bin/python benchmarks/decode_text_adversarial.py [--size 1048576] [--repeat 3]
        [--types int4,_int4,...] [--no-arrays] [--clock wall|cpu]

For every OID: each input family of tests/codec/adversarial_values.py (the inputs the
scaling test bounds) is decoded at 1/16 of --size, and the slowest family is then built
at --size characters and timed, the best of --repeat runs. Peers, measured on the same
machine in the same run:

  benign   the same decoder on a valid value of the same size (an array of distinct
           typical elements, a long text/bytea/json value); "-" for types that have no valid
           value that long (an int4 is at most a few characters plus whitespace)
  psycopg  psycopg's own text loader for the OID (the C one from psycopg-binary where it
           has one) on the same hostile input; "-" where it has no loader

--clock cpu times with the process's CPU time instead of the wall clock, for a machine
shared with other jobs (both peers are timed the same way, so the ratios hold).

A hostile input should cost about what a benign one of the same size does (ratio ~1 or
below); the old backtracking parsers made it thousands of times more.

A second table takes arrays per element type, in ms per MB of array (text or binary
form), against the target of 50 ms per MB and against psycopg's array loader on the
same input (the C one from psycopg-binary where it has one):

  hostile   the slowest hostile input family above
  repeated  one typical element repeated (what most hostile arrays are)
  distinct  every element different (the codec decodes each distinct text once)
  binary    the distinct array in binary form (decode_binary)

A third table takes binary arrays of elements whose decoded value dwarfs their bytes
(BINARY_HOSTILE: numerics whose display scale pads them with zeros), the slowest family.
The last one times interval's valid "array of distinct numbers" against its Interval
objects made alone from their fields: the floor under any decoder that returns them.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import struct
import sys
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from datetime import time as dtime
from decimal import Decimal
from ipaddress import ip_interface, ip_network
from pathlib import Path
from typing import Any, Final
from uuid import UUID

# The hostile inputs are the scaling test's own (tests/codec/adversarial_values.py).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "codec"))

from adversarial_values import MAKERS

from codec.errors import DecodeError
from codec.values import (
    TYPES,
    Interval,
    decode_binary,
    decode_text,
    encode_binary,
    encode_text,
    type_by_name,
)
from codec.values._interval import intervals

# A typical value per scalar type, for the benign arrays.
SAMPLES: dict[str, object] = {
    "bool": True,
    "int2": 1234,
    "int4": 123456,
    "int8": 1234567890123,
    "oid": 16384,
    "float4": 1.5,
    "float8": 1234.5678,
    "numeric": Decimal("1234.5678"),
    "text": "some text",
    "varchar": "some text",
    "bpchar": "some text",
    "name": "a_name",
    "char": "c",
    "bytea": b"\x00\x01binary",
    "uuid": UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    "json": '{"a": [1, 2]}',
    "jsonb": '{"a": [1, 2]}',
    "macaddr": "08:00:2b:01:02:03",
    "inet": ip_interface("192.168.0.1/24"),
    "cidr": ip_network("10.0.0.0/8"),
    "date": date(2024, 6, 1),
    "time": dtime(12, 34, 56),
    "timetz": dtime(12, 34, 56, tzinfo=UTC),
    "timestamp": datetime(2024, 6, 1, 12, 34, 56),
    "timestamptz": datetime(2024, 6, 1, 12, 34, 56, tzinfo=UTC),
    "interval": Interval(1, 2, 3_000_000),
}


PEER_SCREEN_LIMIT = 0.2  # seconds at 1/16 of the size


def peer_unfit(peer: Callable[[Any], object], make: Callable[[int], Any], size: int) -> str | None:
    """Why ``peer`` is not run on the ``size`` input ``make`` builds, as the figure shown
    instead, or None. Some of psycopg's pure-Python array loaders are far from linear on
    these inputs in time (a second at 1/16 of a MB) or in memory (quadratic: 250 MB at
    1/16, past the machine's memory at the full size), so it is screened at 1/16 and 1/8
    of the size first, and a time that more than triples when the input doubles stops it.
    """
    sixteenth = best(peer, make(size // 16), 1)
    if sixteenth > PEER_SCREEN_LIMIT:
        return f"{sixteenth:.1f}s@1/16"
    eighth = best(peer, make(size // 8), 1)
    if eighth > 3 * sixteenth and eighth > 0.01:
        return f"{eighth:.2f}s@1/8^"
    return None


# The i-th of many distinct values per scalar type, for arrays whose elements differ.
DISTINCT: dict[str, Callable[[int], object]] = {
    "bool": lambda i: i % 2 == 0,
    "int2": lambda i: i % 60000 - 30000,
    "int4": lambda i: i * 7919,
    "int8": lambda i: i * 1_000_000_007,
    "oid": lambda i: i,
    "float4": lambda i: i / 8,
    "float8": lambda i: i * 1.37,
    "numeric": lambda i: Decimal(i).scaleb(-2),
    "text": lambda i: f"text {i}",
    "varchar": lambda i: f"text {i}",
    "bpchar": lambda i: f"text {i}",
    "name": lambda i: f"name_{i}",
    "char": lambda i: chr(33 + i % 90),
    "bytea": lambda i: i.to_bytes(4, "big"),
    "uuid": lambda i: UUID(int=i * 0x9E3779B97F4A7C15),
    "json": lambda i: f'{{"a": {i}}}',
    "jsonb": lambda i: f'{{"a": {i}}}',
    "macaddr": lambda i: ":".join(f"{b:02x}" for b in i.to_bytes(6, "big")),
    "inet": lambda i: ip_interface((i + (10 << 24), 24)),
    "cidr": lambda i: ip_network((i << 8, 24)),
    "date": lambda i: date(2000, 1, 1) + timedelta(days=i % 2_900_000),
    "time": lambda i: dtime(i // 3600 % 24, i // 60 % 60, i % 60, i % 1000 * 1000),
    "timetz": lambda i: dtime(i // 3600 % 24, i // 60 % 60, i % 60, tzinfo=UTC),
    "timestamp": lambda i: datetime(2000, 1, 1) + timedelta(seconds=i * 7919),
    "timestamptz": lambda i: datetime(2000, 1, 1, tzinfo=UTC) + timedelta(microseconds=i * 7919),
    "interval": lambda i: Interval(i % 13, i % 31, i * 1_000_003),
}
TARGET_MS_PER_MB = 50.0


def benign(oid: int, size: int) -> str | None:
    """A valid text value of about ``size`` characters, or None if the type has none."""
    info = TYPES[oid]
    if info.is_array:
        return encode_text(oid, distinct_elements(info.element_oid, size))
    if info.name in ("text", "varchar", "bpchar", "name"):
        return "a" * size
    if info.name == "bytea":
        return "\\x" + "ab" * (size // 2)
    if info.name in ("json", "jsonb"):
        return "[" + ",".join(['{"a": 1}'] * (size // 9)) + "]"
    return None


def distinct_elements(element_oid: int, size: int) -> list[object]:
    """Distinct values whose array text is about ``size`` characters."""
    make = DISTINCT[TYPES[element_oid].name]
    values: list[object] = []
    length = 2
    while length < size:
        value = make(len(values))
        values.append(value)
        length += len(encode_text(element_oid, value)) + 1
    return values


def repeated_elements(element_oid: int, size: int) -> list[object]:
    """One typical value repeated, the array text about ``size`` characters."""
    sample = SAMPLES[TYPES[element_oid].name]
    return [sample] * (size // (len(encode_text(element_oid, sample)) + 1))


CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}
TIMER = {"now": time.perf_counter}  # main() sets the --clock chosen


def best(decode: Callable[[Any], object], text: Any, repeat: int) -> float:
    """Seconds, the best of ``repeat`` runs; a refusal counts as done."""
    shortest = float("inf")
    for _ in range(repeat):
        now = TIMER["now"]
        start = now()
        with contextlib.suppress(Exception):
            decode(text)
        shortest = min(shortest, now() - start)
    return shortest


def codec_decoder(oid: int) -> Callable[[str], object]:
    def decode(text: str) -> object:
        try:
            return decode_text(oid, text)
        except DecodeError:
            return None

    return decode


def psycopg_decoder(oid: int, binary: bool = False) -> Callable[[Any], object] | None:
    try:
        import psycopg
    except ImportError:
        return None
    form = psycopg.pq.Format.BINARY if binary else psycopg.pq.Format.TEXT
    loader_class: Any = psycopg.adapters.get_loader(oid, form)
    if loader_class is None:
        return None
    loader = loader_class(oid, None)
    if binary:
        return loader.load  # type: ignore[no-any-return]
    return lambda text: loader.load(text.encode())


@functools.cache
def screened_worst(oid: int, size: int) -> str:
    """The slowest hostile family for ``oid`` at 1/16 of ``size`` (the work is linear,
    so the slowest stays the slowest), each the best of three runs; both tables time
    the same one."""
    decode, screen = codec_decoder(oid), max(1, size // 16)
    screened = {name: best(decode, make(screen), 3) for name, make in MAKERS.items()}
    return max(screened, key=lambda name: screened[name])


def ms_per_mb(seconds: float, length: int) -> float:
    return seconds * 1e3 * (1 << 20) / max(1, length)


def peer_text(oid: int, binary: bool, value: Any, ours: float, repeat: int) -> str:
    """psycopg's ms per MB on the same input, and our time over its time."""
    peer = psycopg_decoder(oid, binary)
    if peer is None:
        return f" {'-':>8} {'-':>6}"
    theirs = best(peer, value, repeat)
    return f" {ms_per_mb(theirs, len(value)):8.1f} {ours / theirs:6.2f}"


def array_table(size: int, repeat: int, wanted: set[str]) -> None:
    print()
    print(
        f"arrays, ms per MB of array (target {TARGET_MS_PER_MB:.0f}), per element type;"
        " psycopg = its array loader on the same input, ratio = ours / psycopg"
    )
    print(
        f"{'element':12} {'hostile':>8} {'repeated':>9} {'distinct':>9} {'/target':>7}"
        f" {'psycopg':>8} {'ratio':>6} {'binary':>8} {'/target':>7} {'psycopg':>8} {'ratio':>6}"
        "  hostile family"
    )
    for oid in sorted(TYPES):
        info = TYPES[oid]
        if not info.is_array or (wanted and info.name not in wanted):
            continue
        element = info.element_oid
        decode = codec_decoder(oid)
        worst = screened_worst(oid, size)
        hostile_text = MAKERS[worst](size)
        hostile = ms_per_mb(best(decode, hostile_text, repeat), len(hostile_text))
        same = encode_text(oid, repeated_elements(element, size))
        repeated = ms_per_mb(best(decode, same, repeat), len(same))
        values = distinct_elements(element, size)
        text, data = encode_text(oid, values), encode_binary(oid, values)
        # Timed without the inputs' values alive: the collector's passes over 300,000
        # such objects of the benchmark's own added up to 20 ms to a run that makes an
        # object per element.
        del values
        text_s = best(decode, text, repeat)
        binary_s = best(functools.partial(decode_binary, oid), data, repeat)
        distinct, binary = ms_per_mb(text_s, len(text)), ms_per_mb(binary_s, len(data))
        print(
            f"{TYPES[element].name:12} {hostile:8.1f} {repeated:9.1f} {distinct:9.1f}"
            f" {distinct / TARGET_MS_PER_MB:7.2f}"
            + peer_text(oid, False, text, text_s, repeat)
            + f" {binary:8.1f} {binary / TARGET_MS_PER_MB:7.2f}"
            + peer_text(oid, True, data, binary_s, repeat)
            + f"  {worst}",
            flush=True,
        )


_NUMERIC_HEAD: Final = struct.Struct("!hhHH")  # ndigits, weight, sign, dscale


def _numeric_element(weight: int, dscale: int) -> Callable[[int], bytes]:
    """The i-th distinct binary numeric of two digits at ``weight`` and ``dscale``."""
    return lambda i: (
        _NUMERIC_HEAD.pack(2, weight, 0, dscale)
        + struct.pack("!HH", i % 9999 + 1, i // 9999 % 10000)
    )


# Binary elements whose decoded value is far larger than their bytes: display scales
# that pad a 12-byte numeric with zeros (numeric(200,100) prints 1.5 with 99 of them).
BINARY_HOSTILE: dict[str, dict[str, Callable[[int], bytes]]] = {
    "numeric": {
        "scale 100": _numeric_element(0, 100),
        "weight 32767, scale 1": _numeric_element(32767, 1),
        "scale 16383": _numeric_element(0, 0x3FFF),
    },
}


def binary_array(element_oid: int, make: Callable[[int], bytes], size: int) -> bytes:
    """A one-dimensional binary array of distinct ``make(i)`` elements, ~``size`` bytes."""
    first = make(0)
    count = max(1, size // (4 + len(first)))
    head = struct.pack("!iiIii", 1, 0, element_oid, count, 1)
    return head + b"".join(struct.pack("!i", len(e)) + e for e in map(make, range(count)))


def binary_hostile_table(size: int, repeat: int, wanted: set[str]) -> None:
    print()
    print(
        "binary arrays of hostile elements, ms per MB of array; psycopg's binary loader"
        " on the same input (screened at 1/16 of the size)"
    )
    print(f"{'element':12} {'slowest family':24} {'ms/MB':>8} {'/target':>7} {'psycopg':>12}")
    for name, families in BINARY_HOSTILE.items():
        if wanted and name not in wanted and f"_{name}" not in wanted:
            continue
        element = type_by_name(name)
        decode = functools.partial(decode_binary, element.array_oid)
        small = {f: binary_array(element.oid, m, size // 16) for f, m in families.items()}
        worst = max(small, key=lambda f: best(decode, small[f], 1))
        data = binary_array(element.oid, families[worst], size)
        ours = ms_per_mb(best(decode, data, repeat), len(data))
        peer = psycopg_decoder(element.array_oid, binary=True)
        theirs = "-"
        if peer is not None:
            make = functools.partial(binary_array, element.oid, families[worst])
            theirs = peer_unfit(peer, make, size) or (
                f"{ms_per_mb(best(peer, data, repeat), len(data)):.1f}"
            )
        print(
            f"{name:12} {worst:24} {ours:8.1f} {ours / TARGET_MS_PER_MB:7.2f} {theirs:>12}",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1 << 20, help="characters per value")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (best kept)")
    parser.add_argument("--types", default="", help="comma-separated type names (default all)")
    parser.add_argument("--no-arrays", action="store_true", help="skip the per-element array table")
    parser.add_argument(
        "--clock", choices=sorted(CLOCKS), default="wall", help="wall time or process CPU time"
    )
    args = parser.parse_args(argv)
    TIMER["now"] = CLOCKS[args.clock]
    wanted = {t.strip() for t in args.types.split(",") if t.strip()}
    oids = [o for o in sorted(TYPES) if not wanted or TYPES[o].name in wanted]
    print(
        f"decode_text, {args.size} characters per value, best of {args.repeat}, {args.clock} clock"
    )
    print(
        f"{'type':13} {'slowest hostile input':28} {'ms':>8} {'benign ms':>10} {'ratio':>6}"
        f" {'psycopg ms':>11} {'ratio':>6}"
    )
    for oid in oids:
        decode = codec_decoder(oid)
        worst = screened_worst(oid, args.size)
        hostile = MAKERS[worst](args.size)
        ours = best(decode, hostile, args.repeat)
        valid = benign(oid, args.size)
        benign_s = best(decode, valid, args.repeat) if valid is not None else None
        peer = psycopg_decoder(oid)
        peer_text = f" {'-':>11} {'-':>6}"
        if peer is not None:
            unfit = peer_unfit(peer, MAKERS[worst], args.size)
            if unfit:
                peer_text = f" {unfit:>11} {'-':>6}"
            else:
                peer_s = best(peer, hostile, args.repeat)
                peer_text = f" {peer_s * 1e3:11.1f} {ours / peer_s:6.2f}"
        print(
            f"{TYPES[oid].name:13} {worst:28} {ours * 1e3:8.1f} "
            + (
                f"{benign_s * 1e3:10.1f} {ours / benign_s:6.2f}"
                if benign_s
                else f"{'-':>10} {'-':>6}"
            )
            + peer_text,
            flush=True,
        )
    if not args.no_arrays:
        array_table(args.size, args.repeat, wanted)
        binary_hostile_table(args.size, args.repeat, wanted)
        if not wanted or "_interval" in wanted or "interval" in wanted:
            interval_floor(args.size, args.repeat)
    return 0


def interval_floor(size: int, repeat: int) -> None:
    """The Interval objects of interval's slowest valid family made alone, from their
    fields, the cheapest way the codec knows (intervals(): empty instances, slots
    filled by C-level passes): what no decoder returning them can go below."""
    oid = type_by_name("interval").array_oid
    text = MAKERS["array of distinct numbers"](size)
    made = decode_text(oid, text)
    fields = [[v.months for v in made], [v.days for v in made], [v.microseconds for v in made]]
    del made
    ours = ms_per_mb(best(codec_decoder(oid), text, repeat), len(text))
    alone = ms_per_mb(best(lambda f: intervals(*f), fields, repeat), len(text))
    print()
    print("interval, array of distinct numbers (valid): decoded vs its Interval objects made alone")
    print(f"{'decoded':>10} {'objects':>10} {'rest':>8}   ms per MB")
    print(f"{ours:10.1f} {alone:10.1f} {ours - alone:8.1f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
