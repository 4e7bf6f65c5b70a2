"""A block of small transactions, made a block at a time instead of a change at a time.

The units (transactions and the rolled-back prepared ones between them) are drawn by
the generator; :func:`emit_units` then makes every change of the block at once and
frames the units, with as little Python per change as it can:

* **Ids.** A table's counters at any slot are its counters at the block's start plus
  the inserts and deletes of the committed slots before it (cumulative sums per table);
  every update's live id comes from two uniform arrays, as
  :meth:`~pgwire_mock.synth.generator._Block.pick_live` would pick it one at a time.
* **Rows.** Each table's rows are drawn and encoded in one go
  (:meth:`~pgwire_mock.synth.generator._Block.rows`).
* **LSNs.** Every record of the block (a message sent, or the 48-byte gap before a
  commit record) advances the LSN by a known amount, so all LSNs are one cumulative
  sum; Begin, Commit and the messages that carry their own LSN are encoded after it.

The result is the stream the one-change-at-a-time path makes for the same draws: the
same rules, the same order of messages and the same LSN arithmetic (``docs/synth.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import compress
from typing import TYPE_CHECKING, Final

import numpy as np
import numpy.typing as npt

from codec.pgoutput import (
    BeginPrepare,
    CommitPrepared,
    Message,
    Prepare,
    RollbackPrepared,
    encode_begin,
    encode_commit,
)
from pgwire_mock.synth.rowlog import NO_ROW
from pgwire_mock.synth.values import derive_seed

if TYPE_CHECKING:
    from pgwire_mock.synth.generator import _Block

__all__ = ["Framed", "emit_units", "frame"]

INS, UPD, KUPD, DEL = 0, 1, 2, 3
COMMIT, PREPARED_COMMIT, PREPARED_ROLLBACK = 0, 1, 2
_MSG_NT = 1
_GAP: Final = b""  # a record that is not sent: the commit record's 48 bytes of WAL
_MAX_ADVANCE: Final = 8192


def emit_units(b: _Block, kinds: list[int], lengths: list[int], flat: list[int]) -> None:
    """Append the events of units of ``kinds`` to ``b.out``: unit ``u`` holds the next
    ``lengths[u]`` slot codes of ``flat``."""
    s = b.s
    tables = s.tables
    n = len(flat)
    code = np.array(flat, np.int64)
    unit_committed = np.array(kinds, np.int64) != PREPARED_ROLLBACK
    committed = np.repeat(unit_committed, lengths)
    change = code < s._msg_base
    ti = np.where(change, code >> 2, -1)
    op = np.where(change, code & 3, -1)

    # Live ids, then message contents, from the block's own generator.
    rng = np.random.default_rng(derive_seed(s.seed, "changes", b.b))
    send, key, old = _ids(b, rng, committed, change, ti, op)

    # --- payloads ------------------------------------------------------------------------
    # Filled table by table through an object array: a scatter without a Python loop.
    slots = np.full(n, _GAP, dtype=object)
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
        with_row = np.nonzero(mine & (send != DEL))[0].tolist()
        sends = send[with_row].tolist()
        kids = key[with_row].tolist()
        olds = old[with_row].tolist()
        if not kids:
            rows: list[bytes] = []
            picks_at: list[int] = []
            toast: list[tuple[int, ...]] = []
            values: list[tuple[object, ...] | None] = []
        else:
            rows, picks_at, toast, values = b.rows(t, kids, [x == UPD for x in sends])
        heads = {INS: b"I" + oid + b"N", UPD: b"U" + oid + b"N"}
        moved = b"U" + oid + b"K"
        key_tuple = b.key_tuple
        made = [
            heads[x] + row if x != KUPD else moved + key_tuple(t, o) + b"N" + row
            for x, row, o in zip(sends, rows, olds, strict=True)
        ]
        if made:
            slots[with_row] = made
        deleted = np.nonzero(mine & (send == DEL))[0].tolist()
        gone = key[deleted].tolist()
        head = b"D" + oid + b"K"
        if deleted:
            slots[deleted] = [head + key_tuple(t, kid) for kid in gone]
        if b.log is not None and with_row:
            picks_slot[with_row] = picks_at
            if not t.simple:
                for k, entries in zip(with_row, toast, strict=True):
                    toast_slot[k] = entries
        if b.deltas is not None:
            values_slot.update(zip(with_row, values, strict=True))
    # Messages: contents drawn for every message slot; sent if the client asked for them.
    # A non-transactional one of a committed unit goes before its Begin.
    messages: dict[int, tuple[int, bytes]] = {}
    size = s.spec.messages.size
    for k in np.nonzero(~change)[0].tolist():
        content = rng.bytes(size)
        if s.send_messages:
            flags = 0 if flat[k] - s._msg_base == _MSG_NT and committed[k] else 1
            messages[k] = (flags, content)
    payload: list[bytes] = slots.tolist()

    # --- units -------------------------------------------------------------------------
    framed: list[Framed] = []
    logged: list[tuple[int, int, int]] = []  # committed units: (start, stop, framed index)
    sent = b.sent
    unit_of = np.repeat(np.arange(len(kinds)), lengths)
    with_messages = np.bincount(unit_of[~change], minlength=len(kinds)).tolist()
    xids = b.next_xids(len(kinds))
    # Commit times: the committed slots up to and including each unit.
    done = (b.done + np.cumsum(np.where(unit_committed, lengths, 0))).tolist()
    start_time, per_change = s.spec.start_time, s._usec_per_change
    if done:
        b.done = done[-1]
    start = 0
    for u, kind in enumerate(kinds):
        stop = start + lengths[u]
        if kind == PREPARED_ROLLBACK and not s.two_phase:
            start = stop  # PostgreSQL sends nothing of a transaction rolled back
            continue
        ts = start_time + int(done[u] * per_change)
        if len(sent) == len(tables) and not with_messages[u]:  # the common unit
            framed.append(Framed(kind, xids[u], ts, payload[start:stop]))  # type: ignore[arg-type]
        else:  # Relations before first uses, messages
            unit_framed = Framed(kind, xids[u], ts, [], messages=True)
            local: set[int] = set()
            for k in range(start, stop):
                found = messages.get(k)
                if found is not None:
                    if found[0] == 0:
                        unit_framed.pre.append(found[1])
                    else:
                        unit_framed.items.append((1, found[1], None))
                    continue
                table = int(ti[k])
                if table < 0:
                    continue  # a message the client did not ask for
                if table not in sent and table not in local:
                    unit_framed.items.append(tables[table].relation)
                    local.add(table)
                unit_framed.items.append(payload[k])
            sent |= local
            framed.append(unit_framed)
        if kind != PREPARED_ROLLBACK:
            logged.append((start, stop, len(framed) - 1))
        start = stop
    commits = frame(b, framed)

    # --- the state and the log ----------------------------------------------------------
    moved_from = np.where(op == KUPD, old, NO_ROW)
    if b.deltas is not None:
        op_list, key_list, old_list, table_list = (
            send.tolist(),
            key.tolist(),
            moved_from.tolist(),
            ti.tolist(),
        )
        for start, stop, _ in logged:
            for k in range(start, stop):
                if table_list[k] >= 0:
                    b.apply_delta(
                        table_list[k], op_list[k], key_list[k], old_list[k], values_slot.get(k)
                    )
    if b.log is not None:
        _log_rows(
            b,
            lengths,
            logged,
            framed,
            commits,
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
    b: _Block,
    lengths: list[int],
    logged: list[tuple[int, int, int]],
    framed: list[Framed],
    commits: list[int],
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
    number of changes (of any table) before it in its transaction."""
    assert b.log is not None
    unit_of = np.repeat(np.arange(len(lengths)), lengths)
    unit_start = np.repeat(np.cumsum(lengths) - lengths, lengths)
    before: npt.NDArray[np.int64] = np.cumsum(change) - change  # changes before each slot
    position: npt.NDArray[np.int64] = before - before[unit_start]
    # Per unit: its commit LSN, xid and commit time (committed units only).
    unit_commit = np.zeros((3, len(lengths)), np.int64)
    first_slot = {start: u for u, start in enumerate((np.cumsum(lengths) - lengths).tolist())}
    for start, _, at in logged:
        unit_commit[:, first_slot[start]] = (commits[at], framed[at].xid, framed[at].ts)
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
    b: _Block,
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
        high[mine] = b.high[i] + (np.cumsum(ins) - ins)[mine]
        low[mine] = b.low[i] + (np.cumsum(dels) - dels)[mine]
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
    phantom_id = -(b.phantoms + np.cumsum(new_phantom))
    b.phantoms += int(new_phantom.sum())
    key = np.where(
        committed,
        np.choose(np.maximum(op, 0), [high, live, high, low]),
        np.where(new_phantom, phantom_id, live),
    )
    old = np.where(committed, low, live)

    return send, key, old


