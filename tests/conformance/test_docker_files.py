"""docker/ without a Docker engine: the files parse and agree with conformance.docker,
the one source of the ports, settings and DSNs that the docs and the CLI help print."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import yaml

from conformance import docker, provision
from pgwire_mock import cli

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"


def test_compose_file_equals_the_spec_in_conformance_docker() -> None:
    spec = yaml.safe_load((DOCKER / "compose.yaml").read_text(encoding="utf-8"))
    assert spec == docker.compose_spec()


def test_one_service_per_supported_major_on_its_port() -> None:
    services = yaml.safe_load((DOCKER / "compose.yaml").read_text(encoding="utf-8"))["services"]
    assert sorted(services) == [f"postgres{m}" for m in provision.MAJORS]
    for service in docker.SERVICES:
        entry = services[service.name]
        assert entry["image"] == f"postgres:{service.major}"
        assert entry["ports"] == [f"127.0.0.1:54{service.major}:5432"]
        assert service.dsn == f"postgresql://postgres@127.0.0.1:54{service.major}/postgres"
        assert "pg_isready" in entry["healthcheck"]["test"]
        assert entry["environment"]["POSTGRES_HOST_AUTH_METHOD"] == "trust"


def test_containers_get_the_settings_the_suite_relies_on() -> None:
    """The same values conformance.provision starts its own servers with."""
    command = docker.server_command().split()
    assert command[0] == "postgres"
    settings = dict(arg.split("=", 1) for arg in command[2::2])
    assert command[1::2] == ["-c"] * len(settings)
    assert settings == dict(docker.SERVER_SETTINGS)
    for name, value in docker.SERVER_SETTINGS.items():
        assert provision._SETTINGS[name] == value


def test_readme_gives_every_port_and_dsn_for_both_ways_of_running() -> None:
    readme = (DOCKER / "README.md").read_text(encoding="utf-8")
    for service in docker.SERVICES:
        assert f"| {service.port} |" in readme.replace("  ", " ")
        assert f"`{service.dsn}`" in readme
        assert f"--dsn {service.major}={service.dsn}" in readme
        assert f"PGWIRE_MOCK_DSN_{service.major}={service.dsn}" in readme
    assert "docker compose -f docker/compose.yaml up" in readme


def test_cli_help_names_the_container_dsns(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["conformance", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for service in docker.SERVICES:
        assert service.cli_option in help_text


def test_dockerfile_entrypoint_is_the_installed_console_script() -> None:
    dockerfile = (DOCKER / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"^FROM python:3\.11-slim$", dockerfile, re.MULTILINE)
    entrypoint = re.search(r'^ENTRYPOINT \["([^"]+)"\]$', dockerfile, re.MULTILINE)
    assert entrypoint is not None
    script = entrypoint.group(1)
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert declared["project"]["scripts"][script] == "pgwire_mock.cli:main"
    installed = entry_points(group="console_scripts", name=script)
    assert [e.value for e in installed] == ["pgwire_mock.cli:main"]
    assert re.search(r"^RUN pip install .*\.", dockerfile, re.MULTILINE)
    # By default the image serves the bundled demo on the published port (docker/README.md).
    assert 'CMD ["serve", "--host", "0.0.0.0", "--port", "5433", "--script", "/demo.yaml"]' in (
        dockerfile
    )
