"""Arrays in text form: array_out() and array_in() (src/backend/utils/adt/arrayfuncs.c)
for any catalogue element type. array_in() tries, in order: the element type's whole
reader (codec.values._bulk: numbers and the like read in one pass), the forms read
without a token loop (codec.values._array_forms), then the token loop
(codec.values._array_tokens); each distinct element text is converted once."""

from __future__ import annotations

from typing import Final, cast

from codec.values._array_forms import (
    element_start,
    escaped_texts,
    flat_texts,
    nested_flat,
    nested_texts,
    opening,
)
from codec.values._array_shape import array_parts, array_value, each_once_after
from codec.values._array_tokens import (
    RUN,
    element_at,
    element_error,
    parse_dims,
    parse_text,
    skip_space,
)
from codec.values._bulk_forms import BulkDecoder, WholeDecoder
from codec.values._common import (
    PG_SPACE,
    SAMPLE,
    Converter,
    Invalid,
    few_distinct,
    has_pg_space,
)
from codec.values._ranges import Declined, ElementError, convert_ranges

# array_out() quotes an element that is empty, spells NULL, or holds any of these.
_NEEDS_QUOTES: Final = frozenset('{},"\\' + PG_SPACE)


def _quote(text: str) -> str:
    if text == "" or text.upper() == "NULL" or not _NEEDS_QUOTES.isdisjoint(text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def make_text_encoder(element: Converter, name: str) -> object:
    encode = element.encode_text

    def encode_text(value: object) -> str:
        shape, bounds, items = array_parts(value, name)
        if not shape:
            return "{}"
        texts = ["NULL" if item is None else _quote(encode(item)) for item in items]
        for size in reversed(shape):
            texts = ["{" + ",".join(texts[i : i + size]) + "}" for i in range(0, len(texts), size)]
        body = texts[0]
        if any(low != 1 for low in bounds):
            dims = "".join(
                f"[{low}:{low + size - 1}]" for size, low in zip(shape, bounds, strict=True)
            )
            return f"{dims}={body}"
        return body

    return encode_text


def _plain(flat: str) -> bool:
    """Whether the elements of a flat array text without quotes, backslashes or inner
    braces are all there (none empty) and need no trimming."""
    return not (",," in flat or flat[:2] == "{," or flat[-2:] == ",}" or has_pg_space(flat))


_MANY_BRACES: Final = 1024  # a brace in every 16 of the first characters


def make_text_decoder(
    element: Converter, bulk: BulkDecoder | None = None, whole: WholeDecoder | None = None
) -> object:
    """array_in() for ``element``. ``whole`` reads the entire text when it is in its
    form (see _bulk); else each distinct element text is decoded once (a 1 MB array of
    small elements holds few distinct ones), by ``bulk`` when it takes them all, else
    by the element's input function."""
    decode = element.decode_text

    def convert_all(distinct: list[str]) -> list[object]:
        return convert_ranges(distinct, bulk, decode)

    def decode_text(text: str) -> object:
        if whole is not None and text[:1] == "[":
            bounded = bounded_whole(text)
            if bounded is not None:
                return bounded
        return whole_first(text)

    def whole_first(text: str) -> object:
        """The array ``text`` read by the whole reader when it takes it, else parsed."""
        read = whole(text) if whole is not None else None
        if isinstance(read, list):
            return read
        if not isinstance(read, Declined) or (read.before is None and read.later is None):
            return parsed(text, None)
        # The whole reader stopped after the first elements and made their values.
        start = read.offset
        if read.read_all and start is not None:
            # Well formed, and this element's value refused: the first error, unless
            # the input function takes it after all (the rest is then parsed).
            element = element_at(text, start)
            if element is not None:
                try:
                    decode(element)
                except Invalid as err:
                    reason = f"element {read.index}: {err.reason}"
                    raise Invalid(start + err.offset, reason) from None
        if start is None or text.find("{", start) >= 0 or text[skip_space(text, start)] in ",}":
            return parsed(text, read.values_before())
        # The rest holds no sub-array and begins with an element: it is parsed as an
        # array of its own (the bulk of an array of valid elements ending in a bad one
        # is neither split nor scanned again), its errors moved to where they are in
        # the whole text.
        try:
            rest = parsed("{" + text[start:], None, read.index, stopped=True)
        except Invalid as err:
            raise Invalid(err.offset + start - 1, err.reason) from None
        return cast(list[object], read.values_before()) + cast(list[object], rest)

    def bounded_whole(text: str) -> object | None:
        """A one-dimensional array with its bounds ("[0:2]={1,2,3}") read as whole_first
        reads one without, if it has as many elements as they say, at least one (else
        the token loop says so, before any element's error), and they are not quoted
        (its commas then count them)."""
        sizes, bounds, pos = parse_dims(text, 0)
        start = skip_space(text, pos)
        body = text[start:]
        if sizes != [body.count(",") + 1] or '"' in body or "{" in body[1:] or "}" in body[:-1]:
            return None  # (an empty one, "[5:4]={}", is the empty array: the token loop's)
        try:
            values = whole_first(body)
        except Invalid as err:
            raise Invalid(err.offset + start, err.reason) from None
        if isinstance(values, list) and [len(values)] == sizes:
            return array_value(values, sizes, bounds)
        return None

    def nested_whole(text: str) -> object | None:
        """A multidimensional array whose sub-arrays follow one another read by the whole
        reader as the one-dimensional array of its elements (nested_flat), unless they
        hold NULL or repeat (see below); None where that does not read it all."""
        assert whole is not None
        form = nested_flat(text)
        if form is None:
            return None
        shape, flat = form
        if "NULL" in flat.upper() or few_distinct(flat[1:]):
            return None
        values = whole(flat)
        if isinstance(values, list):
            return array_value(values, shape, [1] * len(shape))
        if isinstance(values, Declined) and values.before is not None and _plain(flat):
            # Every element is there and valid up to this one: if it is not, it is the
            # first error (the token loop would find the same after its syntax checks).
            index = values.index
            try:
                decode(flat[1:-1].split(",", index + 1)[index])
            except Invalid as err:
                offset = opening(text, element_start(text, index)) + err.offset
                raise Invalid(offset, f"element {index}: {err.reason}") from None
        return None

    def parsed(
        text: str, before: list[object] | None, first: int = 0, stopped: bool = False
    ) -> object:
        """The array ``text``, the values of its first elements ``before`` given, its
        elements numbered from ``first`` in errors; ``stopped``: a whole reader stopped
        at its first element (see converted)."""
        flat = flat_texts(text) if '"' in text else None
        if flat:
            try:
                return converted(flat, before, stopped)
            except ElementError as bad:
                # A flat array's elements are those of one run from offset 1.
                raise element_error(text, flat, [(0, 1, RUN)], bad, first) from None
        # Nested: only with many sub-arrays, each a step of the token loop (a few cost
        # less than the form's passes over every element).
        many = text[:2] == "{{" and text.count("{", 0, _MANY_BRACES) >= _MANY_BRACES // 16
        if many and whole is not None:
            values = nested_whole(text)
            if values is not None:
                return values
        form = nested_texts(text) if many else escaped_texts(text)
        if form is not None:
            shape, texts = form
            if (
                len(shape) > 1
                and whole is not None
                and None not in texts
                and not few_distinct(",".join(cast(list[str], texts[:SAMPLE])))
            ):
                # The elements of a multidimensional array, as one array for the whole
                # reader (numbers, bare intervals and addresses: its form or none),
                # unless they repeat (the table of distinct texts does better then).
                values = whole("{" + ",".join(cast(list[str], texts)) + "}")
                if isinstance(values, list):
                    return array_value(values, shape, [1] * len(shape))
                if isinstance(values, Declined) and values.before is not None:
                    # Those before it are valid: if it is not, it is the first bad one.
                    index = values.index
                    try:
                        decode(cast(str, texts[index]))
                    except Invalid as err:
                        offset = opening(text, element_start(text, index)) + err.offset
                        raise Invalid(offset, f"element {first + index}: {err.reason}") from None
            try:
                values = converted(texts, before if len(shape) == 1 else None, stopped)
            except ElementError as bad:
                index = texts.index(bad.token)  # type: ignore[arg-type]
                offset = opening(text, element_start(text, index)) + bad.error.offset
                raise Invalid(offset, f"element {first + index}: {bad.error.reason}") from None
            return array_value(values, shape, [1] * len(shape))
        shape, texts, spans, sizes, bounds = parse_text(text)
        if sizes is not None and bounds is not None:
            if shape and sizes != shape:
                raise Invalid(0, "array dimensions do not match the array contents")
            if not shape:
                bounds = []
        else:
            bounds = [1] * len(shape)

        try:
            values = converted(texts, before if len(shape) == 1 else None, stopped)
        except ElementError as bad:
            raise element_error(text, texts, spans, bad, first) from None
        return array_value(values, shape, bounds)

    def converted(
        items: list[str | None], before: list[object] | None, stopped: bool
    ) -> list[object]:
        """each_once_after; for the rest of an array that a whole reader stopped in
        (``stopped``), the element it stopped at is decoded alone first: most often the
        bad one, it is then found without converting the rest."""
        if stopped and items and items[0] is not None:
            try:
                decode(items[0])
            except Invalid as err:
                raise ElementError(items[0], err) from None
        return each_once_after(before, items, convert_all)

    return decode_text
