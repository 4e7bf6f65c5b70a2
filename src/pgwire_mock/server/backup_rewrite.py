"""A recorded BASE_BACKUP sent for another label or another manifest, as basebackup.c
would have sent it.

Three options change bytes that can be derived from a recording without guessing:

* ``LABEL`` is one line of ``backup_label``, the first member of the main archive
  (``perform_base_backup`` sends it first with ``sendFileWithContent``): its tar header
  (size, checksum), its content and its padding are sent again; every later progress
  count moves by the difference.
* ``MANIFEST`` and ``MANIFEST_CHECKSUMS``: the manifest lists every file sent, in the
  order sent (``AddFileToBackupManifest``), with its size, modification time (the tar
  header's) and checksum, then the WAL range and a SHA-256 of all that
  (``backup_manifest.c``). It is built again from the archives as they stream past,
  reusing the recorded checksums when the algorithm is the recorded one, and sent where
  the server sends it (after the last archive: 14 in a COPY of its own, 15+ inside the
  one COPY), chunked as the server chunks it (14: BLCKSZ, 15+: ``SINK_BUFFER_LENGTH``).

Compressed archives are not rewritten: the request must then match the recording.
"""

from __future__ import annotations

import hashlib
import json
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final

from codec.values import LSN
from codec.wal import crc32c
from codec.wire import DataRow
from pgwire_mock.server.backup_options import BackupOptions

__all__ = ["derivable", "derive"]

DERIVED: Final = frozenset({"label", "manifest", "manifest_checksums"})
_BLOCK: Final = 512
_CHUNK_14: Final = 8192  # SendBackupManifest's buffer on 14 (BLCKSZ)
_CHUNK: Final = 32768  # SINK_BUFFER_LENGTH on 15+
_MANIFEST_V2: Final = 17  # "PostgreSQL-Backup-Manifest-Version": 2, with System-Identifier
_FRAME: Final = struct.Struct("!cI")
_WAL_SEGMENT: Final = 24  # pg_wal/<24 hex digits>: a WAL file, sent outside the manifest
_HEX: Final = frozenset(b"0123456789ABCDEF")


def derivable(have: BackupOptions, wanted: BackupOptions) -> bool:
    """True when a backup recorded with ``have`` can be sent for ``wanted``: every
    content option but the label and the manifest's agree, and nothing is compressed."""
    if have.compression != "none":
        return False
    a, b = have.content(), wanted.content()
    return all(a[k] == b[k] for k in a if k not in DERIVED)


@dataclass(slots=True)
class _Entry:
    path: bytes
    size: int
    modified: str
    checksum: str | None  # hex, None for NONE


@dataclass(slots=True)
class _Digest:
    """One file's checksum as pg_checksum_* computes it."""

    algorithm: str
    _crc: int = 0xFFFFFFFF
    _hash: hashlib._Hash | None = None

    def __post_init__(self) -> None:
        if self.algorithm.startswith("SHA"):
            self._hash = hashlib.new(self.algorithm.lower())

    def update(self, data: bytes | memoryview) -> None:
        if self._hash is not None:
            self._hash.update(data)
        elif self.algorithm == "CRC32C":
            self._crc = crc32c(data, self._crc)

    def hexdigest(self) -> str | None:
        if self._hash is not None:
            return self._hash.hexdigest()
        if self.algorithm == "CRC32C":  # FIN_CRC32C, then its bytes as stored (little endian)
            return (self._crc ^ 0xFFFFFFFF).to_bytes(4, "little").hex()
        return None


def _octal(field_bytes: bytes) -> int:
    if field_bytes[:1] == b"\x80":  # print_tar_number's base-256 form for large values
        return int.from_bytes(field_bytes[1:], "big")
    text = field_bytes.rstrip(b"\0 ").lstrip(b" ")
    return int(text or b"0", 8)


def _tar_number(value: int, width: int) -> bytes:
    """print_tar_number: octal digits then a space (tar.c)."""
    return format(value, "o").zfill(width - 1).encode() + b" "


