"""The synthetic stream generator: determinism, sharding, validity and expected state."""

from __future__ import annotations

import argparse
import io
import itertools
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codec.pgoutput import (
    UNCHANGED_TOAST,
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Decoder,
    Delete,
    Insert,
    Message,
    Prepare,
    Relation,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    Update,
)
from codec.values import decode_binary, decode_text
from pgwire_mock.streamfile import read_meta, read_stream
from pgwire_mock.synth import (
    OutputSpec,
    Shard,
    SpecError,
    StateDelta,
    Synth,
    SynthError,
    parse_spec,
)
from pgwire_mock.synth.block import Block
from pgwire_mock.synth.rowlog import RowLog
from synth_specs import small_specs

FULL_SPEC = """
tables:
  - name: public.accounts
    weight: 2
    hot_keys: 4
    hot_ratio: 0.3
    columns:
      - {name: id, type: int8, key: true}
      - {name: owner, type: text, null_ratio: 0.2}
      - {name: balance, type: numeric}
      - {name: tags, type: "text[]", null_ratio: 0.1}
      - {name: doc, type: jsonb}
      - {name: note, type: text, toast_ratio: 0.3, toast_size: 2500}
      - {name: updated, type: timestamptz}
  - name: audit.events
    truncate_every: 120
    columns:
      - {name: id, type: uuid, key: true}
      - {name: scores, type: "int4[]"}
      - {name: at, type: timestamp}
      - {name: blob, type: bytea, toast_ratio: 0.2, toast_size: 3000}
operations: {insert: 0.45, update: 0.3, key_update: 0.1, delete: 0.15}
transactions:
  size: {distribution: geometric, mean: 4, max: 20}
  two_phase: {ratio: 0.2, rollback_ratio: 0.4}
messages: {ratio: 0.03, transactional_ratio: 0.5}
large_transactions:
  ratio: 0.3
  chunk: 7
  subtransaction_size: 6
  subtransaction_abort_ratio: 0.4
  abort_ratio: 0.4
  abort_size: 15
block_size: 40
pool_size: 64
"""

OUTPUTS = [
    OutputSpec(proto_version=1),
    OutputSpec(proto_version=1, binary=True, messages=True),
    OutputSpec(proto_version=2, streaming="on", messages=True),
    OutputSpec(proto_version=3, streaming="on", two_phase=True, messages=True),
    OutputSpec(proto_version=4, streaming="parallel", two_phase=True, binary=True, messages=True),
    OutputSpec(proto_version=3, streaming="off", two_phase=True),
]


def _synth(output: OutputSpec, changes: int = 400, seed: int = 11) -> Synth:
    return Synth(parse_spec(FULL_SPEC), seed, changes, output=output)


# --- a reference applier ----------------------------------------------------------------


