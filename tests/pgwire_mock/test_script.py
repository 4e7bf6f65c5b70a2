"""Unit tests of the stream script: loading, errors, the Python API, the encoder rules."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from codec.pgoutput import (
    UNCHANGED_TOAST,
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Decoder,
    Delete,
    Insert,
    Message,
    Origin,
    PgOutputMessage,
    Prepare,
    Relation,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    Type,
    Update,
)
from pgwire_mock.script import (
    Fault,
    OptionError,
    PublicationMissingError,
    PublicationsSkipped,
    Script,
    ScriptError,
    Send,
    Sleep,
    StreamOptions,
    column,
    delete,
    dump_script,
    encode_stream,
    insert,
    load_recording,
    load_script,
    loads_script,
    message,
    rollback_to_savepoint,
    savepoint,
    truncate,
    update,
)
from pgwire_mock.script.compile import compile_script

EXAMPLE = Path(__file__).parents[2] / "examples" / "demo.yaml"
GOLDEN = Path(__file__).parents[1] / "data" / "golden"

BASE = """
format_version: 1
server: {pg_version: 16, logical_decoding_work_mem: 64kB}
publications: [{name: pub, tables: [public.t]}]
tables:
  - name: public.t
    columns: [id int4 key, v text]
  - name: public.hidden
    columns: [id int4 key]
steps:
"""


def _load(steps: str, base: str = BASE) -> Script:
    return loads_script(base + steps, source="script.yaml")


def _messages(
    script: Script, options: StreamOptions | None = None, **kw: Any
) -> list[PgOutputMessage]:
    options = options or StreamOptions(1, ("pub",), messages=True)
    return [e.message for e in encode_stream(script, options, **kw) if isinstance(e, Send)]


def _names(messages: list[PgOutputMessage]) -> list[str]:
    return [type(m).__name__ for m in messages]


# --- loading ---------------------------------------------------------------------------------


def test_example_loads_and_emits_every_message_type() -> None:
    """The demo script produces all 19 pgoutput message types with proto 4 options."""
    script = load_script(EXAMPLE)
    options = StreamOptions(4, ("demo_pub",), messages=True, streaming="parallel", two_phase=True)
    tags = {e.payload[:1] for e in encode_stream(script, options) if isinstance(e, Send)}
    assert len(tags) == 19


def test_json_scripts_are_accepted(tmp_path: Path) -> None:
    """A .json file holding the same dict loads to the same script."""
    script = load_script(EXAMPLE)
    path = tmp_path / "demo.json"
    path.write_text(json.dumps(script.to_dict()))
    assert load_script(path) == script


PUBLICATION_STEPS = """\
format_version: 1
tables: [{name: public.t, columns: [id int4 key]}]
steps:
  - transaction: [{insert: public.t, values: {id: 1}}]
  - create_publication: {name: p, tables: [public.t]}
  - transaction: [{insert: public.t, values: {id: 2}}]
  - drop_publication: p
  - transaction: [{insert: public.t, values: {id: 3}}]
