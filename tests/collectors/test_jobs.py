"""Job attribution from pids against the checked-in fake /proc tree."""

from __future__ import annotations

import pytest

from fleetwatch.collectors.jobs import JobResolver, job_from_cgroup, slurm_job_from_environ
from tests.collectors.conftest import FIXTURES

PROC = FIXTURES / "node" / "t0" / "proc"


@pytest.mark.parametrize(("pid", "job"), [
    (1001, "12345"),                                       # SLURM_JOB_ID in environ
    (1002, "67890"),                                       # slurm cgroup v2
    (1007, "555"),                                         # slurm cgroup v1
    (1003, "pod:3f2a1b4c-5d6e-4f70-8a9b-0c1d2e3f4a5b"),     # kubepods, cgroupfs driver
    (1004, "pod:3f2a1b4c-5d6e-4f70-8a9b-0c1d2e3f4a5c"),     # kubepods, systemd driver
    (1005, "user:root"),                                   # owner
    (1006, "user:4242"),                                   # owner without a passwd entry
])
def test_job_of_pid(pid: int, job: str) -> None:
    assert JobResolver(PROC).job_of_pid(pid) == job


def test_gone_pid_is_no_job_and_not_cached() -> None:
    r = JobResolver(PROC)
    assert r.job_of_pid(99999) is None
    assert 99999 not in r._cache


def test_resolve_per_gpu_joins_distinct_jobs_and_forgets_old_pids() -> None:
    r = JobResolver(PROC)
    assert r.resolve({0: [1001], 1: [1001, 1002, 1001], 2: []}) == {0: "12345",
                                                                   1: "12345,67890"}
    r.resolve({0: [1005]})
    assert set(r._cache) == {1005}


def test_parsers() -> None:
    assert slurm_job_from_environ(b"A=1\0SLURM_JOB_ID=42\0") == "42"
    assert slurm_job_from_environ(b"SLURM_JOB_ID=\0") is None
    assert job_from_cgroup("0::/user.slice/user-1000.slice") is None
    assert job_from_cgroup("0::/slurm/job_7") == "7"


def test_a_job_array_task_is_named_as_squeue_names_it() -> None:
    env = b"SLURM_JOB_ID=2007\0SLURM_ARRAY_JOB_ID=2000\0SLURM_ARRAY_TASK_ID=7\0"
    assert slurm_job_from_environ(env) == "2000_7"
    assert slurm_job_from_environ(b"SLURM_JOB_ID=2007\0SLURM_ARRAY_JOB_ID=2000\0") == "2007"
    assert slurm_job_from_environ(b"SLURM_ARRAY_JOB_ID=2000\0SLURM_ARRAY_TASK_ID=7\0") is None
