"""What every connection to one fake server shares: slots, publications, WAL position.

A real server keeps this in shared memory and on disk (``pg_replslot/*/state``, the
catalogs). :class:`ServerState` keeps it in one object that all sessions of a process
use, and optionally in a JSON file (``path``) so that a restarted fake resumes like a
restarted PostgreSQL: slots keep their confirmed_flush, temporary slots are gone.

Nothing here does I/O except :meth:`ServerState.save_now` (which :meth:`ServerState.save`
calls, at once or coalesced) and :meth:`ServerState.load`.
"""

from __future__ import annotations

import glob
import json
import os
import tempfile
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Protocol

from codec.wire import SecretKey
from pgwire_mock import json_text
from pgwire_mock.server.state_file import (
    StateFileError,
    checked_publication,
    checked_slot,
    checked_top,
)

__all__ = [
    "ANY",
    "DEFAULT_DATABASES",
    "DEFAULT_SYSTEM_IDENTIFIER",
    "INVALIDATION_CAUSES",
    "PUBLICATION_ACTIONS",
    "SLOT_NAME_CHARACTERS",
    "SLOT_SAVES",
    "PublicationState",
    "ServerState",
    "SlotActiveError",
    "SlotExistsError",
    "SlotMissingError",
    "SlotState",
    "StateError",
    "WalSenderStatus",
    "slot_name_problem",
    "wal_file_name",
]

DEFAULT_DATABASES: Final = frozenset({"postgres", "template0", "template1"})
"""What ``initdb`` creates."""
ANY: Final = "*"
"""In ``ServerState.databases``: every name exists."""

INVALIDATION_CAUSES: Final = ("wal_removed", "idle_timeout")
"""Slot invalidations the fake emulates, as a checkpoint makes them: WAL the slot needed
was removed (max_slot_wal_keep_size), or (18) the slot was idle longer than
idle_replication_slot_timeout. The others come from a standby's conflicts (rows_removed,
wal_level_insufficient), not modelled."""

SLOT_NAME_CHARACTERS: Final = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


def slot_name_problem(name: str) -> str | None:
    """What ReplicationSlotValidateName (slot.c) says of ``name``, or None: a slot's
    name is 1 to 63 bytes of lower case letters, digits and underscores."""
    if not name:
        return f'replication slot name "{name}" is too short'
    if len(name.encode()) >= 64:  # NAMEDATALEN
        return f'replication slot name "{name}" is too long'
    if not SLOT_NAME_CHARACTERS.issuperset(name):
        return f'replication slot name "{name}" contains invalid character'
    return None


DEFAULT_SYSTEM_IDENTIFIER: Final = 7_301_234_567_890_123_456
"""A plausible pg_control system identifier (a real one is time << 32 | pid-ish bits)."""

_FORMAT: Final = 1

WAL_SEGMENT_SIZE: Final = 16 * 1024 * 1024
"""initdb's default ``--wal-segsize`` (what ``SHOW wal_segment_size`` says)."""


def wal_file_name(timeline: int, lsn: int) -> str:
    """The WAL segment file that holds ``lsn`` (``XLogFileName`` in xlog_internal.h)."""
    segment = lsn // WAL_SEGMENT_SIZE
    per_id = 0x1_0000_0000 // WAL_SEGMENT_SIZE
    return f"{timeline:08X}{segment // per_id:08X}{segment % per_id:08X}"


@dataclass(frozen=True, slots=True)
class WalSenderStatus:
    """One walsender's row of ``pg_stat_replication``: its backend (PgBackendStatus) and
    its WalSnd slot, as ``pg_stat_get_wal_senders`` reads them. LSNs and ``reply_time``
    are 0 until known (the view shows NULL)."""

    pid: int
    user: str
    application_name: str
    backend_start: float
    """Unix time the connection was accepted."""
    client_addr: str | None
    client_port: int | None
    """None with client_addr None: a Unix-domain socket (the view shows -1)."""
    state: str
    """``startup`` (no START_REPLICATION running), ``catchup``, ``streaming`` (once it
    first caught up with the end of WAL) or ``stopping``."""
    sent_lsn: int = 0
    write_lsn: int = 0
    flush_lsn: int = 0
    replay_lsn: int = 0
    reply_time: int = 0
    """The client's own clock from its last standby status update (µs since 2000)."""


