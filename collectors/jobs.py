"""Which job holds a GPU: from the pids NVML lists on it to a Slurm job, a pod, or a user.

For each pid, in order:

1. Slurm: a ``/job_<id>/`` cgroup (slurmd's cgroup plugin, v1 and v2; written by
   slurmd as root, so the job cannot change it) -> ``"<id>"`` (bare, as Slurm prints
   it). /proc/PID/environ is the job's own, which its user can set to anything: its
   ``SLURM_*`` values are taken only where its ``SLURM_JOB_ID`` is the cgroup's
   (then a job array's task is ``<array job>_<task>``, as squeue names it). Where
   no Slurm cgroup exists (no cgroup plugin), environ's ``SLURM_JOB_ID`` is taken
   as the job's: the user's word;
2. Kubernetes: a ``pod<uid>`` cgroup (cgroupfs ``kubepods/burstable/pod<uid>/``
   or systemd ``kubepods-burstable-pod<uid with _>.slice``) -> ``"pod:<uid>"``;
3. else the process owner (real uid in /proc/PID/status) -> ``"user:<name>"``.

The user a Slurm GPU's energy is charged to (``GpuReading.info["user"]``) is the
process owner's login name (the kernel's uid, /proc/PID/status): ``SLURM_JOB_USER``
naming another user is ignored (said at debug level). Its team (``info["team"]``) is the
job's Slurm account, ``SLURM_JOB_ACCOUNT``, from an environ taken as above: only its
``SLURM_JOB_ID`` is checked against the cgroup, so the account is the user's word, and
any user can name any account in it (Slurm's accounting is the only source of truth, and
is not read here). It becomes the alerts' ``team`` label and the energy report's team.
On Kubernetes both are the pod's namespace (``podresources.py``, in ``attribution.py``).
Names are refused unless they are printable, without spaces or commas (a comma separates
a shared GPU's users).

Several jobs on one GPU (MPS, time slicing) are joined with commas, sorted
(NVML's pid order changes from one sample to the next; the key must not), and
their users likewise in the jobs' order, one per job (empty where a job has
none), so that job and user stay paired; one user for all the jobs is named
once. The energy ledger splits such a GPU equally among its jobs
(``fleetwatch.pipeline.energy``). NVML reports host pids: in a container the
agent needs ``hostPID`` and the host's /proc as ``proc_root``: where NVML's pids are
not processes there it says so once, and a process of a /proc whose pid 2 is not
kthreadd (another pid namespace's) is no job.
Answers are cached per process, pid and start time (field 22 of /proc/PID/stat,
as ps tells processes apart), so a steady job costs one small read per pid and tick
and a pid number reused by another process is read again. The MPS server
(``DAEMONS``) is never a job: its clients' jobs are (NVML lists them apart).
"""

from __future__ import annotations

import logging
import os
import pwd
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_SLURM_CGROUP = re.compile(r"/job_(\d+)(?:/|$)")
_POD_CGROUP = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
MAX_JOB_CHARS = 256  # the codec's limit on a string
# What a login name or Slurm account may hold: no comma (it separates a shared GPU's
# users), no space or control character (a report's, a terminal's lines).
_NAME = re.compile(rf"[^\s,]{{1,{MAX_JOB_CHARS}}}")


def _read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def slurm_job_from_environ(environ: bytes) -> str | None:
    """``SLURM_JOB_ID``; a job array's task as squeue names it, ``<array job>_<task>``
    (``SLURM_ARRAY_JOB_ID``, ``SLURM_ARRAY_TASK_ID``; sacct takes either id)."""
    want = (b"SLURM_JOB_ID=", b"SLURM_ARRAY_JOB_ID=", b"SLURM_ARRAY_TASK_ID=")
    got: dict[bytes, str] = {}
    for entry in environ.split(b"\0"):
        for key in want:
            if entry.startswith(key):
                got[key] = entry[len(key):].decode("ascii", "replace")
    job = got.get(want[0], "")
    if not job.isdigit():
        return None
    array, task = got.get(want[1], ""), got.get(want[2], "")
    return f"{array}_{task}" if array.isdigit() and task.isdigit() else job


