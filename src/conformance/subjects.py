"""Subjects: the things whose pgoutput streams the matrix compares.

A :class:`Subject` turns one prepared scenario and one option set into a
:data:`Stream` (pgoutput payloads with the WAL position each arrived at). Two subjects
read real PostgreSQL:

- :class:`SqlInterface` peeks the slot with ``pg_logical_slot_peek_binary_changes``
  (the reference: the golden corpus is captured the same way);
- :class:`Walsender` streams the same slot with ``START_REPLICATION`` through
  :func:`pgwire_mock.client.capture_via_walsender`.

A third subject reads no server at all: :class:`FakeWalsender` writes what the SQL
interface captured as a JSON Lines recording, serves it from the fake walsender
(:mod:`pgwire_mock.server`, in this process, see :mod:`conformance.fake`) emulating the
same major, and streams it with the same client and options as :class:`Walsender`.

Both real subjects read **one** slot per option set, created before the scenario's steps
run, so both decode exactly the same WAL. Peeking leaves the slot where it is; streaming
confirms what it received and so moves the slot's ``confirmed_flush_lsn``. A subject that
moves the slot says so with ``consumes_slot = True`` and runs after every subject that does
not (:func:`ordered`); a second consuming subject on the same slot would see nothing, so
:meth:`ScenarioRun.consume` refuses it. Subjects that replay what the reference captured
(the fake walsender, the Spark consumer) read ``run.streams`` and need no slot at all.

Each option set has its own slot because a slot created with ``two_phase`` decodes
prepared transactions differently, and because ``START_REPLICATION`` with ``two_phase``
on a slot created without it would turn two-phase decoding on for that slot (PostgreSQL
15+, ``logical.c``), changing what the next reader sees.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Final, Protocol

import psycopg
from psycopg import pq

from codec.values import LSN
from conformance import fake, provision
from conformance.replies import Replies, probe
from conformance.scenarios import OptionSet, Scenario
from pgwire_mock.cli_common import one_line
from pgwire_mock.client import capture_via_walsender
from pgwire_mock.server import RecordingSource, ServerState, SessionConfig, SlotState

__all__ = [
    "SLOT_PREFIX",
    "SUBJECTS",
    "FakeWalsender",
    "Positions",
    "ScenarioError",
    "ScenarioRun",
    "ServerTable",
    "SqlInterface",
    "Stream",
    "StreamMessage",
    "Subject",
    "Walsender",
    "ordered",
    "prepare_scenario",
    "slot_name",
    "whole_transactions",
]

#: Every slot the matrix makes starts with this; leftovers of an interrupted run are
#: dropped when the next run prepares a scenario.
SLOT_PREFIX: Final = "pgwm_matrix_"
_SLOT_RELEASE_WAIT: Final = 10.0

Connection = psycopg.Connection[tuple[object, ...]]


class ScenarioError(Exception):
    """A scenario's SQL failed, or a subject could not capture; the message says where."""


@dataclass(frozen=True, slots=True)
class StreamMessage:
    """One pgoutput message and the WAL position it was delivered at.

    For the SQL interface that is the ``lsn`` column; for a walsender the XLogData
    ``wal_start`` (0/0 for messages written with ``last_write = false``, see
    :mod:`conformance.checks`).
    """

    lsn: LSN
    payload: bytes

    @property
    def tag(self) -> str:
        return chr(self.payload[0]) if self.payload else ""


Stream = tuple[StreamMessage, ...]


class Positions:
    """How a subject's :attr:`StreamMessage.lsn` relates to the reference's."""

    #: Exactly the reference's positions.
    SAME: Final = "same"
    #: XLogData ``wal_start``: the reference's, or 0/0 where pgoutput did not write last.
    WALSENDER: Final = "walsender"
    #: The subject cannot see positions (e.g. a consumer that only gets rows): not compared.
    NONE: Final = "none"


