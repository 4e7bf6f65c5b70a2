"""What a walsender session is doing (:class:`Phase`) and the server's clock in
PostgreSQL's terms (:func:`pg_time`): shared by the session and its command mixins."""

from __future__ import annotations

import enum
from typing import Final

__all__ = ["POSTGRES_EPOCH", "Phase", "pg_time"]

POSTGRES_EPOCH: Final = 946_684_800  # 2000-01-01 00:00:00 UTC in Unix seconds


def pg_time(now: float) -> int:
    """Unix seconds → TimestampTz (microseconds since 2000-01-01 UTC)."""
    return round((now - POSTGRES_EPOCH) * 1_000_000)


class Phase(enum.Enum):
    STARTUP = "startup"
    AUTHENTICATING = "authenticating"
    READY = "ready"
    IGNORE_TILL_SYNC = "ignore till Sync"
    STREAMING = "streaming"
    CLOSED = "closed"
