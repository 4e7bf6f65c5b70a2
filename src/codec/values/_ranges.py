"""An array's elements converted by ranges when its bulk conversion declines.

A bulk conversion (:mod:`codec.values._bulk`) takes all of an array's elements or
declines, and it declines on any element it cannot read, valid or not. Converting every
element one by one instead costs the input function's price per element (2 us for an
interval, 10 for an IPv6 inet): an array of valid elements ending in one bad element
took up to 2.3 s per MB, and twice over, since the error's position was then found by
decoding from the start again.

Here a declined range is halved and each half given to the bulk conversion again, left
before right, down to ranges short enough to convert one by one. Everything before an
element is converted before it is, so the first element whose input function raises is
the first bad one of the array, and :class:`ElementError` says which. Each element the
bulk conversion cannot take costs about two more bulk passes over the array; past a
budget of such passes the rest is converted one by one, which bounds the work by what
converting every element one by one costs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeVar

from codec.values._common import Invalid

Item = TypeVar("Item")

# Ranges this short go one by one: a bulk call's fixed cost (splitting, checks) is
# about what converting a few elements costs.
ONE_BY_ONE: Final = 16
# Elements the bulk conversion may be given again after its first decline, per element.
BUDGET: Final = 4


class ElementError(Exception):
    """``token``, an element of the converted list, is the first that does not decode."""

    def __init__(self, token: object, error: Invalid) -> None:
        super().__init__(token, error)
        self.token = token
        self.error = error


def convert_ranges(
    items: list[Item],
    bulk: Callable[[list[Item]], list[object] | None] | None,
    decode: Callable[[Item], object],
) -> list[object]:
    """The value of each of ``items``: by ``bulk`` where it takes a range, else by
    ``decode`` one at a time; ElementError for the first that ``decode`` refuses."""
    if bulk is None:
        return _one_by_one(items, decode, [])
    whole = bulk(items)
    if whole is not None:
        return whole
    values: list[object] = []
    budget = BUDGET * len(items)
    middle = len(items) // 2
    ranges = [(middle, len(items)), (0, middle)]  # a stack: the leftmost range last
    while ranges:
        low, high = ranges.pop()
        if ONE_BY_ONE < high - low <= budget:
            budget -= high - low
            taken = bulk(items[low:high])
            if taken is None:
                middle = (low + high) // 2
                ranges += ((middle, high), (low, middle))
            else:
                values += taken
        else:
            _one_by_one(items[low:high], decode, values)
    return values


def _one_by_one(
    items: list[Item], decode: Callable[[Item], object], values: list[object]
) -> list[object]:
    """``values`` with the value of each of ``items`` appended."""
    done = len(values)
    try:
        values.extend(map(decode, items))
    except Invalid as err:
        # extend() kept the values made before the one that raised.
        raise ElementError(items[len(values) - done], err) from None
    return values
