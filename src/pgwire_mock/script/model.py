"""The stream script as Python objects, and the builder API.

Every YAML construct has a class here; :func:`~pgwire_mock.script.load_script` builds
these objects and :meth:`Script.to_dict` turns them back into the YAML/JSON form. The
objects only *record* what the script says: checking it against the tables and types
(and converting values) happens in :mod:`pgwire_mock.script.compile` (the catalogue in
:mod:`~pgwire_mock.script.declarations`, the changes in
:mod:`~pgwire_mock.script.changes`), which both the loader and the encoder run, so a
script built in Python fails with the same one-line
:class:`~pgwire_mock.script.ScriptError` as a file.

>>> from pgwire_mock.script import Script, column, insert
>>> script = (
...     Script(pg_version=16)
...     .table("public.users", columns=[column("id", "int4", key=True), column("name", "text")])
...     .publication("pub", tables=["public.users"])
...     .transaction([insert("public.users", id=1, name="a")])
... )
>>> script.to_dict()["steps"][0]["transaction"]["changes"][0]
{'insert': 'public.users', 'values': {'id': 1, 'name': 'a'}}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

__all__ = [
    "FAULT_NAMES",
    "FORMAT_VERSION",
    "GENERATED_KINDS",
    "PUBLISH_GENERATED",
    "AlterPublication",
    "AlterTable",
    "BeginTransaction",
    "Change",
    "Column",
    "CommitPrepared",
    "CreatePublication",
    "Delete",
    "DropPublication",
    "EndTransaction",
    "Fault",
    "Insert",
    "LogicalMessage",
    "Publication",
    "ReleaseSavepoint",
    "RollbackPrepared",
    "RollbackToSavepoint",
    "Savepoint",
    "Script",
    "ServerFacts",
    "Sleep",
    "Slot",
    "Step",
    "Table",
    "Transaction",
    "Truncate",
    "Update",
    "WaitFor",
    "WriteTransaction",
    "alter_table",
    "column",
    "delete",
    "insert",
    "message",
    "release_savepoint",
    "rollback_to_savepoint",
    "savepoint",
    "truncate",
    "update",
]

#: The format version this package reads and writes.
FORMAT_VERSION: Final = 1

#: Fault names the server interprets; the script only checks the name.
FAULT_NAMES: Final = frozenset(
    {
        "close_after",
        "pause",
        "error",
        "stop_keepalives",
        "silent_timeout",
        "redeliver",
        "slow",
        "shutdown",
    }
)

REPLICA_IDENTITIES: Final = ("default", "full", "index", "nothing")
#: ``Column.generated``: not generated, GENERATED ALWAYS AS (…) STORED, … VIRTUAL (18).
GENERATED_KINDS: Final = ("", "stored", "virtual")
#: ``Publication.generated_columns`` (``publish_generated_columns``, 18).
PUBLISH_GENERATED: Final = ("none", "stored")
STREAM_MODES: Final = ("auto", "always", "never")

Values: TypeAlias = Mapping[str, object]


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """What the fake server says about itself.

    ``start_lsn`` is where the script's WAL begins; ``logical_decoding_work_mem`` is in
    kB (PostgreSQL's default is 64MB); ``start_time`` is the clock at the first step
    (ISO timestamp with offset); ``first_xid`` is the first transaction id handed out.
    """

    pg_version: int = 16
    system_identifier: int = 7_300_000_000_000_000_000
    timeline: int = 1
    start_lsn: int = 0x1500000
    logical_decoding_work_mem: int = 65536
    start_time: str = "2024-01-01 00:00:00+00"
    first_xid: int = 750


_DEFAULTS: Final = ServerFacts()


@dataclass(frozen=True, slots=True)
class Slot:
    """A replication slot that exists when the server starts."""

    name: str
    plugin: str = "pgoutput"
    confirmed_flush: int | None = None  # None: the script's start_lsn
    two_phase: bool = False


@dataclass(frozen=True, slots=True)
class Publication:
    """A publication: every table (``all_tables``) or the listed ones, each listed one
    with an optional column list (``columns``) and row filter (``where``, as
    ``pg_get_expr`` shows it: ``(id > 1)``), both PostgreSQL 15+.

    ``generated_columns`` is ``publish_generated_columns`` (18): ``"stored"`` publishes
    stored generated columns of tables without a column list; None (not given) is
    ``"none"``, the only behaviour before 18. ``publish``: the actions it publishes
    (``WITH (publish = 'insert, update')``), None for all four."""

    name: str
    tables: tuple[str, ...] = ()
    all_tables: bool = False
    columns: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    where: Mapping[str, str] = field(default_factory=dict)
    generated_columns: str | None = None
    publish: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Column:
    """A table column; ``key`` marks replica identity columns (primary key or the
    identity index). ``generated`` is ``"stored"`` (GENERATED ALWAYS AS (…) STORED: rows
    carry its value, which the script gives — pgwire-mock does not evaluate the
    expression) or ``"virtual"`` (18: never stored nor published, it takes no value).
    PostgreSQL 14–17 never publish generated columns; 18 publishes stored ones that a
    column list names or, without a list, when ``publish_generated_columns = stored``."""

    name: str
    type: str
    key: bool = False
    generated: str = ""


@dataclass(frozen=True, slots=True)
class Table:
    """A table, schema-qualified (``public.users``); ``rows`` are its rows before the
    script's first step (what a snapshot taken at the stream's start holds)."""

    name: str
    columns: tuple[Column, ...]
    replica_identity: str = "default"
    oid: int | None = None
    rows: tuple[Values, ...] = ()


@dataclass(frozen=True, slots=True)
class UserTypeDecl:
    """``enum`` (labels), ``domain`` (base type) or ``composite`` (field name → type)."""

    name: str
    kind: str
    labels: tuple[str, ...] = ()
    base: str = ""
    fields: tuple[tuple[str, str], ...] = ()
    oid: int | None = None
    array_oid: int | None = None


# --- changes inside a transaction --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Insert:
    table: str
    values: Values


@dataclass(frozen=True, slots=True)
class Update:
    """An UPDATE: ``values`` is the whole new row (columns left out are NULL);
    ``key`` the old replica identity values when the update changed them; ``old`` the
    whole old row (REPLICA IDENTITY FULL only); ``unchanged`` columns are sent as
    unchanged TOAST values."""

    table: str
    values: Values
    key: Values | None = None
    old: Values | None = None
    unchanged: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Delete:
    """A DELETE: ``key`` (default / index identity) or ``old`` (full identity)."""

    table: str
    key: Values | None = None
    old: Values | None = None


@dataclass(frozen=True, slots=True)
class Truncate:
    tables: tuple[str, ...]
    cascade: bool = False
    restart_identity: bool = False


@dataclass(frozen=True, slots=True)
class LogicalMessage:
    """``pg_logical_emit_message``: inside a transaction it is transactional; as a step
    of its own it is not."""

    prefix: str
    content: bytes


@dataclass(frozen=True, slots=True)
class Savepoint:
    name: str


@dataclass(frozen=True, slots=True)
class RollbackToSavepoint:
    """Aborts the subtransaction(s) since the savepoint, which stays defined."""

    name: str


@dataclass(frozen=True, slots=True)
class ReleaseSavepoint:
    name: str


@dataclass(frozen=True, slots=True)
class AlterTable:
    """ALTER TABLE ADD / DROP COLUMN; pgoutput sends a new Relation before the next change."""

    table: str
    add_columns: tuple[Column, ...] = ()
    drop_columns: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CreatePublication:
    """CREATE PUBLICATION as a step (the SQL command on a served script writes one): a
    catalog transaction; walsenders publish through it the changes they decode after
    its commit, as pgoutput looks publications up with the historic snapshot of the
    change (before it, 14-17 fail with 42704 and 18 skips it with a warning)."""

    publication: Publication


@dataclass(frozen=True, slots=True)
class AlterPublication:
    """ALTER PUBLICATION name ADD | DROP | SET TABLE ... as a step (``action`` add, drop
    or set), or SET (publish = ...) (``action`` publish, the actions in ``publish``): a
    catalog transaction; tables added are published from its commit on, those removed
    no longer, and each one's Relation is sent again."""

    name: str
    action: str
    tables: tuple[str, ...] = ()
    publish: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DropPublication:
    """DROP PUBLICATION as a step: changes decoded after its commit no longer find it."""

    name: str


