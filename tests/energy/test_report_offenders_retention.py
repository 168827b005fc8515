"""A month whose events retention deleted says so (grow #5): its report read "No node has
a lemon score" and so cleared the node that fell off the bus in that month."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from fleetwatch.collectors.sim import FleetSim, SimParams
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.base import Event
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.report_files import write_report

from .test_report import CISO, MAY, model

DAY = 86400.0


def _store_with_a_lemon(tmp_path, rollup_retention_d: float) -> SqliteStore:
    store = SqliteStore(tmp_path / "s.db", raw_retention_h=24,
                        rollup_retention_d=rollup_retention_d)
    sim = FleetSim(SimParams(nodes=1, gpus=2, seed=3, interval_s=15.0), MAY[0] + 16 * DAY)
    processor = Processor(store)
    frames = []
    for _ in range(120):
        sim.step()
        frames.extend(sim.frames())
    processor.process(frames)
    t = MAY[0] + 20 * DAY
    store.write_events([Event(t, "xid", "c", "r", "lemon-1", "gpu3", code=79),
                        Event(t + 10, "gpu_state", "c", "r", "lemon-1", "gpu3", value="lost")])
    return store


def test_a_month_past_event_retention_says_its_offenders_are_unknown(tmp_path) -> None:
    store = _store_with_a_lemon(tmp_path, rollup_retention_d=20)
    store.maintain(int((MAY[0] + 50 * DAY) * 1000))  # events before 31 May go
    paths = write_report(store, model(csv_path=str(CISO)), "2022-05", tmp_path / "out")
    summary = json.loads(paths["json"].read_text())
    assert summary["repeat_offenders"] == []
    horizon = datetime.fromtimestamp(MAY[0] + 30 * DAY, timezone.utc)
    assert summary["events_kept_since"] == horizon.isoformat()
    page = paths["html"].read_text()
    assert (f"Events before {horizon:%d %b %Y} 00:00 UTC are past store.rollup_retention_d"
            in page)
    assert "repeat offenders are unknown, not absent" in page
    assert "No node has a lemon score" not in page


def test_a_month_within_retention_names_its_offender_and_no_horizon(tmp_path) -> None:
    store = _store_with_a_lemon(tmp_path, rollup_retention_d=400)
    store.maintain(int((MAY[0] + 50 * DAY) * 1000))
    paths = write_report(store, model(csv_path=str(CISO)), "2022-05", tmp_path / "out")
    summary = json.loads(paths["json"].read_text())
    assert [o["node"] for o in summary["repeat_offenders"]] == ["lemon-1"]
    assert summary["events_kept_since"] is None
    assert "past store.rollup_retention_d" not in paths["html"].read_text()
