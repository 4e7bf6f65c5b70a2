"""Replaying a pgoutput stream into the final state of each table, as a subscriber would.

Changes are buffered per transaction and applied only when the transaction commits:

- ``B`` … ``C``: a plain transaction;
- ``b`` … ``P`` then ``K`` (applied) or ``r`` (dropped): two-phase, matched by GID;
- ``S`` … ``E`` segments, then ``c`` (applied), ``A`` (dropped: the whole transaction if
  ``subxid == xid``, else the changes of that subtransaction), or ``p`` (prepared, then
  ``K``/``r`` as above). Changes inside a stream carry the xid of their
  (sub)transaction; the Stream Start's xid is the top-level one.

A row is a mapping of column name to ``(type OID, value as sent)``: names, not positions,
so rows written before an ``ALTER TABLE`` keep the columns they had. An Update finds its
row by the old tuple (``O``, replica identity full), the key tuple (``K``, key changed),
or else the new tuple's replica identity columns; unchanged TOASTed columns (``u``) keep
the old row's value. A Truncate empties its relations.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from codec import CodecError
from codec import pgoutput as po
from codec.pgoutput import UNCHANGED_TOAST, ColumnValue, TupleData

__all__ = ["ReplayError", "ReplayedTable", "Row", "replay"]

Row = dict[str, tuple[int, ColumnValue]]

_K = TypeVar("_K", str, int)
_Change = tuple[po.Relation | None, po.PgOutputMessage]


class ReplayError(Exception):
    """The stream cannot be applied (a change outside a transaction, a missing row, ...)."""


@dataclass(slots=True)
class ReplayedTable:
    """A relation's last Relation message and its rows after the whole stream."""

    relation: po.Relation
    rows: list[Row] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.relation.namespace}.{self.relation.relation_name}"


@dataclass(slots=True)
class _Txn:
    # (xid the change carried, or None outside streaming; the change)
    changes: list[tuple[int | None, _Change]] = field(default_factory=list)


def _key_names(rel: po.Relation) -> list[str]:
    return [c.name for c in rel.columns if c.flags & 1]


def _values(rel: po.Relation, values: TupleData, what: str) -> dict[str, ColumnValue]:
    if len(values) != len(rel.columns):
        raise ReplayError(
            f"{what} on {rel.relation_name} has {len(values)} columns, "
            f"its Relation has {len(rel.columns)}"
        )
    return {c.name: v for c, v in zip(rel.columns, values, strict=True)}


def _matches(row: Row, wanted: Mapping[str, ColumnValue]) -> bool:
    for name, value in wanted.items():
        if value is UNCHANGED_TOAST:
            continue
        if name not in row or row[name][1] != value:
            return False
    return True


class _Tables:
    def __init__(self) -> None:
        self.by_oid: dict[int, ReplayedTable] = {}

    def table(self, rel: po.Relation) -> ReplayedTable:
        table = self.by_oid.get(rel.oid)
        if table is None:
            table = self.by_oid[rel.oid] = ReplayedTable(rel)
        else:
            table.relation = rel
        return table

    def find(self, rel: po.Relation, wanted: Mapping[str, ColumnValue], what: str) -> int:
        rows = self.table(rel).rows
        for index, row in enumerate(rows):
            if _matches(row, wanted):
                return index
        shown = {k: v for k, v in wanted.items() if v is not UNCHANGED_TOAST}
        raise ReplayError(f"{what} on {rel.relation_name}: no row matches {shown}")

    def identity(
        self,
        rel: po.Relation,
        key: TupleData | None,
        old: TupleData | None,
        new: TupleData | None,
        what: str,
    ) -> dict[str, ColumnValue]:
        if old is not None:
            return _values(rel, old, f"{what} old tuple")
        source = key if key is not None else new
        if source is None:
            raise ReplayError(f"{what} on {rel.relation_name} carries no key or old tuple")
        values = _values(rel, source, what)
        names = _key_names(rel)
        if not names:
            raise ReplayError(f"{what} on {rel.relation_name}, which has no identity columns")
        return {name: values[name] for name in names}

    def apply(self, rel: po.Relation | None, msg: po.PgOutputMessage) -> None:
        if isinstance(msg, po.Truncate):
            for oid in msg.relation_oids:
                if oid in self.by_oid:
                    self.by_oid[oid].rows.clear()
            return
        if rel is None:
            raise ReplayError(f"{type(msg).__name__} for a relation never described")
        if isinstance(msg, po.Insert):
            row = self._row(rel, msg.new_tuple, None, "Insert")
            self.table(rel).rows.append(row)
        elif isinstance(msg, po.Update):
            wanted = self.identity(rel, msg.key_tuple, msg.old_tuple, msg.new_tuple, "Update")
            index = self.find(rel, wanted, "Update")
            rows = self.table(rel).rows
            rows[index] = self._row(rel, msg.new_tuple, rows[index], "Update")
        elif isinstance(msg, po.Delete):
            wanted = self.identity(rel, msg.key_tuple, msg.old_tuple, None, "Delete")
            del self.table(rel).rows[self.find(rel, wanted, "Delete")]

    @staticmethod
    def _row(rel: po.Relation, values: TupleData, previous: Row | None, what: str) -> Row:
        row: Row = {}
        for column, value in zip(rel.columns, _checked(rel, values, what), strict=True):
            if value is UNCHANGED_TOAST:
                if previous is None or column.name not in previous:
                    raise ReplayError(
                        f"{what} on {rel.relation_name}: unchanged TOAST value for "
                        f"{column.name} but no earlier value to keep"
                    )
                row[column.name] = previous[column.name]
            else:
                row[column.name] = (column.type_oid, value)
        return row


