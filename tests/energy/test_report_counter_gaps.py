"""The report of a month in which a node's frames stopped for an hour while its GPUs ran on:
the energy its counters measured across the silence is in the totals, no GPU time of it is
missing, its hours have data, and the report says how much was measured so, across how
many gaps, and that its hour attribution is an estimate."""

from __future__ import annotations

import pytest

from fleetwatch.carbon import build_model
from fleetwatch.frame import Frame, GpuReading, HostReading
from fleetwatch.pipeline.energy import EnergyIntegrator
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.report import build
from fleetwatch.report_month import month_span

START, END = month_span("2022-05")
W = 300.0
GPUS = 8


def frame(ts: float) -> Frame:
    gpus = tuple(GpuReading(i, f"GPU-{i}", "test", {
        "gpu_power_w": W, "gpu_energy_j": 1e6 + W * (ts - START),
        "gpu_power_limit_w": 400.0}, "j1") for i in range(GPUS))
    return Frame("c1", "r1", "n1", ts, gpus, HostReading({}))


def test_the_counters_energy_across_an_hours_silence_is_counted_and_said(tmp_path):
    store = SqliteStore(tmp_path / "s.db")
    # The month's first 3 h at 15 s, but for 01:00-02:00: the node sent nothing.
    frames = [frame(START + t) for t in range(0, 3 * 3600 + 1, 15)
              if not 3600 < t < 7200]
    ei = EnergyIntegrator(store)
    for i in range(0, len(frames), 50):
        ei.observe(frames[i:i + 50])
    rows = store.energy(START, END)
    store.close()
    model = build_model("USA", 400.0, "", "avg_CI", 1.5, "", "pue", 0.10, "USD")
    r = build(rows, model, START, END, "2022-05", now=END + 1)
    assert r.total.it_kwh == pytest.approx(GPUS * W * 3 * 3600 / 3.6e6)
    assert r.total.missing_gpu_hours == 0.0
    assert r.gap_kwh == pytest.approx(GPUS * W * 3600 / 3.6e6)  # 2.4 kWh
    assert (round(r.gap_count), r.gap_nodes, r.longest_gap_s) == (GPUS, 1, 3600.0)
    assert r.hours_with_data == 3
    said = r.summary()["gap_measured"]
    assert said["gpu_gaps"] == GPUS and said["longest_gap_hours"] == 1.0
    assert said["said"].startswith("2.400 kWh measured by the GPUs' energy counters across "
                                   "8 GPU gaps on 1 node (longest 1.0 h)")
    assert "spread evenly over each gap's hours for carbon" in said["said"]
    assert "estimate" in said["said"]


def test_a_month_without_such_gaps_says_nothing_of_them():
    model = build_model("USA", 400.0, "", "avg_CI", 1.5, "", "pue", 0.10, "USD")
    r = build([], model, START, END, "2022-05", now=END + 1)
    assert r.gaps_said() == "" and r.summary()["gap_measured"]["it_kwh"] == 0.0
