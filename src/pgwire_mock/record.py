"""``pgwire-mock record``: a real server's pgoutput stream, into a file ``serve`` replays.

It reads a slot like any logical replication client (``pgwire_mock.client``), confirms
what it recorded as pg_recvlogical does, and writes the JSON Lines recording format of
:mod:`pgwire_mock.streamfile`: a ``{"meta": ...}`` line (server version, major, slot,
options) and one ``{"lsn", "data"}`` line per XLogData payload.

With ``--snapshot`` it creates the slot with an exported snapshot, as a client that
copies the tables first does (``CREATE_REPLICATION_SLOT … (SNAPSHOT 'export')``, on 14
``EXPORT_SNAPSHOT``), and on a second, ordinary connection reads the published tables
under it: ``BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY``, ``SET TRANSACTION
SNAPSHOT``, the tables' definitions from pg_class and pg_attribute, then ``COPY … TO
STDOUT`` of each. The meta line gains them (``snapshot``), one line per row follows,
and the stream is recorded from the slot's consistent point: exactly what that snapshot
does not see (:mod:`pgwire_mock.streamfile` has the format).

A walsender reports ``wal_start`` 0/0 for the messages pgoutput writes ahead of the
record that caused them (Relation, Type, a Begin followed by Origin; walsender.c
WalSndPrepareWrite). The recording gives each of those the position of the next
message instead, as the SQL interface (``pg_logical_slot_get_binary_changes``) does, so
a replay can place and skip them with their transaction; the payloads are untouched.

With ``--physical`` it records what a physical client (pg_receivewal, a standby) receives
instead, on a ``replication=true`` connection: IDENTIFY_SYSTEM's row, the history file of
every timeline after the first (TIMELINE_HISTORY), and the WAL from the start of the
segment holding the server's flush position (or ``--start``) up to that position (or
``--endpos``), as XLogData carries it. ``docs/physical.md`` documents the file;
:class:`pgwire_mock.server.physical.PhysicalRecording` reads and writes it.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from codec.pgoutput import Begin, BeginPrepare, Commit, Decoder, Prepare, StreamStart, StreamStop
from codec.values import LSN
from pgwire_mock.cli_common import CommandError, check_output
from pgwire_mock.client import (
    ErrorReceived,
    ReplicationClientError,
    ReplicationConnection,
    WalData,
    capture_via_walsender,
    pgoutput_options,
    quote_literal,
)
from pgwire_mock.record_backup import (
    PG_BASEBACKUP_DEFAULT,
    parse_backup_spec,
    record_base_backup,
)
from pgwire_mock.server.backup_options import BackupOptions
from pgwire_mock.server.basebackup import RecordedBackup
from pgwire_mock.server.pgoutput_options import split_identifier_string
from pgwire_mock.server.physical import HistoryFile, PhysicalRecording
from pgwire_mock.streamfile import read_stream

__all__ = [
    "SnapshotError",
    "add_record_command",
    "fill_positions",
    "record",
    "record_physical",
    "unfinished",
]


class SnapshotError(ValueError):
    """The published tables cannot be recorded as a snapshot (the message says why)."""


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
    snapshot: bool = False,
    after_snapshot: Callable[[], object] | None = None,
) -> int:
    """Record ``slot`` into ``out``; return the number of messages written.

    ``snapshot``: create the slot with an exported snapshot and record the published
    tables as it sees them, then the stream from its consistent point; without
    ``end_lsn`` the stream ends at the WAL's end once the tables are copied and
    ``after_snapshot`` (if given) has run.
    """
    two_phase = options.get("two_phase") in ("on", "true")
    snapshot_meta: dict[str, Any] | None = None
    rows: list[tuple[str, bytes]] = []
    with ReplicationConnection.connect(dsn) as conn:
        server_version = conn.session.parameters.get("server_version", "")
        major = conn.session.server_version_major
        names = split_identifier_string(options.get("publication_names", "")) or []
        publications = _describe_publications(conn, names)
        if snapshot:
            created = conn.create_slot(slot, snapshot="export", two_phase=two_phase)
            if created.snapshot_name is None:
                raise SnapshotError("CREATE_REPLICATION_SLOT exported no snapshot")
            tables, rows = _copy_tables(dsn, created.snapshot_name, names, major)
            start_lsn = int(created.consistent_point)
            snapshot_meta = {
                "consistent_point": str(created.consistent_point),
                "snapshot_name": created.snapshot_name,
                "tables": tables,
            }
            if after_snapshot is not None:
                after_snapshot()
        elif create_slot:
            conn.create_slot(slot, two_phase=two_phase)
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
        "publications": publications,
    }
    if snapshot_meta is not None:
        meta["snapshot"] = snapshot_meta
    with out.open("w") as f:
        f.write(json.dumps({"meta": meta}) + "\n")
        for table, row in rows:
            copy = row.decode("utf-8", "surrogateescape")
            f.write(json.dumps({"table": table, "copy": copy}) + "\n")
        for lsn, payload in fill_positions([(int(lsn), payload) for lsn, payload in entries]):
            f.write(json.dumps({"lsn": str(LSN(lsn)), "data": payload.hex()}) + "\n")
    return len(entries)


def _physical_connection(dsn: str, timeout: float) -> ReplicationConnection:
    """A ``replication=true`` connection (a physical walsender, no database)."""
    return ReplicationConnection.connect(
        dsn, timeout=timeout, startup_options={"replication": "true"}
    )


_UNITS: Final = {"B": 1, "kB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}


def record_physical(
    dsn: str,
    out: Path,
    *,
    start_lsn: int | None = None,
    end_lsn: int | None = None,
    timeout: float = 30.0,
    base_backups: Sequence[BackupOptions] = (),
) -> PhysicalRecording:
    """Record the WAL ``[start_lsn, end_lsn)`` of the server's current timeline into
    ``out`` (default: from the start of the segment holding the flush position up to it),
    with IDENTIFY_SYSTEM's row and the timeline history files.

    ``base_backups``: take a BASE_BACKUP with each of these options first and keep what
    the server sent; the WAL then starts by default at the segment holding the earliest
    backup's start, so that ``-X fetch`` and ``-X stream`` can be answered too."""
    with _physical_connection(dsn, timeout) as conn:
        server_version = conn.session.parameters.get("server_version", "")
        size_text = conn.show("wal_segment_size") or "16MB"
        number = size_text.rstrip("kMGB")
        segment_size = int(number) * _UNITS[size_text[len(number) :]]
        if base_backups:
            # The backups' checkpoints may recycle the segments they start in before the
            # WAL is read: a temporary slot (gone with the connection) keeps them.
            conn.execute(
                f"CREATE_REPLICATION_SLOT pgwire_mock_record_{conn.session.process_id} "
                "TEMPORARY PHYSICAL RESERVE_WAL"
            )
        backups: list[RecordedBackup] = [
            record_base_backup(conn, options, max(timeout, 300.0)) for options in base_backups
        ]
        identity = conn.identify_system()
        histories = []
        for timeline in range(2, identity.timeline + 1):
            (filename, content), *_ = conn.execute(f"TIMELINE_HISTORY {timeline}").rows
            histories.append(HistoryFile(timeline, filename or "", content or ""))
        end = int(identity.xlogpos) if end_lsn is None else end_lsn
        if start_lsn is None:
            first = min((b.start_lsn for b in backups), default=end)
            start_lsn = first - first % segment_size
        start = start_lsn
        if start > end:
            raise ValueError(f"--start {LSN(start)} is after the end {LSN(end)}")
        wal = bytearray()
        if start < end:
            conn.session.query(
                f"START_REPLICATION PHYSICAL {LSN(start)} TIMELINE {identity.timeline}"
            )
            deadline = time.monotonic() + timeout
            while start + len(wal) < end:
                if time.monotonic() > deadline:
                    raise ValueError(f"the WAL did not reach {LSN(end)} within {timeout}s")
                for event in conn.poll(1.0):
                    if isinstance(event, ErrorReceived):
                        raise event.error
                    if isinstance(event, WalData) and start + len(wal) < end:
                        if int(event.wal_start) != start + len(wal):
                            raise ValueError(
                                f"XLogData at {event.wal_start}, expected {LSN(start + len(wal))}"
                            )
                        wal += event.payload[: end - start - len(wal)]
    recording = PhysicalRecording(
        server_version=server_version,
        major=conn.session.server_version_major,
        system_identifier=int(identity.systemid),
        timeline=identity.timeline,
        start_lsn=start,
        end_lsn=end,
        wal_data=bytes(wal),
        segment_size=segment_size,
        histories=tuple(histories),
        backups=tuple(backups),
    )
    with out.open("w") as f:
        recording.write(f)
    return recording


