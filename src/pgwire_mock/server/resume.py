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
  reorder buffer may start streaming it only at a record at or after ``from_lsn`` (its
  start on 16+, its end on 14/15: ``ReorderBufferCanStartStreaming``); before that,
  hitting logical_decoding_work_mem spills it to disk instead, which empties its memory
  as streaming did. A spilled (sub)transaction is streamed at its next change that may
  stream (``ReorderBufferProcessPartialChange``); so the recorded blocks up to that
  change merge into one first block, sent with first_segment = 1, and what is left of
  the block it cut goes with the next. A transaction not streamed again before its end
  is sent whole at its commit (``ReorderBufferReplay``: Begin…Commit, or Begin
  Prepare…Prepare), without xids (see :func:`_first_stream`).
* A subtransaction aborted while its changes were still only spilled is discarded
  silently: no Stream Abort, and its changes are gone from the merged block. On 18 so
  is one the memory limit picked alone before the start point, when it has rolled back
  by then (``ReorderBufferCheckAndTruncateAbortedTXN``); its later changes are dropped.
* A transaction rolled back by now (a top-level Stream Abort, or Rollback Prepared)
  that the new walsender decodes before its end record stops at its first relation the
  walsender has not looked up yet, unpublished ones included: a concurrent abort (see
  :meth:`_Walk.sendable`, :attr:`_Change.lookups`). Streamed, only its own changes
  stop; its subtransactions' stream on, each block cut at such a lookup again. On 18
  one truncated as aborted is sent as left (:meth:`_Walk.truncated`).
* Relation and Type messages follow pgoutput's per-walsender cache (``maybe_send_schema``,
  ``cleanup_rel_sync_cache``): the cache starts empty; outside a stream a relation's
  schema is sent before its first change; inside a stream once per streamed top-level
  transaction, carrying the change's xid; a Stream Commit marks those schemas sent; a
  Stream Abort forgets them. Where the recording shows a schema sent again that the cache
  does not explain (an invalidation: DDL, TRUNCATE, ...), the resumed stream sends it
  again at the same change. A change published through its partitioned root uses its
  partition's entry (see :class:`_Leaves`).

What cannot be derived from a recording: the memory each change took (unpublished tables
count too, and their changes are not in it). Once the first block after a restart ended
at another change than the recorded one, PostgreSQL's next blocks end elsewhere too; the
fake keeps the recorded ends (docs/clients.md, "Restart and resume").
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final, cast

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
    TupleData,
    UnchangedToast,
    encode,
)
from pgwire_mock.streamfile import StreamEntry

__all__ = ["Out", "RecordedStream", "resume"]

