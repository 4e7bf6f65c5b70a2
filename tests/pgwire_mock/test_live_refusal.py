"""conformance.live's _refusal when a blocked command's cancel does not land: the
connection is ended under the thread still in execute() and closed only after it, so
_refusal returns and the next connection is not disturbed (closing it under execute()
frees psycopg's PGconn under the waiting thread)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg
import pytest

from conformance import live
from pgwire_mock.pytest_plugin import WalSender
from pgwire_mock.script import Script, column, insert

TABLE = "public.t"


def test_a_blocked_command_whose_cancel_does_not_land_is_ended_under_its_thread(
    make_walsender: Callable[..., WalSender], monkeypatch: pytest.MonkeyPatch
) -> None:
    script = (
        Script(pg_version=17)
        .table(TABLE, columns=[column("id", "int4", key=True), column("v", "text")])
        .publication("pub", tables=[TABLE])
    )
    server = make_walsender(script=script, new_slots="end_of_wal")
    txn = server.begin()
    txn.write([insert(TABLE, id=1, v="open")])  # a slot creation waits for it
    monkeypatch.setattr(psycopg.Connection, "cancel_safe", lambda *_a, **_k: None)
    command = "CREATE_REPLICATION_SLOT blocked LOGICAL pgoutput"
    refused: list[tuple[str | None, str]] = []
    # In a thread: leaving a `with` block on the connection (as _refusal did) commits,
    # which waits for the connection's lock, held by the thread in execute(): a hang.
    refusal = threading.Thread(
        target=lambda: refused.append(live._refusal(server.dsn(), command, wait=0.3)),
        daemon=True,
    )
    refusal.start()
    refusal.join(10)
    assert refused == [("blocked", "")]
    for _ in range(5):
        answered = threading.Event()

        def identify(answered: threading.Event) -> None:
            with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=5) as conn:
                if conn.execute("IDENTIFY_SYSTEM").fetchone() is not None:
                    answered.set()

        # In a thread: the connection disturbed by a close under execute() hangs.
        threading.Thread(target=identify, args=(answered,), daemon=True).start()
        assert answered.wait(5), "a new connection got no answer"
    txn.commit()
    assert "blocked" not in server.slots
