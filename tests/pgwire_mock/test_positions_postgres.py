"""Slot and walsender positions, and START_REPLICATION's errors, as real PostgreSQL shows them.

The same raw client (codec.wire) takes the same steps against a real server and against
the fake emulating its major: it connects as a walsender, creates slots, streams three
transactions, acknowledges them with odd standby status updates, stops, comes back from
an old position and tries slots that are busy, missing or of the wrong kind. After each
step it reads ``pg_stat_replication`` and ``pg_replication_slots`` on a plain connection.

What is compared:

* everything that does not depend on the server's own WAL exactly: column names and
  types, kinds, flags, states, PIDs, the client's address and port, every position the
  client itself reported (write/flush/replay, reply_time, a confirmed_flush that moved),
  every ErrorResponse field;
* for positions that come from the real server's WAL (restart_lsn, which moves to
  running-xacts records; sent_lsn, which follows records that decode to nothing), the
  rule a consumer can rely on, checked on both sides: restart_lsn <= confirmed_flush_lsn
  and <= sent_lsn, it only moves forward, and only on a confirmation; sent_lsn is at least
  the last wal_end the client saw and at most pg_current_wal_lsn().
"""

from __future__ import annotations

import contextlib
import dataclasses
import select
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path

import pytest
from psycopg import conninfo

from codec.replication import (
    PrimaryKeepalive,
    StandbyStatusUpdate,
    XLogData,
    decode_server_copy_data,
)
from codec.wire import (
    BackendKeyData,
    BackendReader,
    CopyBothResponse,
    CopyData,
    CopyDone,
    DataRow,
    ErrorResponse,
    NoticeResponse,
    Query,
    ReadyForQuery,
    RowDescription,
    StartupMessage,
    Terminate,
)
from codec.wire.reader import BackendMessage
from conformance.provision import Cluster, Server
from pgwire_mock.pytest_plugin import WalSender, start_walsender
from pgwire_mock.script import Script, column, insert
from pgwire_mock.server import ServerState, SlotState
from pgwire_mock.server.source import RecordingSource
from pgwire_mock.server.state import wal_file_name
from pgwire_mock.streamfile import StreamEntry

pytestmark = pytest.mark.postgres

_TABLE = "pos_t"
_PUB = "pos_pub"
_APP = "pos_app"
_WAIT = 10.0


