"""Fixtures shared by the conformance tests of third-party clients."""

from __future__ import annotations

import os

import pytest

from conformance import clients, provision


def require_client(name: str) -> str:
    """``name``, if its build is in the cache; a missing build fails the test, and skips
    it only outside CI when the user asked with ``PGWIRE_MOCK_SKIP_CLIENTS=1``."""
    try:
        clients.build_dir(name)
    except clients.ClientNotInstalledError as err:
        if not provision.in_ci() and os.environ.get("PGWIRE_MOCK_SKIP_CLIENTS") == "1":
            pytest.skip(str(err))
        pytest.fail(str(err), pytrace=False)
    return name


@pytest.fixture(params=sorted(clients.CLIENTS))
def client(request: pytest.FixtureRequest) -> str:
    """A client whose build is in the cache (see :func:`require_client`)."""
    return require_client(request.param)


@pytest.fixture
def go_client() -> str:
    """The ``go`` client, for tests of its acknowledgements (see :func:`require_client`)."""
    return require_client("go")
