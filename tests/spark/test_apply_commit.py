"""Commits are atomic: a process killed at any step of applying a batch leaves a target
that reads as the old or the new state, never both; retrying the batch converges. And
the errors a user meets say what is wrong in one line."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from pgwire_mock.spark import (
    ApplyError,
    DeltaTarget,
    ParquetTarget,
    apply_changes,
    decode_stream,
    read_parquet_target,
)
from spark.spark_helpers import entries, golden

RECORDING = golden(17, "toast", "v1")
TABLE = "public.pgwm_toast"

CHILD = textwrap.dedent(
    """
    import os, sys
    import pyarrow.compute as pc
    from pgwire_mock.spark import targets
    from pgwire_mock.spark import DeltaTarget, ParquetTarget, apply_changes, decode_stream
    from spark.spark_helpers import entries, golden

    kind, where, crash = sys.argv[1:4]
    changes = decode_stream(entries(golden(17, "toast", "v1")))["public.pgwm_toast"]
    lsns = sorted(set(changes.column("_commit_lsn").to_pylist()))
    first = changes.filter(pc.less(changes.column("_commit_lsn"), lsns[len(lsns) // 2]))
    second = changes.filter(pc.invert(pc.less(changes.column("_commit_lsn"), lsns[len(lsns) // 2])))
    target = ParquetTarget(where) if kind == "parquet" else DeltaTarget(where)
    apply_changes(first, target, 0)
    if crash == "replace":  # the os.replace that switches versions
        def die(*args, **kwargs):
            os._exit(9)
        targets.os.replace = die
    else:
        def hook(step):
            if step == crash:
                os._exit(9)
        targets._STEP_HOOK = hook
    apply_changes(second, target, 1)
    """
)


def _halves() -> tuple[pa.Table, pa.Table]:
    changes = decode_stream(entries(RECORDING))[TABLE]
    lsns = sorted(set(changes.column("_commit_lsn").to_pylist()))
    early = pc.less(changes.column("_commit_lsn"), lsns[len(lsns) // 2])
    return changes.filter(early), changes.filter(pc.invert(early))


def _rows(table: pa.Table) -> list[tuple[object, ...]]:
    return sorted((r["id"], r["counter"], r["big"]) for r in table.to_pylist())


def _read(target: ParquetTarget | DeltaTarget) -> pa.Table:
    if isinstance(target, ParquetTarget):
        return read_parquet_target(target)
    return DeltaTable(target.path).to_pyarrow_table()


def _visible_parquet(root: Path) -> list[Path]:
    """The files ``spark.read.parquet(root)`` lists: '_' and '.' paths are hidden."""
    return [
        p
        for p in root.rglob("*.parquet")
        if not any(part.startswith(("_", ".")) for part in p.relative_to(root).parts)
    ]


@pytest.mark.parametrize("kind", ["parquet", "delta"])
@pytest.mark.parametrize("crash", ["written", "replace", "committed"])
def test_a_kill_inside_the_commit_leaves_old_or_new_and_a_retry_converges(
    kind: str, crash: str, tmp_path: Path
) -> None:
    """Killed before the switch: the old state; after it: the new; spark.read.parquet of
    the directory never sees two versions; applying the batch again gives the new state."""
    if kind == "delta" and crash == "replace":
        pytest.skip("a Delta commit is delta-rs's log write, not os.replace")
    first, second = _halves()
    old, new = ParquetTarget(str(tmp_path / "old")), ParquetTarget(str(tmp_path / "new"))
    apply_changes(first, old, 0)
    apply_changes(first, new, 0)
    apply_changes(second, new, 1)
    where = tmp_path / "crashed"
    tests = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", CHILD, kind, str(where), crash],
        cwd=tests,
        env={"PYTHONPATH": str(tests), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 9, done.stderr[-2000:]
    target: ParquetTarget | DeltaTarget = (
        ParquetTarget(str(where)) if kind == "parquet" else DeltaTarget(str(where))
    )
    state = _rows(_read(target))
    assert state == _rows(read_parquet_target(new if crash == "committed" else old))
    if kind == "parquet":
        assert len(_visible_parquet(where)) <= 1
    apply_changes(second, target, 1)
    assert _rows(_read(target)) == _rows(read_parquet_target(new))
    assert not apply_changes(second, target, 1).applied


def test_a_wrong_key_names_the_table_columns(tmp_path: Path) -> None:
    first, _ = _halves()
    with pytest.raises(ApplyError, match=r"^key column nope is not a column.*: id, "):
        apply_changes(first, ParquetTarget(str(tmp_path / "p")), 0, key=["nope"])


def test_a_toast_error_prints_the_lsn_as_postgresql_does(tmp_path: Path) -> None:
    changes = decode_stream(entries(RECORDING))[TABLE]
    updates = changes.filter(pc.equal(changes.column("_op"), "update"))
    with pytest.raises(ApplyError, match=r"^update at LSN [0-9A-F]+/[0-9A-F]+ leaves column big"):
        apply_changes(updates, ParquetTarget(str(tmp_path / "p")), 0)
