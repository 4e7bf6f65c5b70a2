"""``spark.read.format("pgoutput")``: recorded pgoutput streams as a Spark DataFrame.

>>> import pgwire_mock.spark
>>> pgwire_mock.spark.register(spark)                          # doctest: +SKIP
>>> df = (spark.read.format("pgoutput")                        # doctest: +SKIP
...       .option("path", "tests/data/golden/pg17/toast.v1.jsonl")
...       .option("table", "public.pgwm_toast").load())

Options:

``path``
    A recording (JSON Lines or wire format, see :mod:`pgwire_mock.streamfile`), a
    directory of them, or several separated by commas. Each file is its own stream; a
    file with a snapshot (``record --snapshot``) gives the table's snapshot rows first,
    with ``_op`` ``snapshot`` (:mod:`pgwire_mock.spark.snapshot`).
``table``
    The table to read, ``schema.table`` (a bare name means ``public``). Required.
``partitions``
    How many partitions to cut each file's stream into (default 2). Cuts fall only where
    no transaction is open (no Begin without Commit, no streamed transaction in
    progress, no prepared transaction undecided), so a file with few such points gets
    fewer. A file's snapshot rows of the table get at most as many partitions more.
``array_dims``, ``type_overrides``
    JSON objects, see :class:`~pgwire_mock.spark.decode.DecodeOptions`.
``batch_rows``
    Rows per Arrow record batch (default 4096; 32768 with ``synth_spec``).

With ``synth_spec`` (and ``synth_seed``, ``synth_changes``) instead of ``path`` the
executors generate a synthetic stream themselves, one generator shard per partition
(:mod:`pgwire_mock.spark.synthetic`, docs/synth.md).

With ``dsn`` (or ``host``, ``port``, ...) instead of ``path`` the source reads a live
walsender, with ``spark.readStream`` only: see :mod:`pgwire_mock.spark.stream`.

Each partition is decoded on an executor from its first byte, with the Relation and
Type messages sent before it (found by the driver's scan) preloaded, and yields Arrow
record batches. The driver's scan decodes only the messages that move transaction
state, Relation and Type; changes are decoded once, on the executors.
"""

from __future__ import annotations

import binascii
import bisect
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import StructField, StructType

from codec.pgoutput import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Decoder,
    PgOutputMessage,
    Prepare,
    Relation,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    Type,
)
from pgwire_mock import json_text
from pgwire_mock.spark.decode import (
    KEY_METADATA,
    ChangeDecoder,
    DecodeOptions,
    SchemaChangeError,
    SparkSideError,
    cast_batches,
    qualified_name,
    table_schema,
)
from pgwire_mock.spark.options import int_option, is_synthetic
from pgwire_mock.spark.stream import PgOutputStreamReader, StreamSettings, peek_schema
from pgwire_mock.spark.types import to_spark_type
from pgwire_mock.streamfile import StreamFileError, json_line_hex, read_wire

# snapshot and synthetic convert values (convert.py, which pulls in pandas through
# pyarrow's time zone scalars, ~0.3 s): they are imported where spark.read uses them,
# so readStream's source runner, a fresh process per query, starts without them.
if TYPE_CHECKING:
    from pgwire_mock.spark.snapshot import RecordedSnapshot

__all__ = ["PgOutputDataSource", "StreamPartition", "plan_partitions", "register", "spark_schema"]


@dataclass(frozen=True, slots=True)
class StreamPartition(InputPartition):
    """One piece of one file: the lines (JSON Lines) or CopyData messages (wire) that
    begin in bytes ``[start, stop)``; with the Relation and Type messages sent before
    it."""

    path: str
    start: int
    stop: int
    json_lines: bool
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


