"""This node's ``FrameSource``: NVML + host + InfiniBand + RAPL + hwmon inlet temperature +
kernel-log XIDs + jobs, and where present DCGM's profiling ratios and the kubelet's pods.

One ``Frame`` per tick, identity from ``config.node``. When NVML cannot start
(no driver, driver/library mismatch, no permission) ``agent.nvml_policy``
decides: ``error`` raises ``NvmlUnavailable`` (its message says what to
install), ``ignore`` runs host-only, ``retry`` runs host-only and tries NVML
again every ``NVML_RETRY_S``. Either host-only way logs exactly one line. A driver
that goes away mid-run (every call answers Uninitialized) ends the GPU values until
NVML initialises again, tried every ``NVML_REINIT_S`` whatever the policy.

Each GPU reading's ``info`` carries, where known: ``user`` (Slurm's
``SLURM_JOB_USER``, else the pod's namespace: energy per user), ``team`` (the
job's Slurm account, ``SLURM_JOB_ACCOUNT``, else the pod's namespace), ``pod``,
``namespace``, ``container`` (dcgm-exporter's labels) and ``profiling`` (gpm,
dcgm or none: where the SM/tensor/DRAM ratios come from). A GPU whose one job is
a pod (``pod:<uid>``, from its cgroup) that the kubelet names as the GPU's only
holder is the job ``<namespace>/<pod>``, fixed when the pod is first seen (the
kubelet is asked again then), so a pod keeps one job name for its life
(``collectors.attribution``).

    source = node_source(config)                # real NVML
    source = node_source(config, fake_gpus=8)   # FakeNvml: no GPU needed
    [frame] = source.frames(time.time())
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

from fleetwatch.codec import check_names
from fleetwatch.collectors.attribution import POD_SOCKET_S, GpuAttribution  # noqa: F401
from fleetwatch.collectors.dcgm import ProfilingSource, open_dcgm_profiling
from fleetwatch.collectors.host import HostSource
from fleetwatch.collectors.hwmon import InletSource
from fleetwatch.collectors.infiniband import InfinibandSource
from fleetwatch.collectors.jobs import JobResolver
from fleetwatch.collectors.kmsg import KernelLog, KernelLogError
from fleetwatch.collectors.kube_node import rack_from_label
from fleetwatch.collectors.nvml.backend import MigInstance, NvmlBackend
from fleetwatch.collectors.nvml.fake import FakeNvml
from fleetwatch.collectors.nvml.pynvml_backend import PynvmlBackend
from fleetwatch.collectors.nvml.reader import (
    XID_FALLEN_OFF_BUS,
    NvmlDriverGone,
    NvmlReader,
    NvmlUnavailable,
    log_gpu_state,
)
from fleetwatch.collectors.podresources import PodMapper, open_pod_mapper
from fleetwatch.collectors.rapl import RaplSource
from fleetwatch.collectors.xid_merge import XidMerger
from fleetwatch.collectors.xid_parse import BURST_S, pci_key
from fleetwatch.config import AgentConfig, Config, ConfigError, NodeConfig
from fleetwatch.frame import Frame, GpuReading, HostReading
from fleetwatch.frame_checks import FrameError, quote

log = logging.getLogger(__name__)

NVML_RETRY_S = 60.0
# After the driver went away mid-run (unloaded, upgraded, GPU reset): try again sooner,
# as a reload takes seconds.
NVML_REINIT_S = 10.0
GPU_BUDGET_SHARE = 0.5  # of agent.interval_s: how long a tick waits for its GPUs' reads


class NodeSource:
    """Composes the node's sources; ``frames(ts)`` returns ``[frame]`` for this node."""

    def __init__(self, config: Config, backend: Callable[[], NvmlBackend],
                 kernel_log: KernelLog | None,
                 on_nvml_error: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 on_dropped: Callable[[str], None] | None = None,
                 profiling: ProfilingSource | None = None,
                 pods: PodMapper | None = None,
                 on_gpu_state: Callable[[str], None] | None = None,
                 pod_socket: str = "") -> None:
        agent = config.agent
        self._on_gpu_state = on_gpu_state
        # Input the agent read and could not use: counted by reason (AgentHealth.input_dropped).
        self._on_dropped = on_dropped or (lambda reason: None)
        self._unknown_pci: set[str] = set()
        self._kernel_log_failing = False
        self.node = config.node
        if config.node.rack_label:  # a DaemonSet pod: its rack is a label of its node
            self.node = dataclasses.replace(self.node, rack=rack_from_label(
                self.node.node, self.node.rack_label, self.node.rack))
        check_node_names(self.node)
        self.policy = agent.nvml_policy
        # Each GPU is read in its own worker, within half the interval: one GPU whose NVML
        # calls hang neither delays the others nor makes the frame late (nvml/pool.py).
        self._gpu_budget_s = GPU_BUDGET_SHARE * agent.interval_s
        self._interval_s = agent.interval_s
        self._backend = backend
        self._on_error = on_nvml_error
        self._clock = clock
        self.host = HostSource(agent.proc_root, agent.sys_root, clock)
        self.inlet = InletSource(agent.sys_root)
        # The last read's MIG instances by GPU index: /metrics shows them, frames do not.
        self.mig: dict[int, list[MigInstance]] = {}
        self.ib = InfinibandSource(agent.sys_root, clock)
        self.rapl = RaplSource(agent.sys_root, clock)
        self.jobs = JobResolver(agent.proc_root)
        self.attribution = GpuAttribution(self.jobs, profiling, pods, pod_socket, clock)
        self.kernel_log = kernel_log
        self.xids = XidMerger(clock=clock)
        self.nvml: NvmlReader | None = None
        self.nvml_problem: NvmlUnavailable | None = None
        self._next_try = 0.0
        self._reinit = False  # the driver went away mid-run: retry whatever the policy
        self._gone_at: float | None = None  # when it went away (this clock)
        # Frame identity (node, seq) must stay unique across agent restarts: start from the
        # wall clock in milliseconds. A tick takes at least 50 ms (agent.interval_s), so
        # the count never overtakes the clock, and a restarted agent starts above it.
        self._seq = int(time.time() * 1000)
        self._try_nvml(first=True)

    # -- NVML, with the missing-hardware policy ---------------------------
    def _try_nvml(self, first: bool = False) -> None:
        try:
            self.nvml = NvmlReader.open(self._backend(), self._on_error, clock=self._clock,
                                        on_state=self._gpu_state, on_dropped=self._on_dropped,
                                        budget_s=self._gpu_budget_s,
                                        kernel_log=self.kernel_log is not None)
        except NvmlUnavailable as exc:
            # After a driver reload the log said "trying every NVML_REINIT_S": keep to it
            # (a reload often takes longer than one interval), whatever the policy.
            self._next_try = self._clock() + (NVML_REINIT_S if self._reinit else NVML_RETRY_S)
            if first and self.policy == "error":
                self.close()
                raise
            if first:
                then = (f"retrying every {NVML_RETRY_S:.0f} s" if self.policy == "retry"
                        else "not retrying (agent.nvml_policy = ignore)")
                log.warning("NVML unavailable: %s. Running host-only, %s. HINT: %s",
                            exc.reason, then, exc.hint)
            self.nvml_problem = exc
            return
        if self._gone_at is not None:
            log.info("NVML is available now: %d GPUs (NVML was away %.0f s)",
                     self.nvml.gpu_count, self._clock() - self._gone_at)
        elif not first:
            log.info("NVML is available now: %d GPUs", self.nvml.gpu_count)
        self._gone_at = None
        self.nvml_problem = None
        self._reinit = False

    def _gpu_state(self, index: int, uuid: str, state: str, why: str) -> None:
        log_gpu_state(index, uuid, state, why)
        if self._on_gpu_state is not None:
            self._on_gpu_state(state)

    @property
    def driver_version(self) -> str:
        return self.nvml.driver if self.nvml else ""

    # -- FrameSource -------------------------------------------------------
    def frames(self, ts: float) -> list[Frame]:
        if (self.nvml is None and (self.policy == "retry" or self._reinit)
                and self._clock() >= self._next_try):
            self._try_nvml()
        gpus: tuple[GpuReading, ...] = ()
        watched = self.nvml is not None or self.policy == "retry" or self._reinit
        if self.nvml is not None:
            gpus = self._gpus()
        metrics, nics = self.host.read()
        if watched:
            # Says why the frame lists no GPU: NVML away (0), not GPUs gone. A node the
            # operator runs host-only (agent.nvml_policy = ignore) does not carry it.
            metrics["host_nvml_up"] = 0.0 if self.nvml is None else 1.0
        # Its own pace: the processor judges the node silent on it from this frame on (a
        # rolling change of agent.interval_s pages nobody while a new interval is learned).
        metrics["host_agent_interval_s"] = self._interval_s
        metrics.update(self.rapl.read())
        metrics.update(self.inlet.read())
        ports = nics + self.ib.read()
        self._seq += 1
        return [Frame(self.node.cluster, self.node.rack, self.node.node, ts, gpus,
                      HostReading(metrics, ports), seq=self._seq)]

    def _gpus(self) -> tuple[GpuReading, ...]:
        assert self.nvml is not None
        try:
            read = self.nvml.read(self.jobs.job_of_pids)
        except NvmlDriverGone as exc:
            self._driver_gone(exc)
            return ()
        self.jobs.check(read.pids)
        self.mig = read.mig
        gpus = self.attribution.attribute(read.gpus, read.pids)
        kernel = self._kernel_xids(gpus)
        nvml_xids = {g.index: g.xids for g in gpus if g.xids}
        if not nvml_xids and not kernel:
            return tuple(gpus)  # the usual tick: nothing to merge
        xids = self.xids.merge(nvml_xids, kernel)
        fallen = {gpu for gpu, x in kernel if x == XID_FALLEN_OFF_BUS}
        out = []
        for g in gpus:
            mine = tuple(xids.get(g.index, ()))
            if g.index in fallen and g.state != "lost":
                # The kernel log saw XID 79: the GPU is gone now, not at the next failed call.
                self.nvml.mark_lost(g.index, "XID 79 (fallen off the bus) in the kernel log")
                g = dataclasses.replace(g, metrics={}, state="lost", job=None)
            out.append(g if mine == g.xids else dataclasses.replace(g, xids=mine))
        return tuple(out)

    def _driver_gone(self, exc: NvmlDriverGone) -> None:
        """Stop reporting GPUs, release NVML (its one nvmlShutdown), try again soon."""
        assert self.nvml is not None
        log.warning("%s: reporting no GPU values until NVML initialises again (trying every "
                    "%.0f s)", exc, NVML_REINIT_S)
        if self._on_error is not None:
            self._on_error("uninitialized")
        self.nvml.close()
        self.nvml = None
        self.nvml_problem = NvmlUnavailable(str(exc), "check the driver with nvidia-smi")
        self._reinit = True
        self._gone_at = self._clock()
        self._next_try = self._gone_at + NVML_REINIT_S

    @staticmethod
    def _pci_map(gpus: list[GpuReading]) -> dict[str, int]:
        """PCI bus id -> GPU index as this tick's reading has them.

        Made afresh from each read rather than once at start: the re-probe re-attaches
        GPUs that could not be opened, attaches GPUs that appeared, and after a reset
        GPUs can come back at other NVML indices. A lost GPU keeps the address it was
        last seen at (an XID 79 after GpuIsLost is still its own), unless a GPU that
        answers now is at that address: that one is the board there.
        """
        out: dict[str, int] = {}
        for lost in (True, False):  # answering GPUs last, so they win an address
            for g in gpus:
                bus = g.info.get("pci_bus_id")
                if bus and (g.state == "lost") == lost:
                    out[pci_key(bus)] = g.index
        return out

    def _kernel_xids(self, gpus: list[GpuReading]) -> list[tuple[int, int]]:
        kernel: list[tuple[int, int]] = []
        if self.kernel_log is None:
            return kernel
        malformed = self.kernel_log.malformed
        overrun, suppressed = self.kernel_log.overrun, self.kernel_log.suppressed
        try:
            lines = self.kernel_log.poll()
        except OSError as exc:
            # The log went away under us (a file replaced, a device error): say so once,
            # keep sampling, and try again next tick.
            self._on_dropped("kernel_log_unreadable")
            if not self._kernel_log_failing:
                log.warning("kernel log %s unreadable now (%s); XIDs from NVML events only "
                            "until it reads again", self.kernel_log.path, exc)
            self._kernel_log_failing = True
            return kernel
        if self._kernel_log_failing:
            log.info("kernel log %s readable again", self.kernel_log.path)
            self._kernel_log_failing = False
        for _ in range(self.kernel_log.malformed - malformed):
            self._on_dropped("xid_malformed")
        for reason, n in (("kernel_log_overrun", self.kernel_log.overrun - overrun),
                          ("xid_suppressed", self.kernel_log.suppressed - suppressed)):
            for _ in range(min(n, 100_000)):  # one per record lost; bounded for a huge gap
                self._on_dropped(reason)
        pci_to_gpu = self._pci_map(gpus) if lines else {}
        for x in lines:
            gpu = pci_to_gpu.get(x.pci)
            if gpu is not None:
                kernel.append((gpu, x.xid))
                if x.lines > 1:  # the count the one event stands for, so nothing is hidden
                    log.info("XID %d on GPU %d: one event, printed as %d kernel-log lines "
                             "within %.0f ms of each other; the first: %s", x.xid, gpu,
                             x.lines, BURST_S * 1000, x.message[:200])
                continue
            self._on_dropped("xid_unknown_pci")
            if x.pci not in self._unknown_pci:
                self._unknown_pci.add(x.pci)
                log.warning("XID %d on PCI %s, which is none of this node's GPUs as NVML lists "
                            "them (%s); not attributed: %s", x.xid, x.pci,
                            ", ".join(sorted(pci_to_gpu)) or "none", x.message[:200])
        return kernel

    def close(self) -> None:
        for source in (self.host, self.ib, self.rapl, self.inlet, self.attribution):
            source.close()
        if self.nvml is not None:
            self.nvml.close()
        if self.kernel_log is not None:
            self.kernel_log.close()


