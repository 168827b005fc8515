"""What the agent adds around NVML: the inlet temperature (hwmon), the user a GPU's
energy is charged to, the pod that holds it (kubelet pod-resources over real gRPC),
and DCGM's profiling ratios on GPUs without GPM."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from fleetwatch import codec
from fleetwatch.collectors.dcgm import FakeDcgm
from fleetwatch.collectors.exporter import Exporter, render
from fleetwatch.collectors.hwmon import InletSource
from fleetwatch.collectors.node import node_source
from fleetwatch.collectors.nvml import FakeNvml
from fleetwatch.collectors.podresources import (
    LIST_METHOD,
    GrpcPodLister,
    PodInfo,
    PodMapper,
    gpu_pods,
    parse_list_response,
)
from tests.collectors.conftest import NodeTree
from tests.collectors.test_node import config


# -- a kubelet of the test's own: protobuf encoded by hand, served by grpcio -----------
def _field(number: int, payload: bytes) -> bytes:
    key, n, out = (number << 3) | 2, len(payload), bytearray()
    for v in (key, n):
        while True:
            b = v & 0x7F
            v >>= 7
            out.append(b | (0x80 if v else 0))
            if not v:
                break
    return bytes(out) + payload


def list_response(pods: list[tuple[str, str, str, str, list[str]]]) -> bytes:
    out = b""
    for name, ns, container, resource, ids in pods:
        devices = _field(1, resource.encode()) + b"".join(_field(2, i.encode()) for i in ids)
        cont = _field(1, container.encode()) + _field(2, devices)
        out += _field(1, _field(1, name.encode()) + _field(2, ns.encode()) + _field(3, cont))
    return out


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[tuple[str, list[bytes]]]:
    answer = [b""]
    socket = str(tmp_path / "kubelet.sock")

    def list_pods(request: bytes, context: grpc.ServicerContext) -> bytes:
        assert request == b""  # ListPodResourcesRequest has no fields
        return answer[0]

    service, method = LIST_METHOD.strip("/").split("/")
    handler = grpc.method_handlers_generic_handler(service, {
        method: grpc.unary_unary_rpc_method_handler(
            list_pods, request_deserializer=lambda b: b, response_serializer=lambda b: b)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    yield socket, answer
    server.stop(None)


def test_pods_from_the_kubelet_socket_label_their_gpus(kubelet: tuple[str, list[bytes]],
                                                         tree: NodeTree) -> None:
    socket, answer = kubelet
    nv = FakeNvml.of(3)
    answer[0] = list_response([
        ("trainer-0", "team-a", "main", "nvidia.com/gpu", [nv.gpus[0].uuid]),
        ("shared-1", "team-b", "worker", "nvidia.com/gpu", [f"{nv.gpus[2].uuid}::3"]),
        ("cpu-only", "team-c", "app", "cpu", ["0"]),
    ])
    source = node_source(config(tree), nvml=nv, pods=PodMapper(GrpcPodLister(socket)))
    [frame] = source.frames(time.time())
    g0, g1, g2 = frame.gpus
    assert (g0.info["pod"], g0.info["namespace"], g0.info["container"]) == (
        "trainer-0", "team-a", "main")
    assert g0.info["user"] == "team-a"  # the pod's namespace, where Slurm names no user
    assert "pod" not in g1.info and g2.info["pod"] == "shared-1"
    assert codec.decode(codec.encode(frame)) == frame  # the new info keys travel as they are
    e = Exporter(hostname="n")
    e.update(frame)
    text = render(e.collect()).decode()
    temp = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{")]
    assert 'pod="trainer-0",namespace="team-a",container="main"' in temp[0]
    assert "pod=" not in temp[1]
    source.close()


def test_pod_mapping_keeps_the_last_answer_when_the_kubelet_fails() -> None:
    class Flaky:
        def __init__(self) -> None:
            self.fail = False

        def list(self) -> bytes:
            if self.fail:
                raise OSError("connection refused")
            return list_response([("p", "ns", "c", "nvidia.com/mig-1g.10gb", ["GPU-a/vgpu0",
                                                                              "MIG-xyz"])])

        def close(self) -> None:
            pass

    lister = Flaky()
    now = [0.0]
    mapper = PodMapper(lister, refresh_s=10, clock=lambda: now[0])
    assert mapper.by_uuid() == {"GPU-a": PodInfo("p", "ns", "c")}  # MIG ids are not GPUs
    lister.fail = True
    now[0] += 10
    assert mapper.by_uuid() == {"GPU-a": PodInfo("p", "ns", "c")}


def test_a_malformed_kubelet_answer_is_an_error_not_a_crash() -> None:
    with pytest.raises(ValueError):
        gpu_pods(parse_list_response(b"\x0a\xff\xff\xff"))


def test_slurm_job_user_goes_into_the_gpu_info(tree: NodeTree) -> None:
    nv = FakeNvml.of(2)
    nv.gpus[0].pids = [1001]  # SLURM_JOB_ID=12345, SLURM_JOB_USER=alice in the fake /proc
    nv.gpus[1].pids = [1005]  # a process without Slurm: no user claimed for it
    source = node_source(config(tree), nvml=nv)
    [frame] = source.frames(time.time())
    assert frame.gpus[0].job == "12345" and frame.gpus[0].info["user"] == "alice"
    assert "user" not in frame.gpus[1].info
    [again] = source.frames(time.time())
    assert again.gpus[0].info is frame.gpus[0].info  # made once, not every tick
    source.close()


def test_inlet_temperature_from_hwmon(tree: NodeTree) -> None:
    # The fake tree: an unlabelled ACPI zone (not air) and a BMC chip with inlet and exhaust.
    assert InletSource(tree.sys).read() == {"host_inlet_temp_c": 23.5}
    source = node_source(config(tree), nvml=FakeNvml.of(1))
    [frame] = source.frames(time.time())
    assert frame.host.metrics["host_inlet_temp_c"] == 23.5
    source.close()


def test_no_inlet_sensor_means_no_inlet_metric(tmp_path: Path) -> None:
    chip = tmp_path / "class" / "hwmon" / "hwmon0"
    chip.mkdir(parents=True)
    (chip / "temp1_label").write_text("Package id 0\n")
    (chip / "temp1_input").write_text("61000\n")
    assert InletSource(tmp_path).read() == {}


def test_dcgm_fills_the_profiling_ratios_nvml_cannot_give_before_hopper(
        tree: NodeTree) -> None:
    nv = FakeNvml.of(2, model="l4")
    dcgm = FakeDcgm({nv.gpus[0].uuid: {1002: 0.61, 1003: 0.3, 1004: 0.42, 1005: 0.2,
                                       1001: 0.7}})
    source = node_source(config(tree), nvml=nv, profiling=dcgm)
    [frame] = source.frames(time.time())
    g0, g1 = frame.gpus
    assert g0.metrics["gpu_tensor_active_ratio"] == 0.42 and g0.info["profiling"] == "dcgm"
    assert "gpu_tensor_active_ratio" not in g1.metrics and g1.info["profiling"] == "none"
    e = Exporter()
    e.update(frame)
    text = render(e.collect()).decode()
    assert 'source="dcgm"' in text and 'source="none"' in text
    assert "absent" in text  # the HELP says which families are missing, and why
    source.close()
    assert dcgm.closed


@pytest.mark.parametrize("model, said", [("l4", True), ("h100", False)])
def test_missing_profiling_is_said_once_and_only_for_gpus_without_gpm(
        tree: NodeTree, caplog: pytest.LogCaptureFixture, model: str, said: bool) -> None:
    source = node_source(config(tree), nvml=FakeNvml.of(2, model=model))
    with caplog.at_level("INFO", logger="fleetwatch"):
        for tick in range(3):
            source.frames(time.time() + tick)
    lines = [r.getMessage() for r in caplog.records if "have no GPM" in r.getMessage()]
    if said:
        assert len(lines) == 1
        assert "2 GPU(s) (GPU 0, 1: NVIDIA L4)" in lines[0] and "nv-hostengine" in lines[0]
    else:
        assert not lines                  # Hopper: GPM gives the ratios, DCGM is not needed
    source.close()


def test_a_gpu_time_sliced_among_pods_names_none_of_them_but_their_one_namespace() -> None:
    got = gpu_pods(parse_list_response(list_response([
        ("llm-a", "inference", "srv", "nvidia.com/gpu", ["GPU-a::0"]),
        ("llm-b", "inference", "srv", "nvidia.com/gpu", ["GPU-a::1"]),
        ("x", "one", "c", "nvidia.com/gpu", ["GPU-b::0"]),
        ("y", "two", "c", "nvidia.com/gpu", ["GPU-b::1"]),
        ("solo", "ml", "c", "nvidia.com/gpu", ["GPU-c"])])))
    assert (got["GPU-a"].pod, got["GPU-a"].namespace, got["GPU-a"].shared) == (
        "", "inference", True)
    assert (got["GPU-b"].pod, got["GPU-b"].namespace) == ("", "")
    assert got["GPU-c"] == PodInfo("solo", "ml", "c") and not got["GPU-c"].shared


def test_the_device_plugins_index_strategy_names_gpus_by_nvml_index(
        kubelet: tuple[str, list[bytes]], tree: NodeTree) -> None:
    # --device-id-strategy=index: device ids are NVML indices (as nvidia-smi -i takes them)
    socket, answer = kubelet
    nv = FakeNvml.of(3)
    answer[0] = list_response([
        ("train-idx", "ml", "main", "nvidia.com/gpu", ["0"]),
        ("train-uuid", "ml", "main", "nvidia.com/gpu", [nv.gpus[1].uuid]),
        ("mig-idx", "ml", "main", "nvidia.com/mig-1g.10gb", ["2:0"])])  # a MIG instance
    source = node_source(config(tree), nvml=nv, pods=PodMapper(GrpcPodLister(socket)))
    g0, g1, g2 = source.frames(time.time())[0].gpus
    source.close()
    assert (g0.info["pod"], g0.info["user"]) == ("train-idx", "ml")
    assert g1.info["pod"] == "train-uuid"
    assert "pod" not in g2.info
