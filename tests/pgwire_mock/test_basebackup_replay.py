"""server.basebackup and server.backup_options without a network or a real server:
option parsing, choosing and adjusting a recorded backup, MAX_RATE, the file format."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from test_session import Client, make

from codec.wire import (
    BackendReader,
    CommandComplete,
    CopyData,
    CopyDone,
    CopyOutResponse,
    DataRow,
    ErrorResponse,
    FieldDescription,
    ReadyForQuery,
    RowDescription,
    StartupMessage,
)
from pgwire_mock.cli import main
from pgwire_mock.record_backup import BackupSpecError, parse_backup_spec
from pgwire_mock.server.backup_options import BackupOptions, parse_backup_options
from pgwire_mock.server.basebackup import BackupReplay, RecordedBackup, choose, replay_frames
from pgwire_mock.server.errors import ServerError
from pgwire_mock.server.grammar import BaseBackup, parse_command
from pgwire_mock.server.physical import PhysicalRecording, PhysicalRecordingError


def _options(major: int, text: str) -> BackupOptions:
    command = parse_command(text, major)
    assert isinstance(command, BaseBackup)
    return parse_backup_options(major, command.options)


def _backup(options: BackupOptions, size: int = 1000) -> RecordedBackup:
    def rows(name: str, values: tuple[bytes | None, ...]) -> list[bytes]:
        field = FieldDescription(name, 0, 0, 25, -1, 0, 0)
        return [
            RowDescription((field,) * len(values)).encode(),
            DataRow(values).encode(),
            CommandComplete("SELECT").encode(),
        ]

    messages = [
        *rows("recptr", (b"0/2000028", b"1")),
        *rows("spcoid", (None, None, b"22876")),
        CopyOutResponse(0, ()).encode(),
        CopyData(b"nbase.tar\0\0").encode(),
        CopyData(b"d" + b"x" * size).encode(),
        CopyData(b"p" + (1000).to_bytes(8, "big")).encode(),
        CopyDone().encode(),
        *rows("recptr", (b"0/2000100", b"1")),
    ]
    return RecordedBackup(options, options.command(15), tuple(messages))


def test_14_words_and_15_options_mean_the_same() -> None:
    """FAST/NOWAIT/NOVERIFY_CHECKSUMS (14) are CHECKPOINT 'fast', WAIT 0,
    VERIFY_CHECKSUMS 0 (15+); the defaults are PostgreSQL's."""
    old = _options(14, "BASE_BACKUP LABEL 'x' PROGRESS FAST NOWAIT NOVERIFY_CHECKSUMS WAL")
    new = _options(
        15, "BASE_BACKUP (LABEL 'x', PROGRESS, CHECKPOINT 'fast', WAIT 0, VERIFY_CHECKSUMS 0, WAL)"
    )
    assert old == new
    assert _options(16, "BASE_BACKUP") == BackupOptions()
    assert _options(16, "BASE_BACKUP (MANIFEST 'yes')").manifest_checksums == "CRC32C"
    assert _options(14, old.command(14)) == old == _options(15, old.command(15))


def test_max_rate_out_of_range_names_the_range() -> None:
    with pytest.raises(ServerError, match='2000000 is outside the valid range for parameter "MAX'):
        _options(16, "BASE_BACKUP (MAX_RATE 2000000)")


def test_a_request_no_recorded_backup_answers_gets_0A000_naming_the_recorded_ones() -> None:
    """WAL (or WAIT, TABLESPACE_MAP, COMPRESSION) other than recorded cannot be derived;
    another label or manifest can (backup_rewrite)."""
    recorded = _backup(BackupOptions(label="a", manifest="yes", manifest_checksums="CRC32C"))
    with pytest.raises(ServerError) as caught:
        choose([recorded], BackupOptions(label="a", wal=True))
    assert caught.value.sqlstate == "0A000"
    assert recorded.command in (caught.value.detail or "")
    assert choose([recorded], recorded.options) is recorded
    assert choose([recorded], BackupOptions(label="b")) is recorded


def test_progress_off_nulls_the_sizes_and_blackhole_drops_the_data() -> None:
    """Without PROGRESS the tablespace sizes are NULL; TARGET 'blackhole' sends the same
    messages without archive data; CHECKPOINT and MAX_RATE do not matter."""
    recorded = _backup(BackupOptions(progress=True))
    plain = choose([recorded], BackupOptions(fast_checkpoint=True, max_rate=100))
    frames = list(replay_frames(plain, BackupOptions()))
    assert frames[4] == DataRow((None, None, None)).encode()
    assert [f for i, f in enumerate(frames) if i != 4] == [
        f for i, f in enumerate(recorded.messages) if i != 4
    ]
    blackhole = list(replay_frames(recorded, BackupOptions(progress=True, target="blackhole")))
    assert blackhole == [m for m in recorded.messages if m[:1] + m[5:6] != b"dd"]
    with pytest.raises(ServerError, match="no base backup"):
        choose([_backup(BackupOptions())], BackupOptions(progress=True))


