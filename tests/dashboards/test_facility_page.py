"""The facility page in headless Chromium: per rack, what it shows against the same numbers
computed by hand from the stored samples and ledger rows; opened before any data, it says so
and fills in once data arrives."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pytest
from dash.testing.wait import until

from fleetwatch.carbon import J_PER_KWH
from fleetwatch.dashboards import create_app
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards.conftest import SimFleet

pytestmark = pytest.mark.browser
STATIC_W = 150.0


def texts(dash_duo, selector: str) -> list[str]:
    return dash_duo.driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map(e => e.textContent);",
        selector)


def traces(dash_duo, graph: str) -> int:
    return dash_duo.driver.execute_script(
        "const g = document.querySelector(arguments[0] + ' .js-plotly-plot');"
        "return g && g.data ? g.data.length : 0;", graph)


def by_hand(store: SqliteStore, now_s: float) -> dict[str, dict[str, float]]:
    """Per rack, from the raw samples and the ledger's rows, summed here row by row."""
    now_ms = int(now_s * 1000)
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for metric in ("gpu_power_w", "host_cpu_power_w"):
        newest: dict[tuple, tuple[int, float]] = {}
        for k, ts, v in store.range(metric, now_ms - 300_000, now_ms + 120_000):
            if k not in newest or ts > newest[k][0]:
                newest[k] = (ts, v)
        for k, (_, v) in newest.items():
            out[k.rack]["power_w"] += v
    nodes = defaultdict(set)
    for k, _, _ in store.range("host_cpu_power_w", now_ms - 300_000, now_ms + 120_000):
        nodes[k.rack].add(k.node)
    for rack, names in nodes.items():
        out[rack]["power_w"] += STATIC_W * len(names)
    first = now_s - 3600 - (now_s - 3600) % 3600
    for row in store.energy(first, now_s + 3600):
        out[row.rack]["kwh"] += row.energy_j / J_PER_KWH
    for metric, name in (("host_inlet_temp_c", "inlet"), ("gpu_temp_c", "die")):
        points = store.range(metric, now_ms - 3_600_000, now_ms + 120_000)
        for rack in {k.rack for k, _, _ in points}:
            mine = [p for p in points if p[0].rack == rack]
            minute = max(ts for _, ts, _ in mine) // 60_000 * 60_000  # the newest bin
            per_device = defaultdict(list)
            for k, ts, v in mine:
                if minute <= ts < minute + 60_000:
                    per_device[k].append(v)
            means = [sum(vs) / len(vs) for vs in per_device.values()]
            out[rack][name] = sum(means) / len(means)
    return out


def number(text: str) -> float:
    return float(text.split()[0].replace(",", ""))


def test_facility_page_shows_each_racks_power_energy_and_temperatures(
        dash_duo, sim_fleet: SimFleet) -> None:
    reader = sim_fleet.reader()
    dash_duo.start_server(create_app(reader, refresh_s=2.0, node_static_w=STATIC_W))
    dash_duo.driver.get(dash_duo.server_url + "/facility?range=1h")
    dash_duo.wait_for_element("#facility-rack-table", timeout=20)
    want = by_hand(reader, time.time())
    assert len(want) >= 2  # the simulated fleet's racks
    names = texts(dash_duo, "#facility-rack-table tr.rack-row td.rack-name")
    assert sorted(names) == sorted(want)
    for rack, values in want.items():
        cells = {c: texts(dash_duo, f"#rack-sim-{rack} td.rack-{c}")[0]
                 for c in ("power", "kwh", "facility", "inlet", "die")}
        assert number(cells["power"]) == pytest.approx(values["power_w"] / 1000, abs=0.006)
        assert number(cells["kwh"]) == pytest.approx(values["kwh"], abs=0.006)
        assert number(cells["facility"]) == pytest.approx(values["kwh"] * 1.2, abs=0.01)
        assert number(cells["inlet"]) == pytest.approx(values["inlet"], abs=0.051)
        assert number(cells["die"]) == pytest.approx(values["die"], abs=0.051)
    total = texts(dash_duo, "#facility-rack-table tr.rack-total td.rack-power")[0]
    assert number(total) == pytest.approx(sum(v["power_w"] for v in want.values()) / 1000,
                                          abs=0.011)
    # A line per rack, and the room's dashed one; the die chart a line per rack.
    until(lambda: traces(dash_duo, "#facility-inlet") == len(want) + 1, timeout=10)
    assert traces(dash_duo, "#facility-die") == len(want)
    assert "node_static_w (150 W)" in texts(dash_duo, "#facility-power-note")[0]
    assert "x each hour's PUE" in texts(dash_duo, "#facility-power-note")[0]
    assert dash_duo.get_logs() == []


def test_facility_tab_opened_before_any_data_says_so_then_fills(dash_duo, tmp_path: Path
                                                                ) -> None:
    from fleetwatch.collectors.sim import FleetSim, SimParams
    from fleetwatch.pipeline.processor import Processor

    store = SqliteStore(tmp_path / "late.db")  # the schema only, as `up` starts
    dash_duo.start_server(create_app(SqliteStore(tmp_path / "late.db", read_only=True),
                                     refresh_s=0.5))
    dash_duo.driver.get(dash_duo.server_url + "/facility")
    dash_duo.wait_for_contains_text("#facility-empty", "No data yet", timeout=10)
    dash_duo.wait_for_element("#facility-racks-empty")
    until(lambda: "No data yet" in " ".join(texts(dash_duo, "#facility-die .annotation-text")),
          timeout=10)
    sim = FleetSim(SimParams(nodes=4, gpus=2, interval_s=15.0), start_ts=time.time() - 60)
    processor = Processor(store)
    for _ in range(3):
        sim.step()
        processor.process(sim.frames())
    until(lambda: len(texts(dash_duo, "tr.rack-row")) == 2, timeout=40)  # the next tick
    assert texts(dash_duo, "#facility-empty") == []
    assert dash_duo.get_logs() == []
    store.close()
