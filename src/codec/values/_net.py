"""inet and cidr."""

from __future__ import annotations

import ipaddress
import re
import struct
from typing import Final

from codec.errors import EncodeError
from codec.values._common import PG_SPACE, Converter, Invalid, check_exact, type_error

PGSQL_AF_INET: Final = 2
PGSQL_AF_INET6: Final = 3
_INET_HEADER: Final = struct.Struct("!BBBB")  # family, bits, is_cidr, address length
_INET_ADDR_RE: Final = re.compile(r"[0-9a-fA-F:.]++(?:/[0-9]{1,3})?")

Inet = ipaddress.IPv4Interface | ipaddress.IPv6Interface
Cidr = ipaddress.IPv4Network | ipaddress.IPv6Network


def _ipv6_text(packed: bytes) -> str:
    """inet_net_ntop_ipv6() in src/port/inet_net_ntop.c (BIND's algorithm).

    It differs from Python's ``str(IPv6Address)`` in one way: ``::ffff:a.b.c.d`` and the
    deprecated ``::a.b.c.d`` print the last 32 bits as dotted IPv4.
    """
    words = struct.unpack("!8H", packed)
    best_base, best_len, cur_base, cur_len = -1, 0, -1, 0
    for i, word in enumerate(words):
        if word == 0:
            if cur_base < 0:
                cur_base, cur_len = i, 1
            else:
                cur_len += 1
            if cur_len > best_len:
                best_base, best_len = cur_base, cur_len
        else:
            cur_base = -1
    if best_len < 2:
        best_base = -1
    out = []
    for i, word in enumerate(words):
        if best_base >= 0 and best_base <= i < best_base + best_len:
            if i == best_base:
                out.append(":")
            continue
        if i:
            out.append(":")
        if i == 6 and best_base == 0 and (best_len == 6 or (best_len == 5 and words[5] == 0xFFFF)):
            out.append(".".join(str(b) for b in packed[12:]))
            break
        out.append(f"{word:x}")
    if best_base >= 0 and best_base + best_len == 8:
        out.append(":")
    return "".join(out)


def _addr_text(packed: bytes) -> str:
    if len(packed) == 4:
        return ".".join(str(b) for b in packed)
    return _ipv6_text(packed)


def _parse_ip(text: str, cidr: bool) -> Inet | Cidr:
    stripped = text.strip(PG_SPACE)
    if _INET_ADDR_RE.fullmatch(stripped) is None:
        raise Invalid(0, f"expected an IP address, found {text[:60]!r}")
    try:
        if cidr:
            return ipaddress.ip_network(stripped, strict=True)
        return ipaddress.ip_interface(stripped)
    except ValueError as err:
        raise Invalid(
            0, f"invalid {'cidr' if cidr else 'inet'} value {text[:60]!r}: {err}"
        ) from err


def _inet_in(text: str) -> Inet:
    return _parse_ip(text, False)  # type: ignore[return-value]


def _cidr_in(text: str) -> Cidr:
    return _parse_ip(text, True)  # type: ignore[return-value]


def _inet_parts(value: object) -> tuple[bytes, int]:
    if isinstance(value, (ipaddress.IPv4Interface, ipaddress.IPv6Interface)):
        addr, bits = value.ip, value.network.prefixlen
    elif isinstance(value, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        addr, bits = value, value.max_prefixlen
    else:
        raise type_error("inet", value, "ipaddress.IPv4Interface or IPv6Interface")
    if getattr(addr, "scope_id", None):
        raise EncodeError(f"inet has no IPv6 zone (scope id): {value}")
    return addr.packed, bits


def _cidr_parts(value: object) -> tuple[bytes, int]:
    if not isinstance(value, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
        raise type_error("cidr", value, "ipaddress.IPv4Network or IPv6Network")
    return value.network_address.packed, value.prefixlen


def _inet_out(value: object) -> str:
    packed, bits = _inet_parts(value)
    text = _addr_text(packed)
    # network_out(): inet omits the prefix length when it is the whole address.
    return text if bits == len(packed) * 8 else f"{text}/{bits}"


def _cidr_out(value: object) -> str:
    packed, bits = _cidr_parts(value)
    return f"{_addr_text(packed)}/{bits}"


def _ip_recv(data: bytes, cidr: bool) -> Inet | Cidr:
    # network_recv(): the is_cidr byte is read and ignored; the type decides.
    if len(data) < 4:
        raise Invalid(len(data), f"expected a 4-byte inet header, found {len(data)} bytes")
    family, bits, _is_cidr, size = _INET_HEADER.unpack_from(data)
    if family == PGSQL_AF_INET:
        expected = 4
    elif family == PGSQL_AF_INET6:
        expected = 16
    else:
        raise Invalid(0, f"invalid address family {family} in external inet value")
    if bits > expected * 8:
        raise Invalid(1, f"invalid bits {bits} in external inet value")
    if size != expected:
        raise Invalid(3, f"invalid length {size} in external inet value")
    check_exact(data[4:], expected)
    addr = ipaddress.ip_address(data[4:])
    if cidr:
        try:
            return ipaddress.ip_network((addr, bits), strict=True)
        except ValueError as err:
            raise Invalid(4, "invalid external cidr value: bits set right of the mask") from err
    return ipaddress.ip_interface((addr, bits))


def _inet_send(value: object) -> bytes:
    packed, bits = _inet_parts(value)
    family = PGSQL_AF_INET if len(packed) == 4 else PGSQL_AF_INET6
    return _INET_HEADER.pack(family, bits, 0, len(packed)) + packed


def _cidr_send(value: object) -> bytes:
    packed, bits = _cidr_parts(value)
    family = PGSQL_AF_INET if len(packed) == 4 else PGSQL_AF_INET6
    return _INET_HEADER.pack(family, bits, 1, len(packed)) + packed


INET: Final = Converter(
    869,
    "inet",
    1041,
    "ipaddress.IPv4Interface | IPv6Interface",
    _inet_in,
    _inet_out,
    lambda d: _ip_recv(d, False),
    _inet_send,
)
CIDR: Final = Converter(
    650,
    "cidr",
    651,
    "ipaddress.IPv4Network | IPv6Network",
    _cidr_in,
    _cidr_out,
    lambda d: _ip_recv(d, True),
    _cidr_send,
)

CONVERTERS: Final = (INET, CIDR)
