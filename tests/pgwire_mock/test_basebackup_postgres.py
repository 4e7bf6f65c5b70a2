"""BASE_BACKUP: a recording of real BASE_BACKUPs, replayed by the fake, against the real
server (Debian's pg_basebackup 15, pg_verifybackup 15 and a raw client), on every major.

The real server and the fake answer two different backups (the real one takes a new one),
so their trees may differ only where two backups of one server differ: backup_label (start
time and position), backup_manifest, global/pg_control (the checkpoint) and pg_wal (each
backup starts a new segment). Every other file must be the same bytes, and every file the
fake's client wrote must be what the recorded server sent.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from physical_wire import error_fields, physical_connection
from test_real_clients import FakeServer

from codec import basebackup
from codec.wire import Query
from conformance import physical as ph
from conformance import provision
from pgwire_mock.record import record_physical
from pgwire_mock.record_backup import parse_backup_spec
from pgwire_mock.server.backup_rewrite import derive
from pgwire_mock.server.basebackup import RecordedBackup, replay_frames
from pgwire_mock.server.physical import PhysicalRecording

PG_BASEBACKUP = Path("/usr/bin/pg_basebackup")
PG_VERIFYBACKUP = Path("/usr/lib/postgresql/15/bin/pg_verifybackup")
LABEL = "LABEL 'pg_basebackup base backup'"
# What pg_basebackup 15 sends for each variant below (TARGET 'client' and CHECKPOINT
# 'fast' aside: they change when, not what). -P is answered from a PROGRESS recording.
SPECS = (
    f"{LABEL}, PROGRESS, WAIT 0, MANIFEST 'yes'",  # -Fp -X stream
    f"{LABEL}, PROGRESS, WAL, WAIT 0, TABLESPACE_MAP",  # -Ft -X fetch --no-manifest
    f"{LABEL}, PROGRESS, WAL, WAIT 0, MANIFEST 'yes'",  # -Fp -X fetch
    f"{LABEL}, PROGRESS, WAIT 0, TABLESPACE_MAP, MANIFEST 'yes'",  # -Ft -X stream
    f"{LABEL}, PROGRESS, MANIFEST 'yes'",  # -Fp -X none (WAIT: a notice, archiving is off)
)
# Variant -> (pg_basebackup's arguments, the recorded SPECS entry that answers it).
VARIANTS = {
    "plain-stream-progress": (("-Fp", "-X", "stream", "-P"), 0),
    # pg_basebackup asks for PROGRESS unless told not to estimate the size.
    "plain-stream-no-estimate": (("-Fp", "-X", "stream", "--no-estimate-size"), 0),
    "plain-stream-max-rate": (("-Fp", "-X", "stream", "-P", "--max-rate", "32M"), 0),
    "tar-fetch-no-manifest": (("-Ft", "-X", "fetch", "--no-manifest", "-P"), 1),
    "plain-fetch": (("-Fp", "-X", "fetch", "-P"), 2),
    "tar-stream": (("-Ft", "-X", "stream", "-P"), 3),
    "plain-none": (("-Fp", "-X", "none", "-P"), 4),
}
DIFFERS = ("backup_label", "backup_manifest", "global/pg_control")


@pytest.fixture(scope="module")
def recorded(
    pg_server: provision.Server, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[provision.Server, PhysicalRecording, FakeServer]]:
    path = tmp_path_factory.mktemp("basebackup") / "backups.jsonl"
    recording = record_physical(
        pg_server.dsn, path, base_backups=[parse_backup_spec(spec) for spec in SPECS]
    )
    assert PhysicalRecording.from_file(path) == recording
    fake = FakeServer(pg_server.version, path)
    try:
        yield pg_server, recording, fake
    finally:
        fake.stop()


def _tree(root: Path) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        out[rel] = path.read_bytes() if path.is_file() and not path.is_symlink() else None
    return out


def _pg_basebackup(
    dsn: str, directory: Path, args: Sequence[str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PG_BASEBACKUP, "-D", directory, "-d", dsn, "-c", "fast", "--no-sync", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _verify(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PG_VERIFYBACKUP, *args, directory], capture_output=True, text=True, check=False
    )


def _comparable(files: dict[str, bytes | None]) -> dict[str, bytes | None]:
    return {k: v for k, v in files.items() if k not in DIFFERS and not k.startswith("pg_wal")}


@pytest.mark.parametrize("variant", VARIANTS)
def test_pg_basebackup_writes_the_same_files(
    recorded: tuple[provision.Server, PhysicalRecording, FakeServer], tmp_path: Path, variant: str
) -> None:
    """pg_basebackup (plain and tar, -X stream and fetch, with and without a manifest and
    --progress) exits alike from both; the files are the same but for what two backups
    of one server differ in, the fake's are the recorded server's bytes, and
    pg_verifybackup accepts the fake's plain backups (WAL included). 16+ refuse alike."""
    server, recording, fake = recorded
    args, spec = VARIANTS[variant]
    real = _pg_basebackup(server.dsn, tmp_path / "real", args)
    started = time.monotonic()
    ours = _pg_basebackup(fake.dsn(), tmp_path / "fake", args)
    elapsed = time.monotonic() - started
    assert ours.returncode == real.returncode, (real.stderr, ours.stderr)
    if server.version > 15:
        assert real.returncode == 1
        assert "incompatible server version" in real.stderr
        expected = real.stderr.replace(str(server.port), str(fake.port))
        assert ours.stderr == expected.replace(str(tmp_path / "real"), str(tmp_path / "fake"))
        return
    assert real.returncode == 0, real.stderr
    # The progress lines in between depend on timing (pg_basebackup's and the server's).
    assert ours.stderr.splitlines()[-2:] == real.stderr.splitlines()[-2:]
    backup = recording.backups[spec]
    if "--max-rate" in args:
        # Throttled to 32 MB/s, the backup cannot arrive sooner (a lower bound only)
        # than the rate allows, less the one throttling sample (1/8 s) basebackup.c lets
        # go ahead.
        rate = 32 << 20
        assert elapsed >= (sum(map(len, backup.messages)) - rate / 8) / rate
    archives, manifest = ph.archives(backup)
    if "-Ft" in args:
        real_files = ph.members((tmp_path / "real" / "base.tar").read_bytes())
        fake_files = ph.members((tmp_path / "fake" / "base.tar").read_bytes())
        assert fake_files == ph.members(archives["base.tar"])
        manifest_file = tmp_path / "fake" / "backup_manifest"
        assert (manifest_file.read_bytes() if manifest_file.exists() else None) == manifest
    else:
        real_files = _tree(tmp_path / "real")
        fake_files = _tree(tmp_path / "fake")
        for name, data in ph.members(archives["base.tar"]).items():
            assert fake_files[name] == data, name
        assert (tmp_path / "fake" / "backup_manifest").read_bytes() == manifest
        # Files against the real server's manifest (-n), then the WAL too: pg_waldump 15
        # reads no 14 WAL, and -X none has none, so there the real backup fails the same way.
        assert _verify(tmp_path / "fake", "-n").returncode == 0
        verified = _verify(tmp_path / "fake"), _verify(tmp_path / "real")
        without_wal = server.version != 15 or "none" in args
        assert verified[0].returncode == verified[1].returncode == without_wal
        # Each backup starts at its own position.
        stderr = [re.sub(r"[0-9A-F]+/[0-9A-F]+", "X/X", v.stderr) for v in verified]
        assert stderr[0] == stderr[1].replace(str(tmp_path / "real"), str(tmp_path / "fake"))
    assert _comparable(fake_files) == _comparable(real_files)
    assert set(fake_files) - set(real_files) <= {n for n in fake_files if n.startswith("pg_wal/")}
    if "stream" in args and "-Fp" in args:
        _check_streamed_wal(tmp_path / "fake" / "pg_wal", recording)


