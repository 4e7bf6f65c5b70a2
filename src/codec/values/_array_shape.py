"""The shape of an array value: nested lists (or a BoundedArray) flattened for encoding,
flat element values made nested again after decoding, and each distinct element converted
once. Shared by the text (codec.values._array_text) and binary (codec.values._array_binary)
array codecs."""

from __future__ import annotations

import operator
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import compress, count, repeat
from typing import TypeVar, cast

from codec.errors import EncodeError
from codec.values._array_forms import MAXDIM
from codec.values._common import SAMPLE, type_error

_Item = TypeVar("_Item", str, bytes)  # an element as parsed: its text, or its binary bytes


@dataclass(frozen=True, slots=True)
class BoundedArray:
    """An array whose lower bounds are not all 1 (``'[0:1]={a,b}'``).

    ``elements`` is the nested list a plain array would be; ``lower_bounds`` has one
    entry per dimension. Arrays whose lower bounds are all 1 decode as plain lists.
    """

    lower_bounds: tuple[int, ...]
    elements: list[object]


def _shape(value: list[object], name: str) -> list[int]:
    """Dimensions of a nested list, checking that it is rectangular."""
    shape: list[int] = []
    level: object = value
    while isinstance(level, list):
        if not level:
            if shape:
                raise EncodeError(f"{name}: a sub-array is empty; only the whole array can be")
            return shape
        shape.append(len(level))
        level = level[0]
    if len(shape) > MAXDIM:
        raise EncodeError(f"{name}: {len(shape)} dimensions exceed the maximum of {MAXDIM}")
    return shape


def _flatten(value: list[object], shape: list[int], name: str) -> list[object]:
    items: list[object] = []
    last = len(shape) - 1

    def walk(level: list[object], depth: int) -> None:
        if len(level) != shape[depth]:
            raise EncodeError(f"{name}: multidimensional arrays must be rectangular")
        if depth == last:
            for item in level:
                if isinstance(item, list):
                    raise EncodeError(f"{name}: multidimensional arrays must be rectangular")
            items.extend(level)
        else:
            for sub in level:
                if not isinstance(sub, list):
                    raise EncodeError(f"{name}: multidimensional arrays must be rectangular")
                walk(sub, depth + 1)

    walk(value, 0)
    return items


def _unflatten(items: list[object], shape: list[int]) -> list[object]:
    for size in reversed(shape[1:]):
        if size <= 64:  # many short rows: cut by zip() at C speed, not a step each
            items = list(map(list, zip(*[iter(items)] * size, strict=True)))
        else:
            items = [items[i : i + size] for i in range(0, len(items), size)]
    return items


def array_parts(value: object, name: str) -> tuple[list[int], list[int], list[object]]:
    """(shape, lower bounds, flat elements) of a list or BoundedArray."""
    if isinstance(value, BoundedArray):
        nested, bounds = value.elements, list(value.lower_bounds)
        if not isinstance(nested, list):
            raise type_error(name, nested, "a list in BoundedArray.elements")
    elif isinstance(value, list):
        nested, bounds = value, []
    else:
        raise type_error(name, value, "list or BoundedArray")
    shape = _shape(nested, name)
    if not bounds:
        bounds = [1] * len(shape)
    elif len(bounds) != len(shape):
        raise EncodeError(f"{name}: {len(bounds)} lower bounds for {len(shape)} dimensions")
    for size, low in zip(shape, bounds, strict=True):
        if not low >= -(1 << 31) or low + size - 1 > (1 << 31) - 1:
            raise EncodeError(f"{name}: lower bound {low} out of range")
    return shape, bounds, _flatten(nested, shape, name) if shape else []


def each_once(
    items: list[_Item | None], convert: Callable[[list[_Item]], list[object]]
) -> list[object]:
    """The values of ``items`` (None stays None), each distinct one converted once by
    ``convert`` (a 1 MB array of small elements holds few distinct ones); mostly distinct
    by their first SAMPLE, they are all converted in place, NULLs left where they are."""
    sample = items[:SAMPLE]
    if 2 * len(set(sample)) > len(sample):
        # Mostly distinct by a sample (a table of them all costs what it saves: 13 ms
        # for 131,072 texts, 30 with the values looked up again): converted in place,
        # repeats after the sample included, which costs what distinct elements would.
        if None not in items:
            return convert(cast(list[_Item], items))
        present = list(map(operator.is_not, items, repeat(None)))
        values = convert(cast(list[_Item], list(compress(items, present))))
        made = cast(list[object], list(items))
        deque(map(operator.setitem, repeat(made), compress(count(), present), values), 0)
        return made
    table: dict[_Item | None, object] = dict.fromkeys(items)
    table.pop(None, None)
    distinct = cast(list[_Item], list(table))
    values = convert(distinct) if distinct else []
    if all(map(operator.is_, values, distinct)):
        # Each value is its own text (text, "char", bytea's bytes): no table needed.
        return cast(list[object], items)
    table = dict(zip(distinct, values, strict=True))
    table[None] = None
    return list(map(table.__getitem__, items))


def each_once_after(
    before: list[object] | None,
    items: list[_Item | None],
    convert: Callable[[list[_Item]], list[object]],
) -> list[object]:
    """each_once of ``items``, but for the first ones, whose values ``before`` holds
    (a whole reader's, which stopped after them)."""
    if before is None or len(before) > len(items):
        return each_once(items, convert)
    return before + each_once(items[len(before) :], convert)


def array_value(items: list[object], shape: list[int], bounds: list[int]) -> object:
    nested = _unflatten(items, shape) if shape else []
    if any(low != 1 for low in bounds):
        return BoundedArray(tuple(bounds), nested)
    return nested
