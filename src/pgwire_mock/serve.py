"""``pgwire-mock serve``: run the fake walsender.

The command wires the pieces together: a stream source (``--script``: a recording or a
YAML/JSON script), the shared :class:`~pgwire_mock.server.state.ServerState` (optionally
persisted with ``--state-file``), a :class:`~pgwire_mock.server.session.SessionConfig`
and a Twisted endpoint. It is the only place that touches the global reactor.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import signal
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Final, cast

from codec.values import LSN
from pgwire_mock import json_text
from pgwire_mock.server.auth import AUTH_METHODS, User
from pgwire_mock.server.errors import ServerError
from pgwire_mock.server.faults import FAULTS, Fault, FaultError
from pgwire_mock.server.physical import PhysicalRecording
from pgwire_mock.server.session import SessionConfig
from pgwire_mock.server.source import RecordingSource, ScriptSource, load_source
from pgwire_mock.server.sql_result import OID, CannedAnswer, Column
from pgwire_mock.server.state import (
    SLOT_SAVES,
    PublicationState,
    ServerState,
    SlotState,
    slot_name_problem,
)
from pgwire_mock.server.versions import MAJORS
from pgwire_mock.server.wal_journal import JournalError, WalJournal, journal_path

__all__ = ["add_serve_command", "build_server", "cmd_cert", "cmd_serve", "write_certificate"]

DEFAULT_PORT: Final = 5433
DEFAULT_HOST: Final = "127.0.0.1"

_EPILOG: Final = """\
examples:
  pgwire-mock serve --script tests/data/golden/pg16/types.v1.jsonl --pg-version 16
  pgwire-mock serve --script stream.yaml --user app:secret --auth scram-sha-256
  pgwire-mock serve --listen unix:/tmp/.s.PGSQL.5433 --script rec.jsonl --state-file s.json

Clients connect with replication=database; for the first example's recording, e.g.
  pg_recvlogical -h 127.0.0.1 -p 5433 -U postgres -d postgres -S s --create-slot --start \\
      -P pgoutput -o proto_version=1 -o publication_names=pgwm_types -o messages=true -f -

Recordings (JSON Lines from 'pgwire-mock capture' or 'record', or raw CopyData) are
replayed byte for byte, so a client asking for another proto_version or binary than a
recording was made with is refused (0A000), as the Python API refuses it; scripts
(.yaml/.yml/.json) are encoded for each client's pgoutput options. Slots created by
clients start where the source's WAL starts, so a new slot sees the whole stream;
--state-file keeps the slots (every confirmation; with --slot-saves postgresql what
PostgreSQL's slot file holds) and a served script's WAL, and a server started again on
it resumes from them (docs/clients.md).

Signals stop it as they stop PostgreSQL's postmaster: SIGTERM a smart shutdown (new
connections refused, the rest goes on until the last regular session ends), SIGINT
(Ctrl-C) a fast one (sessions end with 57P01, each streaming walsender once its client
confirmed all it was sent, or at --wal-sender-timeout), SIGQUIT (Ctrl-\\) an
immediate one (every connection dropped). A later, stronger signal takes over; SIGHUP
changes nothing (PostgreSQL reloads its configuration).
"""


def _user(text: str) -> User:
    name, sep, password = text.partition(":")
    if not name:
        raise argparse.ArgumentTypeError(f"expected NAME[:PASSWORD], got {text!r}")
    if sep and not password:
        # PostgreSQL has no empty passwords: CREATE ROLE ... PASSWORD '' clears it, and an
        # empty answer is refused. Say so rather than make a role nobody can log in as.
        raise argparse.ArgumentTypeError(
            f"empty password in {text!r}: PostgreSQL refuses empty passwords; "
            f"give one, or use --user {name} (or --role {name}) for a role without a password"
        )
    return User(name, password if sep else None)


def _slot(text: str) -> tuple[str, int | None]:
    name, sep, lsn = text.partition("@")
    if not name:
        raise argparse.ArgumentTypeError(f"expected NAME[@LSN], got {text!r}")
    problem = slot_name_problem(name)
    if problem is not None:
        raise argparse.ArgumentTypeError(
            f"{problem} (lower case letters, numbers and the underscore, at most 63)"
        )
    if not sep:
        return name, None
    try:
        return name, int(LSN.parse(lsn))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"bad LSN {lsn!r}: {err}") from None


def _fault(text: str) -> Fault:
    try:
        return Fault.parse(text)
    except FaultError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a TCP port number, got {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a TCP port is 0-65535, got {port}")
    return port


def _at_least(minimum: int) -> Callable[[str], int]:
    """An integer option's type with PostgreSQL's lower bound for the setting."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def _seconds(text: str) -> float:
    units = {"ms": 0.001, "s": 1.0, "min": 60.0}
    for unit in ("ms", "min", "s"):
        if text.endswith(unit):
            number, scale = text[: -len(unit)], units[unit]
            break
    else:
        number, scale = text, 1.0
    try:
        value = float(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected seconds (60, 30s, 1min), got {text!r}"
        ) from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds, got {text!r}")
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value


