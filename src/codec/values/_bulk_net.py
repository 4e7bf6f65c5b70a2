"""inet_in and cidr_in over all distinct element texts of a text inet or cidr array at
once (codec.values._bulk's table takes these for inet and cidr), and over a whole array
text of bare addresses (its BULK_WHOLE): IPv4 and IPv6 addresses in network_out's form,
read by C-level passes over all the texts joined, the values made by
codec.values._net's passes. Anything else declines, and the array decoder runs the
input function on each element, which gives the value or the error.
"""

from __future__ import annotations

import binascii
import json
import re
import struct
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from itertools import compress, count, repeat
from operator import not_, or_, setitem
from typing import Final, cast

from codec.values._net import cidrs, host_bits_at, inets
from codec.values._ranges import BulkResult, Declined

_NO_DIGITS: Final = b"0123456789"
_IPV4_CHARACTERS: Final = b"0123456789./,"
_JSON_INTS: Final = json.JSONDecoder()


def _made(version: int, numbers: Sequence[int], prefixes: Sequence[int], cidr: bool) -> BulkResult:
    """The values, or for cidr, Declined at the first with bits set right of its mask
    (cidr_in's error) with the values before it."""
    if not cidr:
        return inets(version, numbers, prefixes)
    made = cidrs(version, numbers, prefixes)
    if made is not None:
        return made
    at = host_bits_at(version, numbers, prefixes)  # (not None: cidrs() saw host bits)
    return Declined(at or 0, cidrs(version, numbers[:at], prefixes[:at]))


def _with_bits(joined: str, suffix: str) -> str:
    """Elements (joined by commas) with ``suffix`` ("/32", "/128") after each that has
    no prefix length: inet_out leaves out the whole address's, and the input
    functions (ipaddress) read none as that, for cidr too."""
    if "/" not in joined:
        return joined.replace(",", suffix + ",") + suffix
    texts = joined.split(",")
    kept = map(str.__contains__, texts, repeat("/"))
    return ",".join(map(str.__add__, texts, map((suffix, "").__getitem__, kept)))


def _ipv4(joined: str, n: int, cidr: bool) -> BulkResult:
    """IPv4 inet and cidr in network_out's form, a.b.c.d/n with no leading zeros, ``n``
    elements joined by commas: the shape is checked by deleting the digits, every
    number read as one JSON array (codec may not import socket for inet_aton; JSON
    refuses empty numbers and leading zeros), the octets packed and read back as
    uint32s, and the values made by C-level passes (codec.values._net; their
    constructors took 1-2 us each, three times reading the text)."""
    if joined.encode().translate(None, _IPV4_CHARACTERS):
        return None
    if joined.count("/") != n:
        joined = _with_bits(joined, "/32")
    # Digits between the dots and slash of each element, and nothing else.
    if joined.encode().translate(None, _NO_DIGITS) != b".../," * (n - 1) + b".../":
        return None
    try:
        flat = _JSON_INTS.decode("[" + joined.replace(".", ",").replace("/", ",") + "]")
        octets = bytearray(flat)  # ValueError for a number over 255
    except ValueError:
        return None
    prefixes = octets[4::5]
    if max(prefixes) > 32:
        return None
    del octets[4::5]
    numbers = struct.unpack(f"!{n}I", octets)
    return _made(4, numbers, prefixes, cidr)


# --------------------------------------------------------------------------- IPv6

_IPV6_CHARACTERS: Final = b"0123456789abcdefABCDEF:/,"
_HEX_DIGITS: Final = b"0123456789abcdefABCDEF"
# An address's colons and slash, its "::" written "g:" -> the zero groups the "::"
# stands for, ":0:...:0:" (with groups on both sides, as many as its colons are
# there), or b"" for eight groups and no "::".
_GAPS: Final = {
    b":" * before + b"g:" + b":" * after + b"/": b":" + b"0:" * (6 - before - after)
    for before in range(6)
    for after in range(6 - before)
} | {b":" * 7 + b"/": b""}
_TABS: Final = bytes.maketrans(b":/,", b"\t\t\t")
_ZEROS: Final = bytes.maketrans(b" ", b"0")
_SWAPPED: Final = bytes((byte << 4 | byte >> 4) & 0xFF for byte in range(256))
# Two decimal digits read as hex (0x00-0x99) -> their value; 255 for other bytes.
_BCD: Final = bytes(
    10 * (byte >> 4) + (byte & 15) if byte >> 4 < 10 and byte & 15 < 10 else 255
    for byte in range(256)
)


