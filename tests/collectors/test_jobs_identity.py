"""A pid number reused by another process is read again; GPU daemons are no job."""

from __future__ import annotations

from pathlib import Path

from fleetwatch.collectors.jobs import JobResolver, start_time
from tests.collectors.conftest import UIDS


def put(proc: Path, pid: int, job: str | None, user: str = "", start: int | None = None,
        name: str = "python", uid: int = 0, cgroup: str = "") -> None:
    d = proc / str(pid)
    d.mkdir(exist_ok=True)
    env = f"SLURM_JOB_ID={job}\0SLURM_JOB_USER={user}\0" if job else "PATH=/bin\0"
    (d / "environ").write_bytes(env.encode())
    uid = UIDS.get(user, uid)
    (d / "status").write_text(f"Name:\t{name}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    (d / "cgroup").write_text(cgroup or "0::/user.slice\n")
    if start is not None:
        (d / "stat").write_text(f"{pid} (py (x) y) S 1 {pid} {pid} 0 -1 4194560 "
                                + "0 " * 12 + f"{start} 1000 200\n")


def test_start_time_is_field_22_even_with_odd_comm() -> None:
    stat = b"7 (a) b) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 987654 1000 200"
    assert start_time(stat) == b"987654"


def test_a_reused_pid_with_another_start_time_is_read_again(tmp_path: Path) -> None:
    put(tmp_path, 600, "1111", "alice", start=100)
    r = JobResolver(tmp_path)
    assert r.job_of_pids([600]) == "1111"
    assert r.user_of_pids([600]) == "alice"
    put(tmp_path, 600, "2222", "bob", start=900)  # same number, another process
    assert r.job_of_pids([600]) == "2222"
    assert r.user_of_pids([600]) == "bob"


def test_the_same_process_is_not_read_again(tmp_path: Path) -> None:
    put(tmp_path, 600, "1111", "alice", start=100)
    r = JobResolver(tmp_path)
    assert r.job_of_pid(600) == "1111"
    (tmp_path / "600" / "environ").write_bytes(b"SLURM_JOB_ID=9\0")  # only stat is read now
    assert r.job_of_pid(600) == "1111"


def test_without_stat_a_new_cgroup_tells_a_reused_pid(tmp_path: Path) -> None:
    put(tmp_path, 600, None, cgroup="0::/system.slice/slurmstepd.scope/job_1111/step_0\n")
    r = JobResolver(tmp_path)
    assert r.job_of_pid(600) == "1111"
    put(tmp_path, 600, None, cgroup="0::/system.slice/slurmstepd.scope/job_2222/step_0\n")
    assert r.job_of_pid(600) == "2222"


def test_the_mps_server_is_no_job_beside_its_clients(tmp_path: Path) -> None:
    put(tmp_path, 10, None, name="nvidia-cuda-mps", start=5)  # comm is cut to 15 chars
    put(tmp_path, 11, "4001", "erin", start=6)
    put(tmp_path, 12, "4002", "frank", start=7)
    r = JobResolver(tmp_path)
    assert r.job_of_pids([10, 11, 12]) == "4001,4002"
    assert r.user_of_pids([10, 11, 12]) == "erin,frank"
    assert r.daemons_only([10, 11, 12]) == []


def test_the_mps_server_alone_is_no_job_and_is_told(tmp_path: Path) -> None:
    put(tmp_path, 10, None, name="nvidia-cuda-mps", start=5)
    r = JobResolver(tmp_path)
    assert r.job_of_pids([10]) is None
    assert r.daemons_only([10]) == [10]


def test_only_the_mps_server_on_a_gpu_is_said_once(tmp_path: Path, caplog) -> None:
    put(tmp_path, 10, None, name="nvidia-cuda-mps", start=5)
    r = JobResolver(tmp_path)
    for _ in range(3):
        assert r.job_of_pids([10]) is None
        r.check({0: [], 3: [10]})
    said = [m for m in caplog.messages if "MPS server" in m]
    assert len(said) == 1 and said[0].startswith("GPU 3:") and "pid 10" in said[0]


def test_pids_absent_under_proc_root_are_said_once_with_what_to_set(tmp_path: Path,
                                                                   caplog) -> None:
    put(tmp_path, 1, None, start=1)  # the container's own init, not NVML's host pid 1
    r = JobResolver(tmp_path)
    for _ in range(2):
        pids = {0: [48211], 1: [48212], 2: [1]}
        r.resolve(pids)
        r.check(pids)
    said = [m for m in caplog.messages if "48211" in m]
    assert len(said) == 1 and "hostPID" in said[0] and "agent.proc_root" in said[0]


def test_a_proc_of_another_pid_namespace_charges_no_process(tmp_path: Path, caplog) -> None:
    put(tmp_path, 1, "77", "eve", start=1)
    put(tmp_path, 2, None, name="python", start=2)  # pid 2 of a container: no kthreadd
    (tmp_path / "self").symlink_to("1")  # a real procfs has it
    r = JobResolver(tmp_path)
    assert r.job_of_pids([1]) is None
    r.check({0: [1]})
    assert any("another pid namespace" in m for m in caplog.messages)


def test_the_hosts_proc_is_trusted(tmp_path: Path) -> None:
    put(tmp_path, 1, "77", "eve", start=1)
    put(tmp_path, 2, None, name="kthreadd", start=0)
    (tmp_path / "self").symlink_to("1")
    assert JobResolver(tmp_path).job_of_pids([1]) == "77"


def test_the_agents_own_real_proc_entry_is_read(tmp_path: Path) -> None:
    """Against the real /proc: this process runs no Slurm job, so it is its owner's
    (none where this /proc is a pid namespace below the host's); its start time is read."""
    import os
    import pwd
    r = JobResolver("/proc")
    assert r.owner(os.getpid()) is not None
    got = r._cache[os.getpid()]
    owner = None if r.foreign_namespace() else f"user:{pwd.getpwuid(os.getuid()).pw_name}"
    assert got.stamp is not None and got.job == owner


def test_a_slurm_job_found_by_its_cgroup_has_its_process_owner_as_user(tmp_path: Path) -> None:
    d = tmp_path / "30"
    d.mkdir()  # no environ: unreadable
    (d / "cgroup").write_text("0::/system.slice/slurmstepd.scope/job_3001/step_0/user/task_0\n")
    (d / "status").write_text("Name:\tpython\nUid:\t0\t0\t0\t0\n")
    r = JobResolver(tmp_path)
    assert (r.job_of_pids([30]), r.user_of_pids([30]), r.team_of_pids([30])) == (
        "3001", "root", None)
