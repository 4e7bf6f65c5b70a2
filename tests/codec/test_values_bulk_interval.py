"""Text interval arrays of one date field per element, of one unit ("{1 days,2 days}",
the hostile family "array of distinct day counts"), converted by
codec.values._bulk_interval.one_field (the distinct element texts) and one_field_array
(the whole array text): each must take every such array and decode it exactly as
interval_in and array_in do, and decline everything else."""

from __future__ import annotations

import re

import pytest
from adversarial_values import MAKERS
from hypothesis import given
from hypothesis import strategies as st
from test_values_bulk import SETTINGS, _element, _exact

from codec.values import _bulk_interval, decode_text, type_by_name
from codec.values._array_text import make_text_decoder
from codec.values._array_tokens import parse_text
from codec.values._bulk import BULK_TEXT
from codec.values._bulk_interval import (
    _TOO_MANY,
    by_shape,
    interval_texts,
    one_by_one,
    one_field,
    one_field_array,
)
from codec.values._common import Invalid
from codec.values._interval import INTERVAL_CONV, Interval
from codec.values._ranges import Declined

# Each unit with the digit count one_field takes at most (its int32 bound, x12 for years).
_UNITS = {"day": 9, "mon": 9, "year": 6, "": 12}  # "": a bare number of seconds
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
    word = f" {unit}s?" if unit else ""
    return re.fullmatch(f"[+-]?[0-9]{{1,{_UNITS[unit]}}}{word}", text) is not None


@st.composite
def _one_unit_texts(draw: st.DrawFn) -> tuple[str, list[str]]:
    """Texts of one unit, singular or plural, signed or not, with leading zeros and up to
    one digit past the bound; sometimes with a text of another form among them."""
    unit = draw(st.sampled_from(sorted(_UNITS)))
    digits = st.from_regex(f"[0-9]{{1,{_UNITS[unit] + 1}}}", fullmatch=True)
    field = st.builds(
        "{}{}{}".format,
        st.sampled_from(["", "", "-", "+"]),
        digits,
        st.sampled_from([f" {unit}", f" {unit}s"] if unit else [""]),
    )
    texts = draw(st.lists(field, min_size=1, max_size=8, unique=True))
    if draw(st.booleans()):
        other = field.map(lambda t: t.replace(unit, "hour") if unit else t + " hours")
        intruder = draw(st.sampled_from(_INTRUDERS) | other)
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
        (["5", "-0", "+07"], [(0, 0, 5_000_000), (0, 0, 0), (0, 0, 7_000_000)]),
        (
            ["999999999999", "-999999999999"],
            [(0, 0, 999999999999_000000), (0, 0, -999999999999_000000)],
        ),
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
        ["1000000000000"],
        ["1 day", "5"],
        ["5", "1 day"],
        ["5", "5.5"],
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
    texts = parse_text(text)[1]
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


# The array decoder without any fast path: array_in's parse, interval_in per element.
_ELEMENT_PATH = make_text_decoder(INTERVAL_CONV)


def _array_in(text: str) -> object:
    try:
        return _ELEMENT_PATH(text)  # type: ignore[operator]
    except Invalid as err:
        return err


@st.composite
def _one_unit_arrays(draw: st.DrawFn) -> tuple[bool, str]:
    """Array texts of one-unit fields (and intruders), unquoted, all quoted or mixed,
    sometimes with a syntax near miss; and whether one_field_array must take it."""
    unit, texts = draw(_one_unit_texts().filter(lambda d: all("," not in t for t in d[1])))
    texts += draw(st.lists(st.sampled_from(texts), max_size=4))  # repeats
    quoting = draw(st.sampled_from(["none", "all", "mixed"]))
    quoted = [quoting == "all" or (quoting == "mixed" and draw(st.booleans())) for _ in texts]
    elements = [f'"{t}"' if q else t for t, q in zip(texts, quoted, strict=True)]
    text = "{" + ",".join(elements) + "}"
    near = draw(st.sampled_from(["", "", "", "space", "NULL", "nest", "dims", "trail", "empty"]))
    if near == "space":
        text = text.replace(",", " ,", 1) if "," in text else " " + text
    elif near == "NULL":
        text = text[:-1] + ",NULL}"
    elif near == "nest":
        text = "{" + text + "}"
    elif near == "dims":
        text = f"[1:{len(texts)}]={text}"
    elif near == "trail":
        text = text[:-1] + ",}"
    elif near == "empty":
        text = text[:-1] + ',""}'
    takes = not near and all(_fits(t, unit) for t in texts) and (all(quoted) or not any(quoted))
    return takes, text


