"""How much of logical_decoding_work_mem the catalog snapshot and invalidations that ALTER
TABLE and TRUNCATE queue in a running transaction take, found where a streamed
transaction's first block ends, on real PostgreSQL and on the fake.

A transaction T writes one row of ``length`` bytes into the story's table, another
session commits the command (of another table: T holds no lock on it), and T writes 600
small rows and commits. With ``own``, T runs the command itself, and what its records
take in T (sizes.alter_table_memory, truncate_memory) moves the block instead. Streamed
with 64 kB, the first block ends at the row that crosses the limit: each byte of the
first row moves it, and so does each 16-byte invalidation message the command queued in
T. :func:`first_block_end` gives that row's key; :func:`boundary` finds, on the real
server, the length at which it moves back a row, where a wrong count of messages shows.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any, Final

from codec import pgoutput as po

__all__ = ["COMMANDS", "boundary", "fake_first_block_end", "real_first_block_end"]

#: The command → (its SQL, on tables ``{t}_b`` (id int key, v text: a primary key and a
#: TOAST table) and ``{t}_c`` (id int: neither); the script step's kind and arguments).
COMMANDS: Final[dict[str, tuple[str, tuple[Any, ...]]]] = {
    "TRUNCATE with an index and a TOAST table": ("TRUNCATE {t}_b", ("truncate", "b")),
    "ADD COLUMN that makes a TOAST table": (
        "ALTER TABLE {t}_c ADD COLUMN w text",
        ("alter", "c", ("w", "text"), ()),
    ),
    "DROP COLUMN": ("ALTER TABLE {t}_b DROP COLUMN v", ("alter", "b", None, ("v",))),
}

_ROWS: Final = range(3000, 3600)


def real_first_block_end(
    server: Any, command: str, length: int, *, own: bool = False
) -> int | None:
    """On a real server (``conformance.provision.Server``): the key of the last row in
    T's first streamed block (None if it was not streamed). With ``own``, T runs the
    command itself: what its records take in T's memory shows instead."""
    import psycopg  # noqa: PLC0415 - a test-time dependency

    from pgwire_mock.client import ReplicationConnection  # noqa: PLC0415

    tag = uuid.uuid4().hex[:8]
    t, pub, slot = f"catmem_{tag}", f"catmem_pub_{tag}", f"catmem_slot_{tag}"
    replication = psycopg.connect(server.replication_dsn, autocommit=True)
    with server.connect() as conn, server.connect() as txn, replication:
        for name in (t, f"{t}_b"):
            conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text)")
        conn.execute(f"CREATE TABLE {t}_c (id int)")
        replication.execute(f"CREATE PUBLICATION {pub} FOR TABLE {t}")
        replication.execute(f"CREATE_REPLICATION_SLOT {slot} LOGICAL pgoutput")
        txn.execute("BEGIN")
        txn.execute(f"INSERT INTO {t} VALUES (1, %s)", ("x" * length,))
        (txn if own else conn).execute(COMMANDS[command][0].format(t=t))
        txn.execute(
            f"INSERT INTO {t} SELECT g, 'v' FROM generate_series(%s::int, %s::int) g",
            (_ROWS[0], _ROWS[-1]),
        )
        txn.execute("COMMIT")
        consumer = ReplicationConnection.connect(
            f"{server.replication_dsn} options='-c logical_decoding_work_mem=64kB'",
            timeout=5,
            decode_pgoutput=True,
        )
        try:
            options = {"proto_version": "2", "streaming": "on", "publication_names": pub}
            events = consumer.start_replication(slot, 0, options)
            messages = (getattr(e, "message", None) for e in events)
            end = _first_block_end(messages)
        finally:
            consumer.close()
        replication.execute(f"DROP_REPLICATION_SLOT {slot} WAIT")
        replication.execute(f"DROP PUBLICATION {pub}")
        conn.execute(f"DROP TABLE {t}, {t}_b, {t}_c")
    return end


def fake_first_block_end(major: int, command: str, length: int, *, own: bool = False) -> int | None:
    """The same on the fake emulating ``major``."""
    from pgwire_mock.script import (  # noqa: PLC0415
        Script,
        Send,
        StreamOptions,
        alter_table,
        column,
        encode_stream,
        insert,
        truncate,
    )

    key, text = column("id", "int4", key=True), column("v", "text")
    script = Script(pg_version=major, logical_decoding_work_mem=64)
    script.table("public.t", columns=[key, text]).table("public.t_b", columns=[key, text])
    script.table("public.t_c", columns=[column("id", "int4")])
    script.publication("p", tables=["public.t"]).slot("s")
    script.begin("T").write("T", [insert("public.t", id=1, v="x" * length)])
    kind, table, *change = COMMANDS[command][1]
    step: Any
    if kind == "truncate":
        step = truncate(f"public.t_{table}")
    else:
        added, dropped = change
        add = [column(*added)] if added else []
        step = alter_table(f"public.t_{table}", add=add, drop=dropped)
    if own:
        script.write("T", [step])
    else:
        script.transaction([step])
    script.write("T", [insert("public.t", id=k, v="v") for k in _ROWS]).end("T")
    options = StreamOptions(proto_version=2, publication_names=("p",), streaming="on")
    decoder = po.Decoder()
    messages = (
        decoder.decode(e.payload) for e in encode_stream(script, options) if isinstance(e, Send)
    )
    return _first_block_end(messages)


def _first_block_end(messages: Iterator[po.PgOutputMessage | None]) -> int | None:
    last = None
    for message in messages:
        if isinstance(message, po.Insert):
            last = int(str(message.new_tuple[0]))
        elif isinstance(message, po.StreamStop):
            return last
        elif isinstance(message, po.StreamCommit) or (
            isinstance(message, po.Commit) and last is not None
        ):
            return None  # not streamed (14 sends the command's as an empty transaction)
    return None


def boundary(end_at: Callable[[int], int | None], period: int = 134) -> int:
    """The least first-row length in ``[1, period)`` whose block ends a row earlier
    than with a 0-byte row (each row of T's 600 takes ``period`` bytes, so there is one
    within a period), by bisection: 8 runs."""
    first = end_at(0)
    low, high = 0, period
    while high - low > 1:
        middle = (low + high) // 2
        if end_at(middle) == first:
            low = middle
        else:
            high = middle
    return high
