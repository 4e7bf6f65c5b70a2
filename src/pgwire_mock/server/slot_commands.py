"""The replication slot commands of a walsender session: CREATE_REPLICATION_SLOT,
DROP_REPLICATION_SLOT, READ_REPLICATION_SLOT and ALTER_REPLICATION_SLOT, as
``walsender.c`` parses their options and ``slot.c`` checks them, in the emulated major's
order and words.

A mixin of :class:`~pgwire_mock.server.session.WalSenderSession`, kept apart so the
session module stays about its connection's state machine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from codec.wire import CommandComplete, Terminate
from pgwire_mock.server.errors import ServerError
from pgwire_mock.server.grammar import (
    AlterReplicationSlot,
    CreateReplicationSlot,
    DropReplicationSlot,
    ReadReplicationSlot,
    format_lsn,
    parse_bool,
)
from pgwire_mock.server.live import ShuttingDownError
from pgwire_mock.server.physical import redo_pointer_of, timeline_of_point
from pgwire_mock.server.source import ScriptSource
from pgwire_mock.server.state import (
    SLOT_NAME_CHARACTERS,
    ServerState,
    SlotActiveError,
    SlotExistsError,
    SlotMissingError,
    StateError,
)
from pgwire_mock.server.versions import VersionFacts, error

if TYPE_CHECKING:
    from pgwire_mock.script.wal import RunningXacts
    from pgwire_mock.server.catalog import CatalogQueries
    from pgwire_mock.server.session import SessionConfig

__all__ = ["SlotCommands"]

_TERMINATE: Final = Terminate().encode()


@dataclass
class _SlotCreation:
    """A CREATE_REPLICATION_SLOT's arguments, and for a logical slot the transactions
    its snapshot builder waits for."""

    command: CreateReplicationSlot
    snapshot: str
    two_phase: bool
    failover: bool
    reserve_wal: bool
    waiting: list[object] = field(default_factory=list)
    first_round: bool = True
    catalog_xmin: int | None = None  # the oldest running xid of its first record
    logging: bool = False  # writing its record, which wakes the sessions again


class SlotCommands:
    """The slot commands; the session provides the attributes and output methods below."""

    _slot_creation: _SlotCreation | None = None

    config: SessionConfig
    state: ServerState
    major: int
    facts: VersionFacts
    pid: int
    database: str
    replication: str
    transaction_status: str
    _catalog: CatalogQueries | None
    _log: Callable[[str], None]
    _held: bytearray
    client_gone: bool

    if TYPE_CHECKING:

        def _send(self, *messages: object) -> None: ...

        def _ready(self) -> None: ...

        def _command_error(self, err: ServerError) -> None: ...

        def _read_held(self) -> None: ...

        def _finish(self) -> None: ...

        def _rows(
            self,
            tag: str,
            columns: tuple[tuple[str, int, int], ...],
            rows: tuple[tuple[str | None, ...], ...],
        ) -> None: ...

    def _check_slot_name(self, name: str) -> None:
        if not name:
            raise error(self.major, "slot_name_too_short", slot=name)
        if not SLOT_NAME_CHARACTERS.issuperset(name):
            raise error(self.major, "slot_name_invalid_character", slot=name)

    def _create_slot(self, command: CreateReplicationSlot) -> None:
        snapshot = "export"
        two_phase = failover = reserve_wal = False
        seen: set[str] = set()
        known = set(self.facts.create_slot_options) | {"snapshot", "reserve_wal", "two_phase"}
        for option in command.options:
            name = option.name
            if name in seen:
                raise ServerError("ERROR", "42601", "conflicting or redundant options")
            seen.add(name)
            if name not in known:
                raise ServerError("ERROR", "XX000", f"unrecognized option: {name}")
            value = option.value
            if name == "snapshot":
                if not isinstance(value, str) or value.lower() not in ("export", "nothing", "use"):
                    raise ServerError(
                        "ERROR",
                        "22023",
                        f'unrecognized value for CREATE_REPLICATION_SLOT option "snapshot": '
                        f'"{value}"',
                    )
                snapshot = value.lower()
            else:
                flag = True if value is None or value is True else parse_bool(str(value))
                if flag is None:
                    raise ServerError("ERROR", "42601", f"{name} requires a Boolean value")
                if name == "two_phase":
                    two_phase = flag
                elif name == "failover":
                    failover = flag
                else:
                    reserve_wal = flag
        self._check_slot_name(command.slot_name)
        if command.kind == "logical":
            if self.replication != "database":
                raise error(self.major, "logical_decoding_requires_database")
            if command.plugin != "pgoutput":
                raise ServerError(
                    "ERROR",
                    "58P01",
                    f'could not access file "{command.plugin}": No such file or directory',
                )
        if failover and command.temporary:
            raise error(self.major, "failover_temporary_slot")
        if snapshot == "export" and command.kind == "logical" and self.transaction_status != "I":
            what = (
                "CREATE_REPLICATION_SLOT ... EXPORT_SNAPSHOT"
                if self.major < 15
                else "CREATE_REPLICATION_SLOT ... (SNAPSHOT 'export')"
            )
            raise ServerError("ERROR", "25001", f"{what} must not be called inside a transaction")
        if snapshot == "use" and command.kind == "logical" and self._catalog is not None:
            self._catalog.check_use_snapshot(in_transaction=self.transaction_status != "I")
        if command.slot_name in self.state.slots or command.slot_name in self.state.creating:
            raise error(self.major, "slot_already_exists", slot=command.slot_name)
        creation = _SlotCreation(command, snapshot, two_phase, failover, reserve_wal)
        if command.kind == "logical" and self.state.new_slot_lsn is None:
            # DecodingContextFindStartpoint: the snapshot builder is consistent only once
            # the transactions in progress now have ended, then those in progress at that
            # point (SnapBuildFindSnapshot, SnapBuildWaitSnapshot): till then the
            # command does not answer, and the backend reads nothing more. (A slot that
            # starts at the stream's start, --new-slots stream-start, waits for nothing.)
            creation.waiting = self._in_progress()
            if creation.waiting:
                # The slot exists meanwhile (ReplicationSlotCreate, then WAL reserved):
                # pg_replication_slots lists it, active for this walsender, restart_lsn
                # set and confirmed_flush_lsn NULL (measured on 14, 17 and 18).
                self.state.reserve_slot(
                    command.slot_name,
                    command.plugin or "pgoutput",
                    owner_pid=self.pid,
                    database=self.database,
                    temporary=command.temporary,
                    two_phase=two_phase,
                    failover=failover,
                )
                # ReplicationSlotReserveWal: restart_lsn where WAL ends, then a
                # running-xacts record listing what the builder waits for.
                record = self._log_running_xacts()
                creation.catalog_xmin = record.xmin if record is not None else None
                self._log(f"slot {command.slot_name} waits for transactions in progress")
                self._slot_creation = creation
                return
        self._create(creation)

    def _log_running_xacts(self) -> RunningXacts | None:
        """A running-xacts record at the end of a served live WAL (None: a recording,
        or a server shutting down, whose walsenders are about to end)."""
        write = self.config.log_running_xacts
        try:
            return write() if write is not None else None
        except ShuttingDownError:
            return None

    def _in_progress(self) -> list[object]:
        """The transactions of a live script in progress: written, their end not yet;
        or prepared, their COMMIT or ROLLBACK PREPARED not yet (xl_running_xacts lists
        prepared transactions among the running ones; measured on 14-18)."""
        source = self.config.source
        if not isinstance(source, ScriptSource) or source.wal is None:
            return []
        compiled = source.wal.compiled
        return [*compiled.in_progress(), *compiled.prepared_unfinished()]

    def _check_slot_creation(self) -> None:
        """More WAL was written: a waiting CREATE_REPLICATION_SLOT goes on once what it
        waits for has ended (a second round for those that began meanwhile)."""
        creation = self._slot_creation
        if creation is None:
            return
        running = {id(t) for t in self._in_progress()}
        if creation.logging or any(id(t) in running for t in creation.waiting):
            return
        # SnapBuildWaitSnapshot: once they ended, another running-xacts record; the
        # slot is consistent at its end unless it lists transactions begun meanwhile
        # (measured on 16: restart_lsn at the first record, consistent_point the end of
        # the one after the commit).
        creation.logging = True
        try:
            self._log_running_xacts()
        finally:
            creation.logging = False
        if self.client_gone or self._held.startswith(_TERMINATE):
            # The backend reads WAL again, and while it waits for WAL it reads what the
            # client sent meanwhile (WalSndWaitForWal, ProcessRepliesIfAny): a Terminate,
            # or the end of the connection, ends it before ReplicationSlotPersist, so the
            # slot, still ephemeral, is dropped and nothing is answered (measured on 14,
            # 17 and 18).
            self._slot_creation = None
            self._log("client gone" if self.client_gone else "client sent Terminate")
            self._finish()
            return
        if creation.first_round:
            creation.first_round = False
            creation.waiting = self._in_progress()
            if creation.waiting:
                return
        self._slot_creation = None
        try:
            self._create(creation)
        except ServerError as err:
            self.state.drop_reserved(self.pid)
            self._command_error(err)
        self._read_held()

    def _cancel_slot_creation(self) -> bool:
        """A CancelRequest stops the wait (XactLockTableWait is interruptible)."""
        if self._slot_creation is None:
            return False
        self._slot_creation = None
        self.state.drop_reserved(self.pid)  # the ephemeral slot goes with the error
        self._command_error(
            ServerError("ERROR", "57014", "canceling statement due to user request")
        )
        if self.client_gone:
            # Back in its command loop the walsender reads the end of the connection.
            self._finish()
            return True
        self._read_held()
        return True

    def _create(self, creation: _SlotCreation) -> None:
        command, snapshot = creation.command, creation.snapshot
        restart_at, catalog_xmin = None, creation.catalog_xmin
        if (
            command.kind == "logical"
            and self.state.new_slot_lsn is None
            and command.slot_name not in self.state.creating
        ):
            # Nothing to wait for: one running-xacts record, restart_lsn at its start,
            # the consistent point at its end (56 bytes on 14-18).
            record = self._log_running_xacts()
            if record is not None:
                restart_at, catalog_xmin = record.lsn, record.xmin
        try:
            slot = self.state.create_slot(
                command.slot_name,
                command.plugin if command.kind == "logical" else None,
                temporary=command.temporary,
                two_phase=creation.two_phase and command.kind == "logical",
                failover=creation.failover,
                owner_pid=self.pid,
                database=self.database,
                reserve_wal=creation.reserve_wal,
                reserve_at=redo_pointer_of(self.config.source),
                restart_at=restart_at,
                catalog_xmin=catalog_xmin,
            )
        except SlotExistsError:
            raise error(self.major, "slot_already_exists", slot=command.slot_name) from None
        if command.kind == "logical":
            point = format_lsn(slot.confirmed_flush)
            snapshot_name = (
                self.state.next_snapshot_name(0x300 + self.pid % 0x100)
                if snapshot == "export"
                else None
            )
            # The slot's snapshot sees what it will not stream: the transactions that
            # committed before its consistent point.
            if snapshot_name is not None:
                self.state.exported[snapshot_name] = slot.confirmed_flush
            elif snapshot == "use" and self._catalog is not None:
                self._catalog.snapshot_lsn = slot.confirmed_flush
        else:
            point, snapshot_name = "0/0", None
        self._log(f"created slot {slot.name} at {point}")
        self._rows(
            "CREATE_REPLICATION_SLOT",
            (
                ("slot_name", 25, -1),
                ("consistent_point", 25, -1),
                ("snapshot_name", 25, -1),
                ("output_plugin", 25, -1),
            ),
            ((slot.name, point, snapshot_name, slot.plugin),),
        )

    def _slot_error(self, err: StateError) -> ServerError:
        if isinstance(err, SlotActiveError):
            return error(self.major, "slot_active", slot=err.slot, pid=err.pid)
        if isinstance(err, SlotMissingError):
            return error(self.major, "slot_does_not_exist", slot=err.slot)
        return error(self.major, "slot_already_exists", slot=err.slot)

    def _drop_slot(self, command: DropReplicationSlot) -> None:
        try:
            self.state.drop_slot(command.slot_name, self.pid)
        except StateError as err:
            raise self._slot_error(err) from None
        self._log(f"dropped slot {command.slot_name}")
        self._send(CommandComplete("DROP_REPLICATION_SLOT"))
        self._ready()

    def _read_slot(self, command: ReadReplicationSlot) -> None:
        slot = self.state.slots.get(command.slot_name)
        if slot is not None and slot.logical:
            raise error(self.major, "read_replication_slot_logical")
        row: tuple[str | None, ...] = (None, None, None)
        if slot is not None:
            lsn = format_lsn(slot.restart_lsn) if slot.restart_lsn else None
            tli = timeline_of_point(self.config.source, slot.restart_lsn, self.state.timeline)
            row = ("physical", lsn, str(tli) if lsn else None)
        self._rows(
            "READ_REPLICATION_SLOT",
            (("slot_type", 25, -1), ("restart_lsn", 25, -1), ("restart_tli", 20, 8)),
            (row,),
        )

    def _alter_slot(self, command: AlterReplicationSlot) -> None:
        """AlterReplicationSlot (walsender.c): every option is parsed before the slot is
        acquired; ReplicationSlotAlter (slot.c) then checks the slot's kind and, for
        failover, that it is not temporary. 18 adds TWO_PHASE."""
        known = ("failover", "two_phase") if self.major >= 18 else ("failover",)
        given: dict[str, bool] = {}
        for option in command.options:
            if option.name not in known:
                raise error(self.major, "alter_slot_unrecognized_option", option=option.name)
            if option.name in given:
                raise error(self.major, f"alter_slot_conflicting_{option.name}")
            flag = True if option.value is None else parse_bool(str(option.value))
            if flag is None:
                raise error(self.major, "requires_boolean", option=option.name)
            given[option.name] = flag
        try:
            slot = self.state.acquire(command.slot_name, self.pid)
        except StateError as err:
            raise self._slot_error(err) from None
        try:
            if slot.invalidated is not None and self.major >= 18:
                raise error(self.major, "slot_invalidated", slot=slot.name, cause=slot.invalidated)
            if not slot.logical:
                raise error(self.major, "alter_slot_physical")
            if given.get("failover") and slot.temporary:
                raise error(self.major, "alter_failover_temporary_slot")
            slot.failover = given.get("failover", slot.failover)
            slot.two_phase = given.get("two_phase", slot.two_phase)
        finally:
            self.state.release(slot.name, self.pid)
        self._send(CommandComplete("ALTER_REPLICATION_SLOT"))
        self._ready()