def unfinished(payloads: Iterable[bytes]) -> str | None:
    """What a stream ends inside of, if it ends inside a transaction (a Begin or Begin
    Prepare with no Commit or Prepare, a Stream Start with no Stream Stop), else None.

    A streamed transaction whose blocks all ended but that has not committed yet is not
    unfinished: pgoutput sends such blocks before the commit, and a real slot read up to
    the WAL's end gives the same.
    """
    decoder = Decoder()
    open_at: str | None = None
    for payload in payloads:
        message = decoder.decode(payload)
        if isinstance(message, Begin):
            open_at = f"BEGIN of xid {message.xid} with no COMMIT"
        elif isinstance(message, BeginPrepare):
            open_at = f"BEGIN PREPARE of xid {message.xid} ('{message.gid}') with no PREPARE"
        elif isinstance(message, StreamStart):
            open_at = f"STREAM START of xid {message.xid} with no STREAM STOP"
        elif isinstance(message, Commit | Prepare | StreamStop):
            open_at = None
    return open_at


def _describe_publications(
    conn: ReplicationConnection, names: Sequence[str]
) -> list[dict[str, Any]]:
    """The publications as the server defines them (pg_publication and its tables), so
    that the fake answers a subscriber's catalog queries about them as this server did.
    Plain catalog reads, which pgwire-mock's own walsender answers too."""
    if not names:
        return []
    result = conn.execute("SELECT * FROM pg_catalog.pg_publication")
    columns = result.column_names
    described = []
    for row in result.rows:
        pub = dict(zip(columns, row, strict=True))
        if pub["pubname"] not in names:
            continue
        all_tables = pub["puballtables"] == "t"
        tables = []
        if not all_tables:
            listed = conn.execute(
                "SELECT schemaname, tablename FROM pg_catalog.pg_publication_tables "
                f"WHERE pubname = {quote_literal(str(pub['pubname']))}"
            )
            tables = sorted(f"{schema}.{table}" for schema, table in listed.rows)
        described.append(
            {
                "name": pub["pubname"],
                "all_tables": all_tables,
                "tables": tables,
                **{
                    key: pub[f"pub{key}"] == "t"
                    for key in ("insert", "update", "delete", "truncate")
                },
                "generated_columns": pub.get("pubgencols") or "n",  # 18+
            }
        )
    return described


