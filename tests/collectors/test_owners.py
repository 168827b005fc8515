"""Who a GPU's energy is charged to on a real cluster: the Slurm job (slurmd's cgroup), its
user (the process owner) and account (team, from an environ that agrees with the cgroup);
on Kubernetes, the pod's namespace as
user and team and ``<namespace>/<pod>`` as the job, from the kubelet."""

from __future__ import annotations

import time
from pathlib import Path

from fleetwatch.collectors.jobs import JobResolver
from fleetwatch.collectors.node import node_source
from fleetwatch.collectors.nvml import FakeNvml
from fleetwatch.collectors.podresources import GrpcPodLister, PodMapper
from fleetwatch.pipeline.energy import EnergyIntegrator
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.collectors.conftest import NodeTree
from tests.collectors.test_attribution import kubelet, list_response  # noqa: F401 - fixture
from tests.collectors.test_node import config

POD_B = "pod:3f2a1b4c-5d6e-4f70-8a9b-0c1d2e3f4a5c"   # pid 1004's cgroup in the fixture /proc


def _environ(proc: Path, pid: int, **env: str) -> None:
    (proc / str(pid)).mkdir()
    (proc / str(pid) / "environ").write_bytes(
        b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))


def test_the_slurm_account_is_the_team_paired_with_its_job(tmp_path: Path) -> None:
    _environ(tmp_path, 11, SLURM_JOB_ID="111", SLURM_JOB_USER="alice",
             SLURM_JOB_ACCOUNT="vision")
    _environ(tmp_path, 21, SLURM_JOB_ID="222", SLURM_JOB_USER="bob", SLURM_JOB_ACCOUNT="nlp")
    _environ(tmp_path, 31, SLURM_JOB_ID="333", SLURM_JOB_USER="carol")  # no account set
    r = JobResolver(tmp_path)
    assert r.job_of_pids([21, 11]) == "111,222"
    assert r.team_of_pids([21, 11]) == "vision,nlp"
    assert r.team_of_pids([11]) == "vision"
    assert r.team_of_pids([31, 11]) == "vision,"
    assert r.team_of_pids([31]) is None


def test_a_slurm_gpu_carries_its_account_as_team_into_the_ledger(tree: NodeTree,
                                                                 tmp_path: Path) -> None:
    nv = FakeNvml.of(2)
    nv.gpus[0].pids = [1001]  # SLURM_JOB_ID=12345, alice, SLURM_JOB_ACCOUNT=ml-research
    source = node_source(config(tree), nvml=nv)
    t0 = time.time()
    frames = [source.frames(t0)[0], source.frames(t0 + 15)[0]]
    source.close()
    g0 = frames[0].gpus[0]
    assert (g0.job, g0.info["user"], g0.info["team"]) == ("12345", "alice", "ml-research")
    store = SqliteStore(tmp_path / "s.db")
    EnergyIntegrator(store).observe(frames)
    rows = [r for r in store.energy(0, 1e12) if r.device == "gpu0"]
    store.close()
    assert {(r.job, r.user, r.team) for r in rows} == {("12345", "alice", "ml-research")}


def test_a_pod_holding_a_whole_gpu_is_named_and_its_namespace_is_the_team(
        kubelet, tree: NodeTree) -> None:  # noqa: F811 - the fixture
    socket, answer = kubelet
    nv = FakeNvml.of(2)
    nv.gpus[0].pids = [1003]  # a pod by its cgroup
    nv.gpus[1].pids = [1004]  # another pod, on a GPU the kubelet gives out in parts
    answer[0] = list_response([
        ("trainer-0", "team-a", "main", "nvidia.com/gpu", [nv.gpus[0].uuid]),
        ("shared-1", "team-b", "worker", "nvidia.com/gpu", [f"{nv.gpus[1].uuid}::3"])])
    source = node_source(config(tree), nvml=nv, pods=PodMapper(GrpcPodLister(socket)))
    [frame] = source.frames(time.time())
    g0, g1 = frame.gpus
    assert (g0.job, g0.info["user"], g0.info["team"]) == ("team-a/trainer-0", "team-a",
                                                          "team-a")
    assert g1.job == POD_B  # which of the sharing pods runs there: not known, uid kept
    assert "pod" not in g1.info  # nor named as a pod
    assert (g1.info["user"], g1.info["team"]) == ("team-b", "team-b")  # its pods' namespace
    source.close()


def test_a_new_pod_is_named_from_a_fresh_kubelet_answer_and_keeps_its_name(
        kubelet, tree: NodeTree) -> None:  # noqa: F811 - the fixture
    socket, answer = kubelet
    nv = FakeNvml.of(1)
    answer[0] = list_response([("old-0", "ns", "c", "nvidia.com/gpu", [nv.gpus[0].uuid])])
    source = node_source(config(tree), nvml=nv,
                         pods=PodMapper(GrpcPodLister(socket), refresh_s=3600))
    source.frames(time.time())          # the kubelet's answer names old-0
    answer[0] = list_response([("new-0", "ns", "c", "nvidia.com/gpu", [nv.gpus[0].uuid])])
    nv.gpus[0].pids = [1003]            # a new pod's process, within refresh_s
    [frame] = source.frames(time.time())
    assert frame.gpus[0].job == "ns/new-0"
    answer[0] = list_response([])       # the pod stays, whatever the kubelet says later
    assert source.frames(time.time())[0].gpus[0].job == "ns/new-0"
    source.close()