def _json_hex(line: bytes, path: str) -> bytes | None:
    """The hex payload of one JSON Lines entry; None for the meta line."""
    found = json_line_hex(line)
    if found is not None:
        return found
    try:
        record = json_text.loads(line)
        if "meta" in record:
            return None
        snapshot_row = "table" in record
        if not snapshot_row:
            return str(record["data"]).encode()
    except (ValueError, KeyError, TypeError) as err:
        raise StreamFileError(
            f"{path}: expected {{'lsn': 'X/Y', 'data': '<hex>'}}: {err}"
        ) from None
    raise StreamFileError(
        f"{path}: a snapshot row ({{'table': ...}}) where the stream is: its meta line has "
        "no snapshot (record --snapshot writes one), or the row comes after the stream began"
    )


def _json_lines(source: IO[bytes], path: str) -> Iterator[tuple[int, bytes]]:
    """(byte offset of the line, hex payload) for each entry of a JSON Lines file.

    The LSN is not read: rows take their positions from Commit messages."""
    offset = source.tell()
    for line in source:
        start, offset = offset, offset + len(line)
        if not line.strip():
            continue
        found = _json_hex(line, path)
        if found is not None:
            yield start, found


def _unhex(data: bytes, path: str) -> bytes:
    try:
        return binascii.unhexlify(data)
    except (binascii.Error, ValueError) as err:
        raise StreamFileError(f"{path}: a payload is not hex: {err}") from None


def _wire_entries(path: str, start: int = 0) -> Iterator[tuple[int, bytes]]:
    """(byte offset, hex payload) of each entry of a wire-format file from ``start`` (the
    offset of an entry) on. (Hex, as JSON Lines hold them, so both formats share the scan
    and the partition reader.)"""
    with open(path, "rb") as f:
        f.seek(start)
        for at, entry in read_wire(iter(partial(f.read, 1 << 16), b""), path, start):
            yield at, entry.payload.hex().encode()


# Hex of the tags a scan need not decode: changes and logical messages.
_SKIPPED_HEX: Final = frozenset(f"{tag:02x}".encode() for tag in b"IUDTMO")
_CHANGE_HEX: Final = frozenset(f"{tag:02x}".encode() for tag in b"IUD")
_BEGIN_HEX: Final = b"42"
_COMMIT_HEX: Final = b"43"
# A JSON Lines entry whose message a scan must look at: not a change, a logical message,
# a Begin or a Commit (the fast scan looks for Begins only where it wants a cut).
_NOTABLE_LINE: Final = re.compile(rb'"data": "(?!49|55|44|54|4d|4f|42|43)([0-9a-fA-F]{2})')
_BEGIN_LINE: Final = b'"data": "42'
_SCAN_CHUNK: Final = 1 << 24


@dataclass(frozen=True, slots=True)
class _Cut:
    """A place where no transaction is open: a byte offset, and which snapshot of the
    Relation / Type caches holds there."""

    at: int
    caches: int


@dataclass(slots=True)
class _Scan:
    """What the driver learns from one file, for every table at once."""

    json_lines: bool
    end: int  # the file's size in bytes
    cuts: list[_Cut]
    caches: list[tuple[tuple[Relation, ...], tuple[Type, ...]]]
    first: dict[str, tuple[Relation, dict[int, tuple[str, str]]]]
    changed: dict[str, str]  # table -> why its schema changed mid-stream
    snapshot: RecordedSnapshot | None = None


