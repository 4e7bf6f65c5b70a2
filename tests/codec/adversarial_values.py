"""Long hostile text inputs for ``codec.values.decode_text``, shared by the scaling test
(tests/codec/test_values_adversarial.py) and benchmarks/decode_text_adversarial.py.

Each maker returns about ``size`` characters built to make a backtracking parser try
many ways to split the same run: runs of digits, spaces, signs, separators, brackets,
quotes and backslashes, valid values followed by long padding, and arrays whose
elements are such runs. Every one is tried on every type, whatever the type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final


def _rep(unit: str, size: int) -> str:
    return unit * max(1, size // len(unit))


def _array_of(element: str, size: int) -> str:
    return "{" + ",".join([element] * max(1, size // (len(element) + 1))) + "}"


MAKERS: Final[dict[str, Callable[[int], str]]] = {
    "digits": lambda n: _rep("1", n),
    "digits then junk": lambda n: _rep("1", n) + "x",
    "spaces": lambda n: _rep(" ", n),
    "spaces then junk": lambda n: _rep(" ", n) + "x",
    "digits, spaces, junk": lambda n: _rep("1", n // 2) + _rep(" ", n // 2) + "x",
    "spaced number": lambda n: _rep(" ", n // 2) + "1" + _rep(" ", n // 2) + "x",
    "signs": lambda n: _rep("+-", n),
    "dots": lambda n: _rep(".", n),
    "digit dots": lambda n: _rep("1.", n),
    "colons": lambda n: _rep("1:", n),
    "dashes": lambda n: _rep("1-", n),
    "underscores": lambda n: _rep("1_", n),
    "letters": lambda n: _rep("a", n),
    "digit letters": lambda n: _rep("1a", n),
    "float, digits, e": lambda n: _rep("1", n) + "e",
    "float, fraction, bad e": lambda n: _rep("1", n // 2) + "." + _rep("1", n // 2) + "ex",
    "numeric, fraction, bad e": lambda n: "." + _rep("1", n) + "e-x",
    "hex": lambda n: "0x" + _rep("f", n),
    "hex pairs": lambda n: _rep("ff:", n),
    "timestamp, spaces, junk": lambda n: "2000-01-01 12:00:00" + _rep(" ", n) + "x",
    "timestamp, spaces": lambda n: "2000-01-01 12:00:00" + _rep(" ", n),
    "timestamp, spaces inside": lambda n: (
        "2000-01-01" + _rep(" ", n // 2) + "12:00:00" + _rep(" ", n // 2) + "+02 x"
    ),
    "time, spaces, junk": lambda n: "12:00:00" + _rep(" ", n) + "x",
    "timestamp, long fraction": lambda n: "2000-01-01 12:00:00." + _rep("0", n),
    "year with leading zeros": lambda n: _rep("0", n) + "2000-01-01",
    "interval fields": lambda n: _rep("1 day ", n),
    "interval numbers": lambda n: _rep("1 ", n),
    "interval, at signs": lambda n: _rep("@", n) + "1 day",
    "interval, long unit": lambda n: "1 " + _rep("a", n),
    "brackets": lambda n: _rep("[", n),
    "dimensions": lambda n: _rep("[1:2]", n) + "={}",
    "dimension, spaces": lambda n: "[" + _rep(" ", n) + "1:2]={1,2}",
    "opening braces": lambda n: _rep("{", n),
    "closing braces": lambda n: "{" + _rep("}", n),
    "quotes": lambda n: _rep('"', n),
    "quoted escapes": lambda n: '{"' + _rep('\\"', n) + '"}',
    "backslashes": lambda n: _rep("\\", n),
    "bytea hex": lambda n: "\\x" + _rep("0", n),
    "bytea hex, spaced": lambda n: "\\x" + _rep("0 0", n),
    "bytea octal": lambda n: _rep("\\000", n),
    "json array": lambda n: "[" + ",".join(["1"] * max(1, n // 2)) + "]",
    "json nesting": lambda n: _rep("[", n // 2) + _rep("]", n // 2),
    "json string": lambda n: '"' + _rep("a", n) + '"',
    # jsonb checks numbers of 16383+ digits; a search for them restarted in every run.
    "json digit runs under 16383": lambda n: (
        "[" + ",".join(["1" * 16382] * max(1, n // 16383)) + "]"
    ),
    "json escapes": lambda n: '"' + _rep("\\u00e9", n) + '"',
    "uuid brace": lambda n: "{" + _rep("0", n),
    "nested array": lambda n: "{" * 6 + ",".join(["1"] * max(1, n // 2)) + "}" * 6,
    "array of digit runs": lambda n: _array_of("1" * 50 + "e", n),
    "array of padded timestamps": lambda n: _array_of('"2000-01-01 12:00:00' + " " * 200 + 'x"', n),
    "array element, spaces": lambda n: "{1" + _rep(" ", n) + "x}",
    "array of empty quotes": lambda n: _array_of('""', n),
    "array of NULLs": lambda n: _array_of("NULL", n),
    # 9 characters that numeric_out would print as 131,000 digits, each one different.
    "array of huge exponents": lambda n: (
        "{" + ",".join(f"{i}e131000" for i in range(1, max(2, n // 10))) + "}"
    ),
    # Short texts with a different date part each: interval's by-shape conversion
    # decodes each distinct date part once, and here none repeats.
    "array of distinct day counts": lambda n: (
        "{" + ",".join(f"{i} days" for i in range(1, max(2, n // 9))) + "}"
    ),
    # IPv6 addresses, each different: no C-level parser reads them (codec may not
    # import socket), so inet and cidr read each element's groups.
    "array of distinct IPv6 addresses": lambda n: (
        "{" + ",".join(f"2001:db8:{i:x}::{i:x}/64" for i in range(1, max(2, n // 22))) + "}"
    ),
    # 150,000 distinct small numbers per MB, valid for every number type and for
    # interval (seconds): an object each where the value is one (interval's floor).
    "array of distinct numbers": lambda n: "{" + ",".join(map(str, range(1, max(2, n // 7)))) + "}",
    # Valid distinct elements and one bad one at the end: a bulk conversion declines
    # the whole array, and one element at a time it took up to 2.3 s per MB (interval).
    "array of distinct numbers, then junk": lambda n: (
        "{" + ",".join(map(str, range(1, max(2, n // 7)))) + ",x}"
    ),
    "array of distinct day counts, then junk": lambda n: (
        "{" + ",".join(f"{i} days" for i in range(1, max(2, n // 9))) + ",x}"
    ),
    "array of distinct IPv6 addresses, then junk": lambda n: (
        "{" + ",".join(f"2001:db8:{i:x}::{i:x}/64" for i in range(1, max(2, n // 22))) + ",x}"
    ),
    "array of huge exponents, then an overflow": lambda n: (
        "{" + ",".join(f"{i}e131000" for i in range(1, max(2, n // 10))) + ",1e999999}"
    ),
    # Short distinct numbers with exponents of two and three digits (141,000 per MB):
    # three digits once sent float arrays element by element, numeric's many exponents
    # each through a Decimal of its own.
    "array of distinct short exponents": lambda n: (
        "{" + ",".join(f"{100 + i % 900}e{10 + i // 900}" for i in range(max(1, n // 7))) + "}"
    ),
    # Every other number with an exponent: the element path took one form or the other
    # and went one by one through the rest (305 ms per MB for numeric).
    "array of numbers with and without exponents": lambda n: (
        "{"
        + ",".join(
            f"{100 + i % 900}" + ("e" + str(10 + i // 900)) * (i % 2) for i in range(max(1, n // 6))
        )
        + "}"
    ),
    # Shapes of valid arrays each of which took the parser's token loop or one input
    # function call per element (190-360 ms per MB) before their fast paths.
    "two-dimensional array of distinct numbers": lambda n: (
        "{" + ",".join(f"{{{2 * i},{2 * i + 1}}}" for i in range(max(1, n // 16))) + "}"
    ),
    "array of escaped elements": lambda n: (
        "{" + ",".join(f"a\\{i}" for i in range(max(1, n // 8))) + "}"
    ),
    "array of quoted and bare numbers": lambda n: (
        "{" + ",".join(f'"{i}"' if i % 2 else str(i) for i in range(max(1, n // 8))) + "}"
    ),
    "array of numbers and nulls": lambda n: (
        "{"
        + ",".join(("NULL", "null")[i % 4 // 2] if i % 2 else str(i) for i in range(max(1, n // 6)))
        + "}"
    ),
    # One field each, of three units: by shape, each number read three times (147 ms
    # per MB for interval).
    "array of distinct fields of mixed units": lambda n: (
        "{"
        + ",".join(f"{i} " + ("days", "mons", "years")[i % 3] for i in range(max(1, n // 10)))
        + "}"
    ),
    # Both IP versions: one version's read stopped at the other's first element, and
    # the rest went element by element (600 ms per MB for inet).
    "array of IPv4 then IPv6 addresses": lambda n: (
        "{"
        + ",".join([f"10.0.{i // 256}.{i % 256}" for i in range(256)][: max(1, n // 40)])
        + ","
        + ",".join(f"2001:db8::{i:x}/64" for i in range(max(1, n // 20)))
        + "}"
    ),
    # Found by a sweep of shapes: a bad element where the whole reader stops at once
    # (first) or that its bounds keep from the whole reader (bounded), each converted
    # every element before reporting it (100 ms per MB for float4, 103 for int2).
    "array beginning with an out-of-range number": lambda n: (
        "{1e39," + ",".join(map(str, range(max(1, n // 7)))) + "}"
    ),
    "array with bounds, then an out-of-range number": lambda n: (
        f"[1:{max(1, n // 7) + 1}]=" + "{" + ",".join(map(str, range(max(1, n // 7)))) + ",1e39}"
    ),
    # Exponents with leading zeros: valid, but too long for the bulk check to read once.
    "array of long exponents": lambda n: (
        "{" + ",".join(f"{i}e000000000001" for i in range(1, max(2, n // 16))) + "}"
    ),
}
"""Input name -> maker(size) -> text of about ``size`` characters."""
