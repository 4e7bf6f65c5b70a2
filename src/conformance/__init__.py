"""Checks pgwire-mock against real PostgreSQL 14, 15, 16 and 17.

- :mod:`conformance.provision`: real servers on any machine, without Docker;
- :mod:`conformance.scenarios`: the SQL that makes each version emit every message;
- :mod:`conformance.capture`: the golden corpus (``pgwire-mock capture``);
- :mod:`conformance.matrix`: subjects x checks per version and scenario
  (``pgwire-mock conformance``); add a subject or a check to plug in a new consumer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from conformance.capture import CaptureError, GoldenFile, capture_corpus, capture_server, load
    from conformance.checks import CHECKS, Check, CheckResult
    from conformance.matrix import run_matrix
    from conformance.provision import Cluster, ProvisionError, Server, install, provide
    from conformance.scenarios import SCENARIOS, OptionSet, Scenario, option_sets
    from conformance.subjects import SUBJECTS, Subject

# Submodules load on first use: `python -m conformance.provision` must not find its own
# module already imported by this package (runpy warns), and `pgwire-mock decode` should
# not pay for psycopg when it never touches a server.
_HOMES = {
    "CaptureError": "capture",
    "GoldenFile": "capture",
    "capture_corpus": "capture",
    "capture_server": "capture",
    "load": "capture",
    "CHECKS": "checks",
    "Check": "checks",
    "CheckResult": "checks",
    "run_matrix": "matrix",
    "Cluster": "provision",
    "ProvisionError": "provision",
    "Server": "provision",
    "install": "provision",
    "provide": "provision",
    "SCENARIOS": "scenarios",
    "OptionSet": "scenarios",
    "Scenario": "scenarios",
    "option_sets": "scenarios",
    "SUBJECTS": "subjects",
    "Subject": "subjects",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'conformance' has no attribute {name!r}")
    return getattr(importlib.import_module(f"conformance.{_HOMES[name]}"), name)


__all__ = [
    "CHECKS",
    "SCENARIOS",
    "SUBJECTS",
    "CaptureError",
    "Check",
    "CheckResult",
    "Cluster",
    "GoldenFile",
    "OptionSet",
    "ProvisionError",
    "Scenario",
    "Server",
    "Subject",
    "capture_corpus",
    "capture_server",
    "install",
    "load",
    "option_sets",
    "provide",
    "run_matrix",
]
