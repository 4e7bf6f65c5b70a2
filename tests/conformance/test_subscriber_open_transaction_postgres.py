"""A real PostgreSQL subscriber restarted inside a transaction that stays open on the
publisher (conformance.subscriber_live), against the fake emulating the subscriber's
major and against a real publisher of that major: both subscriptions end with the same
table, the real publisher's own, and received the same messages."""

from __future__ import annotations

import pytest

from conformance import subscriber as sub
from conformance import subscriber_live as live
from conformance.provision import Cluster, Server


@pytest.mark.parametrize("while_down", [False, True], ids=["after_restart", "while_down"])
@pytest.mark.parametrize("rollback", [False, True], ids=["commit", "rollback"])
def test_a_subscriber_restarted_inside_an_open_transaction_gets_it_whole_or_not_at_all(
    pg_server: Server,
    subscriber_cluster: Cluster,
    rollback: bool,
    while_down: bool,
) -> None:
    """Disabled and enabled again while the transaction is open (after a streaming
    subscription got a block of it), the subscriber gets all of it once it commits and
    none of it once it rolls back (after the restart, or while it is down), from the
    fake as from PostgreSQL."""
    major = pg_server.version
    results = []
    for options in live.option_sets(major, major):
        table, publication = sub.new_names()
        with live.real_publisher(pg_server, table, publication) as pub:
            from_postgres = live.run(
                subscriber_cluster, pub, options, rollback=rollback, while_down=while_down
            )
        with live.fake_publisher(major, table, publication) as pub:
            from_fake = live.run(
                subscriber_cluster, pub, options, rollback=rollback, while_down=while_down
            )
        results.append((dict(options), from_postgres, from_fake))
    for options, from_postgres, from_fake in results:
        own = from_postgres.own_rows
        assert own is not None
        assert from_postgres.errors == from_fake.errors == [], options
        assert from_postgres.saw_open_transaction, options
        assert from_fake.saw_open_transaction, options
        assert from_postgres.confirmed_inside, options
        assert from_fake.confirmed_inside, options
        assert from_fake.rows == from_postgres.rows, options
        assert from_postgres.rows == own, options
        opened = [key for key, _ in own if 8000 <= key < 9900]
        assert len(opened) == (0 if rollback else 610), options
        assert from_fake.before_restart == from_postgres.before_restart, options
        if not (rollback and not while_down):
            # A rollback right after the restart: PostgreSQL's walsender reads the
            # transaction's last changes only once the abort record's flush brings them
            # (see conformance.subscriber_live), the fake's at once.
            assert from_fake.after_restart == from_postgres.after_restart, options
        if options["streaming"] != "off":
            # The real publisher streamed under its 64 kB logical_decoding_work_mem.
            assert (from_postgres.streamed_txns or 0) > 0, options