@dataclass(frozen=True, slots=True)
class ServerTable:
    """A published table as the server holds it after the scenario's steps.

    ``text_rows`` are in the type output functions' text form (read with the walsender's
    default settings: DateStyle ISO, MDY; IntervalStyle postgres; extra_float_digits 1;
    bytea_output hex; TimeZone UTC), ``binary_rows`` the send functions' bytes, in the
    same row order (``ORDER BY`` the first column, every scenario table's key).
    """

    oid: int
    name: str
    columns: tuple[str, ...]
    type_oids: tuple[int, ...]
    text_rows: tuple[tuple[str | None, ...], ...]
    binary_rows: tuple[tuple[bytes | None, ...], ...]
    #: Domain type OID -> base type OID, for the domains of this table's columns. A
    #: Relation message names a column's domain; a result set (and so ``type_oids``)
    #: its base type, and the values are the base type's.
    domains: Mapping[int, int] = field(default_factory=dict)

    def base_type(self, type_oid: int) -> int:
        return self.domains.get(type_oid, type_oid)


@dataclass(slots=True)
class ScenarioRun:
    """One scenario, run once on one server, with a slot per option set ready to decode.

    ``end_lsn`` is the WAL position after the steps (and a CHECKPOINT, which flushes the
    WAL so that a walsender decodes everything). ``tables`` is the server's state of every
    published table by OID. ``streams`` collects what subjects captured, keyed by
    ``(subject name, option set name)``; ``replies`` what each subject's walsender
    answered to the probe commands of :mod:`conformance.replies`, keyed by subject name.
    """

    server: provision.Server
    scenario: Scenario
    option_sets: tuple[OptionSet, ...]
    end_lsn: LSN
    tables: Mapping[int, ServerTable]
    streams: dict[tuple[str, str], Stream] = field(default_factory=dict)
    replies: dict[str, Replies] = field(default_factory=dict)
    _consumed: set[str] = field(default_factory=set)

    def slot(self, options: OptionSet) -> str:
        return slot_name(options)

    def consume(self, options: OptionSet, subject: str) -> str:
        """The slot for ``options``, for a subject that will move it; only once per slot."""
        name = self.slot(options)
        if name in self._consumed:
            raise ScenarioError(
                f"{subject}: slot {name} was already consumed by another subject; "
                "only one subject per matrix may move the slot"
            )
        self._consumed.add(name)
        return name


class Subject(Protocol):
    """Something that delivers a pgoutput stream for a prepared scenario."""

    @property
    def name(self) -> str: ...

    @property
    def consumes_slot(self) -> bool: ...

    @property
    def positions(self) -> str: ...

    def capture(self, run: ScenarioRun, options: OptionSet) -> Stream:
        """The stream for ``options``; raise :class:`ScenarioError` if it cannot."""
        ...


def slot_name(options: OptionSet) -> str:
    return SLOT_PREFIX + options.name.replace("-", "_")


class SqlInterface:
    """``pg_logical_slot_peek_binary_changes`` up to the run's end LSN (leaves the slot)."""

    name: ClassVar[str] = "sql"
    consumes_slot: ClassVar[bool] = False
    positions: ClassVar[str] = Positions.SAME

    def capture(self, run: ScenarioRun, options: OptionSet) -> Stream:
        flat = [item for pair in options.options(run.scenario.publication).items() for item in pair]
        try:
            with run.server.connect() as conn:
                rows = conn.execute(
                    "SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes("
                    "%s, %s::pg_lsn, NULL, VARIADIC %s::text[])",
                    (run.slot(options), str(run.end_lsn), flat),
                ).fetchall()
        except psycopg.Error as err:
            raise ScenarioError(f"peek failed: {one_line(err)}") from err
        out = []
        for lsn, data in rows:
            if not isinstance(data, bytes):
                raise ScenarioError(f"decoding returned {type(data).__name__}, not bytes")
            out.append(StreamMessage(LSN.parse(str(lsn)), data))
        return tuple(out)


