"""A real PostgreSQL subscriber while its publisher restarts under it
(conformance.subscriber_publisher_restart), against a real publisher of each major and
the fake emulating it: the same table at the end, nothing applied twice, no error but
those of reaching the publisher while it is down."""

from __future__ import annotations

from collections.abc import Mapping

from conformance import provision
from conformance import subscriber as sub
from conformance import subscriber_publisher_restart as story

SETTINGS: tuple[tuple[int, Mapping[str, str]], ...] = (
    (14, {"streaming": "off"}),
    (14, {"streaming": "on"}),
    (16, {"streaming": "parallel"}),
)


def test_a_subscriber_outlives_its_publishers_restart_as_on_postgres(
    own_cluster: provision.Cluster, subscriber_cluster: provision.Cluster
) -> None:
    for least, settings in SETTINGS:
        if own_cluster.version >= least:
            # A serve process as the publisher once: what it adds is the process's
            # restart on its files, the same for every streaming mode.
            serve = settings is SETTINGS[0][1]
            _compared(own_cluster, subscriber_cluster, settings, serve=serve)


def _compared(
    publisher: provision.Cluster,
    subscriber: provision.Cluster,
    settings: Mapping[str, str],
    *,
    serve: bool,
) -> None:
    table, publication = sub.new_names()
    with story.real_publisher(publisher, table, publication) as pub:
        from_postgres = story.run(subscriber, pub, settings)
    with story.fake_publisher(publisher.version, table, publication) as pub:
        from_fake = story.run(subscriber, pub, settings)
    assert from_postgres.rows == 7, from_postgres
    assert from_postgres.errors == [], from_postgres
    assert from_fake == from_postgres, settings
    if serve:  # a serve process as the publisher, stopped and started again
        with story.serve_publisher(publisher.version, table, publication) as pub:
            assert story.run(subscriber, pub, settings) == from_postgres, settings