class Applier:
    """Applies decoded pgoutput to tables the way a subscriber does, checking validity:
    inserts of new keys only, updates and deletes of existing keys only."""

    def __init__(self) -> None:
        self.decoder = Decoder()
        self.relations: dict[int, Relation] = {}
        self.tables: dict[str, dict[object, tuple[object, ...]]] = defaultdict(dict)
        self.txn: list[Any] | None = None
        self.prepared: dict[str, list[Any]] = {}
        self.streams: dict[int, list[tuple[int, Any]]] = defaultdict(list)
        self.stream_xid: int | None = None

    def feed(self, payload: bytes) -> None:
        m = self.decoder.decode(payload)
        assert m.encode() == payload, m
        if isinstance(m, Relation):
            self.relations[m.oid] = m
        elif isinstance(m, Begin | BeginPrepare):
            assert self.txn is None
            self.txn = []
        elif isinstance(m, Commit):
            self._apply(self.txn or [])
            self.txn = None
        elif isinstance(m, Prepare):
            self.prepared[m.gid] = self.txn or []
            self.txn = None
        elif isinstance(m, CommitPrepared):
            self._apply(self.prepared.pop(m.gid))
        elif isinstance(m, RollbackPrepared):
            self.prepared.pop(m.gid)
        elif isinstance(m, StreamStart):
            self.stream_xid = m.xid
        elif isinstance(m, StreamStop):
            self.stream_xid = None
        elif isinstance(m, StreamAbort):
            if m.xid == m.subxid:
                self.streams.pop(m.xid, None)
            else:
                kept = [(x, op) for x, op in self.streams[m.xid] if x != m.subxid]
                self.streams[m.xid] = kept
        elif isinstance(m, StreamCommit):
            self._apply([op for _, op in self.streams.pop(m.xid, [])])
        elif isinstance(m, StreamPrepare):
            self.prepared[m.gid] = [op for _, op in self.streams.pop(m.xid, [])]
        elif isinstance(m, Insert | Update | Delete | Truncate):
            if self.stream_xid is not None:
                assert m.xid is not None
                self.streams[self.stream_xid].append((m.xid, m))
            else:
                assert self.txn is not None, "a change outside a transaction"
                self.txn.append(m)
        else:
            assert isinstance(m, Message)

    def _values(self, rel: Relation, data: tuple[Any, ...]) -> list[object]:
        out: list[object] = []
        for col, v in zip(rel.columns, data, strict=True):
            if isinstance(v, str):
                out.append(decode_text(col.type_oid, v))
            elif isinstance(v, bytes):
                out.append(decode_binary(col.type_oid, v))
            else:
                out.append(v)
        return out

    def _apply(self, ops: list[Any]) -> None:
        for m in ops:
            if isinstance(m, Truncate):
                for oid in m.relation_oids:
                    rel = self.relations[oid]
                    self.tables[f"{rel.namespace}.{rel.relation_name}"].clear()
                continue
            rel = self.relations[m.relation_oid]
            table = self.tables[f"{rel.namespace}.{rel.relation_name}"]
            k = next(i for i, c in enumerate(rel.columns) if c.is_key)
            if isinstance(m, Insert):
                row = self._values(rel, m.new_tuple)
                assert row[k] not in table, f"insert of existing key {row[k]}"
                table[row[k]] = tuple(row)
            elif isinstance(m, Delete):
                assert m.key_tuple is not None
                key = self._values(rel, m.key_tuple)[k]
                assert key in table, f"delete of missing key {key}"
                del table[key]
            else:
                new = self._values(rel, m.new_tuple)
                old_key = new[k] if m.key_tuple is None else self._values(rel, m.key_tuple)[k]
                assert old_key in table, f"update of missing key {old_key}"
                old = table.pop(old_key)
                row = tuple(o if n is UNCHANGED_TOAST else n for o, n in zip(old, new, strict=True))
                assert row[k] not in table
                table[row[k]] = row


def _applied(events: list[tuple[int, bytes]]) -> dict[str, dict[object, tuple[object, ...]]]:
    applier = Applier()
    for _, payload in events:
        applier.feed(payload)
    assert applier.txn is None and not applier.prepared and not applier.streams
    return dict(applier.tables)


def _check_relations_first(events: list[tuple[int, bytes]]) -> None:
    decoder = Decoder()
    seen: set[int] = set()
    for _, payload in events:
        m = decoder.decode(payload)
        if isinstance(m, Relation):
            seen.add(m.oid)
        elif isinstance(m, Insert | Update | Delete):
            assert m.relation_oid in seen, f"{m} before its Relation"
        elif isinstance(m, Truncate):
            assert set(m.relation_oids) <= seen


def _check_state(synth: Synth, events: list[tuple[int, bytes]]) -> None:
    applied = _applied(events)
    expected = synth.expected_state()
    for name, rows in expected.tables.items():
        assert applied.get(name, {}) == dict(rows), name


# --- tests ------------------------------------------------------------------------------


@pytest.mark.parametrize("output", OUTPUTS, ids=lambda o: f"v{o.proto_version}-{o.streaming}")
def test_stream_is_valid_and_matches_expected_state(output: OutputSpec) -> None:
    """Every payload decodes and re-encodes identically, LSNs strictly increase, every
    change follows its table's Relation, and applying the stream (commits, two-phase
    commits and rollbacks, streamed commits and (sub)transaction aborts) gives exactly
    the generator's expected state."""
    synth = _synth(output)
    events = list(synth.stream())
    lsns = [lsn for lsn, _ in events]
    assert all(a < b for a, b in itertools.pairwise(lsns))
    _check_relations_first(events)
    _check_state(synth, events)


