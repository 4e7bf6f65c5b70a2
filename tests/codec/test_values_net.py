"""inet and cidr decode to subclasses of the ipaddress classes whose derived attributes
are made on first access (codec.values._net), built by C-level passes in arrays: every
path gives the same class, and each value behaves exactly as the plain ipaddress value
of the same text."""

from __future__ import annotations

import copy
import ipaddress
import pickle
from ipaddress import IPv4Interface, IPv4Network, IPv6Interface, IPv6Network
from itertools import islice
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_values_adversarial import _work
from test_values_bulk import _check_bulk

from codec.errors import DecodeError
from codec.values import (
    LazyIPv4Interface,
    LazyIPv4Network,
    LazyIPv6Interface,
    LazyIPv6Network,
    _net,
    decode_binary,
    decode_text,
    encode_binary,
    encode_text,
)
from codec.values._bulk import BULK_TEXT
from codec.values._net import FAST, agrees, cidrs, faithful, inets
from codec.values._ranges import Declined

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
INET, CIDR, INET_ARRAY, CIDR_ARRAY = 869, 650, 1041, 651
Plain = IPv4Interface | IPv6Interface | IPv4Network | IPv6Network

# Public attributes of each kind of value (ipv6_mapped is 3.13's).
ADDRESS_ATTRS = [
    "compressed",
    "exploded",
    "is_global",
    "is_link_local",
    "is_loopback",
    "is_multicast",
    "is_private",
    "is_reserved",
    "is_unspecified",
    "max_prefixlen",
    "packed",
    "reverse_pointer",
    "version",
]
V6_ATTRS = ["ipv4_mapped", "is_site_local", "scope_id", "sixtofour", "teredo"]
INTERFACE_ATTRS = [
    *ADDRESS_ATTRS,
    "hostmask",
    "ip",
    "netmask",
    "network",
    "with_hostmask",
    "with_netmask",
    "with_prefixlen",
]
NETWORK_ATTRS = [
    *(a for a in ADDRESS_ATTRS if a not in ("packed", "reverse_pointer")),
    "broadcast_address",
    "hostmask",
    "netmask",
    "network_address",
    "num_addresses",
    "prefixlen",
    "with_hostmask",
    "with_netmask",
    "with_prefixlen",
]
LAZY = {
    IPv4Interface: LazyIPv4Interface,
    IPv6Interface: LazyIPv6Interface,
    IPv4Network: LazyIPv4Network,
    IPv6Network: LazyIPv6Network,
}


@st.composite
def plain_values(draw: st.DrawFn, cidr: bool, version: int | None = None) -> Plain:
    """A plain ipaddress inet or cidr value; prefix lengths near the width are drawn
    often (the constructors treat the two longest specially)."""
    version = version or draw(st.sampled_from([4, 6]))
    width = 32 if version == 4 else 128
    number = draw(st.integers(0, (1 << width) - 1))
    bits = draw(st.integers(0, width) | st.sampled_from([0, width - 1, width]))
    if cidr:
        number &= ~((1 << (width - bits)) - 1)
        return (IPv4Network if version == 4 else IPv6Network)((number, bits))
    return (IPv4Interface if version == 4 else IPv6Interface)((number, bits))


def _path_values(plain: Plain, others: list[Plain]) -> dict[str, object]:
    """The decoded value of ``plain`` by each path: scalar text and binary, and as an
    array element among ``others`` of the same version (text arrays of IPv4 and binary
    arrays of either version go through codec.values._bulk)."""
    cidr = isinstance(plain, IPv4Network | IPv6Network)
    oid, array_oid = (CIDR, CIDR_ARRAY) if cidr else (INET, INET_ARRAY)
    array = [plain, *others]
    text_array = decode_text(array_oid, encode_text(array_oid, array))
    binary_array = decode_binary(array_oid, encode_binary(array_oid, array))
    return {
        "text": decode_text(oid, encode_text(oid, plain)),
        "str": decode_text(oid, str(plain)),
        "binary": decode_binary(oid, encode_binary(oid, plain)),
        "text array": text_array[0],  # type: ignore[index]
        "binary array": binary_array[0],  # type: ignore[index]
        "passes": (cidrs if cidr else inets)(  # type: ignore[index]
            plain.version, [int(_address(plain))], [_prefixlen(plain)]
        )[0],
    }


