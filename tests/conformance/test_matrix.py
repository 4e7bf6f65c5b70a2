"""The conformance matrix against real PostgreSQL 14–17 (the ``pg_server`` fixture).

The first test is the CI proof: every scenario × option set × check passes on every
version, through the SQL interface, through the real walsender and through the fake
walsender replaying the SQL interface's capture (``FakeWalsender``), and the fake replies
to the probe commands as the real server does (``replies``). The others show that the
pipeline can fail (a subject that drops a message is caught) and that the command line
reports and exits as documented.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace

import pytest

from conformance.checks import CHECKS
from conformance.matrix import MatrixResult, render_text, run_matrix, run_version
from conformance.provision import Server
from conformance.scenarios import SCENARIOS, OptionSet, option_sets
from conformance.subjects import SUBJECTS, ScenarioRun, SqlInterface, Stream
from pgwire_mock import cli


def test_every_cell_of_the_matrix_passes(pg_server: Server) -> None:
    """Every scenario, under every option set the version supports, passes every check."""
    cells = run_version(pg_server)
    failures = [f"{c.scenario} {c.option_set} {c.check}: {c.detail}" for c in cells if not c.ok]
    assert not failures, "\n".join(failures)
    # Nothing silently left out: one cell per scenario, option set and check.
    runnable = [s for s in SCENARIOS if s.min_version <= pg_server.version]
    assert len(cells) == len(runnable) * len(option_sets(pg_server.version)) * len(CHECKS)
    assert {c.check for c in cells} == {c.name for c in CHECKS}


@dataclass
class DroppingSubject:
    """The SQL interface, minus the second Insert of each stream: a broken implementation."""

    name: str = "dropping"
    consumes_slot: bool = False
    positions: str = "same"

    def capture(self, run: ScenarioRun, options: OptionSet) -> Stream:
        stream = SqlInterface().capture(run, options)
        inserts = [i for i, m in enumerate(stream) if m.tag == "I"]
        return stream[: inserts[1]] + stream[inserts[1] + 1 :]


def test_a_subject_that_drops_a_message_fails_its_cells(pg_server: Server) -> None:
    types = [s for s in SCENARIOS if s.name == "types"]
    cells = run_version(pg_server, types, (*SUBJECTS, DroppingSubject()))
    failed = {c.check for c in cells if not c.ok}
    assert failed == {"same-messages", "values"}
    detail = next(c.detail for c in cells if c.check == "same-messages")
    assert detail.startswith("dropping: message 3: 'C' Commit where sql has 'I' Insert")


def test_the_command_prints_the_matrix_and_exits_zero(
    pg_server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    status = cli.main(
        ["conformance", "--dsn", f"{pg_server.version}={pg_server.dsn}", "--scenarios", "toast"]
    )
    out = capsys.readouterr().out
    assert status == 0, out
    assert f"PostgreSQL {pg_server.full_version}: 1 scenarios" in out
    assert "toast" in out and "✗" not in out
    assert out.rstrip().endswith("cells passed")


def test_the_command_writes_json(pg_server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    status = cli.main(
        [
            "conformance",
            "--json",
            "--dsn",
            f"{pg_server.version}={pg_server.dsn}",
            "--scenarios",
            "messages",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert status == 0
    assert data["ok"] is True
    assert {c["scenario"] for c in data["cells"]} == {"messages"}
    assert data["timings"][0]["major"] == pg_server.version


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--scenarios", "nope"], "unknown scenario nope"),
        (["--versions", "13"], "unsupported PostgreSQL major '13'"),
        (["--dsn", "sixteen"], "expected MAJOR=DSN"),
        (["--versions", "14", "--dsn", "16=postgresql://x/"], "--dsn given for 16"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_one(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["conformance", *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("pgwire-mock conformance: ") and message in err
    assert err.count("\n") == 1


def test_the_text_output_lists_each_failure_once_per_reason() -> None:
    from io import StringIO

    from conformance.matrix import CellResult, VersionTimings

    result = MatrixResult(
        [
            CellResult(16, "types", "v1", "capture", True),
            CellResult(16, "types", "v1", "values", False, "walsender: bad"),
            CellResult(16, "types", "v1-binary", "values", False, "walsender: bad"),
        ],
        [VersionTimings(16, "16.14", server=1.0)],
    )
    out = StringIO()
    render_text(result, out)
    text = out.getvalue()
    assert "  ✗ types values [v1,v1-binary]: walsender: bad\n" in text
    assert text.endswith("2 of 3 cells failed\n")
    assert not result.ok
    assert not run_matrix([], {}).ok  # an empty matrix proves nothing


# The fake walsender as a subject ------------------------------------------------------


def test_the_fake_replaying_a_broken_capture_fails_same_messages(pg_server: Server) -> None:
    """The fake subject really is compared with the reference: fed a capture that lost a
    message, its same-messages and values cells fail and name it."""
    from conformance.subjects import FakeWalsender

    class FakeOfDropping(FakeWalsender):
        name = "fake-of-dropping"

    types = [s for s in SCENARIOS if s.name == "types"]
    subjects = (*SUBJECTS, DroppingSubject(), FakeOfDropping(reference="dropping"))
    cells = run_version(pg_server, types, subjects)
    failed = {c.check for c in cells if not c.ok}
    assert failed == {"same-messages", "values"}
    # _per_subject reports the first failing subject and counts the others.
    same = [c.detail for c in cells if c.check == "same-messages"]
    assert all(d.startswith("dropping: message 3") and d.endswith("(+1 more)") for d in same)


def test_different_replies_fail_the_replies_check() -> None:
    """SameReplies names the probe, the subject and both replies."""
    from conformance.checks import CheckContext, SameReplies
    from conformance.replies import ErrorShape, Replies

    real = Replies(
        {"missing slot": ErrorShape("ERROR", "42704", 'replication slot "s" does not exist')}
    )
    fake = Replies(
        {"missing slot": ErrorShape("FATAL", "42704", 'replication slot "s" does not exist')}
    )
    ctx = CheckContext(
        major=16,
        scenario=SCENARIOS[0],
        options=option_sets(16)[0],
        reference="sql",
        streams={},
        replies={"walsender": real, "fake": fake},
    )
    result = SameReplies().run(ctx)
    assert not result.ok
    assert result.detail == (
        "fake: missing slot: fake FATAL 42704 'replication slot \"s\" does not exist', "
        "walsender ERROR 42704 'replication slot \"s\" does not exist'"
    )
    assert SameReplies().run(replace(ctx, replies={"walsender": real})).ok


# Where a caught-up walsender's keepalive points --------------------------------------

CAUGHT_UP_SLOT = "pgwm_matrix_caught_up"


def test_real_walsender_keepalive_reaches_the_wal_end_once_caught_up(pg_server: Server) -> None:
    """Real PostgreSQL: once it has decoded everything, the keepalive it sends carries
    sentPtr, the end of the last WAL record read, i.e. the flush position
    (walsender.c WalSndWaitForWal -> WalSndKeepalive). A client stopping at
    IDENTIFY_SYSTEM's xlogpos (``pg_recvlogical --endpos``) stops at once."""
    from pgwire_mock.client import ReplicationConnection, capture_via_walsender

    with pg_server.connect() as conn:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
            " WHERE slot_name = %s",
            (CAUGHT_UP_SLOT,),
        )
    with ReplicationConnection.connect(pg_server.replication_dsn) as conn:
        conn.create_slot(CAUGHT_UP_SLOT)
        with pg_server.connect() as sql:
            sql.execute("CHECKPOINT")
        end = conn.identify_system().xlogpos
    try:
        captured = capture_via_walsender(
            pg_server.replication_dsn,
            CAUGHT_UP_SLOT,
            0,
            {"proto_version": "1", "publication_names": "pgwm_types"},
            until_lsn=end,
            idle_timeout=3,
        )
        assert isinstance(captured, list)
    finally:
        with pg_server.connect() as conn:
            for _ in range(100):
                row = conn.execute(
                    "SELECT active FROM pg_replication_slots WHERE slot_name = %s",
                    (CAUGHT_UP_SLOT,),
                ).fetchone()
                if row is None or not row[0]:
                    break
                time.sleep(0.05)
            conn.execute("SELECT pg_drop_replication_slot(%s)", (CAUGHT_UP_SLOT,))


