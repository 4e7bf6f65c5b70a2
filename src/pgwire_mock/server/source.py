"""Where a fake walsender's stream comes from: a :class:`StreamSource`.

A source turns one client's START_REPLICATION (its pgoutput options, the emulated
major, the effective start point) into :data:`StreamEvent`\\ s: :class:`Emit` (one
pgoutput message), :class:`Pause`, :class:`FaultEvent`, :class:`CheckPublications`
(here a real server would look the publications up), :class:`CaughtUp` (the end of a
live WAL so far) and :class:`SourceError`.

Two adapters: :class:`RecordingSource` replays a captured stream (JSON Lines from
``pgwire-mock capture`` or raw CopyData, via :func:`pgwire_mock.streamfile.read_stream`)
and :class:`ScriptSource` runs the script encoder of :mod:`pgwire_mock.script`. A
recording made with ``record --snapshot`` is a :class:`SnapshotRecordingSource`: it
also serves its tables (:mod:`pgwire_mock.script.snapshot`), as a script source does.

XLogData positions follow ``WalSndPrepareWrite`` (walsender.c): wal_start and wal_end
are both the record's LSN when pgoutput writes with ``last_write`` true, and 0/0
otherwise, which is the case for Relation and Type messages (``send_relation_and_attrs``)
and for a Begin / Begin Prepare / first Stream Start followed by an Origin message.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeAlias

from codec import DecodeError
from pgwire_mock.server.errors import ServerError
from pgwire_mock.server.pgoutput_options import PgOutputOptions, split_identifier_string
from pgwire_mock.server.resume import RecordedStream, resume
from pgwire_mock.server.state import (
    PUBLICATION_ACTIONS,
    PublicationState,
    SlotState,
    wal_file_name,
)
from pgwire_mock.server.versions import error
from pgwire_mock.streamfile import StreamEntry, read_meta, read_snapshot, read_stream

if TYPE_CHECKING:  # scripts load YAML: only recordings with a snapshot need them
    from pgwire_mock.script.snapshot import RecordedTables
    from pgwire_mock.script.tables import TableState

__all__ = [
    "CaughtUp",
    "CheckPublications",
    "Emit",
    "FaultEvent",
    "Pause",
    "RecordingSource",
    "ScriptSource",
    "SnapshotRecordingSource",
    "SourceError",
    "StreamEvent",
    "StreamSource",
    "load_source",
]


@dataclass(frozen=True, slots=True)
class Emit:
    """Send ``payload`` in an XLogData with wal_start = wal_end = ``wal``; ``lsn`` is the
    position it moves the walsender's sentPtr to (0: it does not move it)."""

    wal: int
    lsn: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class Pause:
    seconds: float


@dataclass(frozen=True, slots=True)
class FaultEvent:
    name: str
    params: dict[str, Any] = field(default_factory=dict)
    lsn: int = 0
    """Where the stream reached the fault (a script fault happens once per slot and LSN)."""


@dataclass(frozen=True, slots=True)
class CheckPublications:
    """The point where pgoutput loads the requested publications (first change);
    ``missing``: those a script's catalog lacks there (its publications change with the
    WAL); None: those the server's catalog lacks now (a recording's are fixed)."""

    lsn: int
    missing: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class CaughtUp:
    """The end of the WAL written so far (``lsn``): a live source goes on when more is
    written (the session waits to be woken); a source that simply ends returns."""

    lsn: int


@dataclass(frozen=True, slots=True)
class SourceError:
    """The source found an error the server reports in the stream (then stops)."""

    error: ServerError


StreamEvent: TypeAlias = Emit | Pause | FaultEvent | CheckPublications | CaughtUp | SourceError


class StreamSource(Protocol):
    """What a fake walsender streams from."""

    #: Where the source's WAL starts: slots created before streaming begin here.
    start_lsn: int

    @property
    def end_lsn(self) -> int:
        """Where its WAL ends so far: the server's end of WAL (IDENTIFY_SYSTEM's xlogpos)."""
        ...

    #: PostgreSQL major the source was made for (None: any).
    major: int | None
    #: Slots and publications that exist when the server starts.
    slots: Sequence[SlotState]
    publications: Sequence[PublicationState]

    def events(self, options: PgOutputOptions, major: int, from_lsn: int) -> Iterator[StreamEvent]:
        """The stream for one START_REPLICATION, skipping what committed before ``from_lsn``."""
        ...


# --- recordings ----------------------------------------------------------------------------

