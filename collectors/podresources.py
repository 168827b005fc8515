"""Which pod holds each GPU, from the kubelet's pod-resources socket, as dcgm-exporter maps it.

The kubelet serves ``v1.PodResourcesLister/List`` over gRPC on a unix socket
(``/var/lib/kubelet/pod-resources/kubelet.sock``). Its answer lists, per pod
and container, the devices the device plugin gave it: ``resource_name``
``nvidia.com/gpu`` (or ``nvidia.com/mig-*``) with device ids that are GPU UUIDs, or
NVML indices with the plugin's ``--device-id-strategy=index`` (Bottlerocket's default).
dcgm-exporter (internal/pkg/transformation/kubernetes.go) labels a GPU's
metrics ``pod``, ``namespace``, ``container`` from that; so do we, through
``GpuReading.info``. Device ids of the GPU-sharing forms are cut as it cuts them:
``<uuid>/vgpu<n>`` and ``<uuid>::<n>`` name ``<uuid>``. MIG device ids
(``MIG-<uuid>``) name a MIG instance, not a GPU, and are left out.

gRPC is an optional extra (``pip install fleetwatch[kubernetes]``, grpcio); the
messages are read with the few lines of protobuf decoding below rather than
generated code. The edge is ``PodLister``: the real gRPC one, or a fake in tests.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Protocol

log = logging.getLogger(__name__)

KUBELET_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
LIST_METHOD = "/v1.PodResourcesLister/List"
NVIDIA_GPU = "nvidia.com/gpu"
NVIDIA_MIG_PREFIX = "nvidia.com/mig-"
REFRESH_S = 10.0  # pods come and go in seconds; a GPU's owner is read at most this stale


@dataclass(frozen=True)
class PodInfo:
    pod: str
    namespace: str
    container: str
    # The GPU is one of several pods' (time slicing, vGPU): this pod may not be the one
    # whose process runs on it now.
    shared: bool = field(default=False, compare=False)


class PodLister(Protocol):
    def list(self) -> bytes:
        """One ``ListPodResourcesResponse``, serialized."""

    def close(self) -> None: ...


# -- protobuf wire format, just what these messages use ------------------------
def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf: bytes) -> Iterator[tuple[int, bytes | int]]:
    """(field number, value) of one message: bytes for length-delimited, int otherwise."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, value
        elif wire == 2:
            n, pos = _varint(buf, pos)
            if pos + n > len(buf):
                raise ValueError("truncated field")
            yield number, buf[pos:pos + n]
            pos += n
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")


def _text(value: bytes | int) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else ""


def parse_list_response(buf: bytes) -> list[tuple[PodInfo, str, list[str]]]:
    """(pod, resource name, device ids) for each device set of each container.

    ListPodResourcesResponse{1: PodResources{1 name, 2 namespace,
    3 ContainerResources{1 name, 2 ContainerDevices{1 resource_name, 2 device_ids}}}}
    (k8s.io/kubelet/pkg/apis/podresources/v1/api.proto).
    """
    out = []
    for number, pod in _fields(buf):
        if number != 1 or not isinstance(pod, bytes):
            continue
        name = namespace = ""
        containers: list[bytes] = []
        for n, v in _fields(pod):
            if n == 1:
                name = _text(v)
            elif n == 2:
                namespace = _text(v)
            elif n == 3 and isinstance(v, bytes):
                containers.append(v)
        for c in containers:
            cname = ""
            devices: list[bytes] = []
            for n, v in _fields(c):
                if n == 1:
                    cname = _text(v)
                elif n == 2 and isinstance(v, bytes):
                    devices.append(v)
            for d in devices:
                resource, ids = "", []
                for n, v in _fields(d):
                    if n == 1:
                        resource = _text(v)
                    elif n == 2:
                        ids.append(_text(v))
                out.append((PodInfo(name, namespace, cname), resource, ids))
    return out


def gpu_pods(entries: list[tuple[PodInfo, str, list[str]]]) -> dict[str, PodInfo]:
    """GPU UUID -> the pod holding it, for NVIDIA resources only (a device plugin run
    with ``--device-id-strategy=index`` names GPUs by NVML index, ``"0"``: those keys are
    the index, which ``node.py`` looks up too); ``shared`` where the
    GPU is given out in parts (``<uuid>::<n>``, ``<uuid>/vgpu<n>``) or to several pods.
    A GPU of several pods names none of them (which one runs there is not said), only
    their namespace where they have one."""
    out: dict[str, PodInfo] = {}
    for pod, resource, ids in entries:
        if resource != NVIDIA_GPU and not resource.startswith(NVIDIA_MIG_PREFIX):
            continue
        for device in ids:
            if device.startswith("MIG-") or ":" in device.split("::", 1)[0]:
                continue  # a MIG instance: by UUID, or "<gpu>:<mig>" by index
            uuid = device.split("/vgpu", 1)[0].split("::", 1)[0]
            was = out.get(uuid)
            if was is not None and was != pod:
                ns = pod.namespace if pod.namespace == was.namespace else ""
                out[uuid] = PodInfo("", ns, "", shared=True)
            else:
                out[uuid] = replace(pod, shared=True) if uuid != device else pod
    return out


class GrpcPodLister:
    """The kubelet's socket through grpcio (the ``kubernetes`` extra)."""

    def __init__(self, socket_path: str, timeout_s: float = 5.0) -> None:
        import grpc

        self._channel = grpc.insecure_channel(f"unix://{socket_path}")
        self._call = self._channel.unary_unary(
            LIST_METHOD, request_serializer=lambda _: b"",  # ListPodResourcesRequest{}: empty
            response_deserializer=lambda raw: raw)
        self._timeout_s = timeout_s

    def list(self) -> bytes:
        return self._call(None, timeout=self._timeout_s)  # type: ignore[no-any-return]

    def close(self) -> None:
        self._channel.close()


class PodMapper:
    """GPU UUID -> pod, refreshed every ``refresh_s``; failures keep the last answer."""

    def __init__(self, lister: PodLister, refresh_s: float = REFRESH_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.lister = lister
        self.refresh_s = refresh_s
        self.clock = clock
        self.pods: dict[str, PodInfo] = {}
        self._next = 0.0
        self._failing = False

    def by_uuid(self, fresh: bool = False) -> dict[str, PodInfo]:
        """The last answer, asked again when ``refresh_s`` passed or ``fresh`` (a pod new
        on a GPU: the answer before it may name the GPU's previous pod)."""
        now = self.clock()
        if fresh or now >= self._next:
            self._next = now + self.refresh_s
            try:
                self.pods = gpu_pods(parse_list_response(self.lister.list()))
                if self._failing:
                    log.info("kubelet pod-resources answers again")
                self._failing = False
            except Exception as exc:  # grpc.RpcError, a malformed answer
                if not self._failing:
                    log.warning("kubelet pod-resources List failed (%s); GPU pod labels "
                                "are those of the last answer", exc)
                self._failing = True
        return self.pods

    @property
    def failing(self) -> bool:
        """The kubelet's last answer failed: ``by_uuid`` gives an older one."""
        return self._failing

    def close(self) -> None:
        self.lister.close()


def open_pod_mapper(socket_path: str = KUBELET_SOCKET) -> PodMapper | None:
    """A mapper over the kubelet's socket when there is one; None (quietly) off Kubernetes."""
    if not socket_path or not os.path.exists(socket_path):
        return None
    try:
        return PodMapper(GrpcPodLister(socket_path))
    except ImportError:
        log.warning("%s exists but grpcio is not installed: no pod, namespace, container "
                    "labels (pip install 'fleetwatch[kubernetes]')", socket_path)
        return None
