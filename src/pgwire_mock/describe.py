"""Human-readable and JSON renderings of a decoded pgoutput stream.

The readable form follows ``test_decoding``'s (``table public.t: INSERT: id[int4]:1``)
so people who know PostgreSQL's own output read it at a glance. Both forms need the
Relation and Type messages seen so far to name tables, columns and types, so a
:class:`StreamDescriber` follows one stream, like a Decoder.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Iterator
from typing import Any

from codec import DecodeError
from codec.pgoutput import (
    UNCHANGED_TOAST,
    Begin,
    BeginPrepare,
    ColumnValue,
    Commit,
    CommitPrepared,
    Decoder,
    Delete,
    Insert,
    Message,
    Origin,
    PgOutputMessage,
    Prepare,
    Relation,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    TupleData,
    Type,
    Update,
)
from codec.values import LSN, TYPES, decode_binary, encode_text, pg_timestamp_to_datetime

_IDENTITY = {"d": "default", "n": "nothing", "f": "full", "i": "index"}
# test_decoding prints these types' values bare and quotes everything else.
_UNQUOTED = {"bool", "int2", "int4", "int8", "oid", "float4", "float8", "numeric"}
# One message per line: control characters in values are shown escaped (--json is exact).
_VISIBLE = {code: f"\\x{code:02x}" for code in range(32)} | {
    9: "\\t",
    10: "\\n",
    13: "\\r",
    127: "\\x7f",
}


def _lsn(value: int) -> str:
    return str(LSN(value))


def _time(value: int) -> str:
    return str(pg_timestamp_to_datetime(value))


class StreamDescriber:
    """Decodes one stream's payloads and describes each message."""

    def __init__(self) -> None:
        self.decoder = Decoder()
        self.relations: dict[int, Relation] = {}
        self.types: dict[int, str] = {}

    def decode(self, payload: bytes) -> PgOutputMessage:
        message = self.decoder.decode(payload)
        if isinstance(message, Relation):
            self.relations[message.oid] = message
        elif isinstance(message, Type):
            self.types[message.oid] = _qualified(message.namespace, message.name)
        return message

    # --- names and values -----------------------------------------------------------

    def type_name(self, oid: int) -> str:
        if oid in self.types:
            return self.types[oid]
        info = TYPES.get(oid)
        return info.name if info is not None else f"oid {oid}"

    def table_name(self, oid: int) -> str:
        relation = self.relations.get(oid)
        if relation is None:
            return f"relation {oid}"
        if relation.namespace:
            return f"{relation.namespace}.{relation.relation_name}"
        return f"pg_catalog.{relation.relation_name}"

    def _columns(self, relation_oid: int, count: int) -> list[tuple[str, int]]:
        relation = self.relations.get(relation_oid)
        if relation is None or len(relation.columns) != count:
            return [(f"column{n}", 0) for n in range(1, count + 1)]
        return [(c.name, c.type_oid) for c in relation.columns]

    def value_text(self, type_oid: int, value: ColumnValue) -> str | None:
        """A column value in PostgreSQL's text form (binary values are converted)."""
        if value is None or value is UNCHANGED_TOAST:
            return None
        if isinstance(value, str):
            return value
        assert isinstance(value, bytes)
        if type_oid in TYPES:
            try:
                return encode_text(type_oid, decode_binary(type_oid, value))
            except DecodeError:
                pass
        return "\\x" + value.hex()

    def tuple_text(self, relation_oid: int, values: TupleData) -> str:
        parts = []
        for (name, oid), value in zip(
            self._columns(relation_oid, len(values)), values, strict=True
        ):
            if value is UNCHANGED_TOAST:
                shown = "unchanged-toast-datum"
            elif value is None:
                shown = "null"
            else:
                text = (self.value_text(oid, value) or "").translate(_VISIBLE)
                type_name = self.type_name(oid)
                shown = text if type_name in _UNQUOTED else "'" + text.replace("'", "''") + "'"
            parts.append(f"{name}[{self.type_name(oid)}]:{shown}")
        return " ".join(parts)

    def tuple_json(self, relation_oid: int, values: TupleData) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for (name, oid), value in zip(
            self._columns(relation_oid, len(values)), values, strict=True
        ):
            if value is UNCHANGED_TOAST:
                out[name] = {"unchanged_toast": True}
            else:
                out[name] = self.value_text(oid, value)
        return out

    # --- whole messages ---------------------------------------------------------------

    def text(self, message: PgOutputMessage) -> str:
        """One readable line for ``message``."""
        prefix = (
            ""
            if getattr(message, "xid", None) is None or _is_boundary(message)
            else (
                f"(xid {message.xid}) "  # type: ignore[attr-defined]
            )
        )
        return prefix + self._text(message)

    def _text(self, m: PgOutputMessage) -> str:
        match m:
            case Begin():
                return (
                    f"BEGIN {m.xid} (final LSN {_lsn(m.final_lsn)}, at {_time(m.commit_timestamp)})"
                )
            case Commit():
                return (
                    f"COMMIT (LSN {_lsn(m.commit_lsn)}, end {_lsn(m.end_lsn)}, "
                    f"at {_time(m.commit_timestamp)})"
                )
            case Origin():
                return f"ORIGIN {m.name!r} (commit LSN {_lsn(m.commit_lsn)})"
            case Relation():
                columns = ", ".join(
                    f"{c.name} {self.type_name(c.type_oid)}" + (" key" if c.is_key else "")
                    for c in m.columns
                )
                identity = _IDENTITY.get(m.replica_identity, repr(m.replica_identity))
                return (
                    f"RELATION {self.table_name(m.oid)} (oid {m.oid}, replica identity "
                    f"{identity}): {columns}"
                )
            case Type():
                return f"TYPE {_qualified(m.namespace, m.name)} (oid {m.oid})"
            case Insert():
                return (
                    f"table {self.table_name(m.relation_oid)}: INSERT: "
                    f"{self.tuple_text(m.relation_oid, m.new_tuple)}"
                )
            case Update():
                old = ""
                if m.key_tuple is not None:
                    old = f"old-key: {self.tuple_text(m.relation_oid, m.key_tuple)} new-tuple: "
                elif m.old_tuple is not None:
                    old = f"old-tuple: {self.tuple_text(m.relation_oid, m.old_tuple)} new-tuple: "
                return (
                    f"table {self.table_name(m.relation_oid)}: UPDATE: {old}"
                    f"{self.tuple_text(m.relation_oid, m.new_tuple)}"
                )
            case Delete():
                old_values = m.key_tuple if m.key_tuple is not None else m.old_tuple
                assert old_values is not None
                return (
                    f"table {self.table_name(m.relation_oid)}: DELETE: "
                    f"{self.tuple_text(m.relation_oid, old_values)}"
                )
            case Truncate():
                tables = ", ".join(self.table_name(oid) for oid in m.relation_oids)
                options = [
                    n
                    for n, on in (("cascade", m.cascade), ("restart_seqs", m.restart_identity))
                    if on
                ]
                return f"TRUNCATE {tables}" + (f" ({', '.join(options)})" if options else "")
            case Message():
                kind = "transactional" if m.transactional else "non-transactional"
                content = m.content.decode("utf-8", "backslashreplace")
                return f"MESSAGE {kind} prefix {m.prefix!r} (LSN {_lsn(m.lsn)}): {content!r}"
            case StreamStart():
                return f"STREAM START {m.xid}" + (" (first segment)" if m.first_segment else "")
            case StreamStop():
                return "STREAM STOP"
            case StreamCommit():
                return (
                    f"STREAM COMMIT {m.xid} (LSN {_lsn(m.commit_lsn)}, end {_lsn(m.end_lsn)}, "
                    f"at {_time(m.commit_timestamp)})"
                )
            case StreamAbort():
                what = f"STREAM ABORT {m.xid}" + (
                    f" subxact {m.subxid}" if m.subxid != m.xid else ""
                )
                if m.abort_lsn is not None and m.abort_timestamp is not None:
                    what += f" (LSN {_lsn(m.abort_lsn)}, at {_time(m.abort_timestamp)})"
                return what
            case BeginPrepare():
                return f"BEGIN PREPARE {m.xid} {m.gid!r} (prepare LSN {_lsn(m.prepare_lsn)})"
            case Prepare() | StreamPrepare():
                word = "STREAM PREPARE" if isinstance(m, StreamPrepare) else "PREPARE"
                return (
                    f"{word} {m.xid} {m.gid!r} (LSN {_lsn(m.prepare_lsn)}, end {_lsn(m.end_lsn)}, "
                    f"at {_time(m.prepare_timestamp)})"
                )
            case CommitPrepared():
                return f"COMMIT PREPARED {m.xid} {m.gid!r} (LSN {_lsn(m.commit_lsn)})"
            case RollbackPrepared():
                return f"ROLLBACK PREPARED {m.xid} {m.gid!r} (end {_lsn(m.rollback_end_lsn)})"
        raise AssertionError(f"no description for {type(m).__name__}")  # pragma: no cover

    def json(self, message: PgOutputMessage) -> dict[str, Any]:
        """A JSON-ready dict: the message's fields, tuples keyed by column name."""
        out: dict[str, Any] = {"type": type(message).__name__}
        for field in dataclasses.fields(message):  # type: ignore[arg-type]
            name = field.name
            value = getattr(message, name)
            if name.endswith("_tuple") and value is not None:
                value = self.tuple_json(message.relation_oid, value)  # type: ignore[attr-defined]
            elif name.endswith("lsn") and value is not None:
                value = _lsn(value)
            elif name.endswith("timestamp") and value is not None:
                value = _time(value)
            elif name == "columns":
                value = [
                    {
                        "name": c.name,
                        "type": self.type_name(c.type_oid),
                        "type_oid": c.type_oid,
                        "type_modifier": c.type_modifier,
                        "key": c.is_key,
                    }
                    for c in value
                ]
            elif isinstance(value, bytes):
                value = base64.b64encode(value).decode()
            elif isinstance(value, tuple):
                value = list(value)
            out[name] = value
        if isinstance(message, Insert | Update | Delete):
            out["relation"] = self.table_name(message.relation_oid)
        return out


def _qualified(namespace: str, name: str) -> str:
    # pgoutput sends an empty namespace for pg_catalog (and a domain's Type message
    # names its built-in base type that way).
    return f"{namespace}.{name}" if namespace else name


def _is_boundary(message: PgOutputMessage) -> bool:
    # These carry the xid as a field of their own, already shown in their text.
    return isinstance(
        message,
        Begin
        | StreamStart
        | StreamCommit
        | StreamAbort
        | BeginPrepare
        | Prepare
        | StreamPrepare
        | CommitPrepared
        | RollbackPrepared,
    )


def describe_all(payloads: Iterator[bytes]) -> Iterator[str]:
    """Readable lines for a sequence of payloads from one stream."""
    describer = StreamDescriber()
    for payload in payloads:
        yield describer.text(describer.decode(payload))
