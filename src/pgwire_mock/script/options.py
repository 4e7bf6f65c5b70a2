"""The pgoutput options of START_REPLICATION: :class:`StreamOptions`, parsed and refused
as ``pgoutput_startup`` does, with PostgreSQL's SQLSTATEs and messages.

Apart from the encoder because the server checks a client's options (and answers with
an ErrorResponse) before any stream is decoded, and because the parsing rules —
``parse_bool``'s prefixes, ``SplitIdentifierString``'s quoting, what each version
knows — are a subject of their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pgwire_mock.script.errors import OptionError

__all__ = ["MAX_PROTO_VERSION", "StreamOptions", "options_from"]

MAX_PROTO_VERSION: Final[Mapping[int, int]] = {14: 2, 15: 3, 16: 4, 17: 4, 18: 4}


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """pgoutput options of START_REPLICATION (``streaming``: off, on or parallel)."""

    proto_version: int = 1
    publication_names: tuple[str, ...] = ()
    binary: bool = False
    messages: bool = False
    streaming: str = "off"
    two_phase: bool = False
    origin: str = "any"

    @classmethod
    def from_pgoutput(
        cls, options: Mapping[str, str] | Iterable[tuple[str, str]], *, server_version: int
    ) -> StreamOptions:
        """Parse START_REPLICATION options as pgoutput does, with its errors
        (:class:`OptionError` with PostgreSQL's SQLSTATE and message)."""
        pairs = list(options.items()) if isinstance(options, Mapping) else list(options)
        seen: set[str] = set()
        values: dict[str, Any] = {}
        for name, value in pairs:
            if name in seen:
                raise OptionError("conflicting or redundant options", sqlstate="42601")
            seen.add(name)
            known = {"proto_version", "publication_names", "binary", "messages", "streaming"}
            if server_version >= 15:
                known.add("two_phase")
            if server_version >= 16:
                known.add("origin")
            if name not in known:
                raise OptionError(f"unrecognized pgoutput option: {name}", sqlstate="XX000")
            if name == "proto_version":
                if not value.isdigit():
                    raise OptionError("invalid proto_version", sqlstate="22023")
                values[name] = int(value)
            elif name == "publication_names":
                values[name] = _split_identifiers(value)
            elif name == "streaming":
                if server_version >= 16 and value.lower() == "parallel":
                    values[name] = "parallel"
                else:
                    values[name] = "on" if _parse_bool(name, value) else "off"
            elif name == "origin":
                if value.lower() not in ("none", "any"):
                    raise OptionError(f'unrecognized origin value: "{value}"', sqlstate="22023")
                values[name] = value.lower()
            else:
                values[name] = _parse_bool(name, value)
        if server_version >= 17:
            for required in ("proto_version", "publication_names"):
                if required not in values:
                    raise OptionError(f'option "{required}" missing', sqlstate="22023")
        result = cls(
            proto_version=values.get("proto_version", 0),
            publication_names=values.get("publication_names", ()),
            binary=values.get("binary", False),
            messages=values.get("messages", False),
            streaming=values.get("streaming", "off"),
            two_phase=values.get("two_phase", False),
            origin=values.get("origin", "any"),
        )
        result.check(server_version, publication_names_given="publication_names" in values)
        return result

    def check(self, server_version: int, *, publication_names_given: bool = True) -> None:
        """Raise :class:`OptionError` for what ``pgoutput_startup`` refuses."""
        top = MAX_PROTO_VERSION.get(server_version, 4)
        who = "we only support" if server_version < 16 else "server only supports"
        if self.proto_version > top:
            raise OptionError(
                f"client sent proto_version={self.proto_version} but {who} protocol {top} or lower",
                sqlstate="0A000",
            )
        if self.proto_version < 1:
            raise OptionError(
                f"client sent proto_version={self.proto_version} but {who} protocol 1 or higher",
                sqlstate="0A000",
            )
        if not publication_names_given:
            raise OptionError("publication_names parameter missing", sqlstate="22023")
        if self.streaming == "on" and self.proto_version < 2:
            raise OptionError(
                f"requested proto_version={self.proto_version} does not support streaming, "
                "need 2 or higher",
                sqlstate="22023",
            )
        if self.streaming == "parallel" and self.proto_version < 4:
            raise OptionError(
                f"requested proto_version={self.proto_version} does not support parallel "
                "streaming, need 4 or higher",
                sqlstate="22023",
            )
        if self.two_phase and self.proto_version < 3:
            raise OptionError(
                f"requested proto_version={self.proto_version} does not support two-phase "
                "commit, need 3 or higher",
                sqlstate="22023",
            )

    def as_pgoutput(self) -> dict[str, str]:
        """The options as START_REPLICATION / ``pg_logical_slot_get_binary_changes`` take them."""
        out = {
            "proto_version": str(self.proto_version),
            "publication_names": ",".join(self.publication_names),
            "binary": _bool(self.binary),
            "messages": _bool(self.messages),
            "streaming": self.streaming,
        }
        if self.two_phase:
            out["two_phase"] = "true"
        if self.origin != "any":
            out["origin"] = self.origin
        return out


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _parse_bool(name: str, value: str) -> bool:
    # parse_bool (src/backend/utils/adt/bool.c): any unique prefix of true/false/yes/no,
    # on/off (two letters at least) and 1/0.
    v = value.strip().lower()
    if v and ("true".startswith(v) or "yes".startswith(v) or v in {"1", "on"}):
        return True
    if v and (
        "false".startswith(v)
        or "no".startswith(v)
        or v == "0"
        or (len(v) >= 2 and "off".startswith(v))
    ):
        return False
    raise OptionError(f"{name} requires a Boolean value", sqlstate="22023")


def _split_identifiers(text: str) -> tuple[str, ...]:
    # SplitIdentifierString: comma-separated, optionally double-quoted, bare ones downcased.
    names: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i < n and text[i] == '"':
            j = i + 1
            buf = []
            while True:
                if j >= n:
                    raise OptionError("invalid publication_names syntax", sqlstate="42602")
                if text[j] == '"':
                    if j + 1 < n and text[j + 1] == '"':
                        buf.append('"')
                        j += 2
                        continue
                    break
                buf.append(text[j])
                j += 1
            name = "".join(buf)
            i = j + 1
        else:
            j = i
            while j < n and text[j] != "," and not text[j].isspace():
                j += 1
            name = text[i:j].lower()
            i = j
        if not name:
            raise OptionError("invalid publication_names syntax", sqlstate="42602")
        names.append(name)
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            return tuple(names)
        if text[i] != ",":
            raise OptionError("invalid publication_names syntax", sqlstate="42602")
        i += 1


def options_from(
    proto_version: int,
    publication_names: Sequence[str],
    *,
    binary: bool = False,
    messages: bool = False,
    streaming: str = "off",
    two_phase: bool = False,
    origin: str = "any",
) -> StreamOptions:
    """Shorthand for :class:`StreamOptions`."""
    return StreamOptions(
        proto_version, tuple(publication_names), binary, messages, streaming, two_phase, origin
    )
