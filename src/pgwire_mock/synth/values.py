"""Column values for synthetic rows: pools of pre-encoded values, and key encodings.

Encoding a value is the expensive part of a change (``encode_text`` of a timestamp or
an array costs microseconds), so each column gets a *pool*: ``pool_size`` values drawn
once from a generator seeded by (seed, table, column), each kept with its decoded
Python value and its TupleData bytes. A row picks one entry per column. The Python
value is what the codec decodes from those bytes, so an expected state built from the
pool equals what a consumer decodes, type for type.
"""

from __future__ import annotations

import hashlib
import operator
import random
import struct
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from ipaddress import IPv4Interface, IPv4Network
from typing import Final

import numpy as np
import numpy.typing as npt

from codec.values import (
    TYPES,
    Interval,
    TypeInfo,
    decode_binary,
    decode_text,
    encode_binary,
    encode_text,
)
from pgwire_mock.synth.spec import ColumnSpec

__all__ = ["KeyCodec", "PoolEntry", "column_pool", "derive_seed", "mix64", "toast_pool"]

_MASK64: Final = (1 << 64) - 1
_LENGTH = struct.Struct("!i")
_INT4 = struct.Struct("!i")
_INT8 = struct.Struct("!q")
#: ``t`` + length, for text values up to 20 bytes (every int8 printed in decimal).
_TEXT_HEADS: Final = tuple(b"t" + _LENGTH.pack(n) for n in range(21))
_POWERS_OF_TEN: Final = np.array([10**k for k in range(1, 19)], np.int64)  # 10 .. 10**18

#: (Python value, TupleData column bytes: ``n``, or ``t``/``b`` + length + data).
PoolEntry = tuple[object, bytes]

_WORDS: Final = (
    *("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"),
    *("juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo"),
    *("sierra", "tango", "uniform", "victor", "whiskey", "xray", "yankee", "zulu", "amber"),
    *("basalt", "cobalt", "dune", "ember", "fjord", "granite", "harbor", "iris", "jade"),
)


def derive_seed(*parts: object) -> int:
    """A 64-bit seed from ``parts`` (stable across runs and Python versions)."""
    text = "\x1f".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")


def mix64(x: int) -> int:
    """SplitMix64's finaliser: a cheap, well-mixed hash of a 64-bit integer."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def mix64_array(x: npt.NDArray[np.int64] | npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """:func:`mix64` of each element (int64 taken as its two's complement, as
    ``mix64`` masks it): numpy's uint64 arithmetic wraps as the masks do."""
    x = x.view(np.uint64) + _MIX_ADD
    x = (x ^ (x >> _S30)) * _MIX_1
    x = (x ^ (x >> _S27)) * _MIX_2
    mixed: npt.NDArray[np.uint64] = x ^ (x >> _S31)
    return mixed


_MIX_ADD: Final = np.uint64(0x9E3779B97F4A7C15)
_MIX_1: Final = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2: Final = np.uint64(0x94D049BB133111EB)
_S27, _S30, _S31 = np.uint64(27), np.uint64(30), np.uint64(31)


_UUID_HEADS: Final = (b"t" + _LENGTH.pack(36), b"b" + _LENGTH.pack(16))
_UUID_TEXT: Final = b"%08x-%04x-%04x-%04x-%012x\n"
_UUID_BINARY: Final = np.dtype([("high", ">i8"), ("low", ">i8")])


def _uuids(key_ids: list[int], binary: bool) -> list[bytes]:
    """``uuid.UUID(int=id & (2**128 - 1))`` of each id, as bytes (16) or text (36): an id
    is an int64, so its upper 64 bits are all zeros or all ones."""
    ids = np.array(key_ids, np.int64)
    high = ids >> 63  # 0 or -1
    if binary:
        both = np.empty(len(ids), _UUID_BINARY)
        both["high"], both["low"] = high, ids
        raw: list[bytes] = both.view("V16").tolist()
        return raw
    low = ids.view(np.uint64)
    top = high.view(np.uint64)  # (mixing int64 and uint64 would give floats)
    fields = np.stack(
        [
            top & np.uint64(0xFFFFFFFF),
            top & np.uint64(0xFFFF),
            top & np.uint64(0xFFFF),
            (low >> np.uint64(48)) & np.uint64(0xFFFF),
            low & np.uint64(0xFFFFFFFFFFFF),
        ]
    )
    text = (_UUID_TEXT * len(ids) % tuple(fields.T.ravel().tolist())).split(b"\n")
    text.pop()  # the empty piece after the last newline
    return text


