"""``spark.readStream.format("pgoutput")``: a walsender's pgoutput stream as a Spark stream.

>>> import pgwire_mock.spark
>>> pgwire_mock.spark.register(spark)                          # doctest: +SKIP
>>> df = (spark.readStream.format("pgoutput")                  # doctest: +SKIP
...       .option("dsn", "host=127.0.0.1 port=5432 user=postgres dbname=app")
...       .option("slot", "spark").option("publication", "pub")
...       .option("table", "public.orders").load())

Where things live:

* Spark runs one Python process per streaming source on the driver for the query's whole
  life (``python_streaming_source_runner``); the :class:`PgOutputStreamReader` lives there
  and owns the only replication connection. A background thread (:class:`_Pump`) reads
  the stream, follows it with :class:`~pgwire_mock.spark.decode.ChangeDecoder` and keeps
  the rows of each *unit* in memory: everything committed up to a commit after which no
  transaction is open (no streamed transaction in progress, no prepared transaction
  waiting for COMMIT / ROLLBACK PREPARED). The pump reads each message once, from its
  raw bytes, and only as far as transactions and row headers go: a row stays the bytes
  of its message until an executor converts it.
* Offsets are ``{"lsn": "X/Y"}``, the end LSN of a unit's last commit (what a
  subscriber confirms, ``end_lsn`` in worker.c). ``0/0`` means "where the slot is": the
  initial offset unless the ``start_lsn`` option says otherwise.
* :meth:`~PgOutputStreamReader.partitions` puts the raw rows of the units in
  ``(start, end]`` into the partitions themselves (:class:`~pgwire_mock.spark.rows.RawRows`,
  with the table's Relation message), and executors turn them into Arrow record batches
  (they never connect): the driver's thread only frames and follows the stream, the
  per-value work runs where Spark runs. A batch still passes through the driver, so it
  holds up to ``max_buffered_rows`` rows' messages.
* :meth:`~PgOutputStreamReader.commit` is called by Spark after the batch is in its commit
  log; only then does the pump send a standby status update with ``flush`` = that offset,
  so the slot's ``confirmed_flush_lsn`` never passes what Spark has committed. Keepalives
  asking for a reply, and a status update every ``status_interval`` seconds, repeat it.
  With nothing held back (every unit committed, no transaction open), it confirms what
  it received, a keepalive's position included, as PostgreSQL's apply worker does, so
  that a server shutting down, which waits for that, can end.
* On restart, Spark hands the checkpoint's offsets back; the stream restarts from the
  slot (whose position is at most the last committed offset) and units at or below the
  requested start are never served, so no transaction is applied twice.
* Inside a running query, a lost connection or a retryable server error (57P01
  ``pg_terminate_backend``, a restart, too many connections, ...) makes the pump
  reconnect with capped exponential back-off (``reconnect_attempts``,
  ``reconnect_backoff``). It resumes after the newest unit it holds: START_REPLICATION
  streams from "that location or the slot's confirmed_flush_lsn, whichever is greater",
  and every unit it holds (those in a batch Spark planned and has not committed, and
  those not planned yet) is complete, so nothing is lost and nothing comes twice; a
  transaction cut short is dropped with the decoder and sent again whole.
* ``two_phase`` (protocol 3, PostgreSQL 15+) has prepared transactions decoded at
  PREPARE; their rows still count only at COMMIT PREPARED, and no unit ends while one
  is undecided, so the slot is never confirmed past a pending PREPARE.

``Trigger.AvailableNow`` is supported through PySpark's ``SupportsTriggerAvailableNow``
(PySpark 4.2+): the target is the end of WAL at the query's start (IDENTIFY_SYSTEM's
xlogpos); the query reads until everything committed up to it has been served, however
long that takes, unless ``caught_up_timeout`` is set: then running out of it fails the
query.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from codec.pgoutput import (
    Relation,
    Type,
)
from codec.values import LSN
from pgwire_mock.client import (
    ConnectionLostError,
    ErrorReceived,
    Keepalive,
    ReplicationClientError,
    ReplicationConnection,
    ReplicationTimeoutError,
    ServerError,
    State,
    StreamEnded,
    WalData,
    WalRun,
    pgoutput_options,
)
from pgwire_mock.client.commands import OptionValue
from pgwire_mock.spark.decode import (
    ChangeDecoder,
    DecodeOptions,
    SparkSideError,
    TableSpec,
    qualified_name,
    table_schema,
)
from pgwire_mock.spark.options import (
    StreamingMode,
    bool_option,
    float_option,
    int_option,
    option_error,
    streaming_option,
)
from pgwire_mock.spark.rows import RawRows

__all__ = [
    "PgOutputStreamReader",
    "StreamSettings",
    "UnitPartition",
    "format_offset",
    "parse_offset",
    "peek_schema",
]

_SLOT_IN_USE: Final = "55006"  # object_in_use: the slot is active for another PID
_POLL: Final = 0.1
_MAX_BACKOFF: Final = 10.0  # seconds: the cap of the reconnect back-off
# A connection that lasted this long (or delivered a unit) was healthy: the next loss
# starts the back-off and the attempt count afresh.
_HEALTHY: Final = 30.0
_TWO_PHASE_MAJOR: Final = 15  # pgoutput's two_phase option (and protocol 3)
_TWO_PHASE_PROTO: Final = 3
# pgoutput's streaming modes: the protocol each needs (pgoutput.c), and the first
# PostgreSQL major that knows "parallel" (protocol 4).
_STREAMING_PROTO: Final = {"off": 1, "on": 2, "parallel": 4}
_PARALLEL_MAJOR: Final = 16
_BATCH_ROWS: Final = 32768  # rows per Arrow record batch unless batch_rows says

# Server errors worth another connection: the walsender goes away or cannot take us
# yet, the data is fine. Class 08 (connection exception) is retried as a whole.
_RETRYABLE_SQLSTATES: Final = frozenset(
    {
        "57P01",  # admin_shutdown: pg_terminate_backend, a fast shutdown
        "57P02",  # crash_shutdown: another backend crashed, the server restarts
        "57P03",  # cannot_connect_now: starting up or shutting down
        "53300",  # too_many_connections (max_wal_senders)
        "53100",  # disk_full while spilling a big transaction (docs/faults.md)
        _SLOT_IN_USE,  # the slot is still held by the walsender that is going away
    }
)

_log = logging.getLogger(__name__)
_T = TypeVar("_T")


def format_offset(lsn: int) -> dict[str, str]:
    return {"lsn": str(LSN(lsn))}


def parse_offset(offset: Mapping[str, object] | None) -> int:
    if not offset:
        return 0
    return int(LSN(str(offset["lsn"])))


def retryable(err: BaseException) -> bool:
    """True for a failure that another connection may not have: the connection dropped
    or timed out, or the server sent one of :data:`_RETRYABLE_SQLSTATES` (or class 08).
    A missing slot, bad credentials, a protocol violation or a decoding error are not."""
    if isinstance(err, ServerError):
        return err.sqlstate in _RETRYABLE_SQLSTATES or err.sqlstate.startswith("08")
    return isinstance(err, ConnectionLostError | ReplicationTimeoutError | OSError)


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """The streaming options, parsed once (see docs/spark.md for the table)."""

    dsn: str | None
    host: str | None
    port: int | None
    user: str | None
    dbname: str | None
    password: str | None
    slot: str
    publication: str
    proto_version: int
    binary: bool | None
    streaming: StreamingMode | None
    start_lsn: int
    max_rows_per_batch: int | None
    partitions: int
    timeout: float
    status_interval: float
    caught_up_timeout: float | None  # None: availableNow reads to its target however long
    max_buffered_rows: int
    messages: bool | None = None
    two_phase: bool = False
    reconnect_attempts: int = 10
    reconnect_backoff: float = 0.5

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> StreamSettings:
        """Every option checked here, so that a bad value fails at ``load()`` with one
        line naming it (:mod:`pgwire_mock.spark.options`)."""
        if options.get("path"):
            raise SparkSideError(
                'pgoutput stream: option "path" is for spark.read of recordings; '
                'spark.readStream reads a walsender: give "dsn" (or "host", ...) instead'
            )
        for required in ("slot", "publication"):
            if not options.get(required):
                raise SparkSideError(f'pgoutput stream: option "{required}" is required')
        if not options.get("dsn") and not options.get("host"):
            raise SparkSideError('pgoutput stream: give "dsn" or "host" (with port, user, ...)')
        proto_version = int_option(options, "proto_version", 1, 1)
        two_phase = bool(bool_option(options, "two_phase"))
        if two_phase and proto_version < _TWO_PHASE_PROTO:
            raise SparkSideError(
                f"pgoutput stream: two_phase needs proto_version {_TWO_PHASE_PROTO} or later "
                f"(PostgreSQL {_TWO_PHASE_MAJOR}+), not {proto_version}"
            )
        streaming = streaming_option(options)
        needed = _STREAMING_PROTO.get(streaming or "off", 1)
        if proto_version < needed:
            raise SparkSideError(
                f"pgoutput stream: streaming={options['streaming']} needs proto_version "
                f"{needed} or later, not {proto_version}"
            )
        max_rows = options.get("max_rows_per_batch")
        start_lsn = options.get("start_lsn", "0/0")
        try:
            start = int(LSN(start_lsn))
        except ValueError:
            raise option_error("start_lsn", "an LSN X/Y (hexadecimal)", start_lsn) from None
        timeout = options.get("caught_up_timeout")
        return cls(
            dsn=options.get("dsn"),
            host=options.get("host"),
            port=int_option(options, "port", 0, 1) if options.get("port") else None,
            user=options.get("user"),
            dbname=options.get("dbname"),
            password=options.get("password"),
            slot=options["slot"],
            publication=options["publication"],
            proto_version=proto_version,
            binary=bool_option(options, "binary"),
            streaming=streaming,
            messages=bool_option(options, "messages"),
            start_lsn=start,
            max_rows_per_batch=int_option(options, "max_rows_per_batch", 0, 1)
            if max_rows
            else None,
            partitions=int_option(options, "partitions", 2, 1),
            timeout=float_option(options, "timeout", 30.0),
            status_interval=float_option(options, "status_interval", 10.0),
            caught_up_timeout=None
            if timeout is None
            else float_option(options, "caught_up_timeout", 0.0),
            max_buffered_rows=int_option(options, "max_buffered_rows", 1_000_000, 1),
            two_phase=two_phase,
            reconnect_attempts=int_option(options, "reconnect_attempts", 10, 0),
            reconnect_backoff=float_option(options, "reconnect_backoff", 0.5),
        )

    def connect(self, *, decode: bool = False) -> ReplicationConnection:
        """A replication connection; ``decode`` puts the decoded pgoutput message on
        each WalData (the stream's pump reads the raw payloads in WalRun events
        instead)."""
        return ReplicationConnection.connect(
            self.dsn,
            host=self.host,
            port=self.port,
            user=self.user,
            dbname=self.dbname,
            password=self.password,
            application_name="pgwire-mock-spark",
            timeout=self.timeout,
            decode_pgoutput=decode,
            wal_runs=not decode,
        )

    def backoff(self, failures: int) -> float:
        """Seconds to wait before retrying after ``failures`` failures in a row."""
        return min(self.reconnect_backoff * 2.0 ** (failures - 1), _MAX_BACKOFF)

    def retried(self, what: str, run: Callable[[], _T]) -> _T:
        """``run()``, tried again after a :func:`retryable` failure with the stream's
        back-off, at most ``reconnect_attempts`` more times: for the short connections
        besides the stream (the schema peek at ``load()``, availableNow's
        IDENTIFY_SYSTEM), which a restarting server fails just as it fails the stream."""
        failures = 0
        while True:
            try:
                return run()
            except Exception as err:
                if not retryable(err) or failures >= self.reconnect_attempts:
                    raise
                failures += 1
                delay = self.backoff(failures)
                _log.warning(
                    "pgoutput stream slot %s: %s: %s; retrying in %.2fs (attempt %d of %d)",
                    self.slot,
                    what,
                    _what(err),
                    delay,
                    failures,
                    self.reconnect_attempts,
                )
                time.sleep(delay)

    def start_options(self) -> dict[str, OptionValue]:
        # two_phase is sent only when asked for: 14 rejects the option, and a 15+ server
        # marks the slot two-phase the first time it streams it with the option.
        return pgoutput_options(
            self.publication,
            proto_version=self.proto_version,
            binary=self.binary,
            messages=self.messages,
            streaming=self.streaming,
            two_phase=True if self.two_phase else None,
        )

    def start(self, conn: ReplicationConnection, lsn: int) -> None:
        """START_REPLICATION, retrying while the slot is still held by a connection that
        is going away (the walsender releases it when its process ends)."""
        major = conn.session.server_version_major
        if self.streaming == "parallel" and major < _PARALLEL_MAJOR:
            raise SparkSideError(
                f"pgoutput stream: streaming=parallel needs PostgreSQL {_PARALLEL_MAJOR} or "
                f"later (protocol 4); this server is {major}: use streaming=on"
            )
        if self.two_phase and major < _TWO_PHASE_MAJOR:
            raise SparkSideError(
                f"pgoutput stream: two_phase needs PostgreSQL {_TWO_PHASE_MAJOR} or later; "
                f"this server is {major} (its pgoutput has no two_phase option)"
            )
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                conn.start_replication(self.slot, lsn, self.start_options())
                return
            except ServerError as err:
                if err.sqlstate != _SLOT_IN_USE or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def peek_schema(
    settings: StreamSettings, table: str, options: DecodeOptions, timeout: float | None = None
) -> pa.Schema:
    """The Arrow schema of ``table``'s change rows, from the first Relation message the
    slot streams for it. Nothing is confirmed, so the slot does not move; a lost
    connection is retried like the stream's (``reconnect_attempts``)."""
    wait = settings.timeout if timeout is None else timeout
    schema = settings.retried(
        "reading the schema", lambda: _peek_schema(settings, table, options, wait)
    )
    if schema is None:
        raise SparkSideError(
            f"pgoutput stream: slot {settings.slot} sent no Relation message for {table} "
            f"within {wait}s; the schema is taken from the first change to the table, so "
            "make one (or give the schema with .schema(...))"
        )
    return schema


