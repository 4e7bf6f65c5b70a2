"""Fault injection: what a real walsender does when things go wrong, on demand.

A :class:`Fault` is one typed value (a name from :data:`FAULTS` and its parameters). It
comes from three places and means the same in each:

* a script step ``{fault: close_after, messages: 3}`` (acts where the stream reaches it),
* the command line, ``pgwire-mock serve --fault close_after:messages=3`` (acts on every
  streaming connection, from START_REPLICATION),
* a test at run time, ``walsender.inject(Fault.parse("close_after:3"))`` (acts on the
  streaming connection now, or on the next one).

:data:`FAULTS` is the one table: each fault's parameters, its positional parameter on
the command line, and the incident it reproduces (``docs/faults.md`` says more).
:class:`ActiveFaults` is the per-stream state the session consults at its few hook
points (before producing, before a keepalive, on client bytes, on a deadline). Like the
session, nothing here reads a clock or does I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Final, Literal, TypeAlias, get_args

from pgwire_mock.server.errors import ServerError

__all__ = [
    "FAULTS",
    "FAULT_NAMES",
    "PHYSICAL_FAULTS",
    "ActiveFaults",
    "Fault",
    "FaultError",
    "FaultName",
    "FaultSpec",
]

FaultName: TypeAlias = Literal[
    "close_after",
    "pause",
    "error",
    "stop_keepalives",
    "silent_timeout",
    "redeliver",
    "slow",
    "shutdown",
    "wal_removed",
    "timeline_switch",
]
FAULT_NAMES: Final[tuple[FaultName, ...]] = get_args(FaultName)
PHYSICAL_FAULTS: Final[frozenset[str]] = frozenset(
    (
        "close_after",
        "error",
        "shutdown",
        "slow",
        "stop_keepalives",
        "timeline_switch",
        "wal_removed",
    )
)
"""The faults a physical stream (``pgwire_mock.server.physical``) acts on; it ignores
the others, with a log line."""


class FaultError(ValueError):
    """A fault that cannot be built: unknown name, unknown or bad parameter."""


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault and its parameters (the ones its :data:`FAULTS` entry lists)."""

    name: FaultName
    messages: int | None = None
    """close_after: close after this many more XLogData messages."""
    bytes: int | None = None
    """close_after: close after this many more stream bytes (cutting a message short)."""
    seconds: float | None = None
    """pause: how long; silent_timeout: when to close (default wal_sender_timeout)."""
    sqlstate: str = "XX000"
    message: str | None = None
    """error: the primary text (default: PostgreSQL's for well-known SQLSTATEs)."""
    severity: str | None = None
    """error: ERROR (back to command mode) or FATAL/PANIC (close); default by SQLSTATE."""
    rate: float | None = None
    """slow: bytes per second."""
    lsn: int | None = None
    """redeliver: the slot's persisted position (default: its confirmed_flush now);
    wal_removed: the segments before the one holding it are gone (default: all but the
    one holding the end of WAL); timeline_switch: the switch point, where the old
    timeline ends (default: the end of the last whole record of the WAL)."""
    wait: bool = True
    """redeliver, shutdown: act once the client has confirmed everything sent."""

    def __post_init__(self) -> None:
        spec = FAULTS.get(self.name)
        if spec is None:
            raise FaultError(_unknown(self.name))
        if self.name == "close_after" and (self.messages is None) == (self.bytes is None):
            raise FaultError("close_after needs exactly one of messages=N or bytes=N")
        if self.name == "slow" and (self.rate is None or self.rate <= 0):
            raise FaultError("slow needs rate=BYTES_PER_SECOND > 0")
        if self.name == "pause" and self.seconds is None:
            raise FaultError("pause needs seconds=S")
        for name in ("messages", "bytes", "seconds"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise FaultError(f"{self.name}: {name} must not be negative")
        if self.severity is not None and self.severity not in ("ERROR", "FATAL", "PANIC"):
            raise FaultError(f"error: severity must be ERROR, FATAL or PANIC, not {self.severity}")
        if not re.fullmatch(r"[0-9A-Z]{5}", self.sqlstate):
            raise FaultError(f"error: bad SQLSTATE {self.sqlstate!r}")

    # --- building -----------------------------------------------------------------------

    @classmethod
    def from_params(cls, name: str, params: Mapping[str, Any]) -> Fault:
        """A fault from a script step's keys (values already typed by YAML/JSON)."""
        spec = FAULTS.get(name)
        if spec is None:
            raise FaultError(_unknown(name))
        values: dict[str, Any] = {}
        for key, raw in params.items():
            target = spec.params.get(key)
            if target is None:
                known = ", ".join(spec.params) or "none"
                raise FaultError(f"{name}: unknown parameter {key!r} (known: {known})")
            field_name, convert = target
            try:
                values[field_name] = convert(raw)
            except (TypeError, ValueError) as err:
                raise FaultError(f"{name}: bad {key} {raw!r}: {err}") from None
        return cls(name, **values)  # type: ignore[arg-type]  # checked in __post_init__

    @classmethod
    def parse(cls, text: str) -> Fault:
        """``NAME``, ``NAME:VALUE`` (the fault's positional parameter) or
        ``NAME:key=value,key=value`` — the command line's syntax."""
        name, _, args = text.partition(":")
        name = name.strip()
        spec = FAULTS.get(name)
        if spec is None:
            raise FaultError(_unknown(name))
        params: dict[str, Any] = {}
        if args:
            # A comma starts a new parameter only before "key=": messages may hold commas.
            for part in re.split(r",(?=\s*\w+=)", args):
                key, eq, value = part.partition("=")
                if not eq:
                    if spec.positional is None or params:
                        raise FaultError(f"{name}: expected key=value, got {part!r}")
                    key, value = spec.positional, part
                params[key.strip()] = value.strip() if key.strip() != "message" else value
        return cls.from_params(name, params)

    # --- meaning ------------------------------------------------------------------------

    def server_error(self) -> ServerError:
        """The ErrorResponse an ``error`` fault sends."""
        known = _KNOWN_ERRORS.get(self.sqlstate)
        severity = self.severity or (known[0] if known else "ERROR")
        message = self.message or (known[1] if known else "injected error")
        return ServerError(severity, self.sqlstate, message)

    def __str__(self) -> str:
        parts = [
            f"{f.name}={_show(f.name, getattr(self, f.name))}"
            for f in fields(self)
            if f.name != "name" and getattr(self, f.name) != f.default
        ]
        return self.name + (":" + ",".join(parts) if parts else "")


def _unknown(name: str) -> str:
    return f"unknown fault {name!r} (expected one of {', '.join(sorted(FAULTS))})"


def _show(name: str, value: object) -> str:
    if name == "lsn" and isinstance(value, int):
        return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"
    return str(value)


def _int(value: object) -> int:
    if isinstance(value, bool):
        raise TypeError("expected an integer")
    return int(str(value).replace("_", ""))


def _float(value: object) -> float:
    if isinstance(value, bool):
        raise TypeError("expected a number")
    text = str(value).strip()
    for unit, scale in (("ms", 0.001), ("min", 60.0), ("s", 1.0)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * scale
    return float(text)


def _rate(value: object) -> float:
    text = str(value).strip().lower().removesuffix("/s")
    for unit, scale in (("kib", 1024), ("kb", 1000), ("mib", 1 << 20), ("mb", 1_000_000)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * scale
    return _float(text.removesuffix("b"))


def _lsn(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    high, sep, low = str(value).partition("/")
    if not sep:
        raise ValueError("expected an LSN like 0/1500000")
    return (int(high, 16) << 32) | int(low, 16)


def _bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "on", "yes", "1"):
        return True
    if text in ("false", "off", "no", "0"):
        return False
    raise ValueError("expected true or false")


def _severity(value: object) -> str:
    return str(value).strip().upper()


_Param: TypeAlias = tuple[str, Callable[[Any], Any]]


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """One row of :data:`FAULTS`."""

    params: Mapping[str, _Param] = field(default_factory=dict)
    """Accepted keys → (Fault field, converter); several keys may name one field."""
    positional: str | None = None
    """The key a bare ``NAME:VALUE`` on the command line sets."""
    incident: str = ""


FAULTS: Final[Mapping[str, FaultSpec]] = {
    "close_after": FaultSpec(
        {
            "messages": ("messages", _int),
            "after_messages": ("messages", _int),
            "bytes": ("bytes", _int),
            "after_bytes": ("bytes", _int),
        },
        "messages",
        "walsender killed (OOM killer, pod eviction) mid-transaction: TCP close, no error",
    ),
    "pause": FaultSpec(
        {"seconds": ("seconds", _float)},
        "seconds",
        "long checkpoint or I/O stall on the primary: nothing sent, not even keepalives",
    ),
    "error": FaultSpec(
        {
            "sqlstate": ("sqlstate", str),
            "code": ("sqlstate", str),
            "message": ("message", str),
            "severity": ("severity", _severity),
        },
        "sqlstate",
        "an ERROR/FATAL mid-stream: WAL removed (58P01), disk full (53100), "
        "pg_terminate_backend (57P01)",
    ),
    "stop_keepalives": FaultSpec(
        {},
        None,
        "no keepalives: clients that advance their flush position from keepalives stall, "
        "and WAL piles up behind the slot",
    ),
    "silent_timeout": FaultSpec(
        {"seconds": ("seconds", _float)},
        "seconds",
        "the server stops hearing the client (half-open connection) and its "
        "wal_sender_timeout closes the socket without an ErrorResponse",
    ),
    "redeliver": FaultSpec(
        {"lsn": ("lsn", _lsn), "wait": ("wait", _bool)},
        "lsn",
        "primary crash before the slot's confirmed_flush was persisted, or failover to a "
        "replica whose slot lagged: confirmed transactions are sent again",
    ),
    "slow": FaultSpec(
        {"rate": ("rate", _rate), "bytes_per_second": ("rate", _rate)},
        "rate",
        "a slow network or an overloaded primary: the stream trickles at a fixed rate",
    ),
    "shutdown": FaultSpec(
        {"wait": ("wait", _bool)},
        None,
        "smart/fast shutdown: once the client has confirmed everything, COPY 0 without "
        "CopyDone, then close",
    ),
    "wal_removed": FaultSpec(
        {"lsn": ("lsn", _lsn), "before": ("lsn", _lsn)},
        "lsn",
        "a checkpoint removed WAL a physical client still needs (no slot, or "
        "max_slot_wal_keep_size): 58P01 'requested WAL segment ... has already been removed'",
    ),
    "timeline_switch": FaultSpec(
        {"at": ("lsn", _lsn), "lsn": ("lsn", _lsn)},
        "at",
        "failover: the standby a physical client follows is promoted; its timeline ends at "
        "the switch point and the WAL goes on, after an end-of-recovery record, on the next",
    ),
}

# SQLSTATE → (severity, PostgreSQL's message) for the errors a walsender really sends.
_KNOWN_ERRORS: Final[Mapping[str, tuple[str, str]]] = {
    # WalSndSegmentOpen / XLogReadDetermineTimeline after the segment was recycled.
    "58P01": (
        "ERROR",
        "requested WAL segment 000000010000000000000001 has already been removed",
    ),
    # ReorderBufferSerializeChange spilling a big transaction to pg_replslot/.
    "53100": ("ERROR", "could not write to data file for XID 750: No space left on device"),
    # pg_terminate_backend (ProcessInterrupts, ProcDiePending).
    "57P01": ("FATAL", "terminating connection due to administrator command"),
    "57P02": ("FATAL", "terminating connection because of crash of another server process"),
    "57P03": ("FATAL", "the database system is shutting down"),
    "57014": ("ERROR", "canceling statement due to user request"),
    "55000": ("ERROR", "cannot read from logical replication slot"),
    "53200": ("ERROR", "out of memory"),
}


@dataclass(slots=True)
class ActiveFaults:
    """The faults in force on one stream, and the decisions that follow from them."""

    messages_left: int | None = None
    bytes_left: int | None = None
    stalled_until: float | None = None
    keepalives: bool = True
    silent_until: float | None = None
    rate: float | None = None
    budget: float = 0.0
    budget_at: float = 0.0
    throttled_until: float | None = None
    shutdown: bool = False
    redeliver: bool = False
    hold: bool = False
    """No more stream data (a script's shutdown/redeliver point: the WAL ends there)."""

    def blocks_production(self, now: float) -> bool:
        return (
            self.hold
            or self.stalled(now)
            or self.silent_until is not None
            or (self.throttled_until is not None and now < self.throttled_until)
        )

    def stalled(self, now: float) -> bool:
        return self.stalled_until is not None and now < self.stalled_until

    @property
    def deaf(self) -> bool:
        """Client bytes are not read (a stall holds them, a silent timeout drops them)."""
        return self.stalled_until is not None or self.silent_until is not None

    @property
    def mute(self) -> bool:
        """Nothing at all is sent: no data, no keepalives, no replies."""
        return self.stalled_until is not None or self.silent_until is not None

    def sends_keepalives(self) -> bool:
        return self.keepalives and not self.mute

    def deadlines(self) -> list[float]:
        return [
            t
            for t in (self.stalled_until, self.silent_until, self.throttled_until)
            if t is not None
        ]

    def budget_for(self, max_bytes: int, now: float) -> int:
        """How much ``produce`` may queue now (``slow``); 0 means wait."""
        if self.rate is None:
            return max_bytes
        # One second of burst at most: a long idle time does not buy a flood.
        self.budget = min(self.rate, self.budget + self.rate * (now - self.budget_at))
        self.budget_at = now
        if self.budget <= 0:
            self.throttled_until = now + -self.budget / self.rate
            return 0
        self.throttled_until = None
        return max(1, min(max_bytes, int(self.budget)))

    def spent(self, produced: int, now: float) -> None:
        if self.rate is None or not produced:
            return
        self.budget -= produced
        if self.budget <= 0:
            # Messages are not split: the debt delays the next one.
            self.throttled_until = now + max(-self.budget, 1.0) / self.rate

    def cut(self, data: bytes) -> tuple[bytes, bool]:
        """``close_after``: what of ``data`` goes out, and whether to close after it."""
        if self.messages_left is not None:
            self.messages_left -= 1
            return data, self.messages_left <= 0
        if self.bytes_left is not None:
            if len(data) >= self.bytes_left:
                head = data[: self.bytes_left]
                self.bytes_left = 0
                return head, True
            self.bytes_left -= len(data)
        return data, False
