"""A commit that changes the catalog (ALTER TABLE, TRUNCATE) while other transactions
run: the locks that would make PostgreSQL wait are refused, and each transaction in
progress gets the new catalog snapshot and the commit's invalidations among its changes.
Compared with real 14-18 in tests/conformance/test_publication_ddl_postgres.py."""

from __future__ import annotations

import pytest

from codec.pgoutput import Decoder, PgOutputMessage, Relation
from pgwire_mock.script import (
    AlterPublication,
    CreatePublication,
    Publication,
    Script,
    ScriptError,
    Send,
    StreamOptions,
    alter_table,
    column,
    compile_script,
    encode_stream,
    insert,
    rollback_to_savepoint,
    savepoint,
    truncate,
)
from pgwire_mock.script.wal import WChange

A, B = "public.a", "public.b"
PROTO_1 = StreamOptions(proto_version=1, publication_names=("pub",))


def script(major: int = 16) -> Script:
    columns = [column("id", "int4", key=True), column("v", "text")]
    return (
        Script(pg_version=major, logical_decoding_work_mem=64)
        .table(A, columns=columns)
        .table(B, columns=columns)
        .publication("pub", tables=[A, B])
        .slot("s")
    )


def sent(s: Script) -> list[PgOutputMessage]:
    decoder = Decoder()
    return [decoder.decode(e.payload) for e in encode_stream(s, PROTO_1) if isinstance(e, Send)]


def named(messages: list[PgOutputMessage]) -> list[str]:
    """Relation with its table, row changes with their key, the rest by kind."""
    out = []
    for m in messages:
        if isinstance(m, Relation):
            out.append(f"Relation {m.relation_name}")
        elif hasattr(m, "new_tuple"):
            out.append(f"{type(m).__name__} {m.new_tuple[0]}")
        else:
            out.append(type(m).__name__)
    return out


# --- locks ------------------------------------------------------------------------------


def test_altering_a_table_an_open_transaction_wrote_is_refused() -> None:
    s = script().begin("t").write("t", [insert(A, id=1, v="x")]).alter_table(A, add=[])
    with pytest.raises(ScriptError, match=r"public.a is locked by open transaction 't'"):
        compile_script(s)


def test_a_savepoint_rolled_back_releases_the_lock_it_took() -> None:
    s = script().begin("t")
    s.write("t", [savepoint("p"), insert(A, id=1, v="x"), rollback_to_savepoint("p")])
    s.alter_table(A, add=[column("w", "int4")])
    s.write("t", [insert(B, id=2, v="y")]).end("t")
    compile_script(s)  # no error


def test_a_prepared_transaction_holds_its_locks_until_committed() -> None:
    s = script().transaction([insert(A, id=1, v="x")], prepare="g")
    refused = script().transaction([insert(A, id=1, v="x")], prepare="g")
    refused.transaction([truncate(A)])
    with pytest.raises(ScriptError, match=r"locked by prepared transaction 'g'"):
        compile_script(refused)
    s.commit_prepared("g").transaction([truncate(A)])
    compile_script(s)


def test_truncate_in_an_open_transaction_holds_other_writers_of_the_table() -> None:
    base = script().begin("t").write("t", [truncate(A)])
    compile_script(base.transaction([insert(B, id=1, v="x")]))  # another table: no wait
    refused = script().begin("t").write("t", [truncate(A)]).transaction([insert(A, id=1)])
    with pytest.raises(ScriptError, match=r"steps\[2\].*locked by open transaction 't'"):
        compile_script(refused)


def test_row_changes_of_two_transactions_do_not_wait_for_each_other() -> None:
    s = script().begin("t").write("t", [insert(A, id=1, v="x")])
    s.transaction([insert(A, id=2, v="y")]).write("t", [insert(A, id=3, v="z")]).end("t")
    assert named(sent(s)).count("Insert 3") == 1


def test_a_publication_command_waits_for_a_transaction_that_truncated_its_table() -> None:
    # ALTER PUBLICATION ... ADD / SET TABLE and CREATE PUBLICATION ... FOR TABLE take
    # SHARE UPDATE EXCLUSIVE on each table they name: only ACCESS EXCLUSIVE held blocks.
    for step in (
        AlterPublication("pub", "drop", (B,)),
        AlterPublication("pub", "set", (A,)),  # removes b
        CreatePublication(Publication("other", (B,))),
    ):
        refused = script().begin("t").write("t", [truncate(B)])
        refused.steps.append(step)
        with pytest.raises(ScriptError, match=r"public.b is locked by open transaction 't'"):
            compile_script(refused)
        writing = script().begin("t").write("t", [insert(B, id=1, v="x")])
        writing.steps.append(step)
        compile_script(writing)  # ROW EXCLUSIVE does not conflict
    options_only = script().begin("t").write("t", [truncate(B)])
    options_only.steps.append(AlterPublication("pub", "publish", publish=("insert",)))
    compile_script(options_only)  # no table named, no table lock


