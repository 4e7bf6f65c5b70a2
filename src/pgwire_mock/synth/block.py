"""One block of the synthetic stream: its RNG, id counters, LSN cursor and output.

:class:`Block` makes block ``b`` of a :class:`~pgwire_mock.synth.generator.Synth` from
generators seeded by ``(seed, b)`` alone; a block of small transactions is made a block
at a time (:mod:`.fastblock`), the rest here, a change at a time.
"""

from __future__ import annotations

import math
import random
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, overload

import numpy as np
import numpy.typing as npt

from codec.pgoutput import (
    CommitPrepared,
    Message,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
)
from pgwire_mock.synth.fastblock import (
    ABORT,
    COMMIT,
    DEL,
    INS,
    KUPD,
    PREPARED_COMMIT,
    PREPARED_ROLLBACK,
    UPD,
    Framed,
    Item,
    Units,
    emit_units,
    frame,
)
from pgwire_mock.synth.rowlog import NO_ROW, RowLog
from pgwire_mock.synth.rowparts import RowChunk
from pgwire_mock.synth.state import StateDelta, TableDelta
from pgwire_mock.synth.table import Table
from pgwire_mock.synth.values import derive_seed

if TYPE_CHECKING:
    from pgwire_mock.synth.generator import Synth

__all__ = ["MSG_NT", "MSG_TX", "Block", "Rows", "StreamItem"]

#: (LSN, pgoutput payload): what an XLogData message carries.
StreamItem = tuple[int, bytes]

#: A message slot's code is the synth's ``_msg_base`` plus one of these.
MSG_TX, MSG_NT = 0, 1
_BLOCK_LSN_SPAN: Final = 1 << 32
_FIRST_XID: Final = 1000
_XID_SPACE: Final = (1 << 32) - 3  # xids 0-2 are reserved (Invalid, Bootstrap, Frozen)

_XID = struct.Struct("!I")
# emit_plain frames explicit items only, no slots of the block.
_NO_SLOTS: Final = (np.empty(0, dtype=object), np.empty(0, dtype=np.int64))


@overload
def _xid(block: int, local: int, per_block: int) -> int: ...
@overload
def _xid(block: int, local: npt.NDArray[np.int64], per_block: int) -> npt.NDArray[np.int64]: ...
def _xid(
    block: int, local: int | npt.NDArray[np.int64], per_block: int
) -> int | npt.NDArray[np.int64]:
    """The xid of a block's ``local``-th transaction (or of each in an array of them)."""
    return 3 + (_FIRST_XID + block * per_block + local) % _XID_SPACE


@dataclass(slots=True)
class Rows:
    """Rows made at once (:meth:`Block.rows`): their indexes in the log, and the changes'
    bytes or their rows' sizes; per row its TOAST entries (None: no TOAST column) and
    values (None: the state is not tracked)."""

    at: npt.NDArray[np.int64]
    data: list[bytes] | None = None
    sizes: npt.NDArray[np.int64] | None = None
    toast: list[tuple[int, ...]] | None = None
    values: list[tuple[object, ...]] | None = None