def add_serve_command(
    commands: Any, run: Callable[[argparse.Namespace], int] | None = None
) -> None:
    """Add the ``serve`` subcommand to ``pgwire-mock``'s subparsers."""
    serve = commands.add_parser(
        "serve",
        help="run a fake PostgreSQL walsender that streams a script or a recording",
        description="Serve logical replication like PostgreSQL 14-18 would: startup and "
        "authentication, IDENTIFY_SYSTEM, SHOW, CREATE/DROP/READ_REPLICATION_SLOT, "
        "START_REPLICATION with pgoutput, keepalives and timeouts, and a small SQL layer. "
        "One log line per connection and per command goes to stderr.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = serve.add_argument_group("where to listen")
    where.add_argument(
        "--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST})"
    )
    where.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_PORT,
        help=f"TCP port (default {DEFAULT_PORT}; 0: any free)",
    )
    where.add_argument(
        "--listen",
        metavar="ENDPOINT",
        help="a Twisted endpoint description instead of --host/--port, "
        "e.g. tcp:5433:interface=0.0.0.0 or unix:/tmp/.s.PGSQL.5433",
    )
    what = serve.add_argument_group("what to serve")
    what.add_argument(
        "--pg-version",
        type=int,
        choices=MAJORS,
        help="PostgreSQL major to emulate (default: the script's or recording's, else 16)",
    )
    what.add_argument(
        "--script",
        metavar="FILE",
        type=Path,
        help="stream script (.yaml/.json), recording (.jsonl, raw CopyData) or physical "
        "recording (record --physical: WAL, timeline histories, base backups)",
    )
    what.add_argument(
        "--slot",
        metavar="NAME[@LSN]",
        type=_slot,
        action="append",
        default=[],
        help="a pgoutput slot that exists at start (confirmed at LSN, default the stream's start)",
    )
    what.add_argument(
        "--new-slots",
        choices=("stream-start", "end-of-wal"),
        default="stream-start",
        help="where a slot a client creates starts: the stream's start (default: it reads "
        "the whole stream) or, as on PostgreSQL, the end of WAL (only what is written "
        "later; its snapshot sees the rest)",
    )
    what.add_argument(
        "--publication",
        metavar="NAME",
        action="append",
        default=[],
        help="a publication that exists (FOR ALL TABLES); recordings declare theirs",
    )
    what.add_argument(
        "--sql-answers",
        metavar="FILE",
        type=Path,
        help='JSON object: exact SQL text -> {"columns": [name or [name, type]], "rows": '
        '[[...]], "tag": "..."} or {"error": {"sqlstate": "...", "message": "..."}}',
    )
    what.add_argument(
        "--state-file",
        metavar="FILE",
        type=Path,
        help="keep slots and publications in this JSON file, and a served script's WAL "
        "in FILE.wal, so that a server started again on it has both",
    )
    what.add_argument(
        "--slot-saves",
        choices=SLOT_SAVES,
        default=SLOT_SAVES[0],
        help="what --state-file keeps of a logical slot: every confirmation (the default), "
        "or what PostgreSQL's slot file holds: the positions of the last running-xacts "
        "record the client confirmed, and on 17+ the confirmed_flush of a clean stop; a "
        "server started again then sends again what PostgreSQL's would",
    )
    who = serve.add_argument_group("authentication and TLS")
    who.add_argument(
        "--user",
        metavar="NAME[:PASSWORD]",
        type=_user,
        action="append",
        default=[],
        help="a role that may connect (repeatable; none given and no --role: any user, "
        "no password)",
    )
    who.add_argument(
        "--role",
        metavar="NAME",
        action="append",
        default=[],
        help="a role that exists, without a password (repeatable). Once a --role or --user is "
        "given, other user names get FATAL 28000 'role \"x\" does not exist', as PostgreSQL "
        "says; e.g. --role postgres for initdb's only role",
    )
    catalog = serve.add_argument_group("databases and connection limits")
    catalog.add_argument(
        "--database",
        metavar="NAME",
        action="append",
        default=[],
        help="a database that exists (repeatable; the first is where --slot and the script's "
        "slots live). Once one is given the server has postgres, template0, template1 and "
        "these: others get FATAL 3D000, and START_REPLICATION of a slot made in another "
        "database 55000. None given: every database name reaches the same database",
    )
    catalog.add_argument(
        "--max-connections",
        type=_at_least(1),  # PostgreSQL's minimum for max_connections
        default=100,
        metavar="N",
        help="non-replication connections at once (default 100, as PostgreSQL); one more "
        "gets FATAL 53300 'sorry, too many clients already'",
    )
    catalog.add_argument(
        "--max-wal-senders",
        type=_at_least(0),
        default=10,
        metavar="N",
        help="replication connections at once (default 10, as PostgreSQL); one more gets "
        "FATAL 53300 'number of requested standby connections exceeds max_wal_senders'",
    )
    who.add_argument(
        "--auth",
        choices=AUTH_METHODS,
        default="trust",
        help="authentication method (default trust)",
    )
    who.add_argument(
        "--tls-cert", metavar="PEM", type=Path, help="certificate: answer SSLRequest with 'S'"
    )
    who.add_argument("--tls-key", metavar="PEM", type=Path, help="private key for --tls-cert")
    timing = serve.add_argument_group("timing")
    timing.add_argument(
        "--authentication-timeout",
        type=_seconds,
        default=60.0,
        metavar="SECONDS",
        help="close a client that has not authenticated after this long, without a message, "
        "as PostgreSQL's authentication_timeout (default 60; 0: never)",
    )
    timing.add_argument(
        "--snapshot-interval",
        type=_seconds,
        default=15.0,
        metavar="SECONDS",
        help="write a running-xacts record this long after the last one once WAL was "
        "written since, as PostgreSQL's background writer does: where logical slots' "
        "restart_lsn moves and their state is saved (default 15; 0: never; a script only)",
    )
    timing.add_argument(
        "--wal-sender-timeout",
        type=_seconds,
        default=60.0,
        metavar="SECONDS",
        help="close a silent client after this long, ping it after half (default 60; 0: never)",
    )
    timing.add_argument(
        "--idle-keepalive-interval",
        type=_seconds,
        default=10.0,
        metavar="SECONDS",
        help="keepalives of an idle stream, with wal_end advancing (default 10; 0: none)",
    )
    live = serve.add_argument_group("a live WAL (docs/live-wal.md)")
    live.add_argument(
        "--control",
        metavar="ENDPOINT",
        help="serve an HTTP control interface there, e.g. tcp:8433:interface=127.0.0.1: "
        "POST /wal writes script steps (YAML/JSON) while clients stream, GET /wal shows "
        "the end of WAL and the slots, POST /faults injects NAME[:ARGS], POST /restart "
        "restarts the server as pg_ctl restart -m fast",
    )
    trouble = serve.add_argument_group("fault injection (docs/faults.md)")
    trouble.add_argument(
        "--fault",
        metavar="NAME[:ARGS]",
        type=_fault,
        action="append",
        default=[],
        help="apply to every streaming connection from START_REPLICATION (repeatable): "
        + "; ".join(
            f"{name}" + (f":{spec.positional.upper()}" if spec.positional else "")
            for name, spec in FAULTS.items()
        )
        + ". ARGS is a value or key=value,key=value, e.g. close_after:bytes=5000, "
        "error:sqlstate=57P01, slow:rate=2kb, pause:30s",
    )
    serve.set_defaults(run=run or cmd_serve)

    cert = commands.add_parser(
        "cert",
        help="write a self-signed TLS certificate and key for localhost",
        description="Write cert.pem and key.pem (a self-signed certificate for localhost, "
        "127.0.0.1 and ::1) for 'pgwire-mock serve --tls-cert DIR/cert.pem "
        "--tls-key DIR/key.pem'.",
    )
    cert.add_argument("--out", metavar="DIR", type=Path, required=True, help="directory")
    cert.add_argument(
        "--days", type=_at_least(1), default=365, help="validity in days (default 365)"
    )
    cert.set_defaults(run=cmd_cert)


