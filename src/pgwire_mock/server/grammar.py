"""The replication command language of a walsender, per PostgreSQL major (14–17).

:func:`parse_command` turns the text of a simple Query on a replication connection into
one typed, frozen command, the way ``src/backend/replication/repl_scanner.l`` and
``repl_gram.y`` do. Facts checked against real 14.23, 15.18, 16.14 and 17.10 servers:

* The walsender looks only at the **first token**: when it is a command keyword
  (``IDENTIFY_SYSTEM``, ``SHOW``, ...), the whole text must parse as that command; anything
  else (a lower-case ``identify_system``, ``"IDENTIFY_SYSTEM"``, ``-- comment``, ``(``, an
  empty string) is SQL and comes back as :class:`SqlCommand`. 14.x received this rule in a
  minor release, so ``SELECT 1; SELECT 2`` works on every supported version.
* Keywords are matched exactly, upper case only; a bare identifier is lower-cased (ASCII
  letters only) and a double-quoted one is kept as is. The replication scanner has **no**
  ``""`` escape inside quoted identifiers (``"a""b"`` is two identifiers: a syntax error),
  and an empty ``""`` is accepted. Identifiers are truncated to 63 bytes with a NOTICE.
* Strings are single-quoted with ``''`` for a quote; there are no comments; whitespace is
  space, tab, LF, CR and form feed, plus vertical tab on 17 only.
* LSNs are ``hex/hex`` (each half read with ``%X``, so it wraps to 32 bits); unsigned
  integers are decimal (``strtoul`` into a uint32, so ``TIMELINE_HISTORY 4294967296`` is
  "invalid timeline 0").
* Every grammar error is 42601 with the bare message ``syntax error`` (no "at or near",
  no position); an unterminated quote gives ``unterminated quoted string``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar, Final, Literal

from pgwire_mock.server.errors import ServerError

__all__ = [
    "COMMAND_KEYWORDS",
    "KEYWORDS",
    "NAMEDATALEN",
    "AlterReplicationSlot",
    "BaseBackup",
    "Command",
    "CreateReplicationSlot",
    "DropReplicationSlot",
    "GenericOption",
    "IdentifySystem",
    "PluginOption",
    "ReadReplicationSlot",
    "ReplicationCommand",
    "Show",
    "SqlCommand",
    "StartLogicalReplication",
    "StartPhysicalReplication",
    "TimelineHistory",
    "UploadManifest",
    "format_lsn",
    "parse_command",
    "quote_identifier",
    "quote_literal",
]

NAMEDATALEN: Final = 64
"""Identifiers keep at most NAMEDATALEN - 1 bytes (``truncate_identifier``)."""

_KEYWORDS_ALL: Final = frozenset(
    {
        "BASE_BACKUP",
        "CREATE_REPLICATION_SLOT",
        "DROP_REPLICATION_SLOT",
        "EXPORT_SNAPSHOT",
        "IDENTIFY_SYSTEM",
        "LOGICAL",
        "NOEXPORT_SNAPSHOT",
        "PHYSICAL",
        "RESERVE_WAL",
        "SHOW",
        "SLOT",
        "START_REPLICATION",
        "TEMPORARY",
        "TIMELINE",
        "TIMELINE_HISTORY",
        "USE_SNAPSHOT",
        "WAIT",
    }
)
# PG14 still had the old BASE_BACKUP words; PG15 replaced them with a generic option
# list and added READ_REPLICATION_SLOT and TWO_PHASE; PG17 added ALTER_REPLICATION_SLOT
# and UPLOAD_MANIFEST. Checked with "SHOW <word>" on each server: a keyword gives a
# syntax error, an identifier "unrecognized configuration parameter".
_BASE_BACKUP_14: Final = frozenset(
    {
        "FAST",
        "LABEL",
        "MANIFEST",
        "MANIFEST_CHECKSUMS",
        "MAX_RATE",
        "NOVERIFY_CHECKSUMS",
        "NOWAIT",
        "PROGRESS",
        "TABLESPACE_MAP",
        "WAL",
    }
)
KEYWORDS: Final[dict[int, frozenset[str]]] = {
    14: _KEYWORDS_ALL | _BASE_BACKUP_14,
    15: _KEYWORDS_ALL | {"READ_REPLICATION_SLOT", "TWO_PHASE"},
    16: _KEYWORDS_ALL | {"READ_REPLICATION_SLOT", "TWO_PHASE"},
    17: _KEYWORDS_ALL
    | {"READ_REPLICATION_SLOT", "TWO_PHASE", "ALTER_REPLICATION_SLOT", "UPLOAD_MANIFEST"},
    18: _KEYWORDS_ALL
    | {"READ_REPLICATION_SLOT", "TWO_PHASE", "ALTER_REPLICATION_SLOT", "UPLOAD_MANIFEST"},
}
"""Every word the replication scanner turns into a keyword token, per major."""

_COMMANDS_ALL: Final = frozenset(
    {
        "BASE_BACKUP",
        "CREATE_REPLICATION_SLOT",
        "DROP_REPLICATION_SLOT",
        "IDENTIFY_SYSTEM",
        "SHOW",
        "START_REPLICATION",
        "TIMELINE_HISTORY",
    }
)
COMMAND_KEYWORDS: Final[dict[int, frozenset[str]]] = {
    14: _COMMANDS_ALL,
    15: _COMMANDS_ALL | {"READ_REPLICATION_SLOT"},
    16: _COMMANDS_ALL | {"READ_REPLICATION_SLOT"},
    17: _COMMANDS_ALL | {"READ_REPLICATION_SLOT", "ALTER_REPLICATION_SLOT", "UPLOAD_MANIFEST"},
    18: _COMMANDS_ALL | {"READ_REPLICATION_SLOT", "ALTER_REPLICATION_SLOT", "UPLOAD_MANIFEST"},
}
"""First words that make a Query a replication command (see
``replication_scanner_is_replication_command`` in repl_scanner.l)."""

# Line of replication_yyerror() in repl_scanner.l, and of the "invalid timeline" checks
# in repl_gram.y (TIMELINE_HISTORY, then START_REPLICATION ... TIMELINE), per major, as
# the F/L/R fields of the real servers' ErrorResponse show them.
_YYERROR_LINE: Final = {14: 246, 15: 239, 16: 249, 17: 251, 18: 265}
_TIMELINE_HISTORY_LINE: Final = {14: 345, 15: 303, 16: 301, 17: 318, 18: 322}
_OPT_TIMELINE_LINE: Final = {14: 377, 15: 335, 16: 333, 17: 359, 18: 363}
_TRUNCATE_LINE: Final = 102  # scansup.c, the same on 14–17

_ULONG_MAX: Final = (1 << 64) - 1
_UINT32_MASK: Final = 0xFFFFFFFF


def _syntax_error(major: int, message: str = "syntax error") -> ServerError:
    return ServerError(
        "ERROR",
        "42601",
        message,
        file="repl_scanner.l",
        line=_YYERROR_LINE[major],
        routine="replication_yyerror",
    )


def _invalid_timeline(major: int, value: int, lines: dict[int, int]) -> ServerError:
    return ServerError(
        "ERROR",
        "42601",
        f"invalid timeline {value}",
        file="repl_gram.y",
        line=lines[major],
        routine="replication_yyparse",
    )


# --- commands -------------------------------------------------------------------------


def quote_identifier(name: str) -> str:
    """Double-quote a name for the replication scanner (which has no ``""`` escape)."""
    if '"' in name:
        raise ValueError(f"the replication grammar cannot express a name containing '\"': {name!r}")
    return f'"{name}"'


def parse_bool(text: str) -> bool | None:
    """``parse_bool`` (bool.c): any unique prefix of true/false/yes/no, on/off, 1/0."""
    word = text.strip().lower()
    if not word:
        return None
    if "true".startswith(word) or "yes".startswith(word) or word in ("on", "1"):
        return True
    if "false".startswith(word) or "no".startswith(word) or word in ("off", "of", "0"):
        return False
    return None


def quote_literal(value: str) -> str:
    """Single-quote a string, doubling embedded quotes."""
    return "'" + value.replace("'", "''") + "'"


def format_lsn(lsn: int) -> str:
    """An LSN as PostgreSQL prints it: ``%X/%X``."""
    return f"{lsn >> 32:X}/{lsn & _UINT32_MASK:X}"


@dataclass(frozen=True, slots=True)
class GenericOption:
    """One ``name [value]`` of a parenthesised option list (a DefElem).

    ``value`` is a ``str`` for a quoted string or a bare word, an ``int`` for an unsigned
    number, ``None`` when absent, and ``True`` only for the legacy words that the grammar
    turns into ``makeBoolean(true)`` (``RESERVE_WAL``, ``TWO_PHASE``, PG14 BASE_BACKUP words).
    """

    name: str
    value: str | int | None = None

    def render(self) -> str:
        text = quote_identifier(self.name)
        if isinstance(self.value, bool):
            raise ValueError("legacy Boolean options have no generic spelling")
        if isinstance(self.value, int):
            return f"{text} {self.value}"
        if isinstance(self.value, str):
            return f"{text} {quote_literal(self.value)}"
        return text


@dataclass(frozen=True, slots=True)
class PluginOption:
    """One ``"name" ['value']`` of START_REPLICATION ... LOGICAL's option list."""

    name: str
    value: str | None = None

    def render(self) -> str:
        text = quote_identifier(self.name)
        return text if self.value is None else f"{text} {quote_literal(self.value)}"