def _peek_schema(
    settings: StreamSettings, table: str, options: DecodeOptions, wait: float
) -> pa.Schema | None:
    types: dict[int, tuple[str, str]] = {}
    with settings.connect(decode=True) as conn:
        settings.start(conn, settings.start_lsn)
        deadline = time.monotonic() + wait
        try:
            while time.monotonic() < deadline:
                for event in conn.read_stream(_POLL):
                    if isinstance(event, StreamEnded):
                        deadline = 0.0
                    if not isinstance(event, WalData):
                        continue
                    message = event.message
                    if isinstance(message, Type):
                        types[message.oid] = (message.namespace, message.name)
                    elif isinstance(message, Relation):
                        name = f"{message.namespace or 'pg_catalog'}.{message.relation_name}"
                        if name == table:
                            return table_schema(message, types, options)
        finally:
            with contextlib.suppress(Exception):  # leaving anyway; the slot is released
                conn.stop()
    return None


class _Units:
    """The units the pump holds, oldest first: a unit is the rows committed up to its
    end LSN, a point where no transaction is open. Their rows sit in one
    :class:`RawRows`; per unit there are two ints, its end LSN and the row count up to
    its end, so a unit costs no object (the garbage collector scans a few lists, not one
    object per unit or row)."""

    def __init__(self) -> None:
        self.raw = RawRows()
        self.ends: list[int] = []
        self.upto: list[int] = []  # rows of the units up to and including each

    def __len__(self) -> int:
        return len(self.ends)

    @property
    def rows(self) -> int:
        return len(self.raw)

    @property
    def last(self) -> int | None:
        """The newest unit's end LSN."""
        return self.ends[-1] if self.ends else None

    def add(self, end_lsn: int, raw: RawRows) -> None:
        self.raw.extend(raw)
        self.ends.append(end_lsn)
        self.upto.append(len(self.raw))

    def index(self, lsn: int) -> int:
        """How many units end at or below ``lsn``."""
        return bisect.bisect_right(self.ends, lsn)

    def rows_before(self, index: int) -> int:
        """Rows of the first ``index`` units."""
        return self.upto[index - 1] if index else 0

    def rows_between(self, begin: int, end: int) -> int:
        """Rows of the units in ``(begin, end]``."""
        return self.rows_before(self.index(end)) - self.rows_before(self.index(begin))

    def drop(self, lsn: int) -> None:
        """Forget the units up to ``lsn``."""
        count = self.index(lsn)
        if count:
            cut = self.upto[count - 1]
            self.raw = self.raw.slice(cut, len(self.raw))
            self.ends = self.ends[count:]
            self.upto = [n - cut for n in self.upto[count:]]


