"""scripts/apt-install, which scripts/setup and scripts/install-clients install Debian
packages with, waits for another apt-get's lock instead of failing at once."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from conformance import provision

ROOT = Path(__file__).resolve().parents[2]
APT_INSTALL = ROOT / "scripts" / "apt-install"


@contextmanager
def held(lock: Path, seconds: float) -> Iterator[None]:
    """Hold ``lock`` as apt-get and dpkg do (an fcntl write lock) for ``seconds``."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o640)
    fcntl.lockf(fd, fcntl.LOCK_EX)
    timer = threading.Timer(seconds, os.close, (fd,))
    timer.start()
    try:
        yield
    finally:
        timer.join()


def test_every_script_installs_packages_through_apt_install() -> None:
    for script in sorted((ROOT / "scripts").iterdir()):
        if script.name == "apt-install":
            continue
        for line in script.read_text().splitlines():
            code = line.split("#", 1)[0]
            assert "apt-get " not in code, f"{script.name}: {line.strip()}"


def fake_apt_get(tmp_path: Path, locked_calls: int, error: str) -> Path:
    """An apt-get that fails ``locked_calls`` times with ``error``, then succeeds, and
    logs its arguments."""
    fake = tmp_path / "apt-get"
    fake.write_text(
        f"""#!/usr/bin/env bash
echo "$*" >> {tmp_path}/calls
n=$(wc -l < {tmp_path}/calls)
if [ "$n" -le {locked_calls} ]; then echo "{error}" >&2; exit 100; fi
"""
    )
    fake.chmod(0o755)
    return fake


def run_apt_install(fake: Path, *args: str, wait: int = 60) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PGWIRE_MOCK_APT_GET": str(fake),
        "PGWIRE_MOCK_APT_LOCK_TIMEOUT": str(wait),
    }
    return subprocess.run(
        [str(APT_INSTALL), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


LOCKED = "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 7 (apt-get)"


def test_a_lock_held_by_another_apt_get_is_waited_for(tmp_path: Path) -> None:
    result = run_apt_install(fake_apt_get(tmp_path, 2, LOCKED), "--no-install-recommends", "go")
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    timeout = "-o DPkg::Lock::Timeout=60"
    assert calls == [f"{timeout} update -qq"] * 3 + [
        f"{timeout} install -y -qq --no-install-recommends go"
    ]
    assert result.stderr.count("waiting up to 60s") == 1


def test_other_failures_and_a_lock_held_too_long_fail(tmp_path: Path) -> None:
    other = run_apt_install(fake_apt_get(tmp_path, 9, "E: Unable to locate package nope"), "nope")
    assert other.returncode == 100
    assert (tmp_path / "calls").read_text().count("update") == 1  # not retried
    assert "Unable to locate package nope" in other.stderr
    (tmp_path / "calls").unlink()
    started = time.monotonic()
    stuck = run_apt_install(fake_apt_get(tmp_path, 99, LOCKED), "x", wait=3)
    assert stuck.returncode == 100
    assert LOCKED in stuck.stderr
    assert time.monotonic() - started < 30


@pytest.mark.skipif(
    (os.geteuid() != 0 or shutil.which("apt-get") is None) and not provision.in_ci(),
    reason="needs root and apt-get (CI has both: there it runs, or fails)",
)
@pytest.mark.parametrize("lock", ["lists/lock", "dpkg/lock-frontend"])
def test_real_apt_get_waits_for_a_held_lock(tmp_path: Path, lock: str) -> None:
    """Real apt-get on a private copy of apt's state (no sources: nothing is downloaded,
    coreutils is already installed), with its lists lock or dpkg's lock held for 4 s."""
    for folder in ("lists/partial", "cache/archives/partial", "dpkg", "parts", "etc"):
        (tmp_path / folder).mkdir(parents=True)
    shutil.copy("/var/lib/dpkg/status", tmp_path / "dpkg" / "status")
    config = tmp_path / "apt.conf"
    config.write_text(
        f'Dir::State::Lists "{tmp_path}/lists";\n'
        f'Dir::State::status "{tmp_path}/dpkg/status";\n'
        f'Dir::Cache "{tmp_path}/cache";\n'
        'Dir::Etc::SourceList "/dev/null";\n'
        f'Dir::Etc::SourceParts "{tmp_path}/parts";\n'
        f'Dir::Etc::Parts "{tmp_path}/etc";\n'
    )
    started = time.monotonic()
    with held(tmp_path / lock, 4):
        result = subprocess.run(
            [str(APT_INSTALL), "coreutils"],
            env={**os.environ, "APT_CONFIG": str(config)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started >= 3.5  # it waited rather than failed
