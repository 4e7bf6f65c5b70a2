"""Conversions checked against output captured from a real PostgreSQL 15 server.

tests/data/values/vectors.json holds, for each SQL expression in capture.py, what the
server's output function printed (text result format) and its send function sent
(binary result format).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from codec.values import BoundedArray, decode_binary, decode_text, encode_binary, encode_text

_IP_CLASSES = (
    ipaddress.IPv4Interface,
    ipaddress.IPv6Interface,
    ipaddress.IPv4Network,
    ipaddress.IPv6Network,
)


def _ip_class(value: object) -> type | None:
    """The ipaddress class a value is, through the subclass decoding gives."""
    return next((c for c in _IP_CLASSES if isinstance(value, c)), None)


def same(a: object, b: object) -> bool:
    """Structural equality where NaN == NaN, -0.0 != 0.0 and Decimal keeps its scale.

    The property tests import it from here.
    """
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, Decimal) and isinstance(b, Decimal):
        if a.is_nan() or b.is_nan():
            return a.is_nan() and b.is_nan()
        # The same numeric_out text: the value and its display scale, however held.
        return encode_text(1700, a) == encode_text(1700, b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, BoundedArray) and isinstance(b, BoundedArray):
        return a.lower_bounds == b.lower_bounds and same(a.elements, b.elements)
    if _ip_class(a) is not None:
        # A decoded inet or cidr is a subclass of the plain class (codec.values._net).
        return _ip_class(a) is _ip_class(b) and a == b and str(a) == str(b)
    return type(a) is type(b) and a == b


VECTORS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parents[1] / "data" / "values" / "vectors.json").read_text()
)
IDS = [v["sql"] for v in VECTORS]


@pytest.mark.parametrize("vector", VECTORS, ids=IDS)
def test_text_round_trips_server_output(vector: dict[str, Any]) -> None:
    """The server's text output decodes, and encodes back to the same characters."""
    value = decode_text(vector["oid"], vector["text"])
    assert encode_text(vector["oid"], value) == vector["text"]


@pytest.mark.parametrize("vector", VECTORS, ids=IDS)
def test_binary_round_trips_server_output(vector: dict[str, Any]) -> None:
    """The server's send output decodes, and encodes back to the same bytes."""
    data = bytes.fromhex(vector["binary"])
    value = decode_binary(vector["oid"], data)
    assert encode_binary(vector["oid"], value) == data


@pytest.mark.parametrize("vector", VECTORS, ids=IDS)
def test_text_and_binary_agree(vector: dict[str, Any]) -> None:
    """Text and binary forms of one server value decode to the same Python value, and
    each encodes to the other form exactly as the server did."""
    from_text = decode_text(vector["oid"], vector["text"])
    from_binary = decode_binary(vector["oid"], bytes.fromhex(vector["binary"]))
    assert same(from_text, from_binary)
    assert encode_binary(vector["oid"], from_text).hex() == vector["binary"]
    assert encode_text(vector["oid"], from_binary) == vector["text"]


@pytest.mark.parametrize("vector", VECTORS, ids=IDS)
def test_binary_decoding_rejects_truncation_and_trailing_bytes(vector: dict[str, Any]) -> None:
    """Every proper prefix of a binary value, and the value plus a byte, is a DecodeError
    or decodes (some prefixes are valid values: text, bytea), never another exception."""
    from codec.errors import DecodeError

    data = bytes.fromhex(vector["binary"])
    for cut in range(len(data)):
        with contextlib.suppress(DecodeError):
            decode_binary(vector["oid"], data[:cut])
    with contextlib.suppress(DecodeError):
        decode_binary(vector["oid"], data + b"\x00")