class _Scanner:
    """Follows which transactions are open and the Relation / Type caches, from the
    messages that move them (Begin and Commit by tag alone).

    Cuts are kept at least ``gap`` bytes apart: a plan needs only a few,
    near even fractions of the file, and a recording has a cut per transaction."""

    def __init__(
        self,
        path: str,
        json_lines: bool,
        gap: int = 0,
        *,
        begins_only: bool = False,
        start: int = 0,
    ) -> None:
        self.path = path
        self.decoder = Decoder()
        self.relations: dict[int, Relation] = {}
        self.types: dict[int, Type] = {}
        self.in_txn = False
        self.streamed: set[int] = set()
        self.prepared: set[str] = set()
        # The stream begins at ``start`` (after the snapshot's lines, if any).
        self.scan = _Scan(json_lines, 0, [_Cut(start, 0)], [((), ())], {}, {})
        self.gap = gap
        self.cut_anywhere = not begins_only
        self.next_cut = start + 1
        self.at = start

    @property
    def clean(self) -> bool:
        """No transaction open: a partition may start here."""
        return not (self.in_txn or self.streamed or self.prepared or self.decoder.in_stream)

    def cut(self, at: int) -> None:
        self.scan.cuts.append(_Cut(at, len(self.scan.caches) - 1))
        self.next_cut = at + max(self.gap, 1)

    def entry(self, at: int, data: bytes) -> None:
        """The entry at byte offset ``at`` with hex payload ``data``."""
        self.at = at
        # The fast scan does not see every Begin, so in_txn can be stale there: it cuts
        # at Begins only (_begin).
        if self.cut_anywhere and at >= self.next_cut and self.clean:
            self.cut(at)
        tag = data[:2]
        if tag == _BEGIN_HEX:
            self.in_txn = True
        elif tag == _COMMIT_HEX:
            self.in_txn = False
        elif tag not in _SKIPPED_HEX:
            self._message(self.decoder.decode(_unhex(data, self.path)))

    def _message(self, message: PgOutputMessage) -> None:
        match message:
            case Begin() | BeginPrepare():
                self.in_txn = True
            case Commit():
                self.in_txn = False
            case Prepare():
                self.in_txn = False
                self.prepared.add(message.gid)
            case CommitPrepared() | RollbackPrepared():
                self.prepared.discard(message.gid)
            case StreamStart():
                self.streamed.add(message.xid)
            case StreamCommit():
                self.streamed.discard(message.xid)
            case StreamAbort() if message.xid == message.subxid:
                self.streamed.discard(message.xid)
            case StreamPrepare():
                self.streamed.discard(message.xid)
                self.prepared.add(message.gid)
            case Relation():
                self.relations[message.oid] = message
                self._snapshot()
                self._first(message)
            case Type():
                self.types[message.oid] = message
                self._snapshot()
            case _:
                pass  # Stream Stop, Stream Abort of a subtransaction

    def _snapshot(self) -> None:
        self.scan.caches.append((tuple(self.relations.values()), tuple(self.types.values())))

    def _first(self, relation: Relation) -> None:
        name = f"{relation.namespace or 'pg_catalog'}.{relation.relation_name}"
        first = self.scan.first.get(name)
        if first is None:
            user_types = {t.oid: (t.namespace, t.name) for t in self.types.values()}
            self.scan.first[name] = (relation, user_types)
        elif name not in self.scan.changed and (
            first[0].replica_identity,
            first[0].columns,
        ) != (relation.replica_identity, relation.columns):
            self.scan.changed[name] = (
                f"{self.path}: table {name} changed schema mid-stream (the Relation message "
                f"at byte {self.at}); read the parts before and after the change separately"
            )


def _scan(path: str) -> _Scan:
    if not _is_json_lines(path):
        size = Path(path).stat().st_size
        scanner = _Scanner(path, json_lines=False, gap=size >> 12)
        for at, data in _wire_entries(path):
            scanner.entry(at, data)
        scanner.scan.end = size
        return scanner.scan
    from pgwire_mock.spark.snapshot import scan_snapshot  # noqa: PLC0415 - see the imports

    # A snapshot's lines come first; the stream's scan starts where they end.
    snapshot = scan_snapshot(path)
    start = 0 if snapshot is None else snapshot.end
    scan = _scan_json_fast(path, start) or _scan_json_lines(path, start)
    scan.snapshot = snapshot
    return scan


def _scan_json_lines(path: str, start: int = 0) -> _Scan:
    scanner = _Scanner(path, json_lines=True, start=start)
    with open(path, "rb") as f:
        f.seek(start)
        for offset, data in _json_lines(f, path):
            scanner.entry(offset, data)
        scanner.scan.end = f.tell()
    return scanner.scan