def write_certificate(directory: Path, *, days: int = 365) -> tuple[Path, Path]:
    """A self-signed localhost certificate and its key, as ``cert.pem``/``key.pem``."""
    import datetime  # noqa: PLC0415 - only this command needs it
    import ipaddress  # noqa: PLC0415

    from cryptography import x509  # noqa: PLC0415 - installed with twisted[tls]
    from cryptography.hazmat.primitives import hashes, serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415
    from cryptography.x509.oid import NameOID  # noqa: PLC0415

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.IPAddress(ipaddress.ip_address("::1")),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    # libpq-style servers refuse group/world-readable keys: create it 0600.
    key_path.touch(mode=0o600, exist_ok=True)
    key_path.chmod(0o600)
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def cmd_cert(args: argparse.Namespace) -> int:
    try:
        cert_path, key_path = write_certificate(args.out, days=args.days)
    except OSError as err:
        print(f"pgwire-mock cert: cannot write to {args.out}: {err.strerror}", file=sys.stderr)
        return 1
    print(f"--tls-cert {cert_path} --tls-key {key_path}")
    return 0


class ServeError(Exception):
    """A bad script or option found at start; one line, exit status 1."""


def _canned(path: Path) -> dict[str, CannedAnswer]:
    try:
        data = json_text.loads(path.read_text())
    except OSError as err:
        raise ServeError(f"cannot read --sql-answers {path}: {err.strerror}") from None
    except ValueError as err:
        raise ServeError(f"cannot read --sql-answers {path}: {err}") from None
    if not isinstance(data, dict):
        raise ServeError(f"--sql-answers {path}: expected a JSON object")
    answers: dict[str, CannedAnswer] = {}
    for sql, spec in data.items():
        try:
            if "error" in spec:
                e = spec["error"]
                answers[sql] = CannedAnswer(
                    error=ServerError("ERROR", str(e.get("sqlstate", "XX000")), str(e["message"]))
                )
                continue
            columns = tuple(
                Column(c) if isinstance(c, str) else Column(str(c[0]), str(c[1]))
                for c in spec.get("columns", [])
            )
            for c in columns:
                if c.type not in OID:
                    raise ServeError(
                        f"--sql-answers: unknown type {c.type!r} (known: {', '.join(OID)})"
                    )
            rows = tuple(
                tuple(None if v is None else str(v) for v in row) for row in spec.get("rows", [])
            )
            answers[sql] = CannedAnswer(columns, rows, spec.get("tag"))
        except (KeyError, TypeError, IndexError) as err:
            raise ServeError(f"--sql-answers {path}: bad answer for {sql!r}: {err}") from None
    return answers