def test_max_rate_holds_frames_back_until_the_rate_allows() -> None:
    """32 kB/s: one throttling sample (4 kB) goes at once (with the frame that passes it),
    the rest as time passes."""
    frames = [b"x" * 1024] * 64
    replay = BackupReplay(iter(frames), started=100.0, max_rate=32)
    first = replay.produce(1 << 20, 100.0)
    assert sum(map(len, first)) == 5 * 1024
    assert replay.ready_at(100.0) == pytest.approx(100.0 + 1 / 32)
    later = replay.produce(1 << 20, 101.0)
    assert sum(map(len, first + later)) == 37 * 1024
    rest = replay.produce(1 << 20, 200.0)
    assert len(first + later + rest) == 64 and replay.done
    assert replay.produce(1 << 20, 200.0) == []


def test_spec_errors_are_the_servers_words() -> None:
    with pytest.raises(BackupSpecError, match="unrecognized manifest option"):
        parse_backup_spec("MANIFEST 'maybe'")
    assert parse_backup_spec("").label == "base backup"


def test_recording_with_backups_round_trips_and_v1_hex_still_reads() -> None:
    backup = _backup(BackupOptions(progress=True))
    wal = bytes(range(256)) * 4
    recording = PhysicalRecording("15.18", 15, 1, 1, 0x2000000, 0x2000000 + len(wal), wal)
    recording.backups = (backup,)
    text = io.StringIO()
    recording.write(text)
    assert PhysicalRecording.read(io.StringIO(text.getvalue()), "f") == recording
    lines = text.getvalue().splitlines()
    meta = json.loads(lines[0])
    meta["physical"]["format"] = "pgwire-mock physical recording 1"
    v1 = [json.dumps(meta), json.dumps({"wal_start": "0/2000000", "data": wal.hex()})]
    old = PhysicalRecording.read(io.StringIO("\n".join(v1)), "f")
    assert old.wal_data == wal and old.backups == ()
    with pytest.raises(PhysicalRecordingError, match="messages, the header says"):
        PhysicalRecording.read(io.StringIO("\n".join(lines[:-1])), "f")


def _session(backups: tuple[RecordedBackup, ...], major: int = 15) -> Client:
    wal = bytes(8192)
    source = PhysicalRecording("15.18", 15, 1, 1, 0x2000000, 0x2000000 + len(wal), wal)
    source.backups = backups
    client, _ = make(major, source=source)  # type: ignore[arg-type]
    replies = client.send(
        StartupMessage((("user", "postgres"), ("database", "x"), ("replication", "true")))
    )
    assert replies[-1] == ReadyForQuery("I")
    return client


def test_the_session_sends_the_backup_then_reads_what_the_client_sent_meanwhile() -> None:
    """BASE_BACKUP: the recorded messages as produced, then ReadyForQuery; a query sent
    during the backup is answered after it, as a walsender reads nothing meanwhile."""
    backup = _backup(BackupOptions(progress=True))
    client = _session((backup,))
    assert client.query("BASE_BACKUP (PROGRESS)") == []
    assert client.query("IDENTIFY_SYSTEM") == []
    client.session.produce(1 << 20, client.now)
    sent = client.session.data_to_send()
    head = b"".join(backup.messages) + ReadyForQuery("I").encode()
    assert sent.startswith(head)
    reader = BackendReader()
    reader.feed(sent[len(head) :])
    rest = list(reader)
    assert isinstance(rest[0], RowDescription) and rest[-1] == ReadyForQuery("I")


def test_the_session_refuses_bad_or_unrecorded_options_and_goes_on() -> None:
    client = _session((_backup(BackupOptions(progress=True)),))
    for text, sqlstate in (("BASE_BACKUP (MAX_RATE 1)", "22003"), ("BASE_BACKUP (WAL)", "0A000")):
        replies = client.query(text)
        assert [m.sqlstate for m in replies if isinstance(m, ErrorResponse)] == [sqlstate]
        assert replies[-1] == ReadyForQuery("I")


def test_a_14_recording_is_not_served_as_15_nor_the_reverse() -> None:
    """14 frames a backup as one COPY per archive, 15+ as one COPY: no rewriting."""
    backup = _backup(BackupOptions())
    assert choose([backup], BackupOptions(), recorded_major=16, major=18) is backup
    for recorded, served in ((14, 15), (15, 14)):
        with pytest.raises(ServerError, match="framing") as caught:
            choose([backup], BackupOptions(), recorded_major=recorded, major=served)
        assert caught.value.sqlstate == "0A000"


def test_max_rate_makes_the_session_wait_for_its_deadline() -> None:
    client = _session((_backup(BackupOptions(), size=64 * 1024),))
    client.query("BASE_BACKUP (MAX_RATE 32)")
    client.session.produce(1 << 20, client.now)
    assert not client.session.can_produce
    deadline = client.session.next_deadline()
    assert deadline is not None and deadline > client.now
    client.session.tick(deadline)
    assert client.session.can_produce


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--physical", "--base-backup", "MANIFEST 'maybe'"],
            'unrecognized manifest option: "maybe"',
        ),
        (["--base-backup", "--slot", "s", "--publication", "p"], "--base-backup needs --physical"),
    ],
)
def test_record_base_backup_bad_input_is_one_line(
    args: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Checked before connecting: one line naming the problem, exit 1."""
    out = tmp_path / "r.jsonl"
    assert main(["record", "--dsn", "postgresql://u@127.0.0.1:1/x", "--out", str(out), *args]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and expected in err[0], err
