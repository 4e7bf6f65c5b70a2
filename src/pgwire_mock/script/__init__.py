"""Stream scripts: a versioned file format and Python API describing what a fake
walsender streams, and the encoder that turns a script into exactly what PostgreSQL's
pgoutput would send a given client.

Why YAML. Scripts are written by hand, as test fixtures: they want comments (why this
update, which bug it reproduces) and readable multi-line values, which JSON cannot give.
JSON files are accepted too (JSON is YAML, and ``.json`` files are parsed as JSON for
exact error positions). Machine-written streams are *recordings* (JSON Lines or raw
CopyData, see :mod:`pgwire_mock.streamfile`), which :func:`load_recording` replays
byte for byte. The format is documented in ``docs/script-format.md``.

>>> from pgwire_mock.script import Script, StreamOptions, column, encode_stream, insert
>>> script = (
...     Script(pg_version=16)
...     .table("public.users", columns=[column("id", "int4", key=True), column("name", "text")])
...     .publication("pub", tables=["public.users"])
...     .transaction([insert("public.users", id=1, name="a")])
... )
>>> options = StreamOptions(proto_version=1, publication_names=("pub",))
>>> [type(e.message).__name__ for e in encode_stream(script, options)]
['Begin', 'Relation', 'Insert', 'Commit']
"""

from pgwire_mock.script.compile import Compiler, compile_script
from pgwire_mock.script.encoder import encode_stream
from pgwire_mock.script.errors import OptionError, PublicationMissingError, ScriptError
from pgwire_mock.script.events import EndOfWal, Fault, PublicationsSkipped, Send, Sleep, StreamEvent
from pgwire_mock.script.loader import dump_script, load_script, loads_script, loads_steps
from pgwire_mock.script.model import (
    FAULT_NAMES,
    FORMAT_VERSION,
    AlterPublication,
    AlterTable,
    BeginTransaction,
    Column,
    CommitPrepared,
    CreatePublication,
    Delete,
    DropPublication,
    EndTransaction,
    Insert,
    LogicalMessage,
    Publication,
    ReleaseSavepoint,
    RollbackPrepared,
    RollbackToSavepoint,
    Savepoint,
    Script,
    ServerFacts,
    Slot,
    Table,
    Transaction,
    Truncate,
    Update,
    WaitFor,
    WriteTransaction,
    alter_table,
    column,
    delete,
    insert,
    message,
    release_savepoint,
    rollback_to_savepoint,
    savepoint,
    truncate,
    update,
)
from pgwire_mock.script.options import MAX_PROTO_VERSION, StreamOptions
from pgwire_mock.script.recording import Recording, load_recording
from pgwire_mock.script.wal import CompiledScript

__all__ = [
    "FAULT_NAMES",
    "FORMAT_VERSION",
    "MAX_PROTO_VERSION",
    "AlterPublication",
    "AlterTable",
    "BeginTransaction",
    "Column",
    "CommitPrepared",
    "CompiledScript",
    "Compiler",
    "CreatePublication",
    "Delete",
    "DropPublication",
    "EndOfWal",
    "EndTransaction",
    "Fault",
    "Insert",
    "LogicalMessage",
    "OptionError",
    "Publication",
    "PublicationMissingError",
    "PublicationsSkipped",
    "Recording",
    "ReleaseSavepoint",
    "RollbackPrepared",
    "RollbackToSavepoint",
    "Savepoint",
    "Script",
    "ScriptError",
    "Send",
    "ServerFacts",
    "Sleep",
    "Slot",
    "StreamEvent",
    "StreamOptions",
    "Table",
    "Transaction",
    "Truncate",
    "Update",
    "WaitFor",
    "WriteTransaction",
    "alter_table",
    "column",
    "compile_script",
    "delete",
    "dump_script",
    "encode_stream",
    "insert",
    "load_recording",
    "load_script",
    "loads_script",
    "loads_steps",
    "message",
    "release_savepoint",
    "rollback_to_savepoint",
    "savepoint",
    "truncate",
    "update",
]
