"""Generated columns in pgoutput: the fake against real PostgreSQL 18.4 (and 17's refusals).

One table, ``g (id int PRIMARY KEY, a int, b int GENERATED ALWAYS AS (a * 2) STORED)``,
published three ways: by default, ``WITH (publish_generated_columns = stored)`` and with
the column list ``(id, b)``. The script states the same table with ``b`` as a stored
generated column whose values it gives (``a * 2``: the fake does not evaluate it).

* The stream: what real 18's pgoutput writes (``pg_logical_slot_peek_binary_changes``)
  and what the script encodes, for protocol 1 text and protocol 4 binary: every Relation,
  Insert, Update and Delete payload byte for byte (the script takes the real table's
  OID), Begin and Commit with their LSNs, xids and times as consistent labels.
* The refusals: 17's 42P10 and 42601 for a generated column in a column list and for
  ``publish_generated_columns``, 18's 0A000 for publications that disagree on it.
* A real 18 subscriber (``copy_data = true``, its ``b`` an ordinary column) gets the
  same table from the fake as from real 18, through the catalog queries and the
  ``COPY (SELECT …)`` 18's table sync sends when a generated column is published.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import pytest
from psycopg import sql

from codec.pgoutput import Begin, Commit, Decoder, PgOutputMessage
from conformance import provision
from conformance.provision import Cluster, Server
from pgwire_mock.script import (
    OptionError,
    Script,
    ScriptError,
    StreamOptions,
    column,
    compile_script,
    delete,
    encode_stream,
    insert,
    update,
)

pytestmark = pytest.mark.postgres

_SLOT = "pgwm_gc_slot"
_TABLE = "public.g"
_CREATE = "CREATE TABLE g (id int PRIMARY KEY, a int, b int GENERATED ALWAYS AS (a * 2) STORED)"
_STEPS = (
    "INSERT INTO g (id, a) VALUES (1, 21), (2, 5)",
    "UPDATE g SET a = 22 WHERE id = 1",
    "DELETE FROM g WHERE id = 2",
)
# name → (CREATE PUBLICATION's tail, Script.publication keywords)
_PUBLICATIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "default": ("FOR TABLE g", {}),
    "stored": (
        "FOR TABLE g WITH (publish_generated_columns = stored)",
        {"generated_columns": "stored"},
    ),
    "list": ("FOR TABLE g (id, b)", {"columns": {_TABLE: ("id", "b")}}),
}
_OPTIONS = {
    "v1-text": StreamOptions(1, ("pgwm_gc_pub",)),
    "v4-binary": StreamOptions(4, ("pgwm_gc_pub",), binary=True, streaming="parallel"),
}


@pytest.fixture(scope="module")
def pg18() -> Iterator[Server]:
    reason = provision.opted_out()
    if reason:
        pytest.skip(reason)
    with provision.provide(18) as server:
        yield server


@pytest.fixture(scope="module")
def pg17() -> Iterator[Server]:
    reason = provision.opted_out()
    if reason:
        pytest.skip(reason)
    with provision.provide(17) as server:
        yield server


def _table(major: int, oid: int | None = None) -> Script:
    return Script(pg_version=major).table(
        _TABLE,
        columns=[
            column("id", "int4", key=True),
            column("a", "int4"),
            column("b", "int4", generated="stored"),
        ],
        oid=oid,
    )


def _script(major: int, oid: int | None, publication: str, **pub: Any) -> Script:
    return (
        _table(major, oid)
        .publication(publication, tables=[_TABLE], **pub)
        .transaction([insert(_TABLE, id=1, a=21, b=42), insert(_TABLE, id=2, a=5, b=10)])
        .transaction([update(_TABLE, id=1, a=22, b=44)])
        .transaction([delete(_TABLE, key={"id": 2})])
    )


def _reset(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
        "WHERE slot_name LIKE 'pgwm\\_gc\\_%' AND NOT active"
    )
    for (name,) in conn.execute(
        "SELECT pubname FROM pg_publication WHERE pubname LIKE 'pgwm\\_gc\\_%'"
    ).fetchall():
        conn.execute(sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(str(name))))
    conn.execute("DROP TABLE IF EXISTS g")


def _capture(server: Server, publication: str) -> tuple[int, dict[str, list[bytes]]]:
    """The table's OID and real pgoutput's payloads per option set."""
    with server.connect() as conn:
        _reset(conn)
        try:
            conn.execute(_CREATE)
            oid = int(str(conn.execute("SELECT 'g'::regclass::oid").fetchone()[0]))  # type: ignore[index]
            conn.execute(f"CREATE PUBLICATION pgwm_gc_pub {publication}".encode())
            conn.execute(f"SELECT pg_create_logical_replication_slot('{_SLOT}', 'pgoutput')")
            for step in _STEPS:
                conn.execute(step.encode())
            out = {}
            for name, options in _OPTIONS.items():
                flat = [v for pair in options.as_pgoutput().items() for v in pair]
                rows = conn.execute(
                    "SELECT data FROM pg_logical_slot_peek_binary_changes"
                    "(%s, NULL, NULL, VARIADIC %s::text[])",
                    (_SLOT, flat),
                ).fetchall()
                out[name] = [bytes(r[0]) for r in rows]
            return oid, out
        finally:
            _reset(conn)


def _labelled(message: PgOutputMessage, labels: dict[tuple[str, int], str]) -> str:
    """Begin / Commit with LSNs, xids and times as labels in order of first appearance."""

    def label(kind: str, value: int) -> str:
        return labels.setdefault((kind, value), f"{kind}#{sum(k == kind for k, _ in labels)}")

    if isinstance(message, Begin):
        return (
            f"Begin({label('lsn', message.final_lsn)}, "
            f"{label('time', message.commit_timestamp)}, {label('xid', message.xid)})"
        )
    assert isinstance(message, Commit), message
    return (
        f"Commit({message.flags}, {label('lsn', message.commit_lsn)}, "
        f"{label('lsn', message.end_lsn)}, {label('time', message.commit_timestamp)})"
    )


def _comparable(payloads: Sequence[bytes]) -> list[object]:
    """Begin / Commit labelled, every other payload as its bytes."""
    decoder = Decoder()
    labels: dict[tuple[str, int], str] = {}
    out: list[object] = []
    for payload in payloads:
        message = decoder.decode(payload)
        out.append(_labelled(message, labels) if isinstance(message, Begin | Commit) else payload)
    return out


@pytest.mark.parametrize("publication", list(_PUBLICATIONS))
def test_the_stream_is_real_18s_byte_for_byte(pg18: Server, publication: str) -> None:
    """Relation lists the published generated column (flags 0) and TupleData its value as
    18 does: ``b`` with publish_generated_columns = stored and with the list (id, b),
    not by default; every change payload equals real 18.4's, text and binary."""
    created, keywords = _PUBLICATIONS[publication]
    oid, captured = _capture(pg18, created)
    script = _script(18, oid, "pgwm_gc_pub", **keywords)
    for name, options in _OPTIONS.items():
        ours = [e.payload for e in encode_stream(script, options)]  # type: ignore[union-attr]
        real = captured[name]
        assert len(real) == 11, real  # B R I I C, then B U C and B D C
        assert _comparable(ours) == _comparable(real), (publication, name)
    relation = Decoder().decode(captured["v1-text"][1])
    names = [c.name for c in relation.columns]  # type: ignore[attr-defined]
    want = {"default": ["id", "a"], "stored": ["id", "a", "b"], "list": ["id", "b"]}
    assert names == want[publication]


