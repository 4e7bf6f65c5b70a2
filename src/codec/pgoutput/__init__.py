"""pgoutput, PostgreSQL's built-in logical decoding output plugin: protocol versions 1–4.

>>> from codec.pgoutput import Decoder, Begin, encode
>>> payload = encode(Begin(final_lsn=0x16B3748, commit_timestamp=0, xid=735))
>>> Decoder().decode(payload)
Begin(final_lsn=23803720, commit_timestamp=0, xid=735)
"""

from codec.pgoutput.decoder import Decoder, encode
from codec.pgoutput.messages import (
    MESSAGE_CLASSES,
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    Message,
    Origin,
    PgOutputMessage,
    Prepare,
    Relation,
    RelationColumn,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    Type,
    Update,
    encode_begin,
    encode_commit,
)
from codec.pgoutput.tuples import UNCHANGED_TOAST, ColumnValue, TupleData, UnchangedToast

__all__ = [
    "MESSAGE_CLASSES",
    "UNCHANGED_TOAST",
    "Begin",
    "BeginPrepare",
    "ColumnValue",
    "Commit",
    "CommitPrepared",
    "Decoder",
    "Delete",
    "Insert",
    "Message",
    "Origin",
    "PgOutputMessage",
    "Prepare",
    "Relation",
    "RelationColumn",
    "RollbackPrepared",
    "StreamAbort",
    "StreamCommit",
    "StreamPrepare",
    "StreamStart",
    "StreamStop",
    "Truncate",
    "TupleData",
    "Type",
    "UnchangedToast",
    "Update",
    "encode",
    "encode_begin",
    "encode_commit",
]