@dataclass(frozen=True, slots=True)
class UnitPartition(InputPartition):
    """Some units' rows, unconverted, with what converting them needs (``spec`` is
    None only when there are no rows) and the schema promised to Spark."""

    start: int
    end: int
    spec: TableSpec | None
    rows: RawRows
    arrow: pa.Schema | None = None

    def batches(self) -> Iterator[pa.RecordBatch]:
        if self.spec is not None and len(self.rows):
            yield from self.spec.batches(self.rows, self.arrow)


class _Pump(threading.Thread):
    """Owns the replication connection: reads, decodes, buffers units, sends status, and
    reconnects when the connection is lost.

    Every socket operation happens on this thread; the reader's methods only touch the
    shared fields below under ``cond``.
    """

    def __init__(
        self, settings: StreamSettings, options: DecodeOptions, arrow: pa.Schema | None
    ) -> None:
        super().__init__(name=f"pgoutput stream {settings.slot}", daemon=True)
        self.settings = settings
        self.options = options
        (self.table,) = options.tables or ("",)
        self.arrow = arrow
        self.decoder = ChangeDecoder(options, convert=False)
        self.spec: TableSpec | None = None  # how to convert the table's rows, once known
        self.cond = threading.Condition()
        self.units = _Units()
        self.held = 0  # end of the newest unit ever buffered: a new connection resumes here
        self.error: BaseException | None = None
        self.failure = ""  # what check() says when error is set
        self.ended = False
        self.connected = False  # streaming now (False while connecting or backing off)
        self.reconnects = 0
        self.received = 0  # highest wal_end seen on the current connection
        self.last_data = time.monotonic()
        self.committed = 0  # what Spark committed: the flush position to report
        self.sent: tuple[int, float] = (-1, 0.0)  # (flush, monotonic time) last sent
        self.ping = False
        self.stopping = False
        self._progress = False  # the current connection delivered a unit
        self._streaming_since: float | None = None  # when START_REPLICATION last succeeded

    # --- called by the reader (any thread) --------------------------------------------

    def check(self) -> None:
        if self.error is not None:
            raise SparkSideError(self.failure) from self.error

    def buffered_rows(self) -> int:
        return self.units.rows

    def drop(self, lsn: int) -> None:
        """Forget the units up to ``lsn`` (Spark committed them); under ``cond``."""
        self.units.drop(lsn)

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()

    # --- the thread ------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._run()
        except BaseException as err:  # handed to the reader, which raises it in Spark
            with self.cond:
                self.error = err
                self.failure = self.failure or self._describe(err)
                self.connected = False
                self.cond.notify_all()

    def _run(self) -> None:
        attempts = self.settings.reconnect_attempts
        failures = 0
        while not self.stopping:
            self._progress = False
            self._streaming_since = None
            try:
                self._session()
                return
            except Exception as err:
                if self.stopping:
                    return
                if attempts == 0 or not retryable(err):
                    raise
                since = self._streaming_since
                if self._progress or (since is not None and time.monotonic() - since >= _HEALTHY):
                    failures = 0
                failures += 1
                if failures > attempts:
                    self.failure = (
                        f"pgoutput stream: slot {self.settings.slot}: gave up after "
                        f"{attempts} reconnect attempts (option reconnect_attempts); last "
                        f"failure: {_what(err)}"
                    )
                    raise
                self._back_off(err, failures)

    def _back_off(self, err: BaseException, failures: int) -> None:
        settings = self.settings
        delay = settings.backoff(failures)
        with self.cond:
            self.reconnects += 1
            resume = self._resume_lsn()
        _log.warning(
            "pgoutput stream slot %s: %s; reconnecting in %.2fs (attempt %d of %d), "
            "resuming after %s",
            settings.slot,
            _what(err),
            delay,
            failures,
            settings.reconnect_attempts,
            LSN(resume),
        )
        with self.cond:
            self.cond.wait_for(lambda: self.stopping, delay)

    def _resume_lsn(self) -> int:
        """Where a new connection starts: after every unit buffered or committed. The
        server streams from the greater of this and the slot's confirmed_flush, which
        never passes it (only committed offsets are confirmed)."""
        return max(self.settings.start_lsn, self.committed, self.held)

    def _session(self) -> None:
        """One connection, from START_REPLICATION until it fails, the stream ends or the
        reader stops the pump."""
        settings = self.settings
        with settings.connect() as conn:
            with self.cond:
                lsn = self._resume_lsn()
            settings.start(conn, lsn)
            # A fresh decoder: a transaction cut short by the last connection is dropped
            # (the server sends it again whole), and the relation cache starts over as
            # the new walsender's does.
            self.decoder = ChangeDecoder(self.options, convert=False)
            self._streaming_since = time.monotonic()
            with self.cond:
                self.connected = True
                self.received = lsn  # this connection's progress, for availableNow
                self.sent = (-1, 0.0)  # the new walsender has not heard our position
                self.cond.notify_all()
            try:
                self._loop(conn)
            finally:
                with self.cond:
                    self.connected = False
                    self.cond.notify_all()
            # Leaving on purpose: confirm once more, end the copy politely.
            with contextlib.suppress(Exception):  # closing anyway
                self._send_status(conn, force=True)
                if not self.ended:
                    conn.stop()

    def _loop(self, conn: ReplicationConnection) -> None:
        while not self.stopping and not self.ended:
            with self.cond:
                full = self.buffered_rows() >= self.settings.max_buffered_rows
            if full:  # back-pressure: stop reading, keep the server's timeout at bay
                time.sleep(_POLL)
            else:
                # First what START_REPLICATION read early: it may end the stream.
                self._on_events(conn, conn.poll(_POLL))
            self._send_status(conn)

    def _on_events(self, conn: ReplicationConnection, events: Sequence[object]) -> None:
        """Follow the WAL data of a read without the lock, then publish its units and
        progress at once (one lock and one wake-up per read, not per message)."""
        decoder, table = self.decoder, self.table
        feed = decoder.feed
        units: list[tuple[int, RawRows]] = []
        received = -1
        for event in events:
            if type(event) is WalRun:
                messages = event.messages
            elif type(event) is WalData:  # a connection made without wal_runs
                messages = [(event.wal_start, event.wal_end, event.send_time, event.payload)]
            else:
                if units or received >= 0:
                    self._publish(units, received)
                    units, received = [], -1
                self._on_event(conn, event)
                continue
            for wal_start, wal_end, _, payload in messages:
                feed(wal_start, payload)
                received = wal_end
                end = decoder.ended
                if end and decoder.open_transactions == 0:
                    spec, raw = decoder.take_rows(table)
                    if spec is not None:
                        self.spec = spec
                    units.append((end, raw))
        if units or received >= 0:
            self._publish(units, received)

    def _publish(self, units: list[tuple[int, RawRows]], received: int) -> None:
        with self.cond:
            self.received = max(self.received, int(received))
            self.last_data = time.monotonic()
            for end, raw in units:
                self._close_unit(end, raw)
            self.cond.notify_all()

    def _on_event(self, conn: ReplicationConnection, event: object) -> None:
        if isinstance(event, Keepalive):
            with self.cond:
                self.received = max(self.received, int(event.wal_end))
                self.cond.notify_all()
        elif isinstance(event, ErrorReceived):
            # Read on to ReadyForQuery after an ERROR (a FATAL closes the connection),
            # then raise it with its SQLSTATE for _run to judge.
            if not event.error.fatal:
                with contextlib.suppress(ReplicationClientError):
                    conn.wait_idle()
            raise event.error
        elif isinstance(event, StreamEnded):
            if event.by_server and self.settings.reconnect_attempts and not self.stopping:
                # CommandComplete without our CopyDone: a shutdown. Come back later.
                raise ConnectionLostError("the server ended the stream")
            with self.cond:
                self.ended = True
                self.cond.notify_all()

    def _close_unit(self, end_lsn: int, raw: RawRows) -> None:
        if end_lsn <= max(self.held, self.committed):
            return  # already buffered or committed: a server that sent it again
        self.units.add(end_lsn, raw)
        self.held = end_lsn
        self._progress = True

    def _send_status(self, conn: ReplicationConnection, *, force: bool = False) -> None:
        if conn.session.state is not State.STREAMING:
            return  # the server ended the copy; the next read says how
        with self.cond:
            flush, ping = self.committed, self.ping
            self.ping = False
            if self.held <= flush and self.decoder.open_transactions == 0:
                # Nothing held back: confirm what was received, a keepalive's position
                # too, as PostgreSQL's apply worker does without pending transactions
                # (send_feedback). WAL that makes no unit (a rolled-back transaction, a
                # checkpoint) is confirmed then, and a fast shutdown, which waits until
                # the client confirmed everything sent, can end.
                flush = max(flush, self.received)
        last, when = self.sent
        now = time.monotonic()
        if force or ping or flush != last or now - when >= self.settings.status_interval:
            conn.send_status(flush=flush, reply_requested=ping)
            with self.cond:
                self.sent = (flush, now)
                self.cond.notify_all()

    def _describe(self, err: BaseException) -> str:
        if isinstance(err, SparkSideError) and str(err).startswith("pgoutput stream"):
            return str(err)
        suffix = "; not retried" if self.settings.reconnect_attempts and not retryable(err) else ""
        return f"pgoutput stream: slot {self.settings.slot}: {_what(err)}{suffix}"


