"""Databases in the server state: declared, persisted, and read from older state files."""

from __future__ import annotations

import json
from pathlib import Path

from pgwire_mock.server.state import ANY, DEFAULT_DATABASES, ServerState


def test_a_state_file_from_before_databases_accepts_every_database(tmp_path: Path) -> None:
    """Older files have no "databases": every name reaches the one database, as then."""
    path = tmp_path / "state.json"
    state = ServerState(path=path)
    state.save()
    data = json.loads(path.read_text())
    del data["databases"]
    path.write_text(json.dumps(data))
    loaded = ServerState.load(path)
    assert not loaded.databases_declared
    assert loaded.has_database("anything")


def test_declared_databases_add_initdbs_and_survive_a_restart(tmp_path: Path) -> None:
    """The first declaration creates postgres, template0 and template1 too; saved."""
    path = tmp_path / "state.json"
    state = ServerState(path=path)
    state.declare_databases(["shop"])
    state.save()
    loaded = ServerState.load(path)
    assert loaded.databases == {*DEFAULT_DATABASES, "shop"}
    assert ANY not in loaded.databases
    assert not loaded.has_database("nodb")
