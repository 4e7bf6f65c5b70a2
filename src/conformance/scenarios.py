"""Scenarios that make PostgreSQL's pgoutput emit every message it has, as data.

A :class:`Scenario` is SQL: ``setup`` runs before the logical slots exist (its DDL is not
decoded), ``steps`` run after (each step is one simple-protocol query string on one
connection, so session state such as a replication origin carries over), ``teardown``
drops what ``setup`` made. ``publish`` lists the tables of the scenario's publication;
tables left out (``pgwm_*_ballast``) exist only to fill ``logical_decoding_work_mem``
(64kB on provisioned servers) so that a transaction streams while the corpus stays small:
the reorder buffer counts changes to every table, pgoutput sends only published ones.

An :class:`OptionSet` is one set of pgoutput options. Every scenario is decoded with
every option set its server supports (:func:`option_sets`):

========================  =====  ======  =========  =========  ========
name                      proto  binary  streaming  two_phase  versions
========================  =====  ======  =========  =========  ========
``v1``                    1      false   off        no         14+
``v1-binary``             1      true    off        no         14+
``v2-stream``             2      false   on         no         14+
``v3-stream-2pc``         3      false   on         yes        15+
``v4-parallel-2pc-bin``   4      true    parallel   yes        16+
========================  =====  ======  =========  =========  ========

``messages`` is true in all of them. That covers each protocol version once, both tuple
formats (text ``t`` and binary ``b``), streamed and unstreamed forms of the same
transactions (``S``/``E``/``c``/``A`` and the xid field in streamed messages), Stream
Abort with and without abort LSN/timestamp (``parallel``, 16+), and two-phase messages
(``b``/``P``/``K``/``r``/``p``, 15+). The full product (up to 24 sets on 16/17) would
add run time and corpus size without adding a message or a field layout.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "EXPECTED_TAGS",
    "MAX_PROTO_VERSION",
    "OPTION_SETS",
    "RESUME_SCENARIOS",
    "SCENARIOS",
    "TWO_PHASE_UNSTREAMED",
    "OptionSet",
    "Scenario",
    "option_sets",
]

MAX_PROTO_VERSION: Final[Mapping[int, int]] = {14: 2, 15: 3, 16: 4, 17: 4, 18: 4}

_BASE_TAGS: Final = frozenset("BMCORYIUDTSEcA")
_TWO_PHASE_TAGS: Final = frozenset("bPKrp")

# pgoutput message types (first byte of each message) each major can send.
EXPECTED_TAGS: Final[Mapping[int, frozenset[str]]] = {
    14: _BASE_TAGS,
    15: _BASE_TAGS | _TWO_PHASE_TAGS,
    16: _BASE_TAGS | _TWO_PHASE_TAGS,
    17: _BASE_TAGS | _TWO_PHASE_TAGS,
    18: _BASE_TAGS | _TWO_PHASE_TAGS,
}


@dataclass(frozen=True, slots=True)
class OptionSet:
    """pgoutput options for one decoding pass (publication_names is added per scenario)."""

    name: str
    proto_version: int
    binary: bool = False
    streaming: str = "off"  # "off", "on" or (16+, proto 4) "parallel"
    two_phase: bool = False  # decode with a slot created with two_phase (15+, proto 3+)
    min_version: int = 14

    def options(self, publication: str) -> dict[str, str]:
        """The option list for ``pg_logical_slot_peek_binary_changes``, in a stable order."""
        opts = {
            "proto_version": str(self.proto_version),
            "publication_names": publication,
            "binary": "true" if self.binary else "false",
            "messages": "true",
            "streaming": self.streaming,
        }
        if self.two_phase:
            opts["two_phase"] = "true"
        return opts


OPTION_SETS: Final[tuple[OptionSet, ...]] = (
    OptionSet("v1", 1),
    OptionSet("v1-binary", 1, binary=True),
    OptionSet("v2-stream", 2, streaming="on"),
    OptionSet("v3-stream-2pc", 3, streaming="on", two_phase=True, min_version=15),
    OptionSet(
        "v4-parallel-2pc-bin",
        4,
        binary=True,
        streaming="parallel",
        two_phase=True,
        min_version=16,
    ),
)


#: Two-phase without streaming: a large prepared transaction comes whole, Begin Prepare
#: to Prepare, never in blocks. Only the resume check (conformance.resume.EXTRA_CELLS)
#: decodes with it: it adds no message or field layout to the matrix.
TWO_PHASE_UNSTREAMED: Final = OptionSet("v3-2pc", 3, two_phase=True, min_version=15)


def option_sets(major: int) -> tuple[OptionSet, ...]:
    """The option sets decoded on ``major``."""
    return tuple(o for o in OPTION_SETS if o.min_version <= major)


@dataclass(frozen=True, slots=True)
class Scenario:
    """SQL that produces one family of pgoutput messages; see the module docstring."""

    name: str
    description: str
    #: Publication table specs: a name, optionally with a column list and a row filter
    #: (``t (a, b) WHERE (x > 0)``, PostgreSQL 15+).
    publish: tuple[str, ...]
    setup: tuple[str, ...]
    steps: tuple[str, ...]
    teardown: tuple[str, ...]
    min_version: int = 14
    # Message types this scenario must produce on every option set (checked by capture).
    emits: frozenset[str] = field(default_factory=frozenset)
    #: Publication parameters, e.g. ``publish_via_partition_root = true``.
    publication_with: str = ""

    @property
    def publication(self) -> str:
        return f"pgwm_{self.name}"

    def create_publication(self) -> str:
        """The CREATE PUBLICATION statement every capture path runs."""
        sql = f"CREATE PUBLICATION {self.publication} FOR TABLE {', '.join(self.publish)}"
        return f"{sql} WITH ({self.publication_with})" if self.publication_with else sql


def _ballast(table: str, rounds: int, first_id: int, label: str, target: str) -> str:
    """A DO block interleaving published rows with unpublished ballast (~20kB a round).

    Each round inserts one row into ``target`` and 40 rows of 400 bytes into ``table``;
    with logical_decoding_work_mem=64kB the transaction streams every three rounds or so.
    """
    return (
        "DO $$ BEGIN FOR i IN 0.." + str(rounds - 1) + " LOOP "
        f"INSERT INTO {target} (id, v) VALUES ({first_id} + i, '{label} ' || i); "
        f"INSERT INTO {table} (pad) SELECT repeat('x', 400) FROM generate_series(1, 40); "
        "END LOOP; END $$"
    )


_TYPES_COLUMNS = """
    id int PRIMARY KEY,
    c_bool bool, c_int2 int2, c_int4 int4, c_int8 int8, c_oid oid,
    c_float4 float4, c_float8 float8, c_numeric numeric,
    c_text text, c_varchar varchar(32), c_bpchar char(5), c_name name, c_char "char",
    c_bytea bytea, c_date date, c_time time, c_timetz timetz,
    c_timestamp timestamp, c_timestamptz timestamptz, c_interval interval,
    c_uuid uuid, c_json json, c_jsonb jsonb, c_inet inet, c_cidr cidr, c_macaddr macaddr,
    c_int4_arr int4[], c_text_arr text[], c_int4_2d int4[], c_float8_arr float8[],
    c_bool_arr bool[], c_timestamptz_arr timestamptz[]