def _address(value: Plain) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return value.network_address if isinstance(value, IPv4Network | IPv6Network) else value.ip


def _prefixlen(value: Plain) -> int:
    return (
        value.prefixlen if isinstance(value, IPv4Network | IPv6Network) else value.network.prefixlen
    )


def _results(value: Any, names: list[str]) -> list[tuple[str, type, object]]:
    """Each attribute's type and value, or the exception it raises."""
    out: list[tuple[str, type, object]] = []
    for name in names:
        try:
            got = getattr(value, name)
        except Exception as err:  # the plain value's exception must match
            out.append((name, type(err), str(err)))
        else:
            out.append((name, type(got), got))
    return out


def _hosts(value: Any) -> tuple[type, list[object]]:
    hosts = value.hosts()
    return type(hosts), list(islice(hosts, 5))


def _assert_behaves_as(got: Any, plain: Any, order: list[str], others: list[Plain]) -> None:
    assert type(got) is (LAZY[type(plain)] if FAST else type(plain))
    assert isinstance(got, type(plain))
    assert got == plain and plain == got and (got != plain) is False
    assert hash(got) == hash(plain)
    assert str(got) == str(plain) and format(got) == format(plain)
    assert repr(got) == repr(plain).replace(type(plain).__name__, type(got).__name__, 1)
    # Attributes read in a drawn order: lazy ones may be made by any of the others.
    assert _results(got, order) == _results(plain, order)
    if isinstance(plain, IPv4Network | IPv6Network):
        assert _hosts(got) == _hosts(plain)
        if plain.num_addresses <= 4:
            assert list(got.hosts()) == list(plain.hosts())
            assert list(got) == list(plain)
        assert got.overlaps(plain) and got.subnet_of(plain) and got.supernet_of(plain)
        assert got.compare_networks(plain) == 0
        assert _address(plain) in got
    # Ordering among plain values of the same version, either side of the operator.
    for other in others:
        mine = (got < other, other < got, got <= other, got > other)
        assert mine == (plain < other, other < plain, plain <= other, plain > other)
    mixed = sorted([got, *others])
    assert [str(v) for v in mixed] == [str(v) for v in sorted([plain, *others])]
    for clone in (copy.copy(got), copy.deepcopy(got), pickle.loads(pickle.dumps(got))):
        assert type(clone) is type(got) and clone == plain and str(clone) == str(plain)
        assert _results(clone, order) == _results(plain, order)


def _check(data: st.DataObject, cidr: bool) -> None:
    plain = data.draw(plain_values(cidr))
    others = data.draw(st.lists(plain_values(cidr, plain.version), max_size=4))
    names = NETWORK_ATTRS if cidr else INTERFACE_ATTRS
    names = names + (V6_ATTRS if plain.version == 6 and not cidr else [])
    for path, got in _path_values(plain, others).items():
        order = data.draw(st.permutations(names), label=path)
        _assert_behaves_as(got, plain, order, others)


@SETTINGS
@given(data=st.data())
def test_inet_values_behave_as_ipaddress_interfaces(data: st.DataObject) -> None:
    """An inet from scalar text or binary, from a text or binary array, or from the
    passes, is an IPv4Interface / IPv6Interface equal, hashed, ordered, printed, copied
    and pickled as the plain one, with the same value for every public attribute."""
    _check(data, cidr=False)


@SETTINGS
@given(data=st.data())
def test_cidr_values_behave_as_ipaddress_networks(data: st.DataObject) -> None:
    """A cidr from any path is an IPv4Network / IPv6Network that behaves as the plain
    one, hosts() included for /31, /32, /127 and /128 (whose constructor sets an
    instance hosts)."""
    _check(data, cidr=True)