def _lsn(text: str | None) -> int:
    assert text is not None
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def _fmt(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


class Raw:
    """A frontend that keeps every message: queries, START_REPLICATION, CopyData."""

    def __init__(self, host: str, port: int, params: Sequence[tuple[str, str]]) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.settimeout(30)
        self.local_port = self.sock.getsockname()[1]
        self.reader = BackendReader()
        self.pending: list[BackendMessage] = []  # read, not yet handed out
        self.started = time.time()
        self.sock.sendall(StartupMessage(tuple(params)).encode())
        self.startup = self._until(ReadyForQuery)
        self.pid = next(m.process_id for m in self.startup if isinstance(m, BackendKeyData))
        self.wal_end = 0  # the highest wal_end of any XLogData or keepalive seen

    def _read(self, timeout: float) -> list[BackendMessage] | None:
        if self.pending:
            out, self.pending = self.pending, []
            return out
        ready, _, _ = select.select([self.sock], [], [], max(timeout, 0.0))
        if not ready:
            return None
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the server closed the connection")
        self.reader.feed(data)
        out = list(self.reader)
        for m in out:
            if isinstance(m, CopyData) and m.data[:1] in (b"w", b"k"):
                decoded = decode_server_copy_data(bytes(m.data))
                assert isinstance(decoded, XLogData | PrimaryKeepalive)
                self.wal_end = max(self.wal_end, decoded.wal_end)
        return out

    def _until(self, *kinds: type, timeout: float = 30.0) -> list[BackendMessage]:
        out: list[BackendMessage] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self._read(deadline - time.monotonic()) or []
            for i, m in enumerate(got):
                out.append(m)
                if isinstance(m, kinds):
                    self.pending = got[i + 1 :]
                    return out
        raise AssertionError(f"no {kinds} within {timeout} s; got {out}")

    def query(self, text: str) -> list[BackendMessage]:
        self.sock.sendall(Query(text).encode())
        return self._until(ReadyForQuery)

    def start(self, text: str, *, timeout: float = 30.0) -> list[BackendMessage]:
        """START_REPLICATION: up to CopyBothResponse, or the error's ReadyForQuery."""
        self.sock.sendall(Query(text).encode())
        return self._until(CopyBothResponse, ReadyForQuery, timeout=timeout)

    def drain(self, seconds: float) -> list[BackendMessage]:
        """Whatever arrives within ``seconds``."""
        out: list[BackendMessage] = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            out.extend(self._read(left) or ())
        return out

    def stream_until(self, commits: int) -> list[XLogData]:
        """XLogData up to the ``commits``-th Commit, then 0.3 s of what follows."""
        got: list[XLogData] = []
        deadline = time.monotonic() + 30
        while sum(x.data[:1] == b"C" for x in got) < commits:
            assert time.monotonic() < deadline, got
            for m in self._read(deadline - time.monotonic()) or ():
                if isinstance(m, CopyData) and m.data[:1] == b"w":
                    xlog = decode_server_copy_data(bytes(m.data))
                    assert isinstance(xlog, XLogData)
                    got.append(xlog)
        self.drain(0.3)
        return got

    def status(self, write: int, flush: int, apply: int, send_time: int) -> None:
        update = StandbyStatusUpdate(write, flush, apply, send_time, False)
        self.sock.sendall(CopyData(update.encode()).encode())

    def copy_done(self) -> list[BackendMessage]:
        self.sock.sendall(CopyDone().encode())
        return self._until(ReadyForQuery)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.sendall(Terminate().encode())
        self.sock.close()


Row = dict[str, str | None]


class Catalog:
    """A plain SQL connection that reads the two views as text, as a monitoring client."""

    def __init__(self, host: str, port: int) -> None:
        self.conn = Raw(host, port, [("user", "postgres"), ("database", "postgres")])

    def select(self, text: str) -> tuple[list[tuple[object, ...]], list[Row]]:
        """(the RowDescription's fields, the rows by column name)."""
        messages = self.conn.query(text)
        errors = [m for m in messages if isinstance(m, ErrorResponse)]
        assert not errors, errors
        description = next(m for m in messages if isinstance(m, RowDescription))
        names = [f.name for f in description.fields]
        fields = [
            (f.name, f.table_oid, f.column_number, f.type_oid, f.type_size, f.type_modifier)
            for f in description.fields
        ]
        rows = [
            {
                n: None if v is None else bytes(v).decode()
                for n, v in zip(names, m.values, strict=True)
            }
            for m in messages
            if isinstance(m, DataRow)
        ]
        return fields, rows

    def slot(self, name: str) -> Row | None:
        rows = self.select(f"SELECT * FROM pg_replication_slots WHERE slot_name = '{name}'")[1]
        return rows[0] if rows else None

    def walsender(self, pid: int) -> Row | None:
        rows = self.select(f"SELECT * FROM pg_stat_replication WHERE pid = '{pid}'")[1]
        return rows[0] if rows else None

    def wal_lsn(self) -> int:
        return _lsn(self.select("SELECT pg_current_wal_lsn()")[1][0]["pg_current_wal_lsn"])

    def wait(
        self, read: Callable[[], Row | None], done: Callable[[Row | None], bool]
    ) -> Row | None:
        """Read until ``done`` holds (the real server applies updates asynchronously)."""
        deadline = time.monotonic() + _WAIT
        while True:
            row = read()
            if done(row) or time.monotonic() >= deadline:
                return row
            time.sleep(0.02)

    def close(self) -> None:
        self.conn.close()


@dataclasses.dataclass
class Side:
    """One server under test and how to make its three transactions happen."""

    name: str
    host: str
    port: int
    write_transactions: Callable[[], None]


def _real_side(server: Server, suffix: str) -> Side:
    info = conninfo.conninfo_to_dict(server.dsn)

    def write() -> None:
        with server.connect() as conn:
            for i in range(3):
                conn.execute(f"INSERT INTO {_TABLE} VALUES ({i})")

    return Side("real", str(info["host"]), int(str(info["port"])), write)


def _script(major: int) -> Script:
    table = f"public.{_TABLE}"
    script = (
        Script(pg_version=major)
        .table(table, columns=[column("id", "int4", key=True)])
        .publication(_PUB, tables=[table])
    )
    for i in range(3):
        script.transaction([insert(table, id=i)])
    return script


@pytest.fixture
def real_objects(pg_server: Server) -> Iterator[None]:
    with pg_server.connect() as conn:
        conn.execute(f"DROP PUBLICATION IF EXISTS {_PUB}")
        conn.execute(f"DROP TABLE IF EXISTS {_TABLE}")
        conn.execute(f"CREATE TABLE {_TABLE} (id int PRIMARY KEY)")
        conn.execute(f"CREATE PUBLICATION {_PUB} FOR TABLE {_TABLE}")
    yield
    with pg_server.connect() as conn:
        deadline = time.monotonic() + _WAIT
        while True:  # a walsender that just lost its client may still hold its slot
            busy = conn.execute(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'pos\\_%' "
                "AND active"
            ).fetchone()
            if not busy or not busy[0] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name LIKE 'pos\\_%' AND NOT active"
        )
        conn.execute(f"DROP PUBLICATION IF EXISTS {_PUB}")
        conn.execute(f"DROP TABLE IF EXISTS {_TABLE}")