class Cancellable(Protocol):
    """A live session, as a CancelRequest and ``pg_stat_replication`` find it."""

    secret_key: SecretKey

    def cancel(self) -> None: ...

    def walsender_status(self) -> WalSenderStatus | None:
        """Its ``pg_stat_replication`` row; None for a backend that is no walsender."""
        ...


class StateError(Exception):
    """A slot operation the state refuses; the session turns it into PostgreSQL's error."""

    def __init__(self, slot: str) -> None:
        super().__init__(slot)
        self.slot = slot


class SlotMissingError(StateError):
    pass


class SlotExistsError(StateError):
    pass


class SlotActiveError(StateError):
    def __init__(self, slot: str, pid: int) -> None:
        super().__init__(slot)
        self.pid = pid


@dataclass(slots=True)
class SlotState:
    """One replication slot (``pg_replication_slots``' columns that a client can see)."""

    name: str
    plugin: str | None  # None for a physical slot
    database: str | None
    confirmed_flush: int
    restart_lsn: int
    two_phase: bool = False
    two_phase_at: int | None = None
    """Where two-phase decoding began (18 shows it): the consistent point for a slot made
    with TWO_PHASE, the start point for one first streamed with ``two_phase``; None after
    ALTER_REPLICATION_SLOT alone turns it on (slot.c leaves it invalid)."""
    temporary: bool = False
    failover: bool = False
    invalidated: str | None = None
    """Why the slot was invalidated (``ReplicationSlotInvalidationCause`` by its 17+ name:
    ``wal_removed``, ``rows_removed``, ``wal_level_insufficient``, 18's ``idle_timeout``);
    None while it is valid."""
    active_pid: int | None = None
    owner_pid: int | None = None  # the session that created a temporary slot
    inactive_since: float | None = None
    """Unix time the slot was last released (``pg_replication_slots.inactive_since``, 17);
    set at creation and when a server starts, as ``ReplicationSlotRelease`` and
    ``RestoreSlotFromDisk`` do; None while a session uses it. Never saved."""
    persisted_flush: int | None = None
    """Set while the on-disk confirmed_flush lags the one in memory (the ``redeliver``
    fault); None: they are the same, as after every checkpoint."""
    saved_position: tuple[int, int] | None = None
    """The confirmed_flush and restart_lsn the slot's file holds while confirmations
    moved confirmed_flush in memory only (LogicalConfirmReceivedLocation saves the slot
    only when restart_lsn or catalog_xmin moves, at a running-xacts record): what a
    crash falls back to, and a clean restart on 14-16 (17+ save confirmed_flush at the
    shutdown checkpoint). None: the file holds what memory does."""
    catalog_xmin: int | None = None
    """pg_replication_slots.catalog_xmin: the oldest running xid of the last
    running-xacts record that moved it; None where the served WAL has no xids."""
    candidate_xmin: tuple[int, int] | None = None
    """(record, xmin): a catalog_xmin taken once the client confirms the record."""
    candidate_restart: tuple[int, int] | None = None
    """(record, restart_lsn): a restart_lsn taken once the client confirms the record."""

    @property
    def logical(self) -> bool:
        return self.plugin is not None


PUBLICATION_ACTIONS: Final = ("insert", "update", "delete", "truncate")
"""What a publication may publish (pubinsert, pubupdate, pubdelete, pubtruncate)."""


