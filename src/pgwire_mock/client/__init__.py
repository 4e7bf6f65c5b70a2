"""A logical replication client: a sans-IO session, a blocking driver and a capture helper.

:class:`ReplicationSession` speaks the client half of the walsender protocol without
touching sockets or clocks; :class:`ReplicationConnection` drives it over a blocking
socket; :func:`capture_via_walsender` records a real server's stream for the conformance
suite.
"""

from pgwire_mock.client.auth import ScramSha256, md5_password
from pgwire_mock.client.blocking import ReplicationConnection
from pgwire_mock.client.capture import capture_via_walsender
from pgwire_mock.client.commands import (
    CreatedSlot,
    OptionValue,
    Snapshot,
    SystemIdentity,
    create_replication_slot_command,
    drop_replication_slot_command,
    format_lsn,
    pgoutput_options,
    publication_names,
    quote_identifier,
    quote_literal,
    server_major,
    start_replication_command,
)
from pgwire_mock.client.dsn import ConnectionParameters, parse_dsn
from pgwire_mock.client.errors import (
    AuthenticationError,
    ConnectionLostError,
    InvalidStateError,
    ProtocolViolationError,
    ReplicationClientError,
    ReplicationTimeoutError,
    ServerError,
)
from pgwire_mock.client.session import (
    TRANSITIONS,
    CommandResult,
    ConnectionClosed,
    ConnectionReady,
    ErrorReceived,
    Event,
    Keepalive,
    Notice,
    Notification,
    ParameterChanged,
    Ready,
    ReplicationSession,
    State,
    StreamEnded,
    StreamStarted,
    Trigger,
    WalData,
    WalRun,
)
from pgwire_mock.scram import saslprep

__all__ = [
    "TRANSITIONS",
    "AuthenticationError",
    "CommandResult",
    "ConnectionClosed",
    "ConnectionLostError",
    "ConnectionParameters",
    "ConnectionReady",
    "CreatedSlot",
    "ErrorReceived",
    "Event",
    "InvalidStateError",
    "Keepalive",
    "Notice",
    "Notification",
    "OptionValue",
    "ParameterChanged",
    "ProtocolViolationError",
    "Ready",
    "ReplicationClientError",
    "ReplicationConnection",
    "ReplicationSession",
    "ReplicationTimeoutError",
    "ScramSha256",
    "ServerError",
    "Snapshot",
    "State",
    "StreamEnded",
    "StreamStarted",
    "SystemIdentity",
    "Trigger",
    "WalData",
    "WalRun",
    "capture_via_walsender",
    "create_replication_slot_command",
    "drop_replication_slot_command",
    "format_lsn",
    "md5_password",
    "parse_dsn",
    "pgoutput_options",
    "publication_names",
    "quote_identifier",
    "quote_literal",
    "saslprep",
    "server_major",
    "start_replication_command",
]