@pytest.fixture
def fake(pg_server: Server) -> Iterator[WalSender]:
    server = start_walsender(_script(pg_server.version), pg_version=pg_server.version)
    yield server
    server.stop()


# --- the story ---------------------------------------------------------------------------


def _params(**extra: str) -> list[tuple[str, str]]:
    return [
        ("user", "postgres"),
        ("database", "postgres"),
        ("replication", "database"),
        *extra.items(),
    ]


def _recent(text: str | None, since: float) -> bool:
    """A timestamptz (UTC, as both servers run) at or after ``since`` and not in the future."""
    assert text is not None
    moment = datetime.fromisoformat(text).timestamp()
    return since - 1.0 <= moment <= time.time() + 1.0


def _walsender_row(row: Row | None, conn: Raw) -> dict[str, object]:
    """A pg_stat_replication row with what differs by nature made relative to the client."""
    assert row is not None
    out: dict[str, object] = dict(row)
    out["pid"] = row["pid"] == str(conn.pid)
    out["client_port"] = row["client_port"] == str(conn.local_port)
    out["backend_start"] = _recent(row["backend_start"], conn.started)
    out["usesysid"] = row["usesysid"] is not None
    # Positions: whether known here; the steps compare them with what the client saw/sent.
    for position in ("sent_lsn", "write_lsn", "flush_lsn", "replay_lsn"):
        out[position] = row[position] is not None
    # Lag columns come from the real server's LagTracker; the fake keeps none (NULL).
    for lag in ("write_lag", "flush_lag", "replay_lag"):
        out.pop(lag)
    return out


def _slot_row(row: Row | None, *, created: float, pids: dict[str, str]) -> dict[str, object]:
    """A pg_replication_slots row without the values only the real WAL decides; the
    active PID as the name of the client connection it belongs to."""
    assert row is not None
    out: dict[str, object] = dict(row)
    if row["active_pid"] is not None:
        out["active_pid"] = pids.get(row["active_pid"], "a backend of no client")
    for column_name in ("restart_lsn", "confirmed_flush_lsn"):
        out[column_name] = row[column_name] is not None
    out["catalog_xmin"] = row["catalog_xmin"] is not None
    if "inactive_since" in row:
        out["inactive_since"] = (
            None if row["inactive_since"] is None else _recent(row["inactive_since"], created)
        )
    return out


def _pid_free(fields: Sequence[tuple[str, str]], pid: int) -> tuple[tuple[str, str], ...]:
    """Error fields with the other backend's PID (in "active for PID n") as a label."""
    return tuple((k, v.replace(f"PID {pid}", "PID <owner>")) for k, v in fields)


