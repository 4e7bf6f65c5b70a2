"""``pgwire-mock record --snapshot`` of a real server, served by the fake: a real
subscriber of the same major subscribing with copy_data=true (text and binary COPY)
ends with the tables the real server has.

The recorded server holds a primary-key table and a REPLICA IDENTITY FULL table with
text (tabs, newlines, backslashes, non-ASCII), numeric, bytea and timestamptz columns and
initial rows; after the slot exists, transactions insert, update (a key change too) and
delete in both. The snapshot in the recording has only the initial rows, its stream only
the later transactions; a subscriber gets the initial rows through COPY and the rest
through the stream (new slots at the recording's start), or everything through COPY
(new slots at its end: the fake applies the recorded transactions to the snapshot).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conformance.provision import Cluster, Server
from pgwire_mock.cli import main
from pgwire_mock.client import pgoutput_options
from pgwire_mock.pytest_plugin import start_walsender
from pgwire_mock.record import record

COLUMNS = "id int, t text, n numeric(12,3), b bytea, ts timestamptz"
INITIAL = [
    (1, "plain", "1.5", b"\x00\x01", "2024-02-29 12:00:00+00"),
    (2, "tab\there, newline\nthere, back\\slash", "-0.001", b"", "1999-12-31 23:59:59.5+00"),
    (3, "héllo ✓", None, b"\xff" * 40, "infinity"),
    (4, None, "123456789.125", None, None),
    *[
        (i, f"row {i}", f"{i}.25", bytes([i % 256]) * 3, "2020-01-01 00:00:00+00")
        for i in range(5, 41)
    ],
]


def _after(conn: Any, pk: str, full: str) -> None:
    """The transactions committed after the slot exists."""
    with conn.transaction():
        for table in (pk, full):
            conn.execute(
                f"INSERT INTO {table} VALUES (100, 'new', 7.125, '\\xdeadbeef', "
                "'2024-06-01 10:00:00+02')"
            )
            conn.execute(f"UPDATE {table} SET t = 'changed\\there', n = NULL WHERE id = 1")
    for table in (pk, full):
        conn.execute(f"UPDATE {table} SET id = 200, b = '\\x00' WHERE id = 2")  # the key
        conn.execute(f"DELETE FROM {table} WHERE id IN (3, 40)")
        conn.execute(f"UPDATE {table} SET ts = '2000-01-01 00:00:00+00' WHERE id BETWEEN 10 AND 15")
    with conn.transaction():
        conn.execute(
            f"INSERT INTO {pk} SELECT g, 'bulk ' || g, g, NULL, NULL "
            "FROM generate_series(300, 399) g"
        )
        conn.execute(f"DELETE FROM {full} WHERE id = 4")


def _rows(conn: Any, table: str) -> list[tuple[object, ...]]:
    # ts as text: a row read before its delete arrives may hold 'infinity', which
    # psycopg cannot load as a datetime.
    query = f"SELECT id, t, n, b, ts::text FROM {table} ORDER BY id"
    return [tuple(r) for r in conn.execute(query).fetchall()]


def _subscribe(
    cluster: Cluster, port: int, publication: str, tables: Sequence[str], options: str
) -> tuple[dict[str, list[tuple[object, ...]]], list[str]]:
    name = f"s_{uuid.uuid4().hex[:10]}"
    conninfo = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    with cluster.connect() as conn:
        for table in tables:
            key = " PRIMARY KEY" if table.endswith("_pk") else ""
            conn.execute(f"CREATE TABLE {table} ({COLUMNS.replace('id int', 'id int' + key)})")
            if not key:
                conn.execute(f"ALTER TABLE {table} REPLICA IDENTITY FULL")
        conn.execute(
            f"CREATE SUBSCRIPTION {name} CONNECTION '{conninfo}' PUBLICATION {publication} "
            f"WITH ({options})"
        )
        try:
            states_query = (
                "SELECT srsubstate FROM pg_subscription_rel r JOIN pg_subscription s "
                "ON s.oid = r.srsubid WHERE s.subname = %s"
            )
            deadline = time.monotonic() + 60
            previous: object = None
            while True:
                states = sorted(str(r[0]) for r in conn.execute(states_query, (name,)))
                got = {table: _rows(conn, table) for table in tables}
                # Done when every table is ready and nothing changed for a while.
                if states == ["r"] * len(tables) and got == previous:
                    return got, states
                if time.monotonic() > deadline:
                    return got, states
                previous = got
                time.sleep(0.5)
        finally:
            conn.execute(f"ALTER SUBSCRIPTION {name} DISABLE")
            conn.execute(f"ALTER SUBSCRIPTION {name} SET (slot_name = NONE)")
            conn.execute(f"DROP SUBSCRIPTION {name}")
            for table in tables:
                conn.execute(f"DROP TABLE {table}")


def test_a_snapshot_recording_gives_a_real_subscriber_the_real_servers_tables(
    pg_server: Server, subscriber_cluster: Cluster, tmp_path: Path
) -> None:
    """Served by the fake, a record --snapshot recording gives a real subscriber with
    copy_data=true (text and binary COPY; new slots at the recording's start or end)
    the real server's tables, row for row."""
    tag = uuid.uuid4().hex[:8]
    pk, full, publication, slot = f"rs_{tag}_pk", f"rs_{tag}_full", f"rs_pub_{tag}", f"rs_{tag}"
    out = tmp_path / "snapshot.jsonl"
    with pg_server.connect() as conn:
        for table in (pk, full):
            key = " PRIMARY KEY" if table == pk else ""
            conn.execute(f"CREATE TABLE {table} ({COLUMNS.replace('id int', 'id int' + key)})")
            with conn.cursor() as cur:
                cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s, %s, %s)", INITIAL)
        conn.execute(f"ALTER TABLE {full} REPLICA IDENTITY FULL")
        conn.execute(f"CREATE PUBLICATION {publication} FOR TABLE {pk}, {full}")
        try:
            options = {
                k: str(v) for k, v in pgoutput_options([publication], proto_version=1).items()
            }
            count = record(
                pg_server.dsn,
                slot,
                out,
                options,
                snapshot=True,
                after_snapshot=lambda: _after(conn, pk, full),
            )
            real = {table: _rows(conn, table) for table in (pk, full)}
        finally:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s",
                (slot,),
            )
            conn.execute(f"DROP PUBLICATION {publication}")
            for table in (pk, full):
                conn.execute(f"DROP TABLE {table}")

    lines = [json.loads(line) for line in out.read_text().splitlines()]
    snapshot = lines[0]["meta"]["snapshot"]
    assert sorted(t["name"] for t in snapshot["tables"]) == sorted((pk, full))
    assert sum("table" in line for line in lines) == 2 * len(INITIAL)  # only the initial rows
    assert count > 0 and real[pk] != [] and len(real[pk]) > len(INITIAL)

    cells = ["copy_data = true", "copy_data = true, binary = true"]
    results = []
    for new_slots in ("stream_start", "end_of_wal"):
        server = start_walsender(out, databases=["postgres"], new_slots=new_slots)
        try:
            for options in cells:
                got, states = _subscribe(
                    subscriber_cluster, server.port, publication, (pk, full), options
                )
                results.append((new_slots, options, got, states))
        finally:
            server.stop()
    for new_slots, options, got, states in results:
        assert states == ["r", "r"], (new_slots, options)
        assert got == real, (new_slots, options)