@dataclass(frozen=True, slots=True)
class PublicationState:
    """A publication: FOR ALL TABLES, or a list of ``schema.table`` names."""

    name: str
    all_tables: bool = False
    tables: tuple[str, ...] = ()
    insert: bool = True
    update: bool = True
    delete: bool = True
    truncate: bool = True
    owner: str = "postgres"
    generated_columns: str = "n"  # pubgencols (18): n = none, s = stored

    @property
    def actions(self) -> tuple[str, ...]:
        """The actions it publishes, in PUBLICATION_ACTIONS' order."""
        return tuple(a for a in PUBLICATION_ACTIONS if getattr(self, a))

    def publishing(self, actions: Collection[str]) -> PublicationState:
        """The same publication publishing ``actions``."""
        return replace(
            self,
            insert="insert" in actions,
            update="update" in actions,
            delete="delete" in actions,
            truncate="truncate" in actions,
        )


SLOT_SAVES: Final = ("every-confirmation", "postgresql")
"""What a state file may keep of a logical slot (``ServerState.slot_saves``)."""

# SlotState fields the state file leaves out: the session's, and positions that live
# only until the server restarts.
_NOT_SAVED: Final = (
    "active_pid",
    "owner_pid",
    "persisted_flush",
    "saved_position",
    "inactive_since",
    "candidate_xmin",
    "candidate_restart",
)


