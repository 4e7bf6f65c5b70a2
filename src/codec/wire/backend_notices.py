"""ErrorResponse and NoticeResponse: the server's errors and notices (marked (B)).

Both carry the same body, a list of one-character field codes and their texts
(PostgreSQL docs, "Error and Notice Message Fields"), so one base class reads and
writes it and :meth:`ErrorResponse.build` lays the fields out in the order PostgreSQL
writes them. They have a module of their own because any phase of a connection can
send them (start-up, a query, COPY, replication), and because the field accessors and
the builder are half the size of all the other backend messages together.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final, Self

from codec._buffer import cstring, need, read_cstring, trailing
from codec.errors import EncodeError
from codec.wire._common import frame

# Field codes in the order elog.c's send_message_to_frontend writes them, so that
# build() produces the same bytes as PostgreSQL.
_FIELD_CODES: Final = {
    "severity": "S",
    "severity_nonlocalized": "V",
    "sqlstate": "C",
    "message": "M",
    "detail": "D",
    "hint": "H",
    "position": "P",
    "internal_position": "p",
    "internal_query": "q",
    "where": "W",
    "schema_name": "s",
    "table_name": "t",
    "column_name": "c",
    "data_type_name": "d",
    "constraint_name": "n",
    "file": "F",
    "line": "L",
    "routine": "R",
}


@dataclass(frozen=True, slots=True)
class _NoticeFields:
    """Shared body of ErrorResponse and NoticeResponse: (code, value) pairs in order.

    Unknown codes are kept as they are, because the docs say clients must ignore field
    types they do not recognise (new ones may be added).
    """

    TAG: ClassVar[bytes]
    _NAME: ClassVar[str]
    fields: tuple[tuple[str, str], ...]

    def get(self, code: str) -> str | None:
        """The value of the first field with this one-character code."""
        for key, value in self.fields:
            if key == code:
                return value
        return None

    @property
    def severity(self) -> str | None:
        """'S': ERROR, FATAL, PANIC, WARNING, NOTICE, ... possibly localized."""
        return self.get("S")

    @property
    def severity_nonlocalized(self) -> str | None:
        """'V': the severity, never localized (PostgreSQL 9.6+)."""
        return self.get("V")

    @property
    def sqlstate(self) -> str | None:
        """'C': the SQLSTATE code."""
        return self.get("C")

    @property
    def message(self) -> str | None:
        """'M': the primary human-readable message."""
        return self.get("M")

    @property
    def detail(self) -> str | None:
        return self.get("D")

    @property
    def hint(self) -> str | None:
        return self.get("H")

    @property
    def position(self) -> str | None:
        """'P': 1-based character index into the query string, as a decimal string."""
        return self.get("P")

    @property
    def internal_position(self) -> str | None:
        return self.get("p")

    @property
    def internal_query(self) -> str | None:
        return self.get("q")

    @property
    def where(self) -> str | None:
        return self.get("W")

    @property
    def schema_name(self) -> str | None:
        return self.get("s")

    @property
    def table_name(self) -> str | None:
        return self.get("t")

    @property
    def column_name(self) -> str | None:
        return self.get("c")

    @property
    def data_type_name(self) -> str | None:
        return self.get("d")

    @property
    def constraint_name(self) -> str | None:
        return self.get("n")

    @property
    def file(self) -> str | None:
        return self.get("F")

    @property
    def line(self) -> str | None:
        return self.get("L")

    @property
    def routine(self) -> str | None:
        return self.get("R")

    @classmethod
    def build(
        cls,
        severity: str,
        sqlstate: str,
        message: str,
        *,
        severity_nonlocalized: str | None = None,
        detail: str | None = None,
        hint: str | None = None,
        position: int | str | None = None,
        internal_position: int | str | None = None,
        internal_query: str | None = None,
        where: str | None = None,
        schema_name: str | None = None,
        table_name: str | None = None,
        column_name: str | None = None,
        data_type_name: str | None = None,
        constraint_name: str | None = None,
        file: str | None = None,
        line: int | str | None = None,
        routine: str | None = None,
    ) -> Self:
        """Fields in PostgreSQL's order; 'V' defaults to ``severity`` as PG 9.6+ sends it."""
        values: dict[str, object] = {
            "severity": severity,
            "severity_nonlocalized": severity
            if severity_nonlocalized is None
            else severity_nonlocalized,
            "sqlstate": sqlstate,
            "message": message,
            "detail": detail,
            "hint": hint,
            "position": position,
            "internal_position": internal_position,
            "internal_query": internal_query,
            "where": where,
            "schema_name": schema_name,
            "table_name": table_name,
            "column_name": column_name,
            "data_type_name": data_type_name,
            "constraint_name": constraint_name,
            "file": file,
            "line": line,
            "routine": routine,
        }
        return cls(
            tuple(
                (code, str(values[name]))
                for name, code in _FIELD_CODES.items()
                if values[name] is not None
            )
        )

    def encode(self) -> bytes:
        out = []
        for code, value in self.fields:
            if len(code) != 1 or not 0 < ord(code) < 256:
                raise EncodeError(f"field code must be one non-NUL Latin-1 character, got {code!r}")
            out.append(code.encode("latin-1"))
            out.append(cstring(value, f"field {code!r}"))
        out.append(b"\0")
        return frame(self.TAG, b"".join(out))

    @classmethod
    def decode_body(cls, body: bytes) -> Self:
        mt = cls._NAME
        pos = 0
        fields: list[tuple[str, str]] = []
        while True:
            need(body, pos, 1, mt, "field code or terminator")
            code = body[pos]
            if code == 0:
                pos += 1
                break
            value, pos = read_cstring(body, pos + 1, mt, f"value of field {chr(code)!r}")
            fields.append((chr(code), value))
        trailing(body, pos, mt)
        return cls(tuple(fields))


@dataclass(frozen=True, slots=True)
class ErrorResponse(_NoticeFields):
    """'E': an error; build one with ``ErrorResponse.build("ERROR", "42P01", "...")``."""

    TAG: ClassVar[bytes] = b"E"
    _NAME: ClassVar[str] = "ErrorResponse ('E')"


@dataclass(frozen=True, slots=True)
class NoticeResponse(_NoticeFields):
    """'N': a notice (warning, notice, info, ...), same fields as ErrorResponse."""

    TAG: ClassVar[bytes] = b"N"
    _NAME: ClassVar[str] = "NoticeResponse ('N')"