"""


def test_publication_steps_publish_between_their_commits() -> None:
    """create_publication / drop_publication steps round-trip, and a walsender finds the
    publication for the changes between them only: on 16 the first change before it
    ends the stream (42704), from after the creation it sends id 2 and then fails at
    id 3; on 18 it skips with a warning and sends id 2 alone."""
    script = loads_script(PUBLICATION_STEPS)
    assert loads_script(dump_script(script)) == script
    only = loads_script(
        PUBLICATION_STEPS.replace("tables: [public.t]}", "tables: [public.t], publish: []}")
    )
    assert loads_script(dump_script(only)) == only
    assert only.steps[1].publication.publish == ()  # type: ignore[union-attr]

    def run(version: int, from_lsn: int) -> list[object]:
        script.server = dataclasses.replace(script.server, pg_version=version)
        out: list[object] = []
        try:
            for event in encode_stream(script, StreamOptions(1, ("p",)), from_lsn=from_lsn):
                if isinstance(event, Send) and isinstance(event.message, Insert):
                    out.append(event.message.new_tuple)
                elif isinstance(event, PublicationsSkipped):
                    out.append("skipped")
        except PublicationMissingError:
            out.append("42704")
        return out

    assert run(16, 0) == ["42704"]
    compiled = compile_script(script)
    created = compiled.publication_changes[0].lsn
    assert run(16, created) == [("2",), "42704"]
    assert run(18, 0) == ["skipped", ("2",), "skipped"]
    with pytest.raises(ScriptError, match='publication "q" does not exist'):
        loads_script(PUBLICATION_STEPS.replace("drop_publication: p", "drop_publication: q"))


@pytest.mark.parametrize(
    ("step", "said"),
    [
        ("{alter_publication: p, add_tables: [public.t]}", 'relation "t" is already member'),
        ("{alter_publication: p, drop_tables: [public.u]}", 'relation "u" is not part of'),
        ("{alter_publication: q, set_tables: [public.t]}", 'publication "q" does not exist'),
        ("{alter_publication: p, add_tables: [public.x]}", "no table public.x"),
        ("{alter_publication: p, add_tables: [], drop_tables: []}", "exactly one of"),
    ],
)
def test_alter_publication_steps_are_refused_as_postgresql_refuses_them(
    step: str, said: str
) -> None:
    text = (
        "format_version: 1\ntables: [{name: public.t, columns: [id int4 key]},"
        " {name: public.u, columns: [id int4 key]}]\n"
        "publications: [{name: p, tables: [public.t]}]\n"
        f"steps:\n  - {step}\n"
    )
    with pytest.raises(ScriptError, match=re.escape(said)):
        loads_script(text)
    good = text.replace(step, "{alter_publication: p, set_tables: [public.u]}")
    assert loads_script(dump_script(loads_script(good))) == loads_script(good)


def test_round_trip_through_dict_and_yaml() -> None:
    """to_dict → from_dict and dump → load keep the script and its bytes."""
    script = load_script(EXAMPLE)
    again = Script.from_dict(script.to_dict())
    assert again == script
    assert loads_script(dump_script(script)) == script
    options = StreamOptions(4, ("demo_pub",), messages=True, streaming="on", two_phase=True)
    assert [e for e in encode_stream(again, options)] == [e for e in encode_stream(script, options)]


def test_api_builds_the_same_script_as_yaml() -> None:
    """The builder API and the YAML form describe the same model."""
    yaml_script = _load(
        """
  - transaction:
      - insert: public.t
        values: {id: 1, v: a}
      - update: public.t
        values: {id: 2, v: b}
        key: {id: 1}
  - message: {prefix: p, content: hi}
  - sleep: 1.5
  - fault: close_after
    messages: 3
"""
    )
    api = (
        Script(pg_version=16, logical_decoding_work_mem=64)
        .publication("pub", tables=["public.t"])
        .table("public.t", columns=[column("id", "int4", key=True), column("v", "text")])
        .table("public.hidden", columns=[column("id", "int4", key=True)])
        .transaction(
            [insert("public.t", id=1, v="a"), update("public.t", id=2, v="b", key={"id": 1})]
        )
        .message("p", "hi")
        .sleep(1.5)
        .fault("close_after", messages=3)
    )
    assert api == yaml_script


def test_python_values_round_trip_as_text() -> None:
    """Python objects given through the API become their text form in to_dict."""
    from datetime import UTC, datetime
    from decimal import Decimal

    script = (
        Script()
        .table(
            "public.x",
            columns=[
                column("id", "int4", key=True),
                column("n", "numeric"),
                column("at", "timestamptz"),
            ],
        )
        .publication("pub", tables=["public.x"])
        .transaction(
            [insert("public.x", id=1, n=Decimal("1.50"), at=datetime(2024, 1, 2, tzinfo=UTC))]
        )
    )
    values = script.to_dict()["steps"][0]["transaction"]["changes"][0]["values"]
    assert values == {"id": 1, "n": "1.50", "at": "2024-01-02 00:00:00+00"}
    assert Script.from_dict(script.to_dict()) == script


def test_yaml_keeps_yes_no_and_dates_as_text() -> None:
    """on/no/yes and ISO dates are strings, not YAML 1.1 booleans or dates."""
    script = _load(
        """
  - transaction:
      - insert: public.t
        values: {id: 1, v: on}
      - insert: public.t
        values: {id: 2, v: 2024-01-01}