# --- what the commit queues in the transactions in progress -----------------------------


def test_another_tables_alteration_is_queued_in_the_open_transaction() -> None:
    s = script().transaction([insert(B, id=1, v="x")])
    s.begin("t").write("t", [insert(A, id=2, v="x")])
    s.alter_table(B, add=[column("c", "int4")])
    s.transaction([insert(B, id=3, v="x")])
    s.write("t", [insert(B, id=4, v="x")]).end("t")
    s.transaction([insert(B, id=5, v="x")]).transaction([insert(A, id=6, v="x")])
    # b's relcache entry is invalidated where the open transaction's decoding reaches
    # the commit of ALTER TABLE, and again when it is done; a's is not.
    assert named(sent(s)) == [
        *("Begin", "Relation b", "Insert 1", "Commit"),
        *("Begin", "Relation b", "Insert 3", "Commit"),
        *("Begin", "Relation a", "Insert 2", "Relation b", "Insert 4", "Commit"),
        *("Begin", "Relation b", "Insert 5", "Commit"),
        *("Begin", "Insert 6", "Commit"),
    ]
    compiled = compile_script(s)
    opened = next(t for t in compiled.running if t.items)
    queued = [c for c in opened.items if isinstance(c, WChange)]
    assert [c.kind for c in queued] == ["insert", "snapshot", "invalidation", "insert"]
    assert [t.name for t in queued[2].tables] == [B]


def test_a_snapshot_lists_every_catalog_commit_since_the_transaction_began() -> None:
    s = script().begin("t").write("t", [insert(A, id=1, v="x")])
    s.alter_table(B, add=[column("c", "int4")]).transaction([truncate(B)])
    opened = next(t for t in compile_script(s).running if t.items)
    snapshots = [c.size for c in opened.items if isinstance(c, WChange) and c.kind == "snapshot"]
    assert snapshots[1] - snapshots[0] == 4  # one more committed xid in the second


# --- catalog changes rolled back to a savepoint ---------------------------------------------


def test_a_column_added_in_a_rolled_back_savepoint_is_gone_after_it() -> None:
    s = script().transaction([insert(A, id=1, v="x")])
    s.transaction(
        [
            savepoint("p"),
            alter_table(A, add=[column("c", "int4")]),
            insert(A, id=2, v="y", c=7),
            rollback_to_savepoint("p"),
            insert(A, id=3, v="z"),
        ]
    )
    s.transaction([insert(A, id=4, v="w")])
    messages = sent(s)
    # Insert 3 has two columns; the rolled-back invalidations run at the transaction's
    # end, so the next one gets the Relation again (measured on 14-18,
    # test_script_vs_postgres.py's alter_rolled_back).
    assert named(messages) == [
        "Begin", "Relation a", "Insert 1", "Commit",
        "Begin", "Insert 3", "Commit",
        "Begin", "Relation a", "Insert 4", "Commit",
    ]  # fmt: skip
    assert [len(m.new_tuple) for m in messages if hasattr(m, "new_tuple")] == [2, 2, 2]


# --- ALTER TABLE inside an open transaction ---------------------------------------------------


def test_a_column_added_in_an_open_transaction_is_its_own_until_it_ends() -> None:
    s = script().begin("t").write("t", [alter_table(B, add=[column("c", "int4")])])
    s.write("t", [insert(B, id=1, v="x", c=5)])
    refused = script().begin("t").write("t", [alter_table(B, add=[column("c", "int4")])])
    refused.transaction([insert(B, id=2, v="y")])
    with pytest.raises(ScriptError, match=r"public.b is locked by open transaction 't'"):
        compile_script(refused)
    s.end("t").transaction([insert(B, id=2, v="y", c=6)])
    tuples = [m.new_tuple for m in sent(s) if hasattr(m, "new_tuple")]
    assert tuples == [("1", "x", "5"), ("2", "y", "6")]


def test_a_rollback_restores_the_table_an_open_or_prepared_transaction_altered() -> None:
    for end in ("rollback", "rollback_prepared"):
        s = script().begin("t").write("t", [alter_table(B, add=[column("c", "int4")])])
        if end == "rollback":
            s.end("t", rollback=True)
        else:
            s.end("t", prepare="g").rollback_prepared("g")
        s.transaction([insert(B, id=1, v="x")])
        relations = [[c.name for c in m.columns] for m in sent(s) if isinstance(m, Relation)]
        assert relations == [["id", "v"]], end
        with pytest.raises(ScriptError, match="no column 'c'"):
            compile_script(s.transaction([insert(B, id=2, v="y", c=1)]))
