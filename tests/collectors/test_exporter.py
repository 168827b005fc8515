"""/metrics against real dcgm-exporter scrapes, its default counters and its Grafana board."""

from __future__ import annotations

import dataclasses
import json
import re
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleetwatch.collectors.agent_health import AgentHealth
from fleetwatch.collectors.exporter import Exporter, render, serve_metrics
from fleetwatch.collectors.nvml import FakeNvml, NvmlReader
from fleetwatch.frame import Frame, HostReading, PortReading

# Copies of real dcgm-exporter captures and its default counters, under tests/data.
DATA = Path(__file__).resolve().parents[1] / "data" / "gpu_telemetry" / "dcgm_exporter"
SCRAPES = ("kops_L4_driver580_dcgm-exporter.prom", "upcloud_L40S.prom")
OUR_EXTRA_LABELS = {"hpc_job"}


DCGM = "gpu_telemetry/dcgm_exporter"


def frame_of(nv: FakeNvml, job: str | None = None) -> Frame:
    reader = NvmlReader.open(nv)
    reader.read()  # rates (PCIe from byte counters) need a second reading
    gpus = reader.read().gpus
    if job:
        gpus = [dataclasses.replace(g, job=job) for g in gpus]
    port = PortReading("mlx5_0/1", "ib", {"ib_port_active": 1.0})
    host = HostReading({"host_load1": 1.5}, (port,))
    return Frame("dc1", "rack-07", "gpu-node-042", time.time(), tuple(gpus), host)


def families(text: str) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def scrape(exporter: Exporter) -> dict[str, object]:
    return families(render(exporter.collect()).decode())


def label_keys(fam: object) -> set[str]:
    return {k for s in fam.samples for k in s.labels}  # type: ignore[attr-defined]


def default_counters(real_data: Path) -> dict[str, str]:
    out = {}
    for line in (real_data / DCGM / "default-counters.csv").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, kind, _ = (p.strip() for p in line.split(",", 2))
            if kind != "label":
                out[name] = kind
    return out


def test_default_counters_we_can_produce_are_all_exposed(real_data: Path) -> None:
    e = Exporter()
    first = frame_of(FakeNvml.of(2))
    e.update(first)
    e.update(dataclasses.replace(first, ts=first.ts + 5))  # a rate (NVLink) needs two reads
    ours = scrape(e)
    wanted = default_counters(real_data)
    missing = {name for name in wanted if name not in ours}
    assert missing == set()
    for name, kind in wanted.items():
        if name in ours:
            assert ours[name].type == kind, name  # type: ignore[attr-defined]


@pytest.mark.parametrize("capture", SCRAPES)
def test_label_keys_and_types_match_the_real_scrapes(real_data: Path, capture: str) -> None:
    real = families((real_data / DCGM / capture).read_text())
    e = Exporter(hostname="gpu-node-042")
    e.update(frame_of(FakeNvml.of(1, model="l4"), job="4000123"))
    ours = scrape(e)
    both = set(real) & set(ours)
    assert len(both) >= 15, sorted(both)
    for name in both:
        assert label_keys(ours[name]) == label_keys(real[name]) | OUR_EXTRA_LABELS, name
        assert ours[name].type == real[name].type, name  # type: ignore[attr-defined]


def test_values_in_dcgm_units_match_the_real_l4(real_data: Path, monkeypatch) -> None:
    """The fake L4 answers what the real L4 answered; /metrics must then say what it said."""
    import fleetwatch.collectors.nvml.fake as fake

    monkeypatch.setattr(fake.time, "monotonic", lambda: 0.0)  # hold the energy counter still
    real = families((real_data / DCGM / SCRAPES[0]).read_text())
    e = Exporter()
    e.update(frame_of(FakeNvml.of(1, model="l4")))
    ours = scrape(e)
    for name in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK",
                 "DCGM_FI_DEV_POWER_USAGE",             # mW -> W
                 "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",  # mJ -> J -> mJ
                 "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED",  # MiB
                 "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_ROW_REMAP_FAILURE"):
        # DCGM truncates memory to whole MiB; we keep the fraction.
        assert ours[name].samples[0].value == pytest.approx(  # type: ignore[attr-defined]
            real[name].samples[0].value, abs=1.0), name  # type: ignore[attr-defined]
    # Memory temperature: the L4 answers 0 for "no sensor"; we leave it out instead.
    assert "DCGM_FI_DEV_MEMORY_TEMP" in real and "DCGM_FI_DEV_MEMORY_TEMP" not in ours


