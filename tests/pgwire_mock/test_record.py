"""pgwire-mock record: a real server's stream, recorded, equals what the SQL interface
decodes for the same range, and the fake replays it byte for byte."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from codec.values import LSN
from conformance.provision import Server
from pgwire_mock.cli import main
from pgwire_mock.client import capture_via_walsender
from pgwire_mock.pytest_plugin import WalSender
from pgwire_mock.record import fill_positions

OPTIONS = {"proto_version": "1", "publication_names": "rec_pub"}


def test_fill_positions_gives_zero_positions_the_next_known_one() -> None:
    entries = [(0, b"R"), (0, b"B"), (16, b"I"), (0, b"R"), (32, b"C"), (0, b"Y")]
    assert [lsn for lsn, _ in fill_positions(entries)] == [16, 16, 16, 32, 32, 32]
    assert [p for _, p in fill_positions(entries)] == [p for _, p in entries]


def load(path: Path) -> tuple[dict[str, object], list[tuple[int, bytes]]]:
    meta: dict[str, object] = {}
    entries = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if "meta" in record:
            meta = record["meta"]
        else:
            entries.append((int(LSN.parse(record["lsn"])), bytes.fromhex(record["data"])))
    return meta, entries


def test_record_equals_the_sql_interface_and_replays_byte_for_byte(
    pg_server: Server, tmp_path: Path, make_walsender: Callable[..., WalSender]
) -> None:
    with pg_server.connect() as conn:
        conn.execute("DROP PUBLICATION IF EXISTS rec_pub")
        conn.execute("DROP TABLE IF EXISTS rec_t")
        for slot in ("rec_slot", "rec_peek"):
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s",
                (slot,),
            )
        conn.execute("CREATE TABLE rec_t (id int PRIMARY KEY, v text, n numeric)")
        conn.execute("CREATE PUBLICATION rec_pub FOR TABLE rec_t")
        conn.execute(
            "SELECT pg_create_logical_replication_slot('rec_slot', 'pgoutput'), "
            "pg_create_logical_replication_slot('rec_peek', 'pgoutput')"
        )
        conn.execute("INSERT INTO rec_t VALUES (1, 'a', 1.5), (2, NULL, 'NaN')")
        conn.execute("UPDATE rec_t SET id = 3, v = 'moved' WHERE id = 1")
        conn.execute("DELETE FROM rec_t WHERE id = 2")
        conn.execute("CHECKPOINT")
        peeked = [
            (int(LSN.parse(str(lsn))), bytes(data))
            for lsn, data in conn.execute(
                "SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes("
                "'rec_peek', NULL, NULL, 'proto_version', '1', 'publication_names', 'rec_pub')"
            ).fetchall()
        ]
    try:
        out = tmp_path / "recorded.jsonl"
        status = main(
            [
                "record",
                "--dsn",
                pg_server.dsn,
                "--slot",
                "rec_slot",
                "--publication",
                "rec_pub",
                "--out",
                str(out),
            ]
        )
        assert status == 0
        meta, recorded = load(out)
        assert meta["major"] == pg_server.version
        assert recorded == peeked  # payloads and (filled) positions, message by message

        fake = make_walsender(script=out, slots=["replay"])
        replayed = capture_via_walsender(fake.dsn(), "replay", 0, OPTIONS, idle_timeout=1.0)
        assert [payload for _, payload in replayed] == [payload for _, payload in recorded]
    finally:
        with pg_server.connect() as conn:
            conn.execute("SELECT pg_drop_replication_slot('rec_slot')")
            conn.execute("SELECT pg_drop_replication_slot('rec_peek')")
            conn.execute("DROP PUBLICATION rec_pub")
            conn.execute("DROP TABLE rec_t")


def test_record_of_a_missing_slot_is_one_line_and_exit_1(
    pg_server: Server, tmp_path: Path, capsys: object
) -> None:
    status = main(
        [
            "record",
            "--dsn",
            pg_server.dsn,
            "--slot",
            "no_such_slot",
            "--publication",
            "p",
            "--out",
            str(tmp_path / "x.jsonl"),
        ]
    )
    assert status == 1