_TABLES = """
SELECT DISTINCT c.oid, n.nspname, c.relname, c.relreplident, c.relnatts, c.relkind
FROM pg_catalog.pg_publication_tables t
JOIN pg_catalog.pg_namespace n ON n.nspname = t.schemaname
JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = t.tablename
WHERE t.pubname = ANY(%s) ORDER BY n.nspname, c.relname
"""
# 15+: publications can publish a column list or filter rows (pg_publication_rel).
_FILTERED = """
SELECT p.pubname, pr.prrelid::regclass::text FROM pg_catalog.pg_publication_rel pr
JOIN pg_catalog.pg_publication p ON p.oid = pr.prpubid
WHERE p.pubname = ANY(%s) AND (pr.prattrs IS NOT NULL OR pr.prqual IS NOT NULL)
"""
# The columns pgoutput publishes, and the replica identity index's, as tablesync.c's
# fetch_remote_table_info reads them (no index: FULL or NOTHING, none is a key): the
# ordinary ones and, on 18, the stored generated ones a publication with
# publish_generated_columns = stored publishes (pg_publication_tables.attnames lists them).
_COLUMNS = """
SELECT a.attnum, a.attname, a.atttypid, a.atttypmod, coalesce(a.attnum = ANY(i.indkey), false),
  a.attgenerated::text
FROM pg_catalog.pg_attribute a
LEFT JOIN pg_catalog.pg_index i ON i.indexrelid = pg_catalog.pg_get_replica_identity_index(%s)
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped AND (a.attgenerated = ''
  OR a.attname = ANY(%s))
ORDER BY a.attnum
"""
_PUBLISHED_NAMES = """
SELECT coalesce(array_agg(DISTINCT n), '{}') FROM pg_catalog.pg_publication_tables t,
  unnest(t.attnames) n
WHERE t.pubname = ANY(%s) AND t.schemaname = %s AND t.tablename = %s
"""