def _scan_json_fast(path: str, start: int = 0) -> _Scan | None:
    """The scan of a JSON Lines file in this project's layout from byte ``start`` (where
    the stream begins), by regular expression over large chunks: only the lines of
    messages other than changes and logical messages are looked at, Begin and Commit
    here without a call. None if any line is in another layout."""
    size = Path(path).stat().st_size
    scanner = _Scanner(path, json_lines=True, gap=size >> 12, begins_only=True, start=start)
    base = start
    tail = b""
    with open(path, "rb") as f:
        f.seek(start)
        while True:
            chunk = f.read(_SCAN_CHUNK)
            data = tail + chunk
            cut = data.rfind(b"\n") + 1 if chunk else len(data)
            lines = data.count(b"\n", 0, cut) + (0 if cut == 0 or data[cut - 1] == 10 else 1)
            keys = data.count(b'"data": "', 0, cut)
            if base == 0 and data.startswith(b'{"meta"'):
                lines -= 1
            if keys != lines:  # a blank line, or a line in another layout
                return None
            # Cut candidates: the first Begin after each multiple of the gap. At a Begin
            # no other regular transaction is open (they do not nest, and streamed
            # chunks come between transactions); streamed and prepared ones are
            # followed exactly, since their messages are all notable.
            begins: list[int] = []
            at = max(scanner.next_cut - base, 0)
            while (at := data.find(_BEGIN_LINE, at, cut)) >= 0:
                begins.append(at)
                at += max(scanner.gap, 1)
            pending = iter(begins)
            begin = next(pending, cut)
            for match in _NOTABLE_LINE.finditer(data, 0, cut):
                while begin < match.start():
                    _begin(scanner, data, base, begin)
                    begin = next(pending, cut)
                start = data.rfind(b"\n", 0, match.start()) + 1
                end = data.find(b'"', match.end(), cut)
                if end < 0:
                    return None
                scanner.entry(base + start, data[match.start(1) : end])
            while begin < cut:
                _begin(scanner, data, base, begin)
                begin = next(pending, cut)
            base += cut
            tail = data[cut:]
            if not chunk:
                break
    scanner.scan.end = base
    return scanner.scan


def _begin(scanner: _Scanner, data: bytes, base: int, at: int) -> None:
    """A Begin found by the fast scan: a cut if nothing streamed or prepared is open."""
    line = data.rfind(b"\n", 0, at) + 1
    scanner.in_txn = False  # the transaction before this Begin is over
    if base + line >= scanner.next_cut and scanner.clean:
        scanner.cut(base + line)
    scanner.in_txn = True


_SCANS: dict[tuple[str, int, int], _Scan] = {}


def _scan_cached(path: str) -> _Scan:
    """One scan per file version per driver: reading several tables of one recording
    (one query each) scans it once."""
    stat = Path(path).stat()
    key = (str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)
    scan = _SCANS.get(key)
    if scan is None:
        scan = _SCANS[key] = _scan(path)
        while len(_SCANS) > 64:
            del _SCANS[next(iter(_SCANS))]
    return scan


def plan_partitions(path: str, table: str, partitions: int) -> tuple[list[StreamPartition], _Scan]:
    """Cut one file's stream (what follows its snapshot, if it has one) into at most
    ``partitions`` pieces at transaction boundaries, as even in bytes as the cuts allow."""
    scan = _scan_cached(path)
    if table in scan.changed:
        raise SchemaChangeError(scan.changed[table])
    chosen = [scan.cuts[0]]
    start = scan.cuts[0].at
    for j in range(1, max(partitions, 1)):
        target = start + (scan.end - start) * j // partitions
        at = bisect.bisect_left(scan.cuts, target, key=lambda c: c.at)
        if at < len(scan.cuts):
            cut = scan.cuts[at]
            if chosen[-1].at < cut.at < scan.end:
                chosen.append(cut)
    out = []
    for i, cut in enumerate(chosen):
        stop = chosen[i + 1].at if i + 1 < len(chosen) else scan.end
        relations, types = scan.caches[cut.caches]
        out.append(StreamPartition(path, cut.at, stop, scan.json_lines, relations, types))
    return out, scan


