"""conformance.provision logic that needs no server: settings, links, tar safety."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from conformance import provision


def test_every_supported_major_is_pinned_with_a_sha512() -> None:
    """Each major 14-18 maps to one exact package version of that major, with an integrity."""
    assert sorted(provision.PINNED) == [14, 15, 16, 17, 18]
    for major, pin in provision.PINNED.items():
        assert pin.version.startswith(f"{major}.")
        assert pin.integrity.startswith("sha512-")


def test_versions_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """PGWIRE_MOCK_PG_VERSIONS picks majors; unset means all five; junk is an error."""
    monkeypatch.delenv("PGWIRE_MOCK_PG_VERSIONS", raising=False)
    assert provision.requested_majors() == [14, 15, 16, 17, 18]
    monkeypatch.setenv("PGWIRE_MOCK_PG_VERSIONS", "17, 15")
    assert provision.requested_majors() == [17, 15]
    monkeypatch.setenv("PGWIRE_MOCK_PG_VERSIONS", "18")
    assert provision.requested_majors() == [18]
    monkeypatch.setenv("PGWIRE_MOCK_PG_VERSIONS", "13")
    with pytest.raises(provision.ProvisionError, match="13"):
        provision.requested_majors()


@pytest.mark.parametrize(
    ("ci", "skip", "skips"),
    [("", "1", True), ("", "", False), ("true", "1", False), ("1", "1", False)],
)
def test_only_users_outside_ci_may_skip_postgres(
    monkeypatch: pytest.MonkeyPatch, ci: str, skip: str, skips: bool
) -> None:
    """PGWIRE_MOCK_SKIP_POSTGRES=1 skips outside CI; in CI a missing server is an error."""
    monkeypatch.setenv("CI", ci)
    monkeypatch.setenv("PGWIRE_MOCK_SKIP_POSTGRES", skip)
    assert (provision.opted_out() is not None) == skips


def test_cache_honours_xdg_cache_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The binary cache lives under $XDG_CACHE_HOME/pgwire-mock when that is set."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert provision.cache_dir() == tmp_path / "pgwire-mock"


def test_soname_links_follow_the_package_listing(tmp_path: Path) -> None:
    """pg-symlinks.json entries become relative symlinks; existing files are left alone."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libicuuc.so.60.2").write_bytes(b"")
    (lib / "libpq.so.5.17").write_bytes(b"")
    (lib / "libpq.so.5").write_bytes(b"real file")
    listing = [
        {"source": "native/lib/libicuuc.so.60.2", "target": "native/lib/libicuuc.so.60"},
        {"source": "native/lib/libpq.so.5.17", "target": "native/lib/libpq.so.5"},
    ]
    (tmp_path / "pg-symlinks.json").write_text(json.dumps(listing))
    provision._link_sonames(lib)
    assert (lib / "libicuuc.so.60").readlink() == Path("libicuuc.so.60.2")
    assert (lib / "libpq.so.5").read_bytes() == b"real file"


def test_soname_links_without_a_listing(tmp_path: Path) -> None:
    """Without pg-symlinks.json, libX.so.N.M gets a libX.so.N link."""
    (tmp_path / "libxml2.so.2.9").write_bytes(b"")
    provision._link_sonames(tmp_path)
    assert (tmp_path / "libxml2.so.2").readlink() == Path("libxml2.so.2.9")


def _tar(tmp_path: Path, member: tarfile.TarInfo) -> Path:
    path = tmp_path / "pkg.tgz"
    with tarfile.open(path, "w:gz") as tar:
        tar.addfile(member, io.BytesIO(b"x" * member.size) if member.isfile() else None)
    return path


@pytest.mark.parametrize("name", ["package/native/../../evil", "package/native//etc/evil"])
def test_unpack_refuses_paths_leaving_the_destination(tmp_path: Path, name: str) -> None:
    """A tarball entry that would land outside the cache directory is refused."""
    member = tarfile.TarInfo(name)
    member.size = 1
    with pytest.raises(provision.ProvisionError, match="unsafe"):
        provision._unpack(_tar(tmp_path, member), tmp_path / "out")


def test_unpack_refuses_symlinks_out(tmp_path: Path) -> None:
    """A symlink pointing outside the tree is refused."""
    member = tarfile.TarInfo("package/native/lib/link")
    member.type = tarfile.SYMTYPE
    member.linkname = "/etc/passwd"
    with pytest.raises(provision.ProvisionError, match="unsafe"):
        provision._unpack(_tar(tmp_path, member), tmp_path / "out")


def test_unpack_strips_the_package_prefix(tmp_path: Path) -> None:
    """package/native/bin/postgres ends up as bin/postgres."""
    member = tarfile.TarInfo("package/native/bin/postgres")
    member.size = 3
    out = tmp_path / "out"
    provision._unpack(_tar(tmp_path, member), out)
    assert (out / "bin" / "postgres").read_bytes() == b"xxx"
