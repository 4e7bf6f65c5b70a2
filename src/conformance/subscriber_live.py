"""PostgreSQL's own subscriber restarted inside an open transaction, against the fake and
against a real publisher.

The publishers are conformance.subscriber's (its INITIAL rows and BEFORE transactions,
copied by the subscription's table sync). Once the subscription is synchronized, a
transaction begins on the publisher and writes :data:`OPEN_PARTS` [0] (600 rows, past the
64 kB logical_decoding_work_mem, so a streaming subscription gets a block of it while it
runs); once the subscriber has received that block (streaming) and confirmed a position
inside the transaction, the subscription is disabled and its apply worker and walsender
end. The open transaction writes 10 more rows, the subscription is enabled again, and
once the new walsender has sent something the transaction commits or rolls back (or it
ends while the subscription is down), followed by a short transaction the check waits
for. The restarted walsender must decode the open transaction again from its first
change, whatever position the subscriber confirmed before the restart: the subscriber
ends with all 610 rows, or none of them after a rollback.

The real publisher's walsenders run with logical_decoding_work_mem = 64kB through
``options`` in the subscription's conninfo (libpqwalreceiver keeps them, adding its own
``-c datestyle=...``), as the fake's script does.

What the subscriber receives is compared too (:class:`Tap` relays its connections and
keeps what the publisher streamed; :func:`shape` leaves out how many rows a block
holds). The counts differ for a reason outside the fake's model: PostgreSQL's WAL
writer flushes an open transaction's WAL only up to its last complete page
(XLogBackgroundFlush), so a walsender reads its last rows once something else flushes
them (a commit, the abort record, the bgwriter's running-xacts record) and confirms a
position a few dozen rows before the fake's, whose writes are readable at once. For the
same reason PostgreSQL's walsender has not read the transaction's last rows when it
rolls back right after the restart: it streams the transaction once they come, with
the abort record, finds it aborted at its first catalog lookup and sends an empty block
and Stream Abort, where the fake's has streamed it all before the rollback; only the
tables are compared there.
"""

from __future__ import annotations

import dataclasses
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from codec.pgoutput import Decoder, StreamStart
from conformance import live
from conformance import subscriber as sub
from conformance.subscriber_tap import Tap

__all__ = [
    "OPEN_PARTS",
    "ORIGIN_RACE",
    "RECEIVED",
    "SYNC_STATES",
    "WORKERS_LEFT",
    "Outcome",
    "Publisher",
    "error_lines",
    "fake_publisher",
    "log_since",
    "option_sets",
    "poll",
    "query_one",
    "real_publisher",
    "run",
    "shape",
    "subscription",
    "wait_for",
]

Row = sub.Row


def _rows(first: int, count: int) -> tuple[Row, ...]:
    return tuple(("insert", first + i, f"open {i:04d} " + "x" * 40) for i in range(count))


#: The open transaction's two writes: before the restart, and while the subscription is
#: disabled.
OPEN_PARTS: tuple[tuple[Row, ...], ...] = (_rows(8000, 600), _rows(9000, 10))

#: The short transaction committed after the open one ends (the check waits for its
#: marker row); after a commit it also updates a row of the open transaction.
AFTER_COMMIT: tuple[Row, ...] = (
    ("update", 8000, "changed after the commit"),
    ("insert", 9900, "marker"),
)
AFTER_ROLLBACK: tuple[Row, ...] = (("insert", 9900, "marker"),)


def option_sets(subscriber: int, publisher: int) -> list[Mapping[str, str]]:
    """No streaming, streaming on, and parallel where both are 16+."""
    sets: list[Mapping[str, str]] = [{"streaming": "off"}, {"streaming": "on"}]
    if min(subscriber, publisher) >= 16:
        sets.append({"streaming": "parallel"})
    return sets


class OpenTransaction(Protocol):
    """A transaction left open on the publisher."""

    def write(self, rows: Sequence[Row]) -> object: ...
    def commit(self) -> object: ...
    def rollback(self) -> object: ...
    def prepare(self, gid: str) -> object: ...


