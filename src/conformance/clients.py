"""Run other people's logical replication clients against any walsender.

Three real client stacks, built by ``scripts/install-clients`` from ``clients/`` into
``$XDG_CACHE_HOME/pgwire-mock/clients/<name>/<hash>/`` (default ``~/.cache``):

- ``java``: pgjdbc's replication API (``PGReplicationStream``), Debian's pgjdbc jar;
- ``node``: ``pg-logical-replication``'s ``LogicalReplicationService`` + ``PgoutputPlugin``
  on node-postgres, from the npm registry;
- ``go``: a small program on ``jackc/pgconn`` (what ``pglogrepl`` is built on; pglogrepl
  itself cannot be installed here), doing START_REPLICATION and the CopyData framing itself.

Each program prints one line per XLogData, ``<wal_start> <payload hex>`` (node adds the
library's own decoding as JSON), acknowledges what it printed, prints ``acknowledged X/Y``
on stderr and exits 0; on failure it prints ``ERROR <SQLSTATE> <message>`` and exits 1.
node and go also print ``keepalive X/Y`` on stderr for each keepalive that comes before
their first XLogData (pgjdbc hides keepalives from its API).
:func:`run_client` runs one and parses that into a :class:`ClientRun`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from codec.values import LSN
from pgwire_mock.client import parse_dsn

__all__ = [
    "CLIENTS",
    "ClientArgs",
    "ClientError",
    "ClientNotInstalledError",
    "ClientRun",
    "ClientSpec",
    "build_dir",
    "cache_root",
    "clients_source_dir",
    "run_client",
]

_JAR: Final = Path("/usr/share/java/postgresql.jar")
_ERROR_LINE: Final = re.compile(r"^ERROR (\S+) (.*)$")
_ACK_LINE: Final = re.compile(r"^acknowledged ([0-9A-Fa-f]+/[0-9A-Fa-f]+)$")
_KEEPALIVE_LINE: Final = re.compile(r"^keepalive ([0-9A-Fa-f]+/[0-9A-Fa-f]+)$")


class ClientError(Exception):
    """A client exited non-zero (or could not run). ``sqlstate`` is the server's code when
    the client reported one (``None`` for local failures such as a timeout)."""

    def __init__(
        self,
        client: str,
        message: str,
        *,
        sqlstate: str | None = None,
        returncode: int | None = None,
        stderr: str = "",
    ) -> None:
        state = f" [{sqlstate}]" if sqlstate else ""
        super().__init__(f"{client}{state}: {message}")
        self.client = client
        self.message = message
        self.sqlstate = sqlstate
        self.returncode = returncode
        self.stderr = stderr


class ClientNotInstalledError(ClientError):
    """The client's build is not in the cache: run ``scripts/install-clients``."""


@dataclass(frozen=True, slots=True)
class ClientArgs:
    """What every client program is told: where to connect, what to stream, when to stop."""

    host: str
    port: int
    user: str
    dbname: str
    slot: str
    publication: str
    proto_version: int
    start_lsn: LSN
    expect_messages: int | None = None
    until_lsn: LSN | None = None
    until_keepalive: LSN | None = None
    idle_timeout: float = 10.0


def _java_command(build: Path, a: ClientArgs) -> list[str]:
    cmd = ["java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", f"{build}:{_JAR}"]
    cmd += ["PgjdbcReplication"]
    return cmd + _long_options(a, "--", idle=f"{a.idle_timeout:g}")


def _node_command(build: Path, a: ClientArgs) -> list[str]:
    script = clients_source_dir() / "node" / "replicate.js"
    return ["node", str(script), *_long_options(a, "--", idle=f"{a.idle_timeout:g}")]


def _go_command(build: Path, a: ClientArgs) -> list[str]:
    return [str(build / "pgwire-mock-go-client"), *_long_options(a, "-", idle=f"{a.idle_timeout}s")]