def clean_name(text: str | None) -> str | None:
    """A user or account name as it may be charged: printable, without spaces or
    commas, at most ``MAX_JOB_CHARS``; anything else is None (refused, not cut)."""
    if text and _NAME.fullmatch(text) and text.isprintable():
        return text
    return None


def _environ_text(environ: bytes, key: bytes) -> str | None:
    prefix = key + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return clean_name(entry[len(prefix):].decode("utf-8", "replace"))
    return None


def slurm_job_id(environ: bytes) -> str | None:
    """``SLURM_JOB_ID`` alone (a job array's task has its own), to compare with the
    cgroup's."""
    for entry in environ.split(b"\0"):
        if entry.startswith(b"SLURM_JOB_ID="):
            job = entry[13:].decode("ascii", "replace")
            return job if job.isdigit() else None
    return None


def slurm_user_from_environ(environ: bytes) -> str | None:
    """The job's owner as Slurm sets it (``SLURM_JOB_USER``), for energy per user."""
    return _environ_text(environ, b"SLURM_JOB_USER")


def slurm_uid_from_environ(environ: bytes) -> int | None:
    """The job's owner's uid as Slurm sets it (``SLURM_JOB_UID``)."""
    text = _environ_text(environ, b"SLURM_JOB_UID")
    return int(text) if text is not None and text.isdigit() else None


def slurm_account_from_environ(environ: bytes) -> str | None:
    """The job's Slurm account (``SLURM_JOB_ACCOUNT``, ``sbatch --account`` or the user's
    default): the team its energy is charged to and its alerts' ``team``. Unchecked: the
    job's processes may set it to any account."""
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


# GPU daemons that hold a GPU on behalf of other processes, never a job of their own:
# the MPS server (nvidia-cuda-mps-server; its comm, /proc/PID/comm and status' Name, is
# cut to 15 characters, "nvidia-cuda-mps", as is the control daemon's) runs under its
# first client's uid and is what NVML's plain list shows in place of the clients.
DAEMONS = ("nvidia-cuda-mps",)


@dataclass(frozen=True)
class Owner:
    """What one process is: its job, Slurm user and account ("" where none), and
    ``stamp``, which tells this process from a later one given the same pid number."""

    job: str | None
    user: str = ""
    team: str = ""
    stamp: bytes | None = None
    daemon: bool = False
    # Not NVML's process: another one with its number (see ``JobResolver._read``).
    foreign: bool = False


def start_time(stat: bytes) -> bytes | None:
    """Field 22 of /proc/PID/stat, the process' start time in clock ticks since boot: with
    the pid it names one process (as ps and psutil tell processes apart)."""
    # Field 2 (comm) is in parentheses and may hold spaces or ")": split after the last.
    rest = stat.rpartition(b")")[2].split()
    return rest[19] if len(rest) > 19 else None


def status_name(status: str) -> str:
    for line in status.splitlines():
        if line.startswith("Name:"):
            return line[5:].strip()
    return ""