def _copy_tables(
    dsn: str, snapshot_name: str, publications: Sequence[str], major: int
) -> tuple[list[dict[str, Any]], list[tuple[str, bytes]]]:
    """The published tables' definitions and rows (COPY text lines, without newline) as
    the exported snapshot sees them, read as a client copying them would."""
    import psycopg  # noqa: PLC0415 - only --snapshot needs an SQL connection
    from psycopg import sql  # noqa: PLC0415

    tables: list[dict[str, Any]] = []
    rows: list[tuple[str, bytes]] = []
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot_name)))
            if major >= 15:
                for pubname, relation in conn.execute(_FILTERED, (list(publications),)):
                    raise SnapshotError(
                        f"publication {pubname} publishes {relation} with a column list or "
                        "row filter: --snapshot records whole tables only"
                    )
            found = conn.execute(_TABLES, (list(publications),)).fetchall()
            for oid, schema, name, identity, natts, kind in found:
                if kind != "r":
                    raise SnapshotError(
                        f"{schema}.{name} is not an ordinary table (relkind {kind}): "
                        "--snapshot records ordinary tables only"
                    )
                published: list[str] = []
                if major >= 18:
                    (published,) = conn.execute(  # type: ignore[misc]
                        _PUBLISHED_NAMES, (list(publications), schema, name)
                    ).fetchone()
                columns = [
                    {"attnum": n, "name": a, "type_oid": t, "typmod": m, "key": k}
                    | ({"generated": g} if g else {})
                    for n, a, t, m, k, g in conn.execute(_COLUMNS, (oid, oid, list(published)))
                ]
                tables.append(
                    {
                        "schema": schema,
                        "name": name,
                        "oid": int(oid),
                        "relreplident": identity,
                        "relnatts": natts,
                        "columns": columns,
                    }
                )
                # COPY takes no generated column; a SELECT reads them (as 18's table sync).
                template = (
                    "COPY (SELECT {2} FROM ONLY {0}.{1}) TO STDOUT"
                    if any("generated" in c for c in columns)
                    else "COPY {0}.{1} ({2}) TO STDOUT"
                )
                copy = sql.SQL(template).format(
                    sql.Identifier(schema),
                    sql.Identifier(name),
                    sql.SQL(", ").join(sql.Identifier(c["name"]) for c in columns),
                )
                data = bytearray()
                with conn.cursor().copy(copy) as reader:
                    for chunk in reader:
                        data += chunk
                # COPY writes a newline inside a value as \n: each line is one row.
                lines = bytes(data).split(b"\n")[:-1]
                rows.extend((f"{schema}.{name}", line) for line in lines)
            conn.execute("COMMIT")
    except psycopg.Error as err:
        raise SnapshotError(f"reading the snapshot: {err}") from None
    return tables, rows


