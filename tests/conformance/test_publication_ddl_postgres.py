"""CREATE and DROP PUBLICATION between changes (conformance.publication_ddl): a client
streaming through the publication receives the same from the fake as from real
PostgreSQL 14-18 — the changes after its creation, 42704 (14-17) or a WARNING (18)
for those before it or after its drop — and the statements answer the same."""

from __future__ import annotations

import psycopg
import pytest

from conformance.provision import Server
from conformance.publication_ddl import STORIES, fake_side, new_tag, real_side, run_story


@pytest.mark.parametrize("story", STORIES)
def test_a_publication_created_or_dropped_between_changes_streams_as_on_postgres(
    pg_server: Server, story: str
) -> None:
    tag = new_tag()
    with real_side(pg_server, tag) as side:
        real = run_story(side, STORIES[story], tag)
    with fake_side(pg_server.version, tag) as side:
        fake = run_story(side, STORIES[story], tag)
    # What PostgreSQL does, so that the comparison cannot pass on nothing.
    inserts = [m for m in real.received if m.startswith("Insert")]
    skipped = [m for m in real.received if m.startswith("WARNING skipped loading")]
    before_18 = pg_server.version < 18
    missing = ("ERROR", "42704", f'publication "pub_{tag}" does not exist')
    expected = {
        "created first": (["Insert 1"], None),
        "created after a change": ([] if before_18 else ["Insert 2"], missing),
        "dropped between changes": (["Insert 1"], missing),
        "another created for the table": (["Insert 1", "Insert 2", "Insert 3"], None),
        "another created for all tables": (["Insert 1", "Insert 2", "Insert 3"], None),
        "a table that does not exist": ([], missing),
        "a table added": (["Insert 1", "Insert 3", "Insert 4"], None),
        "a table dropped": (["Insert 1", "Insert 2", "Insert 4"], None),
        "tables set": (["Insert 1", "Insert 3"], None),
        "alterations refused": (["Insert 1"], None),
        "inserts only": (["Insert 1", "Insert 2"], None),
        "updates and deletes only": ([], None),
        "publish altered": (["Insert 1", "Insert 3"], None),
        "options refused": (["Insert 1", "Insert 2"], None),
        "a table added while the consumer is away": (["Insert 1", "Insert 2", "Insert 3"], None),
        # Inside a transaction: its changes before the command in the old catalog, those
        # after in the new, unless a later transaction built the entry first.
        "a table added inside a transaction": (_inserts(1, 3, 4, 5, 6, 7), None),
        "a table dropped inside a transaction": (_inserts(1, 2, 4, 6), None),
        "a table added inside a transaction, a later one first": (_inserts(1, 3, 2, 4, 5), None),
        "a table dropped inside a transaction, a later one first": (_inserts(1, 5), None),
        "a table dropped inside a transaction, its entry built before": (_inserts(1, 2, 4), None),
        "created inside a transaction": ([] if before_18 else _inserts(3, 4), missing),
        "dropped inside a transaction": (_inserts(1, 2), missing),
        "a table added inside two transactions": (_inserts(3, 4, 2, 5, 6), None),
        "publish altered inside a transaction": (_inserts(1, 2, 4), None),
        "streamed: a table added inside a transaction": (
            _inserts(1, *range(1000, 1600), *range(3000, 3600), 5, 6, 7),
            None,
        ),
        "streamed: a table dropped inside a transaction": (
            _inserts(1, *range(2000, 2600), *range(1000, 1600), 7),
            None,
        ),
        "streamed: another created, altered and dropped inside a transaction": (
            _inserts(1, 2, *range(1000, 1600), 7),
            None,
        ),
        # ALTER TABLE and TRUNCATE of the second table inside a transaction.
        "a column added to another table inside a transaction": (_inserts(1, 3, 2, 4, 5, 6), None),
        "a column dropped from another table inside a transaction": (
            _inserts(1, 2, 4, 5, 6),
            None,
        ),
        "another table truncated inside a transaction": (_inserts(1, 2, 4, 5, 6), None),
        "streamed: a column added to another table inside a transaction": (
            _inserts(1, *range(1000, 1600), *range(2000, 2600), 5, 6),
            None,
        ),
        "streamed: another table truncated inside a transaction": (
            _inserts(1, *range(1000, 1600), *range(2000, 2600), 5, 6),
            None,
        ),
    }[story]
    assert inserts == expected[0], real
    assert real.error == (expected[1] if before_18 else None), real
    assert bool(skipped) == (not before_18 and expected[1] is not None), real
    if story.startswith("another created"):
        # The Relation again after each catalog change, but for all tables on 14.
        relations = 1 if pg_server.version == 14 and story.endswith("all tables") else 3
        assert sum(m.startswith("Relation") for m in real.received) == relations, real
    if story.endswith(" only") or story in ("publish altered", "options refused"):
        kinds = {"Update", "Delete"} & set(real.received)
        published = {"inserts only": set(), "options refused": {"Delete"}}
        assert kinds == published.get(story, {"Update", "Delete"}), real
    if story == "options refused":
        assert [answer[:5] for answer in real.sql] == [
            "42601",
            "42601",
            "42601",
            "CREAT",
            "42601",
            "42704",
        ], real
    if story == "a table added while the consumer is away":
        # Nothing sent twice: the consumer confirmed insert 1 before it went.
        after = real.received[real.received.index("(the consumer stops)") :]
        assert "Insert 1" not in after and "Insert 2" in after, real
    if story == "a table dropped":
        # 15-17 send the other table's Relation again too: get_rel_sync_entry rebuilds
        # every entry after a publication change, and resets schema_sent there.
        relations = 3 if 15 <= pg_server.version <= 17 else 2
        assert sum(m.startswith("Relation") for m in real.received) == relations, real
    if story == "alterations refused":
        assert [answer[:5] for answer in real.sql[2:]] == [
            "42704",
            "55000",
            "42710",
            "42704",
            "42P01",
        ], real
    if story.startswith("streamed:"):
        assert real.received.count("StreamStart") >= 2, real
    if "another table" in story and not story.startswith("streamed:"):
        # The second table's Relation again inside the transaction, after the command,
        # and after the transaction: the invalidations queued in it, run twice.
        second = f"Relation public.pubddl_{tag}_b"
        received = real.received
        assert second in received[received.index("Insert 2") : received.index("Insert 4")], real
        assert second in received[received.index("Insert 4") : received.index("Insert 5")], real
    if story == "a table that does not exist":
        assert real.sql == [f'42P01 relation "pubddl_{tag}_missing" does not exist'], real
    assert fake == real