"""
    )
    inserts = [m for m in _messages(script) if isinstance(m, Insert)]
    assert [m.new_tuple[1] for m in inserts] == ["on", "2024-01-01"]


# --- errors: one line naming the place -------------------------------------------------------


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        (
            "  - transaction:\n      - insert: public.t\n        values: {id: abc}\n",
            "script.yaml: steps[0].changes[0].values.id: expected int4, got 'abc'",
        ),
        (
            "  - transaction:\n      - insert: public.nope\n",
            "script.yaml: steps[0].changes[0].insert: no table 'public.nope'",
        ),
        (
            "  - transaction:\n      - insert: public.t\n        values: {x: 1}\n",
            "script.yaml: steps[0].changes[0].values: no column 'x' in public.t",
        ),
        (
            "  - transaction:\n      - delete: public.t\n",
            "script.yaml: steps[0].changes[0]: a DELETE needs the old key (key:)",
        ),
        (
            "  - transaction:\n      - update: public.t\n        old: {id: 1}\n",
            "script.yaml: steps[0].changes[0].old: old: is only for REPLICA IDENTITY "
            "FULL; use key:",
        ),
        (
            "  - transaction:\n      - rollback_to_savepoint: s\n",
            "script.yaml: steps[0].changes[0]: savepoint 's' does not exist",
        ),
        (
            "  - transaction:\n      - frobnicate: x\n",
            "script.yaml: steps[0].changes[0]: expected exactly one of insert, update, "
            "delete, truncate, message, savepoint, rollback_to_savepoint, release_savepoint, "
            "alter_table (a change)",
        ),
        ("  - commit_prepared: g\n", "script.yaml: steps[0]: no prepared transaction 'g'"),
        (
            "  - fault: explode\n",
            "script.yaml: steps[0]: unknown fault 'explode' (expected one of close_after, error, "
            "pause, redeliver, shutdown, silent_timeout, slow, stop_keepalives, timeline_switch, "
            "wal_removed)",
        ),
        ("  - sleep: soon\n", "script.yaml: steps[0].sleep: expected a number, got 'soon'"),
        (
            "  - transaction:\n      stream: sometimes\n      changes: []\n",
            "script.yaml: steps[0].stream: expected one of auto, always, never, got 'sometimes'",
        ),
        (
            "  - transaction:\n      - insert: public.t\n        values: {id: 99999999999}\n",
            "script.yaml: steps[0].changes[0].values.id: expected int4, got 99999999999",
        ),
        (
            "  - message: {prefix: p}\n",
            "script.yaml: steps[0].message: expected exactly one of content, content_hex",
        ),
        (
            "  - transaction:\n      - insert: public.t\n    bogus: 1\n",
            "script.yaml: steps[0]: unknown key 'bogus'",
        ),
    ],
)
def test_bad_steps_fail_with_one_line(steps: str, expected: str) -> None:
    """Each bad script fails at load with one line naming the file and the place."""
    with pytest.raises(ScriptError) as info:
        _load(steps)
    assert str(info.value) == expected
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("format_version: 2\n", "script.yaml: format_version: unsupported format_version 2"),
        ("[1, 2]\n", "script.yaml: expected a mapping at the top level"),
        (
            "format_version: 1\nserver: {pg_version: 13}\n",
            "script.yaml: server.pg_version: expected",
        ),
        (
            "format_version: 1\ntables: [{name: t, columns: [id int4]}]\n",
            "script.yaml: tables[0].name: expected a schema-qualified name, got 't'",
        ),
        (
            "format_version: 1\ntables: [{name: public.t, columns: [id int5]}]\n",
            "script.yaml: tables[0].columns[0].type: unknown type 'int5'",
        ),
        (
            "format_version: 1\npublications: [{name: p, tables: [public.x]}]\n",
            "script.yaml: publications[0].tables[0]: no table public.x",
        ),
        (
            "format_version: 1\nslots: [{name: s, plugin: wal2json}]\n",
            "script.yaml: slots[0].plugin: expected plugin pgoutput, got 'wal2json'",
        ),
        (
            "format_version: 1\npublications: [{name: p, all_tables: true, publish: [upsert]}]\n",
            "script.yaml: publications[0].publish: unrecognized value for publication option"
            ' "publish": "upsert"',
        ),
        (
            "format_version: 1\nslots: [{name: My-Slot}]\n",
            'script.yaml: slots[0].name: replication slot name "My-Slot" contains invalid',
        ),
        (
            "format_version: 1\nsteps: [{sleep: 1\n",
            "script.yaml: line 3: not valid YAML: expected ',' or '}'",
        ),
        (
            "format_version: 1\ntypes: [{name: public.e, enum: [a]}]\n"
            "tables: [{name: public.t, columns: [id int4 key, e public.e]}]\n"
            "steps: [{transaction: [{insert: public.t, values: {id: 1, e: b}}]}]\n",
            "script.yaml: steps[0].changes[0].values.e: expected public.e, got 'b'",
        ),
    ],
)
def test_bad_scripts_fail_with_one_line(text: str, expected: str) -> None:
    """Catalogue errors name their place too."""
    with pytest.raises(ScriptError) as info:
        loads_script(text, source="script.yaml")
    assert str(info.value).startswith(expected)
    assert "\n" not in str(info.value)


def test_api_scripts_report_places_too() -> None:
    """A script built in Python fails at encode time with the same kind of message."""
    script = (
        Script()
        .table("public.t", columns=[column("id", "int2")])
        .transaction([insert("public.t", id=70000)])
    )
    with pytest.raises(ScriptError, match=r"^<script>: steps\[0\].changes\[0\].values.id: "):
        list(encode_stream(script, StreamOptions(1, ())))


def test_missing_file_is_a_script_error(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match="cannot read"):
        load_script(tmp_path / "nope.yaml")


# --- options -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "options", "sqlstate", "text"),
    [
        (
            14,
            {"proto_version": "3", "publication_names": "p"},
            "0A000",
            "client sent proto_version=3 but we only support protocol 2 or lower",
        ),
        (
            16,
            {"proto_version": "5", "publication_names": "p"},
            "0A000",
            "client sent proto_version=5 but server only supports protocol 4 or lower",
        ),
        (
            16,
            {"proto_version": "1", "publication_names": "p", "streaming": "on"},
            "22023",
            "requested proto_version=1 does not support streaming, need 2 or higher",
        ),
        (
            15,
            {"proto_version": "2", "publication_names": "p", "two_phase": "on"},
            "22023",
            "requested proto_version=2 does not support two-phase commit, need 3 or higher",
        ),
        (
            14,
            {"proto_version": "2", "publication_names": "p", "two_phase": "on"},
            "XX000",
            "unrecognized pgoutput option: two_phase",
        ),
        (
            15,
            {"proto_version": "3", "publication_names": "p", "origin": "none"},
            "XX000",
            "unrecognized pgoutput option: origin",
        ),
        (
            16,
            {"proto_version": "3", "publication_names": "p", "streaming": "parallel"},
            "22023",
            "requested proto_version=3 does not support parallel streaming, need 4 or higher",
        ),
        (
            16,
            {"proto_version": "4", "publication_names": "p", "binary": "maybe"},
            "22023",
            "binary requires a Boolean value",
        ),
        (16, {"proto_version": "1"}, "22023", "publication_names parameter missing"),
        (17, {"publication_names": "p"}, "22023", 'option "proto_version" missing'),
    ],
)
def test_options_are_refused_like_pgoutput(
    version: int, options: dict[str, str], sqlstate: str, text: str
) -> None:
    """StreamOptions.from_pgoutput raises pgoutput's own errors, per version."""
    with pytest.raises(OptionError) as info:
        StreamOptions.from_pgoutput(options, server_version=version)
    assert info.value.sqlstate == sqlstate
    assert str(info.value) == text


