"""A real PostgreSQL two-phase subscriber (15+) restarted around a prepared transaction
(conformance.subscriber_prepared), against the fake emulating each publisher major and
against a real publisher of that major (a 14 one sends the transaction whole at its
COMMIT PREPARED): both end with the same table, the real publisher's own, with no
prepared transaction left and no error, and received the same messages."""

from __future__ import annotations

from conformance import subscriber as sub
from conformance import subscriber_live as live
from conformance import subscriber_prepared as prepared
from conformance.provision import Cluster, Server

# two_phase subscriptions are the subscriber's, 15+: a 14 publisher gets a 15 subscriber
# (see the subscriber_cluster fixture).
SUBSCRIBER_MAJOR_AT_LEAST = 15


def test_a_two_phase_subscriber_restarted_around_a_prepare_ends_as_on_postgres(
    pg_server: Server, subscriber_cluster: Cluster
) -> None:
    """Restarted after its prepare (then the end alone comes) or inside the transaction,
    prepared while it is down; committed or rolled back prepared while the subscription
    is down or after it is enabled again; with and without streaming: the same on the
    fake as on PostgreSQL."""
    major = pg_server.version
    # A 14 publisher decodes no PREPARE for a subscriber: the transaction comes whole.
    decodes = major >= 15
    results = []
    for cell in prepared.cells(major):
        table, publication = sub.new_names()
        with live.real_publisher(pg_server, table, publication) as pub:
            from_postgres = prepared.run(subscriber_cluster, pub, cell, decodes_prepare=decodes)
        with live.fake_publisher(major, table, publication) as pub:
            from_fake = prepared.run(subscriber_cluster, pub, cell, decodes_prepare=decodes)
        results.append((cell, from_postgres, from_fake))
    for cell, from_postgres, from_fake in results:
        own = from_postgres.own_rows
        assert own is not None
        assert from_postgres.errors == from_fake.errors == [], cell
        at_restart = 0 if cell.prepare_while_down or not decodes else 1
        assert from_postgres.prepared_before == from_fake.prepared_before == at_restart, cell
        assert from_postgres.prepared_after == from_fake.prepared_after == 0, cell
        assert from_fake.rows == from_postgres.rows == own, cell
        opened = [key for key, _ in own if 8000 <= key < 9900]
        assert len(opened) == (0 if cell.rollback else 610 if cell.prepare_while_down else 600)
        assert from_fake.before_restart == from_postgres.before_restart, cell
        assert from_fake.after_restart == from_postgres.after_restart, cell