def _check_restart_rule(history: Sequence[tuple[int, int, int | None]]) -> None:
    """(restart_lsn, confirmed_flush_lsn, sent_lsn) over time: restart never passes the
    confirmed or sent position and never moves back."""
    previous = 0
    for restart, confirmed, sent in history:
        assert restart <= confirmed, history
        if sent is not None:
            assert restart <= sent, history
        assert restart >= previous, history
        previous = restart


def _story(side: Side) -> list[tuple[str, object]]:
    """The client steps; returns what it saw after each, comparable across servers."""
    seen: list[tuple[str, object]] = []
    catalog = Catalog(side.host, side.port)
    conn = Raw(side.host, side.port, _params(application_name=_APP))
    history: list[tuple[int, int, int | None]] = []
    pids = {str(conn.pid): "streaming client"}

    def slot_positions(sent: int | None = None) -> tuple[int, int]:
        row = catalog.slot("pos_slot")
        assert row is not None
        restart, confirmed = _lsn(row["restart_lsn"]), _lsn(row["confirmed_flush_lsn"])
        history.append((restart, confirmed, sent))
        return restart, confirmed

    try:
        seen.append(
            (
                "views",
                (
                    catalog.select("SELECT * FROM pg_stat_replication")[0],
                    catalog.select("SELECT * FROM pg_replication_slots")[0],
                ),
            )
        )
        seen.append(("connected", _walsender_row(catalog.walsender(conn.pid), conn)))

        created = time.time()
        reply = conn.query("CREATE_REPLICATION_SLOT pos_slot LOGICAL pgoutput NOEXPORT_SNAPSHOT")
        point = next(m for m in reply if isinstance(m, DataRow)).values[1]
        assert point is not None
        conn.query("CREATE_REPLICATION_SLOT pos_tmp TEMPORARY LOGICAL pgoutput NOEXPORT_SNAPSHOT")
        conn.query("CREATE_REPLICATION_SLOT pos_phys PHYSICAL")
        conn.query("CREATE_REPLICATION_SLOT pos_physr PHYSICAL RESERVE_WAL")
        for name in ("pos_slot", "pos_tmp", "pos_phys", "pos_physr"):
            seen.append(
                (f"created {name}", _slot_row(catalog.slot(name), created=created, pids=pids))
            )
        confirmed = slot_positions()[1]
        seen.append(
            (
                "created: confirmed_flush is the consistent point",
                confirmed == _lsn(bytes(point).decode()),
            )
        )

        side.write_transactions()
        started = conn.start(
            f"START_REPLICATION SLOT pos_slot LOGICAL 0/0 "
            f"(proto_version '1', publication_names '{_PUB}')"
        )
        seen.append(("start", [type(m).__name__ for m in started]))
        xlog = conn.stream_until(3)
        commits = [x.wal_end for x in xlog if x.data[:1] == b"C"]
        seen.append(("streamed", "".join(chr(x.data[0]) for x in xlog)))
        streaming = catalog.walsender(conn.pid)
        assert streaming is not None
        sent = _lsn(streaming["sent_lsn"])
        seen.append(("streaming", _walsender_row(streaming, conn)))
        seen.append(
            (
                "sent_lsn: at least the last wal_end seen, at most the end of WAL",
                conn.wal_end <= sent <= catalog.wal_lsn(),
            )
        )
        seen.append(
            ("streaming slot", _slot_row(catalog.slot("pos_slot"), created=created, pids=pids))
        )
        seen.append(
            (
                "streaming slot: confirmed_flush unchanged before a reply",
                slot_positions(sent)[1] == confirmed,
            )
        )

        # write past the commits, flush at the last, apply at the second: as reported.
        end = conn.wal_end
        conn.status(end, commits[2], commits[1], 12345)
        row = catalog.wait(
            lambda: catalog.walsender(conn.pid),
            lambda r: r is not None and r["reply_time"] is not None,
        )
        seen.append(("acknowledged", _walsender_row(row, conn)))
        assert row is not None
        seen.append(
            (
                "acknowledged: reported positions",
                (row["write_lsn"], row["flush_lsn"], row["replay_lsn"])
                == (_fmt(end), _fmt(commits[2]), _fmt(commits[1])),
            )
        )
        slot = catalog.wait(
            lambda: catalog.slot("pos_slot"),
            lambda r: r is not None and _lsn(r["confirmed_flush_lsn"]) == commits[2],
        )
        assert slot is not None
        seen.append(
            (
                "acknowledged: confirmed_flush is the flush reported",
                _lsn(slot["confirmed_flush_lsn"]) == commits[2],
            )
        )
        slot_positions(sent)

        # An older flush shows in pg_stat_replication but does not move the slot back.
        conn.status(end, commits[0], commits[0], 12346)
        row = catalog.wait(
            lambda: catalog.walsender(conn.pid),
            lambda r: r is not None and r["reply_time"] == "2000-01-01 00:00:00.012346+00",
        )
        assert row is not None
        seen.append(("older flush", (row["flush_lsn"] == _fmt(commits[0]), row["reply_time"])))
        seen.append(("older flush: confirmed_flush stays", slot_positions(sent)[1] == commits[2]))

        # A flush beyond the end of WAL is taken as it is; restart_lsn stays behind.
        beyond = end + 0x1000000
        conn.status(beyond, beyond, beyond, 12347)
        catalog.wait(
            lambda: catalog.slot("pos_slot"),
            lambda r: r is not None and _lsn(r["confirmed_flush_lsn"]) == beyond,
        )
        seen.append(
            ("beyond: confirmed_flush is the flush reported", slot_positions(sent)[1] == beyond)
        )

        seen.append(("copy done", [type(m).__name__ for m in conn.copy_done()]))
        seen.append(
            ("stopped slot", _slot_row(catalog.slot("pos_slot"), created=created, pids=pids))
        )
        row = catalog.walsender(conn.pid)
        seen.append(("stopped", _walsender_row(row, conn)))
        assert row is not None
        seen.append(("stopped: sent_lsn kept", _lsn(row["sent_lsn"]) == sent))

        options = f"(proto_version '1', publication_names '{_PUB}')"
        # Another walsender resumes from a position before restart_lsn: no notice, the
        # slot's own confirmed_flush is used. This one then finds the slot busy.
        other = Raw(side.host, side.port, _params())
        pids[str(other.pid)] = "resuming client"
        try:
            resumed = other.start(
                f"START_REPLICATION SLOT pos_slot LOGICAL 0/10 "
                f"(proto_version '1', publication_names '{_PUB}')"
            )
            seen.append(("resume from 0/10", [type(m).__name__ for m in resumed]))
            later = [
                type(m).__name__
                for m in other.drain(0.5)
                if isinstance(m, NoticeResponse | ErrorResponse)
                or (isinstance(m, CopyData) and m.data[:1] == b"w")
            ]
            seen.append(("resume from 0/10: nothing already confirmed", later))
            seen.append(
                ("busy slot", _slot_row(catalog.slot("pos_slot"), created=created, pids=pids))
            )
            third = Raw(side.host, side.port, _params())
            try:
                for target, owner, command in (
                    # A temporary slot stays acquired by its session (first: an ERROR in
                    # that session would drop it).
                    (third, conn, f"START_REPLICATION SLOT pos_tmp LOGICAL 0/0 {options}"),
                    (conn, other, f"START_REPLICATION SLOT pos_slot LOGICAL 0/0 {options}"),
                    (conn, other, "DROP_REPLICATION_SLOT pos_slot"),
                ):
                    shown = [
                        ("Error", _pid_free(m.fields, owner.pid))
                        if isinstance(m, ErrorResponse)
                        else type(m).__name__
                        for m in target.start(command)
                    ]
                    seen.append((command.split(" (")[0], shown))
            finally:
                third.close()
            # PostgresMain's error cleanup drops the temporary slots of the session.
            seen.append(("an ERROR dropped the temporary slot", catalog.slot("pos_tmp")))
        finally:
            other.close()
        gone = catalog.wait(lambda: catalog.walsender(other.pid), lambda r: r is None)
        seen.append(("other closed: its row is gone", gone))
        slot = catalog.wait(
            lambda: catalog.slot("pos_slot"), lambda r: r is not None and r["active"] == "f"
        )
        seen.append(("released slot", _slot_row(slot, created=created, pids=pids)))
        slot_positions()

        for command in (
            f"START_REPLICATION SLOT pos_none LOGICAL 0/0 {options}",
            f"START_REPLICATION SLOT pos_phys LOGICAL 0/0 {options}",
            f"START_REPLICATION SLOT pos_physr LOGICAL 0/0 {options}",
            "START_REPLICATION SLOT pos_slot PHYSICAL 0/0",
        ):
            reply = conn.start(command)
            seen.append(
                (
                    command.split(" (")[0],
                    [
                        ("Error", m.fields) if isinstance(m, ErrorResponse) else type(m).__name__
                        for m in reply
                    ],
                )
            )
    finally:
        conn.close()
    gone = catalog.wait(lambda: catalog.walsender(conn.pid), lambda r: r is None)
    seen.append(("closed: its row is gone", gone))
    seen.append(
        (
            "closed: its temporary slot is gone",
            catalog.wait(lambda: catalog.slot("pos_tmp"), lambda r: r is None),
        )
    )
    catalog.close()
    _check_restart_rule(history)
    return seen