def _long_options(a: ClientArgs, dash: str, *, idle: str) -> list[str]:
    pairs: list[tuple[str, str]] = [
        ("host", a.host),
        ("port", str(a.port)),
        ("user", a.user),
        ("dbname", a.dbname),
        ("slot", a.slot),
        ("publication", a.publication),
        ("proto-version", str(a.proto_version)),
        ("idle-timeout", idle),
    ]
    # Left out at 0/0 so each client sends its own default spelling (node: 0/00000000).
    if a.start_lsn:
        pairs.append(("start-lsn", str(a.start_lsn)))
    if a.expect_messages is not None:
        pairs.append(("messages", str(a.expect_messages)))
    if a.until_lsn is not None:
        pairs.append(("until-lsn", str(a.until_lsn)))
    if a.until_keepalive is not None:
        pairs.append(("until-keepalive", str(a.until_keepalive)))
    return [item for key, value in pairs for item in (f"{dash}{key}", value)]


@dataclass(frozen=True, slots=True)
class ClientSpec:
    """How to find and run one client. ``key_file`` (under ``clients/``) is what the build
    is keyed by; ``decodes`` says the client prints its library's decoding too."""

    name: str
    description: str
    key_file: str
    command: Callable[[Path, ClientArgs], list[str]]
    decodes: bool = False
    env: Callable[[Path], Mapping[str, str]] = field(default=lambda _build: {})


CLIENTS: Final[Mapping[str, ClientSpec]] = {
    spec.name: spec
    for spec in (
        ClientSpec(
            "java",
            "pgjdbc PGReplicationStream (Debian libpostgresql-jdbc-java)",
            "java/PgjdbcReplication.java",
            _java_command,
        ),
        ClientSpec(
            "node",
            "pg-logical-replication LogicalReplicationService + PgoutputPlugin (npm)",
            "node/package-lock.json",
            _node_command,
            decodes=True,
            env=lambda build: {"NODE_PATH": str(build / "node_modules")},
        ),
        ClientSpec(
            "go",
            "jackc/pgconn with hand-written START_REPLICATION/CopyData (no pglogrepl)",
            "go/main.go",
            _go_command,
        ),
    )
}


