"""A node silent since before the month began has no row in the month: the report still
names it as silent, counts its GPU time of the month as not counted, and does not call
the month complete, on every store backend (its watermark is weeks old by the month's
end: VictoriaMetrics and InfluxDB look for it around its last frame, not around now)."""

from __future__ import annotations

import json

import pytest

from fleetwatch.carbon import build_model
from fleetwatch.pipeline.energy import EnergyIntegrator
from fleetwatch.pipeline.energy_settings import EnergySettings
from fleetwatch.report_files import write_report
from fleetwatch.report_month import month_span
from tests.energy.helpers import frame
from tests.store.backends import Backend
from tests.store.helpers import cluster_name

MAR = month_span("2021-03")
STEP = 1800.0
SETTINGS = EnergySettings(max_gap_s=3600.0)
SILENT_FROM = MAR[0] - 3 * 86400 - 12 * 3600  # 25 Feb 12:00 UTC: n2's last frame


def frames(cluster: str, node: str, t0: float, t1: float) -> list:
    return [frame(t0 + k * STEP, {0: {"gpu_power_w": 300.0}, 1: {"gpu_power_w": 300.0}},
                  node=node, cluster=cluster, job="j1")
            for k in range(int((t1 - t0) // STEP) + 1)]


def test_a_node_silent_since_before_the_month_is_named(backend: Backend, tmp_path) -> None:
    c = cluster_name()
    fr = frames(c, "n1", MAR[0] - 5 * 86400, MAR[1]) + frames(c, "n2", MAR[0] - 5 * 86400,
                                                               SILENT_FROM)
    fr.sort(key=lambda f: f.ts)
    ei = EnergyIntegrator(backend.store, SETTINGS)
    for i in range(0, len(fr), 200):
        ei.observe(fr[i:i + 200])
    backend.settle()
    model = build_model("USA", 400.0, "", "avg_CI", 1.5, "", "pue", 0.10, "USD")
    paths = write_report(backend.store, model, "2021-03", tmp_path, now=MAR[1] + 6 * 3600,
                         max_gap_s=3600.0, cluster=c)
    s = json.loads(paths["json"].read_text())
    assert s["status"] == "partial" and not s["complete"]
    assert s["silent_nodes"] == [{"cluster": c, "node": "n2", "gpus": 2,
                                  "last_frame": "2021-02-25T12:00:00+00:00"}]
    # Its GPU time of the month (31 days x 2 GPUs), not the days before it began.
    assert s["uncounted_gpu_hours"] == pytest.approx(2 * 31 * 24)
    assert f"n2 ({c}) since 25 Feb 12:00 UTC" in s["coverage"]
    assert "1,488.0 GPU-hours of theirs from then are not counted yet" in s["coverage"]
