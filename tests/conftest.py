"""Shared fixtures: real PostgreSQL servers come from conformance.provision."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conformance import provision

try:
    _MAJORS = provision.requested_majors()
except provision.ProvisionError as err:
    raise pytest.UsageError(f"PGWIRE_MOCK_PG_VERSIONS: {err}") from err


@pytest.fixture(scope="session", params=_MAJORS, ids=[f"pg{m}" for m in _MAJORS])
def pg_server(request: pytest.FixtureRequest) -> Iterator[provision.Server]:
    """A running PostgreSQL server, once per session per version in PGWIRE_MOCK_PG_VERSIONS.

    PGWIRE_MOCK_DSN_<major> points at the user's own server instead. A server that cannot
    be provided is an error, unless outside CI the user set PGWIRE_MOCK_SKIP_POSTGRES=1.
    """
    reason = provision.opted_out()
    if reason:
        pytest.skip(reason)
    with provision.provide(request.param) as server:
        yield server


@pytest.fixture(scope="module")
def subscriber_cluster(
    pg_server: provision.Server, request: pytest.FixtureRequest
) -> Iterator[provision.Cluster]:
    """A second cluster, for PostgreSQL's own subscriber: of pg_server's major, or of
    the test module's SUBSCRIBER_MAJOR_AT_LEAST where that is higher (a feature of the
    subscriber's own); its apply workers retry fast."""
    major = max(pg_server.version, getattr(request.module, "SUBSCRIBER_MAJOR_AT_LEAST", 0))
    installation = provision.install(major).installation
    settings = {"wal_retrieve_retry_interval": "200ms"}
    with provision.Cluster(installation, settings=settings) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def own_cluster(pg_server: provision.Server) -> Iterator[provision.Cluster]:
    """A cluster of pg_server's major for the test module alone: its tests restart or
    crash it, which ends every connection to it."""
    with provision.Cluster(provision.install(pg_server.version).installation) as cluster:
        yield cluster


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "pg_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.postgres)
