"""The ``record --snapshot`` recording format: a meta with the tables, one line per
snapshot row, then the stream; read back by the one JSON Lines reader, served as tables
a snapshot at any LSN sees (pgwire_mock.script.snapshot)."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from codec.copy import encode_text_row
from codec.pgoutput import (
    Begin,
    Commit,
    Delete,
    Insert,
    PgOutputMessage,
    Relation,
    RelationColumn,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    Truncate,
    Update,
    encode,
)
from codec.values import LSN
from pgwire_mock.server.errors import ServerError
from pgwire_mock.server.source import RecordingSource, SnapshotRecordingSource, load_source
from pgwire_mock.streamfile import StreamFileError, read_snapshot, read_stream

POINT = 0x1000100
TABLE = {
    "schema": "public",
    "name": "t",
    "oid": 16390,
    "relreplident": "d",
    "relnatts": 5,
    "columns": [
        {"attnum": 1, "name": "id", "type_oid": 23, "typmod": -1, "key": True},
        {"attnum": 2, "name": "v", "type_oid": 25, "typmod": -1, "key": False},
        {"attnum": 3, "name": "n", "type_oid": 1700, "typmod": -1, "key": False},
        {"attnum": 5, "name": "ts", "type_oid": 1184, "typmod": -1, "key": False},
    ],
}
FULL = {
    "schema": "public",
    "name": "f",
    "oid": 16400,
    "relreplident": "f",
    "relnatts": 2,
    "columns": [
        {"attnum": 1, "name": "id", "type_oid": 23, "typmod": -1, "key": False},
        {"attnum": 2, "name": "b", "type_oid": 17, "typmod": -1, "key": False},
    ],
}
SNAPSHOT_ROWS = [
    ("public.t", [b"1", b"tab\there\nnewline \\ back", b"1.50", b"2024-02-29 12:00:00+00"]),
    ("public.t", [b"2", None, b"-0.001", None]),
    ("public.f", [b"1", b"\\x0001ff"]),
]
T_RELATION = Relation(
    16390,
    "public",
    "t",
    "d",
    (
        RelationColumn(1, "id", 23, -1),
        RelationColumn(0, "v", 25, -1),
        RelationColumn(0, "n", 1700, -1),
        RelationColumn(0, "ts", 1184, -1),
    ),
)
F_RELATION = Relation(
    16400, "public", "f", "f", (RelationColumn(1, "id", 23, -1), RelationColumn(1, "b", 17, -1))
)


def _line(lsn: int, message: PgOutputMessage) -> dict[str, Any]:
    return {"lsn": str(LSN(lsn)), "data": encode(message).hex()}


def _stream() -> list[dict[str, Any]]:
    """Three transactions: one at 0/1000200 (text values and a binary numeric 0, a
    key update, a FULL delete), one streamed with a subtransaction rolled back, one
    adding a column."""
    lines = [
        _line(0x1000200, Begin(0x1000300, 0, 750)),
        _line(0x1000200, T_RELATION),
        _line(0x1000200, Insert(16390, ("3", "three", b"\x00" * 8, None))),
        _line(0x1000210, Update(16390, ("10", None, "2", None), key_tuple=("1", None, None, None))),
        _line(0x1000220, F_RELATION),
        _line(0x1000220, Delete(16400, old_tuple=("1", "\\x0001ff"))),
        _line(0x1000300, Commit(0, 0x1000300, 0x1000330, 0)),
        _line(0x1000400, StreamStart(751, True)),
        _line(0x1000400, Insert(16390, ("4", "kept", None, None), xid=751)),
        _line(0x1000410, Insert(16390, ("5", "rolled back", None, None), xid=752)),
        _line(0x1000410, StreamStop()),
        _line(0x1000420, StreamAbort(751, 752)),
        _line(0x1000500, StreamCommit(751, 0, 0x1000500, 0x1000530, 0)),
        _line(0x1000600, Begin(0x1000700, 0, 753)),
        _line(
            0x1000600,
            Relation(
                16390, "public", "t", "d", (*T_RELATION.columns, RelationColumn(0, "w", 23, -1))
            ),
        ),
        _line(0x1000600, Update(16390, ("2", "two", None, None, "7"))),
        _line(0x1000610, Truncate(0, (16400,))),
        _line(0x1000700, Commit(0, 0x1000700, 0x1000730, 0)),
    ]
    return lines


def _write(path: Path, *, tables: list[dict[str, Any]] | None = None, rows: Any = None) -> Path:
    meta = {
        "major": 16,
        "options": {"proto_version": "2", "publication_names": '"pub"'},
        "snapshot": {"consistent_point": str(LSN(POINT)), "tables": tables or [TABLE, FULL]},
    }
    lines = [json.dumps({"meta": meta})]
    for table, values in SNAPSHOT_ROWS if rows is None else rows:
        copy = encode_text_row(values)[:-1].decode()
        lines.append(json.dumps({"table": table, "copy": copy}))
    lines += [json.dumps(line) for line in _stream()]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_snapshot_rows_and_the_stream_read_back_as_written(tmp_path: Path) -> None:
    """read_snapshot gives each row's values as COPY wrote them, with its line;
    read_stream gives only the stream, as for any recording."""
    path = _write(tmp_path / "r.jsonl")
    with path.open("rb") as f:
        rows = read_snapshot(f, str(path))
    assert [(r.table, list(r.values), r.line) for r in rows] == [
        (table, values, line) for line, (table, values) in enumerate(SNAPSHOT_ROWS, start=2)
    ]
    with path.open("rb") as f:
        entries = list(read_stream(f, str(path)))
    assert [(e.lsn, e.payload.hex()) for e in entries] == [
        (int(LSN.parse(line["lsn"])), line["data"]) for line in _stream()
    ]


def test_a_recording_with_a_snapshot_serves_its_tables_at_any_lsn(tmp_path: Path) -> None:
    """At the consistent point the tables are the snapshot's rows; past each commit the
    transaction is applied (key update, FULL delete, a rolled-back subtransaction left
    out, a new column, TRUNCATE), text and binary values decoded alike."""
    source = load_source(_write(tmp_path / "r.jsonl"))
    assert isinstance(source, SnapshotRecordingSource)
    assert source.start_lsn == POINT
    ts = datetime(2024, 2, 29, 12, tzinfo=UTC)

    def rows(lsn: int) -> dict[str, list[tuple[object, ...]]]:
        return {name: state.rows for name, state in source.tables_at(lsn).items()}

    snapshot = {
        "public.t": [
            (1, "tab\there\nnewline \\ back", Decimal("1.50"), ts),
            (2, None, Decimal("-0.001"), None),
        ],
        "public.f": [(1, b"\x00\x01\xff")],
    }
    assert rows(POINT) == rows(0x1000300) == snapshot
    first = {
        "public.t": [
            (10, None, Decimal(2), None),
            (2, None, Decimal("-0.001"), None),
            (3, "three", Decimal(0), None),
        ],
        "public.f": [],
    }
    assert rows(0x1000301) == rows(0x1000500) == first
    second = {**first, "public.t": [*first["public.t"], (4, "kept", None, None)]}
    assert rows(0x1000501) == second
    last = rows(0x1000701)
    assert last["public.t"] == [
        (10, None, Decimal(2), None, None),
        (2, "two", None, None, 7),
        (3, "three", Decimal(0), None, None),
        (4, "kept", None, None, None),
    ]
    assert last["public.f"] == []
    version = source.tables_at(0x1000701)["public.t"].version
    assert [(c.name, c.attnum) for c in version.columns] == [
        ("id", 1),
        ("v", 2),
        ("n", 3),
        ("ts", 5),
        ("w", 6),
    ]


def test_a_recording_without_a_snapshot_serves_no_tables(tmp_path: Path) -> None:
    """Old recordings read as before: a plain RecordingSource, starting at its first
    message, with no tables to answer catalog queries from."""
    path = tmp_path / "old.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in _stream()[:7]) + "\n")
    source = load_source(path)
    assert type(source) is RecordingSource
    assert source.start_lsn == 0x1000200
    assert not hasattr(source, "tables_at")


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"table": "public.t"}', "line 2: expected {'table'"),
        ('{"table": "public.t", "copy": 5}', "line 2: expected {'table'"),
        ('{"table": "public.t", "copy": "1\\\\"}', "line 2: expected {'table'"),
        ('{"table": "public.t", "copy": "x\\ty\\tz\\tw"}', "line 2: "),
        ('{"table": "public.t", "copy": "1\\ty"}', "line 2: public.t has 4 columns, the row 2"),
        ('{"table": "public.nope", "copy": "1"}', "line 2: no table public.nope"),
        ("{not json", "line 2: not JSON"),
    ],
)
def test_a_bad_snapshot_line_is_a_one_line_error_naming_it(
    tmp_path: Path, line: str, problem: str
) -> None:
    path = _write(tmp_path / "bad.jsonl", rows=[])
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], line, *lines[1:]]) + "\n")
    with pytest.raises(StreamFileError) as caught:
        RecordingSource.from_file(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{path}, line 2")
    assert problem in message


def test_a_snapshot_row_after_the_stream_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "late.jsonl")
    with path.open("a") as f:
        f.write(json.dumps({"table": "public.t", "copy": "9\tx\t1\t\\N"}) + "\n")
    with (
        path.open("rb") as f,
        pytest.raises(StreamFileError, match="a snapshot row after the stream"),
    ):
        list(read_stream(f, str(path)))


def test_a_column_of_an_unknown_type_is_a_0A000_when_the_tables_are_asked_for(
    tmp_path: Path,
) -> None:
    """The stream still replays; the catalog gets a clear refusal, not made-up rows."""
    odd = {
        **FULL,
        "columns": [
            *FULL["columns"],
            {"attnum": 3, "name": "m", "type_oid": 16500, "typmod": -1, "key": False},
        ],
    }
    source = load_source(_write(tmp_path / "odd.jsonl", tables=[odd], rows=[]))
    assert isinstance(source, SnapshotRecordingSource)
    with pytest.raises(ServerError) as caught:
        source.tables_at(POINT)
    assert caught.value.sqlstate == "0A000"
    assert "type OID 16500 (column m of public.f" in caught.value.message


def test_a_snapshot_line_is_read_from_bytes_too() -> None:
    """Non-UTF-8 bytes in a COPY row survive the round trip through JSON."""
    raw = encode_text_row([b"1", b"\xff\xfe"])[:-1].decode("utf-8", "surrogateescape")
    data = json.dumps({"table": "public.x", "copy": raw}).encode() + b"\n"
    (row,) = read_snapshot(io.BytesIO(data))
    assert row.values == (b"1", b"\xff\xfe")
