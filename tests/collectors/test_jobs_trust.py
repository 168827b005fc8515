"""A job's environment is its user's: slurmd's cgroup and the kernel's uid decide who is billed."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.collectors.jobs import JobResolver, clean_name

SLURM_500 = "0::/system.slice/slurmstepd.scope/job_500/step_0/user/task_0\n"


def proc(root: Path, pid: int, env: dict[str, str], cgroup: str, uid: int = 1000) -> None:
    d = root / str(pid)
    d.mkdir()
    (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))
    (d / "cgroup").write_text(cgroup)
    (d / "status").write_text(f"Name:\tpython\nUid:\t{uid}\t{uid}\t0\t0\n")


def owner(root: Path, pid: int) -> tuple[str | None, str | None, str | None]:
    r = JobResolver(root)
    return r.job_of_pids([pid]), r.user_of_pids([pid]), r.team_of_pids([pid])


def test_a_spoofed_environ_does_not_move_the_bill(tmp_path: Path) -> None:
    proc(tmp_path, 42, {"SLURM_JOB_ID": "777", "SLURM_JOB_USER": "bob",
                        "SLURM_JOB_ACCOUNT": "physics"}, SLURM_500)
    assert owner(tmp_path, 42) == ("500", "alice", None)  # cgroup's job, uid 1000's login


def test_an_environ_agreeing_with_the_cgroup_gives_account_and_array_task(tmp_path: Path) -> None:
    proc(tmp_path, 42, {"SLURM_JOB_ID": "500", "SLURM_ARRAY_JOB_ID": "499",
                        "SLURM_ARRAY_TASK_ID": "1", "SLURM_JOB_USER": "alice",
                        "SLURM_JOB_ACCOUNT": "vision"}, SLURM_500)
    assert owner(tmp_path, 42) == ("499_1", "alice", "vision")


def test_slurm_job_user_naming_another_user_is_not_charged(tmp_path: Path) -> None:
    proc(tmp_path, 42, {"SLURM_JOB_ID": "500", "SLURM_JOB_USER": "bob"}, SLURM_500)
    assert owner(tmp_path, 42) == ("500", "alice", None)  # its process owner, uid 1000


def test_without_a_slurm_cgroup_the_environ_is_taken_with_the_owners_login(tmp_path: Path) -> None:
    proc(tmp_path, 42, {"SLURM_JOB_ID": "777", "SLURM_JOB_USER": "alice",
                        "SLURM_JOB_ACCOUNT": "vision"}, "0::/user.slice\n")
    assert owner(tmp_path, 42) == ("777", "alice", "vision")


@pytest.mark.parametrize("account", ["physics,chem", "a b", "x\x1b[2J", "\u202eevil", ""])
def test_an_account_with_a_comma_space_or_control_is_refused(tmp_path: Path,
                                                             account: str) -> None:
    proc(tmp_path, 42, {"SLURM_JOB_ID": "500", "SLURM_JOB_USER": "alice,bob",
                        "SLURM_JOB_ACCOUNT": account}, SLURM_500)
    assert owner(tmp_path, 42) == ("500", "alice", None)  # the login, not the list


def test_clean_name_keeps_real_names() -> None:
    assert clean_name("ml-research") == "ml-research"
    assert clean_name("jdoe@corp.example") == "jdoe@corp.example"
    assert clean_name("alice,bob") is None and clean_name("x" * 257) is None


def test_a_uid_the_agents_passwd_lacks_takes_slurm_job_user_where_slurm_job_uid_agrees(
        tmp_path: Path) -> None:
    """An agent whose host or container resolves no login for the uid (no LDAP/SSSD in its
    name service) still charges the job's user by name: Slurm's SLURM_JOB_USER, trusted
    where Slurm's SLURM_JOB_UID is the kernel's uid of the process."""
    proc(tmp_path, 42, {"SLURM_JOB_ID": "500", "SLURM_JOB_USER": "carol",
                        "SLURM_JOB_UID": "4242"}, SLURM_500, uid=4242)
    assert owner(tmp_path, 42) == ("500", "carol", None)
    proc(tmp_path, 43, {"SLURM_JOB_ID": "500", "SLURM_JOB_USER": "carol",
                        "SLURM_JOB_UID": "4243"}, SLURM_500, uid=4242)
    assert owner(tmp_path, 43) == ("500", "4242", None)  # the uid said otherwise
