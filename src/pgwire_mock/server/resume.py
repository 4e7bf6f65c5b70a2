"""A recorded pgoutput stream understood as transactions, so it can be resumed anywhere.

A recording is what one walsender sent one client that read from the slot's start. A
client that stops and comes back gets a *new* walsender, which decodes the WAL again from
the slot's restart_lsn and sends what PostgreSQL would send from the effective start
point ``from_lsn`` (``max(requested, confirmed_flush)``). That is not a suffix of the
recording. :func:`resume` derives it, rule by rule, from the PostgreSQL sources:

* A transaction is sent only if its commit (prepare, abort) record starts at or after
  ``from_lsn`` (``SnapBuildXactNeedsSkip`` in snapbuild.c, ``DecodeTXNNeedSkip`` in
  decode.c); a non-transactional message likewise.
* A transaction in progress at ``from_lsn`` is decoded again from its first change. The
  reorder buffer may start streaming it only at a change at or after ``from_lsn``
  (``ReorderBufferCanStartStreaming``); before that, hitting logical_decoding_work_mem
  spills it to disk instead. Spilling and streaming both empty its share of memory, so
  the limit is hit at the same changes as in the recorded read: the recorded stream
  blocks that ended before ``from_lsn`` merge into the first block that ends at or after
  it, which is sent with first_segment = 1. A transaction none of whose blocks end at or
  after ``from_lsn`` was never streamed by the new walsender and is sent whole at its
  commit (``ReorderBufferReplay``: Begin…Commit, or Begin Prepare…Prepare), without xids.
* A subtransaction aborted while its changes were still only spilled is discarded
  silently: no Stream Abort, and its changes are gone from the merged block.
* Relation and Type messages follow pgoutput's per-walsender cache (``maybe_send_schema``,
  ``cleanup_rel_sync_cache``): the cache starts empty; outside a stream a relation's
  schema is sent before its first change; inside a stream once per streamed top-level
  transaction, carrying the change's xid; a Stream Commit marks those schemas sent; a
  Stream Abort forgets them. Where the recording shows a schema sent again that the cache
  does not explain (an invalidation: DDL, TRUNCATE, ...), the resumed stream sends it
  again at the same change.

What cannot be derived from a recording: the memory each change took (unpublished tables
count too), so the merge rule above assumes that spilling frees what streaming freed.
That holds unless the transaction spread its changes over subtransactions that the
spill picks one at a time; docs/clients.md lists this.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final

from codec.pgoutput import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Decoder,
    Message,
    PgOutputMessage,
    Prepare,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    Truncate,
    encode,
)
from pgwire_mock.streamfile import StreamEntry

__all__ = ["Out", "RecordedStream", "resume"]

_XID: Final = struct.Struct("!I")
_SCHEMA_TAGS: Final = frozenset(b"RY")
_Schema = tuple[tuple[bytes, bytes], ...]
_CHANGE_TAGS: Final = frozenset(b"IUDT")

Out = tuple[int, bytes]
"""One message to send: (its WAL position, its payload)."""


@dataclass(slots=True)
class _Change:
    """A change (I/U/D/T) or transactional message (M) of a transaction, as recorded."""

    lsn: int
    tag: int
    body: bytes
    """The payload without its tag and without the xid a stream adds."""
    xid: int | None
    """The (sub)transaction's xid when it was recorded inside a stream."""
    keys: tuple[int, ...]
    """The relations whose cache entries the change uses (``RelationSyncEntry``). A
    change to a partition published through its root names the root, but the entry is
    the partition's: its OID is the last Relation pgoutput sends for it."""
    schemas: tuple[_Schema, ...]
    """Per key, its Type and Relation messages (tag, body without xid), as last recorded."""
    forced: frozenset[int] = frozenset()
    """Keys whose schema the recording sent again here (an invalidation)."""

    def payload(self, xid: int | None) -> bytes:
        tag = bytes((self.tag,))
        return tag + self.body if xid is None else tag + _XID.pack(xid) + self.body


@dataclass(slots=True)
class _Block:
    """One Stream Start…Stream Stop of a streamed transaction."""

    index: int
    """Where the block is in the recording's unit order."""
    position: int
    """Which of its transaction's blocks it is (0: the first)."""
    start_lsn: int
    stop_lsn: int
    origin: bytes | None
    changes: list[_Change] = field(default_factory=list)


