"""Which release runs where (upgrader round 20, #3): ``fleetwatch --version`` and the
processor's and agent's info metrics carry the package version and, installed from a git
checkout (``pip install -e``), its commit, so a rolling upgrade shows who is upgraded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

import fleetwatch
from collectors.agent_health import AgentHealth
from fleetwatch import __version__, commit, version_text

ROOT = Path(fleetwatch.__file__).resolve().parent.parent


def _git_head() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_the_version_names_the_commit_of_a_git_checkout() -> None:
    assert commit() == _git_head()           # this test runs from a checkout
    assert version_text() == f"{__version__} (commit {_git_head()})"
    out = subprocess.run([sys.executable, "-m", "fleetwatch.cli", "--version"],
                         capture_output=True, text=True, check=True, cwd="/").stdout
    assert out.strip() == f"fleetwatch {__version__} (commit {_git_head()})"


def test_outside_a_checkout_the_version_alone(tmp_path: Path) -> None:
    assert commit(tmp_path) == ""            # no .git: a wheel in site-packages


def test_the_agent_exports_its_version() -> None:
    registry = CollectorRegistry()
    registry.register(AgentHealth())
    text = generate_latest(registry).decode()
    assert (f'fleetwatch_agent_info{{commit="{_git_head()}",version="{__version__}"}} 1.0'
            in text), text
