"""jsonb's numbers checked together (codec.values._text.jsonb_misfit, for arrays)
agree with each number's own check (_jsonb_number, numeric_in's limits)."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from codec.values._text import (
    _jsonb_number,
    _NumericOverflowError,
    json_numbers_decoder,
    jsonb_misfit,
)

# Exponents near each limit: the integer digits (131072), the scale (16383) and
# INT_MAX / 2, written with and without a sign and leading zeros.
_EXPONENTS = st.integers(-20, 20) | st.sampled_from(
    [131071, 131072, 131073, 130000, -16383, -16384, -16380, 1073741823, 1073741824, -1073741824]
)


@st.composite
def _number(draw: st.DrawFn, fraction: bool = True) -> str:
    whole = draw(st.sampled_from(["0", "1", "12", "9" * 70, "10" * 40]))
    text = draw(st.sampled_from(["", "-"])) + whole
    if fraction and draw(st.booleans()):
        text += "." + draw(st.sampled_from(["0", "5", "000", "0001", "25" * 30, "0" * 70]))
    if draw(st.integers(0, 4)):
        exponent = draw(_EXPONENTS)
        sign = "-" if exponent < 0 else draw(st.sampled_from(["", "+"]))
        zeros = "0" * draw(st.sampled_from([0, 0, 1, 12]))
        text += draw(st.sampled_from("eE")) + sign + zeros + str(abs(exponent))
    return text


def _fits(number: str) -> bool:
    try:
        _jsonb_number(number)
    except _NumericOverflowError:
        return False
    return True


@given(
    st.lists(_number(), min_size=1, max_size=8) | st.lists(_number(False), min_size=1, max_size=8)
)
@example(["0.5e-16383"])  # scale 16384, with a fraction
@example(["1e-16384"])  # scale 16384, without
@example(["0e131073", "1e5"])  # a zero takes any exponent
@example(["0e131073", "1e131072"])  # the first misfit is after the zero
@example(["1e131072"])  # 131073 digits before the point
@example(["99e131000", "7e131000", "1e131072"])  # the first long exponent is the first misfit
@example(["1234567890e131070", "1e131072"])  # a long mantissa overflows before it
@example(["1.5e131071", "1"])  # 131072 of them: fits
@example(["0.05e131074", "2.5"])  # leading zeros of a fraction are not digits
@example(["1e0000000000001"])  # nor are an exponent's
def test_numbers_checked_together_fit_where_each_fits(numbers: list[str]) -> None:
    """With fractions and without (all integer parts then read from the text)."""
    floats: list[str] = []
    json_numbers_decoder(floats).decode("[" + ",".join(numbers) + "]")
    assert floats == [n for n in numbers if any(c in n for c in ".eE")]
    fitting = [_fits(n) for n in floats]
    assert jsonb_misfit(floats) == (None if all(fitting) else fitting.index(False)), numbers


def test_the_scanner_hands_over_numbers_not_strings() -> None:
    floats: list[str] = []
    json_numbers_decoder(floats).decode('{"1e999999999": ["1e999999999", 2.5, -1E+3, 7]}')
    assert floats == ["2.5", "-1E+3"]