_CHANGES: Final = frozenset(b"IUDT")
_SCHEMA: Final = frozenset(b"RY")
_DECODED: Final = _CHANGES | _SCHEMA  # where pgoutput has looked the publications up
# Unit starts and the message that closes each.
_CLOSERS: Final = {ord("B"): ord("C"), ord("b"): ord("P"), ord("S"): ord("E")}


@dataclass(slots=True)
class _Unit:
    """A run of recorded messages sent together (a transaction, a block, one message)."""

    entries: Sequence[tuple[int, bytes]]
    emits: tuple[Emit, ...] = ()
    """One :class:`Emit` per entry, built once: replaying a unit only hands them out."""
    has_change: bool = False

    def __post_init__(self) -> None:
        entries = self.entries
        tags = [payload[0] for _, payload in entries]
        self.has_change = any(tag in _CHANGES for tag in tags)
        # wal_start is 0/0 for a schema message and for a message followed by Origin
        # (WalSndPrepareWrite with last_write false; see the module docstring).
        follows_origin = [*(tag == ord("O") for tag in tags[1:]), False]
        self.emits = tuple(
            Emit(0 if tag in _SCHEMA or before_origin else lsn, lsn, payload)
            for (lsn, payload), tag, before_origin in zip(
                entries, tags, follows_origin, strict=True
            )
        )


def _units(entries: Sequence[StreamEntry]) -> list[_Unit]:
    """The recording as sent on a straight read, cut where one unit ends."""
    units: list[_Unit] = []
    current: list[tuple[int, bytes]] | None = None
    closer = 0
    for entry in entries:
        if not entry.payload:
            continue
        tag = entry.payload[0]
        if current is None:
            if tag in _CLOSERS:
                current = [(entry.lsn, entry.payload)]
                closer = _CLOSERS[tag]
            else:
                units.append(_Unit([(entry.lsn, entry.payload)]))
            continue
        current.append((entry.lsn, entry.payload))
        if tag == closer:
            units.append(_Unit(current))
            current = None
    if current:
        units.append(_Unit(current))
    return units


