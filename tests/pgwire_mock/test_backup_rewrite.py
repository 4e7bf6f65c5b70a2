"""backup_rewrite without a server: a small BASE_BACKUP in 15+'s framing, another label
and another manifest asked for. (Recorded backups of real 14–18, and pg_basebackup and
pg_verifybackup on the result: test_basebackup_postgres.py.)"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
import zlib
from dataclasses import replace

import pytest

from codec import basebackup as bb
from codec.wire import (
    BackendReader,
    CopyData,
    CopyDone,
    CopyOutResponse,
    DataRow,
    NoticeResponse,
)
from conformance.physical import compare_backups
from pgwire_mock.server.backup_options import BackupOptions
from pgwire_mock.server.backup_rewrite import derivable, derive
from pgwire_mock.server.basebackup import RecordedBackup, replay_frames
from pgwire_mock.server.errors import ServerError

LABEL = "backup_label"
MTIME = 1_790_000_000


def _member(name: str, data: bytes) -> list[bytes]:
    """A tar member in the chunks sendFileWithContent sends: header, content, padding."""
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), MTIME
    header = info.tobuf(tarfile.USTAR_FORMAT)
    return [header, data] + ([bytes(-len(data) % 512)] if len(data) % 512 else [])


def _label_file(label: str) -> bytes:
    return (
        "START WAL LOCATION: 0/2000028 (file 000000010000000000000002)\n"
        f"CHECKPOINT LOCATION: 0/2000060\nBACKUP METHOD: streamed\nLABEL: {label}\n"
        "START TIMELINE: 1\n"
    ).encode()


def _manifest(files: dict[str, bytes]) -> bytes:
    entries = ",\n".join(
        f'{{ "Path": "{name}", "Size": {len(data)}, "Last-Modified": '
        f'"{time.strftime("%Y-%m-%d %H:%M:%S GMT", time.gmtime(MTIME))}", '
        f'"Checksum-Algorithm": "SHA256", "Checksum": "{hashlib.sha256(data).hexdigest()}" }}'
        for name, data in files.items()
    )
    body = (
        '{ "PostgreSQL-Backup-Manifest-Version": 1,\n"Files": [\n' + entries + "\n],\n"
        '"WAL-Ranges": [\n{ "Timeline": 1, "Start-LSN": "0/2000028", "End-LSN": "0/2000100" }'
        "\n],\n"
    ).encode()
    return body + f'"Manifest-Checksum": "{hashlib.sha256(body).hexdigest()}"}}\n'.encode()


WAL = "pg_wal/000000010000000000000002"


def _files(label: str, *, wal: bool = False, tablespace_map: bool = False) -> dict[str, bytes]:
    """What perform_base_backup sends: backup_label, tablespace_map, the data directory,
    pg_control, then the WAL section."""
    files = {LABEL: _label_file(label)}
    if tablespace_map:
        files["tablespace_map"] = b""
    files |= {
        "PG_VERSION": b"15\n",
        "global/1": bytes(range(256)) * 4,
        "global/2": b"123456789",  # CRC-32C's check value: 0xE3069283
        "global/pg_control": b"\x07" * 100,
    }
    if wal:
        files |= {WAL: b"\xd1" * 1024, f"pg_wal/archive_status/{WAL[7:]}.done": b""}
    return files


def _recorded(
    label: str = "old", manifest: bool = True, wal: bool = False, tablespace_map: bool = False
) -> RecordedBackup:
    files = _files(label, wal=wal, tablespace_map=tablespace_map)
    chunks = [c for name, data in files.items() for c in _member(name, data)] + [bytes(1024)]
    size = sum(map(len, chunks))

    def copy(message: bb.BaseBackupMessage) -> bytes:
        return CopyData(bb.encode(message)).encode()

    messages = [
        DataRow((b"0/2000028", b"1")).encode(),
        DataRow((None, None, b"3")).encode(),
        CopyOutResponse(0, ()).encode(),
        copy(bb.NewArchive("base.tar", "")),
        *(copy(bb.ArchiveData(c)) for c in chunks),
        copy(bb.Progress(size)),
    ]
    if manifest:
        listed = {k: v for k, v in files.items() if k != WAL}
        messages += [copy(bb.ManifestStart()), copy(bb.ArchiveData(_manifest(listed)))]
    messages += [CopyDone().encode(), DataRow((b"0/2000100", b"1")).encode()]
    options = BackupOptions(
        label=label,
        wal=wal,
        tablespace_map=tablespace_map,
        manifest="yes" if manifest else "no",
        manifest_checksums="SHA256" if manifest else "NONE",
    )
    return RecordedBackup(options, options.command(15), tuple(messages))


def _taken_apart(frames: list[bytes]) -> tuple[bytes, list[int], bytes | None]:
    reader = BackendReader()
    reader.feed(b"".join(frames))
    archive, progress, manifest = bytearray(), [], None
    for message in iter(reader.next_message, None):
        if not isinstance(message, CopyData):
            continue
        decoded = bb.decode(message.data)
        if isinstance(decoded, bb.ManifestStart):
            manifest = bytearray()
        elif isinstance(decoded, bb.Progress):
            progress.append(decoded.bytes_done)
        elif isinstance(decoded, bb.ArchiveData):
            (archive if manifest is None else manifest).extend(decoded.data)
    return bytes(archive), progress, None if manifest is None else bytes(manifest)


def _listed(archive: bytes) -> list[tuple[str, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar]  # type: ignore[union-attr]


def test_another_label_rewrites_backup_label_its_tar_header_progress_and_manifest() -> None:
    recorded = _recorded()
    wanted = BackupOptions(
        label="a much longer label " * 30, manifest="yes", manifest_checksums="SHA256"
    )
    assert derivable(recorded.options, wanted, tablespaces=1)
    archive, progress, manifest = _taken_apart(list(replay_frames(recorded, wanted)))
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:  # checks the header sums
        files = {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]
    assert files[LABEL] == _label_file(wanted.label)
    assert progress == [len(archive)]
    assert manifest is not None
    listed = {f["Path"]: f for f in json.loads(manifest)["Files"]}
    assert listed[LABEL]["Size"] == len(files[LABEL])
    assert listed[LABEL]["Checksum"] == hashlib.sha256(files[LABEL]).hexdigest()
    assert manifest == _manifest(files)


@pytest.mark.parametrize(
    ("manifest", "checksums"),
    [("yes", "SHA512"), ("yes", "CRC32C"), ("force-encode", "NONE"), ("no", "NONE")],
)
def test_the_manifest_is_built_again_for_other_options(manifest: str, checksums: str) -> None:
    recorded = _recorded(manifest=False)
    wanted = BackupOptions(label="old", manifest=manifest, manifest_checksums=checksums)
    archive, _, text = _taken_apart(list(replay_frames(recorded, wanted)))
    assert archive == _taken_apart(list(recorded.messages))[0]
    if manifest == "no":
        assert text is None
        return
    assert text is not None
    body, _, tail = text.rpartition(b'"Manifest-Checksum": "')
    assert hashlib.sha256(body).hexdigest() == tail[:64].decode()
    entries = json.loads(text)["Files"]
    paths = [
        bytes.fromhex(e["Encoded-Path"]).decode() if manifest == "force-encode" else e["Path"]
        for e in entries
    ]
    assert paths == [LABEL, "PG_VERSION", "global/1", "global/2", "global/pg_control"]
    data = bytes(range(256)) * 4
    if checksums == "SHA512":
        assert entries[2]["Checksum"] == hashlib.sha512(data).hexdigest()
    elif checksums == "CRC32C":  # the check value, in the byte order pg_crc32c stores it
        assert entries[3]["Checksum"] == "839206e3"
    else:
        assert "Checksum" not in entries[2]


def test_a_backup_that_cannot_be_rewritten_fails_before_anything_is_sent() -> None:
    recorded = _recorded()
    messages = list(recorded.messages)
    del messages[4]  # backup_label's tar header
    broken = RecordedBackup(recorded.options, recorded.command, tuple(messages))
    with pytest.raises(ServerError) as caught:
        replay_frames(
            broken, BackupOptions(label="new", manifest="yes", manifest_checksums="SHA256")
        )
    assert caught.value.sqlstate == "XX000"
    assert "cannot be rewritten" in caught.value.message


@pytest.mark.parametrize(
    ("have", "want"),
    [({"wal": True}, {}), ({}, {"tablespace_map": True}), ({"tablespace_map": True}, {})],
)
def test_wal_dropped_and_tablespace_map_added_or_dropped(
    have: dict[str, bool], want: dict[str, bool]
) -> None:
    """The archive a backup recorded with ``have`` becomes, asked for ``want``: the
    members a backup taken with ``want`` holds, in its order, progress and manifest
    following."""
    recorded = _recorded(**have)
    wanted = replace(recorded.options, **{k: want.get(k, False) for k in have | want})
    assert derivable(recorded.options, wanted, tablespaces=1)
    archive, progress, manifest = _taken_apart(list(replay_frames(recorded, wanted)))
    expected, _, _ = _taken_apart(list(_recorded(**want).messages))
    assert _listed(archive) == _listed(expected)  # tarfile checks each header's checksum
    assert len(archive) == len(expected)
    assert progress == [len(archive)]
    assert manifest == _manifest({k: v for k, v in _files("old", **want).items() if k != WAL})


ARCHIVING_OFF = NoticeResponse(
    (
        ("S", "NOTICE"),
        ("V", "NOTICE"),
        ("C", "00000"),
        (
            "M",
            "WAL archiving is not enabled; you must ensure that all required WAL segments "
            "are copied through other means to complete the backup",
        ),
    )
).encode()


def test_wait_notice_stays_in_place_and_goes_without_wait() -> None:
    """do_pg_backup_stop's notice comes inside the main archive's COPY, after pg_control:
    a rewrite keeps it there; asked without WAIT, it goes."""
    recorded = _recorded(wal=True)
    messages = list(recorded.messages)
    control = next(
        i for i, m in enumerate(messages) if m[:1] == b"d" and b"global/pg_control" in m[:120]
    )
    messages.insert(control + 3, ARCHIVING_OFF)  # after its header, content and padding
    options = replace(recorded.options, wait=True)
    waited = RecordedBackup(options, options.command(15), tuple(messages))
    relabelled = list(replay_frames(waited, replace(waited.options, label="new")))
    at = relabelled.index(ARCHIVING_OFF)
    assert b"global/pg_control" in relabelled[at - 3][:120]
    assert _taken_apart(relabelled)[0] != _taken_apart(messages)[0]  # the label changed
    no_wait = replace(waited.options, wait=False)
    assert derivable(waited.options, no_wait, tablespaces=1)
    assert not derivable(no_wait, waited.options, tablespaces=1)  # which notice: unknown
    assert ARCHIVING_OFF not in list(replay_frames(waited, no_wait))


@pytest.mark.parametrize("detail", [None, "3", "level=9"])
def test_gzip_compression_deflates_each_archive_as_bbsink_gzip(detail: str | None) -> None:
    """COMPRESSION 'gzip': base.tar.gz, one gzip stream of the archive at the level asked
    for, in 32 kB chunks with the rest at the end, then the archive's progress count; the
    manifest lists the uncompressed files."""
    recorded = _recorded()
    wanted = replace(recorded.options, compression="gzip", compression_detail=detail)
    assert derivable(recorded.options, wanted, tablespaces=1)
    frames = list(replay_frames(recorded, wanted))
    names = [bb.decode(f[5:]) for f in frames if f[:1] + f[5:6] == b"dn"]
    assert names == [bb.NewArchive("base.tar.gz", "")]
    compressed, progress, manifest = _taken_apart(frames)
    archive, recorded_progress, recorded_manifest = _taken_apart(list(recorded.messages))
    assert zlib.decompress(compressed, 31) == archive
    level = int(detail.removeprefix("level=")) if detail else -1
    deflate = zlib.compressobj(level, zlib.DEFLATED, 31)
    assert compressed == deflate.compress(archive) + deflate.flush()
    assert (progress, manifest) == (recorded_progress, recorded_manifest)


def test_what_cannot_be_derived_is_not() -> None:
    """WAL added (no whole segments recorded), compression, the tablespace map dropped
    when there are tablespaces besides the data directory."""
    have = BackupOptions(label="a")
    assert not derivable(have, BackupOptions(label="a", wal=True), tablespaces=1)
    assert derivable(BackupOptions(wal=True), BackupOptions(label="b"), tablespaces=1)
    gzip = BackupOptions(compression="gzip")
    assert not derivable(gzip, replace(gzip, label="b"), tablespaces=1)
    assert not derivable(have, BackupOptions(label="a", compression="lz4"), tablespaces=1)
    odd = BackupOptions(label="a", compression="gzip", compression_detail="workers=2")
    assert not derivable(have, odd, tablespaces=1)
    mapped = BackupOptions(label="a", tablespace_map=True)
    assert derivable(have, mapped, tablespaces=2)
    assert derivable(mapped, have, tablespaces=1)
    assert not derivable(mapped, have, tablespaces=2)  # the links' times are not recorded
    same = _recorded()
    assert list(derive(same.messages, same.options, same.options, modern=True)) == list(
        same.messages
    )


def test_the_physical_checks_comparison_catches_a_lost_member_or_message() -> None:
    """conformance.physical.compare_backups: a backup against itself is the same; a copy
    missing a tar member's chunks, or its last message, is not."""
    backup = _recorded()
    assert compare_backups(backup, backup) is None
    messages = list(backup.messages)
    header = next(i for i, m in enumerate(messages) if b"global/2" in m[:120])
    lost = messages[:header] + messages[header + 3 :]  # header, content, padding
    broken = RecordedBackup(backup.options, backup.command, tuple(lost))
    assert "members" in (compare_backups(broken, backup) or "")
    fewer = RecordedBackup(backup.options, backup.command, tuple(messages[:-1]))
    assert "messages" in (compare_backups(fewer, backup) or "")