@dataclass(frozen=True, slots=True)
class IdentifySystem:
    TAG: ClassVar[str] = "IDENTIFY_SYSTEM"

    def render(self, major: int) -> str:
        return "IDENTIFY_SYSTEM"


@dataclass(frozen=True, slots=True)
class Show:
    """``SHOW name``; dotted names (``a.b``) are joined as the grammar does."""

    TAG: ClassVar[str] = "SHOW"
    name: str

    def render(self, major: int) -> str:
        return "SHOW " + ".".join(quote_identifier(part) for part in self.name.split("."))


_LEGACY_WORD: Final[dict[tuple[str, str | int | None], str]] = {
    ("snapshot", "export"): "EXPORT_SNAPSHOT",
    ("snapshot", "nothing"): "NOEXPORT_SNAPSHOT",
    ("snapshot", "use"): "USE_SNAPSHOT",
    ("reserve_wal", True): "RESERVE_WAL",
    ("two_phase", True): "TWO_PHASE",
}
_LEGACY_OPTION: Final = {word: GenericOption(*key) for key, word in _LEGACY_WORD.items()}


@dataclass(frozen=True, slots=True)
class CreateReplicationSlot:
    """``CREATE_REPLICATION_SLOT name [TEMPORARY] {PHYSICAL | LOGICAL plugin} [options]``.

    Legacy words become the options PG15+ makes of them (``NOEXPORT_SNAPSHOT`` is
    ``snapshot 'nothing'``), so both spellings mean the same to the executor;
    ``legacy_syntax`` only says how the client wrote them.
    """

    TAG: ClassVar[str] = "CREATE_REPLICATION_SLOT"
    slot_name: str
    kind: Literal["physical", "logical"]
    plugin: str | None = None
    temporary: bool = False
    options: tuple[GenericOption, ...] = ()
    legacy_syntax: bool = True

    def render(self, major: int) -> str:
        parts = ["CREATE_REPLICATION_SLOT", quote_identifier(self.slot_name)]
        if self.temporary:
            parts.append("TEMPORARY")
        if self.kind == "physical":
            parts.append("PHYSICAL")
        else:
            parts += ["LOGICAL", quote_identifier(self.plugin or "")]
        if self.legacy_syntax:
            parts += [_LEGACY_WORD[(o.name, o.value)] for o in self.options]
        else:
            parts.append("(" + ", ".join(o.render() for o in self.options) + ")")
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class DropReplicationSlot:
    TAG: ClassVar[str] = "DROP_REPLICATION_SLOT"
    slot_name: str
    wait: bool = False

    def render(self, major: int) -> str:
        text = "DROP_REPLICATION_SLOT " + quote_identifier(self.slot_name)
        return text + " WAIT" if self.wait else text