class JobResolver:
    def __init__(self, proc_root: str | Path = "/proc") -> None:
        self.proc = str(proc_root)
        self._cache: dict[int, Owner] = {}
        self._said_mps = self._said_foreign = False
        self._foreign_ns: bool | None = None  # proc_root is another pid namespace's

    def foreign_namespace(self) -> bool:
        """proc_root is a /proc of a pid namespace below the host's (an agent in a
        container without hostPID): there pid 2 is not the kernel's kthreadd. Only a
        real procfs (it has ``self``) is judged."""
        if self._foreign_ns is None:
            status = _read_bytes(os.path.join(self.proc, "2", "status"))
            self._foreign_ns = (os.path.exists(os.path.join(self.proc, "self"))
                                and status is not None
                                and status_name(status.decode("utf-8", "replace"))
                                != "kthreadd")
        return self._foreign_ns

    def _stamp(self, base: str) -> bytes | None:
        """One small read per pid and tick: the start time, else (a /proc without stat,
        as in test trees) the cgroup, which differs for a pid reused by another job."""
        stat = _read_bytes(os.path.join(base, "stat"))
        if stat:
            return start_time(stat)
        return _read_bytes(os.path.join(base, "cgroup"))

    def owner(self, pid: int) -> Owner | None:
        """The process with this pid now: read again when the pid names another process
        than the one cached (a pid number reused); None when there is no such process."""
        base = os.path.join(self.proc, str(pid))
        stamp = self._stamp(base)
        cached = self._cache.get(pid)
        if cached is not None and cached.stamp == stamp:
            return cached
        got = self._read(base, stamp)
        if got is None:
            self._cache.pop(pid, None)
        else:
            self._cache[pid] = got
        return got

    def _read(self, base: str, stamp: bytes | None) -> Owner | None:
        if self.foreign_namespace():
            # Another process than NVML's that has its number (NVML's pids are the host's):
            # charging it would name a wrong job. Read once per process, not per tick. (Not
            # judged by the devices a process holds open: whether an MPS client holds one
            # of its own is not documented, and on the host's /proc the pid is NVML's.)
            return Owner(None, stamp=stamp, foreign=True)
        job, team, (environ_user, environ_uid) = self._slurm(base)
        raw = _read_bytes(os.path.join(base, "status"))
        status = raw.decode("utf-8", "replace") if raw else ""
        uid = owner_uid(status)
        login = clean_name(user_name(uid)) if uid is not None else None
        if (login is None or login.isdigit()) and uid is not None and environ_uid == uid:
            # A uid this host's name service lacks (no LDAP/SSSD where the agent runs):
            # Slurm's name for it, where Slurm's uid is the kernel's.
            login = environ_user or login
        user = None
        daemon = False
        if job is not None and job[0].isdigit():
            # The kernel's word on who runs the job: SLURM_JOB_USER naming another is not.
            user = login
            if environ_user not in (None, login):
                log.debug("pid %s: SLURM_JOB_USER %r is not its owner %r; the owner is "
                          "charged", base, environ_user, login)
        if job is None:
            daemon = status_name(status).startswith(DAEMONS)
            if uid is not None:
                job = "user:" + (login or str(uid))
        if job is None and not os.path.isdir(base):
            return None  # the process ended between NVML's answer and now: do not cache
        return Owner(job, user or "", team or "", stamp, daemon)

    def _slurm(self, base: str
               ) -> tuple[str | None, str | None, tuple[str | None, int | None]]:
        """The job of a process (Slurm or pod, from its cgroup; environ's where trusted),
        its Slurm account and environ's ``SLURM_JOB_USER`` and ``SLURM_JOB_UID`` (None
        where environ is not trusted): see the module's doc."""
        cgroup = _read_bytes(os.path.join(base, "cgroup"))
        job = job_from_cgroup(cgroup.decode("utf-8", "replace")) if cgroup else None
        environ = _read_bytes(os.path.join(base, "environ")) or b""
        said = slurm_job_id(environ)
        if said is None or (job is not None and said != job):
            if said is not None and job is not None and job.isdigit():
                log.debug("pid %s: SLURM_JOB_ID %s is not its cgroup's job %s; "
                          "the cgroup's is charged", base, said, job)
            return job, None, (None, None)
        # Environ agrees with slurmd's cgroup, or there is no cgroup to ask.
        return (slurm_job_from_environ(environ), slurm_account_from_environ(environ),
                (slurm_user_from_environ(environ), slurm_uid_from_environ(environ)))

    def job_of_pid(self, pid: int) -> str | None:
        got = self.owner(pid)
        return got.job if got is not None else None

    def _jobs(self, pids: Iterable[int]) -> dict[str, tuple[str, str]]:
        """The distinct jobs of these pids, sorted, as many as fit the codec's limit
        (whole jobs only), each with its Slurm user and account ("" where none). GPU
        daemons (``DAEMONS``) are no job."""
        owners: dict[str, tuple[str, str]] = {}
        for pid in pids:
            got = self.owner(pid)
            if got is None or got.job is None or got.daemon:
                continue
            if not any(owners.get(got.job, ())):
                owners[got.job] = (got.user, got.team)
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
        return any(o.user or o.team for o in self._cache.values())

    def user_of_pids(self, pids: Iterable[int]) -> str | None:
        """The Slurm users of these pids' jobs (read with them): one user for all the jobs
        once, else one per job in ``job_of_pids``' order ("" where a job has none), so
        they stay paired; None if no job has one."""
        return _paired([u for u, _ in self._jobs(pids).values()])

    def team_of_pids(self, pids: Iterable[int]) -> str | None:
        """The Slurm accounts of these pids' jobs, paired with them as ``user_of_pids``'."""
        return _paired([t for _, t in self._jobs(pids).values()])

    def daemons_only(self, pids: Iterable[int]) -> list[int]:
        """The pids, where every one of them is a GPU daemon (the MPS server alone: its
        clients unknown); else []."""
        pids = list(pids)
        got = [self._cache.get(p) for p in pids]
        return pids if pids and all(o is not None and o.daemon for o in got) else []

    def resolve(self, pids_by_gpu: Mapping[int, Iterable[int]]) -> dict[int, str]:
        """GPU index -> job, for every GPU that runs something; forgets pids that are gone."""
        out: dict[int, str] = {}
        for gpu, pids in pids_by_gpu.items():
            job = self.job_of_pids(pids)
            if job:
                out[gpu] = job
        self.prune(pids_by_gpu)
        return out

    def check(self, pids_by_gpu: Mapping[int, Iterable[int]]) -> None:
        """After a tick's reads: say once where the MPS server alone holds a GPU, and
        where NVML's pids are not processes under proc_root; then ``prune``."""
        lists = {gpu: list(pids) for gpu, pids in pids_by_gpu.items()}
        alone = {gpu: pids for gpu, pids in lists.items() if self.daemons_only(pids)}
        if alone and not self._said_mps:
            self._said_mps = True
            log.warning("GPU %s: NVML lists only the MPS server (pid %s), not its clients "
                        "(this driver does not answer nvmlDeviceGetMPSComputeRunningProcesses): "
                        "the jobs using it cannot be known and it is booked to no job",
                        ", ".join(map(str, alone)),
                        ", ".join(str(p) for pids in alone.values() for p in pids))
        listed = [p for pids in lists.values() for p in pids]
        missing = [p for p in listed if p not in self._cache or self._cache[p].foreign]
        if listed and 2 * len(missing) >= len(listed) and not self._said_foreign:
            self._said_foreign = True
            why = ("is the /proc of another pid namespace (its pid 2 is not kthreadd)"
                   if self.foreign_namespace() else "does not have them")
            log.warning("NVML lists pids %s on the GPUs, and %s %s: NVML gives the host's "
                        "pids, so their GPUs get no job. Run the agent in the host's pid "
                        "namespace (Kubernetes hostPID: true, docker --pid=host) with "
                        "agent.proc_root the host's /proc", ", ".join(map(str, missing[:10])),
                        self.proc, why)
        self.prune(lists)

    def prune(self, pids_by_gpu: Mapping[int, Iterable[int]]) -> None:
        """Forget pids no GPU holds now (the cache stays the size of the GPUs' lists)."""
        live = {pid for pids in pids_by_gpu.values() for pid in pids}
        if len(self._cache) > len(live):
            for pid in [p for p in self._cache if p not in live]:
                del self._cache[pid]


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
