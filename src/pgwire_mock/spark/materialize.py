"""Change rows routed to identity groups, and a group's rows materialized: the part of
:mod:`pgwire_mock.spark.apply` that runs per partition, on the executors or, for an Arrow
table, in this process.

:func:`route` gives each change row its group (a stable hash of its identity under
PostgreSQL's ``=``) and role (see the apply module's doc);
:mod:`pgwire_mock.spark.distributed` computes the same with Spark expressions.
:func:`materialize` applies a group's rows, sorted by :data:`SORT`, to the target's
current rows of that group.
"""

from __future__ import annotations

import hashlib
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pgwire_mock.spark.decode import METADATA_FIELDS, SNAPSHOT_OP
from pgwire_mock.spark.errors import ApplyError

__all__ = [
    "CURRENT",
    "CURRENT_OP",
    "DEL",
    "EDGE",
    "GROUP",
    "GROUP2",
    "INS",
    "META_NAMES",
    "RANK",
    "ROLE",
    "ROW",
    "SORT",
    "TRUNCATE",
    "after_barrier",
    "last_truncate",
    "lsn_text",
    "materialize",
    "route",
    "route_current",
    "state_schema",
    "whole_row",
]

META_NAMES: Final = frozenset(f.name for f in METADATA_FIELDS) | {"_before"}
_SPECIAL: Final = pa.field("_special", pa.map_(pa.string(), pa.string()))
_LSN: Final = pa.field("_commit_lsn", pa.int64())
_STATE_EXTRA: Final = frozenset({"_special", "_commit_lsn"})  # state columns not the table's
CURRENT_OP: Final = "current"  # _op of a target row routed with the changes

# Routing columns added to the change rows: the group (identity hash), the role, and for
# an EDGE the second group it joins.
GROUP: Final = "_pgwm_group"
GROUP2: Final = "_pgwm_group2"
ROLE: Final = "_pgwm_role"
RANK: Final = "_pgwm_rank"  # 0 current row, 1 snapshot row, 2 change
CURRENT, ROW, DEL, INS, EDGE, TRUNCATE = range(6)
_ROUTING: Final = (
    pa.field(GROUP, pa.int64()),
    pa.field(GROUP2, pa.int64()),
    pa.field(ROLE, pa.int8()),
    pa.field(RANK, pa.int8()),
)


def state_schema(changes: pa.Schema) -> pa.Schema:
    """The materialized table's schema for a change schema."""
    columns = [f for f in changes if f.name not in META_NAMES and not f.name.startswith("_pgwm_")]
    return pa.schema([*columns, _SPECIAL, _LSN])


def whole_row(schema: pa.Schema, keys: list[str]) -> bool:
    names = {f.name for f in state_schema(schema)} - _STATE_EXTRA
    return bool(keys) and set(keys) >= names


# ----------------------------------------------------------------------- identity values


def lsn_text(lsn: int) -> str:
    """An LSN as PostgreSQL prints it: ``X/Y``."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def _short(value: object, limit: int = 60) -> str:
    """A value for an error message: a TOASTed key is kilobytes long."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} chars)"


_NAN: Final = ("NaN",)  # float NaN's identity: NaN = NaN in float8eq (utils/adt/float.c)


def _norm(value: object) -> object:
    """A hashable value under which values PostgreSQL's ``=`` holds equal are equal:
    NaN = NaN and -0 = +0 for floats, elementwise for arrays; NULL is None (the apply
    worker's tuples_equal takes two NULLs as equal)."""
    if isinstance(value, float):
        if math.isnan(value):
            return _NAN
        return value + 0.0  # -0.0 + 0.0 == +0.0
    if isinstance(value, list):
        return tuple(_norm(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _norm(v)) for k, v in value.items()))
    return value


def _exact(value: object) -> object:
    """A hashable value equal only for identical values (the sign of a zero counts)."""
    if isinstance(value, float):
        return ("f", repr(value))
    if isinstance(value, list):
        return tuple(_exact(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _exact(v)) for k, v in value.items()))
    return value