@pytest.mark.parametrize(
    "text", ["10.0.0.2/31", "10.0.0.1/32", "0.0.0.0/0", "2001:db8::/127", "2001:db8::1/128", "::/0"]
)
def test_hosts_of_the_longest_prefixes(text: str) -> None:
    """hosts() of a /31 or /127 is every address, of a /32 or /128 its one address, in
    the plain constructor's type (a generator, a list), whichever path made the value."""
    plain = ipaddress.ip_network(text)
    for got in _path_values(plain, []).values():
        assert _hosts(got) == _hosts(plain)


def test_encoding_takes_plain_values_and_does_not_make_the_network() -> None:
    """encode_text / encode_binary take the plain classes and the subclasses alike, and
    encoding a decoded inet leaves its network unmade."""
    for oid, text in [(INET, "10.1.2.3/8"), (INET, "::ffff:1.2.3.4"), (CIDR, "2001:db8::/32")]:
        value = decode_binary(oid, encode_binary(oid, decode_text(oid, text)))
        plain = (ipaddress.ip_network if oid == CIDR else ipaddress.ip_interface)(text)
        assert encode_text(oid, value) == encode_text(oid, plain) == text
        assert encode_binary(oid, value) == encode_binary(oid, plain)
        assert "network" not in vars(value) and "netmask" not in vars(value)


@pytest.mark.parametrize(
    ("array_oid", "data"),
    [
        (CIDR_ARRAY, "{10.0.0.0/8,10.0.0.1/24}"),
        (CIDR_ARRAY, "{10.0.0.0/8,10.0.0.1/32,11.0.0.0/7}"),
    ],
)
def test_cidr_host_bits_in_text_arrays(array_oid: int, data: str) -> None:
    """An element with bits right of its mask fails the array with cidr_in's error."""
    with pytest.raises(DecodeError, match="has host bits set"):
        decode_text(array_oid, data)


@pytest.mark.parametrize("network", ["10.0.0.0/8", "a00::/8"])
def test_cidr_host_bits_in_binary_arrays(network: str) -> None:
    """A binary cidr element with bits right of its mask fails as network_recv does,
    alone or in an array of its IP version."""
    good = encode_binary(CIDR, ipaddress.ip_network(network))
    bad = good[:-1] + b"\x01"
    with pytest.raises(DecodeError, match="bits set right of the mask"):
        decode_binary(CIDR, bad)
    array = encode_binary(CIDR_ARRAY, [ipaddress.ip_network(network)] * 2)
    with pytest.raises(DecodeError, match="bits set right of the mask"):
        decode_binary(CIDR_ARRAY, array.replace(good, bad, 1))


# Octets and prefix lengths at and past the edges of their ranges and forms.
_OCTET: st.SearchStrategy[str] = st.sampled_from(
    [
        "0",
        "1",
        "9",
        "10",
        "99",
        "100",
        "199",
        "200",
        "249",
        "250",
        "255",
        "256",
        "300",
        "00",
        "07",
        " 1",
        "-1",
        "1e2",
    ]
)
_BITS: st.SearchStrategy[str] = st.sampled_from(
    [
        "",
        "/0",
        "/9",
        "/10",
        "/29",
        "/31",
        "/32",
        "/33",
        "/34",
        "/08",
        "/00",
        "/",
        "/-1",
        "/ 8",
        "/8 ",
        ",",
    ]
)
_IPV4_TEXT: st.SearchStrategy[str] = st.builds("{}.{}.{}.{}{}".format, *[_OCTET] * 4, _BITS)
# Near misses: the characters of the form, and the ones JSON would also read.
_NEAR_IPV4: st.SearchStrategy[str] = st.text(alphabet="0123456789./,- e+", max_size=20)


@settings(SETTINGS, max_examples=1000)
@given(
    texts=st.lists(_IPV4_TEXT, min_size=1, max_size=3)
    | st.lists(_IPV4_TEXT | _NEAR_IPV4, min_size=1)
)
def test_the_ipv4_fast_path_declines_or_agrees(texts: list[str]) -> None:
    """The text fast path (shape by deleting digits, numbers by JSON) declines any
    list holding a text outside network_out's form, and otherwise gives what each
    text's input function gives."""
    _check_bulk("inet", texts)
    _check_bulk("cidr", texts)


