"""docs/clients.md's list of the fake's known differences names xfail tests: each one it
names is marked xfail, so the list goes stale the day one passes (strict xfail fails)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def xfail_marked(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text())
    (function,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    return any("xfail" in ast.unparse(d) for d in function.decorator_list)


def test_every_test_the_known_differences_name_is_xfail() -> None:
    doc = (ROOT / "docs" / "clients.md").read_text()
    section = doc.split("## Known differences of the fake (xfail tests name them)", 1)[1]
    section = section.split("\n## ", 1)[0]
    named = re.findall(r"`(test_\w+\.py)::(test_\w+)`", section)
    assert named
    for filename, name in named:
        (path,) = list((ROOT / "tests").rglob(filename))
        assert xfail_marked(path, name), f"{filename}::{name} is not xfail"
