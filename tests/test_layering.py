"""Dependencies point one way: codec -> pgwire_mock -> conformance.

The codec is sans-IO and standard-library only, so users can embed it anywhere;
``codec.strategies`` may add Hypothesis, which is an optional extra.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
STDLIB = sys.stdlib_module_names
# What each package may import besides the standard library and itself.
ALLOWED = {
    "codec": {"codec"},
    # cryptography and OpenSSL come with twisted[tls] (TLS, self-signed test certificates).
    "pgwire_mock": {
        "codec",
        "pgwire_mock",
        "twisted",
        "zope",
        "psycopg",
        "yaml",
        "cryptography",
        "OpenSSL",
        "numpy",  # the synthetic generator's bulk row drawing
    },
    "conformance": {"codec", "pgwire_mock", "conformance", "psycopg", "twisted", "zope"},
}
# Modules that only run where their extra is installed.
EXTRA = {
    "codec/strategies": {"hypothesis"},
    "pgwire_mock/spark": {"pyspark", "pyarrow", "deltalake"},
    "pgwire_mock/pytest_plugin": {"pytest"},
    # The matrix's spark-values check reads the Spark side's Arrow/Parquet output.
    "conformance/spark_check": {"pyarrow", "numpy"},
    # The live-WAL story's consumer is written with psycopg2, as CDC consumers are.
    "conformance/live": {"psycopg2"},
}
# Blocking I/O has no place in a sans-IO codec.
CODEC_FORBIDDEN = {"socket", "asyncio", "threading", "selectors", "ssl", "subprocess", "logging"}


def imports(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module.split(".")[0]


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_its_layer_allows(package: str) -> None:
    problems = []
    files = sorted((SRC / package).rglob("*.py"))
    assert files, f"no sources under src/{package}"
    for path in files:
        relative = path.relative_to(SRC).as_posix()
        allowed = set(ALLOWED[package])
        for prefix, extra in EXTRA.items():
            if relative.startswith(prefix):
                allowed |= extra
        for line, module in imports(path):
            if module in STDLIB and not (package == "codec" and module in CODEC_FORBIDDEN):
                continue
            if module not in allowed:
                problems.append(f"{relative}:{line} imports {module}")
    assert not problems, "\n".join(problems)
