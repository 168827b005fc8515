"""The monthly report's repeat offenders: nodes by lemon score from the store's events."""

from __future__ import annotations

import json

from fleetwatch.collectors.sim import FleetSim, SimParams
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.base import Event
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.report_files import write_report

from .test_report import CISO, MAY, model


def test_the_report_lists_the_worst_nodes_with_their_month_of_xids(tmp_path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    sim = FleetSim(SimParams(nodes=2, gpus=2, seed=3, interval_s=15.0), MAY[0] + 16 * 86400)
    processor = Processor(store)
    for _ in range(2):
        frames = []
        for _ in range(120):
            sim.step()
            frames.extend(sim.frames())
        processor.process(frames)
    day = 86400.0
    t = MAY[0] + 20 * day
    store.write_events(
        [Event(t + k * day, "xid", "c", "r", "lemon-1", "gpu2", code=48) for k in range(4)]
        + [Event(t, "xid", "c", "r", "lemon-1", "gpu3", code=79),
           Event(t + 10, "gpu_state", "c", "r", "lemon-1", "gpu3", value="lost")]
        + [Event(t + k * 600 + j, "xid", "c", "r", "buggy-job", "gpu0", code=13)
           for k in range(4) for j in range(16)]
        + [Event(t + 2 * day, "xid", "c", "r", "once", "gpu1", code=63)])
    paths = write_report(store, model(csv_path=str(CISO)), "2022-05", tmp_path / "out")
    offenders = json.loads(paths["json"].read_text())["repeat_offenders"]
    assert [o["node"] for o in offenders] == ["lemon-1", "once"]  # XID 13 scores nothing
    assert offenders[0]["xids"] == {"48": 4, "79": 1}
    assert offenders[0]["lemon_score"] > offenders[1]["lemon_score"] > 0
    page = paths["html"].read_text()
    assert "Repeat offenders" in page and "48 (Double-bit ECC error) x4" in page