@dataclass
class Publisher:
    """conformance.subscriber's publisher, and what this story does on it besides."""

    base: sub.Publisher
    begin: Callable[[], OpenTransaction]
    end_of_wal: Callable[[], int]
    slot_active: Callable[[str], bool]
    confirmed_flush: Callable[[str], int]
    drop_slot: Callable[[str], None]
    # The slot's stream_txns in pg_stat_replication_slots (waiting for it to pass 0 if
    # told: 14 reports it asynchronously); None on the fake.
    streamed_txns: Callable[[str, bool], int | None]
    # COMMIT PREPARED, or ROLLBACK PREPARED if told, of a prepared transaction's gid.
    finish_prepared: Callable[[str, bool], None]
    # Whether the slot decodes prepared transactions (pg_replication_slots.two_phase).
    slot_two_phase: Callable[[str], bool]


@dataclass
class Outcome:
    """The subscriber's table after the story, and what it observed on the way."""

    rows: list[tuple[int, str | None]]
    # Before the restart: the subscriber had a block of the open transaction (streaming:
    # its changes file, or a parallel apply worker) or else a position inside it, and
    # had confirmed a position inside it.
    saw_open_transaction: bool
    confirmed_inside: bool
    errors: list[str]  # the subscriber's ERROR lines during the run
    streamed_txns: int | None  # the real publisher's count for the subscription's slot
    own_rows: list[tuple[int, str]] | None  # the real publisher's table
    # What the subscriber received before and after the restart (:func:`shape`).
    before_restart: list[str]
    after_restart: list[str]


# --- the publishers -------------------------------------------------------------------------


@contextmanager
def real_publisher(server: Any, table: str, publication: str) -> Iterator[Publisher]:
    """conformance.subscriber's real publisher; the subscription's walsenders run with
    logical_decoding_work_mem = 64kB (``options`` in its conninfo)."""
    from psycopg import conninfo, sql  # noqa: PLC0415 - a test-time dependency

    with sub.real_publisher(server, table, publication) as base, server.connect() as conn:
        dsn = conninfo.make_conninfo(base.conninfo, options="-c logical_decoding_work_mem=64kB")

        def scalar(query: str, *args: object) -> Any:
            row = conn.execute(query, args).fetchone()
            return None if row is None else row[0]

        def streamed_txns(slot: str, wait: bool) -> int:
            query = "SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = %s"
            deadline = time.monotonic() + (2 if wait else 0)
            count = int(scalar(query, slot) or 0)
            while count == 0 and time.monotonic() < deadline:
                time.sleep(0.1)
                count = int(scalar(query, slot) or 0)
            return count

        def drop_slot(slot: str) -> None:
            deadline = time.monotonic() + 10
            while scalar("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", slot):
                try:
                    conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                except Exception:  # its walsender may not have exited yet
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)

        def finish_prepared(gid: str, rollback: bool) -> None:
            verb = "ROLLBACK" if rollback else "COMMIT"
            conn.execute(sql.SQL(verb + " PREPARED {}").format(sql.Literal(gid)))

        yield Publisher(
            dataclasses.replace(base, conninfo=dsn),
            lambda: live.RealOpenTransaction(server.connect(), sql.Identifier(table)),
            lambda: int(scalar("SELECT pg_current_wal_lsn() - '0/0'")),
            lambda slot: bool(
                scalar("SELECT active FROM pg_replication_slots WHERE slot_name = %s", slot)
            ),
            lambda slot: int(
                scalar(
                    "SELECT confirmed_flush_lsn - '0/0' FROM pg_replication_slots "
                    "WHERE slot_name = %s",
                    slot,
                )
            ),
            drop_slot,
            streamed_txns,
            finish_prepared,
            lambda slot: bool(
                scalar("SELECT two_phase FROM pg_replication_slots WHERE slot_name = %s", slot)
            ),
        )


@contextmanager
def fake_publisher(major: int, table: str, publication: str) -> Iterator[Publisher]:
    """conformance.subscriber's fake publisher; the open transaction is
    ``WalSender.begin``."""
    from pgwire_mock.script import CommitPrepared, RollbackPrepared  # noqa: PLC0415

    with sub.fake_publisher(major, table, publication) as base:
        server = base.server
        name = f"public.{table}"

        def slot_active(slot: str) -> bool:
            info = server.slots.get(slot)
            return info is not None and bool(info.active)

        yield Publisher(
            base,
            lambda: live.FakeOpenTransaction(server, lambda rows: sub.script_changes(name, rows)),
            lambda: int(server.end_of_wal),
            slot_active,
            lambda slot: int(server.slots[slot].confirmed_flush),
            lambda _slot: None,  # gone with the server
            lambda _slot, _wait: None,
            lambda gid, rollback: server.append(
                (RollbackPrepared if rollback else CommitPrepared)(gid)
            ),
            lambda slot: bool(server.slots[slot].two_phase),
        )