@dataclass(frozen=True, slots=True)
class ReadReplicationSlot:
    """``READ_REPLICATION_SLOT name`` (15+); the name may be dotted like SHOW's."""

    TAG: ClassVar[str] = "READ_REPLICATION_SLOT"
    slot_name: str

    def render(self, major: int) -> str:
        parts = self.slot_name.split(".")
        return "READ_REPLICATION_SLOT " + ".".join(quote_identifier(p) for p in parts)


@dataclass(frozen=True, slots=True)
class AlterReplicationSlot:
    """``ALTER_REPLICATION_SLOT name ( option [value] [, ...] )`` (17)."""

    TAG: ClassVar[str] = "ALTER_REPLICATION_SLOT"
    slot_name: str
    options: tuple[GenericOption, ...]

    def render(self, major: int) -> str:
        opts = ", ".join(o.render() for o in self.options)
        return f"ALTER_REPLICATION_SLOT {quote_identifier(self.slot_name)} ({opts})"


@dataclass(frozen=True, slots=True)
class StartPhysicalReplication:
    """``START_REPLICATION [SLOT name] [PHYSICAL] X/X [TIMELINE n]``; timeline 0 = not given."""

    TAG: ClassVar[str] = "START_REPLICATION"
    start_lsn: int
    slot_name: str | None = None
    timeline: int = 0

    def render(self, major: int) -> str:
        parts = ["START_REPLICATION"]
        if self.slot_name is not None:
            parts += ["SLOT", quote_identifier(self.slot_name)]
        parts += ["PHYSICAL", format_lsn(self.start_lsn)]
        if self.timeline:
            parts += ["TIMELINE", str(self.timeline)]
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class StartLogicalReplication:
    """``START_REPLICATION SLOT name LOGICAL X/X [( "opt" ['value'], ... )]``."""

    TAG: ClassVar[str] = "START_REPLICATION"
    slot_name: str
    start_lsn: int
    options: tuple[PluginOption, ...] = ()

    def render(self, major: int) -> str:
        text = (
            f"START_REPLICATION SLOT {quote_identifier(self.slot_name)} LOGICAL "
            f"{format_lsn(self.start_lsn)}"
        )
        if self.options:
            text += " (" + ", ".join(o.render() for o in self.options) + ")"
        return text


