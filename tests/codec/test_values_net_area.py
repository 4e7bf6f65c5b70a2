"""Binary inet and cidr arrays read from their whole element area
(codec.values._bulk_net.ip_area): the values each element's network_recv gives, or a
decline wherever it is unsure."""

from __future__ import annotations

from ipaddress import IPv4Interface, IPv4Network, IPv6Interface, IPv6Network, ip_interface

from hypothesis import given
from hypothesis import strategies as st

from codec.errors import DecodeError
from codec.values import decode_binary, encode_binary, type_by_name
from codec.values._bulk_net import ip_area

_V4 = st.tuples(st.just(4), st.integers(0, 2**32 - 1), st.integers(0, 32))
_V6 = st.tuples(st.just(6), st.integers(0, 2**128 - 1), st.integers(0, 128))
_INTERFACE = {4: IPv4Interface, 6: IPv6Interface}
_NETWORK = {4: IPv4Network, 6: IPv6Network}


def _elements(data: bytes) -> list[object]:
    """Each element of a one-dimensional binary array decoded on its own."""
    oid = int.from_bytes(data[8:12], "big")
    count = int.from_bytes(data[12:16], "big")
    pos, values = 20, []
    for _ in range(count):
        length = int.from_bytes(data[pos : pos + 4], "big", signed=True)
        values.append(decode_binary(oid, data[pos + 4 : pos + 4 + length]))
        pos += 4 + length
    return values


@given(st.lists(_V4, min_size=1, max_size=20) | st.lists(_V6, min_size=1, max_size=20))
def test_inet_areas_read_as_each_element(pairs: list[tuple[int, int, int]]) -> None:
    info = type_by_name("inet")
    values = [_INTERFACE[v]((number, bits)) for v, number, bits in pairs]
    data = encode_binary(info.array_oid, values)
    read = ip_area(data, 20, len(values), cidr=False)
    assert read == _elements(data) == values
    assert decode_binary(info.array_oid, data) == values


@given(st.lists(_V4, min_size=1, max_size=20) | st.lists(_V6, min_size=1, max_size=20))
def test_cidr_areas_read_as_each_element_or_decline_host_bits(
    pairs: list[tuple[int, int, int]],
) -> None:
    info = type_by_name("cidr")
    networks = [_NETWORK[v]((number, bits), strict=False) for v, number, bits in pairs]
    data = bytearray(encode_binary(info.array_oid, networks))
    assert ip_area(bytes(data), 20, len(networks), cidr=True) == networks
    # The address with host bits set (network_recv refuses it): declined.
    pos = 20
    for network in networks:
        size = 4 if isinstance(network, IPv4Network) else 16
        if network.prefixlen < 8 * size:
            data[pos + 8 + size - 1] |= 1
            assert ip_area(bytes(data), 20, len(networks), cidr=True) is None
            try:
                decode_binary(info.array_oid, bytes(data))
            except DecodeError:
                pass
            else:
                raise AssertionError("host bits accepted")
            return
        pos += 4 + 4 + size
    assert all(n.prefixlen == (32 if isinstance(n, IPv4Network) else 128) for n in networks)
    assert not any(isinstance(n, IPv6Network) and n.prefixlen < 128 for n in networks)


def test_mixed_versions_bad_headers_and_nulls_decline() -> None:
    oid = type_by_name("inet").array_oid
    mixed = encode_binary(oid, [ip_interface("10.0.0.1/8"), ip_interface("::1/128")])
    assert ip_area(mixed, 20, 2, cidr=False) is None
    with_null = encode_binary(oid, [ip_interface("10.0.0.1/8"), None])
    assert ip_area(with_null, 20, 2, cidr=False) is None
    good = bytearray(encode_binary(oid, [ip_interface("10.0.0.1/8")] * 3))
    for offset, byte in ((24, 3), (25, 33), (27, 16), (23, 9)):  # family, bits, size, length
        bad = bytearray(good)
        bad[offset] = byte
        assert ip_area(bytes(bad), 20, 3, cidr=False) is None, offset
