"""What the live-WAL check (:mod:`conformance.live`) compares of a run on each side.

What is compared (:func:`observed`): every message decoded, with what differs between
any two servers taken out — xids, LSN values, timestamps and OIDs — and kept as the
relations a consumer relies on instead: each XLogData's position is 0/0 or not, positions
never go back, Begin's final_lsn is its Commit's commit_lsn, a Commit arrives at its
end_lsn, the slot's confirmed_flush after the run is the last acknowledged end_lsn, its
restart_lsn when the consumer restarts is at or before everything sent again. The
transactions the consumer applies, in order, must then be equal byte for byte.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from codec.pgoutput import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Decoder,
    Prepare,
    RollbackPrepared,
    StreamCommit,
)
from conformance.live_types import _ENDS, LiveRun

__all__ = ["observed", "plain_message"]

_VOLATILE = ("xid", "lsn", "timestamp", "oid")


def plain_message(message: Any) -> dict[str, Any]:
    """A message's fields (a pgoutput message or a Relation's column), with what differs
    between two servers taken out."""
    out: dict[str, Any] = {"type": type(message).__name__}
    for f in dataclasses.fields(message):
        value = getattr(message, f.name)
        if any(word in f.name for word in _VOLATILE):
            value = None if value is None else ("0" if value == 0 else "set")
        elif isinstance(value, tuple):
            value = [plain_message(v) if dataclasses.is_dataclass(v) else v for v in value]
        out[f.name] = value
    return out


def observed(run: LiveRun) -> dict[str, Any]:
    """What a consumer of ``run`` can rely on, equal on any two conforming servers."""
    phases = {"first": run.first, "after_restart": run.after_restart}
    out: dict[str, Any] = {}
    last_commit_end = 0
    decoded: dict[str, list[Any]] = {}
    for name, received in phases.items():
        decoder = Decoder()
        messages = decoded[name] = [decoder.decode(r.payload) for r in received]
        positions = [r.wal_start for r in received if r.wal_start]
        begins = [m for m in messages if isinstance(m, Begin)]
        commits = [(r, m) for r, m in zip(received, messages, strict=True) if isinstance(m, Commit)]
        out[name] = {
            "messages": [plain_message(m) for m in messages],
            "at_0/0": [r.wal_start == 0 for r in received],
            "wal_start_is_wal_end": all(r.wal_start == r.wal_end for r in received),
            "positions_never_go_back": positions == sorted(positions),
            "begin_final_lsn_is_commit_lsn": [
                b.final_lsn == c.commit_lsn for b, (_, c) in zip(begins, commits, strict=False)
            ],
            "commit_sent_at_end_lsn": [r.wal_start == c.end_lsn for r, c in commits],
            "stream_commit_sent_at_end_lsn": [
                r.wal_start == m.end_lsn
                for r, m in zip(received, messages, strict=True)
                if isinstance(m, StreamCommit)
            ],
        }
        ends = [r.wal_start for r in received if r.payload[:1] in _ENDS]
        if name == "after_restart" and ends:
            last_commit_end = ends[-1]
    out["confirmed_flush_is_last_acknowledged_end"] = run.confirmed_flush == last_commit_end
    # Decoding restarts at restart_lsn: at or before everything sent again, the first
    # change of a transaction still open included, however far the slot confirmed.
    again = [r.wal_start for r in run.after_restart if r.wal_start]
    out["restart_lsn_at_or_before_what_comes_again"] = all(run.restart_lsn <= p for p in again)
    # A transaction prepared before the restart and finished after it (two-phase: its
    # PREPARE sent before, not again) is decoded again by the restarted walsender, so
    # restart_lsn stays at or before its first change, sent before the restart.
    finished = {
        m.xid for m in decoded["after_restart"] if isinstance(m, CommitPrepared | RollbackPrepared)
    }
    starts = [
        r.wal_start
        for r, m in zip(run.first, decoded["first"], strict=True)
        if r.wal_start and getattr(m, "xid", None) in finished
    ]
    out["restart_lsn_at_or_before_prepared_finished_after"] = all(
        run.restart_lsn <= p for p in starts
    )
    if run.confirmed_at_restart is not None:
        out["two_phase"] = _two_phase_relations(run, decoded)
    if run.final_restart_lsn is not None:
        # Once it is finished, a running-xacts record confirmed moves restart_lsn to
        # that record, which starts where the finish ended, or later.
        ends = [r.wal_start for r in run.after_restart if r.payload[:1] in _ENDS]
        out["final_restart_lsn_at_or_past_what_came_again"] = run.final_restart_lsn >= ends[0]
    return out


def _two_phase_relations(run: LiveRun, decoded: Mapping[str, list[Any]]) -> dict[str, Any]:
    """Where a two-phase consumer's PREPARE, COMMIT and ROLLBACK PREPARED come, and which
    end the slot had confirmed at the restart: relations, not LSN values. A Begin
    Prepare or Prepare is True when it repeats one sent before the restart exactly."""
    confirmed = run.confirmed_at_restart
    assert confirmed is not None
    lsns = ("prepare_lsn", "end_lsn")
    before: dict[int, tuple[int, ...]] = {}  # xid → position and LSNs of its Begin Prepare
    prepares: dict[int, Prepare] = {}
    out: dict[str, Any] = {}
    for name, received in (("first", run.first), ("after_restart", run.after_restart)):
        rows: list[tuple[object, ...]] = []
        for r, m in zip(received, decoded[name], strict=True):
            if isinstance(m, BeginPrepare):
                where = (r.wal_start, *(getattr(m, f) for f in lsns))
                rows.append(("BeginPrepare", before.get(m.xid) == where))
                before.setdefault(m.xid, where)
            elif isinstance(m, Prepare):
                rows.append(("Prepare", r.wal_start == m.end_lsn, prepares.get(m.xid) == m))
                prepares[m.xid] = m
            elif isinstance(m, CommitPrepared):
                prepared = prepares.get(m.xid)
                follows = prepared is not None and m.commit_lsn >= prepared.end_lsn
                rows.append(("CommitPrepared", r.wal_start == m.end_lsn, follows))
            elif isinstance(m, RollbackPrepared):
                prepared = prepares.get(m.xid)
                follows = prepared is not None and m.prepare_end_lsn == prepared.end_lsn
                rows.append(("RollbackPrepared", r.wal_start == m.rollback_end_lsn, follows))
        out[name] = rows
    ends = [r.wal_start for r in run.first if r.payload[:1] in _ENDS]
    out["confirmed_at_restart_is_end"] = [end == confirmed for end in ends]
    out["confirmed_at_restart_before_prepare"] = [
        confirmed <= p.prepare_lsn for p in prepares.values()
    ]
    return out
