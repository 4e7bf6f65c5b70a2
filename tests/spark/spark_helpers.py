"""Shared by the Spark-side tests: golden recordings and value comparison."""

from __future__ import annotations

import math
from pathlib import Path

from pgwire_mock.spark import DecodeOptions
from pgwire_mock.streamfile import read_stream

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden"
# The types scenario stores 2-D arrays in c_int4_2d; PostgreSQL does not say so.
TYPES_OPTIONS = DecodeOptions(array_dims={"c_int4_2d": 2})


def golden(major: int, scenario: str, option_set: str) -> Path:
    return GOLDEN / f"pg{major}" / f"{scenario}.{option_set}.jsonl"


def entries(path: Path) -> list[tuple[int, bytes]]:
    with path.open("rb") as f:
        return [(e.lsn, e.payload) for e in read_stream(f, str(path))]


def same(a: object, b: object) -> bool:
    """Equality where NaN equals NaN, through lists and dicts."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def normalized(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """Rows sorted by their text, with NaN made comparable."""
    return sorted(rows, key=repr)
