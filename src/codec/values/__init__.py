"""PostgreSQL values: LSNs, timestamps and the built-in types, in text and binary form.

``decode_text`` / ``encode_text`` are PostgreSQL's typinput / typoutput, and
``decode_binary`` / ``encode_binary`` its typreceive / typsend, for the built-in types
in :data:`TYPES` and one- or multi-dimensional arrays of them. Output is byte for byte
what a walsender session prints with its default settings: DateStyle ``ISO, MDY``,
IntervalStyle ``postgres``, ``extra_float_digits = 1`` (shortest round-trip floats),
``bytea_output = hex`` and TimeZone UTC. Any input either decodes or raises
:class:`~codec.errors.DecodeError`; any bad Python value raises
:class:`~codec.errors.EncodeError`.

Python values, by type:

======================  ===========================================================
bool                    ``bool``
int2, int4, int8, oid   ``int`` (``bool`` is refused: it is almost always a mistake)
float4, float8          ``float`` (NaN and the infinities included; float4 values
                        must be exactly representable in 32 bits)
numeric                 ``decimal.Decimal``; the exponent carries the display scale,
                        so ``Decimal("1.50")`` <-> ``1.50``; NaN and +-Infinity
text, varchar, bpchar,  ``str`` (bpchar keeps its padding)
name
"char"                  ``str`` of length 1 (code point = the byte, 1-255) or ``""``
                        for the zero byte
bytea                   ``bytes``
date                    ``datetime.date``
time                    ``datetime.time`` (naive)
timetz                  ``datetime.time`` with a fixed ``datetime.timezone``
timestamp               naive ``datetime.datetime``
timestamptz             aware ``datetime.datetime`` in UTC (any aware one encodes)
interval                :class:`Interval` (``timedelta`` also encodes)
uuid                    ``uuid.UUID``
json, jsonb             ``str``: the JSON text, validated but not re-formatted, so
                        a value round-trips exactly (``json.loads`` it yourself)
inet                    ``ipaddress.IPv4Interface`` / ``IPv6Interface``, decoded as
                        their subclasses :class:`LazyIPv4Interface` /
                        :class:`LazyIPv6Interface` (below)
cidr                    ``ipaddress.IPv4Network`` / ``IPv6Network``, decoded as
                        :class:`LazyIPv4Network` / :class:`LazyIPv6Network`
macaddr                 ``str`` in the canonical ``08:00:2b:01:02:03`` form
arrays                  nested ``list`` (one level per dimension), ``None`` = NULL;
                        the empty array is ``[]``
======================  ===========================================================

Deliberate representations, where Python has no type for a PostgreSQL value; each one
round-trips exactly, none raises:

* ``infinity`` / ``-infinity`` of date, timestamp, timestamptz and interval decode as the
  sentinels :data:`INFINITY` / :data:`NEG_INFINITY` (members of the :class:`PgInfinity`
  enum; test with ``is``). For interval they stand for PostgreSQL 17's
  all-fields-at-their-limit encoding, which is what is sent and received.
* Dates outside Python's years 1-9999 (BC dates, year 10000 up to 5874897) decode as
  :class:`PgDate` (PostgreSQL's day number since 2000-01-01); timestamps outside them as
  :class:`PgTimestamp` (microseconds since 2000-01-01). Both print as PostgreSQL does
  (``0044-03-15 BC``). Only out-of-range values are decoded to these; in-range ones are
  always ``date`` / ``datetime``.
* ``24:00:00``, a valid time and timetz, decodes as :class:`EndOfDay` (with the timetz
  offset, if any). Offsets with seconds (``+05:30:15``) are plain ``datetime.timezone``.
* A binary numeric whose display scale asks for more than 64 zeros its bytes do not
  spell (``numeric(200,100)`` prints 1.5 with 99 zeros; weight 32767 and scale 1 print
  131,074 digits from 12 bytes) decodes as :class:`ScaledDecimal`: a ``Decimal`` of the
  same value holding only the spelled digits, the scale in ``dscale``, ``expanded()``
  giving every digit. A scale-0 value keeps such zeros as a positive exponent
  (``1E+131000``). Neither holds the zeros in memory; both encode to every digit.
* Arrays whose lower bounds are not all 1 (``[0:1]={a,b}``) decode as
  :class:`BoundedArray`; arrays with all lower bounds 1 are always plain lists.
* inet and cidr values decode as subclasses of the ipaddress classes that make their
  derived objects (an interface's ``network`` and ``netmask``, a network's
  ``network_address`` and ``netmask``) on first access, so that arrays build them in
  C-level passes (a plain ``IPv4Interface`` costs 2 us to construct): equal, hashed,
  ordered, copied and pickled as the plain value, every attribute the same; only the
  class name in ``repr`` differs. Plain values encode as before. On a Python whose
  ipaddress keeps other fields (checked at import), they are the plain classes.
* ``name`` longer than 63 bytes: the server truncates it on input, so ``decode_text``
  truncates like ``namein`` and ``encode_*`` refuses it (it could not round-trip).

Input accepted by ``decode_text``: everything PostgreSQL prints, and the common
alternatives of each input function (any-case booleans and prefixes, 0x/0o/0b and
``_`` in integers as in PostgreSQL 16, hex and escape bytea, braced or unhyphenated uuids,
the macaddr spellings, numeric exponents, the verbose interval syntax with ``ago``,
ISO dates and times with any numeric offset, ``BC``/``AD``, ``epoch``). Not accepted
(raises DecodeError): text with a lone surrogate, for any type (it has no UTF-8
form, so PostgreSQL never receives it; ``encode_*`` refuse it with EncodeError); the
non-ISO DateStyles and month names, the clock-dependent words ``now``/``today``/
``tomorrow``, named time zones other than UTC/GMT/Z, the ISO 8601 and SQL-standard
interval input forms, and abbreviated (classful) inet/cidr input such as
``10/8``. A timestamptz or timetz without an offset is taken to be in UTC (the walsender's
TimeZone). A time zone written on a ``timestamp`` is ignored, as PostgreSQL does.

Limits enforced where PostgreSQL enforces them: date/time text has at most 25 fields
(MAXDATEFIELDS) whose characters fit ParseDateTime's work buffer (129 bytes for date,
time and timetz, 153 for the timestamps, 256 for interval; whitespace between fields
does not count); jsonb numbers overflow where numeric does, json numbers never. Any text
decodes or is refused in time linear in its length.
"""