def build_server(
    args: argparse.Namespace,
) -> tuple[SessionConfig, ServerState, str, WalJournal | None]:
    """Config, state, endpoint description and the journal of a served script's WAL
    (with --state-file) from parsed options; raises ServeError."""
    source: RecordingSource | ScriptSource | PhysicalRecording | None = None
    if args.script is not None:
        try:
            if PhysicalRecording.is_physical(args.script):
                source = PhysicalRecording.from_file(args.script)
            else:
                source = load_source(args.script)
        except OSError as err:
            raise ServeError(f"cannot read {args.script}: {err.strerror}") from None
        except ValueError as err:  # StreamFileError, ScriptError
            raise ServeError(str(err)) from None
    major = args.pg_version or (source.major if source is not None and source.major else 16)
    if isinstance(source, PhysicalRecording):
        for fault in getattr(args, "fault", ()):
            try:
                source.check_fault(fault)
            except FaultError as err:
                raise ServeError(f"--fault: {err}") from None
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ServeError("--tls-cert and --tls-key go together")
    for path in (args.tls_cert, args.tls_key):
        if path is not None and not path.is_file():
            raise ServeError(f"cannot read {path}")
    if args.auth != "trust" and not args.user:
        raise ServeError(f"--auth {args.auth} needs at least one --user NAME:PASSWORD")
    if args.state_file is not None and args.state_file.is_dir():
        raise ServeError(f"--state-file {args.state_file}: is a directory")
    if args.state_file is not None and not args.state_file.parent.is_dir():
        raise ServeError(
            f"--state-file {args.state_file}: directory {args.state_file.parent} does not exist"
        )
    fresh = args.state_file is None or not args.state_file.exists()
    if isinstance(source, ScriptSource):  # before the journal's steps, which may drop them
        source.declare_publications(args.publication)
    journal = None
    if args.state_file is not None and isinstance(source, ScriptSource) and source.wal is not None:
        try:  # first: its lock keeps a second server off the state file too
            journal = WalJournal.open(journal_path(args.state_file), source.wal, fresh=fresh)
        except (JournalError, OSError) as err:
            raise ServeError(f"--state-file {args.state_file}: {err}") from None
    try:
        state = ServerState.load(args.state_file) if args.state_file else ServerState()
    except ValueError as err:
        raise ServeError(str(err)) from None
    state.slot_saves = args.slot_saves
    state.declare_databases(args.database)
    if args.database:
        state.database = args.database[0]
    if source is not None:
        if fresh:
            state.wal_lsn = source.start_lsn
        state.advance_wal(getattr(source, "end_lsn", source.start_lsn))  # its WAL is written
        state.new_slot_lsn = source.start_lsn if args.new_slots == "stream-start" else None
        if isinstance(source, ScriptSource | PhysicalRecording) and fresh:
            state.system_identifier = source.system_identifier
            state.timeline = source.timeline
        # A script's slots name no database of their own: they live in the default one.
        slots = (dataclasses.replace(s, database=state.database) for s in source.slots)
        state.declare(slots, source.publications)
    for name, lsn in args.slot:
        point = (state.new_slot_lsn or state.wal_lsn) if lsn is None else lsn
        state.declare([SlotState(name, "pgoutput", state.database, point, point)], [])
    state.declare([], [PublicationState(p, all_tables=True) for p in args.publication])
    config = SessionConfig(
        major=major,
        auth=args.auth,
        users={u.name: u for u in args.user},
        roles=frozenset(args.role) if args.role else None,
        max_connections=args.max_connections,
        max_wal_senders=args.max_wal_senders,
        wal_sender_timeout=args.wal_sender_timeout,
        idle_keepalive_interval=args.idle_keepalive_interval,
        sql_answers=_canned(args.sql_answers) if args.sql_answers else {},
        source=source,
        tls=args.tls_cert is not None,
        faults=tuple(getattr(args, "fault", ())),
    )
    endpoint = args.listen or f"tcp:{args.port}:interface={args.host}"
    if fresh and journal is not None:
        try:
            state.save_now()  # the state file and its journal are one server's from now on
        except OSError as err:
            raise ServeError(f"--state-file {args.state_file}: {err.strerror}") from None
    return config, state, endpoint, journal


