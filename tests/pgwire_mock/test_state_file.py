"""``--state-file``: saves coalesced off the hot path, atomic and durable, checked at start."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from twisted.internet import task

from pgwire_mock.server.protocol import WalSenderFactory
from pgwire_mock.server.session import SessionConfig
from pgwire_mock.server.state import ServerState


def _saved(path: Path) -> dict[str, int]:
    return {s["name"]: s["confirmed_flush"] for s in json.loads(path.read_text())["slots"]}


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    writes: list[int] = []
    real = ServerState.save_now

    def save_now(self: ServerState) -> None:
        writes.append(1)
        real(self)

    monkeypatch.setattr(ServerState, "save_now", save_now)
    return writes


def test_a_servers_acknowledgements_are_saved_at_most_once_per_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thousand confirmations inside one save interval cost one write, made when the
    interval ends; the file then holds the last position."""
    path = tmp_path / "state.json"
    state = ServerState.load(path)
    clock = task.Clock()
    WalSenderFactory(SessionConfig(), state, clock, save_interval=0.1)
    state.create_slot("s", "pgoutput")
    start = state.slots["s"].confirmed_flush
    writes = _counting(monkeypatch)
    for i in range(1, 1001):
        state.confirm("s", start + i)
    assert writes == []
    assert _saved(path)["s"] == start
    clock.advance(0.1)
    assert len(writes) == 1
    assert _saved(path)["s"] == start + 1000
    clock.advance(1)
    assert len(writes) == 1  # nothing changed since


def test_slot_creation_and_drop_are_saved_at_once(tmp_path: Path) -> None:
    """A created or dropped slot is on disk before the command completes, as
    PostgreSQL's CREATE/DROP_REPLICATION_SLOT write pg_replslot at once."""
    path = tmp_path / "state.json"
    state = ServerState.load(path)
    WalSenderFactory(SessionConfig(), state, task.Clock(), save_interval=0.1)
    state.create_slot("s", "pgoutput")
    assert "s" in _saved(path)
    state.drop_slot("s", 1)
    assert "s" not in _saved(path)


