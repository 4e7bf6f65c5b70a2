"""An array's elements converted by ranges when its bulk conversion declines.

A bulk conversion (:mod:`codec.values._bulk`) takes all of an array's elements or
declines, and it declines on any element it cannot read, valid or not. Converting every
element one by one instead costs the input function's price per element (2 us for an
interval, 10 for an IPv6 inet): an array of valid elements ending in one bad element
took up to 2.3 s per MB, and twice over, since the error's position was then found by
decoding from the start again.

Here a declined array is cut where the bulk conversion says it stopped
(:class:`Declined`), or else given to it again in ranges that double in length from the
left, a declined one halved, left before right, down to ranges short enough to convert
one by one. Everything before
an element is converted before it is, so the first element whose input function raises
is the first bad one of the array, and :class:`ElementError` says which. Each element the
bulk conversion cannot take costs about one more bulk pass over the array when it says
where it stopped, two when the range is halved; past a budget of such passes the rest is
converted one by one, which bounds the work by what converting every element one by one
costs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar

from codec.values._common import Invalid

Item = TypeVar("Item")

# Ranges this short go one by one: a bulk call's fixed cost (splitting, checks) is
# about what converting a few elements costs.
ONE_BY_ONE: Final = 16
# Elements the bulk conversion may be given after its first, whole pass, per element:
# enough for one element it cannot take anywhere in the array.
BUDGET: Final = 2


@dataclass(frozen=True, slots=True)
class Declined:
    """A bulk conversion's answer for a range it does not take whole, when it knows the
    first element it cannot take: those before ``index`` pass its checks. The range is
    then cut there instead of halved (about one bulk pass over an array ending in a bad
    element instead of two)."""

    index: int
    before: list[object] | None = None  # the values of those before, if it made them
    # A whole reader's: where element ``index`` begins in the array text, when the
    # elements before it are ``before``; the array decoder then parses only the rest.
    offset: int | None = None
    # A whole reader's, instead of ``before`` where making the values costs more than
    # checking them (an object each): made only once the rest decodes.
    later: Callable[[], list[object]] | None = None
    # A whole reader's: it read the whole array text, well formed, and refuses the value
    # of element ``index`` (out of range): that element is then the array's first error.
    read_all: bool = False

    def values_before(self) -> list[object] | None:
        """``before``, made now if it was left for later."""
        return self.before if self.later is None else self.later()


BulkResult = list[object] | Declined | None


class ElementError(Exception):
    """``token``, an element of the converted list, is the first that does not decode."""

    def __init__(self, token: object, error: Invalid) -> None:
        super().__init__(token, error)
        self.token = token
        self.error = error


def convert_ranges(
    items: list[Item],
    bulk: Callable[[list[Item]], BulkResult] | None,
    decode: Callable[[Item], object],
) -> list[object]:
    """The value of each of ``items``: by ``bulk`` where it takes a range, else by
    ``decode`` one at a time; ElementError for the first that ``decode`` refuses."""
    if bulk is None:
        return _one_by_one(items, decode, [])
    whole = bulk(items)
    if isinstance(whole, list):
        return whole
    values: list[object] = []
    budget = BUDGET * len(items)
    ranges = _cut(0, len(items), whole, values) or _from_the_left(len(items))
    while ranges:
        low, high = ranges.pop()
        if not ONE_BY_ONE < high - low <= budget:
            _one_by_one(items[low:high], decode, values)
            continue
        budget -= high - low
        taken = bulk(items[low:high])
        if isinstance(taken, list):
            values += taken
        else:
            middle = (low + high) // 2
            ranges += _cut(low, high, taken, values) or ((middle, high), (low, middle))
    return values


def _cut(low: int, high: int, answer: BulkResult, values: list[object]) -> list[tuple[int, int]]:
    """The ranges left of, at and right of where a bulk conversion stopped in
    ``low:high`` (pushed rightmost first; the left one taken into ``values`` when it
    made those), or none if it did not say where."""
    if not isinstance(answer, Declined) or not 0 <= answer.index < high - low:
        return []
    cut = low + answer.index  # one by one, between the two sides
    if answer.before is not None and len(answer.before) == answer.index:
        values += answer.before
        return [(cut + 1, high), (cut, cut + 1)]
    return [(cut + 1, high), (cut, cut + 1), (low, cut)]


def _from_the_left(count: int) -> list[tuple[int, int]]:
    """Ranges of ``count`` items that double in length from the left (pushed rightmost
    first): a bad element early in the array is found after short ranges, one late
    after ranges that add up to the array once; the range holding it is halved."""
    ranges, low, size = [], 0, 2 * ONE_BY_ONE
    while low < count:
        ranges.append((low, min(count, low + size)))
        low, size = low + size, 2 * size
    return ranges[::-1]


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
