"""The README's Python examples run as written, from the repository root."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def test_readme_has_examples() -> None:
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index: int, capsys: pytest.CaptureFixture[str]) -> None:
    cwd = Path.cwd()
    os.chdir(ROOT)
    try:
        exec(compile(BLOCKS[index], f"README.md block {index}", "exec"), {})
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("marker", ["@pytest.mark.walsender", "def test_my_consumer_applies"])
def test_readme_pytest_plugin_example_passes(tmp_path: Path, marker: str) -> None:
    """The plugin examples are real tests: run each with pytest from the repository root."""
    import subprocess
    import sys

    (block,) = [b for b in BLOCKS if marker in b]
    test_file = tmp_path / "test_readme_plugin_example.py"
    test_file.write_text(block)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(test_file),
            "--rootdir",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{block.count(chr(10) + 'def test_')} passed" in result.stdout


README = (ROOT / "README.md").read_text()


def test_readme_installs_from_a_checkout_with_extras_that_exist() -> None:
    """pgwire-mock is not on PyPI: no `pip install pgwire-mock[...]`, and every extra the
    README installs is one pyproject.toml declares."""
    import tomllib

    assert "pip install pgwire-mock" not in README
    assert "pip install 'pgwire-mock" not in README
    declared = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    named = {
        extra
        for group in re.findall(r"pip install (?:-e )?'[^'\[]*\[([^\]]+)\]'", README)
        for extra in group.split(",")
    }
    assert named and named <= declared, named - declared


def test_readme_conformance_sample_has_every_check_column() -> None:
    """The sample output is a run's: its header names the matrix's checks, in order."""
    from conformance.checks import CHECKS

    sample = README.split("$ pgwire-mock conformance", 1)[1].split("```", 1)[0]
    header = next(line for line in sample.splitlines() if line.strip().startswith("scenario"))
    assert header.split() == ["scenario", *(check.name for check in CHECKS)]
    cells = int(re.search(r"all (\d+) cells passed", sample).group(1))  # type: ignore[union-attr]
    assert cells == 2 * 5 * len(CHECKS)
