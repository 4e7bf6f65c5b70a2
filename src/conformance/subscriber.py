"""PostgreSQL's own subscriber against the fake and against a real publisher.

One data set (:data:`INITIAL` rows, then :data:`BEFORE` transactions committed before
the subscription exists and :data:`AFTER` committed once it has synchronized) is served
by the fake as a script (initial rows as the tables' ``rows``, the transactions as steps
and ``WalSender.commit``) and held by a real publisher (INSERTs, then the same
transactions in SQL). A real subscriber cluster subscribes to each with the same options
and no hand-written answers; the check passes when both subscriptions end with the same
rows, and those equal the real publisher's own tables.

What the subscriber exercises on the fake: its catalog queries (publications, the table
list, pg_class, pg_attribute with the replica identity index, the 15+ column list and
row filter queries), CREATE_REPLICATION_SLOT with SNAPSHOT 'nothing' for the
subscription and USE_SNAPSHOT inside BEGIN READ ONLY ISOLATION LEVEL REPEATABLE READ for
each table-sync worker, COPY of the snapshot's rows (text, or binary with binary=true),
the table-sync slot streamed from the COPY's point and dropped, then the apply worker's
stream of AFTER as it is committed, with streaming, two_phase and binary as asked. The
big transaction of AFTER streams in blocks under the 64 kB logical_decoding_work_mem
both publishers run with. New slots start at the end of WAL on both (the fake's
``new_slots="end_of_wal"``), so BEFORE reaches the subscriber through COPY only.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "AFTER",
    "BEFORE",
    "INITIAL",
    "Subscription",
    "fake_publisher",
    "option_sets",
    "real_publisher",
    "script_changes",
    "subscribe",
]

Row = tuple[str, int, str]  # (insert | update | delete, id, value)
INITIAL: tuple[tuple[int, str], ...] = tuple((i, f"initial {i}") for i in range(1, 41))
BEFORE: tuple[tuple[Row, ...], ...] = (
    (("insert", 100, "before"), ("update", 1, "changed"), ("delete", 2, "")),
    (("insert", 102, "before"), ("update", 4, "changed")),
)
AFTER: tuple[tuple[Row, ...], ...] = (
    (("update", 3, "after"), ("insert", 101, "after")),
    tuple(("insert", 1000 + i, f"big {i:04d} " + "x" * 60) for i in range(700)),
    (("delete", 100, ""), ("delete", 1005, ""), ("update", 1010, "small again")),
)


def option_sets(subscriber: int, publisher: int) -> list[Mapping[str, str]]:
    """Subscription options both versions accept: streaming off/on (parallel when both
    are 16+), binary, two_phase (15+), copy_data true and false."""
    both = min(subscriber, publisher)
    sets: list[Mapping[str, str]] = [
        {"copy_data": "true"},
        {"copy_data": "true", "streaming": "on", "binary": "true"},
        {"copy_data": "false", "streaming": "on"},
    ]
    if both >= 15 and subscriber >= 15:
        sets.append({"copy_data": "true", "two_phase": "true", "streaming": "on"})
    if both >= 16:
        sets.append({"copy_data": "true", "streaming": "parallel", "binary": "true"})
    return sets


@dataclass
class Publisher:
    """Where to subscribe, and how to commit there."""

    conninfo: str
    table: str
    publication: str
    commit: Any  # Callable[[Sequence[Row]], object]
    own_rows: Any  # Callable[[], list[tuple[int, str]]] — the publisher's table, or None
    server: Any = None  # the real Server or the fake's WalSender, for other stories


def _names() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:10]
    return f"sub_t_{tag}", f"sub_pub_{tag}"


#: The publication's column list and row filter (15+): the key column only, rows with
#: id > 3 (both sides take the filter as PostgreSQL deparses it).
FILTERED: Final = (("id",), "(id > 3)")


@contextmanager
def real_publisher(
    server: Any, table: str, publication: str, *, filtered: bool = False
) -> Iterator[Publisher]:
    """``table`` with the INITIAL rows and BEFORE committed, published, on a real server."""
    from psycopg import sql  # noqa: PLC0415 - a test-time dependency

    ident = sql.Identifier(table)
    with server.connect() as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(ident))
        conn.execute(
            sql.SQL("INSERT INTO {} SELECT * FROM unnest(%s::int[], %s::text[])").format(ident),
            ([i for i, _ in INITIAL], [v for _, v in INITIAL]),
        )
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLE {}{}").format(
                sql.Identifier(publication),
                ident,
                sql.SQL(" (id) WHERE (id > 3)" if filtered else ""),
            )
        )

        def commit(rows: Sequence[Row]) -> None:
            with conn.transaction():
                for kind, key, value in rows:
                    if kind == "insert":
                        query = sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(ident)
                        conn.execute(query, (key, value))
                    elif kind == "update":
                        query = sql.SQL("UPDATE {} SET v = %s WHERE id = %s").format(ident)
                        conn.execute(query, (value, key))
                    else:
                        conn.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(ident), (key,))

        def own_rows() -> list[tuple[int, str]]:
            query = sql.SQL("SELECT id, v FROM {} ORDER BY id").format(ident)
            return [(int(r[0]), str(r[1])) for r in conn.execute(query).fetchall()]

        for rows in BEFORE:
            commit(rows)
        try:
            yield Publisher(
                f"host={server.host} port={server.port} user=postgres dbname=postgres",
                table,
                publication,
                commit,
                own_rows,
                server,
            )
        finally:
            conn.execute(sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(publication)))
            conn.execute(sql.SQL("DROP TABLE {}").format(ident))


@contextmanager
def fake_publisher(
    major: int, table: str, publication: str, *, filtered: bool = False
) -> Iterator[Publisher]:
    """The fake emulating ``major``, serving the same data as a script."""
    from pgwire_mock.pytest_plugin import start_walsender  # noqa: PLC0415
    from pgwire_mock.script import Script, column  # noqa: PLC0415

    name = f"public.{table}"
    script = (
        Script(pg_version=major, logical_decoding_work_mem=64)
        .table(
            name,
            columns=[column("id", "int4", key=True), column("v", "text")],
            rows=[{"id": i, "v": v} for i, v in INITIAL],
        )
        .publication(
            publication,
            tables=[name],
            columns={name: FILTERED[0]} if filtered else None,
            where={name: FILTERED[1]} if filtered else None,
        )
    )

    def changes(rows: Sequence[Row]) -> list[Any]:
        return script_changes(name, rows)

    for rows in BEFORE:
        script.transaction(changes(rows))
    # PostgreSQL's rule for new slots: the subscription's slot starts at the end of WAL,
    # its table-sync snapshot sees INITIAL and BEFORE, and only AFTER is streamed.
    server = start_walsender(script, databases=["postgres"], new_slots="end_of_wal")
    try:
        yield Publisher(
            f"host=127.0.0.1 port={server.port} user=postgres dbname=postgres",
            table,
            publication,
            lambda rows: server.commit(changes(rows)),
            None,
            server,
        )
    finally:
        server.stop()


def script_changes(name: str, rows: Sequence[Row]) -> list[Any]:
    """``rows`` as the fake's changes to table ``name`` (schema-qualified)."""
    from pgwire_mock.script import delete, insert, update  # noqa: PLC0415

    out: list[Any] = []
    for kind, key, value in rows:
        if kind == "insert":
            out.append(insert(name, id=key, v=value))
        elif kind == "update":
            out.append(update(name, id=key, v=value))
        else:
            out.append(delete(name, key={"id": key}))
    return out


