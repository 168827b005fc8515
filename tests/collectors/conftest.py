"""Shared helpers: checked-in fake /proc and /sys trees, a clock the test moves."""

from __future__ import annotations

import shutil
from pathlib import Path

import pynvml
import pytest

from fleetwatch.collectors.nvml import FakeNvml

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

# The login names of the test trees' uids (a Slurm job's user is its process owner's).
LOGINS = {0: "root", 1000: "alice", 1001: "bob", 1002: "carol", 1003: "erin", 1004: "frank"}
UIDS = {name: uid for uid, name in LOGINS.items()}


@pytest.fixture(autouse=True)
def logins(monkeypatch: pytest.MonkeyPatch) -> dict[int, str]:
    """This machine's passwd does not hold the test trees' users: ``LOGINS`` stands in."""
    from fleetwatch.collectors import jobs
    monkeypatch.setattr(jobs, "user_name", lambda uid: LOGINS.get(uid, str(uid)))
    return LOGINS


class Clock:
    """A monotonic clock that only moves when the test says so."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class NodeTree:
    """A copy of tests/fixtures/node/t0 that ``advance()`` moves to the t1 counters."""

    def __init__(self, root: Path) -> None:
        self.root = root
        shutil.copytree(FIXTURES / "node" / "t0", root)

    @property
    def proc(self) -> Path:
        return self.root / "proc"

    @property
    def sys(self) -> Path:
        return self.root / "sys"

    def advance(self) -> None:
        shutil.copytree(FIXTURES / "node" / "t1", self.root, dirs_exist_ok=True)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def tree(tmp_path: Path) -> NodeTree:
    return NodeTree(tmp_path / "node")


def _scenario(name: str) -> FakeNvml:
    nv = FakeNvml.of(4)
    if name == "gpu_lost":
        nv.lose(2)
    elif name == "not_supported":
        for method in ("power_usage_mw", "temperature_c", "utilization", "memory"):
            nv.fail(1, method, pynvml.NVMLError_NotSupported())
    elif name == "flaky":
        nv.fail(0, "utilization", pynvml.NVMLError_Unknown())
        nv.fail(3, "field_values", pynvml.NVMLError_Timeout())
    elif name == "nvml_missing":
        nv = FakeNvml.missing()
    elif name == "driver_mismatch":
        nv = FakeNvml.mismatch()
    return nv


SCENARIOS = ("healthy", "gpu_lost", "not_supported", "flaky", "nvml_missing", "driver_mismatch")


@pytest.fixture(params=SCENARIOS)
def scenario(request: pytest.FixtureRequest) -> tuple[str, FakeNvml]:
    """A FakeNvml in each failure scenario the agent must survive (gpustat's pattern)."""
    return request.param, _scenario(request.param)
