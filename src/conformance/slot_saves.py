"""Where a logical slot moves and is saved: at running-xacts records, told on real
PostgreSQL and on the fake and compared as positions relative to the story's commits
and records.

PostgreSQL moves a slot's restart_lsn (and catalog_xmin) only at a running-xacts record
its walsender decoded, once the client has confirmed the record's position
(LogicalIncreaseRestartDecodingForSlot, LogicalConfirmReceivedLocation), and saves the
slot's file only then; other confirmations move confirmed_flush in memory. What a clean
restart of 14-16, or a crash, brings back is therefore the position confirmed when a
record last moved the slot. The story (:func:`run_saves_story`), with our client as the
consumer:

1. T0 is committed and confirmed, then a record is written (``pg_log_standby_snapshot()``
   on 16+, ``CHECKPOINT`` before): the client had confirmed its start, so the slot moves
   at once;
2. T1 is committed and confirmed: in memory only, restart_lsn stays;
3. T2 is committed, read but not confirmed, and a record follows: it waits for the
   confirmation of its position (one short of it, T2's commit_lsn, leaves the slot),
   which then moves the slot; the keepalive's position is confirmed after;
4. a transaction stays open across a third record: decoding must start before it, so the
   slot stays; it commits;
5. the server restarts fast (the client confirms everything the shutdown asks for), or
   crashes with a transaction left open (two more records then: the crashed
   transaction, never ended, holds restart_lsn at neither);
6. the client comes back and reads to a new commit.

Each step's slot positions are named by the story's points they equal (``c0``: T0's
commit end, ``r1``: the first record's start, ``r1_end``...), so two servers whose records
and commits have different sizes compare equal when they follow the same rules.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from codec.pgoutput import Decoder
from conformance.live_observed import plain_message
from conformance.live_types import OPEN_PARTS, TRANSACTIONS
from conformance.server_restart import RestartSide, read_until
from pgwire_mock.client import ConnectionLostError, Keepalive, ReplicationConnection, WalData

__all__ = ["SavesRun", "observed", "run_saves_story"]

#: Messages that end a transaction and carry its end_lsn: Commit, Stream Commit.
_COMMITS = (b"C", b"c")


@dataclass
class SavesRun:
    points: dict[str, int] = field(default_factory=dict)
    """The story's positions by name: commits' ends, records' starts and ends."""
    slot: dict[str, tuple[int, int]] = field(default_factory=dict)
    """After each step: the slot's (confirmed_flush, restart_lsn)."""
    after: list[WalData] = field(default_factory=list)  # the restarted stream


def run_saves_story(
    side: RestartSide, options: Mapping[str, str], *, crash: bool = False, timeout: float = 30.0
) -> SavesRun:
    """The story of the module docstring, on one side; with ``crash``, step 5 is an
    immediate shutdown (the client reads the connection's end)."""
    run = SavesRun()
    side.settle()
    stream_options = {**options, "publication_names": side.publication}
    consumer = ReplicationConnection.connect(side.dsn, timeout=timeout, auto_reply=False)
    events = consumer.start_replication(side.slot, 0, stream_options)

    def record(name: str) -> None:
        # Written, then read by the walsender: it sends a keepalive at the new end,
        # since its client has not confirmed that far.
        run.points[name] = side.wal_end()
        side.log_running_xacts()
        run.points[f"{name}_end"] = end = side.wal_end()
        _keepalive_at(events, end)

    side.commit(TRANSACTIONS[0])
    run.points["c0"] = _commit(events)[1]
    consumer.send_status(flush=run.points["c0"])
    _confirmed(side, run.points["c0"])
    record("r1")
    run.slot["1_record_after_a_confirmed_commit"] = side.slot_positions()

    side.commit(TRANSACTIONS[1])
    run.points["c1"] = _commit(events)[1]
    consumer.send_status(flush=run.points["c1"])
    _confirmed(side, run.points["c1"])
    run.slot["2_commit_confirmed"] = side.slot_positions()

    side.commit(TRANSACTIONS[3])
    run.points["c2_start"], run.points["c2"] = _commit(events)
    record("r2")
    run.slot["3_record_before_its_confirmation"] = side.slot_positions()
    consumer.send_status(flush=run.points["c2_start"])  # short of the record
    _confirmed(side, run.points["c2_start"])
    run.slot["3_confirmed_short_of_it"] = side.slot_positions()
    consumer.send_status(flush=run.points["c2"])
    _confirmed(side, run.points["c2"])
    run.slot["3_confirmed"] = side.slot_positions()
    consumer.send_status(flush=run.points["r2_end"])
    _confirmed(side, run.points["r2_end"])
    run.slot["3_keepalive_confirmed"] = side.slot_positions()

    txn = side.begin()
    txn.write(OPEN_PARTS[0])
    if options.get("streaming"):
        read_until(events, b"E")  # a block of it, streamed while it runs
    record("r3")
    consumer.send_status(flush=run.points["r3_end"])
    _confirmed(side, run.points["r3_end"])
    run.slot["4_record_inside_an_open_transaction"] = side.slot_positions()
    txn.commit()
    run.points["c3"] = _commit(events)[1]

    if crash:
        # A transaction left open never ends; after the restart it is not running, and
        # does not hold restart_lsn (measured on 14-18).
        side.begin().write(OPEN_PARTS[1])
        side.crash()
    else:
        side.begin_shutdown()
    try:
        for event in events:
            if isinstance(event, Keepalive) and event.reply_requested:
                consumer.send_status(flush=int(event.wal_end))
    except ConnectionLostError:
        pass
    consumer.close()
    side.start_again()
    run.slot["5_after_the_restart"] = side.slot_positions()

    again = ReplicationConnection.connect(side.dsn, timeout=timeout, auto_reply=False)
    events = again.start_replication(side.slot, 0, stream_options)
    if crash:
        run.after += read_until(events, *_COMMITS)  # the transaction committed at c3, again
        for name in ("r4", "r5"):
            record(name)
            again.send_status(flush=run.points[f"{name}_end"])
            _confirmed(side, run.points[f"{name}_end"])
            run.slot[f"6_record_{name}_after_the_crash"] = side.slot_positions()
    side.commit((("insert", 5, "five"),))
    while not any(b"five" in e.payload for e in run.after):
        run.after += read_until(events, b"C")
    again.close()
    return run