@dataclass(frozen=True, slots=True)
class TimelineHistory:
    TAG: ClassVar[str] = "TIMELINE_HISTORY"
    timeline: int

    def render(self, major: int) -> str:
        return f"TIMELINE_HISTORY {self.timeline}"


_BASE_BACKUP_14_WORDS: Final = {
    "LABEL": "string",
    "PROGRESS": "flag",
    "FAST": "flag",
    "WAL": "flag",
    "NOWAIT": "flag",
    "MAX_RATE": "number",
    "TABLESPACE_MAP": "flag",
    "NOVERIFY_CHECKSUMS": "flag",
    "MANIFEST": "string",
    "MANIFEST_CHECKSUMS": "string",
}


@dataclass(frozen=True, slots=True)
class BaseBackup:
    """``BASE_BACKUP`` with its options: PG14's words (``LABEL 'x' FAST``, flags as
    ``True``) or PG15+'s ``( option [value], ... )``. Recognised so the server can
    refuse it properly; the fake does not take base backups."""

    TAG: ClassVar[str] = "BASE_BACKUP"
    options: tuple[GenericOption, ...] = ()

    def render(self, major: int) -> str:
        if not self.options:
            return "BASE_BACKUP"
        if major == 14:
            parts = ["BASE_BACKUP"]
            for option in self.options:
                parts.append(option.name.upper())
                if isinstance(option.value, bool):
                    continue
                if isinstance(option.value, int):
                    parts.append(str(option.value))
                elif isinstance(option.value, str):
                    parts.append(quote_literal(option.value))
            return " ".join(parts)
        return "BASE_BACKUP (" + ", ".join(o.render() for o in self.options) + ")"


@dataclass(frozen=True, slots=True)
class UploadManifest:
    """``UPLOAD_MANIFEST`` (17, incremental backup)."""

    TAG: ClassVar[str] = "UPLOAD_MANIFEST"

    def render(self, major: int) -> str:
        return "UPLOAD_MANIFEST"


@dataclass(frozen=True, slots=True)
class SqlCommand:
    """Text that is not a replication command: the SQL layer handles it (and its errors)."""

    text: str

    def render(self, major: int) -> str:
        return self.text


ReplicationCommand = (
    IdentifySystem
    | Show
    | CreateReplicationSlot
    | DropReplicationSlot
    | ReadReplicationSlot
    | AlterReplicationSlot
    | StartPhysicalReplication
    | StartLogicalReplication
    | TimelineHistory
    | BaseBackup
    | UploadManifest
)
Command = ReplicationCommand | SqlCommand