# --- the story ------------------------------------------------------------------------------


#: The table-sync states of the subscription named by the parameter, in relation order
#: (pg_subscription_rel.srsubstate: 'd' copying, 'r' ready, ...).
SYNC_STATES: Final = (
    "SELECT string_agg(srsubstate::text, '' ORDER BY srrelid) FROM pg_subscription_rel r"
    " JOIN pg_subscription s ON s.oid = r.srsubid WHERE s.subname = %s"
)
#: The leader apply worker's last received position (relid NULL; 16+ parallel apply
#: workers have no received_lsn), for the subscription named by the parameter.
RECEIVED: Final = (
    "SELECT max(received_lsn - '0/0') FROM pg_stat_subscription "
    "WHERE subname = %s AND relid IS NULL"
)
#: How many logical replication workers run, the launcher aside: a worker leaves
#: pg_stat_subscription before it releases the replication origin (on_shmem_exit), and
#: a new one started in between fails ("replication origin ... is already active").
WORKERS_LEFT: Final = (
    "SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'logical replication%'"
    " AND backend_type <> 'logical replication launcher'"
)


@contextmanager
def subscription(
    conn: Any, name: str, conninfo: str, publication: str, table: str, settings: Mapping[str, str]
) -> Iterator[None]:
    """On the subscriber's connection ``conn``: table ``table`` (id int PRIMARY KEY, v
    text) and subscription ``name`` to ``publication`` at ``conninfo`` with ``settings``;
    on exit the subscription is dropped without its slot (the publisher's to drop), any
    transaction it left prepared rolled back, and the table dropped."""
    from psycopg import sql  # noqa: PLC0415 - a test-time dependency

    ident, table_ident = sql.Identifier(name), sql.Identifier(table)
    conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(table_ident))
    conn.execute(
        sql.SQL("CREATE SUBSCRIPTION {} CONNECTION {} PUBLICATION {} WITH ({})").format(
            ident,
            sql.Literal(conninfo),
            sql.Identifier(publication),
            sql.SQL(", ".join(f"{k} = {v}" for k, v in settings.items())),
        )
    )
    try:
        yield
    finally:
        conn.execute(sql.SQL("ALTER SUBSCRIPTION {} DISABLE").format(ident))
        conn.execute(sql.SQL("ALTER SUBSCRIPTION {} SET (slot_name = NONE)").format(ident))
        conn.execute(sql.SQL("DROP SUBSCRIPTION {}").format(ident))
        # A two-phase subscription's (pg_gid_<subscription>_<xid>) would hold the table.
        for (gid,) in conn.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'pg_gid_%%'"
        ).fetchall():
            conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
        conn.execute(sql.SQL("DROP TABLE {}").format(table_ident))


def log_since(log: Path, start: int) -> list[str]:
    """The lines of the subscriber's ``log`` from byte ``start``."""
    with log.open("rb") as f:
        f.seek(start)
        return f.read().decode(errors="replace").splitlines()


#: The subscriber's own race when its apply worker starts again at once: the worker
#: that ended (a parallel apply worker, or the leader itself) still holds the origin.
ORIGIN_RACE: Final = "is already active for PID"

# A log line's prefix (time and process id), which two runs do not share.
_LOG_PREFIX: Final = re.compile(r"^.*?\[\d+\] ")


def error_lines(
    log: Path, start: int, name: str | None = None, leave_out: tuple[str, ...] = ()
) -> list[str]:
    """The subscriber's ERROR lines in ``log`` from byte ``start``, without their time
    and process and with the subscription's ``name`` as "<subscription>", but those
    holding any of ``leave_out``."""
    lines = [
        _LOG_PREFIX.sub("", line)
        for line in log_since(log, start)
        if "ERROR" in line and not any(part in line for part in leave_out)
    ]
    return [line.replace(name, "<subscription>") for line in lines] if name else lines


def query_one(conn: Any, name: str) -> Callable[..., Any]:
    """The first value a query gives on ``conn`` (None for no row); its parameters are
    the subscription's ``name`` unless given."""

    def one(query: Any, params: tuple[str, ...] | None = (name,)) -> Any:
        row = conn.execute(query, params).fetchone()
        return None if row is None else row[0]

    return one


