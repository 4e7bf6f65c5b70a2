"""The Spark side's materialised tables, turned back into the rows :mod:`conformance.replay`
produces, so that :class:`conformance.checks.SparkTables` can compare them with the
server's tables through the very comparison the ``values`` check uses.

No JVM: the stream goes through :func:`pgwire_mock.spark.decode_stream` (the code Spark's
executors run) and :func:`pgwire_mock.spark.apply_changes` into a Parquet target (the code
``foreachBatch`` runs), and the target is read back with
:func:`pgwire_mock.spark.read_parquet_target`.

Going back from a Spark value to PostgreSQL follows docs/spark.md's type mapping in
reverse: a column that is NULL with a ``_special`` entry takes that entry (the exact
PostgreSQL text, or ``\\x<hex>`` for a user type sent in binary, which the server's send
function must then have produced byte for byte); any other value becomes the
:mod:`codec.values` value it stands for (``struct<months, days, microseconds>`` an
``Interval``, a uuid string a ``UUID``, a string kept as PostgreSQL text its decoded
value...) and is written out with ``encode_text``, so that the comparison decodes both
sides with the same decoder. Nothing is compared as "close enough": a float4 is written as
the shortest text that reads back as the same 32-bit float, which is what PostgreSQL
prints.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import pyarrow as pa

from codec import pgoutput as po
from codec.values import TYPES, Interval, decode_text, encode_text
from conformance.replay import Row
from conformance.subjects import ServerTable, Stream
from pgwire_mock.spark import (
    ParquetTarget,
    SparkSideError,
    apply_changes,
    decode_stream,
    read_parquet_target,
)
from pgwire_mock.synth import ExpectedState

__all__ = [
    "Materialised",
    "SynthRows",
    "expected_synthetic_rows",
    "materialise",
    "materialised_synthetic_rows",
    "spark_rows",
    "synthetic_mismatch",
    "tuple_value",
    "unknown_tables",
]

_FLOAT4: Final = 700
_UUID: Final = 2950
_INTERVAL: Final = 1186


@dataclass(frozen=True, slots=True)
class Materialised:
    """Each table's materialised state (by Relation OID), its qualified name and how many
    change rows it had (a Relation message alone, which PostgreSQL 14 sends for a
    partition published through its root, makes an empty table with no changes)."""

    tables: Mapping[int, pa.Table]
    names: Mapping[int, str]
    changes: Mapping[int, int]


def _relations(stream: Stream) -> dict[str, int]:
    """Qualified table name -> Relation OID, as the stream names them."""
    decoder = po.Decoder()
    out: dict[str, int] = {}
    for message in stream:
        decoded = decoder.decode(message.payload)
        if isinstance(decoded, po.Relation):
            namespace = decoded.namespace or "pg_catalog"
            out[f"{namespace}.{decoded.relation_name}"] = decoded.oid
    return out


def materialise(stream: Stream) -> Materialised:
    """Decode ``stream`` and apply every table's changes to a Parquet target, as one batch.

    Raises :class:`~pgwire_mock.spark.SparkSideError` where the Spark side refuses the
    stream (a schema change, an update on a table without a key...).
    """
    oids = _relations(stream)
    changes = decode_stream((m.lsn, m.payload) for m in stream)
    tables: dict[int, pa.Table] = {}
    counts: dict[int, int] = {}
    with tempfile.TemporaryDirectory(prefix="pgwm-spark-check-") as tmp:
        for index, (name, table) in enumerate(changes.items()):
            target = ParquetTarget(str(Path(tmp) / f"t{index}"))
            apply_changes(table, target, batch_id=0)
            tables[oids[name]] = read_parquet_target(target)
            counts[oids[name]] = table.num_rows
    return Materialised(tables, {oid: name for name, oid in oids.items()}, counts)


def _codec_value(oid: int, value: object) -> object:
    """The :mod:`codec.values` value a Spark value of built-in scalar type ``oid`` holds."""
    if isinstance(value, str):
        if oid == _UUID:
            return uuid.UUID(value)
        # types.py keeps a value as is when the codec decodes the type to a str (the text
        # family, json, macaddr, "char"), else as its PostgreSQL text (time, inet, ...).
        decoded = decode_text(oid, value)
        return value if isinstance(decoded, str) else decoded
    if oid == _INTERVAL and isinstance(value, dict):
        return Interval(value["months"], value["days"], value["microseconds"])
    if oid == _FLOAT4 and isinstance(value, float):
        return float(str(np.float32(value)))
    return value


def _codec_array(element_oid: int, value: object) -> object:
    if isinstance(value, list):
        return [_codec_array(element_oid, item) for item in value]
    return None if value is None else _codec_value(element_oid, value)


def tuple_value(type_oid: int, value: object, special: str | None) -> str | bytes | None:
    """The TupleData form (text, or bytes for a binary user type) of one Spark value."""
    if special is not None:
        if type_oid not in TYPES and special.startswith("\\x"):
            return bytes.fromhex(special[2:])
        return special
    if value is None:
        return None
    if type_oid not in TYPES:
        if not isinstance(value, str):
            raise SparkSideError(f"user type OID {type_oid} holds {type(value).__name__}")
        return value
    info = TYPES[type_oid]
    if info.is_array:
        return encode_text(type_oid, _codec_array(info.element_oid, value))
    return encode_text(type_oid, _codec_value(type_oid, value))


def spark_rows(server: ServerTable, state: pa.Table) -> list[Row]:
    """``state``'s rows as :mod:`conformance.replay` rows of ``server``'s columns.

    Columns the server has and the Spark table lacks (a column list left them out of the
    publication) are left out of the rows, as replay leaves them out.
    """
    present = [
        (name, type_oid)
        for name, type_oid in zip(server.columns, server.type_oids, strict=True)
        if name in state.column_names
    ]
    rows: list[Row] = []
    for record in state.to_pylist():
        special = dict(record["_special"] or [])
        rows.append(
            {
                name: (type_oid, tuple_value(type_oid, record[name], special.get(name)))
                for name, type_oid in present
            }
        )
    return rows


def unknown_tables(materialised: Materialised, tables: Iterable[int]) -> list[str]:
    """Names of the tables that had changes and that the server does not publish."""
    known = set(tables)
    return [
        materialised.names[oid]
        for oid, count in materialised.changes.items()
        if count and oid not in known
    ]


SynthRows = dict[str, dict[str, str | bytes | None]]
"""Key text -> {column: PostgreSQL text}."""


def expected_synthetic_rows(state: ExpectedState, table: str) -> SynthRows:
    """A synthetic stream's final ``table``, from the generator."""
    rows: SynthRows = {}
    key = state.columns[table][0]
    for record in state.records():
        if record["table"] == table:
            row = record["row"]
            rows[str(row[key])] = row
    return rows


