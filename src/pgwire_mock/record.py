"""``pgwire-mock record``: a real server's pgoutput stream, into a file ``serve`` replays.

It reads a slot like any logical replication client (``pgwire_mock.client``), confirms
what it recorded as pg_recvlogical does, and writes the JSON Lines recording format of
:mod:`pgwire_mock.streamfile`: a ``{"meta": ...}`` line (server version, major, slot,
options) and one ``{"lsn", "data"}`` line per XLogData payload.

A walsender reports ``wal_start`` 0/0 for the messages pgoutput writes ahead of the
record that caused them (Relation, Type, a Begin followed by Origin; walsender.c
WalSndPrepareWrite). The recording gives each of those the position of the next
message instead, as the SQL interface (``pg_logical_slot_get_binary_changes``) does, so
a replay can place and skip them with their transaction; the payloads are untouched.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from codec.values import LSN
from pgwire_mock.client import (
    ReplicationClientError,
    ReplicationConnection,
    capture_via_walsender,
    pgoutput_options,
)

__all__ = ["add_record_command", "fill_positions", "record"]


def fill_positions(entries: Sequence[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """Give every 0/0 position the next non-zero one (the last known one at the end)."""
    filled = list(entries)
    following = 0
    for index in range(len(filled) - 1, -1, -1):
        lsn, payload = filled[index]
        if lsn:
            following = lsn
        else:
            filled[index] = (following, payload)
    previous = 0
    for index, (lsn, payload) in enumerate(filled):
        if lsn:
            previous = lsn
        else:
            filled[index] = (previous, payload)
    return filled


def record(
    dsn: str,
    slot: str,
    out: Path,
    options: Mapping[str, str],
    *,
    start_lsn: int = 0,
    end_lsn: int | None = None,
    idle_timeout: float = 2.0,
    create_slot: bool = False,
) -> int:
    """Record ``slot`` into ``out``; return the number of messages written."""
    with ReplicationConnection.connect(dsn) as conn:
        server_version = conn.session.parameters.get("server_version", "")
        major = conn.session.server_version_major
        if create_slot:
            conn.create_slot(slot, two_phase=options.get("two_phase") in ("on", "true"))
        if end_lsn is None:
            end_lsn = int(conn.identify_system().xlogpos)
    entries = capture_via_walsender(
        dsn, slot, start_lsn, options, until_lsn=end_lsn, idle_timeout=idle_timeout
    )
    meta: dict[str, Any] = {
        "server_version": server_version,
        "major": major,
        "slot": slot,
        "options": dict(options),
        "recorded_from": "walsender",
    }
    with out.open("w") as f:
        f.write(json.dumps({"meta": meta}) + "\n")
        for lsn, payload in fill_positions([(int(lsn), payload) for lsn, payload in entries]):
            f.write(json.dumps({"lsn": str(LSN(lsn)), "data": payload.hex()}) + "\n")
    return len(entries)


def add_record_command(commands: Any) -> None:
    parser = commands.add_parser(
        "record",
        help="record a real server's pgoutput stream into a file 'serve' replays",
        description="Stream a logical replication slot from a real PostgreSQL (like "
        "pg_recvlogical, confirming what was recorded) up to its current WAL end, or "
        "--endpos, and write it as a JSON Lines recording that 'pgwire-mock serve "
        "--script FILE' replays byte for byte.",
    )
    parser.add_argument("--dsn", required=True, help="libpq DSN or postgresql:// URI")
    parser.add_argument("--slot", required=True, help="logical slot (pgoutput) to read")
    parser.add_argument("--publication", required=True, action="append", help="repeatable")
    parser.add_argument("--out", required=True, type=Path, help="recording to write")
    parser.add_argument("--create-slot", action="store_true", help="create the slot first")
    parser.add_argument("--proto-version", type=int, default=1, choices=(1, 2, 3, 4))
    parser.add_argument("--binary", action="store_true", help="binary tuple values")
    parser.add_argument("--messages", action="store_true", help="logical decoding messages")
    parser.add_argument("--streaming", choices=("off", "on", "parallel"), default="off")
    parser.add_argument("--two-phase", action="store_true", help="two-phase transactions")
    parser.add_argument("--start", default="0/0", help="start LSN (default: the slot's)")
    parser.add_argument("--endpos", help="stop after this LSN (default: the server's WAL end)")
    parser.add_argument("--idle", type=float, default=2.0, help="seconds without data to wait")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from pgwire_mock.cli import CommandError  # noqa: PLC0415 - cli imports this module

    options = {
        k: str(v)
        for k, v in pgoutput_options(
            args.publication,
            proto_version=args.proto_version,
            binary=args.binary or None,
            messages=args.messages or None,
            streaming=None if args.streaming == "off" else args.streaming,
            two_phase=args.two_phase or None,
        ).items()
    }
    try:
        count = record(
            args.dsn,
            args.slot,
            args.out,
            options,
            start_lsn=int(LSN.parse(args.start)),
            end_lsn=None if args.endpos is None else int(LSN.parse(args.endpos)),
            idle_timeout=args.idle,
            create_slot=args.create_slot,
        )
    except (ReplicationClientError, OSError, ValueError) as err:
        raise CommandError(str(err)) from None
    print(f"recorded {count} messages from slot {args.slot} into {args.out}")
    return 0
