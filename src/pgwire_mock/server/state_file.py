"""A state file's fields checked as they are read back (``ServerState.load``).

The file is ours, but it lives on a user's disk: hand-edited, cut short, or from another
tool. A value of the wrong type or out of range must stop ``serve`` at start with one
line naming the field, not pass and fail later inside a session (an LSN of "zz" at
START_REPLICATION, 2**70 in a keepalive). Fields a file does not hold take their
defaults (files from before they were kept); fields that are never saved (a slot's
active_pid, say) are not read even if present.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

__all__ = ["StateFileError", "checked_publication", "checked_slot", "checked_top"]

_UINT64: Final = (1 << 64) - 1
_UINT32: Final = (1 << 32) - 1


class StateFileError(ValueError):
    """A state file field that is missing or has a value PostgreSQL could not have."""


def _integer(low: int, high: int, what: str) -> Callable[[object], int]:
    def check(value: object) -> int:
        # JSON booleans are ints to Python; a digit string is how system_identifier is kept.
        if isinstance(value, str) and value.isascii() and value.isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise StateFileError(f"expected {what}, not {value!r:.40}")
        return value

    return check


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise StateFileError(f"expected a string, not {value!r:.40}")
    return value


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise StateFileError(f"expected true or false, not {value!r:.40}")
    return value


def _or_null(check: Callable[[object], Any]) -> Callable[[object], Any]:
    return lambda value: None if value is None else check(value)


def _one_of(*allowed: str) -> Callable[[object], str]:
    def check(value: object) -> str:
        if value not in allowed:
            raise StateFileError(f"expected one of {', '.join(allowed)}, not {value!r:.40}")
        return str(value)

    return check


def _names(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise StateFileError(f"expected a list of names, not {value!r:.40}")
    return tuple(_text(item) for item in value)


_LSN: Final = _integer(0, _UINT64, "an LSN (an integer from 0 to 2^64-1)")
_REQUIRED: Final = object()

# name: (check, default or _REQUIRED)
_TOP: Final[Mapping[str, tuple[Callable[[object], Any], object]]] = {
    "system_identifier": (_integer(0, _UINT64, "a system identifier"), _REQUIRED),
    "timeline": (_integer(1, _UINT32, "a timeline (1 to 2^32-1)"), _REQUIRED),
    "database": (_text, _REQUIRED),
    "databases": (_or_null(_names), None),
    "wal_lsn": (_LSN, _REQUIRED),
}
_SLOT: Final[Mapping[str, tuple[Callable[[object], Any], object]]] = {
    "name": (_text, _REQUIRED),
    "plugin": (_or_null(_text), _REQUIRED),
    "database": (_or_null(_text), _REQUIRED),
    "confirmed_flush": (_LSN, _REQUIRED),
    "restart_lsn": (_LSN, _REQUIRED),
    "two_phase": (_flag, False),
    "two_phase_at": (_or_null(_LSN), None),
    "temporary": (_flag, False),
    "failover": (_flag, False),
    "invalidated": (_or_null(_text), None),  # the cause is checked by the state
    "catalog_xmin": (_or_null(_integer(0, _UINT32, "a transaction id")), None),
}
_PUBLICATION: Final[Mapping[str, tuple[Callable[[object], Any], object]]] = {
    "name": (_text, _REQUIRED),
    "all_tables": (_flag, False),
    "tables": (_names, ()),
    "insert": (_flag, True),
    "update": (_flag, True),
    "delete": (_flag, True),
    "truncate": (_flag, True),
    "owner": (_text, "postgres"),
    "generated_columns": (_one_of("n", "s"), "n"),
}


def _checked(
    raw: object, fields: Mapping[str, tuple[Callable[[object], Any], object]], where: str
) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise StateFileError(f"{where}: expected an object, not {raw!r:.40}")
    out: dict[str, Any] = {}
    for name, (check, default) in fields.items():
        if name not in raw:
            if default is _REQUIRED:
                raise StateFileError(f"{where}: {name} is missing")
            out[name] = default
            continue
        try:
            out[name] = check(raw[name])
        except StateFileError as err:
            raise StateFileError(f"{where}: {name}: {err}") from None
    return out


def checked_top(raw: object) -> dict[str, Any]:
    """The file's own fields (not its slots and publications), checked."""
    return _checked(raw, _TOP, "the file")


def checked_slot(raw: object, index: int) -> dict[str, Any]:
    """Slot ``index`` (from 0) of the file's list, as SlotState's keyword arguments."""
    return _checked(raw, _SLOT, f"slot {index + 1}")


def checked_publication(raw: object, index: int) -> dict[str, Any]:
    """Publication ``index`` of the file's list, as PublicationState's keyword arguments."""
    return _checked(raw, _PUBLICATION, f"publication {index + 1}")
