"""The tables of a recording made with ``pgwire-mock record --snapshot``.

Such a recording holds the published tables as the new slot's exported snapshot saw them
(definitions from pg_class and pg_attribute, rows as ``COPY … TO STDOUT`` sent them;
:mod:`pgwire_mock.streamfile` describes the format) and the stream from the slot's
consistent point. :class:`RecordedTables` gives them as a snapshot at any WAL position
sees them, as :func:`pgwire_mock.script.tables.tables_at` does for a script: the recorded
rows, then each recorded transaction whose commit record starts before that position,
applied with the same rules (:func:`pgwire_mock.script.tables.apply_change`).

Values are decoded by each column's type (:mod:`codec.values`), so rows from COPY's text
format, text tuple data and binary tuple data compare equal and can be sent again in
either format. Which recorded transactions count and in what order:

* Begin … Commit, and a streamed transaction's blocks up to its Stream Commit, at the
  commit's ``commit_lsn``; a Stream Abort drops the (sub)transaction's changes.
* A prepared transaction (Begin Prepare … Prepare, or Stream Prepare) once its Commit
  Prepared is before the position; Rollback Prepared drops it.
* A Relation message that describes a table differently (ALTER TABLE) reshapes its rows
  by column name, from the transaction it comes in; one for a table the snapshot did not
  have (created later) adds it, empty.

A column of a type :mod:`codec.values` does not know (enums, domains, composites…)
cannot be decoded: the recording still replays, but :meth:`RecordedTables.tables_at`
raises :class:`UnreadableTables` naming the column.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from codec import DecodeError
from codec.pgoutput import (
    UNCHANGED_TOAST,
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Decoder,
    Delete,
    Insert,
    Prepare,
    Relation,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    Truncate,
    TupleData,
    Update,
)
from codec.values import LSN, TYPES, decode_binary, decode_text
from pgwire_mock.script.tables import TableState, apply_change
from pgwire_mock.script.types import ColumnType, TypeCatalog
from pgwire_mock.script.wal import CColumn, Row, SubTxn, TableVersion, WChange
from pgwire_mock.streamfile import SnapshotRow, StreamEntry, StreamFileError

__all__ = ["RecordedTables", "UnreadableTables"]

_BUILTIN = TypeCatalog([], {})
_NO_SUB = SubTxn(None)  # recorded changes are applied per transaction, never per savepoint


class UnreadableTables(Exception):  # noqa: N818 - a condition the server reports (0A000)
    """The recording has a column whose values pgwire-mock cannot decode."""


@dataclass(frozen=True, eq=False)
class RecordedTables:
    """A recording's snapshot and the transactions after it, as tables at any LSN."""

    consistent_point: int
    initial: Mapping[str, tuple[TableVersion, list[Row]]]
    committed: Sequence[tuple[int, Sequence[WChange]]]
    """(commit record's LSN, changes) per transaction, in commit order."""
    problem: str | None = None

    def tables_at(self, lsn: int) -> dict[str, TableState]:
        """Every recorded table as a snapshot at ``lsn`` sees it (``schema.name`` → state)."""
        if self.problem is not None:
            raise UnreadableTables(self.problem)
        tables = {name: TableState(v, list(rows)) for name, (v, rows) in self.initial.items()}
        for commit_lsn, changes in self.committed:
            if commit_lsn >= lsn:
                break
            for change in changes:
                apply_change(tables, change)
        return tables

    @classmethod
    def load(
        cls,
        snapshot: Mapping[str, Any],
        rows: Sequence[SnapshotRow],
        entries: Sequence[StreamEntry],
        name: str,
    ) -> RecordedTables:
        """From the meta's ``snapshot``, the snapshot rows and the stream; raises
        :class:`StreamFileError` naming what is wrong."""
        try:
            point = int(LSN.parse(str(snapshot["consistent_point"])))
            versions = [_version(table) for table in snapshot["tables"]]
        except (KeyError, TypeError, ValueError, DecodeError) as err:
            raise StreamFileError(f"{name}: meta.snapshot: {err!r}") from None
        problem = next((p for v in versions for p in [_unreadable(v, name)] if p), None)
        initial: dict[str, tuple[TableVersion, list[Row]]] = {v.name: (v, []) for v in versions}
        if problem is not None:
            return cls(point, initial, (), problem)
        for row in rows:
            if row.table not in initial:
                raise StreamFileError(f"{name}, line {row.line}: no table {row.table} in meta")
            version, table_rows = initial[row.table]
            try:
                table_rows.append(_snapshot_values(version, row.values))
            except (DecodeError, ValueError) as err:
                raise StreamFileError(f"{name}, line {row.line}: {err}") from None
        replay = _Replay({v.oid: v for v in versions}, name)
        for entry in entries:
            replay.feed(entry)
        if replay.problem is not None:
            return cls(point, initial, (), replay.problem)
        return cls(point, initial, replay.committed)