Change: TypeAlias = (
    Insert
    | Update
    | Delete
    | Truncate
    | LogicalMessage
    | Savepoint
    | RollbackToSavepoint
    | ReleaseSavepoint
    | AlterTable
)

# --- steps ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Transaction:
    """One transaction. ``prepare`` makes it PREPARE TRANSACTION 'gid' (finished by a
    later commit_prepared / rollback_prepared step); ``rollback`` makes it end in
    ROLLBACK; ``origin`` (and ``origin_lsn``) replay it under a replication origin.
    ``long_running``: it runs for a while, so a walsender already waiting at the end of
    WAL decodes its changes while it is in progress, not after its end (see
    docs/live-wal.md: it streams even if it rolls back later)."""

    changes: tuple[Change, ...]
    origin: str | None = None
    origin_lsn: int | None = None
    commit_time: str | None = None
    stream: str = "auto"
    prepare: str | None = None
    rollback: bool = False
    long_running: bool = False


@dataclass(frozen=True, slots=True)
class CommitPrepared:
    gid: str
    commit_time: str | None = None


@dataclass(frozen=True, slots=True)
class RollbackPrepared:
    gid: str
    rollback_time: str | None = None


@dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault for the server to inject; only ``name`` is checked here."""

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WaitFor:
    """Hold the rest of the WAL back until a condition holds (a served script only).

    Unlike :class:`Sleep`, which pauses one client's stream, this holds the server's WAL:
    what follows is written (the end of WAL moves, clients receive it) only once the
    condition holds. ``confirmed``: the slot ``slot`` (every logical slot when None, and
    at least one must exist) has confirmed_flush at or past this point; ``seconds``: at
    least that long after the WAL reached this step. ``timeout``: stop waiting for the
    confirmation after that many seconds (the server logs it) and write on.
    """

    confirmed: bool = True
    slot: str | None = None
    seconds: float = 0.0
    timeout: float | None = None


@dataclass(frozen=True, slots=True)
class BeginTransaction:
    """Begin a transaction that stays open across the steps that follow, named ``name``
    (``stream``, ``origin``, ``origin_lsn`` as for :class:`Transaction`): its changes
    reach the WAL step by step (:class:`WriteTransaction`), between other transactions'
    records, until :class:`EndTransaction`. A consumer can restart in the middle of it."""

    name: str
    stream: str = "auto"
    origin: str | None = None
    origin_lsn: int | None = None


@dataclass(frozen=True, slots=True)
class WriteTransaction:
    """Changes of the open transaction ``name``, written at this point of the WAL."""

    name: str
    changes: tuple[Change, ...]


@dataclass(frozen=True, slots=True)
class EndTransaction:
    """End the open transaction ``name``: COMMIT, ROLLBACK, or PREPARE TRANSACTION
    ``prepare`` (finished by a later commit_prepared / rollback_prepared step)."""

    name: str
    rollback: bool = False
    prepare: str | None = None
    commit_time: str | None = None


Step: TypeAlias = (
    Transaction
    | CommitPrepared
    | RollbackPrepared
    | LogicalMessage
    | AlterTable
    | CreatePublication
    | AlterPublication
    | DropPublication
    | Sleep
    | Fault
    | WaitFor
    | BeginTransaction
    | WriteTransaction
    | EndTransaction
)


# --- builder helpers ------------------------------------------------------------------------


def column(name: str, type: str, *, key: bool = False, generated: str | bool = "") -> Column:
    """A :class:`Column`; ``generated=True`` is ``"stored"``."""
    return Column(name, type, key, _generated_kind(generated))


def _generated_kind(generated: str | bool) -> str:
    if generated is True:
        return "stored"
    if generated is False:
        return ""
    return generated


def insert(table: str, values: Values | None = None, /, **columns: object) -> Insert:
    """INSERT; values as a mapping or keywords: ``insert("public.t", id=1)``."""
    return Insert(table, {**(values or {}), **columns})


def update(
    table: str,
    values: Values | None = None,
    /,
    *,
    key: Values | None = None,
    old: Values | None = None,
    unchanged: Iterable[str] = (),
    **columns: object,
) -> Update:
    """UPDATE; see :class:`Update`."""
    return Update(table, {**(values or {}), **columns}, key, old, tuple(unchanged))


def delete(table: str, *, key: Values | None = None, old: Values | None = None) -> Delete:
    """DELETE; see :class:`Delete`."""
    return Delete(table, key, old)


def truncate(*tables: str, cascade: bool = False, restart_identity: bool = False) -> Truncate:
    """TRUNCATE of one or more tables, in the order pgoutput lists them."""
    return Truncate(tables, cascade, restart_identity)


def message(prefix: str, content: str | bytes) -> LogicalMessage:
    """A logical decoding message; ``str`` content is sent as UTF-8."""
    return LogicalMessage(prefix, content.encode() if isinstance(content, str) else content)


def savepoint(name: str) -> Savepoint:
    return Savepoint(name)


def rollback_to_savepoint(name: str) -> RollbackToSavepoint:
    return RollbackToSavepoint(name)


def release_savepoint(name: str) -> ReleaseSavepoint:
    return ReleaseSavepoint(name)


def alter_table(table: str, *, add: Iterable[Column] = (), drop: Iterable[str] = ()) -> AlterTable:
    """ALTER TABLE ADD COLUMN / DROP COLUMN."""
    return AlterTable(table, tuple(add), tuple(drop))


class Script:
    """A stream script: server facts, catalogue, and the steps to stream.

    Built with the chaining methods below, or from a file with
    :func:`~pgwire_mock.script.load_script`. Instances are mutable while being built;
    :func:`~pgwire_mock.script.encode_stream` checks them (and raises
    :class:`~pgwire_mock.script.ScriptError` naming the bad step).
    """

    def __init__(
        self,
        *,
        pg_version: int = 16,
        system_identifier: int = _DEFAULTS.system_identifier,
        timeline: int = 1,
        start_lsn: int = _DEFAULTS.start_lsn,
        logical_decoding_work_mem: int = _DEFAULTS.logical_decoding_work_mem,
        start_time: str = _DEFAULTS.start_time,
        first_xid: int = _DEFAULTS.first_xid,
    ) -> None:
        self.format_version = FORMAT_VERSION
        self.server = ServerFacts(
            pg_version,
            system_identifier,
            timeline,
            start_lsn,
            logical_decoding_work_mem,
            start_time,
            first_xid,
        )
        self.slots: list[Slot] = []
        self.publications: list[Publication] = []
        self.types: list[UserTypeDecl] = []
        self.tables: list[Table] = []
        self.steps: list[Step] = []
        #: Where the script came from (a file name), used in error messages.
        self.source = "<script>"

    # catalogue

    def slot(
        self,
        name: str,
        *,
        plugin: str = "pgoutput",
        confirmed_flush: int | None = None,
        two_phase: bool = False,
    ) -> Script:
        self.slots.append(Slot(name, plugin, confirmed_flush, two_phase))
        return self

    def publication(
        self,
        name: str,
        *,
        tables: Sequence[str] = (),
        all_tables: bool = False,
        columns: Mapping[str, Sequence[str]] | None = None,
        where: Mapping[str, str] | None = None,
        generated_columns: str | None = None,
    ) -> Script:
        """A publication; ``columns`` and ``where`` map a listed table to its column list
        and row filter (15+); ``generated_columns`` is ``publish_generated_columns`` (18)."""
        lists = {table: tuple(names) for table, names in (columns or {}).items()}
        self.publications.append(
            Publication(
                name, tuple(tables), all_tables, lists, dict(where or {}), generated_columns
            )
        )
        return self

    def enum(self, name: str, labels: Sequence[str], *, oid: int | None = None) -> Script:
        self.types.append(UserTypeDecl(name, "enum", labels=tuple(labels), oid=oid))
        return self

    def domain(self, name: str, base: str, *, oid: int | None = None) -> Script:
        self.types.append(UserTypeDecl(name, "domain", base=base, oid=oid))
        return self

    def composite(
        self,
        name: str,
        fields: Mapping[str, str] | Sequence[tuple[str, str]],
        *,
        oid: int | None = None,
    ) -> Script:
        items = tuple(fields.items()) if isinstance(fields, Mapping) else tuple(fields)
        self.types.append(UserTypeDecl(name, "composite", fields=items, oid=oid))
        return self

    def table(
        self,
        name: str,
        *,
        columns: Sequence[Column | tuple[str, str] | tuple[str, str, bool]],
        replica_identity: str = "default",
        oid: int | None = None,
        rows: Sequence[Values] = (),
    ) -> Script:
        cols = tuple(c if isinstance(c, Column) else Column(*c) for c in columns)
        self.tables.append(Table(name, cols, replica_identity, oid, tuple(rows)))
        return self

    # steps

    def transaction(
        self,
        changes: Sequence[Change],
        *,
        origin: str | None = None,
        origin_lsn: int | None = None,
        commit_time: str | None = None,
        stream: str = "auto",
        prepare: str | None = None,
        rollback: bool = False,
        long_running: bool = False,
    ) -> Script:
        self.steps.append(
            Transaction(
                tuple(changes),
                origin,
                origin_lsn,
                commit_time,
                stream,
                prepare,
                rollback,
                long_running,
            )
        )
        return self

    def commit_prepared(self, gid: str, *, commit_time: str | None = None) -> Script:
        self.steps.append(CommitPrepared(gid, commit_time))
        return self

    def rollback_prepared(self, gid: str, *, rollback_time: str | None = None) -> Script:
        self.steps.append(RollbackPrepared(gid, rollback_time))
        return self

    def message(self, prefix: str, content: str | bytes) -> Script:
        """A non-transactional logical message."""
        self.steps.append(message(prefix, content))
        return self

    def alter_table(
        self, table: str, *, add: Iterable[Column] = (), drop: Iterable[str] = ()
    ) -> Script:
        """ALTER TABLE as a transaction of its own."""
        self.steps.append(alter_table(table, add=add, drop=drop))
        return self

    def sleep(self, seconds: float) -> Script:
        self.steps.append(Sleep(seconds))
        return self

    def fault(self, name: str, **params: Any) -> Script:
        self.steps.append(Fault(name, params))
        return self

    def wait_for(
        self,
        *,
        confirmed: bool = True,
        slot: str | None = None,
        seconds: float = 0.0,
        timeout: float | None = None,
    ) -> Script:
        """Hold the rest of the WAL back until the condition holds (see :class:`WaitFor`)."""
        self.steps.append(WaitFor(confirmed, slot, seconds, timeout))
        return self

    def begin(
        self,
        name: str,
        *,
        stream: str = "auto",
        origin: str | None = None,
        origin_lsn: int | None = None,
    ) -> Script:
        """Begin a transaction that stays open (see :class:`BeginTransaction`)."""
        self.steps.append(BeginTransaction(name, stream, origin, origin_lsn))
        return self

    def write(self, name: str, changes: Iterable[Change]) -> Script:
        """Write changes of the open transaction ``name`` here."""
        self.steps.append(WriteTransaction(name, tuple(changes)))
        return self

    def end(
        self,
        name: str,
        *,
        rollback: bool = False,
        prepare: str | None = None,
        commit_time: str | None = None,
    ) -> Script:
        """Commit (or roll back, or prepare) the open transaction ``name``."""
        self.steps.append(EndTransaction(name, rollback, prepare, commit_time))
        return self

    # serialisation (implemented in pgwire_mock.script.loader)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<script>") -> Script:
        """Build a script from its YAML/JSON form; raises ScriptError."""
        from pgwire_mock.script.loader import script_from_dict  # noqa: PLC0415 (circular)

        return script_from_dict(data, source)

    def to_dict(self) -> dict[str, Any]:
        """The YAML/JSON form; ``Script.from_dict(s.to_dict())`` is equivalent to ``s``."""
        from pgwire_mock.script.loader import script_to_dict  # noqa: PLC0415 (circular)

        return script_to_dict(self)

    def check(self) -> None:
        """Raise :class:`~pgwire_mock.script.ScriptError` if the script is inconsistent."""
        from pgwire_mock.script.compile import compile_script  # noqa: PLC0415 (circular)

        compile_script(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Script):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable while being built

    def __repr__(self) -> str:
        return (
            f"Script(pg_version={self.server.pg_version}, {len(self.tables)} tables, "
            f"{len(self.steps)} steps)"
        )
