"""Two stories create a slot while a transaction is open: :func:`run_slot_creation_story`
(the command answers once the transaction ended), and
:func:`run_vanished_creation_story`, whose client vanishes mid-wait (the slot stays
listed until the transaction ends, then is dropped).

Told on one side (:class:`conformance.live_types.Side`) of the live-WAL check
(:mod:`conformance.live`), with what they read: a slot's row of pg_replication_slots
(:func:`_slot_shape`), the refusal of a replication command (:func:`_refusal`), and a
connection ended under a thread still in its execute() (:func:`_shut_down`).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from codec.pgoutput import Decoder
from codec.values import LSN
from conformance.live_observed import plain_message
from conformance.live_types import TRANSACTIONS, Consumer, Side

__all__ = ["VANISHED_ENDINGS", "run_slot_creation_story", "run_vanished_creation_story"]


class _SlotCreation:
    """CREATE_REPLICATION_SLOT in a thread of its own: it may block (psycopg 3's simple
    query protocol, as replication commands need)."""

    def __init__(self, dsn: str, name: str) -> None:
        import psycopg  # noqa: PLC0415 - a test-time dependency

        self.conn = psycopg.connect(dsn, autocommit=True, cursor_factory=psycopg.ClientCursor)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._create, args=(name,), daemon=True)
        self.thread.start()

    def _create(self, name: str) -> None:
        try:
            self.conn.execute(f"CREATE_REPLICATION_SLOT {name} LOGICAL pgoutput")
        except Exception as err:
            self.error = err

    def waiting(self, seconds: float) -> bool:
        self.thread.join(seconds)
        return self.thread.is_alive()

    def vanish(self, timeout: float) -> None:
        """The client goes away mid-command, as a process that dies (see
        :func:`_shut_down`); the connection is closed once execute() failed."""
        _shut_down(self.conn)
        if self.waiting(timeout):
            raise TimeoutError("the creating thread did not see its connection end")
        self.conn.close()

    @property
    def pid(self) -> int:
        return int(self.conn.info.backend_pid)

    def drop(self, name: str, timeout: float) -> None:
        """Drop the slot once the walsender that used it let it go."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.conn.execute(f"DROP_REPLICATION_SLOT {name}")
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self.conn.close()


def run_slot_creation_story(
    side: Side, options: Mapping[str, str], *, prepared: bool = False, timeout: float = 30.0
) -> dict[str, Any]:
    """A slot created while a transaction is open (or ``prepared``: prepared and not yet
    committed prepared): the command answers only once it ended (the snapshot builder
    waits for the transactions in progress, prepared ones among them), and the slot
    never decodes it, only what commits after."""
    import psycopg  # noqa: PLC0415 - a test-time dependency

    txn = side.begin()
    txn.write(TRANSACTIONS[0])
    end: Callable[[], object] = txn.commit
    if prepared:
        gid = f"{side.slot}_gid"
        txn.prepare(gid)
        end = lambda: side.commit_prepared(gid)  # noqa: E731 - a one-line step
    name = f"{side.slot}_late"
    creation = _SlotCreation(side.dsn, name)
    creator = creation.pid
    blocked = creation.waiting(1.5)
    with psycopg.connect(side.dsn, autocommit=True, cursor_factory=psycopg.ClientCursor) as other:
        # The slot exists while the command waits: listed, held by its walsender; its
        # name is taken.
        during = _slot_row(other, name)
        refused = {
            command: _refusal(side.dsn, f"{command} {name}" + suffix)
            for command, suffix in (
                ("DROP_REPLICATION_SLOT", ""),
                ("CREATE_REPLICATION_SLOT", " LOGICAL pgoutput"),
            )
        }
        end()
        created = not creation.waiting(timeout)
        after = _slot_row(other, name)
    side.commit(TRANSACTIONS[1])
    consumer = Consumer(dataclasses.replace(side, slot=name), options, timeout)
    received = consumer.read(1, acknowledge=True)
    consumer.kill()
    creation.drop(name, timeout)
    decoder = Decoder()

    def lsn(row: dict[str, Any] | None, column: str) -> int | None:
        return int(LSN.parse(row[column])) if row and row[column] else None

    return {
        "blocked_while_open": blocked,
        "created_after_its_end": created,
        "messages": [plain_message(decoder.decode(r.payload)) for r in received],
        "listed_while_waiting": _slot_shape(during, creator),
        "listed_once_created": _slot_shape(after, creator),
        "restart_lsn_kept": lsn(during, "restart_lsn") == lsn(after, "restart_lsn"),
        "restart_lsn_before_consistent_point": (lsn(after, "restart_lsn") or 0)
        <= (lsn(after, "confirmed_flush_lsn") or 0),
        "refused_while_waiting": {
            command: (state, message.replace(str(creator), "<pid>"))
            for command, (state, message) in refused.items()
        },
    }


#: How the transaction a slot creation waits for ends (:func:`run_vanished_creation_story`).
VANISHED_ENDINGS: tuple[str, ...] = ("commit", "rollback", "commit_prepared", "rollback_prepared")


