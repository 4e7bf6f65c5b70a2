"""Publication row filters (``CREATE PUBLICATION … FOR TABLE t WHERE (expr)``, 15+).

A script gives a filter as PostgreSQL's ``pg_get_expr`` shows it (what a subscriber's
table sync reads and puts in its ``COPY (SELECT … WHERE …)``), e.g. ``(id > 1)`` or
``((status)::text = 'open'::text)``. This module parses the SQL expressions a row
filter may hold — column references, constants, comparisons, ``AND``/``OR``/``NOT``,
``IS [NOT] NULL``, ``IS [NOT] TRUE/FALSE``, ``[NOT] IN (…)``, ``[NOT] BETWEEN``,
arithmetic and casts — and evaluates them over a row with SQL's three-valued logic: a
row passes only when the filter is true (pgoutput_row_filter_exec_expr), NULL does not.
Text compares byte-wise, as under the C collation. Parsing is one left-to-right pass
over the tokens; nesting is limited, so no input makes it work super-linearly.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Final

__all__ = ["RowFilter", "RowFilterError"]

_TOKEN: Final = re.compile(
    r"\s*(?:"
    r"(?P<number>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)"
    r"|(?P<string>'(?:[^']|'')*')"
    r"|(?P<quoted>\"(?:[^\"]|\"\")+\")"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_$]*)"
    r"|(?P<op>::|<>|!=|<=|>=|[=<>+\-*/%(),.])"
    r")"
)
_MAX_DEPTH: Final = 64
_COMPARE: Final[Mapping[str, Callable[[object, object], bool]]] = {
    "=": lambda a, b: a == b,
    "<>": lambda a, b: a != b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,  # type: ignore[operator]
    "<=": lambda a, b: a <= b,  # type: ignore[operator]
    ">": lambda a, b: a > b,  # type: ignore[operator]
    ">=": lambda a, b: a >= b,  # type: ignore[operator]
}


class RowFilterError(ValueError):
    """A row filter this module cannot read."""


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # number, string, name, word, op, end
    text: str
    at: int


# An expression is a function of the row (column name → value) to a value (None: NULL).
_Expr = Callable[[Mapping[str, object]], object]


class RowFilter:
    """A parsed row filter: :attr:`text` as written, :attr:`columns` it reads,
    :meth:`matches` a row."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.columns: set[str] = set()
        self._tokens = _tokenize(text)
        self._pos = 0
        self._depth = 0
        self._expr = self._or()
        if self._peek().kind != "end":
            raise self._error("unexpected")

    def matches(self, row: Mapping[str, object]) -> bool:
        """True when the filter is true for ``row`` (NULL and false both fail)."""
        try:
            return self._expr(row) is True
        except (TypeError, ArithmeticError, InvalidOperation):
            return False

    # --- the parser --------------------------------------------------------------------

    def _peek(self) -> _Token:
        return self._tokens[self._pos]

    def _take(self) -> _Token:
        token = self._tokens[self._pos]
        self._pos += 1
        return token

    def _keyword(self, *words: str) -> bool:
        token = self._peek()
        if token.kind == "word" and token.text.upper() in words:
            self._pos += 1
            return True
        return False

    def _expect(self, text: str) -> None:
        token = self._take()
        if token.text.upper() != text:
            self._pos -= 1
            raise self._error(f"expected {text!r} at")

    def _error(self, what: str) -> RowFilterError:
        token = self._peek()
        shown = token.text or "the end"
        return RowFilterError(f"row filter {self.text!r}: {what} {shown!r} (offset {token.at})")

    def _nested(self) -> None:
        self._depth += 1
        if self._depth > _MAX_DEPTH:
            raise self._error(f"nested deeper than {_MAX_DEPTH} at")

    def _or(self) -> _Expr:
        left = self._and()
        while self._keyword("OR"):
            right = self._and()
            left = _or(left, right)
        return left

    def _and(self) -> _Expr:
        left = self._not()
        while self._keyword("AND"):
            right = self._not()
            left = _and(left, right)
        return left

    def _not(self) -> _Expr:
        if self._keyword("NOT"):
            self._nested()
            inner = self._not()
            self._depth -= 1
            return lambda row: None if (v := inner(row)) is None else not v
        return self._predicate()

    def _predicate(self) -> _Expr:
        left = self._additive()
        token = self._peek()
        if token.kind == "op" and token.text in _COMPARE:
            self._pos += 1
            compare = _COMPARE[token.text]
            right = self._additive()
            return lambda row: _apply2(compare, left(row), right(row))
        if self._keyword("IS"):
            negate = self._keyword("NOT")
            if self._keyword("NULL"):
                return lambda row: (left(row) is None) != negate
            if self._keyword("TRUE", "FALSE"):
                wanted = self._tokens[self._pos - 1].text.upper() == "TRUE"
                return lambda row: (left(row) is wanted) != negate
            raise self._error("expected NULL, TRUE or FALSE at")
        negate = self._keyword("NOT")
        if self._keyword("IN"):
            self._expect("(")
            items = [self._additive()]
            while self._peek().text == ",":
                self._pos += 1
                items.append(self._additive())
            self._expect(")")
            return lambda row: _negate(_in(left(row), [i(row) for i in items]), negate)
        if self._keyword("BETWEEN"):
            low = self._additive()
            self._expect("AND")
            high = self._additive()
            return lambda row: _negate(_between(left(row), low(row), high(row)), negate)
        if negate:
            raise self._error("expected IN or BETWEEN at")
        return left

    def _additive(self) -> _Expr:
        left = self._multiplicative()
        while self._peek().text in ("+", "-"):
            op = self._take().text
            right = self._multiplicative()
            left = _arith(op, left, right)
        return left

    def _multiplicative(self) -> _Expr:
        left = self._unary()
        while self._peek().text in ("*", "/", "%"):
            op = self._take().text
            right = self._unary()
            left = _arith(op, left, right)
        return left

    def _unary(self) -> _Expr:
        if self._peek().text == "-":
            self._pos += 1
            self._nested()
            inner = self._unary()
            self._depth -= 1
            return lambda row: None if (v := inner(row)) is None else -v  # type: ignore[operator]
        return self._cast(self._primary())

    def _cast(self, expr: _Expr) -> _Expr:
        while self._peek().text == "::":
            self._pos += 1
            name = self._take()
            if name.kind not in ("word", "quoted"):
                raise self._error("expected a type name at")
            words = [name.text.lower()]
            while self._peek().kind == "word" and self._peek().text.lower() in (
                "precision",
                "varying",
                "without",
                "with",
                "time",
                "zone",
            ):
                words.append(self._take().text.lower())
            if self._peek().text == "(":  # a type modifier: varchar(20), numeric(10,2)
                while self._take().text != ")":
                    if self._peek().kind == "end":
                        raise self._error("unclosed type modifier at")
            expr = _casting(" ".join(words), expr)
        return expr

    def _primary(self) -> _Expr:
        token = self._take()
        if token.kind == "number":
            value: object = int(token.text) if token.text.isdigit() else Decimal(token.text)
            return lambda _row: value
        if token.kind == "string":
            text = token.text[1:-1].replace("''", "'")
            return lambda _row: text
        if token.kind == "quoted":
            return self._column(token.text[1:-1].replace('""', '"'))
        if token.kind == "word":
            word = token.text.upper()
            if word in ("TRUE", "FALSE"):
                truth = word == "TRUE"
                return lambda _row: truth
            if word == "NULL":
                return lambda _row: None
            return self._column(token.text.lower())
        if token.text == "(":
            self._nested()
            inner = self._or()
            self._depth -= 1
            self._expect(")")
            return inner
        self._pos -= 1
        raise self._error("unexpected")

    def _column(self, name: str) -> _Expr:
        self.columns.add(name)
        return lambda row: row[name]


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    n = len(text)
    while True:
        while pos < n and text[pos].isspace():
            pos += 1
        if pos >= n:
            tokens.append(_Token("end", "", pos))
            return tokens
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise RowFilterError(f"row filter {text!r}: unexpected {text[pos]!r} (offset {pos})")
        kind = match.lastgroup or "op"
        tokens.append(_Token(kind, match.group(kind), match.start(kind)))
        pos = match.end()


