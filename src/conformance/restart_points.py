"""What the resume check receives, where it restarts and who stops: the XLogData of a
stream (:class:`Received`), the restart positions chosen in a straight stream
(:func:`restart_points`, :func:`sample`) and the consumers that acknowledge them
(:data:`CONSUMERS`). The rules are :mod:`conformance.resume`'s docstring."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from codec import CodecError
from codec import pgoutput as po
from codec.values import LSN
from pgwire_mock.client import WalData

__all__ = [
    "CHANGE_TAGS",
    "CONSUMERS",
    "PG_RECVLOGICAL",
    "PSYCOPG2",
    "Consumer",
    "Received",
    "RestartPoint",
    "decode_all",
    "restart_points",
    "sample",
]


# --------------------------------------------------------------------------------------
# What is received, where it is stopped, who stops it


@dataclass(frozen=True, slots=True)
class Received:
    """One XLogData: its positions and its pgoutput payload (send time left out)."""

    wal_start: LSN
    wal_end: LSN
    payload: bytes

    @property
    def tag(self) -> str:
        return chr(self.payload[0]) if self.payload else ""


@dataclass(frozen=True, slots=True)
class RestartPoint:
    """A position to acknowledge and restart at, and why it was chosen.

    ``inside`` is true when P lies inside a streamed or prepared transaction or next to
    a Stream Abort (see :func:`sample`); ``index`` is the straight stream's index of the
    first message acknowledged at P.
    """

    lsn: LSN
    reasons: tuple[str, ...]
    inside: bool
    index: int

    def label(self) -> str:
        return f"{self.lsn} ({'; '.join(self.reasons)})"


@dataclass(frozen=True, slots=True)
class Consumer:
    """How a consumer acknowledges and stops (see :mod:`conformance.resume`)."""

    name: str
    #: Which XLogData field is acknowledged: ``wal_end`` or ``data_start`` (wal_start).
    ack: Literal["wal_end", "data_start"]
    #: A status update after every message (psycopg2) or once before stopping.
    feedback_each_message: bool
    #: CopyDone and wait for the server, or Terminate and close.
    stop: Literal["copydone", "close"]
    #: Before closing, send the last update with reply_requested and wait (up to 2 s)
    #: until the slot shows it. Without it the close races the update: closing a socket
    #: with unread data makes the kernel send RST, and PostgreSQL then never reads the
    #: update and Terminate still in its receive buffer; confirmed_flush stays at an
    #: earlier update (measured on 17: lost at the first position of every streamed
    #: cell tried). That is real consumer behaviour, but not a deterministic one.
    confirm_before_close: bool = True

    def ack_value(self, data: WalData) -> LSN:
        return data.wal_end if self.ack == "wal_end" else data.wal_start


PG_RECVLOGICAL: Final = Consumer("pg_recvlogical", "wal_end", False, "copydone")
PSYCOPG2: Final = Consumer("psycopg2", "data_start", True, "close")
CONSUMERS: Final[tuple[Consumer, ...]] = (PG_RECVLOGICAL, PSYCOPG2)


# --------------------------------------------------------------------------------------
# Choosing positions

_BOUNDARY_TAGS: Final[Mapping[str, str]] = {
    "C": "Commit",
    "c": "Stream Commit",
    "P": "Prepare",
    "p": "Stream Prepare",
    "K": "Commit Prepared",
    "r": "Rollback Prepared",
}
CHANGE_TAGS: Final = frozenset("IUDTM")


def decode_all(payloads: Sequence[bytes]) -> list[po.PgOutputMessage | None]:
    """Each payload decoded in order by one Decoder (None where it does not decode)."""
    decoder = po.Decoder()
    out: list[po.PgOutputMessage | None] = []
    for payload in payloads:
        try:
            out.append(decoder.decode(payload))
        except CodecError:
            out.append(None)
    return out


def restart_points(stream: Sequence[Received]) -> tuple[RestartPoint, ...]:
    """The positions of :mod:`conformance.resume`, chosen in a walsender's straight ``stream``.

    Positions are XLogData ``wal_start`` values (never 0/0); a position chosen for
    several reasons appears once, with all of them, in stream order.
    """
    marks: dict[int, tuple[list[str], list[bool], int]] = {}

    def mark(index: int, why: str, inside: bool) -> None:
        lsn = int(stream[index].wal_start)
        if not lsn:
            return
        reasons, flags, _ = marks.setdefault(lsn, ([], [], index))
        if why not in reasons:
            reasons.append(why)
        flags.append(inside)

    decoded = decode_all([r.payload for r in stream])
    in_transaction = False  # between Begin/Begin Prepare and Commit/Prepare
    prepared: list[int] | None = None  # change indexes of the open Begin Prepare
    blocks: dict[int, list[int]] = {}  # stream block changes by xid
    block_xid: int | None = None
    last_positioned: int | None = None
    number = {"block": 0, "prepared": 0}
    for index, (received, message) in enumerate(zip(stream, decoded, strict=True)):
        tag = received.tag
        if tag == "B":
            in_transaction = True
        elif tag == "b":
            in_transaction = True
            prepared = []
            number["prepared"] += 1
        elif tag in _BOUNDARY_TAGS:
            mark(index, _BOUNDARY_TAGS[tag], tag == "P")
            if tag == "P" and prepared is not None:
                n = number["prepared"]
                if prepared:
                    mark(prepared[0], f"first change of prepared transaction {n}", True)
                    mark(prepared[len(prepared) // 2], f"middle of prepared transaction {n}", True)
                prepared = None
            if tag in "CP":
                in_transaction = False
        elif tag == "S":
            number["block"] += 1
            block_xid = message.xid if isinstance(message, po.StreamStart) else -1
            blocks[block_xid] = []
            mark(index, f"Stream Start of block {number['block']}", True)
        elif tag == "E":
            changes = blocks.get(block_xid if block_xid is not None else -1, [])
            if changes:
                mark(changes[len(changes) // 2], f"middle of block {number['block']}", True)
            mark(index, f"Stream Stop of block {number['block']}", True)
            block_xid = None
        elif tag == "A":
            top = isinstance(message, po.StreamAbort) and message.xid == message.subxid
            if top or message is None:
                mark(index, "Stream Abort", False)
            else:
                if last_positioned is not None:
                    mark(last_positioned, "right before a subtransaction's Stream Abort", True)
                mark(index, "subtransaction's Stream Abort", True)
        elif (
            isinstance(message, po.Message)
            and not message.flags & 1
            and not in_transaction
            and block_xid is None
        ):
            mark(index, "non-transactional Message", False)
        if tag in CHANGE_TAGS:
            if block_xid is not None:
                blocks[block_xid].append(index)
            elif prepared is not None:
                prepared.append(index)
        if received.wal_start:
            last_positioned = index
    ordered = sorted(marks.items())
    return tuple(
        RestartPoint(LSN(lsn), tuple(reasons), any(flags), first)
        for lsn, (reasons, flags, first) in ordered
    )


def _new_relations_after(stream: Sequence[Received], points: Sequence[RestartPoint]) -> set[int]:
    """Positions whose next messages bring a Relation the stream had not sent before."""
    out: set[int] = set()
    seen: set[bytes] = set()
    relation_at: list[int] = []  # indexes of Relation messages naming a new relation
    decoded = decode_all([r.payload for r in stream])
    for index, message in enumerate(decoded):
        if isinstance(message, po.Relation):
            key = str(message.oid).encode()
            if key not in seen:
                seen.add(key)
                relation_at.append(index)
    for point, following in itertools.pairwise(points):
        if any(point.index < r < following.index for r in relation_at):
            out.add(int(point.lsn))
    return out


def sample(
    points: Sequence[RestartPoint],
    stream: Sequence[Received] = (),
    *,
    full: bool = True,
    consumers: Sequence[Consumer] = CONSUMERS,
) -> list[tuple[RestartPoint, Consumer]]:
    """The (position, consumer) pairs to try: all of them, or with ``full=False`` the
    sample described in :mod:`conformance.resume`."""
    if full:
        return [(p, c) for p in points for c in consumers]
    boundaries = [p for p in points if not p.inside]
    keep = {int(p.lsn) for p in boundaries[:2] + boundaries[-1:]}
    keep |= _new_relations_after(stream, boundaries)
    pairs: list[tuple[RestartPoint, Consumer]] = []
    turn = 0
    for point in points:
        if point.inside:
            pairs.extend((point, c) for c in consumers)
        elif int(point.lsn) in keep:
            pairs.append((point, consumers[turn % len(consumers)]))
            turn += 1
    return pairs
