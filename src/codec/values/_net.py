"""inet and cidr, and the ipaddress subclasses they decode to.

An ``IPv4Interface`` or ``IPv4Network`` costs 1-2 us to construct, most of it making
objects nobody may look at (an interface builds its whole network, a network its
address and netmask objects): a 1 MB array of distinct addresses took 170-450 ms. The
classes below are the ipaddress classes with those derived attributes made on first
access and the prefix length (and a network's address, as an integer) in slots, so
that :func:`inets` and :func:`cidrs` build many values by C-level passes: empty
instances whose slots are set through their descriptors, no instance dict and no other
object per value, as ``_bulk._uuids`` builds UUIDs. Made by their constructors (the
text input path, ``pickle``, ``copy``) they are the plain classes under another name.

The passes set the fields the constructors set, which are ipaddress internals; at
import :data:`FAST` checks that they still are, by building sample values both ways.
If they differ (another Python), every path uses the plain ipaddress constructors:
slower, never different."""

from __future__ import annotations

import re
import struct
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from functools import cached_property
from ipaddress import (
    AddressValueError,
    IPv4Address,
    IPv4Interface,
    IPv4Network,
    IPv6Address,
    IPv6Interface,
    IPv6Network,
    NetmaskValueError,
)
from itertools import compress, count, islice, repeat
from operator import and_
from typing import Any, Final

from codec.errors import EncodeError
from codec.values._common import PG_SPACE, Converter, Invalid, check_exact, type_error

# --------------------------------------------------------------------------- the classes


class LazyIPv4Interface(IPv4Interface):
    """An ``ipaddress.IPv4Interface`` (inet) whose ``network`` and ``netmask`` are made
    on first access: equal, hashed, ordered, printed and pickled as the plain one."""

    # A slot, not the instance dict: the passes then make no dict per value.
    __slots__ = ("_prefixlen",)
    _ip: int
    _prefixlen: int

    @cached_property
    def network(self) -> IPv4Network:  # type: ignore[override]
        # What IPv4Interface.__init__ makes from (address, prefix length).
        return IPv4Network((self._ip, self._prefixlen), strict=False)

    @cached_property
    def netmask(self) -> IPv4Address:  # type: ignore[override]
        # The network's own netmask: _make_netmask's cached, shared object.
        mask: IPv4Address = self._make_netmask(self._prefixlen)[0]  # type: ignore[attr-defined]
        return mask


class LazyIPv6Interface(IPv6Interface):
    """An ``ipaddress.IPv6Interface`` (inet) whose ``network`` and ``netmask`` are made
    on first access: equal, hashed, ordered, printed and pickled as the plain one."""

    __slots__ = ("_prefixlen",)
    _ip: int
    _prefixlen: int
    # inet has no zone: read here, past IPv6Address's slot, which is then never set (a
    # pass over the values fewer).
    _scope_id = None

    @cached_property
    def network(self) -> IPv6Network:  # type: ignore[override]
        return IPv6Network((self._ip, self._prefixlen), strict=False)

    @cached_property
    def netmask(self) -> IPv6Address:  # type: ignore[override]
        mask: IPv6Address = self._make_netmask(self._prefixlen)[0]  # type: ignore[attr-defined]
        return mask


def _hosts(network: Any) -> Any:
    """``hosts()`` of a network made without its constructor, which sets an instance
    ``hosts`` for the two longest prefixes (every address of a /31 or /127 is a host,
    RFC 3021 and 6164; a /32 or /128 holds its one address)."""
    if network._prefixlen == network._max_prefixlen - 1:
        return network.__iter__()
    if network._prefixlen == network._max_prefixlen:
        return [network._address_class(int(network.network_address))]
    return None


