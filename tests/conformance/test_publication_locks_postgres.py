"""A publication command naming a table takes SHARE UPDATE EXCLUSIVE on it
(OpenTableList): on real PostgreSQL it waits for a transaction that truncated the
table, not for one that wrote rows into it, and the fake refuses exactly the steps that
would wait (a script cannot wait)."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

from conformance.provision import Server
from pgwire_mock.script import (
    AlterPublication,
    CreatePublication,
    Publication,
    Script,
    ScriptError,
    column,
    compile_script,
    insert,
    truncate,
)
from pgwire_mock.script.model import Step

#: What the open transaction did to table b, and the publication commands after it.
HOLDS = ("truncate", "insert")
COMMANDS = ("add", "drop", "set", "create", "publish")


def _waits_on_postgres(server: Server, holds: str, command: str) -> bool:
    suffix = uuid.uuid4().hex[:8]
    a, b, pub = (sql.Identifier(f"{n}_{suffix}") for n in ("a", "b", "p"))
    with server.connect() as conn:
        for table in (a, b):
            conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(table))
        listed = [a] if command == "add" else [a, b]
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(pub, sql.SQL(", ").join(listed))
        )
        with server.connect(autocommit=False) as holder:
            if holds == "truncate":
                holder.execute(sql.SQL("TRUNCATE {}").format(b))
            else:
                holder.execute(sql.SQL("INSERT INTO {} VALUES (1, 'x')").format(b))
            statement = {
                "add": sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(pub, b),
                "drop": sql.SQL("ALTER PUBLICATION {} DROP TABLE {}").format(pub, b),
                "set": sql.SQL("ALTER PUBLICATION {} SET TABLE {}").format(pub, a),
                "create": sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
                    sql.Identifier(f"q_{suffix}"), b
                ),
                "publish": sql.SQL("ALTER PUBLICATION {} SET (publish = 'insert')").format(pub),
            }[command]
            conn.execute("SET lock_timeout = '300ms'")
            try:
                conn.execute(statement)
            except psycopg.errors.LockNotAvailable:
                return True
            finally:
                holder.rollback()
        return False


def _refused_by_the_fake(major: int, holds: str, command: str) -> bool:
    a, b = "public.a", "public.b"
    columns = [column("id", "int4", key=True), column("v", "text")]
    s = Script(pg_version=major).table(a, columns=columns).table(b, columns=columns)
    s.publication("p", tables=[a] if command == "add" else [a, b]).slot("s")
    s.begin("t").write("t", [truncate(b) if holds == "truncate" else insert(b, id=1, v="x")])
    steps: dict[str, Step] = {
        "add": AlterPublication("p", "add", (b,)),
        "drop": AlterPublication("p", "drop", (b,)),
        "set": AlterPublication("p", "set", (a,)),
        "create": CreatePublication(Publication("q", (b,))),
        "publish": AlterPublication("p", "publish", publish=("insert",)),
    }
    s.steps.append(steps[command])
    try:
        compile_script(s)
    except ScriptError as err:
        assert "is locked by open transaction 't'" in str(err), err
        return True
    return False


@pytest.mark.parametrize("holds", HOLDS)
def test_publication_commands_wait_for_the_same_locks(pg_server: Server, holds: str) -> None:
    waits = {c: _waits_on_postgres(pg_server, holds, c) for c in COMMANDS}
    refused = {c: _refused_by_the_fake(pg_server.version, holds, c) for c in COMMANDS}
    assert refused == waits
    # The check can tell: a truncating holder blocks every command that names b.
    assert any(waits.values()) == (holds == "truncate"), waits
