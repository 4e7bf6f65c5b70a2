"""A real PostgreSQL subscriber while its publisher restarts under it
(conformance.subscriber_publisher_restart), against a real publisher of each major and
the fake emulating it: the same table at the end, nothing applied twice, no error but
those of reaching the publisher while it is down."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from conformance import provision
from conformance import subscriber as sub
from conformance import subscriber_publisher_restart as story

SETTINGS: tuple[tuple[int, Mapping[str, str]], ...] = (
    (14, {"streaming": "off"}),
    (14, {"streaming": "on"}),
    (16, {"streaming": "parallel"}),
)


@pytest.fixture(scope="module")
def publisher_cluster(pg_server: provision.Server) -> Iterator[provision.Cluster]:
    """A publisher of pg_server's major for this module alone: it is restarted."""
    with provision.Cluster(provision.install(pg_server.version).installation) as cluster:
        yield cluster


@pytest.mark.parametrize("least_and_settings", SETTINGS, ids=["off", "on", "parallel"])
def test_a_subscriber_outlives_its_publishers_restart_as_on_postgres(
    publisher_cluster: provision.Cluster,
    subscriber_cluster: provision.Cluster,
    least_and_settings: tuple[int, Mapping[str, str]],
) -> None:
    least, settings = least_and_settings
    if publisher_cluster.version < least:
        pytest.skip(f"streaming = {settings['streaming']} needs PostgreSQL {least}")
    table, publication = sub.new_names()
    with story.real_publisher(publisher_cluster, table, publication) as pub:
        from_postgres = story.run(subscriber_cluster, pub, settings)
    with story.fake_publisher(publisher_cluster.version, table, publication) as pub:
        from_fake = story.run(subscriber_cluster, pub, settings)
    assert from_postgres.rows == 7, from_postgres
    assert from_postgres.errors == [], from_postgres
    assert from_fake == from_postgres
