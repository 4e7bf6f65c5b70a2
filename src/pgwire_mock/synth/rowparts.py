"""Row bytes for many rows at once: pool picks drawn with numpy, bytes gathered in one go.

A row of a synthetic table is its column count, then one TupleData column per table
column. Most columns are *pool* columns (one pre-encoded entry picked at random); the key
column and TOAST columns depend on the row's key id, so they are *dynamic*. The columns
between two dynamic ones form a *run*: a table with its key first and no TOAST column has
two runs (the column count alone, then every other column).

:meth:`RowParts.draw` picks the entries of ``m`` rows with one numpy call and builds every
run of every row with one gather over a buffer that holds all pool entries, so the
generator only glues ``run, dynamic, run, …`` per row. Profiling showed the per-value
``random()`` and per-row join as the generator's largest cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pgwire_mock.synth.values import PoolEntry

__all__ = ["RowChunk", "RowParts"]


@dataclass(frozen=True, slots=True)
class RowChunk:
    """``m`` drawn rows: ``runs[r][j]`` is run ``r`` of row ``j``; ``picks[j]`` the pool
    index of each pool column of row ``j`` (in column order)."""

    runs: list[list[bytes]]
    picks: npt.NDArray[np.int64]


class RowParts:
    """The pools of one table's pool columns, laid out for gathering.

    ``runs`` lists, per run, the pool columns in it (indexes into ``pools``); ``head`` is
    the bytes every row starts with (the column count), part of run 0.
    """

    def __init__(self, head: bytes, pools: Sequence[Sequence[PoolEntry]], runs: list[list[int]]):
        self.pools = pools
        self.sizes = np.array([len(p) for p in pools], np.int64)
        self.runs = runs
        chunks = [head]
        starts: list[npt.NDArray[np.int64]] = []
        lengths: list[npt.NDArray[np.int64]] = []
        at = len(head)
        for pool in pools:
            sizes = np.array([len(data) for _, data in pool], np.int64)
            ends = at + np.cumsum(sizes)
            starts.append(ends - sizes)
            lengths.append(sizes)
            at = int(ends[-1]) if len(sizes) else at
            chunks += [data for _, data in pool]
        self.source = np.frombuffer(b"".join(chunks), np.uint8)
        self.head_length = len(head)
        self.starts = starts
        self.lengths = lengths
        self._step = self._index = np.empty(0, np.int64)
        self._bytes = np.empty(0, np.uint8)

    def draw(self, rng: np.random.Generator, m: int) -> RowChunk:
        """``m`` rows: each pool column's entry drawn uniformly and independently."""
        if len(self.pools):
            picks = rng.integers(0, self.sizes, size=(m, len(self.pools)))
        else:
            picks = np.zeros((m, 0), np.int64)
        runs = [self._gather(picks, columns, first=r == 0) for r, columns in enumerate(self.runs)]
        return RowChunk(runs, picks)

    def _gather(self, picks: npt.NDArray[np.int64], columns: list[int], first: bool) -> list[bytes]:
        m = picks.shape[0]
        starts = [self.starts[c][picks[:, c]] for c in columns]
        lengths = [self.lengths[c][picks[:, c]] for c in columns]
        if first:  # every row starts with the column count: a segment at source offset 0
            starts.insert(0, np.zeros(m, np.int64))
            lengths.insert(0, np.full(m, self.head_length, np.int64))
        if not starts:
            return [b""] * m
        seg_start = np.stack(starts, axis=1).ravel()
        seg_length = np.stack(lengths, axis=1).ravel()
        keep = seg_length > 0
        if not keep.all():
            seg_start, seg_length = seg_start[keep], seg_length[keep]
        seg_end = np.cumsum(seg_length)
        total = int(seg_end[-1]) if len(seg_end) else 0
        # Source index of each output byte: +1 within a segment, a jump at each segment's
        # first byte; one cumulative sum. The scratch arrays are reused: fresh ones this
        # size cost more in page faults than the arithmetic.
        if len(self._step) < total:
            self._step = np.empty(2 * total, np.int64)
            self._index = np.empty(2 * total, np.int64)
            self._bytes = np.empty(2 * total, np.uint8)
        step = self._step[:total]
        step.fill(1)
        if total:
            step[0] = seg_start[0]
            jump = seg_start[1:] - (seg_start[:-1] + seg_length[:-1])
            step[(seg_end - seg_length)[1:]] = jump + 1
        index = np.cumsum(step, out=self._index[:total])
        data = np.take(self.source, index, out=self._bytes[:total]).tobytes()
        row_end = np.cumsum(np.stack(lengths, axis=1).sum(axis=1)).tolist()
        out = []
        begin = 0
        for end in row_end:
            out.append(data[begin:end])
            begin = end
        return out