def materialised_synthetic_rows(state: pa.Table, expected: ExpectedState, table: str) -> SynthRows:
    """A materialised table (``apply_changes``'s result) in the generator's form, through
    docs/spark.md's mapping in reverse (NULL + ``_special`` included)."""
    names = expected.columns[table]
    oids = expected.type_oids[table]
    rows: SynthRows = {}
    for record in state.to_pylist():
        special = dict(record["_special"] or [])
        row = {
            n: tuple_value(o, record[n], special.get(n)) for n, o in zip(names, oids, strict=True)
        }
        rows[str(row[names[0]])] = row
    return rows


def synthetic_mismatch(state: pa.Table, expected: ExpectedState, table: str) -> str | None:
    """None when the materialised ``table`` holds exactly the generator's rows, keys and
    every value; else what differs first."""
    want = expected_synthetic_rows(expected, table)
    got = materialised_synthetic_rows(state, expected, table)
    missing = sorted(want.keys() - got.keys())[:5]
    extra = sorted(got.keys() - want.keys())[:5]
    if missing or extra:
        return (
            f"{table}: {len(want)} rows expected, {len(got)} materialised; "
            f"missing {missing}, extra {extra}"
        )
    for key, row in want.items():
        if got[key] != row:
            return f"{table} key {key}: {got[key]} != {row}"
    return None
