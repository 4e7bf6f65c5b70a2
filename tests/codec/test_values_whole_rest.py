"""A whole-array reader that stops at an element hands the array decoder the values of
those before it and where the element begins; the decoder then parses only the rest
of the text. Whatever the text, that must give what parsing it all does: the same
value, or the same error at the same offset naming the same element."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings
from test_values_properties import values_for

from codec.values import encode_binary, encode_text, type_by_name
from codec.values._array_binary import make_binary_decoder
from codec.values._array_text import make_text_decoder
from codec.values._bulk import (
    BULK_BINARY_AREAS,
    BULK_BINARY_ELEMENTS,
    BULK_TEXT,
    BULK_WHOLE,
)
from codec.values._catalogue import SCALARS
from codec.values._common import Invalid
from codec.values._ranges import Declined

WHOLE_TYPES = sorted(BULK_WHOLE)
_CONVERTER = {c.name: c for c in SCALARS}
# Elements a whole reader stops at, or that make the rest malformed.
_OTHERS = st.sampled_from(
    ["x", "NULL", "null", '"1"', '"a,b"', " 7", "7 ", "", "{1}", "}", "{", '"', "\\,", "1e999999"]
)


def _decoders(type_name: str) -> tuple[object, object]:
    """The catalogue's array decoder and one without the whole reader."""
    element = _CONVERTER[type_name]
    bulk = BULK_TEXT.get(type_name)
    return (
        make_text_decoder(element, bulk, BULK_WHOLE[type_name]),
        make_text_decoder(element, bulk, None),
    )


def _answer(decode: object, text: object) -> object:
    try:
        return ("value", repr(decode(text)))  # type: ignore[operator]
    except Invalid as err:
        return ("error", err.offset, err.reason)


@pytest.mark.parametrize("type_name", WHOLE_TYPES)
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_the_rest_parsed_alone_answers_as_the_whole_text(
    type_name: str, data: st.DataObject
) -> None:
    oid = type_by_name(type_name).oid
    printed = values_for(oid).map(lambda v: encode_text(oid, v))
    # Long enough runs of printed values for the readers' element-length thresholds.
    head = data.draw(st.lists(printed, min_size=1, max_size=12))
    tail = data.draw(st.lists(printed | _OTHERS, max_size=6))
    text = "{" + ",".join([*head, data.draw(_OTHERS), *tail]) + "}"
    if data.draw(st.booleans()):
        text += data.draw(st.sampled_from(["}", "x", " ", ",1}"]))
    whole, parsed = _decoders(type_name)
    assert _answer(whole, text) == _answer(parsed, text), text


@pytest.mark.parametrize(
    ("type_name", "text", "index"),
    [
        ("int4", "{11111,22222,x,33333}", 2),
        ("int2", "{11111,22222,70000,x}", 2),
        ("float8", "{1111.25,2222.25,NULL,x}", 3),
        ("numeric", "{11111.5,22222.5,x}", 2),
        ("json", "{11111,22222,null,3}", 2),
        ("jsonb", "{11111,22222,[1],33333}", 2),
        ("interval", "{1 day,2 days,x}", 2),
        ("inet", "{10.0.0.1,10.0.0.2,x}", 2),
    ],
)
def test_the_readers_say_where_they_stopped(type_name: str, text: str, index: int) -> None:
    """Each whole reader that stops after some elements gives their values and the
    offset of the element it stopped at."""
    answer = BULK_WHOLE[type_name](text)
    assert isinstance(answer, Declined) and answer.index == index, answer
    before = answer.values_before()
    assert before is not None and len(before) == index
    assert answer.offset is not None
    assert text[answer.offset - 1] == "," and text.count(",", 0, answer.offset) == index


# --------------------------------------------------------------------------- binary

_AREA_TYPES = sorted(BULK_BINARY_AREAS)


def _binary_decoders(type_name: str) -> tuple[object, object]:
    """The catalogue's binary array decoder and one without the area reader."""
    element = _CONVERTER[type_name]
    return (
        make_binary_decoder(
            element, None, BULK_BINARY_ELEMENTS.get(type_name), BULK_BINARY_AREAS[type_name]
        ),
        make_binary_decoder(element, None, BULK_BINARY_ELEMENTS.get(type_name), None),
    )


@pytest.mark.parametrize("type_name", _AREA_TYPES)
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_the_binary_rest_read_alone_answers_as_the_whole_array(
    type_name: str, data: st.DataObject
) -> None:
    """An area reader that stops at an element (a header or length it refuses) leaves
    the rest to the element path: the same values, or the same error at the same
    offset naming the same element, as reading every element that way."""
    info = type_by_name(type_name)
    values = data.draw(st.lists(values_for(info.oid) | st.none(), min_size=2, max_size=12))
    raw = bytearray(encode_binary(info.array_oid, values))
    at = data.draw(st.integers(20, len(raw) - 1))
    how = data.draw(st.sampled_from(["byte", "cut", "add"]))
    if how == "byte":
        raw[at] = data.draw(st.integers(0, 255))
    elif how == "cut":
        del raw[at:]
    else:
        raw += bytes(data.draw(st.integers(1, 8)))
    area, elements = _binary_decoders(type_name)
    assert _answer(area, bytes(raw)) == _answer(elements, bytes(raw))
