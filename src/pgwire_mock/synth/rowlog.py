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

__all__ = ["DELETE", "INSERT", "KEY_UPDATE", "TRUNCATE", "UPDATE", "LoggedRows", "RowLog"]

#: Row operations; KEY_UPDATE is an update that carries the old key.
INSERT, UPDATE, KEY_UPDATE, DELETE, TRUNCATE = range(5)
NO_ROW: Final = -1
"""``LoggedRows.picks_at`` / ``old`` of a row without drawn values / without an old key."""


@dataclass(frozen=True, slots=True)
class ColumnSource:
    """Where a column's values come from: the row's key id, a pool (the logged picks index
    it), or a TOAST column's short pool followed by its TOAST pool (the logged TOAST
    entries index it)."""

    kind: Literal["key", "pool", "toast"]
    entries: tuple[PoolEntry, ...] = ()


@dataclass(slots=True)
class LoggedRows:
    """One table's logged rows, in commit order.

    ``changes`` holds one (op, position, key, old, picks_at, toast) per row: ``key`` is
    the key id of the row shown (a delete's old key; 0 for a truncate), ``old`` the old
    key id of a key update, ``picks_at`` the row's index into :attr:`picks` (the pool
    index of each pool column), ``toast`` per TOAST column the entry index into the
    column's short pool followed by its TOAST pool, or ``NO_ROW`` for an unchanged
    (unsent) value; a delete's or truncate's ``toast`` is empty. ``units`` holds one
    (commit LSN, xid, commit time, rows) per transaction, for its next ``rows`` rows.
    """

    changes: list[tuple[int, int, int, int, int, tuple[int, ...]]] = field(default_factory=list)
    units: list[tuple[int, int, int, int]] = field(default_factory=list)
    chunks: list[npt.NDArray[np.int64]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.changes)

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
                rows.changes += pending
                rows.units.append((commit_lsn, xid, commit_time, len(pending)))
                pending.clear()
        self._position = 0

    def extend(
        self,
        table: int,
        changes: list[tuple[int, int, int, int, int, tuple[int, ...]]],
        units: list[tuple[int, int, int, int]],
    ) -> None:
        """Rows of whole committed transactions at once (no transaction may be open):
        ``changes`` and ``units`` as in :class:`LoggedRows`."""
        rows = self._rows[table]
        rows.changes += changes
        rows.units += units

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
