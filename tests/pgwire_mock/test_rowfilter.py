"""Row filters as scripts give them: SQL's three-valued logic, the forms pg_get_expr
prints, one-line errors, bounded work; and publications' column lists and filters in the
script format."""

from __future__ import annotations

from decimal import Decimal

import pytest

from pgwire_mock.script import (
    Script,
    ScriptError,
    column,
    compile_script,
    dump_script,
    loads_script,
)
from pgwire_mock.script.rowfilter import RowFilter, RowFilterError


@pytest.mark.parametrize(
    ("text", "row", "passes"),
    [
        ("(id > 1)", {"id": 2}, True),
        ("(id > 1)", {"id": 1}, False),
        ("(id > 1)", {"id": None}, False),  # NULL does not pass
        ("((v)::text = 'x'::text)", {"v": "x"}, True),
        ("((v)::text = 'it''s'::text)", {"v": "it's"}, True),
        ("((id > 1) AND (v IS NOT NULL))", {"id": 2, "v": None}, False),
        ("((id > 1) OR (v IS NULL))", {"id": None, "v": None}, True),
        ("(NOT (id = 1))", {"id": None}, False),  # NOT NULL is NULL
        ("(id = ANY_COL)", {"id": 1, "any_col": 1}, True),
        ("(id IN (1, 2, NULL))", {"id": 3}, False),
        ("(id NOT IN (1, 2))", {"id": 3}, True),
        ("(id BETWEEN 1 AND 3)", {"id": 3}, True),
        ("((id % 2) = 0)", {"id": 4}, True),
        ("((id / 2) = 1)", {"id": 3}, True),  # integer division
        ("(n > 1.5)", {"n": Decimal("1.50")}, False),
        ("(n > '1.4'::numeric)", {"n": Decimal("1.5")}, True),
        ("(flag IS TRUE)", {"flag": True}, True),
        ("(v > 'B'::text)", {"v": "a"}, True),  # C collation: bytes
        ('("Mixed Case" = 1)', {"Mixed Case": 1}, True),
    ],
)
def test_filters_evaluate_as_postgres_does(text: str, row: dict[str, object], passes: bool) -> None:
    assert RowFilter(text).matches(row) is passes


def test_columns_are_what_the_filter_reads() -> None:
    assert RowFilter('((a > 1) AND ("B" IS NULL) OR (c IN (d, 1)))').columns == {"a", "B", "c", "d"}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("(id >", "unexpected 'the end'"),
        ("id = = 1", "unexpected '='"),
        ("(id > 1", "expected ')'"),
        ("id ~ 'x'", "unexpected '~'"),
        ("(v)::money", "cast to money"),
        ("id NOT 1", "expected IN or BETWEEN"),
        ("(" * 70 + "1" + ")" * 70, "nested deeper than 64"),
    ],
)
def test_unreadable_filters_are_one_line_errors(text: str, reason: str) -> None:
    with pytest.raises(
        RowFilterError, match=reason.replace("(", r"\(").replace(")", r"\)")
    ) as info:
        RowFilter(text)
    assert "\n" not in str(info.value)


def test_parsing_work_grows_linearly(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bound on work, not on a clock: the parser looks at each token a bounded number
    of times, so 8x the input costs 8x the token reads."""
    reads = {"n": 0}
    peek, take = RowFilter._peek, RowFilter._take

    def counted_peek(self: RowFilter) -> object:
        reads["n"] += 1
        return peek(self)

    def counted_take(self: RowFilter) -> object:
        reads["n"] += 1
        return take(self)

    monkeypatch.setattr(RowFilter, "_peek", counted_peek)
    monkeypatch.setattr(RowFilter, "_take", counted_take)

    def work(n: int) -> int:
        reads["n"] = 0
        RowFilter(" AND ".join(f"(c{i} > {i}) OR (c{i} IS NULL)" for i in range(n)))
        return reads["n"]

    small, large = work(500), work(4000)
    assert large <= small * 8 * 1.01
    assert small < 500 * 200  # a few dozen reads per term, not per character


def _script(**publication: object) -> Script:
    return (
        Script(pg_version=16)
        .table(
            "public.t",
            columns=[
                column("id", "int4", key=True),
                column("v", "text"),
                column("g", "int4", generated=True),
            ],
        )
        .publication("p", tables=["public.t"], **publication)  # type: ignore[arg-type]
    )


def test_column_lists_and_filters_round_trip_through_yaml() -> None:
    s = _script(columns={"public.t": ["id", "v"]}, where={"public.t": "(id > 1)"})
    text = dump_script(s)
    assert "where: (id > 1)" in text
    assert loads_script(text) == s


@pytest.mark.parametrize(
    ("publication", "problem"),
    [
        ({"columns": {"public.t": ["v"]}}, "does not cover the replica identity"),
        ({"columns": {"public.t": ["id", "nope"]}}, "no column 'nope'"),
        ({"columns": {"public.t": ["id", "g"]}}, 'generated column "g"'),
        ({"where": {"public.t": "(v = 'x')"}}, "outside the replica identity"),
        ({"where": {"public.t": "(nope > 1)"}}, "no column 'nope'"),
        ({"where": {"public.t": "(id >"}}, "row filter"),
        ({"where": {"public.other": "(id > 1)"}}, "not one of the publication's tables"),
    ],
)
def test_bad_column_lists_and_filters_are_refused(
    publication: dict[str, object], problem: str
) -> None:
    with pytest.raises(ScriptError, match=problem):
        compile_script(_script(**publication))
