"""Checks pgwire-mock against real PostgreSQL 14, 15, 16 and 17.

- :mod:`conformance.provision`: real servers on any machine, without Docker;
- :mod:`conformance.scenarios`: the SQL that makes each version emit every message;
- :mod:`conformance.capture`: the golden corpus (``pgwire-mock capture``).
"""

from conformance.capture import CaptureError, GoldenFile, capture_corpus, capture_server, load
from conformance.provision import Cluster, ProvisionError, Server, install, provide
from conformance.scenarios import SCENARIOS, OptionSet, Scenario, option_sets

__all__ = [
    "SCENARIOS",
    "CaptureError",
    "Cluster",
    "GoldenFile",
    "OptionSet",
    "ProvisionError",
    "Scenario",
    "Server",
    "capture_corpus",
    "capture_server",
    "install",
    "load",
    "option_sets",
    "provide",
]