def test_the_full_spec_exercises_every_message_kind() -> None:
    """The test spec reaches every kind of pgoutput message the generator can make."""
    kinds: set[str] = set()
    for output in OUTPUTS:
        decoder = Decoder()
        for _, payload in _synth(output, 2000).stream():
            m = decoder.decode(payload)
            kinds.add(type(m).__name__)
            if isinstance(m, Update) and m.key_tuple is not None:
                kinds.add("key update")
            if isinstance(m, Update) and UNCHANGED_TOAST in m.new_tuple:
                kinds.add("unchanged toast")
            if isinstance(m, StreamAbort) and m.xid != m.subxid:
                kinds.add("subtransaction abort")
    assert kinds >= {
        "Begin", "Commit", "Relation", "Insert", "Update", "Delete", "Truncate", "Message",
        "StreamStart", "StreamStop", "StreamCommit", "StreamAbort", "StreamPrepare",
        "BeginPrepare", "Prepare", "CommitPrepared", "RollbackPrepared",
        "key update", "unchanged toast", "subtransaction abort",
    }  # fmt: skip


def test_same_seed_same_bytes_other_seed_other_bytes() -> None:
    """Two runs with the same seed produce the same bytes; another seed differs."""
    output = OUTPUTS[4]
    assert list(_synth(output).stream()) == list(_synth(output).stream())
    assert list(_synth(output).stream()) != list(_synth(output, seed=12).stream())


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("changes", [0, 1, 39, 40, 41, 333])
def test_shards_concatenate_to_the_single_stream(n: int, changes: int) -> None:
    """Shards 0..n-1, each generated by a fresh generator and concatenated in order, are
    the single-process stream byte for byte; each shard has the Relations it needs."""
    output = OUTPUTS[3]
    whole = list(_synth(output, changes).stream())
    parts = [list(_synth(output, changes).stream(Shard(k, n))) for k in range(n)]
    assert [e for part in parts for e in part] == whole
    for part in parts:
        _check_relations_first(part)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_shard_state_deltas_merge_to_the_whole_state(n: int) -> None:
    """Deltas computed per shard, merged in order, equal the single-process delta."""
    synth = _synth(OUTPUTS[4], 500)
    merged = StateDelta.merge(synth.expected_delta(Shard(k, n)) for k in range(n))
    assert synth.expected_state(merged).tables == synth.expected_state().tables


def test_logical_content_does_not_depend_on_output_options() -> None:
    """Text, binary, streamed or not: the expected state is the same."""
    states = [_synth(o).expected_state().tables for o in OUTPUTS]
    assert all(s == states[0] for s in states)


def test_lsns_and_timestamps_are_functions_of_position() -> None:
    """Commit timestamps never decrease, follow changes_per_second, and LSNs of a block
    start at start_lsn + block * 2**32."""
    synth = _synth(OUTPUTS[0], 400)
    decoder = Decoder()
    stamps = [
        m.commit_timestamp for _, p in synth.stream() if isinstance(m := decoder.decode(p), Commit)
    ]
    assert stamps == sorted(stamps)
    per_change = 1_000_000 / synth.spec.changes_per_second
    assert stamps[-1] - stamps[0] <= 400 * per_change
    assert synth.block(3)[0][0] == synth.spec.start_lsn + 3 * (1 << 32)


# --- spec errors --------------------------------------------------------------------------

_BASE: dict[str, Any] = {
    "tables": [
        {
            "name": "t",
            "columns": [
                {"name": "id", "type": "int8", "key": True},
                {"name": "a", "type": "text"},
                {"name": "b", "type": "int4"},
            ],
        }
    ]
}


