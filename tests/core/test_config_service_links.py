"""Kubernetes' service links are no settings (deploy finding 3, r22): kubelet sets, in every
pod of a namespace, FLEETWATCH_PROCESSOR_SERVICE_HOST, FLEETWATCH_PROCESSOR_PORT=tcp://...
and more for a Service named fleetwatch-processor; each was an unknown key (exit 2), and
FLEETWATCH_DASHBOARD_PORT=tcp://10.96.0.5:8050 a wrong value of a real key."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetwatch.config import ConfigError, load
from fleetwatch.config_env import service_link


def links(service: str, port: int, host: str = "10.96.0.7") -> dict[str, str]:
    """The variables kubelet sets for ``service`` (docker-link style)."""
    n = service.upper().replace("-", "_")
    url = f"tcp://{host}:{port}" if ":" not in host else f"tcp://[{host}]:{port}"
    return {f"{n}_SERVICE_HOST": host, f"{n}_SERVICE_PORT": str(port),
            f"{n}_SERVICE_PORT_METRICS": str(port), f"{n}_PORT": url,
            f"{n}_PORT_{port}_TCP": url, f"{n}_PORT_{port}_TCP_PROTO": "tcp",
            f"{n}_PORT_{port}_TCP_PORT": str(port), f"{n}_PORT_{port}_TCP_ADDR": host}


SERVICES = [("fleetwatch", 8050), ("fleetwatch-processor", 9401),
            ("fleetwatch-dashboard", 8050), ("fleetwatch-agent", 9400),
            ("fleetwatch-store-proxy", 443)]


@pytest.mark.parametrize("service, port", SERVICES)
def test_each_variable_of_a_service_link_is_one(service: str, port: int) -> None:
    for name, value in {**links(service, port), **links(service, port, "fd00::7")}.items():
        assert service_link(name, value, "FLEETWATCH_"), (name, value)


@pytest.mark.parametrize("name, value", [
    ("FLEETWATCH_DASHBOARD_PORT", "8050"),          # a real setting of that name
    ("FLEETWATCH_PROCESSOR_METRICS_PORT", "9401"),
    ("FLEETWATCH_DASHBOARD_HOST", "10.0.0.1"),
    ("FLEETWATCH_PROCESSOR_SERVICE_HOST", "my host"),  # not kubelet's shape: a typo, said
    ("FLEETWATCH_PROCESSOR_PORT", "9401"),
])
def test_a_setting_of_a_like_name_is_not_one(name: str, value: str) -> None:
    assert not service_link(name, value, "FLEETWATCH_")


def test_load_ignores_every_service_link_and_reads_the_real_settings(
        caplog: pytest.LogCaptureFixture) -> None:
    env: dict[str, str] = {}
    for service, port in SERVICES:
        env.update(links(service, port))
    env["FLEETWATCH_DASHBOARD_PORT"] = "8051"  # a real setting beside them is still read
    with caplog.at_level(logging.DEBUG, "fleetwatch.config"):
        config = load(None, env)
    assert config.dashboard.port == 8051
    assert config == load(None, {"FLEETWATCH_DASHBOARD_PORT": "8051"})
    said = [r.getMessage() for r in caplog.records if "service link" in r.getMessage()]
    assert len(said) == len(env) - 1 and all(r.levelno == logging.DEBUG
                                             for r in caplog.records if "service link"
                                             in r.getMessage())
    with pytest.raises(ConfigError, match="FLEETWATCH_PROCESSOR_SERVICE_HOSTS"):
        load(None, {"FLEETWATCH_PROCESSOR_SERVICE_HOSTS": "10.96.0.7"})  # not kubelet's


def test_the_configuration_loads_beside_a_service_named_fleetwatch_processor(
        tmp_path: Path) -> None:
    """``fleetwatch config`` (the load every command does first) with a pod's environment:
    exit 0, where agent, process and dashboard exited 2 before."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
    env = {**clean, **links("fleetwatch-processor", 9401), **links("fleetwatch", 8050),
           **links("fleetwatch-dashboard", 8050)}
    result = subprocess.run([sys.executable, "-m", "fleetwatch.cli", "config"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "service_host" not in result.stdout and "10.96.0.7" not in result.stdout
