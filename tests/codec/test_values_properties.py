"""Property tests: every type round-trips both ways, and garbage raises only DecodeError."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_values_vectors import same

from codec.errors import DecodeError
from codec.strategies.values import type_oids, values_for
from codec.values import TYPES, decode_binary, decode_text, encode_binary, encode_text

ALL_OIDS = sorted(TYPES)
PROPERTY_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.mark.parametrize("oid", ALL_OIDS, ids=[TYPES[o].name for o in ALL_OIDS])
@PROPERTY_SETTINGS
@given(data=st.data())
def test_text_round_trip(oid: int, data: st.DataObject) -> None:
    """decode_text(encode_text(v)) == v, and the text is canonical: re-encoding the
    decoded value prints the same characters."""
    value = data.draw(values_for(oid))
    text = encode_text(oid, value)
    decoded = decode_text(oid, text)
    assert same(decoded, value), (text, decoded, value)
    assert encode_text(oid, decoded) == text


@pytest.mark.parametrize("oid", ALL_OIDS, ids=[TYPES[o].name for o in ALL_OIDS])
@PROPERTY_SETTINGS
@given(data=st.data())
def test_binary_round_trip(oid: int, data: st.DataObject) -> None:
    """decode_binary(encode_binary(v)) == v, and the bytes are canonical."""
    value = data.draw(values_for(oid))
    raw = encode_binary(oid, value)
    decoded = decode_binary(oid, raw)
    assert same(decoded, value), (raw, decoded, value)
    assert encode_binary(oid, decoded) == raw


@PROPERTY_SETTINGS
@given(oid=type_oids(), raw=st.binary(max_size=64))
def test_arbitrary_bytes_raise_only_decode_error(oid: int, raw: bytes) -> None:
    """Any bytes either decode or raise DecodeError naming the type."""
    try:
        decode_binary(oid, raw)
    except DecodeError as err:
        assert TYPES[oid].name in err.message_type


@PROPERTY_SETTINGS
@given(oid=type_oids(), text=st.text(max_size=64))
def test_arbitrary_text_raises_only_decode_error(oid: int, text: str) -> None:
    """Any string either decodes or raises DecodeError naming the type."""
    try:
        decode_text(oid, text)
    except DecodeError as err:
        assert TYPES[oid].name in err.message_type


@PROPERTY_SETTINGS
@given(data=st.data())
def test_mutated_binary_raises_only_decode_error(data: st.DataObject) -> None:
    """Valid encodings with one byte changed, cut or extended decode or raise DecodeError
    (random bytes rarely get past an array header; mutations do)."""
    oid = data.draw(type_oids())
    raw = bytearray(encode_binary(oid, data.draw(values_for(oid))))
    if raw:
        index = data.draw(st.integers(0, len(raw) - 1))
        raw[index] = data.draw(st.integers(0, 255))
    raw = raw[: data.draw(st.integers(0, len(raw) + 1))] + data.draw(st.binary(max_size=2))
    with contextlib.suppress(DecodeError):
        decode_binary(oid, bytes(raw))


_ARRAY_ALPHABET = st.sampled_from(list('{}[]:=,"\\ 1aNULnul-.\t'))


@PROPERTY_SETTINGS
@given(oid=type_oids(), text=st.text(_ARRAY_ALPHABET, max_size=40))
def test_array_syntax_soup_raises_only_decode_error(oid: int, text: str) -> None:
    """Strings made of array punctuation decode or raise DecodeError, and never hang."""
    with contextlib.suppress(DecodeError):
        decode_text(oid, text)
