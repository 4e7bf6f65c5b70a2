"""The script encoder against real PostgreSQL 14–17, message by message.

Each case runs SQL on a real server, decodes it with ``pg_logical_slot_peek_binary_changes``
(one row per pgoutput message), encodes the equivalent script with the same options, and
compares both decoded streams after normalising what legitimately differs:

* LSNs, xids, timestamps and user OIDs are replaced by labels given in order of first
  appearance, so equal values must stay equal (``Begin.final_lsn == Commit.commit_lsn``,
  the same xid on every change of a subtransaction) and different ones different;
* stream block boundaries depend on the exact memory accounting of the reorder buffer:
  adjacent blocks of one transaction are merged, and changes of subtransactions that
  were later stream-aborted (which the client throws away) are dropped — the Stream
  Abort itself is kept and compared.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from codec.pgoutput import (
    Decoder,
    Delete,
    Insert,
    Message,
    PgOutputMessage,
    Relation,
    StreamAbort,
    StreamStart,
    StreamStop,
    Truncate,
    Type,
    Update,
)
from conformance import provision
from pgwire_mock.script import (
    Script,
    ScriptError,
    StreamOptions,
    alter_table,
    column,
    compile_script,
    delete,
    encode_stream,
    insert,
    message,
    release_savepoint,
    rollback_to_savepoint,
    savepoint,
    truncate,
    update,
)

_SLOT = "pgwm_sv_slot"
_SLOT_2PC = "pgwm_sv_slot_2pc"
_PUB = "pgwm_sv_pub"
_NO_AUTOVACUUM = "WITH (autovacuum_enabled = false)"  # autoanalyze would add transactions


@dataclass(frozen=True)
class OptionSet:
    name: str
    options: StreamOptions
    min_version: int = 14


def _opts(proto: int, **kw: Any) -> StreamOptions:
    return StreamOptions(proto_version=proto, publication_names=(_PUB,), **kw)


V1 = OptionSet("v1", _opts(1, messages=True))
V1_BINARY = OptionSet("v1-binary", _opts(1, binary=True, messages=True))
V1_NO_MESSAGES = OptionSet("v1-no-messages", _opts(1))
V2_STREAM = OptionSet("v2-stream", _opts(2, messages=True, streaming="on"))
V3_2PC = OptionSet("v3-stream-2pc", _opts(3, messages=True, streaming="on", two_phase=True), 15)
V4_PARALLEL = OptionSet(
    "v4-parallel-binary", _opts(4, binary=True, messages=True, streaming="parallel"), 16
)


@dataclass(frozen=True)
class Case:
    name: str
    publish: tuple[str, ...]
    setup: tuple[str, ...]
    steps: tuple[str, ...]
    teardown: tuple[str, ...]
    script: Callable[[int, dict[str, int]], Script]
    option_sets: tuple[OptionSet, ...]
    oids: tuple[str, ...] = ()  # type names whose OIDs the script must reuse
    min_version: int = 14
    also: tuple[str, ...] = field(default=())


def _base(major: int) -> Script:
    return Script(pg_version=major, logical_decoding_work_mem=64)


# --- cases -----------------------------------------------------------------------------------

_TYPES_ROW_1: dict[str, object] = {
    "id": 1,
    "b": True,
    "i2": -5,
    "i8": 9_000_000_000,
    "f4": 3.25,
    "f8": 2.5,
    "n": 12.345,
    "t": "hello, world",
    "vc": "vc",
    "bp": "ab",
    "by": "\\x00ff10",
    "d": "2024-02-29",
    "ts": "2024-02-29 12:00:00.5",
    "tstz": "2024-02-29 12:00:00+00",
    "iv": "1 day 02:00:00",
    "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    "j": '{"a": 1, "list": [1, 2]}',
    "ia": [1, None, 3],
    "ta": ["a b", "c", ""],
    "ip": "192.168.0.1/24",
    "nw": "-1.5",  # numeric(200,100): 1.5 and 99 zeros, past Decimal's default 28 digits
}
_TYPES_ROW_2: dict[str, object] = {
    "id": 2,
    "f4": "NaN",
    "f8": "-Infinity",
    "n": "NaN",
    "d": "infinity",
    "ts": "-infinity",
    "tstz": "infinity",
    "ia": [],
    "t": "ünïcödé ☃",
}


def _types_script(major: int, oids: dict[str, int]) -> Script:
    t = "public.pgwm_sv_types"
    row1_changed = {**_TYPES_ROW_1, "t": "changed"}
    row2_moved = {**_TYPES_ROW_2, "id": 10}
    return (
        _base(major)
        .table(
            t,
            columns=[
                column("id", "int4", key=True),
                column("b", "bool"),
                column("i2", "int2"),
                column("i8", "int8"),
                column("f4", "float4"),
                column("f8", "float8"),
                column("n", "numeric(10,2)"),
                column("t", "text"),
                column("vc", "varchar(10)"),
                column("bp", "char(4)"),
                column("by", "bytea"),
                column("d", "date"),
                column("ts", "timestamp"),
                column("tstz", "timestamptz"),
                column("iv", "interval"),
                column("u", "uuid"),
                column("j", "jsonb"),
                column("ia", "int4[]"),
                column("ta", "text[]"),
                column("ip", "inet"),
                column("nw", "numeric(200,100)"),
            ],
        )
        .publication(_PUB, tables=[t])
        .transaction([insert(t, _TYPES_ROW_1), insert(t, _TYPES_ROW_2)])
        .transaction([update(t, row1_changed)])
        .transaction([update(t, row2_moved, key={"id": 2})])
        .transaction([delete(t, key={"id": 10})])
    )


_TYPES = Case(
    name="types",
    publish=("pgwm_sv_types",),
    setup=(
        "CREATE TABLE pgwm_sv_types (id int PRIMARY KEY, b bool, i2 int2, i8 int8, f4 float4, "
        "f8 float8, n numeric(10,2), t text, vc varchar(10), bp char(4), by bytea, d date, "
        "ts timestamp, tstz timestamptz, iv interval, u uuid, j jsonb, ia int4[], ta text[], "
        f"ip inet, nw numeric(200,100)) {_NO_AUTOVACUUM}",
    ),
    steps=(
        "INSERT INTO pgwm_sv_types VALUES (1, true, -5, 9000000000, 3.25, 2.5, 12.345, "
        "'hello, world', 'vc', 'ab', '\\x00ff10', '2024-02-29', '2024-02-29 12:00:00.5', "
        "'2024-02-29 12:00:00+00', '1 day 02:00:00', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', "
        "'{\"a\": 1, \"list\": [1, 2]}', '{1,NULL,3}', '{\"a b\",c,\"\"}', '192.168.0.1/24', "
        "-1.5), "
        "(2, NULL, NULL, NULL, 'NaN', '-Infinity', 'NaN', 'ünïcödé ☃', NULL, NULL, NULL, "
        "'infinity', '-infinity', 'infinity', NULL, NULL, NULL, '{}', NULL, NULL, NULL)",
        "UPDATE pgwm_sv_types SET t = 'changed' WHERE id = 1",
        "UPDATE pgwm_sv_types SET id = 10 WHERE id = 2",
        "DELETE FROM pgwm_sv_types WHERE id = 10",
    ),
    teardown=("DROP TABLE IF EXISTS pgwm_sv_types",),
    script=_types_script,
    option_sets=(V1, V1_BINARY, V2_STREAM, V4_PARALLEL),
)


def _custom_script(major: int, oids: dict[str, int]) -> Script:
    t = "public.pgwm_sv_custom"
    return (
        _base(major)
        .enum("public.pgwm_sv_mood", ["sad", "ok", "happy"], oid=oids["pgwm_sv_mood"])
        .domain("public.pgwm_sv_posint", "int4", oid=oids["pgwm_sv_posint"])
        .composite(
            "public.pgwm_sv_point",
            {"x": "float8", "y": "float8", "label": "text"},
            oid=oids["pgwm_sv_point"],
        )
        .table(
            t,
            columns=[
                column("id", "int4", key=True),
                column("mood", "pgwm_sv_mood"),
                column("n", "pgwm_sv_posint"),
                column("p", "pgwm_sv_point"),
                column("moods", "pgwm_sv_mood[]"),
            ],
        )
        .publication(_PUB, tables=[t])
        .transaction(
            [
                insert(
                    t,
                    id=1,
                    mood="happy",
                    n=42,
                    p={"x": 1.5, "y": -2, "label": 'a "label"'},
                    moods=["sad", None, "ok"],
                ),
                insert(t, id=2, p={"x": None, "y": None, "label": None}),
            ]
        )
        .transaction([delete(t, key={"id": 2})])
    )


_CUSTOM = Case(
    name="custom_types",
    publish=("pgwm_sv_custom",),
    setup=(
        "CREATE TYPE pgwm_sv_mood AS ENUM ('sad', 'ok', 'happy')",
        "CREATE DOMAIN pgwm_sv_posint AS int CHECK (VALUE > 0)",
        "CREATE TYPE pgwm_sv_point AS (x float8, y float8, label text)",
        "CREATE TABLE pgwm_sv_custom (id int PRIMARY KEY, mood pgwm_sv_mood, n pgwm_sv_posint, "
        f"p pgwm_sv_point, moods pgwm_sv_mood[]) {_NO_AUTOVACUUM}",
    ),
    steps=(
        "INSERT INTO pgwm_sv_custom VALUES (1, 'happy', 42, ROW(1.5, -2, 'a \"label\"'), "
        "'{sad,NULL,ok}'), (2, NULL, NULL, ROW(NULL, NULL, NULL), NULL)",
        "DELETE FROM pgwm_sv_custom WHERE id = 2",
    ),
    teardown=(
        "DROP TABLE IF EXISTS pgwm_sv_custom",
        "DROP TYPE IF EXISTS pgwm_sv_mood, pgwm_sv_point",
        "DROP DOMAIN IF EXISTS pgwm_sv_posint",
    ),
    script=_custom_script,
    option_sets=(V1, V1_BINARY),
    oids=("pgwm_sv_mood", "pgwm_sv_posint", "pgwm_sv_point"),
)


def _truncate_script(major: int, oids: dict[str, int]) -> Script:
    parent, child, other = "public.pgwm_sv_parent", "public.pgwm_sv_child", "public.pgwm_sv_other"
    return (
        _base(major)
        .table(parent, columns=[column("id", "int4", key=True), column("v", "text")])
        .table(child, columns=[column("id", "int4", key=True), column("parent_id", "int4")])
        .table(other, columns=[column("id", "int8", key=True)])
        .publication(_PUB, tables=[parent, child, other])
        .transaction([insert(parent, id=1, v="p1"), insert(parent, id=2, v="p2")])
        .transaction([insert(child, id=1, parent_id=1)])
        .transaction([insert(other, id=1)])
        .transaction([truncate(parent, other, child, cascade=True, restart_identity=True)])
        .transaction([insert(other, id=2)])
        .transaction([insert(parent, id=3, v="p3"), truncate(child)])
        .transaction([insert(child, id=5, parent_id=3)])
    )


_TRUNCATE = Case(
    name="truncate",
    publish=("pgwm_sv_parent", "pgwm_sv_child", "pgwm_sv_other"),
    setup=(
        f"CREATE TABLE pgwm_sv_parent (id int PRIMARY KEY, v text) {_NO_AUTOVACUUM}",
        "CREATE TABLE pgwm_sv_child (id int PRIMARY KEY, "
        f"parent_id int REFERENCES pgwm_sv_parent (id)) {_NO_AUTOVACUUM}",
        f"CREATE TABLE pgwm_sv_other (id bigint PRIMARY KEY) {_NO_AUTOVACUUM}",
    ),
    steps=(
        "INSERT INTO pgwm_sv_parent VALUES (1, 'p1'), (2, 'p2')",
        "INSERT INTO pgwm_sv_child VALUES (1, 1)",
        "INSERT INTO pgwm_sv_other VALUES (1)",
        "TRUNCATE pgwm_sv_parent, pgwm_sv_other RESTART IDENTITY CASCADE",
        "INSERT INTO pgwm_sv_other VALUES (2)",
        "BEGIN; INSERT INTO pgwm_sv_parent VALUES (3, 'p3'); TRUNCATE pgwm_sv_child; COMMIT",
        "INSERT INTO pgwm_sv_child VALUES (5, 3)",
    ),
    teardown=("DROP TABLE IF EXISTS pgwm_sv_child, pgwm_sv_parent, pgwm_sv_other",),
    script=_truncate_script,
    option_sets=(V1, V2_STREAM),
)


def _subxact_script(major: int, oids: dict[str, int]) -> Script:
    t = "public.pgwm_sv_sub"
    return (
        _base(major)
        .table(t, columns=[column("id", "int4", key=True), column("v", "text")])
        .publication(_PUB, tables=[t])
        .transaction(
            [
                insert(t, id=1, v="top"),
                savepoint("a"),
                insert(t, id=2, v="in a"),
                savepoint("b"),
                insert(t, id=3, v="in b"),
                release_savepoint("b"),
                message("pgwm", "rolled back with a"),
                rollback_to_savepoint("a"),
                insert(t, id=4, v="after rollback"),
                savepoint("c"),
                insert(t, id=5, v="in c"),
                release_savepoint("c"),
            ]
        )
    )


_SUBXACT = Case(
    name="subxact",
    publish=("pgwm_sv_sub",),
    setup=(f"CREATE TABLE pgwm_sv_sub (id int PRIMARY KEY, v text) {_NO_AUTOVACUUM}",),
    steps=(
        "BEGIN; INSERT INTO pgwm_sv_sub VALUES (1, 'top'); SAVEPOINT a; "
        "INSERT INTO pgwm_sv_sub VALUES (2, 'in a'); SAVEPOINT b; "
        "INSERT INTO pgwm_sv_sub VALUES (3, 'in b'); RELEASE b; "
        "SELECT pg_logical_emit_message(true, 'pgwm', 'rolled back with a'); "
        "ROLLBACK TO a; INSERT INTO pgwm_sv_sub VALUES (4, 'after rollback'); SAVEPOINT c; "
        "INSERT INTO pgwm_sv_sub VALUES (5, 'in c'); RELEASE c; COMMIT",
    ),
    teardown=("DROP TABLE IF EXISTS pgwm_sv_sub",),
    script=_subxact_script,
    option_sets=(V1, V2_STREAM),
)

_PAD = "x" * 400


def _padded(table: str, first: int, count: int) -> list[Any]:
    """Inserts of ids first.. with 400-byte pads, as ``generate_series`` and
    ``repeat('x', 400)`` write them in the SQL steps."""
    return [insert(table, id=i, pad=_PAD) for i in range(first, first + count)]


def _large_script(major: int, oids: dict[str, int]) -> Script:
    t = "public.pgwm_sv_big"
    changes: list[Any] = _padded(t, 1, 150)
    changes.append(message("pgwm", "top"))
    changes.append(savepoint("s1"))
    changes += _padded(t, 1000, 200)
    changes.append(rollback_to_savepoint("s1"))
    changes += [
        savepoint("s2"),
        insert(t, id=5000, pad="kept"),
        message("pgwm", "in a subtransaction"),
        release_savepoint("s2"),
        update(t, id=1, pad="updated"),
        delete(t, key={"id": 2}),
    ]
    return (
        _base(major)
        .table(t, columns=[column("id", "int4", key=True), column("pad", "text")])
        .publication(_PUB, tables=[t])
        .transaction(changes)
        .transaction([insert(t, id=6000, pad="small afterwards")])
    )


_LARGE = Case(
    name="large_stream",
    publish=("pgwm_sv_big",),
    setup=(f"CREATE TABLE pgwm_sv_big (id int PRIMARY KEY, pad text) {_NO_AUTOVACUUM}",),
    steps=(
        "BEGIN; INSERT INTO pgwm_sv_big SELECT g, repeat('x', 400) FROM generate_series(1, 150) g; "
        "SELECT pg_logical_emit_message(true, 'pgwm', 'top'); SAVEPOINT s1; "
        "INSERT INTO pgwm_sv_big SELECT g, repeat('x', 400) FROM generate_series(1000, 1199) g; "
        "ROLLBACK TO s1; SAVEPOINT s2; INSERT INTO pgwm_sv_big VALUES (5000, 'kept'); "
        "SELECT pg_logical_emit_message(true, 'pgwm', 'in a subtransaction'); RELEASE s2; "
        "UPDATE pgwm_sv_big SET pad = 'updated' WHERE id = 1; "
        "DELETE FROM pgwm_sv_big WHERE id = 2; COMMIT",
        "INSERT INTO pgwm_sv_big VALUES (6000, 'small afterwards')",
    ),
    teardown=("DROP TABLE IF EXISTS pgwm_sv_big",),
    script=_large_script,
    option_sets=(V1, V2_STREAM, V4_PARALLEL),
)


def _large_aborted_script(major: int, oids: dict[str, int]) -> Script:
    t = "public.pgwm_sv_bigab"
    return (
        _base(major)
        .table(t, columns=[column("id", "int4", key=True), column("pad", "text")])
        .publication(_PUB, tables=[t])
        .transaction(_padded(t, 1, 200), rollback=True)
        .transaction(_padded(t, 300, 200), prepare="pgwm_sv_big_b")
        .rollback_prepared("pgwm_sv_big_b")
        .transaction(_padded(t, 600, 200), prepare="pgwm_sv_big_c")
        .commit_prepared("pgwm_sv_big_c")
        .transaction([insert(t, id=900, pad="small afterwards")])
    )


def _big(first: int) -> str:
    return (
        f"INSERT INTO pgwm_sv_bigab SELECT g, repeat('x', 400) "
        f"FROM generate_series({first}, {first + 199}) g"
    )


# Large transactions already rolled back when they are decoded (after the fact, as the
# SQL interface decodes them): 18 truncates them at the memory limit instead of
# streaming them (ReorderBufferCheckAndTruncateAbortedTXN); 14-17 stream, then abort.
_LARGE_ABORTED = Case(
    name="large_aborted",
    publish=("pgwm_sv_bigab",),
    setup=(f"CREATE TABLE pgwm_sv_bigab (id int PRIMARY KEY, pad text) {_NO_AUTOVACUUM}",),
    steps=(
        f"BEGIN; {_big(1)}; ROLLBACK",
        f"BEGIN; {_big(300)}; PREPARE TRANSACTION 'pgwm_sv_big_b'",
        "ROLLBACK PREPARED 'pgwm_sv_big_b'",
        f"BEGIN; {_big(600)}; PREPARE TRANSACTION 'pgwm_sv_big_c'",
        "COMMIT PREPARED 'pgwm_sv_big_c'",
        "INSERT INTO pgwm_sv_bigab VALUES (900, 'small afterwards')",
    ),
    teardown=("DROP TABLE IF EXISTS pgwm_sv_bigab",),
    script=_large_aborted_script,
    option_sets=(V1, V2_STREAM, V3_2PC),
)


def _aborted_savepoint_script(major: int, oids: dict[str, int]) -> Script:
    t = "public.pgwm_sv_absp"
    return (
        _base(major)
        .table(t, columns=[column("id", "int4", key=True), column("pad", "text")])
        .publication(_PUB, tables=[t])
        .transaction(
            [
                *_padded(t, 1, 80),
                savepoint("s1"),
                *_padded(t, 100, 200),
                rollback_to_savepoint("s1"),
            ],
            rollback=True,
        )
        .transaction([insert(t, id=900, pad="small afterwards")])
    )


# A rolled-back transaction whose savepoint, rolled back too, has changes in memory when
# the limit is first hit (80 rows of the top stay under it): decoded after the fact, 18
# truncates the top transaction, which marks the subtransaction streamed
# (ReorderBufferMaybeMarkTXNStreamed), and sends a Stream Abort for it at ROLLBACK TO,
# to protocol 1 too; 14-17 stream to the first catalog lookup, then abort both.
_ABORTED_SAVEPOINT = Case(
    name="aborted_savepoint",
    publish=("pgwm_sv_absp",),
    setup=(f"CREATE TABLE pgwm_sv_absp (id int PRIMARY KEY, pad text) {_NO_AUTOVACUUM}",),
    steps=(
        "BEGIN; INSERT INTO pgwm_sv_absp SELECT g, repeat('x', 400) FROM generate_series(1, 80) g; "
        "SAVEPOINT s1; "
        "INSERT INTO pgwm_sv_absp SELECT g, repeat('x', 400) FROM generate_series(100, 299) g; "
        "ROLLBACK TO SAVEPOINT s1; ROLLBACK",
        "INSERT INTO pgwm_sv_absp VALUES (900, 'small afterwards')",
    ),
    teardown=("DROP TABLE IF EXISTS pgwm_sv_absp",),
    script=_aborted_savepoint_script,
    option_sets=(V1, V2_STREAM),
)


def _two_phase_script(major: int, oids: dict[str, int]) -> Script:
    t = "public.pgwm_sv_2pc"
    return (
        _base(major)
        .table(t, columns=[column("id", "int4", key=True), column("v", "text")])
        .publication(_PUB, tables=[t])
        .transaction(
            [insert(t, id=1, v="committed"), message("pgwm", "prepared")], prepare="pgwm_sv_a"
        )
        .commit_prepared("pgwm_sv_a")
        .transaction([insert(t, id=2, v="rolled back")], prepare="pgwm_sv_b")
        .transaction([insert(t, id=3, v="between")])
        .rollback_prepared("pgwm_sv_b")
    )


_TWO_PHASE = Case(
    name="two_phase",
    publish=("pgwm_sv_2pc",),
    setup=(f"CREATE TABLE pgwm_sv_2pc (id int PRIMARY KEY, v text) {_NO_AUTOVACUUM}",),
    steps=(
        "BEGIN; INSERT INTO pgwm_sv_2pc VALUES (1, 'committed'); "
        "SELECT pg_logical_emit_message(true, 'pgwm', 'prepared'); "
        "PREPARE TRANSACTION 'pgwm_sv_a'",
        "COMMIT PREPARED 'pgwm_sv_a'",
        "BEGIN; INSERT INTO pgwm_sv_2pc VALUES (2, 'rolled back'); PREPARE TRANSACTION 'pgwm_sv_b'",
        "INSERT INTO pgwm_sv_2pc VALUES (3, 'between')",
        "ROLLBACK PREPARED 'pgwm_sv_b'",
    ),
    teardown=("DROP TABLE IF EXISTS pgwm_sv_2pc",),
    script=_two_phase_script,
    option_sets=(V1, V2_STREAM, V3_2PC),
)


def _empty_script(major: int, oids: dict[str, int]) -> Script:
    pub, unpub = "public.pgwm_sv_pub_t", "public.pgwm_sv_unpub_t"
    return (
        _base(major)
        .table(pub, columns=[column("id", "int4", key=True)])
        .table(unpub, columns=[column("id", "int4", key=True)])
        .publication(_PUB, tables=[pub])
        .transaction([insert(unpub, id=1)])
        .transaction([insert(pub, id=1)])
        .transaction([insert(unpub, id=2), message("pgwm", "only a message")])
        .transaction([delete(pub, key={"id": 1}), insert(unpub, id=3)])
    )


_EMPTY = Case(
    name="empty_transactions",
    publish=("pgwm_sv_pub_t",),
    setup=(
        f"CREATE TABLE pgwm_sv_pub_t (id int PRIMARY KEY) {_NO_AUTOVACUUM}",
        f"CREATE TABLE pgwm_sv_unpub_t (id int PRIMARY KEY) {_NO_AUTOVACUUM}",
    ),
    steps=(
        "INSERT INTO pgwm_sv_unpub_t VALUES (1)",
        "INSERT INTO pgwm_sv_pub_t VALUES (1)",
        "BEGIN; INSERT INTO pgwm_sv_unpub_t VALUES (2); "
        "SELECT pg_logical_emit_message(true, 'pgwm', 'only a message'); COMMIT",
        "BEGIN; DELETE FROM pgwm_sv_pub_t WHERE id = 1; INSERT INTO pgwm_sv_unpub_t VALUES (3); "
        "COMMIT",
    ),
    teardown=("DROP TABLE IF EXISTS pgwm_sv_pub_t, pgwm_sv_unpub_t",),
    script=_empty_script,
    option_sets=(V1, V1_NO_MESSAGES),
)


def _messages_script(major: int, oids: dict[str, int]) -> Script:
    t = "public.pgwm_sv_msg"
    return (
        _base(major)
        .table(t, columns=[column("id", "int4", key=True)])
        .publication(_PUB, tables=[t])
        .message("pgwm", "non-transactional")
        .message("pgwm.bytes", b"\x00\x01\xff")
        .transaction([insert(t, id=1), message("pgwm", "transactional")])
        .transaction([message("pgwm.empty", "")])
        .message("pgwm", "survives rollback")
        .transaction([insert(t, id=2), message("pgwm", "rolled back")], rollback=True)
    )


_MESSAGES = Case(
    name="messages",
    publish=("pgwm_sv_msg",),
    setup=(f"CREATE TABLE pgwm_sv_msg (id int PRIMARY KEY) {_NO_AUTOVACUUM}",),
    steps=(
        "SELECT pg_logical_emit_message(false, 'pgwm', 'non-transactional')",
        "SELECT pg_logical_emit_message(false, 'pgwm.bytes', '\\x0001ff'::bytea)",
        "BEGIN; INSERT INTO pgwm_sv_msg VALUES (1); "
        "SELECT pg_logical_emit_message(true, 'pgwm', 'transactional'); COMMIT",
        "BEGIN; SELECT pg_logical_emit_message(true, 'pgwm.empty', ''); COMMIT",
        "BEGIN; INSERT INTO pgwm_sv_msg VALUES (2); "
        "SELECT pg_logical_emit_message(true, 'pgwm', 'rolled back'); "
        "SELECT pg_logical_emit_message(false, 'pgwm', 'survives rollback'); ROLLBACK",
    ),
    teardown=("DROP TABLE IF EXISTS pgwm_sv_msg",),
    script=_messages_script,
    option_sets=(V1, V1_NO_MESSAGES, V2_STREAM),
)


def _row_filter_script(major: int, oids: dict[str, int]) -> Script:
    full, narrow = "public.pgwm_sv_rf", "public.pgwm_sv_cl"
    one = {"id": 1, "v": "a", "flag": 1}
    two = {"id": 2, "v": "b", "flag": 0}
    return (
        _base(major)
        .table(
            full,
            columns=[column("id", "int4", key=True), column("v", "text"), column("flag", "int4")],
            replica_identity="full",
        )
        .table(
            narrow,
            columns=[column("id", "int4", key=True), column("v", "text"), column("extra", "text")],
        )
        .publication(
            _PUB,
            tables=[full, narrow],
            columns={narrow: ["id", "v"]},
            where={full: "(flag > 0)", narrow: "(id > 1)"},
        )
        .transaction([insert(full, one), insert(full, two)])  # only the first passes
        .transaction([update(full, {**one, "flag": 0}, old=one)])  # leaves: DELETE
        .transaction([update(full, {**two, "flag": 5}, old=two)])  # enters: INSERT
        .transaction([update(full, {**two, "flag": 5, "v": "c"}, old={**two, "flag": 5})])
        .transaction([delete(full, old={**two, "flag": 5, "v": "c"})])
        .transaction([delete(full, old={**one, "flag": 0})])  # never passed: nothing
        .transaction(
            [
                insert(narrow, id=1, v="hidden", extra="x"),
                insert(narrow, id=2, v="shown", extra="y"),
                update(narrow, id=2, v="again", extra="z"),
                delete(narrow, key={"id": 1}),
                delete(narrow, key={"id": 2}),
            ]
        )
    )


_ROW_FILTER = Case(
    name="row-filter-column-list",
    publish=(
        "pgwm_sv_rf WHERE (flag > 0)",
        "pgwm_sv_cl (id, v) WHERE (id > 1)",
    ),
    setup=(
        f"CREATE TABLE pgwm_sv_rf (id int PRIMARY KEY, v text, flag int) {_NO_AUTOVACUUM}",
        "ALTER TABLE pgwm_sv_rf REPLICA IDENTITY FULL",
        f"CREATE TABLE pgwm_sv_cl (id int PRIMARY KEY, v text, extra text) {_NO_AUTOVACUUM}",
    ),
    steps=(
        "INSERT INTO pgwm_sv_rf VALUES (1, 'a', 1), (2, 'b', 0)",
        "UPDATE pgwm_sv_rf SET flag = 0 WHERE id = 1",
        "UPDATE pgwm_sv_rf SET flag = 5 WHERE id = 2",
        "UPDATE pgwm_sv_rf SET v = 'c' WHERE id = 2",
        "DELETE FROM pgwm_sv_rf WHERE id = 2",
        "DELETE FROM pgwm_sv_rf WHERE id = 1",
        "BEGIN; INSERT INTO pgwm_sv_cl VALUES (1, 'hidden', 'x'), (2, 'shown', 'y');"
        " UPDATE pgwm_sv_cl SET v = 'again', extra = 'z' WHERE id = 2;"
        " DELETE FROM pgwm_sv_cl WHERE id IN (1, 2); COMMIT",
    ),
    teardown=("DROP TABLE IF EXISTS pgwm_sv_rf, pgwm_sv_cl",),
    script=_row_filter_script,
    option_sets=(V1, V2_STREAM, V4_PARALLEL),
    min_version=15,
)


def _alter_rolled_back_script(major: int, oids: dict[str, int]) -> Script:
    t = "public.pgwm_sv_alt"
    return (
        _base(major)
        .table(t, columns=[column("id", "int4", key=True), column("v", "text")])
        .publication(_PUB, tables=[t])
        .transaction([insert(t, id=1, v="before")])
        .transaction(
            [
                savepoint("s"),
                alter_table(t, add=[column("c", "int4")]),
                insert(t, id=2, v="in s", c=7),
                rollback_to_savepoint("s"),
                insert(t, id=3, v="after"),
            ]
        )
        .transaction([insert(t, id=4, v="next")])
        .transaction(
            [
                savepoint("s"),
                alter_table(t, add=[column("d", "int4")]),
                release_savepoint("s"),
                insert(t, id=5, v="kept", d=8),
            ]
        )
        .transaction([insert(t, id=6, v="last", d=9)])
        .transaction(
            [savepoint("s"), truncate(t), rollback_to_savepoint("s"), insert(t, id=7, v="t")]
        )
        .transaction([insert(t, id=8, v="u")])
    )


# ALTER TABLE inside a savepoint: rolled back, the table is as before for the rest of
# the transaction and after it, but its invalidations run at the transaction's end (the
# next one gets the Relation again); released, the column stays. TRUNCATE the same.
_ALTER_ROLLED_BACK = Case(
    name="alter_rolled_back",
    publish=("pgwm_sv_alt",),
    setup=(f"CREATE TABLE pgwm_sv_alt (id int PRIMARY KEY, v text) {_NO_AUTOVACUUM}",),
    steps=(
        "INSERT INTO pgwm_sv_alt VALUES (1, 'before')",
        "BEGIN; SAVEPOINT s; ALTER TABLE pgwm_sv_alt ADD COLUMN c int; "
        "INSERT INTO pgwm_sv_alt VALUES (2, 'in s', 7); ROLLBACK TO SAVEPOINT s; "
        "INSERT INTO pgwm_sv_alt VALUES (3, 'after'); COMMIT",
        "INSERT INTO pgwm_sv_alt VALUES (4, 'next')",
        "BEGIN; SAVEPOINT s; ALTER TABLE pgwm_sv_alt ADD COLUMN d int; RELEASE SAVEPOINT s; "
        "INSERT INTO pgwm_sv_alt VALUES (5, 'kept', 8); COMMIT",
        "INSERT INTO pgwm_sv_alt VALUES (6, 'last', 9)",
        "BEGIN; SAVEPOINT s; TRUNCATE pgwm_sv_alt; ROLLBACK TO SAVEPOINT s; "
        "INSERT INTO pgwm_sv_alt VALUES (7, 't'); COMMIT",
        "INSERT INTO pgwm_sv_alt VALUES (8, 'u')",
    ),
    teardown=("DROP TABLE IF EXISTS pgwm_sv_alt",),
    script=_alter_rolled_back_script,
    option_sets=(V1, V2_STREAM, V4_PARALLEL),
)


CASES = (
    _TYPES,
    _CUSTOM,
    _TRUNCATE,
    _SUBXACT,
    _LARGE,
    _LARGE_ABORTED,
    _ABORTED_SAVEPOINT,
    _TWO_PHASE,
    _EMPTY,
    _MESSAGES,
    _ROW_FILTER,
    _ALTER_ROLLED_BACK,
)


# --- normalisation ------------------------------------------------------------------------------


class _Labels:
    """Replaces values by labels in order of first appearance, per kind."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, int], str] = {}

    def __call__(self, kind: str, value: int | None) -> str | None:
        if value is None:
            return None
        if kind == "lsn" and value == 0:
            return "0"
        key = (kind, value)
        if key not in self.seen:
            self.seen[key] = f"{kind}#{sum(1 for k in self.seen if k[0] == kind) + 1}"
        return self.seen[key]