@dataclass(slots=True)
class _Streamed:
    """A streamed top-level transaction: its blocks, subtransaction aborts and end."""

    xid: int
    blocks: list[_Block] = field(default_factory=list)
    aborts: list[tuple[int, int, int, bytes]] = field(default_factory=list)
    """(unit index, subxid, LSN, payload) of each subtransaction's Stream Abort."""
    end: PgOutputMessage | None = None
    end_index: int = -1
    end_lsn: int = 0
    end_payload: bytes = b""

    @property
    def decision_lsn(self) -> int | None:
        """The LSN of the record that ends the transaction (None: still open)."""
        end = self.end
        if isinstance(end, StreamCommit):
            return end.commit_lsn
        if isinstance(end, StreamPrepare):
            return end.prepare_lsn
        if isinstance(end, StreamAbort):
            return end.abort_lsn if end.abort_lsn is not None else self.end_lsn
        return None


@dataclass(slots=True)
class _Plain:
    """Begin…Commit or Begin Prepare…Prepare, sent whole at its commit or prepare."""

    decision_lsn: int
    head: list[Out]
    changes: list[_Change]
    tail: Out


@dataclass(slots=True)
class _Single:
    """One message outside a transaction (Commit/Rollback Prepared, a message...)."""

    decision_lsn: int
    out: Out
    strict: bool = False
    """Sent when decision_lsn > from_lsn (the LSN is the record's end, not its start)."""


@dataclass(slots=True)
class _BlockRef:
    streamed: _Streamed
    block: _Block


@dataclass(slots=True)
class _EndRef:
    streamed: _Streamed


@dataclass(slots=True)
class _AbortRef:
    streamed: _Streamed
    position: int


_Unit = _Plain | _Single | _BlockRef | _EndRef | _AbortRef


class RecordedStream:
    """A recording parsed into transactions (raises DecodeError for a bad message)."""

    def __init__(self, entries: Sequence[StreamEntry]) -> None:
        self.units: list[_Unit] = []
        self._parse(entries)

    # --- parsing ---------------------------------------------------------------------

    def _parse(self, entries: Sequence[StreamEntry]) -> None:
        decoder = Decoder()
        streamed: dict[int, _Streamed] = {}
        schemas: dict[int, _Schema] = {}  # by key, as last recorded
        key_of: dict[int, int] = {}  # a relation OID → the key its last change used
        pending: list[tuple[bytes, int, bytes]] = []  # schema messages before a change
        cache = _SchemaCache()
        plain: _Plain | None = None
        block: _Block | None = None
        block_txn: _Streamed | None = None
        units = self.units
        for entry in entries:
            payload = entry.payload
            message = decoder.decode(payload)
            tag = payload[0]
            in_stream = block is not None
            body = payload[5:] if in_stream and type(message).STREAMABLE else payload[1:]
            if tag in _SCHEMA_TAGS:
                pending.append((payload[:1], getattr(message, "oid", 0), body))
                continue
            if tag in _CHANGE_TAGS or (tag == ord("M") and (plain is not None or in_stream)):
                keys, sent_here = _keys(message, pending, schemas, key_of)
                pending = []
                change = _Change(
                    entry.lsn,
                    tag,
                    body,
                    message.xid if in_stream else None,  # type: ignore[attr-defined]
                    keys,
                    tuple(schemas.get(key, ()) for key in keys),
                )
                top = block_txn.xid if block_txn is not None else None
                change.forced = frozenset(
                    key for key in keys if key in sent_here and not cache.needs(key, top)
                )
                for key in keys:
                    cache.sent(key, top)
                if block is not None:
                    block.changes.append(change)
                elif plain is not None:
                    plain.changes.append(change)
                else:  # a change outside a transaction: keep it where it was
                    units.append(_Single(entry.lsn, (entry.lsn, payload)))
                continue
            pending = []
            if isinstance(message, Begin | BeginPrepare):
                decision = message.final_lsn if isinstance(message, Begin) else message.prepare_lsn
                plain = _Plain(decision, [(entry.lsn, payload)], [], (0, b""))
            elif tag == ord("O") and plain is not None:
                plain.head.append((entry.lsn, payload))
            elif tag == ord("O") and block is not None and not block.changes:
                block.origin = payload
            elif isinstance(message, Commit | Prepare) and plain is not None:
                plain.tail = (entry.lsn, payload)
                units.append(plain)
                plain = None
            elif isinstance(message, StreamStart):
                block_txn = streamed.setdefault(message.xid, _Streamed(message.xid))
                block = _Block(len(units), len(block_txn.blocks), entry.lsn, entry.lsn, None)
            elif tag == ord("E") and block is not None and block_txn is not None:
                block.stop_lsn = entry.lsn
                block_txn.blocks.append(block)
                units.append(_BlockRef(block_txn, block))
                block = block_txn = None
            elif isinstance(message, StreamAbort) and message.xid != message.subxid:
                txn = streamed.setdefault(message.xid, _Streamed(message.xid))
                txn.aborts.append((len(units), message.subxid, entry.lsn, payload))
                units.append(_AbortRef(txn, len(txn.aborts) - 1))
                cache.forget(message.xid, commit=False)
            elif isinstance(message, StreamCommit | StreamPrepare | StreamAbort):
                txn = streamed.setdefault(message.xid, _Streamed(message.xid))
                txn.end, txn.end_index = message, len(units)
                txn.end_lsn, txn.end_payload = entry.lsn, payload
                units.append(_EndRef(txn))
                if not isinstance(message, StreamPrepare):
                    cache.forget(message.xid, commit=isinstance(message, StreamCommit))
            elif isinstance(message, CommitPrepared):
                units.append(_Single(message.commit_lsn, (entry.lsn, payload)))
            elif isinstance(message, RollbackPrepared):
                units.append(_Single(message.rollback_end_lsn, (entry.lsn, payload), strict=True))
            elif isinstance(message, Message):
                units.append(_Single(message.lsn, (entry.lsn, payload), strict=True))
            else:
                units.append(_Single(entry.lsn, (entry.lsn, payload)))


