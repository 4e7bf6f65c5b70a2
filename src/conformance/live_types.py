"""What the live-WAL stories (:mod:`conformance.live`) share: the transactions they commit
(:data:`TRANSACTIONS`, :data:`LONG_TRANSACTIONS`, :data:`OPEN_PARTS`), the pgoutput
options by major, one server of the check (:class:`Side`, :class:`OpenTransaction`), what
the consumer receives (:class:`Received`, :class:`LiveRun`) and the psycopg2
:class:`Consumer` every story runs."""

from __future__ import annotations

import select
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

__all__ = [
    "CATALOG_COMMANDS",
    "LONG_TRANSACTIONS",
    "OPEN_PARTS",
    "OPTION_SETS",
    "TRANSACTIONS",
    "TWO_PHASE_OPTION_SETS",
    "Consumer",
    "LiveRun",
    "LongTransaction",
    "OpenTransaction",
    "Received",
    "Row",
    "Side",
]

#: (kind, id, value) rows of each transaction the story commits, in order. The third is
#: big enough to be streamed in blocks under a 64 kB logical_decoding_work_mem. Kinds:
#: insert, update, delete, and in an open transaction savepoint and rollback_to (value:
#: the savepoint's name); insert_x into the second table of a side made with
#: ``second=True`` (its key only), and alter_x adding an int column named value to it.
Row = tuple[str, int, str]
TRANSACTIONS: tuple[tuple[Row, ...], ...] = (
    (("insert", 1, "one"), ("insert", 2, "two"), ("insert", 3, "three")),
    (("update", 1, "uno"),),
    tuple(("insert", 100 + i, f"row {i:04d} " + "x" * 40) for i in range(600)),
    (("delete", 2, ""), ("insert", 4, "four"), ("update", 3, "tres")),
)


def _rows(first: int, count: int) -> tuple[Row, ...]:
    return tuple(("insert", first + i, f"row {i:04d} " + "x" * 40) for i in range(count))


#: A long transaction: parts of rows, each followed by a command (SAVEPOINT s1, ROLLBACK
#: TO SAVEPOINT s1, ... and its end, COMMIT or ROLLBACK); a part of 300 rows comes close
#: to logical_decoding_work_mem (64 kB).
LongTransaction = tuple[tuple[tuple[Row, ...], str], ...]
LONG_TRANSACTIONS: tuple[LongTransaction, ...] = (
    (
        (_rows(1000, 300), "SAVEPOINT s1"),
        (_rows(2000, 300), "ROLLBACK TO SAVEPOINT s1"),
        (_rows(3000, 100), "SAVEPOINT s2"),
        (_rows(4000, 100), "ROLLBACK"),  # s2 still open
    ),
    (
        (_rows(5000, 300), "SAVEPOINT s1"),
        (_rows(6000, 300), "ROLLBACK TO SAVEPOINT s1"),
        (_rows(7000, 100), "COMMIT"),
    ),
)

#: The parts of the transaction that stays open across the consumer's restart.
OPEN_PARTS: tuple[tuple[Row, ...], ...] = (_rows(8000, 600), _rows(9000, 10))

#: Messages that end a transaction for the consumer: Commit, Stream Commit, Prepare,
#: Stream Prepare, Commit Prepared, Rollback Prepared.
_ENDS = frozenset(bytes([c]) for c in b"CcPpKr")

#: Two-phase options by the least major that accepts them (the prepared story).
TWO_PHASE_OPTION_SETS: tuple[tuple[int, Mapping[str, str]], ...] = (
    (15, {"proto_version": "3", "two_phase": "on"}),
    (15, {"proto_version": "3", "two_phase": "on", "streaming": "on"}),
    (16, {"proto_version": "4", "two_phase": "on", "streaming": "parallel"}),
)

#: pgoutput options by the least major that accepts them.
OPTION_SETS: tuple[tuple[int, Mapping[str, str]], ...] = (
    (14, {"proto_version": "1"}),
    (14, {"proto_version": "2", "streaming": "on"}),
    (16, {"proto_version": "4", "streaming": "parallel", "binary": "true"}),
)


@dataclass(frozen=True, slots=True)
class Received:
    wal_start: int
    wal_end: int
    payload: bytes


@dataclass
class LiveRun:
    """What the consumer received in each phase, the slot's restart_lsn when it
    restarted and its confirmed_flush after."""

    first: list[Received]  # T0 acknowledged, T1 read without acknowledging
    after_restart: list[Received]
    confirmed_flush: int
    restart_lsn: int = 0
    final_restart_lsn: int | None = None
    """The slot's restart_lsn at the end, once a running-xacts record was decoded and
    confirmed after everything (stories that measure it)."""
    confirmed_at_restart: int | None = None
    """The slot's confirmed_flush when the consumer restarted (stories that measure it)."""


