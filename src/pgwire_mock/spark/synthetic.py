"""``spark.read.format("pgoutput")`` over a generator spec: synthetic changes straight into
Spark, with no recording on disk.

>>> df = (spark.read.format("pgoutput")                        # doctest: +SKIP
...       .option("synth_spec", "examples/synth-spec.yaml")
...       .option("synth_seed", "7").option("synth_changes", "1000000")
...       .option("table", "public.accounts").option("partitions", "8").load())

The driver reads and validates the spec and plans one partition per generator shard
(:meth:`~pgwire_mock.synth.Synth.shard_blocks`); each executor generates its shard in
memory from the spec's text and decodes it like a recording partition. The driver never
generates the stream: the Relation messages come from the generator's per-table payloads.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pyarrow as pa
import yaml
from pyspark.sql.datasource import InputPartition

from codec.pgoutput import Decoder, Relation, Type
from pgwire_mock.spark.decode import ChangeDecoder, DecodeOptions, cast_batches, qualified_name
from pgwire_mock.spark.errors import SparkSideError
from pgwire_mock.synth import Shard, SpecError, Synth, SynthError, parse_spec

__all__ = [
    "SYNTH_OPTIONS",
    "SynthPartition",
    "is_synthetic",
    "plan_synthetic",
    "read_synthetic",
]

SYNTH_OPTIONS: Final = ("synth_spec", "synth_seed", "synth_changes")


@dataclass(frozen=True, slots=True)
class SynthPartition(InputPartition):
    """Shard ``shard`` of ``shards`` of the stream of (``spec``, ``seed``, ``changes``).

    ``spec`` is the spec's text (executors may not see the driver's files), always YAML
    (a JSON spec is shipped re-dumped as YAML). ``relations`` and ``types`` preload the
    decoder's caches, so a shard may use a table whose Relation an earlier shard sent."""

    spec: str
    seed: int
    changes: int
    shard: int
    shards: int
    relations: tuple[Relation, ...]
    types: tuple[Type, ...]


def is_synthetic(options: Mapping[str, str]) -> bool:
    """Whether the read is of a generator spec rather than of recordings."""
    return "synth_spec" in options


def plan_synthetic(
    options: Mapping[str, str], table: str, partitions: int
) -> tuple[list[SynthPartition], Relation, dict[int, tuple[str, str]]]:
    """One partition per generator shard (at most one per block, at least one), with
    ``table``'s Relation and the user types (OID -> (namespace, name)) for its schema.

    Raises :class:`SparkSideError` with one line for an unreadable or invalid spec, a
    bad ``synth_seed`` / ``synth_changes``, or a table the spec does not have."""
    if "path" in options:
        raise SparkSideError('pgoutput: give either "path" or "synth_spec", not both')
    path = options.get("synth_spec", "")
    if not path:
        raise SparkSideError('pgoutput: option "synth_spec" needs the path of a spec file')
    text = _spec_text(path)
    seed = _integer(options, "synth_seed", "0", "an integer")
    changes = _integer(options, "synth_changes", None, "a positive integer")
    if changes < 1:
        raise SparkSideError(f"pgoutput: synth_changes must be a positive integer, got {changes}")
    try:
        synth = Synth(parse_spec(text, source=path), seed, changes)
    except SpecError as err:
        raise SparkSideError(f"pgoutput: bad synth_spec: {err}") from None
    except SynthError as err:
        raise SparkSideError(f"pgoutput: synth_spec {path}: {err}") from None
    relations = tuple(_relation(t.relation) for t in synth.tables)
    table = qualified_name(table)
    found = [r for r, t in zip(relations, synth.tables, strict=True) if t.name == table]
    if not found:
        names = ", ".join(t.name for t in synth.tables)
        raise SparkSideError(f"pgoutput: table {table} is not in synth_spec {path} ({names})")
    shards = max(1, min(partitions, synth.blocks))
    # Specs use built-in types only: the stream has no Type messages, no user types.
    plans = [SynthPartition(text, seed, changes, k, shards, relations, ()) for k in range(shards)]
    return plans, found[0], {}


def read_synthetic(
    partition: SynthPartition, options: DecodeOptions, arrow: pa.Schema | None = None
) -> Iterator[pa.RecordBatch]:
    """The record batches of one shard, generated in memory and decoded (what an
    executor runs; no Spark needed), cast to ``arrow`` when given."""
    synth = Synth(parse_spec(partition.spec), partition.seed, partition.changes)
    decoder = ChangeDecoder(options, relations=partition.relations, types=partition.types)
    feed = decoder.feed
    for lsn, payload in synth.stream(Shard(partition.shard, partition.shards)):
        feed(lsn, payload)
        if decoder.has_batches:
            yield from cast_batches(decoder.take(), arrow)
    yield from cast_batches(decoder.flush(), arrow)


def _spec_text(path: str) -> str:
    """The spec's text as YAML. A ``.json`` spec (parsed as strict JSON by ``load_spec``)
    is checked as JSON here and shipped as YAML, so executors parse it the same way."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise SparkSideError(f"pgoutput: cannot read synth_spec {path}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise SparkSideError(f"pgoutput: synth_spec {path} is not UTF-8: {err.reason}") from None
    if not path.lower().endswith(".json"):
        return text
    try:
        parse_spec(text, source=path, json_only=True)
    except SpecError as err:
        raise SparkSideError(f"pgoutput: bad synth_spec: {err}") from None
    return yaml.safe_dump(json.loads(text), sort_keys=False)


def _integer(options: Mapping[str, str], name: str, default: str | None, what: str) -> int:
    value = options.get(name, default)
    if value is None:
        raise SparkSideError(f'pgoutput: option "{name}" is required with "synth_spec" ({what})')
    try:
        return int(value)
    except ValueError:
        raise SparkSideError(f"pgoutput: {name} must be {what}, got {value!r}") from None


def _relation(payload: bytes) -> Relation:
    message = Decoder().decode(payload)
    assert isinstance(message, Relation)  # the generator's own Relation payload
    return message