@st.composite
def _ipv6_texts(draw: st.DrawFn) -> str:
    """IPv6 texts as network_out prints them (groups of zeros compressed, or not),
    upper case, and with their edges broken: a group too long or empty, a second
    "::", a stray ":", a dotted tail, a zone, prefix lengths past 128 or of four digits."""
    groups = draw(
        st.lists(
            st.sampled_from(["0", "1", "db8", "ffff", "FfFf", "00", "0001", "12345", ""]),
            min_size=1,
            max_size=9,
        )
    )
    text = ":".join(groups)
    if draw(st.booleans()):
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(["::", ":", ":::", "::1::"])) + text[at:]
    if draw(st.integers(0, 9)) == 0:
        text += draw(st.sampled_from([":1.2.3.4", "%eth0", ".", " "]))
    return text + draw(
        st.sampled_from(["", "/0", "/64", "/127", "/128", "/129", "/064", "/0064", "/", "/6a"])
    )


_IPV6_CANONICAL: st.SearchStrategy[str] = st.builds(
    lambda number, bits: str(ipaddress.ip_interface((number, bits))),
    st.integers(0, (1 << 128) - 1) | st.integers(0, 1 << 16).map(lambda n: n << 64),
    st.integers(0, 128),
)


@settings(SETTINGS, max_examples=1000)
@given(texts=st.lists(_IPV6_CANONICAL | _ipv6_texts(), min_size=1, max_size=4))
def test_the_ipv6_fast_path_declines_or_agrees(texts: list[str]) -> None:
    """The IPv6 text path (groups padded and read as one hex number) declines any list
    holding a text ipaddress or inet_in's pattern would refuse, and otherwise gives
    what each text's input function gives."""
    _check_bulk("inet", texts)
    _check_bulk("cidr", texts)


def test_ipv6_text_arrays_take_the_fast_path() -> None:
    """Canonical IPv6 texts, compressed at the start, middle and end, with and without
    a prefix length, are read by the fast path (not element by element)."""
    texts = ["::", "::1", "2001:db8::", "2001:db8::1/64", "1:2:3:4:5:6:7:8", "fe80::/10"]
    values = BULK_TEXT["inet"](texts)
    assert values == [ipaddress.ip_interface(t) for t in texts]
    assert BULK_TEXT["cidr"](["::/0", "2001:db8::/32", "::1/128"]) == [
        ipaddress.ip_network(t) for t in ["::/0", "2001:db8::/32", "::1/128"]
    ]
    # Host bits: cidr_in's error, where the conversion stops.
    assert BULK_TEXT["cidr"](["2001:db8::1/32"]) == Declined(0, [])


def test_binary_arrays_mixing_ip_versions() -> None:
    """A binary array of IPv4 and IPv6 elements (not one size) decodes element by
    element to the same classes."""
    values = [ipaddress.ip_interface("10.0.0.1/8"), ipaddress.ip_interface("::1/64")]
    got = decode_binary(INET_ARRAY, encode_binary(INET_ARRAY, values))
    assert got == values
    assert [type(v) for v in got] == [LazyIPv4Interface, LazyIPv6Interface]


# --------------------------------------------------------------------------- the guard


def test_the_guard_holds_on_this_python() -> None:
    """On the Python the project runs on, the passes make what the constructors make."""
    assert FAST
    assert faithful()


