"""A script's tables as of a WAL position: what a snapshot taken there sees.

A slot's exported snapshot (CREATE_REPLICATION_SLOT … USE_SNAPSHOT / EXPORT_SNAPSHOT)
shows exactly the transactions the slot will not stream: those whose commit record
starts before its consistent point (SnapBuildXactNeedsSkip). :func:`tables_at` replays
the script to such a point: the tables' declared rows, then each transaction committed
before it in commit order — a prepared one once COMMIT PREPARED is before it — without
the changes of subtransactions rolled back, TRUNCATE emptying, ALTER TABLE reshaping the
rows (a new column NULL, a dropped one gone).

:func:`apply_change` is the one place these rules live: a recording made with
``pgwire-mock record --snapshot`` (:mod:`pgwire_mock.script.snapshot`) applies its
recorded changes to its recorded rows through it too.

Rows are found for UPDATE and DELETE as pgoutput's subscriber finds them: by the replica
identity — the key columns (the old key when the change carries one, else the new row's)
or, under REPLICA IDENTITY FULL, the whole old row. An unchanged TOASTed value keeps
the row's old value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal

from codec.pgoutput import UNCHANGED_TOAST
from pgwire_mock.script.wal import (
    CompiledScript,
    Row,
    TableVersion,
    WChange,
    WFinishPrepared,
    WSubAbort,
    WTxn,
)

__all__ = ["TableState", "apply_change", "tables_at"]


@dataclass(eq=False)
class TableState:
    """One table's definition and rows at a point of the WAL.

    UPDATE and DELETE find their row through a hash index per identity (the key columns,
    or every column), built on first use and kept up to date, so replaying n changes
    over m rows costs O(n + m), not O(n·m). A deleted row's place takes the last row
    (the order of ``rows`` is not PostgreSQL's physical order, which no client sees)."""

    version: TableVersion
    rows: list[Row] = field(default_factory=list)
    # identity columns → key → positions in rows; None when a value is not hashable
    _indexes: dict[tuple[int, ...], dict[object, list[int]] | None] = field(
        default_factory=dict, repr=False
    )

    def reset(self, rows: list[Row]) -> None:
        self.rows = rows
        self._indexes.clear()

    def insert(self, row: Row) -> None:
        self.rows.append(row)
        self._index_add(len(self.rows) - 1)

    def find(self, columns: tuple[int, ...], wanted: Row) -> int | None:
        if columns not in self._indexes:
            self._indexes[columns] = self._build(columns)
        index = self._indexes[columns]
        if index is None:
            return next(
                (
                    i
                    for i, row in enumerate(self.rows)
                    if all(_equal(row[c], wanted[c]) for c in columns)
                ),
                None,
            )
        positions = index.get(_key(wanted, columns))
        return positions[0] if positions else None

    def delete(self, position: int) -> None:
        self._index_remove(position)
        last = len(self.rows) - 1
        if position != last:
            self._index_remove(last)
            self.rows[position] = self.rows[last]
            self.rows.pop()
            self._index_add(position)
        else:
            self.rows.pop()

    def replace(self, position: int, row: Row) -> None:
        self._index_remove(position)
        self.rows[position] = row
        self._index_add(position)

    def _build(self, columns: tuple[int, ...]) -> dict[object, list[int]] | None:
        index: dict[object, list[int]] = {}
        try:
            for position, row in enumerate(self.rows):
                index.setdefault(_key(row, columns), []).append(position)
        except TypeError:  # an unhashable value (never from the codec's types, but cheap)
            return None
        return index

    def _index_add(self, position: int) -> None:
        row = self.rows[position]
        for columns, index in self._indexes.items():
            if index is None:
                continue
            try:
                index.setdefault(_key(row, columns), []).append(position)
            except TypeError:
                self._indexes[columns] = None

    def _index_remove(self, position: int) -> None:
        row = self.rows[position]
        for columns, index in self._indexes.items():
            if index is not None:
                positions = index[_key(row, columns)]
                positions.remove(position)
                if not positions:
                    del index[_key(row, columns)]


def tables_at(compiled: CompiledScript, lsn: int) -> dict[str, TableState]:
    """Every table of ``compiled``, as a snapshot at ``lsn`` sees it (name → state)."""
    tables = {
        name: TableState(version, list(rows)) for name, (version, rows) in compiled.initial.items()
    }
    written = compiled.available if compiled.live else len(compiled.wal)
    for item in compiled.wal[:written]:
        if isinstance(item, WTxn) and item.kind == "commit" and item.lsn < lsn:
            _apply(tables, item)
        elif isinstance(item, WFinishPrepared) and item.commit and item.lsn < lsn:
            _apply(tables, item.txn)
    return tables


def _apply(tables: dict[str, TableState], txn: WTxn) -> None:
    aborted = {id(sub) for item in txn.items if isinstance(item, WSubAbort) for sub in item.subs}
    for item in txn.items:
        if isinstance(item, WChange) and id(item.sub) not in aborted:
            apply_change(tables, item)


def apply_change(tables: dict[str, TableState], change: WChange) -> None:
    """Apply one change (insert, update, delete, truncate, ddl) to ``tables``; a ddl
    change naming a table not there yet creates it empty."""
    if change.kind == "truncate":
        for version in change.tables:
            tables[version.name].reset([])
        return
    if change.kind == "ddl":
        for version in change.tables:
            state = tables.setdefault(version.name, TableState(version))
            state.reset([_reshape(state.version, version, row) for row in state.rows])
            state.version = version
        return
    table = change.table
    if table is None or change.kind not in ("insert", "update", "delete"):
        return  # a transactional message
    state = tables[table.name]
    if change.kind == "insert" and change.new is not None:
        state.insert(change.new)
        return
    index = _find(state, change)
    if index is None:
        return  # no such row: a subscriber would skip it too
    if change.kind == "delete":
        state.delete(index)
    elif change.new is not None:
        old = state.rows[index]
        state.replace(
            index,
            tuple(o if n is UNCHANGED_TOAST else n for o, n in zip(old, change.new, strict=True)),
        )


def _find(state: TableState, change: WChange) -> int | None:
    columns = state.version.stored
    wanted: Row | None
    if change.old_kind == "O":
        wanted, keys = change.old, tuple(range(len(columns)))
    else:
        wanted = change.old if change.old is not None else change.new
        keys = tuple(i for i, c in enumerate(columns) if c.key)
    if wanted is None or not keys:
        return None
    return state.find(keys, wanted)


_NAN: object = object()  # one key for every NaN: PostgreSQL's = finds NaN equal to NaN


def _key(row: Row, columns: tuple[int, ...]) -> tuple[object, ...]:
    return tuple(_NAN if _is_nan(row[c]) else row[c] for c in columns)


def _equal(a: object, b: object) -> bool:
    """Equality as the subscriber's lookup sees it: PostgreSQL orders NaN equal to NaN
    (float8_eq, cmp_numerics), Python does not."""
    if a == b:
        return True
    return _is_nan(a) and _is_nan(b)


def _is_nan(value: object) -> bool:
    if isinstance(value, float):
        return math.isnan(value)
    return isinstance(value, Decimal) and value.is_nan()


def _reshape(old: TableVersion, new: TableVersion, row: Row) -> Row:
    by_name = {c.name: v for c, v in zip(old.stored, row, strict=True)}
    return tuple(by_name.get(c.name) for c in new.stored)
