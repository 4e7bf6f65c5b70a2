"""The small SQL layer of a logical replication connection.

A ``replication=database`` walsender runs any text that is not a replication command as
SQL (``exec_simple_query``). CDC clients send a handful of statements there; this module
answers those from the server state, plus user-supplied canned answers (exact text →
rows), and refuses the rest with ``0A000`` instead of hanging:

* ``SELECT pg_catalog.set_config('n', 'v', false)`` (pg_recvlogical, libpq clients),
  ``SET n TO v``, ``SHOW n`` (lower-case ``show`` is SQL; ``SHOW`` is the replication
  command and gives the same reply);
* ``BEGIN`` / ``START TRANSACTION`` / ``COMMIT`` / ``END`` / ``ROLLBACK`` / ``ABORT``
  with PostgreSQL's warnings when there is (no) transaction in progress;
* ``SELECT version()`` (the emulated release's text), ``pg_current_wal_lsn()``,
  ``pg_is_in_recovery()``, ``current_database()``, ``current_user`` / ``session_user`` /
  ``user``, ``current_setting('n')``, ``pg_backend_pid()``, ``SELECT <integer>``;
* ``SELECT cols|*|count(*|1|col) FROM pg_replication_slots | pg_stat_replication |
  pg_publication | pg_publication_tables [WHERE col = 'v' [AND ...]]`` from the shared
  state and the live walsenders;
* ``CREATE PUBLICATION p FOR ALL TABLES | FOR TABLE a, b``, ``DROP PUBLICATION [IF EXISTS] p``.
"""

from __future__ import annotations

import dataclasses
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Final, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pgwire_mock.server.errors import ServerError
from pgwire_mock.server.grammar import format_lsn
from pgwire_mock.server.state import PublicationState, ServerState, SlotState, WalSenderStatus
from pgwire_mock.server.versions import VERSIONS, error

__all__ = [
    "OID",
    "CannedAnswer",
    "Column",
    "Result",
    "SqlLayer",
    "check_syntax",
    "closest_columns",
    "gucs_for",
    "missing_column",
    "pg_class_attnum",
    "skip_quoted",
    "source_offsets",
    "split_statements",
    "split_statements_at",
]

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


def gucs_for(major: int, wal_sender_timeout_ms: int) -> dict[str, str]:
    """Settings SHOW knows: canonical name → value (as ``SHOW`` prints it)."""
    facts = VERSIONS[major]
    timeout = wal_sender_timeout_ms
    shown = (
        f"{timeout // 60000}min"
        if timeout and timeout % 60000 == 0
        else f"{timeout // 1000}s"
        if timeout and timeout % 1000 == 0
        else f"{timeout}ms"
        if timeout
        else "0"
    )
    values = dict(facts.parameter_status)
    values.update(
        {
            "server_version_num": str(facts.server_version_num),
            "data_directory_mode": "0700",
            "wal_sender_timeout": shown,
            "wal_level": "logical",
            "max_wal_senders": "10",
            "max_replication_slots": "10",
            "wal_segment_size": "16MB",
            "block_size": "8192",
            "statement_timeout": "0",
            "lock_timeout": "0",
            "idle_in_transaction_session_timeout": "0",
            "search_path": '"$user", public',
            "transaction_isolation": "read committed",
            "max_connections": "100",
            "logical_decoding_work_mem": "64MB",
            "wal_keep_size": "0",
            "hot_standby_feedback": "off",
            "port": "5432",
            "listen_addresses": "localhost",
            "ssl": "off",
            "password_encryption": "scram-sha-256",
            "lc_messages": "C",
            "max_slot_wal_keep_size": "-1",
        }
    )
    return values


