"""The replication grammar, without a server (test_versions_postgres.py checks it against one)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgwire_mock.server import (
    MAJORS,
    AlterReplicationSlot,
    BaseBackup,
    CreateReplicationSlot,
    DropReplicationSlot,
    GenericOption,
    IdentifySystem,
    PluginOption,
    ReadReplicationSlot,
    ReplicationCommand,
    ServerError,
    Show,
    SqlCommand,
    StartLogicalReplication,
    StartPhysicalReplication,
    TimelineHistory,
    UploadManifest,
    parse_command,
)

ALL = pytest.mark.parametrize("major", MAJORS)


def syntax_error(major: int, text: str) -> str:
    with pytest.raises(ServerError) as info:
        parse_command(text, major)
    assert info.value.sqlstate == "42601"
    return info.value.message


@ALL
@pytest.mark.parametrize(
    "text", ["IDENTIFY_SYSTEM", "IDENTIFY_SYSTEM;", " \t\nIDENTIFY_SYSTEM ; \r\f"]
)
def test_identify_system_with_semicolon_and_whitespace(major: int, text: str) -> None:
    assert parse_command(text, major) == IdentifySystem()


@ALL
@pytest.mark.parametrize(
    "text",
    [
        "identify_system",
        "Identify_System",
        '"IDENTIFY_SYSTEM"',
        "IDENTIFY_SYSTEMX",
        "-- c\nIDENTIFY_SYSTEM",
        "/* c */ IDENTIFY_SYSTEM",
        "SELECT 1; SELECT 2",
        "(SELECT 1)",
        "",
        "  ",
        ";",
        "SLOT x",
        "'abc' x",
        "SELECT 'unterminated",
    ],
)
def test_text_not_starting_with_a_command_keyword_is_sql(major: int, text: str) -> None:
    assert parse_command(text, major) == SqlCommand(text)


@pytest.mark.parametrize("major", [14, 15, 16])
def test_vertical_tab_is_not_whitespace_before_17(major: int) -> None:
    assert parse_command("\vIDENTIFY_SYSTEM", major) == SqlCommand("\vIDENTIFY_SYSTEM")
    assert syntax_error(major, "IDENTIFY_SYSTEM\v") == "syntax error"


def test_vertical_tab_is_whitespace_on_17() -> None:
    assert parse_command("\vIDENTIFY_SYSTEM\v", 17) == IdentifySystem()


@ALL
@pytest.mark.parametrize(
    "text",
    ["IDENTIFY_SYSTEM;;", "IDENTIFY_SYSTEM x", "IDENTIFY_SYSTEM -- c", "SHOW", "SHOW 'x'"],
)
def test_syntax_errors_have_no_position(major: int, text: str) -> None:
    with pytest.raises(ServerError) as info:
        parse_command(text, major)
    fields = dict(info.value.fields())
    assert fields["M"] == "syntax error"
    assert "P" not in fields
    assert fields["F"] == "repl_scanner.l"
    assert fields["R"] == "replication_yyerror"


@ALL
def test_unterminated_quotes(major: int) -> None:
    for text in ("'abc", '"abc', "SHOW 'x", 'DROP_REPLICATION_SLOT "s'):
        assert syntax_error(major, text) == "unterminated quoted string"


@ALL
def test_show_names_are_downcased_unless_quoted(major: int) -> None:
    assert parse_command("SHOW DateStyle", major) == Show("datestyle")
    assert parse_command('SHOW "DateStyle"', major) == Show("DateStyle")
    assert parse_command("SHOW a.B", major) == Show("a.b")
    assert parse_command('SHOW "A"."B"', major) == Show("A.B")


@ALL
def test_quoted_identifiers_have_no_doubled_quote_escape(major: int) -> None:
    assert syntax_error(major, 'SHOW "Date""Style"') == "syntax error"
    assert parse_command('DROP_REPLICATION_SLOT ""', major) == DropReplicationSlot("")


@ALL
def test_long_identifiers_are_truncated_with_a_notice(major: int) -> None:
    notices: list[ServerError] = []
    command = parse_command("DROP_REPLICATION_SLOT " + "a" * 70, major, notices)
    assert command == DropReplicationSlot("a" * 63)
    assert [n.sqlstate for n in notices] == ["42622"]
    assert notices[0].severity == "NOTICE"
    # Multibyte characters are never cut in half.
    assert parse_command('DROP_REPLICATION_SLOT "' + "é" * 40 + '"', major) == (
        DropReplicationSlot("é" * 31)
    )


@ALL
def test_lowercase_words_inside_a_command_are_identifiers(major: int) -> None:
    assert syntax_error(major, 'START_REPLICATION slot "x" LOGICAL 0/0') == "syntax error"


@ALL
def test_drop_replication_slot(major: int) -> None:
    assert parse_command("DROP_REPLICATION_SLOT s", major) == DropReplicationSlot("s")
    assert parse_command('DROP_REPLICATION_SLOT "S" WAIT;', major) == DropReplicationSlot("S", True)


@ALL
def test_create_slot_legacy_options(major: int) -> None:
    assert parse_command("CREATE_REPLICATION_SLOT s LOGICAL pgoutput NOEXPORT_SNAPSHOT", major) == (
        CreateReplicationSlot(
            "s", "logical", "pgoutput", options=(GenericOption("snapshot", "nothing"),)
        )
    )
    assert parse_command("CREATE_REPLICATION_SLOT s TEMPORARY PHYSICAL RESERVE_WAL", major) == (
        CreateReplicationSlot("s", "physical", None, True, (GenericOption("reserve_wal", True),))
    )
    command = parse_command('CREATE_REPLICATION_SLOT "s" LOGICAL "pgoutput"', major)
    assert command == CreateReplicationSlot("s", "logical", "pgoutput")


def test_two_phase_and_option_lists_arrived_in_15() -> None:
    assert (
        syntax_error(14, "CREATE_REPLICATION_SLOT s LOGICAL pgoutput TWO_PHASE") == "syntax error"
    )
    assert syntax_error(14, "CREATE_REPLICATION_SLOT s LOGICAL p (SNAPSHOT 'nothing')")
    assert parse_command("CREATE_REPLICATION_SLOT s LOGICAL p TWO_PHASE", 15) == (
        CreateReplicationSlot("s", "logical", "p", options=(GenericOption("two_phase", True),))
    )


@pytest.mark.parametrize("major", [15, 16, 17])
def test_create_slot_generic_options(major: int) -> None:
    text = (
        "CREATE_REPLICATION_SLOT s LOGICAL pgoutput"
        " ( SNAPSHOT 'nothing', TWO_PHASE 1, X Y, FAILOVER)"
    )
    assert parse_command(text, major) == CreateReplicationSlot(
        "s",
        "logical",
        "pgoutput",
        options=(
            GenericOption("snapshot", "nothing"),
            GenericOption("two_phase", 1),
            GenericOption("x", "y"),
            GenericOption("failover"),
        ),
        legacy_syntax=False,
    )
    assert syntax_error(major, "CREATE_REPLICATION_SLOT s LOGICAL p ()") == "syntax error"
    assert syntax_error(major, "CREATE_REPLICATION_SLOT s LOGICAL p (SNAPSHOT WAIT)")
    assert syntax_error(major, "CREATE_REPLICATION_SLOT s LOGICAL p (READ_REPLICATION_SLOT)")


@ALL
def test_start_logical_replication(major: int) -> None:
    text = (
        "START_REPLICATION SLOT \"s\" LOGICAL 0/00000000 (\"proto_version\" '4', binary, x 'it''s')"
    )
    assert parse_command(text, major) == StartLogicalReplication(
        "s",
        0,
        (PluginOption("proto_version", "4"), PluginOption("binary"), PluginOption("x", "it's")),
    )
    assert parse_command("START_REPLICATION SLOT s LOGICAL 16/B374D848", major) == (
        StartLogicalReplication("s", 0x16_B374D848)
    )
    assert syntax_error(major, "START_REPLICATION SLOT s LOGICAL 0/0 ()") == "syntax error"
    assert syntax_error(major, "START_REPLICATION SLOT s LOGICAL 0/0 TIMELINE 1") == "syntax error"
    assert syntax_error(major, "START_REPLICATION SLOT s LOGICAL 0/0G") == "syntax error"


@ALL
def test_start_physical_replication(major: int) -> None:
    assert parse_command("START_REPLICATION 0/0", major) == StartPhysicalReplication(0)
    assert parse_command("START_REPLICATION SLOT s PHYSICAL a/FF TIMELINE 3", major) == (
        StartPhysicalReplication(0xA_000000FF, "s", 3)
    )
    assert syntax_error(major, "START_REPLICATION 0/0 TIMELINE 0 x") == "invalid timeline 0"


@ALL
def test_lsn_halves_wrap_like_scanf_into_uint32(major: int) -> None:
    assert parse_command("START_REPLICATION 1FFFFFFFF/0", major) == (
        StartPhysicalReplication(0xFFFFFFFF << 32)
    )


@ALL
def test_timeline_history(major: int) -> None:
    assert parse_command("TIMELINE_HISTORY 2", major) == TimelineHistory(2)
    assert syntax_error(major, "TIMELINE_HISTORY 0 x") == "invalid timeline 0"
    # strtoul into a uint32: 2**32 wraps to 0.
    assert syntax_error(major, "TIMELINE_HISTORY 4294967296") == "invalid timeline 0"


def test_read_replication_slot_exists_from_15() -> None:
    assert parse_command("READ_REPLICATION_SLOT s", 14) == SqlCommand("READ_REPLICATION_SLOT s")
    assert parse_command("READ_REPLICATION_SLOT a.b", 15) == ReadReplicationSlot("a.b")


def test_alter_replication_slot_and_upload_manifest_exist_on_17() -> None:
    for major in (14, 15, 16):
        assert isinstance(parse_command("ALTER_REPLICATION_SLOT s (FAILOVER)", major), SqlCommand)
        assert isinstance(parse_command("UPLOAD_MANIFEST", major), SqlCommand)
    assert parse_command("ALTER_REPLICATION_SLOT s ( FAILOVER 'false' )", 17) == (
        AlterReplicationSlot("s", (GenericOption("failover", "false"),))
    )
    assert parse_command("UPLOAD_MANIFEST", 17) == UploadManifest()


def test_base_backup_per_version() -> None:
    assert parse_command("BASE_BACKUP LABEL 'x' FAST MAX_RATE 32", 14) == BaseBackup(
        (GenericOption("label", "x"), GenericOption("fast", True), GenericOption("max_rate", 32))
    )
    assert syntax_error(15, "BASE_BACKUP LABEL 'x'") == "syntax error"
    assert parse_command("BASE_BACKUP (LABEL 'x', CHECKPOINT 'fast')", 16) == BaseBackup(
        (GenericOption("label", "x"), GenericOption("checkpoint", "fast"))
    )


def test_unknown_major_is_refused() -> None:
    with pytest.raises(ValueError, match="13"):
        parse_command("IDENTIFY_SYSTEM", 13)


# --- round trip -----------------------------------------------------------------------

names = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters='"\x00'), max_size=20
).filter(lambda s: len(s.encode()) < 64)
strings = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
lsns = st.integers(0, (1 << 64) - 1)
uint32 = st.integers(0, (1 << 32) - 1)


@st.composite
def generic_options(draw: st.DrawFn) -> GenericOption:
    value = draw(st.none() | strings | uint32)
    return GenericOption(draw(names), value)


@st.composite
def plugin_options(draw: st.DrawFn) -> PluginOption:
    return PluginOption(draw(names), draw(st.none() | strings))


@st.composite
def create_slots(draw: st.DrawFn, major: int) -> CreateReplicationSlot:
    kind = draw(st.sampled_from(["physical", "logical"]))
    plugin = draw(names) if kind == "logical" else None
    legacy = major == 14 or draw(st.booleans())
    if legacy:
        choices = [
            GenericOption("snapshot", "export"),
            GenericOption("snapshot", "nothing"),
            GenericOption("snapshot", "use"),
            GenericOption("reserve_wal", True),
        ]
        if major >= 15:
            choices.append(GenericOption("two_phase", True))
        options = tuple(draw(st.lists(st.sampled_from(choices), max_size=4)))
    else:
        options = tuple(draw(st.lists(generic_options(), min_size=1, max_size=4)))
    return CreateReplicationSlot(draw(names), kind, plugin, draw(st.booleans()), options, legacy)


@st.composite
def base_backups(draw: st.DrawFn, major: int) -> BaseBackup:
    if major >= 15:
        return BaseBackup(tuple(draw(st.lists(generic_options(), max_size=4))))
    legacy = st.one_of(
        st.builds(
            GenericOption, st.sampled_from(["label", "manifest", "manifest_checksums"]), strings
        ),
        st.builds(GenericOption, st.just("max_rate"), uint32),
        st.builds(
            GenericOption,
            st.sampled_from(
                ["progress", "fast", "wal", "nowait", "tablespace_map", "noverify_checksums"]
            ),
            st.just(True),
        ),
    )
    return BaseBackup(tuple(draw(st.lists(legacy, max_size=4))))


@st.composite
def commands(draw: st.DrawFn) -> tuple[int, ReplicationCommand]:
    major = draw(st.sampled_from(MAJORS))
    choices: list[st.SearchStrategy[ReplicationCommand]] = [
        st.just(IdentifySystem()),
        st.builds(Show, names.filter(bool)),
        create_slots(major),
        st.builds(DropReplicationSlot, names, st.booleans()),
        st.builds(StartPhysicalReplication, lsns, st.none() | names, uint32),
        st.builds(
            StartLogicalReplication, names, lsns, st.lists(plugin_options(), max_size=4).map(tuple)
        ),
        st.builds(TimelineHistory, st.integers(1, (1 << 32) - 1)),
        base_backups(major),
    ]
    if major >= 15:
        choices.append(st.builds(ReadReplicationSlot, names.filter(bool)))
    if major >= 17:
        choices.append(
            st.builds(
                AlterReplicationSlot,
                names,
                st.lists(generic_options(), min_size=1, max_size=3).map(tuple),
            )
        )
        choices.append(st.just(UploadManifest()))
    return major, draw(st.one_of(choices))


@given(commands())
def test_rendered_commands_parse_back_equal(case: tuple[int, ReplicationCommand]) -> None:
    """Any command, rendered as text for its major, parses back to an equal command."""
    major, command = case
    assert parse_command(command.render(major), major) == command


@given(st.sampled_from(MAJORS), st.text(max_size=60))
def test_any_text_parses_or_raises_a_server_error(major: int, text: str) -> None:
    """Arbitrary text yields a command or a 42601 ServerError, never another exception."""
    try:
        parse_command(text, major)
    except ServerError as err:
        assert err.sqlstate == "42601"