def test_options_parse_identifiers_and_booleans() -> None:
    parsed = StreamOptions.from_pgoutput(
        {
            "proto_version": "4",
            "publication_names": 'a, "B c",D',
            "binary": "on",
            "messages": "t",
            "streaming": "parallel",
            "origin": "NONE",
        },
        server_version=17,
    )
    assert parsed == StreamOptions(4, ("a", "B c", "d"), True, True, "parallel", False, "none")


def test_missing_publication_fails_at_the_first_change() -> None:
    """Like PostgreSQL, a missing publication is reported when a change is decoded."""
    script = _load("  - message: {prefix: p, content: x}\n  - transaction: [{insert: public.t}]\n")
    events = encode_stream(script, StreamOptions(1, ("nope",), messages=True))
    assert isinstance(next(events), Send)
    with pytest.raises(PublicationMissingError) as info:
        next(events)
    assert (info.value.sqlstate, str(info.value)) == ("42704", 'publication "nope" does not exist')


# --- encoder rules ---------------------------------------------------------------------------


def test_relation_sent_once_and_again_after_alter_table() -> None:
    script = _load(
        """
  - transaction: [{insert: public.t, values: {id: 1}}]
  - transaction: [{insert: public.t, values: {id: 2}}]
  - alter_table: public.t
    add_columns: [{name: n, type: int8}]
  - transaction: [{insert: public.t, values: {id: 3, n: 7}}]
"""
    )
    messages = _messages(script)
    relations = [m for m in messages if isinstance(m, Relation)]
    assert len(relations) == 2
    assert [c.name for c in relations[1].columns] == ["id", "v", "n"]
    assert messages[-2] == Insert(relations[0].oid, ("3", None, "7"))


