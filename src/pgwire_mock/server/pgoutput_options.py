"""pgoutput's options on START_REPLICATION ... LOGICAL, checked as the emulated major's
``parse_output_parameters`` and ``pgoutput_startup`` check them (values, order and errors
from :mod:`pgwire_mock.server.versions`), and ``SplitIdentifierString``, which reads
their publication list.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from pgwire_mock.server.errors import BackendCrashError, ServerError
from pgwire_mock.server.grammar import PluginOption
from pgwire_mock.server.versions import VERSIONS, error

__all__ = ["PgOutputOptions", "split_identifier_string", "validate_start_replication"]

_STARTUP_CONTEXT: Final = 'slot "{slot}", output plugin "pgoutput", in the startup callback'


@dataclass(frozen=True, slots=True)
class PgOutputOptions:
    """pgoutput's options once parse_output_parameters and pgoutput_startup accept them."""

    proto_version: int
    publication_names: tuple[str, ...]
    binary: bool = False
    messages: bool = False
    streaming: Literal["off", "on", "parallel"] = "off"
    two_phase: bool = False
    origin: Literal["none", "any"] = "any"
    slot_two_phase_at: int | None = None
    """Not an option: where the slot's two-phase decoding began (0: not known), or None
    if the slot is not marked two-phase. A marked slot (created with TWO_PHASE, or
    streamed once with ``two_phase``) decodes prepared transactions in two phases for
    this client too, whatever it asked and down to protocol 1 (CreateDecodingContext
    takes ``ctx->twophase`` from the slot; pgoutput_startup only notes the option)."""


_ISSPACE: Final = " \t\n\r\v\f"


def split_identifier_string(raw: str, separator: str = ",") -> list[str] | None:
    """``SplitIdentifierString`` (varlena.c): a list of names, or None on bad syntax.

    Names may be double-quoted (``""`` is a quote inside); unquoted names are
    lower-cased and truncated to 63 bytes; whitespace around names is skipped. An empty
    (or all-blank) string is an empty list.
    """
    names: list[str] = []
    pos = 0
    end = len(raw)
    while pos < end and raw[pos] in _ISSPACE:
        pos += 1
    if pos >= end:
        return names
    while True:
        if pos < end and raw[pos] == '"':
            out: list[str] = []
            pos += 1
            while True:
                close = raw.find('"', pos)
                if close < 0:
                    return None  # mismatched quotes
                out.append(raw[pos:close])
                if raw.startswith('""', close):
                    out.append('"')
                    pos = close + 2
                    continue
                pos = close + 1
                break
            name = "".join(out)
        else:
            start = pos
            while pos < end and raw[pos] != separator and raw[pos] not in _ISSPACE:
                pos += 1
            if pos == start:
                return None  # empty unquoted name
            name = "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in raw[start:pos])
        while pos < end and raw[pos] in _ISSPACE:
            pos += 1
        encoded = name.encode("utf-8")
        if len(encoded) >= 64:
            name = encoded[:63].decode("utf-8", errors="ignore")
        names.append(name)
        if pos < end and raw[pos] == separator:
            pos += 1
            while pos < end and raw[pos] in _ISSPACE:
                pos += 1
            continue
        if pos >= end:
            return names
        return None  # invalid syntax


_C_UINT: Final = re.compile(r"[ \t\n\r\v\f]*([+-]?)([0-9]+)")
_INT64_MAX: Final = (1 << 63) - 1
_UINT32_MAX: Final = (1 << 32) - 1


def _parse_proto_version(major: int, raw: str, context: str) -> int:
    if major == 14:
        # scanint8(): blanks around an optionally signed decimal; nothing else.
        match = re.fullmatch(r"[ \t\n\r\v\f]*([+-]?[0-9]+)[ \t\n\r\v\f]*", raw)
        if match is None or abs(int(match.group(1))) > _INT64_MAX + 1:
            raise error(major, "pgoutput_invalid_proto_version", context=context)
        value = int(match.group(1))
        if value < 0 or value > _UINT32_MAX:
            raise error(major, "pgoutput_proto_version_out_of_range", context=context, value=raw)
        return value
    # 15+: strtoul() with errno and end-pointer checks. "" parses as 0; a leading '-'
    # negates modulo 2**64, so "-1" is out of range rather than invalid.
    if raw == "":
        return 0
    match = _C_UINT.match(raw)
    if match is None or match.end() != len(raw):
        raise error(major, "pgoutput_invalid_proto_version", context=context)
    value = int(match.group(2))
    if value > (1 << 64) - 1:
        raise error(major, "pgoutput_invalid_proto_version", context=context)
    if match.group(1) == "-":
        value = -value % (1 << 64)
    if value > _UINT32_MAX:
        raise error(major, "pgoutput_proto_version_out_of_range", context=context, value=raw)
    return value