def _column_bytes(text_or_binary: str | bytes) -> bytes:
    if isinstance(text_or_binary, str):
        data = text_or_binary.encode("utf-8", "surrogateescape")
        return b"t" + _LENGTH.pack(len(data)) + data
    return b"b" + _LENGTH.pack(len(text_or_binary)) + text_or_binary


def encode_entry(info: TypeInfo, value: object, binary: bool) -> PoolEntry:
    """``value`` as the column bytes pgoutput sends, with the value a consumer decodes."""
    if value is None:
        return None, b"n"
    if binary:
        data = encode_binary(info.oid, value)
        return decode_binary(info.oid, data), _column_bytes(data)
    text = encode_text(info.oid, value)
    return decode_text(info.oid, text), _column_bytes(text)


# --- random values by type --------------------------------------------------------------

_EPOCH = datetime(2020, 1, 1)


def _words(rng: random.Random, most: int = 4) -> str:
    count = 1 + int(rng.random() * most)
    return " ".join(_WORDS[int(rng.random() * len(_WORDS))] for _ in range(count))


def _float4(rng: random.Random) -> float:
    # float4 values must be exactly representable in 32 bits.
    value: float = struct.unpack("!f", struct.pack("!f", (rng.random() - 0.5) * 1e4))[0]
    return value


def _timestamp(rng: random.Random) -> datetime:
    return _EPOCH + timedelta(microseconds=rng.getrandbits(47))


_SCALARS: Final[dict[str, Callable[[random.Random], object]]] = {
    "bool": lambda r: r.random() < 0.5,
    "int2": lambda r: r.getrandbits(16) - (1 << 15),
    "int4": lambda r: r.getrandbits(24) - (1 << 20),
    "int8": lambda r: r.getrandbits(48) - (1 << 40),
    "oid": lambda r: r.getrandbits(32),
    "float4": _float4,
    "float8": lambda r: round((r.random() - 0.5) * 1e6, 6),
    "numeric": lambda r: Decimal(r.getrandbits(32) - (1 << 31)).scaleb(-2),
    "text": _words,
    "varchar": _words,
    "bpchar": lambda r: _WORDS[int(r.random() * len(_WORDS))],
    "name": lambda r: _WORDS[int(r.random() * len(_WORDS))],
    "char": lambda r: chr(ord("a") + int(r.random() * 26)),
    "bytea": lambda r: r.randbytes(1 + int(r.random() * 16)),
    "date": lambda r: date(2000, 1, 1) + timedelta(days=r.getrandbits(14)),
    "time": lambda r: time(
        int(r.random() * 24), int(r.random() * 60), int(r.random() * 60), r.getrandbits(19) % 10**6
    ),
    "timetz": lambda r: time(
        int(r.random() * 24),
        int(r.random() * 60),
        int(r.random() * 60),
        tzinfo=timezone(timedelta(hours=int(r.random() * 25) - 12)),
    ),
    "timestamp": _timestamp,
    "timestamptz": lambda r: _timestamp(r).replace(tzinfo=UTC),
    "interval": lambda r: Interval(int(r.random() * 24), int(r.random() * 31), r.getrandbits(36)),
    "uuid": lambda r: uuid.UUID(int=r.getrandbits(128)),
    # jsonb prints objects with ", " and ": " and keys ordered by length, then bytes: this
    # text is already in that form, so json and jsonb columns hold the same values.
    "json": lambda r: (
        f'{{"n": {r.getrandbits(20)}, "ok": {"true" if r.random() < 0.5 else "false"}, '
        f'"tag": "{_WORDS[int(r.random() * len(_WORDS))]}"}}'
    ),
    "inet": lambda r: IPv4Interface((r.getrandbits(32), 32)),
    "cidr": lambda r: IPv4Network((r.getrandbits(24) << 8, 24)),
    "macaddr": lambda r: ":".join(f"{b:02x}" for b in r.randbytes(6)),
}
_SCALARS["jsonb"] = _SCALARS["json"]


def random_value(info: TypeInfo, rng: random.Random) -> object:
    """One random value of type ``info`` (arrays: 0 to 4 elements, a few NULL)."""
    if info.is_array:
        element = TYPES[info.element_oid]
        make = _SCALARS[element.name]
        return [None if rng.random() < 0.1 else make(rng) for _ in range(int(rng.random() * 5))]
    return _SCALARS[info.name](rng)