def _keys(
    message: PgOutputMessage,
    pending: list[tuple[bytes, int, bytes]],
    schemas: dict[int, _Schema],
    key_of: dict[int, int],
) -> tuple[tuple[int, ...], set[int]]:
    """The cache keys a change uses, and those whose schema was sent right before it;
    records the schemas sent in ``schemas`` and ``key_of``."""
    if isinstance(message, Truncate):
        relations = message.relation_oids
        groups: list[list[tuple[bytes, int, bytes]]] = [[]]
        for item in pending:  # maybe_send_schema once per truncated relation
            groups[-1].append(item)
            if item[0] == b"R":
                groups.append([])
    else:
        oid = getattr(message, "relation_oid", None)
        relations = () if oid is None else (int(oid),)
        groups = [list(pending), []]
    sent: set[int] = set()
    for group in groups:
        if group and group[-1][0] == b"R":
            key = group[-1][1]
            schemas[key] = tuple((t, b) for t, _, b in group)
            sent.add(key)
            # The relation the change names is the first Relation of the group (the
            # root when published through it) or the key itself.
            first = next(o for t, o, _ in group if t == b"R")
            key_of[first] = key
            key_of[key] = key
    return tuple(key_of.get(oid, oid) for oid in relations), sent


class _SchemaCache:
    """pgoutput's RelationSyncEntry.schema_sent / streamed_txns, for one walsender."""

    def __init__(self) -> None:
        self.schema_sent: set[int] = set()
        self.streamed: dict[int, set[int]] = {}

    def needs(self, oid: int, top: int | None) -> bool:
        if top is None:
            return oid not in self.schema_sent
        return top not in self.streamed.get(oid, ())

    def sent(self, oid: int, top: int | None) -> None:
        if top is None:
            self.schema_sent.add(oid)
        else:
            self.streamed.setdefault(oid, set()).add(top)

    def forget(self, top: int, *, commit: bool) -> None:
        """cleanup_rel_sync_cache: a Stream Commit marks the schemas sent; an abort not."""
        for oid, xids in self.streamed.items():
            if top in xids:
                xids.discard(top)
                if commit:
                    self.schema_sent.add(oid)


# --- resuming ------------------------------------------------------------------------------


def resume(stream: RecordedStream, from_lsn: int, *, major: int) -> Iterator[list[Out]]:
    """What a new walsender sends from ``from_lsn``: one list of messages per unit (a
    transaction, a stream block, a single message), in the order they are sent."""
    cache = _SchemaCache()
    # Per streamed transaction: the first block that ends at or after from_lsn, and the
    # subtransactions aborted before it (their changes were only spilled).
    plans: dict[int, _Plan] = {}
    for unit in stream.units:
        if isinstance(unit, _Plain):
            if unit.decision_lsn < from_lsn:
                continue
            out = list(unit.head)
            for change in unit.changes:
                out.extend(_with_schema(cache, change, None, None))
            out.append(unit.tail)
            yield out
        elif isinstance(unit, _Single):
            if unit.decision_lsn > from_lsn or (not unit.strict and unit.decision_lsn == from_lsn):
                yield [unit.out]
        else:
            txn = unit.streamed
            plan = plans.get(txn.xid)
            if plan is None:
                plan = plans[txn.xid] = _Plan.make(txn, from_lsn)
            if plan.skipped:
                continue
            if isinstance(unit, _BlockRef):
                out = plan.block(cache, unit.block)
            elif isinstance(unit, _AbortRef):
                out = plan.abort(cache, unit.position)
            else:
                out = plan.finish(cache, major)
            if out:
                yield out


