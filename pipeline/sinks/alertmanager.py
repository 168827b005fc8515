"""Alertmanager's v2 API: ``POST /api/v2/alerts``, so existing routing keeps working.

Each firing alert is posted with its labels (alertname = the rule, severity,
cluster, rack, node, device, scope), annotations (summary, description with
where and since when, evidence, action), ``startsAt`` (when it fired),
``endsAt`` and a ``generatorURL`` to the dashboard. As Prometheus does,
firing alerts are re-sent every ``resend_s`` with ``endsAt`` four resend
intervals ahead: Alertmanager resolves an alert whose ``endsAt`` passes, so
one that is no longer re-sent (this processor died) resolves by itself. A
resolved alert is posted once with ``endsAt`` = when it resolved.

The firing alerts re-sent are this processor's: ``adopt`` adds those of
nodes whose partition it took over, ``forget`` drops those of nodes whose
partition moved away (the new owner re-sends them; were they re-sent from
here too, an alert resolved there would come back to life here).
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from fleetwatch.pipeline.silences import Notice, labels
from fleetwatch.pipeline.sinks.base import iso
from fleetwatch.pipeline.sinks.http import post_json
from fleetwatch.pipeline.store.base import Alert

# Prometheus: endsAt = now + 4 * max(resend delay, evaluation interval).
VALID_FOR_RESENDS = 4


def am_labels(alert: Alert) -> dict[str, str]:
    have = labels(alert)
    out = {"alertname": alert.rule}
    out.update({k: v for k, v in have.items() if v and k != "rule"})
    return out


def am_annotations(alert: Alert) -> dict[str, str]:
    where = alert.node or f"rack {alert.rack}"
    if alert.device.startswith("gpu"):
        where = f"{alert.device} on {alert.node} (rack {alert.rack})"
    since = iso(alert.fired_ts if alert.fired_ts is not None else alert.started_ts)
    evidence = ", ".join(f"{k}={v:g}" for k, v in alert.evidence.items())
    out = {"summary": alert.message,
           "description": f"{alert.message}; {where}, since {since}"
                          + (f"; evidence: {evidence}" if evidence else ""),
           "value": f"{alert.value:g}"}
    if evidence:
        out["evidence"] = evidence
    if alert.action:
        out["action"] = alert.action
    return out


class AlertmanagerSink:
    name = "alertmanager"
    notify_only = True

    def __init__(self, url: str, resend_s: float = 60.0, dashboard_url: str = "",
                 timeout_s: float = 10.0, clock: Callable[[], float] = time.time) -> None:
        self.url = url.rstrip("/") + "/api/v2/alerts"
        self.resend_s, self.timeout_s, self.clock = resend_s, timeout_s, clock
        self.dashboard_url = dashboard_url.rstrip("/")
        self._firing: dict[str, Alert] = {}
        # adopt and forget may come from another thread than send and tick.
        self._lock = threading.Lock()
        self._last_sent = 0.0

    def _payload(self, alert: Alert, now: float) -> dict[str, Any]:
        firing = alert.state != "resolved"
        start = alert.fired_ts if alert.fired_ts is not None else alert.started_ts
        body = {"labels": am_labels(alert), "annotations": am_annotations(alert),
                "startsAt": iso(start),
                "endsAt": iso(now + VALID_FOR_RESENDS * self.resend_s if firing
                              else max(alert.resolved_ts or now, start))}
        if self.dashboard_url:
            query = urllib.parse.urlencode({"node": alert.node, "device": alert.device})
            body["generatorURL"] = f"{self.dashboard_url}/?{query}"
        return body

    def send(self, changes: Sequence[Notice]) -> None:
        with self._lock:
            resolved = self._take(changes)
        if resolved or any(n.notify for n in changes):
            self._post(resolved)

    def _take(self, changes: Sequence[Notice]) -> list[Alert]:
        """Follow the changes in ``_firing``; the resolved alerts to post once."""
        resolved: list[Alert] = []
        for n in changes:
            if not n.notify:
                # Silenced or inhibited: no longer re-sent, so Alertmanager lets it expire.
                # Acknowledged: still re-sent (else Alertmanager would resolve it), not new.
                if n.muted_by and not n.muted_by.startswith("ack:"):
                    self._firing.pop(n.alert.id, None)
                continue
            if n.alert.state == "resolved":
                self._firing.pop(n.alert.id, None)
                resolved.append(n.alert)
            else:
                self._firing[n.alert.id] = n.alert
        return resolved

    def adopt(self, alerts: Sequence[Alert]) -> None:
        """Keep re-sending these firing alerts (open before this process started, or of
        nodes whose partition this processor took over)."""
        with self._lock:
            for a in alerts:
                self._firing[a.id] = a
            self._last_sent = 0.0  # re-send on the next tick: Alertmanager may expire them

    def forget(self, nodes: Iterable[str]) -> None:
        """Stop re-sending the alerts of these nodes: another processor owns them now."""
        gone = set(nodes)
        with self._lock:
            for alert_id in [i for i, a in self._firing.items() if a.node in gone]:
                del self._firing[alert_id]

    def tick(self) -> None:
        """Re-send the firing alerts when the resend interval has passed."""
        if self._firing and self.clock() - self._last_sent >= self.resend_s:
            self._post([])

    def _post(self, resolved: Sequence[Alert]) -> None:
        now = self.clock()
        with self._lock:
            firing = list(self._firing.values())
        body = [self._payload(a, now) for a in (*firing, *resolved)]
        if body:
            post_json(self.url, body, self.timeout_s, "Alertmanager")
        self._last_sent = now

    def close(self) -> None:
        pass