@pytest.mark.parametrize("major", [14, 15, 16, 17])
def test_fake_keepalive_reaches_the_wal_end_once_caught_up(major: int) -> None:
    """The same client, the same stop rule, against the fake replaying a golden capture
    whose server wrote WAL after the last published change (as every real one does)."""
    from pathlib import Path

    from conformance import fake
    from pgwire_mock.client import ReplicationConnection, capture_via_walsender
    from pgwire_mock.server import RecordingSource, ServerState, SessionConfig, SlotState

    golden = Path(__file__).parent.parent / "data" / "golden" / f"pg{major}" / "types.v1.jsonl"
    source = RecordingSource.from_file(golden)
    state = ServerState(wal_lsn=source.end_lsn + 0x1000)
    start = source.start_lsn
    slot = SlotState(CAUGHT_UP_SLOT, "pgoutput", "postgres", start, start)
    state.declare([slot], source.publications)
    with fake.host().serve(SessionConfig(major=major, source=source), state) as server:
        with ReplicationConnection.connect(server.dsn()) as conn:
            end = conn.identify_system().xlogpos
        captured = capture_via_walsender(
            server.dsn(),
            CAUGHT_UP_SLOT,
            0,
            {"proto_version": "1", "publication_names": "pgwm_types"},
            until_lsn=end,
            idle_timeout=1.5,
        )
    assert len(captured) == len(source.entries)