def test_by_default_18_sends_what_17_sends(pg17: Server) -> None:
    """Without publish_generated_columns, 18's stream is 17's (and real 17's) byte for
    byte: the generated column is left out."""
    oid, captured = _capture(pg17, "FOR TABLE g")
    for name, options in _OPTIONS.items():
        ours_17 = [e.payload for e in encode_stream(_script(17, oid, "pgwm_gc_pub"), options)]  # type: ignore[union-attr]
        ours_18 = [e.payload for e in encode_stream(_script(18, oid, "pgwm_gc_pub"), options)]  # type: ignore[union-attr]
        assert _comparable(ours_17) == _comparable(captured[name]) == _comparable(ours_18)


def _refusal(server: Server, statement: str) -> psycopg.Error:
    with server.connect() as conn:
        _reset(conn)
        try:
            conn.execute(_CREATE)
            with pytest.raises(psycopg.Error) as caught:
                conn.execute(statement.encode())
            return caught.value
        finally:
            _reset(conn)


@pytest.mark.parametrize(
    ("publication", "sqlstate", "field"),
    [("list", "42P10", "public.g.columns"), ("stored", "42601", "generated_columns")],
)
def test_17_refuses_what_18_publishes(
    pg17: Server, publication: str, sqlstate: str, field: str
) -> None:
    """17 refuses a generated column in a column list (42P10) and the
    publish_generated_columns parameter (42601); a 17 script fails to compile with the
    same text, naming the field, and the 18 script compiles."""
    created, keywords = _PUBLICATIONS[publication]
    err = _refusal(pg17, f"CREATE PUBLICATION pgwm_gc_pub {created}")
    assert err.sqlstate == sqlstate
    text = str(err.diag.message_primary)
    with pytest.raises(ScriptError) as caught:
        compile_script(_script(17, None, "pgwm_gc_pub", **keywords))
    assert text in caught.value.problem
    assert caught.value.where.endswith(field)
    compile_script(_script(18, None, "pgwm_gc_pub", **keywords))