class LazyIPv4Network(IPv4Network):
    """An ``ipaddress.IPv4Network`` (cidr) whose ``network_address`` and ``netmask``
    are made on first access: equal, hashed, ordered, printed and pickled as the plain
    one."""

    # Slots, so the passes make no dict and no address object per value; _address is
    # the network address as an integer, read only to make network_address.
    __slots__ = ("_address", "_prefixlen")
    _address: int
    _prefixlen: int

    @cached_property
    def network_address(self) -> IPv4Address:  # type: ignore[override]
        return IPv4Address(self._address)

    @cached_property
    def netmask(self) -> IPv4Address:  # type: ignore[override]
        mask: IPv4Address = self._make_netmask(self._prefixlen)[0]  # type: ignore[attr-defined]
        return mask

    def hosts(self) -> Iterator[IPv4Address]:
        hosts: Iterator[IPv4Address] | None = _hosts(self)
        return super().hosts() if hosts is None else hosts


class LazyIPv6Network(IPv6Network):
    """An ``ipaddress.IPv6Network`` (cidr) whose ``network_address`` and ``netmask``
    are made on first access: equal, hashed, ordered, printed and pickled as the plain
    one."""

    __slots__ = ("_address", "_prefixlen")
    _address: int
    _prefixlen: int

    @cached_property
    def network_address(self) -> IPv6Address:  # type: ignore[override]
        return IPv6Address(self._address)

    @cached_property
    def netmask(self) -> IPv6Address:  # type: ignore[override]
        mask: IPv6Address = self._make_netmask(self._prefixlen)[0]  # type: ignore[attr-defined]
        return mask

    def hosts(self) -> Iterator[IPv6Address]:
        hosts: Iterator[IPv6Address] | None = _hosts(self)
        return super().hosts() if hosts is None else hosts


Inet = IPv4Interface | IPv6Interface
Cidr = IPv4Network | IPv6Network

# --------------------------------------------------------------------------- building


def _setter(cls: type, name: str) -> Callable[[object, object], None]:
    """The __set__ of a slot: setting through it runs no Python code."""
    setter: Callable[[object, object], None] = cls.__dict__[name].__set__
    return setter


# An interface's address is IPv4Address's or IPv6Address's slot (IPv6's zone is
# LazyIPv6Interface's None).
_SET_IP: Final = {4: _setter(IPv4Address, "_ip"), 6: _setter(IPv6Address, "_ip")}
_INTERFACES: Final[dict[int, type[IPv4Interface | IPv6Interface]]] = {
    4: LazyIPv4Interface,
    6: LazyIPv6Interface,
}
_NETWORKS: Final[dict[int, type[IPv4Network | IPv6Network]]] = {
    4: LazyIPv4Network,
    6: LazyIPv6Network,
}
# Bits right of the mask, by prefix length: cidr_in refuses a value with any set.
_HOST_BITS: Final = {
    4: [(1 << (32 - bits)) - 1 for bits in range(33)],
    6: [(1 << (128 - bits)) - 1 for bits in range(129)],
}


def _lazy_inets(version: int, numbers: Sequence[int], prefixes: Sequence[int]) -> list[object]:
    cls = _INTERFACES[version]
    made: list[object] = list(map(object.__new__, repeat(cls, len(numbers))))
    deque(map(_SET_IP[version], made, numbers), 0)
    deque(map(_setter(cls, "_prefixlen"), made, prefixes), 0)
    return made


def _lazy_cidrs(version: int, numbers: Sequence[int], prefixes: Sequence[int]) -> list[object]:
    cls = _NETWORKS[version]
    made: list[object] = list(map(object.__new__, repeat(cls, len(numbers))))
    deque(map(_setter(cls, "_address"), made, numbers), 0)
    deque(map(_setter(cls, "_prefixlen"), made, prefixes), 0)
    return made


def _plain_inets(version: int, numbers: Sequence[int], prefixes: Sequence[int]) -> list[object]:
    return list(
        map(IPv4Interface if version == 4 else IPv6Interface, zip(numbers, prefixes, strict=True))
    )


