"""The fake walsender.

Everything exported here is sans-IO: :mod:`~pgwire_mock.server.session` is the
walsender's state machine (bytes in, bytes out, time passed in),
:mod:`~pgwire_mock.server.state` the slots and publications shared by connections,
:mod:`~pgwire_mock.server.source` the scripted or recorded streams it serves,
:mod:`~pgwire_mock.server.grammar` parses Query text into commands,
:mod:`~pgwire_mock.server.versions` says what PostgreSQL 14–17 reply, and
:mod:`~pgwire_mock.server.errors` shapes their ErrorResponses. The Twisted adapter is
:mod:`pgwire_mock.server.protocol` (``WalSenderFactory``, ``build_service``).
"""

from pgwire_mock.server.errors import BackendCrashError, ServerError
from pgwire_mock.server.grammar import (
    COMMAND_KEYWORDS,
    KEYWORDS,
    AlterReplicationSlot,
    BaseBackup,
    Command,
    CreateReplicationSlot,
    DropReplicationSlot,
    GenericOption,
    IdentifySystem,
    PluginOption,
    ReadReplicationSlot,
    ReplicationCommand,
    Show,
    SqlCommand,
    StartLogicalReplication,
    StartPhysicalReplication,
    TimelineHistory,
    UploadManifest,
    format_lsn,
    parse_command,
    quote_identifier,
    quote_literal,
)
from pgwire_mock.server.pgoutput_options import (
    PgOutputOptions,
    split_identifier_string,
    validate_start_replication,
)
from pgwire_mock.server.session import TRANSITIONS, Phase, SessionConfig, WalSenderSession
from pgwire_mock.server.source import RecordingSource, ScriptSource, StreamSource, load_source
from pgwire_mock.server.state import PublicationState, ServerState, SlotState
from pgwire_mock.server.versions import (
    ERRORS,
    MAJORS,
    VERSIONS,
    VersionFacts,
    error,
    parameter_status,
)

__all__ = [
    "COMMAND_KEYWORDS",
    "ERRORS",
    "KEYWORDS",
    "MAJORS",
    "TRANSITIONS",
    "VERSIONS",
    "AlterReplicationSlot",
    "BackendCrashError",
    "BaseBackup",
    "Command",
    "CreateReplicationSlot",
    "DropReplicationSlot",
    "GenericOption",
    "IdentifySystem",
    "PgOutputOptions",
    "Phase",
    "PluginOption",
    "PublicationState",
    "ReadReplicationSlot",
    "RecordingSource",
    "ReplicationCommand",
    "ScriptSource",
    "ServerError",
    "ServerState",
    "SessionConfig",
    "Show",
    "SlotState",
    "SqlCommand",
    "StartLogicalReplication",
    "StartPhysicalReplication",
    "StreamSource",
    "TimelineHistory",
    "UploadManifest",
    "VersionFacts",
    "WalSenderSession",
    "error",
    "format_lsn",
    "load_source",
    "parameter_status",
    "parse_command",
    "quote_identifier",
    "quote_literal",
    "split_identifier_string",
    "validate_start_replication",
]
