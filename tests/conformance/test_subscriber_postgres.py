"""A real PostgreSQL subscriber against the fake emulating each publisher major, with no
hand-written answers, and against a real publisher of that major holding the same data
(conformance.subscriber): the subscriptions end with equal tables, and those are the
publisher's own."""

from __future__ import annotations

import pytest

from conformance import provision
from conformance import subscriber as sub
from conformance.provision import Cluster, Server

PUBLISHERS = provision.MAJORS


@pytest.mark.parametrize("publisher", PUBLISHERS, ids=[f"publisher{p}" for p in PUBLISHERS])
def test_a_real_subscriber_gets_the_same_tables_from_the_fake_and_postgres(
    pg_server: Server, subscriber_cluster: Cluster, publisher: int
) -> None:
    major = pg_server.version
    cells = [(options, False) for options in sub.option_sets(major, publisher)]
    if min(major, publisher) >= 15:
        # A publication with a column list and a row filter.
        cells += [({"copy_data": "true"}, True), ({"copy_data": "true", "binary": "true"}, True)]
    results = []
    with provision.provide(publisher) as real:
        for options, filtered in cells:
            table, publication = sub.new_names()
            with sub.real_publisher(real, table, publication, filtered=filtered) as pub:
                from_postgres = sub.subscribe(subscriber_cluster, pub, options, filtered=filtered)
                own = pub.own_rows()
            with sub.fake_publisher(publisher, table, publication, filtered=filtered) as pub:
                from_fake = sub.subscribe(subscriber_cluster, pub, options, filtered=filtered)
            results.append((dict(options), filtered, from_postgres, from_fake, own))
    for options, filtered, from_postgres, from_fake, own in results:
        assert from_fake.states == from_postgres.states == ["r"], options
        assert from_fake.rows == from_postgres.rows, options
        if filtered:
            assert from_postgres.rows == [(i, None) for i, _ in own if i > 3], options
        elif options["copy_data"] == "true":
            assert from_postgres.rows == own, options
        else:
            assert len(from_postgres.rows) < len(own), options  # only what came after
