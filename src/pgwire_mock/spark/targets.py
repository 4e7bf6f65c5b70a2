"""Where applied tables live and how a batch is committed: a Parquet directory of
versions with a pointer file (one ``os.replace`` is the commit) and a Delta Lake table
written with delta-rs (one transaction with the batch's app id); used by
:mod:`pgwire_mock.spark.apply` and :mod:`pgwire_mock.spark.distributed`.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import TableNotFoundError
from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

from pgwire_mock import json_text

__all__ = [
    "ApplyResult",
    "DeltaTarget",
    "ParquetTarget",
    "add_action",
    "applied_rows",
    "commit_delta",
    "commit_parquet",
    "delta_table",
    "new_version",
    "parquet_rows",
    "parquet_target_path",
    "read_current",
    "read_parquet_target",
    "read_pointer",
]

_POINTER: Final = "_pgwire_mock_latest.json"
_VERSIONS: Final = "_versions"  # '_' hides it from spark.read.parquet(dir)


# Called with a step name between the steps of a commit; tests set it to kill the process
# inside a commit window.
_STEP_HOOK: Callable[[str], None] | None = None


def _step(name: str) -> None:
    if _STEP_HOOK is not None:
        _STEP_HOOK(name)


@dataclass(frozen=True, slots=True)
class ParquetTarget:
    """A directory of versions: ``_versions/<batch>-<id>/`` each a complete table written
    by Spark (or pyarrow), and ``_pgwire_mock_latest.json`` naming the current one;
    replacing that file is the commit. Read it with ``spark.read.parquet(
    parquet_target_path(target))`` or :func:`read_parquet_target`; ``spark.read.parquet``
    of the directory itself finds no files (``_`` paths are hidden), never two versions."""

    path: str


@dataclass(frozen=True, slots=True)
class DeltaTarget:
    """A Delta Lake table written with delta-rs; ``app_id`` names the writer in the
    table's app transactions (default: the path)."""

    path: str
    app_id: str | None = None


@dataclass(frozen=True, slots=True)
class ApplyResult:
    applied: bool
    rows: int  # rows in the table after the batch
    changes: int


def applied_rows(target: ParquetTarget | DeltaTarget, batch_id: int) -> int | None:
    """The target's row count if ``batch_id`` is already applied, else None."""
    if isinstance(target, ParquetTarget):
        pointer = read_pointer(Path(target.path))
        if pointer is None or batch_id > pointer["batch_id"]:
            return None
        return parquet_rows(Path(target.path) / pointer["version"])
    dt = delta_table(target)
    if dt is None:
        return None
    done = dt.transaction_version(_app_id(target))
    if done is None or batch_id > done:
        return None
    return _delta_rows(dt)


def read_current(target: ParquetTarget | DeltaTarget, schema: pa.Schema) -> pa.Table | None:
    if isinstance(target, ParquetTarget):
        pointer = read_pointer(Path(target.path))
        if pointer is None:
            return None
        return pq.read_table(Path(target.path) / pointer["version"], schema=schema)
    dt = delta_table(target)
    return None if dt is None else dt.to_pyarrow_table()


# ------------------------------------------------------------------------------ Parquet


def read_pointer(root: Path) -> dict[str, Any] | None:
    try:
        pointer: dict[str, Any] = json_text.loads((root / _POINTER).read_text())
    except FileNotFoundError:
        return None
    return pointer


def new_version(target: ParquetTarget, batch_id: int) -> Path:
    return Path(target.path) / _VERSIONS / f"{batch_id:010d}-{uuid.uuid4().hex[:12]}"


def commit_parquet(target: ParquetTarget, batch_id: int, version: Path) -> None:
    """Point the target at ``version`` (a complete table): one ``os.replace`` of the
    pointer file is the commit. The previous version stays for readers that resolved the
    pointer before the switch; older ones, and versions a crash left unreferenced, go."""
    root = Path(target.path)
    previous = read_pointer(root)
    _step("written")
    tmp = root / f".{_POINTER}.{uuid.uuid4().hex}"
    relative = version.relative_to(root).as_posix()
    tmp.write_text(json.dumps({"batch_id": batch_id, "version": relative}))
    with tmp.open("rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, root / _POINTER)
    _step("committed")
    keep = {relative} | ({previous["version"]} if previous else set())
    for old in (root / _VERSIONS).iterdir():
        if f"{_VERSIONS}/{old.name}" not in keep:
            shutil.rmtree(old, ignore_errors=True)


def parquet_rows(version: Path) -> int:
    return sum(pq.read_metadata(p).num_rows for p in sorted(version.glob("*.parquet")))


def parquet_target_path(target: ParquetTarget) -> str:
    """The directory of the target's current version: ``spark.read.parquet(...)`` it."""
    root = Path(target.path)
    pointer = read_pointer(root)
    if pointer is None:
        raise FileNotFoundError(f"no table at {root} (no {_POINTER})")
    return str(root / pointer["version"])


def read_parquet_target(target: ParquetTarget) -> pa.Table:
    """The current version of a Parquet target (without Spark)."""
    version = Path(parquet_target_path(target))
    files = sorted(version.glob("*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files]) if files else pa.table({})


# -------------------------------------------------------------------------------- Delta


def _app_id(target: DeltaTarget) -> str:
    return target.app_id or f"pgwire_mock:{target.path}"


def delta_table(target: DeltaTarget) -> DeltaTable | None:
    try:
        return DeltaTable(target.path)
    except TableNotFoundError:
        return None


def _delta_rows(dt: DeltaTable) -> int:
    actions = pa.table(dt.get_add_actions(flatten=True))
    if not actions.num_rows:
        return 0
    return int(pc.sum(actions.column("num_records")).as_py() or 0)


def add_action(table_path: str, name: str, rows: int) -> AddAction:
    size = (Path(table_path) / name).stat().st_size
    return AddAction(
        name, size, {}, int(time.time() * 1000), True, json.dumps({"numRecords": rows})
    )


def commit_delta(
    target: DeltaTarget,
    batch_id: int,
    schema: pa.Schema,
    actions: list[AddAction | RemoveAction],
) -> None:
    """One Delta commit: the files written replace the table's, with the app transaction
    ``(app_id, batch_id)`` that makes a retried batch a no-op (as Spark's Delta sink
    does). Files a crash leaves unreferenced are invisible to readers."""
    commit = CommitProperties(
        app_transactions=[Transaction(_app_id(target), batch_id)],
        custom_metadata={"pgwire_mock.batch_id": str(batch_id)},
    )
    _step("written")
    dt = delta_table(target)
    if dt is None:
        create_table_with_add_actions(
            target.path,
            DeltaSchema.from_arrow(schema),
            [a for a in actions if isinstance(a, AddAction)],
            mode="overwrite",
            commit_properties=commit,
        )
    else:
        dt.create_write_transaction(actions, "overwrite", schema, commit_properties=commit)
    _step("committed")