@pytest.mark.parametrize(("version", "expected"), [(14, 2), (15, 0), (17, 0)])
def test_empty_transactions_are_skipped_from_15(version: int, expected: int) -> None:
    """A transaction whose changes are all filtered out: BEGIN/COMMIT on 14, nothing on 15+."""
    script = _load("  - transaction: [{insert: public.hidden, values: {id: 1}}]\n")
    assert len(_messages(script, server_version=version)) == expected


def test_alter_table_alone_is_an_empty_transaction_on_14() -> None:
    script = _load("  - alter_table: public.t\n    drop_columns: [v]\n")
    assert _names(_messages(script, server_version=14)) == ["Begin", "Commit"]
    assert _messages(script, server_version=15) == []


def test_text_and_binary_values() -> None:
    script = _load("  - transaction: [{insert: public.t, values: {id: 258, v: x}}]\n")
    text = next(m for m in _messages(script) if isinstance(m, Insert))
    binary = next(
        m
        for m in _messages(script, StreamOptions(1, ("pub",), binary=True))
        if isinstance(m, Insert)
    )
    assert text.new_tuple == ("258", "x")
    assert binary.new_tuple == (b"\x00\x00\x01\x02", b"x")


def test_update_full_identity_and_unchanged_toast() -> None:
    script = _load(
        """
  - transaction:
      - update: public.f
        old: {id: 1, big: aaa}
        values: {id: 1}
        unchanged: [big]
      - delete: public.f
        old: {id: 1, big: aaa}
""",
        base=BASE.replace(
            "tables:\n",
            "tables:\n  - name: public.f\n    replica_identity: full\n"
            "    columns: [id int4, big text]\n",
        ).replace("[public.t]", "[public.t, public.f]"),
    )
    update_msg, delete_msg = [m for m in _messages(script) if isinstance(m, Update | Delete)]
    assert update_msg == Update(update_msg.relation_oid, ("1", UNCHANGED_TOAST), None, ("1", "aaa"))
    assert delete_msg == Delete(delete_msg.relation_oid, None, ("1", "aaa"))
    relation = next(m for m in _messages(script) if isinstance(m, Relation))
    assert relation.replica_identity == "f" and all(c.flags == 1 for c in relation.columns)


def test_user_types_send_type_messages_first() -> None:
    script = Script().enum("public.mood", ["sad", "ok"]).domain("public.pos", "int4")
    script.table(
        "public.u",
        columns=[
            column("id", "int4", key=True),
            column("m", "mood"),
            column("p", "pos"),
            column("ms", "mood[]"),
        ],
    ).publication("pub", tables=["public.u"]).transaction(
        [insert("public.u", id=1, m="ok", p=5, ms=["sad", None, "ok"])]
    )
    messages = _messages(script, StreamOptions(1, ("pub",)))
    assert _names(messages) == ["Begin", "Type", "Type", "Type", "Relation", "Insert", "Commit"]
    types = [m for m in messages if isinstance(m, Type)]
    assert [(t.namespace, t.name) for t in types] == [
        ("public", "mood"),
        ("", "int4"),
        ("public", "_mood"),
    ]
    assert messages[5].new_tuple == ("1", "ok", "5", "{sad,NULL,ok}")  # type: ignore[attr-defined]


def _big_script(stream: str = "auto") -> Script:
    t = "public.t"
    changes: list[Any] = [insert(t, id=i, v="x" * 500) for i in range(200)]
    changes += [savepoint("s"), *(insert(t, id=1000 + i, v="y" * 500) for i in range(200))]
    changes += [rollback_to_savepoint("s"), insert(t, id=5000), message("m", "end")]
    return (
        Script(logical_decoding_work_mem=64)
        .table(t, columns=[column("id", "int4", key=True), column("v", "text")])
        .publication("pub", tables=[t])
        .transaction(changes, stream=stream)
    )


