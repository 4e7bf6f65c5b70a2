"""Reading and writing the script format (YAML; JSON is accepted too).

YAML is read with a *restricted* safe loader: only ``true``/``false`` are booleans and
dates/timestamps stay strings, so ``on``, ``no`` or ``2024-01-01`` in a text column are
text, as a reader would expect (YAML 1.1 would turn them into ``True``, ``False`` and a
``date``). Everything else is ordinary ``yaml.safe_load``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

from codec.values import LSN
from pgwire_mock import json_text
from pgwire_mock.script.compile import compile_script
from pgwire_mock.script.errors import ScriptError
from pgwire_mock.script.model import (
    FORMAT_VERSION,
    GENERATED_KINDS,
    AlterPublication,
    AlterTable,
    BeginTransaction,
    Change,
    Column,
    CommitPrepared,
    CreatePublication,
    Delete,
    DropPublication,
    EndTransaction,
    Fault,
    Insert,
    LogicalMessage,
    Publication,
    ReleaseSavepoint,
    RollbackPrepared,
    RollbackToSavepoint,
    Savepoint,
    Script,
    ServerFacts,
    Sleep,
    Slot,
    Step,
    Table,
    Transaction,
    Truncate,
    Update,
    UserTypeDecl,
    WaitFor,
    WriteTransaction,
)
from pgwire_mock.script.types import ColumnType, convert, is_plain, to_plain
from pgwire_mock.script.wal import CompiledScript

__all__ = [
    "dump_script",
    "load_script",
    "loads_script",
    "loads_steps",
    "step_from_dict",
    "step_to_dict",
]

T = TypeVar("T")


class _Loader(yaml.SafeLoader):
    """SafeLoader without YAML 1.1's timestamps and yes/no/on/off booleans."""


