"""The inet and cidr array readers of codec.values._bulk_net: ip_texts over an array's
distinct texts and ip_whole over a whole array text. Each reads IPv4 and IPv6 addresses
in network_out's form by C-level passes over all the texts joined; whatever it takes it
must decode exactly as the element input function does, and where it stops (Declined)
the values it gives for the elements before must be theirs."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_values_adversarial import _work
from test_values_bulk import _element, _exact
from test_values_net import _IPV4_TEXT, _IPV6_CANONICAL, _NEAR_IPV4, SETTINGS, _ipv6_texts

from codec.errors import DecodeError
from codec.values import _bulk_net, decode_text
from codec.values._array_text import make_text_decoder
from codec.values._bulk import BULK_TEXT
from codec.values._bulk_net import ip_texts, ip_whole
from codec.values._common import Invalid
from codec.values._net import CIDR, INET
from codec.values._ranges import BulkResult, Declined

INET_ARRAY, CIDR_ARRAY = 1041, 651
NAMES = {False: "inet", True: "cidr"}


def _agrees(texts: list[str], cidr: bool, answer: BulkResult) -> list[object] | None:
    """Assert that ``answer`` (for ``texts``) gives what the element input function
    gives each text it took; the values it gave, if any."""
    if isinstance(answer, Declined):
        assert 0 <= answer.index < len(texts), (texts, answer)
        texts, answer = texts[: answer.index], answer.before
    if answer is None:
        return None
    expected = [_element(NAMES[cidr], text) for text in texts]
    assert all(_exact(v, e) for v, e in zip(answer, expected, strict=True)), (texts, answer)
    # The slots the passes set, beyond what repr shows.
    assert [v._prefixlen for v in answer] == [e._prefixlen for e in expected]  # type: ignore[attr-defined]
    return answer


def _whole(texts: list[str], cidr: bool) -> list[object] | None:
    elements = ",".join(texts).split(",")  # a text may hold a comma
    return _agrees(elements, cidr, ip_whole("{" + ",".join(texts) + "}", cidr))


def _decoder(cidr: bool) -> Callable[[str], object]:
    """The array decoder with ip_whole as its whole reader (as _bulk.BULK_WHOLE will
    have it)."""
    element = CIDR if cidr else INET
    decode = make_text_decoder(element, BULK_TEXT[NAMES[cidr]], partial(ip_whole, cidr=cidr))
    return decode  # type: ignore[return-value]


DECODERS = {cidr: _decoder(cidr) for cidr in (False, True)}


def _outcome(decode: Callable[[str], object], text: str) -> object:
    try:
        return decode(text)
    except (DecodeError, Invalid) as err:  # Invalid: the array decoder's own
        return ("error", err.offset, err.reason)


_ANY_IP: st.SearchStrategy[str] = (
    _IPV6_CANONICAL | _ipv6_texts() | _IPV4_TEXT | _NEAR_IPV4 | st.just("NULL")
)


@settings(SETTINGS, max_examples=1000)
@given(texts=st.lists(_ANY_IP, min_size=1, max_size=6) | st.lists(_IPV6_CANONICAL, min_size=1))
def test_the_whole_reader_declines_or_agrees(texts: list[str]) -> None:
    """ip_whole gives each element's value, or declines, or stops at an element with
    the values of those before; the array decoder with it gives what it gives without
    it: the same values or the same error."""
    for cidr in (False, True):
        _whole(texts, cidr)
        text = "{" + ",".join(texts) + "}"
        oid = CIDR_ARRAY if cidr else INET_ARRAY
        assert _outcome(DECODERS[cidr], text) == _outcome(partial(decode_text, oid), text)


WITHOUT_WHOLE = {
    cidr: make_text_decoder(CIDR if cidr else INET, BULK_TEXT[NAMES[cidr]], None)
    for cidr in (False, True)
}


@settings(SETTINGS, max_examples=300)
@given(
    v4=st.lists(_IPV4_TEXT, min_size=1, max_size=4),
    v6=st.lists(_IPV6_CANONICAL | _ipv6_texts() | _NEAR_IPV4, min_size=1, max_size=4),
)
def test_both_versions_read_whole_as_without_the_whole_reader(v4: list[str], v6: list[str]) -> None:
    """An array of IPv4 then IPv6 texts gives with the whole reader (each version read
    apart, a stop's rest parsed alone) the value or error (offset and text) the array
    decoder gives without it."""
    text = "{" + ",".join(v4 + v6) + "}"
    for cidr in (False, True):
        whole = _outcome(DECODERS[cidr], text)
        assert whole == _outcome(WITHOUT_WHOLE[cidr], text), (text, cidr, whole)


# Texts the passes must take (in both readers), each with a value.
READ = [
    ["10.0.0.1/8", "192.168.0.255/24", "0.0.0.0/0", "255.255.255.255/32"],
    ["10.0.0.1", "10.0.0.2/8"],  # inet leaves out /32
    ["10.0.0.1", "10.0.0.2"],
    ["::/0", "::1/128", "::1", "1::", "1::/16", "1::2/64", "2001:db8::1/64"],
    ["1:2:3:4:5:6:7:8/128", "ffff:FFFF:0:0:0:0:0:0/9", "0:0:0:0:0:0:0:0", "abcd::/100"],
    ["1:2:3:4:5:6::/96", "::3:4:5:6:7:8/0", "1::8/99", "1:2::7:8/10"],
    ["2001:db8::", "2001:db8::1"],  # no prefix lengths at all
]
# Texts one of whose elements (the last) the passes must refuse: the element path
# gives its error, or (in forms they do not read) its value.
REFUSED = [
    "10.0.0.256/8",
    "10.0.0.01/8",
    "10.0.0.1/33",
    "10.0.0/8",
    "10.0.0.1/",
    "10.0.0.1//8",
    "1::/129",
    "1::/256",  # read as 0x0256: a carry into the byte of the prefix length before
    "1::/299",
    "1::/1000",
    "1::/0064",
    "1::/064",  # taken by the element path: a leading zero could hide a fourth digit
    "1::/",
    "1::/6a",
    "1::/1e1",
    "12345::/64",
    "1:::2/64",
    "1::2::3/64",
    ":1::/64",
    "1::2:/64",
    ":1:2:3:4:5:6:7/64",
    "1:2:3:4:5:6:7:/64",
    "1:2:3:4:5:6:7/64",
    "1:2:3:4:5:6:7:8:9/64",
    "1:2:3:4:5:6:7::/64",  # taken by the element path: "::" for one group
    "1:2:3:4::5:6:7:8/64",
    "::ffff:1.2.3.4/128",
    "fe80::1%eth0/64",
    "1::/64/64",
    "g::/64",
]


@pytest.mark.parametrize("cidr", [False, True])
@pytest.mark.parametrize("texts", READ)
def test_printed_addresses_are_read_by_the_passes(texts: list[str], cidr: bool) -> None:
    """Addresses as network_out prints them (and in upper case, or with all their
    groups) are read by the passes, by ip_texts and ip_whole alike."""
    if cidr:  # without a prefix length, a cidr text is the whole address (/32, /128)
        texts = [str(ipaddress.ip_interface(t).network) if "/" in t else t for t in texts]
    values = _agrees(texts, cidr, ip_texts(texts, cidr))
    assert values is not None and len(values) == len(texts)
    assert _whole(texts, cidr) == values


@pytest.mark.parametrize("cidr", [False, True])
@pytest.mark.parametrize("bad", REFUSED)
def test_texts_out_of_form_are_refused(bad: str, cidr: bool) -> None:
    """A text out of network_out's form, valid or not, is not read by the passes,
    wherever it is; the texts before it are (Declined with their values)."""
    v6 = ":" in bad
    good = ["2::3/128", "1::/64"] if v6 else ["10.0.0.0/8", "10.0.1.0/24"]
    texts = [*good, bad]
    for answer in (ip_texts(texts, cidr), ip_whole("{" + ",".join(texts) + "}", cidr)):
        values = _agrees(texts, cidr, answer)
        assert not isinstance(answer, list), (texts, answer)
        if isinstance(answer, Declined) and answer.index == len(good):
            assert values is not None and len(values) == len(good)
    assert ip_texts([bad], cidr) is None or isinstance(ip_texts([bad], cidr), Declined)


@pytest.mark.parametrize("cidr", [False, True])
@pytest.mark.parametrize(
    "texts",
    [
        # Nine groups and seven: as many as two addresses have, in all.
        ["1:2:3:4:5:6:7:8:9/64", "1:2:3:4:5:6:7/64"],
        ["1:2:3:4:5:6:7/64", "1:2:3:4:5:6:7:8:9/64"],
        ["1:2:3:4:5:6:7:8::/64", "1:2:3:4:5:6:7/64"],
        ["12345:1:2:3:4:5:6:7/64", "1:2:3:4:5:6:7:123/64"],
        ["1::/64/1", "2::/1"],
    ],
)
def test_two_wrongs_do_not_make_a_right(texts: list[str], cidr: bool) -> None:
    """Two texts out of form whose groups add up to those of two addresses in form are
    not read."""
    assert not isinstance(ip_texts(texts, cidr), list)
    assert not isinstance(ip_whole("{" + ",".join(texts) + "}", cidr), list)


@pytest.mark.parametrize(
    ("texts", "index"),
    [
        (["10.0.0.0/8", "10.0.0.1/8", "10.0.0.0/8"], 1),
        (["1::/16", "1::/16", "1::1/64"], 2),
        (["::1/0"], 0),
    ],
)
def test_cidr_host_bits_stop_where_they_are(texts: list[str], index: int) -> None:
    """A cidr element with bits set right of its mask (cidr_in's error) stops both
    readers there, with the values of the elements before."""
    for answer in (ip_texts(texts, True), ip_whole("{" + ",".join(texts) + "}", True)):
        assert isinstance(answer, Declined) and answer.index == index, answer
        assert answer.before == [ipaddress.ip_network(t) for t in texts[:index]]
    assert isinstance(ip_texts(texts, False), list)


@pytest.mark.parametrize("cidr", [False, True])
@pytest.mark.parametrize(
    ("texts", "bad"),
    [
        (["10.0.0.0/8", "10.0.1.0/24", "10.0.2.0/24"], "x"),
        (["1::/16", "2::/16"], "1.2.3.4/8"),  # IPv4 after IPv6: out of the IPv6 form
        (["1::/16", "2::/16"], "1::/8 "),
        (["1::/16", "2::/16"], '"1::/8"'),
    ],
)
def test_the_whole_reader_stops_at_a_character_out_of_form(
    texts: list[str], bad: str, cidr: bool
) -> None:
    """ip_whole reads the elements before the first character out of form as an
    array of their own: Declined at its element with their values."""
    array = [*texts, bad, *texts]
    answer = ip_whole("{" + ",".join(array) + "}", cidr)
    assert isinstance(answer, Declined) and answer.index == len(texts), answer
    assert _agrees(array, cidr, answer) is not None


@pytest.mark.parametrize("cidr", [False, True])
@pytest.mark.parametrize(
    ("texts", "index"),
    [
        (["100::/8", "x"], 1),
        (["100::/8", "1.0.0.0/8", "x"], 2),  # both versions, read apart
        # No colon: out of the IPv6 form, though in its characters (an IPv4 array of
        # those texts would stop at the first).
        (["1234/8", "zz::"], 0),
        (["100::/8", "1234/8", "zz::"], 1),
        (["10.0.0.0/8", "10.0.0.0/8/8", "x"], 1),
        (["10.0.0.1", "10.0.0.0/8", "10.0.0"], 2),
        (["10.0.0.0/8", "1234/8"], 1),
    ],
)
def test_the_texts_stop_at_the_first_out_of_form(texts: list[str], index: int, cidr: bool) -> None:
    """ip_texts, declining, says where: at the first text out of its version's
    characters (IPv6 with a colon) or shape (IPv4), with the values before."""
    answer = ip_texts(texts, cidr)
    assert isinstance(answer, Declined) and answer.index == index, answer
    assert _agrees(texts, cidr, answer) is not None


@settings(SETTINGS, max_examples=300)
@given(
    texts=st.lists(_IPV4_TEXT | _IPV6_CANONICAL | _ipv6_texts() | _NEAR_IPV4, min_size=2),
    cidr=st.booleans(),
)
def test_both_versions_are_read_apart_and_put_back(texts: list[str], cidr: bool) -> None:
    """IPv4 and IPv6 texts mixed are each read with their version (an IPv4 first, then
    IPv6, took the element path at 12 us an element): what the input function gives
    each, in place, or Declined at the first text in array order that stops either."""
    answer = ip_texts(texts, cidr)
    _agrees(texts, cidr, answer)
    if isinstance(answer, Declined):
        assert answer.index == texts.index(texts[answer.index])  # (its first occurrence)


def test_gaps_are_spliced_one_between_each_two_pieces() -> None:
    """The zero groups go between the pieces split at "::"; a count that does not
    match (a "::" the table did not see) declines."""
    assert _bulk_net._splice([b"1", b"2/8,3", b"4/8"], [b":0:", b":0:0:"]) == b"1:0:2/8,3:0:0:4/8"
    assert _bulk_net._splice([b"1", b"2"], []) is None
    assert _bulk_net._splice([b"1"], [b":0:"]) is None


@pytest.mark.parametrize(
    "text",
    [
        "{}",
        "{10.0.0.1}x",
        "x{10.0.0.1}",
        "{{10.0.0.1}}",
        "[1:1]={10.0.0.1}",
        "{x,10.0.0.1}",
        "{NULL,10.0.0.1}",
        "{10.0.0.1,10.0.0.1}",  # repeats
        "110.0.0.1,10.0.0.22",  # no braces: its "body" would be read
    ],
)
def test_the_whole_reader_leaves_other_arrays_to_the_parser(text: str) -> None:
    """Empty, nested, bounded or decorated arrays, a bad first element, NULL, and
    arrays whose elements repeat (the table converts each distinct text once) are
    left to the array parser."""
    assert ip_whole(text, False) is None
    assert ip_whole(text, True) is None


def test_repeats_are_looked_for_in_the_first_elements() -> None:
    """An array whose first elements mostly repeat is left to the table; one whose
    first elements differ is read whole, repeats after them or not."""
    distinct = [f"10.0.{i // 256}.{i % 256}/32" for i in range(200)]
    assert ip_whole("{" + ",".join(["10.0.0.1"] * 200) + "}", False) is None
    assert ip_whole("{" + ",".join(distinct[:40] * 5) + "}", False) is None
    values = ip_whole("{" + ",".join(distinct + ["10.0.0.1"] * 200) + "}", False)
    assert isinstance(values, list) and len(values) == 400


class _Reads:
    """_bulk_net._read, counting the elements of each call."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sizes: list[int] = []
        read = _bulk_net._read

        def counted(joined: str, n: int, cidr: bool) -> BulkResult:
            self.sizes.append(n)
            return read(joined, n, cidr)

        monkeypatch.setattr(_bulk_net, "_read", counted)


@pytest.mark.parametrize("cidr", [False, True])
def test_a_bad_first_element_is_found_without_reading_all(
    monkeypatch: pytest.MonkeyPatch, cidr: bool
) -> None:
    """Past 32 elements, both readers read the first alone first: a bad one (an
    array's error, there, often: a hostile array) costs no pass over them all."""
    reads = _Reads(monkeypatch)
    texts = ["1::1/64", *(f"{i:x}::/64" for i in range(1, 100))]
    bad = ["x", *texts[1:]]
    assert ip_texts(bad, cidr) == Declined(0)
    assert ip_whole("{" + ",".join(bad) + "}", cidr) is None
    if cidr:  # host bits
        assert ip_texts(texts, cidr) == Declined(0)
        assert ip_whole("{" + ",".join(texts) + "}", cidr) is None
    assert max(reads.sizes) == 1
    assert isinstance(ip_texts(texts[1:], cidr), list)
    assert max(reads.sizes) == 99


# --------------------------------------------------------------------------- work


def _addresses(version: int, cidr: bool, count: int) -> str:
    if version == 4:
        texts = [
            f"10.{i >> 8 & 255}.{i & 255}.{0 if cidr else 1}/{24 if cidr else 8}"
            for i in range(count)
        ]
    else:
        texts = [f"2001:db8:{i:x}::{'' if cidr else f'{i:x}'}/64" for i in range(count)]
    return "{" + ",".join(texts) + "}"


@pytest.mark.parametrize("cidr", [False, True])
@pytest.mark.parametrize("version", [4, 6])
@pytest.mark.parametrize("junk", ["", ",x"])
def test_work_of_the_whole_reader_does_not_grow_with_elements(
    version: int, cidr: bool, junk: str
) -> None:
    """1024 distinct elements (and then a bad one) take the Python-level work of 64:
    every pass is a C call over all of them."""

    def work(count: int) -> int:
        text = _addresses(version, cidr, count)[:-1] + junk + "}"
        return _work(0, text, lambda _oid, t: _outcome(DECODERS[cidr], t))

    few, many = work(64), work(1024)
    assert many <= few + 60, (few, many)