def test_publications_that_disagree_on_generated_columns_fail_as_on_18(pg18: Server) -> None:
    """Two publications of g, one with publish_generated_columns = stored and one
    without: 18 fails at the table's first change with 0A000 and the fake with the same
    text; with the column list in one of them there is nothing to disagree on."""
    with pg18.connect() as conn:
        _reset(conn)
        try:
            conn.execute(_CREATE)
            conn.execute(
                "CREATE PUBLICATION pgwm_gc_s FOR TABLE g WITH (publish_generated_columns = stored)"
            )
            conn.execute("CREATE PUBLICATION pgwm_gc_n FOR TABLE g")
            conn.execute(f"SELECT pg_create_logical_replication_slot('{_SLOT}', 'pgoutput')")
            conn.execute(_STEPS[0])
            with pytest.raises(psycopg.Error) as caught:
                conn.execute(
                    "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
                    "'proto_version', '1', 'publication_names', 'pgwm_gc_s,pgwm_gc_n')",
                    (_SLOT,),
                )
        finally:
            _reset(conn)
    real = caught.value

    def script(**second: Any) -> Script:
        return (
            _table(18)
            .publication("pgwm_gc_s", tables=[_TABLE], generated_columns="stored")
            .publication("pgwm_gc_n", tables=[_TABLE], **second)
            .transaction([insert(_TABLE, id=1, a=21, b=42)])
        )

    both = StreamOptions(1, ("pgwm_gc_s", "pgwm_gc_n"))
    with pytest.raises(OptionError) as ours:
        list(encode_stream(script(), both))
    assert (ours.value.sqlstate, ours.value.problem) == (
        real.sqlstate,
        real.diag.message_primary,
    )
    # A column list takes precedence (check_and_init_gencol skips such publications).
    listed = script(columns={_TABLE: ("id", "a", "b")})
    assert len(list(encode_stream(listed, both))) == 4


# --- a real 18 subscriber ---------------------------------------------------------------

_INITIAL = ((1, 10), (2, 20), (3, 30))
_AFTER = ((4, 40),)  # inserted once the table is synchronized; then a of 1 becomes 11


@pytest.fixture(scope="module")
def subscriber18() -> Iterator[Cluster]:
    reason = provision.opted_out()
    if reason:
        pytest.skip(reason)
    installation = provision.install(18).installation
    with Cluster(installation, settings={"wal_retrieve_retry_interval": "200ms"}) as cluster:
        yield cluster


