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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "pg_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.postgres)