class RecordingSource:
    """Replays recorded pgoutput payloads, whatever the client's options.

    A client reading from the recording's start gets it byte for byte. A client that
    resumes later gets what a new PostgreSQL walsender would send from there
    (:mod:`pgwire_mock.server.resume`): the recording is parsed into transactions the
    first time that happens.
    """

    def __init__(
        self,
        entries: Sequence[StreamEntry],
        *,
        major: int | None = None,
        publications: Sequence[str | PublicationState] = (),
        name: str = "<recording>",
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name
        # The options the recording was made with (its meta's): a client asking for
        # others is refused, as pgwire_mock.script.Recording.check refuses it.
        self.options = options
        self.entries = tuple(entries)
        self.major = major
        lsns = [e.lsn for e in self.entries if e.lsn]
        self.start_lsn = min(lsns) if lsns else 0x1000000
        first = self.entries[0].payload if self.entries else b""
        if first[:2] == b"M\x00" or first[:1] == b"r":
            # A non-transactional message or ROLLBACK PREPARED carries its record's end,
            # and a slot confirmed there would skip it: the slot starts before it.
            self.start_lsn -= 8
        self.end_lsn = max(lsns) if lsns else self.start_lsn
        self.slots: Sequence[SlotState] = ()
        self.publications: Sequence[PublicationState] = tuple(
            p if isinstance(p, PublicationState) else PublicationState(p, all_tables=True)
            for p in publications
        )
        self._units = _units(self.entries)
        self._parsed: RecordedStream | None = None

    @classmethod
    def from_file(cls, path: Path) -> RecordingSource:
        """Load a recording; raises StreamFileError / OSError."""
        with path.open("rb") as f:
            meta = read_meta(f)
        with path.open("rb") as f:
            entries = list(read_stream(f, str(path)))
        if meta is not None and isinstance(meta.get("snapshot"), dict):
            from pgwire_mock.script.snapshot import RecordedTables  # noqa: PLC0415 - see TYPE_CHECKING

            with path.open("rb") as f:
                rows = read_snapshot(f, str(path))
            tables = RecordedTables.load(meta["snapshot"], rows, entries, str(path))
            return SnapshotRecordingSource(
                entries,
                tables,
                major=_major(meta),
                publications=_publications(meta),
                name=str(path),
            )
        if meta is None:
            return cls(entries, name=str(path))
        return cls(
            entries,
            major=_major(meta),
            publications=_publications(meta),
            name=str(path),
            options=meta.get("options"),
        )

    def next_xid(self, lsn: int) -> int | None:
        """One past the highest xid recorded before ``lsn``; with none before it, the
        first one recorded after (what the next writer got); None if none is recorded."""
        xids = list(_recorded_xids(self.entries))
        before = [xid for at, xid in xids if at < lsn]
        if before:
            return max(before) + 1
        return min((xid for _, xid in xids), default=None)

    def events(self, options: PgOutputOptions, major: int, from_lsn: int) -> Iterator[StreamEvent]:
        if self.options is not None:
            refused = _refuse_options(self.name, self.options, options)
            if refused is not None:
                yield refused
                return
        if from_lsn <= self.start_lsn:
            units: Iterable[_Unit] = self._units
        else:
            try:
                parsed = self._parse()
            except DecodeError:
                # Payloads that are not pgoutput cannot be decoded again from the restart
                # point: the WAL for that is as good as gone, and PostgreSQL says so when
                # its walsender cannot read the segment (docs/clients.md).
                segment = wal_file_name(1, from_lsn)
                yield SourceError(error(major, "wal_segment_removed", segment=segment))
                return
            units = (_Unit(out) for out in resume(parsed, from_lsn, major=major))
        checked = False
        for unit in units:
            if checked:
                # The usual case, once streaming runs: the unit's messages go out as they
                # are (the replay hot path).
                yield from unit.emits
                continue
            if unit.has_change and major >= 15:
                # 15+ sends BEGIN lazily, with the first change: the lookup comes first.
                checked = True
                yield CheckPublications(unit.emits[0].lsn)
                yield from unit.emits
                continue
            for emit in unit.emits:
                if not checked and emit.payload[0] in _DECODED:
                    checked = True
                    yield CheckPublications(emit.lsn)
                yield emit

    def _parse(self) -> RecordedStream:
        """The recording as transactions, parsed once (raises DecodeError)."""
        if self._parsed is None:
            self._parsed = RecordedStream(self.entries)
        return self._parsed


_LAYOUT_OPTIONS: Final = frozenset({"proto_version", "binary"})


def _refuse_options(
    name: str, recorded: Mapping[str, Any], options: PgOutputOptions
) -> SourceError | None:
    """The Python API's refusal (Recording.check, 0A000) of a protocol version or value
    format a recording was not made with: a protocol-1 client cannot read protocol 4's
    messages, nor a text client binary values."""
    from pgwire_mock.script import OptionError, Recording  # noqa: PLC0415

    wanted = _stream_options(options)
    try:
        # Only the options that change how the payloads are laid out: a client that
        # asked for no messages (or another publication) can still read the others.
        laid_out = {k: v for k, v in recorded.items() if k in _LAYOUT_OPTIONS}
        Recording(name, {"options": laid_out}, ()).check(wanted)
    except OptionError as err:
        return SourceError(ServerError("ERROR", err.sqlstate, err.problem))
    return None


def _major(meta: Mapping[str, Any]) -> int | None:
    return int(meta["major"]) if "major" in meta else None


def _recorded_xids(entries: Sequence[StreamEntry]) -> Iterator[tuple[int, int]]:
    """(LSN, xid) of each recorded Begin, Begin Prepare and Stream Start."""
    for entry in entries:
        payload = entry.payload
        offset = {ord("B"): 17, ord("b"): 25, ord("S"): 1}.get(payload[0]) if payload else None
        if offset is not None and len(payload) >= offset + 4:
            yield entry.lsn, int.from_bytes(payload[offset : offset + 4], "big")


def _publications(meta: Mapping[str, Any]) -> list[PublicationState]:
    """The recording's publications: as the server defined them where ``record`` wrote
    their definitions, else the names it was recorded with, FOR ALL TABLES."""
    described = meta.get("publications")
    if isinstance(described, list) and all(
        isinstance(p, dict) and isinstance(p.get("name"), str) for p in described
    ):
        return [_publication(p) for p in described]
    return [PublicationState(name, all_tables=True) for name in _publication_names(meta)]


def _publication(described: Mapping[str, Any]) -> PublicationState:
    return PublicationState(
        str(described["name"]),
        all_tables=bool(described.get("all_tables", True)),
        tables=tuple(str(t) for t in described.get("tables", ())),
        insert=bool(described.get("insert", True)),
        update=bool(described.get("update", True)),
        delete=bool(described.get("delete", True)),
        truncate=bool(described.get("truncate", True)),
        generated_columns="s" if described.get("generated_columns") == "s" else "n",
    )


def _publication_names(meta: Mapping[str, Any]) -> list[str]:
    names = str((meta.get("options") or {}).get("publication_names", ""))
    # The option's value as sent: pgoutput reads it with SplitIdentifierString, so
    # '"Pub",other' names Pub and other (pgwire-mock record quotes every name).
    split = split_identifier_string(names)
    if split is None:  # not valid syntax: keep the old, literal reading
        split = [n.strip() for n in names.split(",")]
    return [n for n in split if n]


class SnapshotRecordingSource(RecordingSource):
    """A recording made with ``record --snapshot``: its stream, and its tables as a
    snapshot at any WAL position sees them (the recorded snapshot, then the recorded
    transactions committed before it), for the catalog queries and COPY of a subscriber.

    The recording starts at the slot's consistent point, so new slots made there
    (``new_slots`` ``stream_start``) see the snapshot's rows through COPY and get the
    whole stream after it, as the recorded slot did.
    """

    def __init__(
        self,
        entries: Sequence[StreamEntry],
        tables: RecordedTables,
        *,
        major: int | None = None,
        publications: Sequence[str | PublicationState] = (),
        name: str = "<recording>",
    ) -> None:
        super().__init__(entries, major=major, publications=publications, name=name)
        self.tables = tables
        self.start_lsn = tables.consistent_point
        self.end_lsn = max(self.end_lsn, self.start_lsn)

    def tables_at(self, lsn: int) -> Mapping[str, TableState]:
        """The recorded tables as a snapshot at ``lsn`` sees them (name → TableState)."""
        from pgwire_mock.script.snapshot import UnreadableTables  # noqa: PLC0415

        try:
            return self.tables.tables_at(lsn)
        except UnreadableTables as err:
            raise ServerError("ERROR", "0A000", str(err)) from None

    def publication_table(
        self, publication: str, table: str
    ) -> tuple[tuple[str, ...] | None, str | None]:
        """No column lists or row filters: ``record --snapshot`` refuses tables with them."""
        return None, None


# --- scripts -------------------------------------------------------------------------------


class ScriptSource:
    """The script encoder (:func:`pgwire_mock.script.encode_stream`) as a source.

    The script's WAL is live (:attr:`wal`, a :class:`pgwire_mock.script.live.LiveWal`):
    steps appended to it while clients stream are written at once, a ``wait_for`` step
    holds what follows until the server releases it, and a walsender that reaches the end
    of what is written gets :class:`CaughtUp` and goes on when more is.
    """

    def __init__(self, script: Any, *, name: str = "<script>") -> None:
        from pgwire_mock.script.live import LiveWal  # noqa: PLC0415 - see from_file

        self.script = script
        self.name = name
        server = script.server
        self.major: int | None = int(server.pg_version)
        self.start_lsn = int(server.start_lsn)
        # A recording given as a script (pgwire_mock.script.load_recording) is not live.
        self.wal = LiveWal(script) if hasattr(script, "steps") else None
        self.system_identifier = int(server.system_identifier)
        self.timeline = int(server.timeline)
        self.slots: Sequence[SlotState] = tuple(
            SlotState(
                name=s.name,
                plugin=s.plugin,
                database="postgres",
                confirmed_flush=self.start_lsn if s.confirmed_flush is None else s.confirmed_flush,
                restart_lsn=self.start_lsn if s.confirmed_flush is None else s.confirmed_flush,
                two_phase=bool(s.two_phase),
            )
            for s in script.slots
        )
        self.publications: Sequence[PublicationState] = tuple(
            PublicationState(
                p.name,
                all_tables=bool(p.all_tables),
                tables=tuple(p.tables),
                # pubgencols; only an 18 script may say stored (compile checks it).
                generated_columns="s"
                if str(getattr(p, "generated_columns", "")).lower() == "stored"
                else "n",
            ).publishing(_actions(p))
            for p in script.publications
        )

    def declare_publications(self, names: Sequence[str]) -> None:
        """FOR ALL TABLES publications declared at start outside the script (``serve
        --publication``, the fixture's ``publications``): they exist before the script's
        first change, so the walsenders publish through them from the start."""
        if self.wal is not None:
            self.wal.declare_publications(names)

    @property
    def end_lsn(self) -> int:
        return self.wal.end_lsn if self.wal is not None else self.start_lsn

    def tables_at(self, lsn: int) -> Mapping[str, Any]:
        """The script's tables as a snapshot at ``lsn`` sees them (name → TableState)."""
        from pgwire_mock.script.tables import tables_at  # noqa: PLC0415 - see from_file

        return tables_at(self.wal.compiled, lsn) if self.wal is not None else {}

    def next_xid(self, lsn: int) -> int:
        """The xid the script's next transaction gets as of ``lsn``: one past every xid
        its transactions took before ``lsn`` (the server's first_xid if none did)."""
        from pgwire_mock.script.wal import WChange, WTxn  # noqa: PLC0415 - see from_file

        highest = int(self.script.server.first_xid) - 1
        wal = self.wal.compiled.wal if self.wal is not None else []
        for item in wal:
            if isinstance(item, WTxn) and item.first_lsn < lsn:
                subs = [item.top]
                for change in item.items:
                    subs.extend([change.sub] if isinstance(change, WChange) else change.subs)
                highest = max([highest, *(sub.xid for sub in subs if sub.xid is not None)])
        return highest + 1

    def publication_table(
        self, publication: str, table: str
    ) -> tuple[tuple[str, ...] | None, str | None]:
        """A listed table's column list and row filter text in a publication."""
        if self.wal is None:
            return None, None
        published = self.wal.compiled.published.get(publication, {}).get(table)
        if published is None:
            return None, None
        text = published.filter.text if published.filter is not None else None
        return published.columns, text

    @classmethod
    def from_file(cls, path: Path) -> ScriptSource:
        """Load a YAML/JSON script; raises ScriptError / OSError."""
        from pgwire_mock.script import load_script  # noqa: PLC0415 - optional, heavy (YAML)

        return cls(load_script(path), name=str(path))

    def events(self, options: PgOutputOptions, major: int, from_lsn: int) -> Iterator[StreamEvent]:
        from pgwire_mock.script import (  # noqa: PLC0415 - see from_file
            EndOfWal,
            Fault,
            OptionError,
            PublicationMissingError,
            PublicationsSkipped,
            Send,
            Sleep,
            encode_stream,
        )

        stream_options = _stream_options(options)
        source = self.wal.compiled if self.wal is not None else self.script
        held: Emit | None = None  # the last message, until we know what follows it
        try:
            for event in encode_stream(
                source,
                stream_options,
                server_version=major,
                from_lsn=from_lsn,
                two_phase_at=options.slot_two_phase_at,
            ):
                if isinstance(event, Send):
                    payload = event.payload
                    lsn = event.wal_start
                    if held is not None:
                        # A message followed by Origin is not written last: 0/0.
                        yield Emit(0, 0, held.payload) if payload[:1] == b"O" else held
                    held = Emit(0 if payload[0] in _SCHEMA else lsn, lsn, payload)
                    continue
                if held is not None:
                    yield held
                    held = None
                if isinstance(event, EndOfWal):
                    yield CaughtUp(event.lsn)
                elif isinstance(event, Sleep):
                    yield Pause(event.seconds)
                elif isinstance(event, Fault):
                    yield FaultEvent(event.name, dict(event.params), event.lsn)
                elif isinstance(event, PublicationsSkipped):
                    yield CheckPublications(event.lsn, event.names)
            if held is not None:
                yield held
        except PublicationMissingError as err:
            # The encoder stops where pgoutput looks the publications up; the session
            # reports the missing one with the server's exact fields, after what was
            # sent before it (14's Begin, or whole transactions before a drop).
            if held is not None:
                yield held
            yield CheckPublications(from_lsn, (err.name,))
        except OptionError as err:  # e.g. two publications with different column lists
            if held is not None:
                yield held
            yield SourceError(ServerError("ERROR", err.sqlstate, err.problem))


def _actions(publication: Any) -> tuple[str, ...]:
    """What a script's publication publishes (``publish``; None: all four)."""
    publish = getattr(publication, "publish", None)
    return PUBLICATION_ACTIONS if publish is None else tuple(publish)


def load_source(path: Path) -> RecordingSource | ScriptSource:
    """A recording (``.jsonl``, raw CopyData) or a script (``.yaml``/``.yml``/``.json``)."""
    if path.suffix in (".yaml", ".yml", ".json"):
        return ScriptSource.from_file(path)
    return RecordingSource.from_file(path)


def _stream_options(options: PgOutputOptions) -> Any:
    """The script encoder's StreamOptions for options the server has validated."""
    from pgwire_mock.script import StreamOptions  # noqa: PLC0415 - optional, heavy (YAML)

    return StreamOptions(
        proto_version=options.proto_version,
        publication_names=options.publication_names,
        binary=options.binary,
        messages=options.messages,
        streaming=options.streaming,
        two_phase=options.two_phase,
        origin=options.origin,
    )
