"""decode_text on 1 MB hostile values, per type, against two peers in the same run.

    .venv/bin/python benchmarks/decode_text_adversarial.py [--size 1048576] [--repeat 3]
        [--types int4,_int4,...]

For every OID: each input family of tests/codec/adversarial_values.py (the inputs the
scaling test bounds) is decoded at 1/16 of --size, and the slowest family is then built
at --size characters and timed, the best of --repeat runs. Peers, measured on the same
machine in the same run:

  benign   the same decoder on a valid value of the same size (an array of typical
           elements, a long text/bytea/json value); "-" for types that have no valid
           value that long (an int4 is at most a few characters plus whitespace)
  psycopg  psycopg's own text loader for the OID (the C one from psycopg-binary where it
           has one) on the same hostile input; "-" where it has no loader

A hostile input should cost about what a benign one of the same size does (ratio ~1 or
below); the old backtracking parsers made it thousands of times more.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable
from datetime import UTC, date, datetime
from datetime import time as dtime
from decimal import Decimal
from ipaddress import ip_interface, ip_network
from pathlib import Path
from typing import Any
from uuid import UUID

# The hostile inputs are the scaling test's own (tests/codec/adversarial_values.py).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "codec"))

from adversarial_values import MAKERS

from codec.errors import DecodeError
from codec.values import TYPES, Interval, decode_text, encode_text

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


def benign(oid: int, size: int) -> str | None:
    """A valid text value of about ``size`` characters, or None if the type has none."""
    info = TYPES[oid]
    if info.is_array:
        element = encode_text(info.element_oid, SAMPLES[TYPES[info.element_oid].name])
        return encode_text(
            oid, [SAMPLES[TYPES[info.element_oid].name]] * (size // (len(element) + 1))
        )
    if info.name in ("text", "varchar", "bpchar", "name"):
        return "a" * size
    if info.name == "bytea":
        return "\\x" + "ab" * (size // 2)
    if info.name in ("json", "jsonb"):
        return "[" + ",".join(['{"a": 1}'] * (size // 9)) + "]"
    return None


def best(decode: Callable[[str], object], text: str, repeat: int) -> float:
    """Seconds, the best of ``repeat`` runs; a refusal counts as done."""
    shortest = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        with contextlib.suppress(Exception):
            decode(text)
        shortest = min(shortest, time.perf_counter() - start)
    return shortest


def codec_decoder(oid: int) -> Callable[[str], object]:
    def decode(text: str) -> object:
        try:
            return decode_text(oid, text)
        except DecodeError:
            return None

    return decode


def psycopg_decoder(oid: int) -> Callable[[str], object] | None:
    try:
        import psycopg
    except ImportError:
        return None
    loader_class: Any = psycopg.adapters.get_loader(oid, psycopg.pq.Format.TEXT)
    if loader_class is None:
        return None
    loader = loader_class(oid, None)
    return lambda text: loader.load(text.encode())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1 << 20, help="characters per value")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (best kept)")
    parser.add_argument("--types", default="", help="comma-separated type names (default all)")
    args = parser.parse_args(argv)
    wanted = {t.strip() for t in args.types.split(",") if t.strip()}
    oids = [o for o in sorted(TYPES) if not wanted or TYPES[o].name in wanted]
    print(f"decode_text, {args.size} characters per value, best of {args.repeat}")
    print(
        f"{'type':13} {'slowest hostile input':28} {'ms':>8} {'benign ms':>10} {'ratio':>6}"
        f" {'psycopg ms':>11} {'ratio':>6}"
    )
    for oid in oids:
        decode = codec_decoder(oid)
        # Screen every family once at 1/16 of the size (the work is linear, so the
        # slowest stays the slowest), then time that one at full size.
        screen = max(1, args.size // 16)
        screened = {name: best(decode, make(screen), 1) for name, make in MAKERS.items()}
        worst = max(screened, key=lambda name: screened[name])
        hostile = MAKERS[worst](args.size)
        ours = best(decode, hostile, args.repeat)
        valid = benign(oid, args.size)
        benign_s = best(decode, valid, args.repeat) if valid is not None else None
        peer = psycopg_decoder(oid)
        peer_text = f" {'-':>11} {'-':>6}"
        if peer is not None:
            # Some of psycopg's pure-Python array loaders are far from linear on these
            # inputs (a second at 64 KB): past that, report the screening size's figure.
            peer_small = best(peer, MAKERS[worst](screen), 1)
            if peer_small > PEER_SCREEN_LIMIT:
                peer_text = f" {f'{peer_small:.1f}s@1/16':>11} {'-':>6}"
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
