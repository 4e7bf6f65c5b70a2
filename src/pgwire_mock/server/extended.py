"""The extended query protocol of a plain (non-replication) connection.

Parse, Bind, Describe, Execute and Close, as ``postgres.c`` (``exec_parse_message``,
``exec_bind_message``, ``exec_describe_*_message``, ``exec_execute_message``) and
``portalmem.c`` answer them, on top of the session's SQL answers:

* A statement's parameters (``$1`` …) are substituted into its text as literals before
  the SQL layer sees it, the way pgjdbc's simple query mode inlines them: NULL, a quoted
  literal for unknown (0), text and varchar parameters, ``('v'::type)`` for the others.
  Binary parameters are read with the codec's typreceive (:func:`codec.values.decode_binary`)
  and written back with its typoutput; integer text parameters are checked as the
  server's input functions check them.
* A parameter whose type Parse leaves unspecified takes the type the text gives it
  (``$1::type``, ``CAST($1 AS type)``; ``LIKE $1`` is text). The fake has no parse
  analysis beyond that: Describe of such a statement is refused with 0A000 naming the
  parameter rather than answered with a guessed type.
* A row-returning statement (SELECT, VALUES, TABLE, WITH, SHOW) is run when it is bound,
  so the portal holds its rows (PostgreSQL takes the statement's snapshot there too) and
  Bind can check the result format count against the columns; Execute hands the rows out
  ``max_rows`` at a time with PortalSuspended between, and a portal run to its end
  answers ``SELECT 0`` when executed again. Any other statement runs at Execute; a
  second Execute of it is 55000 "portal cannot be run".
* Describe of a statement runs it once, without lasting effects, to learn its columns
  (with stand-in parameter values when it has parameters); Describe of a portal reports
  its columns in the formats Bind asked for.
* Portals end with the transaction: at Sync outside a transaction block, at COMMIT or
  ROLLBACK, after an error. A simple Query drops the unnamed statement and portal.

Errors are raised as :class:`ServerError`; the session sends them and skips to Sync.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from codec import DecodeError, EncodeError
from codec.values import TYPES, decode_binary, decode_text, encode_binary, encode_text
from codec.values import type_by_name as _type_by_name
from codec.wire import (
    Bind,
    BindComplete,
    Close,
    CloseComplete,
    CommandComplete,
    DataRow,
    Describe,
    EmptyQueryResponse,
    Execute,
    FieldDescription,
    NoData,
    ParameterDescription,
    Parse,
    ParseComplete,
    PortalSuspended,
    RowDescription,
)
from pgwire_mock.server.catalog import CopyOut
from pgwire_mock.server.errors import ServerError
from pgwire_mock.server.grammar import format_lsn
from pgwire_mock.server.sql_result import Column, Result
from pgwire_mock.server.sql_text import check_syntax, skip_quoted, split_statements

__all__ = ["ExtendedQuery", "Host"]

_ROW_STARTS: Final = frozenset(["select", "values", "table", "with", "show"])
_EXIT_STARTS: Final = frozenset(["commit", "end", "rollback", "abort"])
_ABORTED: Final = "current transaction is aborted, commands ignored until end of transaction block"
_UNQUOTED: Final = frozenset([0, 25, 1043])  # unknown, text, varchar: inlined bare
# The SQL names of integer input functions' error messages (int.c, int8.c, oid.c).
_INTEGERS: Final = {
    21: ("smallint", -(1 << 15), (1 << 15) - 1),
    23: ("integer", -(1 << 31), (1 << 31) - 1),
    20: ("bigint", -(1 << 63), (1 << 63) - 1),
    26: ("oid", -(1 << 31), (1 << 32) - 1),
}


def _parse_lsn(text: str) -> int:
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


# Types the codec does not convert but the fake's answers use: binary send of each.
_UINT32: Final = struct.Struct("!I")
_UINT64: Final = struct.Struct("!Q")
_EXTRA_BINARY: Final[dict[int, Callable[[str], bytes]]] = {
    28: lambda text: _UINT32.pack(int(text)),  # xid
    5069: lambda text: _UINT64.pack(int(text)),  # xid8
    3220: lambda text: _UINT64.pack(_parse_lsn(text)),  # pg_lsn
}
_EXTRA_RECEIVE: Final[dict[int, Callable[[bytes], str]]] = {
    28: lambda data: str(_UINT32.unpack(data)[0]),
    5069: lambda data: str(_UINT64.unpack(data)[0]),
    3220: lambda data: format_lsn(_UINT64.unpack(data)[0]),
}
_EXTRA_NAMES: Final = {28: "xid", 5069: "xid8", 3220: "pg_lsn"}
# typlen of the fixed-size types a client may send in binary (pg_type.dat).
_FIXED_SIZE: Final = {
    16: 1,
    18: 1,
    20: 8,
    21: 2,
    23: 4,
    26: 4,
    28: 4,
    700: 4,
    701: 8,
    829: 6,
    1082: 4,
    1083: 8,
    1114: 8,
    1184: 8,
    1186: 16,
    1266: 12,
    2950: 16,
    3220: 8,
    5069: 8,
}


def _first_word(text: str) -> str:
    words = text.split(None, 1)
    return words[0].lower().lstrip("(") if words else ""


def _placeholders(text: str) -> list[tuple[int, int, int]]:
    """(start, end, number) of each ``$n`` outside quotes, identifiers and comments."""
    found: list[tuple[int, int, int]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        after = skip_quoted(text, i)
        if after is not None:
            i = after
            continue
        if ch == "$" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r"\$([0-9]+)", text[i:])
            if m is not None:
                found.append((i, i + m.end(), int(m.group(1))))
                i += m.end()
                continue
        i += 1
    return found


def _type_oid(name: str) -> int | None:
    lowered = name.lower()
    for oid, extra in _EXTRA_NAMES.items():
        if lowered == extra:
            return oid
    try:
        return _type_by_name(lowered).oid
    except KeyError:
        return None


def _cast_type(after: str) -> int | None:
    """The type named at the start of ``after`` (the longest run of words that is one)."""
    words = re.findall(r'"?[A-Za-z_][A-Za-z0-9_]*"?(?:\[\])?', after[:80])
    for count in range(min(len(words), 4), 0, -1):
        oid = _type_oid(" ".join(w.strip('"') for w in words[:count]))
        if oid is not None:
            return oid
    return None


def _infer(text: str, number: int) -> int:
    """The type the text gives ``$number`` (0: the fake cannot tell)."""
    n = str(number)
    for pattern in (r"\$" + n + r"(?![0-9])\s*::\s*", r"CAST\s*\(\s*\$" + n + r"\s+AS\s+"):
        for m in re.finditer(pattern, text, re.I):
            oid = _cast_type(text[m.end() :])
            if oid is not None:
                return oid
    if re.search(r"\bI?LIKE\s+\$" + n + r"(?![0-9])", text, re.I):
        return 25  # name/text LIKE unknown resolves to text
    return 0


def _literal(value: str | None, oid: int) -> str:
    if value is None:
        return "NULL"
    quoted = "'" + value.replace("'", "''") + "'"
    if oid in _UNQUOTED:
        return quoted
    info = TYPES.get(oid)
    name = info.name if info is not None else _EXTRA_NAMES.get(oid)
    return quoted if name is None else f"({quoted}::{name})"


def _check_integer(oid: int, text: str, index: int) -> None:
    name, low, high = _INTEGERS[oid]
    stripped = text.strip()
    if not re.fullmatch(r"[+-]?[0-9]+", stripped):
        raise ServerError("ERROR", "22P02", f'invalid input syntax for type {name}: "{text}"')
    if not low <= int(stripped) <= high:
        raise ServerError("ERROR", "22003", f'value "{text}" is out of range for type {name}')


def _binary_out(oid: int, text: str) -> bytes:
    extra = _EXTRA_BINARY.get(oid)
    try:
        if extra is not None:
            return extra(text)
        if oid in TYPES:
            return encode_binary(oid, decode_text(oid, text))
    except (DecodeError, EncodeError, ValueError, struct.error) as err:
        raise ServerError(
            "ERROR", "XX000", f"pgwire-mock could not send {text!r} in binary: {err}"
        ) from err
    raise ServerError(
        "ERROR",
        "0A000",
        f"pgwire-mock cannot send type OID {oid} in binary format",
        hint="Ask for this column in text format (result format code 0).",
    )


@dataclass(slots=True)
class _Statement:
    text: str
    """The one statement, or "" for an empty query."""
    types: list[int]
    returns_rows: bool


@dataclass(slots=True)
class _Portal:
    name: str
    statement: _Statement
    text: str
    formats: tuple[int, ...]
    result: Result | None = None
    position: int = 0
    done: bool = False
    columns: tuple[Column, ...] | None = field(default=None)


def _formats(codes: tuple[int, ...], count: int) -> tuple[int, ...]:
    if not codes:
        return (0,) * count
    if len(codes) == 1:
        return codes * count
    return codes


@dataclass(frozen=True, slots=True)
class Host:
    """What the session lends for one message (built per call, so the session and its
    statements hold no reference cycle)."""

    run: Callable[[str], Result | CopyOut]
    """Run a statement: notices sent, the transaction status moved on; ServerError."""
    describe: Callable[[str], Result]
    """Run a row-returning statement for its columns only, without lasting effects."""
    send: Callable[..., None]
    send_copy: Callable[[CopyOut], None]
    status: str
    """The transaction status before the message: I, T or E."""


class ExtendedQuery:
    """One plain session's prepared statements and portals."""

    def __init__(self, major: int) -> None:
        self.major = major  # the PostgreSQL release emulated, for its errors
        self.statements: dict[str, _Statement] = {}
        self.portals: dict[str, _Portal] = {}
        self._host: Host | None = None

    # --- lifetime ---------------------------------------------------------------------

    def synced(self, status: str) -> None:
        """Sync ended the batch: outside a transaction block the implicit transaction
        committed (or was rolled back) and its portals with it."""
        if status == "I":
            self.portals.clear()

    def simple_query(self) -> None:
        """A simple Query drops the unnamed statement and the unnamed portal."""
        self.statements.pop("", None)
        self.portals.pop("", None)

    def failed(self, status: str) -> None:
        """An error aborted the transaction: outside a transaction block its portals are
        gone; inside one they stay (executing them is 25P02) until ROLLBACK."""
        if status == "I":
            self.portals.clear()

    def handle(self, message: object, host: Host) -> None:
        self._host = host
        try:
            self._handle(message)
        finally:
            self._host = None

    # The host's parts, for the message being handled.
    def _run(self, text: str) -> Result | CopyOut:
        assert self._host is not None
        return self._host.run(text)

    def _describe(self, text: str) -> Result:
        assert self._host is not None
        return self._host.describe(text)

    def _send(self, *messages: object) -> None:
        assert self._host is not None
        self._host.send(*messages)

    def _send_copy(self, copy: CopyOut) -> None:
        assert self._host is not None
        self._host.send_copy(copy)

    def _status(self) -> str:
        assert self._host is not None
        return self._host.status

    def _handle(self, message: object) -> None:
        if isinstance(message, Parse):
            self._parse(message)
        elif isinstance(message, Bind):
            self._bind(message)
        elif isinstance(message, Describe):
            self._describe_message(message)
        elif isinstance(message, Execute):
            self._execute(message)
        elif isinstance(message, Close):
            if message.target == "S":
                self.statements.pop(message.name, None)
            else:
                self.portals.pop(message.name, None)
            self._send(CloseComplete())
        else:  # pragma: no cover - the session routes only the messages above here
            raise TypeError(type(message).__name__)

    # --- Parse ------------------------------------------------------------------------------

    def _aborted(self, text: str) -> bool:
        return self._status() == "E" and _first_word(text) not in _EXIT_STARTS

    def _parse(self, message: Parse) -> None:
        parts = split_statements(message.query)
        if len(parts) > 1:
            raise ServerError(
                "ERROR", "42601", "cannot insert multiple commands into a prepared statement"
            )
        text = parts[0] if parts else ""
        if text and self._aborted(text):
            raise ServerError("ERROR", "25P02", _ABORTED)
        if message.statement and message.statement in self.statements:
            raise ServerError(
                "ERROR", "42P05", f'prepared statement "{message.statement}" already exists'
            )
        if text:
            check_syntax(text, self.major)
        used = max((number for _, _, number in _placeholders(text)), default=0)
        types = list(message.parameter_type_oids)
        types += [0] * (used - len(types))
        types = [oid or _infer(text, i) for i, oid in enumerate(types, 1)]
        self.statements[message.statement] = _Statement(
            text, types, _first_word(text) in _ROW_STARTS
        )
        self._send(ParseComplete())

    # --- Bind --------------------------------------------------------------------------------

    def _statement(self, name: str) -> _Statement:
        statement = self.statements.get(name)
        if statement is None:
            what = "unnamed prepared statement" if not name else f'prepared statement "{name}"'
            raise ServerError("ERROR", "26000", f"{what} does not exist")
        return statement

    def _bind(self, message: Bind) -> None:
        statement = self._statement(message.statement)
        params = message.parameters
        codes = message.parameter_format_codes
        if len(codes) > 1 and len(codes) != len(params):
            raise ServerError(
                "ERROR",
                "08P01",
                f"bind message has {len(codes)} parameter formats but {len(params)} parameters",
            )
        if len(params) != len(statement.types):
            raise ServerError(
                "ERROR",
                "08P01",
                f"bind message supplies {len(params)} parameters, but prepared statement "
                f'"{message.statement}" requires {len(statement.types)}',
            )
        if (statement.text and self._aborted(statement.text)) or (self._status() == "E" and params):
            raise ServerError("ERROR", "25P02", _ABORTED)
        if message.portal and message.portal in self.portals:
            raise ServerError("ERROR", "42P03", f'cursor "{message.portal}" already exists')
        formats = _formats(codes, len(params))
        values = []
        for index, (value, code) in enumerate(zip(params, formats, strict=True), 1):
            try:
                values.append(self._parameter(index, statement.types[index - 1], value, code))
            except ServerError as err:
                # bind_param_error_callback; the text value is shown as '...' with the
                # default log_parameter_max_length_on_error of 0.
                where = f'portal "{message.portal}"' if message.portal else "unnamed portal"
                shown = " = '...'" if code == 0 and err.sqlstate != "0A000" else ""
                err.context = err.context or f"{where} parameter ${index}{shown}"
                raise
        text = self._substitute(statement, values)
        for code in message.result_format_codes:
            if code not in (0, 1):
                raise ServerError("ERROR", "22023", f"unsupported format code: {code}")
        portal = _Portal(message.portal, statement, text, message.result_format_codes)
        if statement.returns_rows:
            result = self._result(self._run(text))
            portal.result = result
            portal.columns = result.columns
            count = len(result.columns or ())
            if len(portal.formats) > 1 and len(portal.formats) != count:
                raise ServerError(
                    "ERROR",
                    "08P01",
                    f"bind message has {len(portal.formats)} result formats but query has "
                    f"{count} columns",
                )
        self.portals[message.portal] = portal
        self._send(BindComplete())

    def _parameter(self, index: int, oid: int, value: bytes | None, code: int) -> str | None:
        if code not in (0, 1):
            raise ServerError("ERROR", "22023", f"unsupported format code: {code}")
        if value is None:
            return None
        if code == 0:
            try:
                text = value.decode()
            except UnicodeDecodeError as err:
                raise ServerError(
                    "ERROR", "22021", 'invalid byte sequence for encoding "UTF8"'
                ) from err
            if oid in _INTEGERS:
                _check_integer(oid, text, index)
            return text
        size = _FIXED_SIZE.get(oid)
        if size is not None and len(value) < size:
            # pq_getmsgint and friends read past the parameter's bytes.
            raise ServerError("ERROR", "08P01", "insufficient data left in message")
        try:
            extra = _EXTRA_RECEIVE.get(oid)
            if extra is not None:
                return extra(value)
            if oid in TYPES:
                return encode_text(oid, decode_binary(oid, value))
        except (DecodeError, EncodeError, struct.error) as err:
            raise ServerError(
                "ERROR", "22P03", f"incorrect binary data format in bind parameter {index}"
            ) from err
        raise ServerError(
            "ERROR",
            "0A000",
            f"pgwire-mock cannot read bind parameter {index} of type OID {oid} in binary format",
            hint="Send it in text format (parameter format code 0).",
        )

    @staticmethod
    def _substitute(statement: _Statement, values: list[str | None]) -> str:
        text = statement.text
        out: list[str] = []
        last = 0
        for start, end, number in _placeholders(text):
            if not 1 <= number <= len(values):
                raise ServerError(
                    "ERROR", "42P02", f"there is no parameter ${number}", position=start + 1
                )
            out.append(text[last:start])
            out.append(_literal(values[number - 1], statement.types[number - 1]))
            last = end
        out.append(text[last:])
        return "".join(out)

    def _result(self, outcome: Result | CopyOut) -> Result:
        if isinstance(outcome, CopyOut):  # pragma: no cover - COPY does not return rows
            raise ServerError("ERROR", "XX000", "pgwire-mock: COPY where rows were expected")
        return outcome

    # --- Describe ------------------------------------------------------------------------------

    def _describe_message(self, message: Describe) -> None:
        if message.target == "S":
            statement = self._statement(message.name)
            if statement.returns_rows and self._status() == "E":
                raise ServerError("ERROR", "25P02", _ABORTED)
            unknown = [i for i, oid in enumerate(statement.types, 1) if oid == 0]
            if unknown:
                raise ServerError(
                    "ERROR",
                    "0A000",
                    f"pgwire-mock cannot infer the type of parameter ${unknown[0]}",
                    f"Statement: {statement.text[:200]}",
                    "Give the parameter's type in Parse, or cast it ($1::type).",
                )
            columns = self._statement_columns(statement) if statement.returns_rows else None
            self._send(ParameterDescription(tuple(statement.types)))
            self._send_description(columns, ())
            return
        portal = self.portals.get(message.name)
        if portal is None:
            raise ServerError("ERROR", "34000", f'portal "{message.name}" does not exist')
        if portal.statement.returns_rows and self._status() == "E":
            raise ServerError("ERROR", "25P02", _ABORTED)
        self._send_description(portal.columns, portal.formats)

    def _statement_columns(self, statement: _Statement) -> tuple[Column, ...] | None:
        stand_ins = ["0" if oid in _INTEGERS else "" for oid in statement.types]
        text = self._substitute(statement, list(stand_ins))
        try:
            return self._describe(text).columns
        except ServerError:
            if not statement.types:
                raise
        raise ServerError(
            "ERROR",
            "0A000",
            "pgwire-mock cannot describe this statement's columns before its parameters are bound",
            f"Statement: {statement.text[:200]}",
            "Bind the parameters and Describe the portal instead.",
        )

    def _send_description(self, columns: tuple[Column, ...] | None, codes: tuple[int, ...]) -> None:
        if columns is None:
            self._send(NoData())
            return
        formats = _formats(codes, len(columns))
        self._send(
            RowDescription(
                tuple(
                    FieldDescription(
                        c.name, c.table_oid, c.column_number, c.type_oid, c.type_size, c.typmod, f
                    )
                    for c, f in zip(columns, formats, strict=True)
                )
            )
        )

    # --- Execute -------------------------------------------------------------------------------

    def _execute(self, message: Execute) -> None:
        portal = self.portals.get(message.portal)
        if portal is None:
            raise ServerError("ERROR", "34000", f'portal "{message.portal}" does not exist')
        text = portal.statement.text
        if text and self._aborted(text):
            raise ServerError("ERROR", "25P02", _ABORTED)
        if not text:
            self._send(EmptyQueryResponse())
            return
        if portal.result is not None:
            self._send_rows(portal, message.max_rows)
            return
        if portal.done:
            raise ServerError("ERROR", "55000", f'portal "{portal.name}" cannot be run')
        portal.done = True
        outcome = self._run(portal.text)
        if isinstance(outcome, CopyOut):
            self._send_copy(outcome)
            return
        self._send(CommandComplete(outcome.tag))
        if outcome.transaction in ("commit", "rollback"):
            # The transaction ended: its portals (this one too) are gone.
            self.portals.clear()

    def _send_rows(self, portal: _Portal, max_rows: int) -> None:
        result = portal.result
        assert result is not None
        rows = result.rows
        end = len(rows) if max_rows <= 0 else min(len(rows), portal.position + max_rows)
        columns = result.columns or ()
        binary = [f == 1 for f in _formats(portal.formats, len(columns))]
        self._send(
            *(
                DataRow(
                    tuple(
                        None if v is None else _binary_out(c.type_oid, v) if b else v.encode()
                        for v, c, b in zip(row, columns, binary, strict=True)
                    )
                )
                for row in rows[portal.position : end]
            )
        )
        sent = end - portal.position
        portal.position = end
        if max_rows > 0 and sent == max_rows:
            # PortalRunSelect marks the portal at its end only when a fetch comes back
            # short: one that takes exactly the rows left still suspends.
            self._send(PortalSuspended())
            return
        tag = result.tag
        if tag.startswith("SELECT "):
            tag = f"SELECT {sent}"
        self._send(CommandComplete(tag))
