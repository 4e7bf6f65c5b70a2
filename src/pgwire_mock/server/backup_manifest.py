"""The backup manifest as backup_manifest.c writes it: a line per file sent, in the
order sent (``AddFileToBackupManifest``: path or hex-encoded path, size, modification
time, checksum), the WAL ranges (``AddWALInfoToBackupManifest``) and a SHA-256 of all
that (``SendBackupManifest``). Built from the archives' tar members as they stream past
(:class:`TarFollower`); the recorded manifest, when there is one, lends its first lines,
its WAL ranges and the checksums of the algorithm asked for."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from codec.values import LSN
from codec.wal import crc32c
from pgwire_mock import json_text
from pgwire_mock.server.backup_tar import BLOCK, octal

__all__ = ["Entry", "Recorded", "TarFollower", "first_lines", "parse", "render", "wal_range"]

_VERSION_2: Final = 17  # "PostgreSQL-Backup-Manifest-Version": 2, with System-Identifier
_WAL_SEGMENT: Final = 24  # pg_wal/<24 hex digits>: a WAL file, sent outside the manifest
_HEX: Final = frozenset(b"0123456789ABCDEF")


@dataclass(slots=True)
class Entry:
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


def render(
    header: str, entries: Sequence[Entry], algorithm: str, ranges: str, force_encode: bool
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
class Recorded:
    """What the recorded manifest says: its header, WAL ranges and entries by path."""

    header: str
    ranges: str
    algorithm: str
    entries: dict[bytes, Entry]


def parse(text: bytes) -> Recorded:
    decoded = text.decode()
    files_at = decoded.index('"Files": [') + len('"Files": [')
    ranges_at = decoded.index('"WAL-Ranges": [')
    checksum_at = decoded.rindex('"Manifest-Checksum"')
    doc = json_text.loads(decoded)
    algorithm = "NONE"
    entries: dict[bytes, Entry] = {}
    for item in doc["Files"]:
        path = (
            bytes.fromhex(item["Encoded-Path"]) if "Encoded-Path" in item else item["Path"].encode()
        )
        algorithm = item.get("Checksum-Algorithm", algorithm)
        entries[path] = Entry(path, int(item["Size"]), item["Last-Modified"], item.get("Checksum"))
    return Recorded(decoded[:files_at], decoded[ranges_at:checksum_at], algorithm, entries)


@dataclass(slots=True)
class TarFollower:
    """Follows one archive's tar stream chunk by chunk and lists its files for the
    manifest: regular files but the WAL segments (sent without a manifest entry)."""

    prefix: bytes  # pg_tblspc/<oid>/ for a tablespace's archive
    algorithm: str
    reuse: dict[bytes, Entry] | None
    done: Callable[[Entry], None]
    _header: bytearray = field(default_factory=bytearray)
    _left: int = 0  # content bytes of the current member still to come
    _pad: int = 0
    _current: Entry | None = None
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
                take = min(BLOCK - len(self._header), len(view))
                self._header += view[:take]
                view = view[take:]
                if len(self._header) == BLOCK:
                    self._start(bytes(self._header))
                    self._header.clear()

    def _start(self, header: bytes) -> None:
        if not any(header):
            return  # the end-of-archive blocks
        name = header[:100].split(b"\0", 1)[0]
        size = octal(header[124:136])
        self._left, self._pad = size, -size % BLOCK
        if header[156:157] not in (b"0", b"\0") or _is_wal_segment(name):
            self._current = self._digest = None
        else:
            path = self.prefix + name
            mtime = octal(header[136:148])
            modified = time.strftime("%Y-%m-%d %H:%M:%S GMT", time.gmtime(mtime))
            self._current = Entry(path, size, modified, None)
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


def first_lines(major: int, system_identifier: Callable[[], int]) -> str:
    """InitializeBackupManifest's opening, up to the file list (17+ name the system)."""
    if major < _VERSION_2:
        return '{ "PostgreSQL-Backup-Manifest-Version": 1,\n"Files": ['
    return (
        '{ "PostgreSQL-Backup-Manifest-Version": 2,\n'
        f'"System-Identifier": {system_identifier()},\n"Files": ['
    )


def wal_range(timeline: int, start: int, end: int) -> str:
    """AddWALInfoToBackupManifest for a backup that stayed on one timeline."""
    return (
        f'"WAL-Ranges": [\n{{ "Timeline": {timeline}, "Start-LSN": "{LSN(start)}", '
        f'"End-LSN": "{LSN(end)}" }}\n],\n'
    )