def _file_relation(
    scan: _Scan, table: str, path: str
) -> tuple[Relation, dict[int, tuple[str, str]]] | None:
    """``table``'s first Relation message in one file (with the user types then known),
    or, for a table only a snapshot has, the Relation its definition in the meta line
    stands for; None if the file has neither. A snapshot must describe a table as the
    stream does."""
    first = scan.first.get(table)
    described = scan.snapshot.relations.get(table) if scan.snapshot is not None else None
    if first is not None and described is not None:
        from pgwire_mock.spark.snapshot import check_same_table  # noqa: PLC0415 - as above

        check_same_table(first[0], described, path)
    if first is not None:
        return first
    return None if described is None else (described, {})


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
        array_dims=json_text.loads(options.get("array_dims", "{}")),
        type_overrides=json_text.loads(options.get("type_overrides", "{}")),
        # A synthetic shard makes its rows a block at a time: bigger batches cost the JVM
        # less per row (measured: 1,000,000 changes in 1.80 s instead of 2.15 s).
        batch_rows=int(options.get("batch_rows", "32768" if is_synthetic(options) else "4096")),
    )
    return table, decode_options


def _from_walsender(options: Mapping[str, str]) -> bool:
    return "path" not in options and bool(options.get("dsn") or options.get("host"))


class PgOutputDataSource(DataSource):
    """The ``pgoutput`` data source; see the module docstring for its options."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        # Spark makes the source at load(), given a schema or not: a walsender's options
        # are checked here, so a bad one fails there in one line. (PySpark's stream
        # runner turns an exception from streamReader() into an UnboundLocalError.)
        if options.get("dsn") or options.get("host"):
            StreamSettings.from_options(options)

    @classmethod
    def name(cls) -> str:
        return "pgoutput"

    def schema(self) -> StructType:
        table, options = _options(self.options)
        if _from_walsender(self.options):  # readStream: see pgwire_mock.spark.stream
            self._arrow = peek_schema(StreamSettings.from_options(self.options), table, options)
            return spark_schema(self._arrow)
        partitions = int_option(self.options, "partitions", 2, 1)
        self._plans: list[InputPartition] = []
        if is_synthetic(self.options):  # a generator spec: no file at all
            from pgwire_mock.spark.synthetic import plan_synthetic  # noqa: PLC0415 - see the imports

            synth_plans, first, first_types = plan_synthetic(self.options, table, partitions)
            self._plans.extend(synth_plans)
            self._arrow = table_schema(first, first_types, options)
            return spark_schema(self._arrow)
        files = _files(self.options.get("path", ""))
        relation: Relation | None = None
        user_types: dict[int, tuple[str, str]] = {}
        for path in files:
            parts, scan = plan_partitions(path, table, partitions)
            found = _file_relation(scan, table, path)
            if found is not None and scan.snapshot is not None:
                # The table's snapshot rows first: its initial state (snapshot.py).
                from pgwire_mock.spark.snapshot import plan_snapshot  # noqa: PLC0415 - as above

                self._plans.extend(plan_snapshot(path, scan.snapshot, table, *found, partitions))
            self._plans.extend(parts)
            if found is None:
                continue
            if relation is None:
                relation, user_types = found
            elif (relation.replica_identity, relation.columns) != (
                found[0].replica_identity,
                found[0].columns,
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
        try:
            table, options = _options(self.options)
            # None with a user-given schema: the batches are then handed over uncast.
            arrow: pa.Schema | None = getattr(self, "_arrow", None)
            return PgOutputStreamReader(self.options, table, options, arrow)
        except SparkSideError as err:
            # Options load() could not tell apart from spark.read's (a "path" alone):
            # raised at the query's first call, since PySpark's runner would hide an
            # exception raised here behind an UnboundLocalError.
            return _RefusedStreamReader(err)


class _RefusedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream reader of options the stream refuses: every call raises the error."""

    def __init__(self, error: SparkSideError) -> None:
        self.error = error

    def initialOffset(self) -> dict[str, str]:  # noqa: N802 - PySpark's name
        raise self.error

    def latestOffset(self, start: dict[str, str], limit: ReadLimit) -> dict[str, str]:  # noqa: N802 - PySpark's name
        raise self.error

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - PySpark's name
        raise self.error

    def partitions(self, start: dict[str, str], end: dict[str, str]) -> Sequence[InputPartition]:
        raise self.error

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        raise self.error

    def commit(self, end: dict[str, str]) -> None:
        raise self.error


