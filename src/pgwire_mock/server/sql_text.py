"""The text of SQL statements, before anything answers them.

A simple Query may hold several statements; the fake splits them on ``;`` outside
literals, quoted identifiers and comments, and matches each one normalized (comments
dropped, whitespace collapsed). PostgreSQL reports error positions in the text the
client sent, so :func:`source_offsets` maps the normalized text back to it.
:func:`check_syntax` gives the grammar's 42601 for a statement that starts with no SQL
keyword.

Kept apart from :mod:`pgwire_mock.server.sql` because it holds no state and knows no
answer: the extended protocol (:mod:`pgwire_mock.server.extended`) and the query cycle
(:mod:`pgwire_mock.server.queries`) cut and check statements with it too.
"""

from __future__ import annotations

import re
from typing import Final

from pgwire_mock.server.versions import error

__all__ = [
    "LITERAL",
    "check_syntax",
    "normalize",
    "skip_quoted",
    "source_offsets",
    "split_statements",
    "split_statements_at",
]

LITERAL: Final = r"'((?:[^']|'')*)'"
"""A string literal in a normalized statement; group 1 is its text with ``''`` kept."""


def skip_quoted(text: str, i: int) -> int | None:
    """Where a literal, quoted identifier or comment starting at ``i`` ends (the end of
    ``text`` when it is not closed); None when none starts there."""
    n = len(text)
    ch = text[i]
    if ch in "'\"":
        end = text.find(ch, i + 1)
        while end != -1 and end + 1 < n and text[end + 1] == ch:
            end = text.find(ch, end + 2)
        return n if end == -1 else end + 1
    if text.startswith("--", i):
        end = text.find("\n", i)
        return n if end == -1 else end + 1
    if text.startswith("/*", i):
        end = text.find("*/", i + 2)
        return n if end == -1 else end + 2
    return None


def split_statements(text: str) -> list[str]:
    """Split a simple Query on ``;`` outside quotes and comments (empty parts dropped)."""
    return [part for _, part in split_statements_at(text)]


def split_statements_at(text: str) -> list[tuple[int, str]]:
    """:func:`split_statements`, each part with the offset in ``text`` where it starts."""
    out: list[tuple[int, str]] = []
    start = 0
    i = 0
    n = len(text)
    while i <= n:
        after = skip_quoted(text, i) if i < n else None
        if after is not None:
            i = after
            continue
        if i == n or text[i] == ";":
            part = text[start:i]
            if _strip_comments(part).strip():
                out.append((start + len(part) - len(part.lstrip()), part.strip()))
            start = i + 1
        i += 1
    return out


def source_offsets(statement: str) -> list[int] | None:
    """For each character of ``normalize(statement)``, its index in ``statement``.

    PostgreSQL reports a position (the P field) in the query string as the client sent
    it; the fake matches the normalized text, so its positions are translated back.
    None if the walk does not rebuild what :func:`normalize` gives (it always should).
    """
    text, index = statement, list(range(len(statement)))
    for pattern in _COMMENTS:
        kept: list[str] = []
        kept_index: list[int] = []
        last = 0
        for m in pattern.finditer(text):
            kept.append(text[last : m.start()] + " ")
            kept_index += [*index[last : m.start()], index[m.start()]]
            last = m.end()
        kept.append(text[last:])
        kept_index += index[last:]
        text, index = "".join(kept), kept_index
    words = list(re.finditer(r"\S+", text))
    joined = " ".join(m.group() for m in words)
    offsets: list[int] = []
    for n, m in enumerate(words):
        if n:  # a run of whitespace (or comments) collapsed to one space: where it began
            offsets.append(index[words[n - 1].end()])
        offsets += index[m.start() : m.end()]
    trimmed = joined.rstrip(";")
    lead = len(trimmed) - len(trimmed.lstrip())
    trimmed = trimmed.strip()
    offsets = offsets[lead : lead + len(trimmed)]
    return offsets if trimmed == normalize(statement) else None


def check_syntax(statement: str, major: int) -> None:
    """What the SQL grammar of PostgreSQL ``major`` says of a statement that starts with
    no SQL keyword (42601, at its first character); the rest of the grammar is not
    checked."""
    text = normalize(statement)
    first = text.split(None, 1)[0] if text else ""
    if first.lower() not in _SQL_STARTS and not first.startswith("("):
        refused = error(major, "sql_syntax", token=first)
        refused.position = 1
        raise refused


_COMMENTS: Final = (re.compile(r"--[^\n]*"), re.compile(r"/\*.*?\*/", re.S))


def _strip_comments(text: str) -> str:
    for pattern in _COMMENTS:
        text = pattern.sub(" ", text)
    return text


def normalize(text: str) -> str:
    """A statement with comments dropped and whitespace collapsed (how answers match)."""
    return " ".join(_strip_comments(text).split()).rstrip(";").strip()


# First words of SQL statements (gram.y's stmt alternatives).
_SQL_STARTS: Final = frozenset(
    [
        "abort",
        "alter",
        "analyze",
        "begin",
        "call",
        "checkpoint",
        "close",
        "cluster",
        "comment",
        "commit",
        "copy",
        "create",
        "deallocate",
        "declare",
        "delete",
        "discard",
        "do",
        "drop",
        "end",
        "execute",
        "explain",
        "fetch",
        "grant",
        "import",
        "insert",
        "listen",
        "load",
        "lock",
        "merge",
        "move",
        "notify",
        "prepare",
        "reassign",
        "refresh",
        "reindex",
        "release",
        "reset",
        "revoke",
        "rollback",
        "savepoint",
        "security",
        "select",
        "set",
        "show",
        "start",
        "table",
        "truncate",
        "unlisten",
        "update",
        "vacuum",
        "values",
        "with",
    ]
)
