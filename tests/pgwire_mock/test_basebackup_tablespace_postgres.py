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
from physical_wire import error_fields, physical_connection
from test_basebackup_postgres import (
    LABEL,
    _answer,
    _archives,
    _comparable,
    _members,
    _pg_basebackup,
    _tree,
    _verify,
)
from test_real_clients import FakeServer

from conformance import provision
from pgwire_mock.record import record_physical
from pgwire_mock.record_backup import parse_backup_spec
from pgwire_mock.server.backup_rewrite import derive
from pgwire_mock.server.basebackup import RecordedBackup, choose
from pgwire_mock.server.errors import ServerError
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
    real_archives, _ = _archives(real)
    fake_archives, manifest = _archives(ours)
    assert sorted(fake_archives) == sorted(real_archives)
    assert len(fake_archives) == 2 and backup.tablespaces == 2
    for name, archive in fake_archives.items():
        assert sorted(_members(archive)) == sorted(_members(real_archives[name])), name
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


def test_a_tablespace_map_is_not_derived_when_there_are_tablespaces(
    with_tablespace: tuple[provision.Server, Path, PhysicalRecording, FakeServer],
) -> None:
    """-Ft asks for TABLESPACE_MAP, which would list the tablespace and drop its
    pg_tblspc link from base.tar: not derived from a -Fp recording, refused with 0A000
    naming what was recorded (the real server sends the backup)."""
    server, _, recording, fake = with_tablespace
    wanted = parse_backup_spec(f"{SPEC}, TABLESPACE_MAP")
    with physical_connection("127.0.0.1", fake.port) as conn:
        fields = error_fields(conn.command(wanted.command(server.version)))
    assert fields["C"] == "0A000"
    assert recording.backups[0].command in fields["D"]
    with pytest.raises(ServerError, match="no base backup taken with these options"):
        choose(recording.backups, wanted)
