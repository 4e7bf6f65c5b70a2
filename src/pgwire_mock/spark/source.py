"""``spark.read.format("pgoutput")``: recorded pgoutput streams as a Spark DataFrame.

>>> import pgwire_mock.spark
>>> pgwire_mock.spark.register(spark)                          # doctest: +SKIP
>>> df = (spark.read.format("pgoutput")                        # doctest: +SKIP
...       .option("path", "tests/data/golden/pg17/toast.v1.jsonl")
...       .option("table", "public.pgwm_toast").load())

Options:

``path``
    A recording (JSON Lines or wire format, see :mod:`pgwire_mock.streamfile`), a
    directory of them, or several separated by commas. Each file is its own stream.
``table``
    The table to read, ``schema.table`` (a bare name means ``public``). Required.
``partitions``
    How many partitions to cut each file into (default 2). Cuts fall only where no
    transaction is open (no Begin without Commit, no streamed transaction in progress,
    no prepared transaction undecided), so a file with few such points gets fewer.
``array_dims``, ``type_overrides``
    JSON objects, see :class:`~pgwire_mock.spark.decode.DecodeOptions`.
``batch_rows``
    Rows per Arrow record batch (default 4096).

With ``dsn`` (or ``host``, ``port``, ...) instead of ``path`` the source reads a live
walsender, with ``spark.readStream`` only: see :mod:`pgwire_mock.spark.stream`.

Each partition is decoded on an executor from its first byte, with the Relation and
Type messages sent before it (found by the driver's scan) preloaded, and yields Arrow
record batches. The driver's scan decodes only the messages that move transaction
state, Relation and Type; changes are decoded once, on the executors.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructField, StructType

from codec.pgoutput import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Decoder,
    Prepare,
    Relation,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    Type,
)
from codec.values import LSN
from pgwire_mock.spark.decode import (
    KEY_METADATA,
    ChangeDecoder,
    DecodeOptions,
    SchemaChangeError,
    SparkSideError,
    qualified_name,
    table_schema,
)
from pgwire_mock.spark.stream import PgOutputStreamReader, StreamSettings, peek_schema
from pgwire_mock.spark.types import to_spark_type
from pgwire_mock.streamfile import read_stream

__all__ = ["PgOutputDataSource", "StreamPartition", "plan_partitions", "register", "spark_schema"]

# Tags of the messages a driver scan can skip: changes and logical messages.
_SKIPPED: Final = frozenset(b"IUDTMO")


@dataclass(frozen=True, slots=True)
class StreamPartition(InputPartition):
    """Entries ``[start, stop)`` of one file; for JSON Lines, ``offset`` is the byte
    where entry ``start`` begins (wire files are re-read from the start)."""

    path: str
    start: int
    stop: int
    offset: int | None
    relations: tuple[Relation, ...]
    types: tuple[Type, ...]


def register(spark: SparkSession) -> None:
    """Make ``format("pgoutput")`` available in ``spark``."""
    spark.dataSource.register(PgOutputDataSource)


def _files(path: str) -> list[str]:
    out: list[str] = []
    for part in (p.strip() for p in path.split(",")):
        if not part:
            continue
        p = Path(part)
        if p.is_dir():
            out.extend(sorted(str(f) for f in p.iterdir() if f.is_file()))
        elif p.is_file():
            out.append(str(p))
        else:
            raise FileNotFoundError(f"pgoutput: no such file or directory: {part}")
    if not out:
        raise FileNotFoundError(f"pgoutput: no recordings in {path!r}")
    return out


def _is_json_lines(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(1) in (b"{", b" ", b"\t", b"\r", b"\n")


def _json_entries(source: IO[bytes]) -> Iterator[tuple[int, int, bytes]]:
    """(byte offset of the line, lsn, payload) for each entry of a JSON Lines file."""
    offset = source.tell()
    for line in source:
        start, offset = offset, offset + len(line)
        if not line.strip():
            continue
        record = json.loads(line)
        if "meta" in record:
            continue
        lsn = record["lsn"]
        yield (
            start,
            int(LSN.parse(lsn)) if isinstance(lsn, str) else int(lsn),
            bytes.fromhex(record["data"]),
        )


def _entries(path: str) -> Iterator[tuple[int | None, int, bytes]]:
    if _is_json_lines(path):
        with open(path, "rb") as f:
            yield from _json_entries(f)
    else:
        with open(path, "rb") as f:
            for entry in read_stream(f, path):
                yield None, entry.lsn, entry.payload


@dataclass(slots=True)
class _Scan:
    """What the driver learns from one file."""

    count: int
    cuts: list[tuple[int, int | None, tuple[Relation, ...], tuple[Type, ...]]]
    relation: Relation | None
    types_at_relation: dict[int, tuple[str, str]]


def _scan(path: str, table: str) -> _Scan:
    decoder = Decoder()
    relations: dict[int, Relation] = {}
    types: dict[int, Type] = {}
    first: Relation | None = None
    types_at_first: dict[int, tuple[str, str]] = {}
    in_txn = False
    streamed: set[int] = set()
    prepared: set[str] = set()
    cuts: list[tuple[int, int | None, tuple[Relation, ...], tuple[Type, ...]]] = [(0, None, (), ())]
    count = 0
    for offset, _lsn, payload in _entries(path):
        if count == 0:
            cuts[0] = (0, offset, (), ())
        if count and not in_txn and not streamed and not prepared and not decoder.in_stream:
            cuts.append((count, offset, tuple(relations.values()), tuple(types.values())))
        count += 1
        if not payload or payload[0] in _SKIPPED:
            continue
        message = decoder.decode(payload)
        match message:
            case Begin() | BeginPrepare():
                in_txn = True
            case Commit():
                in_txn = False
            case Prepare():
                in_txn = False
                prepared.add(message.gid)
            case CommitPrepared() | RollbackPrepared():
                prepared.discard(message.gid)
            case StreamStart():
                streamed.add(message.xid)
            case StreamCommit():
                streamed.discard(message.xid)
            case StreamAbort() if message.xid == message.subxid:
                streamed.discard(message.xid)
            case StreamPrepare():
                streamed.discard(message.xid)
                prepared.add(message.gid)
            case Relation():
                relations[message.oid] = message
                name = f"{message.namespace or 'pg_catalog'}.{message.relation_name}"
                if name == table:
                    if first is None:
                        first = message
                        types_at_first = {t.oid: (t.namespace, t.name) for t in types.values()}
                    elif (first.replica_identity, first.columns) != (
                        message.replica_identity,
                        message.columns,
                    ):
                        raise SchemaChangeError(
                            f"{path}: table {table} changed schema mid-stream "
                            f"(Relation message #{count}); read the parts before and after "
                            "the change separately"
                        )
            case Type():
                types[message.oid] = message
            case _:
                pass  # Stream Stop, Stream Abort of a subtransaction
    return _Scan(count, cuts, first, types_at_first)


def plan_partitions(path: str, table: str, partitions: int) -> tuple[list[StreamPartition], _Scan]:
    """Cut one file into at most ``partitions`` pieces at transaction boundaries."""
    scan = _scan(path, table)
    chosen: list[tuple[int, int | None, tuple[Relation, ...], tuple[Type, ...]]] = [scan.cuts[0]]
    for j in range(1, max(partitions, 1)):
        target = scan.count * j // partitions
        cut = next((c for c in scan.cuts if c[0] >= target and c[0] > chosen[-1][0]), None)
        if cut is not None and cut[0] < scan.count:
            chosen.append(cut)
    out = []
    for i, (start, offset, relations, types) in enumerate(chosen):
        stop = chosen[i + 1][0] if i + 1 < len(chosen) else scan.count
        out.append(StreamPartition(path, start, stop, offset, relations, types))
    return out, scan


def spark_schema(arrow: pa.Schema) -> StructType:
    """The Spark schema of an Arrow change schema; key columns carry
    ``{"pgoutput.key": true}`` and every column its PostgreSQL type name as metadata."""
    fields = []
    for f in arrow:
        meta = f.metadata or {}
        metadata: dict[str, object] = {}
        if KEY_METADATA in meta:
            metadata["pgoutput.key"] = meta[KEY_METADATA] == b"true"
            metadata["pgoutput.type"] = meta.get(b"pgoutput.type", b"").decode()
        fields.append(StructField(f.name, to_spark_type(f.type), f.nullable, metadata))
    return StructType(fields)


def _options(options: Mapping[str, str]) -> tuple[str, DecodeOptions]:
    table = options.get("table")
    if not table:
        raise SparkSideError('pgoutput: option "table" is required (schema.table)')
    table = qualified_name(table)
    decode_options = DecodeOptions(
        tables=frozenset({table}),
        array_dims=json.loads(options.get("array_dims", "{}")),
        type_overrides=json.loads(options.get("type_overrides", "{}")),
        batch_rows=int(options.get("batch_rows", "4096")),
    )
    return table, decode_options


def _from_walsender(options: Mapping[str, str]) -> bool:
    return "path" not in options and bool(options.get("dsn") or options.get("host"))


class PgOutputDataSource(DataSource):
    """The ``pgoutput`` data source; see the module docstring for its options."""

    @classmethod
    def name(cls) -> str:
        return "pgoutput"

    def schema(self) -> StructType:
        table, options = _options(self.options)
        if _from_walsender(self.options):  # readStream: see pgwire_mock.spark.stream
            self._arrow = peek_schema(StreamSettings.from_options(self.options), table, options)
            return spark_schema(self._arrow)
        files = _files(self.options.get("path", ""))
        self._plans: list[StreamPartition] = []
        relation: Relation | None = None
        user_types: dict[int, tuple[str, str]] = {}
        for path in files:
            parts, scan = plan_partitions(path, table, int(self.options.get("partitions", "2")))
            self._plans.extend(parts)
            if scan.relation is None:
                continue
            if relation is None:
                relation, user_types = scan.relation, scan.types_at_relation
            elif (relation.replica_identity, relation.columns) != (
                scan.relation.replica_identity,
                scan.relation.columns,
            ):
                raise SchemaChangeError(f"table {table} has another schema in {path}")
        if relation is None:
            raise SparkSideError(f"pgoutput: table {table} does not appear in {files}")
        self._arrow = table_schema(relation, user_types, options)
        return spark_schema(self._arrow)

    def reader(self, schema: StructType) -> DataSourceReader:
        if _from_walsender(self.options):
            raise SparkSideError(
                'pgoutput: a walsender ("dsn"/"host") is read with spark.readStream; '
                'spark.read takes recordings ("path")'
            )
        if not hasattr(self, "_plans"):
            self.schema()
        return _Reader(self._plans, dict(self.options), self._arrow)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - PySpark's name
        """``spark.readStream.format("pgoutput")`` from a walsender; see
        :mod:`pgwire_mock.spark.stream`."""
        table, options = _options(self.options)
        # None with a user-given schema: the batches are then handed over uncast.
        arrow: pa.Schema | None = getattr(self, "_arrow", None)
        return PgOutputStreamReader(self.options, table, options, arrow)


class _Reader(DataSourceReader):
    def __init__(
        self, plans: Sequence[StreamPartition], options: dict[str, str], arrow: pa.Schema
    ) -> None:
        self.plans = list(plans)
        self.options = options
        self.arrow = arrow

    def partitions(self) -> Sequence[InputPartition]:
        return self.plans

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, StreamPartition)
        _, options = _options(self.options)
        yield from read_partition(partition, options, self.arrow)


def read_partition(
    partition: StreamPartition, options: DecodeOptions, arrow: pa.Schema | None = None
) -> Iterator[pa.RecordBatch]:
    """The record batches of one partition (what an executor runs; no Spark needed)."""
    decoder = ChangeDecoder(options, relations=partition.relations, types=partition.types)
    remaining = partition.stop - partition.start
    if partition.offset is not None:
        with open(partition.path, "rb") as f:
            f.seek(partition.offset)
            for _offset, lsn, payload in _json_entries(f):
                if remaining <= 0:
                    break
                remaining -= 1
                decoder.feed(lsn, payload)
                yield from _cast(decoder.take(), arrow)
    else:
        with open(partition.path, "rb") as f:
            for index, entry in enumerate(read_stream(f, partition.path)):
                if index < partition.start:
                    continue
                if index >= partition.stop:
                    break
                decoder.feed(entry.lsn, entry.payload)
                yield from _cast(decoder.take(), arrow)
    yield from _cast(decoder.flush(), arrow)


def _cast(batches: list[pa.RecordBatch], arrow: pa.Schema | None) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield batch if arrow is None else batch.cast(arrow)
