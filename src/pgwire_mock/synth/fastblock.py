"""A block of small transactions, made a block at a time instead of a change at a time.

The units (transactions and the rolled-back prepared ones between them) are drawn by
the generator; :func:`emit_units` then makes every change of the block at once and
frames the units, with as little Python per change as it can:

* **Ids.** A table's counters at any slot are its counters at the block's start plus
  the inserts and deletes of the committed slots before it (cumulative sums per table);
  every update's live id comes from two uniform arrays, as
  :meth:`~pgwire_mock.synth.block.Block.pick_live` would pick it one at a time.
* **Rows.** Each table's rows are drawn and encoded in one go
  (:meth:`~pgwire_mock.synth.block.Block.rows`).
* **LSNs.** Every record of the block (a message sent, or the 48-byte gap before a
  commit record) advances the LSN by a known amount, so all LSNs are one cumulative
  sum; Begin, Commit and the messages that carry their own LSN are encoded after it.

The result is the stream the one-change-at-a-time path makes for the same draws: the
same rules, the same order of messages and the same LSN arithmetic (``docs/synth.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import compress, repeat
from typing import TYPE_CHECKING, Final

import numpy as np
import numpy.typing as npt

from codec.pgoutput import (
    BeginPrepare,
    CommitPrepared,
    Message,
    Prepare,
    RollbackPrepared,
    encode_commit,
)
from pgwire_mock.synth.rowlog import DELETE, INSERT, KEY_UPDATE, NO_ROW, UPDATE

if TYPE_CHECKING:
    from pgwire_mock.synth.block import Block

__all__ = ["Framed", "Item", "Units", "emit_units", "frame"]

# Slot operations are the log's row operations (rowlog); unit kinds are defined here.
INS, UPD, KUPD, DEL = INSERT, UPDATE, KEY_UPDATE, DELETE
COMMIT, PREPARED_COMMIT, PREPARED_ROLLBACK, ABORT = range(4)
_MSG_NT = 1
_GAP: Final = b""  # a record that is not sent: the commit record's 48 bytes of WAL
_MAX_ADVANCE: Final = 8192


def emit_units(b: Block, kinds: list[int], lengths: list[int], code: npt.NDArray[np.int64]) -> None:
    """Append the events of units of ``kinds`` to ``b.out``: unit ``u`` holds the next
    ``lengths[u]`` slot codes of ``code``."""
    s = b.s
    tables = s.tables
    n = len(code)
    # (ndarray methods rather than np.* functions: no Python wrapper, ~1 µs a call)
    unit_length = np.array(lengths, np.int64)
    unit_committed = np.array(kinds, np.int64) != PREPARED_ROLLBACK
    committed = unit_committed.repeat(unit_length)
    change = code < s._msg_base
    ti = np.where(change, code >> 2, -1)
    op = np.where(change, code & 3, -1)

    # Live ids, then message contents, from the block's own generator.
    rng = b.draws
    send, key, old = _ids(b, rng, committed, change, ti, op)

    # --- payloads ------------------------------------------------------------------------
    # Filled table by table through an object array: a scatter without a Python loop. A
    # block that only logs rows (b.payloads false) needs just each payload's size, for
    # the LSNs: its rows are then sized, not made.
    slots = np.full(n, _GAP, dtype=object)
    slot_size = np.zeros(n, np.int64)
    # For the log: each slot's row (its index among the rows drawn) and TOAST entries.
    picks_slot = np.full(n, NO_ROW, np.int64)
    toast_slot: list[tuple[int, ...]] = [()] * n
    values_slot: dict[int, tuple[object, ...] | None] = {}  # for the tracked state
    for t in tables:
        i = t.index
        mine = change & (ti == i)
        if not mine.any():
            continue
        oid = t.oid_bytes
        row_at = np.nonzero(mine & (send != DEL))[0]
        with_row = row_at.tolist()
        deleted = np.nonzero(mine & (send == DEL))[0]
        key_size = len(t.key_before) + len(t.key_after)  # a key tuple, less its key column
        if with_row:
            sends = send[row_at]
            moved = sends == KUPD
            heads: list[bytes] | None = None
            if b.payloads:
                # Each change's header; a key update's also holds its old key.
                by_op = {INS: b"I" + oid + b"N", UPD: b"U" + oid + b"N", KUPD: b""}
                heads = list(map(by_op.__getitem__, sends.tolist()))
                olds = old[row_at].tolist()
                for j in np.nonzero(moved)[0].tolist():
                    heads[j] = b"U" + oid + b"K" + b.key_tuple(t, olds[j]) + b"N"
            made = b.rows(t, key[row_at], sends == UPD, heads)
            if made.data is not None:
                slots[row_at] = made.data
            else:
                assert made.sizes is not None
                head_size = 6 + moved * (key_size + 1 + t.key.many_column_sizes(old[row_at]))
                slot_size[row_at] = head_size + made.sizes
            picks_slot[row_at] = made.at
            if made.toast is not None:
                for k, entries in zip(with_row, made.toast, strict=True):
                    toast_slot[k] = entries
            if made.values is not None:
                values_slot.update(zip(with_row, made.values, strict=True))
        if len(deleted) and not b.payloads:
            slot_size[deleted] = 6 + key_size + t.key.many_column_sizes(key[deleted])
        elif len(deleted):
            keys = t.key.many_column_bytes(key[deleted].tolist())
            head, tail = b"D" + oid + b"K" + t.key_before, t.key_after
            slots[deleted] = list(map(b"".join, zip(repeat(head), keys, repeat(tail))))
    if b.payloads:
        slot_size = np.fromiter(map(len, slots.tolist()), np.int64, n)
    # Messages: contents drawn for every message slot; sent if the client asked for them.
    # A non-transactional one of a committed unit goes before its Begin.
    messages: dict[int, tuple[int, bytes]] = {}
    size = s.spec.messages.size
    for k in np.nonzero(~change)[0].tolist():
        content = rng.bytes(size)
        if s.send_messages:
            flags = 0 if code[k] - s._msg_base == _MSG_NT and committed[k] else 1
            messages[k] = (flags, content)

    # --- units -------------------------------------------------------------------------
    # The block's units as columns. Every unit is sent but a rolled-back one without
    # two-phase (PostgreSQL sends nothing of it). A unit is *plain* when its items are
    # just its slots' payloads: every Relation already sent, no message slot.
    sent = b.sent
    unit_of = np.arange(len(kinds)).repeat(unit_length)
    with_messages = np.bincount(unit_of[~change], minlength=len(kinds))
    xids = b.next_xids(len(kinds))
    kind_array = np.array(kinds, np.int64)
    ends = unit_length.cumsum()
    starts = ends - unit_length
    # Commit times: from the committed slots up to and including each unit.
    done = b.done + (unit_length * unit_committed).cumsum()
    if len(done):
        b.done = int(done[-1])
    per_change = s._usec_per_change
    # As Block.timestamp: the same float product, truncated.
    ts = s.spec.start_time + (done * per_change).astype(np.int64)
    emitted = np.nonzero(unit_committed | s.two_phase)[0]
    # Units before every table's Relation went out are framed one by one, in order.
    items: dict[int, Framed] = {}

    def one_by_one(position: int) -> None:
        u = int(emitted[position])
        items[position] = _unit_items(
            b, kinds[u], int(xids[u]), int(ts[u]), messages, ti, starts[u], ends[u]
        )

    leading = 0
    while leading < len(emitted) and len(sent) < len(tables):
        one_by_one(leading)
        leading += 1
    for position in np.nonzero(with_messages[emitted[leading:]])[0].tolist():
        one_by_one(leading + position)
    units = Units(
        kind_array[emitted], xids[emitted], ts[emitted], starts[emitted], ends[emitted], items
    )
    commit_lsn = np.zeros(len(kinds), np.int64)  # per unit (committed ones are all sent)
    commit_lsn[emitted] = frame(b, units, slots, slot_size)

    # --- the state and the log ----------------------------------------------------------
    moved_from = np.where(op == KUPD, old, NO_ROW)
    if b.deltas is not None:
        op_list, key_list, old_list, table_list = (
            send.tolist(),
            key.tolist(),
            moved_from.tolist(),
            ti.tolist(),
        )
        for k in np.nonzero(committed & change)[0].tolist():  # in stream order
            b.apply_delta(table_list[k], op_list[k], key_list[k], old_list[k], values_slot.get(k))
    if b.log is not None:
        _log_rows(
            b,
            unit_length,
            np.stack([commit_lsn, xids, ts]),
            change,
            committed,
            ti,
            op,
            key,
            moved_from,
            picks_slot,
            toast_slot,
        )


def _log_rows(
    b: Block,
    lengths: npt.NDArray[np.int64],
    unit_commit: npt.NDArray[np.int64],
    change: npt.NDArray[np.bool_],
    committed: npt.NDArray[np.bool_],
    ti: npt.NDArray[np.int64],
    op: npt.NDArray[np.int64],
    key: npt.NDArray[np.int64],
    moved_from: npt.NDArray[np.int64],
    picks_slot: npt.NDArray[np.int64],
    toast_slot: list[tuple[int, ...]],
) -> None:
    """The committed rows of the log's tables, column by column: a row's position is the
    number of changes (of any table) before it in its transaction. ``unit_commit`` holds
    each unit's commit LSN, xid and commit time (rows)."""
    assert b.log is not None
    unit_of = np.arange(len(lengths)).repeat(lengths)
    unit_start = (lengths.cumsum() - lengths).repeat(lengths)
    before: npt.NDArray[np.int64] = change.cumsum() - change  # changes before each slot
    position: npt.NDArray[np.int64] = before - before[unit_start]
    for table in b.log.wanted:
        rows = np.nonzero(committed & change & (ti == table))[0]
        if not len(rows):
            continue
        commit_lsn, xid, commit_time = unit_commit[:, unit_of[rows]]
        columns = {
            "op": op[rows],
            "position": position[rows],
            "key": key[rows],
            "old": moved_from[rows],
            "picks_at": picks_slot[rows],
            "commit_lsn": commit_lsn,
            "xid": xid,
            "commit_time": commit_time,
        }
        b.log.extend(table, columns, [toast_slot[k] for k in rows.tolist()])