def _plain_cidrs(version: int, numbers: Sequence[int], prefixes: Sequence[int]) -> list[object]:
    return list(
        map(IPv4Network if version == 4 else IPv6Network, zip(numbers, prefixes, strict=True))
    )


Builder = Callable[[int, Sequence[int], Sequence[int]], list[object]]
_MISSING: Final = object()


def _fields(value: object) -> dict[str, object]:
    """What a value holds: its slots (but the lazy classes' own _address) and instance
    fields (but hosts, which a network's constructor sets for the longest prefixes)."""
    fields = {
        name: getattr(value, name, _MISSING)
        for cls in type(value).__mro__
        for name in cls.__dict__.get("__slots__", ())
        if name not in ("__weakref__", "__dict__", "_address")
    }
    fields.update(vars(value))
    fields.pop("hosts", None)
    return fields


def agrees(plain: object, lazy: object) -> bool:
    """Whether ``lazy`` (made by C-level passes) holds what ``plain`` (made by its
    constructor from the same address and prefix length) holds once its lazy attributes
    are made: the same fields, of the same types, and ``hosts()`` giving the same."""
    if isinstance(lazy, IPv4Interface | IPv6Interface):
        lazy.network, lazy.netmask  # noqa: B018 (made now, to compare)
    else:
        lazy.network_address, lazy.netmask  # type: ignore[attr-defined]  # noqa: B018
    mine, theirs = _fields(lazy), _fields(plain)
    if mine != theirs or {k: type(v) for k, v in mine.items()} != {
        k: type(v) for k, v in theirs.items()
    }:
        return False
    if isinstance(plain, IPv4Network | IPv6Network):
        got, want = lazy.hosts(), plain.hosts()  # type: ignore[attr-defined]
        # The first few: a /0 has 2**32 (or 2**128) of them.
        if type(got) is not type(want) or list(islice(got, 3)) != list(islice(want, 3)):
            return False
    return (str(lazy), hash(lazy), lazy == plain) == (str(plain), hash(plain), True)


# Samples: a network address, host bits, the two longest prefixes, /0.
_SAMPLES: Final = (
    (4, 0xC0000200, 24),
    (4, 0xC0000201, 30),
    (4, 0xC0000202, 31),
    (4, 0xC0000201, 32),
    (4, 0, 0),
    (6, 0x20010DB8 << 96, 64),
    (6, (0x20010DB8 << 96) + 5, 126),
    (6, (0x20010DB8 << 96) + 4, 127),
    (6, (0x20010DB8 << 96) + 1, 128),
    (6, 0, 0),
)


def faithful(inets: Builder = _lazy_inets, cidrs: Builder = _lazy_cidrs) -> bool:
    """Whether the builders make what the plain constructors make, on every sample."""
    try:
        for version, number, bits in _SAMPLES:
            host_bits = number & _HOST_BITS[version][bits]
            pairs = [(_plain_inets, inets)] + ([] if host_bits else [(_plain_cidrs, cidrs)])
            for plain, lazy in pairs:
                if not agrees(
                    plain(version, [number], [bits])[0], lazy(version, [number], [bits])[0]
                ):
                    return False
    except Exception:  # any failure means: do not use the passes
        return False
    return True


FAST: Final = faithful()
"""Whether decoded values are the lazy subclasses, built by C-level passes (this
Python's ipaddress keeps the fields they set), or the plain ipaddress classes."""
_INETS: Final[Builder] = _lazy_inets if FAST else _plain_inets
_CIDRS: Final[Builder] = _lazy_cidrs if FAST else _plain_cidrs
_INTERFACE: Final[dict[int, type[Inet]]] = (
    _INTERFACES if FAST else {4: IPv4Interface, 6: IPv6Interface}
)
_NETWORK: Final[dict[int, type[Cidr]]] = _NETWORKS if FAST else {4: IPv4Network, 6: IPv6Network}