def test_positions_and_slot_states_move_as_postgres_moves_them(
    pg_server: Server, real_objects: None, fake: WalSender
) -> None:
    """pg_stat_replication and pg_replication_slots before, while and after a client
    streams and acknowledges, and START_REPLICATION's slot errors: equal, step by step."""
    real = _story(_real_side(pg_server, uuid.uuid4().hex[:6]))
    mock = _story(Side("fake", fake.host, fake.port, lambda: None))
    assert [step for step, _ in mock] == [step for step, _ in real]
    for (step, want), (_, got) in zip(real, mock, strict=True):
        assert got == want, step


# --- WAL the server no longer has ------------------------------------------------------------


def _wal_gone_reply(conn: Raw, slot: str) -> list[object]:
    reply = conn.start(
        f"START_REPLICATION SLOT {slot} LOGICAL 0/0 (proto_version '1', publication_names 'p')"
    )
    assert isinstance(reply[-1], CopyBothResponse), reply
    # PostgreSQL 14 may hold the error back for seconds: read up to ReadyForQuery.
    rest = conn._until(ReadyForQuery, timeout=30)
    shown: list[object] = []
    for m in [*reply, *rest]:
        if isinstance(m, ErrorResponse):
            shown.append(("Error", m.fields))
        elif isinstance(m, CopyData) and m.data[:1] == b"k":
            continue  # PostgreSQL sends a keepalive while waiting for WAL; see docs
        else:
            shown.append(type(m).__name__)
    shown.append([type(m).__name__ for m in conn.query("SELECT 1")])
    return shown