def _what(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    return (
        text
        if isinstance(err, ReplicationClientError | SparkSideError)
        else f"{type(err).__name__}: {text}"
    )


class PgOutputStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream reader of ``format("pgoutput")``; see the module docstring."""

    def __init__(
        self,
        options: Mapping[str, str],
        table: str,
        decode_options: DecodeOptions,
        arrow: pa.Schema | None,
    ) -> None:
        self.settings = StreamSettings.from_options(options)
        self.table = qualified_name(table)
        # An executor holds a whole partition's raw rows anyway; a record batch of
        # 32768 rows of a wide table is a few MB more, and converts a third faster than
        # spark.read's 4096 (fewer Arrow calls per row).
        batch_rows = decode_options.batch_rows if "batch_rows" in options else _BATCH_ROWS
        self.decode_options = replace(
            decode_options, tables=frozenset({self.table}), batch_rows=batch_rows
        )
        self.arrow = arrow
        self._pump: _Pump | None = None
        self._target: int | None = None  # Trigger.AvailableNow: never go past this
        self._deadline: float | None = None  # availableNow: caught_up_timeout's end

    # --- the pump ----------------------------------------------------------------------

    def _started(self) -> _Pump:
        if self._pump is None:
            self._pump = _Pump(self.settings, self.decode_options, self.arrow)
            self._pump.start()
        self._pump.check()
        return self._pump

    # --- DataSourceStreamReader ----------------------------------------------------------

    def initialOffset(self) -> dict[str, str]:  # noqa: N802 - PySpark's name
        return format_offset(self.settings.start_lsn)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - PySpark's name
        if self.settings.max_rows_per_batch:
            return ReadMaxRows(self.settings.max_rows_per_batch)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, str], limit: ReadLimit) -> dict[str, str]:  # noqa: N802 - PySpark's name
        """The newest unit after ``start`` (within the read limit, and the target under
        availableNow). ``start`` is where the last batch in Spark's commit log ended
        (Spark asks for the next batch only after committing the previous one, and
        reruns an uncommitted batch without asking), so it is confirmed first: a run
        that plans no batch still moves the slot up to what Spark applied."""
        pump = self._started()
        begin = parse_offset(start)
        if begin > max(pump.committed, self.settings.start_lsn):
            self.commit(start)
        ceiling = self._target
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        with pump.cond:
            if ceiling is not None:
                self._await_target(pump, begin, ceiling, cap)
            units = pump.units
            first = units.index(begin)
            stop = len(units) if ceiling is None else units.index(ceiling)
            if cap is not None and stop > first:
                # Whole units only; one at least, however big.
                most = bisect.bisect_right(units.upto, units.rows_before(first) + cap, first, stop)
                stop = max(most, first + 1)
            end = units.ends[stop - 1] if stop > first else begin
        return start if end == begin else format_offset(end)

    def reportLatestOffset(self) -> dict[str, str] | None:  # noqa: N802 - PySpark's name
        if self._pump is None:
            return None
        with self._pump.cond:
            last = self._pump.units.last
            return None if last is None else format_offset(last)

    def partitions(self, start: dict[str, str], end: dict[str, str]) -> Sequence[InputPartition]:
        begin, stop = parse_offset(start), parse_offset(end)
        if stop <= begin:
            return []
        pump = self._started()
        deadline = time.monotonic() + self.settings.timeout
        with pump.cond:
            # After a restart Spark replans the batch it had not committed: wait for the
            # stream to deliver it again. While the pump reconnects the clock stops (it
            # gives up on its own after reconnect_attempts).
            while pump.held < stop:
                pump.check()
                if not pump.connected and not pump.ended:
                    deadline = time.monotonic() + self.settings.timeout
                if pump.ended or time.monotonic() > deadline:
                    raise SparkSideError(
                        f"pgoutput stream: the batch ({format_offset(begin)['lsn']}, "
                        f"{format_offset(stop)['lsn']}] is not in the stream (slot "
                        f"{self.settings.slot} received up to {LSN(pump.received)})"
                    )
                pump.cond.wait(_POLL)
            units = pump.units
            first, last = units.index(begin), units.index(stop)
            before = units.rows_before
            groups = self._group([before(i + 1) - before(i) for i in range(first, last)])
            parts = [
                (
                    units.ends[first + lo],
                    units.ends[first + hi - 1],
                    units.raw.slice(before(first + lo), before(first + hi)),
                )
                for lo, hi in groups
            ]
            spec = pump.spec
        return [UnitPartition(start, end, spec, raw, self.arrow) for start, end, raw in parts]

    def _group(self, counts: list[int]) -> list[tuple[int, int]]:
        """At most ``partitions`` runs of consecutive units, of about as many rows each,
        as ``(lo, hi)`` index ranges into ``counts`` (each unit's rows)."""
        count = min(self.settings.partitions, len(counts))
        total = sum(counts)
        bounds = [0]
        rows = 0
        for index, unit_rows in enumerate(counts):
            at = len(bounds) - 1
            # Each run gets at least one unit; a run is full at its share of the rows.
            if (
                at < count - 1
                and index > bounds[-1]
                and (len(counts) - index <= count - 1 - at or rows >= total * (at + 1) / count)
            ):
                bounds.append(index)
            rows += unit_rows
        bounds.append(len(counts))
        return list(itertools.pairwise(bounds)) if counts else []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, UnitPartition)
        return partition.batches()

    def commit(self, end: dict[str, str]) -> None:
        """Spark committed everything up to ``end``: tell the walsender, and return once
        the status update is on the wire (Spark may kill this process at any time after;
        it never calls :meth:`stop` on a query that ends normally)."""
        lsn = parse_offset(end)
        pump = self._started()
        deadline = time.monotonic() + self.settings.timeout
        with pump.cond:
            pump.committed = max(pump.committed, lsn)
            pump.drop(lsn)
            while pump.sent[0] < pump.committed and pump.is_alive():
                if time.monotonic() > deadline:
                    if not pump.connected:
                        # Reconnecting: the next connection reports it first thing, and
                        # a confirmation that comes late (or never) only replays more.
                        _log.warning(
                            "pgoutput stream slot %s: %s not confirmed yet (reconnecting)",
                            self.settings.slot,
                            LSN(lsn),
                        )
                        break
                    raise SparkSideError(f"pgoutput stream: could not confirm {LSN(lsn)} in time")
                pump.cond.wait(_POLL)
        pump.check()

    def stop(self) -> None:
        pump = self._pump
        if pump is None:
            return
        pump.stop()
        pump.join(self.settings.timeout)

    # --- SupportsTriggerAvailableNow ----------------------------------------------------

    def _xlogpos(self) -> int:
        with self.settings.connect() as conn:
            return int(conn.identify_system().xlogpos)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - PySpark's name
        """Fix the target: the end of WAL now (IDENTIFY_SYSTEM's xlogpos, the flush
        position on a primary, as pg_current_wal_lsn()). Every transaction committed
        before this moment ends at or below it; :meth:`latestOffset` serves the units up
        to it and reports no new data only once the stream has been read that far."""
        self._started()
        self._target = self.settings.retried("IDENTIFY_SYSTEM", self._xlogpos)
        timeout = self.settings.caught_up_timeout
        self._deadline = None if timeout is None else time.monotonic() + timeout

    def _await_target(self, pump: _Pump, begin: int, target: int, cap: int | None) -> None:
        """availableNow, under ``pump.cond``: wait until the stream has been read up to
        ``target`` on a live connection (then no unit up to it can still come), or a
        batch is as big as it can get (``cap`` rows in ``(begin, target]``, or the pump
        holds ``max_buffered_rows`` and waits for Spark), however long that takes unless
        ``caught_up_timeout`` is set: running out of it fails the query rather than end
        it early."""
        while True:
            pump.check()
            if pump.connected and pump.received >= target:
                return
            ready = pump.units.rows_between(begin, target)
            if ready and (
                (cap is not None and ready >= cap)
                or pump.buffered_rows() >= self.settings.max_buffered_rows
            ):
                return
            if pump.ended:
                raise SparkSideError(
                    f"pgoutput stream: availableNow: slot {self.settings.slot}: the server "
                    f"ended the stream at {LSN(pump.received)}, before the end of WAL at the "
                    f"query's start ({LSN(target)}); nothing past {LSN(begin)} was served"
                )
            if self._deadline is not None and time.monotonic() > self._deadline:
                raise SparkSideError(
                    f'pgoutput stream: availableNow: option "caught_up_timeout" '
                    f"({self.settings.caught_up_timeout:g}s) ran out before slot "
                    f"{self.settings.slot} reached the end of WAL at the query's start "
                    f"({LSN(target)}): received up to {LSN(pump.received)}, served up to "
                    f"{LSN(begin)}; unset the option to wait as long as it takes"
                )
            # A status update with reply_requested makes the walsender answer with a
            # keepalive carrying its sent position.
            pump.ping = True
            pump.cond.wait(_POLL * 2)
