"""One hot GPU, one page, against a real Alertmanager: a GPU that pages as far hotter than
its peers and then reaches its slowdown temperature leaves one alert in Alertmanager, the
first, whose annotations now say both; the later one is never posted."""

from __future__ import annotations

import time
from pathlib import Path

from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from fleetwatch.pipeline.sinks.webhook import WebhookSink
from fleetwatch.pipeline.store.base import Alert
from tests.servers import Server
from tests.sinks.conftest import Receiver
from tests.sinks.test_alertmanager import am_alerts, wait_for

PEER, LIMIT = "gpu_hot_vs_peers_critical", "gpu_temp_critical"


def hot(rule: str, node: str, fired: float, message: str, evidence: dict[str, float]) -> Alert:
    return Alert(f"{rule}/c/{node}/gpu2/{fired:.0f}", rule, "critical", "c", "r1", node, "gpu2",
                 "firing", fired - 30, fired, 1.0, message, fired_ts=fired, evidence=evidence)


def test_a_gpu_hotter_than_its_peers_then_at_its_limit_is_one_alert_in_alertmanager(
        am: Server, receiver: Receiver, tmp_path: Path) -> None:
    node, t0 = f"node-one-page-{time.time_ns()}", time.time() - 600
    sink = AlertmanagerSink(f"http://{am.address}", resend_s=60.0)
    notifier = Notifier([sink, WebhookSink(receiver.url)], background=False)
    peer = hot(PEER, node, t0, f"GPU 2 on {node} at 84 °C, 18 °C above its peers",
               {"gpu_temp_c": 84.0, "peer_temp_c": 66.0})
    limit = hot(LIMIT, node, t0 + 300, f"GPU 2 on {node} at 91 °C, at its slowdown "
                "temperature 90 °C", {"gpu_temp_c": 91.0, "slowdown_temp_c": 90.0})
    notifier.send([peer])
    notifier.send([limit])
    notifier.close()

    def shown() -> list[dict]:
        got = am_alerts(am, node)
        return got if got and "slowdown" in got[0]["annotations"]["summary"] else []

    got = wait_for(shown)
    assert [a["labels"]["alertname"] for a in got] == [PEER]
    assert "slowdown_temp_c=90" in got[0]["annotations"]["evidence"]
    # The webhook: the page, then the page again with the limit in it; never the limit.
    heard = [(a["rule"], a["state"], a["message"]) for b in receiver.bodies  # type: ignore[index]
             for g in b["groups"] for a in g["alerts"]]
    assert [(r, s) for r, s, _ in heard] == [(PEER, "firing"), (PEER, "firing")]
    assert "slowdown" in heard[1][2] and "slowdown" not in heard[0][2]
