"""The committed changes of chosen tables, as the rows a pgoutput consumer makes of them.

A consumer of the stream (an apply worker, the Spark source) turns each committed change
into a row: its operation, the commit LSN and commit time of its transaction, its place
in the transaction (counted over every table, a Truncate taking one place, changes of
rolled-back subtransactions dropped), the top-level xid, and its values. :class:`RowLog`
records exactly that while the generator makes the stream, so the Spark source can build
Arrow columns straight from the pool picks instead of encoding pgoutput and decoding it
again. ``tests/spark/test_synthetic_source.py`` checks the two give the same rows.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from pgwire_mock.synth.values import PoolEntry

__all__ = [
    "DELETE",
    "INSERT",
    "KEY_UPDATE",
    "SNAPSHOT",
    "TRUNCATE",
    "UPDATE",
    "LoggedRows",
    "RowLog",
]

#: Row operations; KEY_UPDATE is an update that carries the old key; SNAPSHOT a row of
#: the snapshot (:meth:`LoggedRows.snapshot`), not a change.
INSERT, UPDATE, KEY_UPDATE, DELETE, TRUNCATE, SNAPSHOT = range(6)
NO_ROW: Final = -1
"""``LoggedRows.picks_at`` / ``old`` of a row without drawn values / without an old key."""


@dataclass(frozen=True, slots=True)
class ColumnSource:
    """Where a column's values come from: the row's key id, a pool (the logged picks index
    it), or a TOAST column's short pool followed by its TOAST pool (the logged TOAST
    entries index it)."""

    kind: Literal["key", "pool", "toast"]
    entries: tuple[PoolEntry, ...] = ()


_COLUMNS: Final = ("op", "position", "key", "old", "picks_at", "commit_lsn", "xid", "commit_time")


@dataclass(slots=True)
class LoggedRows:
    """One table's logged rows, in commit order, column by column.

    Per row: ``op``; ``position`` in its transaction; ``key``, the key id of the row
    shown (a delete's old key; 0 for a truncate); ``old``, a key update's old key id;
    ``picks_at``, the row's index into :attr:`picks` (the pool index of each pool
    column); the ``commit_lsn``, ``xid`` and ``commit_time`` of its transaction; and in
    :attr:`toast`, per TOAST column, the entry index into the column's short pool
    followed by its TOAST pool, or ``NO_ROW`` for an unchanged (unsent) value (empty
    for a delete or truncate). :meth:`column` gives a column as one array.
    """

    parts: dict[str, list[npt.NDArray[np.int64]]] = field(
        default_factory=lambda: {name: [] for name in _COLUMNS}
    )
    toast: list[tuple[int, ...]] = field(default_factory=list)
    chunks: list[npt.NDArray[np.int64]] = field(default_factory=list)
    # Rows logged one at a time, turned into columns when a column is read or a bulk
    # of rows follows them: (op, position, key, old, picks_at, commit LSN, xid, time).
    staged: list[tuple[int, ...]] = field(default_factory=list)
    count: int = 0

    def __len__(self) -> int:
        return self.count

    def add(self, columns: dict[str, npt.NDArray[np.int64]], toast: list[tuple[int, ...]]) -> None:
        """Rows at once: one array per name in ``_COLUMNS``, and their TOAST entries."""
        self._unstage()
        for name in _COLUMNS:
            self.parts[name].append(columns[name])
        self.toast += toast
        self.count += len(toast)

    def stage(self, row: tuple[int, ...], toast: tuple[int, ...]) -> None:
        """One row (the values of ``_COLUMNS`` in order) and its TOAST entries."""
        self.staged.append(row)
        self.toast.append(toast)
        self.count += 1

    def column(self, name: str) -> npt.NDArray[np.int64]:
        self._unstage()
        parts = self.parts[name]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def _unstage(self) -> None:
        if self.staged:
            for name, values in zip(_COLUMNS, zip(*self.staged, strict=True), strict=True):
                self.parts[name].append(np.array(values, np.int64))
            self.staged = []

    @classmethod
    def snapshot(
        cls,
        start: int,
        kids: npt.NDArray[np.int64],
        picks: npt.NDArray[np.int64],
        toast: tuple[npt.NDArray[np.int64], ...],
        consistent_point: int,
    ) -> LoggedRows:
        """Snapshot rows ``start ..`` (their key ids, pool picks and TOAST entries) as a
        consumer reads them: position = index in the table's snapshot, commit LSN = the
        consistent point, xid and commit time 0."""
        n = len(kids)
        rows = cls()
        rows.chunks.append(picks)
        zeros = np.zeros(n, np.int64)
        columns = {
            "op": np.full(n, SNAPSHOT, np.int64),
            "position": np.arange(start, start + n, dtype=np.int64),
            "key": kids,
            "old": np.full(n, NO_ROW, np.int64),
            "picks_at": np.arange(n, dtype=np.int64),
            "commit_lsn": np.full(n, consistent_point, np.int64),
            "xid": zeros,
            "commit_time": zeros,
        }
        entries: list[tuple[int, ...]] = (
            list(zip(*(e.tolist() for e in toast), strict=True)) if toast else [()] * n
        )
        rows.add(columns, entries)
        return rows

    @property
    def picks(self) -> npt.NDArray[np.int64]:
        """Every drawn row's pool indices, one row per drawn row."""
        return np.concatenate(self.chunks) if self.chunks else np.zeros((0, 0), np.int64)


