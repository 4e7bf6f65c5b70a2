"""A recorded BASE_BACKUP sent for other options, as basebackup.c would have sent it.

What can be derived from a recording without guessing:

* ``LABEL`` is one line of ``backup_label``, the first member of the main archive
  (``perform_base_backup`` sends it first, with ``sendFileWithContent``): its header
  (size, checksum), content and padding are sent anew.
* ``TABLESPACE_MAP`` adds ``tablespace_map`` right after backup_label, a line per
  tablespace from the tablespace list, and drops their ``pg_tblspc`` links from
  base.tar; it drops the map only without tablespaces besides the data directory (the
  links it replaced would come back, and their times are not recorded).
* ``WAL`` dropped: the members after ``global/pg_control`` go (the WAL segments, their
  ``.done`` marks and the history files: ``perform_base_backup``'s last section). WAL
  added cannot be derived: a recording does not hold whole segment files.
* ``COMPRESSION 'gzip'`` (15+, with or without a level): each archive deflated as
  bbsink_gzip does, named ``.gz``; Python's zlib gives the server's bytes. lz4 and zstd
  are not derived.
* ``WAIT`` dropped: the notices do_pg_backup_stop sends while it waits for the WAL to be
  archived, or that archiving is off, go (they come inside the main archive's COPY, after
  pg_control). WAIT added cannot be derived: which notice depends on archive_mode.
* ``MANIFEST`` and ``MANIFEST_CHECKSUMS``: the manifest is built again from the archives
  as they are sent (:mod:`pgwire_mock.server.backup_manifest`), and sent where the server
  sends it (after the last archive: 14 in a COPY of its own, 15+ inside the one COPY),
  chunked as the server chunks it (14: BLCKSZ, 15+: ``SINK_BUFFER_LENGTH``).

Every progress count after a change moves by the bytes it added or removed. basebackup.c
sends each member's header, content and padding as chunks of their own, so members are
edited as runs of recorded chunks (:mod:`pgwire_mock.server.backup_tar`). Archives
recorded compressed are not rewritten.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final

import pgwire_mock.server.backup_manifest as bm
from codec.values import LSN
from codec.wire import DataRow, NoticeResponse
from pgwire_mock.server.backup_options import BackupOptions
from pgwire_mock.server.backup_tar import BLOCK, members, with_name_and_size

__all__ = ["derivable", "derive"]

_DERIVED: Final = frozenset(
    {
        "label",
        "manifest",
        "manifest_checksums",
        "tablespace_map",
        "wal",
        "wait",
        "compression",
        "compression_detail",
    }
)
_CHUNK_14: Final = 8192  # SendBackupManifest's buffer on 14 (BLCKSZ)
_CHUNK: Final = 32768  # SINK_BUFFER_LENGTH on 15+
_FRAME: Final = struct.Struct("!cI")
_WAIT_NOTICES: Final = frozenset(
    {
        "WAL archiving is not enabled; you must ensure that all required WAL segments are "
        "copied through other means to complete the backup",
        "base backup done, waiting for required WAL segments to be archived",
        "all required WAL segments have been archived",
    }
)
_STILL_WAITING: Final = "still waiting for all required WAL segments to be archived"


def derivable(have: BackupOptions, wanted: BackupOptions, *, tablespaces: int) -> bool:
    """True when a backup recorded with ``have`` (and ``tablespaces`` tablespaces, the
    data directory included) can be sent for ``wanted``: see the module docstring."""
    if have.compression != "none":
        return False
    try:
        _gzip_level(wanted)
    except ValueError:
        return False
    if have.tablespace_map and not wanted.tablespace_map and tablespaces > 1:
        return False  # the links it replaced would come back, their times unrecorded
    if (wanted.wal and not have.wal) or (wanted.wait and not have.wait):
        return False
    a, b = have.content(), wanted.content()
    return all(a[k] == b[k] for k in a if k not in _DERIVED)


def _gzip_level(wanted: BackupOptions) -> int | None:
    """The gzip level asked for: None without compression, -1 (Z_DEFAULT_COMPRESSION)
    when no level is given; ValueError for what is not derived: another algorithm (lz4
    and zstd are not in Python's library), a detail other than a level from 1 to 9."""
    if wanted.compression == "none":
        return None
    if wanted.compression != "gzip":
        raise ValueError(f"{wanted.compression} compression is not derived")
    detail = (wanted.compression_detail or "").strip().removeprefix("level=").strip()
    if not detail:
        return zlib.Z_DEFAULT_COMPRESSION
    if not detail.isdigit() or not 1 <= int(detail) <= 9:
        raise ValueError(f"gzip compression detail {wanted.compression_detail!r}")
    return int(detail)


class _Gzip:
    """bbsink_gzip: the archive deflated as one gzip stream (deflateInit2 with windowBits
    15 + 16, memLevel 8, the default strategy), sent in chunks of the next sink's buffer
    as each fills, the rest at the archive's end. Python's zlib gives the same bytes
    (checked against real 15-18)."""

    def __init__(self, level: int) -> None:
        self._stream = zlib.compressobj(level, zlib.DEFLATED, 31, 8, zlib.Z_DEFAULT_STRATEGY)
        self._out = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._out += self._stream.compress(data)
        return self._take(len(self._out) // _CHUNK * _CHUNK)

    def finish(self) -> list[bytes]:
        self._out += self._stream.flush(zlib.Z_FINISH)
        return self._take(len(self._out))

    def _take(self, size: int) -> list[bytes]:
        chunks = [bytes(self._out[i : min(i + _CHUNK, size)]) for i in range(0, size, _CHUNK)]
        del self._out[:size]
        return chunks


def _frame(kind: bytes, body: bytes) -> bytes:
    return _FRAME.pack(kind, len(body) + 4) + body


@dataclass(frozen=True, slots=True)
class _Sent:
    """A message sent inside an archive's COPY as recorded (do_pg_backup_stop's notice
    comes after pg_control, before the WAL section)."""

    frame: bytes

    @property
    def waiting_notice(self) -> bool:
        """One of the notices ``WAIT`` makes do_pg_backup_stop send (xlog.c)."""
        if self.frame[:1] != b"N":
            return False
        text = NoticeResponse.decode_body(self.frame[5:]).get("M") or ""
        return text in _WAIT_NOTICES or text.startswith(_STILL_WAITING)


_Item = bytes | int | _Sent  # a chunk of the archive, a progress count, a message


@dataclass(slots=True)
class _Archive:
    opening: bytes  # 15+: the 'n' CopyData; 14: the CopyOutResponse
    oid: bytes | None  # None: the data directory (base.tar)
    items: list[_Item] = field(default_factory=list)
    closing: bytes | None = None  # 14: the CopyDone
    after: list[_Sent] = field(default_factory=list)  # 14: a notice after the CopyDone


@dataclass(slots=True)
class _Parts:
    """A recorded BASE_BACKUP taken apart: what comes before the archives, the archives,
    the manifest and what comes after, with the framing left out."""

    modern: bool
    before: list[bytes]
    archives: list[_Archive]
    manifest: bytes | None
    manifest_chunk: int
    after: list[bytes]
    positions: list[tuple[bytes | None, ...]]
    tablespaces: list[tuple[bytes | None, ...]] = field(default_factory=list)

    @classmethod
    def parse(cls, messages: Sequence[bytes], modern: bool) -> _Parts:
        rows = [DataRow.decode_body(m[5:]).values for m in messages if m[:1] == b"D"]
        spaces = [r[0] for r in rows if len(r) == 3]
        parts = cls(modern, [], [], None, _CHUNK if modern else _CHUNK_14, [], [])
        parts.positions = [r for r in rows if len(r) == 2]
        parts.tablespaces = [r for r in rows if len(r) == 3]
        manifest: list[bytes] | None = None
        state = "before"
        copies = 0
        for frame in messages:
            kind, body = frame[:1], frame[5:]
            if state == "after":
                parts.after.append(frame)
            elif modern and kind == b"d":
                state = "copy"
                sub = body[:1]
                if sub == b"n":
                    name = body[1:].split(b"\0", 1)[0]
                    oid = None if name == b"base.tar" else name.removesuffix(b".tar")
                    parts.archives.append(_Archive(frame, oid))
                elif sub == b"m":
                    manifest = []
                elif sub == b"p":
                    parts.archives[-1].items.append(struct.unpack_from("!Q", body, 1)[0])
                elif manifest is not None:
                    manifest.append(body[1:])
                else:
                    parts.archives[-1].items.append(body[1:])
            elif state == "copy" and kind not in (b"d", b"c") and parts.archives:
                parts.archives[-1].items.append(_Sent(frame))
            elif modern and kind == b"c" and state == "copy":
                state = "after"
                parts.after.append(frame)
            elif not modern and kind == b"H":
                copies += 1
                if copies > len(spaces):
                    manifest = []
                else:
                    parts.archives.append(_Archive(frame, spaces[copies - 1]))
                state = "copy"
            elif not modern and state == "copy" and kind == b"d":
                (manifest if manifest is not None else parts.archives[-1].items).append(body)
            elif not modern and state == "copy" and kind == b"c":
                if manifest is None:
                    parts.archives[-1].closing = frame
                state = "between"
            elif state == "between" and kind == b"N":
                parts.archives[-1].after.append(_Sent(frame))
            elif state == "between":
                state = "after"
                parts.after.append(frame)
            else:
                parts.before.append(frame)
        if manifest is not None:
            parts.manifest = b"".join(manifest)
            if len(manifest) > 1:
                parts.manifest_chunk = len(manifest[0])
        return parts

    def data(self, chunk: bytes) -> bytes:
        return _frame(b"d", b"d" + chunk if self.modern else chunk)


def derive(
    messages: Sequence[bytes],
    have: BackupOptions,
    wanted: BackupOptions,
    *,
    modern: bool,
    reuse: bool = True,
) -> Iterator[bytes]:
    """The recorded messages for ``wanted`` (see the module docstring). ``modern``: 15+'s
    framing (one COPY, typed CopyData); ``reuse``: take the recorded manifest's checksums
    where the algorithm is the same. The recording is taken apart here, so a malformed one
    raises ValueError before anything is sent; checksums are computed as it is sent."""
    if have.compression != "none":
        raise ValueError("archives recorded compressed are not rewritten")
    try:
        parts = _Parts.parse(messages, modern)
        recorded = None if parts.manifest is None else bm.parse(parts.manifest)
        main = next((a for a in parts.archives if a.oid is None), None)
        if main is None:
            raise ValueError("it has no base.tar")
        spaces = [(r[0], r[1]) for r in parts.tablespaces if r[0] is not None and r[1]]
        main.items = _edited(main.items, have, wanted, spaces)
    except (KeyError, IndexError, TypeError, struct.error) as err:
        raise ValueError(f"{type(err).__name__}: {err}") from err
    return _frames(parts, recorded, have, wanted, reuse)


def _edited(
    items: list[_Item],
    have: BackupOptions,
    wanted: BackupOptions,
    tablespaces: Sequence[tuple[bytes, bytes]],
) -> list[_Item]:
    """The main archive's chunks with wanted's backup_label, tablespace_map and WAL, and
    its progress counts moved by what changed before each. ``tablespaces``: (OID,
    location) of each but the data directory."""
    found = members(items)
    if not found or found[0].name != b"backup_label" or found[0].end - found[0].start > 3:
        raise ValueError("base.tar does not start with backup_label in its own chunks")
    label = found[0]
    edits: dict[int, tuple[int, list[bytes]]] = {}  # start -> (end, chunks instead)
    header = items[label.start]
    assert isinstance(header, bytes)
    chunks = [c for c in items[label.start : label.end] if isinstance(c, bytes)]
    if have.label != wanted.label:
        text = b"".join(chunks[1:])[: label.size].replace(
            f"\nLABEL: {have.label}\n".encode(), f"\nLABEL: {wanted.label}\n".encode(), 1
        )
        chunks = [with_name_and_size(header, len(text)), text]
        if len(text) % BLOCK:
            chunks.append(bytes(-len(text) % BLOCK))
        edits[label.start] = (label.end, chunks)
    if wanted.tablespace_map and not have.tablespace_map:
        # do_pg_backup_start: a line per tablespace, in the tablespace list's order (both
        # read pg_tblspc once); base.tar then has no pg_tblspc links (sendtblspclinks).
        text = b"".join(oid + b" " + _escaped(path) + b"\n" for oid, path in tablespaces)
        map_file = [with_name_and_size(header, len(text), b"tablespace_map")]
        if text:
            map_file.append(text)
            if len(text) % BLOCK:
                map_file.append(bytes(-len(text) % BLOCK))
        edits[label.start] = (label.end, [*chunks, *map_file])
        for member in found:
            head = items[member.start]
            assert isinstance(head, bytes)
            if member.name.startswith(b"pg_tblspc/") and head[156:157] == b"2":
                edits[member.start] = (member.end, [])
    elif have.tablespace_map and not wanted.tablespace_map:
        mapped = found[1]
        if mapped.name != b"tablespace_map":
            raise ValueError("tablespace_map does not follow backup_label")
        edits[mapped.start] = (mapped.end, [])
    if have.wal and not wanted.wal:
        control = next(i for i, m in enumerate(found) if m.name == b"global/pg_control")
        for member in found[control + 1 :]:
            edits[member.start] = (member.end, [])
    out: list[_Item] = []
    delta = 0
    index = 0
    while index < len(items):
        if index in edits:
            end, chunks = edits[index]
            removed = items[index:end]
            delta += sum(map(len, chunks)) - sum(len(i) for i in removed if isinstance(i, bytes))
            out.extend(chunks)
            kept = (i for i in removed if not isinstance(i, bytes))  # progress, messages
            out.extend(i + delta if isinstance(i, int) else i for i in kept)
            index = end
            continue
        item = items[index]
        out.append(item + delta if isinstance(item, int) else item)
        index += 1
    if have.wait and not wanted.wait:  # do_pg_backup_stop does not wait, nor say so
        out = [i for i in out if not (isinstance(i, _Sent) and i.waiting_notice)]
    return out


def _escaped(path: bytes) -> bytes:
    """A location as tablespace_map writes it: newline, CR and backslash escaped."""
    out = bytearray()
    for byte in path:
        if byte in b"\n\r\\":
            out += b"\\"
        out.append(byte)
    return bytes(out)


def _frames(
    parts: _Parts,
    recorded: bm.Recorded | None,
    have: BackupOptions,
    wanted: BackupOptions,
    reuse: bool,
) -> Iterator[bytes]:
    algorithm = wanted.manifest_checksums.upper() if wanted.manifest != "no" else "NONE"
    known = None
    if reuse and recorded is not None and recorded.algorithm == algorithm:
        known = dict(recorded.entries)
        if have.label != wanted.label:
            known.pop(b"backup_label", None)  # same length, other bytes: checksum it again
    entries: list[bm.Entry] = []
    level = _gzip_level(wanted)
    yield from parts.before
    for archive in parts.archives:
        prefix = b"" if archive.oid is None else b"pg_tblspc/" + archive.oid + b"/"
        follower = bm.TarFollower(prefix, algorithm, known, entries.append)
        gzip = None
        if level is not None:
            gzip = _Gzip(level)
            name, _, path = archive.opening[6:].partition(b"\0")
            yield _frame(b"d", b"n" + name + b".gz\0" + path)
        else:
            yield archive.opening
        last = max((i for i, v in enumerate(archive.items) if isinstance(v, bytes)), default=-1)
        for index, item in enumerate(archive.items):
            if isinstance(item, int):
                yield _frame(b"d", b"p" + struct.pack("!Q", item))
                continue
            if isinstance(item, _Sent):
                yield item.frame
                continue
            if wanted.manifest != "no":
                follower.feed(item)
            if gzip is None:
                yield parts.data(item)
                continue
            yield from map(parts.data, gzip.feed(item))
            if index == last:  # end_archive: the rest, then its progress count
                yield from map(parts.data, gzip.finish())
        if archive.closing is not None:
            yield archive.closing
        quiet = have.wait and not wanted.wait
        yield from (s.frame for s in archive.after if not (quiet and s.waiting_notice))
    if wanted.manifest != "no":
        text = bm.render(
            recorded.header if recorded is not None else _first_lines(parts),
            entries,
            algorithm,
            recorded.ranges if recorded is not None else _wal_range(parts),
            wanted.manifest == "force-encode",
        )
        size = parts.manifest_chunk
        chunks = [text[i : i + size] for i in range(0, len(text), size)]
        if parts.modern:
            yield _frame(b"d", b"m")
            yield from (parts.data(c) for c in chunks)
        else:
            yield parts.archives[-1].opening  # the same CopyOutResponse (text, no columns)
            yield from (parts.data(c) for c in chunks)
            yield _frame(b"c", b"")
    yield from parts.after


def _first_lines(parts: _Parts) -> str:
    """For a backup recorded without a manifest: its server's major from PG_VERSION, its
    system identifier from the start of global/pg_control."""
    major = int(_member(parts, b"PG_VERSION"))
    return bm.first_lines(
        major, lambda: int.from_bytes(_member(parts, b"global/pg_control")[:8], "little")
    )


def _wal_range(parts: _Parts) -> str:
    """For a backup recorded without a manifest: from its start and end rows."""
    (start, tli), (end, _) = parts.positions[0], parts.positions[-1]
    if start is None or tli is None or end is None:
        raise ValueError("the backup's start or end position is NULL")
    return bm.wal_range(int(tli), int(LSN.parse(start.decode())), int(LSN.parse(end.decode())))


def _member(parts: _Parts, name: bytes) -> bytes:
    main = next(a for a in parts.archives if a.oid is None)
    for member in members(main.items):
        if member.name == name:
            data = b"".join(
                i for i in main.items[member.start + 1 : member.end] if isinstance(i, bytes)
            )
            return data[: member.size]
    raise ValueError(f"no {name.decode()} in the main archive")