from codec.values._array_shape import BoundedArray
from codec.values._catalogue import (
    TYPES,
    TypeInfo,
    decode_binary,
    decode_text,
    encode_binary,
    encode_text,
    type_by_name,
)
from codec.values._interval import Interval
from codec.values._lsn import INVALID_LSN, LSN
from codec.values._net import (
    LazyIPv4Interface,
    LazyIPv4Network,
    LazyIPv6Interface,
    LazyIPv6Network,
)
from codec.values._numbers import ScaledDecimal
from codec.values._time import (
    DT_NOBEGIN,
    DT_NOEND,
    INFINITY,
    NEG_INFINITY,
    EndOfDay,
    PgDate,
    PgInfinity,
    PgTimestamp,
    datetime_to_pg_timestamp,
    pg_timestamp_to_datetime,
)

__all__ = [
    "DT_NOBEGIN",
    "DT_NOEND",
    "INFINITY",
    "INVALID_LSN",
    "LSN",
    "NEG_INFINITY",
    "TYPES",
    "BoundedArray",
    "EndOfDay",
    "Interval",
    "LazyIPv4Interface",
    "LazyIPv4Network",
    "LazyIPv6Interface",
    "LazyIPv6Network",
    "PgDate",
    "PgInfinity",
    "PgTimestamp",
    "ScaledDecimal",
    "TypeInfo",
    "datetime_to_pg_timestamp",
    "decode_binary",
    "decode_text",
    "encode_binary",
    "encode_text",
    "pg_timestamp_to_datetime",
    "type_by_name",
]
