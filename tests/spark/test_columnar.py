"""parse_tuples (every row's TupleData at once, with numpy) reads what the codec's
per-row read_tuple reads, refuses exactly what it refuses, and a malformed change
surfaces the codec's DecodeError through decode_stream only if its transaction commits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pgwire_mock.spark.rows as rows_module
from codec.errors import DecodeError
from codec.pgoutput import (
    UNCHANGED_TOAST,
    Begin,
    ColumnValue,
    Commit,
    Insert,
    PgOutputMessage,
    Relation,
    RelationColumn,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    TupleData,
    encode,
)
from codec.pgoutput.tuples import read_tuple, write_tuple
from pgwire_mock.spark import decode_stream
from pgwire_mock.spark.columnar import ParsedTuples, concat, parse_tuples
from spark.spark_helpers import TYPES_OPTIONS, entries, golden, same

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KINDS = {None: ord("n"), UNCHANGED_TOAST: ord("u")}

# --------------------------------------------------------------------- batches


@dataclass
class Batch:
    """Payloads with a TupleData at ``at[i]`` (-1: no tuple), as rows.py lays them out."""

    payloads: list[bytes]
    at: list[int]
    columns: int

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(buffer, tuple starts in it, limits): the arguments of parse_tuples."""
        buffer, begins, ends = concat(self.payloads)
        at = np.array(self.at, np.int64)
        return buffer, np.where(at >= 0, begins + at, -1), ends

    def parse(self) -> ParsedTuples | None:
        return parse_tuples(*self.arrays(), self.columns)

    def read(self, row: int) -> tuple[TupleData, int]:
        """The codec's reading of one row; raises DecodeError as it does."""
        return read_tuple(self.payloads[row], self.at[row], "Insert")

    def codec_refuses(self) -> bool:
        """Whether decoding the rows one by one fails: read_tuple raises, or a tuple has
        another column count than the relation."""
        for row, at in enumerate(self.at):
            if at < 0:
                continue
            try:
                values, _ = self.read(row)
            except DecodeError:
                return True
            if len(values) != self.columns:
                return True
        return False


def _text_values() -> st.SearchStrategy[str]:
    """Text as the codec decodes it: any UTF-8, or any bytes at all (a database in
    SQL_ASCII), surrogate-escaped."""
    return st.text(max_size=12) | st.binary(max_size=12).map(
        lambda b: b.decode("utf-8", "surrogateescape")
    )


def column_values(text_only: bool) -> st.SearchStrategy[ColumnValue]:
    kinds: list[st.SearchStrategy[ColumnValue]] = [
        st.none(),
        st.just(UNCHANGED_TOAST),
        _text_values(),
        _text_values(),
    ]
    if not text_only:
        kinds.append(st.binary(max_size=12))
    return st.one_of(kinds)


@st.composite
def batches(draw: st.DrawFn) -> Batch:
    """0-8 rows of one column count; each tuple between random bytes (the message
    header before it, anything after it), some rows without a tuple."""
    columns = draw(st.integers(0, 6))
    rows = draw(st.integers(0, 8))
    text_only = draw(st.booleans())  # all-text columns come back as string arrays
    payloads: list[bytes] = []
    at: list[int] = []
    for _ in range(rows):
        out = bytearray(draw(st.binary(max_size=6)))
        if draw(st.integers(0, 4)) == 0:
            payloads.append(bytes(out))
            at.append(-1)
            continue
        values = draw(st.lists(column_values(text_only), min_size=columns, max_size=columns))
        at.append(len(out))
        write_tuple(out, tuple(values), "test tuple")
        out += draw(st.binary(max_size=6))
        payloads.append(bytes(out))
    return Batch(payloads, at, columns)