class Walsender:
    """``START_REPLICATION`` on the same slot, stopping at the run's end LSN.

    It also probes the server's replies (:func:`conformance.replies.probe`) once per
    server, on a slot and a table of its own, and files them under ``run.replies``.
    """

    name: ClassVar[str] = "walsender"
    consumes_slot: ClassVar[bool] = True
    positions: ClassVar[str] = Positions.WALSENDER

    def __init__(self, idle_timeout: float = 5.0) -> None:
        self.idle_timeout = idle_timeout
        self._replies: dict[str, Replies] = {}

    def capture(self, run: ScenarioRun, options: OptionSet) -> Stream:
        slot = run.consume(options, self.name)
        self._probe(run)
        try:
            captured = capture_via_walsender(
                run.server.replication_dsn,
                slot,
                0,
                options.options(run.scenario.publication),
                until_lsn=run.end_lsn,
                idle_timeout=self.idle_timeout,
            )
        except Exception as err:  # any client failure is this cell's failure, not a crash
            raise ScenarioError(f"START_REPLICATION failed: {one_line(err)}") from err
        return whole_transactions(
            tuple(StreamMessage(LSN(lsn), payload) for lsn, payload in captured)
        )

    def _probe(self, run: ScenarioRun) -> None:
        key = f"{run.server.dsn}|{run.server.full_version}"
        if key not in self._replies:
            self._replies[key] = _probe_real(run)
        run.replies[self.name] = self._replies[key]


_PROBE: Final = SLOT_PREFIX + "probe"


def _probe_real(run: ScenarioRun) -> Replies:
    """The probe on real PostgreSQL: its own slot, and an INSERT after it for the
    missing-publication probe (any decoded change makes pgoutput load publications)."""
    server = run.server

    def insert() -> None:
        with server.connect() as conn:
            conn.execute(f"INSERT INTO {_PROBE} VALUES (1)")

    try:
        with server.connect() as conn:
            conn.execute(f"DROP TABLE IF EXISTS {_PROBE}")
            conn.execute(f"CREATE TABLE {_PROBE} (id int)")
        return probe(
            server.replication_dsn,
            major=server.version,
            probe_slot=_PROBE,
            changed_slot=_PROBE,
            publication=run.scenario.publication,
            after_create=insert,
        )
    except Exception as err:  # a failed probe is reported by the replies check
        return Replies({"probe": f"failed: {one_line(err)}"})
    finally:
        with contextlib.suppress(psycopg.Error), server.connect() as conn:
            _drop_slots(conn, _SLOT_RELEASE_WAIT, _PROBE)
            conn.execute(f"DROP TABLE IF EXISTS {_PROBE}")


