"""The tar format of BASE_BACKUP's archives, as PostgreSQL writes it (src/port/tar.c):
512-byte blocks, a header per member, content padded to a block, two zero blocks at the
end. basebackup.c sends each member's header, content and padding as chunks of their
own (``_tarWriteHeader``, ``sendFile``, ``_tarWritePadding``), so a member is a run of
whole chunks of the archive as recorded."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

__all__ = ["BLOCK", "Member", "members", "octal", "with_name_and_size"]

BLOCK: Final = 512


def octal(field_bytes: bytes) -> int:
    """A tar number field: octal digits, or print_tar_number's base-256 form."""
    if field_bytes[:1] == b"\x80":
        return int.from_bytes(field_bytes[1:], "big")
    text = field_bytes.rstrip(b"\0 ").lstrip(b" ")
    return int(text or b"0", 8)


def _tar_number(value: int, width: int) -> bytes:
    """print_tar_number: octal digits then a space."""
    return format(value, "o").zfill(width - 1).encode() + b" "


def with_name_and_size(header: bytes, size: int, name: bytes | None = None) -> bytes:
    """The header with another size (and name), its checksum made right (tarChecksum:
    the bytes' sum, the checksum field counted as spaces)."""
    h = bytearray(header)
    if name is not None:
        h[0:100] = name.ljust(100, b"\0")
    h[124:136] = _tar_number(size, 12)
    h[148:156] = b" " * 8
    h[148:156] = _tar_number(sum(h), 8)
    return bytes(h)


@dataclass(frozen=True, slots=True)
class Member:
    """One member of an archive: its name and size, and the items (indexes into the
    archive's chunk list) from its header to its padding."""

    name: bytes
    size: int
    start: int
    end: int


def members(items: Sequence[object]) -> list[Member]:
    """The members of an archive recorded as ``items`` (its chunks, as bytes, and what
    was sent between them, which belongs to the member it follows); ValueError when a
    member does not start at a chunk's start, which compressed archives do not."""
    out: list[Member] = []
    need = 0  # bytes of the current member still to come
    current: tuple[bytes, int, int] | None = None
    for index, item in enumerate(items):
        if not isinstance(item, bytes):
            continue
        if need:
            need -= len(item)
            if need < 0:
                raise ValueError("a chunk runs past the end of a tar member")
            if not need and current is not None:
                out.append(Member(*current, index + 1))
                current = None
            continue
        if not any(item):
            continue  # the end-of-archive blocks
        if len(item) != BLOCK:
            raise ValueError("a tar header is not a chunk of its own")
        size = octal(item[124:136])
        current = (item[:100].split(b"\0", 1)[0], size, index)
        need = size + (-size % BLOCK)
        if not need:
            out.append(Member(*current, index + 1))
            current = None
    if need:
        raise ValueError("the archive ends inside a member")
    return out
