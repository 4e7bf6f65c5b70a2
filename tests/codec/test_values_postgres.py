"""codec.values against real servers: what we print and send is what PostgreSQL prints
and sends for the same value, on every provisioned version (14-17)."""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_values_vectors import VECTORS, same

from codec.errors import DecodeError
from codec.strategies.values import values_for
from codec.values import (
    INFINITY,
    NEG_INFINITY,
    TYPES,
    decode_binary,
    decode_text,
    encode_binary,
    encode_text,
)

pytestmark = pytest.mark.postgres

# The settings a walsender session has by default, made explicit so a server with
# different defaults in postgresql.conf still prints what the codec prints.
SESSION = (
    "SET DateStyle = 'ISO, MDY'; SET IntervalStyle = 'postgres'; SET extra_float_digits = 1;"
    " SET bytea_output = 'hex'; SET TimeZone = 'UTC'"
)
ALL_OIDS = sorted(TYPES)


@pytest.fixture(scope="module")
def conn(pg_server: Any) -> Iterator[Any]:
    with psycopg.connect(pg_server.dsn, autocommit=True) as connection:
        connection.execute(SESSION)
        yield connection


def _server(conn: Any, sql: str, *params: object) -> tuple[str, bytes]:
    """(typoutput text, typsend bytes) of the single value ``sql`` selects."""
    text = conn.execute(sql, params).pgresult.get_value(0, 0)
    binary = conn.execute(sql, params, binary=True).pgresult.get_value(0, 0)
    return text.decode(), binary


@pytest.mark.parametrize("vector", VECTORS, ids=[v["sql"] for v in VECTORS])
def test_captured_vectors_hold_on_every_version(
    conn: Any, pg_server: Any, vector: dict[str, Any]
) -> None:
    """The committed vectors (captured on 15) decode to what this server produces now."""
    if pg_server.version < 15 and vector["oid"] in (18, 1002) and not vector["sql"].isascii():
        # Before PostgreSQL 15 charout() printed a non-ASCII "char" as the raw byte, not as
        # an octal escape (15 changed it so the output is valid in any encoding): only the
        # binary form still matches, and the text is the bare byte.
        raw = conn.execute(vector["sql"]).pgresult.get_value(0, 0)
        binary = conn.execute(vector["sql"], binary=True).pgresult.get_value(0, 0)
        assert binary == bytes.fromhex(vector["binary"])
        assert raw == binary != vector["text"].encode()
        return
    text, binary = _server(conn, vector["sql"])
    assert same(decode_text(vector["oid"], text), decode_binary(vector["oid"], binary))
    assert encode_text(vector["oid"], decode_binary(vector["oid"], binary)) == text
    assert encode_binary(vector["oid"], decode_text(vector["oid"], text)) == binary


def _supported(version: int, oid: int, value: object) -> bool:
    """Values older servers cannot take or print differently (see module docs)."""
    info = TYPES[oid]
    base = info.element_oid or oid
    if base == 1186:
        flat = _flat(value)
        # PostgreSQL cannot read back its own output for microseconds = INT64_MIN
        # ("-2562047788:00:54.775808" is out of range on input).
        if any(getattr(v, "microseconds", 0) == -(1 << 63) for v in flat):
            return False
        # Before PostgreSQL 15 the hours of an interval were an int on input and output
        # (struct pg_tm), so larger intervals were "out of range" there.
        if version < 15 and any(
            abs(getattr(v, "microseconds", 0)) >= (1 << 31) * 3_600_000_000 for v in flat
        ):
            return False
        if version < 17:  # interval infinity arrived in PostgreSQL 17
            return INFINITY not in flat and NEG_INFINITY not in flat
    if base in (700, 701):
        # A NaN's sign and payload survive binary but not text: the server reads "NaN"
        # as its one canonical NaN.
        fmt = "!f" if base == 700 else "!d"
        canonical = struct.pack(fmt, math.nan)
        return all(
            not (isinstance(v, float) and math.isnan(v)) or struct.pack(fmt, v) == canonical
            for v in _flat(value)
        )
    if base == 18 and version < 15:  # charout printed high-bit bytes raw before 15
        return all(v is None or ord(v or "\0") < 128 for v in _flat(value))
    return True


def _flat(value: object) -> list[object]:
    elements = getattr(value, "elements", value)
    if isinstance(elements, list):
        return [x for item in elements for x in _flat(item)]
    return [value]


@pytest.mark.parametrize("oid", ALL_OIDS, ids=[TYPES[o].name for o in ALL_OIDS])
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_server_agrees_on_random_values(
    conn: Any, pg_server: Any, oid: int, data: st.DataObject
) -> None:
    """PostgreSQL parses our text output and prints and sends exactly what we do."""
    value = data.draw(values_for(oid))
    assume(_supported(pg_server.version, oid, value))
    # The pg_type name, quoted: format_type() says "character", which means char(1).
    sql_type = f'pg_catalog."{TYPES[oid].name}"'
    text, binary = _server(conn, f"SELECT %s::text::{sql_type}", encode_text(oid, value))
    base = TYPES[oid].element_oid or oid
    if base == 3802:
        # jsonb: the server normalises spacing and key order, which the codec does not
        # re-implement; the server's own text and binary must still agree.
        assert same(decode_text(oid, text), decode_binary(oid, binary))
        assert encode_binary(oid, decode_text(oid, text)) == binary
        return
    assert text == encode_text(oid, value)
    assert binary == encode_binary(oid, value)


@pytest.mark.parametrize("code_point", [0xD800, 0xDFFF])
def test_server_refuses_surrogates_as_utf8(conn: Any, code_point: int) -> None:
    """The UTF-8-style bytes of a surrogate are invalid UTF8 to PostgreSQL (22021), so
    no text value holds one, which is why decode_text refuses a str with one."""
    raw = chr(code_point).encode("utf-8", "surrogatepass")
    with pytest.raises(psycopg.errors.CharacterNotInRepertoire):
        conn.execute("SELECT convert_from(%s::bytea, 'UTF8')", [raw])
    with pytest.raises(DecodeError):
        decode_text(25, raw.decode("utf-8", "surrogatepass"))