def assert_parsed_like_the_codec(batch: Batch, parsed: ParsedTuples) -> None:
    """Every column equals the codec's values (NULL and unchanged TOAST as None), kinds
    are the kind bytes (0 without a tuple), and every tuple ends where the codec ends."""
    _, begins, _ = concat(batch.payloads)
    decoded = [batch.read(row) if at >= 0 else None for row, at in enumerate(batch.at)]
    for j in range(batch.columns):
        expected: list[ColumnValue] = []
        kinds: list[int] = []
        for found in decoded:
            value = None if found is None else found[0][j]
            expected.append(None if value is UNCHANGED_TOAST else value)
            if found is None:
                kinds.append(0)
            elif isinstance(value, str):
                kinds.append(ord("t"))
            elif isinstance(value, bytes):
                kinds.append(ord("b"))
            else:
                kinds.append(KINDS[value])
        column = parsed.column(j)
        # A string array exactly when the column holds no binary and its text is UTF-8.
        all_text = all(not isinstance(v, bytes) for v in expected) and all(
            v.isascii() or _is_utf8(v) for v in expected if isinstance(v, str)
        )
        assert isinstance(column, pa.StringArray) == all_text, (j, expected)
        assert _pylist(column) == expected, j
        assert parsed.kinds[j].tolist() == kinds, j
    for row, found in enumerate(decoded):
        if found is not None:
            assert int(parsed.ends[row]) == int(begins[row]) + found[1], row


def _pylist(column: pa.Array[Any] | list[str | bytes | None]) -> list[object]:
    return column.to_pylist() if isinstance(column, pa.Array) else list(column)


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# --------------------------------------------------------------------- properties


@SETTINGS
@given(batch=batches())
def test_parse_equals_the_codec_row_by_row(batch: Batch) -> None:
    """Well-formed tuples at any offsets: the same values, kinds and ends as read_tuple."""
    parsed = batch.parse()
    assert parsed is not None
    assert len(parsed.ends) == len(batch.at)
    assert_parsed_like_the_codec(batch, parsed)


@st.composite
def damaged(draw: st.DrawFn) -> Batch:
    """A batch with some of its tuples' bytes overwritten, cut short or lengthened."""
    batch = draw(batches())
    present = [row for row, at in enumerate(batch.at) if at >= 0]
    if not present:
        return batch
    payloads = list(batch.payloads)
    for row in draw(st.lists(st.sampled_from(present), min_size=1, max_size=3)):
        data = bytearray(payloads[row])
        at = batch.at[row]
        how = draw(st.sampled_from(["overwrite", "overwrite", "cut", "append"]))
        if how == "cut":
            del data[draw(st.integers(at, len(data))) :]
        elif how == "append":
            data += draw(st.binary(min_size=1, max_size=4))
        else:
            where = draw(st.integers(at, max(at, len(data) - 1)))
            patch = draw(st.binary(min_size=1, max_size=4))
            data[where : where + len(patch)] = patch
        payloads[row] = bytes(data)
    return Batch(payloads, batch.at, batch.columns)


@SETTINGS
@given(batch=damaged())
def test_parse_refuses_exactly_what_the_codec_refuses(batch: Batch) -> None:
    """On arbitrarily damaged tuples, parse_tuples returns None exactly when decoding
    the rows one by one fails (read_tuple raises, or a column count is wrong), and
    otherwise reads what read_tuple reads."""
    parsed = batch.parse()
    assert (parsed is None) == batch.codec_refuses()
    if parsed is not None:
        assert_parsed_like_the_codec(batch, parsed)


# --------------------------------------------------------------------- malformed tuples

# Tuples of an Insert-like payload: 6 header bytes, then count 2, 't' "42", 'n'.
HEADER = b"I\x00\x00\x40\x10N"
GOOD = HEADER + b"\x00\x02" + b"t\x00\x00\x00\x0242" + b"n"


@pytest.mark.parametrize(
    ("payload", "offset"),
    [
        pytest.param(GOOD[:-1], 15, id="truncated-before-a-kind"),
        pytest.param(GOOD[:12], 9, id="truncated-in-a-length"),
        pytest.param(GOOD[:14], 9, id="truncated-in-a-value"),
        pytest.param(GOOD[:7], 6, id="truncated-in-the-count"),
        pytest.param(GOOD[:15] + b"x", 15, id="bad-kind-byte"),
        pytest.param(GOOD[:8] + b"t\xff\xff\xff\xfe42n", 9, id="negative-length"),
        pytest.param(GOOD[:8] + b"t\x80\x00\x00\x0042n", 9, id="most-negative-length"),
        pytest.param(GOOD[:8] + b"t\x00\x00\x00\x0442n", 9, id="length-past-the-end"),
        pytest.param(GOOD[:8] + b"t\x7f\xff\xff\xff42n", 9, id="huge-length"),
        pytest.param(HEADER + b"\xff\xff", 6, id="negative-count"),
    ],
)
def test_malformed_tuples_are_refused_by_both(payload: bytes, offset: int) -> None:
    """parse_tuples returns None, and read_tuple raises a DecodeError at that byte."""
    good = Batch([GOOD, payload, GOOD], [6, 6, 6], 2)
    assert good.parse() is None
    with pytest.raises(DecodeError) as err:
        read_tuple(payload, 6, "Insert")
    assert err.value.offset == offset


