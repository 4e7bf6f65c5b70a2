"""inet_in and cidr_in over all distinct element texts of a text inet or cidr array at
once (codec.values._bulk's table takes these for inet and cidr): IPv4 and IPv6
addresses in network_out's form, read by C-level passes or a few C calls per element,
the values made by codec.values._net's passes. Anything else declines, and the array
decoder runs the input function on each element, which gives the value or the error.
"""

from __future__ import annotations

import json
import re
import struct
from itertools import repeat
from typing import Final

from codec.values._net import cidrs, inets

# The end of an inet element without a prefix length (inet_out leaves out /32).
_NO_BITS: Final = re.compile(r"\.[0-9]++(?=,|$)")
_NO_DIGITS: Final = str.maketrans("", "", "0123456789")
_JSON_INTS: Final = json.JSONDecoder()


def _ipv4(texts: list[str], cidr: bool) -> list[object] | None:
    """IPv4 inet and cidr in network_out's form, a.b.c.d/n with no leading zeros: the
    texts' shape is checked by deleting their digits (a tenth of a regular expression's
    time), every number read as one JSON array (codec may not import socket for
    inet_aton; JSON refuses empty numbers and leading zeros), the octets packed and
    read back as uint32s, and the values made by C-level passes (codec.values._net;
    their constructors took 1-2 us each, three times reading the text)."""
    n = len(texts)
    joined = ",".join(texts)
    if joined.count("/") != n:
        if cidr:
            return None
        joined = _NO_BITS.sub(r"\g<0>/32", joined)  # only inet leaves prefix lengths out
    # Digits between the dots and slash of each element, and nothing else (no commas).
    if joined.translate(_NO_DIGITS) != ".../," * (n - 1) + ".../":
        return None
    try:
        flat = _JSON_INTS.decode("[" + joined.replace(".", ",").replace("/", ",") + "]")
        prefixes = flat[4::5]
        del flat[4::5]
        packed = bytes(flat)  # ValueError for an octet over 255
    except ValueError:
        return None
    if max(prefixes) > 32:
        return None
    numbers = struct.unpack(f"!{n}I", packed)
    # cidrs() is None for host bits set: cidr_in's error.
    return cidrs(4, numbers, prefixes) if cidr else inets(4, numbers, prefixes)


_NOT_IPV6: Final = str.maketrans("", "", "0123456789abcdefABCDEF:/")


def _ipv6(texts: list[str], cidr: bool) -> list[object] | None:
    """IPv6 inet and cidr in network_out's form: hex groups of one to four digits, at
    most one "::", a decimal prefix length (inet may leave out /128). Each address is
    read as one hex number once its groups are padded to four digits by one % format:
    a loop of a few C calls per element, 2 us (ipaddress parses an interface's address
    twice, 17 us). The values are made by C-level passes (codec.values._net). A dotted
    IPv4 tail, a zone or anything else declines: the array goes element by element."""
    if "".join(texts).translate(_NOT_IPV6):
        return None
    numbers: list[int] = []
    prefixes: list[int] = []
    for text in texts:
        address, slash, bits = text.partition("/")
        if slash:
            # inet_in's pattern (and so the element path) takes one to three digits.
            if not (bits.isdigit() and len(bits) <= 3 and int(bits) <= 128):
                return None
            prefixes.append(int(bits))
        elif cidr:
            return None
        else:
            prefixes.append(128)
        head, gap, tail = address.partition("::")
        groups = head.split(":") if head or not gap else []
        if gap:
            after = tail.split(":") if tail else []
            zeros = 8 - len(groups) - len(after)
            if zeros < 1:
                return None
            groups += _ZERO_GROUPS[zeros]
            groups += after
        # An empty group is a second "::" or a stray ":".
        if len(groups) != 8 or "" in groups:
            return None
        # Each group right-aligned in four places (one call); a longer one overflows.
        hexits = _FOUR_PLACES % tuple(groups)
        if len(hexits) != 32:
            return None
        numbers.append(int(hexits.replace(" ", "0"), 16))
    # cidrs() is None for host bits set: cidr_in's error.
    return cidrs(6, numbers, prefixes) if cidr else inets(6, numbers, prefixes)


_ZERO_GROUPS: Final = [["0"] * zeros for zeros in range(9)]
_FOUR_PLACES: Final = "%4s" * 8


def ip_texts(texts: list[str], cidr: bool) -> list[object] | None:
    """inet and cidr arrays of IPv6 or of IPv4 addresses (mixed ones decline)."""
    v6 = any(map(str.__contains__, texts, repeat(":")))
    return _ipv6(texts, cidr) if v6 else _ipv4(texts, cidr)