_XID: Final = struct.Struct("!I")
_SCHEMA_TAGS: Final = frozenset(b"RY")
_Schema = tuple[tuple[bytes, bytes], ...]
_CHANGE_TAGS: Final = frozenset(b"IUDT")
#: The cache key of "some table the recording does not show" (see _Change.lookups).
_UNPUBLISHED: Final = -1
#: A gap between two recorded changes of one transaction wider than this holds changes
#: the recording does not have (unpublished tables, TOAST chunks): more than two full
#: page images (heap and index, BLCKSZ 8192) and a change record of its own.
_UNPUBLISHED_GAP: Final = 2 * 8192 + 1024

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
    unpublished_before: bool = False
    """The WAL between the transaction's previous recorded change and this one is wider
    than those changes explain (_UNPUBLISHED_GAP): the walsender decoded changes of
    tables the recording does not show, and looked those tables up, before this one."""

    @property
    def lookups(self) -> tuple[int, ...]:
        """The catalog entries decoding this change needs, in order: those of the
        unpublished changes before it (one key for all of them), then its own."""
        return (_UNPUBLISHED, *self.keys) if self.unpublished_before else self.keys

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
    rolled_back: bool = False
    """Stream Prepare, then Rollback Prepared."""

    @property
    def aborted(self) -> bool:
        """Rolled back by the end of the recording (the whole transaction)."""
        return isinstance(self.end, StreamAbort) or self.rolled_back

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
    xid: int | None = None
    """The xid of a Begin Prepare…Prepare (None for Begin…Commit)."""
    rolled_back: bool = False
    """A prepared transaction the recording later shows rolled back (Rollback Prepared)."""


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
        leaves = _Leaves()
        pending: list[tuple[bytes, int, bytes]] = []  # schema messages before a change
        cache = _SchemaCache()
        plain: _Plain | None = None
        block: _Block | None = None
        block_txn: _Streamed | None = None
        prepared: dict[int, _Plain | _Streamed] = {}  # by xid, until Commit/Rollback Prepared
        # The last change's LSN and size, by (top xid, the change's xid in a stream): a
        # gap is counted within one (sub)transaction, since the changes of another may
        # never be decoded (a subtransaction rolled back goes before its lookups).
        previous: dict[tuple[int | None, int | None], int] = {}
        sizes: dict[tuple[int | None, int | None], int] = {}
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
                top = block_txn.xid if block_txn is not None else None
                keys, sent_here = _keys(message, pending, schemas, leaves, cache, top)
                pending = []
                change = _Change(
                    entry.lsn,
                    tag,
                    body,
                    message.xid if in_stream else None,  # type: ignore[attr-defined]
                    keys,
                    tuple(schemas.get(key, ()) for key in keys),
                )
                change.forced = frozenset(
                    key for key in keys if key in sent_here and not cache.needs(key, top)
                )
                for key in keys:
                    cache.sent(key, top)
                if block is not None or plain is not None:
                    gap_key = (top, change.xid)
                    last = previous.get(gap_key)
                    change.unpublished_before = (
                        last is not None
                        and entry.lsn - last > _UNPUBLISHED_GAP + sizes.get(gap_key, 0)
                    )
                    previous[gap_key], sizes[gap_key] = entry.lsn, len(payload)
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
                xid = message.xid if isinstance(message, BeginPrepare) else None
                plain = _Plain(decision, [(entry.lsn, payload)], [], (0, b""), xid)
                previous.pop((None, None), None)
            elif tag == ord("O") and plain is not None:
                plain.head.append((entry.lsn, payload))
            elif tag == ord("O") and block is not None and not block.changes:
                block.origin = payload
            elif isinstance(message, Commit | Prepare) and plain is not None:
                plain.tail = (entry.lsn, payload)
                units.append(plain)
                if plain.xid is not None:
                    prepared[plain.xid] = plain
                plain = None
            elif isinstance(message, StreamStart):
                block_txn = streamed.setdefault(message.xid, _Streamed(message.xid))
                block = _Block(len(units), len(block_txn.blocks), entry.lsn, entry.lsn, None)
            elif tag == ord("E") and block is not None and block_txn is not None:
                block.stop_lsn = entry.lsn
                block_txn.blocks.append(block)
                units.append(_BlockRef(block_txn, block))
                block = block_txn = None
            elif (
                isinstance(message, StreamAbort)
                and message.xid != message.subxid
                and message.xid not in streamed
            ):
                # 18 only: a subtransaction of a transaction it truncated as rolled back
                # (ReorderBufferMaybeMarkTXNStreamed), never streamed; kept where it was.
                units.append(_Single(entry.lsn, (entry.lsn, payload)))
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
                if isinstance(message, StreamPrepare):
                    prepared[message.xid] = txn
                else:
                    cache.forget(message.xid, commit=isinstance(message, StreamCommit))
            elif isinstance(message, CommitPrepared):
                prepared.pop(message.xid, None)
                units.append(_Single(message.commit_lsn, (entry.lsn, payload)))
            elif isinstance(message, RollbackPrepared):
                rolled_back = prepared.pop(message.xid, None)
                if rolled_back is not None:
                    rolled_back.rolled_back = True
                units.append(_Single(message.rollback_end_lsn, (entry.lsn, payload), strict=True))
            elif isinstance(message, Message):
                units.append(_Single(message.lsn, (entry.lsn, payload), strict=True))
            else:
                units.append(_Single(entry.lsn, (entry.lsn, payload)))


def _keys(
    message: PgOutputMessage,
    pending: list[tuple[bytes, int, bytes]],
    schemas: dict[int, _Schema],
    leaves: _Leaves,
    cache: _SchemaCache,
    top: int | None,
) -> tuple[tuple[int, ...], set[int]]:
    """The cache keys a change uses, and those whose schema was sent right before it;
    records the schemas sent in ``schemas`` and the partitions in ``leaves``."""
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
    named: dict[int, int] = {}  # the relation the change names → its cache key
    for group in groups:
        if group and group[-1][0] == b"R":
            key = group[-1][1]
            schemas[key] = tuple((t, b) for t, _, b in group)
            sent.add(key)
            # The relation the change names is the group's first Relation: the root when
            # published through it (maybe_send_schema sends the ancestor, then the leaf).
            named[next(o for t, o, _ in group if t == b"R")] = key
    keys = []
    row = _row(message)
    for oid in relations:
        leaf = named.get(oid)
        if leaf is None:
            leaf = leaves.guess(oid, row, cache, top)
        else:
            leaves.described(oid, leaf, row)
        keys.append(leaf)
    return tuple(keys), sent


