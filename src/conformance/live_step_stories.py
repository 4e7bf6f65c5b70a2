"""Live-WAL stories written as :mod:`conformance.live_random` steps, each the smallest
form of a rule a random story found the fake breaking, told on both sides with the
same consumer (``run_random_story``; the sides need ``second=True``).

A walsender started again after a transaction ended decodes it after the fact: CLOG
already shows how it ended.

- A savepoint rolled back. Streaming the transaction at the memory limit, each change
  is checked against its own subtransaction (SetupCheckXidLive): at the first change of
  the aborted one that needs a catalog access (a table not in the output plugin's
  cache), the block ends there, what the reorder buffer holds is thrown away, and that
  subtransaction collects no more; the transaction's later changes are still collected.
  Where the table was looked up before the savepoint, nothing is checked and the
  rolled-back rows are streamed, then aborted.
- A transaction prepared for a consumer that does not decode two-phase is not marked
  prepared in that walsender's reorder buffer: each later catalog commit queues a
  snapshot and invalidations in it (SnapBuildDistributeSnapshotAndInval), which count
  in its memory and stream as a block of their own. A two-phase consumer's walsender
  decoded the PREPARE, so it queues nothing there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from conformance import live
from conformance.live_random import Step, observed_phases, run_random_story
from conformance.live_types import OPTION_SETS, TWO_PHASE_OPTION_SETS
from conformance.provision import Server

__all__ = [
    "ALTER_IN_OPEN_TRANSACTIONS",
    "CATALOG_COMMITS_WHILE_PREPARED",
    "ROLLED_BACK_SAVEPOINTS",
    "StepStory",
    "differences",
    "options_for",
    "stories",
]

_HEAD: Final[tuple[Step, ...]] = (("commit", 1, 0.9), ("open",))
_BIG: Final[tuple[Step, ...]] = (("write", 0, 300), ("write", 0, 300))
_RESTART_AND_READ: Final[tuple[Step, ...]] = (("restart",), ("read", True))
_ROLLED_BACK: Final[tuple[Step, ...]] = (
    ("savepoint", 0),
    ("read", True),
    *_BIG,
    ("rollback_to", 0),
)


def _catalog_commits_while_prepared(count: int) -> tuple[Step, ...]:
    # 354 rows stay under the memory limit; about 7 ADD COLUMN commits then push the
    # prepared transaction past it (the fake's count; 300 rows take 29).
    return (
        *_HEAD,
        ("write", 0, 354),
        ("end", 0, "prepare"),
        *(("catalog", "add_int"),) * count,
        ("finish", "commit"),
        ("read", True),
    )


@dataclass(frozen=True)
class StepStory:
    """Steps for a consumer (two-phase or not), told on ``least`` and later majors."""

    steps: tuple[Step, ...]
    two_phase: bool = False
    least: int = 14


#: Stories decoded after the fact, with a savepoint rolled back.
ROLLED_BACK_SAVEPOINTS: Final[Mapping[str, StepStory]] = {
    # The cut at the first change, then the transaction's own later rows.
    "rows written after the rolled-back savepoint": StepStory(
        (*_HEAD, *_ROLLED_BACK, ("write", 0, 5), ("end", 0, "commit"), *_RESTART_AND_READ)
    ),
    "table looked up before the savepoint": StepStory(
        (*_HEAD, ("write", 0, 5), *_ROLLED_BACK, ("end", 0, "commit"), *_RESTART_AND_READ)
    ),
}

#: Stories with catalog commits while a transaction is prepared.
CATALOG_COMMITS_WHILE_PREPARED: Final[Mapping[str, StepStory]] = {
    # A random story's (seed 400) smallest form: the cut empties the transaction, and
    # the TRUNCATE queued in it after its PREPARE is a block of its own.
    "after a rolled-back savepoint": StepStory(
        (
            *_HEAD,
            *_ROLLED_BACK,
            ("end", 0, "prepare"),
            ("catalog", "truncate"),
            ("restart",),
            ("finish", "commit"),
            ("read", True),
        )
    ),
    # 14 also counts, in each snapshot, catalog commits from before the transaction
    # began (10 more before it moved the block 3 commits earlier in a story of 40; 15-18 not), and a
    # fake side's tables are declared, not created by commits: its block comes one
    # commit later there, so the story starts at 15.
    "past the memory limit": StepStory(_catalog_commits_while_prepared(12), least=15),
    "for a two-phase consumer": StepStory(
        _catalog_commits_while_prepared(12), two_phase=True, least=15
    ),
}


_PUBLISHED_X: Final[tuple[Step, ...]] = (
    ("commit", 1, 0.9),
    ("catalog", "publish"),
    ("commit_x",),
    ("read", True),
    ("open",),
)

#: Stories with ALTER TABLE ... ADD COLUMN inside an open transaction (of the second
#: table, published): the column is the transaction's until it ends, undone by a
#: rollback (of the transaction, a savepoint, or the prepared transaction).
ALTER_IN_OPEN_TRANSACTIONS: Final[Mapping[str, StepStory]] = {
    "committed": StepStory(
        (
            *_PUBLISHED_X,
            ("write", 0, 2),
            ("alter_x", 0, "c1"),
            ("write_x", 0),
            ("write", 0, 2),
            ("end", 0, "commit"),
            ("commit_x",),
            ("read", True),
        )
    ),
    "rolled back to a savepoint": StepStory(
        (
            *_PUBLISHED_X,
            ("savepoint", 0),
            ("alter_x", 0, "c1"),
            ("write_x", 0),
            ("rollback_to", 0),
            ("write_x", 0),
            ("end", 0, "commit"),
            ("commit_x",),
            ("read", True),
        )
    ),
    # After the first block: the memory the ALTER's own records take in the
    # transaction is the fake's estimate (see docs/live-wal.md), so no block ends by
    # memory after it here.
    "streamed, with a restart inside": StepStory(
        (
            *_PUBLISHED_X,
            *_BIG,
            ("alter_x", 0, "c1"),
            ("write_x", 0),
            ("read", True),
            ("restart",),
            ("write", 0, 2),
            ("end", 0, "commit"),
            ("commit_x",),
            ("read", True),
        )
    ),
    "prepared, then rolled back": StepStory(
        (
            *_PUBLISHED_X,
            ("alter_x", 0, "c1"),
            ("write_x", 0),
            ("end", 0, "prepare"),
            ("read", True),
            ("finish", "rollback"),
            ("commit_x",),
            ("read", True),
        ),
        two_phase=True,
        # 14 decodes no two-phase; there, after ROLLBACK PREPARED, PostgreSQL sends
        # the next transaction the altered table's Relation again and the fake does
        # not (measured with protocol 2; 15 and 16 without two-phase send none).
        least=15,
    ),
}


def stories(table: Mapping[str, StepStory], major: int) -> dict[str, StepStory]:
    """The stories of ``table`` told on ``major``."""
    return {name: story for name, story in table.items() if major >= story.least}


def differences(server: Server, table: Mapping[str, StepStory]) -> list[str]:
    """Tell each story of ``table`` that ``server``'s major has on it and on the fake
    (a second table on both); the names of those whose consumer got different messages."""
    major = server.version
    different = []
    for name, story in stories(table, major).items():
        options = options_for(major, story.two_phase)
        names = live.new_names()
        with live.real_side(server, names, second=True) as side:
            real = observed_phases(run_random_story(side, options, story.steps))
        with live.fake_side(major, names, second=True) as side:
            fake = observed_phases(run_random_story(side, options, story.steps))
        if not any(real) or fake != real:
            different.append(f"{name} ({dict(options)})")
    return different


def options_for(major: int, two_phase: bool) -> Mapping[str, str]:
    """The richest option set of ``major`` that streams, two-phase if asked and the
    major has it (14 has not: its richest plain set)."""
    sets = TWO_PHASE_OPTION_SETS if two_phase and major >= 15 else OPTION_SETS
    return [options for least, options in sets if major >= least][-1]