class RowLog:
    """Logs the rows of ``tables`` (table indexes in the spec) as the generator commits
    them; :meth:`take` hands them over (the generator calls it between blocks)."""

    def __init__(self, tables: Collection[int]) -> None:
        self.wanted = frozenset(tables)
        # The open transaction's changes, per wanted table.
        self._pending: dict[int, list[tuple[int, int, int, int, int, tuple[int, ...]]]] = {
            i: [] for i in self.wanted
        }
        self._position = 0
        self._rows = {i: LoggedRows() for i in self.wanted}
        self._drawn = dict.fromkeys(self.wanted, 0)

    def chunk(self, table: int, picks: npt.NDArray[np.int64]) -> int:
        """Keep a chunk of drawn rows; returns the index its first row will have."""
        if table not in self.wanted:
            return 0
        base = self._drawn[table]
        self._rows[table].chunks.append(picks)
        self._drawn[table] = base + len(picks)
        return base

    def change(
        self, table: int, op: int, key: int, old: int, picks_at: int, toast: tuple[int, ...]
    ) -> None:
        """A committed change in the transaction being made (every table counts)."""
        pending = self._pending.get(table)
        if pending is not None:
            pending.append((op, self._position, key, old, picks_at, toast))
        self._position += 1

    def truncate(self, tables: Collection[int]) -> None:
        """A Truncate of ``tables``: one row per wanted table, all at one position."""
        for table in tables:
            pending = self._pending.get(table)
            if pending is not None:
                pending.append((TRUNCATE, self._position, 0, NO_ROW, NO_ROW, ()))
        self._position += 1

    def commit(self, commit_lsn: int, xid: int, commit_time: int) -> None:
        """The transaction's changes become rows of their tables."""
        for table, pending in self._pending.items():
            if pending:
                rows = self._rows[table]
                for op, position, key, old, picks_at, toast in pending:
                    rows.stage(
                        (op, position, key, old, picks_at, commit_lsn, xid, commit_time), toast
                    )
                pending.clear()
        self._position = 0

    def extend(
        self, table: int, columns: dict[str, npt.NDArray[np.int64]], toast: list[tuple[int, ...]]
    ) -> None:
        """Rows of whole committed transactions at once (no transaction may be open):
        one array per column of :class:`LoggedRows`, and the rows' TOAST entries."""
        self._rows[table].add(columns, toast)

    def abort(self) -> None:
        """Forget the transaction being made (it does not commit)."""
        for pending in self._pending.values():
            pending.clear()
        self._position = 0

    def take(self) -> dict[int, LoggedRows]:
        """The rows logged so far, per table; the log starts afresh."""
        rows = self._rows
        self._rows = {i: LoggedRows() for i in self.wanted}
        self._drawn = dict.fromkeys(self.wanted, 0)
        return rows