class FakeWalsender:
    """The fake walsender replaying what the reference subject captured for the cell.

    The recording is the **SQL interface's** stream, not the real walsender's: the SQL
    interface gives every message the LSN of the record it was decoded from, which is what
    the fake needs to compute XLogData positions the way ``WalSndPrepareWrite`` does and
    to decide what a restart skips; a walsender capture has already lost those positions
    for Relation and Type messages (it sends 0/0). It is also how the golden corpus is
    recorded. The fake's positions are then judged like the real walsender's
    (:attr:`Positions.WALSENDER`).

    The fake emulates the cell's major, its state holds the cell's slot (confirmed at the
    recording's first LSN) and publication, and its WAL position is the run's end LSN (so
    ``IDENTIFY_SYSTEM`` and a new slot sit where the real server's do). Idle keepalives
    come every 20 ms instead of 10 s, so a client stopping at the end LSN hears quickly
    that nothing is left (see the report on the caught-up keepalive in docs/clients.md).
    The replies probe runs once per major, on the first cell.
    """

    name: ClassVar[str] = "fake"
    consumes_slot: ClassVar[bool] = False
    positions: ClassVar[str] = Positions.WALSENDER

    def __init__(self, reference: str = SqlInterface.name, idle_timeout: float = 5.0) -> None:
        self.reference = reference
        self.idle_timeout = idle_timeout
        self._replies: dict[int, Replies] = {}

    def capture(self, run: ScenarioRun, options: OptionSet) -> Stream:
        recorded = run.streams.get((self.reference, options.name))
        if recorded is None:
            raise ScenarioError(f"no {self.reference} stream to replay")
        publication = run.scenario.publication
        slot = run.slot(options)
        with tempfile.TemporaryDirectory(prefix="pgwm-fake-") as tmp:
            path = fake.write_recording(
                Path(tmp) / f"{run.scenario.name}.{options.name}.jsonl",
                {
                    "server_version": run.server.full_version,
                    "major": run.server.version,
                    "scenario": run.scenario.name,
                    "option_set": options.name,
                    "options": options.options(publication),
                    "slot_two_phase": options.two_phase,
                    "description": f"{self.reference} capture replayed by the matrix",
                },
                ((m.lsn, m.payload) for m in recorded),
            )
            source = RecordingSource.from_file(path)
        state = ServerState(wal_lsn=max(int(run.end_lsn), source.end_lsn))
        start = source.start_lsn
        state.declare(
            [
                SlotState(
                    slot, "pgoutput", state.database, start, start, two_phase=options.two_phase
                )
            ],
            source.publications,
        )
        config = SessionConfig(
            major=run.server.version, source=source, idle_keepalive_interval=0.02
        )
        try:
            with fake.host().serve(config, state) as server:
                if run.server.version not in self._replies:
                    self._replies[run.server.version] = _probe_fake(
                        server, run.server.version, slot, publication
                    )
                captured = capture_via_walsender(
                    server.dsn(),
                    slot,
                    0,
                    options.options(publication),
                    until_lsn=run.end_lsn,
                    idle_timeout=self.idle_timeout,
                )
        except ScenarioError:
            raise
        except Exception as err:  # any client or server failure is this cell's failure
            raise ScenarioError(f"fake START_REPLICATION failed: {one_line(err)}") from err
        run.replies[self.name] = self._replies[run.server.version]
        return whole_transactions(
            tuple(StreamMessage(LSN(lsn), payload) for lsn, payload in captured)
        )


def _probe_fake(server: fake.FakeServer, major: int, slot: str, publication: str) -> Replies:
    try:
        return probe(
            server.dsn(),
            major=major,
            probe_slot=_PROBE,
            changed_slot=slot,
            publication=publication,
        )
    except Exception as err:  # a failed probe is reported by the replies check
        return Replies({"probe": f"failed: {one_line(err)}"})


def whole_transactions(stream: Stream) -> Stream:
    """``stream`` without a transaction (or stream segment) it ends in the middle of.

    Stopping a walsender at an LSN (``pg_recvlogical --endpos`` style) cuts by message
    position: a transaction that began before the end but commits after it has sent its
    Begin and nothing more. The SQL interface's ``upto_lsn`` leaves such a transaction
    out entirely. Seen on PostgreSQL 14, which sends empty transactions (15+ skips them):
    a transaction of some other backend straddling the end gave the walsender a lone
    Begin.
    """
    open_at: int | None = None
    for index, message in enumerate(stream):
        tag = message.tag
        if tag in ("B", "b", "S") and open_at is None:
            open_at = index
        elif tag in ("C", "P", "E"):
            open_at = None
    return stream if open_at is None else stream[:open_at]


#: The subjects of the matrix, in column order; the first is the reference.
SUBJECTS: Final[tuple[Subject, ...]] = (SqlInterface(), FakeWalsender(), Walsender())


def ordered(subjects: Sequence[Subject]) -> list[Subject]:
    """Capture order: subjects that leave the slot alone first (stable otherwise)."""
    return sorted(subjects, key=lambda s: s.consumes_slot)


