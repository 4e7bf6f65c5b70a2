"""``serve --state-file`` keeps a served script's WAL in a journal beside the file
(pgwire_mock.server.wal_journal): a server started again on it has the WAL the last one
wrote, so a consumer gets what it had not confirmed, as from PostgreSQL after a restart;
after a kill its open transactions never end and a recovery checkpoint follows."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from test_serve_control import SCRIPT

from codec.values import LSN
from conformance.serve_process import ServeProcess
from pgwire_mock.client import ReplicationConnection, ServerError, WalData
from pgwire_mock.script import Script, column, insert, loads_steps
from pgwire_mock.script.live import LiveWal
from pgwire_mock.server.wal_journal import WalJournal, journal_path

OPTIONS = {"proto_version": "1", "publication_names": "pub"}
CHECKPOINT = 120  # a shutdown or end-of-recovery checkpoint's record, 14-18


def _post(served: ServeProcess, steps: object) -> dict:
    status, answer = served.request("POST", "/wal", json.dumps(steps))
    assert status == 200, answer
    return answer


def _insert(key: int) -> dict:
    return {"transaction": [{"insert": "public.t", "values": {"id": key, "v": f"v{key}"}}]}


def _commits(events: Iterator[object], count: int) -> list[tuple[bytes, int]]:
    """(payload of each Insert, its Commit's start) up to ``count`` commits."""
    out: list[tuple[bytes, int]] = []
    inserts: list[bytes] = []
    for event in events:
        if isinstance(event, WalData):
            if event.payload[:1] == b"I":
                inserts.append(event.payload)
            elif event.payload[:1] == b"C":
                out.append((inserts.pop(), int(event.wal_start)))
                if len(out) == count:
                    return out
    raise AssertionError("the stream ended")


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    script = tmp_path / "live.yaml"
    script.write_text(SCRIPT)
    return script, tmp_path / "state.json"


def _serve(files: tuple[Path, Path]) -> ServeProcess:
    script, state = files
    return ServeProcess(["--script", str(script), "--state-file", str(state)])


def test_a_server_started_again_has_the_wal_the_last_one_wrote(
    files: tuple[Path, Path],
) -> None:
    served = _serve(files)
    _post(served, [_insert(2), _insert(3)])
    consumer = ReplicationConnection.connect(
        served.dsn(replication="database"), timeout=10, auto_reply=False
    )
    events = consumer.start_replication("s", 0, OPTIONS)
    first = _commits(events, 3)
    consumer.send_status(flush=first[1][1])  # the third not confirmed
    consumer.close()
    _, before = served.request("GET", "/wal")
    assert "database system is shut down" in served.stop()

    again = _serve(files)
    _, after = again.request("GET", "/wal")
    # The WAL written before, then the shutdown checkpoint's record.
    assert LSN(after["end_lsn"]) == LSN(before["end_lsn"]) + CHECKPOINT
    consumer = ReplicationConnection.connect(
        again.dsn(replication="database"), timeout=10, auto_reply=False
    )
    events = consumer.start_replication("s", 0, OPTIONS)
    assert _commits(events, 1) == first[2:]  # the one not confirmed, the same
    _post(again, [_insert(4)])
    assert b"v4" in _commits(events, 1)[0][0]
    consumer.close()
    again.stop()


def test_after_a_kill_open_transactions_never_end_and_recovery_writes_a_checkpoint(
    files: tuple[Path, Path],
) -> None:
    served = _serve(files)
    _post(served, [{"begin": "t1"}])
    _post(served, [{"write": "t1", "changes": [{"insert": "public.t", "values": {"id": 5}}]}])
    _post(served, [_insert(6)])
    _, before = served.request("GET", "/wal")
    served.process.send_signal(signal.SIGKILL)
    served.wait(10)

    again = _serve(files)
    _, after = again.request("GET", "/wal")
    assert LSN(after["end_lsn"]) == LSN(before["end_lsn"]) + CHECKPOINT  # end-of-recovery
    status, answer = again.request("POST", "/wal", json.dumps([{"commit": "t1"}]))
    assert status == 400 and "t1" in answer["error"], answer  # it ended with the server
    consumer = ReplicationConnection.connect(
        again.dsn(replication="database"), timeout=10, auto_reply=False
    )
    events = consumer.start_replication("s", 0, OPTIONS)
    # proto 1 sends committed transactions only: the script's, then 6, never 5.
    script_row, sixth = (payload for payload, _ in _commits(events, 2))
    assert script_row.endswith(b"\x00\x01a") and sixth.endswith(b"v6")
    consumer.close()
    again.stop()
    operations = journal_path(files[1]).read_text().splitlines()
    assert [json.loads(line) for line in operations[-4:-2]] == [
        {"do": "crash_open"},
        {"do": "checkpoint"},
    ]


def _refused_start(files: tuple[Path, Path]) -> str:
    """The one line a serve on these files that cannot start prints (exit status 1)."""
    script, state = files
    serve = [sys.executable, "-m", "pgwire_mock.serve", "--port", "0", "--script", str(script)]
    result = subprocess.run(
        [*serve, "--state-file", str(state)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    return result.stderr


def test_another_scripts_journal_is_refused_in_one_line(files: tuple[Path, Path]) -> None:
    _serve(files).stop()
    files[0].write_text(SCRIPT.replace("{id: 1, v: a}", "{id: 1, v: b}"))
    assert "written for another script" in _refused_start(files)


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (b'{"do": "post", "step": {}}', "line 3 is not an operation"),
        (b'{"do": "checkpoint", "then": 1}', "line 3 is not an operation"),
        (b'{"append": 5}', "line 3 is not an operation"),
        (b"[1, 2]", "line 3 is not an operation"),
        (b'{"do": "checkp', "line 3 is not JSON"),
        (b"\xff\xfe", "not UTF-8 text"),
        (b'{"append": {"bogus": 1}}', "does not replay on this script"),
    ],
)
def test_a_damaged_journal_is_refused_in_one_line(
    files: tuple[Path, Path], line: bytes, said: str
) -> None:
    """A line the journal never writes, in the middle (the last one may be cut short by
    a kill), is refused rather than skipped: the WAL it stood for would be lost."""
    _serve(files).stop()
    journal = journal_path(files[1])
    lines = journal.read_bytes().splitlines()
    journal.write_bytes(b"\n".join([*lines[:2], line, *lines[2:]]) + b"\n")
    assert said in _refused_start(files)


def test_a_second_server_on_the_same_state_file_is_refused_in_one_line(
    files: tuple[Path, Path],
) -> None:
    served = _serve(files)
    line = _refused_start(files)
    served.stop()
    assert "in use by another pgwire-mock serve" in line


def test_a_new_state_file_starts_a_new_journal_and_a_torn_last_line_is_dropped(
    files: tuple[Path, Path],
) -> None:
    served = _serve(files)
    _post(served, [_insert(2)])
    served.stop()
    journal = journal_path(files[1])
    journal.write_text(journal.read_text() + '{"append": {"transac')  # a kill mid-write
    again = _serve(files)
    _, status = again.request("GET", "/wal")
    again.stop()
    assert LSN(status["end_lsn"]) > 0x1500000
    files[1].unlink()  # a new state file: the journal beside it is no one's
    fresh = _serve(files)
    fresh.stop()
    lines = journal.read_text().splitlines()
    assert json.loads(lines[0])["journal"] == 1
    assert not any("append" in line for line in lines)


def test_a_replayed_journal_builds_the_same_wal() -> None:
    script = (
        Script(pg_version=16)
        .table("public.t", columns=[column("id", "int4", key=True), column("v", "text")])
        .publication("pub", tables=["public.t"])
        .transaction([insert("public.t", id=1, v="a")])
        .wait_for()
        .transaction([insert("public.t", id=2, v="b")])
    )
    written = LiveWal(script)
    operations: list[dict] = []
    written.journal = operations.append
    written.append(loads_steps("{begin: t1}"))
    written.append(loads_steps("{write: t1, changes: [{insert: public.t, values: {id: 3}}]}"))
    written.log_running_xacts()  # held back by the wait: nothing written, nothing noted
    written.release()
    written.append(loads_steps("[{write: t1, changes: [{insert: public.t, values: {id: 4}}]}]"))
    written.append(loads_steps("[{transaction: [{insert: public.t, values: {id: 9}}]}]"))
    written.log_running_xacts()
    written.online_checkpoint()
    written.abort_open()
    written.checkpoint()
    replayed = LiveWal(script)
    replayed.replay(json.loads(json.dumps(operations)))
    assert _shape(replayed) == _shape(written)
    assert {"do": "release"} in operations and {"do": "abort_open"} in operations


def _shape(wal: LiveWal) -> list[tuple[str, object, object]]:
    compiled = wal.compiled
    items = [
        (type(i).__name__, getattr(i, "lsn", None), getattr(i, "end_lsn", None))
        for i in compiled.wal
    ]
    return [*items, ("end", wal.end_lsn, compiled.available)]


def test_a_journal_that_cannot_write_says_so_once_and_writes_no_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Disk full: the server is told once (serve logs a PANIC and stops at once, as
    PostgreSQL cannot go on without its WAL) and the journal takes nothing more, so a
    server started again never replays a WAL with a change missing in its middle."""
    script = (
        Script(pg_version=16)
        .table("public.t", columns=[column("id", "int4", key=True)])
        .publication("pub", tables=["public.t"])
    )
    wal = LiveWal(script)
    path = tmp_path / "state.json.wal"
    journal = WalJournal.open(path, wal, fresh=True)
    failures: list[str] = []
    journal.on_failure = failures.append

    def full(_fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    wal.append(loads_steps("{transaction: [{insert: public.t, values: {id: 1}}]}"))
    wal.log_running_xacts()
    monkeypatch.undo()
    wal.log_running_xacts()
    journal.close()
    assert failures == [f"could not write to the WAL journal {path}: No space left on device"]
    assert len(path.read_text().splitlines()) == 2  # the header, and the one not synced


def test_a_publication_created_in_sql_is_in_the_wal_after_a_restart(
    files: tuple[Path, Path],
) -> None:
    """CREATE PUBLICATION on a served script writes its catalog transaction to the WAL
    (and the journal): a server started again publishes through it from its commit on,
    up to where DROP PUBLICATION committed (then 42704 on 16, as PostgreSQL)."""
    served = _serve(files)
    with psycopg.connect(served.dsn(replication="database"), autocommit=True) as conn:
        conn.execute("CREATE PUBLICATION dbz FOR ALL TABLES")
    _, status = served.request("GET", "/wal")
    _post(served, [_insert(2)])
    served.stop()
    again = _serve(files)
    _post(again, [_insert(3)])
    with psycopg.connect(again.dsn(replication="database"), autocommit=True) as conn:
        conn.execute("DROP PUBLICATION dbz")
    _post(again, [_insert(4)])
    received = _inserts_until_it_is_missing(again, "dbz", status["end_lsn"])
    again.stop()
    assert [b"v2" in p and b"v3" not in p for p in received] == [True, False]
    assert b"v3" in received[1]


def test_a_publication_given_with_the_option_publishes_from_the_start(
    files: tuple[Path, Path],
) -> None:
    """``serve --publication extra`` on a script: a FOR ALL TABLES publication that
    existed before the script's first change (it streamed nothing before), which SQL may
    drop, in a server started again on the journal too."""
    script, state = files
    args = ["--script", str(script), "--state-file", str(state), "--publication", "extra"]
    served = ServeProcess(args)
    with psycopg.connect(served.dsn(replication="database"), autocommit=True) as conn:
        conn.execute("DROP PUBLICATION extra")
    _post(served, [_insert(2)])
    served.stop()
    again = ServeProcess(args)
    received = _inserts_until_it_is_missing(again, "extra", 0)
    again.stop()
    assert len(received) == 1 and b"a" in received[0]  # the script's row, before the drop


def _inserts_until_it_is_missing(served: ServeProcess, publication: str, start: object) -> list:
    """The Insert payloads slot s streams through ``publication`` from ``start`` until
    a change it no longer finds the publication for (42704 on 16)."""
    consumer = ReplicationConnection.connect(served.dsn(replication="database"), timeout=10)
    options = {**OPTIONS, "publication_names": publication}
    received = []
    with pytest.raises(ServerError, match=f'publication "{publication}" does not exist'):
        for event in consumer.start_replication("s", start, options):  # type: ignore[arg-type]
            if isinstance(event, WalData) and event.payload[:1] == b"I":
                received.append(event.payload)
    consumer.close()
    return received
