"""The expected final table state of a synthetic stream, per shard and merged.

A shard cannot know the rows earlier shards left behind, so what it computes is a
*delta*: per table, whether it truncated the table, the rows it wrote last (key id →
row) and the key ids it deleted. Deltas compose associatively (:meth:`StateDelta.then`),
so the deltas of shards 0..n-1 folded in order give the single-process delta, and its
:meth:`StateDelta.final` is the state after the whole stream.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, Final

from codec.values import encode_text

__all__ = ["ExpectedState", "StateDelta", "TableDelta"]

Row = tuple[object, ...]


@dataclass(slots=True)
class TableDelta:
    """What a run of the stream did to one table (key ids are the generator's ints)."""

    truncated: bool = False
    rows: dict[int, Row] = field(default_factory=dict)
    deleted: set[int] = field(default_factory=set)

    def truncate(self) -> None:
        self.truncated = True
        self.rows.clear()
        self.deleted.clear()

    def then(self, later: TableDelta) -> TableDelta:
        """This delta followed by ``later``."""
        if later.truncated:
            return TableDelta(True, dict(later.rows), set(later.deleted))
        rows = {k: v for k, v in self.rows.items() if k not in later.deleted}
        rows.update(later.rows)
        deleted = (self.deleted - later.rows.keys()) | later.deleted
        return TableDelta(self.truncated, rows, set() if self.truncated else deleted)


@dataclass(slots=True)
class StateDelta:
    """A :class:`TableDelta` per table, by qualified name."""

    tables: dict[str, TableDelta] = field(default_factory=dict)

    def table(self, name: str) -> TableDelta:
        found = self.tables.get(name)
        if found is None:
            found = self.tables[name] = TableDelta()
        return found

    def then(self, later: StateDelta) -> StateDelta:
        """This delta followed by ``later`` (associative: fold shards in order)."""
        out = StateDelta()
        for name in self.tables.keys() | later.tables.keys():
            mine = self.tables.get(name, TableDelta())
            theirs = later.tables.get(name, TableDelta())
            out.tables[name] = mine.then(theirs)
        return out

    @staticmethod
    def merge(deltas: Iterable[StateDelta]) -> StateDelta:
        out = StateDelta()
        for delta in deltas:
            out = out.then(delta)
        return out


class _Texts:
    """One column's values in text form, each value object encoded once while it is in
    the cache: rows share their values with the generator's pools, so most repeat (by
    identity; every row, and so every value, stays alive while the state is written).
    The cache is emptied when full, so columns of unique values (keys) stay bounded."""

    __slots__ = ("done", "oid")
    LIMIT: Final = 1 << 16

    def __init__(self, oid: int) -> None:
        self.oid = oid
        self.done: dict[int, str | None] = {}

    def of(self, value: object) -> str | None:
        text = self.done.get(id(value), _MISSING)
        if text is _MISSING:
            if len(self.done) >= self.LIMIT:
                self.done.clear()
            text = self.done[id(value)] = None if value is None else encode_text(self.oid, value)
        return text  # type: ignore[return-value]


_MISSING: Final = object()


@dataclass(frozen=True, slots=True)
class ExpectedState:
    """The rows each table holds after the stream: table → {key value: row}.

    Rows are tuples of Python values in column order, exactly what
    :func:`codec.values.decode_text` (or ``decode_binary``) gives for each column.
    """

    columns: Mapping[str, tuple[str, ...]]
    type_oids: Mapping[str, tuple[int, ...]]
    tables: Mapping[str, Mapping[object, Row]]

    @classmethod
    def from_delta(
        cls,
        delta: StateDelta,
        columns: Mapping[str, tuple[str, ...]],
        type_oids: Mapping[str, tuple[int, ...]],
        key_values: Mapping[str, Callable[[int], object]],
    ) -> ExpectedState:
        tables: dict[str, dict[object, Row]] = {}
        for name in columns:
            d = delta.tables.get(name, TableDelta())
            to_key = key_values[name]
            tables[name] = {to_key(k): d.rows[k] for k in sorted(d.rows)}
        return cls(columns, type_oids, tables)

    def records(self) -> Iterator[dict[str, Any]]:
        """One JSON-ready dict per row: values in PostgreSQL's text form (NULL = null)."""
        for name, rows in self.tables.items():
            names = self.columns[name]
            texts = [_Texts(oid) for oid in self.type_oids[name]]
            for row in rows.values():
                yield {
                    "table": name,
                    "row": dict(zip(names, map(_Texts.of, texts, row), strict=True)),
                }

    def write_jsonl(self, out: IO[str]) -> int:
        """Write :meth:`records` as JSON Lines; return the number of rows."""
        count = 0
        for record in self.records():
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
        return count