def test_a_recording_that_cannot_be_resumed_answers_as_missing_wal(pg_server: Server) -> None:
    """A real walsender whose slot needs a WAL segment that was removed sends CopyBoth and
    then ERROR 58P01 "requested WAL segment ... has already been removed", and the
    connection goes on. The fake says the same of a recording it cannot decode from the
    slot's position (payloads that are not pgoutput), naming the segment of that position."""
    if not isinstance(pg_server, Cluster):
        pytest.skip("removing a WAL segment needs the data directory of a provisioned server")
    with pg_server.connect() as sql:
        others = sql.execute("SELECT slot_name FROM pg_replication_slots").fetchall()
        if others:
            pytest.skip(f"other slots would lose WAL too: {others}")
        sql.execute("CREATE TABLE IF NOT EXISTS pos_wal (id int)")
        sql.execute("SELECT pg_switch_wal()")
        sql.execute("SELECT pg_create_logical_replication_slot('pos_wal', 'pgoutput')")
        row = sql.execute(
            "SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = 'pos_wal'"
        ).fetchone()
        assert row is not None
        restart = _lsn(str(row[0]))
        for _ in range(2):
            sql.execute("INSERT INTO pos_wal VALUES (1)")
            sql.execute("SELECT pg_switch_wal()")
        sql.execute("CHECKPOINT")
        segment = wal_file_name(1, restart)
        (Path(pg_server.data_dir) / "pg_wal" / segment).unlink()
    info = conninfo.conninfo_to_dict(pg_server.dsn)
    conn = Raw(str(info["host"]), int(str(info["port"])), _params())
    try:
        real = _wal_gone_reply(conn, "pos_wal")
    finally:
        conn.close()
        with pg_server.connect() as sql:
            deadline = time.monotonic() + _WAIT
            while (
                sql.execute(
                    "SELECT active FROM pg_replication_slots WHERE slot_name = 'pos_wal'"
                ).fetchone()
                == (True,)
                and time.monotonic() < deadline
            ):
                time.sleep(0.02)
            sql.execute("SELECT pg_drop_replication_slot('pos_wal')")
            sql.execute("DROP TABLE pos_wal")

    start = 0x3000000
    entries = [StreamEntry(start + 0x100 * i, b"\xff not pgoutput") for i in range(3)]
    source = RecordingSource(entries, major=pg_server.version)
    confirmed = start + 0x150
    server = start_walsender(source, pg_version=pg_server.version, slots=[("pos_wal", confirmed)])
    try:
        conn = Raw(server.host, server.port, _params())
        try:
            mock = _wal_gone_reply(conn, "pos_wal")
        finally:
            conn.close()
        server.wait_until(lambda s: not s.slots["pos_wal"].active)
        assert server.slots["pos_wal"].confirmed_flush == confirmed
    finally:
        server.stop()
    assert mock == [
        m
        if not isinstance(m, tuple)
        else (
            "Error",
            tuple((k, v.replace(segment, wal_file_name(1, confirmed))) for k, v in m[1]),
        )
        for m in real
    ]
    assert any(isinstance(m, tuple) and ("C", "58P01") in m[1] for m in real), real