def _with(path: list[Any], value: Any) -> str:
    data = json.loads(json.dumps(_BASE))
    node = data
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return yaml.safe_dump(data)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            ["tables", 0, "columns", 2, "type"],
            "int5",
            "spec.yaml: tables[0].columns[2].type: unknown type 'int5'",
        ),
        (
            ["tables", 0, "columns", 1, "null_ratio"],
            1.5,
            "spec.yaml: tables[0].columns[1].null_ratio: must be in [0, 1], got 1.5",
        ),
        (
            ["tables", 0, "columns", 1, "colour"],
            "red",
            "spec.yaml: tables[0].columns[1].colour: unknown field",
        ),
        (
            ["tables", 0, "columns", 0, "type"],
            "float8",
            "spec.yaml: tables[0].columns[0].type: a key column must be one of int4, int8, "
            "text, uuid, varchar, not float8",
        ),
        (
            ["operations"],
            {"insert": 0.1, "delete": 0.5},
            "spec.yaml: operations.delete: delete + key_update must not exceed insert "
            "(deletes take the oldest rows, which inserts must have made)",
        ),
        (
            ["output"],
            {"proto_version": 1, "streaming": "on"},
            "spec.yaml: output.streaming: streaming needs proto_version 2 or more",
        ),
        (
            ["transactions"],
            {"size": {"distribution": "zipf"}},
            "spec.yaml: transactions.size.distribution: expected one of fixed, uniform, "
            "geometric, found 'zipf'",
        ),
        (["tables"], [], "spec.yaml: tables: expected a non-empty list, found list"),
        (["server_version"], 19, "spec.yaml: server_version: must be in [14, 18], got 19"),
    ],
)
def test_spec_errors_are_one_line_naming_the_place(
    path: list[Any], value: Any, message: str
) -> None:
    """A bad spec raises SpecError whose text is one line: file, path, problem."""
    with pytest.raises(SpecError) as info:
        parse_spec(_with(path, value), source="spec.yaml")
    assert str(info.value) == message
    assert "\n" not in str(info.value)


def test_spec_syntax_errors_name_the_line() -> None:
    """YAML that does not parse is reported with its line."""
    with pytest.raises(SpecError, match=r"^s\.yaml: line 2: not YAML"):
        parse_spec("tables: 1\n  b: 2\n", source="s.yaml")


def test_int4_keys_refuse_runs_they_cannot_hold() -> None:
    """An int4 key cannot number 2.5 billion inserted rows: the generator says so first."""
    spec = parse_spec(_with(["tables", 0, "columns", 0, "type"], "int4"))
    with pytest.raises(SynthError, match="int4 key column cannot hold"):
        Synth(spec, 1, 5_000_000_000)


# --- the CLI -------------------------------------------------------------------------------


def _run_cli(argv: list[str]) -> int:
    from pgwire_mock.synth.cli import add_command

    parser = argparse.ArgumentParser(prog="pgwire-mock")
    add_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["synth", *argv])
    status: int = args.run(args)
    return status


def test_cli_writes_a_recording_read_stream_reads_back(tmp_path: Path) -> None:
    """``synth --out`` writes JSON Lines with a meta line; read_stream gives back the
    generator's events, load_recording accepts it, and shard files concatenate to it."""
    from pgwire_mock.script import load_recording

    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(
        FULL_SPEC.replace(
            "block_size: 40", "block_size: 40\noutput: {proto_version: 2, streaming: 'on'}"
        )
    )
    out = tmp_path / "all.jsonl"
    expected = tmp_path / "expected.jsonl"
    common = ["--spec", str(spec_path), "--seed", "5", "--changes", "300"]
    assert _run_cli([*common, "--out", str(out), "--expected", str(expected)]) == 0
    with out.open("rb") as f:
        entries = [(e.lsn, e.payload) for e in read_stream(f)]
    synth = Synth(parse_spec(spec_path.read_text()), 5, 300)
    assert entries == list(synth.stream())
    with out.open("rb") as f:
        meta = read_meta(f)
    assert meta is not None and meta["options"]["streaming"] == "on"
    assert len(load_recording(out).entries) == len(entries)
    rows = [json.loads(line) for line in expected.read_text().splitlines()]
    assert len(rows) == sum(len(r) for r in synth.expected_state().tables.values())

    shards = []
    for k in range(3):
        part = tmp_path / f"part{k}.jsonl"
        assert _run_cli([*common, "--out", str(part), "--shard", f"{k}/3"]) == 0
        with part.open("rb") as f:
            shards += [(e.lsn, e.payload) for e in read_stream(f)]
    assert shards == entries


