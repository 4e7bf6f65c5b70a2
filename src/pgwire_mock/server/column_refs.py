"""Column references, and what PostgreSQL says when one names no column.

:func:`resolve_column` finds the column a reference in a select list or WHERE clause
names (``transformColumnRef``); :func:`missing_column` is ``errorMissingColumn``'s 42703
with its hint, the closest columns by edit distance (:func:`closest_columns`,
``updateFuzzyAttrMatchState``), all in ``parse_relation.c``.

Kept apart because the catalog views (:mod:`~pgwire_mock.server.catalog_views`) and the
subscriber's catalog queries (:mod:`~pgwire_mock.server.catalog`) both refuse unknown
columns this way.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import Final

from pgwire_mock.server.errors import ServerError
from pgwire_mock.server.versions import error

__all__ = ["closest_columns", "missing_column", "resolve_column"]

_FOLD: Final = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
# errorMissingColumn suggests columns at most this many edits away (parse_relation.c).
_MAX_FUZZY_DISTANCE: Final = 3


def _levenshtein(a: str, b: str) -> int:
    """Edit distance, every insertion, deletion and substitution costing 1 (what
    varstr_levenshtein computes with those costs, character by character)."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def closest_columns(names: Sequence[str], column: str) -> tuple[str, ...]:
    """The columns errorMissingColumn's hint names for an unknown ``column`` of a
    relation with ``names`` (updateFuzzyAttrMatchState): the closest within
    _MAX_FUZZY_DISTANCE edits and within half the wanted name's length in bytes; none
    when three or more are equally close. 14/15 lower the bar after such a tie where
    16+ keep it and forget the tie; with one relation both give the same answer."""
    distance = _MAX_FUZZY_DISTANCE + 1
    first: str | None = None
    second: str | None = None
    half = len(column.encode()) // 2
    for name in names:
        d = _levenshtein(name, column)
        if d > half:
            continue
        if d < distance:
            distance, first, second = d, name, None
        elif d == distance:
            if second is not None:
                first = second = None
            elif first is not None:
                second = name
    return tuple(n for n in (first, second) if n is not None)


def missing_column(
    major: int, relation: str, names: Sequence[str], column: str, *, qualified: bool
) -> ServerError:
    """42703 for ``column``, not among ``relation``'s ``names``, as ``major`` reports it
    (no position: the caller knows where the reference is)."""
    hints = closest_columns(names, column)
    kind = ("undefined_column", "undefined_column_hint", "undefined_column_two_hints")[len(hints)]
    first, second = (*hints, None, None)[:2]
    refused = error(major, kind, column=column, relation=relation, first=first, second=second)
    if qualified:  # errmsg("column %s.%s does not exist"): no quotes
        refused.message = f"column {relation}.{column} does not exist"
    return refused


def resolve_column(major: int, view: str, names: Sequence[str], reference: str, at: int) -> int:
    """The index of the column a reference (``col``, ``"Col"``, ``view.col``,
    ``pg_catalog.view.col``) names; ``at`` is where it starts in the normalized
    statement. Else PostgreSQL ``major``'s error, positioned there (transformColumnRef)."""
    # Quoted parts are kept as written; bare ones fold A-Z only (downcase_identifier
    # leaves multibyte characters alone).
    parts = [
        m.group(1).replace('""', '"') if m.group(1) is not None else m.group(2).translate(_FOLD)
        for m in re.finditer(r'"((?:[^"]|"")*)"|([^."]+)', reference)
    ]
    column = parts[-1]
    qualifier = parts[-2] if len(parts) > 1 else None
    if qualifier is not None and qualifier != view:
        refused = error(major, "missing_from_entry", relation=qualifier)
    elif len(parts) > 2 and parts[-3] != "pg_catalog":
        refused = error(major, "invalid_from_reference", relation=qualifier)
        why = (
            f'There is an entry for table "{view}", but it cannot be referenced from this '
            "part of the query."
        )
        if major >= 16:
            refused.detail = why
        else:
            refused.hint = why
    elif column in names:
        return names.index(column)
    else:
        refused = missing_column(major, view, names, column, qualified=qualifier is not None)
    refused.position = at + 1
    raise refused
