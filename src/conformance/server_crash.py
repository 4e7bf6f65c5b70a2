"""A server crashed under a streaming consumer (``pg_ctl restart -m immediate``: every
process quits at once, the next start recovers), told on real PostgreSQL and on the fake
(``WalSender.restart(immediate=True)``), compared as the consumer sees it.

The story (:func:`run_crash_story`): the consumer applies and confirms two commits; a
transaction stays open with 600 rows (a streaming consumer gets a block of it); the
server crashes. The consumer reads the close and nothing else. After the restart the
slot's confirmed_flush is back where the slot was last saved — where it was created, as
no running-xacts record was confirmed — on every major, so the consumer gets both commits
again; the open transaction never ends (no record says it aborted): 14-17 stream it again
to a streaming consumer, without a Stream Abort, and 18 drops it. A new commit follows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from codec.pgoutput import Decoder
from conformance.live_observed import plain_message
from conformance.live_types import OPEN_PARTS, TRANSACTIONS
from conformance.server_restart import RestartSide, read_until
from conformance.subscriber_live import wait_for
from pgwire_mock.client import ConnectionLostError, Keepalive, ReplicationConnection, WalData

__all__ = ["CrashRun", "observed", "run_crash_story"]


@dataclass
class CrashRun:
    before: list[WalData]  # what the consumer read before the crash
    during: list[object]  # the events after it, to the close
    first_confirmed: int  # the first commit's end, confirmed
    confirmed_flush: int  # the slot's, after the restart
    restart_lsn: int
    xlogpos: int  # IDENTIFY_SYSTEM after the restart
    after: list[object]  # the restarted stream, to the new commit


def run_crash_story(
    side: RestartSide, options: Mapping[str, str], *, timeout: float = 30.0
) -> CrashRun:
    """The story of the module docstring, on one side."""
    stream_options = {**options, "publication_names": side.publication}
    consumer = ReplicationConnection.connect(side.dsn, timeout=timeout, auto_reply=False)
    events = consumer.start_replication(side.slot, 0, stream_options)
    before: list[WalData] = []
    confirmed: list[int] = []
    for rows in TRANSACTIONS[:2]:
        side.commit(rows)
        before += read_until(events, b"C")
        confirmed.append(before[-1].wal_start)
        consumer.send_status(flush=confirmed[-1])
    # In the walsender's memory before the crash: the slot's file does not have it.
    wait_for(lambda: side.slot_positions()[0] == confirmed[-1], timeout, "the confirmation")
    txn = side.begin()
    txn.write(OPEN_PARTS[0])
    if options.get("streaming"):
        before += read_until(events, b"E")  # a block of it, streamed while it runs
    side.crash()
    during: list[object] = []
    try:
        for event in events:
            during.append(event)
    except ConnectionLostError:
        during.append("closed")
    consumer.close()
    side.start_again()
    confirmed_flush, restart_lsn = side.slot_positions()
    again = ReplicationConnection.connect(side.dsn, timeout=timeout, auto_reply=False)
    xlogpos = int(again.identify_system().xlogpos)
    events = again.start_replication(side.slot, 0, stream_options)
    after: list[object] = []
    for event in events:  # what comes again, to the keepalive at the end of WAL
        after.append(event)
        if isinstance(event, Keepalive) and event.wal_end == xlogpos:
            break
    side.commit(TRANSACTIONS[3])
    after += read_until(events, b"C")
    again.close()
    return CrashRun(before, during, confirmed[0], confirmed_flush, restart_lsn, xlogpos, after)


def observed(run: CrashRun) -> dict[str, Any]:
    """What a consumer of ``run`` can rely on, equal on any two conforming servers."""
    decoder = Decoder()
    before = [plain_message(decoder.decode(e.payload)) for e in run.before]
    # Keepalives before the close: how many is the walsender's timing.
    during = [
        plain_message(decoder.decode(e.payload)) if isinstance(e, WalData) else e
        for e in run.during
        if not isinstance(e, Keepalive)
    ]
    decoder = Decoder()
    data = [e for e in run.after if isinstance(e, WalData)]
    last_before = max(e.wal_start for e in run.before)
    first_keepalive = next(e for e in run.after if isinstance(e, Keepalive))
    return {
        "before": before,
        "during": during,
        "confirmed_flush_before_the_first_commit": run.confirmed_flush < run.first_confirmed,
        "restart_lsn_at_or_before_confirmed_flush": run.restart_lsn <= run.confirmed_flush,
        # Past what was sent before: the end-of-recovery checkpoint's record at least.
        "xlogpos_past_what_was_sent": run.xlogpos > last_before,
        "first_keepalive_at_confirmed_flush": first_keepalive.wal_end == run.confirmed_flush,
        "after": [plain_message(decoder.decode(e.payload)) for e in data],
    }