def column_pool(
    column: ColumnSpec, seed: int, where: str, size: int, binary: bool
) -> tuple[PoolEntry, ...]:
    """``size`` entries for ``column``; about ``null_ratio`` of them are NULL."""
    rng = random.Random(derive_seed(seed, "pool", where))
    nulls = round(size * column.null_ratio)
    entries = [
        encode_entry(column.type, random_value(column.type, rng), binary)
        for _ in range(size - nulls)
    ]
    entries += [(None, b"n")] * nulls
    rng.shuffle(entries)
    return tuple(entries)


def toast_pool(column: ColumnSpec, seed: int, where: str, binary: bool) -> tuple[PoolEntry, ...]:
    """A few TOAST-sized values (``toast_size`` characters or bytes) for ``column``."""
    rng = random.Random(derive_seed(seed, "toast", where))
    out = []
    for _ in range(8):
        if column.type.name == "bytea":
            unit = rng.randbytes(64)
            value: object = (unit * (column.toast_size // 64 + 1))[: column.toast_size]
        else:
            unit_text = _words(rng, 8) + " "
            value = (unit_text * (column.toast_size // len(unit_text) + 1))[: column.toast_size]
        out.append(encode_entry(column.type, value, binary))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class KeyCodec:
    """Turns key ids (ints; negative for rows of rolled-back work) into key values."""

    type_name: str
    binary: bool

    def value(self, key_id: int) -> object:
        name = self.type_name
        if name in ("int4", "int8"):
            return key_id
        if name == "uuid":
            return uuid.UUID(int=key_id & ((1 << 128) - 1))
        return f"k{key_id}"

    def text(self, key_id: int) -> str:
        """The key's value as PostgreSQL prints it."""
        value = self.value(key_id)
        return str(value)

    def many_column_bytes(self, key_ids: list[int]) -> list[bytes]:
        """:meth:`column_bytes` of each id; integer text keys without a call per id."""
        parts = self.many_column_parts(key_ids)
        if len(parts) == 2:
            return list(map(operator.add, *parts))
        return list(parts[0])

    def many_column_parts(self, key_ids: list[int]) -> list[Iterable[bytes]]:
        """:meth:`column_bytes` of each id as one or two pieces per id (one iterable per
        piece), for callers that join them into bigger rows anyway."""
        if self.type_name in ("int4", "int8") and not self.binary and key_ids:
            # All ids printed by one bytes % tuple (measured 2.7x faster than joining
            # str()s), then split; every other step a C-level map.
            digits = (b"%d\n" * len(key_ids) % tuple(key_ids)).split(b"\n")
            digits.pop()  # the empty piece after the last newline
            return [map(_TEXT_HEADS.__getitem__, map(len, digits)), digits]
        if self.type_name == "uuid" and key_ids:
            return [[_UUID_HEADS[self.binary]] * len(key_ids), _uuids(key_ids, self.binary)]
        return [map(self.column_bytes, key_ids)]

    def many_column_sizes(self, key_ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """``len(column_bytes(id))`` of each id; integer text keys by arithmetic."""
        if self.type_name in ("int4", "int8") and not self.binary:
            # 't', a 4-byte length, then the decimal digits (and a sign).
            digits = 1 + np.searchsorted(_POWERS_OF_TEN, np.abs(key_ids), side="right")
            sizes: npt.NDArray[np.int64] = 5 + digits + (key_ids < 0)
            return sizes
        return np.fromiter(map(len, map(self.column_bytes, key_ids.tolist())), np.int64)

    def column_bytes(self, key_id: int) -> bytes:
        name = self.type_name
        if name == "int4":
            if self.binary:
                return b"b\x00\x00\x00\x04" + _INT4.pack(key_id)
            data = b"%d" % key_id
            return _TEXT_HEADS[len(data)] + data  # the hot path: one lookup, one concat
        elif name == "int8":
            if self.binary:
                return b"b\x00\x00\x00\x08" + _INT8.pack(key_id)
            data = b"%d" % key_id
            return _TEXT_HEADS[len(data)] + data
        elif name == "uuid":
            u = uuid.UUID(int=key_id & ((1 << 128) - 1))
            if self.binary:
                return b"b\x00\x00\x00\x10" + u.bytes
            data = str(u).encode()
        else:
            # text and varchar send the same bytes in text and binary form.
            data = f"k{key_id}".encode()
            if self.binary:
                return b"b" + _LENGTH.pack(len(data)) + data
        return b"t" + _LENGTH.pack(len(data)) + data

    def check_range(self, lowest: int, highest: int) -> str | None:
        """Why ids in [lowest, highest] do not fit the key type, or None."""
        if self.type_name == "int4" and (lowest < -(1 << 31) or highest >= 1 << 31):
            return "int4 key column cannot hold that many rows; use int8"
        return None
