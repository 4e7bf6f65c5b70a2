"""numeric texts with an exponent ("1e1", "2.5E+0064", "1e131000"), which numeric_out
never writes but numeric_in reads: the array conversion (codec.values._bulk_decimal._numeric)
gives what numeric_in gives, the zeros it writes out included."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from codec.errors import DecodeError
from codec.values import decode_text, type_by_name
from codec.values._bulk import BULK_WHOLE
from codec.values._bulk_decimal import _numeric
from codec.values._ranges import Declined

NUMERIC = type_by_name("numeric")
_EXPONENTS = st.integers(-70, 200) | st.sampled_from([9999, 10000, -9999, -10000, 131000, 999999])


@st.composite
def _exponent_text(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(["", "-"])) + draw(st.sampled_from(["0", "1", "25", "9" * 30]))
    if draw(st.booleans()):
        text += "." + draw(st.sampled_from(["0", "5", "05", "250", "1" * 40]))
    exponent = draw(_EXPONENTS)
    sign = "-" if exponent < 0 else draw(st.sampled_from(["", "+"]))
    zeros = "0" * draw(st.sampled_from([0, 0, 1, 3, 16, 17]))
    return text + draw(st.sampled_from("eE")) + sign + zeros + str(abs(exponent))


def _element(text: str) -> object:
    try:
        return decode_text(NUMERIC.oid, text)
    except DecodeError as err:
        return err


def _same(got: object, want: object) -> bool:
    return type(got) is type(want) and str(got) == str(want)


@example(["1e1", "2.5e1", "1.25e1", "3e64", "3e65", "1.5e65", "4e0000000000000001"])
@example(["-1e2", "7e-3", "1.0e2", "1E+0005", "12e-0002", "1e131000", "2.5e164"])
@given(st.lists(_exponent_text(), min_size=1, max_size=6))
def test_exponent_forms_convert_as_numeric_in(texts: list[str]) -> None:
    values = _numeric(texts)
    if isinstance(values, Declined):
        assert 0 <= values.index < len(texts)
        return
    if values is None:
        return
    expected = [_element(text) for text in texts]
    assert all(map(_same, values, expected)), (texts, values, expected)


@given(st.lists(_exponent_text(), min_size=1, max_size=40))
def test_arrays_of_exponent_forms_decode_as_their_elements(texts: list[str]) -> None:
    expected = [_element(text) for text in texts]
    try:
        got = decode_text(NUMERIC.array_oid, "{" + ",".join(texts) + "}")
    except DecodeError as err:
        first = next(e for e in expected if isinstance(e, DecodeError))
        assert err.reason.endswith(first.reason), (texts, err, first)
        return
    assert all(map(_same, got, expected)), (texts, got, expected)  # type: ignore[call-overload]


_SHORT_EXPONENT = st.builds("{}e{}".format, st.integers(-999, 999), st.integers(-999, 999))
_ELEMENT = (
    _exponent_text() | _SHORT_EXPONENT | st.sampled_from(["NULL", "0", "-0", "-0.0", "1.5", "-12"])
)


@given(st.lists(_ELEMENT, min_size=1, max_size=12))
def test_whole_reader_of_exponent_forms_gives_the_elements_values(texts: list[str]) -> None:
    """The whole-array reader takes arrays of exponent forms: it declines, or stops at an
    element (Declined) with the values before it, or gives every value as numeric_in."""
    values = BULK_WHOLE["numeric"]("{" + ",".join(texts) + "}")
    if isinstance(values, Declined):
        assert 0 <= values.index < len(texts)
        texts, values = texts[: values.index], values.values_before()
    if values is None:
        return
    expected = [None if text == "NULL" else _element(text) for text in texts]
    assert all(map(_same, values, expected)), (texts, values, expected)


def test_whole_reader_reads_short_exponents_among_other_forms() -> None:
    """Distinct short exponents ("100e10", the hostile family that took 116 ms per MB
    element by element) are read whole, zeros written out where numeric_in writes
    them, and so are they mixed with plain numbers, zeros ("0e5" is 0, "-0.00" 0.00)
    and NULLs (305 ms per MB one by one when mixed)."""
    texts = [f"{100 + i % 900}e{i // 900 * 7}" for i in range(9000)]
    for mixed in (texts, [*texts[:1000], "0e5", "-0.00", "NULL", "1.5", *texts[1000:]]):
        values = BULK_WHOLE["numeric"]("{" + ",".join(mixed) + "}")
        assert isinstance(values, list)
        expected = [None if text == "NULL" else _element(text) for text in mixed]
        assert all(map(_same, values, expected))
