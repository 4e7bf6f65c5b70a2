"""The SQL a Debezium PostgreSQL connector runs on its replication connection, against the
fake and against real PostgreSQL 14–17 (the fake emulating the same major).

Debezium (``PostgresReplicationConnection``, ``PostgresConnection``) connects with
``replication=database`` and pgjdbc's ``preferQueryMode=simple``, and, before
``START_REPLICATION``, runs plain SQL there: it checks the publication
(``SELECT COUNT(1) FROM pg_publication WHERE pubname = '<name>'``) with autocommit off,
creates it (``CREATE PUBLICATION <name> FOR ALL TABLES;``) and commits, reads its slot
(``select * from pg_replication_slots where slot_name = ? and database = ? and plugin = ?``,
the parameters inlined as literals in simple mode), checks ``wal_level``, the server
version, the current WAL position and ``statement_timeout``. psycopg2 sends the same
simple Query messages (and ``BEGIN`` before the first statement when autocommit is off,
as pgjdbc does).

Each statement must get the same columns (names and type OIDs), the same command tag and
the same values where they are not server-specific. Where the fake answers differently,
the test is marked xfail(strict) with the precise difference.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psycopg2
import pytest

from conformance import fake
from conformance.provision import Server
from pgwire_mock.server import ServerState, SessionConfig, SlotState

PUBLICATION = "dbz_publication"
SLOT = "debezium"


@dataclass(frozen=True, slots=True)
class Answer:
    """One statement's outcome as a client sees it."""

    columns: tuple[tuple[str, int], ...] = ()
    rows: tuple[tuple[object, ...], ...] = ()
    tag: str | None = None
    error: tuple[str, str] | None = None  # (SQLSTATE, primary message)


def _run(conn: object, sql: str) -> Answer:
    cur = conn.cursor()  # type: ignore[attr-defined]
    try:
        cur.execute(sql)
    except psycopg2.Error as err:
        conn.rollback()  # type: ignore[attr-defined]
        message = (err.diag.message_primary or "") if err.diag else str(err)
        return Answer(error=(str(err.pgcode), message))
    columns = tuple((d.name, d.type_code) for d in cur.description or ())
    rows = tuple(cur.fetchall()) if cur.description else ()
    return Answer(columns, rows, cur.statusmessage)


@dataclass
class Pair:
    real: object
    fake: object
    major: int

    def both(self, sql: str) -> tuple[Answer, Answer]:
        return _run(self.real, sql), _run(self.fake, sql)


def _cleanup(server: Server) -> None:
    with server.connect() as conn:
        conn.execute(f"DROP PUBLICATION IF EXISTS {PUBLICATION}")
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
            " WHERE slot_name = %s AND NOT active",
            (SLOT,),
        )


@pytest.fixture
def pair(pg_server: Server) -> Iterator[Pair]:
    """Autocommit psycopg2 replication=database connections to the real server and to a
    fake emulating its major; both have the logical slot ``debezium`` (pgoutput)."""
    _cleanup(pg_server)
    with pg_server.connect() as conn:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (SLOT,))
    state = ServerState()
    state.declare([SlotState(SLOT, "pgoutput", "postgres", state.wal_lsn, state.wal_lsn)], [])
    try:
        with fake.host().serve(SessionConfig(major=pg_server.version), state) as server:
            real = psycopg2.connect(pg_server.dsn + " replication=database")
            other = psycopg2.connect(server.dsn())
            real.autocommit = other.autocommit = True
            try:
                yield Pair(real, other, pg_server.version)
            finally:
                real.close()
                other.close()
    finally:
        _cleanup(pg_server)


def _same_shape(real: Answer, fake: Answer) -> None:
    assert fake.error == real.error
    assert fake.columns == real.columns
    assert fake.tag == real.tag
    assert len(fake.rows) == len(real.rows)


def _columns(answer: Answer, *names: str) -> list[tuple[object, ...]]:
    index = [[c for c, _ in answer.columns].index(n) for n in names]
    return [tuple(row[i] for i in index) for row in answer.rows]


# One statement at a time ----------------------------------------------------------------

Normalize = Callable[[Answer], object]


STATEMENTS: list[tuple[str, Normalize]] = [
    ("SHOW wal_level", lambda a: a.rows),
    ("SHOW statement_timeout;", lambda a: a.rows),
    # The version string is the build's; its first two words are not.
    ("SELECT version()", lambda a: [str(r[0]).split()[0] for r in a.rows]),
    ("SELECT pg_current_wal_lsn()", lambda a: len(a.rows)),
    # PostgresConnection.currentXLogLocation, which a snapshot without a new slot reads.
    (
        "select (case pg_is_in_recovery() when 't' then pg_last_wal_receive_lsn() else"
        " pg_current_wal_lsn() end) AS pg_current_wal_lsn",
        lambda a: len(a.rows),
    ),
    (
        f"select * from pg_replication_slots where slot_name = '{SLOT}'"
        " and database = 'postgres' and plugin = 'pgoutput'",
        lambda a: _columns(
            a, "slot_name", "plugin", "slot_type", "database", "temporary", "active", "two_phase"
        ),
    ),
    (
        f"SELECT * FROM pg_replication_slots WHERE slot_name = '{SLOT}'"
        " AND plugin = 'pgoutput' AND database = 'postgres'",
        lambda a: _columns(a, "slot_name", "plugin", "database", "active"),
    ),
    ("BEGIN", lambda a: a.rows),
]