def _row(message: PgOutputMessage) -> TupleData | None:
    """The row values a change carries (new row, else the old key or row)."""
    for name in ("new_tuple", "key_tuple", "old_tuple"):
        row = getattr(message, name, None)
        if row is not None:
            return cast(TupleData, row)
    return None


class _Leaves:
    """Which partition each change to a partitioned table published through its root
    (``publish_via_partition_root``) was made in.

    The change names the root; the cache entry that decides whether a Relation is due
    (``RelationSyncEntry``) is the partition's, and pgoutput names the partition only
    when it sends that entry's schema (the root's Relation, then the partition's). A
    change sent without a schema belongs to a partition whose schema is in the cache at
    that point of the recording: when only one of the root's partitions is, that one.
    Otherwise the row's values decide, as a list partition key would: of the columns
    whose values were never seen in two partitions, the one with the fewest distinct
    values in the root's rows, if the row's value there was seen in exactly one of the
    candidates; else the partition the root's last change used.
    """

    def __init__(self) -> None:
        self.of_root: dict[int, list[int]] = {}
        self.last: dict[int, int] = {}
        self.seen: dict[int, list[set[object]]] = {}  # per partition, per column: values
        self.values: dict[int, list[set[object]]] = {}  # per root, per column: values

    def described(self, root: int, leaf: int, row: TupleData | None) -> None:
        known = self.of_root.setdefault(root, [])
        if leaf not in known:
            known.append(leaf)
        self._note(root, row)
        self._learn(root, leaf, row)

    def guess(self, root: int, row: TupleData | None, cache: _SchemaCache, top: int | None) -> int:
        known = self.of_root.get(root)
        if not known:
            return root
        self._note(root, row)
        candidates = [leaf for leaf in known if not cache.needs(leaf, top)]
        if len(candidates) == 1:
            self._learn(root, candidates[0], row)
            return candidates[0]
        leaf = self.last.get(root, known[-1])
        if len(candidates) > 1 and row is not None:
            leaf = self._by_key(root, candidates, row) or leaf
        self.last[root] = leaf
        return leaf

    def _by_key(self, root: int, candidates: list[int], row: TupleData) -> int | None:
        counts = self.values.get(root, [])
        leaves = self.of_root[root]
        order = sorted(range(min(len(row), len(counts))), key=lambda c: len(counts[c]))
        for column in order:
            per_leaf = [self._seen(leaf, column) for leaf in leaves]
            if any(a & b for a, b in itertools.combinations(per_leaf, 2)):
                continue  # a value in two partitions: not the partition key
            holders = [leaf for leaf in candidates if row[column] in self._seen(leaf, column)]
            if len(holders) == 1:
                return holders[0]
        return None

    def _seen(self, leaf: int, column: int) -> set[object]:
        columns = self.seen.get(leaf, [])
        return columns[column] if column < len(columns) else set()

    def _note(self, root: int, row: TupleData | None) -> None:
        if row is not None:
            _add_row(self.values.setdefault(root, []), row)

    def _learn(self, root: int, leaf: int, row: TupleData | None) -> None:
        self.last[root] = leaf
        if row is not None:
            _add_row(self.seen.setdefault(leaf, []), row)


def _add_row(columns: list[set[object]], row: TupleData) -> None:
    columns.extend(set() for _ in range(len(row) - len(columns)))
    for values, value in zip(columns, row, strict=False):
        if value is not None and not isinstance(value, UnchangedToast):
            values.add(value)


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
    walk = _Walk(from_lsn, major)
    for unit in stream.units:
        if isinstance(unit, _Plain):
            if unit.decision_lsn >= from_lsn:
                yield walk.plain(unit)
        elif isinstance(unit, _Single):
            if unit.decision_lsn > from_lsn or (not unit.strict and unit.decision_lsn == from_lsn):
                yield [unit.out]
        else:
            plan = walk.plan(unit.streamed)
            if plan.skipped:
                continue
            if isinstance(unit, _BlockRef):
                out = plan.block(walk, unit.block)
            elif isinstance(unit, _AbortRef):
                out = plan.abort(walk.cache, unit.position)
            else:
                out = plan.finish(walk, major)
            if out:
                yield out


