"""The monthly report's energy and GPU-hours per GPU part (by the boards the frames named):
a fleet of A100s and L40S told apart, with CPUs and the rest of the node a line of their
own, so that the part lines add up to the month."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from fleetwatch.carbon import model_from_config
from fleetwatch.config import CarbonConfig, EnergyConfig
from fleetwatch.frame import Frame, GpuReading, HostReading
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.report_files import write_report
from fleetwatch.report_month import month_span
from fleetwatch.report_sums import NOT_A_GPU

MAY = month_span("2022-05")
A100, L40S = "NVIDIA A100-SXM4-80GB", "NVIDIA L40S"


def fill(path: Path) -> None:
    """Two hours: node a, 2 A100s at 400 W; node b, 1 L40S at 300 W, with a CPU."""
    store = SqliteStore(path)
    frames = []
    for t in range(0, 7200 + 15, 15):
        ts = MAY[0] + 86400 + t
        frames.append(Frame("c", "r1", "a", ts, tuple(
            GpuReading(i, f"GPU-a-{i}-fake", A100, {"gpu_power_w": 400.0,
                                                     "gpu_sm_active_ratio": 0.9}, "j1")
            for i in range(2))))
        frames.append(Frame("c", "r1", "b", ts, (GpuReading(
            0, "GPU-b-0-fake", L40S, {"gpu_power_w": 300.0, "gpu_sm_active_ratio": 0.0}),),
            HostReading({"host_cpu_power_w": 100.0})))
    Processor(store).process(frames)
    store.close()


def test_the_report_has_a_line_per_gpu_part(tmp_path: Path) -> None:
    fill(tmp_path / "s.db")
    store = SqliteStore(tmp_path / "s.db", read_only=True)
    model = model_from_config(CarbonConfig(), EnergyConfig())
    paths = write_report(store, model, "2022-05", tmp_path / "out", now=MAY[1] + 10)
    rows = [r for r in csv.DictReader(paths["csv"].open()) if r["kind"] == "part"]
    got = {r["name"]: r for r in rows}
    assert set(got) == {A100, L40S, NOT_A_GPU}
    # what the store's ledger holds, GPU by GPU
    ledger = store.energy(MAY[0], MAY[1])
    for part, node in ((A100, "a"), (L40S, "b")):
        mine = [r for r in ledger if r.node == node and r.device.startswith("gpu")]
        assert float(got[part]["gpu_hours"]) == pytest.approx(
            sum(r.seconds for r in mine) / 3600, rel=1e-6)
        assert float(got[part]["it_kwh"]) == pytest.approx(
            sum(r.energy_j for r in mine) / 3.6e6, rel=1e-6)
    assert float(got[A100]["gpu_hours"]) == pytest.approx(4.0, rel=0.01)
    assert float(got[L40S]["idle_time_share"]) == pytest.approx(1.0)
    assert float(got[NOT_A_GPU]["gpu_hours"]) == 0.0
    total = sum(r.energy_j for r in ledger) / 3.6e6
    assert sum(float(r["it_kwh"]) for r in rows) == pytest.approx(total, rel=1e-6)
    summary = json.loads(paths["json"].read_text())
    assert {p["part"] for p in summary["by_part"]} == {A100, L40S, NOT_A_GPU}
    assert "By GPU part" in paths["html"].read_text()