@dataclass
class Side:
    """One server of the check: where to connect, how to commit, how to read the slot."""

    dsn: str
    slot: str
    publication: str
    commit: Callable[[Sequence[Row]], object]
    slot_positions: Callable[[], tuple[int, int]]  # confirmed_flush, restart_lsn
    run_long: Callable[[LongTransaction], object]
    begin: Callable[[], OpenTransaction]
    commit_prepared: Callable[[str], object]
    rollback_prepared: Callable[[str], object]
    log_running_xacts: Callable[[], object]
    """Write a running-xacts record now (PostgreSQL moves restart_lsn only at one)."""
    client_gone: Callable[[int], object]
    """Wait until the server has read that the client of backend ``pid`` went away (a
    waiting walsender finds it in its socket when it reads again: nothing to wait for)."""
    catalog_command: Callable[[str], object] | None = None
    """With a second table (``second=True``): run a :data:`CATALOG_COMMANDS` one on it."""


#: Catalog commands on a side's second table (``{table}_x``, id int, not published at
#: first), which other transactions' decoding counts: TRUNCATE, ADD COLUMN of an int, of
#: a text (the first one gives the table its TOAST table), and ALTER PUBLICATION ... ADD
#: or DROP TABLE of it. Rows go into it with the Row kind ``insert_x``.
CATALOG_COMMANDS: Final = ("truncate", "add_int", "add_text", "publish", "unpublish")


class OpenTransaction(Protocol):
    """A transaction left open on one side: ``write`` adds rows (the WAL holds them once
    it returns), ``commit`` or ``prepare`` ends it."""

    def write(self, rows: Sequence[Row]) -> object: ...
    def commit(self) -> object: ...
    def rollback(self) -> object: ...
    def prepare(self, gid: str) -> object: ...


# --- the consumer ---------------------------------------------------------------------------


class Stream(Protocol):
    """Where a consumer streams from: a :class:`Side`, or another story's side."""

    dsn: str
    slot: str
    publication: str


class Consumer:
    """A psycopg2 logical replication consumer, as CDC consumers are written with it."""

    def __init__(self, side: Stream, options: Mapping[str, str], timeout: float) -> None:
        import psycopg2  # noqa: PLC0415 - a test-time dependency
        from psycopg2 import errors, extras  # noqa: PLC0415

        self.timeout = timeout
        deadline = time.monotonic() + timeout
        while True:
            self.conn = psycopg2.connect(
                side.dsn, connection_factory=extras.LogicalReplicationConnection
            )
            self.cur = self.conn.cursor()
            try:
                self.cur.start_replication(
                    slot_name=side.slot,
                    decode=False,
                    options={**options, "publication_names": side.publication},
                )
                break
            except errors.ObjectInUse:
                # PostgreSQL's walsender of the killed consumer may not have released the
                # slot yet: a restarting consumer retries, as real ones do.
                self.conn.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def read(self, commits: int, *, acknowledge: bool, blocks: int = 0) -> list[Received]:
        """Read until ``commits`` transactions and ``blocks`` streamed blocks ended;
        acknowledge each commit if told."""
        left = {"commits": commits, "blocks": blocks}
        if commits <= 0 and blocks <= 0:
            return []

        def counted(received: Received) -> bool:
            left["blocks"] -= received.payload[:1] == b"E"
            left["commits"] -= received.payload[:1] in _ENDS
            return left["commits"] <= 0 and left["blocks"] <= 0

        def waiting() -> str:
            done = commits - left["commits"]
            return (
                f"{done} of {commits} transactions ({left['blocks']} more streamed blocks awaited)"
            )

        return self.read_until(counted, acknowledge=acknowledge, waiting=waiting)

    def read_until(
        self,
        last: Callable[[Received], bool],
        *,
        acknowledge: bool,
        waiting: Callable[[], str],
    ) -> list[Received]:
        """Read up to the first message ``last`` says ends the read, acknowledging every
        transaction's end on the way if told; TimeoutError (``waiting()`` says for what)
        when the timeout passes first."""
        out: list[Received] = []
        deadline = time.monotonic() + self.timeout
        while True:
            message = self.cur.read_message()
            if message is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{waiting()} within the timeout")
                select.select([self.conn], [], [], min(left, 0.5))
                continue
            received = Received(message.data_start, message.wal_end, bytes(message.payload))
            out.append(received)
            if acknowledge and received.payload[:1] in _ENDS:
                self.cur.send_feedback(flush_lsn=message.data_start, force=True)
            if last(received):
                return out

    def read_to_the_end(self) -> str:
        """Read, acknowledging, until the server ends the stream; how psycopg2 reports
        that end: its error class and SQLSTATE ("" if it never ends within the timeout)."""
        import psycopg2  # noqa: PLC0415 - a test-time dependency

        try:
            while True:
                self.read(1, acknowledge=True)
        except psycopg2.Error as err:
            return f"{type(err).__name__} {err.pgcode}"
        except TimeoutError:
            return ""

    def kill(self) -> None:
        self.conn.close()