class _Walk:
    """One new walsender's state while it decodes the recording again."""

    def __init__(self, from_lsn: int, major: int) -> None:
        self.from_lsn = from_lsn
        self.major = major
        self.cache = _SchemaCache()
        self.plans: dict[int, _Plan] = {}
        self.warm: set[int] = set()
        """Relations whose catalog entries this walsender has looked up already."""

    def plan(self, txn: _Streamed) -> _Plan:
        plan = self.plans.get(txn.xid)
        if plan is None:
            plan = self.plans[txn.xid] = _Plan.make(txn, self.from_lsn, self.major)
        return plan

    def sendable(self, changes: Sequence[_Change], aborted: bool) -> tuple[list[_Change], int]:
        """The changes decoded before a concurrent abort stops the transaction, and the
        LSN of the change that stopped it (0: none did).

        A transaction decoded before its end record (streamed, or prepared with
        two_phase) is checked for a concurrent abort at every catalog lookup
        (``SetupCheckXidLive``, ``HandleConcurrentAbort``). When the new walsender
        decodes one that has already rolled back and must look up a relation it has not
        looked up before (a fresh walsender's caches are empty; the transactions it
        skipped filled nothing; the tables of unpublished changes count as one, known
        only from the gaps they leave, see _Change.lookups), the lookup fails with
        ERRCODE_TRANSACTION_ROLLBACK and ``ReorderBufferProcessTXN`` stops there: nothing
        more of the transaction is sent (a stream block ends at that change; a Begin
        Prepare is followed by its Prepare).
        """
        warm = self.warm
        for index, change in enumerate(changes):
            if aborted and any(key not in warm for key in change.lookups):
                return list(changes[:index]), change.lsn
            warm.update(change.lookups)
        return list(changes), 0

    def truncated(self, start: int, changes: Sequence[_Change]) -> bool:
        """On 18, a transaction rolled back by the time it was recorded whose recorded
        changes begin past a gap from its start: the memory limit picked it and the
        reorder buffer truncated it as aborted (``ReorderBufferCheckAndTruncateAbortedTXN``),
        and a new walsender does the same. What is left of it is sent without the
        concurrent abort at a lookup (measured on 18 with the resume check's
        prepared_subxacts: the changes after the truncation come, with their Relation,
        from a walsender that had not looked the table up)."""
        return self.major >= 18 and bool(changes) and changes[0].lsn - start > _UNPUBLISHED_GAP

    def plain(self, unit: _Plain) -> list[Out]:
        aborted = unit.rolled_back and not self.truncated(unit.head[0][0], unit.changes)
        changes, _ = self.sendable(unit.changes, aborted)
        out = list(unit.head)
        for change in changes:
            out.extend(_with_schema(self.cache, change, None, None))
        out.append(unit.tail)
        return out