def add_record_command(commands: Any) -> None:
    parser = commands.add_parser(
        "record",
        help="record a real server's pgoutput stream into a file 'serve' replays",
        description="Stream a logical replication slot from a real PostgreSQL (like "
        "pg_recvlogical, confirming what was recorded) up to its current WAL end, or "
        "--endpos, and write it as a JSON Lines recording that 'pgwire-mock serve "
        "--script FILE' replays byte for byte. With --snapshot it creates the slot with "
        "an exported snapshot, records the published tables as that snapshot sees them "
        "(definitions and rows, read with SET TRANSACTION SNAPSHOT and COPY ... TO STDOUT "
        "on a second connection) and then the stream from the slot's consistent point, so "
        "that 'serve' answers a subscriber's table copy and stream as the server would. "
        "A recording that ends inside a transaction (an --endpos before its end) is "
        "written but reported, with exit status 1.",
    )
    parser.add_argument("--dsn", required=True, help="libpq DSN or postgresql:// URI")
    parser.add_argument(
        "--physical",
        action="store_true",
        help="record what a physical client (pg_receivewal) receives instead: "
        "IDENTIFY_SYSTEM, the timeline history files and the WAL from --start (default: "
        "the start of the segment holding the flush position) to --endpos (default: the "
        "flush position); see docs/physical.md. No slot, no publication",
    )
    parser.add_argument(
        "--base-backup",
        metavar="OPTIONS",
        nargs="?",
        action="append",
        const=PG_BASEBACKUP_DEFAULT,
        help="with --physical: first take a BASE_BACKUP with these options, written as "
        "15+'s option list (e.g. \"LABEL 'x', PROGRESS, WAL, MANIFEST 'yes'\"; sent in "
        "the server's own syntax) and record every message of the answer, which 'serve' "
        f"replays; repeatable. Without OPTIONS: {PG_BASEBACKUP_DEFAULT} (what "
        "pg_basebackup -Fp -X stream sends). The WAL then starts at "
        "the segment holding the earliest backup's start; see docs/physical.md",
    )
    parser.add_argument("--slot", help="logical slot (pgoutput) to read (required)")
    parser.add_argument("--publication", action="append", help="repeatable (required)")
    parser.add_argument("--out", required=True, type=Path, help="recording to write")
    parser.add_argument("--create-slot", action="store_true", help="create the slot first")
    parser.add_argument(
        "--snapshot",
        action="store_true",
        help="create the slot with an exported snapshot and record the published tables' "
        "rows as of its consistent point before the stream (always JSON Lines: a raw wire "
        "file cannot hold tables; whole ordinary tables only, no column lists or row "
        "filters); the stream ends at the WAL's end once the tables are copied, or --endpos",
    )
    parser.add_argument("--proto-version", type=int, default=1, choices=(1, 2, 3, 4))
    parser.add_argument("--binary", action="store_true", help="binary tuple values")
    parser.add_argument("--messages", action="store_true", help="logical decoding messages")
    parser.add_argument("--streaming", choices=("off", "on", "parallel"), default="off")
    parser.add_argument("--two-phase", action="store_true", help="two-phase transactions")
    parser.add_argument(
        "--start", type=_lsn, default=LSN(0), help="start LSN (default: the slot's)"
    )
    parser.add_argument(
        "--endpos", type=_lsn, help="stop after this LSN (default: the server's WAL end)"
    )
    parser.add_argument(
        "--idle", type=_idle, default=2.0, help="seconds without data to wait (default 2)"
    )
    parser.set_defaults(run=_run)


def _lsn(text: str) -> LSN:
    try:
        return LSN.parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an LSN such as 0/16B3748, got {text!r}"
        ) from None


def _idle(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:  # also NaN
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}")
    return seconds


def _run(args: argparse.Namespace) -> int:
    check_output(args.out, "--out")  # before streaming (and confirming) anything
    if args.physical:
        return _run_physical(args)
    if args.base_backup:
        raise CommandError("--base-backup needs --physical")
    for option in ("slot", "publication"):
        if not getattr(args, option):
            raise CommandError(f"--{option} is required (unless --physical)")
    if args.snapshot and args.start != 0:
        raise CommandError("--snapshot records from the new slot's consistent point: no --start")
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
            start_lsn=int(args.start),
            end_lsn=None if args.endpos is None else int(args.endpos),
            idle_timeout=args.idle,
            create_slot=args.create_slot,
            snapshot=args.snapshot,
        )
    except (ReplicationClientError, OSError, ValueError) as err:
        raise CommandError(str(err)) from None
    with args.out.open("rb") as f:
        cut = unfinished(entry.payload for entry in read_stream(f, str(args.out)))
    if cut is not None:
        # 'serve' would replay a transaction that never ends, and a consumer would wait
        # for its commit forever: say so rather than exit 0 with such a file.
        raise CommandError(
            f"{args.out} ends inside a transaction: {cut}, in the {count} messages written; "
            "record up to an --endpos after its end"
        )
    print(f"recorded {count} messages from slot {args.slot} into {args.out}")
    return 0


def _run_physical(args: argparse.Namespace) -> int:
    logical = [
        f"--{name.replace('_', '-')}"
        for name in ("slot", "publication", "create_slot", "snapshot", "binary", "messages")
        if getattr(args, name)
    ]
    if logical:
        raise CommandError(f"--physical records no logical stream: no {', '.join(logical)}")
    try:
        backups = [parse_backup_spec(text) for text in args.base_backup or ()]
        recording = record_physical(
            args.dsn,
            args.out,
            start_lsn=int(args.start) if args.start != 0 else None,
            end_lsn=None if args.endpos is None else int(args.endpos),
            base_backups=backups,
        )
    except (ReplicationClientError, OSError, ValueError) as err:
        raise CommandError(str(err)) from None
    for backup in recording.backups:
        print(f"recorded {backup.command} ({len(backup.messages)} messages)")
    print(
        f"recorded WAL {LSN(recording.start_lsn)} to {LSN(recording.end_lsn)} of timeline "
        f"{recording.timeline} ({len(recording.wal_data)} bytes) into {args.out}"
    )
    return 0
