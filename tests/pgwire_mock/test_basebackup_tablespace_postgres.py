"""BASE_BACKUP of a server with a tablespace besides the data directory, recorded from the
real server and replayed by the fake (14–18): an archive per tablespace (14: a COPY
each; 15+: a NewArchive each), the tablespace's files in the manifest under
``pg_tblspc/<oid>/``. Debian's pg_basebackup 15 and pg_verifybackup 15 where they run."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_basebackup_postgres import (
    LABEL,
    _answer,
    _comparable,
    _pg_basebackup,
    _tree,
    _verify,
)
from test_real_clients import FakeServer

from conformance import physical as ph
from conformance import provision
from pgwire_mock.record import record_physical
from pgwire_mock.record_backup import parse_backup_spec
from pgwire_mock.server.backup_rewrite import derivable, derive
from pgwire_mock.server.basebackup import RecordedBackup, replay_frames
from pgwire_mock.server.physical import PhysicalRecording

SPEC = f"{LABEL}, PROGRESS, WAIT 0, MANIFEST 'yes'"  # pg_basebackup -Fp -X stream


@pytest.fixture(scope="module")
def with_tablespace(
    pg_server: provision.Server, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[provision.Server, Path, PhysicalRecording, FakeServer]]:
    if not isinstance(pg_server, provision.Cluster) or pg_server.run_dir is None:
        pytest.skip("the tablespace's directory is made beside a provisioned server")
    location = pg_server.run_dir / "pgwm_tablespace"
    location.mkdir(exist_ok=True)
    owner = pg_server.data_dir.stat()
    os.chown(location, owner.st_uid, owner.st_gid)
    with pg_server.connect() as conn:
        conn.execute(f"CREATE TABLESPACE pgwm_ts LOCATION '{location}'")
        conn.execute("CREATE TABLE pgwm_ts_rows (id int, t text) TABLESPACE pgwm_ts")
        conn.execute(
            "INSERT INTO pgwm_ts_rows SELECT g, 'in a tablespace' FROM generate_series(1, 2000) g"
        )
    path = tmp_path_factory.mktemp("tablespace") / "backup.jsonl"
    recording = record_physical(pg_server.dsn, path, base_backups=[parse_backup_spec(SPEC)])
    fake = FakeServer(pg_server.version, path)
    try:
        yield pg_server, location, recording, fake
    finally:
        fake.stop()
        with pg_server.connect() as conn:
            conn.execute("DROP TABLE pgwm_ts_rows")
            conn.execute("DROP TABLESPACE pgwm_ts")
        shutil.rmtree(location, ignore_errors=True)


def test_each_tablespace_is_an_archive_and_the_manifest_names_its_files(
    with_tablespace: tuple[provision.Server, Path, PhysicalRecording, FakeServer],
) -> None:
    """The recorded command sent raw: the fake's archives and their members are the real
    server's for a new backup (a second archive named by the tablespace's OID), and the
    recorded manifest, built again from the archives with every checksum recomputed, is
    its recorded bytes: files under pg_tblspc/<oid>/ included."""
    server, _, recording, fake = with_tablespace
    backup = recording.backups[0]
    real = RecordedBackup(
        backup.options, backup.command, tuple(_answer(server.host, server.port, backup.command))
    )
    ours = RecordedBackup(
        backup.options, backup.command, tuple(_answer("127.0.0.1", fake.port, backup.command))
    )
    assert ours.messages == backup.messages
    real_archives, _ = ph.archives(real)
    fake_archives, manifest = ph.archives(ours)
    assert sorted(fake_archives) == sorted(real_archives)
    assert len(fake_archives) == 2 and backup.tablespaces == 2
    for name, archive in fake_archives.items():
        assert sorted(ph.members(archive)) == sorted(ph.members(real_archives[name])), name
    oid = next(n for n in fake_archives if n != "base.tar").removesuffix(".tar")
    assert manifest is not None and f'"Path": "pg_tblspc/{oid}/'.encode() in manifest
    again = derive(
        backup.messages, backup.options, backup.options, modern=backup.modern, reuse=False
    )
    assert list(again) == list(backup.messages)


def test_pg_basebackup_relocates_the_tablespace_from_both(
    with_tablespace: tuple[provision.Server, Path, PhysicalRecording, FakeServer],
    tmp_path: Path,
) -> None:
    """pg_basebackup 15 -Fp -X stream with --tablespace-mapping: the same exit status and
    files (the tablespace's included) from both; pg_verifybackup 15 accepts the fake's,
    and also a derived one (another label, SHA-256 checksums) whose manifest names the
    tablespace's files. 16+ refuse both alike."""
    server, location, _, fake = with_tablespace
    results = {}
    for side, dsn, args in (
        ("real", server.dsn, ()),
        ("fake", fake.dsn(), ()),
        ("derived", fake.dsn(), ("-l", "derived label", "--manifest-checksums=SHA256")),
    ):
        mapping = f"--tablespace-mapping={location}={tmp_path / (side + '-ts')}"
        results[side] = _pg_basebackup(
            dsn, tmp_path / side, ("-Fp", "-X", "stream", mapping, *args)
        )
    assert results["fake"].returncode == results["real"].returncode
    assert results["derived"].returncode == results["real"].returncode
    if server.version > 15:
        assert "incompatible server version" in results["real"].stderr
        return
    assert results["real"].returncode == 0, results["real"].stderr
    assert _comparable(_tree(tmp_path / "fake-ts")) == _comparable(_tree(tmp_path / "real-ts"))
    assert _tree(tmp_path / "fake-ts")
    assert (
        _comparable(_tree(tmp_path / "fake")).keys() == _comparable(_tree(tmp_path / "real")).keys()
    )
    for side in ("fake", "derived"):
        checked = _verify(tmp_path / side, *(("-n",) if server.version == 14 else ()))
        assert checked.returncode == 0, (side, checked.stderr)


def test_a_tablespace_map_is_derived_for_a_server_with_tablespaces(
    with_tablespace: tuple[provision.Server, Path, PhysicalRecording, FakeServer],
    tmp_path: Path,
) -> None:
    """-Ft asks for TABLESPACE_MAP, which no recorded backup has: the fake adds the map
    (a line per tablespace) and drops the pg_tblspc links from base.tar, as the real
    server does for the same request (raw, every major: the same members and the same
    map); pg_basebackup 15 -Ft exits alike from both and writes the same members. The
    map is not dropped from a -Ft recording (the links' times are not recorded)."""
    server, _, recording, fake = with_tablespace
    backup = recording.backups[0]
    wanted = parse_backup_spec(f"{SPEC}, TABLESPACE_MAP")
    command = wanted.command(server.version)
    ours = RecordedBackup(wanted, command, tuple(replay_frames(backup, wanted)))
    real = RecordedBackup(wanted, command, tuple(_answer(server.host, server.port, command)))
    (fake_archives, _), (real_archives, _) = ph.archives(ours), ph.archives(real)
    fake_base, real_base = (
        ph.members(fake_archives["base.tar"]),
        ph.members(real_archives["base.tar"]),
    )
    assert sorted(fake_base) == sorted(real_base)
    assert fake_base["tablespace_map"] == real_base["tablespace_map"] != b""
    assert not any(n.startswith("pg_tblspc/") for n in fake_base)
    assert not derivable(wanted, backup.options, tablespaces=backup.tablespaces)
    results = {
        side: _pg_basebackup(dsn, tmp_path / side, ("-Ft", "-X", "stream"))
        for side, dsn in (("real", server.dsn), ("fake", fake.dsn()))
    }
    assert results["fake"].returncode == results["real"].returncode
    if server.version > 15:
        return  # pg_basebackup 15 refuses both
    assert results["real"].returncode == 0, results["real"].stderr
    for name in fake_archives:
        written = {side: ph.members((tmp_path / side / name).read_bytes()) for side in results}
        assert sorted(written["fake"]) == sorted(written["real"]), name