def _log(line: str) -> None:
    stamp = time.strftime("%H:%M:%S")
    print(f"{stamp} {line}", file=sys.stderr, flush=True)


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        config, state, endpoint, journal = build_server(args)
    except ServeError as err:
        print(f"pgwire-mock serve: {err}", file=sys.stderr)
        return 1
    from twisted.internet import reactor as global_reactor  # noqa: PLC0415 - the CLI owns it

    reactor: Any = global_reactor

    from pgwire_mock.server.protocol import TLSFiles, WalSenderFactory, listen  # noqa: PLC0415

    tls = TLSFiles(args.tls_cert, args.tls_key) if args.tls_cert is not None else None
    if tls is not None:
        try:
            tls.context_factory(config.major)
        except Exception as err:  # any TLS loading problem is one line
            print(f"pgwire-mock serve: cannot use the TLS certificate/key: {err}", file=sys.stderr)
            return 1
    factory = WalSenderFactory(
        config,
        state,
        reactor,
        tls=tls,
        log=_log,
        authentication_timeout=args.authentication_timeout,
        snapshot_interval=args.snapshot_interval,
    )
    status = {"code": 0}

    def stop() -> None:
        # A listen can fail before the reactor runs (the Deferred fires at once).
        if reactor.running:
            reactor.stop()
        else:
            reactor.callWhenRunning(reactor.stop)

    def listening(port: Any) -> None:
        address = port.getHost()
        where = (
            f"{address.host}:{address.port}"
            if hasattr(address, "port")
            else str(getattr(address, "name", address))
        )
        source = args.script or "no stream"
        _log(
            f"listening on {where} as PostgreSQL {config.major} "
            f"({source}; system identifier {state.system_identifier})"
        )

    def controlling(port: Any) -> None:
        if factory.wal_writer is None:
            _log("--control: the served stream is not a script, so POST /wal will be refused")
        address = port.getHost()
        where = f"{getattr(address, 'host', '')}:{getattr(address, 'port', '')}"
        _log(
            f"control interface on http://{where} "
            "(POST /wal, GET /wal, POST /faults, POST /snapshot, POST /restart)"
        )

    def stopped(clean: bool) -> None:
        if clean:  # the shutdown checkpoint: its record, and the slots it saves
            state.shutdown_checkpoint(saves_confirmed=config.major >= 17)
        if clean and factory.wal_writer is not None:
            factory.wal_writer.checkpoint()
        if clean and journal is not None:
            journal.stopped()
        _log("database system is shut down")
        stop()

    reactor.callWhenRunning(_stop_on_signals, reactor, factory, stopped)
    try:
        deferred = listen(reactor, endpoint, factory)
        control = _listen_control(reactor, args.control, factory) if args.control else None
    except ValueError as err:
        print(f"pgwire-mock serve: bad endpoint: {err}", file=sys.stderr)
        return 2
    # Nothing is logged until every listener is up: a failed one is the only line.
    listeners = [(deferred, f"cannot listen on {endpoint}", listening)]
    if control is not None:
        listeners.append((control, f"cannot listen on {args.control} for --control", controlling))
    outcomes: list[tuple[bool, Any] | None] = [None] * len(listeners)

    def settled(index: int, ok: bool, result: Any) -> None:
        outcomes[index] = (ok, result)
        if None in outcomes:
            return
        done = cast("list[tuple[bool, Any]]", outcomes)
        failures = [
            (what, outcome)
            for (_, what, _), (up, outcome) in zip(listeners, done, strict=True)
            if not up
        ]
        if failures:
            what, failure = failures[0]
            print(f"pgwire-mock serve: {what}: {failure.getErrorMessage()}", file=sys.stderr)
            for up, port in done:
                if up:
                    port.stopListening()
            status["code"] = 1
            stop()
            return
        # Said once the reactor runs, after _stop_on_signals: a signal sent as soon as
        # the server says it listens must find PostgreSQL's shutdown modes in place.
        for (_, _, report), (_, port) in zip(listeners, done, strict=True):
            reactor.callWhenRunning(report, port)

    for index, (pending, _, _) in enumerate(listeners):
        pending.addCallbacks(partial(settled, index, True), partial(settled, index, False))

    def panic(reason: str) -> None:
        _log(f"PANIC: {reason}; stopping at once")
        status["code"] = 1
        reactor.callLater(0, factory.stop, "immediate")

    if journal is not None:
        journal.on_failure = panic
    reactor.run()
    state.save_now()
    if journal is not None:
        if status["code"]:  # it never listened: nothing to recover from next time
            journal.stopped()
        journal.close()
    return status["code"]