def run(
    subscriber: Any,
    publisher: Publisher,
    options: Mapping[str, str],
    *,
    rollback: bool = False,
    while_down: bool = False,
    timeout: float = 30,
) -> Outcome:
    """The story of the module docstring: ``subscriber`` (a cluster) subscribes to
    ``publisher`` with ``options`` (copy_data true) and is restarted inside the open
    transaction, which then commits, or rolls back if ``rollback`` (before the
    subscription is enabled again if ``while_down``)."""
    from psycopg import sql  # noqa: PLC0415 - a test-time dependency

    pub = publisher.base
    table = sql.Identifier(pub.table)
    name = f"s_{uuid.uuid4().hex[:10]}"
    ident = sql.Identifier(name)
    log = Path(subscriber.log_file)
    log_start = log.stat().st_size
    with Tap(pub.conninfo) as tap, subscriber.connect() as conn:
        one = query_one(conn, name)
        workers = "SELECT count(pid) FROM pg_stat_subscription WHERE subname = %s"
        states = SYNC_STATES
        marker = sql.SQL("SELECT 1 FROM {} WHERE id = 9900").format(table)
        settings = {**options, "copy_data": "true"}
        with subscription(conn, name, tap.conninfo, pub.publication, pub.table, settings):
            wait_for(lambda: one(states) == "r" and one(RECEIVED) is not None, timeout, "sync")
            before = publisher.end_of_wal()
            txn = publisher.begin()
            txn.write(OPEN_PARTS[0])
            if options.get("streaming", "off") == "off":
                saw = poll(lambda: (one(RECEIVED) or 0) > before, 5)
            else:
                # A block is written to a changes file, or applied by a parallel apply
                # worker (the leader serializes the first block after a table sync).
                tmp = Path(subscriber.data_dir) / "base" / "pgsql_tmp"
                saw = poll(lambda: any(tmp.glob("*/*.changes*")) or one(workers) > 1, 5)
            # The restart comes after the subscriber confirmed a position inside the
            # transaction (it replies to the keepalive sent at the end of what was read).
            confirmed_inside = poll(lambda: publisher.confirmed_flush(name) > before, 5)
            conn.execute(sql.SQL("ALTER SUBSCRIPTION {} DISABLE").format(ident))
            restart = len(tap.received)
            # Until its processes are gone (see WORKERS_LEFT).
            wait_for(lambda: one(WORKERS_LEFT, None) == 0, timeout, "the apply worker's exit")
            wait_for(lambda: not publisher.slot_active(name), timeout, "the walsender's exit")
            txn.write(OPEN_PARTS[1])
            end = txn.rollback if rollback else txn.commit
            if while_down:
                end()
            conn.execute(sql.SQL("ALTER SUBSCRIPTION {} ENABLE").format(ident))
            wait_for(lambda: one(RECEIVED) is not None, timeout, "the new walsender")
            if not while_down:
                end()
            pub.commit(AFTER_ROLLBACK if rollback else AFTER_COMMIT)
            wait_for(lambda: conn.execute(marker).fetchone() is not None, timeout, "the marker")
            query = sql.SQL("SELECT id, v FROM {} ORDER BY id").format(table)
            rows = [(int(r[0]), r[1]) for r in conn.execute(query).fetchall()]
        tapped = tap.received
    streamed = publisher.streamed_txns(name, options.get("streaming", "off") != "off")
    publisher.drop_slot(name)
    errors = error_lines(log, log_start, name)
    own = pub.own_rows() if pub.own_rows is not None else None
    before_restart = shape([m for c in tapped[:restart] for m in c])
    after_restart = shape([m for c in tapped[restart:] for m in c])
    return Outcome(
        rows, saw, confirmed_inside, errors, streamed, own, before_restart, after_restart
    )


def poll(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    if not poll(condition, timeout):
        raise TimeoutError(f"waited {timeout}s for {what}")


# --- what the subscriber received -----------------------------------------------------------


def shape(payloads: Sequence[bytes]) -> list[str]:
    """pgoutput messages by name (StreamStart with first_segment), a run of equal names
    as one: how many rows a block holds depends on where the WAL was flushed when the
    walsender read it (see the module docstring), what is sent in which order does
    not."""
    decoder = Decoder()
    out: list[str] = []
    for payload in payloads:
        message = decoder.decode(payload)
        name = type(message).__name__
        if isinstance(message, StreamStart) and message.first_segment:
            name += " first"
        if not out or out[-1] != name:
            out.append(name)
    return out
