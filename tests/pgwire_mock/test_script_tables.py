"""A script's tables as of a WAL position (what a slot's snapshot sees) and their
declared initial rows."""

from __future__ import annotations

import pytest

from pgwire_mock.script import (
    Script,
    ScriptError,
    column,
    compile_script,
    delete,
    dump_script,
    insert,
    loads_script,
    rollback_to_savepoint,
    savepoint,
    truncate,
    update,
)
from pgwire_mock.script.tables import tables_at
from pgwire_mock.script.wal import WFinishPrepared, WTxn

T = "public.t"


def base() -> Script:
    return Script(pg_version=16).table(
        T,
        columns=[column("id", "int4", key=True), column("v", "text"), column("n", "int8")],
        rows=[{"id": 1, "v": "one", "n": 10}, {"id": 2, "v": "two", "n": 20}],
    )


def rows(script: Script, lsn: int) -> list[tuple[object, ...]]:
    return sorted(tables_at(compile_script(script), lsn)[T].rows, key=lambda r: str(r[0]))


def commits(script: Script) -> list[tuple[int, int]]:
    """(commit record start, end) of every transaction and COMMIT PREPARED, in order."""
    return [
        (item.lsn, item.end_lsn)
        for item in compile_script(script).wal
        if isinstance(item, WTxn | WFinishPrepared)
    ]


def test_declared_rows_are_the_state_before_the_first_step() -> None:
    s = base().transaction([insert(T, id=3, v="three")])
    assert rows(s, s.server.start_lsn) == [(1, "one", 10), (2, "two", 20)]


def test_each_commit_is_seen_from_its_commit_record_on() -> None:
    s = base()
    s.transaction([insert(T, id=3, v="three", n=30), update(T, id=1, v="uno", n=11)])
    s.transaction([delete(T, key={"id": 2})])
    (c1, e1), (_, e2) = commits(s)
    assert rows(s, c1) == [(1, "one", 10), (2, "two", 20)]  # a snapshot before its commit
    assert rows(s, c1 + 1) == rows(s, e1) == [(1, "uno", 11), (2, "two", 20), (3, "three", 30)]
    assert rows(s, e2) == [(1, "uno", 11), (3, "three", 30)]


def test_unchanged_toast_keeps_the_old_value_and_a_key_update_moves_the_row() -> None:
    s = base()
    s.transaction([update(T, id=1, n=12, unchanged=["v"])])
    s.transaction([update(T, {"id": 5, "v": "five", "n": 50}, key={"id": 2})])
    end = commits(s)[-1][1]
    assert rows(s, end) == [(1, "one", 12), (5, "five", 50)]


def test_rolled_back_savepoints_aborts_and_prepared_transactions() -> None:
    s = base()
    s.transaction(
        [
            insert(T, id=3, v="kept"),
            savepoint("a"),
            insert(T, id=4, v="rolled back"),
            rollback_to_savepoint("a"),
            insert(T, id=5, v="after"),
        ]
    )
    s.transaction([insert(T, id=6, v="aborted")], rollback=True)
    s.transaction([insert(T, id=7, v="prepared")], prepare="g1")
    after_prepare = compile_script(s).end_lsn
    s.commit_prepared("g1")
    ids = [r[0] for r in rows(s, after_prepare)]
    assert ids == [1, 2, 3, 5]
    assert [r[0] for r in rows(s, compile_script(s).end_lsn)] == [1, 2, 3, 5, 7]


def test_truncate_and_alter_table_reshape_the_rows() -> None:
    s = base()
    s.alter_table(T, add=[column("extra", "text")], drop=["n"])
    s.transaction([insert(T, id=3, v="three", extra="x")])
    s.transaction([truncate(T)])
    altered, inserted, truncated = commits(s)
    state = tables_at(compile_script(s), truncated[0])[T]
    assert [c.name for c in state.version.published] == ["id", "v", "extra"]
    assert sorted(state.rows, key=str) == [(1, "one", None), (2, "two", None), (3, "three", "x")]
    assert rows(s, compile_script(s).end_lsn) == []
    assert altered[0] < inserted[0]