def _drop_aborted(messages: list[PgOutputMessage]) -> list[PgOutputMessage]:
    aborted = {m.subxid for m in messages if isinstance(m, StreamAbort) and m.subxid != m.xid}
    streamed_kinds = (Relation, Type, Insert, Update, Delete, Truncate, Message)
    out = [
        m
        for m in messages
        if not (isinstance(m, streamed_kinds) and m.xid is not None and m.xid in aborted)
    ]
    # Remove blocks left empty, then merge adjacent blocks of the same transaction.
    changed = True
    while changed:
        changed = False
        for i in range(len(out) - 1):
            a, b = out[i], out[i + 1]
            if isinstance(a, StreamStart) and not a.first_segment and isinstance(b, StreamStop):
                del out[i : i + 2]
                changed = True
                break
            if (
                isinstance(a, StreamStop)
                and isinstance(b, StreamStart)
                and not b.first_segment
                and i > 0
                and _block_xid(out, i) == b.xid
            ):
                del out[i : i + 2]
                changed = True
                break
    return out


def _block_xid(messages: list[PgOutputMessage], stop_index: int) -> int | None:
    for m in reversed(messages[:stop_index]):
        if isinstance(m, StreamStart):
            return m.xid
    return None


def normalise(messages: Iterable[PgOutputMessage]) -> list[str]:
    """One line per message, LSNs/xids/timestamps/user OIDs replaced by labels."""
    label = _Labels()
    lines = []
    for m in _drop_aborted(list(messages)):
        fields = []
        for name in (f.name for f in dataclasses.fields(m)):  # type: ignore[arg-type]
            value = getattr(m, name)
            if name in ("xid", "subxid"):
                value = label("xid", value)
            elif name.endswith("lsn"):
                value = label("lsn", value)
            elif name.endswith("timestamp"):
                value = label("time", value)
            elif name in ("oid", "relation_oid"):
                value = label("oid", value)
            elif name == "relation_oids":
                value = tuple(label("oid", v) for v in value)
            elif name == "columns":
                value = tuple(
                    (
                        c.flags,
                        c.name,
                        label("oid", c.type_oid) if c.type_oid >= 16384 else c.type_oid,
                        c.type_modifier,
                    )
                    for c in value
                )
            fields.append(f"{name}={value!r}")
        lines.append(f"{type(m).__name__}({', '.join(fields)})")
    return lines