def _with_size(header: bytes, size: int) -> bytes:
    """The tar header with another size, and its checksum made right (tarChecksum)."""
    h = bytearray(header)
    h[124:136] = _tar_number(size, 12)
    h[148:156] = b" " * 8
    h[148:156] = _tar_number(sum(h), 8)
    return bytes(h)


def _json_string(path: bytes) -> str:
    """escape_json of a UTF-8 path (json.c): quotes, backslashes and control characters."""
    out = ['"']
    for ch in path.decode():
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in "\b\f\n\r\t":
            out.append({"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        elif code < 0x20:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _path_field(path: bytes, force_encode: bool) -> str:
    if not force_encode:
        try:
            return '"Path": ' + _json_string(path)
        except UnicodeDecodeError:
            pass
    return f'"Encoded-Path": "{path.hex()}"'


def _render_manifest(
    header: str, entries: Sequence[_Entry], algorithm: str, ranges: str, force_encode: bool
) -> bytes:
    """The manifest text as backup_manifest.c writes it, its SHA-256 line included."""
    parts = [header]
    for i, entry in enumerate(entries):
        line = "{ " + _path_field(entry.path, force_encode) + f', "Size": {entry.size}, '
        line += f'"Last-Modified": "{entry.modified}"'
        if entry.checksum is not None:
            line += f', "Checksum-Algorithm": "{algorithm}", "Checksum": "{entry.checksum}"'
        parts.append(("\n" if i == 0 else ",\n") + line + " }")
    parts.append("\n],\n" + ranges)
    body = "".join(parts).encode()
    digest = hashlib.sha256(body).hexdigest()
    return body + f'"Manifest-Checksum": "{digest}"}}\n'.encode()


@dataclass(slots=True)
class _Recorded:
    """What the recorded manifest says: its header, WAL ranges and entries by path."""

    header: str
    ranges: str
    algorithm: str
    entries: dict[bytes, _Entry]


def _parse_manifest(text: bytes) -> _Recorded:
    decoded = text.decode()
    files_at = decoded.index('"Files": [') + len('"Files": [')
    ranges_at = decoded.index('"WAL-Ranges": [')
    checksum_at = decoded.rindex('"Manifest-Checksum"')
    doc = json.loads(decoded)
    algorithm = "NONE"
    entries: dict[bytes, _Entry] = {}
    for item in doc["Files"]:
        path = (
            bytes.fromhex(item["Encoded-Path"]) if "Encoded-Path" in item else item["Path"].encode()
        )
        algorithm = item.get("Checksum-Algorithm", algorithm)
        entries[path] = _Entry(path, int(item["Size"]), item["Last-Modified"], item.get("Checksum"))
    return _Recorded(decoded[:files_at], decoded[ranges_at:checksum_at], algorithm, entries)


@dataclass(slots=True)
class _TarFollower:
    """Follows one archive's tar stream chunk by chunk and lists its files for the
    manifest: regular files but the WAL segments (sent without a manifest entry)."""

    prefix: bytes  # pg_tblspc/<oid>/ for a tablespace's archive
    algorithm: str
    reuse: dict[bytes, _Entry] | None
    done: Callable[[_Entry], None]
    _header: bytearray = field(default_factory=bytearray)
    _left: int = 0  # content bytes of the current member still to come
    _pad: int = 0
    _current: _Entry | None = None
    _digest: _Digest | None = None

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self._left:
                take = min(self._left, len(view))
                if self._digest is not None:
                    self._digest.update(view[:take])
                self._left -= take
                view = view[take:]
                if not self._left:
                    self._finish()
            elif self._pad:
                take = min(self._pad, len(view))
                self._pad -= take
                view = view[take:]
            else:
                take = min(_BLOCK - len(self._header), len(view))
                self._header += view[:take]
                view = view[take:]
                if len(self._header) == _BLOCK:
                    self._start(bytes(self._header))
                    self._header.clear()

    def _start(self, header: bytes) -> None:
        if not any(header):
            return  # the end-of-archive blocks
        name = header[:100].split(b"\0", 1)[0]
        size = _octal(header[124:136])
        self._left, self._pad = size, -size % _BLOCK
        if header[156:157] not in (b"0", b"\0") or _is_wal_segment(name):
            self._current = self._digest = None
        else:
            path = self.prefix + name
            mtime = _octal(header[136:148])
            modified = time.strftime("%Y-%m-%d %H:%M:%S GMT", time.gmtime(mtime))
            self._current = _Entry(path, size, modified, None)
            known = None if self.reuse is None else self.reuse.get(path)
            if known is not None and known.size == size:
                self._current.checksum = known.checksum
                self._digest = None
            else:
                self._digest = _Digest(self.algorithm)
        if not size:
            self._finish()

    def _finish(self) -> None:
        if self._current is not None:
            if self._digest is not None:
                self._current.checksum = self._digest.hexdigest()
            self.done(self._current)
        self._current = self._digest = None


def _is_wal_segment(name: bytes) -> bool:
    base = name.removeprefix(b"./").removeprefix(b"pg_wal/")
    return (
        name.removeprefix(b"./").startswith(b"pg_wal/")
        and len(base) == _WAL_SEGMENT
        and set(base) <= _HEX
    )


def _frame(kind: bytes, body: bytes) -> bytes:
    return _FRAME.pack(kind, len(body) + 4) + body


@dataclass(slots=True)
class _Archive:
    opening: bytes  # 15+: the 'n' CopyData; 14: the CopyOutResponse
    oid: bytes | None  # None: the data directory (base.tar)
    items: list[bytes | int] = field(default_factory=list)  # data chunks, progress counts
    closing: bytes | None = None  # 14: the CopyDone


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

    @classmethod
    def parse(cls, messages: Sequence[bytes], modern: bool) -> _Parts:
        rows = [DataRow.decode_body(m[5:]).values for m in messages if m[:1] == b"D"]
        spaces = [r[0] for r in rows if len(r) == 3]
        parts = cls(modern, [], [], None, _CHUNK if modern else _CHUNK_14, [], [])
        parts.positions = [r for r in rows if len(r) == 2]
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
    """The recorded messages, with ``wanted``'s label and manifest (see the module
    docstring). ``modern``: 15+'s framing (one COPY, typed CopyData); ``reuse``: take
    the recorded manifest's checksums where the algorithm is the same. The recording is
    taken apart here, so a malformed one raises ValueError before anything is sent; the
    archives are checksummed as they are sent."""
    try:
        parts = _Parts.parse(messages, modern)
        recorded = None if parts.manifest is None else _parse_manifest(parts.manifest)
        main = next((a for a in parts.archives if a.oid is None), None)
        if main is None:
            raise ValueError("it has no base.tar")
        delta = 0
        if have.label != wanted.label:
            main.items, delta = _relabel(main.items, have.label, wanted.label)
    except (KeyError, IndexError, TypeError, struct.error) as err:
        raise ValueError(f"{type(err).__name__}: {err}") from err
    return _frames(parts, recorded, have, wanted, delta, reuse)


def _frames(
    parts: _Parts,
    recorded: _Recorded | None,
    have: BackupOptions,
    wanted: BackupOptions,
    delta: int,
    reuse: bool,
) -> Iterator[bytes]:
    algorithm = wanted.manifest_checksums.upper() if wanted.manifest != "no" else "NONE"
    known = None
    if reuse and recorded is not None and recorded.algorithm == algorithm:
        known = dict(recorded.entries)
    relabel = have.label != wanted.label
    if relabel and known is not None:
        known.pop(b"backup_label", None)  # same length, other bytes: checksum it again
    entries: list[_Entry] = []
    moved = 0  # backup_label's growth, once it is sent
    yield from parts.before
    for archive in parts.archives:
        yield archive.opening
        prefix = b"" if archive.oid is None else b"pg_tblspc/" + archive.oid + b"/"
        follower = _TarFollower(prefix, algorithm, known, entries.append)
        if archive.oid is None:
            moved = delta
        for item in archive.items:
            if isinstance(item, int):
                yield _frame(b"d", b"p" + struct.pack("!Q", item + moved))
                continue
            if wanted.manifest != "no":
                follower.feed(item)
            yield parts.data(item)
        if archive.closing is not None:
            yield archive.closing
    if wanted.manifest != "no":
        text = _render_manifest(
            _header(recorded, parts),
            entries,
            algorithm,
            _ranges(recorded, parts),
            wanted.manifest == "force-encode",
        )
        chunks = [
            text[i : i + parts.manifest_chunk] for i in range(0, len(text), parts.manifest_chunk)
        ]
        if parts.modern:
            yield _frame(b"d", b"m")
            yield from (parts.data(c) for c in chunks)
        else:
            yield parts.archives[-1].opening  # the same CopyOutResponse (text, no columns)
            yield from (parts.data(c) for c in chunks)
            yield _frame(b"c", b"")
    yield from parts.after


def _relabel(items: list[bytes | int], old: str, new: str) -> tuple[list[bytes | int], int]:
    """The main archive's items with backup_label (its first member) carrying ``new``
    as its LABEL line, and how many bytes longer the archive became: the header, the
    content and the padding are each one chunk, as sendFileWithContent sends them."""
    header, content = items[0], items[1]
    if not isinstance(header, bytes) or not isinstance(content, bytes):
        raise ValueError("base.tar does not start with a file")
    size = _octal(header[124:136])
    if header[:13] != b"backup_label\0" or len(content) != size:
        raise ValueError("the main archive does not start with backup_label in one chunk")
    pad = -size % _BLOCK
    rest = items[2:]
    if pad:
        if not isinstance(rest[0], bytes) or len(rest[0]) != pad:
            raise ValueError("backup_label's padding is not one chunk")
        rest = rest[1:]
    text = content.replace(f"\nLABEL: {old}\n".encode(), f"\nLABEL: {new}\n".encode(), 1)
    new_pad = -len(text) % _BLOCK
    head: list[bytes | int] = [_with_size(header, len(text)), text]
    if new_pad:
        head.append(bytes(new_pad))
    return head + rest, len(text) + new_pad - size - pad


def _header(recorded: _Recorded | None, parts: _Parts) -> str:
    """InitializeBackupManifest's first lines: the recorded ones, or those of the
    recorded server's major (its PG_VERSION file)."""
    if recorded is not None:
        return recorded.header
    if int(_member(parts, b"PG_VERSION")) < _MANIFEST_V2:
        return '{ "PostgreSQL-Backup-Manifest-Version": 1,\n"Files": ['
    control = _member(parts, b"global/pg_control")
    system = int.from_bytes(control[:8], "little")
    return (
        f'{{ "PostgreSQL-Backup-Manifest-Version": 2,\n"System-Identifier": {system},\n"Files": ['
    )


def _ranges(recorded: _Recorded | None, parts: _Parts) -> str:
    """AddWALInfoToBackupManifest: the recorded ranges, or the one timeline's range from
    the start and end positions (a backup recorded without a manifest)."""
    if recorded is not None:
        return recorded.ranges
    (start, tli), (end, _) = parts.positions[0], parts.positions[-1]
    assert start is not None and tli is not None and end is not None
    return (
        f'"WAL-Ranges": [\n{{ "Timeline": {int(tli)}, "Start-LSN": "{LSN.parse(start.decode())}", '
        f'"End-LSN": "{LSN.parse(end.decode())}" }}\n],\n'
    )


def _member(parts: _Parts, path: bytes) -> bytes:
    main = next(a for a in parts.archives if a.oid is None)
    stream = b"".join(i for i in main.items if isinstance(i, bytes))
    at = 0
    while at + _BLOCK <= len(stream):
        header = stream[at : at + _BLOCK]
        size = _octal(header[124:136])
        if header[:100].split(b"\0", 1)[0] == path:
            return stream[at + _BLOCK : at + _BLOCK + size]
        at += _BLOCK + size + (-size % _BLOCK)
    raise ValueError(f"no {path.decode()} in the main archive")
