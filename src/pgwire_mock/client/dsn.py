"""Connection strings as libpq reads them: ``key=value`` lists and ``postgresql://`` URIs.

Only what a replication client needs is interpreted (host, port, user, dbname, password,
application_name, connect_timeout, sslmode); other keywords are kept in ``other``.
Environment variables (PGHOST, ...) and service files are not read: the caller passes
what it means. See the libpq docs, "Connection Strings".
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass, field, replace
from typing import Final
from urllib.parse import parse_qsl, unquote, urlsplit

DEFAULT_PORT: Final = 5432
# sslmodes that may fall back to a plain connection; the others insist on TLS, which
# this client does not speak yet, so refusing them is the only safe answer.
_PLAIN_SSLMODES: Final = frozenset({"disable", "allow", "prefer"})
_URI_PREFIXES: Final = ("postgresql://", "postgres://")


@dataclass(frozen=True, slots=True)
class ConnectionParameters:
    """Where and as whom to connect; ``host`` starting with '/' is a Unix socket dir."""

    host: str = "localhost"
    port: int = DEFAULT_PORT
    user: str = ""
    dbname: str = ""
    password: str | None = None
    application_name: str | None = None
    connect_timeout: float | None = None
    sslmode: str = "prefer"
    other: tuple[tuple[str, str], ...] = field(default=())

    @property
    def socket_path(self) -> str | None:
        """The Unix socket file for a directory host, as libpq names it."""
        if self.host.startswith("/"):
            return f"{self.host.rstrip('/')}/.s.PGSQL.{self.port}"
        return None

    def with_defaults(self) -> ConnectionParameters:
        """Fill user (the OS user) and dbname (the user), as libpq does."""
        user = self.user or getpass.getuser()
        return replace(self, user=user, dbname=self.dbname or user)


def _parse_keyword_value(text: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos].isspace():
            pos += 1
        if pos == end:
            return pairs
        start = pos
        while pos < end and text[pos] != "=" and not text[pos].isspace():
            pos += 1
        key = text[start:pos]
        while pos < end and text[pos].isspace():
            pos += 1
        if pos == end or text[pos] != "=":
            raise ValueError(f'missing "=" after "{key}" in connection info string')
        pos += 1
        while pos < end and text[pos].isspace():
            pos += 1
        value: list[str] = []
        if pos < end and text[pos] == "'":
            pos += 1
            while True:
                if pos == end:
                    raise ValueError("unterminated quoted string in connection info string")
                ch = text[pos]
                if ch == "\\" and pos + 1 < end:
                    value.append(text[pos + 1])
                    pos += 2
                elif ch == "'":
                    pos += 1
                    break
                else:
                    value.append(ch)
                    pos += 1
        else:
            while pos < end and not text[pos].isspace():
                if text[pos] == "\\" and pos + 1 < end:
                    pos += 1
                value.append(text[pos])
                pos += 1
        pairs[key] = "".join(value)


def _parse_uri(text: str) -> dict[str, str]:
    parts = urlsplit(text)
    pairs: dict[str, str] = {}
    netloc = parts.netloc
    userinfo, at, hostport = netloc.rpartition("@")
    if at:
        user, colon, password = userinfo.partition(":")
        if user:
            pairs["user"] = unquote(user)
        if colon:
            pairs["password"] = unquote(password)
    if "," in hostport:
        raise ValueError("several hosts in one URI are not supported")
    if hostport.startswith("["):  # IPv6 literal
        host, _, rest = hostport[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = hostport.partition(":")
    if host:
        pairs["host"] = unquote(host)
    if port:
        pairs["port"] = port
    dbname = parts.path[1:] if parts.path.startswith("/") else ""
    if dbname:
        pairs["dbname"] = unquote(dbname)
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        pairs[key] = value
    return pairs


def parse_dsn(dsn: str) -> ConnectionParameters:
    """Parse a libpq connection string (either form); unset fields keep their defaults.

    ``replication`` may only be ``database`` (or absent): this client is for logical
    replication. ``hostaddr`` is used as the host to connect to.
    """
    text = dsn.strip()
    pairs = _parse_uri(text) if text.startswith(_URI_PREFIXES) else _parse_keyword_value(text)
    replication = pairs.pop("replication", "database")
    if replication != "database":
        raise ValueError(f"replication={replication!r}: only logical (database) is supported")
    host = pairs.pop("hostaddr", None) or pairs.pop("host", None)
    pairs.pop("host", None)
    port_text = pairs.pop("port", None)
    timeout_text = pairs.pop("connect_timeout", None)
    sslmode = pairs.pop("sslmode", "prefer")
    if sslmode not in _PLAIN_SSLMODES:
        raise ValueError(f"sslmode={sslmode!r} needs TLS, which this client does not support yet")
    try:
        port = int(port_text) if port_text else DEFAULT_PORT
        timeout = float(timeout_text) if timeout_text else None
    except ValueError as err:
        raise ValueError(f"invalid port or connect_timeout in connection string: {err}") from err
    params = ConnectionParameters(
        port=port,
        user=pairs.pop("user", ""),
        dbname=pairs.pop("dbname", ""),
        password=pairs.pop("password", None),
        application_name=pairs.pop("application_name", None),
        connect_timeout=timeout if timeout and timeout > 0 else None,
        sslmode=sslmode,
        other=tuple(pairs.items()),
    )
    return replace(params, host=host) if host else params
