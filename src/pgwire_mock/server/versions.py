"""What a real PostgreSQL 14, 15, 16, 17 and 18 walsender says, as data, per major.

Every value here was read from real servers (14.23, 15.18, 16.14, 17.10, 18.4, the builds
``conformance.provision`` pins) and is checked again by
``tests/pgwire_mock/test_versions_postgres.py``. Errors carry the F/L/R fields (source
file, line, routine) those builds send, so a reply can be byte-identical to theirs; other
minor releases may differ in line numbers only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from pgwire_mock.server.errors import ServerError
from pgwire_mock.server.grammar import COMMAND_KEYWORDS

__all__ = [
    "ERRORS",
    "MAJORS",
    "VERSIONS",
    "ErrorFact",
    "VersionFacts",
    "error",
    "format_error",
    "parameter_status",
]

MAJORS: Final = (14, 15, 16, 17, 18)

OID_INT4: Final = 23
OID_INT8: Final = 20
OID_TEXT: Final = 25


@dataclass(frozen=True, slots=True)
class VersionFacts:
    """Facts about one PostgreSQL major that a client can observe."""

    major: int
    server_version: str
    server_version_num: int
    # ParameterStatus after authentication, in the order the server sends them, with
    # the values a superuser "postgres" gets on a UTF8 database with TimeZone=UTC. PG16
    # keeps GUCs in a hash table, so from 16 on the order is the table's, not alphabetical.
    parameter_status: tuple[tuple[str, str], ...]
    max_proto_version: int
    # The newest frontend/backend protocol (PG_PROTOCOL_LATEST): 3.0 until 17, 3.2 on 18.
    latest_protocol: int
    # IDENTIFY_SYSTEM's timeline column: int4 on 14/15, int8 from 16.
    identify_system_timeline_oid: int
    commands: frozenset[str]
    # CREATE_REPLICATION_SLOT ( ... ) options parseCreateReplSlotOptions knows.
    create_slot_options: frozenset[str]
    # Options pgoutput's parse_output_parameters knows.
    pgoutput_options: frozenset[str]
    # PG17's pgoutput demands proto_version and publication_names explicitly.
    pgoutput_requires_options: bool

    @property
    def version_text(self) -> str:
        """What ``SELECT version()`` returns (the compiler of the pinned builds)."""
        return f"PostgreSQL {self.server_version} on x86_64-pc-linux-gnu, compiled by {_CC}, 64-bit"

    @property
    def identify_system_types(self) -> tuple[int, int, int, int]:
        """Type OIDs of systemid, timeline, xlogpos, dbname."""
        return (OID_TEXT, self.identify_system_timeline_oid, OID_TEXT, OID_TEXT)


# The compiler the pinned builds (conformance.provision) name in version().
_CC: Final = "gcc (Ubuntu 7.5.0-3ubuntu1~18.04) 7.5.0"

_PARAMS_14_15: Final = (
    "application_name",
    "client_encoding",
    "DateStyle",
    "default_transaction_read_only",
    "in_hot_standby",
    "integer_datetimes",
    "IntervalStyle",
    "is_superuser",
    "server_encoding",
    "server_version",
    "session_authorization",
    "standard_conforming_strings",
    "TimeZone",
)
_PARAMS_16_17: Final = (
    "in_hot_standby",
    "integer_datetimes",
    "TimeZone",
    "IntervalStyle",
    "is_superuser",
    "application_name",
    "default_transaction_read_only",
    "scram_iterations",
    "DateStyle",
    "standard_conforming_strings",
    "session_authorization",
    "client_encoding",
    "server_version",
    "server_encoding",
)
# 18 reports search_path (GUC_REPORT since 18), right after IntervalStyle.
_PARAMS_18: Final = (
    *_PARAMS_16_17[: _PARAMS_16_17.index("IntervalStyle") + 1],
    "search_path",
    *_PARAMS_16_17[_PARAMS_16_17.index("IntervalStyle") + 1 :],
)
_DEFAULTS: Final = {
    "application_name": "",
    "client_encoding": "UTF8",
    "DateStyle": "ISO, MDY",
    "default_transaction_read_only": "off",
    "in_hot_standby": "off",
    "integer_datetimes": "on",
    "IntervalStyle": "postgres",
    "is_superuser": "on",
    "server_encoding": "UTF8",
    "session_authorization": "postgres",
    "standard_conforming_strings": "on",
    "TimeZone": "UTC",
    "scram_iterations": "4096",
    "search_path": '"$user", public',
}


def _facts(major: int, minor: int) -> VersionFacts:
    version = f"{major}.{minor}"
    names = _PARAMS_14_15 if major < 16 else _PARAMS_16_17 if major < 18 else _PARAMS_18
    values = dict(_DEFAULTS, server_version=version)
    create_options = {"snapshot", "reserve_wal", "two_phase"} if major >= 15 else set()
    if major >= 17:
        create_options.add("failover")
    pgoutput = {"proto_version", "publication_names", "binary", "messages", "streaming"}
    if major >= 15:
        pgoutput.add("two_phase")
    if major >= 16:
        pgoutput.add("origin")
    return VersionFacts(
        major=major,
        server_version=version,
        server_version_num=major * 10000 + minor,
        parameter_status=tuple((name, values[name]) for name in names),
        max_proto_version={14: 2, 15: 3}.get(major, 4),
        latest_protocol=0x30002 if major >= 18 else 0x30000,
        identify_system_timeline_oid=OID_INT4 if major < 16 else OID_INT8,
        commands=COMMAND_KEYWORDS[major],
        create_slot_options=frozenset(create_options),
        pgoutput_options=frozenset(pgoutput),
        pgoutput_requires_options=major >= 17,
    )


VERSIONS: Final[Mapping[int, VersionFacts]] = {
    14: _facts(14, 23),
    15: _facts(15, 18),
    16: _facts(16, 14),
    17: _facts(17, 10),
    18: _facts(18, 4),
}


def parameter_status(
    major: int,
    overrides: Mapping[str, str] | None = None,
    *,
    replication_database: bool = True,
) -> tuple[tuple[str, str], ...]:
    """The ParameterStatus pairs a session sends after AuthenticationOk, in order.

    ``overrides`` replaces values (client's ``application_name``, ``client_encoding``,
    the user name as ``session_authorization``, ...); the order never changes. A
    physical walsender (``replication=true``) is bound to no database, so its
    ``server_encoding`` and default ``client_encoding`` are ``SQL_ASCII``.
    """
    values = dict(VERSIONS[major].parameter_status)
    if not replication_database:
        values["server_encoding"] = "SQL_ASCII"
        values["client_encoding"] = "SQL_ASCII"
    for name, value in (overrides or {}).items():
        if name not in values:
            raise KeyError(f"{name} is not reported by PostgreSQL {major}")
        values[name] = value
    return tuple(values.items())


# --- errors ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ErrorFact:
    sqlstate: str
    message: str | Mapping[int, str]
    file: str | Mapping[int, str]
    routine: str | Mapping[int, str]
    lines: Mapping[int, int]
    severity: str = "ERROR"
    detail: str | Mapping[int, str] | None = None
    hint: str | None = None


_SLOT_NAME_HINT: Final = (
    "Replication slot names may only contain lower case letters, numbers, "
    "and the underscore character."
)
_CHANGE_CONTEXT: Final = (
    'slot "{slot}", output plugin "pgoutput", in the change callback, associated LSN {lsn}'
)


def _v(**lines: int) -> dict[int, int]:
    return {int(key[1:]): value for key, value in lines.items()}


# Kind -> how the real server reports it. Message templates use str.format fields.
ERRORS: Final[Mapping[str, ErrorFact]] = {
    # The SQL grammar's error at a statement's first word (scan.l, scanner_yyerror).
    "sql_syntax": ErrorFact(
        "42601",
        'syntax error at or near "{token}"',
        file="scan.l",
        routine="scanner_yyerror",
        lines=_v(v14=1180, v15=1192, v16=1248, v17=1248, v18=1240),
    ),
    # Slots (slot.c).
    "slot_does_not_exist": ErrorFact(
        "42704",
        'replication slot "{slot}" does not exist',
        "slot.c",
        "ReplicationSlotAcquire",
        _v(v14=432, v15=502, v16=504, v17=590, v18=610),
    ),
    "slot_active": ErrorFact(
        "55006",
        'replication slot "{slot}" is active for PID {pid}',
        "slot.c",
        "ReplicationSlotAcquire",
        _v(v14=478, v15=548, v16=550, v17=636, v18=665),
    ),
    "slot_already_exists": ErrorFact(
        "42710",
        'replication slot "{slot}" already exists',
        "slot.c",
        "ReplicationSlotCreate",
        _v(v14=287, v15=312, v16=314, v17=399, v18=414),
    ),
    "slot_name_invalid_character": ErrorFact(
        "42602",
        'replication slot name "{slot}" contains invalid character',
        "slot.c",
        "ReplicationSlotValidateName",
        _v(v14=181, v15=206, v16=208, v17=261, v18=282),
        hint=_SLOT_NAME_HINT,
    ),
    "slot_name_too_short": ErrorFact(
        "42602",
        'replication slot name "{slot}" is too short',
        "slot.c",
        "ReplicationSlotValidateName",
        _v(v14=181, v15=206, v16=208, v17=261, v18=282),
    ),
    "failover_temporary_slot": ErrorFact(
        "0A000",
        "cannot enable failover for a temporary replication slot",
        "slot.c",
        "ReplicationSlotCreate",
        _v(v17=374, v18=389),
    ),
    # ALTER_REPLICATION_SLOT (17; TWO_PHASE from 18): options first, then the slot.
    "alter_slot_unrecognized_option": ErrorFact(
        "XX000",
        "unrecognized option: {option}",
        "walsender.c",
        {17: "ParseAlterReplSlotOptions", 18: "AlterReplicationSlot"},
        _v(v17=1449, v18=1434),
    ),
    "alter_slot_conflicting_failover": ErrorFact(
        "42601",
        "conflicting or redundant options",
        "walsender.c",
        {17: "ParseAlterReplSlotOptions", 18: "AlterReplicationSlot"},
        _v(v17=1444, v18=1420),
    ),
    "alter_slot_conflicting_two_phase": ErrorFact(
        "42601",
        "conflicting or redundant options",
        "walsender.c",
        "AlterReplicationSlot",
        _v(v18=1429),
    ),
    "alter_slot_physical": ErrorFact(
        "0A000",
        "cannot use ALTER_REPLICATION_SLOT with a physical replication slot",
        "slot.c",
        "ReplicationSlotAlter",
        _v(v17=846, v18=891),
    ),
    "alter_failover_temporary_slot": ErrorFact(
        "0A000",
        "cannot enable failover for a temporary replication slot",
        "slot.c",
        "ReplicationSlotAlter",
        _v(v17=0, v18=0),
    ),
    # A fast shutdown (measured on 14-18): a connection that starts meanwhile, once its
    # startup packet is read; a backend that is not streaming (an idle walsender too).
    "shutting_down": ErrorFact(
        "57P03",
        "the database system is shutting down",
        {14: "postmaster.c", 15: "postmaster.c", 16: "postmaster.c"}
        | {17: "backend_startup.c", 18: "backend_startup.c"},
        {14: "ProcessStartupPacket", 15: "ProcessStartupPacket", 16: "ProcessStartupPacket"}
        | {17: "BackendInitialize", 18: "BackendInitialize"},
        _v(v14=2377, v15=2434, v16=2377, v17=294, v18=333),
        severity="FATAL",
    ),
    "admin_shutdown": ErrorFact(
        "57P01",
        "terminating connection due to administrator command",
        "postgres.c",
        "ProcessInterrupts",
        _v(v14=3199, v15=3213, v16=3288, v17=3318, v18=3356),
        severity="FATAL",
    ),
    # Connection start (InitProcess, then InitPostgres after authentication).
    "too_many_clients": ErrorFact(
        "53300",
        "sorry, too many clients already",
        "proc.c",
        "InitProcess",
        _v(v14=361, v15=359, v16=353, v17=357, v18=457),
        severity="FATAL",
    ),
    "too_many_walsenders": ErrorFact(
        "53300",
        {
            14: "number of requested standby connections exceeds max_wal_senders (currently {max})",
            15: "number of requested standby connections exceeds max_wal_senders (currently {max})",
            16: "number of requested standby connections exceeds max_wal_senders (currently {max})",
            17: 'number of requested standby connections exceeds "max_wal_senders" '
            "(currently {max})",
            18: 'number of requested standby connections exceeds "max_wal_senders" '
            "(currently {max})",
        },
        "proc.c",
        "InitProcess",
        _v(v14=358, v15=356, v16=350, v17=354, v18=454),
        severity="FATAL",
    ),
    "role_does_not_exist": ErrorFact(
        "28000",
        'role "{role}" does not exist',
        "miscinit.c",
        "InitializeSessionUserId",
        _v(v14=755, v15=770, v16=801, v17=799, v18=804),
        severity="FATAL",
    ),
    "database_does_not_exist": ErrorFact(
        "3D000",
        'database "{database}" does not exist',
        "postinit.c",
        "InitPostgres",
        _v(v14=890, v15=950, v16=1023, v17=1034, v18=1016),
        severity="FATAL",
    ),
    "slot_other_database": ErrorFact(
        "55000",
        'replication slot "{slot}" was not created in this database',
        "logical.c",
        "CreateDecodingContext",
        _v(v14=510, v15=513, v16=528, v17=534, v18=534),
    ),
    # CREATE_REPLICATION_SLOT ... USE_SNAPSHOT outside the transaction it needs ({what}
    # is "CREATE_REPLICATION_SLOT ... USE_SNAPSHOT", 15+ "... (SNAPSHOT 'use')").
    "use_snapshot_outside_transaction": ErrorFact(
        "XX000",
        "{what} must be called inside a transaction",
        "walsender.c",
        "CreateReplicationSlot",
        _v(v14=1000, v15=1125, v16=1123, v17=1295, v18=1268),
    ),
    "use_snapshot_isolation": ErrorFact(
        "XX000",
        "{what} must be called in REPEATABLE READ isolation mode transaction",
        "walsender.c",
        "CreateReplicationSlot",
        _v(v14=1006, v15=1131, v16=1129, v17=1301, v18=1274),
    ),
    "use_snapshot_read_only": ErrorFact(
        "XX000",
        "{what} must be called in a read-only transaction",
        "walsender.c",
        "CreateReplicationSlot",
        _v(v16=1134, v17=1306, v18=1279),
    ),
    "use_snapshot_after_query": ErrorFact(
        "XX000",
        "{what} must be called before any query",
        "walsender.c",
        "CreateReplicationSlot",
        _v(v14=1012, v15=1137, v16=1140, v17=1312, v18=1285),
    ),
    # Snapshots and reading tables (a client's snapshot SQL, a subscriber's COPY).
    "set_transaction_outside_block": ErrorFact(
        "25P01",
        "SET TRANSACTION can only be used in transaction blocks",
        "xact.c",
        "CheckTransactionBlock",
        _v(v14=3528, v15=3591, v16=3602, v17=3705, v18=3749),
        severity="WARNING",
    ),
    "lock_table_outside_block": ErrorFact(
        "25P01",
        "LOCK TABLE can only be used in transaction blocks",
        "xact.c",
        "CheckTransactionBlock",
        _v(v14=3528, v15=3591, v16=3602, v17=3705, v18=3749),
    ),
    "snapshot_import_isolation": ErrorFact(
        "0A000",
        "a snapshot-importing transaction must have isolation level SERIALIZABLE or "
        "REPEATABLE READ",
        "snapmgr.c",
        "ImportSnapshot",
        _v(v14=1429, v15=1429, v16=1431, v17=1402, v18=1420),
    ),
    "snapshot_import_serializable": ErrorFact(
        "0A000",
        "a serializable transaction cannot import a snapshot from a non-serializable transaction",
        "snapmgr.c",
        "ImportSnapshot",
        _v(v14=1539, v15=1539, v16=1541, v17=1524, v18=1542),
    ),
    "invalid_snapshot_identifier": ErrorFact(
        "22023",
        'invalid snapshot identifier: "{name}"',
        "snapmgr.c",
        "ImportSnapshot",
        _v(v14=1438, v15=1438, v16=1440, v17=1411, v18=1429),
    ),
    "undefined_column": ErrorFact(
        "42703",
        'column "{column}" does not exist',
        "parse_relation.c",
        "errorMissingColumn",
        _v(v14=3657, v15=3675, v16=3727, v17=3721, v18=3827),
    ),
    # errorMissingColumn naming one close column, or two: on 14/15 one ereport serves
    # "none or one" and another "two"; 16+ have an ereport for each case.
    "undefined_column_hint": ErrorFact(
        "42703",
        'column "{column}" does not exist',
        "parse_relation.c",
        "errorMissingColumn",
        _v(v14=3657, v15=3675, v16=3738, v17=3732, v18=3838),
        hint='Perhaps you meant to reference the column "{relation}.{first}".',
    ),
    "undefined_column_two_hints": ErrorFact(
        "42703",
        'column "{column}" does not exist',
        "parse_relation.c",
        "errorMissingColumn",
        _v(v14=3675, v15=3693, v16=3755, v17=3749, v18=3855),
        hint='Perhaps you meant to reference the column "{relation}.{first}" or the column '
        '"{relation}.{second}".',
    ),
    # A column reference qualified by the FROM item's name under another schema
    # (public.pg_replication_slots.c): the explanation is a hint on 14/15, a detail on 16+.
    "invalid_from_reference": ErrorFact(
        "42P01",
        'invalid reference to FROM-clause entry for table "{relation}"',
        "parse_relation.c",
        "errorMissingRTE",
        _v(v14=3597, v15=3615, v16=3654, v17=3648, v18=3754),
    ),
    # A plain column beside an aggregate, without GROUP BY (parse_agg.c; 18 replaced
    # the walker with a mutator).
    "ungrouped_column": ErrorFact(
        "42803",
        'column "{relation}.{column}" must appear in the GROUP BY clause or be used in an '
        "aggregate function",
        "parse_agg.c",
        {
            14: "check_ungrouped_columns_walker",
            15: "check_ungrouped_columns_walker",
            16: "check_ungrouped_columns_walker",
            17: "check_ungrouped_columns_walker",
            18: "substitute_grouped_columns_mutator",
        },
        _v(v14=1480, v15=1490, v16=1495, v17=1498, v18=1558),
    ),
    # A column reference qualified by a name no FROM item has.
    "missing_from_entry": ErrorFact(
        "42P01",
        'missing FROM-clause entry for table "{relation}"',
        "parse_relation.c",
        "errorMissingRTE",
        _v(v14=3603, v15=3621, v16=3661, v17=3655, v18=3761),
    ),
    "undefined_table": ErrorFact(
        "42P01",
        'relation "{relation}" does not exist',
        "parse_relation.c",
        "parserOpenTable",
        _v(v14=1384, v15=1395, v16=1452, v17=1452, v18=1469),
    ),
    "undefined_qualified_table": ErrorFact(
        "42P01",
        'relation "{relation}" does not exist',
        "parse_relation.c",
        "parserOpenTable",
        _v(v14=1363, v15=1374, v16=1431, v17=1431, v18=1448),
    ),
    "copy_undefined_table": ErrorFact(
        "42P01",
        'relation "{relation}" does not exist',
        "namespace.c",
        "RangeVarGetRelidExtended",
        _v(v14=436, v15=436, v16=437, v17=639, v18=639),
    ),
    "copy_undefined_qualified_table": ErrorFact(
        "42P01",
        'relation "{relation}" does not exist',
        "namespace.c",
        "RangeVarGetRelidExtended",
        _v(v14=431, v15=431, v16=432, v17=634, v18=634),
    ),
    "copy_undefined_column": ErrorFact(
        "42703",
        'column "{column}" of relation "{relation}" does not exist',
        "copy.c",
        "CopyGetAttnums",
        _v(v14=783, v15=818, v16=876, v17=990, v18=1041),
    ),
    # Walsender.
    "logical_decoding_requires_database": ErrorFact(
        "55000",
        "logical decoding requires a database connection",
        "logical.c",
        "CheckLogicalDecodingRequirements",
        _v(v14=120, v15=120, v16=125, v17=128, v18=128),
    ),
    "logical_slot_for_physical_replication": ErrorFact(
        "55000",
        "cannot use a logical replication slot for physical replication",
        "walsender.c",
        "StartReplication",
        _v(v14=623, v15=733, v16=721, v17=871, v18=843),
    ),
    "physical_slot_for_logical_decoding": ErrorFact(
        "55000",
        "cannot use physical replication slot for logical decoding",
        "logical.c",
        "CreateDecodingContext",
        _v(v14=504, v15=507, v16=522, v17=523, v18=523),
    ),
    # 14/15 StartLogicalReplication, for any slot without reserved WAL (restart_lsn
    # invalid): a physical slot made without RESERVE_WAL gets this, not the one above.
    "slot_invalidated_cannot_read": ErrorFact(
        "55000",
        'cannot read from logical replication slot "{slot}"',
        "walsender.c",
        "StartLogicalReplication",
        _v(v14=1162, v15=1287),
        detail="This slot has been invalidated because it exceeded the maximum reserved size.",
    ),
    # An invalidated slot (here: WAL removed past max_slot_wal_keep_size), at START.
    "slot_invalidated": ErrorFact(
        "55000",
        {
            16: 'can no longer get changes from replication slot "{slot}"',
            17: 'can no longer get changes from replication slot "{slot}"',
            18: 'can no longer access replication slot "{slot}"',
        },
        {16: "logical.c", 17: "logical.c", 18: "slot.c"},
        {16: "CreateDecodingContext", 17: "CreateDecodingContext", 18: "ReplicationSlotAcquire"},
        _v(v16=541, v17=560, v18=684),
        detail={
            16: "This slot has been invalidated because it exceeded the maximum reserved size.",
            17: "This slot has been invalidated because it exceeded the maximum reserved size.",
            18: 'This replication slot has been invalidated due to "{cause}".',
        },
    ),
    # The walsender reads WAL the server no longer has (after CopyBoth: the first read
    # of a START_REPLICATION is at the slot's restart_lsn).
    "wal_segment_removed": ErrorFact(
        "58P01",
        "requested WAL segment {segment} has already been removed",
        "walsender.c",
        "WalSndSegmentOpen",
        _v(v14=2585, v15=2744, v16=2782, v17=3103, v18=3098),
    ),
    "read_replication_slot_logical": ErrorFact(
        "0A000",
        "cannot use READ_REPLICATION_SLOT with a logical replication slot",
        "walsender.c",
        "ReadReplicationSlot",
        _v(v15=536, v16=537, v17=550, v18=520),
    ),
    "sql_in_physical_walsender": ErrorFact(
        "0A000",
        "cannot execute SQL commands in WAL sender for physical replication",
        "walsender.c",
        "exec_replication_command",
        _v(v14=1607, v15=1759, v16=1765, v17=2070, v18=2070),
    ),
    "extended_query_protocol": ErrorFact(
        "08P01",
        "extended query protocol not supported in a replication connection",
        "postgres.c",
        "forbidden_in_wal_sender",
        _v(v14=4826, v15=4911, v16=4995, v17=5041, v18=5047),
    ),
    # A non-CopyData message while streaming. (An unknown CopyData sub-type instead
    # closes the connection with no ErrorResponse: the server logs it as COMMERROR.)
    "invalid_standby_message_type": ErrorFact(
        "08P01",
        'invalid standby message type "{type}"',
        "walsender.c",
        "ProcessRepliesIfAny",
        _v(v14=1807, v15=1966, v16=1972, v17=2292, v18=2293),
        severity="FATAL",
    ),
    "unsupported_frontend_protocol": ErrorFact(
        "0A000",
        "unsupported frontend protocol {requested}: server supports 3.0 to {latest}",
        {
            14: "postmaster.c",
            15: "postmaster.c",
            16: "postmaster.c",
            17: "backend_startup.c",
            18: "backend_startup.c",
        },
        "ProcessStartupPacket",
        _v(v14=2171, v15=2228, v16=2175, v17=704, v18=732),
        severity="FATAL",
    ),
    "invalid_replication_parameter": ErrorFact(
        "22023",
        'invalid value for parameter "replication": "{value}"',
        {
            14: "postmaster.c",
            15: "postmaster.c",
            16: "postmaster.c",
            17: "backend_startup.c",
            18: "backend_startup.c",
        },
        "ProcessStartupPacket",
        _v(v14=2234, v15=2291, v16=2238, v17=763, v18=791),
        severity="FATAL",
        hint='Valid values are: "false", 0, "true", 1, "database".',
    ),
    "timeline_history_missing": ErrorFact(
        "58P01",
        'could not open file "pg_wal/{timeline:08X}.history": No such file or directory',
        "walsender.c",
        "SendTimeLineHistory",
        _v(v14=532, v15=645, v16=633, v17=646, v18=616),
    ),
    # pgoutput, after CopyBoth, when the first change is decoded.
    "publication_does_not_exist": ErrorFact(
        "42704",
        'publication "{publication}" does not exist',
        {
            14: "pg_publication.c",
            15: "pg_publication.c",
            16: "lsyscache.c",
            17: "lsyscache.c",
            18: "lsyscache.c",
        },
        "get_publication_oid",
        _v(v14=533, v15=1045, v16=3630, v17=3672, v18=3672),
    ),
    # 18 (LoadPublications): a missing publication is skipped with a WARNING.
    "publication_skipped": ErrorFact(
        "55000",
        'skipped loading publication "{publication}"',
        "pgoutput.c",
        "LoadPublications",
        _v(v18=1817),
        severity="WARNING",
        detail="The publication does not exist at this point in the WAL.",
        hint="Create the publication if it does not exist.",
    ),
    # pgoutput option parsing (parse_output_parameters), before CopyBoth.
    "pgoutput_conflicting_proto_version": ErrorFact(
        "42601",
        "conflicting or redundant options",
        file="pgoutput.c",
        routine="parse_output_parameters",
        lines=_v(v14=199, v15=319, v16=317, v17=315, v18=321),
    ),
    "pgoutput_conflicting_publication_names": ErrorFact(
        "42601",
        "conflicting or redundant options",
        file="pgoutput.c",
        routine="parse_output_parameters",
        lines=_v(v14=220, v15=342, v16=340, v17=338, v18=344),
    ),
    "pgoutput_conflicting_binary": ErrorFact(
        "42601",
        "conflicting or redundant options",
        file="pgoutput.c",
        routine="parse_output_parameters",
        lines=_v(v14=238, v15=360, v16=358, v17=356, v18=362),
    ),
    "pgoutput_conflicting_messages": ErrorFact(
        "42601",
        "conflicting or redundant options",
        file="pgoutput.c",
        routine="parse_output_parameters",
        lines=_v(v14=248, v15=370, v16=368, v17=366, v18=372),
    ),
    "pgoutput_conflicting_streaming": ErrorFact(
        "42601",
        "conflicting or redundant options",
        file="pgoutput.c",
        routine="parse_output_parameters",
        lines=_v(v14=258, v15=380, v16=378, v17=376, v18=382),
    ),
    "pgoutput_conflicting_two_phase": ErrorFact(
        "42601",
        "conflicting or redundant options",
        file="pgoutput.c",
        routine="parse_output_parameters",
        lines=_v(v15=390, v16=388, v17=386, v18=392),
    ),
    "pgoutput_conflicting_origin": ErrorFact(
        "42601",
        "conflicting or redundant options",
        file="pgoutput.c",
        routine="parse_output_parameters",
        lines=_v(v16=398, v17=398, v18=404),
    ),
    "pgoutput_invalid_proto_version": ErrorFact(
        "22023",
        "invalid proto_version",
        file="pgoutput.c",
        routine="parse_output_parameters",
        lines=_v(v14=205, v15=327, v16=325, v17=323, v18=329),
    ),
    "pgoutput_proto_version_out_of_range": ErrorFact(
        "22023",
        'proto_version "{value}" out of range',
        file="pgoutput.c",
        routine="parse_output_parameters",
        lines=_v(v14=211, v15=333, v16=331, v17=329, v18=335),
    ),
    "pgoutput_invalid_publication_names": ErrorFact(
        "42602",
        "invalid publication_names syntax",
        file="pgoutput.c",
        routine="parse_output_parameters",
        lines=_v(v14=231, v15=353, v16=351, v17=349, v18=355),
    ),
    "pgoutput_unrecognized_option": ErrorFact(
        "XX000",
        "unrecognized pgoutput option: {option}",
        file="pgoutput.c",
        routine="parse_output_parameters",
        lines=_v(v14=264, v15=396, v16=410, v17=412, v18=418),
    ),
    "pgoutput_unrecognized_origin": ErrorFact(
        "22023",
        'unrecognized origin value: "{value}"',
        file="pgoutput.c",
        routine="parse_output_parameters",
        lines=_v(v16=407, v17=409, v18=415),
    ),
    "pgoutput_option_missing_proto_version": ErrorFact(
        "22023",
        'option "proto_version" missing',
        file="pgoutput.c",
        routine="parse_output_parameters",
        lines=_v(v17=419, v18=425),
    ),
    "pgoutput_option_missing_publication_names": ErrorFact(
        "22023",
        'option "publication_names" missing',
        file="pgoutput.c",
        routine="parse_output_parameters",
        lines=_v(v17=423, v18=429),
    ),
    "requires_boolean": ErrorFact(
        "42601",
        "{option} requires a Boolean value",
        "define.c",
        "defGetBoolean",
        _v(v14=158, v15=155, v16=155, v17=154, v18=141),
    ),
    "requires_parameter": ErrorFact(
        "42601",
        "{option} requires a parameter",
        "define.c",
        "defGetString",
        _v(v14=55, v15=55, v16=55, v17=54, v18=41),
    ),
    "streaming_requires_boolean_or_parallel": ErrorFact(
        "42601",
        '{option} requires a Boolean value or "parallel"',
        "subscriptioncmds.c",
        "defGetStreamingMode",
        _v(v16=2363, v17=2444, v18=2514),
    ),
    # pgoutput_startup, after the options parsed.
    "pgoutput_proto_version_too_high": ErrorFact(
        "0A000",
        {
            14: "client sent proto_version={value} but we only support protocol {max} or lower",
            15: "client sent proto_version={value} but we only support protocol {max} or lower",
            16: "client sent proto_version={value} but server only supports protocol {max} "
            "or lower",
            17: "client sent proto_version={value} but server only supports protocol {max} "
            "or lower",
            18: "client sent proto_version={value} but server only supports protocol {max} "
            "or lower",
        },
        file="pgoutput.c",
        routine="pgoutput_startup",
        lines=_v(v14=329, v15=469, v16=483, v17=495, v18=497),
    ),
    "pgoutput_proto_version_too_low": ErrorFact(
        "0A000",
        {
            14: "client sent proto_version={value} but we only support protocol 1 or higher",
            15: "client sent proto_version={value} but we only support protocol 1 or higher",
            16: "client sent proto_version={value} but server only supports protocol 1 or higher",
            17: "client sent proto_version={value} but server only supports protocol 1 or higher",
            18: "client sent proto_version={value} but server only supports protocol 1 or higher",
        },
        file="pgoutput.c",
        routine="pgoutput_startup",
        lines=_v(v14=335, v15=475, v16=489, v17=501, v18=503),
    ),
    "pgoutput_publication_names_missing": ErrorFact(
        "22023",
        "publication_names parameter missing",
        file="pgoutput.c",
        routine="pgoutput_startup",
        lines=_v(v14=340, v15=480, v16=494),
    ),
    "pgoutput_streaming_needs_proto": ErrorFact(
        "22023",
        "requested proto_version={value} does not support streaming, need 2 or higher",
        file="pgoutput.c",
        routine="pgoutput_startup",
        lines=_v(v14=354, v15=494, v16=509, v17=516, v18=518),
    ),
    "pgoutput_parallel_streaming_needs_proto": ErrorFact(
        "22023",
        "requested proto_version={value} does not support parallel streaming, need 4 or higher",
        file="pgoutput.c",
        routine="pgoutput_startup",
        lines=_v(v16=515, v17=522, v18=524),
    ),
    "pgoutput_two_phase_needs_proto": ErrorFact(
        "22023",
        "requested proto_version={value} does not support two-phase commit, need 3 or higher",
        file="pgoutput.c",
        routine="pgoutput_startup",
        lines=_v(v15=516, v16=537, v17=541, v18=543),
    ),
}


def error(major: int, kind: str, *, context: str | None = None, **args: object) -> ServerError:
    """The ServerError PostgreSQL ``major`` sends for ``kind`` (a key of :data:`ERRORS`).

    ``args`` fill the message template (``slot``, ``pid``, ``option``, ``value``, ...).
    Raises KeyError when that major has no such error (e.g. ``origin`` errors on 14/15).
    """
    fact = ERRORS[kind]
    if major not in fact.lines:
        raise KeyError(f"PostgreSQL {major} has no error {kind!r}")
    return format_error(fact, major, args, context=context)


def format_error(
    fact: ErrorFact, major: int, args: Mapping[str, object], *, context: str | None = None
) -> ServerError:
    """``fact`` as PostgreSQL ``major`` reports it (no line number if the table has none
    for that major); ``args`` fill its templates. Other modules' error tables use it too."""
    template = fact.message if isinstance(fact.message, str) else fact.message[major]
    file = fact.file if isinstance(fact.file, str) else fact.file[major]
    routine = fact.routine if isinstance(fact.routine, str) else fact.routine[major]
    detail = (
        fact.detail if fact.detail is None or isinstance(fact.detail, str) else fact.detail[major]
    )
    return ServerError(
        fact.severity,
        fact.sqlstate,
        template.format(**args),
        detail.format(**args) if detail else None,
        fact.hint.format(**args) if fact.hint else None,
        context=context,
        file=file,
        line=fact.lines.get(major),
        routine=routine,
    )
