"""Reading captured pgoutput streams from files.

Two formats are recognised by their first byte:

- **JSON Lines** (what ``pgwire-mock capture`` and ``pgwire-mock record`` write): an
  optional first line ``{"meta": {...}}``, then one line per pgoutput message,
  ``{"lsn": "0/16B3748", "xid": 735, "data": "<hex payload>"}``.
- **Wire**: the bytes a walsender sends after CopyBothResponse, i.e. CopyData messages
  holding XLogData and keepalives. Only the XLogData payloads are pgoutput messages;
  keepalives are skipped.

A JSON Lines recording made with ``pgwire-mock record --snapshot`` also holds the
published tables as the new slot's exported snapshot saw them (``pgwire-mock synth``
writes one the same way for a spec with ``initial_rows``). Its meta has a
``snapshot`` object::

    {"consistent_point": "0/1A2B3C8", "snapshot_name": "00000003-00000002-1",
     "tables": [{"schema": "public", "name": "t", "oid": 16385, "relreplident": "d",
                 "relnatts": 3,
                 "columns": [{"attnum": 1, "name": "id", "type_oid": 23, "typmod": -1,
                              "key": true}, ...]}, ...]}

(from pg_class and pg_attribute: the columns a table publishes, i.e. neither dropped
nor generated; ``key`` is whether the column is in the replica identity index, false
for all under REPLICA IDENTITY FULL or NOTHING), and between the meta line and the
stream one line per row of those tables, ``{"table": "public.t", "copy": "1\\tsome
text\\t\\\\N"}``: the row as ``COPY schema.table TO STDOUT`` (text format) sends it
under that snapshot, without its newline. The stream after them starts at the
consistent point. Wire files cannot carry a snapshot: ``record --snapshot`` always
writes JSON Lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any, Final

from codec import DecodeError
from codec.copy import decode_text_row
from codec.replication import PrimaryKeepalive, XLogData, decode_server_copy_data
from codec.values import LSN
from codec.wire import BackendReader, CopyData
from pgwire_mock import json_text


@dataclass(frozen=True, slots=True)
class StreamEntry:
    """One pgoutput payload and the WAL position it was sent at."""

    lsn: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class SnapshotRow:
    """One row of a recorded snapshot: its table (``schema.name``), its values as COPY's
    text format gives them (the types' output form, None for NULL) and its line."""

    table: str
    values: tuple[bytes | None, ...]
    line: int


class StreamFileError(ValueError):
    """A stream file that is not in either format; the message names the place."""


def read_stream(source: IO[bytes], name: str = "<stream>") -> Iterator[StreamEntry]:
    """Yield the pgoutput payloads of a JSON Lines or wire-format stream file."""
    for record in _read(source, name):
        if isinstance(record, StreamEntry):
            yield record


def read_snapshot(source: IO[bytes], name: str = "<stream>") -> list[SnapshotRow]:
    """The snapshot rows of a ``record --snapshot`` recording (none for other files);
    they come before the stream, so reading stops at its first message."""
    rows: list[SnapshotRow] = []
    for record in _read(source, name):
        if isinstance(record, StreamEntry):
            break
        rows.append(record)
    return rows


def _read(source: IO[bytes], name: str) -> Iterator[StreamEntry | SnapshotRow]:
    first = source.read(1)
    if not first:
        return
    if first in b"{ \t\r\n":
        yield from _read_json_lines(_prepend(first, source), name)
    else:
        yield from _read_wire(_prepend(first, source), name)


def read_meta(source: IO[bytes]) -> dict[str, Any] | None:
    """The ``meta`` object of a JSON Lines stream file, if its first line has one."""
    line = source.readline()
    try:
        record = json_text.loads(line)
    except ValueError:
        return None
    meta = record.get("meta") if isinstance(record, dict) else None
    return meta if isinstance(meta, dict) else None


def _prepend(first: bytes, source: IO[bytes]) -> Iterator[bytes]:
    # Re-join the byte read for format detection with the rest, in 64 KiB chunks.
    yield first
    while chunk := source.read(1 << 16):
        yield chunk


def _lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    tail = b""
    for chunk in chunks:
        tail += chunk
        *lines, tail = tail.split(b"\n")
        yield from lines
    if tail:
        yield tail


def _read_json_lines(chunks: Iterable[bytes], name: str) -> Iterator[StreamEntry | SnapshotRow]:
    streaming = False
    for number, line in enumerate(_lines(chunks), start=1):
        if not line.strip():
            continue
        try:
            record = json_text.loads(line)
        except ValueError as err:
            raise StreamFileError(f"{name}, line {number}: not JSON: {err}") from None
        if isinstance(record, dict) and "meta" in record:
            continue
        if isinstance(record, dict) and "table" in record:
            if streaming:
                raise StreamFileError(f"{name}, line {number}: a snapshot row after the stream")
            yield _snapshot_row(record, number, name)
            continue
        streaming = True
        try:
            lsn = LSN.parse(record["lsn"]) if isinstance(record["lsn"], str) else record["lsn"]
            entry = StreamEntry(int(lsn), bytes.fromhex(record["data"]))
        except (ValueError, KeyError, TypeError, DecodeError) as err:
            raise StreamFileError(
                f"{name}, line {number}: expected {{'lsn': 'X/Y', 'data': '<hex>'}}: {err}"
            ) from None
        yield entry


def read_snapshot_line(line: bytes, name: str, number: int) -> SnapshotRow | None:
    """The snapshot row one JSON Lines line holds (``number``: its line number in the
    file, for errors), parsed as :func:`read_snapshot` parses it; None for a blank line,
    a meta line or a stream entry. For readers that seek to a line instead of reading
    the file from its start (the Spark source's executors)."""
    if not line.strip():
        return None
    try:
        record = json_text.loads(line)
    except ValueError as err:
        raise StreamFileError(f"{name}, line {number}: not JSON: {err}") from None
    if isinstance(record, dict) and "table" in record and "meta" not in record:
        return _snapshot_row(record, number, name)
    return None


def _snapshot_row(record: dict[str, Any], number: int, name: str) -> SnapshotRow:
    try:
        table, copy = record["table"], record["copy"]
        if not isinstance(table, str) or not isinstance(copy, str) or "\n" in copy:
            raise TypeError("table and copy must be strings, copy one row without newline")
        values = decode_text_row(copy.encode("utf-8", "surrogateescape") + b"\n")
    except (KeyError, TypeError, DecodeError) as err:
        raise StreamFileError(
            f"{name}, line {number}: expected {{'table': 'schema.name', 'copy': "
            f"'<COPY text row>'}}: {err}"
        ) from None
    return SnapshotRow(table, values, number)


_DATA_KEY = b'"data": "'


def json_line_hex(line: bytes) -> bytes | None:
    """The hex payload of a JSON Lines entry in the layout this project writes
    (``"data"`` the last key, as ``json.dumps`` spaces it), found without parsing the
    JSON; None for a line in any other layout, which must then be parsed."""
    start = line.rfind(_DATA_KEY)
    if start < 0:
        return None
    start += len(_DATA_KEY)
    end = line.find(b'"', start)
    if end < 0 or line[end + 1 :].strip() != b"}":
        return None
    return line[start:end]


def _read_wire(chunks: Iterable[bytes], name: str) -> Iterator[StreamEntry]:
    for _, entry in read_wire(chunks, name):
        yield entry


def read_wire(
    chunks: Iterable[bytes], name: str, start: int = 0
) -> Iterator[tuple[int, StreamEntry]]:
    """(byte offset of its CopyData message, entry) for each XLogData of wire-format
    bytes that begin at offset ``start`` of the file, so that a reader can seek to any
    entry's offset and read on from there."""
    reader = BackendReader()
    offset = start  # of the next message
    for chunk in chunks:
        reader.feed(chunk)
        try:
            for message in reader:
                if not isinstance(message, CopyData):
                    raise StreamFileError(
                        f"{name}: expected only CopyData messages, found {type(message).__name__}"
                        f" at byte {offset}"
                    )
                at = offset
                offset += _COPY_DATA_HEADER + len(message.data)
                copied = decode_server_copy_data(bytes(message.data))
                if isinstance(copied, XLogData):
                    yield at, StreamEntry(copied.wal_start, bytes(copied.data))
                elif not isinstance(copied, PrimaryKeepalive):  # pragma: no cover - registry
                    raise StreamFileError(f"{name}: unexpected {type(copied).__name__}")
        except DecodeError as err:
            raise StreamFileError(f"{name}: near byte {offset}: {err}") from None
    if reader.buffered:
        raise StreamFileError(f"{name}: ends in the middle of a message")


_COPY_DATA_HEADER: Final = 5  # 'd' and the Int32 length