def test_the_grafana_board_finds_its_metrics(real_data: Path) -> None:
    board = json.loads((real_data / DCGM / "dcgm-exporter-dashboard.json").read_text())
    text = json.dumps(board)
    names = set(re.findall(r"\b(DCGM_FI_[A-Z0-9_]+)", text))
    assert names  # the board does query DCGM names
    e = Exporter()
    e.update(frame_of(FakeNvml.of(2)))
    ours = scrape(e)
    assert names <= set(ours), names - set(ours)
    for label in re.findall(r"label_values\(DCGM_FI_DEV_GPU_TEMP, (\w+)\)", text):
        if label != "instance":  # Prometheus adds that one itself
            assert label in label_keys(ours["DCGM_FI_DEV_GPU_TEMP"])


def test_lost_gpu_series_disappear_and_are_counted() -> None:
    nv = FakeNvml.of(3)
    reader = NvmlReader.open(nv)
    e = Exporter()
    nv.lose(1)
    gpus = reader.read().gpus
    e.update(Frame("c", "r", "n", time.time(), tuple(gpus)))
    ours = scrape(e)
    uuids = {s.labels["UUID"] for s in ours["DCGM_FI_DEV_GPU_TEMP"].samples}  # type: ignore[attr-defined]
    assert uuids == {nv.gpus[0].uuid, nv.gpus[2].uuid}
    assert ours["fleetwatch_gpus_lost"].samples[0].value == 1  # type: ignore[attr-defined]


def test_xids_count_per_code_and_dcgm_keeps_the_last() -> None:
    nv = FakeNvml.of(2)
    reader = NvmlReader.open(nv)
    e = Exporter()
    nv.inject_xid(1, 13)
    nv.inject_xid(1, 79)
    e.update(Frame("c", "r", "n", time.time(), tuple(reader.read().gpus)))
    nv.inject_xid(1, 79)
    e.update(Frame("c", "r", "n", time.time(), tuple(reader.read().gpus)))
    ours = scrape(e)
    counts = {(s.labels["gpu"], s.labels["xid"]): s.value
              for s in ours["fleetwatch_gpu_xid"].samples}  # type: ignore[attr-defined]
    assert counts == {("1", "13"): 1.0, ("1", "79"): 2.0}
    last = {s.labels["gpu"]: s.value
            for s in ours["DCGM_FI_DEV_XID_ERRORS"].samples}  # type: ignore[attr-defined]
    assert last == {"0": 0.0, "1": 79.0}


def test_xid_counters_start_at_0_and_keep_one_series_across_jobs() -> None:
    """A series born at 1 gives Prometheus' increase() 0 (the first XID 79 of a GPU alerted
    nobody), and one started anew per job read as a new XID each time (VictoriaMetrics)."""
    nv = FakeNvml.of(2)
    reader = NvmlReader.open(nv)
    e = Exporter()

    def scrape_with(job: str) -> dict[str, object]:
        gpus = tuple(dataclasses.replace(g, job=job) for g in reader.read().gpus)
        e.update(Frame("c", "r", "n", time.time(), gpus))
        return scrape(e)

    first = scrape_with("5001")
    events = first["fleetwatch_gpu_xid_events"].samples  # type: ignore[attr-defined]
    assert [(s.labels["gpu"], s.value) for s in events] == [("0", 0.0), ("1", 0.0)]
    assert "hpc_job" not in events[0].labels
    nv.inject_xid(1, 79)
    scrape_with("5001")
    nv.inject_xid(1, 13)
    later = scrape_with("5002")  # a new job on the GPU: the counters go on, not anew
    per_code = later["fleetwatch_gpu_xid"].samples  # type: ignore[attr-defined]
    assert {(s.labels["xid"], s.value) for s in per_code} == {("79", 1.0), ("13", 1.0)}
    assert all("hpc_job" not in s.labels for s in per_code)
    totals = {s.labels["gpu"]: s.value
              for s in later["fleetwatch_gpu_xid_events"].samples}  # type: ignore[attr-defined]
    assert totals == {"0": 0.0, "1": 2.0}
    # The gauge dcgm-exporter serves keeps its labels, the job's included.
    dcgm = later["DCGM_FI_DEV_XID_ERRORS"].samples  # type: ignore[attr-defined]
    assert {s.labels["hpc_job"] for s in dcgm} == {"5002"}