@pytest.mark.parametrize(("sql", "normalize"), STATEMENTS, ids=[s for s, _ in STATEMENTS])
def test_statement_gets_the_same_answer(pair: Pair, sql: str, normalize: Normalize) -> None:
    """Same columns (names, type OIDs), tag and row count; same values where they are not
    server-specific."""
    real, fake_answer = pair.both(sql)
    assert real.error is None, real.error
    _same_shape(real, fake_answer)
    assert normalize(fake_answer) == normalize(real)


def test_commit_without_a_transaction_warns_like_postgresql(pair: Pair) -> None:
    """COMMIT outside a transaction: tag COMMIT and the 25P01 warning, no error."""
    real, fake_answer = pair.both("COMMIT")
    _same_shape(real, fake_answer)


def test_publication_count_before_creating_it(pair: Pair) -> None:
    """``SELECT COUNT(1) FROM pg_publication WHERE pubname = '...'``, Debezium's check
    before creating its publication: one int8 column ``count``, value 0."""
    real, fake_answer = pair.both(
        f"SELECT COUNT(1) FROM pg_publication WHERE pubname = '{PUBLICATION}'"
    )
    assert real.columns == (("count", 20),) and real.rows == ((0,),)
    _same_shape(real, fake_answer)
    assert fake_answer.rows == real.rows


def test_init_publication_as_debezium_does(pair: Pair) -> None:
    """Autocommit off: BEGIN (sent by the driver), the publication check, ``CREATE
    PUBLICATION ... FOR ALL TABLES;``, COMMIT; then the publication is there, for all
    tables, publishing every action."""
    answers = []
    for conn in (pair.real, pair.fake):
        conn.autocommit = False  # type: ignore[attr-defined]
        created = _run(conn, f"CREATE PUBLICATION {PUBLICATION} FOR ALL TABLES;")
        conn.commit()  # type: ignore[attr-defined]
        conn.autocommit = True  # type: ignore[attr-defined]
        row = _run(
            conn,
            "SELECT pubname, puballtables, pubinsert, pubupdate, pubdelete, pubtruncate"
            f" FROM pg_publication WHERE pubname = '{PUBLICATION}'",
        )
        answers.append((created, row))
    (real_created, real_row), (fake_created, fake_row) = answers
    assert real_created.error is None and real_created.tag == "CREATE PUBLICATION"
    _same_shape(real_created, fake_created)
    _same_shape(real_row, fake_row)
    assert fake_row.rows == real_row.rows


def test_whole_publication_row(pair: Pair) -> None:
    """``SELECT * FROM pg_publication WHERE pubname = ...``: every column of 14–17."""
    for conn in (pair.real, pair.fake):
        _run(conn, f"CREATE PUBLICATION {PUBLICATION} FOR ALL TABLES")
    real, fake_answer = pair.both(f"SELECT * FROM pg_publication WHERE pubname = '{PUBLICATION}'")
    _same_shape(real, fake_answer)
    stable = ("pubname", "puballtables", "pubinsert", "pubupdate", "pubdelete", "pubtruncate")
    assert _columns(fake_answer, *stable) == _columns(real, *stable)


def test_publication_tables_columns(pair: Pair) -> None:
    """``SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname=...``
    (how Debezium-based tools list a publication's tables): same columns; no rows for a
    FOR TABLE publication of no tables on either."""
    for conn in (pair.real, pair.fake):
        _run(conn, f"CREATE PUBLICATION {PUBLICATION}")
    real, fake_answer = pair.both(
        f"SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname='{PUBLICATION}'"
    )
    _same_shape(real, fake_answer)


def test_snapshot_transaction_id(pair: Pair) -> None:
    """PostgresConnection.currentTransactionId, which every Debezium snapshot reads for its
    offset: one xid8 column ``pg_current_txid``, one row (its value is the server's; this
    fake has no script, so it answers as an empty script does, with its first_xid)."""
    real, fake_answer = pair.both(
        "select (case pg_is_in_recovery() when 't' then '0'::xid8 else pg_current_xact_id()"
        " end) AS pg_current_txid"
    )
    assert real.columns == (("pg_current_txid", 5069),) and len(real.rows) == 1
    _same_shape(real, fake_answer)
