"""A node gone for good with a GPU alert open, against a real Alertmanager: once the node
is forgotten (no frame for ``FORGET_S``) the GPU alert is posted resolved, is no longer
active there, and the sink stops re-sending it (before, it was re-sent every minute for
ever: only ``node_silent`` was resolved as forgotten)."""

from __future__ import annotations

import time
from pathlib import Path

from fleetwatch.models.node_silence import FORGET_S, NodeSilence
from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from tests.servers import Server
from tests.sinks.conftest import frame, tmp_store
from tests.sinks.test_alertmanager import am_alerts, wait_for


def test_a_forgotten_nodes_gpu_alert_ends_in_alertmanager(am: Server, tmp_path: Path) -> None:
    gone, stays = f"node-forgot-{time.time_ns()}", f"node-kept-{time.time_ns()}"
    sink = AlertmanagerSink(f"http://{am.address}", resend_s=60)
    notifier = Notifier([sink], background=False)
    store = tmp_store(tmp_path)
    processor = Processor(store, [NodeSilence(), GpuTemperatureLimit(85, for_s=0)],
                          notifier=notifier)
    start = time.time() - FORGET_S - 6 * 3600.0
    t = start
    try:
        while t < start + 3600.0:  # gone's GPU 1 runs hot, then it vanishes
            processor.process([frame(t, [60, 91], node=gone), frame(t, [60, 60], node=stays)])
            t += 600.0
        (hot,) = wait_for(lambda: am_alerts(am, gone))
        assert hot["labels"]["alertname"] == "gpu_temp_high"
        assert [a.node for a in sink._firing.values() if a.node == gone] == [gone]
        while t < time.time() - 600.0:
            processor.process([frame(t, [60, 60], node=stays)])
            t += 600.0
        processor.flush()
        assert wait_for(lambda: not am_alerts(am, gone))  # resolved: no longer active
        assert [a for a in sink._firing.values() if a.node == gone] == []  # not re-sent
        (ended,) = [a for a in store.alerts(("resolved",)) if a.rule == "gpu_temp_high"]
        assert ended.node == gone and "forgotten" in ended.resolution
    finally:
        notifier.close()
        store.close()
