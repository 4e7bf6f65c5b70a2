"""numeric(p,s) in scripts rounds and refuses as PostgreSQL's apply_typmod() does, past
Decimal's default 28 digits and with the negative scales of PostgreSQL 15+. Expected
values are what PostgreSQL 17 printed for the same casts (``SELECT 12345::numeric(5,-2)``
is 12300; 12345678 and 99999.5 overflow); numeric(200,100) is also checked against the
real server by test_script_vs_postgres's types case."""

from __future__ import annotations

from decimal import Decimal

import pytest

from codec.values import encode_text, type_by_name
from pgwire_mock.script.types import _apply_typmod

NUMERIC = type_by_name("numeric").oid


def _typmod(precision: int, scale: int) -> int:
    return ((precision << 16) | (scale & 0x7FF)) + 4


@pytest.mark.parametrize(
    ("precision", "scale", "value", "printed"),
    [
        (5, -2, "12345", "12300"),
        (5, -2, "1234549", "1234500"),
        (3, -1, "0.0049", "0"),
        (200, 100, "-1.5", "-1.5" + "0" * 99),
        (10, 2, "12.345", "12.35"),
    ],
)
def test_rounds_as_postgres(precision: int, scale: int, value: str, printed: str) -> None:
    rounded = _apply_typmod("numeric", _typmod(precision, scale), Decimal(value))
    assert encode_text(NUMERIC, rounded) == printed


@pytest.mark.parametrize(
    ("precision", "scale", "value"),
    [(5, -2, "12345678"), (5, 0, "99999.5"), (200, 100, "1e100"), (1000, 0, "1e131000")],
)
def test_overflows_as_postgres(precision: int, scale: int, value: str) -> None:
    with pytest.raises(ValueError, match="numeric field overflow"):
        _apply_typmod("numeric", _typmod(precision, scale), Decimal(value))
