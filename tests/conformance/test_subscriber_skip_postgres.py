"""A real PostgreSQL subscriber stopped by an apply error (a unique violation, with
disable_on_error) and brought back by ALTER SUBSCRIPTION ... SKIP or by removing the
conflicting row (conformance.subscriber_skip), against the fake emulating each
publisher major and against a real publisher of that major: the same table, the
same errors, the skip LSN used and cleared, the same messages before and after."""

from __future__ import annotations

from conformance import subscriber as sub
from conformance import subscriber_live as live
from conformance import subscriber_skip as skip
from conformance.provision import Cluster, Server

# disable_on_error and SKIP are the subscriber's, 15+: a 14 publisher gets a 15 subscriber
# (see the subscriber_cluster fixture).
SUBSCRIBER_MAJOR_AT_LEAST = 15


def test_a_subscriber_stopped_by_a_conflict_skips_or_reapplies_as_on_postgres(
    pg_server: Server, subscriber_cluster: Cluster
) -> None:
    """Skipped (small, and large and streamed) or fixed and applied again: the same on
    the fake as on PostgreSQL, and what each way should leave."""
    major = pg_server.version
    results = []
    for cell in skip.cells(major):
        table, publication = sub.new_names()
        with live.real_publisher(pg_server, table, publication) as pub:
            from_postgres = skip.run(subscriber_cluster, pub, cell)
        with live.fake_publisher(major, table, publication) as pub:
            from_fake = skip.run(subscriber_cluster, pub, cell)
        results.append((cell, from_postgres, from_fake))
    for cell, from_postgres, from_fake in results:
        own = from_postgres.own_rows
        assert own is not None
        assert from_fake.errors == from_postgres.errors, cell
        # 18 names the conflict ("conflict=insert_exists"), earlier majors the index.
        (error,) = from_postgres.errors
        assert "duplicate key" in error or "insert_exists" in error, cell
        if cell.options["streaming"] != "parallel":
            # In parallel, whether the finish LSN is logged, and how much of the stream
            # the leader reads before it learns of its worker's failure, are the
            # subscriber's own timing (see skip.cells).
            assert from_postgres.skip_lsn_given and from_fake.skip_lsn_given, cell
            assert from_fake.before_restart == from_postgres.before_restart, cell
        assert from_postgres.skip_lsn_after == from_fake.skip_lsn_after == "0/0", cell
        assert from_fake.rows == from_postgres.rows, cell
        if cell.skip:
            # None of the failed transaction; the subscriber's own row stays.
            expected = [row for row in own if row[0] < 8000 or row[0] == 9900]
            expected.append((skip.CONFLICT, "the subscriber's own"))
            assert from_postgres.rows == sorted(expected), cell
        else:
            assert from_postgres.rows == own, cell
        assert from_fake.after_restart == from_postgres.after_restart, cell
