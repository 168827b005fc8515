"""The walking skeleton, end to end: simulated agent → in-process bus → processor → store."""

from __future__ import annotations

import time
from pathlib import Path

from fleetwatch.collectors.sim import parse_fault
from fleetwatch.config import DetectorsConfig, load
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.up import UpOptions, build

KEEP = DetectorsConfig().thermal_keep_firing_s


def test_cooling_failure_fires_one_alert_that_resolves(tmp_path: Path) -> None:
    # Every node stays busy; a fast page refresh keeps the pending-alert slow-down (made
    # for a person watching, tested in test_up) to a second per alert.
    config = load(env={"FLEETWATCH_SIM_JOB_MEAN_S": "1e9", "FLEETWATCH_DASHBOARD_REFRESH_S": "0.5"})
    fault = parse_fault("cooling:node-002/5@30m+1h")
    # Steady compute-bound load: how hot a cooling fault runs depends on the job's phase.
    options = UpOptions(simulate=True, interval_s=15.0, backfill_s=3 * 3600.0, speed=3000.0,
                        faults=[fault], store=str(tmp_path / "e2e.db"), steady_load=True)
    system, _ = build(config, options)
    truth = system.agent.source.sim.ground_truth[0]
    system.start()
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if system.agent.source.sim.ts >= truth.end_ts + 1800 + KEEP and \
                    system.consumer.lag() == 0:
                break
            time.sleep(0.1)
        time.sleep(0.5)
    finally:
        system.stop()
    assert system.agent.source.sim.ts >= truth.end_ts + 1800 + KEEP, \
        "simulation did not get far enough"
    store = SqliteStore(tmp_path / "e2e.db", read_only=True)
    alerts = store.alerts(("pending", "firing", "resolved"))
    # Only the faulty GPU alerts (several rules see it), and every alert is resolved.
    assert {(a.node, a.device, a.state) for a in alerts} == {("node-002", "gpu5", "resolved")}
    (alert,) = [a for a in alerts if a.rule == "gpu_hot_vs_peers"]
    assert truth.onset_ts < alert.started_ts < truth.onset_ts + 900
    assert alert.fired_ts is not None and alert.fired_ts - alert.started_ts >= 30
    # Resolved once clear for detectors.thermal_keep_firing_s (a job phase is no cure).
    assert truth.end_ts + KEEP <= alert.resolved_ts <= truth.end_ts + KEEP + 600
    # the whole fleet was stored: 32 GPUs reporting
    assert len(store.latest("gpu_temp_c", 0)) == 32
    assert [a.kind for a in store.annotations(truth.onset_ts, truth.end_ts)] == ["fault"]