@SETTINGS
@given(drawn=_one_unit_arrays())
def test_one_field_array_decodes_as_array_in(drawn: tuple[bool, str]) -> None:
    """A whole array of one-unit fields, unquoted or all quoted, is taken and gives what
    array_in and interval_in give; any other text, element or syntax is declined."""
    takes, text = drawn
    values = one_field_array(text)
    if not takes:
        assert not isinstance(values, list), text
        _check_declined(text, values)
        return
    assert values is not None, text
    expected = _array_in(text)
    assert isinstance(expected, list), (text, expected)
    assert all(_exact(v, e) for v, e in zip(values, expected, strict=True)), (text, values)


@st.composite
def _mixed_unit_arrays(draw: st.DrawFn) -> tuple[bool, str]:
    """Array texts of one field each in several units, all distinct, unquoted or all
    quoted, up to one digit past a unit's bound, sometimes with an intruder; and whether
    every element is in the form (then one_field_array must take it)."""
    field = st.builds(
        "{}{}{}".format,
        st.sampled_from(["", "", "-", "+"]),
        st.from_regex("[0-9]{1,10}", fullmatch=True),
        st.sampled_from([" day", " days", " mon", " mons", " year", " years"]),
    )
    texts = draw(st.lists(field, min_size=2, max_size=10, unique=True))
    if draw(st.integers(0, 3)) == 0:
        texts.insert(draw(st.integers(0, len(texts))), draw(st.sampled_from(_INTRUDERS)))
    quoted = draw(st.booleans())
    text = "{" + ",".join(f'"{t}"' if quoted else t for t in texts) + "}"
    units = [t.rpartition(" ")[2].removesuffix("s") for t in texts]
    fits = all(u in _UNITS and u and _fits(t, u) for t, u in zip(texts, units, strict=True))
    return fits and len(set(units)) > 1, text


@SETTINGS
@given(drawn=_mixed_unit_arrays())
def test_mixed_unit_array_decodes_as_array_in(drawn: tuple[bool, str]) -> None:
    """A whole array of one-field elements of several units is taken when every element
    is in the form, and gives what array_in and interval_in give."""
    takes, text = drawn
    values = one_field_array(text)
    if takes:
        assert isinstance(values, list), (text, values)
    if isinstance(values, list):
        expected = _array_in(text)
        assert isinstance(expected, list), (text, expected)
        assert all(_exact(v, e) for v, e in zip(values, expected, strict=True)), (text, values)
    else:
        _check_declined(text, values)


@pytest.mark.parametrize(
    "text",
    [
        "{}",
        '{""}',
        '{"}',
        "{,}",
        "{1 day,}",
        "{,1 day}",
        "{1 day,,2 days}",
        '{"1 day,2 days"}',  # one element holding a comma: interval_in refuses it
        '{"1 day","2 days,3 days"}',
        '{"1 day",2 days}',
        '{1 day,"2 days"}',
        '{"1 day""2 days"}',
        '{"1 day\\",2 days"}',
        "{1 day}x",
        "{1 day,2 days",
        "1 day,2 days}",
        '{11 day","2 days1}',
        '{"1 day""}',
        '{"1 day","2 day""}',
        '{1 day,2 day"}',
        '{1 day"}',
        " {1 day}",
        "{1 day} ",
        "{{1 day}}",
        "[1:1]={1 day}",
        "{1 day 2 days}",
        "{1 day;2 days}",
        "{NULL}",
        "{1 day,NULL}",
    ],
)
def test_one_field_array_declines(text: str) -> None:
    """Empty, nested, dimensioned, spaced or NULL arrays, elements holding commas or
    quotes, and quoting mixed: declined, for array_in to read or refuse (unquoted, at
    the first element out of form, with the values of those before)."""
    values = one_field_array(text)
    assert not isinstance(values, list)
    _check_declined(text, values)


def _check_declined(text: str, answer: object) -> None:
    """None, or Declined at an element of an unquoted array whose elements before it
    have the values given."""
    if answer is None:
        return
    assert isinstance(answer, Declined) and answer.values_before() is not None, (text, answer)
    assert text.startswith("{") and not text.startswith('{"'), text
    elements = text[1:-1].split(",")
    assert 0 < answer.index < len(elements), (text, answer)
    oid = type_by_name("interval").oid
    assert answer.values_before() == [decode_text(oid, e) for e in elements[: answer.index]], text