@dataclass
class Subscription:
    rows: list[tuple[int, str | None]]
    states: list[str]


def subscribe(
    subscriber: Any,
    publisher: Publisher,
    options: Mapping[str, str],
    *,
    filtered: bool = False,
    timeout: float = 60,
) -> Subscription:
    """Subscribe ``subscriber`` (a cluster) to ``publisher`` with ``options``; wait until
    its table is synchronized and holds the publisher's BEFORE and AFTER transactions."""
    from psycopg import sql  # noqa: PLC0415

    ident = sql.Identifier(publisher.table)
    name = f"s_{uuid.uuid4().hex[:10]}"
    expected_after = _expected(options, filtered=filtered)
    with subscriber.connect() as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(ident))
        with_options = ", ".join(f"{k} = {v}" for k, v in options.items())
        conn.execute(
            sql.SQL("CREATE SUBSCRIPTION {} CONNECTION {} PUBLICATION {} WITH ({})").format(
                sql.Identifier(name),
                sql.Literal(publisher.conninfo),
                sql.Identifier(publisher.publication),
                sql.SQL(with_options),
            )
        )
        try:
            query = sql.SQL("SELECT id, v FROM {} ORDER BY id").format(ident)
            states_query = (
                "SELECT srsubstate FROM pg_subscription_rel r JOIN pg_subscription s "
                "ON s.oid = r.srsubid WHERE s.subname = %s"
            )
            deadline = time.monotonic() + timeout

            def wait(want: list[tuple[int, str | None]]) -> list[tuple[int, str | None]]:
                while True:
                    rows = [(int(r[0]), r[1]) for r in conn.execute(query).fetchall()]
                    states = [str(r[0]) for r in conn.execute(states_query, (name,)).fetchall()]
                    if rows == want and states == ["r"]:
                        return rows
                    if time.monotonic() > deadline:
                        return rows
                    time.sleep(0.1)

            wait(expected_after[0])
            for rows in AFTER:
                publisher.commit(rows)
            final = wait(expected_after[1])
            states = [str(r[0]) for r in conn.execute(states_query, (name,)).fetchall()]
            return Subscription(final, states)
        finally:
            conn.execute(sql.SQL("ALTER SUBSCRIPTION {} DISABLE").format(sql.Identifier(name)))
            conn.execute(
                sql.SQL("ALTER SUBSCRIPTION {} SET (slot_name = NONE)").format(sql.Identifier(name))
            )
            conn.execute(sql.SQL("DROP SUBSCRIPTION {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL("DROP TABLE {}").format(ident))


def _expected(
    options: Mapping[str, str], *, filtered: bool = False
) -> tuple[list[tuple[int, str | None]], list[tuple[int, str | None]]]:
    """The subscriber's rows after BEFORE (or none of INITIAL and BEFORE without
    copy_data: the slot starts after them) and after AFTER; through FILTERED, only rows
    with id > 3 and no value (the filter reads only the key, which no change alters)."""
    table: dict[int, str] = {}
    if options.get("copy_data", "true") == "true":
        table.update(INITIAL)
        for rows in BEFORE:
            _apply(table, rows)
    first = _seen(table, filtered)
    for rows in AFTER:
        _apply(table, rows)
    return first, _seen(table, filtered)


def _seen(table: dict[int, str], filtered: bool) -> list[tuple[int, str | None]]:
    if filtered:
        return [(key, None) for key in sorted(table) if key > 3]
    return sorted(table.items())


def _apply(table: dict[int, str], rows: Sequence[Row]) -> None:
    for kind, key, value in rows:
        if kind == "delete":
            table.pop(key, None)
        elif kind == "update":
            if key in table:
                table[key] = value
        else:
            table[key] = value


def new_names() -> tuple[str, str]:
    """A table and publication name for one check (both publishers take the same)."""
    return _names()