def _splice(pieces: list[bytes], gaps: list[bytes]) -> bytes | None:
    """``pieces`` with the ``gaps`` between them, or None if there is not one gap
    between each two (a "::" the table did not see: a character out of form)."""
    if len(pieces) != len(gaps) + 1:
        return None
    spliced = pieces + gaps
    spliced[0::2] = pieces
    spliced[1::2] = gaps
    return b"".join(spliced)


def _ipv6(joined: str, n: int, cidr: bool) -> BulkResult:
    """IPv6 inet and cidr in network_out's form, ``n`` elements joined by commas: hex
    groups of one to four digits, at most one "::", a decimal prefix length (/128
    if left out). No step takes a call per group, and the few per element are
    C calls over a list (a loop of calls per element took 2 us each; ipaddress
    parses an interface's address twice, 17 us):

    - each "::" becomes the zero groups it stands for, looked up by the address's
      colons once the hex digits are deleted, and spliced in between the pieces of
      the texts split at "::";
    - the texts, reversed, with a tab after every group and prefix length (a ninth
      group) are expanded to tab stops five apart: every group comes out five wide,
      its digits (reversed) then spaces, if none is longer than four;
    - the spaces become zeros, the fifth of each five goes, and the hex is read as
      bytes, each byte's two digits and the bytes' order reversed back;
    - the prefix length's three decimal digits, read as hex, give its value by a
      table of the two-digit bytes.

    A dotted IPv4 tail, a zone or anything else declines: the array goes element by
    element."""
    data = joined.encode()  # a character outside ASCII stays after the deletion
    if data.translate(None, _IPV6_CHARACTERS):
        return None  # (the checks below refuse it too; this is quicker)
    if data.count(b"/") != n:
        data = _with_bits(joined, "/128").encode()
    # inet_in's pattern takes one to three digits: a leading zero could hide a fourth.
    if b"/0" in data and data.count(b"/0") != data.count(b"/0,") + data.endswith(b"/0"):
        return None
    # "::" at either end of an address: a zero group outside it, so that every "::"
    # has groups on both sides and stands for 8 groups less the colons it has.
    if data.startswith(b"::") or b",::" in data:
        data = (b"," + data).replace(b",::", b",0::")[1:]
    data = data.replace(b"::/", b"::0/")
    skeletons = data.replace(b"::", b"g:").translate(None, _HEX_DIGITS).split(b",")
    gaps = list(map(_GAPS.get, skeletons))
    if None in gaps:
        return None
    if b"::" in data:
        inside = cast(list[bytes], list(filter(None, gaps)))  # b"" for no "::"
        spliced = _splice(data.split(b"::"), inside)
        if spliced is None:
            return None
        data = spliced
    reverse = data[::-1].translate(_TABS)
    # An empty group (a third colon, a stray one, no prefix length digits).
    if b"\t\t" in reverse or reverse.startswith(b"\t") or reverse.endswith(b"\t"):
        return None
    padded = (reverse + b"\t").expandtabs(5)
    # A group longer than four digits is ten wide; a comma in a text is one more.
    if len(padded) != 45 * n:
        return None
    hexits = bytearray(padded.translate(_ZEROS))
    del hexits[4::5]
    raw = binascii.unhexlify(hexits).translate(_SWAPPED)[::-1]
    # 16 address bytes and 2 of prefix length each: 0x0h (hundreds) and 0xtu.
    hundreds, rest = raw[16::18], raw[17::18].translate(_BCD)
    if max(hundreds) > 1 or max(rest) > 99:
        return None
    # Each sum fits its byte: no carry crosses into another.
    prefixes = (int.from_bytes(rest) + 100 * int.from_bytes(hundreds)).to_bytes(n)
    if max(prefixes) > 128:
        return None
    numbers = list(map(int.from_bytes, struct.Struct("16s2x" * n).unpack(raw)))
    return _made(6, numbers, prefixes, cidr)