_Loader.yaml_implicit_resolvers = {
    first: [
        (tag, regexp)
        for tag, regexp in resolvers
        if tag
        not in (
            "tag:yaml.org,2002:timestamp",
            "tag:yaml.org,2002:bool",
        )
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def load_script(path: str | Path) -> Script:
    """Read a script file (``.yaml``/``.yml``/``.json``); raise ScriptError naming the place."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        raise ScriptError(f"cannot read: {err.strerror}", source=str(p)) from None
    except UnicodeDecodeError as err:
        raise ScriptError(f"not UTF-8 text: {err.reason}", source=str(p)) from None
    return loads_script(text, source=str(p), json_only=p.suffix.lower() == ".json")


def loads_script(text: str, *, source: str = "<script>", json_only: bool = False) -> Script:
    """Parse script text (YAML, or JSON when ``json_only``) and check it."""
    data = _parse(text, source, json_only)
    if not isinstance(data, Mapping):
        raise ScriptError("expected a mapping at the top level", source=source)
    script = script_from_dict(data, source)
    compile_script(script)
    return script


def loads_steps(text: str, *, source: str = "<steps>") -> list[Step]:
    """Parse steps written as in a script's ``steps`` (YAML or JSON): a list of steps, one
    step, or a mapping with a ``steps`` list. They are checked when they are compiled
    (against a script's tables), not here."""
    data = _parse(text, source, json_only=False)
    if isinstance(data, Mapping) and "steps" in data and len(data) == 1:
        data = data["steps"]
    raw = data if isinstance(data, list) else [data]
    try:
        return [_step(step, f"steps[{i}]") for i, step in enumerate(raw)]
    except ScriptError as err:
        raise err.located(source) from None


def step_from_dict(data: object, where: str = "step") -> Step:
    """One step from its YAML/JSON form (what :func:`step_to_dict` gives)."""
    return _step(data, where)


def step_to_dict(step: Step, compiled: CompiledScript | None) -> dict[str, Any]:
    """The YAML/JSON form of one step; ``compiled`` (the script it joins) gives the
    column types of values the form cannot hold as they are."""
    return _step_dict(step, _Plain(compiled))


def _parse(text: str, source: str, json_only: bool) -> object:
    try:
        data = json_text.loads(text) if json_only else yaml.load(text, Loader=_Loader)
    except json.JSONDecodeError as err:
        raise ScriptError(f"line {err.lineno}: {err.msg}", source=source) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ScriptError(f"not valid YAML: {problem}", where, source) from None
    except RecursionError:  # PyYAML's composer recurses once per nesting level
        raise ScriptError("not valid YAML: nested too deeply", source=source) from None
    return data


def dump_script(script: Script) -> str:
    """The script as YAML text (keys in the documented order)."""
    return yaml.safe_dump(script.to_dict(), sort_keys=False, allow_unicode=True, width=100)


# --- reading ---------------------------------------------------------------------------------


class _Reader:
    """Typed access to a mapping, with the path for error messages."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, Mapping):
            raise ScriptError(f"expected a mapping, got {_show(data)}", where)
        self.data: Mapping[str, Any] = data
        self.where = where
        self.used: set[str] = set()

    def at(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str, kind: Callable[[object, str], T], default: T) -> T:
        self.used.add(key)
        if key not in self.data or (self.data[key] is None and default is None):
            return default
        return kind(self.data[key], self.at(key))

    def need(self, key: str, kind: Callable[[object, str], T]) -> T:
        self.used.add(key)
        if key not in self.data:
            raise ScriptError(f"missing {key}", self.where or "(top level)")
        return kind(self.data[key], self.at(key))

    def done(self) -> None:
        extra = [k for k in self.data if k not in self.used]
        if extra:
            raise ScriptError(f"unknown key {extra[0]!r}", self.where or "(top level)")


def _show(value: object) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def _str(value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ScriptError(f"expected a non-empty string, got {_show(value)}", where)
    return value


def _opt_str(value: object, where: str) -> str | None:
    return None if value is None else _str(value, where)


def _int(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScriptError(f"expected an integer, got {_show(value)}", where)
    return value


def _bool(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise ScriptError(f"expected true or false, got {_show(value)}", where)
    return value


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ScriptError(f"expected a number, got {_show(value)}", where)
    return float(value)


def _opt_number(value: object, where: str) -> float | None:
    return None if value is None else _number(value, where)


def _lsn(value: object, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str):
        try:
            return int(LSN.parse(value))
        except (ValueError, TypeError, Exception):
            pass
    raise ScriptError(f"expected an LSN like 0/16B3748, got {_show(value)}", where)


def _opt_lsn(value: object, where: str) -> int | None:
    return None if value is None else _lsn(value, where)


def _time(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ScriptError(f"expected a timestamp string, got {_show(value)}", where)
    return value


def _opt_time(value: object, where: str) -> str | None:
    return None if value is None else _time(value, where)


def _memory(value: object, where: str) -> int:
    # A GUC value in kB: 65536, "64kB", "64MB", "1GB".
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+)\s*(kB|MB|GB|TB)?\s*", value)
        if m:
            factor = {"kB": 1, "MB": 1024, "GB": 1024**2, "TB": 1024**3}[m[2] or "kB"]
            return int(m[1]) * factor
    raise ScriptError(f"expected a size like 64kB or 64MB, got {_show(value)}", where)


def _list(value: object, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ScriptError(f"expected a list, got {_show(value)}", where)
    return value


def _str_list(value: object, where: str) -> tuple[str, ...]:
    return tuple(_str(v, f"{where}[{i}]") for i, v in enumerate(_list(value, where)))


def _opt_str_list(value: object, where: str) -> tuple[str, ...] | None:
    return None if value is None else _str_list(value, where)


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    return _Reader(value, where).data


def _values(value: object, where: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise ScriptError(
            f"expected a mapping of column names to values, got {_show(value)}", where
        )
    return dict(value)


def _rows(value: list[Any], where: str) -> tuple[Mapping[str, object], ...]:
    return tuple(_values(row, f"{where}[{j}]") for j, row in enumerate(value))


def _opt_values(value: object, where: str) -> Mapping[str, object] | None:
    return None if value is None else _values(value, where)


def _column(value: object, where: str) -> Column:
    if isinstance(value, str):
        # Compact form: "name type [key]", e.g. "id int4 key", "at timestamp with time zone".
        words = value.split()
        key = len(words) > 2 and words[-1] == "key"
        if key:
            words = words[:-1]
        if len(words) < 2:
            raise ScriptError(f"expected 'name type [key]', got {value!r}", where)
        return Column(words[0], " ".join(words[1:]), key)
    r = _Reader(value, where)
    column = Column(
        r.need("name", _str),
        r.need("type", _str),
        r.get("key", _bool, False),
        r.get("generated", _generated, ""),
    )
    r.done()
    return column


def _generated(value: object, where: str) -> str:
    """``stored`` / ``virtual``; ``true`` (the older spelling) is ``stored``."""
    if value is True:
        return "stored"
    if value is False:
        return ""
    if value in GENERATED_KINDS[1:]:
        return str(value)
    raise ScriptError(f"expected stored or virtual, got {_show(value)}", where)


def _columns(value: object, where: str) -> tuple[Column, ...]:
    return tuple(_column(c, f"{where}[{i}]") for i, c in enumerate(_list(value, where)))


def script_from_dict(data: Mapping[str, Any], source: str = "<script>") -> Script:
    """Build a :class:`Script` from its dict form (does not check names or values)."""
    try:
        return _from_dict(data, source)
    except ScriptError as err:
        raise err.located(source) from None


def _from_dict(data: Mapping[str, Any], source: str) -> Script:
    top = _Reader(data, "")
    version = top.need("format_version", _int)
    if version != FORMAT_VERSION:
        raise ScriptError(
            f"unsupported format_version {version} (this version reads {FORMAT_VERSION})",
            "format_version",
        )
    script = Script()
    script.source = source
    server = top.get("server", _Reader, None)
    if server is not None:
        defaults = ServerFacts()
        facts = ServerFacts(
            server.get("pg_version", _int, defaults.pg_version),
            server.get("system_identifier", _sysid, defaults.system_identifier),
            server.get("timeline", _int, defaults.timeline),
            server.get("start_lsn", _lsn, defaults.start_lsn),
            server.get("logical_decoding_work_mem", _memory, defaults.logical_decoding_work_mem),
            server.get("start_time", _time, defaults.start_time),
            server.get("first_xid", _int, defaults.first_xid),
        )
        server.done()
        script.server = facts
    raw: object
    for i, raw in enumerate(top.get("slots", _list, [])):
        r = _Reader(raw, f"slots[{i}]")
        script.slots.append(
            Slot(
                r.need("name", _str),
                r.get("plugin", _str, "pgoutput"),
                r.get("confirmed_flush", _opt_lsn, None),
                r.get("two_phase", _bool, False),
            )
        )
        r.done()
    for i, raw in enumerate(top.get("publications", _list, [])):
        script.publications.append(_publication(raw, f"publications[{i}]"))
    for i, raw in enumerate(top.get("types", _list, [])):
        script.types.append(_user_type(raw, f"types[{i}]"))
    for i, raw in enumerate(top.get("tables", _list, [])):
        r = _Reader(raw, f"tables[{i}]")
        script.tables.append(
            Table(
                r.need("name", _str),
                r.need("columns", _columns),
                r.get("replica_identity", _str, "default"),
                r.get("oid", _opt_int, None),
                _rows(r.get("rows", _list, []), f"tables[{i}].rows"),
            )
        )
        r.done()
    for i, raw in enumerate(top.get("steps", _list, [])):
        script.steps.append(_step(raw, f"steps[{i}]"))
    top.done()
    return script


def _sysid(value: object, where: str) -> int:
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return _int(value, where)


def _opt_int(value: object, where: str) -> int | None:
    return None if value is None else _int(value, where)


_TYPE_KINDS = ("enum", "domain", "composite")


def _publication_tables(
    raw: list[Any], where: str
) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]], dict[str, str]]:
    """A publication's tables: names, or {name, columns, where} (15+)."""
    names: list[str] = []
    columns: dict[str, tuple[str, ...]] = {}
    filters: dict[str, str] = {}
    for i, item in enumerate(raw):
        at = f"{where}[{i}]"
        if isinstance(item, str):
            names.append(item)
            continue
        t = _Reader(item, at)
        name = t.need("name", _str)
        names.append(name)
        listed = t.get("columns", _opt_str_list, None)
        if listed is not None:
            columns[name] = listed
        condition = t.get("where", _opt_str, None)
        if condition is not None:
            filters[name] = condition
        t.done()
    return tuple(names), columns, filters


def _user_type(raw: object, where: str) -> UserTypeDecl:
    r = _Reader(raw, where)
    name = r.need("name", _str)
    kinds = [k for k in _TYPE_KINDS if k in r.data]
    if len(kinds) != 1:
        raise ScriptError("expected exactly one of enum, domain, composite", where)
    kind = kinds[0]
    oid = r.get("oid", _opt_int, None)
    array_oid = r.get("array_oid", _opt_int, None)
    if kind == "enum":
        decl = UserTypeDecl(
            name, kind, labels=r.need("enum", _str_list), oid=oid, array_oid=array_oid
        )
    elif kind == "domain":
        decl = UserTypeDecl(name, kind, base=r.need("domain", _str), oid=oid, array_oid=array_oid)
    else:
        fields = r.need("composite", _mapping)
        items = tuple((str(k), _str(v, f"{where}.composite.{k}")) for k, v in fields.items())
        decl = UserTypeDecl(name, kind, fields=items, oid=oid, array_oid=array_oid)
    r.done()
    return decl


_STEP_KEYS = (
    "transaction",
    "commit_prepared",
    "rollback_prepared",
    "message",
    "alter_table",
    "create_publication",
    "alter_publication",
    "drop_publication",
    "sleep",
    "fault",
    "wait_for",
    "begin",
    "write",
    "commit",
    "rollback",
    "prepare",
)


def _which(r: _Reader, keys: tuple[str, ...], what: str) -> str:
    found = [k for k in keys if k in r.data]
    if len(found) != 1:
        raise ScriptError(f"expected exactly one of {', '.join(keys)} ({what})", r.where)
    return found[0]


_ALTER_PUBLICATION_KEYS = ("add_tables", "drop_tables", "set_tables", "publish")


def _publication(raw: object, where: str) -> Publication:
    r = _Reader(raw, where)
    tables, columns, filters = _publication_tables(r.get("tables", _list, []), r.at("tables"))
    publication = Publication(
        r.need("name", _str),
        tables,
        r.get("all_tables", _bool, False),
        columns,
        filters,
        r.get("generated_columns", _opt_str, None),
        r.get("publish", _opt_str_list, None),
    )
    r.done()
    return publication


def _publication_dict(p: Publication) -> dict[str, Any]:
    return _drop_defaults(
        {
            "name": p.name,
            **(
                {"all_tables": True}
                if p.all_tables
                else {"tables": [_publication_table(p, t) for t in p.tables]}
            ),
            "generated_columns": p.generated_columns,
            "publish": list(p.publish) if p.publish is not None else None,
        },
        {"generated_columns": None, "publish": None},
    )


def _step(raw: object, where: str) -> Step:
    r = _Reader(raw, where)
    kind = _which(r, _STEP_KEYS, "a step")
    step: Step
    if kind == "transaction":
        step = _transaction(r)
    elif kind == "commit_prepared":
        step = CommitPrepared(r.need(kind, _str), r.get("commit_time", _opt_time, None))
    elif kind == "rollback_prepared":
        step = RollbackPrepared(r.need(kind, _str), r.get("rollback_time", _opt_time, None))
    elif kind == "message":
        step = _message(r.need(kind, _Reader))
    elif kind == "alter_table":
        step = _alter(r)
    elif kind == "create_publication":
        step = CreatePublication(_publication(r.data[kind], r.at(kind)))
        r.used.add(kind)
    elif kind == "drop_publication":
        step = DropPublication(r.need(kind, _str))
    elif kind == "alter_publication":
        action = _which(r, _ALTER_PUBLICATION_KEYS, "what alter_publication does")
        names = r.need(action, _str_list)
        if action == "publish":
            step = AlterPublication(r.need(kind, _str), action, publish=names)
        else:
            step = AlterPublication(r.need(kind, _str), action.removesuffix("_tables"), names)
    elif kind == "sleep":
        step = Sleep(r.need(kind, _number))
    elif kind == "wait_for":
        step = _wait_for(r)
    elif kind == "begin":
        step = BeginTransaction(
            r.need(kind, _str),
            r.get("stream", _str, "auto"),
            r.get("origin", _opt_str, None),
            r.get("origin_lsn", _opt_lsn, None),
        )
    elif kind == "write":
        raw_changes = r.need("changes", _list)
        changes = (_change(c, f"{r.at('changes')}[{i}]") for i, c in enumerate(raw_changes))
        step = WriteTransaction(r.need(kind, _str), tuple(changes))
    elif kind in ("commit", "rollback", "prepare"):
        step = EndTransaction(
            r.need(kind, _str),
            kind == "rollback",
            r.need("gid", _str) if kind == "prepare" else None,
            r.get("commit_time", _opt_time, None),
        )
    else:
        name = r.need(kind, _str)
        params = {k: v for k, v in r.data.items() if k != "fault"}
        r.used.update(params)
        step = Fault(name, params)
    r.done()
    return step


def _wait_for(r: _Reader) -> WaitFor:
    body = r.data["wait_for"]
    r.used.add("wait_for")
    if body == "confirmed":
        return WaitFor()
    w = _Reader(body, r.at("wait_for"))
    seconds = w.get("seconds", _number, 0.0)
    step = WaitFor(
        w.get("confirmed", _bool, "seconds" not in w.data),
        w.get("slot", _opt_str, None),
        seconds,
        w.get("timeout", _opt_number, None),
    )
    w.done()
    return step


def _transaction(r: _Reader) -> Transaction:
    body = r.data["transaction"]
    r.used.add("transaction")
    # Places inside a transaction read steps[3].changes[0], as in the compiler's messages.
    where = r.where
    if isinstance(body, list):
        body = {"changes": body}
    t = _Reader(body, where)
    raw_changes = t.need("changes", _list)
    changes = tuple(_change(c, f"{where}.changes[{i}]") for i, c in enumerate(raw_changes))
    txn = Transaction(
        changes,
        t.get("origin", _opt_str, None),
        t.get("origin_lsn", _opt_lsn, None),
        t.get("commit_time", _opt_time, None),
        t.get("stream", _str, "auto"),
        t.get("prepare", _opt_str, None),
        t.get("rollback", _bool, False),
        t.get("long_running", _bool, False),
    )
    t.done()
    return txn


_CHANGE_KEYS = (
    "insert",
    "update",
    "delete",
    "truncate",
    "message",
    "savepoint",
    "rollback_to_savepoint",
    "release_savepoint",
    "alter_table",
)


def _change(raw: object, where: str) -> Change:
    r = _Reader(raw, where)
    kind = _which(r, _CHANGE_KEYS, "a change")
    change: Change
    if kind == "insert":
        change = Insert(r.need(kind, _str), r.get("values", _values, {}))
    elif kind == "update":
        change = Update(
            r.need(kind, _str),
            r.get("values", _values, {}),
            r.get("key", _opt_values, None),
            r.get("old", _opt_values, None),
            r.get("unchanged", _str_list, ()),
        )
    elif kind == "delete":
        change = Delete(
            r.need(kind, _str), r.get("key", _opt_values, None), r.get("old", _opt_values, None)
        )
    elif kind == "truncate":
        tables = r.data[kind]
        r.used.add(kind)
        names = (
            (_str(tables, r.at(kind)),)
            if isinstance(tables, str)
            else _str_list(tables, r.at(kind))
        )
        change = Truncate(
            names, r.get("cascade", _bool, False), r.get("restart_identity", _bool, False)
        )
    elif kind == "message":
        change = _message(r.need(kind, _Reader))
    elif kind == "savepoint":
        change = Savepoint(r.need(kind, _str))
    elif kind == "rollback_to_savepoint":
        change = RollbackToSavepoint(r.need(kind, _str))
    elif kind == "release_savepoint":
        change = ReleaseSavepoint(r.need(kind, _str))
    else:
        change = _alter(r)
    r.done()
    return change


def _message(m: _Reader) -> LogicalMessage:
    prefix = m.need("prefix", _str)
    has_text = "content" in m.data
    has_hex = "content_hex" in m.data
    if has_text == has_hex:
        raise ScriptError("expected exactly one of content, content_hex", m.where)
    if has_text:
        text = m.need("content", lambda v, w: v)
        if not isinstance(text, str):
            raise ScriptError(f"expected a string, got {_show(text)}", m.at("content"))
        content = text.encode()
    else:
        hex_text = m.need("content_hex", lambda v, w: v)
        try:
            content = bytes.fromhex(str(hex_text))
        except ValueError:
            raise ScriptError(
                f"expected hex digits, got {_show(hex_text)}", m.at("content_hex")
            ) from None
    m.done()
    return LogicalMessage(prefix, content)


def _alter(r: _Reader) -> AlterTable:
    return AlterTable(
        r.need("alter_table", _str),
        r.get("add_columns", _columns, ()),
        r.get("drop_columns", _str_list, ()),
    )


# --- writing -------------------------------------------------------------------------------


def script_to_dict(script: Script) -> dict[str, Any]:
    """The YAML/JSON form of ``script``."""
    compiled: CompiledScript | None
    try:
        compiled = compile_script(script)
    except ScriptError:
        compiled = None
    server = script.server
    out: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "server": {
            "pg_version": server.pg_version,
            "system_identifier": str(server.system_identifier),
            "timeline": server.timeline,
            "start_lsn": str(LSN(server.start_lsn)),
            "logical_decoding_work_mem": _format_memory(server.logical_decoding_work_mem),
            "start_time": server.start_time,
            "first_xid": server.first_xid,
        },
    }
    if script.slots:
        out["slots"] = [
            _drop_defaults(
                {
                    "name": s.name,
                    "plugin": s.plugin,
                    "confirmed_flush": None
                    if s.confirmed_flush is None
                    else str(LSN(s.confirmed_flush)),
                    "two_phase": s.two_phase,
                },
                {"plugin": "pgoutput", "confirmed_flush": None, "two_phase": False},
            )
            for s in script.slots
        ]
    if script.publications:
        out["publications"] = [_publication_dict(p) for p in script.publications]
    if script.types:
        out["types"] = [_type_dict(t) for t in script.types]
    plain = _Plain(compiled)
    if script.tables:
        out["tables"] = [
            _drop_defaults(
                {
                    "name": t.name,
                    "oid": t.oid,
                    "replica_identity": t.replica_identity,
                    "columns": [_column_dict(c) for c in t.columns],
                    "rows": [plain.values(t.name, row) for row in t.rows],
                },
                {"oid": None, "replica_identity": "default", "rows": []},
            )
            for t in script.tables
        ]
    if script.steps:
        out["steps"] = [_step_dict(s, plain) for s in script.steps]
    return out


def _publication_table(p: Publication, table: str) -> str | dict[str, Any]:
    if table not in p.columns and table not in p.where:
        return table
    out: dict[str, Any] = {"name": table}
    if table in p.columns:
        out["columns"] = list(p.columns[table])
    if table in p.where:
        out["where"] = p.where[table]
    return out


def _format_memory(kb: int) -> str:
    if kb % (1024 * 1024) == 0:
        return f"{kb // (1024 * 1024)}GB"
    if kb % 1024 == 0:
        return f"{kb // 1024}MB"
    return f"{kb}kB"


def _drop_defaults(d: dict[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in defaults or v != defaults[k]}


def _type_dict(t: UserTypeDecl) -> dict[str, Any]:
    d: dict[str, Any] = {"name": t.name}
    if t.kind == "enum":
        d["enum"] = list(t.labels)
    elif t.kind == "domain":
        d["domain"] = t.base
    else:
        d["composite"] = dict(t.fields)
    if t.oid is not None:
        d["oid"] = t.oid
    if t.array_oid is not None:
        d["array_oid"] = t.array_oid
    return d


def _column_dict(c: Column) -> dict[str, Any]:
    return _drop_defaults(
        {"name": c.name, "type": c.type, "key": c.key, "generated": c.generated},
        {"key": False, "generated": ""},
    )


class _Plain:
    """Turns Python API values into YAML values, using the compiled column types."""

    def __init__(self, compiled: CompiledScript | None) -> None:
        self.compiled = compiled

    def values(self, table: str, values: Mapping[str, object] | None) -> dict[str, object] | None:
        if values is None:
            return None
        out: dict[str, object] = {}
        for name, value in values.items():
            if is_plain(value):
                out[name] = value
                continue
            ctype, typmod = self._column(table, name)
            if ctype is None:
                out[name] = str(value)
            else:
                out[name] = to_plain(ctype, convert(ctype, typmod, value))
        return out

    def _column(self, table: str, name: str) -> tuple[ColumnType | None, int]:
        if self.compiled is None:
            return None, -1
        for step_table in self.compiled.script.tables:
            if step_table.name == table:
                for c in step_table.columns:
                    if c.name == name:
                        return self.compiled.catalog.resolve(c.type)
        # A column added later by ALTER TABLE.
        for step in self.compiled.script.steps:
            changes = step.changes if isinstance(step, Transaction) else (step,)
            for ch in changes:
                if isinstance(ch, AlterTable) and ch.table == table:
                    for c in ch.add_columns:
                        if c.name == name:
                            return self.compiled.catalog.resolve(c.type)
        return None, -1


def _message_dict(m: LogicalMessage) -> dict[str, Any]:
    try:
        return {"prefix": m.prefix, "content": m.content.decode("utf-8")}
    except UnicodeDecodeError:
        return {"prefix": m.prefix, "content_hex": m.content.hex()}


def _alter_dict(a: AlterTable) -> dict[str, Any]:
    d: dict[str, Any] = {"alter_table": a.table}
    if a.add_columns:
        d["add_columns"] = [_column_dict(c) for c in a.add_columns]
    if a.drop_columns:
        d["drop_columns"] = list(a.drop_columns)
    return d


def _step_dict(step: Step, plain: _Plain) -> dict[str, Any]:
    if isinstance(step, Transaction):
        body: dict[str, Any] = {}
        for key, value, default in (
            ("origin", step.origin, None),
            ("origin_lsn", None if step.origin_lsn is None else str(LSN(step.origin_lsn)), None),
            ("commit_time", step.commit_time, None),
            ("stream", step.stream, "auto"),
            ("prepare", step.prepare, None),
            ("rollback", step.rollback, False),
            ("long_running", step.long_running, False),
        ):
            if value != default:
                body[key] = value
        body["changes"] = [_change_dict(c, plain) for c in step.changes]
        return {"transaction": body}
    if isinstance(step, CommitPrepared):
        d: dict[str, Any] = {"commit_prepared": step.gid}
        if step.commit_time is not None:
            d["commit_time"] = step.commit_time
        return d
    if isinstance(step, RollbackPrepared):
        d = {"rollback_prepared": step.gid}
        if step.rollback_time is not None:
            d["rollback_time"] = step.rollback_time
        return d
    if isinstance(step, LogicalMessage):
        return {"message": _message_dict(step)}
    if isinstance(step, AlterTable):
        return _alter_dict(step)
    if isinstance(step, CreatePublication):
        return {"create_publication": _publication_dict(step.publication)}
    if isinstance(step, DropPublication):
        return {"drop_publication": step.name}
    if isinstance(step, AlterPublication):
        if step.action == "publish":
            return {"alter_publication": step.name, "publish": list(step.publish)}
        return {"alter_publication": step.name, f"{step.action}_tables": list(step.tables)}
    if isinstance(step, Sleep):
        return {"sleep": step.seconds}
    if isinstance(step, WaitFor):
        return {"wait_for": _wait_dict(step)}
    if isinstance(step, BeginTransaction):
        d = {"begin": step.name}
        if step.stream != "auto":
            d["stream"] = step.stream
        if step.origin is not None:
            d["origin"] = step.origin
        if step.origin_lsn is not None:
            d["origin_lsn"] = str(LSN(step.origin_lsn))
        return d
    if isinstance(step, WriteTransaction):
        return {"write": step.name, "changes": [_change_dict(c, plain) for c in step.changes]}
    if isinstance(step, EndTransaction):
        how = "prepare" if step.prepare is not None else "rollback" if step.rollback else "commit"
        d = {how: step.name}
        if step.prepare is not None:
            d["gid"] = step.prepare
        if step.commit_time is not None:
            d["commit_time"] = step.commit_time
        return d
    return {"fault": step.name, **dict(step.params)}


def _wait_dict(step: WaitFor) -> str | dict[str, Any]:
    if step == WaitFor():
        return "confirmed"
    d: dict[str, Any] = {"confirmed": step.confirmed}
    for key, value in (("slot", step.slot), ("seconds", step.seconds), ("timeout", step.timeout)):
        if value:
            d[key] = value
    return d


def _change_dict(change: Change, plain: _Plain) -> dict[str, Any]:
    if isinstance(change, Insert):
        return {"insert": change.table, "values": plain.values(change.table, change.values)}
    if isinstance(change, Update):
        d: dict[str, Any] = {
            "update": change.table,
            "values": plain.values(change.table, change.values),
        }
        if change.key is not None:
            d["key"] = plain.values(change.table, change.key)
        if change.old is not None:
            d["old"] = plain.values(change.table, change.old)
        if change.unchanged:
            d["unchanged"] = list(change.unchanged)
        return d
    if isinstance(change, Delete):
        d = {"delete": change.table}
        if change.key is not None:
            d["key"] = plain.values(change.table, change.key)
        if change.old is not None:
            d["old"] = plain.values(change.table, change.old)
        return d
    if isinstance(change, Truncate):
        d = {"truncate": list(change.tables)}
        if change.cascade:
            d["cascade"] = True
        if change.restart_identity:
            d["restart_identity"] = True
        return d
    if isinstance(change, LogicalMessage):
        return {"message": _message_dict(change)}
    if isinstance(change, Savepoint):
        return {"savepoint": change.name}
    if isinstance(change, RollbackToSavepoint):
        return {"rollback_to_savepoint": change.name}
    if isinstance(change, ReleaseSavepoint):
        return {"release_savepoint": change.name}
    return _alter_dict(change)