# What the postmaster's signal handler (pmdie) makes of each signal.
_SHUTDOWN_SIGNALS: Final = {
    signal.SIGTERM: "smart",
    signal.SIGINT: "fast",
    signal.SIGQUIT: "immediate",
}


def _stop_on_signals(reactor: Any, factory: Any, stopped: Callable[[bool], None]) -> None:
    """Replace the reactor's own SIGTERM and SIGINT handlers (which stop it at once,
    dropping every connection as a crash does) with PostgreSQL's shutdown modes;
    ``stopped`` hears, once every connection has ended, whether the server stopped
    cleanly (smart or fast: not immediate)."""

    def requested(mode: str) -> None:
        _log(f"received {mode} shutdown request")
        if mode == "smart" and factory.regular_sessions:
            _log(
                f"waiting for {factory.regular_sessions} session(s) to end "
                "(SIGINT: fast shutdown, SIGQUIT: immediate)"
            )
        elif mode == "fast" and factory.protocols:
            _log(
                "walsenders end once their clients confirm all they were sent "
                "(SIGQUIT: immediate shutdown)"
            )
        factory.stop(mode)

    factory.stop_deferred.addCallback(lambda _: stopped(factory.stop_mode != "immediate"))
    for signum, mode in _SHUTDOWN_SIGNALS.items():
        # A signal handler may only hand over to the reactor's thread.
        signal.signal(signum, lambda *_, mode=mode: reactor.callFromThread(requested, mode))
    # The postmaster reloads its configuration on SIGHUP (a closed terminal sends it
    # too); the fake has none to reload, and must not die of it as Python would.
    signal.signal(
        signal.SIGHUP,
        lambda *_: reactor.callFromThread(
            _log, "received SIGHUP, reloading configuration files (nothing to reload)"
        ),
    )


def _listen_control(reactor: Any, description: str, factory: Any) -> Any:
    """Listen for ``--control`` (ValueError for a bad endpoint description)."""
    from twisted.internet.endpoints import serverFromString  # noqa: PLC0415

    from pgwire_mock.server.control import control_site  # noqa: PLC0415

    endpoint: Any = serverFromString(reactor, description)  # type: ignore[no-untyped-call]
    return endpoint.listen(control_site(factory))


def main(argv: list[str] | None = None) -> int:
    """``python -m pgwire_mock.serve``: the same as ``pgwire-mock serve``."""
    from pgwire_mock.cli import main as cli_main  # noqa: PLC0415

    return cli_main(["serve", *(argv if argv is not None else sys.argv[1:])])


if __name__ == "__main__":
    sys.exit(main())
