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
    "conformance/live_types": {"psycopg2"},
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


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _load_time_imports(path: Path, known: set[str]) -> set[str]:
    """The project modules ``path`` imports when it is loaded: not inside a function
    (a lazy import) nor under ``if TYPE_CHECKING``. ``from package import name`` counts
    the package, and the submodule when ``name`` is one."""
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            for field in ("body", "orelse", "handlers", "finalbody"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    visit(inner)

    visit(ast.parse(path.read_text(), filename=str(path)).body)
    return found & known


def test_no_import_cycles_between_modules() -> None:
    """No module imports, when loaded, one that imports it back (directly or through
    others): each file can be read after what it depends on. Imports inside functions
    (kept for start-up time or optional extras) are not counted."""
    paths = {_module_name(p): p for p in SRC.rglob("*.py") if ".egg-info" not in p.as_posix()}
    graph = {name: _load_time_imports(path, set(paths)) - {name} for name, path in paths.items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def walk(name: str) -> None:
        state[name] = 1
        path.append(name)
        for target in sorted(graph[name]):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                walk(target)
        path.pop()
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            walk(name)
    assert not cycles, "\n".join(" -> ".join(cycle) for cycle in cycles)
