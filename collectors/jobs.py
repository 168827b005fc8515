"""Which job holds a GPU: from the pids NVML lists on it to a Slurm job, a pod, or a user.

For each pid, in order:

1. Slurm: ``SLURM_JOB_ID`` in /proc/PID/environ, else a ``/job_<id>/`` cgroup
   (slurmd's cgroup plugin, v1 and v2) -> ``"<id>"`` (bare, as Slurm prints it);
2. Kubernetes: a ``pod<uid>`` cgroup (cgroupfs ``kubepods/burstable/pod<uid>/``
   or systemd ``kubepods-burstable-pod<uid with _>.slice``) -> ``"pod:<uid>"``;
3. else the process owner (real uid in /proc/PID/status) -> ``"user:<name>"``.

The user a GPU's energy is charged to (``GpuReading.info["user"]``) is Slurm's
``SLURM_JOB_USER`` from the same environ, and its team (``info["team"]``) the job's
Slurm account, ``SLURM_JOB_ACCOUNT``; on Kubernetes both are the pod's namespace
(``podresources.py``, in ``node.py``). A job found by its cgroup alone (environ not
readable) has neither.

Several jobs on one GPU (MPS, time slicing) are joined with commas, sorted
(NVML's pid order changes from one sample to the next; the key must not), and
their users likewise in the jobs' order, one per job (empty where a job has
none), so that job and user stay paired; one user for all the jobs is named
once. The energy ledger splits such a GPU equally among its jobs
(``fleetwatch.pipeline.energy``). NVML reports host pids: in a container the
agent needs ``hostPID`` and the host's /proc as ``proc_root``. Answers are
cached per pid while the pid stays on a GPU, so a steady job costs no file reads.
"""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

_SLURM_CGROUP = re.compile(r"/job_(\d+)(?:/|$)")
_POD_CGROUP = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
MAX_JOB_CHARS = 256  # the codec's limit on a string


def _read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def slurm_job_from_environ(environ: bytes) -> str | None:
    for entry in environ.split(b"\0"):
        if entry.startswith(b"SLURM_JOB_ID="):
            value = entry[len(b"SLURM_JOB_ID="):].decode("ascii", "replace")
            return value if value.isdigit() else None
    return None


def _environ_text(environ: bytes, key: bytes) -> str | None:
    prefix = key + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode("utf-8", "replace")[:MAX_JOB_CHARS] or None
    return None


def slurm_user_from_environ(environ: bytes) -> str | None:
    """The job's owner as Slurm sets it (``SLURM_JOB_USER``), for energy per user."""
    return _environ_text(environ, b"SLURM_JOB_USER")


def slurm_account_from_environ(environ: bytes) -> str | None:
    """The job's Slurm account (``SLURM_JOB_ACCOUNT``, ``sbatch --account`` or the user's
    default): the team its energy is charged to."""
    return _environ_text(environ, b"SLURM_JOB_ACCOUNT")