# --------------------------------------------------------------------------------------
# Preparing a scenario on a server


def _run(conn: Connection, sql: str, where: str) -> None:
    try:
        # No parameters: psycopg sends a simple Query, so one step may hold many statements.
        conn.execute(sql.encode())
    except psycopg.Error as err:
        raise ScenarioError(f"{where}: {one_line(err)} (SQL: {sql[:120]})") from err


def _drop_slots(conn: Connection, wait: float, prefix: str = SLOT_PREFIX) -> None:
    """Drop the matrix's slots (those starting with ``prefix``), waiting up to ``wait`` s
    for walsenders to release them."""
    deadline = time.monotonic() + wait
    pattern = prefix.replace("_", "\\_") + "%"
    while True:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name LIKE %s AND NOT active",
            (pattern,),
        )
        row = conn.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE %s",
            (pattern,),
        ).fetchone()
        if row is None or row[0] == 0 or time.monotonic() >= deadline:
            return
        time.sleep(0.05)


def _cleanup(server: provision.Server, scenario: Scenario, wait: float) -> None:
    """Remove what this scenario (or an interrupted earlier run) left on the server."""
    with server.connect() as conn:
        _drop_slots(conn, wait)
        for (gid,) in conn.execute(
            "SELECT gid FROM pg_prepared_xacts "
            "WHERE gid LIKE 'pgwm\\_%' AND database = current_database()"
        ).fetchall():
            _run(conn, f"ROLLBACK PREPARED '{gid}'", "cleanup")
        _run(conn, f"DROP PUBLICATION IF EXISTS {scenario.publication}", "cleanup")
        for sql in scenario.teardown:
            _run(conn, sql, f"{scenario.name} teardown")


# The settings decode_text expects (codec.values): what a walsender prints by default.
_READ_SETTINGS: Final = (
    "SET DateStyle = 'ISO, MDY'; SET IntervalStyle = 'postgres'; SET extra_float_digits = 1; "
    "SET bytea_output = 'hex'; SET TimeZone = 'UTC'"
)


def _read_table(
    conn: Connection,
    oid: int,
    columns: Sequence[str] | None = None,
    rowfilter: str | None = None,
) -> ServerTable:
    row = conn.execute("SELECT %s::oid::regclass::text", (oid,)).fetchone()
    name = str(row[0]) if row else str(oid)
    selected = ", ".join(_quote_identifier(c) for c in columns) if columns else "*"
    where = f" WHERE {rowfilter}" if rowfilter else ""
    query = f"SELECT {selected} FROM {name}{where} ORDER BY 1".encode()
    results = []
    for fmt in (pq.Format.TEXT, pq.Format.BINARY):
        res = conn.pgconn.exec_params(query, None, result_format=fmt)
        if res.status != pq.ExecStatus.TUPLES_OK:
            message = (res.error_message or b"").decode(errors="replace").strip()
            raise ScenarioError(f"reading {name}: {message}")
        results.append(res)
    text, binary = results
    names = tuple(
        (text.fname(i) or b"").decode("utf-8", "surrogateescape") for i in range(text.nfields)
    )
    type_oids = tuple(text.ftype(i) for i in range(text.nfields))
    text_rows = tuple(
        tuple(_text_or_none(text.get_value(r, c)) for c in range(text.nfields))
        for r in range(text.ntuples)
    )
    binary_rows = tuple(
        tuple(_bytes_or_none(binary.get_value(r, c)) for c in range(binary.nfields))
        for r in range(binary.ntuples)
    )
    domains = {
        int(str(domain)): int(str(base))
        for domain, base in conn.execute(_DOMAINS, (oid,)).fetchall()
    }
    return ServerTable(oid, name, names, type_oids, text_rows, binary_rows, domains)


