"""Record what a real walsender streams, for the conformance suite.

The caller owns the slot and the publication; this only reads, confirms and stops.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from codec.values import LSN
from pgwire_mock.client.blocking import DEFAULT_TIMEOUT, ReplicationConnection
from pgwire_mock.client.commands import OptionValue
from pgwire_mock.client.errors import ReplicationTimeoutError
from pgwire_mock.client.session import Keepalive, State, WalData


def capture_via_walsender(
    dsn: str,
    slot: str,
    start_lsn: LSN | int | str,
    options: Mapping[str, OptionValue],
    *,
    until_lsn: LSN | int | str | None = None,
    idle_timeout: float = 2.0,
    timeout: float = DEFAULT_TIMEOUT,
) -> list[tuple[LSN, bytes]]:
    """Stream ``slot`` from ``start_lsn`` and return ``(wal_start, payload)`` per XLogData.

    With ``until_lsn`` it stops like ``pg_recvlogical --endpos``: a message starting at
    ``until_lsn`` is the last one kept, one starting after it is dropped, and a keepalive
    whose wal_end reaches it proves nothing earlier is left. Not getting there before
    ``idle_timeout`` seconds without XLogData raises :class:`ReplicationTimeoutError`. Without
    ``until_lsn``, ``idle_timeout`` quiet seconds are the normal end.

    Before stopping with CopyDone it confirms (flush) the end of the last message kept,
    so the slot's confirmed_flush_lsn moves there, then it waits for the server to be
    idle again and closes with Terminate.
    """
    limit = None if until_lsn is None else LSN(until_lsn)
    captured: list[tuple[LSN, bytes]] = []
    confirmed = LSN(0)
    with ReplicationConnection.connect(dsn, timeout=timeout) as conn:
        # Errors before the stream starts (missing slot, bad option) raise here; the
        # events are read with read_stream(), which reports quiet periods.
        conn.start_replication(slot, start_lsn, options)
        last_data = time.monotonic()
        done = False
        while not done:
            quiet_for = time.monotonic() - last_data
            if quiet_for >= idle_timeout:
                if limit is not None:
                    raise ReplicationTimeoutError(
                        f"stream idle for {idle_timeout}s before reaching {limit} "
                        f"(last kept: {confirmed})"
                    )
                break
            for event in conn.read_stream(idle_timeout - quiet_for):
                if isinstance(event, WalData):
                    last_data = time.monotonic()
                    if limit is not None and event.wal_start > limit:
                        done = True
                        break
                    captured.append((event.wal_start, event.payload))
                    confirmed = max(confirmed, event.wal_end)
                    if limit is not None and event.wal_start == limit:
                        done = True
                        break
                elif isinstance(event, Keepalive) and limit is not None and event.wal_end >= limit:
                    done = True
                    break
            if conn.session.state is not State.STREAMING:
                # The server ended the stream on its own (shutting down): finish the
                # command so the connection closes cleanly.
                conn.wait_idle()
                break
        if conn.session.state is State.STREAMING:
            if confirmed:
                conn.send_status(flush=confirmed)
            conn.stop()
    return captured