def test_a_pending_save_is_written_when_the_server_stops(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    state = ServerState.load(path)
    factory = WalSenderFactory(SessionConfig(), state, task.Clock(), save_interval=10)
    state.create_slot("s", "pgoutput")
    state.confirm("s", state.slots["s"].confirmed_flush + 5)
    factory.stopFactory()
    assert _saved(path)["s"] == state.slots["s"].confirmed_flush


def test_saves_are_fsynced_before_and_after_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new file's data is flushed before it replaces the old one, and the directory
    after, so a power loss leaves the old file or the new one, never an empty one."""
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "fsync file")
        real_fsync(fd)

    def replace(src: str | Path, dst: str | Path) -> None:
        events.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    ServerState(path=tmp_path / "state.json").save_now()
    assert events == ["fsync file", "rename", "fsync dir"]


def test_temporary_files_of_killed_saves_are_removed_at_start(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    ServerState(path=path).save_now()
    leftover = tmp_path / ".state.json.k1ll3d.tmp"
    leftover.write_text("{")
    other = tmp_path / ".other.json.k1ll3d.tmp"  # another state file's: not ours
    other.write_text("{")
    ServerState.load(path)
    assert not leftover.exists()
    assert other.exists()


def test_serve_refuses_a_state_file_in_a_missing_directory(tmp_path: Path) -> None:
    """Issue #14 item 8: one line and exit 1 at start, instead of a traceback per save."""
    missing = tmp_path / "nowhere" / "state.json"
    result = subprocess.run(
        [sys.executable, "-m", "pgwire_mock.serve", "--port", "0", "--state-file", str(missing)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"pgwire-mock serve: --state-file {missing}: directory {missing.parent} does not exist"
    ]


def _damaged(change: str) -> object:
    """A saved state file with one slot and one publication, changed as ``change`` says."""
    state = ServerState(path=None)
    state.create_slot("s", "pgoutput", database="postgres")
    data = state.to_json()
    data["publications"] = [{"name": "p", "tables": ["public.t"]}]
    slot = data["slots"][0]
    edits = {
        "an LSN of text": lambda: slot.update(confirmed_flush="zz"),
        "a negative LSN": lambda: slot.update(restart_lsn=-5),
        "an LSN over 64 bits": lambda: slot.update(confirmed_flush=1 << 70),
        "a boolean LSN": lambda: slot.update(confirmed_flush=True),
        "a slot without a name": lambda: slot.pop("name"),
        "a plugin that is a number": lambda: slot.update(plugin=7),
        "a cause PostgreSQL has not": lambda: slot.update(invalidated="bored"),
        "a slot twice": lambda: data["slots"].append(dict(slot)),
        "a slot name PostgreSQL refuses": lambda: slot.update(name="my-slot"),
        "slots not a list": lambda: data.update(slots=5),
        "a slot not an object": lambda: data.update(slots=["s"]),
        "a timeline of 0": lambda: data.update(timeline=0),
        "a system identifier of letters": lambda: data.update(system_identifier="abc"),
        "a publication without tables as a list": lambda: data["publications"][0].update(
            tables="public.t"
        ),
        "another format": lambda: data.update(format=2),
        "not an object": lambda: data.clear() or data.update(format=[1]),
    }
    edits[change]()
    return data


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ("an LSN of text", "slot 1: confirmed_flush: expected an LSN"),
        ("a negative LSN", "slot 1: restart_lsn: expected an LSN"),
        ("an LSN over 64 bits", "slot 1: confirmed_flush: expected an LSN"),
        ("a boolean LSN", "slot 1: confirmed_flush: expected an LSN"),
        ("a slot without a name", "slot 1: name is missing"),
        ("a plugin that is a number", "slot 1: plugin: expected a string"),
        ("a cause PostgreSQL has not", "slot 1: invalidated: 'bored'"),
        ("a slot twice", "slot 2: 's' is there twice"),
        ("a slot name PostgreSQL refuses", 'slot 1: replication slot name "my-slot" contains'),
        ("slots not a list", "slots: expected a list"),
        ("a slot not an object", "slot 1: expected an object"),
        ("a timeline of 0", "the file: timeline: expected a timeline"),
        ("a system identifier of letters", "system_identifier: expected a system identifier"),
        ("a publication without tables as a list", "publication 1: tables: expected a list"),
        ("another format", "not a pgwire-mock state file (format 2)"),
        ("not an object", "not a pgwire-mock state file (format [1])"),
    ],
)
def test_a_damaged_state_file_is_refused_naming_the_field(
    tmp_path: Path, change: str, said: str
) -> None:
    """A value PostgreSQL could not have stops the server at start, naming the field,
    rather than failing inside a session later (an LSN of "zz" at START_REPLICATION)."""
    path = tmp_path / "state.json"
    path.write_text(json.dumps(_damaged(change)))
    with pytest.raises(ValueError, match="^" + re.escape(f"{path}: ")) as raised:
        ServerState.load(path)
    assert said in str(raised.value)


def test_a_state_file_that_is_not_utf8_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(ValueError, match="not a pgwire-mock state file"):
        ServerState.load(path)


@pytest.mark.parametrize(
    ("slot_saves", "saves_confirmed", "kept"),
    [
        ("every-confirmation", False, (0x1600000, 0x1500000)),
        ("postgresql", False, (0x1500100, 0x1500000)),  # 14-16, or a crash
        ("postgresql", True, (0x1600000, 0x1500000)),  # 17+ at a clean stop
    ],
)
def test_slot_saves_postgresql_keeps_what_postgresqls_slot_file_holds(
    tmp_path: Path, slot_saves: str, saves_confirmed: bool, kept: tuple[int, int]
) -> None:
    """A confirmation that reaches no running-xacts record moves confirmed_flush in
    memory only: with ``postgresql`` the file keeps the slot's last save, unless a 17+
    clean shutdown's checkpoint writes memory (the restart differential against real
    14-18: tests/conformance/test_server_restart_postgres.py and the crash and slot-save
    stories)."""
    path = tmp_path / "state.json"
    state = ServerState.load(path)
    state.slot_saves = slot_saves
    state.wal_lsn = 0x1500000
    state.create_slot("s", "pgoutput")
    state.confirm("s", 0x1500100)
    state.running_xacts("s", 0x1500100, None, 700)  # a record reached: saved there
    state.confirm("s", 0x1600000)  # in memory only
    if saves_confirmed:
        state.shutdown_checkpoint(saves_confirmed=True)
    state.save_now()
    slot = ServerState.load(path).slots["s"]
    assert (slot.confirmed_flush, slot.restart_lsn) == kept