def inets(version: int, numbers: Sequence[int], prefixes: Sequence[int]) -> list[object]:
    """inet values of one IP version from addresses as integers and prefix lengths
    (each at most the address's width)."""
    return _INETS(version, numbers, prefixes)


def host_bits_at(version: int, numbers: Sequence[int], prefixes: Sequence[int]) -> int | None:
    """The index of the first address with bits set right of its mask (cidr_in's and
    network_recv's error), or None."""
    host_bits = map(and_, numbers, map(_HOST_BITS[version].__getitem__, prefixes))
    return next(compress(count(), host_bits), None)


def cidrs(version: int, numbers: Sequence[int], prefixes: Sequence[int]) -> list[object] | None:
    """cidr values as :func:`inets` makes inet values, or None when any has bits set
    right of its mask (cidr_in's and network_recv's error)."""
    if host_bits_at(version, numbers, prefixes) is not None:
        return None
    return _CIDRS(version, numbers, prefixes)


# --------------------------------------------------------------------------- converters

PGSQL_AF_INET: Final = 2
PGSQL_AF_INET6: Final = 3
_INET_HEADER: Final = struct.Struct("!BBBB")  # family, bits, is_cidr, address length
_INET_ADDR_RE: Final = re.compile(r"[0-9a-fA-F:.]++(?:/[0-9]{1,3})?")


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


def _ip_interface(text: str) -> Inet:
    # ipaddress.ip_interface() with the classes decoded values have.
    for cls in _INTERFACE.values():
        try:
            return cls(text)
        except (AddressValueError, NetmaskValueError):
            pass
    raise ValueError(f"{text!r} does not appear to be an IPv4 or IPv6 interface")


def _ip_network(text: str) -> Cidr:
    # ipaddress.ip_network(); host bits raise its ValueError.
    for cls in _NETWORK.values():
        try:
            return cls(text)
        except (AddressValueError, NetmaskValueError):
            pass
    raise ValueError(f"{text!r} does not appear to be an IPv4 or IPv6 network")


def _parse_ip(text: str, cidr: bool) -> Inet | Cidr:
    stripped = text.strip(PG_SPACE)
    if _INET_ADDR_RE.fullmatch(stripped) is None:
        raise Invalid(0, f"expected an IP address, found {text[:60]!r}")
    try:
        if cidr:
            return _ip_network(stripped)
        return _ip_interface(stripped)
    except ValueError as err:
        raise Invalid(
            0, f"invalid {'cidr' if cidr else 'inet'} value {text[:60]!r}: {err}"
        ) from err


def _inet_in(text: str) -> Inet:
    return _parse_ip(text, False)  # type: ignore[return-value]


def _cidr_in(text: str) -> Cidr:
    return _parse_ip(text, True)  # type: ignore[return-value]


def _inet_parts(value: object) -> tuple[bytes, int]:
    if isinstance(value, LazyIPv4Interface | LazyIPv6Interface):
        addr, bits = value.ip, value._prefixlen  # its network may not be made yet
    elif isinstance(value, IPv4Interface | IPv6Interface):
        addr, bits = value.ip, value.network.prefixlen
    elif isinstance(value, IPv4Address | IPv6Address):
        addr, bits = value, value.max_prefixlen
    else:
        raise type_error("inet", value, "ipaddress.IPv4Interface or IPv6Interface")
    if getattr(addr, "scope_id", None):
        raise EncodeError(f"inet has no IPv6 zone (scope id): {value}")
    return addr.packed, bits


def _cidr_parts(value: object) -> tuple[bytes, int]:
    if not isinstance(value, IPv4Network | IPv6Network):
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
    version, number = (4 if expected == 4 else 6), int.from_bytes(data[4:])
    if not cidr:
        return inets(version, [number], [bits])[0]  # type: ignore[return-value]
    made = cidrs(version, [number], [bits])
    if made is None:
        raise Invalid(4, "invalid external cidr value: bits set right of the mask")
    return made[0]  # type: ignore[return-value]


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