_DOMAINS: Final = """
WITH RECURSIVE d(oid, base) AS (
    SELECT t.oid, t.typbasetype FROM pg_type t
    WHERE t.typtype = 'd'
      AND t.oid IN (SELECT atttypid FROM pg_attribute WHERE attrelid = %s AND attnum > 0)
    UNION ALL
    SELECT d.oid, t.typbasetype FROM d JOIN pg_type t ON t.oid = d.base AND t.typtype = 'd'
)
SELECT d.oid::int8, d.base::int8 FROM d JOIN pg_type t ON t.oid = d.base
WHERE t.typtype <> 'd'
"""


def _quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _text_or_none(value: bytes | None) -> str | None:
    return None if value is None else bytes(value).decode("utf-8", "surrogateescape")


def _bytes_or_none(value: bytes | None) -> bytes | None:
    return None if value is None else bytes(value)


def read_tables(conn: Connection, scenario: Scenario) -> dict[int, ServerTable]:
    """Every table of the scenario's publication, as the server holds it now."""
    # From 15 a publication can publish some columns (attnames) and some rows
    # (rowfilter): the server's state to compare with is that part of the table.
    published = (
        "attnames::text[], rowfilter"
        if conn.info.server_version >= 150000
        else "NULL::text[], NULL::text"
    )
    rows = conn.execute(
        "SELECT format('%%I.%%I', schemaname, tablename)::regclass::oid::int8, "
        + published
        + " FROM pg_publication_tables WHERE pubname = %s",
        (scenario.publication,),
    ).fetchall()
    with conn.transaction():
        _run(conn, _READ_SETTINGS.replace("SET", "SET LOCAL"), "read settings")
        tables = [
            _read_table(
                conn,
                int(str(oid)),
                [str(c) for c in columns] if isinstance(columns, list) else None,
                None if rowfilter is None else str(rowfilter),
            )
            for oid, columns, rowfilter in rows
        ]
    return {t.oid: t for t in tables}


@contextlib.contextmanager
def prepare_scenario(
    server: provision.Server, scenario: Scenario, sets: Sequence[OptionSet]
) -> Iterator[ScenarioRun]:
    """Run ``scenario`` on ``server`` with one persistent slot per option set; clean up after.

    Slots are persistent, not temporary: a temporary slot stays acquired by the session
    that made it, so no walsender could stream it.
    """
    where = f"PostgreSQL {server.version} {scenario.name}"
    try:
        _cleanup(server, scenario, wait=_SLOT_RELEASE_WAIT)
    except psycopg.Error as err:
        raise ScenarioError(f"{where} cleanup: {one_line(err)}") from err
    try:
        with server.connect() as conn:
            for sql in scenario.setup:
                _run(conn, sql, f"{where} setup")
            _run(
                conn,
                scenario.create_publication(),
                f"{where} publication",
            )
            for opt in sets:
                two_phase = "true" if opt.two_phase else "false"
                _run(
                    conn,
                    f"SELECT pg_create_logical_replication_slot("
                    f"'{slot_name(opt)}', 'pgoutput', false, {two_phase})",
                    f"{where} slot {opt.name}",
                )
            for number, sql in enumerate(scenario.steps, start=1):
                _run(conn, sql, f"{where} step {number}")
            # A walsender decodes only flushed WAL, and an abort or a non-transactional
            # message is not flushed at once (capture.py does the same).
            _run(conn, "CHECKPOINT", f"{where} flush")
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
            if row is None:
                raise ScenarioError(f"{where}: pg_current_wal_lsn() returned no row")
            end = LSN.parse(str(row[0]))
            tables = read_tables(conn, scenario)
        yield ScenarioRun(server, scenario, tuple(sets), end, tables)
    except psycopg.Error as err:
        raise ScenarioError(f"{where}: {one_line(err)}") from err
    finally:
        with contextlib.suppress(psycopg.Error, ScenarioError):
            _cleanup(server, scenario, wait=_SLOT_RELEASE_WAIT)