def _hash(norm: object) -> int:
    """A stable 64-bit hash (Python's hash() differs between the executors' processes)."""
    digest = hashlib.blake2b(repr(norm).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def _columns(table: pa.Table, names: Sequence[str]) -> list[list[object]]:
    return [table.column(n).to_pylist() for n in names]


def _key_rows(columns: list[list[object]], n: int) -> list[tuple[object, ...]]:
    if not columns:
        return [()] * n
    return list(zip(*columns, strict=True))


def _specials_of(table: pa.Table, keys: Sequence[str]) -> list[tuple[tuple[str, str], ...]]:
    wanted = set(keys)
    return [
        tuple(sorted((c, s) for c, s in (entries or []) if c in wanted))
        for entries in table.column("_special").to_pylist()
    ]


def _plain(t: pa.DataType) -> bool:
    """Values of ``t`` are their own identity under ``=``: no float, list, struct or map
    in them, so :func:`_norm` would return them as they are."""
    return not (pa.types.is_floating(t) or pa.types.is_nested(t))


@dataclass(slots=True)
class _Identities:
    """Each row's identity under ``=`` (norm) and, when asked for, bit for bit (exact:
    only REPLICA IDENTITY FULL tells identical rows apart)."""

    columns: list[list[object]]
    norm: list[tuple[object, ...]]
    exact: list[tuple[tuple[object, ...], Any]]  # (values, key columns' _special or None)

    @classmethod
    def of(
        cls,
        columns: list[list[object]],
        types: Sequence[pa.DataType],
        n: int,
        specials: list[Any] | None,
        *,
        exact: bool,
    ) -> _Identities:
        normed = [
            c if _plain(t) else [_norm(v) for v in c] for c, t in zip(columns, types, strict=True)
        ]
        norm = _key_rows(normed, n)
        if not exact:
            return cls(columns, norm, [])
        same = [
            (tuple(_exact(v) for v in row), specials[i] if specials is not None else None)
            for i, row in enumerate(_key_rows(columns, n))
        ]
        return cls(columns, norm, same)

    def values(self, i: int) -> list[object]:
        return [c[i] for c in self.columns]


# ---------------------------------------------------------------------------- routing


def route(table: pa.Table, keys: list[str], whole_row: bool) -> pa.Table:
    """Each change row with its group and role (see the module doc).

    * an update whose identity changes becomes two rows: DEL in the old identity's group
      and INS in the new one's, so every group is applied on its own; under REPLICA
      IDENTITY FULL the new row's unchanged-TOAST columns are taken from ``_before`` (the
      old tuple is sent whole, detoasted: ExtractReplicaIdentity in access/heap/heapam.c);
    * a key change that leaves TOAST columns unchanged (keyed tables) needs the old row:
      it stays one ROW in the old group and an EDGE row says which two groups to join;
    * a truncate is a TRUNCATE row (the driver reads the last one's position).
    """
    n = table.num_rows
    ops = table.column("_op").to_pylist()
    toast = table.column("_toast_unchanged").to_pylist()
    before = table.column("_before")
    has_before = before.is_valid().to_pylist()
    new = _key_rows(_columns(table, keys), n)
    old = _key_rows([pc.struct_field(before, k).to_pylist() for k in keys], n)
    groups: list[int] = []
    groups2: list[int] = []
    roles: list[int] = []
    take: list[int] = []
    fill: dict[int, list[str]] = {}  # output row -> columns taken from _before
    for i in range(n):
        op = ops[i]
        if op == "truncate":
            take.append(i)
            groups.append(0)
            groups2.append(0)
            roles.append(TRUNCATE)
            continue
        if not keys:
            if op not in ("insert", SNAPSHOT_OP):
                lsn = table.column("_commit_lsn")[i].as_py()
                raise ApplyError(
                    f"{op} at LSN {lsn_text(lsn)} on a table without replica identity key "
                    "columns (REPLICA IDENTITY NOTHING, or no key flags in the schema: "
                    "pass key=[...])"
                )
            take.append(i)
            groups.append(_hash(("row", uuid.uuid4().int)))
            groups2.append(0)
            roles.append(ROW)
            continue
        key_new = tuple(_norm(v) for v in new[i])
        if op == "update" and has_before[i]:
            key_old = tuple(_norm(v) for v in old[i])
            unchanged = toast[i] or []
            if whole_row:
                # The new tuple's unchanged columns are the old tuple's values.
                filled = tuple(
                    _norm(old[i][j]) if keys[j] in unchanged else v for j, v in enumerate(key_new)
                )
                if filled != key_old:
                    take += [i, i]
                    groups += [_hash(key_old), _hash(filled)]
                    groups2 += [0, 0]
                    roles += [DEL, INS]
                    if unchanged:
                        fill[len(take) - 1] = list(unchanged)
                    continue
            elif key_new != key_old:
                if not unchanged:
                    take += [i, i]
                    groups += [_hash(key_old), _hash(key_new)]
                    groups2 += [0, 0]
                    roles += [DEL, INS]
                    continue
                take += [i, i]
                groups += [_hash(key_old), _hash(key_old)]
                groups2 += [0, _hash(key_new)]
                roles += [ROW, EDGE]
                continue
            take.append(i)
            groups.append(_hash(key_old))
            groups2.append(0)
            roles.append(ROW)
            continue
        take.append(i)
        groups.append(_hash(key_new))
        groups2.append(0)
        roles.append(ROW)
    out = table.take(pa.array(take, pa.int64()))
    if fill:
        out = _fill_from_before(out, fill)
    rank = pc.if_else(pc.equal(out.column("_op"), pa.scalar(SNAPSHOT_OP)), 1, 2)
    return _with_routing(out, groups, groups2, roles, rank)


def _with_routing(
    table: pa.Table, groups: list[int], groups2: list[int], roles: list[int], rank: Any
) -> pa.Table:
    for f in _ROUTING:
        if f.name in table.column_names:
            table = table.drop_columns([f.name])
    return (
        table.append_column(_ROUTING[0], pa.array(groups, pa.int64()))
        .append_column(_ROUTING[1], pa.array(groups2, pa.int64()))
        .append_column(_ROUTING[2], pa.array(roles, pa.int8()))
        .append_column(_ROUTING[3], pc.cast(rank, pa.int8()))
    )


def _fill_from_before(table: pa.Table, fill: dict[int, list[str]]) -> pa.Table:
    """INS rows of REPLICA IDENTITY FULL updates: unchanged-TOAST columns from the old
    tuple, and no longer unchanged."""
    before = table.column("_before")
    columns = {c for cs in fill.values() for c in cs}
    lsns = table.column("_commit_lsn")
    for column in sorted(columns):
        rows = [r for r, cs in fill.items() if column in cs]
        old = pc.struct_field(before, column)
        for r in rows:
            if not old[r].is_valid:
                raise ApplyError(
                    f"update at LSN {lsn_text(lsns[r].as_py())} leaves column {column} "
                    "unchanged (TOAST) and its old tuple has no value for it"
                )
        mask = np.zeros(table.num_rows, dtype=bool)
        mask[rows] = True
        at = table.schema.get_field_index(column)
        value = pc.if_else(pa.array(mask), old, table.column(column))
        table = table.set_column(at, table.schema.field(column), value)
    toast = table.column("_toast_unchanged").to_pylist()
    for r in fill:
        toast[r] = []
    at = table.schema.get_field_index("_toast_unchanged")
    field = table.schema.field("_toast_unchanged")
    return table.set_column(at, field, pa.array(toast, field.type))


def route_current(current: pa.Table, change_schema: pa.Schema, keys: list[str]) -> pa.Table:
    """Rows of the target as CURRENT rows of the change schema, in their groups."""
    n = current.num_rows
    if keys:
        values = _key_rows(_columns(current, keys), n)
        groups = [_hash(tuple(_norm(v) for v in row)) for row in values]
    else:
        groups = [_hash(("row", uuid.uuid4().int)) for _ in range(n)]
    arrays: list[pa.Array[Any] | pa.ChunkedArray[Any]] = []
    for f in change_schema:
        if f.name in _STATE_EXTRA or (f.name not in META_NAMES and not f.name.startswith("_pgwm_")):
            arrays.append(current.column(f.name).cast(f.type))
        elif f.name == "_op":
            arrays.append(pa.array([CURRENT_OP] * n, f.type))
        elif f.name in ("_position", "_xid"):
            arrays.append(pa.array(np.zeros(n, np.int64), f.type))
        elif f.name == "_commit_time":
            arrays.append(pa.array(np.zeros(n, np.int64)).cast(f.type))
        elif f.name == "_toast_unchanged":
            arrays.append(pa.array([[]] * n, f.type))
        elif f.name.startswith("_pgwm_"):
            continue
        else:
            arrays.append(pa.nulls(n, f.type))
    schema = pa.schema([f for f in change_schema if not f.name.startswith("_pgwm_")])
    table = pa.Table.from_arrays(arrays, schema=schema)
    return _with_routing(table, groups, [0] * n, [CURRENT] * n, pa.array(np.zeros(n, np.int8)))


# ------------------------------------------------------------------------ materializing


def materialize(rows: pa.Table, schema: pa.Schema, keys: list[str]) -> pa.Table:
    """Apply routed rows (CURRENT rows, then changes, sorted by rank, LSN, position and
    role; no TRUNCATE or EDGE rows: the caller applied the barrier) to the CURRENT rows.

    The state maps each identity to row *references* (into ``rows``); only identities,
    operations and unchanged-TOAST columns are read in Python, and the result is gathered
    with one ``take`` per column."""
    names = schema.names
    n = rows.num_rows
    base = pa.Table.from_arrays(
        [rows.column(c).cast(schema.field(c).type) for c in names], schema=schema
    )
    ops = rows.column("_op").to_pylist()
    roles = rows.column(ROLE).to_pylist()
    whole_row = bool(keys) and set(keys) >= {c for c in names if c not in _STATE_EXTRA}
    if keys:
        types = [rows.schema.field(k).type for k in keys]
        specials = _specials_of(rows, keys) if whole_row else None
        new = _Identities.of(_columns(rows, keys), types, n, specials, exact=whole_row)
        before = rows.column("_before")
        has_before = before.is_valid().to_pylist()
        # The old tuple carries no _special: its entries are unknown (None).
        old_columns = [pc.struct_field(before, k).to_pylist() for k in keys]
        old = _Identities.of(old_columns, types, n, None, exact=whole_row)
    toast = rows.column("_toast_unchanged")
    toasted = pc.fill_null(pc.greater(pc.list_value_length(toast), 0), False).to_pylist()  # type: ignore[call-overload]
    lsns = rows.column("_commit_lsn")
    # state: identity -> refs of the rows holding it (several only when the identity is
    # the whole row: REPLICA IDENTITY FULL tables may hold identical rows).
    state: dict[object, list[int]] = {}
    unique = iter(range(1 << 62))

    def identity(i: int, use_old: bool) -> tuple[object, object]:
        ids = old if use_old else new
        return ids.norm[i], ids.exact[i] if whole_row else None

    def add(k: object, r: int) -> None:
        if whole_row:
            state.setdefault(k, []).append(r)
        else:
            state[k] = [r]

    def find(k: object, exact: Any, i: int) -> int | None:
        """The row a change's old identity names: identical if one is, else any `=` one."""
        refs = state.get(k)
        if not refs:
            return None
        if len(refs) == 1:
            return 0
        values, specials = exact
        same = [j for j, r in enumerate(refs) if new.exact[r][0] == values]
        if specials is None:
            kinds = {new.exact[refs[j]][1] for j in same}
            if len(kinds) > 1:
                raise ApplyError(
                    f"update at LSN {lsn_text(lsns[i].as_py())}: its old tuple "
                    f"{_short(exact[0])} matches rows that differ only in values Spark "
                    "cannot hold (NULL + _special); pgoutput's old tuple does not say which"
                )
        else:
            same = [j for j in same if new.exact[refs[j]][1] == specials]
        return same[-1] if same else len(refs) - 1

    def drop(k: object, exact: Any, i: int) -> int | None:
        at = find(k, exact, i)
        if at is None:
            return None
        refs = state[k]
        ref = refs.pop(at)
        if not refs:
            del state[k]
        return ref

    inherited: dict[int, dict[str, int]] = {}  # row ref -> column -> row ref it comes from
    for i in range(n):
        op = ops[i]
        role = roles[i]
        if role == CURRENT or op in ("insert", SNAPSHOT_OP):
            add(new.norm[i] if keys else ("row", next(unique)), i)
            continue
        use_old = bool(op == "update" and has_before[i])
        if role == DEL:
            drop(*identity(i, use_old), i)
            continue
        if role == INS:
            add(new.norm[i], i)
            continue
        old_k, old_exact = identity(i, use_old)
        if op == "delete":
            drop(old_k, old_exact, i)
            continue
        existing = drop(old_k, old_exact, i)
        if toasted[i]:
            for column in toast[i].as_py():
                if existing is None:
                    shown = ", ".join(_short(v) for v in (old if use_old else new).values(i))
                    raise ApplyError(
                        f"update at LSN {lsn_text(lsns[i].as_py())} leaves column {column} "
                        f"unchanged (TOAST) but the target has no row with key ({shown})"
                    )
                source = inherited.get(existing, {}).get(column, existing)
                inherited.setdefault(i, {})[column] = source
        k = new.norm[i]
        over = inherited.get(i)
        if over and not over.keys().isdisjoint(keys):  # REPLICA IDENTITY FULL and TOAST
            k = tuple(
                _norm(base.column(c)[over[c]].as_py()) if c in over else v
                for c, v in zip(keys, k, strict=True)
            )
        if not whole_row:
            state.pop(k, None)
        add(k, i)
    refs = [r for rs in state.values() for r in rs]
    table = base.take(pa.array(refs, pa.int64()))
    if inherited:
        table = _inherit(table, base, refs, inherited)
    return _sort_specials(table)


def _inherit(
    table: pa.Table, base: pa.Table, refs: list[int], inherited: dict[int, dict[str, int]]
) -> pa.Table:
    """Unchanged-TOAST columns take the value, and the ``_special`` entry, of the row
    they were inherited from."""
    columns = {c for over in inherited.values() for c in over}
    for column in sorted(columns):
        index = [inherited.get(r, {}).get(column, r) for r in refs]
        at = table.schema.get_field_index(column)
        table = table.set_column(at, column, base.column(column).take(pa.array(index, pa.int64())))
    specials = table.column("_special").to_pylist()
    base_specials = base.column("_special")
    for row, ref in enumerate(refs):
        over = inherited.get(ref)
        if not over:
            continue
        merged = dict(specials[row] or [])
        for column, source in over.items():
            merged.pop(column, None)
            inherited_special = dict(base_specials[source].as_py() or [])
            if column in inherited_special:
                merged[column] = inherited_special[column]
        specials[row] = list(merged.items())
    at = table.schema.get_field_index("_special")
    return table.set_column(at, _SPECIAL, pa.array(specials, _SPECIAL.type))


def _sort_specials(table: pa.Table) -> pa.Table:
    """``_special`` entries in column-name order (rows with several of them are rare)."""
    special = table.column("_special")
    if all(max(np.diff(c.offsets), default=0) <= 1 for c in special.chunks):  # type: ignore[attr-defined]
        return table
    values = special.to_pylist()
    values = [sorted(v) if v and len(v) > 1 else v for v in values]
    at = table.schema.get_field_index("_special")
    return table.set_column(at, _SPECIAL, pa.array(values, _SPECIAL.type))


SORT: Final[list[tuple[str, Literal["ascending", "descending"]]]] = [
    (RANK, "ascending"),
    ("_commit_lsn", "ascending"),
    ("_position", "ascending"),
    (ROLE, "ascending"),
]


def after_barrier(routed: pa.Table, barrier: tuple[int, int] | None) -> pa.Table:
    """Rows a truncate at ``barrier`` leaves: the changes after it (no CURRENT or
    snapshot row survives it), without TRUNCATE and EDGE rows."""
    role = routed.column(ROLE)
    keep = pc.less(role, pa.scalar(EDGE, pa.int8()))
    if barrier is not None:
        lsn, pos = routed.column("_commit_lsn"), routed.column("_position")
        at_lsn, at_pos = pa.scalar(barrier[0], pa.int64()), pa.scalar(barrier[1], pa.int64())
        later = pc.or_(
            pc.greater(lsn, at_lsn), pc.and_(pc.equal(lsn, at_lsn), pc.greater(pos, at_pos))
        )
        change = pc.equal(routed.column(RANK), pa.scalar(2, pa.int8()))
        keep = pc.and_(keep, pc.and_(later, change))
    return routed.filter(keep)


def last_truncate(routed: pa.Table) -> tuple[int, int] | None:
    truncates = routed.filter(pc.equal(routed.column(ROLE), pa.scalar(TRUNCATE, pa.int8())))
    if not truncates.num_rows:
        return None
    at = pc.sort_indices(
        truncates, sort_keys=[("_commit_lsn", "descending"), ("_position", "descending")]
    )
    last = truncates.take(at).slice(0, 1).to_pylist()[0]
    return last["_commit_lsn"], last["_position"]