def test_fleetwatch_named_metrics_for_the_rest() -> None:
    e = Exporter()
    e.update(frame_of(FakeNvml.of(1)))
    ours = scrape(e)
    assert ours["fleetwatch_gpu_nvlink_tx_bytes"].type == "counter"  # type: ignore[attr-defined]
    assert "fleetwatch_gpu_nvlink_links_down" in ours
    assert ours["fleetwatch_host_load1"].samples[0].value == 1.5  # type: ignore[attr-defined]
    port = ours["fleetwatch_ib_port_active"].samples[0]  # type: ignore[attr-defined]
    assert port.labels == {"Hostname": "gpu-node-042", "port": "mlx5_0/1"}


def test_serve_metrics_with_agent_health() -> None:
    health = AgentHealth()
    health.sent(3)
    health.spooled(2)
    health.dropped()
    health.nvml_error("unknown")
    for s in (0.0008, 0.0015, 0.2):
        health.tick(s)
    e = Exporter(health=health)
    e.update(frame_of(FakeNvml.of(1)))
    server = serve_metrics(e, "127.0.0.1", 0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as r:
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            ours = families(r.read().decode())
    finally:
        server.stop()
    value = {name: ours[name].samples[0].value  # type: ignore[attr-defined]
             for name in ("fleetwatch_agent_frames_sent", "fleetwatch_agent_frames_spooled",
                          "fleetwatch_agent_frames_dropped", "fleetwatch_agent_nvml_errors")}
    assert value == {"fleetwatch_agent_frames_sent": 3, "fleetwatch_agent_frames_spooled": 2,
                     "fleetwatch_agent_frames_dropped": 1, "fleetwatch_agent_nvml_errors": 1}
    tick = {s.name: s.value for s in ours["fleetwatch_agent_tick_seconds"].samples  # type: ignore[attr-defined]
            if s.labels.get("le") in (None, "0.002")}
    assert tick["fleetwatch_agent_tick_seconds_count"] == 3
    assert any(v == 2 for k, v in tick.items() if k.endswith("_bucket"))
    assert "DCGM_FI_DEV_GPU_TEMP" in ours


@pytest.mark.parametrize("capture", SCRAPES)
def test_a_fake_h100_carries_every_family_of_the_real_scrapes(capture: str) -> None:
    """Done-when of issue 10: every family, with the same label keys (plus hpc_job)."""
    real = families((DATA / capture).read_text())
    e = Exporter(hostname="gpu-node-042")
    nv = FakeNvml.of(2)
    first = frame_of(nv, job="4000123")
    e.update(first)
    later = dataclasses.replace(first, ts=first.ts + 5.0, gpus=tuple(
        dataclasses.replace(g, metrics={**g.metrics, "gpu_nvlink_raw_bytes_total":
                                        g.metrics["gpu_nvlink_raw_bytes_total"] + 5 * 2**30})
        for g in first.gpus))
    e.update(later)  # DCGM's NVLink bandwidth is a rate: it needs two reads
    ours = scrape(e)
    assert set(real) - set(ours) == set()
    for name, fam in real.items():
        assert label_keys(ours[name]) == label_keys(fam) | OUR_EXTRA_LABELS, name
        assert ours[name].type == fam.type, name  # type: ignore[attr-defined]
    # Bare metal: NVML says no vGPU licensing; DCGM (and so we) report 0, as the captures do.
    assert {s.value for s in ours["DCGM_FI_DEV_VGPU_LICENSE_STATUS"].samples} == {0.0}  # type: ignore[attr-defined]
    # NVLink raw TX + RX (9.5M + 8.4M KiB) in bytes as fleetwatch's counter; DCGM's field 449
    # is what DCGM computes: KiB/s / 1000 (1 GiB/s here: 1,048.576); memory temperature where
    # HBM has it.
    assert ours["fleetwatch_gpu_nvlink_raw_bytes"].samples[0].value == (  # type: ignore[attr-defined]
        (9_500_000 + 8_400_000) * 1024 + 5 * 2**30)
    assert ours["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"].samples[0].value == pytest.approx(  # type: ignore[attr-defined]
        1048.576)
    assert ours["DCGM_FI_DEV_MEMORY_TEMP"].samples[0].value == 70  # type: ignore[attr-defined]