def _version(table: Mapping[str, Any]) -> TableVersion:
    schema, relname = str(table["schema"]), str(table["name"])
    identity = str(table["relreplident"])
    columns = tuple(
        CColumn(
            str(c["name"]),
            _type(int(c["type_oid"])),
            int(c["typmod"]),
            bool(c["key"]),
            # 18: a stored generated column the publications publish (record.py).
            generated=str(c.get("generated", "")),
            attnum=int(c["attnum"]),
        )
        for c in table["columns"]
    )
    natts = int(table.get("relnatts", len(columns)))
    return TableVersion(
        f"{schema}.{relname}", schema, relname, int(table["oid"]), identity, columns, natts
    )


def _type(oid: int) -> ColumnType:
    info = TYPES.get(oid)
    if info is None:
        # Not a built-in type: enough to describe the column, not to read its values.
        return ColumnType(oid, f"oid {oid}", "", f"oid {oid}", "unknown")
    return _BUILTIN.resolve(info.name)[0]


def _unreadable(version: TableVersion, name: str) -> str | None:
    for column in version.columns:
        if column.ctype.info is None:
            return (
                f"pgwire-mock cannot read values of type OID {column.ctype.oid} (column "
                f"{column.name} of {version.name} in {name}): only built-in types"
            )
    return None


def _snapshot_values(version: TableVersion, values: Sequence[bytes | None]) -> Row:
    columns = version.stored
    if len(values) != len(columns):
        raise ValueError(f"{version.name} has {len(columns)} columns, the row {len(values)}")
    return tuple(
        None if v is None else decode_text(c.ctype.oid, v.decode("utf-8", "surrogateescape"))
        for c, v in zip(columns, values, strict=True)
    )


def _tuple_values(version: TableVersion, data: TupleData | None) -> Row | None:
    if data is None:
        return None
    columns = version.stored
    if len(data) != len(columns):
        raise ValueError(f"{version.name} has {len(columns)} columns, the change {len(data)}")
    out: list[object] = []
    for column, value in zip(columns, data, strict=True):
        if value is None or value is UNCHANGED_TOAST:
            out.append(value)
        elif isinstance(value, str):
            out.append(decode_text(column.ctype.oid, value))
        else:
            assert isinstance(value, bytes)
            out.append(decode_binary(column.ctype.oid, value))
    return tuple(out)