# --------------------------------------------------------------------------- entries

_IPV6_TEXT: Final = b"0123456789abcdefABCDEF:/"
_IPV4_SHAPES: Final = {b".../", b"..."}
_OUT_OF_FORM: Final = {
    True: re.compile("[^0-9a-fA-F:/,]").search,
    False: re.compile("[^0-9./,]").search,
}
# Texts in an array from which its first is read alone first: a bad first element
# (the array's error) then costs no pass over them all.
_PROBED: Final = 32


def _read(joined: str, n: int, cidr: bool) -> BulkResult:
    return (_ipv6 if ":" in joined else _ipv4)(joined, n, cidr)


def _out_of_form(texts: list[str], v6: bool) -> int | None:
    """The index of the first text outside the characters (IPv6, with a colon) or
    the shape (IPv4) of the version read, or None if all are in them."""
    encoded = list(map(str.encode, texts))
    if v6:
        others = map(bytes.translate, encoded, repeat(None), repeat(_IPV6_TEXT))
        colonless = map(not_, map(str.__contains__, texts, repeat(":")))
        bad = map(or_, map(bool, others), colonless)
    else:
        shapes = map(bytes.translate, encoded, repeat(None), repeat(_NO_DIGITS))
        bad = map(not_, map(_IPV4_SHAPES.__contains__, shapes))
    return next(compress(count(), bad), None)


def _stopped(before: str, index: int, cidr: bool) -> BulkResult:
    """Declined at element ``index``, out of form, with the values of the ``index``
    elements ``before`` it (joined), if they are read; or where those stop."""
    values = _read(before, index, cidr) if index else []
    return Declined(index, values) if isinstance(values, list) or values is None else values


def ip_texts(texts: list[str], cidr: bool) -> BulkResult:
    """inet and cidr texts of IPv6 or of IPv4 addresses, or of both (each version read
    apart); Declined at the first text out of its version's form, or (cidr) with host
    bits."""
    if not texts:
        return []
    if len(texts) > _PROBED and not isinstance(_read(texts[0], 1, cidr), list):
        return Declined(0)
    v6 = list(map(str.__contains__, texts, repeat(":")))
    if True in v6 and False in v6:
        return _both_versions(texts, v6, cidr)
    joined = ",".join(texts)
    values = _read(joined, len(texts), cidr)
    if values is not None:
        return values
    index = _out_of_form(texts, ":" in joined)
    return None if index is None else _stopped(",".join(texts[:index]), index, cidr)


def _both_versions(texts: list[str], v6: list[bool], cidr: bool) -> BulkResult:
    """ip_texts of IPv4 and IPv6 texts mixed: each version's texts read apart and put
    back in place (one read each, where the element path took 12 us per element). Where
    either stops, Declined at the first element, in array order, that stopped it, with
    the values before it where both reads made them."""
    groups = [list(compress(count(), v6)), list(compress(count(), map(not_, v6)))]
    answers = [ip_texts(list(map(texts.__getitem__, where)), cidr) for where in groups]
    stops = [
        where[answer.index] if isinstance(answer, Declined) else where[0]
        for where, answer in zip(groups, answers, strict=True)
        if not isinstance(answer, list)
    ]
    first = min(stops, default=len(texts))
    made: list[object] = list(texts[:first])
    for where, answer in zip(groups, answers, strict=True):
        values = answer.before if isinstance(answer, Declined) else answer
        taken = bisect_left(where, first)  # this version's elements before the stop
        if values is None or len(values) < taken:
            return Declined(first)
        deque(map(setitem, repeat(made), where[:taken], values), 0)
    return made if first == len(texts) else Declined(first, made)