def run_vanished_creation_story(
    side: Side, ending: str, *, timeout: float = 10.0
) -> dict[str, Any]:
    """A slot creation waits for an open transaction (``*_prepared``: a prepared one) and
    its client vanishes, its socket shut down as when a process dies; then the
    transaction ends as ``ending`` says (:data:`VANISHED_ENDINGS`). What another session
    sees of the slot (pg_replication_slots) and of its walsender (pg_stat_replication)
    while it waits, once its client is gone, and once the transaction ended."""
    import psycopg  # noqa: PLC0415 - a test-time dependency

    txn = side.begin()
    txn.write(TRANSACTIONS[0])
    gid = f"{side.slot}_gid"  # real_side rolls it back if the story fails
    ends: dict[str, Callable[[], object]] = {
        "commit": txn.commit,
        "rollback": txn.rollback,
        "commit_prepared": lambda: side.commit_prepared(gid),
        "rollback_prepared": lambda: side.rollback_prepared(gid),
    }
    if ending.endswith("_prepared"):
        txn.prepare(gid)
    name = f"{side.slot}_gone"
    creation = _SlotCreation(side.dsn, name)
    creator = creation.pid
    with psycopg.connect(side.dsn, autocommit=True, cursor_factory=psycopg.ClientCursor) as other:

        def seen() -> dict[str, Any]:
            walsender = other.execute(
                "SELECT state, sent_lsn, write_lsn, flush_lsn, replay_lsn, sync_state"
                f" FROM pg_stat_replication WHERE pid = '{creator}'"
            ).fetchone()
            return {"slot": _slot_shape(_slot_row(other, name), creator), "walsender": walsender}

        # Listed at once; its WAL reserved just after (ReplicationSlotReserveWal).
        deadline = time.monotonic() + timeout
        while (row := _slot_row(other, name)) is None or row["restart_lsn"] is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"slot {name} not listed with its WAL reserved")
            time.sleep(0.02)
        blocked = creation.waiting(0.2)
        during = seen()
        creation.vanish(timeout)
        side.client_gone(creator)
        gone = seen()
        ends[ending]()
        # The walsender notices, drops the slot and exits a moment after the end.
        deadline = time.monotonic() + timeout
        while (after := seen()) != {"slot": None, "walsender": None}:
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
    return {
        "blocked_while_open": blocked,
        "client_error": type(creation.error).__name__,
        "while_waiting": during,
        "once_the_client_is_gone": gone,
        "once_the_transaction_ended": after,
    }


def _slot_row(conn: Any, name: str) -> dict[str, Any] | None:
    """``name``'s row of pg_replication_slots, by column (None: not listed)."""
    cur = conn.execute(f"SELECT * FROM pg_replication_slots WHERE slot_name = '{name}'")
    row = cur.fetchone()
    return None if row is None else dict(zip([d.name for d in cur.description], row, strict=True))


def _slot_shape(row: dict[str, Any] | None, creator: int) -> dict[str, Any] | None:
    """A pg_replication_slots row with what differs between servers (positions, xids,
    OIDs, times) reduced to set or NULL, and active_pid to whether it is the creator's."""
    if row is None:
        return None
    out: dict[str, Any] = {}
    for column, value in row.items():
        if column == "active_pid":
            out[column] = None if value is None else ("creator" if value == creator else "other")
        elif column in ("datoid", "catalog_xmin", "xmin", "inactive_since", "safe_wal_size") or (
            column.endswith("_lsn") or column == "two_phase_at"
        ):
            out[column] = None if value is None else "set"
        else:
            out[column] = value
    return out


def _refusal(dsn: str, command: str, wait: float = 3.0) -> tuple[str | None, str]:
    """The SQLSTATE and message a replication command fails with at once, on a connection
    of its own; ("", "") if it succeeded, ("blocked", "") if it waited (then cancelled)."""
    import psycopg  # noqa: PLC0415 - a test-time dependency

    answer: list[tuple[str | None, str]] = []
    conn = psycopg.connect(dsn, autocommit=True, cursor_factory=psycopg.ClientCursor)

    def run() -> None:
        try:
            conn.execute(command)
            answer.append(("", ""))
        except Exception as err:
            answer.append((getattr(err, "sqlstate", None), str(err)))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(wait)
    if thread.is_alive():
        conn.cancel_safe()
        thread.join(wait)
        if thread.is_alive():
            # The cancel did not land in time. Closing the connection now would free
            # it under the thread still in execute() (see _shut_down): end the
            # connection under it instead, and close only once the thread is out.
            _shut_down(conn)
            thread.join(wait)
        if thread.is_alive():
            raise TimeoutError(f"{command!r} still running after its connection ended")
        conn.close()
        return "blocked", ""
    conn.close()
    return answer[0]


def _shut_down(conn: Any) -> None:
    """End ``conn``'s connection under a thread that may be inside its execute(), as a
    process that dies would: the socket is shut down (the server reads the end, the
    thread's execute() fails); the connection itself is left to close after that thread.

    Closing it under execute() is not safe: psycopg's C generators keep the PGconn
    pointer and the socket number while they wait, and close() frees both without the
    connection's lock, so the waiting thread reads on through a freed PGconn, from
    whatever connection reuses the socket number (and often the memory), which then
    never gets its answer."""
    with socket.socket(fileno=os.dup(conn.fileno())) as sock:
        sock.shutdown(socket.SHUT_RDWR)