# --- scanner --------------------------------------------------------------------------

TokenKind = Literal["KEYWORD", "IDENT", "SCONST", "UCONST", "RECPTR", "CHAR", "EOF"]

_IDENT_RE: Final = re.compile(r"[A-Za-z_\u0080-\U0010ffff][A-Za-z_0-9$\u0080-\U0010ffff]*")
_RECPTR_RE: Final = re.compile(r"([0-9A-Fa-f]+)/([0-9A-Fa-f]+)")
_UCONST_RE: Final = re.compile(r"[0-9]+")
_WHITESPACE: Final = {
    14: " \t\n\r\f",
    15: " \t\n\r\f",
    16: " \t\n\r\f",
    17: " \t\n\r\f\v",
    18: " \t\n\r\f\v",
}


@dataclass(frozen=True, slots=True)
class _Token:
    kind: TokenKind
    value: str | int
    text: str


def _wrap_uint32(digits: str, base: int) -> int:
    """What C's ``strtoul`` stored into a 32-bit unsigned variable gives for ``digits``."""
    return min(int(digits, base), _ULONG_MAX) & _UINT32_MASK


def _truncate(name: str, major: int, notices: list[ServerError]) -> str:
    """``truncate_identifier``: at most 63 bytes, cut on a character boundary, with a NOTICE."""
    encoded = name.encode("utf-8")
    if len(encoded) < NAMEDATALEN:
        return name
    cut = encoded[: NAMEDATALEN - 1].decode("utf-8", errors="ignore")
    notices.append(
        ServerError(
            "NOTICE",
            "42622",
            f'identifier "{name}" will be truncated to "{cut}"',
            file="scansup.c",
            line=_TRUNCATE_LINE,
            routine="truncate_identifier",
        )
    )
    return cut


def _downcase(name: str) -> str:
    # downcase_identifier only folds ASCII letters in a multibyte (UTF8) database.
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in name)


def _scan(text: str, major: int, notices: list[ServerError]) -> Iterator[_Token]:
    """Tokens one at a time, as flex hands them to bison (errors surface lazily)."""
    keywords = KEYWORDS[major]
    whitespace = _WHITESPACE[major]
    pos = 0
    end = len(text)
    while True:
        while pos < end and text[pos] in whitespace:
            pos += 1
        if pos >= end:
            yield _Token("EOF", "", "")
            return
        ch = text[pos]
        if ch in "'\"":
            out: list[str] = []
            i = pos + 1
            while True:
                close = text.find(ch, i)
                if close < 0:
                    raise _syntax_error(major, "unterminated quoted string")
                out.append(text[i:close])
                # Only string literals know the doubled-quote escape (no xddouble rule).
                if ch == "'" and text.startswith("''", close):
                    out.append("'")
                    i = close + 2
                    continue
                break
            raw = "".join(out)
            token_text = text[pos : close + 1]
            pos = close + 1
            if ch == "'":
                yield _Token("SCONST", raw, token_text)
            else:
                yield _Token("IDENT", _truncate(raw, major, notices), token_text)
            continue
        # flex takes the longest match; a keyword wins a tie with an identifier.
        candidates: list[tuple[int, TokenKind]] = []
        recptr = _RECPTR_RE.match(text, pos)
        if recptr:
            candidates.append((recptr.end(), "RECPTR"))
        number = _UCONST_RE.match(text, pos)
        if number:
            candidates.append((number.end(), "UCONST"))
        ident = _IDENT_RE.match(text, pos)
        if ident:
            candidates.append((ident.end(), "IDENT"))
        if not candidates:
            pos += 1
            yield _Token("CHAR", ch, ch)
            continue
        stop, kind = max(candidates, key=lambda c: c[0])
        word = text[pos:stop]
        pos = stop
        if kind == "RECPTR":
            assert recptr is not None
            hi = _wrap_uint32(recptr.group(1), 16)
            lo = _wrap_uint32(recptr.group(2), 16)
            yield _Token("RECPTR", hi << 32 | lo, word)
        elif kind == "UCONST":
            yield _Token("UCONST", _wrap_uint32(word, 10), word)
        elif word in keywords:
            yield _Token("KEYWORD", word, word)
        else:
            yield _Token("IDENT", _truncate(_downcase(word), major, notices), word)


