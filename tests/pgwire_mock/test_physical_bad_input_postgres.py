"""Physical replication's bad input, fake (serving a physical recording) vs real 14-18:
slots of the wrong kind and logical commands on a physical walsender.

A start position beyond the end of WAL, an unknown timeline and WAL already removed are
compared in test_physical_postgres.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from physical_wire import error_fields, physical_connection, tags
from test_real_clients import FakeServer

from codec.wire import BackendMessage, CopyBothResponse, ErrorResponse
from conformance import provision
from pgwire_mock.record import record_physical


@pytest.fixture
def fake(pg_server: provision.Server, tmp_path: Path) -> Iterator[FakeServer]:
    path = tmp_path / "physical.jsonl"
    record_physical(pg_server.dsn, path)
    server = FakeServer(pg_server.version, path)
    try:
        yield server
    finally:
        server.stop()


def _outcome(messages: list[BackendMessage]) -> object:
    errors = [m for m in messages if isinstance(m, ErrorResponse)]
    if errors:
        return error_fields(messages)
    return tags(messages)


def _misuse(host: str, port: int) -> dict[str, object]:
    out: dict[str, object] = {}
    with (
        physical_connection(host, port) as physical,
        physical_connection(host, port, replication="database") as logical,
    ):
        physical.command("CREATE_REPLICATION_SLOT pgwm_bad_p PHYSICAL")
        logical.command("CREATE_REPLICATION_SLOT pgwm_bad_l LOGICAL pgoutput")
        try:
            for name, conn, sql in (
                (
                    "physical slot, logical",
                    logical,
                    "START_REPLICATION SLOT pgwm_bad_p LOGICAL 0/0",
                ),
                (
                    "logical slot, physical",
                    physical,
                    "START_REPLICATION SLOT pgwm_bad_l PHYSICAL 0/0",
                ),
                (
                    "logical slot on a physical walsender",
                    physical,
                    "CREATE_REPLICATION_SLOT pgwm_bad_x LOGICAL pgoutput",
                ),
                (
                    "logical streaming on a physical walsender",
                    physical,
                    "START_REPLICATION SLOT pgwm_bad_l LOGICAL 0/0",
                ),
                (
                    "missing slot, physical",
                    physical,
                    "START_REPLICATION SLOT pgwm_nope PHYSICAL 0/0",
                ),
            ):
                messages = conn.start(sql)
                assert not isinstance(messages[-1], CopyBothResponse), (name, messages)
                out[name] = _outcome(messages)
            out["after"] = tags(physical.command("IDENTIFY_SYSTEM"))
        finally:
            physical.command("DROP_REPLICATION_SLOT pgwm_bad_p")
            logical.command("DROP_REPLICATION_SLOT pgwm_bad_l")
    return out


def test_slots_of_the_wrong_kind_get_postgresqls_errors(
    pg_server: provision.Server, fake: FakeServer
) -> None:
    """A physical slot for logical decoding, a logical slot for physical replication, a
    logical slot or stream on a physical walsender, a missing slot: the same ErrorResponse
    (every field) before any CopyBothResponse, and the connection goes on."""
    real = _misuse(pg_server.host, pg_server.port)
    ours = _misuse("127.0.0.1", fake.port)
    assert ours == real
