"""The catalog queries of PostgreSQL's logical replication subscriber, answered from the
served tables and publications (pgjdbc's, for Debezium's snapshot, are in
:mod:`pgwire_mock.server.jdbc_catalog`).

``CREATE SUBSCRIPTION`` and its apply and table-sync workers ask the publisher, over a
replication connection, which publications exist, which tables they publish, how each
table looks (pg_class, pg_attribute and its replica identity index, the column list and
row filter of 15+) and then ``COPY`` its rows as of the table-sync slot's snapshot. The
texts are fixed by each subscriber release (subscriptioncmds.c ``fetch_table_list``,
``check_publications``; tablesync.c ``fetch_remote_table_info``, ``copy_table``); the
patterns below are the forms 14-17 subscribers send to 14-17 publishers, whitespace
collapsed, read off real servers' logs. Every answer is derived from the served script's
tables (:mod:`pgwire_mock.script.tables`) and the server's publications, with the
RowDescription PostgreSQL sends (catalog relation OIDs and attribute numbers included).
A query that matches none of them is left to the SQL layer, which refuses it with 0A000.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

from codec.copy import BINARY_TRAILER, binary_header, encode_binary_row, encode_text_row
from codec.pgoutput import UNCHANGED_TOAST
from codec.values import encode_text
from pgwire_mock.server.column_refs import missing_column
from pgwire_mock.server.errors import ServerError
from pgwire_mock.server.grammar import format_lsn
from pgwire_mock.server.jdbc_catalog import JdbcCatalog
from pgwire_mock.server.pg_type import NAMES_OID, TypeQueries
from pgwire_mock.server.sql_result import Column, Result, pg_class_attnum
from pgwire_mock.server.state import ServerState
from pgwire_mock.server.versions import error

if TYPE_CHECKING:  # the script package loads YAML: only script sources need it
    from pgwire_mock.script.rowfilter import RowFilter
    from pgwire_mock.script.tables import TableState
    from pgwire_mock.script.wal import CColumn

__all__ = ["CatalogQueries", "CopyOut", "ServedTables"]


@runtime_checkable
class ServedTables(Protocol):
    """What a source tells of its tables (a script source does)."""

    def tables_at(self, lsn: int) -> Mapping[str, TableState]:
        """Each table (``schema.name``) as a snapshot at ``lsn`` sees it."""
        ...

    def publication_table(
        self, publication: str, table: str
    ) -> tuple[tuple[str, ...] | None, str | None]:
        """A listed table's column list and row filter text in a publication (None: no
        column list, no filter)."""
        ...


@dataclass(frozen=True, slots=True)
class CopyOut:
    """A ``COPY … TO STDOUT`` reply: CopyOutResponse, CopyData payloads, CopyDone, tag."""

    binary: bool
    columns: int
    payloads: tuple[bytes, ...]
    tag: str


_LIST: Final = r"((?:'(?:[^']|'')*'(?:, ?)?)+)"
_NAME_LITERAL: Final = r"E?'((?:[^']|'')*)'"
_QUOTED_NAME: Final = r'(?:"((?:[^"]|"")+)"|([a-z_][a-z0-9_$]*))'
_RELATION: Final = _QUOTED_NAME + r"\." + _QUOTED_NAME
_BINARY: Final = r"(?: WITH \(FORMAT binary\))?"
_READ_ONLY: Final = re.compile(r"\bREAD ONLY\b", re.IGNORECASE)
# Statements that take the transaction's snapshot (a plain SELECT 1 does, SET and SHOW not).
_TAKES_SNAPSHOT: Final = re.compile(
    r"(?:SELECT|COPY|WITH|VALUES|TABLE|INSERT|UPDATE|DELETE)\b", re.IGNORECASE
)
_ISOLATION: Final = re.compile(
    r"ISOLATION LEVEL (SERIALIZABLE|REPEATABLE READ|READ COMMITTED|READ UNCOMMITTED)", re.I
)

# Catalog relations whose columns the answers come from: (relation OID, attribute number).
_PG_CLASS: Final = 1259
_PG_ATTRIBUTE: Final = 1249
_PG_NAMESPACE: Final = 2615
_PG_PUBLICATION: Final = 6104
# pg_attribute.attnum's place: 16 moved attstattarget after it.
_ATTNUM_COLUMN: Final = {14: 6, 15: 6, 16: 5, 17: 5, 18: 5}
# pg_publication_tables is a view: its OID depends on initdb's order (pinned builds).
_PUBLICATION_TABLES_VIEW: Final = {14: 12285, 15: 12068, 16: 12068, 17: 12068, 18: 12068}


def _literals(text: str) -> list[str]:
    return [m.replace("''", "'") for m in re.findall(r"'((?:[^']|'')*)'", text)]


def _ident(quoted: str | None, bare: str | None) -> str:
    return quoted.replace('""', '"') if quoted is not None else (bare or "")


_Handler = Callable[..., Result | CopyOut | None]


class CatalogQueries:
    """Answers one session's subscriber catalog queries and COPYs (:meth:`answer`)."""

    def __init__(
        self,
        major: int,
        state: ServerState,
        tables: ServedTables | None,
        next_xid: Callable[[int], int | None] | None = None,
    ) -> None:
        self.major = major
        self.state = state
        self.tables = tables
        self._source_next_xid = next_xid
        """The source's xid counter: the xid its next transaction gets as of an LSN."""
        self.snapshot_lsn: int | None = None
        """What the transaction's snapshot sees: the WAL before this LSN (a slot's
        USE_SNAPSHOT, SET TRANSACTION SNAPSHOT); None: the end of WAL, as a new one does."""
        self.isolation = "READ COMMITTED"
        self.read_only = False
        self.queried = False
        """A statement of the transaction took a snapshot (FirstSnapshotSet)."""
        self._in_transaction = False
        self._jdbc = JdbcCatalog(major, self._states)
        self._types = TypeQueries(major, self._states, self._next_xid)
        flags = re.IGNORECASE
        self._handlers: tuple[
            tuple[re.Pattern[str], Callable[..., Result | CopyOut | None]], ...
        ] = (
            (re.compile(r"SET TRANSACTION SNAPSHOT '((?:[^']|'')*)'", flags), self._set_snapshot),
            (re.compile(r"SET TRANSACTION (?!SNAPSHOT)[A-Z ,]+", flags), self._set_transaction),
            (
                re.compile(r"LOCK (?:TABLE )?(?:ONLY )?[^;]+? IN [A-Z ]+ MODE(?: NOWAIT)?", flags),
                self._lock,
            ),
            (
                # Debezium's PostgresConnection.currentXLogLocation (10+).
                re.compile(
                    r"select \(case pg_is_in_recovery\(\) when 't' then "
                    r"pg_last_wal_receive_lsn\(\) else pg_current_wal_lsn\(\) end\) AS "
                    r"pg_current_wal_lsn",
                    flags,
                ),
                self._wal_position,
            ),
            (
                re.compile(
                    r"SELECT t\.pubname FROM pg_catalog\.pg_publication t WHERE t\.pubname IN "
                    r"\( ?" + _LIST + r" ?\)",
                    flags,
                ),
                self._publications,
            ),
            (
                re.compile(
                    r"SELECT DISTINCT t\.schemaname, t\.tablename ?(, t\.attnames )?FROM "
                    r"pg_catalog\.pg_publication_tables t WHERE t\.pubname IN \( ?"
                    + _LIST
                    + r" ?\)",
                    flags,
                ),
                self._table_list_view,
            ),
            (
                re.compile(
                    r"SELECT DISTINCT n\.nspname, c\.relname, gpt\.attrs FROM pg_class c JOIN "
                    r"pg_namespace n ON n\.oid = c\.relnamespace JOIN \( SELECT "
                    r"\(pg_get_publication_tables\(VARIADIC array_agg\(pubname::text\)\)\)\.\* "
                    r"FROM pg_publication WHERE pubname IN \( ?" + _LIST + r" ?\)\) AS gpt ON "
                    r"gpt\.relid = c\.oid",
                    flags,
                ),
                self._table_list,
            ),
            (
                re.compile(
                    r"SELECT c\.oid, c\.relreplident, c\.relkind FROM pg_catalog\.pg_class c "
                    r"INNER JOIN pg_catalog\.pg_namespace n ON \(c\.relnamespace = n\.oid\) "
                    r"WHERE n\.nspname = " + _NAME_LITERAL + r" AND c\.relname = " + _NAME_LITERAL,
                    flags,
                ),
                self._relation,
            ),
            (
                re.compile(
                    r"SELECT DISTINCT \(CASE WHEN \(array_length\(gpt\.attrs, 1\) = c\.relnatts\) "
                    r"THEN NULL ELSE gpt\.attrs END\) FROM pg_publication p, LATERAL "
                    r"pg_get_publication_tables\(p\.pubname\) gpt, pg_class c WHERE gpt\.relid = "
                    r"([0-9]+) AND c\.oid = gpt\.relid AND p\.pubname IN \( ?" + _LIST + r" ?\)",
                    flags,
                ),
                self._column_list,
            ),
            (
                re.compile(
                    # 18 publishers: generated columns are listed, with a flag.
                    r"SELECT (a\.attnum, )?a\.attname, a\.atttypid, a\.attnum = ANY\(i\.indkey\)"
                    r"(, a\.attgenerated != '')? "
                    r"FROM pg_catalog\.pg_attribute a LEFT JOIN pg_catalog\.pg_index i ON "
                    r"\(i\.indexrelid = pg_get_replica_identity_index\(([0-9]+)\)\) WHERE "
                    r"a\.attnum > 0::pg_catalog\.int2 AND NOT a\.attisdropped "
                    r"(AND a\.attgenerated = '' )?AND a\.attrelid = ([0-9]+) ORDER BY a\.attnum",
                    flags,
                ),
                self._attributes,
            ),
            (
                re.compile(
                    r"SELECT DISTINCT pg_get_expr\(gpt\.qual, gpt\.relid\) FROM pg_publication p, "
                    r"LATERAL pg_get_publication_tables\(p\.pubname\) gpt WHERE gpt\.relid = "
                    r"([0-9]+) AND p\.pubname IN \( ?" + _LIST + r" ?\)",
                    flags,
                ),
                self._row_filter,
            ),
            (
                re.compile(r"COPY " + _RELATION + r"(?: \(([^()]*)\))? TO STDOUT" + _BINARY, flags),
                self._copy_table,
            ),
            (
                re.compile(
                    r"COPY \(SELECT (.+?) FROM ONLY "
                    + _RELATION
                    + r"(?: WHERE (.+))?\) TO STDOUT"
                    + _BINARY,
                    flags,
                ),
                self._copy_select,
            ),
            (
                re.compile(
                    r"SELECT (.+?) FROM (?:ONLY )?((?:"
                    + _QUOTED_NAME
                    + r"\.)?"
                    + _QUOTED_NAME
                    + ")",
                    flags,
                ),
                self._select,
            ),
        )

    def answer(self, text: str, *, in_transaction: bool) -> Result | CopyOut | None:
        """The reply to ``text`` (whitespace collapsed); None when it is none of the
        statements this module answers."""
        self._in_transaction = in_transaction
        if in_transaction and _TAKES_SNAPSHOT.match(text):
            self.queried = True
        jdbc = self._jdbc.answer(text) or self._types.answer(text)
        if jdbc is not None:
            return jdbc
        for pattern, handler in self._handlers:
            match = pattern.fullmatch(text)
            if match is not None:
                return handler(match)
        return None

    def check_use_snapshot(self, *, in_transaction: bool) -> None:
        """walsender.c's checks before CREATE_REPLICATION_SLOT … USE_SNAPSHOT creates the
        slot (ServerError); the transaction then sees what the slot will not stream."""
        what = (
            "CREATE_REPLICATION_SLOT ... USE_SNAPSHOT"
            if self.major < 15
            else "CREATE_REPLICATION_SLOT ... (SNAPSHOT 'use')"
        )
        if not in_transaction:
            raise error(self.major, "use_snapshot_outside_transaction", what=what)
        if self.isolation != "REPEATABLE READ":
            raise error(self.major, "use_snapshot_isolation", what=what)
        if not self.read_only and self.major >= 16:
            raise error(self.major, "use_snapshot_read_only", what=what)
        if self.queried:
            raise error(self.major, "use_snapshot_after_query", what=what)

    # --- the transaction's snapshot ---------------------------------------------------------

    def transaction_began(self, text: str) -> None:
        """BEGIN / START TRANSACTION ran: note its isolation level."""
        match = _ISOLATION.search(text)
        self.isolation = match.group(1).upper() if match is not None else "READ COMMITTED"
        self.read_only = _READ_ONLY.search(text) is not None
        self.queried = False
        self.snapshot_lsn = None

    def transaction_ended(self) -> None:
        self.isolation = "READ COMMITTED"
        self.read_only = self.queried = False
        self.snapshot_lsn = None

    def _set_transaction(self, match: re.Match[str]) -> Result:
        if not self._in_transaction:
            notice = error(self.major, "set_transaction_outside_block")
            return Result("SET", notices=(notice,))
        level = _ISOLATION.search(match.group(0))
        if level is not None:
            self.isolation = level.group(1).upper()
        if _READ_ONLY.search(match.group(0)) is not None:
            self.read_only = True
        elif re.search(r"\bREAD WRITE\b", match.group(0), re.IGNORECASE):
            self.read_only = False
        return Result("SET")

    def _set_snapshot(self, match: re.Match[str]) -> Result:
        """SET TRANSACTION SNAPSHOT: see what the exporting slot's snapshot saw."""
        if not self._in_transaction:
            # The statement's own transaction is READ COMMITTED: the warning, then the error.
            warning = error(self.major, "set_transaction_outside_block")
            raise error(self.major, "snapshot_import_isolation").after(warning)
        if self.isolation not in ("REPEATABLE READ", "SERIALIZABLE"):
            raise error(self.major, "snapshot_import_isolation")
        name = match.group(1).replace("''", "'")
        lsn = self.state.exported.get(name)
        if lsn is None:
            raise error(self.major, "invalid_snapshot_identifier", name=name)
        if self.isolation == "SERIALIZABLE":
            # A slot's snapshot comes from a REPEATABLE READ transaction.
            raise error(self.major, "snapshot_import_serializable")
        self.snapshot_lsn = lsn
        return Result("SET")

    def _wal_position(self, _: re.Match[str]) -> Result:
        """Not in recovery: pg_current_wal_lsn(), the end of the served WAL."""
        column = Column("pg_current_wal_lsn", "pg_lsn")
        return Result("SELECT 1", (column,), ((format_lsn(self.state.wal_lsn),),))

    def _lock(self, _: re.Match[str]) -> Result:
        if not self._in_transaction:
            raise error(self.major, "lock_table_outside_block")
        return Result("LOCK TABLE")

    # --- the model ------------------------------------------------------------------------

    def _next_xid(self) -> int | None:
        """The xid the source's next transaction gets as of the transaction's snapshot
        (None: the source cannot tell). A server without a source has written no
        transaction: it answers as an empty script does, with the script default
        first_xid."""
        if self._source_next_xid is None:
            from pgwire_mock.script.model import ServerFacts  # noqa: PLC0415 - YAML

            return ServerFacts().first_xid
        at = self.snapshot_lsn if self.snapshot_lsn is not None else self.state.wal_lsn
        return self._source_next_xid(at)

    def _states(self) -> Mapping[str, TableState]:
        if self.tables is None:
            return {}
        at = self.snapshot_lsn if self.snapshot_lsn is not None else self.state.wal_lsn
        return self.tables.tables_at(at)

    def _published(self, publications: Sequence[str]) -> list[str]:
        """Tables of the named publications that exist, in creation order."""
        return list(dict.fromkeys(table for _, table in self._publishing(publications)))

    def _publishing(self, publications: Sequence[str]) -> list[tuple[str, str]]:
        """(publication, table) for every table each named publication publishes."""
        pairs: list[tuple[str, str]] = []
        states = self._states()
        for name in publications:
            pub = self.state.publications.get(name)
            if pub is None:
                continue
            for table in states if pub.all_tables else pub.tables:
                qualified = table if "." in table else f"public.{table}"
                if qualified in states:
                    pairs.append((name, qualified))
        return pairs

    def _options(self, publication: str, table: str) -> tuple[tuple[str, ...] | None, str | None]:
        if self.tables is None:
            return None, None
        return self.tables.publication_table(publication, table)

    def _columns_of(self, publication: str, table: str) -> list[CColumn]:
        """The columns ``publication`` publishes of ``table`` (pg_get_publication_tables'
        attrs): its column list, or the ordinary columns and, on 18 with
        ``publish_generated_columns = stored``, the stored generated ones."""
        listed, _ = self._options(publication, table)
        pub = self.state.publications.get(publication)
        gencols = pub.generated_columns if pub is not None and self.major >= 18 else "n"
        version = self._states()[table].version
        return list(version.sent(version.publishes(listed, gencols)))

    def _by_oid(self, oid: int) -> TableState | None:
        for state in self._states().values():
            if state.version.oid == oid:
                return state
        return None

    # --- the queries ------------------------------------------------------------------------

    def _publications(self, match: re.Match[str]) -> Result:
        wanted = _literals(match.group(1))
        rows = tuple((p,) for p in self.state.publications if p in wanted)
        column = Column("pubname", "name", _PG_PUBLICATION, 2)
        return Result(f"SELECT {len(rows)}", (column,), rows)

    def _table_list_view(self, match: re.Match[str]) -> Result:
        view = _PUBLICATION_TABLES_VIEW.get(self.major, 0)
        columns = [Column("schemaname", "name", view, 2), Column("tablename", "name", view, 3)]
        with_names = match.group(1) is not None
        if with_names:
            columns.append(Column("attnames", "_name", view, 4))
        rows: dict[tuple[str | None, ...], None] = {}  # DISTINCT
        states = self._states()
        for publication, name in self._publishing(_literals(match.group(2))):
            version = states[name].version
            row: tuple[str | None, ...] = (version.namespace, version.relname)
            if with_names:
                sent = self._columns_of(publication, name)
                row += (encode_text(NAMES_OID, [c.name for c in sent]),)
            rows[row] = None
        return Result(f"SELECT {len(rows)}", tuple(columns), tuple(rows))

    def _table_list(self, match: re.Match[str]) -> Result:
        columns = (
            Column("nspname", "name", _PG_NAMESPACE, 2),
            Column("relname", "name", _PG_CLASS, 2),
            Column("attrs", "int2vector"),
        )
        states = self._states()
        rows: dict[tuple[str | None, ...], None] = {}  # DISTINCT
        for publication, name in self._publishing(_literals(match.group(1))):
            version = states[name].version
            attrs = " ".join(str(c.attnum) for c in self._columns_of(publication, name))
            rows[(version.namespace, version.relname, attrs)] = None
        return Result(f"SELECT {len(rows)}", columns, tuple(rows))

    def _relation(self, match: re.Match[str]) -> Result:
        schema, name = (g.replace("''", "'") for g in match.groups())
        columns = (
            Column("oid", "oid", _PG_CLASS, 1),
            Column("relreplident", "char", _PG_CLASS, pg_class_attnum(self.major, "relreplident")),
            Column("relkind", "char", _PG_CLASS, pg_class_attnum(self.major, "relkind")),
        )
        state = self._states().get(f"{schema}.{name}")
        rows: tuple[tuple[str | None, ...], ...] = ()
        if state is not None:
            version = state.version
            rows = ((str(version.oid), version.identity, "r"),)
        return Result(f"SELECT {len(rows)}", columns, rows)

    def _publishing_oid(self, oid: int, publications: str) -> list[tuple[str, str]]:
        state = self._by_oid(oid)
        if state is None:
            return []
        name = f"{state.version.namespace}.{state.version.relname}"
        return [pair for pair in self._publishing(_literals(publications)) if pair[1] == name]

    def _column_list(self, match: re.Match[str]) -> Result:
        rows: dict[tuple[str | None, ...], None] = {}  # DISTINCT
        for publication, name in self._publishing_oid(int(match.group(1)), match.group(2)):
            sent = self._columns_of(publication, name)
            natts = self._states()[name].version.natts
            # CASE WHEN array_length(gpt.attrs, 1) = c.relnatts THEN NULL ELSE gpt.attrs END
            rows[(None if len(sent) == natts else " ".join(str(c.attnum) for c in sent),)] = None
        return Result(f"SELECT {len(rows)}", (Column("attrs", "int2vector"),), tuple(rows))

    def _row_filter(self, match: re.Match[str]) -> Result:
        rows: dict[tuple[str | None, ...], None] = {}  # DISTINCT
        for publication, name in self._publishing_oid(int(match.group(1)), match.group(2)):
            rows[(self._options(publication, name)[1],)] = None
        return Result(f"SELECT {len(rows)}", (Column("pg_get_expr", "text"),), tuple(rows))

    def _attributes(self, match: re.Match[str]) -> Result:
        with_attnum = match.group(1) is not None
        columns = [
            Column("attname", "name", _PG_ATTRIBUTE, 2),
            Column("atttypid", "oid", _PG_ATTRIBUTE, 3),
            Column("?column?", "bool"),
        ]
        with_generated = match.group(2) is not None
        if with_attnum:
            place = _ATTNUM_COLUMN.get(self.major, 5)
            columns.insert(0, Column("attnum", "int2", _PG_ATTRIBUTE, place))
        if with_generated:
            columns.append(Column("?column?", "bool"))
        # Up to 17 subscribers and 18 ones asking a 12-17 publisher leave generated
        # columns out; 18 ones asking an 18 publisher take them all, with the flag.
        without_generated = match.group(4) is not None
        state = self._by_oid(int(match.group(5)))
        rows: list[tuple[str | None, ...]] = []
        if state is not None:
            version = state.version
            index = int(match.group(3)) == version.oid and version.identity in "di"
            has_index = index and any(c.key for c in version.published)
            for c in version.published if without_generated else version.columns:
                # Without a replica identity index the LEFT JOIN finds no row: NULL.
                key = ("t" if c.key else "f") if has_index else None
                row: tuple[str | None, ...] = (c.name, str(c.ctype.oid), key)
                if with_attnum:
                    row = (str(c.attnum), *row)
                rows.append((*row, "t" if c.generated else "f") if with_generated else row)
        return Result(f"SELECT {len(rows)}", tuple(columns), tuple(rows))

    # --- SELECT … FROM t ---------------------------------------------------------------

    def _select(self, match: re.Match[str]) -> Result | None:
        """``SELECT * | columns FROM [ONLY] [schema.]table`` of a served table."""
        from pgwire_mock.script.sizes import type_length  # noqa: PLC0415 - scripts only

        schema = _ident(match.group(3), match.group(4)) if match.group(3) or match.group(4) else ""
        name = _ident(match.group(5), match.group(6))
        qualified = bool(schema)
        if schema in ("pg_catalog", "information_schema") or (
            not qualified and name.startswith("pg_")
        ):
            return None  # the SQL layer's catalog views
        wanted = _select_list(match.group(1))
        if wanted is None:
            return None  # expressions: not a plain read of the table
        state = self._states().get(f"{schema or 'public'}.{name}")
        text = match.group(0)
        if state is None:
            if self.tables is None:
                return None
            kind = "undefined_qualified_table" if qualified else "undefined_table"
            relation = f"{schema}.{name}" if qualified else name
            err = error(self.major, kind, relation=relation)
            err.position = match.start(2) + 1
            raise err
        version = state.version
        columns = list(version.columns)
        if wanted == [("*", 0)]:
            chosen = columns
        else:
            by_name = {c.name: c for c in columns}
            chosen = []
            for column, at in wanted:
                if column not in by_name:
                    names = [c.name for c in columns]
                    err = missing_column(self.major, name, names, column, qualified=False)
                    err.position = match.start(1) + at + 1
                    raise err
                chosen.append(by_name[column])
        if any(c.generated == "v" for c in chosen):
            raise _virtual(name, text)
        published = list(version.stored)
        indexes = [published.index(c) for c in chosen]
        described = tuple(
            Column(
                c.name,
                table_oid=version.oid,
                column_number=c.attnum,
                typmod=c.typmod,
                described=(c.ctype.oid, type_length(c.ctype)),
            )
            for c in chosen
        )
        rows = tuple(tuple(_text(published[i], row[i]) for i in indexes) for row in state.rows)
        return Result(f"SELECT {len(rows)}", described, rows)

    # --- COPY -----------------------------------------------------------------------------

    def _copy_table(self, match: re.Match[str]) -> CopyOut:
        schema = _ident(match.group(1), match.group(2))
        name = _ident(match.group(3), match.group(4))
        listed = match.group(5)
        wanted = None if listed is None else _column_names(listed)
        binary = match.group(0).lower().endswith("binary)")
        return self._copy(schema, name, wanted, binary, select=False)

    def _copy_select(self, match: re.Match[str]) -> CopyOut:
        """A table sync's ``COPY (SELECT cols FROM ONLY t [WHERE filters]) TO STDOUT``."""
        from pgwire_mock.script.rowfilter import RowFilter, RowFilterError  # noqa: PLC0415

        schema = _ident(match.group(2), match.group(3))
        name = _ident(match.group(4), match.group(5))
        condition = None
        if match.group(6) is not None:
            try:
                condition = RowFilter(match.group(6))
            except RowFilterError as err:
                raise ServerError(
                    "ERROR", "0A000", f"pgwire-mock cannot evaluate this WHERE: {err}"
                ) from None
        wanted = _column_names(match.group(1))
        binary = match.group(0).lower().endswith("binary)")
        return self._copy(schema, name, wanted, binary, condition, select=True)

    def _copy(
        self,
        schema: str,
        name: str,
        wanted: list[str] | None,
        binary: bool,
        condition: RowFilter | None = None,
        *,
        select: bool,
    ) -> CopyOut:
        """``COPY t [(cols)]`` (``select`` False: no generated columns, as CopyGetAttnums)
        or 18's table sync ``COPY (SELECT cols FROM ONLY t …)``, which reads stored
        generated columns (their values are the script's)."""
        state = self._states().get(f"{schema}.{name}")
        if state is None:
            raise error(self.major, "copy_undefined_qualified_table", relation=f"{schema}.{name}")
        version = state.version
        published = list(version.stored)
        names = [c.name for c in published]
        if wanted is None:
            # CopyGetAttnums: without a list, every column but generated ones.
            indexes = [i for i, c in enumerate(published) if not c.generated]
        else:
            indexes = []
            for column in wanted:
                found = next((c for c in version.columns if c.name == column), None)
                if found is None:
                    raise error(self.major, "copy_undefined_column", column=column, relation=name)
                if found.generated and not select:
                    raise ServerError(
                        "ERROR",
                        "42P10",
                        f'column "{column}" is a generated column',
                        "Generated columns cannot be used in COPY.",
                        file="copy.c",
                        routine="CopyGetAttnums",
                    )
                if found.generated == "v":
                    raise _virtual(name, f"COPY (SELECT … {column} …)")
                indexes.append(names.index(column))
        payloads: list[bytes] = []
        rows = state.rows
        if condition is not None:
            rows = [r for r in rows if condition.matches(dict(zip(names, r, strict=True)))]
        for row in rows:
            values = [_value(published[i], row[i], binary) for i in indexes]
            payloads.append(encode_binary_row(values) if binary else encode_text_row(values))
        if binary:
            if payloads:
                payloads[0] = binary_header() + payloads[0]
                payloads.append(BINARY_TRAILER)
            else:
                payloads = [binary_header() + BINARY_TRAILER]
        count = len(rows)
        return CopyOut(binary, len(indexes), tuple(payloads), f"COPY {count}")


