"""Where the fake's SQL layer says an error is: positions in the query string as sent,
and errorMissingColumn's choice of columns to suggest (the differential test against
real servers is test_checks_postgres.test_missing_columns_are_reported_as_postgres_reports_them)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pgwire_mock.server.column_refs import closest_columns
from pgwire_mock.server.sql_text import (
    normalize,
    source_offsets,
    split_statements,
    split_statements_at,
)

# Text made of what the splitter and normalizer treat specially.
_TEXTS = st.lists(
    st.sampled_from(["SELECT", "x", "é", " ", "  ", "\t", "\n", ";", "'", '"', "--", "/*", "*/"]),
    max_size=25,
).map("".join)


@given(_TEXTS)
def test_each_statement_is_found_where_it_starts_in_the_query_string(text: str) -> None:
    """split_statements_at gives split_statements' parts, each at its offset in the text."""
    found = split_statements_at(text)
    assert [part for _, part in found] == split_statements(text)
    for start, part in found:
        assert text[start : start + len(part)] == part


@given(_TEXTS)
def test_each_normalized_character_maps_back_to_the_character_it_came_from(text: str) -> None:
    """A character of the normalized text is the one at its offset in the statement; a
    space stands for whitespace or a comment there; offsets only grow."""
    offsets = source_offsets(text)
    normalized = normalize(text)
    assert offsets is not None
    assert len(offsets) == len(normalized)
    assert offsets == sorted(set(offsets))
    for char, at in zip(normalized, offsets, strict=True):
        assert text[at] == char or (
            char == " " and (text[at].isspace() or text.startswith(("--", "/*"), at))
        )


def test_a_position_in_a_second_statement_counts_from_the_start_of_the_query() -> None:
    """'nope' after a comment and a run of spaces, in the second statement: the offset
    the real server reports (P 30, 1-based)."""
    text = "SELECT 1;\n  SELECT /* c */   nope FROM t"
    (_, _), (start, statement) = split_statements_at(text)
    offsets = source_offsets(statement)
    assert offsets is not None
    at = normalize(statement).index("nope")
    assert start + offsets[at] + 1 == text.index("nope") + 1 == 30


SLOTS_14 = [
    *("slot_name", "plugin", "slot_type", "datoid", "database", "temporary", "active"),
    *("active_pid", "xmin", "catalog_xmin", "restart_lsn", "confirmed_flush_lsn"),
    *("wal_status", "safe_wal_size", "two_phase"),
]


def test_the_hint_names_the_closest_columns_as_the_real_server_does() -> None:
    """What PostgreSQL 14 suggested for pg_replication_slots and pg_publication_tables:
    one column, two equally close ones, none when every column is too far (more than 3
    edits, or more than half the wanted name)."""
    assert closest_columns(SLOTS_14, "slotname") == ("slot_name",)
    assert closest_columns(SLOTS_14, "two_phase_at") == ("two_phase",)
    assert closest_columns(SLOTS_14, "slot_nyxe") == ("slot_name", "slot_type")
    assert closest_columns(SLOTS_14, "failover") == ()
    assert closest_columns(SLOTS_14, "nope") == ()
    assert closest_columns(["pubname", "schemaname", "tablename"], "attname") == ("pubname",)


def test_three_equally_close_columns_give_no_hint() -> None:
    """A tie of three forgets the candidates; a closer column found later is kept."""
    tie = ["abcdxx", "abcdyy", "abcdzz"]  # two edits from "abcdef" each
    assert closest_columns(tie, "abcdef") == ()
    assert closest_columns([*tie, "abcdex"], "abcdef") == ("abcdex",)
    assert closest_columns([*tie, "abcdxy"], "abcdef") == ()
