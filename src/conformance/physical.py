"""The physical check: a real server and the fake serving its recording, asked the same.

For one server this module records its WAL and a base backup (``pgwire-mock record
--physical``, with the options of pg_basebackup ``-Fp -X fetch``), starts the fake on
that recording, and asks both, through :class:`pgwire_mock.client.ReplicationConnection`:

``wal``
    IDENTIFY_SYSTEM's system and timeline, and the recorded range of WAL read again with
    START_REPLICATION PHYSICAL: the same bytes from both.
``backup …``
    BASE_BACKUP with each option list of :data:`REQUESTS`: as recorded, and the ones the
    fake derives from the recording (WAL dropped, another label and SHA-256 checksums, a
    tablespace map, no manifest, gzip on 15+). The real server takes a new backup, so
    the answers are compared where two backups of one server agree: the messages but the
    archive data (notices included), the archives' names, the tar members but the WAL
    files, the manifest's files and fields; and the fake's manifest must check out
    against its archives (its SHA-256, each file's size).

``python -m conformance.physical --versions 15,18`` prints a line per check and exits 1
when one differs. The pytest suites under tests/pgwire_mock go further with the same
recordings (pg_basebackup, pg_receivewal and pg_verifybackup, timelines, faults).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import sys
import tarfile
import tempfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from codec import basebackup
from codec.wire import BackendReader, CopyData, CopyOutResponse, DataRow
from conformance import provision
from pgwire_mock.client import ReplicationConnection
from pgwire_mock.pytest_plugin import start_walsender
from pgwire_mock.record import record_physical
from pgwire_mock.record_backup import (
    PG_BASEBACKUP_DEFAULT,
    parse_backup_spec,
    record_base_backup,
)
from pgwire_mock.server.basebackup import RecordedBackup

__all__ = [
    "REQUESTS",
    "Outcome",
    "archives",
    "check_server",
    "compare_backups",
    "lasting",
    "main",
    "members",
]

_RECORDED: Final = f"{PG_BASEBACKUP_DEFAULT}, WAL"  # pg_basebackup -Fp -X fetch
REQUESTS: Final = {
    "as recorded": _RECORDED,
    "WAL dropped": PG_BASEBACKUP_DEFAULT,
    "label, sha256": "LABEL 'conformance', PROGRESS, WAIT 0, MANIFEST 'yes', "
    "MANIFEST_CHECKSUMS 'SHA256'",
    "tablespace map": f"{PG_BASEBACKUP_DEFAULT}, TABLESPACE_MAP",
    "no manifest": "LABEL 'pg_basebackup base backup', PROGRESS, WAL, WAIT 0",
    "gzip": f"{PG_BASEBACKUP_DEFAULT}, COMPRESSION 'gzip'",
}
"""Option lists asked of both; the fake answers all but the first by deriving them from
the one backup recorded (pg_basebackup's -Fp -X fetch)."""
_GZIP_MAJOR: Final = 15


@dataclass(frozen=True, slots=True)
class Outcome:
    major: int
    check: str
    difference: str | None  # None: the same

    @property
    def ok(self) -> bool:
        return self.difference is None


def archives(backup: RecordedBackup) -> tuple[dict[str, bytes], bytes | None]:
    """The archives (by name, gzip ones decompressed) and the manifest of a BASE_BACKUP
    answer, in 14's framing (a COPY per archive, then one for the manifest) or 15+'s."""
    reader = BackendReader()
    reader.feed(b"".join(backup.messages))
    messages = list(iter(reader.next_message, None))
    names = [
        "base.tar" if m.values[0] is None else f"{m.values[0].decode()}.tar"
        for m in messages
        if isinstance(m, DataRow) and len(m.values) == 3
    ]
    found: dict[str, bytearray] = {}
    current: bytearray | None = None
    manifest: bytearray | None = None
    copies = 0
    for message in messages:
        if isinstance(message, CopyOutResponse) and not backup.modern:
            copies += 1
            if copies > len(names):
                manifest = current = bytearray()
            else:
                current = found.setdefault(names[copies - 1], bytearray())
        elif isinstance(message, CopyData) and backup.modern:
            decoded = basebackup.decode(message.data)
            if isinstance(decoded, basebackup.NewArchive):
                current = found.setdefault(decoded.archive_name, bytearray())
            elif isinstance(decoded, basebackup.ManifestStart):
                manifest = current = bytearray()
            elif isinstance(decoded, basebackup.ArchiveData):
                assert current is not None
                current += decoded.data
        elif isinstance(message, CopyData):
            assert current is not None
            current += message.data
    out = {
        name.removesuffix(".gz"): zlib.decompress(bytes(data), 31)
        if name.endswith(".gz")
        else bytes(data)
        for name, data in found.items()
    }
    return out, None if manifest is None else bytes(manifest)


def members(tar: bytes) -> dict[str, bytes | None]:
    """Path -> bytes of each regular file (None for the rest) of a tar stream."""
    out: dict[str, bytes | None] = {}
    with tarfile.open(fileobj=io.BytesIO(tar), mode="r:") as archive:
        for member in archive:
            data = archive.extractfile(member) if member.isfile() else None
            name = member.name.removeprefix("./").rstrip("/")
            out[name] = None if data is None else data.read()
    return out


def lasting(names: Iterable[str]) -> list[str]:
    """The names but the WAL files and their .done marks: each backup has its own."""
    return sorted(n for n in names if not re.match(r"pg_wal/(archive_status/)?[0-9A-F]{24}", n))


def compare_backups(ours: RecordedBackup, real: RecordedBackup) -> str | None:
    """Where the fake's answer differs from a new backup of the real server (module doc)."""

    def kinds(backup: RecordedBackup) -> list[bytes]:
        return [f[:1] for f in backup.messages if f[:1] != b"d"]

    if kinds(ours) != kinds(real):
        return f"messages {kinds(ours)} against {kinds(real)}"
    (mine, manifest), (theirs, their_manifest) = archives(ours), archives(real)
    if sorted(mine) != sorted(theirs):
        return f"archives {sorted(mine)} against {sorted(theirs)}"
    for name, tar in mine.items():
        if lasting(members(tar)) != lasting(members(theirs[name])):
            return f"the members of {name} differ"
    if (manifest is None) != (their_manifest is None):
        return "a manifest on one side only"
    if manifest is None or their_manifest is None:
        return None
    body, _, tail = manifest.rpartition(b'"Manifest-Checksum": "')
    if hashlib.sha256(body).hexdigest() != tail[:64].decode():
        return "the fake's manifest checksum is wrong"
    listed, files = _manifest_files(manifest), _manifest_files(their_manifest)
    if lasting(listed) != lasting(files) or set(listed.values()) != set(files.values()):
        return "the manifests list other files or fields"
    sizes = {n: len(d) for t in mine.values() for n, d in members(t).items() if d is not None}
    wrong = [n for n, size in _manifest_sizes(manifest).items() if sizes.get(n) != size]
    return f"the manifest's sizes differ from the archives' for {wrong[:3]}" if wrong else None


def _paths(text: bytes) -> Iterator[tuple[str, dict[str, object]]]:
    for entry in json.loads(text)["Files"]:
        yield entry.get("Path") or bytes.fromhex(entry["Encoded-Path"]).decode(), entry


def _manifest_files(text: bytes) -> dict[str, frozenset[str]]:
    return {path: frozenset(entry) for path, entry in _paths(text)}


def _manifest_sizes(text: bytes) -> dict[str, int]:
    return {path: int(str(entry["Size"])) for path, entry in _paths(text)}


def check_server(server: provision.Server) -> list[Outcome]:
    """Every check of the module docstring on ``server``."""
    major = server.version
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "physical.jsonl"
        recording = record_physical(server.dsn, path, base_backups=[parse_backup_spec(_RECORDED)])
        fake = start_walsender(path, pg_version=major)
        try:
            dsn = fake.dsn(replication="", dbname="")  # physical: the client adds replication=true
            again = record_physical(
                dsn,
                Path(tmp) / "again.jsonl",
                start_lsn=recording.start_lsn,
                end_lsn=recording.end_lsn,
            )
            same = (again.system_identifier, again.timeline, again.wal_data) == (
                recording.system_identifier,
                recording.timeline,
                recording.wal_data,
            )
            outcomes.append(Outcome(major, "wal", None if same else "other WAL or identity"))
            for name, spec in REQUESTS.items():
                if name == "gzip" and major < _GZIP_MAJOR:
                    continue
                options = parse_backup_spec(spec)
                answers = []
                for target in (dsn, server.dsn):
                    with ReplicationConnection.connect(
                        target, timeout=300.0, startup_options={"replication": "true"}
                    ) as conn:
                        answers.append(record_base_backup(conn, options, 300.0))
                outcomes.append(Outcome(major, f"backup {name}", compare_backups(*answers)))
        finally:
            fake.stop()
    return outcomes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m conformance.physical",
        description="Record a real server's WAL and base backups, serve them with the fake "
        "and ask both the same: the WAL read again and BASE_BACKUP, as recorded and "
        "with options the fake derives.",
    )
    parser.add_argument("--versions", default=",".join(str(m) for m in provision.MAJORS))
    parser.add_argument("--dsn", action="append", default=[], metavar="MAJOR=DSN")
    args = parser.parse_args(argv)
    try:
        versions = [int(v) for v in args.versions.split(",") if v]
    except ValueError as err:
        parser.error(str(err))
    dsns = {int(k): v for k, _, v in (d.partition("=") for d in args.dsn)}
    outcomes: list[Outcome] = []
    for major in versions:
        dsn = dsns.get(major)
        server = (
            provision.ExternalServer(dsn, expect_major=major) if dsn else provision.provide(major)
        )
        try:
            print(f"PostgreSQL {server.full_version}:", flush=True)
            for outcome in check_server(server):
                mark = "✓" if outcome.ok else "✗"
                print(
                    f"  {mark} {outcome.check}"
                    + (f": {outcome.difference}" if outcome.difference else ""),
                    flush=True,
                )
                outcomes.append(outcome)
        finally:
            server.stop()
    bad = [o for o in outcomes if not o.ok]
    print(f"{len(outcomes) - len(bad)} of {len(outcomes)} checks the same")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