@dataclass(slots=True)
class _Plan:
    txn: _Streamed
    skipped: bool
    first: int
    """Index in txn.blocks of the block in which the new walsender first streams (-1:
    never; the transaction is sent whole at its end)."""
    cut: int
    """The LSN of the change the first streamed block ends at (its Stream Stop)."""
    dropped: frozenset[int]
    """Subxids aborted before that block: never streamed, silently discarded."""
    stopped: bool = False
    """A concurrent abort stopped a block (see _Walk.sendable, :meth:`_stream`)."""
    carry: list[_Change] = field(default_factory=list)
    """Changes decoded but not streamed yet (after the first block's end)."""
    streamed: set[int | None] = field(default_factory=set)
    """The (sub)transactions some of whose changes were streamed."""

    @classmethod
    def make(cls, txn: _Streamed, from_lsn: int, major: int) -> _Plan:
        decision = txn.decision_lsn
        if decision is None or decision < from_lsn:
            return cls(txn, True, -1, 0, frozenset())
        first, cut, truncated = _first_stream(txn, from_lsn, major)
        index = txn.blocks[first].index if first >= 0 else txn.end_index
        dropped = truncated | {sub for at, sub, _, _ in txn.aborts if at < index}
        return cls(txn, False, first, cut, dropped)

    def _kept(self, changes: Sequence[_Change]) -> list[_Change]:
        dropped = self.dropped
        return [c for c in changes if c.xid not in dropped]

    def block(self, walk: _Walk, block: _Block) -> list[Out]:
        blocks = self.txn.blocks
        position = block.position
        if self.first < 0 or position < self.first:
            return []  # spilled; sent with a later block or at the end
        if position > self.first:
            changes = self.carry + self._kept(block.changes)
            if self.stopped:
                # ReorderBufferQueueChange drops the top-level transaction's changes
                # once it is marked concurrent_abort; its subtransactions' still come.
                # Memory then fills only with those: no block without one.
                changes = [c for c in changes if c.xid != self.txn.xid]
                if not changes:
                    self.carry = []
                    return []
            start = self.carry[0].lsn if self.carry else block.start_lsn
            self.carry = []
            return self._stream(walk, start, None, changes, block.stop_lsn)
        changes = self._kept([c for b in blocks[: position + 1] for c in b.changes])
        head = [c for c in changes if c.lsn <= self.cut]
        # Streamed at a change before the recorded block's end: the memory the rest of
        # the block takes is below the limit there, so it goes with the next block (where
        # the limit is hit again depends on the memory of changes the recording does not
        # have; the next recorded block's end is kept). The block streamed at commit
        # time takes what is left in any case.
        self.carry = [c for c in changes if c.lsn > self.cut]
        out = self._stream(walk, blocks[0].start_lsn, blocks[0].origin, head, self.cut, first=True)
        if self.cut < block.stop_lsn and position == len(blocks) - 1 and not self.stopped:
            rest = _Block(block.index, position + 1, block.stop_lsn, block.stop_lsn, None)
            out += self.block(walk, rest)
        return out

    def _stream(
        self,
        walk: _Walk,
        start: int,
        origin: bytes | None,
        changes: list[_Change],
        stop: int,
        *,
        first: bool = False,
    ) -> list[Out]:
        top = self.txn.xid
        sent, failed = walk.sendable(changes, self.txn.aborted)
        out: list[Out] = [(start, encode(StreamStart(top, first)))]
        if origin is not None:
            out.append((start, origin))
        for change in sent:
            out.extend(_with_schema(walk.cache, change, top, change.xid))
            self.streamed.add(change.xid)
        if failed:
            # ReorderBufferResetTXN: the block ends at the failed lookup and every change
            # in memory goes (ReorderBufferTruncateTXN, which marks the subtransactions
            # that had some as streamed: their Stream Abort still comes). The
            # transaction is streamed on in later blocks, each cut at its first lookup
            # that fails again (measured on 15-17).
            self.stopped = True
            self.streamed.update(c.xid for c in changes)
            self.carry = []
            stop = failed
        out.append((stop, b"E"))
        return out

    def abort(self, cache: _SchemaCache, position: int) -> list[Out]:
        _, subxid, lsn, payload = self.txn.aborts[position]
        if subxid in self.dropped:
            return []
        # Its changes still in memory are discarded (ReorderBufferAbort); a Stream Abort
        # goes only if some were streamed.
        unsent = [c for c in self.carry if c.xid == subxid]
        self.carry = [c for c in self.carry if c.xid != subxid]
        if unsent and subxid not in self.streamed:
            return []
        cache.forget(self.txn.xid, commit=False)
        return [(lsn, payload)]

    def finish(self, walk: _Walk, major: int) -> list[Out]:
        txn = self.txn
        end = txn.end
        cache = walk.cache
        if self.first >= 0:
            # Streamed: the last block (if any changes were left) came before; the end
            # goes as recorded.
            if not isinstance(end, StreamPrepare):
                cache.forget(txn.xid, commit=isinstance(end, StreamCommit))
            return [(txn.end_lsn, txn.end_payload)]
        # Never streamed by the new walsender: decoded whole at its end, unstreamed.
        if isinstance(end, StreamAbort) or end is None:
            return []
        changes = self._kept([c for b in txn.blocks for c in b.changes])
        if isinstance(end, StreamPrepare):
            first = txn.blocks[0].start_lsn if txn.blocks else txn.end_lsn
            aborted = txn.rolled_back and not walk.truncated(first, changes)
            changes, _ = walk.sendable(changes, aborted)
        else:
            walk.sendable(changes, False)
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