class Block:
    """The generation of one block: its RNG, id counters, LSN cursor and output."""

    def __init__(
        self, synth: Synth, block: int, state: StateDelta | None, log: RowLog | None = None
    ) -> None:
        self.s = synth
        self.b = block
        self.rng = random.Random(derive_seed(synth.seed, "block", block))
        self.out: list[StreamItem] = []
        self.lsn = synth.spec.start_lsn + block * _BLOCK_LSN_SPAN
        self.sent: set[int] = set()  # tables whose Relation this block has sent
        self.local_xid = 0
        self.phantoms = 0
        self.done = block * synth.block_size  # committed slots before the current unit
        windows = [t.window(block) for t in synth.tables]
        self.low = [w[0] for w in windows]
        self.high = [w[1] for w in windows]
        self.state = state
        # Rows are drawn per table a chunk at a time, from the table's own numpy generator.
        self.chunks: list[RowChunk | None] = [None] * len(synth.tables)
        self.cursor = [0] * len(synth.tables)
        self.row_rngs: list[np.random.Generator | None] = [None] * len(synth.tables)
        #: The block's numpy draws besides rows, in a fixed order: its slots' order, then
        #: (small blocks) its transactions, then its live ids and message contents.
        self.draws = np.random.default_rng(derive_seed(synth.seed, "draws", block))
        # With a RowLog: each drawn chunk's index in the log, and the last row's picks and
        # TOAST entries (what the log needs of the row just made).
        self.log = log
        #: Whether the block makes its payloads: not when it only logs rows.
        self.payloads = log is None
        self.bases = [0] * len(synth.tables)
        self.row_at = NO_ROW
        self.toast_at: tuple[int, ...] = ()
        self.deltas: list[TableDelta] | None = (
            None if state is None else [state.table(t.name) for t in synth.tables]
        )

    # --- helpers --------------------------------------------------------------------------

    def next_xid(self) -> int:
        self.local_xid += 1
        return _xid(self.b, self.local_xid, self.s._xids_per_block)

    def next_xids(self, count: int) -> npt.NDArray[np.int64]:
        """The next ``count`` xids, as ``count`` calls of :meth:`next_xid` give them."""
        first = self.local_xid + 1
        self.local_xid += count
        local = np.arange(first, first + count, dtype=np.int64)
        return _xid(self.b, local, self.s._xids_per_block)

    def timestamp(self) -> int:
        return self.s.spec.start_time + int(self.done * self.s._usec_per_change)

    def put(self, payload: bytes) -> int:
        lsn = self.lsn
        self.out.append((lsn, payload))
        size = (len(payload) + 7) & ~7
        self.lsn = lsn + 24 + (size if size < 8192 else 8192)
        return lsn

    def advance(self, nbytes: int) -> int:
        """Reserve WAL for a record that is not sent (a commit record); return its start."""
        lsn = self.lsn
        self.lsn += nbytes
        return lsn

    def message(self, flags: int, content: bytes, xid: int | None) -> None:
        payload = Message(flags, self.lsn, self.s._prefix, content, xid=xid).encode()
        self.put(payload)

    def unit_sizes(self, uniforms: npt.NDArray[np.float64]) -> list[int]:
        """Transaction sizes, one per uniform draw in [0, 1), by the spec's distribution."""
        spec = self.s.spec
        low, high, mean = spec.size_min, spec.size_max, spec.size_mean
        if spec.size_distribution == "fixed":
            return [max(low, min(high, round(mean)))] * len(uniforms)
        if spec.size_distribution == "uniform":
            uniform: list[int] = (low + (uniforms * (high - low + 1)).astype(np.int64)).tolist()
            return uniform
        extra = mean - low
        if extra <= 0:
            return [low] * len(uniforms)
        # Geometric by inversion. The logarithm is the C library's (math.log), not numpy's
        # own vectorised one, whose last bit may depend on the CPU: shards made on other
        # machines must agree byte for byte. Subtraction and division are exact IEEE.
        scale = math.log1p(-1.0 / (extra + 1.0))
        logs = np.fromiter(map(math.log, (1.0 - uniforms).tolist()), np.float64, len(uniforms))
        geometric: list[int] = np.minimum(high, low + (logs / scale).astype(np.int64)).tolist()
        return geometric

    # --- the block --------------------------------------------------------------------------

    def run(self) -> list[StreamItem]:
        s = self.s
        rng = self.rng
        last = self.b == s.blocks - 1
        codes = s._last_codes if last else s._full_codes
        # The first block after a table (re)starts has no old rows to delete yet.
        resets = [t for t in s.tables if t.is_reset(self.b)]
        if resets:
            listed = list(s._last if last else s._full)
            reset_ids = {t.index for t in resets}
            for i, code in enumerate(listed):
                if code < s._msg_base and code // 4 in reset_ids and code % 4 in (KUPD, DEL):
                    listed[i] = code - code % 4 + UPD
            codes = np.array(listed, np.int64)
            self.reset_unit(resets)
        # The block's order: one numpy permutation (random.shuffle cost ~1 µs a slot).
        codes = codes[self.draws.permutation(len(codes))]
        large = rng.random() < s.spec.large.ratio
        if large:
            self.large_block(codes.tolist())
        else:
            self.small_units(codes)
        return self.out

    def reset_unit(self, tables: list[Table]) -> None:
        """Block 0 / truncate blocks: TRUNCATE (after block 0) and insert the hot rows."""
        xid = self.next_xid()
        body: list[Item] = []
        local: set[int] = set()
        truncated = [t for t in tables if self.b > 0]
        for t in truncated:
            body.append(t.relation)
            local.add(t.index)
            if self.deltas is not None:
                self.deltas[t.index].truncate()
        if truncated:
            body.append(Truncate(0, tuple(t.spec.oid for t in truncated)).encode())
            if self.log is not None:
                self.log.truncate([t.index for t in truncated])
        for t in tables:
            for kid in range(t.hot):
                if t.index not in local:
                    body.append(t.relation)
                    local.add(t.index)
                body.append(self.insert(t, kid, b"", committed=True))
        if body:
            self.sent |= local
            self.emit_plain(body, xid, COMMIT)

    # --- rows ---------------------------------------------------------------------------------

    def row(self, t: Table, kid: int, update: bool) -> tuple[bytes, tuple[object, ...] | None]:
        """Row ``kid``'s TupleData (its pool columns from the table's next drawn row) and,
        when the state is tracked, its values."""
        i = t.index
        chunk = self.chunks[i]
        j = self.cursor[i]
        if chunk is None or j == len(chunk.picks):
            chunk = self.draw_rows(t)
            j = 0
        self.cursor[i] = j + 1
        return self.assemble(t, chunk, j, kid, update)

    def assemble(
        self, t: Table, chunk: RowChunk, j: int, kid: int, update: bool
    ) -> tuple[bytes, tuple[object, ...] | None]:
        """Row ``j`` of ``chunk`` with key ``kid``: its TupleData and, when the state is
        tracked, its values; notes where its picks and TOAST entries are for the log."""
        self.row_at = self.bases[t.index] + j
        runs = chunk.runs
        track = self.deltas is not None
        if t.simple:  # run 0, key, run 1
            self.toast_at = ()
            data = runs[0][j] + t.key.column_bytes(kid) + runs[1][j]
            if not track:
                return data, None
            dynamic_values: list[object] = [t.key.value(kid)]
        else:
            parts = [runs[0][j]]
            dynamic_values = []
            toast: list[int] = []
            for r, toasted in enumerate(t.toasts, 1):
                if toasted is None:  # the key
                    value: object = t.key.value(kid) if track else None
                    column = t.key.column_bytes(kid)
                else:
                    entry = toasted.entry(kid)
                    shown = NO_ROW if update and entry >= toasted.short else entry
                    value, column = toasted.values[entry], toasted.data[shown]
                    toast.append(shown)
                parts.append(column)
                parts.append(runs[r][j])
                dynamic_values.append(value)
            self.toast_at = tuple(toast)
            data = b"".join(parts)
            if not track:
                return data, None
        picks = chunk.picks[j].tolist()
        values: list[object] = []
        pools = t.parts.pools
        pool_at = dynamic_at = 0
        for kind, *_ in t.plan:
            if kind == 1:
                values.append(pools[pool_at][picks[pool_at]][0])
                pool_at += 1
            else:
                values.append(dynamic_values[dynamic_at])
                dynamic_at += 1
        return data, tuple(values)

    def draw_rows(self, t: Table, count: int = 0) -> RowChunk:
        """The next chunk of ``t``'s rows: ``count`` rows, or by default about what the
        block needs the first time and then small chunks."""
        i = t.index
        rng = self.row_rngs[i]
        if rng is None:
            rng = self.row_rngs[i] = np.random.default_rng(
                derive_seed(self.s.seed, "rows", self.b, i)
            )
            want = count or t.normal[INS] + t.normal[UPD] + t.normal[KUPD] + t.hot
        else:
            want = count or t.chunk
        chunk = self.chunks[i] = t.parts.draw(rng, max(1, want))
        self.cursor[i] = 0
        if self.log is not None:
            self.bases[i] = self.log.chunk(i, chunk.picks)
        return chunk

    def rows(
        self,
        t: Table,
        kids: npt.NDArray[np.int64],
        updates: npt.NDArray[np.bool_],
        heads: list[bytes] | None,
    ) -> Rows:
        """The rows for ``kids`` at once, from one fresh chunk, as :meth:`assemble` makes
        them one by one (a test checks): each change is its message header in ``heads``
        then its row's TupleData. With ``heads`` None, only their sizes (without the
        headers) are worked out."""
        m = len(kids)
        chunk = self.draw_rows(t, m)
        self.cursor[t.index] = m
        base = self.bases[t.index]
        rows = Rows(np.arange(base, base + m, dtype=np.int64))
        entries = [c.entries(kids) if c is not None else None for c in t.toasts]
        shown = [
            c.shown(e, updates)
            for c, e in zip(t.toasts, entries, strict=True)
            if c is not None and e is not None
        ]
        if shown:
            rows.toast = list(zip(*(s.tolist() for s in shown), strict=True))
        if heads is None:
            sizes = chunk.sizes() + t.key.many_column_sizes(kids)
            for c, s in zip((c for c in t.toasts if c), shown, strict=True):
                sizes += c.sizes[s]
            rows.sizes = sizes
            return rows
        kid_list = kids.tolist()
        parts: list[Iterable[bytes]] = [heads, *chunk.parts[0]]
        toasts = iter(shown)
        for r, column in enumerate(t.toasts, 1):
            if column is None:
                parts += t.key.many_column_parts(kid_list)
            else:
                parts.append(column.data[next(toasts)].tolist())
            parts += chunk.parts[r]
        # One join per change: measured the generator's fastest way to its bytes.
        rows.data = list(map(b"".join, zip(*parts, strict=True)))
        if self.deltas is not None:
            rows.values = list(zip(*self._values(t, chunk, kid_list, entries), strict=True))
        return rows

    @staticmethod
    def _values(
        t: Table,
        chunk: RowChunk,
        kids: list[int],
        entries: list[npt.NDArray[np.int64] | None],
    ) -> list[list[object]]:
        """Column by column, the values of rows (for the tracked state)."""
        columns: list[list[object]] = []
        pool = 0
        dynamic = iter(zip(t.toasts, entries, strict=True))
        for kind, *_ in t.plan:
            if kind == 1:
                columns.append(t.parts.values[pool][chunk.picks[:, pool]].tolist())
                pool += 1
                continue
            toast, entry = next(dynamic)
            if toast is None or entry is None:
                columns.append(list(map(t.key.value, kids)))
            else:
                columns.append(toast.values[entry].tolist())
        return columns

    def insert(self, t: Table, kid: int, xb: bytes, *, committed: bool) -> bytes:
        data, values = self.row(t, kid, update=False)
        if committed:
            self.track(t.index, INS, kid, NO_ROW, values)
        return b"I" + xb + t.oid_bytes + b"N" + data

    def track(self, i: int, op: int, key: int, old: int, values: tuple[object, ...] | None) -> None:
        """Apply a committed change of table ``i`` (its row: the one just made) to the
        tracked state and the log. ``key`` is the id of the row the change shows (a
        delete's: the deleted id), ``old`` a key update's old id."""
        self.apply_delta(i, op, key, old, values)
        if self.log is not None:
            if op == DEL:
                self.log.change(i, op, key, old, NO_ROW, ())
            else:
                self.log.change(i, op, key, old, self.row_at, self.toast_at)

    def apply_delta(
        self, i: int, op: int, key: int, old: int, values: tuple[object, ...] | None
    ) -> None:
        """A committed change of table ``i`` applied to the tracked state, if any."""
        deltas = self.deltas
        if deltas is not None:
            d = deltas[i]
            if op == INS:
                d.rows[key] = values  # type: ignore[assignment]
                d.deleted.discard(key)
            elif op == UPD:
                d.rows[key] = values  # type: ignore[assignment]
            else:
                gone = key if op == DEL else old
                d.rows.pop(gone, None)
                if not d.truncated:
                    d.deleted.add(gone)
                if op == KUPD:
                    d.rows[key] = values  # type: ignore[assignment]

    def key_tuple(self, t: Table, kid: int) -> bytes:
        return t.key_before + t.key.column_bytes(kid) + t.key_after

    def pick_live(self, t: Table) -> int | None:
        """A live id for an update: a hot key, or one of the live window."""
        i = t.index
        low, high = self.low[i], self.high[i]
        r = self.rng.random()
        if t.hot and (low >= high or r < t.hot_ratio):
            return int(self.rng.random() * t.hot)
        if low < high:
            return low + int(self.rng.random() * (high - low))
        return None

    def change(self, code: int, xb: bytes, committed: bool) -> bytes:
        """The payload of one change slot; applies it to the state if ``committed``."""
        t = self.s.tables[code >> 2]
        op = code & 3
        i = t.index
        if not committed:
            return self.phantom_change(t, op, xb)
        if op == INS:
            kid = self.high[i]
            self.high[i] = kid + 1
            if self.deltas is None and self.log is None:  # insert() without the bookkeeping
                return b"I" + xb + t.oid_bytes + b"N" + self.row(t, kid, False)[0]
            return self.insert(t, kid, xb, committed=True)
        if op == UPD:
            kid = self.pick_live(t)  # type: ignore[assignment]
            data, values = self.row(t, kid, update=True)
            self.track(i, UPD, kid, NO_ROW, values)
            return b"U" + xb + t.oid_bytes + b"N" + data
        old = self.low[i]
        self.low[i] = old + 1
        if op == DEL:
            self.track(i, DEL, old, NO_ROW, None)
            return b"D" + xb + t.oid_bytes + b"K" + self.key_tuple(t, old)
        new = self.high[i]
        self.high[i] = new + 1
        data, values = self.row(t, new, update=False)
        self.track(i, KUPD, new, old, values)
        return b"U" + xb + t.oid_bytes + b"K" + self.key_tuple(t, old) + b"N" + data

    def phantom_change(self, t: Table, op: int, xb: bytes) -> bytes:
        """A change of rolled-back work: the counters do not move, the state is untouched."""
        kid = self.pick_live(t) if op != INS else None
        if kid is None:
            self.phantoms += 1
            return self.insert(t, -self.phantoms, xb, committed=False)
        if op == UPD:
            data, _ = self.row(t, kid, update=True)
            return b"U" + xb + t.oid_bytes + b"N" + data
        if op == DEL:
            return b"D" + xb + t.oid_bytes + b"K" + self.key_tuple(t, kid)
        self.phantoms += 1
        data, _ = self.row(t, -self.phantoms, update=False)
        return b"U" + xb + t.oid_bytes + b"K" + self.key_tuple(t, kid) + b"N" + data

    # --- units --------------------------------------------------------------------------------

    def body(
        self,
        codes: list[int],
        xid_bytes: bytes,
        committed: bool,
        items: list[Item],
        local: set[int] | None,
        used: set[int],
        pre: list[bytes] | None,
    ) -> None:
        """Append the payloads of ``codes`` to ``items``.

        ``local`` (non-streamed units) collects the tables whose Relation the unit sends;
        ``used`` every table the unit touches; non-transactional messages go to ``pre``.
        Messages are left as (flags, content, xid) for the emitter, which knows their LSN.
        """
        s = self.s
        msg_base = s._msg_base
        send_messages = s.send_messages
        size = s.spec.messages.size
        randbytes = self.rng.randbytes
        sent = self.sent
        xid = _XID.unpack(xid_bytes)[0] if xid_bytes else None
        for code in codes:
            if code >= msg_base:
                content = randbytes(size)
                if not send_messages:
                    continue
                if code - msg_base == MSG_NT and committed and pre is not None:
                    pre.append(Message(0, 0, s._prefix, content).encode())
                else:
                    items.append((1, content, xid))
                continue
            ti = code >> 2
            if local is not None and ti not in sent and ti not in local:
                items.append(s.tables[ti].relation)
                local.add(ti)
            used.add(ti)
            items.append(self.change(code, xid_bytes, committed))

    def small_units(self, codes: npt.NDArray[np.int64]) -> None:
        """A block of transactions sent whole at their end (Begin … Commit, or two-phase),
        with rolled-back prepared transactions before some of them. The transactions are
        drawn here from numpy arrays (sizes, kinds, rollbacks); their changes are made and
        framed a block at a time (:mod:`.fastblock`)."""
        s = self.s
        spec = s.spec
        n = len(codes)
        if not n:
            return
        two = spec.two_phase_ratio
        rollback = two * spec.two_phase_rollback_ratio
        draw = self.draws
        sizes: list[int] = []
        while sum(sizes) < n:  # enough transactions to hold the block's slots
            want = 16 + int((n - sum(sizes)) / spec.size_mean)
            sizes += self.unit_sizes(draw.random(want))
        ends = np.array(sizes, np.int64).cumsum()
        count = int(ends.searchsorted(n)) + 1
        ends = np.minimum(ends[:count], n)
        lengths: list[int] = (ends - np.concatenate(([0], ends[:-1]))).tolist()
        kinds: list[int] = [COMMIT] * count
        if two:
            kinds = np.where(draw.random(count) < two, PREPARED_COMMIT, COMMIT).tolist()
        rolled: list[int] = []
        if rollback:
            rolled = np.nonzero(draw.random(count) < rollback)[0].tolist()
        if not rolled:
            emit_units(self, kinds, lengths, codes)
            return
        # A rolled-back prepared transaction before each unit in ``rolled``: slots drawn
        # from the block (they count for nothing, see phantom ids).
        starts = (ends - lengths).tolist()
        flat: list[npt.NDArray[np.int64]] = []
        all_kinds: list[int] = []
        all_lengths: list[int] = []
        previous = 0
        for u in rolled:
            flat.append(codes[starts[previous] : starts[u]])
            all_kinds += kinds[previous:u]
            all_lengths += lengths[previous:u]
            size = self.unit_sizes(draw.random(1))[0]
            flat.append(codes[draw.integers(0, n, size)])
            all_kinds.append(PREPARED_ROLLBACK)
            all_lengths.append(size)
            previous = u
        flat.append(codes[starts[previous] :])
        all_kinds += kinds[previous:]
        all_lengths += lengths[previous:]
        emit_units(self, all_kinds, all_lengths, np.concatenate(flat))

    def message_payload(self, template: bytes) -> None:
        # A non-transactional message: re-encode with its own LSN.
        # Layout: 'M', flags, lsn (8), prefix\0, length, content.
        self.put(template[:2] + struct.pack("!Q", self.lsn) + template[10:])

    def emit_plain(self, items: list[Item], xid: int, kind: int) -> None:
        """Begin/Commit (or the two-phase messages) around ``items``."""
        ts = self.timestamp()
        [commit_lsn] = frame(self, Units.one(Framed(kind, xid, ts, items)), *_NO_SLOTS).tolist()
        if self.log is not None:
            if kind == PREPARED_ROLLBACK:
                self.log.abort()
            else:
                self.log.commit(commit_lsn, xid, ts)

    def finish_prepared(self, end_lsn: int, ts: int, xid: int, gid: str, commit: bool) -> None:
        lsn = self.advance(8)
        done = lsn + 48
        self.lsn = done
        if commit:
            payload = CommitPrepared(0, lsn, done, ts, xid, gid).encode()
            if self.log is not None:
                self.log.commit(lsn, xid, ts)
        else:
            payload = RollbackPrepared(0, end_lsn, done, ts, ts, xid, gid).encode()
            if self.log is not None:
                self.log.abort()
        self.put_at(done, payload)

    def put_at(self, lsn: int, payload: bytes) -> None:
        self.lsn = lsn
        self.put(payload)

    # --- large transactions ---------------------------------------------------------------

    def large_block(self, codes: list[int]) -> None:
        s = self.s
        rng = self.rng
        big = s.spec.large
        if rng.random() < big.abort_ratio:
            phantom = [codes[int(rng.random() * len(codes))] for _ in range(big.abort_size)]
            self.large_unit([(False, 0, phantom)], ABORT)
        segments: list[tuple[bool, int, list[int]]] = []
        size = big.subtransaction_size
        for at in range(0, len(codes), size):
            if rng.random() < big.subtransaction_abort_ratio:
                phantom = [codes[int(rng.random() * len(codes))] for _ in range(size)]
                segments.append((False, 1, phantom))
            # Committed segments alternate between the top transaction and subtransactions.
            segments.append((True, int(rng.random() < 0.5), codes[at : at + size]))
        two = s.spec.two_phase_ratio
        kind = PREPARED_COMMIT if two and rng.random() < two else COMMIT
        self.large_unit(segments, kind)

    def large_unit(self, segments: list[tuple[bool, int, list[int]]], kind: int) -> None:
        """A large transaction of segments (committed?, own subxid?, codes)."""
        if not self.s.streaming:
            self.large_unstreamed(segments, kind)
            return
        top = self.next_xid()
        chunk = self.s.spec.large.chunk
        used: set[int] = set()
        pre: list[bytes] = []
        plan: list[tuple[int, list[Item]]] = []
        for committed, own, codes in segments:
            aborted_sub = 0
            if kind == ABORT:
                sub, live = top, False
            elif not committed:
                sub = aborted_sub = self.next_xid()
                live = False
            else:
                sub, live = (self.next_xid() if own else top), True
            items: list[Item] = []
            self.body(codes, _XID.pack(sub), live, items, None, used, pre)
            if live:
                self.done += len(codes)
            plan.append((aborted_sub, items))
        for payload in pre:
            self.message_payload(payload)
        ts = self.timestamp()
        relations = [self.s.tables[i].relation_payload(top) for i in sorted(used)]
        first = True
        is_open = False
        in_chunk = 0
        put = self.put
        for aborted_sub, items in plan:
            for item in [*relations, *items] if first else items:
                if not is_open:
                    put(StreamStart(top, first).encode())
                    first = False
                    is_open = True
                    in_chunk = 0
                elif in_chunk >= chunk:
                    put(StreamStop().encode())
                    put(StreamStart(top, False).encode())
                    in_chunk = 0
                if isinstance(item, bytes):
                    put(item)
                elif isinstance(item, tuple):  # (slots, ints, are fastblock's alone)
                    self.message(item[0], item[1], item[2])
                in_chunk += 1
            relations = []
            if aborted_sub:
                if is_open:
                    put(StreamStop().encode())
                    is_open = False
                self.stream_abort(top, aborted_sub, ts)
        if is_open:
            put(StreamStop().encode())
        if kind == ABORT:
            self.stream_abort(top, top, ts)
            if self.log is not None:
                self.log.abort()
            return
        commit_lsn = self.advance(8)
        end_lsn = commit_lsn + 48
        if kind == PREPARED_COMMIT and self.s.two_phase:
            gid = f"synth-{top}"
            self.put_at(end_lsn, StreamPrepare(0, commit_lsn, end_lsn, ts, top, gid).encode())
            self.finish_prepared(end_lsn, ts, top, gid, True)
        else:
            self.put_at(end_lsn, StreamCommit(top, 0, commit_lsn, end_lsn, ts).encode())
            if self.log is not None:
                self.log.commit(commit_lsn, top, ts)

    def stream_abort(self, xid: int, subxid: int, ts: int) -> None:
        if self.s.parallel:
            self.put(StreamAbort(xid, subxid, self.lsn, ts).encode())
        else:
            self.put(StreamAbort(xid, subxid).encode())

    def large_unstreamed(self, segments: list[tuple[bool, int, list[int]]], kind: int) -> None:
        """Without streaming the server decodes a large transaction at its commit: only
        the committed changes, in one Begin … Commit; nothing at all for an abort."""
        xid = self.next_xid()
        items: list[Item] = []
        local: set[int] = set()
        pre: list[bytes] = []
        for committed, _own, codes in segments:
            live = committed and kind != ABORT
            if live:
                self.body(codes, b"", True, items, local, set(), pre)
                self.done += len(codes)
            else:
                # Generated for the same RNG sequence as when streaming, then dropped.
                self.body(codes, b"", False, [], None, set(), None)
        for payload in pre:
            self.message_payload(payload)
        if kind != ABORT:
            self.sent |= local
            self.emit_plain(items, xid, kind)
