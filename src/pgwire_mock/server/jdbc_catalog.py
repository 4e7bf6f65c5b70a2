"""The catalog queries pgjdbc's ``DatabaseMetaData`` and type cache send for a Debezium
snapshot, answered from the served tables.

Debezium's PostgreSQL snapshot (``PostgresSnapshotChangeEventSource``, ``JdbcConnection
.readSchema``) reads the captured tables through pgjdbc: ``getTables`` (table names, then
the schema's tables and views), ``getColumns`` of the schema or of one table,
``getPrimaryKeys`` and, for a table without one, ``getIndexInfo(unique, approximate)``;
``getColumns`` makes pgjdbc's ``TypeInfoCache`` look up each column type it does not carry
(``jsonb``, ``uuid``, user types) by OID; ``PostgresConnection.readReplicaIdentityInfo``
asks pg_class. The texts are those of pgjdbc 42.5 (``PgDatabaseMetaData``,
``TypeInfoCache``) for a 14+ server, whitespace collapsed, with the parameters inlined as
``preferQueryMode=simple`` does (pgwire-mock has no extended query protocol on a plain
connection). Each text's fixed part is matched whole and its filters are read from the
tail.

Every answer comes from the served tables: a ``key`` column is a primary-key column (so NOT
NULL), the primary key is named ``<table>_pkey`` as PostgreSQL names it, column order is
key order. The model has no NOT NULL on other columns, no DEFAULT, no comments, no views
and no index statistics; a query whose answer would need those, or would include system
catalogs the fake does not model (no schema, a schema pattern with wildcards, a system
schema, types of relations other than tables and views), is refused with 0A000 naming it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final

from pgwire_mock.server.errors import ServerError
from pgwire_mock.server.pg_type import builtin_name, type_and_parts
from pgwire_mock.server.sql_result import Column, Result, pg_class_attnum

if TYPE_CHECKING:
    from pgwire_mock.script.tables import TableState
    from pgwire_mock.script.types import ColumnType

__all__ = ["JdbcCatalog"]

_PG_TYPE: Final = 1247
_PG_ATTRIBUTE: Final = 1249
_PG_CLASS: Final = 1259
_PG_DESCRIPTION: Final = 2609
_PG_NAMESPACE: Final = 2615
_FLOAT4: Final = (700, 4)  # (OID, typlen)
# pg_attribute's attlen and atttypmod: 16 moved attstattarget out of the fixed part, 18
# dropped attcacheoff (before atttypmod).
_ATTLEN: Final = {14: 5, 15: 5}
_ATTTYPMOD: Final = {14: 9, 15: 9, 18: 6}
# Schemas whose relations are PostgreSQL's own (not in the fake's model).
_SYSTEM_SCHEMA: Final = re.compile(r"pg_.*|information_schema", re.DOTALL)

_LIT: Final = r"E?'((?:[^']|'')*)'"
_PAREN_LIT: Final = r"\(?" + _LIT + r"\)?"
_OID_PARAM: Final = r"(?:\('([0-9]+)'::int[248]\)|([0-9]+))"

_GET_TABLES: Final = (
    "SELECT NULL AS TABLE_CAT, n.nspname AS TABLE_SCHEM, c.relname AS TABLE_NAME, CASE "
    "n.nspname ~ '^pg_' OR n.nspname = 'information_schema' WHEN true THEN CASE WHEN "
    "n.nspname = 'pg_catalog' OR n.nspname = 'information_schema' THEN CASE c.relkind WHEN "
    "'r' THEN 'SYSTEM TABLE' WHEN 'v' THEN 'SYSTEM VIEW' WHEN 'i' THEN 'SYSTEM INDEX' ELSE "
    "NULL END WHEN n.nspname = 'pg_toast' THEN CASE c.relkind WHEN 'r' THEN 'SYSTEM TOAST "
    "TABLE' WHEN 'i' THEN 'SYSTEM TOAST INDEX' ELSE NULL END ELSE CASE c.relkind WHEN 'r' "
    "THEN 'TEMPORARY TABLE' WHEN 'p' THEN 'TEMPORARY TABLE' WHEN 'i' THEN 'TEMPORARY INDEX' "
    "WHEN 'S' THEN 'TEMPORARY SEQUENCE' WHEN 'v' THEN 'TEMPORARY VIEW' ELSE NULL END END "
    "WHEN false THEN CASE c.relkind WHEN 'r' THEN 'TABLE' WHEN 'p' THEN 'PARTITIONED TABLE' "
    "WHEN 'i' THEN 'INDEX' WHEN 'P' then 'PARTITIONED INDEX' WHEN 'S' THEN 'SEQUENCE' WHEN "
    "'v' THEN 'VIEW' WHEN 'c' THEN 'TYPE' WHEN 'f' THEN 'FOREIGN TABLE' WHEN 'm' THEN "
    "'MATERIALIZED VIEW' ELSE NULL END ELSE NULL END AS TABLE_TYPE, d.description AS "
    "REMARKS, '' as TYPE_CAT, '' as TYPE_SCHEM, '' as TYPE_NAME, '' AS "
    "SELF_REFERENCING_COL_NAME, '' AS REF_GENERATION FROM pg_catalog.pg_namespace n, "
    "pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_description d ON (c.oid = d.objoid AND "
    "d.objsubid = 0 and d.classoid = 'pg_class'::regclass) WHERE c.relnamespace = n.oid"
)
_GET_TABLES_TAIL: Final = re.compile(
    r"(?: AND n\.nspname LIKE " + _LIT + r")?"
    r"(?: AND has_table_privilege\(c\.oid, 'SELECT, INSERT, UPDATE, DELETE, RULE, REFERENCES, "
    r"TRIGGER'\))?"
    r"(?: AND c\.relname LIKE " + _LIT + r")?"
    r"(?: AND \(false((?: OR \( [^()]* \))*) \))?"
    r" ORDER BY TABLE_TYPE,TABLE_SCHEM,TABLE_NAME"
)
# getTables' type clauses (SCHEMAS form) that select no system relation: type → relkind.
_USER_TYPES: Final = {
    "c.relkind = 'r' AND n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'": "r",
    "c.relkind = 'p' AND n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'": "p",
    "c.relkind = 'v' AND n.nspname <> 'pg_catalog' AND n.nspname <> 'information_schema'": "v",
    "c.relkind = 'm'": "m",
    "c.relkind = 'f'": "f",
}
_TABLE_TYPE: Final = {"r": "TABLE"}

_GET_COLUMNS: Final = (
    "SELECT * FROM (SELECT n.nspname,c.relname,a.attname,a.atttypid,a.attnotnull OR "
    "(t.typtype = 'd' AND t.typnotnull) AS attnotnull,a.atttypmod,a.attlen,t.typtypmod,"
    "row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum) AS attnum, "
    "nullif(a.attidentity, '') as attidentity,nullif(a.attgenerated, '') as attgenerated,"
    "pg_catalog.pg_get_expr(def.adbin, def.adrelid) AS adsrc,dsc.description,t.typbasetype,"
    "t.typtype FROM pg_catalog.pg_namespace n JOIN pg_catalog.pg_class c ON (c.relnamespace "
    "= n.oid) JOIN pg_catalog.pg_attribute a ON (a.attrelid=c.oid) JOIN pg_catalog.pg_type t "
    "ON (a.atttypid = t.oid) LEFT JOIN pg_catalog.pg_attrdef def ON (a.attrelid=def.adrelid "
    "AND a.attnum = def.adnum) LEFT JOIN pg_catalog.pg_description dsc ON "
    "(c.oid=dsc.objoid AND a.attnum = dsc.objsubid) LEFT JOIN pg_catalog.pg_class dc ON "
    "(dc.oid=dsc.classoid AND dc.relname='pg_class') LEFT JOIN pg_catalog.pg_namespace dn ON "
    "(dc.relnamespace=dn.oid AND dn.nspname='pg_catalog') WHERE c.relkind in "
    "('r','p','v','f','m') and a.attnum > 0 AND NOT a.attisdropped"
)
_GET_COLUMNS_TAIL: Final = re.compile(
    r"(?: AND n\.nspname LIKE " + _LIT + r")?"
    r"(?: AND c\.relname LIKE " + _LIT + r")?"
    r"\) c WHERE true(?: AND attname LIKE " + _LIT + r")?"
    r" ORDER BY nspname,c\.relname,attnum"
)

_KEYS_FROM: Final = (
    "FROM pg_catalog.pg_class ct JOIN pg_catalog.pg_attribute a ON (ct.oid = a.attrelid) "
    "JOIN pg_catalog.pg_namespace n ON (ct.relnamespace = n.oid) JOIN pg_catalog.pg_index i "
    "ON ( a.attrelid = i.indrelid) JOIN pg_catalog.pg_class ci ON (ci.oid = i.indexrelid) "
    "WHERE true"
)
_GET_PRIMARY_KEYS: Final = (
    "SELECT result.TABLE_CAT, result.TABLE_SCHEM, result.TABLE_NAME, result.COLUMN_NAME, "
    "result.KEY_SEQ, result.PK_NAME FROM (SELECT NULL AS TABLE_CAT, n.nspname AS "
    "TABLE_SCHEM, ct.relname AS TABLE_NAME, a.attname AS COLUMN_NAME, "
    "(information_schema._pg_expandarray(i.indkey)).n AS KEY_SEQ, ci.relname AS PK_NAME, "
    "information_schema._pg_expandarray(i.indkey) AS KEYS, a.attnum AS A_ATTNUM " + _KEYS_FROM
)
_GET_PRIMARY_KEYS_TAIL: Final = re.compile(
    r"(?: AND n\.nspname = " + _LIT + r")?(?: AND ct\.relname = " + _LIT + r")?"
    r" AND i\.indisprimary \) result where result\.A_ATTNUM = \(result\.KEYS\)\.x"
    r" ORDER BY result\.table_name, result\.pk_name, result\.key_seq"
)

_GET_INDEX_INFO: Final = (
    "SELECT tmp.TABLE_CAT, tmp.TABLE_SCHEM, tmp.TABLE_NAME, tmp.NON_UNIQUE, "
    "tmp.INDEX_QUALIFIER, tmp.INDEX_NAME, tmp.TYPE, tmp.ORDINAL_POSITION, trim(both '\"' from "
    "pg_catalog.pg_get_indexdef(tmp.CI_OID, tmp.ORDINAL_POSITION, false)) AS COLUMN_NAME, "
    "CASE tmp.AM_NAME WHEN 'btree' THEN CASE tmp.I_INDOPTION[tmp.ORDINAL_POSITION - 1] & "
    "1::smallint WHEN 1 THEN 'D' ELSE 'A' END ELSE NULL END AS ASC_OR_DESC, tmp.CARDINALITY, "
    "tmp.PAGES, tmp.FILTER_CONDITION FROM (SELECT NULL AS TABLE_CAT, n.nspname AS "
    "TABLE_SCHEM, ct.relname AS TABLE_NAME, NOT i.indisunique AS NON_UNIQUE, NULL AS "
    "INDEX_QUALIFIER, ci.relname AS INDEX_NAME, CASE i.indisclustered WHEN true THEN 1 ELSE "
    "CASE am.amname WHEN 'hash' THEN 2 ELSE 3 END END AS TYPE, "
    "(information_schema._pg_expandarray(i.indkey)).n AS ORDINAL_POSITION, ci.reltuples AS "
    "CARDINALITY, ci.relpages AS PAGES, pg_catalog.pg_get_expr(i.indpred, i.indrelid) AS "
    "FILTER_CONDITION, ci.oid AS CI_OID, i.indoption AS I_INDOPTION, am.amname AS AM_NAME "
    "FROM pg_catalog.pg_class ct JOIN pg_catalog.pg_namespace n ON (ct.relnamespace = n.oid) "
    "JOIN pg_catalog.pg_index i ON (ct.oid = i.indrelid) JOIN pg_catalog.pg_class ci ON "
    "(ci.oid = i.indexrelid) JOIN pg_catalog.pg_am am ON (ci.relam = am.oid) WHERE true"
)
_GET_INDEX_INFO_TAIL: Final = re.compile(
    r"(?: AND n\.nspname = " + _LIT + r")? AND ct\.relname = " + _LIT + r"( AND i\.indisunique)?"
    r" \) AS tmp ORDER BY NON_UNIQUE, TYPE, INDEX_NAME, ORDINAL_POSITION"
)

# TypeInfoCache: getSQLType(oid) and getPGType(oid) of a type pgjdbc does not carry.
_TYPE_BY_OID: Final = re.compile(
    r"SELECT typinput='pg_catalog\.array_in'::regproc as is_array, typtype, typname, "
    r"pg_type\.oid FROM pg_catalog\.pg_type LEFT JOIN \(select ns\.oid as nspoid, ns\.nspname, "
    r"r\.r from pg_namespace as ns join \( select s\.r, \(current_schemas\(false\)\)\[s\.r\] as "
    r"nspname from generate_series\(1, array_upper\(current_schemas\(false\), 1\)\) as s\(r\) "
    r"\) as r using \( nspname \) \) as sp ON sp\.nspoid = typnamespace WHERE pg_type\.oid = "
    + _OID_PARAM
    + r" ORDER BY sp\.r, pg_type\.oid DESC"
)
_TYPE_NAME: Final = re.compile(
    r"SELECT n\.nspname = ANY\(current_schemas\(true\)\), n\.nspname, t\.typname FROM "
    r"pg_catalog\.pg_type t JOIN pg_catalog\.pg_namespace n ON t\.typnamespace = n\.oid WHERE "
    r"t\.oid = " + _OID_PARAM
)
# Debezium's PostgresConnection.readReplicaIdentityInfo.
_REPLICA_IDENTITY: Final = re.compile(
    r"SELECT relreplident FROM pg_catalog\.pg_class c LEFT JOIN pg_catalog\.pg_namespace n ON "
    r"c\.relnamespace=n\.oid WHERE n\.nspname=" + _PAREN_LIT + r" and c\.relname=" + _PAREN_LIT
)
# What current_schemas(true) holds with the default search_path ("$user", public) for a
# role without a schema of its own.
_CURRENT_SCHEMAS: Final = ("pg_catalog", "public")
_NAMEDATALEN: Final = 64


def _unquote(literal: str | None) -> str | None:
    return None if literal is None else literal.replace("''", "'")


def _like(pattern: str) -> re.Pattern[str]:
    """LIKE with its default escape, backslash."""
    out = []
    chars = iter(pattern)
    for ch in chars:
        if ch == "\\":
            out.append(re.escape(next(chars, "\\")))
        elif ch == "%":
            out.append(".*")
        elif ch == "_":
            out.append(".")
        else:
            out.append(re.escape(ch))
    return re.compile("".join(out), re.DOTALL)


def _literal_name(pattern: str) -> str | None:
    """The one name a LIKE pattern matches, or None when it has wildcards."""
    if re.search(r"(?<!\\)(?:\\\\)*[%_]", pattern):
        return None
    return re.sub(r"\\(.)", r"\1", pattern)


def _c_order(name: str) -> bytes:
    """``name`` sorts with C collation: by bytes."""
    return name.encode()


def pkey_name(relname: str) -> str:
    """PostgreSQL's default primary key name (``makeObjectName(relname, NULL, "pkey")``):
    ``<relname>_pkey``, the table name clipped at a character boundary to fit NAMEDATALEN."""
    room = _NAMEDATALEN - 1 - len(b"_pkey")
    raw = relname.encode()
    while len(raw) > room:
        relname = relname[:-1]
        raw = relname.encode()
    return f"{relname}_pkey"


def _refuse(what: str, why: str, text: str) -> ServerError:
    return ServerError(
        "ERROR",
        "0A000",
        f"pgwire-mock cannot answer pgjdbc's {what}: {why}",
        f"Statement: {text[:200]}",
    )


class JdbcCatalog:
    """Answers pgjdbc's metadata queries from the tables ``states`` returns."""

    def __init__(self, major: int, states: Callable[[], Mapping[str, TableState]]) -> None:
        self.major = major
        self._states = states
        self._prefixed: tuple[tuple[str, re.Pattern[str], Callable[..., Result]], ...] = (
            (_GET_TABLES, _GET_TABLES_TAIL, self._get_tables),
            (_GET_COLUMNS, _GET_COLUMNS_TAIL, self._get_columns),
            (_GET_PRIMARY_KEYS, _GET_PRIMARY_KEYS_TAIL, self._get_primary_keys),
            (_GET_INDEX_INFO, _GET_INDEX_INFO_TAIL, self._get_index_info),
        )
        self._whole: tuple[tuple[re.Pattern[str], Callable[..., Result]], ...] = (
            (_TYPE_BY_OID, self._type_by_oid),
            (_TYPE_NAME, self._type_name),
            (_REPLICA_IDENTITY, self._replica_identity),
        )

    def answer(self, text: str) -> Result | None:
        """The reply to ``text`` (whitespace collapsed); None if it is none of these."""
        for prefix, tail, handler in self._prefixed:
            if text.startswith(prefix):
                match = tail.fullmatch(text, len(prefix))
                if match is None:
                    return None
                return handler(match, text)
        for pattern, whole in self._whole:
            found = pattern.fullmatch(text)
            if found is not None:
                return whole(found, text)
        return None

    # --- the model ------------------------------------------------------------------------

    def _tables_in(self, schema: str, what: str, text: str) -> list[TableState]:
        """The served tables of one user schema, refusing a system schema."""
        if _SYSTEM_SCHEMA.fullmatch(schema):
            raise _refuse(what, f"the fake does not model the relations of {schema}", text)
        return [s for s in self._states().values() if s.version.namespace == schema]

    def _table(self, schema: str | None, name: str, what: str, text: str) -> TableState | None:
        if schema is None:
            raise _refuse(what, "without a schema it would list system catalogs", text)
        for state in self._tables_in(schema, what, text):
            if state.version.relname == name:
                return state
        return None

    # --- DatabaseMetaData -----------------------------------------------------------------

    def _get_tables(self, match: re.Match[str], text: str) -> Result:
        schema_pattern, name_pattern, clauses = match.groups()
        if clauses is None:
            raise _refuse("getTables", "with no table types it would list system relations", text)
        kinds = set()
        for clause in re.findall(r" OR \( ([^()]*) \)", clauses):
            kind = _USER_TYPES.get(clause.strip())
            if kind is None:
                raise _refuse("getTables", f"relations of type ({clause}) are not modelled", text)
            kinds.add(kind)
        schema_like = _like(_unquote(schema_pattern) or "%")
        name_like = _like(_unquote(name_pattern) or "%")
        rows = []
        for state in self._states().values():
            version = state.version
            if _SYSTEM_SCHEMA.fullmatch(version.namespace) or "r" not in kinds:
                continue
            if schema_like.fullmatch(version.namespace) and name_like.fullmatch(version.relname):
                rows.append((None, version.namespace, version.relname, _TABLE_TYPE["r"], None))
        rows.sort(key=lambda r: (r[3] or "", _c_order(r[1] or ""), _c_order(r[2] or "")))
        columns = (
            Column("table_cat"),
            Column("table_schem", "name", _PG_NAMESPACE, 2),
            Column("table_name", "name", _PG_CLASS, 2),
            Column("table_type"),
            Column("remarks", "text", _PG_DESCRIPTION, 4),
            Column("type_cat"),
            Column("type_schem"),
            Column("type_name"),
            Column("self_referencing_col_name"),
            Column("ref_generation"),
        )
        out = tuple((*row, "", "", "", "", "") for row in rows)
        return Result(f"SELECT {len(out)}", columns, out)

    def _get_columns(self, match: re.Match[str], text: str) -> Result:
        from pgwire_mock.script.sizes import type_length  # noqa: PLC0415 - scripts only

        schema_pattern, name_pattern, column_pattern = (_unquote(g) for g in match.groups())
        schema = None if schema_pattern is None else _literal_name(schema_pattern)
        if schema is None:
            raise _refuse(
                "getColumns", "without one named schema it would read system catalogs", text
            )
        name_like = _like(name_pattern or "%")
        column_like = _like(column_pattern or "%")
        rows: list[tuple[str | None, ...]] = []
        tables = sorted(
            self._tables_in(schema, "getColumns", text), key=lambda s: _c_order(s.version.relname)
        )
        for state in tables:
            version = state.version
            if not name_like.fullmatch(version.relname):
                continue
            if any(c.generated for c in version.columns):
                raise _refuse(
                    "getColumns", f"the expressions of {version.relname}'s generated columns", text
                )
            for position, c in enumerate(version.columns, start=1):
                if not column_like.fullmatch(c.name):
                    continue
                ctype = c.ctype
                base = ctype.base if ctype.kind == "domain" else None
                rows.append(
                    (
                        version.namespace,
                        version.relname,
                        c.name,
                        str(ctype.oid),
                        "t" if c.key else "f",
                        str(c.typmod),
                        str(type_length(ctype)),
                        "-1",
                        str(position),
                        None,
                        None,
                        None,
                        None,
                        str(base.oid) if base is not None else "0",
                        _typtype(ctype),
                    )
                )
        columns = (
            Column("nspname", "name", _PG_NAMESPACE, 2),
            Column("relname", "name", _PG_CLASS, 2),
            Column("attname", "name", _PG_ATTRIBUTE, 2),
            Column("atttypid", "oid", _PG_ATTRIBUTE, 3),
            Column("attnotnull", "bool"),
            Column("atttypmod", "int4", _PG_ATTRIBUTE, _ATTTYPMOD.get(self.major, 7)),
            Column("attlen", "int2", _PG_ATTRIBUTE, _ATTLEN.get(self.major, 4)),
            Column("typtypmod", "int4", _PG_TYPE, 27),
            Column("attnum", "int8"),
            Column("attidentity", "char"),
            Column("attgenerated", "char"),
            Column("adsrc", "text"),
            Column("description", "text", _PG_DESCRIPTION, 4),
            Column("typbasetype", "oid", _PG_TYPE, 26),
            Column("typtype", "char", _PG_TYPE, 7),
        )
        return Result(f"SELECT {len(rows)}", columns, tuple(rows))

    def _get_primary_keys(self, match: re.Match[str], text: str) -> Result:
        schema, name = (_unquote(g) for g in match.groups())
        if name is None:
            raise _refuse("getPrimaryKeys", "without a table name", text)
        state = self._table(schema, name, "getPrimaryKeys", text)
        rows: list[tuple[str | None, ...]] = []
        if state is not None:
            version = state.version
            if version.identity == "i":
                raise _refuse(
                    "getPrimaryKeys",
                    f"{name}'s replica identity index may not be its primary key",
                    text,
                )
            keys = [c for c in version.columns if c.key]
            pk = pkey_name(version.relname)
            for seq, c in enumerate(keys, start=1):
                rows.append((None, version.namespace, version.relname, c.name, str(seq), pk))
        columns = (
            Column("table_cat"),
            Column("table_schem", "name", _PG_NAMESPACE, 2),
            Column("table_name", "name", _PG_CLASS, 2),
            Column("column_name", "name", _PG_ATTRIBUTE, 2),
            Column("key_seq", "int4"),
            Column("pk_name", "name", _PG_CLASS, 2),
        )
        return Result(f"SELECT {len(rows)}", columns, tuple(rows))

    def _get_index_info(self, match: re.Match[str], text: str) -> Result:
        schema, name = _unquote(match.group(1)), _unquote(match.group(2)) or ""
        state = self._table(schema, name, "getIndexInfo", text)
        if state is not None and any(c.key for c in state.version.columns):
            # Its rows carry the index's reltuples and relpages, which VACUUM and ANALYZE set.
            raise _refuse("getIndexInfo", f"the statistics of {name}'s indexes", text)
        columns = (
            Column("table_cat"),
            Column("table_schem", "name", _PG_NAMESPACE, 2),
            Column("table_name", "name", _PG_CLASS, 2),
            Column("non_unique", "bool"),
            Column("index_qualifier"),
            Column("index_name", "name", _PG_CLASS, 2),
            Column("type", "int4"),
            Column("ordinal_position", "int4"),
            Column("column_name"),
            Column("asc_or_desc"),
            Column("cardinality", table_oid=_PG_CLASS, column_number=11, described=_FLOAT4),
            Column("pages", "int4", _PG_CLASS, 10),
            Column("filter_condition"),
        )
        return Result("SELECT 0", columns, ())

    # --- TypeInfoCache and Debezium's own -------------------------------------------------

    def _known_type(self, oid: int, what: str, text: str) -> ColumnType:
        from codec.values import TYPES  # noqa: PLC0415
        from pgwire_mock.script.types import ColumnType  # noqa: PLC0415

        for state in self._states().values():
            for c in state.version.columns:
                for t in type_and_parts(c.ctype):
                    if t.oid == oid:
                        return t
        info = TYPES.get(oid)
        if info is not None:
            return ColumnType(oid, info.name, "", info.name, "builtin", info=info)
        name = builtin_name(oid)  # xid8 of Debezium's transaction ID query, pg_lsn, xid
        if name is not None:
            return ColumnType(oid, name, "", name, "builtin")
        raise _refuse(what, f"type {oid} is not one the fake knows", text)

    def _type_by_oid(self, match: re.Match[str], text: str) -> Result:
        ctype = self._known_type(int(match.group(1) or match.group(2)), "TypeInfoCache", text)
        columns = (
            Column("is_array", "bool"),
            Column("typtype", "char", _PG_TYPE, 7),
            Column("typname", "name", _PG_TYPE, 2),
            Column("oid", "oid", _PG_TYPE, 1),
        )
        is_array = ctype.kind == "array" or (ctype.info is not None and ctype.info.is_array)
        row = ("t" if is_array else "f", _typtype(ctype), ctype.typname, str(ctype.oid))
        return Result("SELECT 1", columns, (row,))

    def _type_name(self, match: re.Match[str], text: str) -> Result:
        ctype = self._known_type(int(match.group(1) or match.group(2)), "TypeInfoCache", text)
        namespace = ctype.namespace or "pg_catalog"
        columns = (
            Column("?column?", "bool"),
            Column("nspname", "name", _PG_NAMESPACE, 2),
            Column("typname", "name", _PG_TYPE, 2),
        )
        visible = "t" if namespace in _CURRENT_SCHEMAS else "f"
        return Result("SELECT 1", columns, ((visible, namespace, ctype.typname),))

    def _replica_identity(self, match: re.Match[str], text: str) -> Result:
        schema, name = (_unquote(g) or "" for g in match.groups())
        state = self._table(schema, name, "replica identity query", text)
        rows = () if state is None else ((state.version.identity,),)
        attnum = pg_class_attnum(self.major, "relreplident")
        columns = (Column("relreplident", "char", _PG_CLASS, attnum),)
        return Result(f"SELECT {len(rows)}", columns, rows)


def _typtype(ctype: ColumnType) -> str:
    return {"enum": "e", "domain": "d", "composite": "c"}.get(ctype.kind, "b")
