"""The generator's bulk encoders (rows, keys, Begin/Commit) equal encoding one by one."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from codec.pgoutput import encode_begin, encode_commit
from pgwire_mock.synth.fastblock import encode_begins, encode_commits
from pgwire_mock.synth.rowparts import RowParts
from pgwire_mock.synth.values import KeyCodec

_ENTRY = st.binary(max_size=12).map(lambda b: (None, b))
_POOLS = st.lists(st.lists(_ENTRY, min_size=1, max_size=6), max_size=5)


@given(
    pools=_POOLS,
    cuts=st.lists(st.integers(0, 5), max_size=3),
    head=st.binary(max_size=3),
    m=st.integers(1, 40),
    seed=st.integers(0, 2**32),
)
def test_gathered_rows_equal_joined_entries(
    pools: list[list[tuple[None, bytes]]], cuts: list[int], head: bytes, m: int, seed: int
) -> None:
    # Split the pool columns into runs at ``cuts`` (dynamic columns sit between runs).
    bounds = sorted({min(c, len(pools)) for c in cuts})
    edges = [0, *bounds, len(pools)]
    runs = [list(range(a, b)) for a, b in itertools.pairwise(edges)]
    parts = RowParts(head, pools, runs)
    for _ in range(2):  # twice: a draw leaves nothing behind
        chunk = parts.draw(np.random.default_rng(seed), m)
        assert chunk.picks.shape == (m, len(pools))
        for j in range(m):
            for r, columns in enumerate(runs):
                expected = (head if r == 0 else b"") + b"".join(
                    pools[c][int(chunk.picks[j, c])][1] for c in columns
                )
                assert chunk.runs[r][j] == expected


def test_draws_are_deterministic_and_cover_the_pool() -> None:
    pool = [(i, bytes([65 + i])) for i in range(8)]
    parts = RowParts(b"\x00\x01", [pool], [[], [0]])
    a = parts.draw(np.random.default_rng(7), 500)
    b = parts.draw(np.random.default_rng(7), 500)
    assert a.runs == b.runs and (a.picks == b.picks).all()
    assert set(a.runs[0]) == {b"\x00\x01"}
    assert {row for row in a.runs[1]} == {bytes([65 + i]) for i in range(8)}


@given(
    type_name=st.sampled_from(["int4", "int8", "text", "varchar", "uuid"]),
    binary=st.booleans(),
    ids=st.lists(st.integers(-(2**31), 2**31 - 1), max_size=20),
)
def test_many_key_bytes_equal_one_at_a_time(type_name: str, binary: bool, ids: list[int]) -> None:
    codec = KeyCodec(type_name, binary)
    assert codec.many_column_bytes(ids) == [codec.column_bytes(i) for i in ids]
    joined = list(map(b"".join, zip(*codec.many_column_parts(ids), strict=True)))
    assert joined == [codec.column_bytes(i) for i in ids]


@given(
    sizes=st.lists(st.integers(1, 2000), min_size=1, max_size=6),
    m=st.integers(1, 300),
    seed=st.integers(0, 2**32),
)
def test_one_bound_draws_what_a_bound_per_column_draws(sizes: list[int], m: int, seed: int) -> None:
    # RowParts draws equal-sized pools with one scalar bound (faster): streams made before
    # and after that change, and on any machine, must hold the same picks.
    per_column = np.random.default_rng(seed).integers(0, np.array(sizes), size=(m, len(sizes)))
    one = np.random.default_rng(seed).integers(0, sizes[0], size=(m, len(sizes)))
    if len(set(sizes)) == 1:
        assert (per_column == one).all()
    pools = [[(None, b"%d" % i) for i in range(size)] for size in sizes]
    drawn = RowParts(b"", pools, [list(range(len(sizes)))]).draw(np.random.default_rng(seed), m)
    assert (drawn.picks == per_column).all()


@given(
    values=st.lists(
        st.tuples(
            st.integers(0, 2**64 - 1), st.integers(-(2**63), 2**63 - 1), st.integers(0, 2**32 - 1)
        ),
        max_size=30,
    )
)
def test_begins_and_commits_encode_as_the_codec_does(values: list[tuple[int, int, int]]) -> None:
    lsn = np.array([v[0] for v in values], np.uint64)
    time = np.array([v[1] for v in values], np.int64)
    xid = np.array([v[2] for v in values], np.int64)
    assert encode_begins(lsn, time, xid) == [encode_begin(a, t, x) for a, t, x in values]
    end = lsn[::-1]
    assert encode_commits(lsn, end, time) == [
        encode_commit(0, a, int(e), t) for (a, t, _), e in zip(values, end, strict=True)
    ]
