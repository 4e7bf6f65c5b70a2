"""The input limits test_values_adversarial.py enforces, against real servers: every
version (14-17) accepts exactly the texts decode_text accepts, at the edges."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from test_values_adversarial import BUFFER_EDGES, INTERVAL_25_FIELDS

from codec.errors import DecodeError
from codec.values import decode_binary, decode_text, encode_binary, encode_text, type_by_name

pytestmark = pytest.mark.postgres

PADDING = " " * (1 << 20)

CASES: list[tuple[str, str]] = [
    *(
        (type_name, text)
        for type_name, longest, too_long in BUFFER_EDGES
        for text in (longest, too_long)
    ),
    ("interval", INTERVAL_25_FIELDS),
    ("interval", INTERVAL_25_FIELDS + " 1"),
    ("interval", "1 day " * 1000),
    ("timestamptz", PADDING + "2000-01-01 12:00:00+02" + PADDING),
    ("date", "2000-01-01" + PADDING),
    ("time", "12:00:00" + PADDING),
    ("interval", "1 day" + PADDING),
    ("date", "0" * 9 + "2000-01-01"),
    ("int4", PADDING + "42" + PADDING),
    ("int8", "0" * 100_000 + "9223372036854775807"),
    ("int8", "1" * 100_000),
    ("oid", "1_0"),
    ("float8", "1" * 100_000 + "e"),
    ("json", "1" * 200_000),
    ("jsonb", "1" * 131072),
    ("jsonb", "1" * 131073),
    ("jsonb", "1e131071"),
    ("jsonb", "1e131072"),
    ("jsonb", "0." + "1" * 16384),
    ("jsonb", "1e-16383"),
    ("jsonb", "1e-16384"),
    ("jsonb", "0e1073741824"),
    # numeric_in's exponent is bounded by the result's size, not by 1000.
    ("numeric", "1e1000"),
    ("numeric", "1e1001"),
    ("numeric", "1e+1001"),
    ("numeric", "0.01e1001"),
    ("numeric", "1e131071"),
    ("numeric", "1e131072"),
    ("numeric", "1e-1001"),
    ("numeric", "100e-1002"),
    ("numeric", "1e-16383"),
    ("numeric", "1e-16384"),
    ("numeric", "0e-16384"),
    ("numeric", "0e2000"),
    ("numeric", "0e99999999"),
    ("numeric", "1e99999999"),
    # DecodeInterval() takes each field once: a repeated unit (in any spelling) or a
    # second clock time is invalid; distinct units of one kind are not repeats.
    ("interval", "1 day 1 day"),
    ("interval", "1 day 1 d"),
    ("interval", "1 hour 1 hour"),
    ("interval", "1 min 1 minute"),
    ("interval", "1 s 1 sec"),
    ("interval", "1 year 1 mon 1 year"),
    ("interval", "1 day 12:00 13:00"),
    ("interval", "1 hour 12:00"),
    ("interval", "1.5 second 1 ms"),
    ("interval", "1.0 second 1 ms"),
    ("interval", "1 second 1 millisecond 1 microsecond"),
    ("interval", "1 week 1 day"),
    ("interval", "1 decade 1 year"),
    ("interval", "2 12:00"),
    ("interval", "1 day 2 12:00"),
    ("interval", "1.5 1 ms"),
    ("interval", "1 1 ms"),
]


@pytest.fixture(scope="module")
def conn(pg_server: Any) -> Iterator[Any]:
    with psycopg.connect(pg_server.dsn, autocommit=True) as connection:
        connection.execute("SET DateStyle = 'ISO, MDY'; SET TimeZone = 'UTC'")
        connection.execute("SET IntervalStyle = 'postgres'")
        yield connection


@pytest.mark.parametrize(
    ("type_name", "text"),
    CASES,
    ids=[f"{t}-{i}" for i, (t, _) in enumerate(CASES)],
)
def test_postgres_accepts_exactly_what_decode_text_accepts(
    conn: Any, type_name: str, text: str
) -> None:
    """Each edge case is valid for both or for neither, and a valid one prints the same."""
    oid = type_by_name(type_name).oid
    try:
        ours: str | None = encode_text(oid, decode_text(oid, text))
    except DecodeError:
        ours = None
    try:
        theirs: str | None = conn.execute(
            f"SELECT %s::text::{type_name}::text", (text,)
        ).fetchone()[0]
    except psycopg.DataError as err:  # SQLSTATE class 22: the input function refused it
        assert (err.sqlstate or "").startswith("22"), err
        theirs = None
    assert (ours is None) == (theirs is None), (ours, theirs)
    if type_name != "jsonb":  # jsonb re-prints numbers its own way; json keeps the text
        assert ours == theirs


# Numerics whose display scale asks for zeros their binary form does not hold.
SCALED = [
    "1.5::numeric(200,100)",
    "(1e131068::numeric + 0.0)",
    "round(-7::numeric, 16383)",
    "round(1e131068::numeric, 16383)",
    "0::numeric(200,100)",
    "(-25e1000::numeric + 0.000)",
    "12345.678::numeric(1000,900)",
]


def test_postgres_prints_and_sends_display_scales_as_we_encode_them(conn: Any) -> None:
    """numeric_out and numeric_send of values whose scale pads them with zeros the bytes
    do not spell: decoded from the bytes (alone and in an array), they encode to the
    server's own text and bytes, and equal what its text decodes to."""
    values = ", ".join(SCALED)
    rows = conn.execute(
        f"SELECT v::text, numeric_send(v) FROM unnest(ARRAY[{values}]) WITH ORDINALITY AS t(v, i)"
        " ORDER BY i"
    ).fetchall()
    (array,) = conn.execute(f"SELECT array_send(ARRAY[{values}])").fetchone()
    singles = []
    for text, binary in rows:
        value = decode_binary(1700, binary)
        assert encode_text(1700, value) == text
        assert encode_binary(1700, value) == binary
        assert value == decode_text(1700, text)
        singles.append(value)
    elements = decode_binary(1231, array)
    assert [repr(v) for v in elements] == [repr(v) for v in singles]
    assert encode_binary(1231, elements) == array