def check_node_names(node: NodeConfig) -> None:
    """``ConfigError`` for a cluster, rack or node name every processor's decoder refuses
    (``codec.check_names``): at start, not as frames dead-lettered one by one while the
    agent says it sends them."""
    try:
        check_names(node.cluster, node.rack, node.node)
    except FrameError as exc:
        key = f"node.{exc.field}"
        value = getattr(node, exc.field)
        whence = (f" (read from its node's label {node.rack_label!r})"
                  if exc.field == "rack" and node.rack_label else "")
        raise ConfigError(
            f"{key} = {quote(value)}{whence}: {exc.reason}; every processor refuses frames "
            f"under this name: set {key} (FLEETWATCH_{key.replace('.', '_').upper()}) to "
            "1..256 printable characters" + (", not '.' or '..'" if key == "node.node" else "")
        ) from None


def node_source(config: Config, fake_gpus: int | None = None, nvml: NvmlBackend | None = None,
                on_nvml_error: Callable[[str], None] | None = None,
                clock: Callable[[], float] = time.monotonic,
                on_dropped: Callable[[str], None] | None = None,
                profiling: ProfilingSource | None = None,
                pods: PodMapper | None = None,
                on_gpu_state: Callable[[str], None] | None = None,
                fake_faults: str | None = None) -> NodeSource:
    """This node's frame source.

    ``fake_gpus``: N FakeNvml H100s instead of the driver (the kernel log is not
    read then, and a warning says so: its PCI addresses would name real GPUs);
    ``fake_faults``: a JSON file of their faults (``collectors.nvml.fault_file.FaultFile``).
    ``nvml``: a backend to use instead (tests). ``on_nvml_error``: called with a short
    error kind for every NVML failure that is not "not supported" (``AgentHealth.nvml_error``).
    ``on_dropped``: called with a reason for every input read and not used (an XID
    on a PCI address that is no GPU of this node, a malformed XID line).
    Raises ``NvmlUnavailable`` when NVML cannot start and the policy is ``error``,
    ``ConfigError`` when ``agent.kernel_log`` names a directory or a FIFO.
    ``profiling``/``pods``: DCGM's profiling ratios and the kubelet's pod mapping;
    on a real node (no ``fake_gpus``, no ``nvml``) opened here where present.
    """
    if nvml is not None:
        backend: Callable[[], NvmlBackend] = lambda: nvml  # noqa: E731
    elif fake_gpus is not None:
        backend = lambda: FakeNvml.of(fake_gpus, faults=fake_faults, clock=clock)  # noqa: E731
    else:
        backend = PynvmlBackend
    path = config.agent.kernel_log
    kernel_log = None
    pod_socket = ""
    # Fake GPUs: the real kernel log's PCI addresses would name real GPUs. A test's own
    # backend (nvml=) reads whatever log its config names.
    if path and fake_gpus is None:
        try:
            kernel_log = KernelLog(path)
        except KernelLogError as exc:
            raise ConfigError(str(exc)) from None
    elif path:
        # A log the user named is worth a warning; the default one, a note.
        default = path == AgentConfig().kernel_log
        log.log(logging.INFO if default else logging.WARNING,
                "agent.kernel_log %s is not read with --fake-gpus: its XID lines name the PCI "
                "addresses of real GPUs; raise XIDs on the fake GPUs with --fake-faults "
                "(\"xid\": [[GPU, code]])", path)
    if nvml is None and fake_gpus is None:
        # The real node: DCGM where installed, the kubelet's socket where there is one.
        if profiling is None and config.agent.dcgm:
            profiling = open_dcgm_profiling(config.agent.interval_s)
        if pods is None:
            pods = open_pod_mapper(config.agent.pod_resources_socket)
            pod_socket = config.agent.pod_resources_socket  # looked for again while absent
    return NodeSource(config, backend, kernel_log, on_nvml_error, clock, on_dropped,
                      profiling, pods, on_gpu_state, pod_socket)