# Elements whose repeats the whole reader looks for, and the characters they take.
_SAMPLE: Final = 64
_LONGEST: Final = len("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128,")


def ip_whole(text: str, cidr: bool) -> BulkResult:
    """The values of a whole array text of bare IPv4 or IPv6 addresses in
    network_out's form, "{10.0.0.1/8,10.0.0.2}": read with no split of the array and
    no table of its distinct texts. Where an element is out of form (a character) or
    (cidr) has host bits, the elements before it are read alone: Declined there, with
    their values. Anything else is None (the array decoder parses it), and so is an
    array whose first elements repeat: the table converts each distinct text once,
    which is cheaper than reading each element."""
    body = text[1:-1]
    if not body or text[0] != "{" or text[-1] != "}":
        return None
    head = body[: _SAMPLE * _LONGEST]
    sample = head.split(",")
    if len(head) < len(body):
        sample.pop()  # it may be cut short
    if 2 * len(set(sample)) <= len(sample):
        return None
    n = len(sample) if len(head) == len(body) else body.count(",") + 1
    if n > _PROBED and not isinstance(_read(sample[0], 1, cidr), list):
        return None
    if (":" in sample[0]) != (":" in body):
        # IPv4 first, IPv6 later: each version read apart (ip_texts); any element out of
        # form is left to the array decoder, which finds it.
        texts = body.split(",")
        values = ip_texts(texts, cidr)
        if isinstance(values, Declined) and values.index and values.before is not None:
            cut = len(",".join(texts[: values.index]))  # its comma in the body
            return Declined(values.index, values.before, cut + 2)  # the rest parsed alone
        return values if isinstance(values, list) else None
    values = _read(body, n, cidr)
    if values is not None:
        return values
    found = _OUT_OF_FORM[":" in body](body)
    index = 0 if found is None else body.count(",", 0, found.start())
    if found is None or not index:
        return None
    cut = body.rfind(",", 0, found.start())
    stopped = _stopped(body[:cut], index, cidr)
    if isinstance(stopped, Declined) and stopped.index == index and stopped.before is not None:
        return Declined(index, stopped.before, cut + 2)  # the rest is parsed alone
    return stopped


# --------------------------------------------------------------------------- binary

# network_send's element, by IP version: its length, family byte and address size. An
# element is the 4-byte length, then family, bits, is_cidr (network_recv ignores it),
# the address size and the address.
_ELEMENT: Final = {4: (8, 2, 4), 6: (20, 3, 16)}


def ip_area(data: bytes, pos: int, total: int, cidr: bool) -> list[object] | None:
    """The values of a binary inet or cidr array's whole element area (from ``pos``,
    ``total`` elements) when every element is an IPv4 one, or every one an IPv6 one,
    none NULL: each field is a strided slice of the area (no bytes object per element),
    the addresses gathered by strided assignments and unpacked at once. Anything else,
    or what network_recv refuses, declines to the element path."""
    area = memoryview(data)[pos:]
    for version, (length, family, size) in _ELEMENT.items():
        stride = 4 + length
        if len(area) != total * stride:
            continue
        fields = [bytes(area[i::stride]) for i in range(8)]
        if fields[:4] != [bytes(total)] * 3 + [bytes([length]) * total]:
            return None
        if fields[4] != bytes([family]) * total or fields[7] != bytes([size]) * total:
            return None
        bits = list(fields[5])
        if max(bits) > 8 * size:
            return None
        packed = bytearray(size * total)
        for i in range(size):
            packed[i::size] = area[8 + i :: stride]
        if version == 4:
            numbers: Sequence[int] = struct.unpack(f"!{total}I", packed)
        else:
            cuts = map(slice, range(0, size * total, size), range(size, size * total + 1, size))
            numbers = list(map(int.from_bytes, map(bytes(packed).__getitem__, cuts)))
        return cidrs(version, numbers, bits) if cidr else inets(version, numbers, bits)
    return None
