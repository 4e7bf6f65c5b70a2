"""How many bytes the compiler counts: WAL records, heap tuples, ReorderBuffer memory.

Record sizes are estimates of what PostgreSQL writes (a heap insert is about 64 bytes
plus the tuple), good enough to look real; records are MAXALIGNed and follow one another
without gaps. A change's memory is what ``ReorderBufferChangeSize`` counts against
``logical_decoding_work_mem``, so a script streams or spills where a real server would.
:func:`type_length` is pg_type.typlen, which the catalog queries answer as well.

Kept apart from :mod:`pgwire_mock.script.compile` because these are the layout's
numbers, not its rules: both the compiler and the change writer
(:mod:`pgwire_mock.script.changes`) use them, and the server's catalog queries read
:func:`type_length` without the compiler.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import Final

from codec.pgoutput import UNCHANGED_TOAST
from pgwire_mock.script.types import ColumnType, encode_value
from pgwire_mock.script.wal import CatalogCommit, CColumn, Row, TableVersion, WChange, WTxn

__all__ = [
    "ABORT_RECORD",
    "CHANGE_STRUCT",
    "CHECKPOINT_REDO_RECORD",
    "COMMIT_RECORD",
    "DDL_CHANGE_MEMORY",
    "DDL_RECORDS",
    "DELETE_RECORD",
    "FINISH_PREPARED_RECORD",
    "HEAP_RECORD",
    "HEAP_TUPLE_DATA",
    "MESSAGE_RECORD",
    "ONLINE_CHECKPOINT_RECORD",
    "PREPARE_RECORD",
    "RUNNING_XACTS_RECORD",
    "SHUTDOWN_CHECKPOINT_RECORD",
    "TRUNCATE_RECORD",
    "alter_table_invalidations",
    "alter_table_memory",
    "change_memory",
    "invalidations_memory",
    "maxalign",
    "needs_toast_table",
    "publication_invalidations",
    "snapshot_memory",
    "truncate_invalidations",
    "truncate_memory",
    "tuple_size",
    "type_length",
]

# Estimated record sizes (bytes, before alignment).
HEAP_RECORD: Final = 64
DELETE_RECORD: Final = 56
TRUNCATE_RECORD: Final = 56
MESSAGE_RECORD: Final = 40
DDL_RECORDS: Final = 1400  # catalog tuples, invalidations
ABORT_RECORD: Final = 48
COMMIT_RECORD: Final = 48
PREPARE_RECORD: Final = 200
FINISH_PREPARED_RECORD: Final = 64
# XLOG_CHECKPOINT_SHUTDOWN: a 24-byte header, 2 for the data, CheckPoint's 88 (14-18:
# pg_current_wal_lsn() moves by 120 across a clean restart with nothing else written).
SHUTDOWN_CHECKPOINT_RECORD: Final = 114
ONLINE_CHECKPOINT_RECORD: Final = 114  # CHECKPOINT: the same CheckPoint struct
CHECKPOINT_REDO_RECORD: Final = 30  # 17+: XLOG_CHECKPOINT_REDO, the wal_level (an int)
# XLOG_RUNNING_XACTS: the header, 2 for the data, xl_running_xacts' 24, then 4 per xid
# listed (56 bytes with none or one running, measured on 14-18).
RUNNING_XACTS_RECORD: Final = 50
# ReorderBuffer memory accounting (reorderbuffer.c, ReorderBufferChangeSize).
CHANGE_STRUCT: Final = 80
HEAP_TUPLE_DATA: Final = 24
DDL_CHANGE_MEMORY: Final = 80 + 16 * 12


# SnapBuildDistributeSnapshotAndInval queues in each transaction in progress, where a
# catalog transaction commits, a snapshot (SnapshotData, 120 bytes up to 17 and 104 on
# 18, then 4 per catalog transaction committed since the transaction began) and the
# committing transaction's invalidation messages (16 bytes each), both counted against
# logical_decoding_work_mem. Measured on 14-18 through where the blocks of a streamed
# transaction end when publication commands commit while it runs.
INVALIDATION_MESSAGE: Final = 16


def snapshot_memory(version: int, committed: int) -> int:
    return CHANGE_STRUCT + (104 if version >= 18 else 120) + 4 * committed


def invalidations_memory(messages: int) -> int:
    return CHANGE_STRUCT + INVALIDATION_MESSAGE * messages


def distributed_changes(
    version: int, commits: Sequence[CatalogCommit], index: int, txn: WTxn
) -> tuple[WChange, WChange]:
    """The snapshot and the invalidations that ``commits[index]`` queues in ``txn``
    (SnapBuildDistributeSnapshotAndInval); the snapshot lists every catalog commit since
    ``txn`` began."""
    commit = commits[index]
    committed = index + 1 - bisect_right(commits, txn.first_lsn, hi=index + 1, key=_lsn)
    snapshot = WChange("snapshot", commit.lsn, txn.top, snapshot_memory(version, committed))
    invalidation = WChange(
        "invalidation",
        commit.lsn,
        txn.top,
        invalidations_memory(commit.messages),
        tables=commit.tables,
        publication_change=commit.publication_change,
    )
    return snapshot, invalidation


def _lsn(commit: CatalogCommit) -> int:
    return commit.lsn


def alter_table_invalidations(
    before: TableVersion, added: Sequence[CColumn], dropped: Sequence[CColumn], toast: bool
) -> int:
    """How many invalidation messages the commit of ALTER TABLE ... ADD / DROP COLUMN
    carries, measured on 14, 16 and 18 (the same on each): 5 for each column added (its
    pg_attribute row, pg_class's relnatts, the relcache entry), 4 for each dropped, one
    more for each of a type that is not built in (its pg_depend row), and 41 when the
    table gets its TOAST table (``toast`` given, ``before`` had none: the TOAST
    relation, its index and their attributes)."""
    user_types = sum(c.ctype.is_user_defined for c in (*added, *dropped))
    created = 41 if toast and not before.toast else 0
    return 5 * len(added) + 4 * len(dropped) + user_types + created


def truncate_invalidations(tables: Sequence[TableVersion]) -> int:
    """How many invalidation messages the commit of TRUNCATE carries, measured on 14,
    16 and 18: each relation gets a new relfilenode, 3 for the table, 5 for its
    primary key's index, 8 for its TOAST table and that one's index. (A script knows of
    no index but the primary key's.)"""
    return sum(
        3 + (5 if any(c.key for c in t.columns) else 0) + (8 if t.toast else 0) for t in tables
    )


# What ALTER TABLE and TRUNCATE queue in their own transaction (its catalog tuples'
# command ids and its invalidation records), measured where a streamed transaction's
# first block ends, the same on 14, 16 and 18: 96 bytes for each invalidation message
# its commit carries, and for TRUNCATE 80 more for each table and TOAST table on top of
# its Truncate change; a TOAST table created by ADD COLUMN takes 2576 (for 41 messages).
OWN_MEMORY_PER_MESSAGE: Final = CHANGE_STRUCT + INVALIDATION_MESSAGE
TOAST_CREATION_MEMORY: Final = 2576
TOAST_CREATION_MESSAGES: Final = 41


def alter_table_memory(invalidations: int, toast_created: bool) -> int:
    """ALTER TABLE's own memory in its transaction, for ``invalidations`` messages
    (alter_table_invalidations) of which a TOAST table's creation may be part."""
    if toast_created:
        return (
            OWN_MEMORY_PER_MESSAGE * (invalidations - TOAST_CREATION_MESSAGES)
            + TOAST_CREATION_MEMORY
        )
    return OWN_MEMORY_PER_MESSAGE * invalidations


def truncate_memory(tables: Sequence[TableVersion]) -> int:
    """TRUNCATE's own memory in its transaction: its Truncate change and the rest."""
    relations = sum(1 + t.toast for t in tables)
    return (
        CHANGE_STRUCT
        + 4 * len(tables)
        + OWN_MEMORY_PER_MESSAGE * truncate_invalidations(tables)
        + CHANGE_STRUCT * relations
    )


def needs_toast_table(columns: Sequence[CColumn], natts: int) -> bool:
    """needs_toast_table: a table gets a TOAST table (at CREATE TABLE, or at ALTER TABLE
    ADD COLUMN if it has none) when a column is a varlena, and its rows may be longer than
    TOAST_TUPLE_THRESHOLD (2032 bytes): always if a varlena's maximum length is unknown
    (type_maximum_size: known for varchar(n), char(n), numeric(p, s), bit(n) and
    varbit(n) only)."""
    data, toastable, unknown = 0, False, False
    for c in columns:
        if c.generated == "v":
            continue  # no storage
        length = type_length(c.ctype)
        if length > 0:
            data += length
            continue
        toastable = True
        maximum = _maximum_size(c.ctype.oid, c.typmod)
        if maximum is None:
            unknown = True
        else:
            data += maximum
    if not toastable:
        return False
    return unknown or maxalign(23 + (natts + 7) // 8) + maxalign(data) > 2032


def _maximum_size(oid: int, typmod: int) -> int | None:
    if typmod < 0:
        return None
    if oid in (1042, 1043):  # bpchar, varchar: 4 bytes a character at most (UTF-8)
        return (typmod - 4) * 4 + 4
    if oid == 1700:  # numeric_maximum_size
        precision = ((typmod - 4) >> 16) & 0xFFFF
        return 8 + (precision + 6) // 4 * 2
    if oid in (1560, 1562):  # bit, varbit: VARBITTOTALLEN
        return 8 + (typmod + 7) // 8
    return None


def publication_invalidations(command: str, tables: int | None) -> int:
    """How many invalidation messages the commit of a publication command carries
    (``command``: create, drop, publish for SET (publish = ...), alter for ADD, DROP or
    SET TABLE; ``tables``: the tables it lists or adds and removes, None for FOR ALL
    TABLES). Measured on 14-18 (one or two tables each): the catalog rows it writes
    (pg_publication, pg_publication_rel, pg_depend, ...) and the relcache entries it
    invalidates; the same on every major."""
    base = {"create": 3, "drop": 2, "publish": 2, "alter": 1}[command]
    if tables is None:  # CacheInvalidateRelcacheAll, except for a new publication
        return base + (command != "create")
    return base + {"create": 3, "drop": 4, "publish": 1, "alter": 3}[command] * tables


def maxalign(n: int) -> int:
    """``n`` rounded up to 8 bytes, where the next WAL record or tuple field may start."""
    return (n + 7) & ~7


# Fixed-length built-in types on disk: OID → (typlen, typalign) (pg_type.dat).
_FIXED_TYPES: Final = {
    16: (1, 1),  # bool
    18: (1, 1),  # char
    19: (64, 1),  # name
    20: (8, 8),  # int8
    21: (2, 2),  # int2
    23: (4, 4),  # int4
    26: (4, 4),  # oid
    28: (4, 4),  # xid
    700: (4, 4),  # float4
    701: (8, 8),  # float8
    790: (8, 8),  # money
    1082: (4, 4),  # date
    1083: (8, 8),  # time
    1114: (8, 8),  # timestamp
    1184: (8, 8),  # timestamptz
    1186: (16, 8),  # interval
    1266: (12, 8),  # timetz
    2950: (16, 1),  # uuid
    3220: (8, 8),  # pg_lsn
}
_ENUM: Final = (4, 4)  # an enum value is its label's OID on disk


def type_length(ctype: ColumnType) -> int:
    """pg_type.typlen: bytes of a fixed-length type, -1 for a varlena."""
    while ctype.kind == "domain" and ctype.base is not None:
        ctype = ctype.base
    fixed = _ENUM if ctype.kind == "enum" else _FIXED_TYPES.get(ctype.oid)
    return fixed[0] if fixed is not None else -1


def tuple_size(table: TableVersion, row: Row | None) -> int:
    """The heap tuple's length (t_len) as heap_form_tuple lays it out: a MAXALIGNed
    header (with a null bitmap when a value is null), then each value at its type's
    alignment; a varlena of up to 126 bytes takes a 1-byte header and no alignment.
    Values whose disk form differs from their binary send form (numeric, jsonb, arrays,
    composites) are counted at their send length."""
    if row is None:
        return 0
    header = 23 + ((len(row) + 7) // 8 if any(v is None for v in row) else 0)
    size = maxalign(header)
    for c, v in zip(table.stored, row, strict=True):
        if v is None or v is UNCHANGED_TOAST:
            continue
        ctype = c.ctype
        while ctype.kind == "domain" and ctype.base is not None:
            ctype = ctype.base
        fixed = _ENUM if ctype.kind == "enum" else _FIXED_TYPES.get(ctype.oid)
        if fixed is not None:
            length, align = fixed
            size = -(-size // align) * align + length
            continue
        length = len(encode_value(c.ctype, v, binary=True))
        if length + 1 <= 127:
            size += length + 1
        else:
            size = -(-size // 4) * 4 + length + 4
    return size


def change_memory(tuple_length: int) -> int:
    """ReorderBuffer memory of an insert or update's new tuple of ``tuple_length`` bytes."""
    return CHANGE_STRUCT + HEAP_TUPLE_DATA + tuple_length