@dataclass(slots=True)
class Framed:
    """A transaction to frame: its kind, xid and commit time, its items (payloads, or
    (flags, content, xid) messages, which carry their own LSN; ``messages`` says whether
    there are any) and the contents of the non-transactional messages sent before it."""

    kind: int
    xid: int
    ts: int
    items: list[bytes | tuple[int, bytes, int | None]]
    messages: bool = False
    pre: list[bytes] = field(default_factory=list)


def frame(b: _Block, units: list[Framed]) -> list[int]:
    """Append ``units`` to ``b.out`` with Begin and Commit (or BeginPrepare, Prepare and
    Commit/Rollback Prepared when the client takes two-phase transactions) around each;
    returns each unit's commit LSN (for a prepared one: its COMMIT PREPARED's).

    Each record sent advances the LSN by 24 + its size rounded up to 8 (at most 8 KiB);
    Begin's LSN is taken before its size is known (it names the commit LSN); the commit
    record takes 48 bytes of WAL before the Commit message. So every LSN is one
    cumulative sum, and Begin, Commit and the messages are encoded after it."""
    s = b.s
    prefix = s._prefix
    two_phase = s.two_phase
    records: list[bytes] = []  # in stream order; _GAP for a placeholder
    sizes: list[int] = []  # per record; -1: the gap before a commit record (not sent)
    message_at: list[tuple[int, int, bytes, int | None]] = []  # (record, flags, content, xid)
    fills: list[tuple[int, int, int, int, int, bool]] = []  # (Begin, last, kind, xid, ts, 2PC)
    commit_size = len(encode_commit(0, 0, 0, 0))

    def message(flags: int, content: bytes, xid: int | None) -> None:
        message_at.append((len(records), flags, content, xid))
        records.append(_GAP)
        sizes.append(len(Message(flags, 0, prefix, content, xid=xid).encode()))

    for unit in units:
        for content in unit.pre:
            message(0, content, None)
        begin_at = len(records)
        records.append(_GAP)
        sizes.append(0)
        if unit.messages:
            for item in unit.items:
                if isinstance(item, bytes):
                    records.append(item)
                    sizes.append(len(item))
                else:
                    message(*item)
        else:
            records += unit.items  # type: ignore[arg-type]
            sizes += map(len, unit.items)
        prepared = unit.kind != COMMIT and two_phase
        records.append(_GAP)
        sizes.append(-1)
        records.append(_GAP)
        if prepared:
            gid = f"synth-{unit.xid}"
            sizes.append(len(Prepare(0, 0, 0, 0, unit.xid, gid).encode()))
            records.append(_GAP)
            sizes.append(-1)
            records.append(_GAP)
            finish = (
                CommitPrepared(0, 0, 0, 0, unit.xid, gid)
                if unit.kind == PREPARED_COMMIT
                else RollbackPrepared(0, 0, 0, 0, 0, unit.xid, gid)
            )
            sizes.append(len(finish.encode()))
        else:
            sizes.append(commit_size)
        fills.append((begin_at, len(records) - 1, unit.kind, unit.xid, unit.ts, prepared))
    if not records:
        return []
    size_array = np.array(sizes, np.int64)
    advance = np.where(size_array < 0, 48, 24 + np.minimum((size_array + 7) & ~7, _MAX_ADVANCE))
    ends = np.cumsum(advance)
    lsns = (b.lsn + ends - advance).tolist()
    b.lsn += int(ends[-1])
    for at, flags, content, xid in message_at:
        records[at] = Message(flags, lsns[at], prefix, content, xid=xid).encode()
    commits: list[int] = []
    for begin_at, last, kind, xid, ts, prepared in fills:
        # The unit ends with gap, Commit, or with gap, Prepare, gap, Commit/Rollback Prepared.
        if not prepared:
            commit_lsn = lsns[last - 1]
            records[begin_at] = encode_begin(commit_lsn, ts, xid)
            records[last] = encode_commit(0, commit_lsn, lsns[last], ts)
            commits.append(commit_lsn)
            continue
        gid = f"synth-{xid}"
        commit_lsn, end_lsn = lsns[last - 3], lsns[last - 2]
        records[begin_at] = BeginPrepare(commit_lsn, end_lsn, ts, xid, gid).encode()
        records[last - 2] = Prepare(0, commit_lsn, end_lsn, ts, xid, gid).encode()
        finish_lsn, done = lsns[last - 1], lsns[last]
        if kind == PREPARED_COMMIT:
            records[last] = CommitPrepared(0, finish_lsn, done, ts, xid, gid).encode()
        else:
            records[last] = RollbackPrepared(0, end_lsn, done, ts, ts, xid, gid).encode()
        commits.append(finish_lsn)
    b.out += compress(zip(lsns, records, strict=True), (size_array >= 0).tolist())
    return commits