_TRUE: Final = frozenset({"true", "on"})
_FALSE: Final = frozenset({"false", "off"})


def _get_boolean(major: int, option: PluginOption, context: str) -> bool:
    # defGetBoolean: no value means true; otherwise true/false/on/off, any case.
    if option.value is None:
        return True
    if option.value.lower() in _TRUE:
        return True
    if option.value.lower() in _FALSE:
        return False
    raise error(major, "requires_boolean", context=context, option=option.name)


def validate_start_replication(
    major: int, slot_name: str, options: Sequence[PluginOption]
) -> PgOutputOptions:
    """Check START_REPLICATION ... LOGICAL options exactly as pgoutput on ``major`` does.

    ``slot_name`` only feeds the error context line ('slot "s", output plugin "pgoutput",
    in the startup callback'). Errors come in the real order: the first bad option in the
    list (parse_output_parameters), then PG17's required-option checks, then
    pgoutput_startup's protocol checks (too high, too low, no publications before 17,
    streaming, parallel streaming, two-phase).

    Raises :class:`ServerError`, or :class:`BackendCrashError` where the real backend
    crashes (``proto_version`` or ``publication_names`` given without a value).
    """
    facts = VERSIONS[major]
    context = _STARTUP_CONTEXT.format(slot=slot_name)

    def fail(kind: str, **args: object) -> ServerError:
        return error(major, kind, context=context, **args)

    given: set[str] = set()
    proto_version = 0
    publications: list[str] = []
    binary = messages = two_phase = False
    streaming: Literal["off", "on", "parallel"] = "off"
    origin: Literal["none", "any"] = "any"
    for option in options:
        name = option.name
        if name not in facts.pgoutput_options:
            raise fail("pgoutput_unrecognized_option", option=name)
        if name in given:
            raise fail(f"pgoutput_conflicting_{name}")
        given.add(name)
        if name == "proto_version":
            if option.value is None:
                raise BackendCrashError("pgoutput dereferences a missing proto_version value")
            proto_version = _parse_proto_version(major, option.value, context)
        elif name == "publication_names":
            if option.value is None:
                raise BackendCrashError("pgoutput dereferences a missing publication_names value")
            names = split_identifier_string(option.value)
            if names is None:
                raise fail("pgoutput_invalid_publication_names")
            publications = names
        elif name == "binary":
            binary = _get_boolean(major, option, context)
        elif name == "messages":
            messages = _get_boolean(major, option, context)
        elif name == "two_phase":
            two_phase = _get_boolean(major, option, context)
        elif name == "streaming":
            if major < 16:
                streaming = "on" if _get_boolean(major, option, context) else "off"
            elif option.value is None or option.value.lower() in _TRUE:
                streaming = "on"
            elif option.value.lower() in _FALSE:
                streaming = "off"
            elif option.value.lower() == "parallel":
                streaming = "parallel"
            else:
                raise fail("streaming_requires_boolean_or_parallel", option=name)
        elif name == "origin":
            if option.value is None:
                raise fail("requires_parameter", option=name)
            if option.value.lower() == "none":
                origin = "none"
            elif option.value.lower() == "any":
                origin = "any"
            else:
                raise fail("pgoutput_unrecognized_origin", value=option.value)
    if facts.pgoutput_requires_options:
        if "proto_version" not in given:
            raise fail("pgoutput_option_missing_proto_version")
        if "publication_names" not in given:
            raise fail("pgoutput_option_missing_publication_names")
    # pgoutput keeps a uint32 but prints it with %d.
    shown = proto_version - (1 << 32) if proto_version >= 1 << 31 else proto_version
    if proto_version > facts.max_proto_version:
        raise fail("pgoutput_proto_version_too_high", value=shown, max=facts.max_proto_version)
    if proto_version < 1:
        raise fail("pgoutput_proto_version_too_low", value=shown)
    if not facts.pgoutput_requires_options and not publications:
        raise fail("pgoutput_publication_names_missing")
    if streaming == "on" and proto_version < 2:
        raise fail("pgoutput_streaming_needs_proto", value=proto_version)
    if streaming == "parallel" and proto_version < 4:
        raise fail("pgoutput_parallel_streaming_needs_proto", value=proto_version)
    if two_phase and proto_version < 3:
        raise fail("pgoutput_two_phase_needs_proto", value=proto_version)
    return PgOutputOptions(
        proto_version=proto_version,
        publication_names=tuple(publications),
        binary=binary,
        messages=messages,
        streaming=streaming,
        two_phase=two_phase,
        origin=origin,
    )
