"""ALTER TABLE and TRUNCATE committed while a transaction runs queue a catalog snapshot
and their invalidation messages in it, which count against logical_decoding_work_mem
(conformance.catalog_memory): a streamed transaction's first block ends at the same row
on the fake as on real PostgreSQL 14-18, at every length of its first row, so each
command's count of messages is PostgreSQL's (16 bytes each would move the boundary).
Run by the transaction itself, what the command's own records take in it is measured
the same way (sizes.alter_table_memory, truncate_memory)."""

from __future__ import annotations

import functools

import pytest

from conformance.catalog_memory import (
    COMMANDS,
    boundary,
    fake_first_block_end,
    real_first_block_end,
)
from conformance.provision import Server


@pytest.mark.parametrize("own", [False, True], ids=["another transaction's", "its own"])
@pytest.mark.parametrize("command", COMMANDS)
def test_a_catalog_commit_takes_the_same_memory_in_a_running_transaction(
    pg_server: Server, command: str, own: bool
) -> None:
    real = functools.partial(real_first_block_end, pg_server, command, own=own)
    fake = functools.partial(fake_first_block_end, pg_server.version, command, own=own)
    real_boundary = boundary(real)
    assert real_boundary < 134, "no row boundary within a row's length: the story changed"
    assert (fake(0), boundary(fake)) == (real(0), real_boundary)
