"""A rack's power back against a real Alertmanager and webhook: the rack alert fires with
its nodes' ``node_silent`` muted under it, the rack resolves as two of its nodes send again
and the third a second later. Neither the webhook nor Alertmanager ever gets a node's alert
(before, each node un-muted at the rack's end was posted firing and the pager rang "a1, a3
silent" at recovery); the rack alert ends there, resolved."""

from __future__ import annotations

import time
from dataclasses import replace

from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from fleetwatch.pipeline.sinks.webhook import WebhookSink
from fleetwatch.pipeline.store.base import Alert
from tests.servers import Server
from tests.sinks.conftest import Receiver
from tests.sinks.test_alertmanager import am_alerts, wait_for


def test_nodes_back_after_their_rack_are_never_firing_in_alertmanager(
        am: Server, receiver: Receiver) -> None:
    tag, t0 = f"{time.time_ns()}", time.time() - 120
    rack = Alert(f"rack_silent/c//rack:rk{tag}/1", "rack_silent", "critical", "c",
                 f"rk{tag}", "", f"rack:rk{tag}", "firing", t0, t0, 3.0,
                 "Rack down: 3 of its 3 nodes", fired_ts=t0)
    nodes = [Alert(f"node_silent/c/n{i}-{tag}/host/1", "node_silent", "critical", "c",
                   f"rk{tag}", f"n{i}-{tag}", "host", "firing", t0, t0, 60.0,
                   "has sent nothing", fired_ts=t0) for i in range(3)]
    sink = AlertmanagerSink(f"http://{am.address}", resend_s=60.0)
    notifier = Notifier([sink, WebhookSink(receiver.url)], background=False)

    def end(a: Alert, ts: float) -> Alert:
        return replace(a, state="resolved", updated_ts=ts, resolved_ts=ts)

    notifier.send([rack, *nodes], now=t0)
    notifier.send([end(rack, t0 + 60), end(nodes[0], t0 + 60), end(nodes[1], t0 + 60)],
                  now=t0 + 60)
    notifier.send([end(nodes[2], t0 + 61)], now=t0 + 61)
    notifier.close()
    for n in nodes:
        assert am_alerts(am, n.node) == []  # never posted, firing or resolved
    # The webhook (the pager): the rack firing, then resolved; no node, firing or resolved.
    heard = [(a["rule"], a["state"]) for b in receiver.bodies  # type: ignore[index]
             for g in b["groups"] for a in g["alerts"]]
    assert heard == [("rack_silent", "firing"), ("rack_silent", "resolved")]
    url_rack = f"rk{tag}"

    def rack_resolved() -> list[dict]:
        import json
        import urllib.parse
        import urllib.request
        q = urllib.parse.quote(f'rack="{url_rack}"')
        with urllib.request.urlopen(f"http://{am.address}/api/v2/alerts?filter={q}",
                                    timeout=5) as r:
            got = json.load(r)
        return [] if any(a["status"]["state"] == "active" for a in got) else [True]

    assert wait_for(rack_resolved)