def test_large_transaction_streams_with_subtransaction_abort() -> None:
    options = StreamOptions(2, ("pub",), messages=True, streaming="on")
    messages = _messages(_big_script(), options)
    assert isinstance(messages[0], StreamStart) and messages[0].first_segment
    aborts = [m for m in messages if isinstance(m, StreamAbort)]
    assert len(aborts) == 1 and aborts[0].subxid != aborts[0].xid
    assert aborts[0].abort_lsn is None
    assert isinstance(messages[-1], StreamCommit)
    top = messages[0].xid
    assert {
        m.xid for m in messages if isinstance(m, Insert) and m.new_tuple[0].startswith("1")
    } >= {top}
    # Messages in a stream carry the top-level xid.
    assert [m.xid for m in messages if isinstance(m, Message)] == [top]
    assert sum(isinstance(m, StreamStart) for m in messages) >= 3
    assert sum(isinstance(m, StreamStart) for m in messages) == sum(
        isinstance(m, StreamStop) for m in messages
    )


def test_parallel_streaming_sends_abort_lsn_and_time() -> None:
    options = StreamOptions(4, ("pub",), streaming="parallel")
    abort = next(m for m in _messages(_big_script(), options) if isinstance(m, StreamAbort))
    assert abort.abort_lsn is not None and abort.abort_timestamp is not None


def test_without_streaming_rolled_back_changes_vanish() -> None:
    messages = _messages(_big_script())
    assert _names(messages)[0] == "Begin" and _names(messages)[-1] == "Commit"
    ids = {m.new_tuple[0] for m in messages if isinstance(m, Insert)}
    assert len(ids) == 201 and not any(str(i).startswith("1") and len(str(i)) == 4 for i in ids)


def test_stream_never_and_always() -> None:
    options = StreamOptions(2, ("pub",), streaming="on")
    assert not any(isinstance(m, StreamStart) for m in _messages(_big_script("never"), options))
    small = _load("  - transaction:\n      stream: always\n      changes: [{insert: public.t}]\n")
    assert _names(_messages(small, options)) == [
        "StreamStart",
        "Relation",
        "Insert",
        "StreamStop",
        "StreamCommit",
    ]


def test_a_transaction_prepared_with_nothing_written_is_not_decoded() -> None:
    """PREPARE TRANSACTION takes an xid and writes its record, but with no change the
    reorder buffer has no transaction: no Begin Prepare, Prepare or Commit Prepared, with
    or without two-phase (measured on 14, 15, 16 with two_phase and 18; found by
    conformance.live_random, seed 215 on 15)."""
    script = _load(
        """
  - transaction:
      prepare: g1
      changes: []
  - commit_prepared: g1
  - transaction:
      changes: [{insert: public.t, values: {id: 1}}]
"""
    )
    for options in (StreamOptions(3, ("pub",), two_phase=True), StreamOptions(1, ("pub",))):
        assert _names(_messages(script, options)) == ["Begin", "Relation", "Insert", "Commit"]
    on_14 = _messages(script, StreamOptions(1, ("pub",)), server_version=14)
    assert _names(on_14) == ["Begin", "Relation", "Insert", "Commit"]


def test_two_phase_with_and_without_the_option() -> None:
    script = _load(
        """
  - transaction:
      prepare: g1
      changes: [{insert: public.t, values: {id: 1}}]
  - commit_prepared: g1
  - transaction:
      prepare: g2
      changes: [{insert: public.t, values: {id: 2}}]
  - rollback_prepared: g2
"""
    )
    with_2pc = _messages(script, StreamOptions(3, ("pub",), two_phase=True))
    assert _names(with_2pc) == [
        "BeginPrepare",
        "Relation",
        "Insert",
        "Prepare",
        "CommitPrepared",
        "BeginPrepare",
        "Insert",
        "Prepare",
        "RollbackPrepared",
    ]
    prepare = with_2pc[3]
    assert isinstance(prepare, Prepare) and isinstance(with_2pc[4], CommitPrepared)
    assert with_2pc[4].commit_lsn == prepare.end_lsn
    rollback = with_2pc[-1]
    assert isinstance(rollback, RollbackPrepared) and isinstance(with_2pc[5], BeginPrepare)
    assert rollback.prepare_end_lsn == with_2pc[5].end_lsn
    without = _messages(script, StreamOptions(1, ("pub",)))
    assert _names(without) == ["Begin", "Relation", "Insert", "Commit"]
    assert isinstance(without[0], Begin) and isinstance(with_2pc[4], CommitPrepared)
    assert without[0].final_lsn == with_2pc[4].commit_lsn
    # A slot marked two-phase by an earlier start decodes in two phases for a client
    # that does not ask, even at protocol 1 (measured on 15-18); 14 has no two-phase.
    marked = _messages(script, StreamOptions(1, ("pub",)), two_phase_at=0)
    assert marked == with_2pc
    on_14 = _messages(script, StreamOptions(1, ("pub",)), server_version=14, two_phase_at=0)
    assert _names(on_14) == ["Begin", "Relation", "Insert", "Commit"]
    # Started past g1's PREPARE: only its Commit Prepared comes, unless the slot became
    # two-phase after that PREPARE (no client got it as prepared): then g1 comes whole
    # first, with the PREPARE's LSNs (ReorderBufferFinishPrepared, measured on 15-18).
    options = StreamOptions(3, ("pub",), two_phase=True)
    past = prepare.end_lsn
    assert _names(_messages(script, options, from_lsn=past))[:2] == [
        "CommitPrepared",
        "BeginPrepare",
    ]
    late = _messages(script, options, from_lsn=past, two_phase_at=past)
    assert late[:5] == with_2pc[:5]