def test_record_snapshot_from_the_command_line_writes_the_tables_and_the_stream(
    pg_server: Server, tmp_path: Path
) -> None:
    """`pgwire-mock record --snapshot` creates the slot, writes the meta's tables and one
    line per row, and refuses --start (the snapshot fixes where the stream begins)."""
    tag = uuid.uuid4().hex[:8]
    table, publication, slot = f"rc_{tag}", f"rc_pub_{tag}", f"rc_{tag}"
    out = tmp_path / "cli.jsonl"
    with pg_server.connect() as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text)")
        conn.execute(f"INSERT INTO {table} VALUES (1, 'a'), (2, NULL)")
        conn.execute(f"CREATE PUBLICATION {publication} FOR TABLE {table}")
        args = ["record", "--dsn", pg_server.dsn, "--slot", slot]
        args += ["--publication", publication, "--out", str(out), "--snapshot"]
        try:
            assert main([*args, "--start", "0/10"]) == 1
            assert main(args) == 0
        finally:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s",
                (slot,),
            )
            conn.execute(f"DROP PUBLICATION {publication}")
            conn.execute(f"DROP TABLE {table}")
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    columns = lines[0]["meta"]["snapshot"]["tables"][0]["columns"]
    assert [(c["name"], c["type_oid"], c["key"]) for c in columns] == [
        ("id", 23, True),
        ("v", 25, False),
    ]
    assert lines[1:3] == [
        {"table": f"public.{table}", "copy": "1\ta"},
        {"table": f"public.{table}", "copy": "2\t\\N"},
    ]
