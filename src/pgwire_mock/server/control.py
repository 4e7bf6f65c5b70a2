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
    written); 409 when the served stream is a recording, or while the server restarts;
``POST /faults``
    a body ``NAME[:ARGS]`` as ``--fault`` takes it, applied to the newest streaming
    connection now (``"applied": true``) or else to the next one that starts.

``POST /snapshot``
    writes a running-xacts record now, as ``SELECT pg_log_standby_snapshot()`` does (a
    body ``{"checkpoint": true}``: CHECKPOINT's records) and answers as ``GET /wal``
    does: a walsender that decodes it moves its slot's restart_lsn there once the
    client confirms it, and saves the slot; 409 when the served stream is a recording
    or a wait_for step holds the WAL back.

``POST /restart``
    restarts the server as ``pg_ctl restart -m fast`` does (``WalSender.restart``:
    docs/faults.md) and answers, as ``GET /wal`` does, once it takes connections
    again; a body ``{"timeout": 60}`` bounds the wait for walsenders whose clients must
    confirm what they were sent (504 after it, the server still shutting down; 409
    while a restart is under way); ``{"immediate": true}`` is ``-m immediate``, a crash.

It listens on its own endpoint (``tcp:8433:interface=127.0.0.1``), never on the
PostgreSQL port, and answers on the reactor thread, so what it reads and writes is
consistent with the walsenders'.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Site

from pgwire_mock import json_text
from pgwire_mock.server.faults import Fault, FaultError
from pgwire_mock.server.grammar import format_lsn
from pgwire_mock.server.live import ShuttingDownError
from pgwire_mock.server.protocol import WalSenderFactory

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
        return _answer(request, 200, self._status())

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
            return _answer(request, 400, {"error": str(err), **self._status()})
        except ShuttingDownError as err:
            return _answer(request, 409, {"error": str(err)})
        return _answer(request, 200, self._status())

    def _status(self) -> dict[str, Any]:
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


class _RefusedError(Exception):
    """A request answered with an error before it is acted on (the answer's bytes)."""

    def __init__(self, answer: bytes) -> None:
        super().__init__()
        self.answer = answer


def _options(request: Any, expected: str, **defaults: bool | float) -> dict[str, Any]:
    """The fields of a JSON object body, a missing one its default, each of its
    default's type; _RefusedError (413, or 400 naming ``expected``) for anything else."""
    text = _body(request)
    if text is None:
        raise _RefusedError(_answer(request, 413, {"error": f"the body is over {MAX_BODY} bytes"}))
    try:
        body = json_text.loads(text) if text.strip() else {}
        options: dict[str, Any] = {}
        for key, default in defaults.items():
            value = body.get(key, default)
            if isinstance(default, bool) and not isinstance(value, bool):
                raise TypeError(value)
            options[key] = value if isinstance(default, bool) else float(value)
    except (ValueError, TypeError, AttributeError):
        answer = _answer(request, 400, {"error": f"expected a body {expected}"})
        raise _RefusedError(answer) from None
    return options


class _Answering(Resource):
    """A POST endpoint that answers with the server's status, as GET /wal does."""

    isLeaf = True  # noqa: N815 - Twisted's name

    def __init__(self, factory: WalSenderFactory, status: Callable[[], dict[str, Any]]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.factory = factory
        self.status = status


class _Snapshot(_Answering):
    def render_POST(self, request: Any) -> bytes:  # noqa: N802 - Twisted's name
        try:
            checkpoint = _options(request, '{"checkpoint": BOOL}', checkpoint=False)["checkpoint"]
        except _RefusedError as refused:
            return refused.answer
        writer = self.factory.wal_writer
        if writer is None:
            return _answer(request, 409, {"error": "the served stream is not a script"})
        try:
            written = writer.online_checkpoint() if checkpoint else writer.log_running_xacts()
        except ShuttingDownError as err:
            return _answer(request, 409, {"error": str(err)})
        if written is None:
            return _answer(request, 409, {"error": "a wait_for step holds the WAL back"})
        return _answer(request, 200, self.status())


class _Restart(_Answering):
    def render_POST(self, request: Any) -> Any:  # noqa: N802 - Twisted's name
        try:
            options = _options(
                request, '{"timeout": SECONDS, "immediate": BOOL}', timeout=60.0, immediate=False
            )
        except _RefusedError as refused:
            return refused.answer
        timeout, immediate = options["timeout"], options["immediate"]
        if timeout <= 0:
            return _answer(request, 400, {"error": f"timeout: expected > 0, got {timeout:g}"})
        if not self.factory.state.accepts_connections:
            return _answer(request, 409, {"error": "the server is shutting down already"})

        def finish(code: int, body: dict[str, Any]) -> None:
            if not request.finished and not getattr(request, "_disconnected", False):
                request.write(_answer(request, code, body))
                request.finish()

        restarted = self.factory.restart(timeout, immediate=immediate)
        restarted.addCallbacks(
            lambda _: finish(200, self.status()),
            lambda failure: finish(504, {"error": failure.getErrorMessage()}),
        )
        return NOT_DONE_YET


def control_site(factory: WalSenderFactory) -> Site:
    """The HTTP site of ``serve --control`` for the server ``factory`` serves."""
    # twisted.web is untyped: its resources are zope interfaces mypy cannot check.
    root: Any = Resource()  # type: ignore[no-untyped-call]
    wal = _Wal(factory)
    root.putChild(b"wal", wal)
    root.putChild(b"faults", _Faults(factory))
    root.putChild(b"snapshot", _Snapshot(factory, wal._status))
    root.putChild(b"restart", _Restart(factory, wal._status))
    site = Site(root)  # type: ignore[no-untyped-call]
    site.displayTracebacks = False
    return site