def _virtual(table: str, text: str) -> ServerError:
    return ServerError(
        "ERROR",
        "0A000",
        f"pgwire-mock does not know the values of {table}'s virtual generated columns",
        f"Statement: {text[:200]}",
    )


def _select_list(listed: str) -> list[tuple[str, int]] | None:
    """(name, where it starts in ``listed``) per plain column, ``[("*", 0)]``; None for
    anything else."""
    if listed.strip() == "*":
        return [("*", 0)]
    out = []
    start = 0
    for raw in listed.split(","):
        part = raw.strip()
        match = re.fullmatch(_QUOTED_NAME, part, re.IGNORECASE)
        if match is None:
            return None
        at = start + len(raw) - len(raw.lstrip())
        out.append((_ident(match.group(1), (match.group(2) or "").lower()), at))
        start += len(raw) + 1
    return out


def _text(column: CColumn, value: object) -> str | None:
    encoded = _value(column, value, binary=False)
    return None if encoded is None else encoded.decode()


def _column_names(listed: str) -> list[str]:
    out = []
    for raw in listed.split(","):
        part = raw.strip()
        out.append(part[1:-1].replace('""', '"') if part.startswith('"') else part)
    return out


def _value(column: CColumn, value: object, binary: bool) -> bytes | None:
    from pgwire_mock.script.types import encode_value  # noqa: PLC0415 - scripts only

    if value is None or value is UNCHANGED_TOAST:
        return None
    encoded = encode_value(column.ctype, value, binary=binary)
    return encoded.encode() if isinstance(encoded, str) else encoded