class _Replay:
    """Walks the recorded messages and collects each committed transaction's changes."""

    def __init__(self, by_oid: dict[int, TableVersion], name: str) -> None:
        self.by_oid = by_oid
        self.name = name
        self.decoder = Decoder()
        self.committed: list[tuple[int, list[WChange]]] = []
        self.current: list[tuple[int | None, WChange]] | None = None
        self.streams: dict[int, list[tuple[int | None, WChange]]] = {}
        self.prepared: dict[str, list[tuple[int | None, WChange]]] = {}
        self.problem: str | None = None

    def feed(self, entry: StreamEntry) -> None:
        try:
            message = self.decoder.decode(entry.payload)
            self._message(entry.lsn, message)
        except (DecodeError, ValueError) as err:
            raise StreamFileError(f"{self.name}: the message at {LSN(entry.lsn)}: {err}") from None

    def _commit(self, lsn: int, changes: list[tuple[int | None, WChange]] | None) -> None:
        if changes is not None:
            self.committed.append((lsn, [change for _, change in changes]))

    def _message(self, lsn: int, message: object) -> None:
        if isinstance(message, Begin | BeginPrepare):
            self.current = []
        elif isinstance(message, StreamStart):
            self.current = self.streams.setdefault(message.xid, [])
        elif isinstance(message, Commit):
            self._commit(message.commit_lsn, self.current)
            self.current = None
        elif isinstance(message, Prepare):
            if self.current is not None:
                self.prepared[message.gid] = self.current
            self.current = None
        elif isinstance(message, StreamCommit):
            self._commit(message.commit_lsn, self.streams.pop(message.xid, None))
        elif isinstance(message, StreamPrepare):
            changes = self.streams.pop(message.xid, None)
            if changes is not None:
                self.prepared[message.gid] = changes
        elif isinstance(message, StreamAbort):
            if message.subxid == message.xid:
                self.streams.pop(message.xid, None)
            elif message.xid in self.streams:
                kept = [(x, c) for x, c in self.streams[message.xid] if x != message.subxid]
                self.streams[message.xid] = kept
        elif isinstance(message, CommitPrepared):
            self._commit(message.commit_lsn, self.prepared.pop(message.gid, None))
        elif isinstance(message, RollbackPrepared):
            self.prepared.pop(message.gid, None)
        elif isinstance(message, Relation):
            self._relation(lsn, message)
        elif isinstance(message, Insert | Update | Delete | Truncate):
            self._change(lsn, message)
        # Origin, Type, Message and Stream Stop change no table.

    def _add(self, xid: int | None, change: WChange) -> None:
        if self.current is not None:
            self.current.append((xid, change))

    def _relation(self, lsn: int, message: Relation) -> None:
        old = self.by_oid.get(message.oid)
        described = [(c.name, c.type_oid, c.type_modifier) for c in message.columns]
        if (
            old is not None
            and old.identity == message.replica_identity
            and described == [(c.name, c.ctype.oid, c.typmod) for c in old.stored]
        ):
            return
        attnums = {c.name: c.attnum for c in old.columns} if old is not None else {}
        generated = {c.name: c.generated for c in old.columns} if old is not None else {}
        natts = old.natts if old is not None else 0
        columns = []
        for c in message.columns:
            if c.name not in attnums:
                natts += 1
                attnums[c.name] = natts
            key = c.is_key and message.replica_identity in "di"
            ctype = _type(c.type_oid)
            kind = generated.get(c.name, "")
            columns.append(CColumn(c.name, ctype, c.type_modifier, key, kind, attnums[c.name]))
        schema = message.namespace or "pg_catalog"
        version = TableVersion(
            f"{schema}.{message.relation_name}",
            schema,
            message.relation_name,
            message.oid,
            message.replica_identity,
            tuple(columns),
            natts,
        )
        if self.problem is None:
            self.problem = _unreadable(version, self.name)
        self.by_oid[message.oid] = version
        self._add(message.xid, WChange("ddl", lsn, _NO_SUB, 0, tables=(version,)))

    def _change(self, lsn: int, message: Insert | Update | Delete | Truncate) -> None:
        if self.problem is not None:
            return
        if isinstance(message, Truncate):
            versions = tuple(self.by_oid[o] for o in message.relation_oids if o in self.by_oid)
            self._add(message.xid, WChange("truncate", lsn, _NO_SUB, 0, tables=versions))
            return
        version = self.by_oid.get(message.relation_oid)
        if version is None:
            raise ValueError(f"a change of relation {message.relation_oid}, never described")
        if isinstance(message, Insert):
            new = _tuple_values(version, message.new_tuple)
            change = WChange("insert", lsn, _NO_SUB, 0, table=version, new=new)
        elif isinstance(message, Update):
            old_kind = "O" if message.old_tuple is not None else "K" if message.key_tuple else None
            change = WChange(
                "update",
                lsn,
                _NO_SUB,
                0,
                table=version,
                new=_tuple_values(version, message.new_tuple),
                old=_tuple_values(version, message.old_tuple or message.key_tuple),
                old_kind=old_kind,
            )
        else:
            old_kind = "O" if message.old_tuple is not None else "K"
            change = WChange(
                "delete",
                lsn,
                _NO_SUB,
                0,
                table=version,
                old=_tuple_values(version, message.old_tuple or message.key_tuple),
                old_kind=old_kind,
            )
        self._add(message.xid, change)