def _is_commit(event: WalData) -> bool:
    return event.payload[:1] in _COMMITS


def _commit(events: Iterator[object]) -> tuple[int, int]:
    """Read to the next commit (Commit or Stream Commit): where the transaction's end
    record starts and ends (commit_lsn, end_lsn)."""
    for event in events:
        if isinstance(event, WalData) and _is_commit(event):
            commit: Any = Decoder().decode(event.payload)
            return int(commit.commit_lsn), int(commit.end_lsn)
    raise AssertionError("the stream ended before a commit")


def _keepalive_at(events: Iterator[object], lsn: int) -> None:
    for event in events:
        if isinstance(event, Keepalive) and int(event.wal_end) >= lsn:
            return
    raise AssertionError("the stream ended before a keepalive at the new end of WAL")


def _confirmed(side: RestartSide, lsn: int, timeout: float = 10.0) -> None:
    """Wait until the walsender has read the client's confirmation of ``lsn``."""
    deadline = time.monotonic() + timeout
    while side.slot_positions()[0] < lsn:
        if time.monotonic() > deadline:
            raise AssertionError(f"confirmed_flush did not reach {lsn:X}")
        time.sleep(0.02)


def observed(run: SavesRun) -> dict[str, Any]:
    """What two servers following the same rules share: each step's slot positions by
    the story's point they equal, the records' sizes, and the restarted stream."""
    points = run.points

    def name(lsn: int) -> str:
        # The last point of that value: a record written right after a commit starts
        # where the commit ended, and is named as the record.
        names = [n for n, at in points.items() if at == lsn]
        return names[-1] if names else f"{lsn - points['c0']:+d} from c0"

    decoder = Decoder()
    return {
        "slot": {step: [name(c), name(r)] for step, (c, r) in run.slot.items()},
        # A record starts where the commit before it ended: nothing else was written.
        "records_follow_commits": [points["r1"] == points["c0"], points["r2"] == points["c2"]],
        "record_sizes": [points[f"r{i}_end"] - points[f"r{i}"] for i in (1, 2, 3)],
        "after": _runs([plain_message(decoder.decode(e.payload)) for e in run.after]),
    }


def _runs(messages: list[dict[str, Any]]) -> list[str]:
    """Messages as runs of one type, each with its first row's key: ``Insert 8000 x600``."""
    out: list[str] = []
    count = 0
    for i, message in enumerate(messages):
        count += 1
        if i + 1 < len(messages) and messages[i + 1]["type"] == message["type"]:
            continue
        first = messages[i + 1 - count]
        key = (first.get("new_tuple") or [""])[0]
        out.append(f"{message['type']} {key} x{count}".replace("  ", " "))
        count = 0
    return out
