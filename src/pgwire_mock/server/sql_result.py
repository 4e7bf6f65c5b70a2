"""What an SQL statement answers: its columns, rows, command tag and notices.

:class:`Result` is the reply every module that answers SQL builds
(:mod:`~pgwire_mock.server.sql`, :mod:`~pgwire_mock.server.catalog_views`,
:mod:`~pgwire_mock.server.catalog`, :mod:`~pgwire_mock.server.jdbc_catalog`,
:mod:`~pgwire_mock.server.pg_type`) and the query cycle sends as RowDescription, DataRow
and CommandComplete; :class:`CannedAnswer` is a user-supplied one (``--sql-answers``).
Kept apart so those modules share the reply's shape without importing one another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from pgwire_mock.server.errors import ServerError

__all__ = ["OID", "CannedAnswer", "Column", "Result", "pg_class_attnum"]

# Built-in type OIDs and lengths (pg_type.dat).
OID: Final = {
    "bool": (16, 1),
    "char": (18, 1),
    "name": (19, 64),
    "int8": (20, 8),
    "int2": (21, 2),
    "int2vector": (22, -1),
    "int4": (23, 4),
    "text": (25, -1),
    "oid": (26, 4),
    "xid": (28, 4),
    "xid8": (5069, 8),
    "inet": (869, -1),
    "timestamptz": (1184, 8),
    "interval": (1186, 16),
    "pg_lsn": (3220, 8),
    "_name": (1003, -1),
}


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: str = "text"
    table_oid: int = 0
    """A catalog column's relation and attribute number (RowDescription); 0 otherwise."""
    column_number: int = 0
    typmod: int = -1
    described: tuple[int, int] | None = None
    """A user table's column: its type's (OID, typlen), instead of ``type``'s."""

    @property
    def type_oid(self) -> int:
        return self.described[0] if self.described is not None else OID[self.type][0]

    @property
    def type_size(self) -> int:
        return self.described[1] if self.described is not None else OID[self.type][1]


@dataclass(frozen=True, slots=True)
class Result:
    """One statement's reply: rows (when ``columns`` is not None), tag, notices."""

    tag: str
    columns: tuple[Column, ...] | None = None
    rows: tuple[tuple[str | None, ...], ...] = ()
    notices: tuple[ServerError, ...] = ()
    transaction: Literal["begin", "commit", "rollback"] | None = None


@dataclass(frozen=True, slots=True)
class CannedAnswer:
    """A user-supplied reply to an exact SQL text (text columns unless typed)."""

    columns: tuple[Column, ...] = ()
    rows: tuple[tuple[str | None, ...], ...] = ()
    tag: str | None = None  # default "SELECT <n>"
    error: ServerError | None = None

    def result(self) -> Result:
        if self.error is not None:
            raise self.error
        if not self.columns:
            return Result(self.tag or "SELECT 0")
        return Result(self.tag or f"SELECT {len(self.rows)}", self.columns, self.rows)


# pg_class attribute numbers as 14-17 have them; 18 inserted relallfrozen (13) after
# relallvisible, so every later column moved up by one.
_PG_CLASS_ATTNUMS: Final = {"oid": 1, "relname": 2, "relpages": 10, "reltuples": 11}
_PG_CLASS_ATTNUMS_FROM_13: Final = {"relkind": 17, "relreplident": 26}


def pg_class_attnum(major: int, name: str) -> int:
    """The attribute number RowDescription gives a pg_class column on ``major``."""
    if name in _PG_CLASS_ATTNUMS:
        return _PG_CLASS_ATTNUMS[name]
    return _PG_CLASS_ATTNUMS_FROM_13[name] + (1 if major >= 18 else 0)
