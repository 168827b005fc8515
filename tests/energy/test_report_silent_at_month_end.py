"""A node silent over the month's end: its time from its last frame is in no ledger row
until it reports again (the frame that ends the gap books it as missing). The closed
month's report, made on the 1st as the timer makes it, names the node, counts that GPU
time as not counted yet, and does not call the month complete; once the node is back,
the same month's report holds the time as missing and names no node."""

from __future__ import annotations

import json

import pytest

from fleetwatch.carbon import build_model
from fleetwatch.pipeline.energy import EnergyIntegrator
from fleetwatch.pipeline.energy_settings import EnergySettings
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.report_files import write_report
from fleetwatch.report_month import month_span

from .helpers import frame

DEC = month_span("2022-12")
STEP = 1800.0
SETTINGS = EnergySettings(max_gap_s=3600.0)
SILENT_FROM = DEC[1] - 12 * 3600  # Dec 31 12:00 UTC: the node's last frame


def frames(node: str, t0: float, t1: float) -> list:
    return [frame(t0 + k * STEP, {0: {"gpu_power_w": 300.0}, 1: {"gpu_power_w": 300.0}},
                  node=node, job="j1") for k in range(int((t1 - t0) // STEP) + 1)]


def integrate(store: SqliteStore, fr: list) -> None:
    ei = EnergyIntegrator(store, SETTINGS)
    fr.sort(key=lambda f: f.ts)
    for i in range(0, len(fr), 200):
        ei.observe(fr[i:i + 200])


def model():
    return build_model("USA", 400.0, "", "avg_CI", 1.5, "", "pue", 0.10, "USD")


def summary(store: SqliteStore, out, now: float) -> dict:
    paths = write_report(store, model(), "2022-12", out, now=now, max_gap_s=3600.0)
    return json.loads(paths["json"].read_text())


def test_a_node_silent_over_the_months_end_is_named_and_the_month_not_complete(tmp_path):
    store = SqliteStore(tmp_path / "s.db")
    integrate(store, frames("n1", DEC[0], DEC[1]) + frames("n2", DEC[0], SILENT_FROM))
    s = summary(store, tmp_path / "a", DEC[1] + 6 * 3600)  # the timer, on the 1st
    assert s["status"] == "partial" and not s["complete"]
    assert s["coverage"] != "complete month"
    assert "n2 (c1) since 31 Dec 12:00 UTC" in s["coverage"]
    assert "24.0 GPU-hours of theirs from then are not counted yet" in s["coverage"]
    assert s["silent_nodes"] == [{"cluster": "c1", "node": "n2", "gpus": 2,
                                  "last_frame": "2022-12-31T12:00:00+00:00"}]
    assert s["uncounted_gpu_hours"] == pytest.approx(24.0)
    html = (tmp_path / "a" / "fleetwatch-energy-2022-12.html").read_text()
    assert "Silent nodes" in html

    # The node reports again on Jan 1: the silence is booked as missing time in December.
    integrate(store, frames("n2", DEC[1] + 2 * 3600, DEC[1] + 3 * 3600))
    s = summary(store, tmp_path / "b", DEC[1] + 6 * 3600)
    store.close()
    assert s["silent_nodes"] == [] and s["uncounted_gpu_hours"] == 0.0
    assert s["missing_gpu_hours"] == pytest.approx(24.0)


def test_a_month_to_date_names_a_node_silent_now(tmp_path):
    store = SqliteStore(tmp_path / "s.db")
    integrate(store, frames("n1", DEC[0], DEC[0] + 86400) + frames("n2", DEC[0], DEC[0] + 3600))
    s = summary(store, tmp_path / "a", DEC[0] + 86400 + 60)
    store.close()
    assert s["status"] == "month_to_date"
    assert [n["node"] for n in s["silent_nodes"]] == ["n2"]
    assert s["uncounted_gpu_hours"] == pytest.approx(2 * (23 + 60 / 3600))
    assert "n2 (c1) since 01 Dec 01:00 UTC" in s["coverage"]


def test_the_energy_pages_missing_tile_names_a_node_silent_now(tmp_path):
    from fleetwatch.dashboards import energy
    from fleetwatch.dashboards.energy_data import read_energy
    from tests.dashboards.test_data import text_of

    store = SqliteStore(tmp_path / "s.db")
    integrate(store, frames("n1", DEC[0], DEC[0] + 86400) + frames("n2", DEC[0], DEC[0] + 3600))
    now = DEC[0] + 86400 + 60
    v = read_energy(store, model(), now - 86400, now + 3600, now, max_gap_s=3600.0)
    quiet = read_energy(store, model(), now - 86400, now + 3600, DEC[0] + 1800,
                        max_gap_s=3600.0)
    store.close()
    tiles = {t.id: text_of(t) for t in energy.summary(v)}
    assert "n2 (c1) since 01 Dec 01:00 UTC" in tiles["energy-quality"]
    assert "not counted yet" in tiles["energy-quality"]
    assert quiet.silent == ""  # both reporting then
