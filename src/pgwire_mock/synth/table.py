"""One table of the synthetic stream, ready to generate: its pools, pre-encoded message
headers and id schedule (which key ids are live at the start of each block: closed
formulas, see :mod:`pgwire_mock.synth.generator`)."""

from __future__ import annotations

import struct

from codec.pgoutput import Relation, RelationColumn
from pgwire_mock.synth.fastblock import DEL, INS, KUPD
from pgwire_mock.synth.rowlog import ColumnSource
from pgwire_mock.synth.rowparts import RowParts, ToastColumn
from pgwire_mock.synth.spec import TableSpec
from pgwire_mock.synth.values import KeyCodec, PoolEntry, column_pool, derive_seed, toast_pool

__all__ = ["Table"]

_OID = struct.Struct("!I")
_COUNT = struct.Struct("!h")


class Table:
    """One table, ready to generate: pools, pre-encoded headers and its id schedule."""

    def __init__(self, index: int, spec: TableSpec, seed: int, pool_size: int, binary: bool):
        self.index = index
        self.spec = spec
        self.name = spec.qualified_name
        self.hot = spec.hot_keys
        self.hot_ratio = spec.hot_ratio
        self.key = KeyCodec(spec.columns[spec.key_index].type.name, binary)
        #: Rows of the snapshot: key ids ``hot .. hot + initial - 1``.
        self.initial = spec.initial_rows
        oid = _OID.pack(spec.oid)
        self.insert_head = b"I", oid + b"N"
        self.oid_bytes = oid
        ncols = len(spec.columns)
        self.count_bytes = _COUNT.pack(ncols)
        self.key_index = k = spec.key_index  # a search over the columns: once, not per row
        self.key_before = self.count_bytes + b"n" * k
        self.key_after = b"n" * (ncols - k - 1)
        #: Per column: (kind, a, b, c): 0 = key; 1 = pool (entries, size);
        #: 2 = TOAST (big entries, short entries, threshold, salt).
        self.plan: list[tuple[int, object, object, object, object]] = []
        for i, column in enumerate(spec.columns):
            where = f"{spec.qualified_name}.{column.name}"
            if column.key:
                self.plan.append((0, None, None, None, None))
            elif column.toast_ratio:
                big = toast_pool(column, seed, where, binary)
                short = column_pool(column, seed, where, pool_size, binary)
                threshold = int(column.toast_ratio * (1 << 64))
                self.plan.append((2, big, short, threshold, derive_seed(seed, "salt", where, i)))
            else:
                pool = column_pool(column, seed, where, pool_size, binary)
                self.plan.append((1, pool, len(pool), None, None))
        #: Tables without TOAST columns take the fast path: the key is the only dynamic
        #: column, so a row is run 0, the key, run 1.
        self.simple = all(kind != 2 for kind, *_ in self.plan)
        pools: list[tuple[PoolEntry, ...]] = []
        runs: list[list[int]] = [[]]
        #: The key and TOAST columns (None for the key), in order: each ends a run of pool
        #: columns.
        self.toasts: list[ToastColumn | None] = []
        for kind, a, b, c, d in self.plan:
            if kind == 1:
                runs[-1].append(len(pools))
                pools.append(a)  # type: ignore[arg-type]
            else:
                self.toasts.append(None if kind == 0 else ToastColumn(a, b, c, d))  # type: ignore[arg-type]
                runs.append([])
        self.parts = RowParts(self.count_bytes, pools, runs)
        #: Rows drawn for a block at a time: about one block's worth, then this many more.
        self.chunk = 64
        self.relation_columns = tuple(
            RelationColumn(1 if c.key else 0, c.name, c.type.oid, -1) for c in spec.columns
        )
        self.relation = self.relation_payload(None)
        # Filled in by Synth: per-block composition and the id schedule.
        self.normal = (0, 0, 0, 0)
        self.reset = (0, 0, 0, 0)
        self.period = 0  # truncate every this many blocks (0: never)

    def column_sources(self) -> tuple[ColumnSource, ...]:
        """Per column, where its values come from (what a RowLog's rows index)."""
        out = []
        for kind, a, b, _, _ in self.plan:
            if kind == 0:
                out.append(ColumnSource("key"))
            elif kind == 1:
                out.append(ColumnSource("pool", a))  # type: ignore[arg-type]
            else:
                out.append(ColumnSource("toast", (*b, *a)))  # type: ignore[misc]
        return tuple(out)

    def relation_payload(self, xid: int | None) -> bytes:
        s = self.spec
        return Relation(s.oid, s.namespace, s.name, "d", self.relation_columns, xid=xid).encode()

    # --- the id schedule (closed formulas, see generator's module docstring) ----------

    def is_reset(self, block: int) -> bool:
        return block == 0 or (self.period > 0 and block % self.period == 0)

    def _resets_before(self, block: int) -> int:
        if self.period > 0:
            return (block + self.period - 1) // self.period
        return 1 if block > 0 else 0

    def allocated_before(self, block: int) -> int:
        resets = self._resets_before(block)
        ins_reset = self.reset[INS] + self.reset[KUPD]
        ins_normal = self.normal[INS] + self.normal[KUPD]
        return self.hot + self.initial + resets * ins_reset + (block - resets) * ins_normal

    def window(self, block: int) -> tuple[int, int]:
        """(oldest live id, next id) at the start of ``block``."""
        last_reset = (block // self.period) * self.period if self.period > 0 else 0
        base = self.allocated_before(last_reset)
        # Until the first truncate the snapshot's rows are live too, and the oldest.
        oldest = base - self.initial if last_reset == 0 else base
        if block == last_reset:
            return oldest, base
        deletes = self.normal[DEL] + self.normal[KUPD]
        return oldest + (block - last_reset - 1) * deletes, self.allocated_before(block)