def _checked(rel: po.Relation, values: TupleData, what: str) -> TupleData:
    _values(rel, values, what)
    return values


def replay(payloads: Iterable[bytes]) -> dict[int, ReplayedTable]:
    """Decode and apply a whole stream; the tables it touched, by relation OID."""
    decoder = po.Decoder()
    tables = _Tables()
    relations: dict[int, po.Relation] = {}
    current: _Txn | None = None
    streamed: dict[int, _Txn] = {}
    stream_xid: int | None = None
    prepared: dict[str, _Txn] = {}

    def commit(txn: _Txn) -> None:
        for _, (rel, change) in txn.changes:
            tables.apply(rel, change)

    for index, payload in enumerate(payloads):
        try:
            msg = decoder.decode(payload)
        except CodecError as err:
            raise ReplayError(f"message {index}: {err}") from err
        try:
            match msg:
                case po.Relation():
                    relations[msg.oid] = msg
                    # A relation enters the result with its first change: publishing
                    # through a partition root, pgoutput also describes the leaf
                    # partition (pgoutput.c maybe_send_schema) but never changes it.
                    if msg.oid in tables.by_oid:
                        tables.by_oid[msg.oid].relation = msg
                case po.Begin() | po.BeginPrepare():
                    current = _Txn()
                case po.Commit():
                    if current is None:
                        raise ReplayError("Commit outside a transaction")
                    commit(current)
                    current = None
                case po.Prepare():
                    if current is None:
                        raise ReplayError("Prepare outside a transaction")
                    prepared[msg.gid] = current
                    current = None
                case po.CommitPrepared():
                    commit(_pop(prepared, msg.gid, "Commit Prepared"))
                case po.RollbackPrepared():
                    _pop(prepared, msg.gid, "Rollback Prepared")
                case po.StreamStart():
                    stream_xid = msg.xid
                    streamed.setdefault(msg.xid, _Txn())
                case po.StreamStop():
                    stream_xid = None
                case po.StreamCommit():
                    commit(_pop(streamed, msg.xid, "Stream Commit"))
                case po.StreamPrepare():
                    prepared[msg.gid] = _pop(streamed, msg.xid, "Stream Prepare")
                case po.StreamAbort():
                    if msg.subxid == msg.xid:
                        _pop(streamed, msg.xid, "Stream Abort")
                    elif msg.xid in streamed:
                        txn = streamed[msg.xid]
                        txn.changes = [c for c in txn.changes if c[0] != msg.subxid]
                    else:
                        raise ReplayError(f"Stream Abort of subxact of unknown xid {msg.xid}")
                case po.Insert() | po.Update() | po.Delete() | po.Truncate():
                    oid = msg.relation_oid if not isinstance(msg, po.Truncate) else None
                    rel = relations.get(oid) if oid is not None else None
                    if stream_xid is not None:
                        streamed[stream_xid].changes.append((msg.xid, (rel, msg)))
                    elif current is not None:
                        current.changes.append((None, (rel, msg)))
                    else:
                        raise ReplayError(f"{type(msg).__name__} outside a transaction")
                case _:
                    pass  # Origin, Type, Message: no table state
        except ReplayError as err:
            raise ReplayError(f"message {index} ({type(msg).__name__}): {err}") from None
    return tables.by_oid


def _pop(txns: dict[_K, _Txn], key: _K, what: str) -> _Txn:
    txn = txns.pop(key, None)
    if txn is None:
        raise ReplayError(f"{what} of unknown transaction {key!r}")
    return txn
