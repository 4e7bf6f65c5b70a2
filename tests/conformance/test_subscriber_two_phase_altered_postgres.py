"""PostgreSQL 18's subscriber turning two-phase on and off for a disabled subscription
(conformance.subscriber_two_phase_altered), against the fake emulating each publisher
major and against a real publisher of that major: the slot turns two-phase at the
restart (15+), a prepared transaction comes the same way, and turning it off succeeds or
fails alike (18 takes ALTER_REPLICATION_SLOT's TWO_PHASE; 17 refuses the option and
14-16 the command, with the same error), ending with the same table."""

from __future__ import annotations

from conformance import subscriber as sub
from conformance import subscriber_live as live
from conformance import subscriber_two_phase_altered as altered
from conformance.provision import Cluster, Server

# Altering two_phase is the subscriber's, 18+: every publisher gets an 18 subscriber
# (see the subscriber_cluster fixture).
SUBSCRIBER_MAJOR_AT_LEAST = 18


def test_two_phase_turned_on_and_off_for_a_disabled_subscription_as_on_postgres(
    pg_server: Server, subscriber_cluster: Cluster
) -> None:
    """On, then off: the slot's two_phase, the prepared transaction, the refusal of a
    publisher before 18 (the same error text), the table and the messages, alike."""
    major = pg_server.version
    table, publication = sub.new_names()
    with live.real_publisher(pg_server, table, publication) as pub:
        from_postgres = altered.run(subscriber_cluster, pub)
    with live.fake_publisher(major, table, publication) as pub:
        from_fake = altered.run(subscriber_cluster, pub)
    assert from_fake.turned_off == from_postgres.turned_off
    assert (from_postgres.turned_off is None) == (major >= 18)
    assert from_fake.slot_two_phase == from_postgres.slot_two_phase
    assert from_postgres.slot_two_phase == (False, major >= 15, 15 <= major < 18)
    assert from_fake.prepared_seen == from_postgres.prepared_seen == (1 if major >= 15 else 0)
    assert from_fake.prepared_after == from_postgres.prepared_after == 0
    assert from_fake.errors == from_postgres.errors
    assert from_fake.rows == from_postgres.rows == from_postgres.own_rows
    assert from_fake.received == from_postgres.received