def test_streamed_prepare() -> None:
    script = _load(
        "  - transaction:\n      prepare: g\n      stream: always\n"
        "      changes: [{insert: public.t}]\n  - commit_prepared: g\n"
    )
    options = StreamOptions(3, ("pub",), streaming="on", two_phase=True)
    assert _names(_messages(script, options))[-2:] == ["StreamPrepare", "CommitPrepared"]
    assert isinstance(_messages(script, options)[-2], StreamPrepare)


def test_origin_messages_and_origin_none() -> None:
    script = _load(
        "  - transaction:\n      origin: up\n      origin_lsn: 0/ABC\n"
        "      changes: [{insert: public.t}]\n  - transaction: [{insert: public.t}]\n"
    )
    messages = _messages(script)
    assert messages[1] == Origin(0xABC, "up")
    skipped = _messages(script, StreamOptions(3, ("pub",), origin="none"), server_version=16)
    assert sum(isinstance(m, Begin) for m in skipped) == 1 and not any(
        isinstance(m, Origin) for m in skipped
    )


def test_messages_option_and_non_transactional_messages() -> None:
    script = _load(
        "  - message: {prefix: p, content_hex: 00ff}\n"
        "  - transaction: [{message: {prefix: p, content: t}}]\n"
    )
    with_messages = _messages(script)
    assert with_messages[0] == Message(0, with_messages[0].lsn, "p", b"\x00\xff")  # type: ignore[attr-defined]
    assert _names(with_messages) == ["Message", "Begin", "Message", "Commit"]
    begin, tx_message = with_messages[1], with_messages[2]
    assert isinstance(begin, Begin) and isinstance(tx_message, Message)
    assert tx_message.lsn == begin.final_lsn  # the message record ends where COMMIT starts
    assert _messages(script, StreamOptions(1, ("pub",))) == []


def test_truncate_lists_published_tables_with_options() -> None:
    script = _load("  - transaction: [{truncate: [public.t, public.hidden], cascade: true}]\n")
    trunc = [m for m in _messages(script) if isinstance(m, Truncate)]
    assert len(trunc) == 1 and trunc[0].options == 1 and len(trunc[0].relation_oids) == 1


def test_lsns_xids_and_times_are_monotonic_and_consistent() -> None:
    script = load_script(EXAMPLE)
    messages = _messages(script, StreamOptions(1, ("demo_pub",)))
    begins = [m for m in messages if isinstance(m, Begin)]
    commits = [m for m in messages if isinstance(m, Commit)]
    assert [b.final_lsn for b in begins] == [c.commit_lsn for c in commits]
    assert all(c.end_lsn > c.commit_lsn for c in commits)
    assert [c.commit_lsn for c in commits] == sorted(c.commit_lsn for c in commits)
    assert [b.xid for b in begins] == sorted({b.xid for b in begins})