def _ids(
    b: Block,
    rng: np.random.Generator,
    committed: npt.NDArray[np.bool_],
    change: npt.NDArray[np.bool_],
    ti: npt.NDArray[np.int64],
    op: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Per slot: what it sends (its op, or an insert for a rolled-back slot with no live
    row to hit), the id of the row it shows, and the old id a key update moves from.
    Advances the block's counters."""
    s = b.s
    tables = s.tables
    n = len(op)
    ins_like = committed & ((op == INS) | (op == KUPD))
    del_like = committed & ((op == DEL) | (op == KUPD))
    high = np.zeros(n, np.int64)
    low = np.zeros(n, np.int64)
    for t in tables:
        i = t.index
        mine = ti == i
        if not mine.any():
            continue
        ins = ins_like & mine
        dels = del_like & mine
        high[mine] = b.high[i] + (ins.cumsum() - ins)[mine]
        low[mine] = b.low[i] + (dels.cumsum() - dels)[mine]
        b.high[i] += int(ins.sum())
        b.low[i] += int(dels.sum())
    r = rng.random((2, n))
    hot = np.array([t.hot for t in tables] + [0], np.int64)[ti]
    hot_ratio = np.array([t.hot_ratio for t in tables] + [0.0])[ti]
    empty = low >= high
    use_hot = (hot > 0) & (empty | (r[0] < hot_ratio))
    live = np.where(
        use_hot,
        (r[1] * hot).astype(np.int64),
        low + (r[1] * np.maximum(high - low, 0)).astype(np.int64),
    )
    has_live = use_hot | ~empty
    # Rolled-back slots move no counter: an insert (or anything without a live row to
    # hit) inserts a new negative id; a key update moves a live row to one.
    phantom = change & ~committed
    send = np.where(phantom & ~has_live, INS, op)
    new_phantom = phantom & ((send == INS) | (send == KUPD))
    phantom_id = -(b.phantoms + new_phantom.cumsum())
    b.phantoms += int(new_phantom.sum())
    key = np.where(
        committed,
        np.choose(np.maximum(op, 0), [high, live, high, low]),
        np.where(new_phantom, phantom_id, live),
    )
    old = np.where(committed, low, live)

    return send, key, old


def _unit_items(
    b: Block,
    kind: int,
    xid: int,
    ts: int,
    messages: dict[int, tuple[int, bytes]],
    ti: npt.NDArray[np.int64],
    start: int,
    stop: int,
) -> Framed:
    """A unit's items one by one: its slots, a table's Relation before its first use in
    the block, messages where their slots are (a non-transactional one before the
    Begin)."""
    tables = b.s.tables
    sent = b.sent
    unit = Framed(kind, xid, ts, [])
    local: set[int] = set()
    for k in range(start, stop):
        found = messages.get(k)
        if found is not None:
            if found[0] == 0:
                unit.pre.append(found[1])
            else:
                unit.items.append((1, found[1], None))
            continue
        table = int(ti[k])
        if table < 0:
            continue  # a message the client did not ask for
        if table not in sent and table not in local:
            unit.items.append(tables[table].relation)
            local.add(table)
        unit.items.append(k)
    sent |= local
    return unit


# Begin and Commit as numpy records, so a block's are encoded in one go (the same bytes
# as codec.pgoutput.encode_begin / encode_commit, which a test checks): a record array
# viewed as one opaque item per record gives one ``bytes`` per message on ``tolist()``.
_BEGIN: Final = np.dtype([("tag", "S1"), ("final_lsn", ">u8"), ("time", ">i8"), ("xid", ">u4")])
_COMMIT: Final = np.dtype(
    [("tag", "S1"), ("flags", "u1"), ("lsn", ">u8"), ("end_lsn", ">u8"), ("time", ">i8")]
)


def encode_begins(final_lsn: npt.ArrayLike, time: npt.ArrayLike, xid: npt.ArrayLike) -> list[bytes]:
    """``encode_begin`` of each (final LSN, commit time, xid)."""
    out = np.empty(len(np.asarray(final_lsn)), _BEGIN)
    out["tag"], out["final_lsn"], out["time"], out["xid"] = b"B", final_lsn, time, xid
    begins: list[bytes] = out.view(f"V{_BEGIN.itemsize}").tolist()
    return begins


def encode_commits(lsn: npt.ArrayLike, end_lsn: npt.ArrayLike, time: npt.ArrayLike) -> list[bytes]:
    """``encode_commit(0, …)`` of each (commit LSN, end LSN, commit time)."""
    out = np.empty(len(np.asarray(lsn)), _COMMIT)
    out["tag"], out["flags"], out["lsn"], out["end_lsn"], out["time"] = b"C", 0, lsn, end_lsn, time
    commits: list[bytes] = out.view(f"V{_COMMIT.itemsize}").tolist()
    return commits


#: What a unit holds: a payload, a slot of the block, or a message (flags, content, xid).
Item = bytes | int | tuple[int, bytes, int | None]


@dataclass(slots=True)
class Framed:
    """A transaction's items given one by one: payloads, slots of the block (whose
    payloads :func:`frame` is given), or (flags, content, xid) messages, which carry
    their own LSN; and the contents of the non-transactional messages sent before it."""

    kind: int
    xid: int
    ts: int
    items: list[Item]
    pre: list[bytes] = field(default_factory=list)


@dataclass(slots=True)
class Units:
    """Transactions to frame, as columns: kind, xid, commit time, and the slots
    ``[start, stop)`` of the payloads that are the unit's items, unless ``items`` gives
    the unit's items explicitly (by unit index)."""

    kind: npt.NDArray[np.int64]
    xid: npt.NDArray[np.int64]
    ts: npt.NDArray[np.int64]
    start: npt.NDArray[np.int64]
    stop: npt.NDArray[np.int64]
    items: dict[int, Framed]

    @classmethod
    def one(cls, unit: Framed) -> Units:
        one = np.array([0], np.int64)
        return cls(
            np.array([unit.kind], np.int64),
            np.array([unit.xid], np.int64),
            np.array([unit.ts], np.int64),
            one,
            one,
            {0: unit},
        )


def frame(
    b: Block,
    units: Units,
    payload: npt.NDArray[np.object_],
    payload_size: npt.NDArray[np.int64],
) -> npt.NDArray[np.int64]:
    """Append ``units`` to ``b.out`` with Begin and Commit (or BeginPrepare, Prepare and
    Commit/Rollback Prepared when the client takes two-phase transactions) around each;
    returns each unit's commit LSN (for a prepared one: its COMMIT PREPARED's). Slot
    ``k``'s payload is ``payload[k]``, of ``payload_size[k]`` bytes; a block that makes
    no payloads (``b.payloads`` false) only advances its LSN.

    Each record sent advances the LSN by 24 + its size rounded up to 8 (at most 8 KiB);
    Begin's LSN is taken before its size is known (it names the commit LSN); the commit
    record takes 48 bytes of WAL before the Commit message. So the records of all units
    are laid out at once, every LSN is one cumulative sum, and Begin, Commit and the
    messages are encoded after it. Only units with explicit items, and prepared ones,
    take Python per unit."""
    s = b.s
    prefix = s._prefix
    count = len(units.kind)
    if not count:
        return np.zeros(0, np.int64)
    prepared = (units.kind != COMMIT) & s.two_phase
    explicit = np.zeros(count, np.bool_)
    pre_count = np.zeros(count, np.int64)
    item_count = units.stop - units.start
    for u, unit in units.items.items():
        explicit[u] = True
        pre_count[u] = len(unit.pre)
        item_count[u] = len(unit.items)
    # Per unit: [pre messages], Begin, items, gap, Commit | gap, Prepare, gap, finish.
    records_per_unit = pre_count + 1 + item_count + np.where(prepared, 4, 2)
    first = records_per_unit.cumsum() - records_per_unit
    begin = first + pre_count
    gap = begin + 1 + item_count
    last = first + records_per_unit - 1
    total = int(records_per_unit.sum())
    records = np.full(total, _GAP, dtype=object)
    sizes = np.zeros(total, np.int64)
    sizes[gap] = -1
    sizes[last] = len(encode_commit(0, 0, 0, 0))
    # The items of the other units: their slots' payloads, placed in one go.
    plain = np.nonzero(~explicit)[0]
    if len(plain):
        lengths = item_count[plain]
        slot = (units.start[plain] - lengths.cumsum() + lengths).repeat(lengths)
        slot += np.arange(len(slot))
        placed = (begin[plain] + 1 - lengths.cumsum() + lengths).repeat(lengths)
        placed += np.arange(len(placed))
        sizes[placed] = payload_size[slot]
        if b.payloads:
            records[placed] = payload[slot]
    message_at: list[tuple[int, int, bytes, int | None]] = []
    for u, unit in units.items.items():
        at: int = int(first[u])
        for content in unit.pre:
            message_at.append((at, 0, content, None))
            sizes[at] = len(Message(0, 0, prefix, content).encode())
            at += 1
        at += 1  # Begin
        for item in unit.items:
            if isinstance(item, int):  # a slot
                records[at] = payload[item] if b.payloads else _GAP
                sizes[at] = payload_size[item]
            elif isinstance(item, bytes):
                records[at] = item
                sizes[at] = len(item)
            else:
                message_at.append((at, *item))
                sizes[at] = len(Message(item[0], 0, prefix, item[1], xid=item[2]).encode())
            at += 1
    gids = {u: f"synth-{units.xid[u]}" for u in np.nonzero(prepared)[0].tolist()}
    for u, gid in gids.items():
        xid = int(units.xid[u])
        sizes[last[u] - 2] = len(Prepare(0, 0, 0, 0, xid, gid).encode())
        sizes[last[u] - 1] = -1
        finish = (
            CommitPrepared(0, 0, 0, 0, xid, gid)
            if units.kind[u] == PREPARED_COMMIT
            else RollbackPrepared(0, 0, 0, 0, 0, xid, gid)
        )
        sizes[last[u]] = len(finish.encode())
    advance = np.where(sizes < 0, 48, 24 + np.minimum((sizes + 7) & ~7, _MAX_ADVANCE))
    ends = advance.cumsum()
    lsn_array = b.lsn + ends - advance
    b.lsn += int(ends[-1])
    commits: npt.NDArray[np.int64] = lsn_array[gap]
    commits[prepared] = lsn_array[last[prepared] - 1]  # COMMIT PREPARED's gap
    if not b.payloads:
        return commits
    lsns = lsn_array.tolist()
    for at, flags, content, message_xid in message_at:
        records[at] = Message(flags, lsns[at], prefix, content, xid=message_xid).encode()
    unprepared = np.nonzero(~prepared)[0]
    if len(unprepared):
        commit_lsn, ts = commits[unprepared], units.ts[unprepared]
        records[begin[unprepared]] = encode_begins(commit_lsn, ts, units.xid[unprepared])
        records[last[unprepared]] = encode_commits(commit_lsn, lsn_array[last[unprepared]], ts)
    for u, gid in gids.items():
        xid, ts_u, end = int(units.xid[u]), int(units.ts[u]), int(last[u])
        commit_lsn_u, end_lsn = lsns[end - 3], lsns[end - 2]
        records[begin[u]] = BeginPrepare(commit_lsn_u, end_lsn, ts_u, xid, gid).encode()
        records[end - 2] = Prepare(0, commit_lsn_u, end_lsn, ts_u, xid, gid).encode()
        finish_lsn, done = lsns[end - 1], lsns[end]
        if units.kind[u] == PREPARED_COMMIT:
            records[end] = CommitPrepared(0, finish_lsn, done, ts_u, xid, gid).encode()
        else:
            records[end] = RollbackPrepared(0, end_lsn, done, ts_u, ts_u, xid, gid).encode()
    b.out += compress(zip(lsns, records.tolist(), strict=True), (sizes >= 0).tolist())
    return commits