def _inserts(*keys: int) -> list[str]:
    return [f"Insert {key}" for key in keys]


def test_each_action_takes_the_row_filters_of_the_publications_that_publish_it(
    pg_server: Server,
) -> None:
    """Two publications of a table: inserts only, with a row filter, and updates and
    deletes without one (15+: row filters). An insert is filtered by the first alone
    (pgoutput_row_filter_init builds each action's filter from the publications that
    publish it); updates and deletes pass unfiltered. 14 has no row filters: there the
    two publications differ in their actions alone, and insert 1 is sent too."""
    from pgwire_mock.script import Publication

    filtered = pg_server.version >= 15

    tag = new_tag()
    table = f"pubddl_{tag}"
    changes = (
        ("slot",),
        ("insert", 1),
        ("insert", 6),
        ("update", 1),
        ("delete", 6),
        ("insert", 7),  # the stream is read to its commit
    )
    names = f"pi_{tag},pu_{tag}"
    created = (
        (
            "sql",
            f"CREATE PUBLICATION pi_{tag} FOR TABLE {table}"
            + (" WHERE (id > 5)" if filtered else "")
            + " WITH (publish = 'insert')",
        ),
        ("sql", f"CREATE PUBLICATION pu_{tag} FOR TABLE {table} WITH (publish = 'update, delete')"),
    )
    with real_side(pg_server, tag) as side:
        real = run_story(side, created + changes, tag, publications=names)
        with psycopg.connect(pg_server.dsn) as conn:
            for name in names.split(","):
                conn.execute(f"DROP PUBLICATION {name}")
    script_publications = (
        Publication(
            f"pi_{tag}",
            (f"public.{table}",),
            where={f"public.{table}": "(id > 5)"} if filtered else {},
            publish=("insert",),
        ),
        Publication(f"pu_{tag}", (f"public.{table}",), publish=("update", "delete")),
    )
    with fake_side(pg_server.version, tag, script_publications) as side:
        fake = run_story(side, changes, tag, publications=names)
    assert [m for m in real.received if m[0] in "IUD"] == [
        *([] if filtered else ["Insert 1"]),
        "Insert 6",
        "Update",
        "Delete",
        "Insert 7",
    ], real
    assert fake.received == real.received and fake.error == real.error
