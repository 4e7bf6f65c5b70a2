"""A table added to the publication and the subscription refreshed
(conformance.subscriber_refresh): PostgreSQL's own subscriber ends with the same tables
from the fake as from a real publisher of each major 14-18, equal to the publisher's."""

from __future__ import annotations

import uuid

from conformance import subscriber_refresh as refresh
from conformance.provision import Cluster, Server


def test_a_table_added_to_the_publication_is_synchronized_after_a_refresh_as_on_postgres(
    pg_server: Server, subscriber_cluster: Cluster
) -> None:
    tag = uuid.uuid4().hex[:8]
    with refresh.real_publisher(pg_server, tag) as pub:
        from_postgres = refresh.run(subscriber_cluster, pub)
        assert pub.rows is not None
        own = {table: pub.rows(table) for table in pub.tables}
    with refresh.fake_publisher(pg_server.version, tag) as pub:
        from_fake = refresh.run(subscriber_cluster, pub)
    assert from_postgres.rows == own  # what PostgreSQL does: both tables whole
    assert from_postgres.states == "rr" and from_postgres.errors == [], from_postgres
    assert from_fake == from_postgres