# --- parser ---------------------------------------------------------------------------


class _Parser:
    def __init__(self, tokens: Iterator[_Token], major: int) -> None:
        self._tokens = tokens
        self._major = major
        self._peeked: _Token | None = None

    def peek(self) -> _Token:
        if self._peeked is None:
            self._peeked = next(self._tokens)
        return self._peeked

    def take(self) -> _Token:
        token = self.peek()
        self._peeked = None
        return token

    def error(self) -> ServerError:
        return _syntax_error(self._major)

    def at_keyword(self, *words: str) -> bool:
        token = self.peek()
        return token.kind == "KEYWORD" and token.value in words

    def at_char(self, ch: str) -> bool:
        token = self.peek()
        return token.kind == "CHAR" and token.value == ch

    def keyword(self, word: str) -> None:
        if not self.at_keyword(word):
            raise self.error()
        self.take()

    def char(self, ch: str) -> None:
        if not self.at_char(ch):
            raise self.error()
        self.take()

    def ident(self) -> str:
        token = self.take()
        if token.kind != "IDENT":
            raise self.error()
        assert isinstance(token.value, str)
        return token.value

    def uconst(self) -> int:
        token = self.take()
        if token.kind != "UCONST":
            raise self.error()
        assert isinstance(token.value, int)
        return token.value

    def recptr(self) -> int:
        token = self.take()
        if token.kind != "RECPTR":
            raise self.error()
        assert isinstance(token.value, int)
        return token.value

    def sconst(self) -> str:
        token = self.take()
        if token.kind != "SCONST":
            raise self.error()
        assert isinstance(token.value, str)
        return token.value

    # firstcmd: command opt_semicolon
    def firstcmd(self) -> ReplicationCommand:
        command = self.command()
        if self.at_char(";"):
            self.take()
        if self.peek().kind != "EOF":
            raise self.error()
        return command

    def command(self) -> ReplicationCommand:
        word = self.take().value
        if word == "IDENTIFY_SYSTEM":
            return IdentifySystem()
        if word == "SHOW":
            return Show(self.var_name())
        if word == "READ_REPLICATION_SLOT":
            return ReadReplicationSlot(self.var_name())
        if word == "CREATE_REPLICATION_SLOT":
            return self.create_replication_slot()
        if word == "DROP_REPLICATION_SLOT":
            name = self.ident()
            wait = self.at_keyword("WAIT")
            if wait:
                self.take()
            return DropReplicationSlot(name, wait)
        if word == "ALTER_REPLICATION_SLOT":
            name = self.ident()
            self.char("(")
            options = self.generic_option_list()
            self.char(")")
            return AlterReplicationSlot(name, options)
        if word == "START_REPLICATION":
            return self.start_replication()
        if word == "TIMELINE_HISTORY":
            timeline = self.uconst()
            if timeline == 0:
                raise _invalid_timeline(self._major, timeline, _TIMELINE_HISTORY_LINE)
            return TimelineHistory(timeline)
        if word == "BASE_BACKUP":
            return self.base_backup()
        if word == "UPLOAD_MANIFEST":
            return UploadManifest()
        raise self.error()  # pragma: no cover - parse_command checks the first word

    def var_name(self) -> str:
        parts = [self.ident()]
        while self.at_char("."):
            self.take()
            parts.append(self.ident())
        return ".".join(parts)

    def create_replication_slot(self) -> CreateReplicationSlot:
        name = self.ident()
        temporary = self.at_keyword("TEMPORARY")
        if temporary:
            self.take()
        plugin: str | None = None
        kind: Literal["physical", "logical"]
        if self.at_keyword("PHYSICAL"):
            self.take()
            kind = "physical"
        elif self.at_keyword("LOGICAL"):
            self.take()
            kind = "logical"
            plugin = self.ident()
        else:
            raise self.error()
        if self._major >= 15 and self.at_char("("):
            self.take()
            options = self.generic_option_list()
            self.char(")")
            return CreateReplicationSlot(name, kind, plugin, temporary, options, False)
        legacy: list[GenericOption] = []
        allowed = {"EXPORT_SNAPSHOT", "NOEXPORT_SNAPSHOT", "USE_SNAPSHOT", "RESERVE_WAL"}
        if self._major >= 15:
            allowed.add("TWO_PHASE")
        while self.peek().kind == "KEYWORD" and self.peek().value in allowed:
            legacy.append(_LEGACY_OPTION[str(self.take().value)])
        return CreateReplicationSlot(name, kind, plugin, temporary, tuple(legacy), True)

    def generic_option_list(self) -> tuple[GenericOption, ...]:
        options = [self.generic_option()]
        while self.at_char(","):
            self.take()
            options.append(self.generic_option())
        return tuple(options)

    def generic_option(self) -> GenericOption:
        token = self.take()
        if token.kind == "IDENT":
            assert isinstance(token.value, str)
            name = token.value
        elif token.kind == "KEYWORD" and token.value != "READ_REPLICATION_SLOT":
            # ident_or_keyword lists every keyword but READ_REPLICATION_SLOT.
            name = str(token.value).lower()
        else:
            raise self.error()
        value = self.peek()
        if value.kind in ("IDENT", "SCONST", "UCONST"):
            self.take()
            return GenericOption(name, value.value)
        return GenericOption(name)

    def start_replication(self) -> StartPhysicalReplication | StartLogicalReplication:
        slot: str | None = None
        if self.at_keyword("SLOT"):
            self.take()
            slot = self.ident()
            if self.at_keyword("LOGICAL"):
                self.take()
                lsn = self.recptr()
                return StartLogicalReplication(slot, lsn, self.plugin_options())
        if self.at_keyword("PHYSICAL"):
            self.take()
        lsn = self.recptr()
        timeline = 0
        if self.at_keyword("TIMELINE"):
            self.take()
            timeline = self.uconst()
            if timeline == 0:
                raise _invalid_timeline(self._major, timeline, _OPT_TIMELINE_LINE)
        return StartPhysicalReplication(lsn, slot, timeline)

    def plugin_options(self) -> tuple[PluginOption, ...]:
        if not self.at_char("("):
            return ()
        self.take()
        options = [self.plugin_option()]
        while self.at_char(","):
            self.take()
            options.append(self.plugin_option())
        self.char(")")
        return tuple(options)

    def plugin_option(self) -> PluginOption:
        name = self.ident()
        if self.peek().kind == "SCONST":
            return PluginOption(name, self.sconst())
        return PluginOption(name)

    def base_backup(self) -> BaseBackup:
        if self._major >= 15:
            if not self.at_char("("):
                return BaseBackup()
            self.take()
            options = self.generic_option_list()
            self.char(")")
            return BaseBackup(options)
        legacy: list[GenericOption] = []
        while self.peek().kind == "KEYWORD" and self.peek().value in _BASE_BACKUP_14_WORDS:
            word = str(self.take().value)
            shape = _BASE_BACKUP_14_WORDS[word]
            if shape == "string":
                legacy.append(GenericOption(word.lower(), self.sconst()))
            elif shape == "number":
                legacy.append(GenericOption(word.lower(), self.uconst()))
            else:
                legacy.append(GenericOption(word.lower(), True))
        return BaseBackup(tuple(legacy))


def parse_command(text: str, major: int, notices: list[ServerError] | None = None) -> Command:
    """Parse one simple Query received on a replication connection of server ``major``.

    Returns a replication command, or :class:`SqlCommand` when the first token is not a
    replication command keyword. Raises :class:`ServerError` (42601, with the real
    server's F/L/R) when the text starts like a replication command but does not parse.
    NOTICEs the scanner raises (identifier truncation, 42622) are appended to ``notices``.
    """
    if major not in KEYWORDS:
        raise ValueError(f"unsupported PostgreSQL major version: {major}")
    found: list[ServerError] = []
    tokens = _scan(text, major, found)
    first = next(tokens)
    if first.kind != "KEYWORD" or first.value not in COMMAND_KEYWORDS[major]:
        # The SQL scanner starts over and reports its own problems.
        return SqlCommand(text)
    command = _Parser(_chain(first, tokens), major).firstcmd()
    if notices is not None:
        notices.extend(found)
    return command


def _chain(first: _Token, rest: Iterator[_Token]) -> Iterator[_Token]:
    yield first
    yield from rest
