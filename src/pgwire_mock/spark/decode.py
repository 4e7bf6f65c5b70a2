"""A pgoutput stream as Arrow record batches of committed row changes, one table each.

:class:`ChangeDecoder` is fed ``(lsn, payload)`` pairs in stream order and keeps what a
subscriber's apply worker keeps: the relation and type caches, the open transaction,
streamed transactions in progress (protocol 2+), and prepared transactions waiting for
COMMIT / ROLLBACK PREPARED (protocol 3+). A change becomes a row only when its
transaction commits; streamed transactions that abort, subtransactions a Stream Abort
names, and prepared transactions rolled back never do. Like the whole codec, it does no
I/O: :func:`decode_stream` is the convenience that runs it over a list.

Each table's rows have the metadata columns of :data:`METADATA_FIELDS`, the table's own
columns (types from :mod:`pgwire_mock.spark.types`) and ``_before``: the old row as
pgoutput sent it for an update (the old key 'K' for a key change, the whole old row 'O'
under REPLICA IDENTITY FULL), else NULL. A delete's row is its old key or old row.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, NoReturn

import pyarrow as pa

from codec.pgoutput import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Decoder,
    Delete,
    Insert,
    PgOutputMessage,
    Prepare,
    Relation,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    Type,
    Update,
)
from pgwire_mock.spark.errors import SchemaChangeError, SparkSideError, StreamStateError
from pgwire_mock.spark.rows import AFTER_OLD, Change, RawRows, TableRows
from pgwire_mock.spark.types import PG_EPOCH_US, ColumnType, column_type

__all__ = [
    "KEY_METADATA",
    "METADATA_FIELDS",
    "SNAPSHOT_OP",
    "ChangeDecoder",
    "DecodeOptions",
    "SchemaChangeError",
    "SparkSideError",
    "StreamStateError",
    "TableSpec",
    "cast_batches",
    "decode_stream",
    "qualified_name",
    "table_schema",
]

_UINT32: Final = struct.Struct(">I")
_BEGIN: Final = struct.Struct(">QqI")  # final LSN, commit time, xid
_COMMIT: Final = struct.Struct(">BQQq")  # flags, commit LSN, end LSN, commit time
_INSERT, _UPDATE, _DELETE = b"IUD"
_CHANGE_TAGS: Final = frozenset((b"I", b"U", b"D"))
_CHANGE_NAMES: Final = {_INSERT: "Insert", _UPDATE: "Update", _DELETE: "Delete"}
_NEW: Final = ord("N")
_OLD: Final = frozenset(b"KO")
_NO_ROW: Final = Change(None, None, "truncate")  # a Truncate's row: every column NULL
_SKIP: Final = Change(None, None, "skip")  # a change outside a stream to a table not read


def _skipped(subxid: int | None) -> Change:
    """A change to a table not read: only its place (and, in a stream, its subxid) count."""
    return _SKIP if subxid is None else Change(subxid, None, "skip")


METADATA_FIELDS: Final[tuple[pa.Field[pa.DataType], ...]] = (
    pa.field("_op", pa.string(), nullable=False),
    pa.field("_commit_lsn", pa.int64(), nullable=False),
    pa.field("_position", pa.int64(), nullable=False),
    pa.field("_xid", pa.int64(), nullable=False),
    pa.field("_commit_time", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("_toast_unchanged", pa.list_(pa.string()), nullable=False),
    pa.field("_special", pa.map_(pa.string(), pa.string()), nullable=False),
)
"""``_op`` is insert, update, delete or truncate, or snapshot for a row of a recording's
snapshot (:mod:`pgwire_mock.spark.snapshot`: its ``_commit_lsn`` is the consistent
point, its ``_position`` its index among the table's snapshot rows, ``_xid`` 0);
``_position`` orders the changes of
one transaction (all tables share the count; a Truncate's rows share one position);
``_toast_unchanged`` names the columns of an update whose TOASTed value did not change
and was not sent (they are NULL here: take them from the existing row); ``_special``
maps a column to the PostgreSQL text of a value its Spark type cannot hold."""

SNAPSHOT_OP: Final = "snapshot"
"""``_op`` of a row of a table's initial snapshot (not a change: the table's content at
the consistent point the stream starts from)."""

KEY_METADATA: Final = b"pgoutput.key"
"""Arrow field metadata: b"true" on the columns of the table's replica identity."""


def qualified_name(name: str) -> str:
    """``schema.table``; a bare name is in ``public``. Names are taken as written."""
    return name if "." in name else f"public.{name}"


@dataclass(frozen=True, slots=True)
class DecodeOptions:
    """What to decode and how.

    ``tables``: qualified names to produce rows for (None: every table). ``array_dims``:
    dimensions of array columns, by ``column`` or ``schema.table.column`` (default 1;
    PostgreSQL neither enforces nor sends them). ``type_overrides``: user type name to
    the built-in type to decode it as (see :func:`~pgwire_mock.spark.types.column_type`).
    ``batch_rows``: rows per record batch.
    """

    tables: frozenset[str] | None = None
    array_dims: Mapping[str, int] = field(default_factory=dict)
    type_overrides: Mapping[str, str] = field(default_factory=dict)
    batch_rows: int = 4096

    def wants(self, table: str) -> bool:
        return self.tables is None or table in self.tables


def _signature(relation: Relation) -> tuple[object, ...]:
    return (
        relation.namespace,
        relation.relation_name,
        relation.replica_identity,
        relation.columns,
    )


def _table_of(relation: Relation) -> str:
    return f"{relation.namespace or 'pg_catalog'}.{relation.relation_name}"


def _column_types(
    relation: Relation, user_types: Mapping[int, tuple[str, str]], options: DecodeOptions
) -> tuple[ColumnType, ...]:
    table = _table_of(relation)
    return tuple(
        column_type(
            c.type_oid,
            c.type_modifier,
            user_types=user_types,
            overrides=options.type_overrides,
            array_dims=options.array_dims.get(
                f"{table}.{c.name}", options.array_dims.get(c.name, 1)
            ),
        )
        for c in relation.columns
    )


def table_schema(
    relation: Relation,
    user_types: Mapping[int, tuple[str, str]] | None = None,
    options: DecodeOptions | None = None,
) -> pa.Schema:
    """The Arrow schema of ``relation``'s change rows."""
    types = _column_types(relation, user_types or {}, options or DecodeOptions())
    return _schema(relation, types)


def _schema(relation: Relation, types: Sequence[ColumnType]) -> pa.Schema:
    columns: list[pa.Field[pa.DataType]] = [
        pa.field(
            c.name,
            t.arrow,
            metadata={
                KEY_METADATA: b"true" if c.flags & 1 else b"false",
                b"pgoutput.type": t.pg_name.encode(),
            },
        )
        for c, t in zip(relation.columns, types, strict=True)
    ]
    return pa.schema(
        [*METADATA_FIELDS, *columns, pa.field("_before", pa.struct(columns))],
        metadata={b"pgoutput.table": _table_of(relation).encode()},
    )


@dataclass(frozen=True, slots=True)
class TableSpec:
    """What converting a table's :class:`~pgwire_mock.spark.rows.RawRows` needs, as
    the decoder had it when the table's Relation message came: picklable, so the rows
    can be converted in another process."""

    relation: Relation
    user_types: Mapping[int, tuple[str, str]]
    options: DecodeOptions

    def batches(self, rows: RawRows, arrow: pa.Schema | None = None) -> Iterator[pa.RecordBatch]:
        """``rows`` as record batches of at most ``options.batch_rows`` rows, cast to
        ``arrow`` if given."""
        types = _column_types(self.relation, self.user_types, self.options)
        table = TableRows(
            _table_of(self.relation), self.relation, types, _schema(self.relation, types)
        )
        step = self.options.batch_rows
        for at in range(0, len(rows), step):
            batch = table.convert(rows.slice(at, at + step))
            yield batch if arrow is None else batch.cast(arrow)


@dataclass(slots=True)
class _Txn:
    xid: int
    changes: list[Change] = field(default_factory=list)


class ChangeDecoder:
    """Turns one pgoutput stream into committed change rows per table; see the module doc.

    ``relations`` and ``types`` preload the caches, for reading a stream from the middle
    (at a point where no transaction is open): the Relation and Type messages sent before
    that point. ``convert=False`` keeps committed rows unconverted for :meth:`take_rows`
    (no record batch is made on the way).
    """

    def __init__(
        self,
        options: DecodeOptions | None = None,
        *,
        relations: Iterable[Relation] = (),
        types: Iterable[Type] = (),
        convert: bool = True,
    ) -> None:
        self.options = options or DecodeOptions()
        self._batch_rows = self.options.batch_rows if convert else sys.maxsize
        self._specs: dict[str, TableSpec] = {}
        self._decoder = Decoder()
        self._user_types: dict[int, tuple[str, str]] = {}
        self._relations: dict[int, Relation] = {}
        self._names: dict[int, str] = {}  # relation OID -> schema.table
        self._tables: dict[str, TableRows] = {}
        self._done: list[pa.RecordBatch] = []
        self._txn: _Txn | None = None
        self._stream_xid: int | None = None
        self._streamed: dict[int, _Txn] = {}
        self._prepared: dict[str, _Txn] = {}
        self.ended: int | None = None
        """The end LSN of the transaction the last message ended for good (Commit,
        Stream Commit, Commit Prepared, Rollback Prepared, a Stream Abort of a whole
        transaction; the abort's LSN only exists in protocol 4), else None."""
        for t in types:
            self._on_type(t)
        for r in relations:
            self._on_relation(r)

    @property
    def open_transactions(self) -> int:
        """Transactions begun and not yet committed or aborted (prepared ones included)."""
        return (self._txn is not None) + len(self._streamed) + len(self._prepared)

    def feed(self, lsn: int, payload: bytes) -> None:
        """Decode and apply one pgoutput message.

        Insert, Update and Delete are kept as bytes and decoded a batch at a time when
        their rows are flushed (:mod:`pgwire_mock.spark.rows`): a malformed tuple
        raises its DecodeError then, and never if its transaction does not commit."""
        self.ended = None
        tag = payload[:1]
        if tag in _CHANGE_TAGS:
            self._on_change_bytes(payload, self._decoder.in_stream)
        elif tag == b"B" and len(payload) == _BEGIN.size + 1:  # the most common messages,
            self._txn = _Txn(_BEGIN.unpack_from(payload, 1)[2])  # read without objects
        elif tag == b"C" and len(payload) == _COMMIT.size + 1:
            _, commit_lsn, end_lsn, commit_timestamp = _COMMIT.unpack_from(payload, 1)
            self._commit(self._end_txn("Commit"), commit_lsn, commit_timestamp)
            self.ended = end_lsn
        else:
            self.apply(self._decoder.decode(payload))

    def apply(self, message: PgOutputMessage) -> None:
        """Apply one already-decoded message (the decoder must have seen it in order)."""
        self.ended = None
        match message:
            case Begin() | BeginPrepare():
                self._txn = _Txn(message.xid)
            case Commit():
                self._commit(self._end_txn("Commit"), message.commit_lsn, message.commit_timestamp)
                self.ended = message.end_lsn
            case Prepare():
                self._prepared[message.gid] = self._end_txn("Prepare")
            case CommitPrepared():
                txn = self._prepared.pop(message.gid, None)
                if txn is None:
                    raise StreamStateError(f"Commit Prepared of unknown gid {message.gid!r}")
                self._commit(txn, message.commit_lsn, message.commit_timestamp)
                self.ended = message.end_lsn
            case RollbackPrepared():
                self._prepared.pop(message.gid, None)
                self.ended = message.rollback_end_lsn
            case StreamStart():
                self._stream_xid = message.xid
                self._streamed.setdefault(message.xid, _Txn(message.xid))
            case StreamStop():
                self._stream_xid = None
            case StreamCommit():
                txn = self._streamed.pop(message.xid, _Txn(message.xid))
                self._commit(txn, message.commit_lsn, message.commit_timestamp)
                self.ended = message.end_lsn
            case StreamPrepare():
                self._prepared[message.gid] = self._streamed.pop(message.xid, _Txn(message.xid))
            case StreamAbort():
                self._stream_abort(message.xid, message.subxid)
                if message.xid == message.subxid:
                    self.ended = message.abort_lsn
            case Relation():
                self._on_relation(message)
            case Type():
                self._on_type(message)
            case Insert() | Update() | Delete():
                self._on_change_bytes(message.encode(), message.xid is not None)
            case Truncate():
                self._on_truncate(message)
            case _:
                pass  # Origin, Message: no rows

    @property
    def in_stream(self) -> bool:
        """Between Stream Start and Stream Stop: changes carry their (sub)xid."""
        return self._decoder.in_stream

    def skips(self, relation_oid: int) -> bool:
        """True when changes to ``relation_oid`` make no rows (a table not asked for),
        so a reader may pass them to :meth:`skip_change` undecoded."""
        name = self._names.get(relation_oid)
        return name is not None and name not in self._tables

    def skip_change(self, subxid: int | None) -> None:
        """Count an Insert/Update/Delete to a table :meth:`skips` (it still takes a
        position in its transaction, and a Stream Abort may drop it)."""
        self._open_txn("change").changes.append(_skipped(subxid))

    @property
    def has_batches(self) -> bool:
        """Whether :meth:`take` has full record batches to hand over."""
        return bool(self._done)

    def take(self) -> list[pa.RecordBatch]:
        """The record batches completed so far (full ones only, unless :meth:`flush`)."""
        done, self._done = self._done, []
        return done

    def flush(self) -> list[pa.RecordBatch]:
        """Every row committed so far, as record batches."""
        for table in self._tables.values():
            if table.rows:
                self._done.append(table.flush())
        return self.take()

    def take_rows(self, table: str) -> tuple[TableSpec | None, RawRows]:
        """The rows of ``table`` committed since the last call, unconverted, with what
        converting them needs (None before the table's Relation message)."""
        state = self._tables.get(table)
        if state is None:
            return None, RawRows()
        return self._specs[table], state.take()

    def column_types(self, table: str) -> dict[str, ColumnType]:
        """The :class:`ColumnType` of each column of ``table``, by column name."""
        state = self._tables[qualified_name(table)]
        return {c.name: t for c, t in zip(state.relation.columns, state.types, strict=True)}

    @property
    def tables(self) -> list[str]:
        """The tables whose Relation message has been seen (and that were asked for)."""
        return list(self._tables)

    def schema(self, table: str) -> pa.Schema | None:
        """The Arrow schema of ``table`` if its Relation message has been seen."""
        state = self._tables.get(qualified_name(table))
        return state.schema if state else None

    # ------------------------------------------------------------------ transactions

    def _end_txn(self, what: str) -> _Txn:
        if self._txn is None:
            raise StreamStateError(f"{what} outside a transaction")
        txn, self._txn = self._txn, None
        return txn

    def _stream_abort(self, xid: int, subxid: int) -> None:
        txn = self._streamed.get(xid)
        if txn is None:
            return
        if subxid == xid:
            del self._streamed[xid]
            return
        # As the apply worker does (worker.c, stream_abort_internal): everything from the
        # subtransaction's first change on is discarded, which takes its own
        # subtransactions with it; changes after it were all made inside it.
        for index, change in enumerate(txn.changes):
            if change.subxid == subxid:
                del txn.changes[index:]
                break

    def _commit(self, txn: _Txn, commit_lsn: int, commit_timestamp: int) -> None:
        commit_time = commit_timestamp + PG_EPOCH_US
        xid = txn.xid
        batch_rows = self._batch_rows
        converting = batch_rows < sys.maxsize  # else rows wait for take_rows, unconverted
        tables = self._tables
        for position, change in enumerate(txn.changes):
            name = change.table
            if name is not None:  # the common case: one row of one table read
                table = tables[name]
                table.pending.add(change.op, commit_lsn, position, xid, commit_time, change)
                if converting and table.rows >= batch_rows:
                    self._done.append(table.flush())
                continue
            for truncated in change.truncated:  # a Truncate: one row per table read
                table = tables[truncated]
                table.pending.add("truncate", commit_lsn, position, xid, commit_time, _NO_ROW)
                if table.rows >= batch_rows:
                    self._done.append(table.flush())

    # ---------------------------------------------------------------------- caches

    def _on_type(self, message: Type) -> None:
        self._user_types[message.oid] = (message.namespace, message.name)

    def _on_relation(self, relation: Relation) -> None:
        previous = self._relations.get(relation.oid)
        self._relations[relation.oid] = relation
        name = self._names[relation.oid] = _table_of(relation)
        if previous is not None and _table_of(previous) != name:
            old = _table_of(previous)
            if old in self._tables:
                raise SchemaChangeError(f"table {old} was renamed to {name} mid-stream")
        if not self.options.wants(name):
            return
        state = self._tables.get(name)
        if state is None:
            types = _column_types(relation, self._user_types, self.options)
            self._tables[name] = TableRows(name, relation, types, _schema(relation, types))
            self._specs[name] = TableSpec(relation, dict(self._user_types), self.options)
        elif _signature(state.relation) != _signature(relation):
            raise SchemaChangeError(
                f"table {name} changed schema mid-stream: columns "
                f"{_describe(state.relation)} became {_describe(relation)}; "
                "read the parts of the stream before and after the change separately"
            )

    def _open_txn(self, what: str) -> _Txn:
        if self._stream_xid is not None:
            return self._streamed[self._stream_xid]
        if self._txn is not None:
            return self._txn
        raise StreamStateError(f"{what} outside a transaction")

    def _on_truncate(self, message: Truncate) -> None:
        txn = self._open_txn("Truncate")
        names = tuple(
            n for n in (self._name_of(oid) for oid in message.relation_oids) if n in self._tables
        )
        txn.changes.append(Change(message.xid, None, "truncate", truncated=names))

    def _on_change_bytes(self, payload: bytes, in_stream: bool) -> None:
        """An Insert, Update or Delete, from its header only (pgoutput's layout: tag,
        the xid inside a stream, relation OID, then 'N', 'K' or 'O' and a tuple)."""
        pos = 5 if in_stream else 1
        if len(payload) < pos + 5:
            self._raise_decode_error(payload, in_stream)
        subxid = _UINT32.unpack_from(payload, 1)[0] if in_stream else None
        oid = _UINT32.unpack_from(payload, pos)[0]
        kind = payload[pos + 4]
        tag = payload[0]
        # _open_txn and _name_of inlined: this runs once per change, in readStream's
        # pump too.
        txn = self._txn if self._stream_xid is None else self._streamed[self._stream_xid]
        if txn is None:
            raise StreamStateError(f"{_CHANGE_NAMES[tag]} outside a transaction")
        name = self._names.get(oid) or self._name_of(oid)  # the latter raises
        if name not in self._tables:
            txn.changes.append(_skipped(subxid))
            return
        if tag == _INSERT and kind == _NEW:
            change = Change(subxid, name, "insert", payload, pos + 5)
        elif tag == _UPDATE and kind == _NEW:
            change = Change(subxid, name, "update", payload, pos + 5)
        elif tag == _UPDATE and kind in _OLD:
            change = Change(subxid, name, "update", payload, AFTER_OLD, pos + 5)
        elif tag == _DELETE and kind in _OLD:
            change = Change(subxid, name, "delete", payload, pos + 5)
        else:
            self._raise_decode_error(payload, in_stream)
        txn.changes.append(change)

    @staticmethod
    def _raise_decode_error(payload: bytes, in_stream: bool) -> NoReturn:
        decoder = Decoder()
        decoder.in_stream = in_stream
        decoder.decode(payload)  # raises the DecodeError that names the fault
        raise StreamStateError(f"malformed change message {payload[:16].hex()}")  # not reached

    def _name_of(self, oid: int) -> str:
        name = self._names.get(oid)
        if name is None:
            raise StreamStateError(f"change to relation OID {oid} before its Relation message")
        return name


def _describe(relation: Relation) -> str:
    return "(" + ", ".join(f"{c.name} oid {c.type_oid}" for c in relation.columns) + ")"


def cast_batches(
    batches: Iterable[pa.RecordBatch], arrow: pa.Schema | None
) -> Iterator[pa.RecordBatch]:
    """``batches`` cast to ``arrow`` (the schema Spark was promised), or as they are."""
    for batch in batches:
        yield batch if arrow is None else batch.cast(arrow)


def decode_stream(
    entries: Iterable[tuple[int, bytes]], options: DecodeOptions | None = None
) -> dict[str, pa.Table]:
    """Every committed change of a whole stream, as one Arrow table per table name.

    Tables whose Relation was seen but that had no committed change are present and empty.
    """
    decoder = ChangeDecoder(options)
    batches: list[pa.RecordBatch] = []
    for lsn, payload in entries:
        decoder.feed(lsn, payload)
        batches.extend(decoder.take())
    batches.extend(decoder.flush())
    out: dict[str, pa.Table] = {}
    for name, state in decoder._tables.items():
        mine = [b for b in batches if b.schema.metadata[b"pgoutput.table"] == name.encode()]
        out[name] = pa.Table.from_batches(mine, schema=state.schema)
    return out
