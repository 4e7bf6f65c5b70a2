"""The ``pgoutput`` data source's option values, parsed strictly.

A value the source cannot use fails with one line that names the option, what it
accepts and what it got: ``pgoutput: option "streaming" must be one of off, on, parallel,
true, false (any case), not 'yes'``. Nothing is read as a default when it is misspelt.

The pgoutput options accept what pgoutput itself accepts on START_REPLICATION, where
every value arrives as a string (repl_gram.y ``plugin_opt_arg``): ``defGetBoolean``
(define.c) takes true/false/on/off in any case, and ``streaming`` (16+,
``defGetStreamingMode`` in subscriptioncmds.c) also parallel. The integer forms 0 and 1
those functions know are never reached from the replication grammar, and ``parse_bool``'s
yes/no and prefixes are not used there, so they are refused here too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal

from pgwire_mock.spark.errors import SparkSideError

__all__ = [
    "STREAMING_MODES",
    "StreamingMode",
    "bool_option",
    "float_option",
    "int_option",
    "is_synthetic",
    "option_error",
    "streaming_option",
]

StreamingMode = Literal["off", "on", "parallel"]

_BOOLEANS: Final = {"true": True, "on": True, "false": False, "off": False}
STREAMING_MODES: Final[Mapping[str, StreamingMode]] = {
    "off": "off",
    "false": "off",
    "on": "on",
    "true": "on",
    "parallel": "parallel",
}
"""What the ``streaming`` option accepts (any case), and the pgoutput mode each means."""


def option_error(name: str, accepted: str, value: object) -> SparkSideError:
    """The one-line error for option ``name`` given ``value``."""
    return SparkSideError(f'pgoutput: option "{name}" must be {accepted}, not {value!r}')


def bool_option(options: Mapping[str, str], name: str) -> bool | None:
    """A pgoutput boolean (true/false/on/off, any case); None when not given."""
    value = options.get(name)
    if value is None:
        return None
    found = _BOOLEANS.get(value.lower())
    if found is None:
        raise option_error(name, "one of true, false, on, off (any case)", value)
    return found


def streaming_option(options: Mapping[str, str]) -> StreamingMode | None:
    """pgoutput's ``streaming``: off, on or parallel; None when not given."""
    value = options.get("streaming")
    if value is None:
        return None
    mode = STREAMING_MODES.get(value.lower())
    if mode is None:
        raise option_error("streaming", "one of off, on, parallel, true, false (any case)", value)
    return mode


def int_option(options: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    """An integer of at least ``minimum``."""
    value = options.get(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = minimum - 1
    if number < minimum:
        raise option_error(name, f"an integer >= {minimum}", value)
    return number


def float_option(
    options: Mapping[str, str], name: str, default: float, minimum: float = 0.0
) -> float:
    """A number of seconds (or such) of at least ``minimum``."""
    value = options.get(name)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not number >= minimum:  # NaN too
        raise option_error(name, f"a number >= {minimum:g}", value)
    return number


def is_synthetic(options: Mapping[str, str]) -> bool:
    """Whether the read is of a generator spec (``synth_spec``) rather than of recordings."""
    return "synth_spec" in options