def _first_stream(txn: _Streamed, from_lsn: int, major: int) -> tuple[int, int, frozenset[int]]:
    """Where a new walsender starting at ``from_lsn`` first streams ``txn``: the index
    of the recorded block that holds that point, the LSN of the change it is at, and the
    subtransactions it discarded before (18: truncated as aborted).

    ``ReorderBufferCanStartStreaming`` allows streaming only once the record being
    decoded is at or after the start point: its start (``ReadRecPtr``) on 16+, its end
    (``EndRecPtr``) on 14 and 15. Before that, hitting logical_decoding_work_mem evicts
    the largest (sub)transaction by spilling it to disk (``ReorderBufferLargestTXN``,
    ``ReorderBufferSerializeTXN``; a top-level transaction spills with all its
    subtransactions). On 18 an evicted (sub)transaction already rolled back is truncated
    instead (``ReorderBufferCheckAndTruncateAbortedTXN``): its changes, and all it makes
    later, are discarded. A spilled (sub)transaction is then streamed at its very next
    change that may stream (``ReorderBufferProcessPartialChange`` checks the change's
    own (sub)transaction), without waiting for the memory limit; the others wait for
    the limit, hit at the recorded blocks' ends.

    The changes whose positions the recording has: each block's first and last change
    (Stream Start, Stream Stop) and the published changes. A change's record starts at
    its LSN and ends where the next known change starts; a transactional message's LSN
    is its record's end (``DecodeLogicalMsg`` queues it at ``buf->endptr``). The memory
    a (sub)transaction holds is estimated by the WAL from each of its changes to the
    next known one (the unpublished rows it wrote in between are not in the recording).
    """
    blocks = txn.blocks
    # The last block, when the end follows it at once, was streamed at commit time
    # (ReorderBufferStreamCommit), not because memory ran out.
    final = bool(blocks) and blocks[-1].index + 1 == txn.end_index
    limits = {b.stop_lsn for b in (blocks[:-1] if final else blocks)}
    if not limits:
        return -1, 0, frozenset()
    # (LSN, a message's record end?, the (sub)transaction's xid or None) in change order.
    events: list[tuple[int, bool, int | None]] = []
    for block in blocks:
        changes = block.changes
        if block.start_lsn and (not changes or changes[0].lsn != block.start_lsn):
            events.append((block.start_lsn, False, None))
        events.extend(
            (c.lsn, c.tag == ord("M"), None if c.tag == ord("M") else c.xid) for c in changes
        )
        if not changes or changes[-1].lsn != block.stop_lsn:
            events.append((block.stop_lsn, False, None))

    aborts = [lsn for _, _, lsn, _ in txn.aborts]
    rolled_back = {sub for _, sub, _, _ in txn.aborts}

    def may_stream(index: int) -> bool:
        lsn, message, _ = events[index]
        if major >= 16:  # the record's start
            if message:
                return index > 0 and events[index - 1][0] >= from_lsn
            return lsn >= from_lsn
        if message:  # the record's end
            return lsn >= from_lsn
        following = events[index + 1] if index + 1 < len(events) else None
        end = following[0] if following is not None and not following[1] else lsn
        # A subtransaction's abort recorded in between is a record in between: the
        # change's record ends before the abort's (whose position is its end).
        end = min([end, *(a - 1 for a in aborts if lsn < a <= end)])
        return end >= from_lsn

    def block_of(lsn: int) -> int:
        return next(i for i, b in enumerate(blocks) if b.stop_lsn >= lsn)

    top = txn.xid
    memory: dict[int, int] = {top: 0}  # by (sub)transaction, since its last eviction
    spilled: set[int] = set()  # RBTXN_IS_SERIALIZED
    truncated: set[int] = set()  # RBTXN_IS_ABORTED (18)
    owner = top  # whose change the WAL being read belongs to
    previous = events[0][0]
    for index, (lsn, _, xid) in enumerate(events):
        memory[owner] = memory.get(owner, 0) + lsn - previous
        previous = lsn
        if xid is not None:
            owner = xid
            memory.setdefault(xid, 0)
        if owner in truncated:
            continue  # ReorderBufferQueueChange drops it
        if may_stream(index):
            if owner in spilled or lsn in limits:
                return block_of(lsn), lsn, frozenset(truncated)
            continue
        if lsn not in limits:
            continue
        largest = max(memory, key=lambda x: (memory[x], x == top))
        if largest == top:
            spilled.update(memory)
            memory = dict.fromkeys(memory, 0)
        elif major >= 18 and largest in rolled_back:
            truncated.add(largest)
            spilled.discard(largest)
            del memory[largest]
        else:
            spilled.add(largest)
            memory[largest] = 0
    return -1, 0, frozenset(truncated)


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