def test_the_guard_refuses_a_constructor_that_sets_another_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """If ipaddress's constructors set a field the passes do not (another Python), the
    guard refuses the passes, so decoding falls back to the plain constructors."""
    original = IPv4Network.__init__

    def init(self: IPv4Network, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self._cached_hash = 0  # type: ignore[attr-defined]

    monkeypatch.setattr(IPv4Network, "__init__", init)
    assert not faithful()


def test_the_guard_refuses_passes_that_miss_or_break_a_field() -> None:
    """A builder leaving out a field, or setting a wrong one, fails the guard."""

    def no_prefix(version: int, numbers: Any, prefixes: Any) -> list[object]:
        made = _net._lazy_inets(version, numbers, prefixes)
        for value in made:
            del value._prefixlen  # type: ignore[attr-defined]
        return made

    def wrong_prefix(version: int, numbers: Any, prefixes: Any) -> list[object]:
        return _net._lazy_inets(version, numbers, [p // 2 for p in prefixes])

    assert not faithful(inets=no_prefix)
    assert not faithful(inets=wrong_prefix)
    assert not faithful(cidrs=wrong_prefix)


def test_agrees_compares_fields_slots_and_hosts() -> None:
    """agrees() sees an extra instance field, a different slot and a different hosts()."""
    lazy = inets(4, [0x0A000001], [24])[0]
    plain = IPv4Interface((0x0A000001, 24))
    assert agrees(plain, lazy)
    plain.extra = 1  # type: ignore[attr-defined]
    assert not agrees(plain, inets(4, [0x0A000001], [24])[0])
    assert agrees(IPv6Interface((5, 64)), inets(6, [5], [64])[0])
    zoned = IPv6Interface("fe80::1%eth0/64")
    assert not agrees(zoned, inets(6, [int(zoned.ip)], [64])[0])
    network: Any = cidrs(4, [0x0A000000], [31])[0]  # type: ignore[index]
    network.hosts = lambda: []
    assert not agrees(IPv4Network((0x0A000000, 31)), network)


@pytest.mark.parametrize("cidr", [False, True])
def test_the_fallback_builds_the_plain_classes(cidr: bool) -> None:
    """The plain constructors the guard falls back to give equal values."""
    build, plain = (
        (_net._lazy_cidrs, _net._plain_cidrs) if cidr else (_net._lazy_inets, _net._plain_inets)
    )
    for version, numbers, prefixes in [(4, [0x0A000000, 0], [8, 0]), (6, [1 << 120, 1], [8, 128])]:
        made = plain(version, numbers, prefixes)
        assert made == build(version, numbers, prefixes)
        assert {type(v) for v in made} <= {IPv4Interface, IPv6Interface, IPv4Network, IPv6Network}


# --------------------------------------------------------------------------- work

IPADDRESS_FILE = str(Path(ipaddress.__file__).resolve())
FEW, MANY, FIXED_WORK = 64, 1024, 60


def _distinct(cidr: bool, version: int, i: int) -> Plain:
    if version == 4:
        number, bits = (10 << 24) + (i << 8) + (0 if cidr else i % 7), 24
    else:
        number, bits = (0x20010DB8 << 96) + (i << 64) + (0 if cidr else i), 64
    return (
        (IPv4Network if cidr else IPv4Interface)((number, bits))
        if version == 4
        else ((IPv6Network if cidr else IPv6Interface)((number, bits)))
    )


@pytest.mark.parametrize(
    ("cidr", "version", "binary"),
    [
        (False, 4, False),
        (True, 4, False),
        (False, 4, True),
        (True, 4, True),
        (False, 6, True),
        (True, 6, True),
    ],
    ids=["inet text", "cidr text", "inet binary", "cidr binary", "inet6 binary", "cidr6 binary"],
)
def test_work_including_ipaddress_does_not_grow_with_distinct_elements(
    cidr: bool, version: int, binary: bool
) -> None:
    """1024 distinct IPv4 elements of a text array, or IPv4 or IPv6 elements of a binary
    array, take the Python-level work of 64, counting ipaddress's own code: no
    constructor runs per element (they made inet/cidr arrays 170-470 ms per MB)."""
    oid = CIDR_ARRAY if cidr else INET_ARRAY
    encode, decode = (encode_binary, decode_binary) if binary else (encode_text, decode_text)

    def work(n: int) -> int:
        return _work(
            oid,
            encode(oid, [_distinct(cidr, version, i) for i in range(n)]),
            decode,
            also=IPADDRESS_FILE,  # its constructors are the cost codec.values alone misses
        )

    few, many = work(FEW), work(MANY)
    assert many <= few + FIXED_WORK, (few, many)