# --- running a case on a real server -------------------------------------------------------------


def _cleanup(conn: Any, case: Case) -> None:
    for (gid,) in conn.execute(
        "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'pgwm\\_sv\\_%'"
    ).fetchall():
        conn.execute(f"ROLLBACK PREPARED '{gid}'")
    conn.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
        "WHERE slot_name LIKE 'pgwm\\_sv\\_%' AND NOT active"
    )
    conn.execute(f"DROP PUBLICATION IF EXISTS {_PUB}")
    for sql in case.teardown:
        conn.execute(sql)


def _capture(server: provision.Server, case: Case) -> tuple[dict[str, list[bytes]], dict[str, int]]:
    sets = [o for o in case.option_sets if o.min_version <= server.version]
    with server.connect() as conn:
        _cleanup(conn, case)
        try:
            for sql in case.setup:
                conn.execute(sql.encode())
            conn.execute(f"CREATE PUBLICATION {_PUB} FOR TABLE {', '.join(case.publish)}")
            oids = {
                name: int(str(conn.execute(f"SELECT '{name}'::regtype::oid").fetchone()[0]))  # type: ignore[index]
                for name in case.oids
            }
            conn.execute(f"SELECT pg_create_logical_replication_slot('{_SLOT}', 'pgoutput', true)")
            if any(o.options.two_phase for o in sets):
                conn.execute(
                    "SELECT pg_create_logical_replication_slot(%s, 'pgoutput', true, true)",
                    (_SLOT_2PC,),
                )
            for sql in case.steps:
                conn.execute(sql.encode())
            conn.execute("CHECKPOINT")  # peek decodes flushed WAL only
            out: dict[str, list[bytes]] = {}
            for o in sets:
                flat = [v for pair in o.options.as_pgoutput().items() for v in pair]
                rows = conn.execute(
                    "SELECT data FROM pg_logical_slot_peek_binary_changes"
                    "(%s, NULL, NULL, VARIADIC %s::text[])",
                    (_SLOT_2PC if o.options.two_phase else _SLOT, flat),
                ).fetchall()
                out[o.name] = [bytes(r[0]) for r in rows]
            return out, oids
        finally:
            _cleanup(conn, case)