"""

_TYPES_ROW_1 = """(1,
    true, 12345, 1234567890, 1234567890123456789, 4000000000,
    3.25, 2.718281828459045, 12345.678900,
    'plain text', 'varchar', 'ab', 'a_name', 'z',
    '\\x00ff10'::bytea, '2024-02-29', '13:45:30.123456', '13:45:30.5+05:30',
    '2024-02-29 13:45:30.123456', '2024-02-29 13:45:30.123456+00',
    '1 year 2 mons 3 days 04:05:06.789',
    'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": [1, 2.5, "x"],  "b" : null}',
    '{"b": {"c": [true, false]}, "a": 1}', '192.168.0.1/24', '10.0.0.0/8', '08:00:2b:01:02:03',
    '{1,NULL,3}', '{"a b",NULL,"quote\\"d",""}', '{{1,2},{NULL,4}}', '{1.5,NaN,Infinity}',
    '{t,f,NULL}', '{"2024-01-01 00:00:00+00",infinity}')"""

_TYPES_ROW_2 = """(2,
    false, -32768, -2147483648, -9223372036854775808, 0,
    'NaN', '-Infinity', 'NaN',
    'ünïcödé ☃ €', '', 'abcde', repeat('n', 63), E'\\\\001',
    ''::bytea, '4713-01-01 BC', '24:00:00', '00:00:00-15:59',
    '-infinity', 'infinity', '-178000000 years',
    '00000000-0000-0000-0000-000000000000', '[]', '"scalar"', '::1/128', '2001:db8::/32',
    'ff:ff:ff:ff:ff:ff',
    '{}', '{}', '{{NULL,NULL},{NULL,NULL}}', '{-Infinity,-0}', '{}', '{NULL}')"""

_TYPES_ROW_3 = "(3" + ", NULL" * 32 + ")"

_TYPES_ROW_4 = """(4,
    NULL, 32767, 2147483647, 9223372036854775807, 4294967295,
    'Infinity', 'Infinity', '-12345678901234567890.000000000001',
    E'tab\\tnewline\\nbackslash\\\\', 'x', 'y', 'N', 'A',
    '\\x'::bytea, 'infinity', '00:00:00', '23:59:59.999999+15:59',
    '294276-12-31 23:59:59.999999', '-infinity', '-1 days +00:00:00.000001',
    'FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF', '{"nested": {"deep": [[[]]]}}', 'null',
    '0.0.0.0/0', '0.0.0.0/0', '00:00:00:00:00:00',
    '{2147483647}', '{"NULL","null"}', '{{1},{2}}', '{1e308,-1e-308}', '{t}', '{}')"""


SCENARIOS: Final[tuple[Scenario, ...]] = (
    Scenario(
        name="types",
        description="Insert/update/delete rows over many built-in types, special values, NULLs",
        publish=("pgwm_types",),
        setup=(f"CREATE TABLE pgwm_types ({_TYPES_COLUMNS})",),
        steps=(
            f"INSERT INTO pgwm_types VALUES {_TYPES_ROW_1}, {_TYPES_ROW_2}",
            f"INSERT INTO pgwm_types VALUES {_TYPES_ROW_3}",
            f"INSERT INTO pgwm_types VALUES {_TYPES_ROW_4}",
            "INSERT INTO pgwm_types (id, c_numeric, c_float4, c_timestamptz) "
            "VALUES (5, 'Infinity', 'NaN', 'epoch'), "
            "(6, '-Infinity', '-0', '2000-01-01 00:00:00+00')",
            "UPDATE pgwm_types SET c_text = 'updated', c_int4_arr = '{7,8,9}', c_bool = NULL "
            "WHERE id = 1",
            "UPDATE pgwm_types SET c_jsonb = '{}', c_interval = '0' WHERE id IN (3, 4)",
            "DELETE FROM pgwm_types WHERE id = 2",
        ),
        teardown=("DROP TABLE IF EXISTS pgwm_types",),
        emits=frozenset("BCRIUD"),
    ),
    Scenario(
        name="replica_identity",
        description="Replica identity default/full/using index/nothing; key-changing updates",
        publish=("pgwm_ri_default", "pgwm_ri_full", "pgwm_ri_index", "pgwm_ri_nothing"),
        setup=(
            "CREATE TABLE pgwm_ri_default (id int PRIMARY KEY, v text, n int)",
            "CREATE TABLE pgwm_ri_full (id int, v text, n int)",
            "ALTER TABLE pgwm_ri_full REPLICA IDENTITY FULL",
            "CREATE TABLE pgwm_ri_index (id int, code text NOT NULL, v text)",
            "CREATE UNIQUE INDEX pgwm_ri_index_code ON pgwm_ri_index (code)",
            "ALTER TABLE pgwm_ri_index REPLICA IDENTITY USING INDEX pgwm_ri_index_code",
            "CREATE TABLE pgwm_ri_nothing (id int, v text)",
            "ALTER TABLE pgwm_ri_nothing REPLICA IDENTITY NOTHING",
        ),
        steps=(
            "INSERT INTO pgwm_ri_default VALUES (1, 'a', 1), (2, 'b', NULL)",
            "INSERT INTO pgwm_ri_full VALUES (1, 'a', 1), (2, NULL, 2)",
            "INSERT INTO pgwm_ri_index VALUES (1, 'k1', 'a'), (2, 'k2', 'b')",
            "INSERT INTO pgwm_ri_nothing VALUES (1, 'insert only')",
            # Non-key updates: no old tuple (default, index) / full old tuple 'O' (full).
            "UPDATE pgwm_ri_default SET v = 'a2' WHERE id = 1",
            "UPDATE pgwm_ri_full SET v = 'a2' WHERE id = 1",
            "UPDATE pgwm_ri_index SET v = 'a2' WHERE code = 'k1'",
            # Key-changing updates: old key tuple 'K'.
            "UPDATE pgwm_ri_default SET id = 10 WHERE id = 1",
            "UPDATE pgwm_ri_index SET code = 'k10' WHERE code = 'k1'",
            "UPDATE pgwm_ri_full SET id = 10 WHERE id = 1",
            "BEGIN; DELETE FROM pgwm_ri_default WHERE id = 2; DELETE FROM pgwm_ri_full "
            "WHERE id = 2; DELETE FROM pgwm_ri_index WHERE code = 'k2'; COMMIT",
        ),
        teardown=(
            "DROP TABLE IF EXISTS pgwm_ri_default, pgwm_ri_full, pgwm_ri_index, pgwm_ri_nothing",
        ),
        emits=frozenset("BCRIUD"),
    ),
    Scenario(
        name="toast",
        description="Unchanged TOASTed values ('u') in updates, default and full identity",
        publish=("pgwm_toast", "pgwm_toast_full"),
        setup=(
            "CREATE TABLE pgwm_toast (id int PRIMARY KEY, counter int, big text)",
            # EXTERNAL: out of line and uncompressed, so 2100 bytes are enough to TOAST.
            "ALTER TABLE pgwm_toast ALTER COLUMN big SET STORAGE EXTERNAL",
            "CREATE TABLE pgwm_toast_full (id int PRIMARY KEY, counter int, big text)",
            "ALTER TABLE pgwm_toast_full ALTER COLUMN big SET STORAGE EXTERNAL",
            "ALTER TABLE pgwm_toast_full REPLICA IDENTITY FULL",
        ),
        steps=(
            "INSERT INTO pgwm_toast VALUES (1, 0, repeat('toast!', 350)), (2, 0, 'short')",
            "INSERT INTO pgwm_toast_full VALUES (1, 0, repeat('TOAST?', 350))",
            "UPDATE pgwm_toast SET counter = counter + 1",
            "UPDATE pgwm_toast_full SET counter = counter + 1",
            "UPDATE pgwm_toast SET big = 'now short' WHERE id = 1",
            "DELETE FROM pgwm_toast_full",
        ),
        teardown=("DROP TABLE IF EXISTS pgwm_toast, pgwm_toast_full",),
        emits=frozenset("BCRIUD"),
    ),
    Scenario(
        name="truncate",
        description="TRUNCATE of several tables with CASCADE and RESTART IDENTITY, and plain",
        publish=("pgwm_trunc_parent", "pgwm_trunc_child", "pgwm_trunc_other"),
        setup=(
            "CREATE TABLE pgwm_trunc_parent (id serial PRIMARY KEY, v text)",
            "CREATE TABLE pgwm_trunc_child (id serial PRIMARY KEY, "
            "parent_id int REFERENCES pgwm_trunc_parent (id))",
            "CREATE TABLE pgwm_trunc_other (id bigserial PRIMARY KEY)",
        ),
        steps=(
            "INSERT INTO pgwm_trunc_parent (v) VALUES ('p1'), ('p2')",
            "INSERT INTO pgwm_trunc_child (parent_id) VALUES (1), (2)",
            "INSERT INTO pgwm_trunc_other DEFAULT VALUES",
            "TRUNCATE pgwm_trunc_parent, pgwm_trunc_other RESTART IDENTITY CASCADE",
            "INSERT INTO pgwm_trunc_other DEFAULT VALUES",
            "TRUNCATE pgwm_trunc_other",
            "BEGIN; INSERT INTO pgwm_trunc_parent (v) VALUES ('p3'); "
            "TRUNCATE pgwm_trunc_child CONTINUE IDENTITY; COMMIT",
        ),
        teardown=("DROP TABLE IF EXISTS pgwm_trunc_child, pgwm_trunc_parent, pgwm_trunc_other",),
        emits=frozenset("BCRIT"),
    ),
    Scenario(
        name="messages",
        description="pg_logical_emit_message: transactional and not, text and bytea content",
        publish=("pgwm_msg",),
        setup=("CREATE TABLE pgwm_msg (id int PRIMARY KEY)",),
        steps=(
            "SELECT pg_logical_emit_message(false, 'pgwm', 'non-transactional')",
            "SELECT pg_logical_emit_message(false, 'pgwm.bytes', '\\x0001027f80ff'::bytea)",
            "BEGIN; INSERT INTO pgwm_msg VALUES (1); "
            "SELECT pg_logical_emit_message(true, 'pgwm', 'transactional'); COMMIT",
            "BEGIN; SELECT pg_logical_emit_message(true, 'pgwm.empty', ''); COMMIT",
            # Rolled back: the transactional message vanishes, the other one is sent at once.
            "BEGIN; INSERT INTO pgwm_msg VALUES (2); "
            "SELECT pg_logical_emit_message(true, 'pgwm', 'rolled back'); "
            "SELECT pg_logical_emit_message(false, 'pgwm', 'survives rollback'); ROLLBACK",
        ),
        teardown=("DROP TABLE IF EXISTS pgwm_msg",),
        emits=frozenset("BCMRI"),
    ),
    Scenario(
        name="custom_types",
        description="Enum, domain, composite and enum-array columns (Type messages)",
        publish=("pgwm_custom", "pgwm_s.pgwm_custom_other"),
        setup=(
            "CREATE TYPE pgwm_mood AS ENUM ('sad', 'ok', 'happy')",
            "CREATE DOMAIN pgwm_posint AS int CHECK (VALUE > 0)",
            "CREATE TYPE pgwm_point3 AS (x float8, y float8, label text)",
            "CREATE SCHEMA pgwm_s",
            "CREATE TYPE pgwm_s.pgwm_color AS ENUM ('red', 'green')",
            "CREATE TABLE pgwm_custom (id int PRIMARY KEY, mood pgwm_mood, n pgwm_posint, "
            "p pgwm_point3, moods pgwm_mood[])",
            "CREATE TABLE pgwm_s.pgwm_custom_other (id int PRIMARY KEY, color pgwm_s.pgwm_color)",
        ),
        steps=(
            "INSERT INTO pgwm_custom VALUES (1, 'happy', 42, ROW(1.5, -2, 'a \"label\"'), "
            "'{sad,NULL,ok}'), (2, NULL, NULL, ROW(NULL, NULL, NULL), NULL)",
            "INSERT INTO pgwm_s.pgwm_custom_other VALUES (1, 'green')",
            "UPDATE pgwm_custom SET mood = 'ok', p.label = 'changed' WHERE id = 1",
            "DELETE FROM pgwm_custom WHERE id = 2",
        ),
        teardown=(
            "DROP TABLE IF EXISTS pgwm_custom",
            "DROP SCHEMA IF EXISTS pgwm_s CASCADE",
            "DROP TYPE IF EXISTS pgwm_mood, pgwm_point3",
            "DROP DOMAIN IF EXISTS pgwm_posint",
        ),
        emits=frozenset("BCYRIUD"),
    ),
    Scenario(
        name="ddl",
        description="ALTER TABLE ADD/DROP COLUMN and RENAME between and inside transactions",
        publish=("pgwm_ddl",),
        setup=("CREATE TABLE pgwm_ddl (id int PRIMARY KEY, a text)",),
        steps=(
            "INSERT INTO pgwm_ddl VALUES (1, 'before')",
            "ALTER TABLE pgwm_ddl ADD COLUMN b int DEFAULT 7",
            "INSERT INTO pgwm_ddl VALUES (2, 'after add', 8)",
            "UPDATE pgwm_ddl SET a = 'old row' WHERE id = 1",
            "ALTER TABLE pgwm_ddl DROP COLUMN a",
            "INSERT INTO pgwm_ddl VALUES (3, 9)",
            "BEGIN; INSERT INTO pgwm_ddl VALUES (4, 10); "
            "ALTER TABLE pgwm_ddl ADD COLUMN c text; "
            "INSERT INTO pgwm_ddl VALUES (5, 11, 'mid-transaction'); COMMIT",
            "ALTER TABLE pgwm_ddl RENAME TO pgwm_ddl_renamed",
            "INSERT INTO pgwm_ddl_renamed VALUES (6, 12, 'renamed')",
            "ALTER TABLE pgwm_ddl_renamed RENAME TO pgwm_ddl",
        ),
        teardown=("DROP TABLE IF EXISTS pgwm_ddl, pgwm_ddl_renamed",),
        emits=frozenset("BCRIU"),
    ),
    Scenario(
        name="streaming",
        description="Large transactions: committed with a rolled-back subtransaction, and "
        "rolled back; stream Start/Stop/Commit/Abort when streaming is on",
        publish=("pgwm_stream",),
        setup=(
            "CREATE TABLE pgwm_stream (id int PRIMARY KEY, v text)",
            "CREATE TABLE pgwm_stream_ballast (pad text)",
        ),
        steps=(
            "BEGIN; "
            + _ballast("pgwm_stream_ballast", 8, 1, "top", "pgwm_stream")
            + "; SELECT pg_logical_emit_message(true, 'pgwm', 'inside a large transaction'); "
            "SAVEPOINT s1; "
            + _ballast("pgwm_stream_ballast", 8, 100, "subxact", "pgwm_stream")
            + "; ROLLBACK TO SAVEPOINT s1; "
            "SAVEPOINT s2; INSERT INTO pgwm_stream VALUES (50, 'kept subxact'); RELEASE s2; "
            "UPDATE pgwm_stream SET v = v || ' updated' WHERE id <= 2; "
            "DELETE FROM pgwm_stream WHERE id = 3; COMMIT",
            "BEGIN; "
            + _ballast("pgwm_stream_ballast", 8, 200, "aborted", "pgwm_stream")
            + "; ROLLBACK",
            "INSERT INTO pgwm_stream VALUES (300, 'small afterwards')",
        ),
        teardown=("DROP TABLE IF EXISTS pgwm_stream, pgwm_stream_ballast",),
        emits=frozenset("BCRIUDM"),
    ),
    Scenario(
        name="two_phase",
        description="PREPARE TRANSACTION with COMMIT/ROLLBACK PREPARED, small and large "
        "(Stream Prepare); decoded at commit time without two_phase",
        publish=("pgwm_2pc",),
        setup=(
            "CREATE TABLE pgwm_2pc (id int PRIMARY KEY, v text)",
            "CREATE TABLE pgwm_2pc_ballast (pad text)",
        ),
        steps=(
            "BEGIN; INSERT INTO pgwm_2pc VALUES (1, 'prepared then committed'); "
            "SELECT pg_logical_emit_message(true, 'pgwm', 'in a prepared transaction'); "
            "PREPARE TRANSACTION 'pgwm_commit'",
            "COMMIT PREPARED 'pgwm_commit'",
            "BEGIN; INSERT INTO pgwm_2pc VALUES (2, 'prepared then rolled back'); "
            "PREPARE TRANSACTION 'pgwm_rollback'",
            "ROLLBACK PREPARED 'pgwm_rollback'",
            "BEGIN; "
            + _ballast("pgwm_2pc_ballast", 8, 100, "large prepared", "pgwm_2pc")
            + "; PREPARE TRANSACTION 'pgwm_large_commit'",
            "COMMIT PREPARED 'pgwm_large_commit'",
            "BEGIN; "
            + _ballast("pgwm_2pc_ballast", 8, 200, "large rolled back", "pgwm_2pc")
            + "; PREPARE TRANSACTION 'pgwm_large_rollback'",
            "ROLLBACK PREPARED 'pgwm_large_rollback'",
        ),
        teardown=("DROP TABLE IF EXISTS pgwm_2pc, pgwm_2pc_ballast",),
        emits=frozenset("BCRIM"),
    ),
    Scenario(
        name="origin",
        description="Changes made under a replication origin (Origin messages), small, "
        "streamed and prepared",
        publish=("pgwm_origin",),
        setup=(
            "CREATE TABLE pgwm_origin (id int PRIMARY KEY, v text)",
            "CREATE TABLE pgwm_origin_ballast (pad text)",
            "SELECT pg_replication_origin_create('pgwm_upstream')",
        ),
        steps=(
            "SELECT pg_replication_origin_session_setup('pgwm_upstream')",
            "BEGIN; SELECT pg_replication_origin_xact_setup('0/1234ABCD', "
            "'2024-02-29 12:34:56.789+00'); INSERT INTO pgwm_origin VALUES (1, 'from upstream'); "
            "UPDATE pgwm_origin SET v = 'from upstream, updated'; COMMIT",
            "BEGIN; SELECT pg_replication_origin_xact_setup('0/1234ABFF', "
            "'2024-02-29 12:35:00+00'); "
            + _ballast("pgwm_origin_ballast", 8, 100, "large from upstream", "pgwm_origin")
            + "; COMMIT",
            "BEGIN; SELECT pg_replication_origin_xact_setup('0/1234AC00', "
            "'2024-02-29 12:36:00+00'); INSERT INTO pgwm_origin VALUES (2, 'prepared upstream'); "
            "PREPARE TRANSACTION 'pgwm_origin_prepared'",
            "COMMIT PREPARED 'pgwm_origin_prepared'",
            "SELECT pg_replication_origin_session_reset()",
            "INSERT INTO pgwm_origin VALUES (3, 'local')",
        ),
        teardown=(
            "DROP TABLE IF EXISTS pgwm_origin, pgwm_origin_ballast",
            "SELECT pg_replication_origin_drop(roname) FROM pg_replication_origin "
            "WHERE roname = 'pgwm_upstream'",
        ),
        emits=frozenset("BCORIU"),
    ),
    Scenario(
        name="partitioned",
        description="A partitioned table published through its root "
        "(publish_via_partition_root): changes to any partition, and a row moving "
        "between partitions, arrive as the root's",
        publish=("pgwm_part",),
        publication_with="publish_via_partition_root = true",
        setup=(
            "CREATE TABLE pgwm_part (id int, region text, v text, PRIMARY KEY (id, region)) "
            "PARTITION BY LIST (region)",
            "CREATE TABLE pgwm_part_eu PARTITION OF pgwm_part FOR VALUES IN ('eu')",
            "CREATE TABLE pgwm_part_us PARTITION OF pgwm_part FOR VALUES IN ('us')",
        ),
        steps=(
            "INSERT INTO pgwm_part VALUES (1, 'eu', 'a'), (2, 'us', 'b'), (3, 'eu', 'c')",
            "UPDATE pgwm_part SET v = 'a2' WHERE id = 1",
            # Moving a row to another partition is a delete from one and an insert into
            # the other (ExecCrossPartitionUpdate), both reported as the root's.
            "UPDATE pgwm_part SET region = 'us' WHERE id = 1",
            "DELETE FROM pgwm_part WHERE id = 2",
        ),
        teardown=("DROP TABLE IF EXISTS pgwm_part",),
        emits=frozenset("BCRIUD"),
    ),
    Scenario(
        name="publication_filters",
        description="A column list (unpublished columns never sent) and a row filter "
        "(updates that enter or leave the filter become inserts and deletes), 15+",
        publish=(
            "pgwm_cols (id, public_v, n)",
            "pgwm_rows WHERE (status = 'active')",
        ),
        min_version=15,
        setup=(
            "CREATE TABLE pgwm_cols (id int PRIMARY KEY, public_v text, secret text, n int)",
            "CREATE TABLE pgwm_rows (id int PRIMARY KEY, status text, v text)",
            # A row filter on UPDATE/DELETE may use only replica identity columns.
            "ALTER TABLE pgwm_rows REPLICA IDENTITY FULL",
        ),
        steps=(
            "INSERT INTO pgwm_cols VALUES (1, 'a', 's1', 1), (2, 'b', 's2', 2)",
            "UPDATE pgwm_cols SET secret = 'changed only here' WHERE id = 1",
            "UPDATE pgwm_cols SET public_v = 'b2', n = 20 WHERE id = 2",
            "DELETE FROM pgwm_cols WHERE id = 1",
            "INSERT INTO pgwm_rows VALUES (1, 'active', 'a'), (2, 'inactive', 'b'), "
            "(3, 'active', 'c')",
            "UPDATE pgwm_rows SET status = 'active' WHERE id = 2",  # enters: INSERT
            "UPDATE pgwm_rows SET status = 'inactive' WHERE id = 1",  # leaves: DELETE
            "UPDATE pgwm_rows SET v = 'c2' WHERE id = 3",  # stays: UPDATE
            "UPDATE pgwm_rows SET v = 'ignored' WHERE id = 1",  # outside: nothing
            "DELETE FROM pgwm_rows WHERE id = 3",
        ),
        teardown=("DROP TABLE IF EXISTS pgwm_cols, pgwm_rows",),
        emits=frozenset("BCRIUD"),
    ),
    Scenario(
        name="generated",
        description="A stored generated column, which pgoutput 14-17 leaves out of "
        "Relation and tuples",
        publish=("pgwm_gen",),
        setup=(
            "CREATE TABLE pgwm_gen (id int PRIMARY KEY, a int, "
            "doubled int GENERATED ALWAYS AS (a * 2) STORED, b text)",
        ),
        steps=(
            "INSERT INTO pgwm_gen (id, a, b) VALUES (1, 10, 'x'), (2, 20, 'y')",
            "UPDATE pgwm_gen SET a = 11 WHERE id = 1",
            "DELETE FROM pgwm_gen WHERE id = 2",
        ),
        teardown=("DROP TABLE IF EXISTS pgwm_gen",),
        emits=frozenset("BCRIUD"),
    ),
)

#: Scenarios only the resume check runs (conformance.resume.EXTRA_CELLS), not the
#: matrix or the corpus: restart positions inside prepared transactions that also roll a
#: subtransaction back, streamed (Stream Abort of the subtransaction inside a stream that
#: ends in Stream Prepare) and not.
RESUME_SCENARIOS: Final[tuple[Scenario, ...]] = (
    Scenario(
        name="prepared_subxacts",
        description="Large prepared transactions with a rolled-back subtransaction, "
        "committed and rolled back prepared around a plain commit; a small one too",
        publish=("pgwm_2pcsub",),
        setup=(
            "CREATE TABLE pgwm_2pcsub (id int PRIMARY KEY, v text)",
            "CREATE TABLE pgwm_2pcsub_ballast (pad text)",
        ),
        steps=(
            "BEGIN; "
            + _ballast("pgwm_2pcsub_ballast", 6, 1, "prepared", "pgwm_2pcsub")
            + "; SAVEPOINT s1; "
            + _ballast("pgwm_2pcsub_ballast", 6, 100, "subxact", "pgwm_2pcsub")
            + "; ROLLBACK TO SAVEPOINT s1; "
            "SAVEPOINT s2; INSERT INTO pgwm_2pcsub VALUES (50, 'kept subxact'); RELEASE s2; "
            "UPDATE pgwm_2pcsub SET v = v || ' updated' WHERE id <= 2; "
            "PREPARE TRANSACTION 'pgwm_sub_commit'",
            "INSERT INTO pgwm_2pcsub VALUES (60, 'committed while prepared')",
            "COMMIT PREPARED 'pgwm_sub_commit'",
            "BEGIN; "
            + _ballast("pgwm_2pcsub_ballast", 6, 200, "rolled back", "pgwm_2pcsub")
            + "; SAVEPOINT s1; "
            + _ballast("pgwm_2pcsub_ballast", 4, 300, "subxact", "pgwm_2pcsub")
            + "; ROLLBACK TO SAVEPOINT s1; "
            "INSERT INTO pgwm_2pcsub VALUES (250, 'after the savepoint'); "
            "PREPARE TRANSACTION 'pgwm_sub_rollback'",
            "ROLLBACK PREPARED 'pgwm_sub_rollback'",
            "BEGIN; INSERT INTO pgwm_2pcsub VALUES (400, 'small prepared'); SAVEPOINT s1; "
            "INSERT INTO pgwm_2pcsub VALUES (401, 'rolled back'); ROLLBACK TO SAVEPOINT s1; "
            "INSERT INTO pgwm_2pcsub VALUES (402, 'kept'); PREPARE TRANSACTION 'pgwm_small'",
            "COMMIT PREPARED 'pgwm_small'",
            "INSERT INTO pgwm_2pcsub VALUES (500, 'small afterwards')",
        ),
        teardown=("DROP TABLE IF EXISTS pgwm_2pcsub, pgwm_2pcsub_ballast",),
        emits=frozenset("BCRIU"),
    ),
)
