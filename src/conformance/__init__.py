"""Checks pgwire-mock against real PostgreSQL 14, 15, 16 and 17.

- :mod:`conformance.provision`: real servers on any machine, without Docker;
- :mod:`conformance.scenarios`: the SQL that makes each version emit every message;
- :mod:`conformance.capture`: the golden corpus (``pgwire-mock capture``);
- :mod:`conformance.matrix`: subjects x checks per version and scenario
  (``pgwire-mock conformance``); add a subject or a check to plug in a new consumer.
"""

from conformance.capture import CaptureError, GoldenFile, capture_corpus, capture_server, load
from conformance.checks import CHECKS, Check, CheckResult
from conformance.matrix import run_matrix
from conformance.provision import Cluster, ProvisionError, Server, install, provide
from conformance.scenarios import SCENARIOS, OptionSet, Scenario, option_sets
from conformance.subjects import SUBJECTS, Subject

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
