"""Several jobs on one GPU (MPS, time slicing): a stable key, users paired with jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.collectors.jobs import JobResolver, Owner
from tests.collectors.conftest import UIDS


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    """pid -> (SLURM_JOB_ID, SLURM_JOB_USER): 11 and 12 alice's jobs, 21 bob's, 31 a job
    found by its cgroup only (no user), 41 a plain process of uid 0."""
    envs = {11: (b"111", b"alice"), 12: (b"333", b"alice"), 21: (b"222", b"bob"),
            22: (b"222", b"bob")}
    for pid, (job, user) in envs.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "environ").write_bytes(
            b"PATH=/usr/bin\0SLURM_JOB_ID=" + job + b"\0SLURM_JOB_USER=" + user + b"\0")
        uid = UIDS[user.decode()]  # the job's user is its process owner
        (tmp_path / str(pid) / "status").write_text(f"Name:\tx\nUid:\t{uid}\t{uid}\t0\t0\n")
    (tmp_path / "31").mkdir()
    (tmp_path / "31" / "cgroup").write_text("0::/system.slice/slurmstepd.scope/job_444/step_0\n")
    (tmp_path / "41").mkdir()
    (tmp_path / "41" / "status").write_text("Name:\tx\nUid:\t0\t0\t0\t0\n")
    return tmp_path


@pytest.mark.parametrize("order", [[21, 11], [11, 21], [22, 11, 21]])
def test_jobs_and_users_of_a_shared_gpu_do_not_depend_on_nvmls_pid_order(proc, order):
    r = JobResolver(proc)
    assert r.job_of_pids(order) == "111,222"
    assert r.user_of_pids(order) == "alice,bob"


def test_users_stay_paired_with_jobs_a_user_with_two_jobs_is_named_twice(proc):
    r = JobResolver(proc)
    pids = [21, 12, 11]
    assert r.job_of_pids(pids) == "111,222,333"
    assert r.user_of_pids(pids) == "alice,bob,alice"


def test_one_user_for_all_the_jobs_is_named_once(proc):
    r = JobResolver(proc)
    assert r.job_of_pids([12, 11]) == "111,333"
    assert r.user_of_pids([12, 11]) == "alice"


def test_a_job_without_a_user_keeps_its_place_empty(proc):
    r = JobResolver(proc)
    assert r.job_of_pids([31, 21]) == "222,444"
    assert r.user_of_pids([31, 21]) == "bob,"
    assert r.job_of_pids([41, 31]) == "444,user:root"
    assert r.user_of_pids([41, 31]) is None


def test_a_long_list_keeps_whole_jobs(proc):
    r = JobResolver(proc)
    r._cache.update({1000 + i: Owner(f"{10_000_000 + i}") for i in range(40)})
    job = r.job_of_pids(range(1000, 1040))
    assert job is not None and len(job) <= 256
    assert all(len(j) == 8 for j in job.split(","))


def test_users_too_long_to_pair_are_named_whole_and_distinct(proc):
    r = JobResolver(proc)
    for i in range(6):
        r._cache[2000 + i] = Owner(f"{500 + i}", f"u{i % 2}" + "x" * 60)
    users = r.user_of_pids(range(2000, 2006))
    assert users == "u0" + "x" * 60 + ",u1" + "x" * 60
