"""A transaction's changes checked against the tables and written at the end of WAL.

:class:`ChangeWriter` holds the WAL's moving parts (the next LSN, the next transaction
id, the clock) and the tables as they stand, and turns each change of a transaction
(insert, update, delete, truncate, logical message, savepoint, ALTER TABLE) into its
record: its LSN, the (sub)transaction it belongs to, its rows converted to the columns'
types, and the memory ReorderBuffer counts for it. Unknown tables and columns, values
that do not convert, missing replica identity keys and unknown savepoints raise
:class:`ScriptError` naming the place.

Kept apart from :mod:`pgwire_mock.script.compile`: the
:class:`~pgwire_mock.script.compile.Compiler` extends it with the script's steps, the
records that end transactions and the transactions kept open on a live WAL, which write
their changes through the same methods.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from codec.errors import CodecError
from codec.pgoutput import UNCHANGED_TOAST
from codec.values import datetime_to_pg_timestamp, decode_text, type_by_name
from pgwire_mock.script.declarations import compiled_columns
from pgwire_mock.script.errors import ScriptError
from pgwire_mock.script.model import (
    AlterPublication,
    AlterTable,
    Change,
    CreatePublication,
    Delete,
    DropPublication,
    Insert,
    LogicalMessage,
    ReleaseSavepoint,
    RollbackToSavepoint,
    Savepoint,
    Truncate,
    Update,
)
from pgwire_mock.script.sizes import (
    ABORT_RECORD,
    CHANGE_STRUCT,
    DDL_CHANGE_MEMORY,
    DDL_RECORDS,
    DELETE_RECORD,
    HEAP_RECORD,
    HEAP_TUPLE_DATA,
    MESSAGE_RECORD,
    TRUNCATE_RECORD,
    alter_table_invalidations,
    alter_table_memory,
    change_memory,
    maxalign,
    needs_toast_table,
    truncate_invalidations,
    truncate_memory,
    tuple_size,
)
from pgwire_mock.script.types import TypeCatalog, ValueProblem, convert
from pgwire_mock.script.wal import Row, SubTxn, TableVersion, WChange, WSubAbort

__all__ = ["ChangeWriter", "count_subxacts", "parse_timestamptz"]


class ChangeWriter:
    """Writes changes at the end of WAL: :attr:`lsn` is where the next record starts,
    :attr:`next_xid` the next transaction id, :attr:`clock` the time (microseconds since
    2000) of the last commit; :attr:`tables` the tables as the last change left them."""

    catalog: TypeCatalog
    """The script's types; set once they are declared, before the first change."""

    def __init__(self, pg_version: int, lsn: int, next_xid: int, clock: int) -> None:
        self.pg_version = pg_version
        self.lsn = lsn
        self.next_xid = next_xid
        self.clock = clock
        self.tables: dict[str, TableVersion] = {}

    def record(self, size: int) -> tuple[int, int]:
        start = self.lsn
        self.lsn = start + maxalign(size)
        return start, self.lsn

    def assign(self, sub: SubTxn) -> None:
        if sub.xid is None:
            if sub.parent is not None:
                self.assign(sub.parent)
            sub.xid = self.next_xid
            self.next_xid += 1

    def tick(self, given: str | None, where: str, step_us: int = 1000) -> int:
        if given is not None:
            # A later time moves the clock on; an earlier one (an origin's commit time)
            # is used for that transaction only.
            stamp = parse_timestamptz(given, where)
            self.clock = max(self.clock, stamp)
            return stamp
        self.clock += step_us
        return self.clock

    def change(
        self,
        change: Change,
        stack: list[SubTxn],
        items: list[WChange | WSubAbort],
        where: str,
    ) -> None:
        sub = stack[-1]
        if isinstance(change, Insert):
            table = self.table(change.table, f"{where}.insert")
            new = self.row(table, change.values, f"{where}.values", require_all_keys=False)
            self.assign(sub)
            size = tuple_size(table, new)
            lsn, _ = self.record(HEAP_RECORD + size)
            items.append(WChange("insert", lsn, sub, change_memory(size), table, new=new))
        elif isinstance(change, Update):
            self.update(change, sub, items, where)
        elif isinstance(change, Delete):
            self.delete(change, sub, items, where)
        elif isinstance(change, Truncate):
            if not change.tables:
                raise ScriptError("expected at least one table", f"{where}.truncate")
            tables = tuple(
                self.table(name, f"{where}.truncate[{j}]") for j, name in enumerate(change.tables)
            )
            options = (1 if change.cascade else 0) | (2 if change.restart_identity else 0)
            self.assign(sub)
            lsn, _ = self.record(TRUNCATE_RECORD + 4 * len(tables))
            memory = truncate_memory(tables)
            invalidations = truncate_invalidations(tables)
            items.append(
                WChange(
                    "truncate",
                    lsn,
                    sub,
                    memory,
                    tables=tables,
                    options=options,
                    invalidations=invalidations,
                )
            )
        elif isinstance(change, LogicalMessage):
            self.assign(sub)
            size = MESSAGE_RECORD + len(change.prefix.encode()) + 1 + len(change.content)
            _, end = self.record(size)
            memory = CHANGE_STRUCT + len(change.prefix.encode()) + 1 + len(change.content) + 16
            items.append(
                WChange("message", end, sub, memory, prefix=change.prefix, content=change.content)
            )
        elif isinstance(change, Savepoint):
            if not change.name:
                raise ScriptError("expected a savepoint name", where)
            stack.append(SubTxn(sub, change.name))
        elif isinstance(change, ReleaseSavepoint):
            level = _find_savepoint(stack, change.name, where)
            while len(stack) > level:
                done = stack.pop()
                if done.xid is not None or done.released:
                    stack[-1].released.append(done)
        elif isinstance(change, RollbackToSavepoint):
            level = _find_savepoint(stack, change.name, where)
            time = self.tick(None, where, step_us=50)
            while len(stack) > level:
                done = stack.pop()
                subs = (*_released_with_xid(done), *([done] if done.xid is not None else []))
                if done.xid is not None:
                    _, end = self.record(ABORT_RECORD + 4 * len(subs))
                    items.append(WSubAbort(end, subs, time))
                self.restore_tables(subs)
            # ROLLBACK TO keeps the savepoint: a new subtransaction starts under it.
            stack.append(SubTxn(stack[-1], change.name))
        elif isinstance(change, AlterTable):
            self.alter(change, sub, items, where)
        elif isinstance(change, CreatePublication | AlterPublication | DropPublication):
            # pg_publication's rows: an invalidation of every table's pgoutput entry,
            # which the output plugin applies from CompiledScript.publication_changes.
            self.assign(sub)
            lsn, _ = self.record(DDL_RECORDS)
            items.append(WChange("ddl", lsn, sub, DDL_CHANGE_MEMORY))
        else:  # pragma: no cover
            raise ScriptError(f"unknown change {type(change).__name__}", where)

    def restore_tables(self, subs: Sequence[SubTxn]) -> None:
        """Rolled back: each table ``subs`` altered is as before the first of them."""
        altered = sorted((a for sub in subs for a in sub.altered), key=lambda a: a[0])
        for _, name, before in reversed(altered):  # the earliest last, so it stays
            self.tables[name] = before
        for sub in subs:
            sub.altered.clear()

    def table(self, name: str, where: str) -> TableVersion:
        table = self.tables.get(name)
        if table is None:
            raise ScriptError(f"no table {name!r}", where)
        return table

    def row(
        self,
        table: TableVersion,
        values: Mapping[str, object] | None,
        where: str,
        *,
        require_all_keys: bool,
        only_keys: bool = False,
        unchanged: Sequence[str] = (),
    ) -> Row:
        values = values or {}
        if not isinstance(values, Mapping):
            raise ScriptError("expected a mapping of column names to values", where)
        names = {c.name: c for c in table.columns}
        for key in values:
            col = names.get(key)
            if col is None:
                raise ScriptError(f"no column {key!r} in {table.name}", where)
            if col.generated == "v":
                raise ScriptError(
                    f"column {key!r} is a virtual generated column: never stored nor sent, it "
                    "takes no value",
                    f"{where}.{key}",
                )
            if only_keys and not col.key:
                raise ScriptError(
                    f"column {key!r} is not a replica identity column", f"{where}.{key}"
                )
        out: list[object] = []
        for c in table.stored:
            if c.name in unchanged:
                out.append(UNCHANGED_TOAST)
                continue
            if only_keys and not c.key:
                out.append(None)
                continue
            if require_all_keys and c.key and c.name not in values:
                raise ScriptError(f"missing replica identity column {c.name!r}", where)
            try:
                out.append(convert(c.ctype, c.typmod, values.get(c.name)))
            except ValueProblem as err:
                raise ScriptError(str(err), f"{where}.{c.name}") from err.__cause__
        return tuple(out)

    def update(
        self, change: Update, sub: SubTxn, items: list[WChange | WSubAbort], where: str
    ) -> None:
        table = self.table(change.table, f"{where}.update")
        for j, name in enumerate(change.unchanged):
            if name not in {c.name for c in table.stored}:
                raise ScriptError(f"no column {name!r} in {table.name}", f"{where}.unchanged[{j}]")
            if name in change.values:
                raise ScriptError(
                    f"column {name!r} has a value and is unchanged", f"{where}.unchanged[{j}]"
                )
        new = self.row(
            table,
            change.values,
            f"{where}.values",
            require_all_keys=False,
            unchanged=change.unchanged,
        )
        old, old_kind = self.old_tuple(table, change, where, key_required=False)
        self.assign(sub)
        size = tuple_size(table, new) + (tuple_size(table, old) if old else 0)
        lsn, _ = self.record(HEAP_RECORD + size)
        memory = change_memory(tuple_size(table, new)) + (
            HEAP_TUPLE_DATA + tuple_size(table, old) if old else 0
        )
        items.append(
            WChange("update", lsn, sub, memory, table, new=new, old=old, old_kind=old_kind)
        )

    def old_tuple(
        self, table: TableVersion, change: Update | Delete, where: str, *, key_required: bool
    ) -> tuple[Row | None, str | None]:
        """The old row a change carries and its kind: the whole row ('O') under REPLICA
        IDENTITY FULL, else the replica identity key ('K'), which a DELETE always carries
        and an UPDATE only when it changed the key (the script then gives key:)."""
        if table.identity == "f":
            if change.key is not None:
                raise ScriptError("REPLICA IDENTITY FULL takes old:, not key:", f"{where}.key")
            if change.old is None:
                raise ScriptError("REPLICA IDENTITY FULL needs the old row (old:)", where)
            return self.row(table, change.old, f"{where}.old", require_all_keys=False), "O"
        if change.old is not None:
            raise ScriptError("old: is only for REPLICA IDENTITY FULL; use key:", f"{where}.old")
        if change.key is None:
            if key_required and table.has_key:
                raise ScriptError("a DELETE needs the old key (key:)", where)
            return None, None
        if not table.has_key:
            raise ScriptError(f"{table.name} has no replica identity columns", f"{where}.key")
        key = self.row(table, change.key, f"{where}.key", require_all_keys=True, only_keys=True)
        return key, "K"

    def delete(
        self, change: Delete, sub: SubTxn, items: list[WChange | WSubAbort], where: str
    ) -> None:
        table = self.table(change.table, f"{where}.delete")
        old, old_kind = self.old_tuple(table, change, where, key_required=True)
        self.assign(sub)
        size = tuple_size(table, old) if old else 0
        lsn, _ = self.record(DELETE_RECORD + size)
        memory = CHANGE_STRUCT + (HEAP_TUPLE_DATA + size if old else 0)
        items.append(WChange("delete", lsn, sub, memory, table, old=old, old_kind=old_kind))

    def alter(
        self, change: AlterTable, sub: SubTxn, items: list[WChange | WSubAbort], where: str
    ) -> None:
        table = self.table(change.table, f"{where}.alter_table")
        columns = list(table.columns)
        names = [c.name for c in columns]
        for j, name in enumerate(change.drop_columns):
            if name not in names:
                raise ScriptError(
                    f"no column {name!r} in {table.name}", f"{where}.drop_columns[{j}]"
                )
            index = names.index(name)
            del columns[index], names[index]
        added = tuple(
            dataclasses.replace(c, attnum=table.natts + c.attnum)
            for c in compiled_columns(
                self.catalog, self.pg_version, change.add_columns, f"{where}.add_columns"
            )
        )
        for j, c in enumerate(added):
            if c.name in names:
                raise ScriptError(
                    f"column {c.name!r} already exists", f"{where}.add_columns[{j}].name"
                )
            names.append(c.name)
        natts = table.natts + len(added)
        toast = needs_toast_table((*columns, *added), natts)
        new = TableVersion(
            table.name,
            table.namespace,
            table.relname,
            table.oid,
            table.identity,
            (*columns, *added),
            natts,
            table.toast or toast,
        )
        if new.identity == "i" and not any(c.key for c in new.columns):
            raise ScriptError("REPLICA IDENTITY INDEX needs key columns", where)
        self.tables[table.name] = new
        sub.altered.append((self.lsn, table.name, table))
        self.assign(sub)
        lsn, _ = self.record(DDL_RECORDS)
        dropped = [c for c in table.columns if c.name in change.drop_columns]
        invalidations = alter_table_invalidations(table, added, dropped, toast)
        items.append(
            WChange(
                "ddl",
                lsn,
                sub,
                alter_table_memory(invalidations, toast and not table.toast),
                new,
                tables=(new,),
                invalidations=invalidations,
            )
        )


def _find_savepoint(stack: list[SubTxn], name: str, where: str) -> int:
    for level in range(len(stack) - 1, 0, -1):
        if stack[level].name == name:
            return level
    raise ScriptError(f"savepoint {name!r} does not exist", where)


def _released_with_xid(sub: SubTxn) -> list[SubTxn]:
    out: list[SubTxn] = []
    for child in sub.released:
        out.extend(_released_with_xid(child))
        if child.xid is not None:
            out.append(child)
    return out


def count_subxacts(top: SubTxn) -> int:
    """How many subtransactions with an xid were released into ``top`` (the xids its
    commit, abort or prepare record lists)."""
    return len(_released_with_xid(top))


def parse_timestamptz(text: str, where: str) -> int:
    """A script's timestamp as microseconds since 2000-01-01 UTC; ScriptError if bad."""
    try:
        value = decode_text(type_by_name("timestamptz").oid, str(text))
        return datetime_to_pg_timestamp(value)  # type: ignore[arg-type]
    except (CodecError, TypeError, ValueError, OverflowError):
        raise ScriptError(f"expected a timestamp with time zone, got {text!r}", where) from None
