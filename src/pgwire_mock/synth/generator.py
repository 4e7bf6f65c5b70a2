"""The synthetic pgoutput stream: blocks of changes, each a pure function of (seed, block).

How the stream is cut up (``docs/synth.md`` has the long form):

* The ``changes`` committed change slots are split into **blocks** of ``block_size``
  slots. Block ``b`` is generated from generators seeded by ``derive_seed(seed, …, b)``
  alone, so any block can be generated without the ones before it, and shard ``k`` of
  ``n`` is simply blocks ``[k*B//n, (k+1)*B//n)``: concatenating the shards' events gives
  the single-process stream byte for byte. A block without a large transaction is made
  a block at a time (:mod:`.fastblock`); the rest a change at a time (:mod:`.block`).
* Every block has the **same composition** (how many inserts, updates, key updates,
  deletes and messages per table), shuffled. So the number of key ids a table has
  allocated, and how many of the oldest it has deleted, before block ``b`` are closed
  formulas; inserts take the next id, deletes and key updates take the oldest live id,
  updates pick a live id or one of the table's **hot keys** (ids ``0..hot_keys-1``,
  inserted at block 0 and after each truncate, never deleted). Deletes in block ``b`` only
  reach ids inserted before ``b``; the block that starts the table (block 0, or a
  truncate block) turns its deletes into updates.
* A table's ``initial_rows`` are its **snapshot**: ids ``hot_keys ..`` allocated before
  block 0 and live from the start (the oldest until the first truncate), their values
  drawn per chunk of 4096 rows (:meth:`Synth.initial_rows`), so deletes and updates reach
  them like any row.
* Rolled-back work (prepared transactions rolled back, aborted large transactions,
  aborted subtransactions) is *extra*: its slots do not count as changes and do not
  move the counters. Its inserts use negative ids, its updates and deletes hit live ids
  and are undone.
* Each block re-sends the Relation of a table before the block's first use of it (real
  pgoutput sends Relation again after invalidations, so consumers handle repeats), so
  every shard is self-contained.
* LSNs: block ``b`` lives in ``start_lsn + b·2³²`` onwards; each message advances by its
  size (rounded to 8, at most 8 KiB) plus 24. Commit timestamps: ``start_time`` plus
  committed slots / ``changes_per_second``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from itertools import chain
from typing import Final

import numpy as np
import numpy.typing as npt

from codec.values import LSN
from pgwire_mock.synth.block import MSG_NT, MSG_TX, Block, StreamItem
from pgwire_mock.synth.fastblock import DEL, INS, KUPD, UPD
from pgwire_mock.synth.rowlog import LoggedRows, RowLog
from pgwire_mock.synth.rowparts import RowChunk
from pgwire_mock.synth.spec import OutputSpec, Spec
from pgwire_mock.synth.state import ExpectedState, StateDelta
from pgwire_mock.synth.table import Table
from pgwire_mock.synth.values import derive_seed

__all__ = ["InitialRows", "Shard", "StreamItem", "Synth", "SynthError"]

_OPS: Final = ("insert", "update", "key_update", "delete")
_INITIAL_CHUNK: Final = 4096  # snapshot rows drawn from one generator


class SynthError(ValueError):
    """Generation parameters that cannot work (e.g. more rows than an int4 key holds)."""


@dataclass(frozen=True, slots=True)
class Shard:
    """Shard ``index`` of ``count`` (0-based), e.g. ``Shard.parse("1/4")``."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise SynthError(f"shard must be K/N with 0 <= K < N, got {self.index}/{self.count}")

    @classmethod
    def parse(cls, text: str) -> Shard:
        index, slash, count = text.partition("/")
        if not slash or not index.strip().isdigit() or not count.strip().isdigit():
            raise SynthError(f"shard must be K/N with 0 <= K < N, got {text!r}")
        return cls(int(index), int(count))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def _largest_remainder(weights: list[float], total: int) -> list[int]:
    """Integer counts proportional to ``weights`` that add up to ``total``."""
    whole = sum(weights)
    if whole <= 0 or total <= 0:
        return [0] * len(weights)
    exact = [w * total / whole for w in weights]
    counts = [math.floor(x) for x in exact]
    left = total - sum(counts)
    order = sorted(range(len(weights)), key=lambda i: (counts[i] - exact[i], i))
    for i in order[:left]:
        counts[i] += 1
    return counts