# --- wal_status --------------------------------------------------------------------------------


def test_wal_status_turns_extended_where_postgres_turns_it(pg_server: Server) -> None:
    """The fake's wal_status rule (GetWALAvailability: 'reserved' while restart_lsn's
    segment is within max_wal_size of the end of WAL, 'extended' beyond), evaluated at the
    real server's own positions, gives the real server's answer at every switch."""
    with pg_server.connect() as sql:
        sql.execute("ALTER SYSTEM SET max_wal_size = '32MB'")
        sql.execute("ALTER SYSTEM SET min_wal_size = '32MB'")
        sql.execute("SELECT pg_reload_conf()")
        try:
            time.sleep(0.2)
            max_wal_size = int(
                str(
                    sql.execute(
                        "SELECT setting::bigint * 1024 * 1024 FROM pg_settings "
                        "WHERE name = 'max_wal_size'"
                    ).fetchone()[0]
                )
            )  # type: ignore[index]
            assert max_wal_size == 32 << 20
            sql.execute("CREATE TABLE IF NOT EXISTS pos_ws (id int)")
            sql.execute("SELECT pg_create_logical_replication_slot('pos_ws', 'pgoutput')")
            answers: list[tuple[str, str | None, str | None]] = []
            for _ in range(6):
                sql.execute("INSERT INTO pos_ws VALUES (1)")
                sql.execute("SELECT pg_switch_wal()")
                sql.execute("INSERT INTO pos_ws VALUES (1)")
                row = sql.execute(
                    "SELECT restart_lsn::text, pg_current_wal_lsn()::text, wal_status "
                    "FROM pg_replication_slots WHERE slot_name = 'pos_ws'"
                ).fetchone()
                assert row is not None
                restart, current, status = _lsn(str(row[0])), _lsn(str(row[1])), row[2]
                state = ServerState(wal_lsn=current, max_wal_size=max_wal_size)
                slot = SlotState("pos_ws", "pgoutput", "postgres", restart, restart)
                answers.append((str(row[1]), status, state.wal_status(slot)))
        finally:
            sql.execute("SELECT pg_drop_replication_slot('pos_ws')")
            sql.execute("DROP TABLE IF EXISTS pos_ws")
            sql.execute("ALTER SYSTEM RESET max_wal_size")
            sql.execute("ALTER SYSTEM RESET min_wal_size")
            sql.execute("SELECT pg_reload_conf()")
    assert [real for _, real, _ in answers][-1] == "extended", answers
    assert [real for _, real, _ in answers] == [fake for _, _, fake in answers], answers
