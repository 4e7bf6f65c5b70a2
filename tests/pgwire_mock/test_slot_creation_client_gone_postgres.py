"""A CREATE_REPLICATION_SLOT that waits for a transaction while its client vanishes,
told the same way to real PostgreSQL and to the fake (conformance.live): the slot stays
listed, active for its walsender, and the walsender in pg_stat_replication, until the
transaction ends (commit, rollback, COMMIT or ROLLBACK PREPARED); then both are gone,
the slot dropped, not made. The same without a network: test_slot_creation_client_gone.py."""

from __future__ import annotations

import pytest

from conformance import live
from conformance.provision import Server


@pytest.mark.parametrize("ending", live.VANISHED_ENDINGS)
def test_a_slot_whose_creator_vanished_stays_listed_until_the_transaction_ends(
    pg_server: Server, ending: str
) -> None:
    names = live.new_names()
    with live.real_side(pg_server, names) as side:
        real = live.run_vanished_creation_story(side, ending)
    with live.fake_side(pg_server.version, names) as side:
        fake = live.run_vanished_creation_story(side, ending)
    assert real["blocked_while_open"], real
    waiting = real["while_waiting"]
    assert waiting["slot"]["active"] and waiting["slot"]["active_pid"] == "creator", real
    assert waiting["slot"]["confirmed_flush_lsn"] is None, real
    assert waiting["walsender"] is not None and waiting["walsender"][0] == "startup", real
    # The walsender reads nothing while it waits: its client's end changes nothing.
    assert real["once_the_client_is_gone"] == waiting, real
    assert real["once_the_transaction_ended"] == {"slot": None, "walsender": None}, real
    assert fake == real