@pytest.mark.parametrize("count", [0, 1, 3])
def test_another_column_count_is_refused(count: int) -> None:
    """A well-formed tuple with a column count other than the relation's: None."""
    values: TupleData = ("x",) * count
    out = bytearray(HEADER)
    write_tuple(out, values, "test tuple")
    batch = Batch([GOOD, bytes(out)], [6, 6], 2)
    assert read_tuple(bytes(out), 6, "Insert") == (values, len(out))
    assert batch.parse() is None
    assert Batch([bytes(out)], [6], count).parse() is not None


def test_a_tuple_overrunning_its_limit_is_refused() -> None:
    """A tuple may not run into the next payload, even when the bytes there would
    complete it: each row's limit is its own payload's end."""
    buffer, starts, limits = Batch([GOOD, GOOD], [6, 6], 2).arrays()
    assert parse_tuples(buffer, starts, limits, 2) is not None
    cut = limits.copy()
    cut[0] -= 1  # the first tuple now ends one byte past its limit
    assert parse_tuples(buffer, starts, cut, 2) is None
    with pytest.raises(DecodeError):
        read_tuple(GOOD[:-1], 6, "Insert")
    past = limits.copy()
    past[-1] += 1  # a limit past the buffer
    assert parse_tuples(buffer, starts, past, 2) is None


def test_rows_without_a_tuple_are_skipped_whatever_their_bytes() -> None:
    """A row whose start is negative is never read: kind 0, value None."""
    batch = Batch([b"\xff" * 3, GOOD, b""], [-1, 6, -1], 2)
    parsed = batch.parse()
    assert parsed is not None
    assert [k.tolist() for k in parsed.kinds] == [[0, ord("t"), 0], [0, ord("n"), 0]]
    assert _pylist(parsed.column(0)) == [None, "42", None]
    assert _pylist(parsed.column(1)) == [None, None, None]


def test_an_empty_batch() -> None:
    parsed = Batch([], [], 3).parse()
    assert parsed is not None
    assert len(parsed.ends) == 0
    assert [_pylist(parsed.column(j)) for j in range(3)] == [[], [], []]


def test_binary_and_non_utf8_columns_come_back_as_lists() -> None:
    """A column with a binary value, or text that is not UTF-8, is a list of the codec's
    values (surrogate-escaped text); an all-text UTF-8 column is a string array."""
    rows: list[TupleData] = [("é", b"\x00\x01", "a\udcff"), (None, "b", UNCHANGED_TOAST)]
    payloads = []
    for values in rows:
        out = bytearray(HEADER)
        write_tuple(out, values, "test tuple")
        payloads.append(bytes(out))
    parsed = Batch(payloads, [6, 6], 3).parse()
    assert parsed is not None
    first = parsed.column(0)
    assert isinstance(first, pa.StringArray)
    assert first.to_pylist() == ["é", None]
    assert parsed.column(1) == [b"\x00\x01", "b"]
    assert parsed.column(2) == ["a\udcff", None]


# --------------------------------------------------------------------- through decode_stream

RELATION = Relation(
    16400,
    "public",
    "t",
    "d",
    (RelationColumn(1, "id", 23, -1), RelationColumn(0, "name", 25, -1)),
)
XID = 700


def _malformed_insert(xid: int | None = None) -> bytes:
    """An Insert whose second column has the kind byte 'x'."""
    payload = bytearray(encode(Insert(RELATION.oid, ("2", "b"), xid=xid)))
    kind_at = len(payload) - 6  # the last column: kind, 4-byte length, "b"
    assert payload[kind_at] == ord("t")
    payload[kind_at] = ord("x")
    return bytes(payload)