class Synth:
    """A synthetic change stream: ``spec`` + ``seed`` + ``changes`` committed changes.

    >>> from pgwire_mock.synth import Synth, parse_spec
    >>> spec = parse_spec("tables: [{name: t, columns: [{name: id, type: int8, key: true}]}]")
    >>> synth = Synth(spec, seed=1, changes=10)
    >>> events = list(synth.stream())
    >>> events == list(synth.stream(Shard(0, 2))) + list(synth.stream(Shard(1, 2)))
    True
    """

    def __init__(
        self, spec: Spec, seed: int, changes: int, *, output: OutputSpec | None = None
    ) -> None:
        if changes < 0:
            raise SynthError(f"changes must be >= 0, got {changes}")
        self.spec = spec
        self.seed = seed
        self.changes = changes
        self.output = output or spec.output
        out = self.output
        self.streaming = out.streaming != "off" and out.proto_version >= 2
        self.parallel = self.streaming and out.streaming == "parallel" and out.proto_version >= 4
        self.two_phase = out.two_phase and out.proto_version >= 3
        self.send_messages = out.messages
        size = spec.block_size
        self.block_size = size
        self.blocks = -(-changes // size)
        self.tables = [
            Table(i, t, seed, spec.pool_size, out.binary) for i, t in enumerate(spec.tables)
        ]
        self._msg_base = 4 * len(self.tables)
        self._full = self._composition(size)
        full_counts = self._counts
        for t in self.tables:
            counts = self._table_counts(self._full, t.index)
            t.normal = counts
            t.reset = (counts[INS], counts[UPD] + counts[KUPD] + counts[DEL], 0, 0)
            every = t.spec.truncate_every
            t.period = max(1, every // size) if every else 0
        last = changes - (self.blocks - 1) * size
        self._last = self._composition(last, full_counts) if changes else []
        self._full_codes = np.array(self._full, np.int64)
        self._last_codes = np.array(self._last, np.int64)
        # Enough xids for every unit and subtransaction a block can have.
        self._xids_per_block = 4 * size + 16
        self._usec_per_change = 1_000_000 / spec.changes_per_second
        self._prefix = spec.messages.prefix
        for t in self.tables:
            highest = t.allocated_before(self.blocks) + size
            problem = t.key.check_range(-(4 * size + 16), highest)
            if problem:
                raise SynthError(f"table {t.name}: {problem}")

    # --- public API ---------------------------------------------------------------------

    def shard_blocks(self, shard: Shard) -> range:
        """The blocks of ``shard``: consecutive, and all shards together cover each once."""
        n = self.blocks
        return range(shard.index * n // shard.count, (shard.index + 1) * n // shard.count)

    def stream(
        self, shard: Shard | None = None, *, state: StateDelta | None = None
    ) -> Iterator[StreamItem]:
        """The (LSN, payload) pairs of ``shard`` (default: the whole stream), in order.

        If ``state`` is given, the committed changes are applied to it as they are made.
        """
        # A C-level chain over the blocks' lists: no Python frame per event.
        blocks = self.shard_blocks(shard or Shard())
        return chain.from_iterable(self.block(block, state) for block in blocks)

    def logged_rows(
        self, tables: Collection[int], shard: Shard | None = None, *, rows: int = 4096
    ) -> Iterator[dict[int, LoggedRows]]:
        """The rows a consumer makes of the committed changes of ``tables`` (indexes into
        :attr:`tables`) in ``shard``, about ``rows`` at a time (whole blocks)."""
        log = RowLog(tables)
        waiting = 0
        for block in self.shard_blocks(shard or Shard()):
            Block(self, block, None, log).run()
            waiting += self.block_size
            if waiting >= rows:
                yield log.take()
                waiting = 0
        if waiting:
            yield log.take()

    def expected_delta(self, shard: Shard | None = None) -> StateDelta:
        """The state delta of ``shard`` (merge the shards' in order with StateDelta.merge);
        shard 0's starts from the snapshot (:meth:`initial_delta`)."""
        delta = self.initial_delta() if (shard or Shard()).index == 0 else StateDelta()
        for _ in self.stream(shard, state=delta):
            pass
        return delta

    def expected_state(self, delta: StateDelta | None = None) -> ExpectedState:
        """The final state after the whole stream (or after the merged ``delta``)."""
        if delta is None:
            delta = self.expected_delta()
        return ExpectedState.from_delta(
            delta,
            {t.name: tuple(c.name for c in t.spec.columns) for t in self.tables},
            {t.name: tuple(c.type.oid for c in t.spec.columns) for t in self.tables},
            {t.name: t.key.value for t in self.tables},
        )

    def meta(self, shard: Shard | None = None) -> dict[str, object]:
        """The ``meta`` header of a recording of ``shard``; with the spec's ``snapshot``,
        shard 0's has :meth:`snapshot_meta` (its rows follow the meta line)."""
        shard = shard or Shard()
        blocks = self.shard_blocks(shard)
        meta: dict[str, object] = {
            "generator": "pgwire-mock synth",
            "major": self.spec.server_version,
            "seed": self.seed,
            "changes": self.changes,
            "block_size": self.block_size,
            "shard": str(shard),
            "blocks": [blocks.start, blocks.stop],
            "options": self.output.as_pgoutput(self.spec.publication),
            "tables": {t.name: t.spec.oid for t in self.tables},
        }
        if self.spec.snapshot and shard.index == 0:
            meta["snapshot"] = self.snapshot_meta()
        return meta

    def block(self, block: int, state: StateDelta | None = None) -> list[StreamItem]:
        """Block ``block``'s events; a pure function of (spec, seed, changes, block)."""
        if not 0 <= block < self.blocks:
            raise SynthError(f"block {block} is outside 0..{self.blocks - 1}")
        return Block(self, block, state).run()

    # --- the snapshot -------------------------------------------------------------------

    def initial_rows(
        self, table: int, start: int = 0, stop: int | None = None
    ) -> Iterator[InitialRows]:
        """Rows ``[start, stop)`` of table ``table``'s snapshot (index into
        :attr:`tables`; default: all ``initial_rows`` of them), in chunks. Chunk ``c``
        (rows ``c·4096`` onwards) draws its rows' pool picks from a generator seeded by
        ``(seed, table, c)`` alone, so any range can be made without the rows before it;
        TOAST columns are a function of the key id, as in the stream."""
        t = self.tables[table]
        stop = t.initial if stop is None else min(stop, t.initial)
        for c in range(max(start, 0) // _INITIAL_CHUNK, -(-stop // _INITIAL_CHUNK)):
            first = c * _INITIAL_CHUNK
            lo, hi = max(start, first), min(stop, first + _INITIAL_CHUNK)
            if lo >= hi:
                continue
            rng = np.random.default_rng(derive_seed(self.seed, "initial", table, c))
            picks = t.parts.draw(rng, min(_INITIAL_CHUNK, t.initial - first)).picks
            kids = np.arange(t.hot + lo, t.hot + hi, dtype=np.int64)
            toast = tuple(col.entries(kids) for col in t.toasts if col is not None)
            yield InitialRows(table, lo, kids, picks[lo - first : hi - first], toast)

    def initial_values(self, rows: InitialRows) -> list[tuple[object, ...]]:
        """The values of snapshot ``rows`` (Python values, as the expected state holds)."""
        t = self.tables[rows.table]
        toasts = iter(rows.toast)
        entries = [None if c is None else next(toasts) for c in t.toasts]
        chunk = RowChunk(t.parts, rows.picks)
        columns = Block._values(t, chunk, rows.kids.tolist(), entries)
        return list(zip(*columns, strict=True))

    def initial_delta(self) -> StateDelta:
        """The tables as the snapshot holds them (every table's ``initial_rows``): what
        the state of the shard that starts the stream (shard 0) starts from."""
        delta = StateDelta()
        for t in self.tables:
            if t.initial:
                rows = delta.table(t.name).rows
                for chunk in self.initial_rows(t.index):
                    rows.update(zip(chunk.kids.tolist(), self.initial_values(chunk), strict=True))
        return delta

    def snapshot_meta(self) -> dict[str, object]:
        """The recording's ``meta.snapshot`` (the format ``record --snapshot`` writes,
        :mod:`pgwire_mock.streamfile`): the consistent point is ``start_lsn``, where the
        stream begins; every table, as pg_class and pg_attribute would describe it."""
        return {
            "consistent_point": str(LSN(self.spec.start_lsn)),
            "tables": [
                {
                    "schema": t.spec.namespace,
                    "name": t.spec.name,
                    "oid": t.spec.oid,
                    "relreplident": "d",
                    "relnatts": len(t.spec.columns),
                    "columns": [
                        {
                            "attnum": i + 1,
                            "name": c.name,
                            "type_oid": c.type.oid,
                            "typmod": -1,
                            "key": c.key,
                        }
                        for i, c in enumerate(t.spec.columns)
                    ],
                }
                for t in self.tables
            ],
        }

    # --- composition ----------------------------------------------------------------------

    def _composition(self, slots: int, cap: list[int] | None = None) -> list[int]:
        """The slot codes of a block of ``slots`` committed slots, unshuffled.

        ``cap`` (the last, shorter block) limits deletes and key updates per table to
        those of a full block, which the id schedule was proven safe for.
        """
        spec = self.spec
        ops = [spec.operations[o] for o in _OPS]
        weights = []
        for t in spec.tables:
            weights += [t.weight * o for o in ops]
        message_slots = round(slots * spec.messages.ratio)
        counts = _largest_remainder(weights, slots - message_slots)
        # Rounding must not leave a table deleting more than it inserts.
        for i in range(len(spec.tables)):
            c = counts[4 * i : 4 * i + 4]
            if cap is not None:
                full = cap[4 * i : 4 * i + 4]
                for op in (DEL, KUPD):
                    excess = max(0, c[op] - full[op])
                    c[op] -= excess
                    c[UPD] += excess
            while c[DEL] + c[KUPD] > c[INS]:
                if c[DEL]:
                    c[DEL] -= 1
                else:
                    c[KUPD] -= 1
                c[UPD] += 1
            counts[4 * i : 4 * i + 4] = c
        transactional = round(message_slots * spec.messages.transactional_ratio)
        self._counts = counts
        codes: list[int] = []
        for code, count in enumerate(counts):
            codes += [code] * count
        codes += [self._msg_base + MSG_TX] * transactional
        codes += [self._msg_base + MSG_NT] * (message_slots - transactional)
        return codes

    def _table_counts(self, codes: list[int], index: int) -> tuple[int, int, int, int]:
        c = [0, 0, 0, 0]
        for code in codes:
            if code // 4 == index and code < self._msg_base:
                c[code % 4] += 1
        return c[0], c[1], c[2], c[3]


@dataclass(frozen=True, slots=True)
class InitialRows:
    """Rows ``start .. start + len(kids) - 1`` of table ``table``'s snapshot: their key
    ids, their pool picks (a row per row, a column per pool column, as
    :class:`~.rowparts.RowChunk`) and, per TOAST column, each row's entry (its value in
    full: the snapshot holds the values, never unchanged-TOAST)."""

    table: int
    start: int
    kids: npt.NDArray[np.int64]
    picks: npt.NDArray[np.int64]
    toast: tuple[npt.NDArray[np.int64], ...]

    def __len__(self) -> int:
        return len(self.kids)