def _decode(payloads: Sequence[bytes]) -> list[PgOutputMessage]:
    decoder = Decoder()
    return [decoder.decode(p) for p in payloads]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_script_matches_postgres(pg_server: provision.Server, case: Case) -> None:
    """The script's stream equals what the real server's pgoutput sends, message by
    message, for every option set the version supports (LSNs, xids, times and user OIDs
    compared as consistent labels)."""
    if pg_server.version < case.min_version:
        # What that major cannot do, a script for it cannot ask for either.
        with pytest.raises(ScriptError):
            compile_script(case.script(pg_server.version, {}))
        return
    captured, oids = _capture(pg_server, case)
    script = case.script(pg_server.version, oids)
    failures = []
    for o in case.option_sets:
        if o.name not in captured:
            continue
        real = normalise(_decode(captured[o.name]))
        events = encode_stream(script, o.options, server_version=pg_server.version)
        ours = normalise(_decode([e.payload for e in events]))  # type: ignore[union-attr]
        if real != ours:
            failures.append(_diff(o.name, real, ours))
    assert not failures, "\n\n".join(failures)


def _diff(name: str, real: list[str], ours: list[str]) -> str:
    import difflib

    lines = difflib.unified_diff(real, ours, "postgres", "script", lineterm="", n=2)
    return f"option set {name}:\n" + "\n".join(list(lines)[:80])


def test_large_transaction_really_streams(pg_server: provision.Server) -> None:
    """The large case streams on both sides (so the comparison above is not vacuous):
    the subtransaction rolled back after being streamed gets a Stream Abort."""
    captured, _ = _capture(pg_server, _LARGE)
    script = _LARGE.script(pg_server.version, {})
    real = _decode(captured["v2-stream"])
    ours = [e.message for e in encode_stream(script, V2_STREAM.options)]  # type: ignore[union-attr]
    for stream in (real, ours):
        aborts = [m for m in stream if isinstance(m, StreamAbort)]
        assert len(aborts) == 1 and aborts[0].subxid != aborts[0].xid
        assert sum(isinstance(m, StreamStart) for m in stream) >= 3