def test_one_field_array_takes_printed_arrays() -> None:
    """What array_out prints (each element quoted, as it holds a space) and the
    unquoted form, of each unit, singular and plural."""
    for unit, months in (("day", 0), ("mon", 1), ("year", 12)):
        texts = [f"-1 {unit}", f"1 {unit}", f"2 {unit}s", f"+03 {unit}s", f"0 {unit}s"]
        want = [Interval(n * months, 0 if months else n, 0) for n in (-1, 1, 2, 3, 0)]
        assert one_field_array('{"' + '","'.join(texts) + '"}') == want
        assert one_field_array("{" + ",".join(texts) + "}") == want
    longest = ["-999999999 days", "+999999999 days"]  # the unit is read from a prefix
    want = [Interval(0, -999999999, 0), Interval(0, 999999999, 0)]
    assert one_field_array('{"' + '","'.join(longest) + '"}') == want
    assert one_field_array('{"' + longest[0] + '"}') == want[:1]


@pytest.mark.parametrize(
    ("element", "other"),
    [("1 day", "2 days"), ("-7 day", "7 day"), ("12 mon", "1 mon"), ("1 year", "2 year")],
)
def test_repeated_short_elements_share_one_interval(element: str, other: str) -> None:
    """Short elements (few distinct ones) share an Interval per distinct number, as the
    element path's table shares one per distinct text; longer ones get one each."""
    values = one_field_array("{" + ",".join([element] * 50 + [other]) + "}")
    assert values is not None
    assert values == [_element("interval", element)] * 50 + [_element("interval", other)]
    assert len({id(v) for v in values}) == 2
    long = one_field_array("{" + ",".join(["123456 days"] * 3) + "}")
    assert long is not None and len({id(v) for v in long}) == 3


def _without_fast_decline(texts: list[str]) -> list[object] | None:
    """interval_texts() as it was before it declined at a refused text: one_field(),
    else by shape, else one by one."""
    values = one_field(texts)
    if values is not None:
        return values
    values = by_shape(texts, len(texts) // 16, len(texts) // 8)
    return one_by_one(texts) if values is _TOO_MANY else values


@SETTINGS
@given(drawn=_one_unit_texts(), more=st.lists(st.sampled_from(_INTRUDERS), max_size=3))
def test_declining_at_a_refused_text_changes_nothing(
    drawn: tuple[str, list[str]], more: list[str]
) -> None:
    """interval_texts() declines without the conversion by shape when the first text
    one_field cannot read is one that conversion and one_by_one() refuse too: it gives
    what it gave without that shortcut, for one-unit texts with others among them."""
    texts = drawn[1] + more
    got = interval_texts(texts)
    if isinstance(got, Declined):  # where one_field stopped, at a text none can read
        assert 0 <= got.index < len(texts)
        assert one_by_one([texts[got.index]]) is None
        got = None
    assert got == _without_fast_decline(texts)


@pytest.mark.parametrize(
    ("texts", "index"),
    [
        (["1 day", "2 days", "x", "3 days"], 2),
        (["1 day", "2 daysX"], 1),
        (["1 day", "2 days", "3 days 00:00:01"], 2),
        (["1000000000 days"], 0),
        (["5", "6", "7 days"], 2),
        (["1 day", "2 days"], None),
    ],
)
def test_first_text_one_field_cannot_read(texts: list[str], index: int | None) -> None:
    """_fields_of() names the first text that is not one field of the first's unit,
    with the values of those before."""
    found = _bulk_interval._fields_of(texts)
    if index is None:
        assert isinstance(found, list)
        return
    assert isinstance(found, Declined) and found.index == index
    oid = type_by_name("interval").oid
    assert found.values_before() == [decode_text(oid, text) for text in texts[:index]]


def test_texts_the_conversion_by_shape_reads_are_not_declined_early() -> None:
    """A text one_field cannot read but the conversion by shape can ("1 mon 2 days")
    is converted, not declined."""
    texts = ["1 day", "2 days", "1 mon 2 days", "00:00:01.5", "7"]
    assert interval_texts(texts) == [_element("interval", t) for t in texts]


@pytest.mark.parametrize(
    ("first", "unit"),
    [
        ("5", ""),
        ("-5", ""),
        ("5 days", "day"),
        ("5 mon", "mon"),
        ("1 years", "year"),
        ("", None),
        ("x", None),
        ("-", None),
        ("2000-01-01 12:00:00   ", None),
        ("1 day ", None),
        ("00:00:01", ""),  # a guess: the check refuses it at its first characters
    ],
)
def test_unit_guessed_from_the_first_element(first: str, unit: str | None) -> None:
    """The unit is guessed from the first element alone, and nothing is guessed for an
    element that cannot start such an array (no pass over an array of another form)."""
    entries = {"": _bulk_interval._BARE, **_bulk_interval._ONE_FIELD}
    assert _bulk_interval._unit_of(first) is (entries[unit] if unit is not None else None)