@dataclass(slots=True)
class _Plan:
    txn: _Streamed
    skipped: bool
    first: int
    """Index in txn.blocks of the first block the new walsender streams (-1: none)."""
    dropped: frozenset[int]
    """Subxids aborted before that block: never streamed, silently discarded."""

    @classmethod
    def make(cls, txn: _Streamed, from_lsn: int) -> _Plan:
        decision = txn.decision_lsn
        if decision is None or decision < from_lsn:
            return cls(txn, True, -1, frozenset())
        blocks = txn.blocks
        # The last block, when the end follows it at once, was streamed at commit time
        # (ReorderBufferStreamCommit), not because memory ran out.
        limit_blocks = blocks[:-1] if blocks and blocks[-1].index + 1 == txn.end_index else blocks
        first = next((i for i, b in enumerate(limit_blocks) if b.stop_lsn >= from_lsn), -1)
        cut = blocks[first].index if first >= 0 else txn.end_index
        dropped = frozenset(sub for index, sub, _, _ in txn.aborts if index < cut)
        return cls(txn, False, first, dropped)

    def _changes(self, blocks: Sequence[_Block]) -> list[_Change]:
        dropped = self.dropped
        return [c for b in blocks for c in b.changes if c.xid not in dropped]

    def block(self, cache: _SchemaCache, block: _Block) -> list[Out]:
        blocks = self.txn.blocks
        position = block.position
        if self.first < 0 or position < self.first:
            return []  # spilled; sent with a later block or at the end
        covered = blocks[: position + 1] if position == self.first else [block]
        head = covered[0]
        top = self.txn.xid
        start = StreamStart(top, position == self.first)
        out: list[Out] = [(head.start_lsn, encode(start))]
        if position == self.first and blocks[0].origin is not None:
            out.append((head.start_lsn, blocks[0].origin))
        for change in self._changes(covered):
            out.extend(_with_schema(cache, change, top, change.xid))
        out.append((block.stop_lsn, b"E"))
        return out

    def abort(self, cache: _SchemaCache, position: int) -> list[Out]:
        _, subxid, lsn, payload = self.txn.aborts[position]
        if subxid in self.dropped:
            return []
        cache.forget(self.txn.xid, commit=False)
        return [(lsn, payload)]

    def finish(self, cache: _SchemaCache, major: int) -> list[Out]:
        txn = self.txn
        end = txn.end
        if self.first >= 0:
            # Streamed: the last block (if any changes were left) came before; the end
            # goes as recorded.
            if not isinstance(end, StreamPrepare):
                cache.forget(txn.xid, commit=isinstance(end, StreamCommit))
            return [(txn.end_lsn, txn.end_payload)]
        # Never streamed by the new walsender: decoded whole at its end, unstreamed.
        if isinstance(end, StreamAbort) or end is None:
            return []
        changes = self._changes(txn.blocks)
        body: list[Out] = []
        for change in changes:
            body.extend(_with_schema(cache, change, None, None))
        first_lsn = txn.blocks[0].start_lsn if txn.blocks else txn.end_lsn
        if isinstance(end, StreamCommit):
            if major >= 15 and not changes:
                return []  # 15+ sends BEGIN lazily: an empty transaction sends nothing
            begin_lsn = first_lsn if major < 15 or not changes else changes[0].lsn
            head: list[Out] = [
                (begin_lsn, encode(Begin(end.commit_lsn, end.commit_timestamp, txn.xid)))
            ]
            tail = encode(Commit(end.flags, end.commit_lsn, end.end_lsn, end.commit_timestamp))
        else:
            assert isinstance(end, StreamPrepare)
            begin = BeginPrepare(
                end.prepare_lsn, end.end_lsn, end.prepare_timestamp, txn.xid, end.gid
            )
            head = [(first_lsn, encode(begin))]
            tail = encode(
                Prepare(
                    end.flags, end.prepare_lsn, end.end_lsn, end.prepare_timestamp, txn.xid, end.gid
                )
            )
        origin = txn.blocks[0].origin if txn.blocks else None
        if origin is not None:
            head.append((head[0][0], origin))
        return [*head, *body, (txn.end_lsn, tail)]


def _with_schema(
    cache: _SchemaCache, change: _Change, top: int | None, xid: int | None
) -> list[Out]:
    """The change, preceded by the Type and Relation messages the cache says are due."""
    out: list[Out] = []
    for key, schema in zip(change.keys, change.schemas, strict=True):
        if (cache.needs(key, top) or key in change.forced) and schema:
            prefix = b"" if xid is None else _XID.pack(xid)
            out.extend((change.lsn, tag + prefix + body) for tag, body in schema)
            cache.sent(key, top)
    out.append((change.lsn, change.payload(xid)))
    return out