def clients_source_dir() -> Path:
    """``clients/`` of the source tree (``$PGWIRE_MOCK_CLIENTS_DIR`` overrides it)."""
    override = os.environ.get("PGWIRE_MOCK_CLIENTS_DIR")
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[2] / "clients"


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/pgwire-mock/clients`` (``~/.cache/...`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pgwire-mock" / "clients"


def build_dir(name: str) -> Path:
    """Where ``scripts/install-clients`` put the build of client ``name`` for this source.

    Raises :class:`ClientNotInstalledError` when it is not there (or incomplete).
    """
    spec = _spec(name)
    source = clients_source_dir() / spec.key_file
    try:
        digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    except OSError as err:
        raise ClientNotInstalledError(name, f"cannot read {source}: {err}") from err
    build = cache_root() / name / digest
    if not (build / ".complete").exists():
        raise ClientNotInstalledError(
            name, f"no build at {build}: run scripts/install-clients first"
        )
    return build


def _spec(name: str) -> ClientSpec:
    try:
        return CLIENTS[name]
    except KeyError:
        raise ClientError(name, f"unknown client (known: {', '.join(CLIENTS)})") from None


@dataclass(frozen=True, slots=True)
class ClientRun:
    """A finished client run.

    ``payloads`` holds ``(wal_start, payload)`` per XLogData in arrival order; ``decoded``
    (node only) the library's own decoding of each, as parsed JSON; ``acknowledged`` the
    LSN the client last sent as flushed (what the slot's confirmed_flush_lsn becomes);
    ``keepalives`` the wal_end of each keepalive before the first XLogData, except one that
    ended the run (``until_keepalive``); always empty for java, whose pgjdbc hides them.
    """

    client: str
    command: tuple[str, ...]
    payloads: list[tuple[LSN, bytes]]
    decoded: list[dict[str, object]]
    acknowledged: LSN | None
    stderr: str
    returncode: int
    keepalives: tuple[LSN, ...] = ()


def run_client(
    name: str,
    *,
    slot: str,
    publication: str,
    proto_version: int,
    dsn: str | None = None,
    host: str | None = None,
    port: int | None = None,
    user: str | None = None,
    dbname: str | None = None,
    password: str | None = None,
    start_lsn: LSN | int | str = 0,
    expect_messages: int | None = None,
    until_lsn: LSN | int | str | None = None,
    until_keepalive: LSN | int | str | None = None,
    idle_timeout: float = 10.0,
    timeout: float = 120.0,
) -> ClientRun:
    """Run client ``name`` until it has seen ``expect_messages`` XLogData messages, or one
    starting at or after ``until_lsn``, or a keepalive at or past ``until_keepalive`` (the
    walsender has nothing before it left to send: ``pg_recvlogical --endpos``'s end, which
    also ends a stream that sends nothing); give it ``idle_timeout`` quiet seconds at most.

    Connection details come from ``dsn`` (a libpq key=value string or URI), overridden by
    ``host``/``port``/``user``/``dbname``/``password``. Raises :class:`ClientError` (with
    the server's SQLSTATE when the client printed one) if the client exits non-zero or takes
    more than ``timeout`` seconds in all.
    """
    spec = _spec(name)
    if expect_messages is None and until_lsn is None and until_keepalive is None:
        raise ValueError(
            "give expect_messages, until_lsn or until_keepalive: the clients need an end"
        )
    params = parse_dsn(dsn or "").with_defaults()
    args = ClientArgs(
        host=host or params.host,
        port=port or params.port,
        user=user or params.user,
        dbname=dbname or params.dbname,
        slot=slot,
        publication=publication,
        proto_version=proto_version,
        start_lsn=LSN(start_lsn),
        expect_messages=expect_messages,
        until_lsn=None if until_lsn is None else LSN(until_lsn),
        until_keepalive=None if until_keepalive is None else LSN(until_keepalive),
        idle_timeout=idle_timeout,
    )
    build = build_dir(name)
    command = spec.command(build, args)
    env = dict(os.environ)
    env.update(spec.env(build))
    secret = password if password is not None else params.password
    if secret is not None:
        env["PGPASSWORD"] = secret
    if shutil.which(command[0]) is None and not Path(command[0]).is_file():
        raise ClientNotInstalledError(name, f"{command[0]} not found: run scripts/install-clients")
    try:
        proc = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=env,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise ClientError(
            name, f"still running after {timeout}s", stderr=_text(err.stderr)
        ) from err
    if proc.returncode != 0:
        raise _client_error(name, proc.returncode, proc.stderr)
    payloads, decoded = _parse_stdout(name, proc.stdout, decodes=spec.decodes)
    acknowledged = None
    keepalives: list[LSN] = []
    for line in proc.stderr.splitlines():
        match = _ACK_LINE.match(line.strip())
        if match:
            acknowledged = LSN(match.group(1))
        match = _KEEPALIVE_LINE.match(line.strip())
        if match:
            keepalives.append(LSN(match.group(1)))
    return ClientRun(
        name,
        tuple(command),
        payloads,
        decoded,
        acknowledged,
        proc.stderr,
        proc.returncode,
        tuple(keepalives),
    )


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")


def _client_error(name: str, returncode: int, stderr: str) -> ClientError:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        match = _ERROR_LINE.match(line)
        if match:
            code, message = match.groups()
            sqlstate = code if re.fullmatch(r"[0-9A-Z]{5}", code) else None
            return ClientError(
                name, message, sqlstate=sqlstate, returncode=returncode, stderr=stderr
            )
    detail = lines[-1] if lines else f"exit status {returncode}"
    return ClientError(name, detail, returncode=returncode, stderr=stderr)


def _parse_stdout(
    name: str, stdout: str, *, decodes: bool
) -> tuple[list[tuple[LSN, bytes]], list[dict[str, object]]]:
    payloads: list[tuple[LSN, bytes]] = []
    decoded: list[dict[str, object]] = []
    for number, line in enumerate(stdout.splitlines(), 1):
        if not line.strip():
            continue
        parts: Sequence[str] = line.split(" ", 2)
        try:
            lsn, data = LSN(parts[0]), bytes.fromhex(parts[1])
            if decodes:
                value = json.loads(parts[2])
                if not isinstance(value, dict):
                    raise ValueError("decoded message is not a JSON object")
                decoded.append(value)
        except (IndexError, ValueError) as err:
            raise ClientError(name, f"stdout line {number} is malformed ({err}): {line!r}") from err
        payloads.append((lsn, data))
    return payloads, decoded