def _subscribe(subscriber: Cluster, conninfo: str, publication: str, commit: Any) -> list[Any]:
    """Subscribe with copy_data = true; after the sync, commit the rest; the rows."""
    name = f"pgwm_gc_{uuid.uuid4().hex[:8]}"
    want_synced = [(i, a, a * 2) for i, a in _INITIAL]
    with subscriber.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS g")
        conn.execute("CREATE TABLE g (id int PRIMARY KEY, a int, b int)")
        conn.execute(
            sql.SQL("CREATE SUBSCRIPTION {} CONNECTION {} PUBLICATION {} WITH (copy_data = true)")
            .format(sql.Identifier(name), sql.Literal(conninfo), sql.Identifier(publication))
            .as_string()
        )
        try:
            states = (
                "SELECT srsubstate FROM pg_subscription_rel r JOIN pg_subscription s "
                "ON s.oid = r.srsubid WHERE s.subname = %s"
            )

            def wait(rows_wanted: int) -> list[Any]:
                deadline = time.monotonic() + 60
                while True:
                    rows = conn.execute("SELECT id, a, b FROM g ORDER BY id").fetchall()
                    done = [r[0] for r in conn.execute(states, (name,)).fetchall()] == ["r"]
                    if (done and len(rows) == rows_wanted) or time.monotonic() > deadline:
                        return rows
                    time.sleep(0.1)

            synced = wait(len(want_synced))
            commit()
            return [synced, wait(len(_INITIAL) + len(_AFTER))]
        finally:
            conn.execute(sql.SQL("ALTER SUBSCRIPTION {} DISABLE").format(sql.Identifier(name)))
            conn.execute(
                sql.SQL("ALTER SUBSCRIPTION {} SET (slot_name = NONE)").format(sql.Identifier(name))
            )
            conn.execute(sql.SQL("DROP SUBSCRIPTION {}").format(sql.Identifier(name)))
            conn.execute("DROP TABLE g")


def _from_real(server: Server, subscriber: Cluster, created: str) -> list[Any]:
    with server.connect() as conn:
        _reset(conn)
        try:
            conn.execute(_CREATE)
            for i, a in _INITIAL:
                conn.execute("INSERT INTO g (id, a) VALUES (%s, %s)", (i, a))
            conn.execute(f"CREATE PUBLICATION pgwm_gc_pub {created}".encode())

            def commit() -> None:
                with conn.transaction():
                    for i, a in _AFTER:
                        conn.execute("INSERT INTO g (id, a) VALUES (%s, %s)", (i, a))
                    conn.execute("UPDATE g SET a = 11 WHERE id = 1")

            conninfo = f"host={server.host} port={server.port} user=postgres dbname=postgres"
            return _subscribe(subscriber, conninfo, "pgwm_gc_pub", commit)
        finally:
            _reset(conn)


def _from_fake(subscriber: Cluster, keywords: dict[str, Any]) -> list[Any]:
    from pgwire_mock.pytest_plugin import start_walsender

    script = Script(pg_version=18).table(
        _TABLE,
        columns=[
            column("id", "int4", key=True),
            column("a", "int4"),
            column("b", "int4", generated="stored"),
        ],
        rows=[{"id": i, "a": a, "b": a * 2} for i, a in _INITIAL],
    )
    script.publication("pgwm_gc_pub", tables=[_TABLE], **keywords)
    server = start_walsender(script, databases=["postgres"], new_slots="end_of_wal")
    try:

        def commit() -> None:
            changes = [insert(_TABLE, id=i, a=a, b=a * 2) for i, a in _AFTER]
            server.commit([*changes, update(_TABLE, id=1, a=11, b=22)])

        conninfo = f"host=127.0.0.1 port={server.port} user=postgres dbname=postgres"
        return _subscribe(subscriber, conninfo, "pgwm_gc_pub", commit)
    finally:
        server.stop()


@pytest.mark.parametrize("publication", list(_PUBLICATIONS))
def test_a_real_18_subscriber_gets_the_same_table(
    pg18: Server, subscriber18: Cluster, publication: str
) -> None:
    """copy_data = true into a table whose b is ordinary: by default b stays NULL; with
    publish_generated_columns = stored b is copied (18's COPY (SELECT id, a, b FROM ONLY
    g)) and streamed; with the list (id, b) a stays NULL. The fake's table is real 18's."""
    created, keywords = _PUBLICATIONS[publication]
    real = _from_real(pg18, subscriber18, created)
    fake = _from_fake(subscriber18, keywords)
    assert fake == real
    final = {r[0]: r for r in real[1]}
    assert len(final) == 4
    if publication == "default":
        assert final[1] == (1, 11, None)
    elif publication == "stored":
        assert final[1] == (1, 11, 22) and final[2] == (2, 20, 40)
    else:
        assert final[1] == (1, None, 22) and final[2] == (2, None, 40)
