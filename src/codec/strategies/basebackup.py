"""Hypothesis strategies for BASE_BACKUP's CopyData payloads (:mod:`codec.basebackup`).

One strategy per message class, named after it in snake_case, plus
:func:`base_backup_messages` for any of them and :func:`base_backup_streams` for a whole
stream in the order a 15+ server sends it (archives, each with its data and progress,
then optionally the manifest)::

    from hypothesis import given
    from codec import basebackup
    from codec.strategies.basebackup import base_backup_messages

    @given(base_backup_messages())
    def test_round_trip(message):
        assert basebackup.decode(basebackup.encode(message)) == message

Strings may hold any character but NUL and lone surrogates outside U+DC80..U+DCFF (those
stand for non-UTF-8 bytes of the server's path), so ``encode`` never raises on them.
"""

from __future__ import annotations

from hypothesis import strategies as st

from codec._buffer import UINT64_MAX
from codec.basebackup import ArchiveData, BaseBackupMessage, ManifestStart, NewArchive, Progress

__all__ = [
    "archive_data",
    "base_backup_messages",
    "base_backup_streams",
    "manifest_start",
    "new_archive",
    "progress",
]

# Any character but NUL; escaped bytes 0x80-0xFF appear as U+DC80..U+DCFF.
_text = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\0")
    | st.characters(min_codepoint=0xDC80, max_codepoint=0xDCFF),
    max_size=40,
)


@st.composite
def new_archive(draw: st.DrawFn) -> NewArchive:
    return NewArchive(draw(_text), draw(_text))


def manifest_start() -> st.SearchStrategy[ManifestStart]:
    return st.just(ManifestStart())


@st.composite
def archive_data(draw: st.DrawFn) -> ArchiveData:
    return ArchiveData(draw(st.binary(max_size=256)))


@st.composite
def progress(draw: st.DrawFn) -> Progress:
    return Progress(draw(st.integers(0, UINT64_MAX)))


def base_backup_messages() -> st.SearchStrategy[BaseBackupMessage]:
    """Any one BASE_BACKUP CopyData message."""
    return st.one_of(new_archive(), manifest_start(), archive_data(), progress())


@st.composite
def _archive(draw: st.DrawFn) -> list[BaseBackupMessage]:
    body = draw(st.lists(archive_data() | progress(), max_size=6))
    return [draw(new_archive()), *body]


@st.composite
def base_backup_streams(draw: st.DrawFn) -> list[BaseBackupMessage]:
    """A whole stream as basebackup_copy.c orders it: at least one archive, each a
    NewArchive then its data (with progress reports between), then optionally
    ManifestStart and the manifest's data."""
    archives = draw(st.lists(_archive(), min_size=1, max_size=3))
    out: list[BaseBackupMessage] = [m for archive in archives for m in archive]
    if draw(st.booleans()):
        out.append(ManifestStart())
        out.extend(draw(st.lists(archive_data(), max_size=4)))
    return out
