"""``serve --control``: a small HTTP interface for tests outside Python.

A consumer under test may be written in Java, Go or node, and its test drives the fake
walsender from there: write transactions while the consumer runs, read the slots, inject
a fault. The endpoints (JSON answers; positions as ``X/Y``):

``GET /wal``
    the end of WAL, the wait_for step holding the script back (if any), and each slot's
    confirmed_flush, restart_lsn and active_pid;
``POST /wal``
    a body of script steps (YAML or JSON, as in a script's ``steps``: one step, a list,
    or ``{"steps": [...]}``) written now; answers the new end of WAL. 400 with the
    script's one-line error for a step that does not fit (the steps before it are
    written); 409 when the served stream is a recording;
``POST /transactions``
    begins a transaction that stays open (a body of options, all optional: ``stream``,
    ``origin``, ``origin_lsn``); answers its ``id``;
``POST /transactions/ID``
    a body of changes (as in a transaction's ``changes``: one, a list, or
    ``{"changes": [...]}``) written now; answers the new end of WAL (400 for a change
    that does not fit: none is written; 404 for an unknown id, 409 once it ended);
``POST /transactions/ID/commit``, ``POST /transactions/ID/rollback``
    ends it (a body ``{"commit_time": ...}`` is optional); answers ``commit_end_lsn``,
    the position a consumer confirms once it applied the transaction;
    ``POST /transactions/ID/prepare`` with ``{"gid": ...}`` prepares it (a
    ``commit_prepared`` step posted to ``/wal`` finishes it);
``POST /faults``
    a body ``NAME[:ARGS]`` as ``--fault`` takes it, applied to the newest streaming
    connection now (``"applied": true``) or else to the next one that starts.

It listens on its own endpoint (``tcp:8433:interface=127.0.0.1``), never on the
PostgreSQL port, and answers on the reactor thread, so what it reads and writes is
consistent with the walsenders'.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from twisted.web.resource import Resource
from twisted.web.server import Site

from pgwire_mock.server.faults import Fault, FaultError
from pgwire_mock.server.grammar import format_lsn
from pgwire_mock.server.protocol import WalSenderFactory

if TYPE_CHECKING:  # the script package loads YAML: imported when a request needs it
    from pgwire_mock.script.compile import OpenTxn

__all__ = ["control_site"]

MAX_BODY = 16 << 20
"""Bytes of a request body read at most (a step file of a few thousand transactions)."""


def _answer(request: Any, status: int, body: dict[str, Any]) -> bytes:
    request.setResponseCode(status)
    request.setHeader(b"content-type", b"application/json")
    return (json.dumps(body) + "\n").encode()


def _body(request: Any) -> str | None:
    content = request.content
    data = content.read(MAX_BODY + 1) if content is not None else b""
    if len(data) > MAX_BODY:
        return None
    return data.decode("utf-8", errors="replace")


class _Wal(Resource):
    isLeaf = True  # noqa: N815 - Twisted's name

    def __init__(self, factory: WalSenderFactory) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.factory = factory

    def render_GET(self, request: Any) -> bytes:  # noqa: N802 - Twisted's name
        return _answer(request, 200, self.status())

    def render_POST(self, request: Any) -> bytes:  # noqa: N802 - Twisted's name
        from pgwire_mock.script import ScriptError, loads_steps  # noqa: PLC0415 - YAML

        writer = self.factory.wal_writer
        if writer is None:
            return _answer(request, 409, {"error": "the served stream is not a script"})
        text = _body(request)
        if text is None:
            return _answer(request, 413, {"error": f"the body is over {MAX_BODY} bytes"})
        try:
            writer.append(loads_steps(text, source="POST /wal"))
        except ScriptError as err:
            return _answer(request, 400, {"error": str(err), **self.status()})
        return _answer(request, 200, self.status())

    def status(self) -> dict[str, Any]:
        state = self.factory.state
        writer = self.factory.wal_writer
        held = writer.wal.held if writer is not None else None
        return {
            "end_lsn": format_lsn(state.wal_lsn),
            "held_at": format_lsn(held.lsn) if held is not None else None,
            "slots": {
                slot.name: {
                    "confirmed_flush": format_lsn(slot.confirmed_flush),
                    "restart_lsn": format_lsn(slot.restart_lsn),
                    "active_pid": slot.active_pid,
                }
                for slot in state.slots.values()
            },
        }


class _Transactions(Resource):
    """Transactions left open, by id, for the life of the server."""

    isLeaf = True  # noqa: N815 - Twisted's name

    def __init__(self, wal: _Wal) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.wal = wal
        self.open: dict[int, OpenTxn] = {}

    def render_POST(self, request: Any) -> bytes:  # noqa: N802 - Twisted's name
        from pgwire_mock.script import ScriptError  # noqa: PLC0415 - YAML, see _Wal
        from pgwire_mock.script.loader import loads_changes, loads_options  # noqa: PLC0415

        writer = self.wal.factory.wal_writer
        if writer is None:
            return _answer(request, 409, {"error": "the served stream is not a script"})
        text = _body(request)
        if text is None:
            return _answer(request, 413, {"error": f"the body is over {MAX_BODY} bytes"})
        path = [part.decode("utf-8", "replace") for part in request.postpath if part]
        try:
            if not path:
                keys = ("stream", "origin", "origin_lsn")
                txn = writer.begin(**loads_options(text, keys, source="POST /transactions"))
                key = len(self.open) + 1
                self.open[key] = txn
                return _answer(request, 200, {"id": key, **self.wal.status()})
            found = self.open.get(int(path[0])) if path[0].isdigit() else None
            if found is None or path[1:] not in ([], ["commit"], ["rollback"], ["prepare"]):
                return _answer(request, 404, {"error": "no such transaction or action"})
            txn, where = found, "POST /transactions/" + "/".join(path)
            if txn.ended:
                return _answer(request, 409, {"error": "the transaction has ended"})
            if len(path) == 1:
                writer.write(txn, loads_changes(text, source=where))
                return _answer(request, 200, self.wal.status())
            if path[1] == "prepare":
                options = loads_options(text, ("gid", "commit_time"), source=where)
                if "gid" not in options:
                    raise ScriptError("missing gid", where)
                end = writer.finish(txn, prepare=options.pop("gid"), **options)
            else:
                options = loads_options(text, ("commit_time",), source=where)
                end = writer.finish(txn, rollback=path[1] == "rollback", **options)
            return _answer(request, 200, {"commit_end_lsn": format_lsn(end), **self.wal.status()})
        except ScriptError as err:
            return _answer(request, 400, {"error": str(err), **self.wal.status()})


class _Faults(Resource):
    isLeaf = True  # noqa: N815 - Twisted's name

    def __init__(self, factory: WalSenderFactory) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.factory = factory

    def render_POST(self, request: Any) -> bytes:  # noqa: N802 - Twisted's name
        text = _body(request)
        if text is None:
            return _answer(request, 413, {"error": f"the body is over {MAX_BODY} bytes"})
        try:
            fault = Fault.parse(text.strip())
        except FaultError as err:
            return _answer(request, 400, {"error": str(err)})
        try:
            applied = self.factory.inject(fault)
        except FaultError as err:
            return _answer(request, 400, {"error": str(err)})
        return _answer(request, 200, {"applied": applied})


def control_site(factory: WalSenderFactory) -> Site:
    """The HTTP site of ``serve --control`` for the server ``factory`` serves."""
    # twisted.web is untyped: its resources are zope interfaces mypy cannot check.
    root: Any = Resource()  # type: ignore[no-untyped-call]
    wal = _Wal(factory)
    root.putChild(b"wal", wal)
    root.putChild(b"transactions", _Transactions(wal))
    root.putChild(b"faults", _Faults(factory))
    site = Site(root)  # type: ignore[no-untyped-call]
    site.displayTracebacks = False
    return site