class _Reader(DataSourceReader):
    def __init__(
        self, plans: Sequence[InputPartition], options: dict[str, str], arrow: pa.Schema
    ) -> None:
        self.plans = list(plans)
        self.options = options
        self.arrow = arrow

    def partitions(self) -> Sequence[InputPartition]:
        return self.plans

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        _, options = _options(self.options)
        if isinstance(partition, StreamPartition):
            yield from read_partition(partition, options, self.arrow)
            return
        # Imported here, see the imports (an executor converting has them anyway).
        from pgwire_mock.spark.snapshot import (  # noqa: PLC0415
            SnapshotPartition,
            read_snapshot_partition,
        )
        from pgwire_mock.spark.synthetic import (  # noqa: PLC0415
            SynthPartition,
            SynthSnapshotPartition,
            read_synthetic,
        )

        if isinstance(partition, SnapshotPartition):
            yield from read_snapshot_partition(partition, options, self.arrow)
        else:
            assert isinstance(partition, SynthPartition | SynthSnapshotPartition)
            yield from read_synthetic(partition, options, self.arrow)


def read_partition(
    partition: StreamPartition, options: DecodeOptions, arrow: pa.Schema | None = None
) -> Iterator[pa.RecordBatch]:
    """The record batches of one partition (what an executor runs; no Spark needed).

    Changes to tables not asked for are counted but not decoded: their relation OID is
    read from the hex payload."""
    decoder = ChangeDecoder(options, relations=partition.relations, types=partition.types)
    path = partition.path
    feed, skips, skip_change = decoder.feed, decoder.skips, decoder.skip_change
    for data in _partition_entries(partition):
        # A change to a table not read: counted from its header (tag, xid inside a
        # stream, relation OID), never unhexed or decoded.
        if data[:2] in _CHANGE_HEX:
            at = 10 if decoder.in_stream else 2
            oid = data[at : at + 8]
            if len(oid) == 8 and skips(int(oid, 16)):
                skip_change(int(data[2:10], 16) if at == 10 else None)
                continue
        feed(0, _unhex(data, path))
        if decoder.has_batches:
            yield from cast_batches(decoder.take(), arrow)
    yield from cast_batches(decoder.flush(), arrow)


def _partition_entries(partition: StreamPartition) -> Iterator[bytes]:
    """The hex payloads of one partition's entries."""
    if not partition.json_lines:
        for at, data in _wire_entries(partition.path, partition.start):
            if at >= partition.stop:
                return
            yield data
        return
    with open(partition.path, "rb") as f:
        f.seek(partition.start)
        offset, stop = partition.start, partition.stop
        # _json_lines and json_line_hex, inlined with the stop test: this loop runs once
        # per message on the executors.
        for line in f:
            if offset >= stop:
                return
            offset += len(line)
            at = line.rfind(b'"data": "')
            if at >= 0:
                end = line.find(b'"', at + 9)
                if end >= 0 and line[end + 1 :].strip() == b"}":
                    yield line[at + 9 : end]
                    continue
            if line.strip():
                found = _json_hex(line, partition.path)
                if found is not None:
                    yield found
