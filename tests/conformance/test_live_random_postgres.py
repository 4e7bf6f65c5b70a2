"""Random live-WAL stories (conformance.live_random) told on real PostgreSQL and on the
fake: for each connection of the consumer, the same messages. Two seeds a major: the
richest plain option set of the major, and its richest two-phase one (14: protocol 1);
the seeds differ by major, so that five majors tell ten stories. Each holds catalog
commands (TRUNCATE, ADD COLUMN) of a table left out of the publication while a
transaction runs, which count in its memory."""

from __future__ import annotations

import pytest

from conformance import live
from conformance.live_random import observed_phases, random_story, run_random_story
from conformance.provision import Server


@pytest.mark.parametrize("draw", [1, 2])
def test_a_random_live_story_is_the_same_on_postgres_and_on_the_fake(
    pg_server: Server, draw: int
) -> None:
    major = pg_server.version
    two_phase = draw == 2 and major >= 15
    sets = live.TWO_PHASE_OPTION_SETS if two_phase else live.OPTION_SETS
    usable = [options for least, options in sets if major >= least]
    options = usable[0] if draw == 2 and not two_phase else usable[-1]
    steps = random_story(100 * draw + major, catalog=True)
    names = live.new_names()
    with live.real_side(pg_server, names, second=True) as side:
        real = observed_phases(run_random_story(side, options, steps))
    with live.fake_side(major, names, second=True) as side:
        fake = observed_phases(run_random_story(side, options, steps))
    assert len(real) == 1 + steps.count(("restart",)) >= 2, steps
    # Something was sent again after a restart, or nothing was left unacknowledged.
    assert any(real[1:]), steps
    assert fake == real, (options, steps)