def test_replica_identity_full_finds_the_row_by_all_its_values() -> None:
    s = Script(pg_version=16).table(
        "public.f",
        columns=[column("a", "int4"), column("b", "text")],
        replica_identity="full",
        rows=[{"a": 1, "b": "x"}, {"a": 1, "b": "y"}],
    )
    s.transaction([delete("public.f", old={"a": 1, "b": "y"})])
    state = tables_at(compile_script(s), compile_script(s).end_lsn)["public.f"]
    assert state.rows == [(1, "x")]


def test_rows_round_trip_through_yaml_and_bad_rows_name_their_place() -> None:
    s = base()
    assert loads_script(dump_script(s)) == s
    bad = Script(pg_version=16).table(T, columns=[column("id", "int4", key=True)], rows=[{"x": 1}])
    with pytest.raises(ScriptError, match=r"tables\[0\]\.rows\[0\].*no column 'x'"):
        compile_script(bad)
    keyless = Script(pg_version=16).table(T, columns=[column("id", "int4", key=True)], rows=[{}])
    with pytest.raises(ScriptError, match="missing replica identity column 'id'"):
        compile_script(keyless)


def test_a_nan_row_is_found_as_postgres_finds_it() -> None:
    """NaN equals NaN in PostgreSQL's float and numeric comparisons, so an UPDATE or
    DELETE under REPLICA IDENTITY FULL finds a row holding one."""
    s = Script(pg_version=16).table(
        "public.f",
        columns=[column("a", "float8"), column("n", "numeric"), column("b", "text")],
        replica_identity="full",
        rows=[{"a": "NaN", "n": "NaN", "b": "x"}],
    )
    s.transaction(
        [update("public.f", {"a": 1.0, "n": 1, "b": "y"}, old={"a": "NaN", "n": "NaN", "b": "x"})]
    )
    s.transaction([delete("public.f", old={"a": 1.0, "n": 1, "b": "y"})])
    compiled = compile_script(s)
    (updated, _), _ = commits(s)
    assert [r[2] for r in tables_at(compiled, updated + 1)["public.f"].rows] == ["y"]
    assert tables_at(compiled, compiled.end_lsn)["public.f"].rows == []


@pytest.mark.parametrize("identity", ["default", "full"])
def test_replaying_changes_does_work_linear_in_rows_plus_changes(
    identity: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """UPDATE and DELETE find their row through an index, not by scanning the table:
    the values compared grow with rows + changes, not with their product (a 120k-row
    snapshot with 50k changes took over 600 s before). Counted, not timed."""
    from pgwire_mock.script import tables as tables_module

    counted = {"key": 0, "equal": 0}
    real_key, real_equal = getattr(tables_module, "_key", None), tables_module._equal

    def key(row: tuple[object, ...], columns: tuple[int, ...]) -> tuple[object, ...]:
        counted["key"] += len(columns)
        assert real_key is not None
        return real_key(row, columns)

    def equal(a: object, b: object) -> bool:
        counted["equal"] += 1
        return real_equal(a, b)

    monkeypatch.setattr(tables_module, "_key", key, raising=False)
    monkeypatch.setattr(tables_module, "_equal", equal)

    def work(n: int) -> int:
        counted.update(key=0, equal=0)
        script = Script(pg_version=16).table(
            T,
            columns=[column("id", "int4", key=True), column("v", "text")],
            rows=[{"id": i, "v": f"r{i}"} for i in range(n)],
            replica_identity=identity,
        )
        for i in range(0, n, 2):
            old = {"id": i, "v": f"r{i}"}
            if identity == "full":
                script.transaction([update(T, {"id": i, "v": "new"}, old=old)])
                script.transaction([delete(T, old={"id": i + 1, "v": f"r{i + 1}"})])
            else:
                script.transaction([update(T, id=i, v="new")])
                script.transaction([delete(T, key={"id": i + 1})])
        compiled = compile_script(script)
        state = tables_at(compiled, compiled.end_lsn + 1)[T]
        assert sorted(state.rows) == [(i, "new") for i in range(0, n, 2)]
        return counted["key"] + counted["equal"]

    small, large = work(500), work(4000)
    assert large <= 8 * small * 1.1 + 100, (small, large)