def skip_quoted(text: str, i: int) -> int | None:
    """Where a literal, quoted identifier or comment starting at ``i`` ends (the end of
    ``text`` when it is not closed); None when none starts there."""
    n = len(text)
    ch = text[i]
    if ch in "'\"":
        end = text.find(ch, i + 1)
        while end != -1 and end + 1 < n and text[end + 1] == ch:
            end = text.find(ch, end + 2)
        return n if end == -1 else end + 1
    if text.startswith("--", i):
        end = text.find("\n", i)
        return n if end == -1 else end + 1
    if text.startswith("/*", i):
        end = text.find("*/", i + 2)
        return n if end == -1 else end + 2
    return None


def split_statements(text: str) -> list[str]:
    """Split a simple Query on ``;`` outside quotes and comments (empty parts dropped)."""
    return [part for _, part in split_statements_at(text)]


def split_statements_at(text: str) -> list[tuple[int, str]]:
    """:func:`split_statements`, each part with the offset in ``text`` where it starts."""
    out: list[tuple[int, str]] = []
    start = 0
    i = 0
    n = len(text)
    while i <= n:
        after = skip_quoted(text, i) if i < n else None
        if after is not None:
            i = after
            continue
        if i == n or text[i] == ";":
            part = text[start:i]
            if _strip_comments(part).strip():
                out.append((start + len(part) - len(part.lstrip()), part.strip()))
            start = i + 1
        i += 1
    return out


def source_offsets(statement: str) -> list[int] | None:
    """For each character of ``normalize(statement)``, its index in ``statement``.

    PostgreSQL reports a position (the P field) in the query string as the client sent
    it; the fake matches the normalized text, so its positions are translated back.
    None if the walk does not rebuild what :func:`normalize` gives (it always should).
    """
    text, index = statement, list(range(len(statement)))
    for pattern in _COMMENTS:
        kept: list[str] = []
        kept_index: list[int] = []
        last = 0
        for m in pattern.finditer(text):
            kept.append(text[last : m.start()] + " ")
            kept_index += [*index[last : m.start()], index[m.start()]]
            last = m.end()
        kept.append(text[last:])
        kept_index += index[last:]
        text, index = "".join(kept), kept_index
    words = list(re.finditer(r"\S+", text))
    joined = " ".join(m.group() for m in words)
    offsets: list[int] = []
    for n, m in enumerate(words):
        if n:  # a run of whitespace (or comments) collapsed to one space: where it began
            offsets.append(index[words[n - 1].end()])
        offsets += index[m.start() : m.end()]
    trimmed = joined.rstrip(";")
    lead = len(trimmed) - len(trimmed.lstrip())
    trimmed = trimmed.strip()
    offsets = offsets[lead : lead + len(trimmed)]
    return offsets if trimmed == normalize(statement) else None


def check_syntax(statement: str, major: int) -> None:
    """What the SQL grammar of PostgreSQL ``major`` says of a statement that starts with
    no SQL keyword (42601, at its first character); the rest of the grammar is not
    checked."""
    text = normalize(statement)
    first = text.split(None, 1)[0] if text else ""
    if first.lower() not in _SQL_STARTS and not first.startswith("("):
        refused = error(major, "sql_syntax", token=first)
        refused.position = 1
        raise refused


_COMMENTS: Final = (re.compile(r"--[^\n]*"), re.compile(r"/\*.*?\*/", re.S))


def _strip_comments(text: str) -> str:
    for pattern in _COMMENTS:
        text = pattern.sub(" ", text)
    return text


def normalize(text: str) -> str:
    """A statement with comments dropped and whitespace collapsed (how answers match)."""
    return " ".join(_strip_comments(text).split()).rstrip(";").strip()


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


