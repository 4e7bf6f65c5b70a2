"""The stories of :mod:`conformance.publication_ddl`, each on a fresh table (id int
key, v text) and slot, and its second table (the same name with ``_b``):

* ``created first``: what Debezium does at its first start: the publication, then the
  slot, then a change;
* ``created after a change``: the slot, a change, the publication, a change;
* ``dropped between changes``: the publication, the slot, a change, the drop, a change;
* ``another created for the table`` / ``for all tables``: a second publication, not
  streamed through, created and dropped between changes: its catalog change invalidates
  the table's relcache entry (every table's, for all tables), and pgoutput sends the
  Relation again before the next change;
* ``a table added`` / ``dropped`` / ``tables set``: ALTER PUBLICATION between changes to
  the story's two tables;
* ``alterations refused``: ALTER PUBLICATION of a missing publication, of a FOR ALL
  TABLES one, adding a member, dropping a table that is not one, adding a missing table;
* ``inserts only`` / ``updates and deletes only``: WITH (publish = ...);
* ``publish altered``: ALTER PUBLICATION ... SET (publish = ...) between changes;
* ``options refused``: bad WITH / SET options (an unknown action or parameter, one
  given twice, a missing publication);
* ``a table added while the consumer is away``: a consumer reads and confirms a change,
  goes, the publication gains a table, and the consumer comes back;
* ``a table that does not exist``: CREATE PUBLICATION ... FOR TABLE of a missing table;
* ``... inside a transaction`` (or ``two``): the command commits while another
  transaction (or two) runs.
  PostgreSQL queues the new catalog snapshot and the command's invalidations among
  that transaction's changes (SnapBuildDistributeSnapshotAndInval): its changes before
  the command are looked up in the old catalog, those after in the new, the Relation
  goes again after the command and once more after the transaction; but an entry
  another transaction, decoded first, built in the new catalog stands for the earlier
  changes too (``a later one first``). ``streamed:`` stories run 600-row writes with
  streaming on and logical_decoding_work_mem = 64kB: the snapshot and invalidations
  count against the memory, which moves where the blocks end.
* ``a column added to another table`` / ``dropped from`` / ``another table truncated``
  ``inside a transaction``: ALTER TABLE or TRUNCATE of the second table commits while a
  transaction writes the first, which then writes the second: the same queued snapshot
  and invalidations, of that table's relcache entry.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["STORIES"]

#: Story name → its steps: ("sql", text with {table} and {pub}), ("slot",), ("insert",
#: key) and the like (update, delete; ``_b``: the second table), ("stream",), and for an
#: open transaction ("begin",), ("txn_insert", key), ("txn_bulk", first of 600 keys)
#: (``_b`` too) and ("commit",), for a second one ("begin_2",), ("txn_2_insert", key)
#: and ("commit_2",); ("table", name) runs ALTER TABLE or TRUNCATE of the second table
#: (publication_ddl.TABLE_COMMANDS); ("streaming",) first streams with protocol 2.
STORIES: Final[dict[str, tuple[tuple[Any, ...], ...]]] = {
    "created first": (
        ("sql", "CREATE PUBLICATION {pub} FOR ALL TABLES"),
        ("slot",),
        ("insert", 1),
    ),
    "created after a change": (
        ("slot",),
        ("insert", 1),
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("insert", 2),
    ),
    "dropped between changes": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("slot",),
        ("insert", 1),
        ("sql", "DROP PUBLICATION {pub}"),
        ("insert", 2),
    ),
    # Its catalog change invalidates the table's relcache entry (CacheInvalidateRelcache,
    # for every table with FOR ALL TABLES): pgoutput sends the Relation again.
    "another created for the table": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("slot",),
        ("insert", 1),
        ("sql", "CREATE PUBLICATION {pub}_2 FOR TABLE {table}"),
        ("insert", 2),
        ("sql", "DROP PUBLICATION {pub}_2"),
        ("insert", 3),
    ),
    "another created for all tables": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("slot",),
        ("insert", 1),
        ("sql", "CREATE PUBLICATION {pub}_2 FOR ALL TABLES"),
        ("insert", 2),
        ("sql", "DROP PUBLICATION {pub}_2"),
        ("insert", 3),
    ),
    # ALTER PUBLICATION: a table added or removed is published from the commit on, or no
    # longer, and only its relcache entry is invalidated (its Relation comes again, not
    # the other table's).
    "a table added": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("slot",),
        ("insert", 1),
        ("insert_b", 2),
        ("sql", "ALTER PUBLICATION {pub} ADD TABLE {table}_b"),
        ("insert_b", 3),
        ("insert", 4),
    ),
    "a table dropped": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}, {table}_b"),
        ("slot",),
        ("insert", 1),
        ("insert_b", 2),
        ("sql", "ALTER PUBLICATION {pub} DROP TABLE {table}_b"),
        ("insert_b", 3),
        ("insert", 4),
    ),
    "tables set": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("slot",),
        ("insert", 1),
        ("sql", "ALTER PUBLICATION {pub} SET TABLE {table}_b"),
        ("insert", 2),
        ("insert_b", 3),
    ),
    "alterations refused": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("sql", "CREATE PUBLICATION {pub}_2 FOR ALL TABLES"),
        ("sql", "ALTER PUBLICATION {pub}_missing ADD TABLE {table}"),
        ("sql", "ALTER PUBLICATION {pub}_2 ADD TABLE {table}"),
        ("sql", "ALTER PUBLICATION {pub} ADD TABLE {table}"),
        ("sql", "ALTER PUBLICATION {pub} DROP TABLE {table}_b"),
        ("sql", "ALTER PUBLICATION {pub} ADD TABLE {table}_missing"),
        ("slot",),
        ("insert", 1),
    ),
    # WITH (publish = ...): the actions not published are not sent (pgoutput_change).
    "inserts only": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table} WITH (publish = 'insert')"),
        ("slot",),
        ("insert", 1),
        ("update", 1),
        ("delete", 1),
        ("insert", 2),
    ),
    "updates and deletes only": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table} WITH (publish = 'update, delete')"),
        ("slot",),
        ("insert", 1),
        ("update", 1),
        ("delete", 1),
        ("insert", 2),
    ),
    "publish altered": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("slot",),
        ("insert", 1),
        ("sql", "ALTER PUBLICATION {pub} SET (publish = 'update, delete')"),
        ("insert", 2),
        ("update", 1),
        ("delete", 1),
        ("sql", "ALTER PUBLICATION {pub} SET (publish = 'insert')"),
        ("insert", 3),
    ),
    "options refused": (
        ("sql", "CREATE PUBLICATION {pub}_2 FOR TABLE {table} WITH (publish = 'upsert')"),
        ("sql", "CREATE PUBLICATION {pub}_2 FOR TABLE {table} WITH (bogus = 1)"),
        ("sql", "CREATE PUBLICATION {pub}_2 FOR TABLE {table} WITH (publish = '', publish = '')"),
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table} WITH (publish = 'INSERT , delete')"),
        ("sql", "ALTER PUBLICATION {pub} SET (publish = 'upsert')"),
        ("sql", "ALTER PUBLICATION {pub}_missing SET (publish = 'insert')"),
        ("slot",),
        ("insert", 1),
        ("update", 1),
        ("delete", 1),
        ("insert", 2),
    ),
    # The consumer goes and comes back (it confirmed insert 1): the new walsender
    # decodes the later changes with the publication as the ALTER left it.
    "a table added while the consumer is away": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("slot",),
        ("insert", 1),
        ("stream",),
        ("sql", "ALTER PUBLICATION {pub} ADD TABLE {table}_b"),
        ("insert_b", 2),
        ("insert", 3),
    ),
    "a table that does not exist": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}_missing"),
        ("slot",),
        ("insert", 1),
    ),
    "a table added inside a transaction": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("slot",),
        ("insert", 1),
        ("begin",),
        ("txn_insert_b", 2),
        ("txn_insert", 3),
        ("sql", "ALTER PUBLICATION {pub} ADD TABLE {table}_b"),
        ("txn_insert_b", 4),
        ("txn_insert", 5),
        ("commit",),
        ("insert_b", 6),
        ("insert", 7),
    ),
    "a table dropped inside a transaction": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}, {table}_b"),
        ("slot",),
        ("insert", 1),
        ("begin",),
        ("txn_insert_b", 2),
        ("sql", "ALTER PUBLICATION {pub} DROP TABLE {table}_b"),
        ("txn_insert_b", 3),
        ("txn_insert", 4),
        ("commit",),
        ("insert_b", 5),
        ("insert", 6),
    ),
    "a table added inside a transaction, a later one first": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("slot",),
        ("insert", 1),
        ("begin",),
        ("txn_insert_b", 2),
        ("sql", "ALTER PUBLICATION {pub} ADD TABLE {table}_b"),
        ("insert_b", 3),
        ("txn_insert_b", 4),
        ("commit",),
        ("insert", 5),
    ),
    "a table dropped inside a transaction, a later one first": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}, {table}_b"),
        ("slot",),
        ("insert", 1),
        ("begin",),
        ("txn_insert_b", 2),
        ("sql", "ALTER PUBLICATION {pub} DROP TABLE {table}_b"),
        ("insert_b", 3),
        ("txn_insert_b", 4),
        ("commit",),
        ("insert", 5),
    ),
    "a table dropped inside a transaction, its entry built before": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}, {table}_b"),
        ("slot",),
        ("insert_b", 1),
        ("begin",),
        ("txn_insert_b", 2),
        ("sql", "ALTER PUBLICATION {pub} DROP TABLE {table}_b"),
        ("txn_insert_b", 3),
        ("commit",),
        ("insert", 4),
    ),
    "created inside a transaction": (
        ("slot",),
        ("begin",),
        ("txn_insert", 2),
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("txn_insert", 3),
        ("commit",),
        ("insert", 4),
    ),
    "dropped inside a transaction": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("slot",),
        ("insert", 1),
        ("begin",),
        ("txn_insert", 2),
        ("sql", "DROP PUBLICATION {pub}"),
        ("txn_insert", 3),
        ("commit",),
        ("insert", 4),
    ),
    # Two transactions open across the command, the second begun after the first wrote.
    "a table added inside two transactions": (
        ("sql", "CREATE PUBLICATION {pub} FOR ALL TABLES"),
        ("sql", "CREATE PUBLICATION {pub}_2 FOR TABLE {table}"),
        ("slot",),
        ("begin",),
        ("txn_insert_b", 2),
        ("begin_2",),
        ("txn_2_insert_b", 3),
        ("sql", "ALTER PUBLICATION {pub}_2 ADD TABLE {table}_b"),
        ("txn_2_insert_b", 4),
        ("txn_insert_b", 5),
        ("commit_2",),
        ("commit",),
        ("insert", 6),
    ),
    "publish altered inside a transaction": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("slot",),
        ("insert", 1),
        ("begin",),
        ("txn_insert", 2),
        ("sql", "ALTER PUBLICATION {pub} SET (publish = 'update')"),
        ("txn_insert", 3),
        ("commit",),
        ("sql", "ALTER PUBLICATION {pub} SET (publish = 'insert')"),
        ("insert", 4),
    ),
    "streamed: a table added inside a transaction": (
        ("streaming",),
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("slot",),
        ("insert", 1),
        ("begin",),
        ("txn_bulk", 1000),
        ("txn_bulk_b", 2000),
        ("sql", "ALTER PUBLICATION {pub} ADD TABLE {table}_b"),
        ("txn_bulk_b", 3000),
        ("txn_insert", 5),
        ("commit",),
        ("insert_b", 6),
        ("insert", 7),
    ),
    "streamed: a table dropped inside a transaction": (
        ("streaming",),
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}, {table}_b"),
        ("slot",),
        ("insert", 1),
        ("begin",),
        ("txn_bulk_b", 2000),
        ("sql", "ALTER PUBLICATION {pub} DROP TABLE {table}_b"),
        ("txn_bulk_b", 3000),
        ("txn_bulk", 1000),
        ("commit",),
        ("insert_b", 6),
        ("insert", 7),
    ),
    # Two commands inside: the second snapshot lists both catalog transactions; a
    # publication's creation and its drop carry their own counts of invalidations.
    "streamed: another created, altered and dropped inside a transaction": (
        ("streaming",),
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}"),
        ("slot",),
        ("insert", 1),
        ("begin",),
        ("txn_insert", 2),
        ("sql", "CREATE PUBLICATION {pub}_2 FOR TABLE {table}_b"),
        ("sql", "ALTER PUBLICATION {pub}_2 SET (publish = 'insert')"),
        ("sql", "DROP PUBLICATION {pub}_2"),
        ("txn_bulk", 1000),
        ("commit",),
        ("insert", 7),
    ),
    # ALTER TABLE and TRUNCATE of the second table commit while a transaction that has
    # not touched it runs (one that had would hold its lock): the same snapshot and
    # invalidations, of that table's relcache entry, so its Relation goes again inside
    # the transaction and after it.
    "a column added to another table inside a transaction": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}, {table}_b"),
        ("slot",),
        ("insert_b", 1),
        ("begin",),
        ("txn_insert", 2),
        ("table", "add_column_b"),
        ("insert_b", 3),
        ("txn_insert_b", 4),
        ("commit",),
        ("insert_b", 5),
        ("insert", 6),
    ),
    "a column dropped from another table inside a transaction": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}, {table}_b"),
        ("slot",),
        ("table", "add_column_b"),
        ("insert_b", 1),
        ("begin",),
        ("txn_insert", 2),
        ("table", "drop_column_b"),
        ("txn_insert_b", 4),
        ("commit",),
        ("insert_b", 5),
        ("insert", 6),
    ),
    "another table truncated inside a transaction": (
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}, {table}_b"),
        ("slot",),
        ("insert_b", 1),
        ("begin",),
        ("txn_insert", 2),
        ("table", "truncate_b"),
        ("txn_insert_b", 4),
        ("commit",),
        ("insert_b", 5),
        ("insert", 6),
    ),
    "streamed: a column added to another table inside a transaction": (
        ("streaming",),
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}, {table}_b"),
        ("slot",),
        ("insert_b", 1),
        ("begin",),
        ("txn_bulk", 1000),
        ("table", "add_column_b"),
        ("txn_bulk_b", 2000),
        ("commit",),
        ("insert_b", 5),
        ("insert", 6),
    ),
    "streamed: another table truncated inside a transaction": (
        ("streaming",),
        ("sql", "CREATE PUBLICATION {pub} FOR TABLE {table}, {table}_b"),
        ("slot",),
        ("insert_b", 1),
        ("begin",),
        ("txn_bulk", 1000),
        ("table", "truncate_b"),
        ("txn_bulk", 2000),
        ("commit",),
        ("insert_b", 5),
        ("insert", 6),
    ),
}