def test_resuming_skips_committed_transactions() -> None:
    script = _load(
        "  - transaction: [{insert: public.t, values: {id: 1}}]\n"
        "  - transaction: [{insert: public.t, values: {id: 2}}]\n"
    )
    first = _messages(script)
    commit = next(m for m in first if isinstance(m, Commit))
    resumed = _messages(script, from_lsn=commit.end_lsn)
    assert [m.new_tuple for m in resumed if isinstance(m, Insert)] == [("2", None)]
    # The commit record itself starting at from_lsn is still sent (ptr < start skips).
    assert len(_messages(script, from_lsn=commit.commit_lsn)) == len(first)


def test_sleep_and_fault_events_pass_through() -> None:
    script = _load("  - sleep: 0.25\n  - fault: pause\n    seconds: 3\n")
    events = list(encode_stream(script, StreamOptions(1, ("pub",))))
    assert isinstance(events[0], Sleep) and events[0].seconds == 0.25
    assert isinstance(events[1], Fault) and events[1].params == {"seconds": 3}


def test_encoding_is_deterministic() -> None:
    """The same script and options give the same bytes, every time."""
    options = StreamOptions(4, ("demo_pub",), True, True, "parallel", True)
    runs = [
        [e.payload for e in encode_stream(load_script(EXAMPLE), options) if isinstance(e, Send)]
        for _ in range(2)
    ]
    assert runs[0] == runs[1]


def test_delete_without_identity_is_not_sent() -> None:
    script = (
        Script()
        .table("public.n", columns=[column("id", "int4")], replica_identity="nothing")
        .publication("pub", tables=["public.n"])
        .transaction([insert("public.n", id=1), delete("public.n")])
    )
    assert _names(_messages(script)) == ["Begin", "Relation", "Insert", "Commit"]


def test_truncate_helper_and_all_tables_publication() -> None:
    script = (
        Script()
        .table("public.a", columns=[column("id", "int4", key=True)])
        .publication("everything", all_tables=True)
        .transaction([truncate("public.a", restart_identity=True)])
    )
    assert [
        m.options
        for m in _messages(script, StreamOptions(1, ("everything",)))
        if isinstance(m, Truncate)
    ] == [2]


# --- recordings ------------------------------------------------------------------------------


def test_recordings_replay_byte_for_byte() -> None:
    path = GOLDEN / "pg16" / "streaming.v2-stream.jsonl"
    recording = load_recording(path)
    options = StreamOptions.from_pgoutput(recording.meta["options"], server_version=16)
    events = list(encode_stream(recording, options))
    lines = [json.loads(x) for x in path.read_text().splitlines()[1:]]
    assert [e.payload.hex() for e in events] == [x["data"] for x in lines]  # type: ignore[union-attr]


def test_recordings_check_the_options() -> None:
    recording = load_recording(GOLDEN / "pg16" / "streaming.v2-stream.jsonl")
    options = StreamOptions(1, ("pgwm_streaming",), messages=True)
    with pytest.raises(OptionError, match="recorded with proto_version=2"):
        list(encode_stream(recording, options))


def test_recordings_resume_after_committed_transactions() -> None:
    recording = load_recording(GOLDEN / "pg16" / "truncate.v1.jsonl")
    options = StreamOptions.from_pgoutput(recording.meta["options"], server_version=16)
    decoder = Decoder()
    everything = [decoder.decode(e.payload) for e in encode_stream(recording, options)]  # type: ignore[union-attr]
    first_commit = next(m for m in everything if isinstance(m, Commit))
    resumed = list(encode_stream(recording, options, from_lsn=first_commit.end_lsn))
    assert len(resumed) == len(everything) - everything.index(first_commit) - 1


def test_recordings_resume_by_the_servers_rule_inside_a_streamed_transaction() -> None:
    """A client resuming inside a streamed transaction gets it again from its first
    change, the blocks streamed before the start point merged into one first block (a
    new walsender spills until the start point), not the recording's blocks replayed."""
    recording = load_recording(GOLDEN / "pg16" / "streaming.v2-stream.jsonl")
    options = StreamOptions.from_pgoutput(recording.meta["options"], server_version=16)
    starts = [(lsn, m) for lsn, _, m in recording.entries if isinstance(m, StreamStart)]
    xid, at = next((m.xid, lsn) for lsn, m in starts if not m.first_segment and lsn)
    resumed = [e.message for e in encode_stream(recording, options, from_lsn=at)]  # type: ignore[union-attr]
    blocks = [m for m in resumed if isinstance(m, StreamStart) and m.xid == xid]
    recorded = [m for _, m in starts if m.xid == xid]
    assert blocks[0].first_segment
    assert len(blocks) == len(recorded) - 1