# First words of SQL statements (gram.y's stmt alternatives).
_SQL_STARTS: Final = frozenset(
    [
        "abort",
        "alter",
        "analyze",
        "begin",
        "call",
        "checkpoint",
        "close",
        "cluster",
        "comment",
        "commit",
        "copy",
        "create",
        "deallocate",
        "declare",
        "delete",
        "discard",
        "do",
        "drop",
        "end",
        "execute",
        "explain",
        "fetch",
        "grant",
        "import",
        "insert",
        "listen",
        "load",
        "lock",
        "merge",
        "move",
        "notify",
        "prepare",
        "reassign",
        "refresh",
        "reindex",
        "release",
        "reset",
        "revoke",
        "rollback",
        "savepoint",
        "security",
        "select",
        "set",
        "show",
        "start",
        "table",
        "truncate",
        "unlisten",
        "update",
        "vacuum",
        "values",
        "with",
    ]
)
_LITERAL: Final = r"'((?:[^']|'')*)'"
_IDENT: Final = r'(?:"((?:[^"]|"")+)"|([A-Za-z_][A-Za-z0-9_$]*))'
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

# pg_class attribute numbers as 14-17 have them; 18 inserted relallfrozen (13) after
# relallvisible, so every later column moved up by one.
_PG_CLASS_ATTNUMS: Final = {"oid": 1, "relname": 2, "relpages": 10, "reltuples": 11}
_PG_CLASS_ATTNUMS_FROM_13: Final = {"relkind": 17, "relreplident": 26}


def pg_class_attnum(major: int, name: str) -> int:
    """The attribute number RowDescription gives a pg_class column on ``major``."""
    if name in _PG_CLASS_ATTNUMS:
        return _PG_CLASS_ATTNUMS[name]
    return _PG_CLASS_ATTNUMS_FROM_13[name] + (1 if major >= 18 else 0)


_FOLD: Final = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
# errorMissingColumn suggests columns at most this many edits away (parse_relation.c).
_MAX_FUZZY_DISTANCE: Final = 3


