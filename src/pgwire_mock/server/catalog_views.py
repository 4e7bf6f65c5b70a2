"""The catalogs and views CDC clients read: ``pg_replication_slots``,
``pg_stat_replication``, ``pg_publication`` and ``pg_publication_tables``.

``SELECT cols|*|count(*|1|col) FROM <view> [WHERE col = 'v' [AND ...]]`` is answered
from the shared server state (slots, publications, databases) and the live walsenders,
with the columns each release has (``system_views.sql``) and the RowDescription it sends
(relation OIDs and attribute numbers), and PostgreSQL's errors for a column that is not
there or a plain column next to an aggregate.

Kept apart from :mod:`pgwire_mock.server.sql`, which dispatches statements, because the
views are data: one column spec per view and release, and the select-list, WHERE and
count evaluation over them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pgwire_mock.server.column_refs import resolve_column
from pgwire_mock.server.errors import ServerError
from pgwire_mock.server.grammar import format_lsn
from pgwire_mock.server.sql_result import Column, Result
from pgwire_mock.server.sql_text import LITERAL
from pgwire_mock.server.state import PublicationState, ServerState, SlotState, WalSenderStatus
from pgwire_mock.server.versions import error

__all__ = ["CATALOG_SELECT", "CatalogViews"]

CATALOG_SELECT: Final = re.compile(
    r"select (.+?) from (?:pg_catalog\.)?"
    r"(pg_replication_slots|pg_stat_replication|pg_publication_tables"
    r"|pg_publication)"
    r"(?: where (.+))?",
    re.I,
)
"""A select from one of the views, normalized: select list, view, WHERE clause."""

# count(*), count(<integer>) or count(col) in a select list (any case, pg_catalog. optional).
_COUNT: Final = re.compile(r"(?:pg_catalog\.)?count ?\( ?(\*|[0-9]+|[^()\s]+) ?\)", re.I)

# The relations RowDescription names for catalog columns (read from the pinned builds):
# the catalog pg_publication has a fixed OID; a system view's depends on initdb's order.
_RELATION_OIDS: Final[Mapping[str, Mapping[int, int]]] = {
    "pg_publication": {14: 6104, 15: 6104, 16: 6104, 17: 6104, 18: 6104},
    "pg_replication_slots": {14: 12466, 15: 12257, 16: 12257, 17: 12257, 18: 12261},
    "pg_stat_replication": {14: 12440, 15: 12227, 16: 12227, 17: 12227, 18: 12231},
}
# pg_database OIDs: initdb's own databases have fixed ones on 15+ (14 numbered "postgres"
# after the system objects: 13695 on the pinned build); later ones count from 16384.
_DATABASE_OIDS: Final[Mapping[str, Mapping[int, int]]] = {
    "template1": {14: 1, 15: 1, 16: 1, 17: 1, 18: 1},
    "template0": {14: 13694, 15: 4, 16: 4, 17: 4, 18: 4},
    "postgres": {14: 13695, 15: 5, 16: 5, 17: 5, 18: 5},
}
_FIRST_NORMAL_OID: Final = 16384


def _bool(value: bool) -> str:
    return "t" if value else "f"


def _lsn(value: int) -> str | None:
    return format_lsn(value) if value else None


_PG_EPOCH: Final = datetime(2000, 1, 1, tzinfo=UTC)


def _zone(name: str) -> tzinfo:
    if name.upper() in ("UTC", "GMT", "Z", "ETC/UTC"):
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return UTC


def _timestamptz(moment: datetime, zone: str) -> str:
    """timestamptz output in ISO DateStyle: microseconds without trailing zeros, the
    offset as +HH[:MM[:SS]] (``EncodeDateTime``)."""
    local = moment.astimezone(_zone(zone))
    text = local.strftime("%Y-%m-%d %H:%M:%S")
    if local.microsecond:
        text += f".{local.microsecond:06d}".rstrip("0")
    offset = local.utcoffset() or timedelta(0)
    seconds = int(offset.total_seconds())
    sign = "-" if seconds < 0 else "+"
    hours, rest = divmod(abs(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    text += f"{sign}{hours:02d}"
    if minutes or secs:
        text += f":{minutes:02d}"
    if secs:
        text += f":{secs:02d}"
    return text


class CatalogViews:
    """The views as one session sees them: PostgreSQL ``major``'s columns over the
    shared ``state``, timestamps shown in the session's ``time_zone``."""

    def __init__(self, major: int, state: ServerState, time_zone: str) -> None:
        self.major = major
        self.state = state
        self.time_zone = time_zone

    def select(self, match: re.Match[str]) -> Result:
        """Answer a statement :data:`CATALOG_SELECT` matched; raises ServerError."""
        view = match.group(2).lower()
        all_columns: list[Column]
        all_rows: list[tuple[str | None, ...]]
        if view == "pg_replication_slots":
            spec = self._slot_columns()
            all_columns = [c for c, _ in spec]
            # Those a CREATE_REPLICATION_SLOT is still making are listed too.
            listed = [*self.state.slots.values(), *self.state.creating.values()]
            all_rows = [tuple(f(s) for _, f in spec) for s in listed]
        elif view == "pg_stat_replication":
            wspec = self._stat_replication_columns()
            all_columns = [c for c, _ in wspec]
            all_rows = [tuple(f(w) for _, f in wspec) for w in self._walsenders()]
        elif view == "pg_publication":
            pspec = self._publication_columns()
            all_columns = [c for c, _ in pspec]
            all_rows = [tuple(f(p) for _, f in pspec) for p in self.state.publications.values()]
        else:
            all_columns, all_rows = self._publication_table_rows()
        relation = _RELATION_OIDS.get(view, {}).get(self.major, 0)
        if relation:
            all_columns = [
                dataclasses.replace(c, table_oid=relation, column_number=i)
                for i, c in enumerate(all_columns, 1)
            ]
        names = [c.name for c in all_columns]
        # parse analysis order (transformSelectStmt): the select list, then WHERE, then
        # the aggregate check; every reference is resolved whether or not rows exist.
        wanted = [
            (m.group(), match.start(1) + m.start())
            for m in re.finditer(r"[^,\s](?:[^,]*[^,\s])?", match.group(1))
        ]
        counts = [_COUNT.fullmatch(w) for w, _ in wanted]
        indexes: list[int | None] = []
        for (item, at), count in zip(wanted, counts, strict=True):
            if count is not None:
                argument = count.group(1)
                plain = argument == "*" or argument.isdigit()
                indexes.append(
                    None
                    if plain
                    else resolve_column(self.major, view, names, argument, at + count.start(1))
                )
            elif item != "*":
                indexes.append(resolve_column(self.major, view, names, item, at))
            else:
                indexes.append(None)
        conditions = self._conditions(view, names, match.group(3), match.start(3))
        rows = [r for r in all_rows if all(r[i] == v for i, v in conditions)]
        if any(counts):
            return self._count(view, names, counts, indexes, [at for _, at in wanted], rows)
        chosen: list[int] = []
        for index in indexes:  # None: a "*", every column in order
            chosen += range(len(names)) if index is None else [index]
        columns = tuple(all_columns[i] for i in chosen)
        out = tuple(tuple(r[i] for i in chosen) for r in rows)
        return Result(f"SELECT {len(out)}", columns, out)

    def _count(
        self,
        view: str,
        names: Sequence[str],
        counts: Sequence[re.Match[str] | None],
        indexes: Sequence[int | None],
        positions: Sequence[int],
        rows: Sequence[Sequence[str | None]],
    ) -> Result:
        """An aggregate-only select list (Debezium's ``SELECT COUNT(1) FROM pg_publication
        WHERE ...``): one row whatever matched, each column named ``count``, int8 (the
        output name of a bare function call is the function's name: FigureColname)."""
        values: list[str | None] = []
        for count, index, at in zip(counts, indexes, positions, strict=True):
            if count is None:
                # Without GROUP BY a plain column next to an aggregate is an error.
                column = names[0] if index is None else names[index]
                refused = error(self.major, "ungrouped_column", relation=view, column=column)
                refused.position = at + 1
                raise refused
            if index is None:
                values.append(str(len(rows)))  # count(*), count(<constant>): every row
            else:  # count(col): the rows where col is not NULL
                values.append(str(sum(1 for r in rows if r[index] is not None)))
        return Result("SELECT 1", tuple(Column("count", "int8") for _ in values), (tuple(values),))

    def _conditions(
        self, view: str, names: Sequence[str], clause: str | None, at: int
    ) -> list[tuple[int, str]]:
        """WHERE col = 'value' [AND ...]: (column index, value) pairs."""
        if clause is None:
            return []
        out: list[tuple[int, str]] = []
        starts = [0, *(sep.end() for sep in re.finditer(r" and ", clause, flags=re.I))]
        ends = [*(sep.start() for sep in re.finditer(r" and ", clause, flags=re.I)), len(clause)]
        for start, end in zip(starts, ends, strict=True):
            m = re.fullmatch(r"(\w+) ?= ?" + LITERAL, clause[start:end])
            if m is None:
                raise ServerError(
                    "ERROR",
                    "0A000",
                    "pgwire-mock only understands WHERE col = 'value' [AND ...] on catalogs",
                )
            index = resolve_column(self.major, view, names, m.group(1), at + start)
            out.append((index, m.group(2).replace("''", "'")))
        return out

    def _datoid(self, database: str | None) -> str | None:
        if database is None:
            return None
        fixed = _DATABASE_OIDS.get(database)
        if fixed is not None:
            return str(fixed[self.major])
        created = sorted(d for d in self.state.databases if d not in _DATABASE_OIDS)
        index = created.index(database) if database in created else 0
        return str(_FIRST_NORMAL_OID + index)

    def _time(self, unix: float | None) -> str | None:
        if unix is None:
            return None
        moment = datetime.fromtimestamp(unix, UTC)
        return _timestamptz(moment, self.time_zone)

    def _slot_columns(self) -> list[tuple[Column, Callable[[SlotState], str | None]]]:
        cols: list[tuple[Column, Callable[[SlotState], str | None]]] = [
            (Column("slot_name", "name"), lambda s: s.name),
            (Column("plugin", "name"), lambda s: s.plugin),
            (Column("slot_type"), lambda s: "logical" if s.logical else "physical"),
            (Column("datoid", "oid"), lambda s: self._datoid(s.database)),
            (Column("database", "name"), lambda s: s.database),
            (Column("temporary", "bool"), lambda s: _bool(s.temporary)),
            (Column("active", "bool"), lambda s: _bool(s.active_pid is not None)),
            (
                Column("active_pid", "int4"),
                lambda s: None if s.active_pid is None else str(s.active_pid),
            ),
            (Column("xmin", "xid"), lambda s: None),
            (Column("catalog_xmin", "xid"), _catalog_xmin),
            (Column("restart_lsn", "pg_lsn"), lambda s: _lsn(s.restart_lsn)),
            (Column("confirmed_flush_lsn", "pg_lsn"), lambda s: _lsn(s.confirmed_flush)),
            (Column("wal_status"), self.state.wal_status),
            (Column("safe_wal_size", "int8"), lambda s: None),
            (Column("two_phase", "bool"), lambda s: _bool(s.two_phase)),
        ]
        if self.major >= 18:
            cols.append(
                (
                    Column("two_phase_at", "pg_lsn"),
                    lambda s: _lsn(s.two_phase_at or 0) if s.two_phase else None,
                )
            )
        if self.major >= 17:
            cols.append(
                (Column("inactive_since", "timestamptz"), lambda s: self._time(s.inactive_since))
            )
        if self.major >= 16:
            # 16 counts every invalidation as a conflict; 17 only the standby's
            # (rows_removed, wal_level_insufficient).
            conflicts = {"wal_removed", "rows_removed", "wal_level_insufficient"}
            if self.major >= 17:
                conflicts -= {"wal_removed"}
            cols.append(
                (
                    Column("conflicting", "bool"),
                    lambda s: _bool(s.invalidated in conflicts) if s.logical else None,
                )
            )
        if self.major >= 17:
            cols.extend(
                [
                    (Column("invalidation_reason"), lambda s: s.invalidated),
                    (Column("failover", "bool"), lambda s: _bool(s.failover)),
                    (Column("synced", "bool"), lambda s: _bool(False)),
                ]
            )
        return cols

    def _stat_replication_columns(
        self,
    ) -> list[tuple[Column, Callable[[WalSenderStatus], str | None]]]:
        """pg_stat_replication (system_views.sql; the same columns on 14-17). The lag
        columns stay NULL: the fake keeps no LagTracker (docs/clients.md)."""
        zone = self.time_zone

        def reply_time(w: WalSenderStatus) -> str | None:
            if not w.reply_time:
                return None
            return _timestamptz(_PG_EPOCH + timedelta(microseconds=w.reply_time), zone)

        return [
            (Column("pid", "int4"), lambda w: str(w.pid)),
            (Column("usesysid", "oid"), lambda w: "10" if w.user == "postgres" else "16384"),
            (Column("usename", "name"), lambda w: w.user),
            (Column("application_name"), lambda w: w.application_name),
            (Column("client_addr", "inet"), lambda w: w.client_addr),
            (Column("client_hostname"), lambda w: None),
            (
                Column("client_port", "int4"),
                lambda w: "-1" if w.client_port is None else str(w.client_port),
            ),
            (Column("backend_start", "timestamptz"), lambda w: self._time(w.backend_start)),
            (Column("backend_xmin", "xid"), lambda w: None),
            (Column("state"), lambda w: w.state),
            (Column("sent_lsn", "pg_lsn"), lambda w: _lsn(w.sent_lsn)),
            (Column("write_lsn", "pg_lsn"), lambda w: _lsn(w.write_lsn)),
            (Column("flush_lsn", "pg_lsn"), lambda w: _lsn(w.flush_lsn)),
            (Column("replay_lsn", "pg_lsn"), lambda w: _lsn(w.replay_lsn)),
            (Column("write_lag", "interval"), lambda w: None),
            (Column("flush_lag", "interval"), lambda w: None),
            (Column("replay_lag", "interval"), lambda w: None),
            (Column("sync_priority", "int4"), lambda w: "0"),
            (Column("sync_state"), lambda w: "async"),
            (Column("reply_time", "timestamptz"), reply_time),
        ]

    def _walsenders(self) -> list[WalSenderStatus]:
        found = (session.walsender_status() for session in self.state.sessions.values())
        return sorted((w for w in found if w is not None), key=lambda w: w.pid)

    def _publication_columns(self) -> list[tuple[Column, Callable[[PublicationState], str | None]]]:
        oids = {name: str(16400 + i) for i, name in enumerate(self.state.publications)}
        return [
            (Column("oid", "oid"), lambda p: oids.get(p.name, "16400")),
            (Column("pubname", "name"), lambda p: p.name),
            (Column("pubowner", "oid"), lambda p: "10"),
            (Column("puballtables", "bool"), lambda p: _bool(p.all_tables)),
            (Column("pubinsert", "bool"), lambda p: _bool(p.insert)),
            (Column("pubupdate", "bool"), lambda p: _bool(p.update)),
            (Column("pubdelete", "bool"), lambda p: _bool(p.delete)),
            (Column("pubtruncate", "bool"), lambda p: _bool(p.truncate)),
            (Column("pubviaroot", "bool"), lambda p: _bool(False)),
            *(
                [(Column("pubgencols", "char"), lambda p: p.generated_columns)]
                if self.major >= 18
                else []
            ),
        ]

    def _publication_table_rows(self) -> tuple[list[Column], list[tuple[str | None, ...]]]:
        columns = [
            Column("pubname", "name"),
            Column("schemaname", "name"),
            Column("tablename", "name"),
        ]
        if self.major >= 15:
            columns += [Column("attnames"), Column("rowfilter")]
        rows: list[tuple[str | None, ...]] = []
        for pub in self.state.publications.values():
            for table in pub.tables:
                schema, _, name = table.rpartition(".")
                row: tuple[str | None, ...] = (pub.name, schema or "public", name)
                if self.major >= 15:
                    row += (None, None)
                rows.append(row)
        return columns, rows


def _catalog_xmin(slot: SlotState) -> str | None:
    """A logical slot's catalog_xmin: what its creation's or a later running-xacts
    record set, or a stand-in for a slot declared by a script or recording, whose
    xids the fake does not know (PostgreSQL's is never NULL for a logical slot)."""
    if not slot.logical:
        return None
    return str(slot.catalog_xmin if slot.catalog_xmin is not None else 750)
