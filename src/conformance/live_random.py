"""Random live-WAL stories: a seed draws a story from the steps the fixed stories
(:mod:`conformance.live_stories`) tell one at a time, and it is told on both sides of
the live-WAL check (:mod:`conformance.live`) with the same psycopg2 consumer.

The steps (:func:`random_story`): short commits (new rows, and an update or a delete of
a committed row); up to two transactions left open and written in turns (a row or two,
or 300 that bring them near logical_decoding_work_mem), with savepoints rolled back;
their ends by COMMIT, ROLLBACK or PREPARE TRANSACTION, a prepared one finished later by
COMMIT or ROLLBACK PREPARED; reads that acknowledge what they read or not; restarts of
the consumer; and, if asked, rows into a second table and catalog commands on it
(TRUNCATE, ADD COLUMN while no transaction holds its lock, and ALTER PUBLICATION ... ADD
or DROP TABLE of it), which count in the open transactions' memory. Every
story holds a restart, a 300-row write into an open transaction and a savepoint rolled
back (and a prepared transaction and a catalog command, if asked).

A read commits a marker row and reads until its commit, so that it ends at the same
place on both sides whatever came before (a transaction whose changes were all rolled
back to a savepoint sends nothing on 15+). After each step the story waits for the
walsender to read what was written, as the fixed stories do: what a walsender decodes
while a transaction runs differs from what it decodes after the fact.

What is compared (:func:`observed_phases`): for each connection of the consumer, every
message with what differs between servers taken out (``live_observed.plain_message``),
and whether it came at 0/0.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from itertools import count
from typing import Any, Final

from codec import pgoutput as po
from conformance.live_observed import plain_message
from conformance.live_types import (
    _ENDS,
    CATALOG_COMMANDS,
    Consumer,
    OpenTransaction,
    Received,
    Row,
    Side,
)

__all__ = ["Step", "observed_phases", "random_story", "run_random_story"]

Step = tuple[Any, ...]
"""("commit", rows, draw) | ("open",) | ("write", which, rows) | ("savepoint", which) |
("rollback_to", which) | ("end", which, commit | rollback | prepare) |
("finish", commit | rollback) | ("read", acknowledge) | ("restart",) |
("catalog", one of CATALOG_COMMANDS) | ("commit_x",) | ("write_x", which): a row into the
second table, committed or in an open transaction | ("alter_x", which, name): an int
column added to the second table in an open transaction (written stories only);
``which`` is the index of an open transaction, oldest first."""

#: Rows an open transaction writes at a time: the big one nears the memory limit.
_WRITES: Final = (1, 2, 300)
#: Keys of the rows a read commits as its marker.
_MARKERS: Final = 1_000_000
#: Seconds to wait after each step, for the walsender to read what it wrote.
_SETTLE: Final = 0.3


def random_story(
    seed: int, *, prepare: bool = True, catalog: bool = False, ddl: bool = False
) -> tuple[Step, ...]:
    """The story of ``seed``: drawn again until it holds a restart, a big write into an
    open transaction and a savepoint rolled back, with ``prepare`` a prepared
    transaction, and with ``catalog`` a catalog command while a transaction is open (the
    sides need ``second=True``); with ``ddl`` as well, open transactions may add columns
    to the second table (``alter_x``; by hand: the seeds of the others stay as they
    were)."""
    for attempt in count():
        steps = _draw(random.Random(f"{seed}/{attempt}"), prepare, catalog, ddl)
        if (
            ("restart",) in steps
            and any(s[0] == "write" and s[2] == max(_WRITES) for s in steps)
            and any(s[0] == "rollback_to" for s in steps)
            and (not prepare or any(s[0] == "end" and s[2] == "prepare" for s in steps))
            and (not catalog or _catalog_while_open(steps))
        ):
            return steps
    raise AssertionError("unreachable")


def _catalog_while_open(steps: tuple[Step, ...]) -> bool:
    running = 0
    for step in steps:
        running += (step[0] == "open") - (step[0] == "end")
        if step[0] == "catalog" and running:
            return True
    return False


def _draw(rnd: random.Random, prepare: bool, catalog: bool, ddl: bool) -> tuple[Step, ...]:
    steps: list[Step] = [("commit", 1, 0.0)]
    open_count = 0
    saved: list[bool] = []  # per open transaction: a savepoint was set
    wrote_x: list[bool] = []  # per open transaction: it holds a lock on the second table
    altered_x: list[bool] = []  # per open transaction: it holds ACCESS EXCLUSIVE on it
    prepared = prepared_x = prepared_altered = published = False
    columns = 0
    for _ in range(rnd.randint(10, 18)):
        if catalog and rnd.random() < 0.25:
            # TRUNCATE and ADD COLUMN would wait for a transaction that wrote the table;
            # anything on it would wait for one that altered it.
            locked = any(wrote_x) or prepared_x
            exclusive = any(altered_x) or prepared_altered
            choices: list[Step] = []
            if not exclusive:
                choices += [("commit_x",), ("catalog", "unpublish" if published else "publish")]
            choices += [
                ("write_x", which)
                for which in range(open_count)
                if not exclusive or altered_x[which]
            ]
            choices += [] if locked else [("catalog", c) for c in CATALOG_COMMANDS[:3]] * 2
            if ddl:
                choices += [
                    ("alter_x", which, f"a{columns}")
                    for which in range(open_count)
                    if not prepared_x
                    and not any(wrote_x[j] for j in range(open_count) if j != which)
                ] * 2
            if not choices:
                continue
            step = rnd.choice(choices)
            steps.append(step)
            published ^= step[-1] in ("publish", "unpublish")
            if step[0] in ("write_x", "alter_x"):
                wrote_x[step[1]] = True
            if step[0] == "alter_x":
                altered_x[step[1]] = True
                columns += 1
            continue
        roll = rnd.random()
        if roll < 0.15:
            steps.append(("commit", rnd.randint(1, 3), rnd.random()))
        elif roll < 0.27 and open_count < 2:
            steps.append(("open",))
            open_count += 1
            saved.append(False)
            wrote_x.append(False)
            altered_x.append(False)
        elif roll < 0.5 and open_count:
            steps.append(("write", rnd.randrange(open_count), rnd.choice(_WRITES)))
        elif roll < 0.55 and open_count:
            which = rnd.randrange(open_count)
            steps.append(("savepoint", which))
            saved[which] = True
        elif roll < 0.6 and open_count and any(saved):
            steps.append(("rollback_to", rnd.choice([i for i, s in enumerate(saved) if s])))
        elif roll < 0.7 and open_count:
            ends = ["commit", "commit", "rollback"] + (["prepare"] if prepare else [])
            end = rnd.choice(ends)
            if end == "prepare" and prepared:
                end = "commit"
            which = rnd.randrange(open_count)
            steps.append(("end", which, end))
            open_count -= 1
            del saved[which]
            prepared_x = prepared_x or (end == "prepare" and wrote_x[which])
            prepared_altered = prepared_altered or (end == "prepare" and altered_x[which])
            del wrote_x[which], altered_x[which]
            prepared = prepared or end == "prepare"
        elif roll < 0.75 and prepared:
            steps.append(("finish", rnd.choice(["commit", "rollback"])))
            prepared = prepared_x = prepared_altered = False
        elif roll < 0.9:
            steps.append(("read", rnd.random() < 0.5))
        else:
            steps.append(("restart",))
    steps += [("end", 0, "commit")] * open_count
    if prepared:
        steps.append(("finish", "commit"))
    steps.append(("read", True))
    return tuple(steps)


def run_random_story(
    side: Side, options: Mapping[str, str], steps: tuple[Step, ...], *, timeout: float = 30.0
) -> list[list[Received]]:
    """Tell ``steps`` on ``side``; what each connection of the consumer received."""
    phases: list[list[Received]] = [[]]
    consumer = Consumer(side, options, timeout)
    time.sleep(0.5)  # the walsender waits at the end of WAL
    opened: list[OpenTransaction] = []
    committed: list[int] = []  # keys of rows short commits wrote, still there
    next_key = 10
    markers = 0
    gid = f"{side.slot}_gid"
    for step in steps:
        kind = step[0]
        if kind == "commit":
            rows: list[Row] = [("insert", next_key + i, f"v{next_key + i}") for i in range(step[1])]
            next_key += step[1]
            if committed and step[2] < 0.5:  # and an update or a delete of a committed row
                key = committed[int(step[2] * 1000) % len(committed)]
                if step[2] < 0.25:
                    rows.append(("update", key, f"u{step[2]:.3f}"))
                else:
                    rows.append(("delete", key, ""))
                    committed.remove(key)
            side.commit(rows)
            committed += [key for verb, key, _ in rows if verb == "insert"]
        elif kind == "open":
            opened.append(side.begin())
        elif kind == "write":
            value = "row " + "x" * 40 if step[2] > 2 else "w"
            opened[step[1]].write([("insert", next_key + i, value) for i in range(step[2])])
            next_key += step[2]
        elif kind in ("savepoint", "rollback_to"):
            opened[step[1]].write([(kind, 0, "s")])
        elif kind == "end":
            txn = opened.pop(step[1])
            if step[2] == "prepare":
                txn.prepare(gid)
            elif step[2] == "rollback":
                txn.rollback()
            else:
                txn.commit()
        elif kind == "finish":
            (side.commit_prepared if step[1] == "commit" else side.rollback_prepared)(gid)
        elif kind == "catalog":
            assert side.catalog_command is not None, "a catalog story needs second=True"
            side.catalog_command(step[1])
        elif kind == "commit_x":
            side.commit([("insert_x", next_key, "")])
            next_key += 1
        elif kind == "write_x":
            opened[step[1]].write([("insert_x", next_key, "")])
            next_key += 1
        elif kind == "alter_x":
            opened[step[1]].write([("alter_x", 0, step[2])])
        elif kind == "read":
            markers += 1
            side.commit([("insert", _MARKERS + markers, "marker")])
            phases[-1] += _read_to(consumer, _MARKERS + markers, step[1])
        else:  # restart
            consumer.kill()
            consumer = Consumer(side, options, timeout)
            phases.append([])
        time.sleep(_SETTLE)
    consumer.kill()
    return phases


def _read_to(consumer: Consumer, key: int, acknowledge: bool) -> list[Received]:
    """Read up to the end of the transaction that inserted ``key``, acknowledging every
    end on the way if told."""
    decoder = po.Decoder()
    seen = False

    def last(received: Received) -> bool:
        nonlocal seen
        decoded = decoder.decode(received.payload)
        if isinstance(decoded, po.Insert):
            seen = seen or _key(decoded.new_tuple[0]) == key
        return seen and received.payload[:1] in _ENDS

    return consumer.read_until(last, acknowledge=acknowledge, waiting=lambda: f"the marker {key}")


def _key(value: object) -> int | None:
    """An int4 key as text or binary (``binary = true``)."""
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        return int.from_bytes(raw, "big", signed=True) if len(raw) == 4 else None
    return int(str(value)) if value is not None and str(value).lstrip("-").isdigit() else None


def observed_phases(phases: list[list[Received]]) -> list[list[dict[str, Any]]]:
    """Each connection's messages, with what differs between servers taken out and
    whether each came at 0/0."""
    out = []
    for received in phases:
        decoder = po.Decoder()
        out.append(
            [
                {**plain_message(decoder.decode(r.payload)), "at_0/0": r.wal_start == 0}
                for r in received
            ]
        )
    return out