def test_a_pods_labels_come_from_the_answer_that_named_its_job(
        kubelet, tree: NodeTree) -> None:  # noqa: F811 - the fixture
    socket, answer = kubelet
    nv = FakeNvml.of(1)
    nv.gpus[0].pids = [1003]
    answer[0] = list_response([("job-x", "batch", "c", "nvidia.com/gpu", [nv.gpus[0].uuid])])
    source = node_source(config(tree), nvml=nv,
                         pods=PodMapper(GrpcPodLister(socket), refresh_s=0))
    source.frames(time.time())
    # The kubelet already names the next pod while job-x's process still runs there.
    answer[0] = list_response([("job-y", "other", "d", "nvidia.com/gpu", [nv.gpus[0].uuid])])
    [g] = source.frames(time.time())[0].gpus
    source.close()
    assert g.job == "batch/job-x"
    assert (g.info["pod"], g.info["namespace"], g.info["container"]) == ("job-x", "batch", "c")
    assert (g.info["user"], g.info["team"]) == ("batch", "batch")


def test_a_kubelet_socket_that_appears_later_is_found_and_said(
        kubelet, tree: NodeTree, tmp_path: Path, caplog) -> None:  # noqa: F811 - the fixture
    from fleetwatch.collectors.node import POD_SOCKET_S, NodeSource

    caplog.set_level("INFO")
    socket, answer = kubelet
    nv = FakeNvml.of(1)
    nv.gpus[0].pids = [1003]  # a pod by its cgroup
    answer[0] = list_response([("serve-0", "prod", "c", "nvidia.com/gpu", [nv.gpus[0].uuid])])
    later = tmp_path / "later.sock"
    now = [0.0]
    source = NodeSource(config(tree), lambda: nv, None, clock=lambda: now[0],
                        pod_socket=str(later))
    assert source.frames(time.time())[0].gpus[0].job.startswith("pod:")
    assert sum("is not there" in m for m in caplog.messages) == 1
    later.symlink_to(socket)  # the kubelet made its socket
    now[0] += POD_SOCKET_S / 2
    assert source.frames(time.time())[0].gpus[0].job.startswith("pod:")  # not looked yet
    now[0] += POD_SOCKET_S
    [g] = source.frames(time.time())[0].gpus
    source.close()
    assert (g.job, g.info["user"], g.info["team"]) == ("prod/serve-0", "prod", "prod")
    assert sum("is not there" in m for m in caplog.messages) == 1
    assert sum(f"{later} found" in m for m in caplog.messages) == 1


def test_a_gpu_time_sliced_by_pods_of_one_namespace_is_that_namespaces(
        kubelet, tree: NodeTree) -> None:  # noqa: F811 - the fixture
    socket, answer = kubelet
    nv = FakeNvml.of(1)
    nv.gpus[0].pids = [1003, 1004]  # two pods by their cgroups
    uuid = nv.gpus[0].uuid
    answer[0] = list_response([("llm-a", "inference", "srv", "nvidia.com/gpu", [f"{uuid}::0"]),
                               ("llm-b", "inference", "srv", "nvidia.com/gpu", [f"{uuid}::1"])])
    source = node_source(config(tree), nvml=nv, pods=PodMapper(GrpcPodLister(socket)))
    [g] = source.frames(time.time())[0].gpus
    source.close()
    assert g.job is not None and g.job.count("pod:") == 2
    assert "pod" not in g.info and "container" not in g.info  # neither is named as the one
    assert (g.info["namespace"], g.info["user"], g.info["team"]) == (
        "inference", "inference", "inference")


def test_a_job_that_rewrites_its_environ_is_still_billed_to_its_cgroup_and_owner(
        tree: NodeTree, tmp_path: Path) -> None:
    """r21 security review: pid 1001 (cgroup job_12345, uid 1000 = alice) exports another
    job, a list of users and accounts; the frame and the ledger keep to what slurmd and the
    kernel say."""
    (tree.proc / "1001" / "environ").write_bytes(
        b"SLURM_JOB_ID=777\0SLURM_JOB_USER=alice,bob\0SLURM_JOB_ACCOUNT=physics,chem\0")
    nv = FakeNvml.of(2)
    nv.gpus[0].pids = [1001]
    source = node_source(config(tree), nvml=nv)
    t0 = time.time()
    frames = [source.frames(t0)[0], source.frames(t0 + 15)[0]]
    source.close()
    g0 = frames[0].gpus[0]
    assert (g0.job, g0.info.get("user"), g0.info.get("team")) == ("12345", "alice", None)
    store = SqliteStore(tmp_path / "s.db")
    EnergyIntegrator(store).observe(frames)
    rows = [r for r in store.energy(0, 1e12) if r.device == "gpu0"]
    store.close()
    assert {(r.job, r.user, r.team) for r in rows} == {("12345", "alice", "")}
