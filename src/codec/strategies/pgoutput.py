"""Hypothesis strategies for pgoutput messages and whole transactions.

Use them in your own property tests, e.g. to check that a consumer survives any valid
stream a PostgreSQL server could send::

    from hypothesis import given
    from codec.pgoutput import Decoder, encode
    from codec.strategies import transactions

    @given(transactions(protocol_version=2, streaming=True))
    def test_consumer_applies_any_transaction(messages):
        decoder = Decoder()
        for message in messages:
            my_consumer.handle(decoder.decode(encode(message)))

What a protocol version allows: 1 has no streaming and no two-phase; 2 adds streamed
transactions (S, E, c, A); 3 adds two-phase commit (b, P, K, r, p); 4 adds Stream Abort
with its abort LSN and timestamp (``streaming=parallel``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hypothesis import strategies as st

from codec.pgoutput import (
    UNCHANGED_TOAST,
    Begin,
    BeginPrepare,
    ColumnValue,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    Message,
    Origin,
    PgOutputMessage,
    Prepare,
    Relation,
    RelationColumn,
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

__all__ = [
    "column_values",
    "lsns",
    "messages",
    "relations",
    "timestamps",
    "transactions",
    "tuple_data",
    "xids",
]

MAX_PROTOCOL_VERSION = 4

#: Valid LSNs (any uint64 but 0, which pgoutput never sends as a position).
lsns = st.integers(min_value=1, max_value=(1 << 64) - 1)
#: Transaction ids as sent on the wire (uint32; 0 is InvalidTransactionId).
xids = st.integers(min_value=1, max_value=(1 << 32) - 1)
#: PostgreSQL timestamps: int64 microseconds since 2000-01-01 UTC.
timestamps = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
_oids = st.integers(min_value=1, max_value=(1 << 32) - 1)
_names = st.text(st.characters(codec="utf-8", exclude_characters="\0"), min_size=1, max_size=63)
_text = st.text(st.characters(codec="utf-8"), max_size=40)


def column_values(*, unchanged_toast: bool = True) -> st.SearchStrategy[ColumnValue]:
    """One column value: NULL, unchanged TOAST, text (``str``) or binary (``bytes``)."""
    kinds: list[st.SearchStrategy[ColumnValue]] = [st.none(), _text, st.binary(max_size=40)]
    if unchanged_toast:
        kinds.append(st.just(UNCHANGED_TOAST))
    return st.one_of(kinds)


def tuple_data(
    columns: int | None = None, *, unchanged_toast: bool = True
) -> st.SearchStrategy[TupleData]:
    """A TupleData with ``columns`` values (any count up to 12 if None)."""
    low, high = (0, 12) if columns is None else (columns, columns)
    values = st.lists(column_values(unchanged_toast=unchanged_toast), min_size=low, max_size=high)
    return values.map(tuple)


@st.composite
def relations(draw: st.DrawFn, xid: int | None = None) -> Relation:
    """A Relation message with 1 to 8 columns."""
    columns = draw(
        st.lists(
            st.builds(
                RelationColumn,
                flags=st.sampled_from([0, 1]),
                name=_names,
                type_oid=_oids,
                type_modifier=st.integers(min_value=-1, max_value=(1 << 31) - 1),
            ),
            min_size=1,
            max_size=8,
        )
    )
    return Relation(
        oid=draw(_oids),
        namespace=draw(st.one_of(st.just(""), st.just("public"), _names)),
        relation_name=draw(_names),
        replica_identity=draw(st.sampled_from("dnfi")),
        columns=tuple(columns),
        xid=xid,
    )


@st.composite
def _change(draw: st.DrawFn, relation: Relation, xid: int | None) -> PgOutputMessage:
    """Insert, Update or Delete of ``relation``, with tuples as wide as its columns."""
    width = len(relation.columns)
    row = tuple_data(width, unchanged_toast=False)
    kind = draw(st.sampled_from(["insert", "update", "update_key", "update_old", "delete"]))
    if kind == "insert":
        return Insert(relation.oid, draw(row), xid=xid)
    if kind.startswith("update"):
        new = draw(tuple_data(width))  # unchanged TOAST only ever appears in a new tuple
        if kind == "update_key":
            return Update(relation.oid, new, key_tuple=draw(row), xid=xid)
        if kind == "update_old":
            return Update(relation.oid, new, old_tuple=draw(row), xid=xid)
        return Update(relation.oid, new, xid=xid)
    if draw(st.booleans()):
        return Delete(relation.oid, key_tuple=draw(row), xid=xid)
    return Delete(relation.oid, old_tuple=draw(row), xid=xid)


def _messages(xid: int | None) -> st.SearchStrategy[Message]:
    return st.builds(
        Message,
        flags=st.sampled_from([0, 1]),
        lsn=lsns,
        prefix=_names,
        content=st.binary(max_size=64),
        xid=st.just(xid),
    )


def _streamable(xid: int | None) -> st.SearchStrategy[PgOutputMessage]:
    """Messages that carry ``xid`` inside a stream (protocol 2+) and none outside."""
    return st.one_of(
        relations(xid=xid),
        st.builds(Type, oid=_oids, namespace=_names, name=_names, xid=st.just(xid)),
        relations().flatmap(lambda r: _change(r, xid)),
        st.builds(
            Truncate,
            options=st.integers(0, 3),
            relation_oids=st.lists(_oids, min_size=1, max_size=5).map(tuple),
            xid=st.just(xid),
        ),
        _messages(xid),
    )


def _check_version(protocol_version: int) -> None:
    if not 1 <= protocol_version <= MAX_PROTOCOL_VERSION:
        raise ValueError(f"protocol_version must be 1 to {MAX_PROTOCOL_VERSION}")


def messages(
    protocol_version: int = MAX_PROTOCOL_VERSION, *, in_stream: bool = False
) -> st.SearchStrategy[PgOutputMessage]:
    """Any single message that ``protocol_version`` allows.

    With ``in_stream=True`` the messages are those a server sends between Stream Start and
    Stream Stop, carrying their xid: decode them with a Decoder that has seen Stream Start.
    """
    _check_version(protocol_version)
    if in_stream:
        if protocol_version < 2:
            raise ValueError("protocol version 1 has no streamed transactions")
        return xids.flatmap(_streamable)
    options: list[st.SearchStrategy[PgOutputMessage]] = [
        st.builds(Begin, final_lsn=lsns, commit_timestamp=timestamps, xid=xids),
        st.builds(
            Commit, flags=st.just(0), commit_lsn=lsns, end_lsn=lsns, commit_timestamp=timestamps
        ),
        st.builds(Origin, commit_lsn=st.integers(0, (1 << 64) - 1), name=_names),
        _streamable(None),
    ]
    if protocol_version >= 2:
        abort_info = protocol_version >= 4
        options += [
            st.builds(StreamStart, xid=xids, first_segment=st.booleans()),
            st.just(StreamStop()),
            st.builds(
                StreamCommit,
                xid=xids,
                flags=st.just(0),
                commit_lsn=lsns,
                end_lsn=lsns,
                commit_timestamp=timestamps,
            ),
            _stream_aborts(abort_info),
        ]
    if protocol_version >= 3:
        options += [
            st.builds(
                BeginPrepare,
                prepare_lsn=lsns,
                end_lsn=lsns,
                prepare_timestamp=timestamps,
                xid=xids,
                gid=_names,
            ),
            *(
                st.builds(cls, st.just(0), lsns, lsns, timestamps, xids, _names)
                for cls in (Prepare, CommitPrepared, StreamPrepare)
            ),
            st.builds(
                RollbackPrepared,
                flags=st.just(0),
                prepare_end_lsn=lsns,
                rollback_end_lsn=lsns,
                prepare_timestamp=timestamps,
                rollback_timestamp=timestamps,
                xid=xids,
                gid=_names,
            ),
        ]
    return st.one_of(options)


def _stream_aborts(abort_info: bool) -> st.SearchStrategy[StreamAbort]:
    plain = st.builds(StreamAbort, xid=xids, subxid=xids)
    if not abort_info:
        return plain
    return st.one_of(
        plain,
        st.builds(StreamAbort, xid=xids, subxid=xids, abort_lsn=lsns, abort_timestamp=timestamps),
    )


@st.composite
def transactions(
    draw: st.DrawFn,
    protocol_version: int = MAX_PROTOCOL_VERSION,
    *,
    streaming: bool | None = None,
    two_phase: bool | None = None,
) -> list[PgOutputMessage]:
    """One whole transaction as a server sends it, in order.

    A plain transaction is Begin, optionally Origin, Relation messages before the first
    change to each relation, the changes, and Commit. ``streaming=True`` (protocol 2+)
    gives Stream Start/Stop blocks whose messages carry the xid, ending in Stream Commit
    or Stream Abort (of the whole transaction or of a subtransaction). ``two_phase=True``
    (protocol 3+) gives Begin Prepare … Prepare followed by Commit Prepared or Rollback
    Prepared, or, combined with streaming, Stream Prepare. ``None`` lets Hypothesis choose
    among what the version allows.
    """
    _check_version(protocol_version)
    if streaming is None:
        streaming = protocol_version >= 2 and draw(st.booleans())
    if two_phase is None:
        two_phase = protocol_version >= 3 and draw(st.booleans())
    if streaming and protocol_version < 2:
        raise ValueError("streamed transactions need protocol version 2 or higher")
    if two_phase and protocol_version < 3:
        raise ValueError("two-phase transactions need protocol version 3 or higher")

    xid = draw(xids)
    begin_lsn = draw(st.integers(min_value=1, max_value=(1 << 62)))
    commit_lsn = begin_lsn + draw(st.integers(min_value=1, max_value=1 << 20))
    end_lsn = commit_lsn + draw(st.integers(min_value=1, max_value=1 << 10))
    when = draw(st.integers(min_value=0, max_value=(1 << 60)))
    gid = draw(_names)
    rels: Sequence[Relation] = draw(st.lists(relations(), min_size=1, max_size=3))
    origin = draw(st.none() | _names)

    # Inside a stream, a change made in a subtransaction carries the subtransaction's
    # xid, not the top-level one (pgoutput.c: change->txn->xid).
    subxids = draw(st.lists(xids.filter(lambda x: x != xid), max_size=2, unique=True))

    def body(stream_xid: int | None) -> list[PgOutputMessage]:
        out: list[PgOutputMessage] = []
        announced: set[int] = set()
        for relation in draw(st.lists(st.sampled_from(rels), max_size=6)):
            if relation.oid not in announced:
                announced.add(relation.oid)
                out.append(dataclasses.replace(relation, xid=stream_xid))
            change_xid = stream_xid
            if stream_xid is not None and subxids:
                change_xid = draw(st.sampled_from([stream_xid, *subxids]))
            out.append(draw(_change(relation, change_xid)))
        if draw(st.booleans()):
            out.append(dataclasses.replace(draw(_messages(stream_xid)), flags=1))
        return out

    if not streaming:
        head: list[PgOutputMessage]
        if two_phase:
            head = [BeginPrepare(commit_lsn, end_lsn, when, xid, gid)]
        else:
            head = [Begin(commit_lsn, when, xid)]
        if origin is not None:
            head.append(Origin(begin_lsn, origin))
        txn = head + body(None)
        if not two_phase:
            return [*txn, Commit(0, commit_lsn, end_lsn, when)]
        txn.append(Prepare(0, commit_lsn, end_lsn, when, xid, gid))
        return [*txn, draw(_finish_prepared(xid, gid, end_lsn, when))]

    txn = []
    for index in range(draw(st.integers(min_value=1, max_value=3))):
        txn.append(StreamStart(xid, first_segment=index == 0))
        if index == 0 and origin is not None:
            txn.append(Origin(0, origin))  # pgoutput sends no origin LSN for streams
        txn += body(xid)
        txn.append(StreamStop())
    if two_phase:
        txn.append(StreamPrepare(0, commit_lsn, end_lsn, when, xid, gid))
        return [*txn, draw(_finish_prepared(xid, gid, end_lsn, when))]
    ending = draw(st.sampled_from(["commit", "abort", "abort_subxact"]))
    if ending == "commit":
        return [*txn, StreamCommit(xid, 0, commit_lsn, end_lsn, when)]
    subxid = xid if ending == "abort" or not subxids else draw(st.sampled_from(subxids))
    if protocol_version >= 4 and draw(st.booleans()):
        return [*txn, StreamAbort(xid, subxid, commit_lsn, when)]
    return [*txn, StreamAbort(xid, subxid)]


@st.composite
def _finish_prepared(
    draw: st.DrawFn, xid: int, gid: str, prepare_end: int, prepared_at: int
) -> PgOutputMessage:
    later = prepare_end + draw(st.integers(min_value=1, max_value=1 << 20))
    finished_at = prepared_at + draw(st.integers(min_value=0, max_value=1 << 30))
    if draw(st.booleans()):
        return CommitPrepared(0, later, later + 8, finished_at, xid, gid)
    return RollbackPrepared(0, prepare_end, later + 8, prepared_at, finished_at, xid, gid)
