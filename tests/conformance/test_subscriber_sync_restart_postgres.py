"""A real PostgreSQL subscriber restarted while its table sync copies a table of 200,000
rows (conformance.subscriber_sync_restart), against the fake emulating the subscriber's
major and against a real publisher of that major: the COPY is cut, the sync slot left
and dropped by the next sync worker, the table copied again, a change made meanwhile
applied after it; the same table and the same slots at the end, and no error."""

from __future__ import annotations

from conformance import subscriber as sub
from conformance import subscriber_sync_restart as sync
from conformance.provision import Cluster, Server


def test_a_subscriber_restarted_during_its_table_copy_ends_as_on_postgres(
    pg_server: Server, subscriber_cluster: Cluster
) -> None:
    table, publication = sub.new_names()
    with sync.real_publisher(pg_server, table, publication) as pub:
        from_postgres = sync.run(subscriber_cluster, pub)
    with sync.fake_publisher(pg_server.version, table, publication) as pub:
        from_fake = sync.run(subscriber_cluster, pub)
    assert from_postgres.state_at_restart == from_fake.state_at_restart == "d"
    assert from_postgres.rows == from_fake.rows == sync.ROWS + 1
    assert from_fake.checksum == from_postgres.checksum
    assert from_postgres.slots == from_fake.slots == ["<subscription>"]
    assert from_postgres.errors == from_fake.errors == []