def _stream(messages: list[PgOutputMessage | bytes]) -> list[tuple[int, bytes]]:
    return [(0x1000 + i, m if isinstance(m, bytes) else encode(m)) for i, m in enumerate(messages)]


def _committed(xid: int, lsn: int, row: tuple[str, str]) -> list[PgOutputMessage | bytes]:
    return [
        Begin(lsn, 0, xid),
        Insert(RELATION.oid, row),
        Commit(0, lsn, lsn + 8, 0),
    ]


def test_a_malformed_insert_in_a_committed_transaction_raises_the_codec_error() -> None:
    """The DecodeError names the message type and the offset of the bad kind byte in the
    Insert's payload."""
    bad = _malformed_insert()
    stream = _stream(
        [
            RELATION,
            Begin(8192, 0, XID),
            Insert(RELATION.oid, ("1", "a")),
            bad,
            Commit(0, 8192, 8200, 0),
        ]
    )
    with pytest.raises(DecodeError, match=r"Insert.* at byte 14: .*kind") as err:
        decode_stream(stream)
    assert err.value.offset == len(bad) - 6 == 14


@pytest.mark.parametrize("end", ["commit", "abort", "abort-subxact"])
def test_a_malformed_insert_in_a_streamed_transaction(end: str) -> None:
    """Changes are kept as bytes and decoded when their rows are flushed: a streamed
    transaction that commits raises the DecodeError; one aborted (or the subtransaction
    holding the bad change, aborted) never is decoded, so nothing is raised and only
    the committed rows come out."""
    sub = XID + 1
    messages: list[PgOutputMessage | bytes] = [
        RELATION,
        StreamStart(XID, True),
        Insert(RELATION.oid, ("1", "a"), xid=XID),
        Insert(RELATION.oid, ("3", "c"), xid=sub),
        _malformed_insert(sub),
        StreamStop(),
    ]
    if end == "commit":
        messages.append(StreamCommit(XID, 0, 0x3000, 0x3008, 0))
    elif end == "abort":
        messages.append(StreamAbort(XID, XID))
    else:
        messages.append(StreamAbort(XID, sub))
        messages.append(StreamCommit(XID, 0, 0x3000, 0x3008, 0))
    messages += _committed(XID + 10, 0x4000, ("9", "z"))
    if end == "commit":
        with pytest.raises(DecodeError, match=r"Insert.* at byte 18: "):
            decode_stream(_stream(messages))
        return
    rows = decode_stream(_stream(messages))["public.t"].to_pylist()
    expected = (
        [{"id": 9, "name": "z"}]
        if end == "abort"
        else [{"id": 1, "name": "a"}, {"id": 9, "name": "z"}]
    )
    assert [{"id": r["id"], "name": r["name"]} for r in rows] == expected


def test_a_malformed_change_header_raises_at_once_even_if_aborted() -> None:
    """Only the tuple waits for the flush: an Insert too short to hold the relation OID
    and 'N' is refused when it arrives."""
    messages: list[PgOutputMessage | bytes] = [
        RELATION,
        StreamStart(XID, True),
        encode(Insert(RELATION.oid, (), xid=XID))[:7],
    ]
    with pytest.raises(DecodeError):
        decode_stream(_stream(messages))


@pytest.mark.parametrize(
    "scenario", ["types", "toast", "replica_identity", "truncate", "streaming"]
)
@pytest.mark.parametrize("option_set", ["v1", "v1-binary", "v4-parallel-2pc-bin"])
def test_the_one_by_one_fallback_gives_the_same_rows(
    scenario: str, option_set: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TableRows decodes row by row with the codec when parse_tuples gives up: on the
    golden streams (updates with old rows, unchanged TOAST, binary values) both give
    the same tables."""
    stream = entries(golden(17, scenario, option_set))
    options = TYPES_OPTIONS if scenario == "types" else None
    columnar = decode_stream(stream, options)
    monkeypatch.setattr(rows_module, "parse_tuples", lambda *args: None)
    one_by_one = decode_stream(stream, options)
    assert columnar.keys() == one_by_one.keys()
    for name, table in columnar.items():
        assert table.schema == one_by_one[name].schema
        assert same(table.to_pylist(), one_by_one[name].to_pylist()), name
