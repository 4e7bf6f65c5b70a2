"""Regenerate vectors.json from a real server: ``python capture.py 'host=... user=...'``.

Each vector is what the server's typoutput (text result format) and typsend (binary
result format) produce for one SQL expression. The list of expressions is the source of
truth; the JSON is committed so the unit tests need no server.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psycopg

EXPRESSIONS: list[tuple[str, str]] = [
    ("bool", "true"),
    ("bool", "false"),
    ("int2", "-32768"),
    ("int2", "32767"),
    ("int4", "-2147483648"),
    ("int4", "42"),
    ("int8", "-9223372036854775808"),
    ("int8", "9223372036854775807"),
    ("oid", "4294967295"),
    ("oid", "0"),
    ("float4", "'1e6'"),
    ("float4", "'123456'"),
    ("float4", "'1234567'"),
    ("float4", "'0.1'"),
    ("float4", "'1e-5'"),
    ("float4", "'3.4028235e38'"),
    ("float4", "'1e-45'"),
    ("float4", "'-0'"),
    ("float4", "'NaN'"),
    ("float4", "'-Infinity'"),
    ("float4", "'16777216'"),
    ("float8", "'1e15'"),
    ("float8", "'1e14'"),
    ("float8", "'123456789012345'"),
    ("float8", "'1234567890123456'"),
    ("float8", "'0.0001'"),
    ("float8", "'1e-5'"),
    ("float8", "'0.1'"),
    ("float8", "'1e100'"),
    ("float8", "'5e-324'"),
    ("float8", "'1.7976931348623157e308'"),
    ("float8", "'-0'"),
    ("float8", "'NaN'"),
    ("float8", "'Infinity'"),
    ("float8", "'-1.5e-300'"),
    ("float8", "'3.141592653589793'"),
    ("numeric", "'0'"),
    ("numeric", "'0.00'"),
    ("numeric", "'1.50'"),
    ("numeric", "'-1.5'"),
    ("numeric", "'1e3'"),
    ("numeric", "'1e-3'"),
    ("numeric", "'12345678.9'"),
    ("numeric", "'0.0001'"),
    ("numeric", "'100000000'"),
    ("numeric", "'NaN'"),
    ("numeric", "'Infinity'"),
    ("numeric", "'-Infinity'"),
    ("numeric", "'123456789012345678901234567890.123'"),
    ("numeric", "'-0.000000001'"),
    ("text", "'héllo wörld'"),
    ("text", "''"),
    ("varchar", "'a,b'"),
    ("bpchar", "'ab'::char(4)"),
    ("name", "'pg_catalog'"),
    ('"char"', "'r'"),
    ('"char"', "''"),
    ('"char"', "'é'"),
    ("bytea", "'\\x00ff10'"),
    ("bytea", "''"),
    ("bytea", "E'a\\\\\\\\b\\\\001'"),
    ("date", "'2000-01-01'"),
    ("date", "'1999-12-31'"),
    ("date", "'0044-03-15 BC'"),
    ("date", "'4714-11-24 BC'"),
    ("date", "'5874897-12-31'"),
    ("date", "'10000-01-01'"),
    ("date", "'infinity'"),
    ("date", "'-infinity'"),
    ("time", "'00:00:00'"),
    ("time", "'23:59:59.999999'"),
    ("time", "'24:00:00'"),
    ("time", "'12:34:56.5'"),
    ("timetz", "'12:34:56+05:30'"),
    ("timetz", "'00:00:00-08'"),
    ("timetz", "'24:00:00+00'"),
    ("timetz", "'01:02:03.25+05:30:15'"),
    ("timestamp", "'2000-01-01 00:00:00'"),
    ("timestamp", "'1970-01-01 00:00:00.000001'"),
    ("timestamp", "'0001-01-01 00:00:00 BC'"),
    ("timestamp", "'294276-12-31 23:59:59.999999'"),
    ("timestamp", "'infinity'"),
    ("timestamp", "'-infinity'"),
    ("timestamp", "'2024-02-29 12:00:00.123'"),
    ("timestamptz", "'2000-01-01 00:00:00+00'"),
    ("timestamptz", "'2024-06-01 12:00:00+05:30'"),
    ("timestamptz", "'0044-03-15 12:00:00+00 BC'"),
    ("timestamptz", "'infinity'"),
    ("timestamptz", "'-infinity'"),
    ("timestamptz", "'9999-12-31 23:59:59.999999+00'"),
    ("interval", "'1 year 2 mons 3 days 04:05:06.5'"),
    ("interval", "'-1 second'"),
    ("interval", "'0'"),
    ("interval", "'-1 days +02:00:00'"),
    ("interval", "'-1 year -2 mons'"),
    ("interval", "'1 mon -1 days'"),
    ("interval", "'100 hours'"),
    ("interval", "'-0.5 seconds'"),
    ("interval", "'1 year'"),
    ("interval", "'-1 year'"),
    ("interval", "'1 day'"),
    ("interval", "'-3 days -00:00:00.000001'"),
    ("uuid", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'"),
    ("json", "'{\"a\" : [1, 2.50]}'"),
    ("jsonb", '\'{"b": 1, "a":   [1, 2.50]}\''),
    ("inet", "'192.168.0.1'"),
    ("inet", "'192.168.0.1/24'"),
    ("inet", "'::ffff:1.2.3.4'"),
    ("inet", "'::1'"),
    ("inet", "'2001:db8::1/64'"),
    ("inet", "'::2:3'"),
    ("cidr", "'10.0.0.0/8'"),
    ("cidr", "'2001:db8::/32'"),
    ("cidr", "'::ffff:0:0/96'"),
    ("cidr", "'0.0.0.0/0'"),
    ("macaddr", "'08:00:2b:01:02:03'"),
    ("int4[]", "'{1,NULL,3}'"),
    ("int4[]", "'{{1,NULL},{3,4}}'"),
    ("int4[]", "'{}'"),
    ("int4[]", "'[0:1]={5,6}'"),
    ("int4[]", "'[-2:-1][3:4]={{1,2},{3,4}}'"),
    ("text[]", "ARRAY['a b', '', 'NULL', 'null', NULL, 'x\"y', 'back\\slash', '{}', 'é', ',']"),
    ("text[]", "ARRAY[[['a']],[['b']]]"),
    ("numeric[]", "'{1.50,NaN,-Infinity}'"),
    ("float8[]", "'{1e15,NaN,-0}'"),
    ("bool[]", "'{t,f,NULL}'"),
    ("bytea[]", "ARRAY['\\x00'::bytea, NULL]"),
    ("date[]", "ARRAY['2000-01-01'::date, 'infinity', '0044-03-15 BC']"),
    ("timestamptz[]", "ARRAY['2000-01-01 00:00:00+00'::timestamptz]"),
    ("interval[]", "ARRAY['1 day'::interval, '-00:00:01']"),
    ("uuid[]", "ARRAY['a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid]"),
    ("jsonb[]", "ARRAY['{\"a\": 1}'::jsonb]"),
    ("inet[]", "ARRAY['1.2.3.4'::inet, '::1/64']"),
    ('"char"[]', "ARRAY['a'::\"char\", '\"', ' ']"),
    ("name[]", "ARRAY['x'::name]"),
    ("varchar[]", "ARRAY['NULL'::varchar]"),
    ("bpchar[]", "ARRAY['a'::char(3)]"),
    ("time[]", "ARRAY['24:00:00'::time]"),
    ("timetz[]", "ARRAY['01:00:00+01'::timetz]"),
    ("timestamp[]", "ARRAY['2000-01-01 00:00:00'::timestamp]"),
    ("int2[]", "ARRAY[1::int2]"),
    ("int8[]", "ARRAY[1::int8]"),
    ("oid[]", "ARRAY[1::oid]"),
    ("float4[]", "ARRAY['1e6'::float4]"),
    ("json[]", "ARRAY['[1]'::json]"),
    ("cidr[]", "ARRAY['10.0.0.0/8'::cidr]"),
    ("macaddr[]", "ARRAY['08:00:2b:01:02:03'::macaddr]"),
]


def capture(dsn: str) -> list[dict[str, str]]:
    out = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        version = conn.info.server_version // 10000
        for type_name, expr in EXPRESSIONS:
            sql = f"SELECT ({expr})::{type_name}"
            cur = conn.execute(sql)
            assert cur.pgresult is not None
            text = cur.pgresult.get_value(0, 0)
            oid = cur.pgresult.ftype(0)
            cur = conn.execute(sql, binary=True)
            assert cur.pgresult is not None
            binary = cur.pgresult.get_value(0, 0)
            assert text is not None and binary is not None
            out.append(
                {
                    "sql": sql,
                    "oid": oid,
                    "text": text.decode(),
                    "binary": binary.hex(),
                    "server_major": version,
                }
            )
    return out


if __name__ == "__main__":
    vectors = capture(sys.argv[1])
    path = Path(__file__).with_name("vectors.json")
    path.write_text(json.dumps(vectors, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(vectors)} vectors to {path}")
