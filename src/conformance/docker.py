"""The Docker setup in ``docker/``, as data: one source for the compose file, its test,
the docs and the ``pgwire-mock conformance`` help.

``docker/compose.yaml`` must equal :func:`compose_spec` (``tests/conformance/
test_docker_files.py`` checks it); the ports and DSNs below are what ``docker/README.md``
and ``pgwire-mock conformance --help`` print.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from conformance.provision import MAJORS

__all__ = [
    "HOST",
    "SERVER_SETTINGS",
    "SERVICES",
    "DockerService",
    "compose_spec",
    "server_command",
]

HOST: Final = "127.0.0.1"
USER: Final = "postgres"
DATABASE: Final = "postgres"

#: The settings every container starts with: what the suite needs from a server
#: (conformance.provision starts its own servers with the same ones, plus speed-ups).
SERVER_SETTINGS: Final[Mapping[str, str]] = {
    "wal_level": "logical",
    "max_prepared_transactions": "10",
    "logical_decoding_work_mem": "64kB",
    "max_replication_slots": "20",
    "max_wal_senders": "20",
}


@dataclass(frozen=True, slots=True)
class DockerService:
    """One ``postgres:<major>`` container, published on ``127.0.0.1:54<major>``."""

    major: int

    @property
    def name(self) -> str:
        return f"postgres{self.major}"

    @property
    def image(self) -> str:
        return f"postgres:{self.major}"

    @property
    def port(self) -> int:
        return 5400 + self.major

    @property
    def dsn(self) -> str:
        return f"postgresql://{USER}@{HOST}:{self.port}/{DATABASE}"

    @property
    def env_assignment(self) -> str:
        """``PGWIRE_MOCK_DSN_<major>=<dsn>``, for ``scripts/test`` and pytest."""
        return f"PGWIRE_MOCK_DSN_{self.major}={self.dsn}"

    @property
    def cli_option(self) -> str:
        """``--dsn <major>=<dsn>``, for ``pgwire-mock conformance``."""
        return f"--dsn {self.major}={self.dsn}"


SERVICES: Final[tuple[DockerService, ...]] = tuple(DockerService(m) for m in MAJORS)


def server_command() -> str:
    """The container's command: ``postgres -c name=value ...``."""
    return " ".join(
        ["postgres", *(f"-c {name}={value}" for name, value in SERVER_SETTINGS.items())]
    )


def compose_spec() -> dict[str, object]:
    """What ``docker/compose.yaml`` holds, as parsed YAML."""
    services: dict[str, object] = {}
    for service in SERVICES:
        services[service.name] = {
            "image": service.image,
            # trust: the containers listen on loopback only and hold throwaway data.
            "environment": {"POSTGRES_HOST_AUTH_METHOD": "trust"},
            "command": server_command(),
            "ports": [f"{HOST}:{service.port}:5432"],
            "healthcheck": {
                "test": ["CMD", "pg_isready", "-U", USER, "-h", "127.0.0.1"],
                "interval": "2s",
                "timeout": "5s",
                "retries": 30,
            },
        }
    return {"name": "pgwire-mock", "services": services}