@dataclass(slots=True)
class ServerState:
    """Shared by every session of one fake server."""

    system_identifier: int = DEFAULT_SYSTEM_IDENTIFIER
    timeline: int = 1
    database: str = "postgres"
    """The default database: where declared slots that name none live."""
    databases: set[str] = field(default_factory=lambda: {ANY})
    """Databases that exist (``pg_database``): a connection to another gets 3D000 and a
    slot serves only its own. ``{ANY}`` until some are declared: one database that
    answers to every name (the fake's behaviour before it modelled databases)."""
    wal_lsn: int = 0x1000000
    """The end of the WAL the server holds: IDENTIFY_SYSTEM's xlogpos,
    pg_current_wal_lsn(), the keepalive position of a walsender that caught up."""
    max_wal_size: int = 1 << 30
    """Bytes (the ``max_wal_size`` default, 1GB): a slot holding back more WAL than this
    shows wal_status ``extended`` instead of ``reserved``."""
    new_slot_lsn: int | None = None
    """Where a slot a client creates starts. PostgreSQL's start at the end of WAL
    (None here); a fake serving a stream sets the stream's start, so that a consumer
    that creates its own slot reads the stream (docs/clients.md). Never saved."""
    slots: dict[str, SlotState] = field(default_factory=dict)
    creating: dict[str, SlotState] = field(default_factory=dict, repr=False)
    """Logical slots a CREATE_REPLICATION_SLOT is still making, while it waits for the
    transactions in progress (``RS_EPHEMERAL``, or ``RS_TEMPORARY``): pg_replication_slots
    lists them, held by their walsender, without confirmed_flush; their names are taken.
    Never saved; gone if the command fails or its session ends."""
    publications: dict[str, PublicationState] = field(default_factory=dict)
    path: Path | None = None
    next_pid: int = 40_000
    snapshots: int = 0
    exported: dict[str, int] = field(default_factory=dict, repr=False)
    """Exported snapshots (CREATE_REPLICATION_SLOT … EXPORT_SNAPSHOT): name → the LSN
    whose transactions they see; never saved."""
    sessions: dict[int, Cancellable] = field(default_factory=dict, repr=False)
    """Live sessions by PID (for CancelRequest); never saved."""
    fired: set[tuple[str, str, int]] = field(default_factory=set, repr=False)
    """Script faults that happened: (slot, fault, LSN); never saved."""
    backends: dict[int, bool] = field(default_factory=dict, repr=False)
    """Live backends by PID, True for a walsender (max_connections, max_wal_senders);
    never saved."""
    clock: Callable[[], float] = field(default=time.time, repr=False)
    """Wall-clock time (Unix seconds) for timestamps the catalogs show."""
    slot_saves: str = field(default="every-confirmation", repr=False)
    """What the state file keeps of a logical slot (:data:`SLOT_SAVES`): every
    confirmation, or ``postgresql``: what PostgreSQL's slot file holds
    (:attr:`SlotState.saved_position` while there is one). Not saved itself."""
    shutting_down: bool = field(default=False, repr=False)
    """A shutdown (fast or immediate) is under way: new connections get 57P03; never
    saved."""
    smart_shutdown: bool = field(default=False, repr=False)
    """A smart shutdown waits for the regular sessions to end: new connections get
    57P03, everything else goes on (WAL is written, walsenders stream); never saved."""
    _schedule: Callable[[float, Callable[[], None]], object] | None = field(
        default=None, init=False, repr=False
    )
    _save_interval: float = field(default=0.0, init=False, repr=False)
    _save_log: Callable[[str], None] | None = field(default=None, init=False, repr=False)
    _dirty: bool = field(default=False, init=False, repr=False)
    _save_pending: bool = field(default=False, init=False, repr=False)

    # --- sessions --------------------------------------------------------------------

    @property
    def accepts_connections(self) -> bool:
        """False from the start of any shutdown (canAcceptConnections: CAC_SHUTDOWN)."""
        return not (self.shutting_down or self.smart_shutdown)

    @property
    def regular_backends(self) -> int:
        """Backends that are not walsenders: what a smart shutdown waits for."""
        return sum(not walsender for walsender in self.backends.values())

    def allocate_pid(self) -> int:
        self.next_pid += 1
        return self.next_pid

    def advance_wal(self, lsn: int) -> None:
        self.wal_lsn = max(self.wal_lsn, lsn)

    def fire_once(self, slot: str, fault: str, lsn: int) -> bool:
        """True the first time a script fault at ``lsn`` is reached on ``slot``."""
        key = (slot, fault, lsn)
        if key in self.fired:
            return False
        self.fired.add(key)
        return True

    def next_snapshot_name(self, xid: int) -> str:
        """An exported snapshot's name, ``%08X-%08X-%d`` (vxid backend, local xid, count)."""
        self.snapshots += 1
        return f"{3:08X}-{xid:08X}-{self.snapshots}"

    @property
    def databases_declared(self) -> bool:
        return ANY not in self.databases

    def has_database(self, name: str) -> bool:
        return name in self.databases or ANY in self.databases

    def declare_databases(self, names: Iterable[str]) -> None:
        """These databases exist; the first declaration also creates initdb's."""
        names = set(names)
        if names and not self.databases_declared:
            self.databases = {*DEFAULT_DATABASES, *(self.databases - {ANY})}
        self.databases |= names

    # --- slots -----------------------------------------------------------------------

    def create_slot(
        self,
        name: str,
        plugin: str | None,
        *,
        temporary: bool = False,
        two_phase: bool = False,
        failover: bool = False,
        owner_pid: int | None = None,
        database: str | None = None,
        reserve_wal: bool = False,
        reserve_at: int | None = None,
        restart_at: int | None = None,
        catalog_xmin: int | None = None,
    ) -> SlotState:
        """A new slot, released as CREATE_REPLICATION_SLOT leaves it. A logical slot
        starts at the end of WAL; a physical one reserves WAL only with ``reserve_wal``
        (else restart_lsn stays invalid, 0), from ``reserve_at`` when given (the redo
        pointer). A logical slot's restart_lsn is ``restart_at`` when given (the start
        of the running-xacts record its creation wrote). A temporary slot stays
        acquired by the session that made it (``ReplicationSlotRelease`` keeps its
        active_pid). A slot :meth:`reserve_slot` made while the command waited becomes
        this one, its restart_lsn kept."""
        reserved = self.creating.get(name)
        if name in self.slots or (reserved is not None and reserved.active_pid != owner_pid):
            raise SlotExistsError(name)
        self.creating.pop(name, None)
        start = self.wal_lsn if self.new_slot_lsn is None else self.new_slot_lsn
        slot = SlotState(
            name=name,
            plugin=plugin,
            database=(database or self.database) if plugin is not None else None,
            confirmed_flush=start if plugin is not None else 0,
            restart_lsn=(
                reserved.restart_lsn
                if reserved is not None
                else start
                if restart_at is None
                else restart_at
            )
            if plugin is not None
            else (start if reserve_at is None else reserve_at)
            if reserve_wal
            else 0,
            two_phase=two_phase,
            two_phase_at=start if two_phase else None,
            catalog_xmin=catalog_xmin if plugin is not None else None,
            temporary=temporary,
            failover=failover,
            active_pid=owner_pid if temporary else None,
            owner_pid=owner_pid if temporary else None,
            inactive_since=self.clock(),
        )
        self.slots[name] = slot
        self.save_now()  # CreateSlotOnDisk: before the command completes
        return slot

    def reserve_slot(
        self,
        name: str,
        plugin: str,
        *,
        owner_pid: int,
        database: str | None = None,
        temporary: bool = False,
        two_phase: bool = False,
        failover: bool = False,
    ) -> SlotState:
        """The logical slot a CREATE_REPLICATION_SLOT made before it waits for the
        transactions in progress (ReplicationSlotCreate, ReplicationSlotReserveWal):
        acquired by ``owner_pid``, restart_lsn at the end of WAL now, no confirmed_flush
        until :meth:`create_slot` finishes it; :meth:`drop_reserved` if it never does."""
        if name in self.slots or name in self.creating:
            raise SlotExistsError(name)
        slot = SlotState(
            name=name,
            plugin=plugin,
            database=database or self.database,
            confirmed_flush=0,
            restart_lsn=self.wal_lsn,
            two_phase=two_phase,
            temporary=temporary,
            failover=failover,
            active_pid=owner_pid,
            owner_pid=owner_pid,
        )
        self.creating[name] = slot
        return slot

    def drop_reserved(self, pid: int) -> None:
        """The slots ``pid`` was making are dropped: its command failed or it ended
        (ReplicationSlotRelease drops an ephemeral slot, the session's end a temporary one)."""
        for name in [n for n, s in self.creating.items() if s.owner_pid == pid]:
            del self.creating[name]

    def get_slot(self, name: str) -> SlotState:
        slot = self.slots.get(name) or self.creating.get(name)
        if slot is None:
            raise SlotMissingError(name)
        return slot

    def acquire(self, name: str, pid: int) -> SlotState:
        slot = self.get_slot(name)
        if slot.active_pid is not None and slot.active_pid != pid:
            raise SlotActiveError(name, slot.active_pid)
        slot.active_pid = pid
        slot.inactive_since = None
        return slot

    def invalidate_slot(self, name: str, cause: str = "wal_removed") -> SlotState:
        """Invalidate an inactive slot as a checkpoint does (InvalidateObsoleteReplicationSlots):
        its restart_lsn is gone, and the next acquire for decoding fails. A slot in use
        raises SlotActiveError: PostgreSQL would terminate its walsender first."""
        if cause not in INVALIDATION_CAUSES:
            raise ValueError(
                f"cause must be one of {', '.join(INVALIDATION_CAUSES)}, not {cause!r}"
            )
        slot = self.get_slot(name)
        if slot.active_pid is not None:
            raise SlotActiveError(name, slot.active_pid)
        slot.invalidated = cause
        if cause == "wal_removed":  # InvalidatePossiblyObsoleteSlot keeps it otherwise
            slot.restart_lsn = 0
        self.save_now()
        return slot

    def release(self, name: str, pid: int) -> None:
        slot = self.slots.get(name)
        if slot is not None and slot.active_pid == pid:
            slot.inactive_since = self.clock()
            if not slot.temporary:  # held by its session until dropped with it
                slot.active_pid = None
            self.save()

    def drop_slot(self, name: str, pid: int) -> None:
        slot = self.get_slot(name)
        if slot.active_pid is not None and slot.active_pid != pid:
            raise SlotActiveError(name, slot.active_pid)
        if self.slots.pop(name, None) is None:
            del self.creating[name]
        self.save_now()  # ReplicationSlotDropPtr removes pg_replslot/<slot> at once

    def confirm(self, name: str, lsn: int) -> None:
        """A status update's flush position moves the slot's confirmed_flush (never back;
        a position beyond the end of WAL is taken as it is, as PostgreSQL takes it), in
        memory (:attr:`SlotState.saved_position`) unless it reaches a candidate a
        running-xacts record left (:meth:`running_xacts`): then restart_lsn or
        catalog_xmin moves and the slot is saved (LogicalConfirmReceivedLocation)."""
        slot = self.slots.get(name)
        if slot is not None and lsn > slot.confirmed_flush:
            if slot.saved_position is None:
                slot.saved_position = (slot.confirmed_flush, slot.restart_lsn)
            slot.confirmed_flush = lsn
            self._take_candidates(slot)
            self.save()

    def running_xacts(self, name: str, lsn: int, restart_lsn: int | None, xmin: int) -> None:
        """The walsender decoding slot ``name`` read a running-xacts record at ``lsn``:
        a catalog_xmin (LogicalIncreaseXminForSlot) and a restart_lsn
        (LogicalIncreaseRestartDecodingForSlot) to take once the client confirms
        ``lsn`` — at once if it has — each only if it moves the slot forward and no
        earlier candidate waits for its confirmation."""
        slot = self.slots.get(name)
        if slot is None or slot.plugin is None:
            return
        confirmed = lsn <= slot.confirmed_flush
        if slot.catalog_xmin is not None and xmin <= slot.catalog_xmin:
            pass
        elif confirmed or slot.candidate_xmin is None:
            slot.candidate_xmin = (lsn, xmin)
        if restart_lsn is None or restart_lsn <= slot.restart_lsn:
            pass
        elif confirmed or slot.candidate_restart is None:
            slot.candidate_restart = (lsn, restart_lsn)
        if confirmed:
            self._take_candidates(slot)

    def _take_candidates(self, slot: SlotState) -> None:
        """The candidates the confirmed position reached become the slot's, which is
        saved with its confirmed_flush."""
        saved = False
        flush = slot.confirmed_flush
        xmin = slot.candidate_xmin
        if xmin is not None and xmin[0] <= flush and slot.catalog_xmin != xmin[1]:
            slot.catalog_xmin = xmin[1]
            slot.candidate_xmin = None
            saved = True
        if slot.candidate_restart is not None and slot.candidate_restart[0] <= flush:
            slot.restart_lsn = slot.candidate_restart[1]
            slot.candidate_restart = None
            saved = True
        if saved:
            slot.saved_position = None  # ReplicationSlotSave: the file is memory now
            self.save()

    def wal_status(self, slot: SlotState) -> str | None:
        """``pg_replication_slots.wal_status`` (``GetWALAvailability``): NULL without
        reserved WAL; ``reserved`` while the slot's restart_lsn is within max_wal_size of
        the end of WAL, counted in whole segments; ``extended`` beyond (the slot keeps the
        WAL, max_slot_wal_keep_size being -1); ``lost`` once invalidated, whatever the cause."""
        if slot.invalidated is not None:
            return "lost"
        if not slot.restart_lsn:
            return None
        current = self.wal_lsn // WAL_SEGMENT_SIZE
        keep = self.max_wal_size // WAL_SEGMENT_SIZE + 1
        oldest = current - keep if current > keep else 1
        return "reserved" if slot.restart_lsn // WAL_SEGMENT_SIZE >= oldest else "extended"

    def hold_persisted(self, name: str, lsn: int | None = None) -> None:
        """From now on confirmations move confirmed_flush in memory only; the persisted
        position stays at ``lsn`` (default: the current confirmed_flush), as when the
        server crashes before the next checkpoint writes ``pg_replslot/<slot>/state``."""
        slot = self.slots.get(name)
        if slot is not None and slot.persisted_flush is None:
            slot.persisted_flush = slot.confirmed_flush if lsn is None else lsn

    def crash_slot(self, name: str) -> None:
        """The crash happened: the slot restarts from its persisted position."""
        slot = self.slots.get(name)
        if slot is not None and slot.persisted_flush is not None:
            slot.confirmed_flush = slot.persisted_flush
            slot.persisted_flush = None
            self.save()

    def drop_temporary(self, pid: int) -> list[str]:
        """Drop the temporary slots a session made (at its end, or on an ERROR)."""
        names = [s.name for s in self.slots.values() if s.temporary and s.owner_pid == pid]
        for name in names:
            del self.slots[name]
        return names

    def shutdown_checkpoint(self, *, saves_confirmed: bool) -> None:
        """A clean shutdown's checkpoint: on 17+ (``saves_confirmed``) it writes every
        logical slot whose confirmed_flush moved (CheckPointReplicationSlots with
        is_shutdown); 14-16 write only slots a running-xacts record already saved."""
        if saves_confirmed:
            for slot in self.slots.values():
                slot.saved_position = None

    def restarted(self, *, saved_at_shutdown: bool) -> None:
        """The server starts again. ``saved_at_shutdown`` (a clean shutdown of 17+): the
        shutdown checkpoint wrote every slot as it was in memory; otherwise (14-16, or
        a crash) a slot whose confirmations moved only confirmed_flush comes back as it
        was last saved (:attr:`SlotState.saved_position`). A ``redeliver`` fault's lag
        is gone either way; RestoreSlotFromDisk marks each inactive since the start."""
        now = self.clock()
        for slot in self.slots.values():
            if slot.saved_position is not None and not saved_at_shutdown:
                slot.confirmed_flush, slot.restart_lsn = slot.saved_position
            slot.saved_position = None
            slot.candidate_xmin = slot.candidate_restart = None
            slot.persisted_flush = None
            slot.active_pid = None
            slot.inactive_since = now
        self.shutting_down = self.smart_shutdown = False
        self.save_now()

    def release_all(self, pid: int) -> None:
        for slot in self.slots.values():
            if slot.active_pid == pid:
                slot.active_pid = None
        self.save()

    # --- publications ------------------------------------------------------------------

    def add_publication(self, publication: PublicationState) -> None:
        self.publications[publication.name] = publication
        self.save()

    def declare(self, slots: Iterable[SlotState], publications: Iterable[PublicationState]) -> None:
        """Add what a stream source declares, keeping what a state file already holds
        (ValueError for a slot name PostgreSQL refuses)."""
        for slot in slots:
            problem = slot_name_problem(slot.name)
            if problem is not None:
                raise ValueError(problem)
            if slot.name not in self.slots and slot.inactive_since is None:
                slot.inactive_since = self.clock()  # RestoreSlotFromDisk: "since startup"
            self.slots.setdefault(slot.name, slot)
            if slot.database is not None:
                self.databases.add(slot.database)
        for publication in publications:
            self.publications.setdefault(publication.name, publication)

    # --- persistence -------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "format": _FORMAT,
            "system_identifier": str(self.system_identifier),
            "timeline": self.timeline,
            "database": self.database,
            "databases": sorted(self.databases),
            "wal_lsn": self.wal_lsn,
            "slots": [
                {
                    **{k: v for k, v in asdict(s).items() if k not in _NOT_SAVED},
                    **self._on_disk(s),
                }
                for s in self.slots.values()
                if not s.temporary
            ],
            "publications": [
                {**asdict(p), "tables": list(p.tables)} for p in self.publications.values()
            ],
        }

    def _on_disk(self, slot: SlotState) -> dict[str, int]:
        """The positions the state file keeps of ``slot``: PostgreSQL's slot file's
        with ``slot_saves`` postgresql; else the lagging confirmed_flush while a
        ``redeliver`` crash is pending, or memory's."""
        if self.slot_saves == "postgresql" and slot.saved_position is not None:
            confirmed_flush, restart_lsn = slot.saved_position
            return {"confirmed_flush": confirmed_flush, "restart_lsn": restart_lsn}
        if slot.persisted_flush is not None:
            return {"confirmed_flush": slot.persisted_flush}
        return {}

    def coalesce_saves(
        self,
        schedule: Callable[[float, Callable[[], None]], object],
        interval: float,
        log: Callable[[str], None] | None = None,
    ) -> None:
        """From now on :meth:`save` writes at most once per ``interval`` seconds, from a
        ``schedule(delay, callable)`` (a reactor's ``callLater``): a consumer acking every
        message must not cost a durable write each, inside the event loop. A crash loses
        at most ``interval`` of confirmations, which then arrive again, as after a
        PostgreSQL crash between checkpoints. ``log`` hears of failed writes."""
        self._schedule = schedule
        self._save_interval = interval
        self._save_log = log

    def save(self) -> None:
        """Write the state file now, or within the save interval when coalesced
        (no-op without ``path``)."""
        if self.path is None:
            return
        if self._schedule is None or self._save_interval <= 0:
            self.save_now()
            return
        self._dirty = True
        if not self._save_pending:
            self._save_pending = True
            self._schedule(self._save_interval, self._save_due)

    def _save_due(self) -> None:
        self._save_pending = False
        if not self._dirty:
            return
        try:
            self.save_now()
        except OSError as err:
            if self._save_log is None:
                raise
            self._save_log(f"cannot save the state file {self.path}: {err}")

    def flush(self) -> None:
        """Write a save that is still waiting for its interval (a server stopping)."""
        if self._dirty:
            self.save_now()

    def save_now(self) -> None:
        """Write the state file atomically and durably (no-op without ``path``): a
        temporary file in the same directory, fsynced, renamed over the old one, then the
        directory fsynced, so a crash or power loss leaves the old file or the new one."""
        self._dirty = False
        if self.path is None:
            return
        text = json.dumps(self.to_json(), indent=1)
        directory = self.path.parent
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    @classmethod
    def load(cls, path: Path) -> ServerState:
        """The state saved at ``path``, or a fresh state bound to it if it does not exist.

        Raises ValueError when the file is not a state file.
        """
        state = cls(path=path)
        # Temporary files of saves that were killed before their rename.
        for leftover in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
            leftover.unlink(missing_ok=True)
        if not path.exists():
            return state
        try:
            data = json_text.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"{path}: not a pgwire-mock state file ({err})") from None
        try:
            if not isinstance(data, dict) or data.get("format") != _FORMAT:
                found = data.get("format") if isinstance(data, dict) else None
                raise StateFileError(f"not a pgwire-mock state file (format {found!r})")
            top = checked_top(data)
            state.system_identifier = top["system_identifier"]
            state.timeline = top["timeline"]
            state.database = top["database"]
            # Files from before databases were kept: every name, as then.
            state.databases = set(top["databases"] if top["databases"] is not None else [ANY])
            state.wal_lsn = top["wal_lsn"]
            for index, raw in enumerate(_listed(data, "slots")):
                slot = SlotState(**checked_slot(raw, index), inactive_since=state.clock())
                if slot.invalidated not in (None, *INVALIDATION_CAUSES):
                    raise StateFileError(f"slot {index + 1}: invalidated: {slot.invalidated!r}")
                problem = slot_name_problem(slot.name)
                if problem is not None:
                    raise StateFileError(f"slot {index + 1}: {problem}")
                if slot.name in state.slots:
                    raise StateFileError(f"slot {index + 1}: {slot.name!r} is there twice")
                state.slots[slot.name] = slot
                if slot.database is not None:
                    state.databases.add(slot.database)
            for index, raw in enumerate(_listed(data, "publications")):
                pub = PublicationState(**checked_publication(raw, index))
                state.publications[pub.name] = pub
        except StateFileError as err:
            raise ValueError(f"{path}: {err}") from None
        return state


def _listed(data: dict[str, Any], key: str) -> list[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise StateFileError(f"{key}: expected a list, not {value!r:.40}")
    return value