def _apply2(compare: Callable[[object, object], bool], a: object, b: object) -> bool | None:
    if a is None or b is None:
        return None
    return compare(*_comparable(a, b))


def _comparable(a: object, b: object) -> tuple[object, object]:
    """Numbers with numbers; a string literal compared with a number is read as one."""
    if isinstance(a, int | Decimal | float) and isinstance(b, str):
        return a, Decimal(b)
    if isinstance(b, int | Decimal | float) and isinstance(a, str):
        return Decimal(a), b
    return a, b


def _or(left: _Expr, right: _Expr) -> _Expr:
    def run(row: Mapping[str, object]) -> object:
        a, b = left(row), right(row)
        if a is True or b is True:
            return True
        return None if a is None or b is None else False

    return run


def _and(left: _Expr, right: _Expr) -> _Expr:
    def run(row: Mapping[str, object]) -> object:
        a, b = left(row), right(row)
        if a is False or b is False:
            return False
        return None if a is None or b is None else True

    return run


def _negate(value: bool | None, negate: bool) -> bool | None:
    return value if value is None or not negate else not value


def _in(value: object, items: list[object]) -> bool | None:
    if value is None:
        return None
    if any(_apply2(_COMPARE["="], value, item) for item in items if item is not None):
        return True
    return None if any(item is None for item in items) else False


def _between(value: object, low: object, high: object) -> bool | None:
    lower = _apply2(_COMPARE[">="], value, low)
    upper = _apply2(_COMPARE["<="], value, high)
    if lower is False or upper is False:
        return False
    return None if lower is None or upper is None else True


def _arith(op: str, left: _Expr, right: _Expr) -> _Expr:
    def run(row: Mapping[str, object]) -> object:
        a, b = left(row), right(row)
        if a is None or b is None:
            return None
        a, b = _comparable(a, b)
        if op == "+":
            return a + b  # type: ignore[operator]
        if op == "-":
            return a - b  # type: ignore[operator]
        if op == "*":
            return a * b  # type: ignore[operator]
        if op == "/":
            if isinstance(a, int) and isinstance(b, int):
                return int(a / b)  # integer division truncates toward zero
            return a / b  # type: ignore[operator]
        return a % b  # type: ignore[operator]

    return run


_INTEGERS: Final = frozenset({"int2", "int4", "int8", "smallint", "integer", "bigint", "int"})
_NUMERICS: Final = frozenset({"numeric", "decimal", "float4", "float8", "real", "double precision"})
_TEXTS: Final = frozenset({"text", "varchar", "character varying", "bpchar", "character", "name"})


def _casting(type_name: str, expr: _Expr) -> _Expr:
    """A cast to a type the filter's values already are (text to text, a number to a
    number); other casts are refused rather than guessed."""
    if type_name in _TEXTS:
        return lambda row: None if (v := expr(row)) is None else str(v)
    if type_name in _INTEGERS:
        return lambda row: None if (v := expr(row)) is None else int(v)  # type: ignore[call-overload]
    if type_name in _NUMERICS:
        return lambda row: None if (v := expr(row)) is None else Decimal(str(v))
    if type_name in ("bool", "boolean"):
        return expr
    raise RowFilterError(f"row filter: a cast to {type_name} is not supported")
