"""``/metrics`` for Prometheus, name- and label-compatible with NVIDIA's dcgm-exporter.

A GPU metric with a DCGM name is exposed under it, in DCGM's unit (the
catalogue's ``dcgm_scale``: bytes -> MiB, J -> mJ) and with dcgm-exporter's
labels, so its Grafana board and alerts work unchanged::

    DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-...",pci_bus_id="00000000:31:00.0",
        device="nvidia0",modelName="NVIDIA L4",Hostname="node-7",
        DCGM_FI_DRIVER_VERSION="580.105.08",hpc_job="4000123"} 31

The job label is ``hpc_job``, dcgm-exporter's own name for it: a scraped
label called ``job`` would collide with the ``job`` label Prometheus gives
every target (and be renamed ``exported_job``). Metrics without a DCGM name are
``fleetwatch_<catalogue name>``. XIDs are a counter per code,
``fleetwatch_gpu_xid_total{...,xid="79"}``, a counter of every code,
``fleetwatch_gpu_xid_events_total``, there at 0 from a GPU's first scrape (a
series born at 1 gives Prometheus' ``increase()`` 0: the first XID 79 of a GPU
would alert nobody), plus ``DCGM_FI_DEV_XID_ERRORS`` (the last XID, 0 for none) for
boards that read that. The XID counters carry the board's labels, not the job's
(``hpc_job``, the pod): they count over the agent's life, and a series started
anew for each job read as a new XID each time.

``Exporter`` is a custom collector: ``collect()`` builds the families from the
latest frame at scrape time, so a lost GPU's series simply stop. It is served by
``serve_metrics``, which writes the text format itself because
prometheus_client renames every counter family to ``<name>_total`` and
dcgm-exporter's counters (``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``) have no suffix.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

from fleetwatch.catalogue import Catalogue, catalogue
from fleetwatch.catalogue import Metric as CatalogueMetric
from fleetwatch.collectors.agent_health import AgentHealth
from fleetwatch.collectors.nvml.backend import MigInstance
from fleetwatch.frame import Frame, GpuReading

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
GPU_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
              "DCGM_FI_DRIVER_VERSION", "hpc_job")
# Where dcgm-exporter's default-counters.csv types a family differently from our catalogue
# (it calls these counts counters), follow dcgm-exporter: its users' recording rules do.
_DCGM_TYPES = {
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_RETIRED_SBE": "counter",
    "DCGM_FI_DEV_RETIRED_DBE": "counter",
    "DCGM_FI_DEV_RETIRED_PENDING": "counter",
}
POD_LABELS = ("pod", "namespace", "container")
# The labels that name who holds a GPU now, left off counters that count over the board's life.
JOB_LABELS = ("hpc_job", *POD_LABELS)
# Catalogue name -> the MigInstance field that carries it per instance.
_MIG_VALUES = {"gpu_fb_total_bytes": "fb_total", "gpu_fb_free_bytes": "fb_free",
               "gpu_fb_used_bytes": "fb_used"}
NVLINK_RAW = "gpu_nvlink_raw_bytes_total"
NVLINK_BW_HELP = ("NVLink throughput over all links, TX + RX with protocol overhead, between the "
                  "last two reads: KiB/s divided by 1000, as DCGM's field 449 (about MB/s)")
# DCGM's unit where fleetwatch's differs (catalogue dcgm_scale): bytes -> MiB, J -> mJ.
_DCGM_UNITS = {("bytes", 2.0 ** -20): "MiB", ("J", 1000.0): "mJ"}


def dcgm_unit(m: CatalogueMetric) -> str:
    return _DCGM_UNITS.get((m.unit, m.dcgm_scale), m.unit)


PROFILING_HELP = (
    "Where this GPU's DCGM_FI_PROF_SM_ACTIVE, DCGM_FI_PROF_SM_OCCUPANCY, "
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE and DCGM_FI_PROF_DRAM_ACTIVE come from: source=gpm (NVML "
    "GPU Performance Monitoring, Hopper and newer), dcgm (DCGM's profiling module), or none: "
    "a GPU before Hopper (A100, L4, L40S) without DCGM has no NVML source for them, so those "
    "four families are absent for it and DCGM_FI_PROF_GR_ENGINE_ACTIVE is its utilization / 100")
class Exporter:
    """A prometheus_client collector over the latest frame of this node."""

    def __init__(self, hostname: str | None = None, health: AgentHealth | None = None,
                 cat: Catalogue | None = None) -> None:
        self.hostname = hostname
        self.health = health
        self._cat = cat or catalogue()
        self._lock = threading.Lock()
        self._frame: Frame | None = None
        self._xid_counts: dict[tuple[str, int], int] = {}
        self._last_xid: dict[str, int] = {}
        self._mig: Mapping[int, list[MigInstance]] = {}
        # Per board: the last NVLink raw byte count and its time, and the rate between the
        # last two frames (DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL is that rate, not a count).
        self._nvlink_seen: dict[str, tuple[float, float]] = {}
        self._nvlink_rate: dict[str, float] = {}

    def update(self, frame: Frame, mig: Mapping[int, list[MigInstance]] | None = None) -> None:
        """Show this frame (and the MIG instances read with it) from the next scrape on."""
        with self._lock:
            self._frame = frame
            self._mig = mig or {}
            for g in frame.gpus:
                for x in g.xids:
                    self._xid_counts[g.uuid, x] = self._xid_counts.get((g.uuid, x), 0) + 1
                    self._last_xid[g.uuid] = x
                self._nvlink(g, frame.ts)

    def _nvlink(self, g: GpuReading, ts: float) -> None:
        """DCGM's field 449 as DCGM computes it (DcgmCacheManager, ReadAndCacheNvLinkBandwidth):
        the raw TX + RX KiB counters' step over the seconds between two reads, divided by
        1000 (DCGM calls it MiB/s); none across a counter reset or a read that failed."""
        raw = g.metrics.get(NVLINK_RAW)
        if raw is None:
            self._nvlink_rate.pop(g.uuid, None)
            return
        before = self._nvlink_seen.get(g.uuid)
        self._nvlink_seen[g.uuid] = (ts, raw)
        if before is not None and ts > before[0] and raw >= before[1]:
            self._nvlink_rate[g.uuid] = (raw - before[1]) / 1024 / (ts - before[0]) / 1000
        else:
            self._nvlink_rate.pop(g.uuid, None)

    def _gpu_labels(self, g: GpuReading, host: str) -> dict[str, str]:
        labels = {"gpu": str(g.index), "UUID": g.uuid,
                  "pci_bus_id": g.info.get("pci_bus_id", ""),
                  # NVML index stands in for the /dev/nvidiaN minor: they agree unless
                  # CUDA_VISIBLE_DEVICES-style remapping hides devices from the agent.
                  "device": f"nvidia{g.index}", "modelName": g.model, "Hostname": host,
                  "DCGM_FI_DRIVER_VERSION": g.info.get("driver", ""), "hpc_job": g.job or ""}
        # dcgm-exporter's Kubernetes labels, only on a GPU that a pod holds (as it does).
        for key in POD_LABELS:
            value = g.info.get(key)
            if value:
                labels[key] = value
        return labels

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            frame = self._frame
            xid_counts = dict(self._xid_counts)
            last_xid = dict(self._last_xid)
            mig = self._mig
        if frame is not None:
            yield from self._frame_families(frame, xid_counts, last_xid, mig)
        if self.health is not None:
            yield from self.health.collect()

    def _frame_families(self, frame: Frame, xid_counts: dict[tuple[str, int], int],
                        last_xid: dict[str, int],
                        mig: Mapping[int, list[MigInstance]]) -> Iterator[Metric]:
        host = self.hostname or frame.node
        every = [(g, self._gpu_labels(g, host)) for g in frame.gpus]
        gpus = [(g, labels) for g, labels in every if g.state == "ok"]
        for m in self._cat.scope("gpu"):
            name = m.dcgm or f"fleetwatch_{m.name}"
            kind = _DCGM_TYPES.get(name, m.kind)
            fam = Metric(name, f"{m.help} (in {dcgm_unit(m) if m.dcgm else m.unit})", kind)
            scale = m.dcgm_scale if m.dcgm else 1.0
            for g, labels in gpus:
                v = g.metrics.get(m.name)
                if v is not None:
                    fam.add_sample(name, labels, v * scale)
                # Per MIG instance what NVML gives (memory), labelled as dcgm-exporter does.
                attr = _MIG_VALUES.get(m.name)
                for inst in mig.get(g.index, ()) if attr else ():
                    fam.add_sample(name, {**labels, "GPU_I_PROFILE": inst.profile,
                                          "GPU_I_ID": str(inst.gpu_instance)},
                                   getattr(inst, attr) * scale)
            if fam.samples:
                yield fam
        xid = Metric("fleetwatch_gpu_xid_total", "XID errors reported by the driver, by code",
                     "counter")
        xids = Metric("fleetwatch_gpu_xid_events_total",
                      "XID errors reported by the driver, every code (0 from the start)",
                      "counter")
        last = Metric("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.",
                      "gauge")
        # A lost GPU keeps its XID series: its XID 79 is why it is lost.
        for g, labels in every:
            board = {k: v for k, v in labels.items() if k not in JOB_LABELS}
            total = 0
            for (uuid, code), n in sorted(xid_counts.items()):
                if uuid == g.uuid:
                    xid.add_sample(xid.name, {**board, "xid": str(code)}, float(n))
                    total += n
            xids.add_sample(xids.name, board, float(total))
            last.add_sample(last.name, labels, float(last_xid.get(g.uuid, 0)))
        yield from (f for f in (xid, xids, last) if f.samples)
        # Declared a counter as dcgm-exporter's default counters declare it, so boards built on
        # it keep working; its value is a rate (dcgm-exporter PR #658 makes it a gauge).
        bw = Metric("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", NVLINK_BW_HELP, "counter")
        for g, labels in gpus:
            rate = self._nvlink_rate.get(g.uuid)
            if rate is not None:
                bw.add_sample(bw.name, labels, rate)
        if bw.samples:
            yield bw
        prof = Metric("fleetwatch_gpu_profiling_info", PROFILING_HELP, "gauge")
        for g, labels in gpus:
            prof.add_sample(prof.name, {**labels, "source": g.info.get("profiling", "none")}, 1.0)
        if prof.samples:
            yield prof
        lost = Metric("fleetwatch_gpus_lost", "GPUs of this node that NVML reports as lost",
                      "gauge")
        lost.add_sample(lost.name, {"Hostname": host},
                        float(sum(g.state == "lost" for g in frame.gpus)))
        yield lost
        yield from self._host_families(frame, host)
        ts = Metric("fleetwatch_agent_last_frame_timestamp_seconds",
                    "Time of the frame these metrics come from", "gauge")
        ts.add_sample(ts.name, {"Hostname": host}, frame.ts)
        yield ts

    def _host_families(self, frame: Frame, host: str) -> Iterator[Metric]:
        for m in self._cat.scope("host"):
            v = frame.host.metrics.get(m.name)
            if v is not None:
                name = f"fleetwatch_{m.name}"
                fam = Metric(name, f"{m.help} (in {m.unit})", m.kind)
                fam.add_sample(name, {"Hostname": host}, v)
                yield fam
        for m in self._cat.scope("port"):
            name = f"fleetwatch_{m.name}"
            fam = Metric(name, f"{m.help} (in {m.unit})", m.kind)
            for p in frame.host.ports:
                v = p.metrics.get(m.name)
                if v is not None:
                    fam.add_sample(name, {"Hostname": host, "port": p.name}, v)
            if fam.samples:
                yield fam


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def render(families: Iterable[Metric]) -> bytes:
    """Prometheus text format 0.0.4, with family names as given (no ``_total`` renaming)."""
    out: list[str] = []
    for fam in families:
        samples = [s for s in fam.samples if not s.name.endswith("_created")]
        if not samples:
            continue
        # A counter's TYPE line names its samples (``x_total``), as Prometheus expects.
        tname = samples[0].name if fam.type == "counter" else fam.name
        ftype = {"unknown": "untyped", "info": "gauge", "stateset": "gauge"}.get(fam.type,
                                                                                  fam.type)
        doc = fam.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {tname} {doc}\n# TYPE {tname} {ftype}\n")
        for s in samples:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in s.labels.items())
            value = floatToGoString(s.value)
            out.append(f"{s.name}{{{labels}}} {value}\n" if labels else f"{s.name} {value}\n")
    return "".join(out).encode("utf-8")


@dataclass
class MetricsServer:
    """A running ``/metrics`` endpoint; ``stop()`` closes it."""

    server: ThreadingHTTPServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve_metrics(exporter: Exporter, host: str = "127.0.0.1", port: int = 9400) -> MetricsServer:
    """Serve ``exporter`` at http://host:port/metrics in a daemon thread (port 0: any free one)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                self.send_error(404, "only /metrics is here")
                return
            body = render(exporter.collect())
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass  # one line per scrape would drown the agent's own log

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="fleetwatch-metrics", daemon=True)
    thread.start()
    return MetricsServer(server, thread)
