"""The live-WAL check: a consumer reads transactions committed while it runs, is killed,
misses more, and restarts — against real PostgreSQL (commits in SQL) and against the fake
(commits through the pytest handle, ``WalSender.commit``) — and sees the same thing.

It is told in modules that depend one way, re-exported here for its users (the tests,
:mod:`conformance.subscriber_live`):

- :mod:`conformance.live_types`: what the stories share — the transactions they commit,
  the option sets, a :class:`Side` (one server), what the :class:`Consumer` receives;
- :mod:`conformance.live_stories`: a consumer killed and restarted (:func:`run_story`
  and the others);
- :mod:`conformance.live_observed`: what is compared of a run (:func:`observed`);
- :mod:`conformance.live_slot_creation`: a slot created while a transaction is open
  (:func:`run_slot_creation_story`, :func:`run_vanished_creation_story`);
- :mod:`conformance.live_sides`: the two sides (:func:`real_side`, :func:`fake_side`);
- :mod:`conformance.live_random`: random stories drawn from the same steps.
"""

from __future__ import annotations

from conformance.live_observed import observed
from conformance.live_sides import (
    FakeOpenTransaction,
    RealOpenTransaction,
    fake_side,
    new_names,
    real_side,
)
from conformance.live_slot_creation import (
    VANISHED_ENDINGS,
    _refusal,  # noqa: F401 - tests/pgwire_mock/test_live_refusal.py calls live._refusal
    run_slot_creation_story,
    run_vanished_creation_story,
)
from conformance.live_stories import (
    run_held_prepared_story,
    run_late_two_phase_story,
    run_long_story,
    run_open_story,
    run_prepared_restart_lsn_story,
    run_prepared_story,
    run_story,
    run_two_open_story,
    run_unconfirmed_prepare_story,
)
from conformance.live_types import (
    LONG_TRANSACTIONS,
    OPEN_PARTS,
    OPTION_SETS,
    TRANSACTIONS,
    TWO_PHASE_OPTION_SETS,
    Consumer,
    LiveRun,
    LongTransaction,
    OpenTransaction,
    Received,
    Row,
    Side,
)

__all__ = [
    "LONG_TRANSACTIONS",
    "OPEN_PARTS",
    "OPTION_SETS",
    "TRANSACTIONS",
    "TWO_PHASE_OPTION_SETS",
    "VANISHED_ENDINGS",
    "Consumer",
    "FakeOpenTransaction",
    "LiveRun",
    "LongTransaction",
    "OpenTransaction",
    "RealOpenTransaction",
    "Received",
    "Row",
    "Side",
    "fake_side",
    "new_names",
    "observed",
    "real_side",
    "run_held_prepared_story",
    "run_late_two_phase_story",
    "run_long_story",
    "run_open_story",
    "run_prepared_restart_lsn_story",
    "run_prepared_story",
    "run_slot_creation_story",
    "run_story",
    "run_two_open_story",
    "run_unconfirmed_prepare_story",
    "run_vanished_creation_story",
]