def test_cli_bad_spec_is_one_command_error(tmp_path: Path) -> None:
    """A bad spec ends the command with one CommandError line naming the place."""
    from pgwire_mock.cli import CommandError

    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(_with(["tables", 0, "columns", 2, "type"], "int5"))
    with pytest.raises(CommandError) as info:
        _run_cli(["--spec", str(spec_path), "--seed", "1", "--changes", "10", "--out", "-"])
    assert str(info.value) == f"{spec_path}: tables[0].columns[2].type: unknown type 'int5'"


def test_progress_is_a_rewritten_line_on_a_terminal_and_plain_lines_otherwise() -> None:
    """On a TTY the progress line starts with \\r; elsewhere each update is a line."""
    from pgwire_mock.synth.cli import Progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty, plain = Tty(), io.StringIO()
    for stream in (tty, plain):
        progress = Progress(10, stream)
        progress.update(10, 1000, final=True)
    assert tty.getvalue().startswith("\rsynth: 100.0% (10/10 blocks), 1000 events")
    assert plain.getvalue().startswith("synth: 100.0%") and plain.getvalue().endswith("\n")


# --- random small specs ----------------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_specs(), st.integers(0, 2**32), st.integers(0, 120), st.integers(2, 4))
def test_random_small_specs(data: dict[str, Any], seed: int, changes: int, n: int) -> None:
    """For random small specs: the stream is valid, applying it gives the expected state,
    and n shards concatenate to the single stream."""
    synth = Synth(parse_spec(json.dumps(data), json_only=True), seed, changes)
    events = list(synth.stream())
    assert [e for k in range(n) for e in synth.stream(Shard(k, n))] == events
    lsns = [lsn for lsn, _ in events]
    assert all(a < b for a, b in itertools.pairwise(lsns))
    _check_relations_first(events)
    _check_state(synth, events)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    small_specs(),
    st.integers(0, 2**32),
    st.lists(st.tuples(st.integers(-50, 10**6), st.booleans()), min_size=1, max_size=20),
    st.booleans(),
)
def test_rows_made_at_once_equal_rows_made_one_by_one(
    data: dict[str, Any], seed: int, rows: list[tuple[int, bool]], track: bool
) -> None:
    """The block-at-a-time rows (bytes, sizes only, TOAST entries, values) are what the
    change-at-a-time path assembles from the same draws."""
    synth = Synth(parse_spec(json.dumps(data), json_only=True), seed, 10)
    kids = np.array([kid for kid, _ in rows], np.int64)
    updates = np.array([update for _, update in rows])
    for t in synth.tables:
        block = Block(synth, 0, StateDelta() if track else None)
        made = block.rows(t, kids, updates, [b"H"] * len(rows))
        sized = Block(synth, 0, None, RowLog([t.index])).rows(t, kids, updates, None)
        chunk = block.chunks[t.index]
        assert chunk is not None and made.data is not None and sized.sizes is not None
        for j, (kid, update) in enumerate(rows):
            row, values = block.assemble(t, chunk, j, kid, update)
            assert made.data[j] == b"H" + row
            assert sized.sizes[j] == len(row)
            assert (made.toast or sized.toast or [()] * len(rows))[j] == block.toast_at
            assert made.toast == sized.toast
            if track:
                assert made.values is not None and made.values[j] == values


def test_every_emulated_major_is_a_valid_server_version() -> None:
    """The spec's bound follows the fake's majors (kept apart to spare executors Twisted)."""
    from pgwire_mock.server import MAJORS

    for major in MAJORS:
        assert parse_spec(_with(["server_version"], major)).server_version == major