def _levenshtein(a: str, b: str) -> int:
    """Edit distance, every insertion, deletion and substitution costing 1 (what
    varstr_levenshtein computes with those costs, character by character)."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def closest_columns(names: Sequence[str], column: str) -> tuple[str, ...]:
    """The columns errorMissingColumn's hint names for an unknown ``column`` of a
    relation with ``names`` (updateFuzzyAttrMatchState): the closest within
    _MAX_FUZZY_DISTANCE edits and within half the wanted name's length in bytes; none
    when three or more are equally close. 14/15 lower the bar after such a tie where
    16+ keep it and forget the tie; with one relation both give the same answer."""
    distance = _MAX_FUZZY_DISTANCE + 1
    first: str | None = None
    second: str | None = None
    half = len(column.encode()) // 2
    for name in names:
        d = _levenshtein(name, column)
        if d > half:
            continue
        if d < distance:
            distance, first, second = d, name, None
        elif d == distance:
            if second is not None:
                first = second = None
            elif first is not None:
                second = name
    return tuple(n for n in (first, second) if n is not None)


def missing_column(
    major: int, relation: str, names: Sequence[str], column: str, *, qualified: bool
) -> ServerError:
    """42703 for ``column``, not among ``relation``'s ``names``, as ``major`` reports it
    (no position: the caller knows where the reference is)."""
    hints = closest_columns(names, column)
    kind = ("undefined_column", "undefined_column_hint", "undefined_column_two_hints")[len(hints)]
    first, second = (*hints, None, None)[:2]
    refused = error(major, kind, column=column, relation=relation, first=first, second=second)
    if qualified:  # errmsg("column %s.%s does not exist"): no quotes
        refused.message = f"column {relation}.{column} does not exist"
    return refused


def _ident(quoted: str | None, bare: str | None) -> str:
    if quoted is not None:
        return quoted.replace('""', '"')
    return (bare or "").lower()


class SqlLayer:
    """Answers SQL statements for one session."""

    def __init__(
        self,
        major: int,
        state: ServerState,
        *,
        canned: Mapping[str, CannedAnswer] | None = None,
        settings: Mapping[str, str] | None = None,
        user: str = "postgres",
        database: str = "postgres",
        pid: int = 0,
    ) -> None:
        self.major = major
        self.state = state
        self.canned = {normalize(k): v for k, v in (canned or {}).items()}
        self.settings = dict(settings or gucs_for(major, 60000))
        self.user = user
        self.database = database
        self.pid = pid
        # Settings changed by SET / set_config, in order, for ReportChangedGUCOptions.
        self.changed: list[str] = []
        self._handlers: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], Result]], ...] = (
            (re.compile(r"(?:begin|start transaction)(?: .*)?", re.I), self._begin),
            (re.compile(r"(?:commit|end)(?: transaction| work)?", re.I), self._commit),
            (re.compile(r"(?:rollback|abort)(?: transaction| work)?", re.I), self._rollback),
            (
                re.compile(
                    r"select (?:pg_catalog\.)?set_config ?\( ?"
                    + _LITERAL
                    + r" ?, ?"
                    + _LITERAL
                    + r" ?, ?(true|false) ?\)",
                    re.I,
                ),
                self._set_config,
            ),
            (re.compile(r"set (?:session )?(time zone) (.+)", re.I), self._set),
            (re.compile(r"set (?:session )?(\S+) ?(?:to|=) ?(.+)", re.I), self._set),
            (re.compile(r"show (\S+)", re.I), self._show),
            (re.compile(r"select (?:pg_catalog\.)?version ?\( ?\)", re.I), self._version),
            (
                re.compile(r"select (?:pg_catalog\.)?pg_current_wal_lsn ?\( ?\)", re.I),
                self._current_lsn,
            ),
            (
                re.compile(
                    r"select (?:pg_catalog\.)?(pg_is_in_recovery|current_database|pg_backend_pid)"
                    r" ?\( ?\)",
                    re.I,
                ),
                self._function,
            ),
            (re.compile(r"select (current_user|session_user|user)", re.I), self._user),
            (
                re.compile(
                    r"select (?:pg_catalog\.)?current_setting ?\( ?" + _LITERAL + r" ?\)", re.I
                ),
                self._current_setting,
            ),
            (re.compile(r"select (-?[0-9]{1,9})", re.I), self._select_int),
            (
                re.compile(
                    r"select (.+?) from (?:pg_catalog\.)?"
                    r"(pg_replication_slots|pg_stat_replication|pg_publication_tables"
                    r"|pg_publication)"
                    r"(?: where (.+))?",
                    re.I,
                ),
                self._select_catalog,
            ),
            (
                re.compile(
                    r"create publication " + _IDENT + r"(?: for (all tables|table (.+?)))?"
                    r"(?: with ?\((.*)\))?",
                    re.I,
                ),
                self._create_publication,
            ),
            (re.compile(r"drop publication (if exists )?" + _IDENT, re.I), self._drop_publication),
        )

    # --- entry point -----------------------------------------------------------------

    def execute(self, statement: str, *, in_transaction: bool) -> Result:
        """Run one statement; raises ServerError."""
        self._in_transaction = in_transaction
        text = normalize(statement)
        canned = self.canned.get(text)
        if canned is not None:
            return canned.result()
        for pattern, handler in self._handlers:
            match = pattern.fullmatch(text)
            if match is not None:
                return handler(match)
        check_syntax(text, self.major)
        raise ServerError(
            "ERROR",
            "0A000",
            "pgwire-mock does not emulate this SQL statement",
            f"Statement: {text[:200]}",
            "Give the fake server a canned answer for this exact text (--sql-answers).",
        )

    # --- transactions --------------------------------------------------------------------

    def _begin(self, _: re.Match[str]) -> Result:
        notices: tuple[ServerError, ...] = ()
        if self._in_transaction:
            notices = (
                ServerError("WARNING", "25001", "there is already a transaction in progress"),
            )
        return Result("BEGIN", notices=notices, transaction="begin")

    def _commit(self, _: re.Match[str]) -> Result:
        notices: tuple[ServerError, ...] = ()
        if not self._in_transaction:
            notices = (ServerError("WARNING", "25P01", "there is no transaction in progress"),)
        return Result("COMMIT", notices=notices, transaction="commit")

    def _rollback(self, _: re.Match[str]) -> Result:
        notices: tuple[ServerError, ...] = ()
        if not self._in_transaction:
            notices = (ServerError("WARNING", "25P01", "there is no transaction in progress"),)
        return Result("ROLLBACK", notices=notices, transaction="rollback")

    # --- settings ------------------------------------------------------------------------

    def _canonical(self, name: str) -> str:
        lowered = name.lower()
        for key in self.settings:
            if key.lower() == lowered:
                return key
        raise ServerError("ERROR", "42704", f'unrecognized configuration parameter "{lowered}"')

    def show(self, name: str) -> Result:
        """``SHOW name``: one text column named after the setting, tag SHOW."""
        if name.lower() == "all":
            rows = tuple((k, v, "") for k, v in sorted(self.settings.items()))
            columns = (Column("name"), Column("setting"), Column("description"))
            return Result("SHOW", columns, rows)
        key = self._canonical(name)
        return Result("SHOW", (Column(key),), ((self.settings[key],),))

    def _show(self, match: re.Match[str]) -> Result:
        return self.show(match.group(1).strip('"'))

    def _set_config(self, match: re.Match[str]) -> Result:
        name = match.group(1).replace("''", "'")
        value = match.group(2).replace("''", "'")
        try:
            self._assign(self._canonical(name), value)
        except ServerError:
            if "." not in name:  # custom "a.b" settings may be created
                raise
            self._assign(name, value)
        return Result("SELECT 1", (Column("set_config"),), ((value,),))

    def _assign(self, key: str, value: str) -> None:
        self.settings[key] = value
        if key not in self.changed:
            self.changed.append(key)

    def _set(self, match: re.Match[str]) -> Result:
        name = match.group(1)
        raw = match.group(2).strip()
        value = raw[1:-1].replace("''", "'") if raw.startswith("'") and raw.endswith("'") else raw
        if name.lower() == "time zone":  # SET TIME ZONE x is SET timezone = x
            name = "TimeZone"
        if name.lower() == "datestyle" and value.upper() == "ISO":
            value = "ISO, MDY"
        self._assign(self._canonical(name), value)
        return Result("SET")

    # --- functions ----------------------------------------------------------------------

    def _version(self, _: re.Match[str]) -> Result:
        return Result("SELECT 1", (Column("version"),), ((VERSIONS[self.major].version_text,),))

    def _function(self, match: re.Match[str]) -> Result:
        name = match.group(1).lower()
        if name == "pg_is_in_recovery":
            column, value = Column(name, "bool"), "f"  # a primary, never a standby
        elif name == "current_database":
            column, value = Column(name, "name"), self.database
        else:
            column, value = Column(name, "int4"), str(self.pid)
        return Result("SELECT 1", (column,), ((value,),))

    def _user(self, match: re.Match[str]) -> Result:
        # SQL-standard functions without parentheses, each column named as written.
        return Result("SELECT 1", (Column(match.group(1).lower(), "name"),), ((self.user,),))

    def _current_setting(self, match: re.Match[str]) -> Result:
        key = self._canonical(match.group(1).replace("''", "'"))
        return Result("SELECT 1", (Column("current_setting"),), ((self.settings[key],),))

    def _current_lsn(self, _: re.Match[str]) -> Result:
        return Result(
            "SELECT 1",
            (Column("pg_current_wal_lsn", "pg_lsn"),),
            ((format_lsn(self.state.wal_lsn),),),
        )

    def _select_int(self, match: re.Match[str]) -> Result:
        return Result("SELECT 1", (Column("?column?", "int4"),), ((str(int(match.group(1))),),))

    # --- catalogs --------------------------------------------------------------------------

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
        return _timestamptz(moment, self.settings.get("TimeZone", "UTC"))

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
            (Column("catalog_xmin", "xid"), lambda s: "750" if s.logical else None),
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
        zone = self.settings.get("TimeZone", "UTC")

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

    def _select_catalog(self, match: re.Match[str]) -> Result:
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
                    None if plain else self._resolve(view, names, argument, at + count.start(1))
                )
            elif item != "*":
                indexes.append(self._resolve(view, names, item, at))
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

    def _resolve(self, view: str, names: Sequence[str], reference: str, at: int) -> int:
        """The index of the column a reference (``col``, ``"Col"``, ``view.col``,
        ``pg_catalog.view.col``) names; ``at`` is where it starts in the normalized
        statement. Else PostgreSQL's error, positioned there (transformColumnRef)."""
        # Quoted parts are kept as written; bare ones fold A-Z only (downcase_identifier
        # leaves multibyte characters alone).
        parts = [
            m.group(1).replace('""', '"') if m.group(1) is not None else m.group(2).translate(_FOLD)
            for m in re.finditer(r'"((?:[^"]|"")*)"|([^."]+)', reference)
        ]
        column = parts[-1]
        qualifier = parts[-2] if len(parts) > 1 else None
        if qualifier is not None and qualifier != view:
            refused = error(self.major, "missing_from_entry", relation=qualifier)
        elif len(parts) > 2 and parts[-3] != "pg_catalog":
            refused = error(self.major, "invalid_from_reference", relation=qualifier)
            why = (
                f'There is an entry for table "{view}", but it cannot be referenced from this '
                "part of the query."
            )
            if self.major >= 16:
                refused.detail = why
            else:
                refused.hint = why
        elif column in names:
            return names.index(column)
        else:
            refused = missing_column(
                self.major, view, names, column, qualified=qualifier is not None
            )
        refused.position = at + 1
        raise refused

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
            m = re.fullmatch(r"(\w+) ?= ?" + _LITERAL, clause[start:end])
            if m is None:
                raise ServerError(
                    "ERROR",
                    "0A000",
                    "pgwire-mock only understands WHERE col = 'value' [AND ...] on catalogs",
                )
            index = self._resolve(view, names, m.group(1), at + start)
            out.append((index, m.group(2).replace("''", "'")))
        return out

    # --- publications ----------------------------------------------------------------------

    def _create_publication(self, match: re.Match[str]) -> Result:
        name = _ident(match.group(1), match.group(2))
        if name in self.state.publications:
            raise ServerError("ERROR", "42710", f'publication "{name}" already exists')
        target = (match.group(3) or "").lower()
        tables: tuple[str, ...] = ()
        if target.startswith("table"):
            tables = tuple(
                t if "." in t else f"public.{t}"
                for t in (part.strip().strip('"') for part in (match.group(4) or "").split(","))
                if t
            )
        publish = {"insert", "update", "delete", "truncate"}
        generated = "n"
        options = match.group(5)
        if options:
            m = re.search(r"publish ?= ?" + _LITERAL, options, re.I)
            if m is not None:
                publish = {p.strip().lower() for p in m.group(1).split(",") if p.strip()}
            m = re.search(r"publish_generated_columns ?(?:= ?'?(\w+)'?)?", options, re.I)
            if m is not None and self.major >= 18 and (m.group(1) or "").lower() == "stored":
                generated = "s"
        self.state.add_publication(
            PublicationState(
                name,
                all_tables=target == "all tables",
                tables=tables,
                insert="insert" in publish,
                update="update" in publish,
                delete="delete" in publish,
                truncate="truncate" in publish,
                owner=self.user,
                generated_columns=generated,
            )
        )
        return Result("CREATE PUBLICATION")

    def _drop_publication(self, match: re.Match[str]) -> Result:
        name = _ident(match.group(2), match.group(3))
        if name not in self.state.publications:
            if match.group(1):
                notice = ServerError(
                    "NOTICE", "00000", f'publication "{name}" does not exist, skipping'
                )
                return Result("DROP PUBLICATION", notices=(notice,))
            raise ServerError("ERROR", "42704", f'publication "{name}" does not exist')
        del self.state.publications[name]
        self.state.save()
        return Result("DROP PUBLICATION")
