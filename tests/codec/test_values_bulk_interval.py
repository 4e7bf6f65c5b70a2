"""Text interval arrays of one date field per element, of one unit ("{1 days,2 days}",
the hostile family "array of distinct day counts"), converted by
codec.values._bulk_interval.one_field: it must take every such array and decode each
element exactly as interval_in does, and decline everything else."""

from __future__ import annotations

import re

import pytest
from adversarial_values import MAKERS
from hypothesis import given
from hypothesis import strategies as st
from test_values_bulk import SETTINGS, _element, _exact

from codec.values import _bulk_interval, decode_text, type_by_name
from codec.values._arrays import _parse_text
from codec.values._bulk import BULK_TEXT
from codec.values._bulk_interval import one_field
from codec.values._interval import Interval

# Each unit with the digit count one_field takes at most (its int32 bound, x12 for years).
_UNITS = {"day": 9, "mon": 9, "year": 6}
# Texts near the form: other units, signs, spaces, case, clocks, ago, bare numbers,
# separators inside a text, non-ASCII digits, and words that only start like a unit.
_INTRUDERS = [
    "5",
    "-5",
    "",
    " 1 day",
    "1 day ",
    "1  days",
    "1 DAY",
    "1 Days",
    "1 dayss",
    "1 d",
    "1days",
    "1 day ago",
    "@ 1 day",
    "1 day 00:00:01",
    "1 day 2 days",
    "1 day,2 days",
    "1 day2 days",
    "1 day ,",
    "1 day\n",
    "\u0661 day",
    "1.5 days",
    "1e3 days",
    "- 1 day",
    "+-1 day",
    "1 week",
    "1 mon 2 days",
    "1 year 2 mons",
    "infinity",
]


def _fits(text: str, unit: str) -> bool:
    """Whether ``text`` is one field of ``unit`` within one_field's digit bound."""
    return re.fullmatch(f"[+-]?[0-9]{{1,{_UNITS[unit]}}} {unit}s?", text) is not None


@st.composite
def _one_unit_texts(draw: st.DrawFn) -> tuple[str, list[str]]:
    """Texts of one unit, singular or plural, signed or not, with leading zeros and up to
    one digit past the bound; sometimes with a text of another form among them."""
    unit = draw(st.sampled_from(sorted(_UNITS)))
    digits = st.from_regex(f"[0-9]{{1,{_UNITS[unit] + 1}}}", fullmatch=True)
    field = st.builds(
        "{}{} {}{}".format,
        st.sampled_from(["", "", "-", "+"]),
        digits,
        st.just(unit),
        st.sampled_from(["", "s"]),
    )
    texts = draw(st.lists(field, min_size=1, max_size=8, unique=True))
    if draw(st.booleans()):
        intruder = draw(st.sampled_from(_INTRUDERS) | field.map(lambda t: t.replace(unit, "hour")))
        texts.insert(draw(st.integers(0, len(texts))), intruder)
    return unit, texts


@SETTINGS
@given(drawn=_one_unit_texts())
def test_one_field_decodes_exactly_as_interval_in(drawn: tuple[str, list[str]]) -> None:
    """Texts that are all one field of one unit within the digit bounds are taken, and
    each decodes as interval_in decodes it (json reading the numbers, or int() for
    "+5" and "007"); any other text among them makes one_field decline."""
    unit, texts = drawn
    values = one_field(texts)
    if not all(_fits(text, unit) for text in texts):
        assert values is None, texts
        return
    assert values is not None, texts
    expected = [_element("interval", text) for text in texts]
    assert all(_exact(v, e) for v, e in zip(values, expected, strict=True)), (texts, values)


@pytest.mark.parametrize(
    ("texts", "expected"),
    [
        (["1 day", "-2 days", "0 days", "-0 days"], [(0, 1, 0), (0, -2, 0), (0, 0, 0), (0, 0, 0)]),
        (["+5 days", "007 days"], [(0, 5, 0), (0, 7, 0)]),  # json declines, int() reads
        (["999999999 days", "-999999999 days"], [(0, 999999999, 0), (0, -999999999, 0)]),
        (["1 mon", "-999999999 mons"], [(1, 0, 0), (-999999999, 0, 0)]),
        (["1 year", "-999999 years", "+02 years"], [(12, 0, 0), (-11999988, 0, 0), (24, 0, 0)]),
    ],
)
def test_one_field_values(texts: list[str], expected: list[tuple[int, int, int]]) -> None:
    """Days go to days, months and years (x12) to months, at the digit bounds too."""
    values = one_field(texts)
    assert values == [Interval(*triple) for triple in expected]
    assert all(type(value) is Interval for value in values)


@pytest.mark.parametrize(
    "texts",
    [
        ["1000000000 days"],
        ["1000000 years"],
        ["1 day", "1 mon"],
        ["1 mon", "1 year"],
        ["1 day,2 days", "3 days"],  # a text holding the separator
        ["1 day", "1 day\n2 days"],
        ["1 day2 days"],  # a field glued to the next: interval_in refuses it
        ["1 day "],  # interval_in strips the space; not the form one_field reads
        [" 1 day"],
        ["1 day", "-"],
        ["1 day", "1 days "],
        [],
    ],
)
def test_one_field_declines(texts: list[str]) -> None:
    """Past the digit bounds, mixed units and separators inside a text: declined (the
    conversion by shape or interval_in then reads them)."""
    assert one_field(texts) is None


@pytest.mark.parametrize("unit", ["day", "mon", "year"])
def test_distinct_counts_of_one_unit(unit: str) -> None:
    """The hostile family's array, and its months and years analogues, decode through
    one_field to what interval_in gives each element."""
    text = MAKERS["array of distinct day counts"](20_000).replace("days", unit + "s")
    texts = _parse_text(text)[1]
    assert one_field(texts) is not None  # type: ignore[arg-type]
    decoded = decode_text(type_by_name("interval").array_oid, text)
    assert decoded == [_element("interval", t) for t in texts]  # type: ignore[arg-type]
    assert BULK_TEXT["interval"](texts) == decoded  # type: ignore[arg-type]


def test_interval_texts_tries_one_field_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """interval_texts (the array fast path) takes one-field arrays through one_field,
    without the conversion by shape."""

    def by_shape(*args: object) -> None:
        raise AssertionError("converted by shape")

    monkeypatch.setattr(_bulk_interval, "by_shape", by_shape)
    texts = [f"{i} days" for i in range(100)]
    assert _bulk_interval.interval_texts(texts) == [Interval(0, i, 0) for i in range(100)]