def _check_streamed_wal(pg_wal: Path, recording: PhysicalRecording) -> None:
    """-X stream wrote each segment from the fake's START_REPLICATION: the recorded WAL
    where the recording has it, zeros after its end."""
    size = recording.segment_size
    segments = [p for p in pg_wal.iterdir() if p.is_file() and len(p.name) == 24]
    assert segments
    for path in segments:
        segment = int(path.name[8:16], 16) * (0x1_0000_0000 // size) + int(path.name[16:], 16)
        data = path.read_bytes()
        begin = max(segment * size, recording.start_lsn)
        end = min((segment + 1) * size, recording.end_lsn)
        assert begin < end, path.name
        offset = begin - recording.start_lsn
        assert (
            data[begin - segment * size : end - segment * size]
            == recording.wal_data[offset : offset + end - begin]
        ), path.name
        assert not data[end - segment * size :].strip(b"\0"), path.name


def _answer(host: str, port: int, command: str) -> list[bytes]:
    with physical_connection(host, port) as conn:
        conn.send(Query(command))
        return [m.encode() for m in conn.until_ready(120)[:-1]]


def test_raw_base_backup_is_the_recorded_answer_and_shaped_like_a_new_one(
    recorded: tuple[provision.Server, PhysicalRecording, FakeServer],
) -> None:
    """The recorded command, sent raw (every major, the ones pg_basebackup refuses too):
    the fake answers with the recorded messages byte for byte; a new backup from the real
    server has the same result sets, framing, archives and files but for pg_wal."""
    server, recording, fake = recorded
    backup = recording.backups[0]
    ours = _answer("127.0.0.1", fake.port, backup.command)
    assert ours == list(backup.messages)
    real = RecordedBackup(
        backup.options, backup.command, tuple(_answer(server.host, server.port, backup.command))
    )
    real_archives, real_manifest = ph.archives(real)
    fake_archives, fake_manifest = ph.archives(backup)
    assert sorted(real_archives) == sorted(fake_archives) == ["base.tar"]
    assert real_manifest is not None and fake_manifest is not None
    assert sorted(ph.members(real_archives["base.tar"])) == sorted(
        ph.members(fake_archives["base.tar"])
    )

    def kinds(frames: Sequence[bytes]) -> list[bytes]:
        return [f[:1] for f in frames if f[:1] not in (b"d", b"N")]

    assert kinds(ours) == kinds(real.messages)


BAD_OPTIONS_15 = (
    "LABEL 'a', LABEL 'b'",
    "FOO",
    "CHECKPOINT 'slow'",
    "MAX_RATE 1",
    "MAX_RATE",
    "MAX_RATE 'abc'",
    "MANIFEST 'maybe'",
    "MANIFEST 'yes', MANIFEST_CHECKSUMS 'md5'",
    "MANIFEST_CHECKSUMS 'sha256'",
    "TARGET_DETAIL 'x'",
    "TARGET 'client', TARGET_DETAIL 'x'",
    "TARGET 'blackhole', TARGET_DETAIL 'x'",
    "TARGET 'server'",
    "TARGET 'nowhere'",
    "COMPRESSION 'zip'",
    "COMPRESSION_DETAIL '1'",
    "PROGRESS 'maybe'",
    "LABEL",
    "INCREMENTAL",
    "WAL, WAL",
)
BAD_OPTIONS_14 = (
    "LABEL 'a' LABEL 'b'",
    "PROGRESS PROGRESS",
    "FAST FAST",
    "MAX_RATE 1",
    "MAX_RATE 2000000",
    "MANIFEST 'maybe'",
    "MANIFEST 'yes' MANIFEST_CHECKSUMS 'md5'",
    "MANIFEST_CHECKSUMS 'sha256'",
)


def _errors(host: str, port: int, major: int) -> list[object]:
    out: list[object] = []
    with physical_connection(host, port) as conn:
        for options in BAD_OPTIONS_14 if major == 14 else BAD_OPTIONS_15:
            command = f"BASE_BACKUP {options}" if major == 14 else f"BASE_BACKUP ({options})"
            out.append(error_fields(conn.command(command)))
    # A logical walsender can be inside BEGIN: refused before the options are read.
    with physical_connection(host, port, replication="database") as conn:
        out.append(conn.command("BEGIN")[-1])
        failed = conn.command(
            "BASE_BACKUP LABEL 'a' LABEL 'b'" if major == 14 else "BASE_BACKUP (FOO)"
        )
        out.extend((error_fields(failed), failed[-1], conn.command("ROLLBACK")[-1]))
    return out


def test_bad_base_backup_options_get_the_same_errors(
    recorded: tuple[provision.Server, PhysicalRecording, FakeServer],
) -> None:
    """Options BASE_BACKUP refuses (duplicates, unknown names, bad values, a checksum
    without a manifest, bad targets and compression), and BASE_BACKUP inside BEGIN: the
    same ErrorResponse, every field, file, line and routine included, the same
    transaction status after it, and the connection goes on."""
    server, _, fake = recorded
    assert _errors("127.0.0.1", fake.port, server.version) == _errors(
        server.host, server.port, server.version
    )


# --------------------------------------------------------------------------------------
# Another label and another manifest, derived from a recorded backup


def _manifest_files(text: bytes) -> dict[str, dict[str, object]]:
    files = json.loads(text)["Files"]
    return {f.get("Path") or bytes.fromhex(f["Encoded-Path"]).decode(): f for f in files}


def _self_consistent(archives: dict[str, bytes], manifest: bytes, algorithm: str) -> None:
    """What pg_verifybackup checks, on the archives as sent: the manifest's own SHA-256,
    and each regular file's size and checksum (WAL segments are not listed)."""
    body, _, tail = manifest.rpartition(b'"Manifest-Checksum": "')
    assert hashlib.sha256(body).hexdigest() == tail[:64].decode()
    files = _manifest_files(manifest)
    members = {
        name: data
        for name, data in ph.members(archives["base.tar"]).items()
        if data is not None and not re.fullmatch(r"pg_wal/[0-9A-F]{24}", name)
    }
    assert sorted(files) == sorted(members)
    for name, data in members.items():
        entry = files[name]
        assert entry["Size"] == len(data), name
        if algorithm == "NONE":
            assert "Checksum" not in entry
        elif algorithm != "CRC32C":  # CRC32C: pg_verifybackup checks it below, on 14/15
            assert entry["Checksum-Algorithm"] == algorithm
            assert entry["Checksum"] == hashlib.new(algorithm.lower(), data).hexdigest()


# Requests answered by rewriting a recorded backup: (the request, the SPECS entry).
DERIVED = {
    "label-sha256": (
        "LABEL 'derived label', PROGRESS, WAIT 0, MANIFEST 'yes', MANIFEST_CHECKSUMS 'SHA256'",
        0,
    ),
    "force-encode": (
        f"{LABEL}, PROGRESS, WAIT 0, MANIFEST 'force-encode', MANIFEST_CHECKSUMS 'NONE'",
        0,
    ),
    "no-manifest": (f"{LABEL}, PROGRESS, WAIT 0", 0),
    "manifest-added": (
        f"{LABEL}, PROGRESS, WAL, WAIT 0, TABLESPACE_MAP, MANIFEST 'yes', "
        "MANIFEST_CHECKSUMS 'SHA512'",
        1,
    ),
    "tablespace-map-added": (f"{LABEL}, PROGRESS, WAIT 0, TABLESPACE_MAP, MANIFEST 'yes'", 0),
    "tablespace-map-dropped": (f"{LABEL}, PROGRESS, WAIT 0, MANIFEST 'yes'", 3),
    "wal-dropped": (f"{LABEL}, PROGRESS, WAIT 0, MANIFEST 'yes'", 2),
    "wait-dropped": (f"{LABEL}, PROGRESS, WAIT 0, MANIFEST 'yes'", 4),
}


@pytest.mark.parametrize("case", DERIVED)
def test_other_content_options_are_derived_like_a_new_backup(
    recorded: tuple[provision.Server, PhysicalRecording, FakeServer], case: str
) -> None:
    """A recorded backup sent for another label, tablespace map, WAL or manifest (every
    major): what the fake derives (backup_label rewritten, tablespace_map added or
    dropped, the WAL section dropped, the manifest built again from the archives) has the
    message kinds, archive members and manifest fields the real server sends when asked
    the same, its manifest checks out against its archives, and its last progress count
    is the archive's size."""
    server, recording, _ = recorded
    options, spec = DERIVED[case]
    wanted = parse_backup_spec(options)
    backup = recording.backups[spec]
    assert backup.options.content() != wanted.content()
    command = wanted.command(server.version)
    ours = RecordedBackup(wanted, command, tuple(replay_frames(backup, wanted)))
    real = RecordedBackup(wanted, command, tuple(_answer(server.host, server.port, command)))
    # The same messages but the archive data, notices included (WAIT 0: none).
    assert [f[:1] for f in ours.messages if f[:1] != b"d"] == [
        f[:1] for f in real.messages if f[:1] != b"d"
    ]
    fake_archives, fake_manifest = ph.archives(ours)
    real_archives, real_manifest = ph.archives(real)
    fake_members, real_members = (ph.members(a["base.tar"]) for a in (fake_archives, real_archives))
    assert ph.lasting(fake_members) == ph.lasting(real_members)
    label = re.search(rb"\nLABEL: (.*)\n", fake_members["backup_label"] or b"")
    assert label is not None and label[1] == re.search(r"LABEL '([^']*)'", options)[1].encode()
    if ours.modern:
        counts = [basebackup.decode(m[5:]) for m in ours.messages if m[:1] + m[5:6] == b"dp"]
        assert counts[-1] == basebackup.Progress(len(fake_archives["base.tar"]))
    assert (fake_manifest is None) == (real_manifest is None) == (case == "no-manifest")
    if fake_manifest is None or real_manifest is None:
        return
    _self_consistent(fake_archives, fake_manifest, wanted.manifest_checksums)
    # The version line (17+: version 2 and the System-Identifier) as the real server's.
    assert fake_manifest.split(b'"Files"')[0] == real_manifest.split(b'"Files"')[0]
    theirs, mine = _manifest_files(real_manifest), _manifest_files(fake_manifest)
    assert ph.lasting(theirs) == ph.lasting(mine)

    def shapes(files: dict[str, dict[str, object]]) -> set[frozenset[str]]:
        return {frozenset(f) for f in files.values()}

    assert shapes(mine) == shapes(theirs)


CLIENT_DERIVED = {
    "label-sha256": ("-Fp", "-X", "stream", "-l", "derived label", "--manifest-checksums=SHA256"),
    "force-encode": ("-Fp", "-X", "fetch", "--manifest-force-encode"),
}


@pytest.mark.parametrize("case", CLIENT_DERIVED)
def test_pg_basebackup_gets_a_derived_backup_pg_verifybackup_accepts(
    recorded: tuple[provision.Server, PhysicalRecording, FakeServer], tmp_path: Path, case: str
) -> None:
    """pg_basebackup 15 with a label and manifest options nothing was recorded with: the
    same exit status and last lines as against the real server, the label in
    backup_label, and pg_verifybackup accepts the fake's backup (its files against the
    derived manifest; 14: -n, as pg_waldump 15 reads no 14 WAL)."""
    server, _, fake = recorded
    args = CLIENT_DERIVED[case]
    real = _pg_basebackup(server.dsn, tmp_path / "real", args)
    ours = _pg_basebackup(fake.dsn(), tmp_path / "fake", args)
    assert ours.returncode == real.returncode, (real.stderr, ours.stderr)
    if server.version > 15:
        return  # pg_basebackup 15 refuses both (test_pg_basebackup_writes_the_same_files)
    assert ours.stderr.splitlines()[-2:] == real.stderr.splitlines()[-2:]
    label = "derived label" if "-l" in args else "pg_basebackup base backup"
    for side in ("real", "fake"):
        assert f"\nLABEL: {label}\n" in (tmp_path / side / "backup_label").read_text()
    checked = _verify(tmp_path / "fake", *(("-n",) if server.version == 14 else ()))
    assert checked.returncode == 0, checked.stderr
    assert _comparable(_tree(tmp_path / "fake")) == _comparable(_tree(tmp_path / "real"))


def test_manifests_built_again_from_the_archives_are_the_recorded_ones(
    recorded: tuple[provision.Server, PhysicalRecording, FakeServer],
) -> None:
    """The rewriting's own check, on every major: each recorded backup, sent for its own
    options with every checksum computed again from the archives (none reused), is the
    recorded messages byte for byte, manifest included."""
    _, recording, _ = recorded
    for backup in recording.backups:
        again = derive(
            backup.messages, backup.options, backup.options, modern=backup.modern, reuse=False
        )
        assert list(again) == list(backup.messages), backup.command


def _data_chunks(frames: Sequence[bytes]) -> dict[str, list[bytes]]:
    """15+: each archive's CopyData chunks, by archive name."""
    out: dict[str, list[bytes]] = {}
    current: list[bytes] | None = None
    for frame in frames:
        if frame[:1] != b"d":
            continue
        decoded = basebackup.decode(frame[5:])
        if isinstance(decoded, basebackup.NewArchive):
            current = out.setdefault(decoded.archive_name, [])
        elif isinstance(decoded, basebackup.ManifestStart):
            current = None
        elif isinstance(decoded, basebackup.ArchiveData) and current is not None:
            current.append(bytes(decoded.data))
    return out


def _compression_refused_alike(
    server: provision.Server, fake: FakeServer, command: str, tmp_path: Path
) -> None:
    """14: the 15+ BASE_BACKUP with COMPRESSION, and the legacy syntax with it, get
    the same ErrorResponse (42601 from replication_yyerror); pg_basebackup 15's
    --compress=server-gzip exits 1 alike, with the same message."""
    for text in (command, "BASE_BACKUP LABEL 'x' COMPRESSION 'gzip'"):
        real = _answer(server.host, server.port, text)
        assert _answer("127.0.0.1", fake.port, text) == real, text
        assert len(real) == 1 and real[0][:1] == b"E", real
        assert b"C42601\x00Msyntax error\x00" in real[0]
        assert b"Rreplication_yyerror\x00" in real[0]
    args = ("-Ft", "-X", "stream", "--compress=server-gzip")
    results = {
        side: _pg_basebackup(dsn, tmp_path / side, args)
        for side, dsn in (("real", server.dsn), ("fake", fake.dsn()))
    }
    assert results["real"].returncode == 1
    assert results["fake"].returncode == 1
    assert "server does not support server-side compression" in results["real"].stderr
    assert results["fake"].stderr == results["real"].stderr.replace(
        str(tmp_path / "real"), str(tmp_path / "fake")
    )


def test_gzip_compression_is_derived_as_the_server_deflates(
    recorded: tuple[provision.Server, PhysicalRecording, FakeServer], tmp_path: Path
) -> None:
    """COMPRESSION 'gzip' (15+), which no backup was recorded with: the fake's base.tar.gz
    holds the members of the real server's answer to the same request, and the real
    server's archive, decompressed and deflated as the fake deflates, is the real
    server's bytes in the real server's chunks; pg_basebackup 15 --compress=server-gzip
    -Ft exits alike from both and writes archives with the same members. 14 has no
    server-side compression: the request is refused alike (repl_scanner.l's syntax
    error, every field) and pg_basebackup 15 gives up alike before asking."""
    server, recording, fake = recorded
    wanted = parse_backup_spec(f"{LABEL}, PROGRESS, WAIT 0, MANIFEST 'yes', COMPRESSION 'gzip'")
    if server.version < 15:
        _compression_refused_alike(server, fake, wanted.command(15), tmp_path)
        return
    command = wanted.command(server.version)
    ours = _data_chunks(list(replay_frames(recording.backups[0], wanted)))
    real = _data_chunks(_answer(server.host, server.port, command))
    assert list(ours) == list(real) == ["base.tar.gz"]
    tars = {
        side: zlib.decompress(b"".join(c["base.tar.gz"]), 31)
        for side, c in (("ours", ours), ("real", real))
    }
    assert ph.lasting(ph.members(tars["ours"])) == ph.lasting(ph.members(tars["real"]))
    deflate = zlib.compressobj(-1, zlib.DEFLATED, 31, 8, zlib.Z_DEFAULT_STRATEGY)
    again = deflate.compress(tars["real"]) + deflate.flush()
    assert [again[i : i + 32768] for i in range(0, len(again), 32768)] == real["base.tar.gz"]
    args = ("-Ft", "-X", "stream", "--compress=server-gzip")
    results = {
        side: _pg_basebackup(dsn, tmp_path / side, args)
        for side, dsn in (("real", server.dsn), ("fake", fake.dsn()))
    }
    assert results["fake"].returncode == results["real"].returncode
    if server.version > 15:
        return  # pg_basebackup 15 refuses both
    assert results["real"].returncode == 0, results["real"].stderr
    written = {
        side: ph.members(zlib.decompress((tmp_path / side / "base.tar.gz").read_bytes(), 31))
        for side in results
    }
    assert ph.lasting(written["fake"]) == ph.lasting(written["real"])