def job_from_cgroup(text: str) -> str | None:
    """The Slurm job or Kubernetes pod named by a /proc/PID/cgroup file, if any."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        m = _SLURM_CGROUP.search(path)
        if m:
            return m.group(1)
        m = _POD_CGROUP.search(path)
        if m:
            return "pod:" + m.group(1).replace("_", "-")
    return None


def owner_uid(status: str) -> int | None:
    for line in status.splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    return None


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)  # a uid from a container's own passwd


class JobResolver:
    def __init__(self, proc_root: str | Path = "/proc") -> None:
        self.proc = str(proc_root)
        self._cache: dict[int, str | None] = {}
        self._users: dict[int, str] = {}  # pid -> SLURM_JOB_USER, where Slurm set one
        self._teams: dict[int, str] = {}  # pid -> SLURM_JOB_ACCOUNT, where Slurm set one

    def job_of_pid(self, pid: int) -> str | None:
        if pid in self._cache:
            return self._cache[pid]
        base = os.path.join(self.proc, str(pid))
        job: str | None = None
        environ = _read_bytes(os.path.join(base, "environ"))
        if environ:
            job = slurm_job_from_environ(environ)
            user = slurm_user_from_environ(environ)
            if user:
                self._users[pid] = user
            team = slurm_account_from_environ(environ)
            if team:
                self._teams[pid] = team
        if job is None:
            cgroup = _read_bytes(os.path.join(base, "cgroup"))
            if cgroup:
                job = job_from_cgroup(cgroup.decode("utf-8", "replace"))
        if job is None:
            status = _read_bytes(os.path.join(base, "status"))
            uid = owner_uid(status.decode("utf-8", "replace")) if status else None
            if uid is not None:
                job = "user:" + user_name(uid)
        if job is None and not os.path.isdir(base):
            return None  # the process ended between NVML's answer and now: do not cache
        self._cache[pid] = job
        return job

    def _jobs(self, pids: Iterable[int]) -> dict[str, tuple[str, str]]:
        """The distinct jobs of these pids, sorted, as many as fit the codec's limit
        (whole jobs only), each with its Slurm user and account ("" where none)."""
        owners: dict[str, tuple[str, str]] = {}
        for pid in pids:
            job = self.job_of_pid(pid)
            if job is not None and not any(owners.get(job, ())):
                owners[job] = (self._users.get(pid, ""), self._teams.get(pid, ""))
        out: dict[str, tuple[str, str]] = {}
        size = -1
        for job in sorted(owners):
            size += len(job) + 1
            if size > MAX_JOB_CHARS:
                break
            out[job] = owners[job]
        return out

    def job_of_pids(self, pids: Iterable[int]) -> str | None:
        """The job holding a GPU; several jobs sorted and comma-joined; None if none."""
        return ",".join(self._jobs(pids)) or None

    @property
    def has_users(self) -> bool:
        """Whether any pid now on a GPU has a Slurm user or account (the usual tick asks
        nothing more)."""
        return bool(self._users or self._teams)

    def user_of_pids(self, pids: Iterable[int]) -> str | None:
        """The Slurm users of these pids' jobs (read with them): one user for all the jobs
        once, else one per job in ``job_of_pids``' order ("" where a job has none), so
        they stay paired; None if no job has one."""
        return _paired([u for u, _ in self._jobs(pids).values()])

    def team_of_pids(self, pids: Iterable[int]) -> str | None:
        """The Slurm accounts of these pids' jobs, paired with them as ``user_of_pids``'."""
        return _paired([t for _, t in self._jobs(pids).values()])

    def resolve(self, pids_by_gpu: Mapping[int, Iterable[int]]) -> dict[int, str]:
        """GPU index -> job, for every GPU that runs something; forgets pids that are gone."""
        out: dict[int, str] = {}
        for gpu, pids in pids_by_gpu.items():
            job = self.job_of_pids(pids)
            if job:
                out[gpu] = job
        self.prune(pids_by_gpu)
        return out

    def prune(self, pids_by_gpu: Mapping[int, Iterable[int]]) -> None:
        """Forget pids no GPU holds now: a pid number is reused by a later process."""
        live = {pid for pids in pids_by_gpu.values() for pid in pids}
        if len(self._cache) > len(live):
            for pid in [p for p in self._cache if p not in live]:
                del self._cache[pid]
                self._users.pop(pid, None)
                self._teams.pop(pid, None)


def _paired(users: list[str]) -> str | None:
    """One name per job, in the jobs' order ("" where a job has none): one name for all
    the jobs once; None if no job has one."""
    if not any(users):
        return None
    if len(set(users)) == 1:
        return users[0]
    paired = ",".join(users)
    if len(paired) <= MAX_JOB_CHARS:
        return paired
    # Too long to pair: the distinct users, whole (the ledger splits among them).
    out = ""
    for user in sorted(set(users) - {""}):
        if len(out) + len(user) + 1 > MAX_JOB_CHARS:
            break
        out = f"{out},{user}" if out else user
    return out or None
