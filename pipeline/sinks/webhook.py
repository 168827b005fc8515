"""A JSON webhook: a POST per batch, or per group interval (``group_s``: batches that come
within it of a post are held and posted together by the lane, ``grouping``), with the
changes grouped by cluster, rack and node, and summed up per cluster and rule.

Body: ``{"version": 1, "summary": [LINE, ...], "groups": [{"cluster", "rack", "node",
"alerts": [CHANGE, ...]}]}`` where CHANGE is ``change_json`` (id, state, rule, severity,
labels, message, value, evidence, action, ``resolution`` where its detector said how it
ended, started, fired_ts, resolved_ts, muted_by, ``notification_id``, ``jobs`` where it is
about jobs, ``users`` and ``teams`` where their owners are known, and ``link``, the
dashboard page about the alert, where
``alerts.dashboard_url`` is set). A rack alert is its own group with node "". LINE is
``summary``'s: what a storm with one cause (a switch silencing 200 nodes, a row's power
cap slowing 800 GPUs) is in one line, so that a receiver can post it once instead of a
message per node. Only notifications are sent: firing, and resolved ones that had fired,
and not muted (not the resolve of one only seen firing muted; a resolve says in
``firing_notified`` whether the webhook took its firing); a firing alert whose evidence
``revision`` changed (another XID joined it) is sent again with the same id. Each
POST carries ``Idempotency-Key`` (the batch's ``notification_id``s hashed). The README's
"Webhook and Kafka payloads" lists every field.

The URL's path is often the webhook's secret (Slack's ``/services/T../B../X..``): messages
show it as ``***``, as ``fleetwatch config`` does; a ``user:password@`` in it is sent as
HTTP basic auth (``http``).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from fleetwatch.models.room import ROOM
from fleetwatch.pipeline.silences import Notice, group
from fleetwatch.pipeline.sinks.base import SinkRejected, change_json, notification_id
from fleetwatch.pipeline.sinks.http import ServerURL, post_json
from fleetwatch.pipeline.store.base import Alert


def summary(alerts: Iterable[Alert]) -> list[dict[str, Any]]:
    """One line per cluster, rule, severity and state among these changes, the largest
    first: how many alerts, the nodes and racks they cover, and a sentence for a chat."""
    lines: dict[tuple[str, str, str, str], list[Alert]] = defaultdict(list)
    for a in alerts:
        lines[(a.cluster, a.rule, a.severity, a.state)].append(a)
    out = []
    for (cluster, rule, severity, state), these in lines.items():
        nodes = sorted({a.node for a in these if a.node})
        # The room's alert (rack ``*``: every rack of its cluster) is no one rack.
        racks = sorted({a.rack for a in these if a.rack and a.rack != ROOM})
        where = (f"{len(nodes)} node{'s' * (len(nodes) != 1)} in " if nodes else "")
        where += f"{len(racks)} rack{'s' * (len(racks) != 1)}" if racks or nodes else \
            "the room"
        out.append({"cluster": cluster, "rule": rule, "severity": severity, "state": state,
                    "alerts": len(these), "nodes": nodes, "racks": racks,
                    "text": f"{rule} ({severity}) {state}: {len(these)} alert"
                            f"{'s' * (len(these) != 1)} on {where} of {cluster}"})
    return sorted(out, key=lambda x: (-x["alerts"], x["cluster"], x["rule"], x["state"]))


# Alerts remembered as seen firing only muted: past this, the oldest is forgotten (a resolve
# of it retried that late is sent, marked ``firing_notified`` false).
HIDDEN_KEPT = 100_000


class WebhookSink:
    """Posts notifications (see the module's doc), and keeps what the receiver was told.

    ``_firing``: the alerts it should know are firing (their latest notification);
    ``_told``: the ``notification_id`` of each firing one it took (a 2xx). Every post
    also carries the firing alerts it missed (their changes given up after
    ``alerts.sink_retry_s``), and ``tick`` posts them alone when there is nothing new:
    a receiver that comes back learns what still fires. ``_hidden``: alerts seen firing
    only muted (a silence, an inhibition said not to tell of them): their resolve is not
    sent. Any other resolve of an alert that fired is, with ``firing_notified`` saying
    whether this webhook took its firing (false: it fired and resolved while the webhook
    was down, or within one batch), so that a receiver can tell a ticket to close from an
    incident it never heard of.
    """

    name = "webhook"
    notify_only = True

    def __init__(self, url: str, timeout_s: float = 10.0, dashboard_url: str = "",
                 group_s: float = 0.0) -> None:
        self.url = url
        self.timeout_s = timeout_s
        # Batches that come within this of a post are posted together when it ends, by the
        # sink's lane (``grouping``; ``alerts.webhook_group_interval_s``); 0: one per batch.
        self.group_s = group_s
        self.dashboard_url = dashboard_url  # each change's ``link`` (``links``); "": none
        self._firing: dict[str, Notice] = {}
        self._told: dict[str, tuple[str, str]] = {}  # alert id -> (notification_id, node)
        self._hidden: dict[str, str] = {}  # alert id -> node, at most HIDDEN_KEPT
        self.resent = 0  # firing alerts it had missed, in the last post
        # Those alerts (their notices), the last post's whether it went through or not: the
        # lane records them with the post's outcome, as the changes it was handed.
        self.missed: list[Notice] = []

    @property
    def url(self) -> str:
        """The webhook's URL as messages show it (its path and any password masked)."""
        return self.server.shown

    @url.setter
    def url(self, url: str) -> None:
        self.server = ServerURL.of(url, path_is_secret=True)

    def tells(self, notice: Notice) -> bool:
        """Whether this change is one the webhook is sent (what a count of its changes
        counts): a notification; a resolve, not of an alert only seen firing muted."""
        return notice.notify and (notice.alert.state != "resolved"
                                  or notice.alert.id not in self._hidden)

    def send(self, changes: Sequence[Notice]) -> bool:
        """Post the notifications among ``changes`` (and what it missed); whether any."""
        for n in changes:
            a = n.alert
            if a.state == "firing" and n.notify:
                self._firing[a.id] = n
                self._hidden.pop(a.id, None)
                continue
            self._firing.pop(a.id, None)  # resolved, or muted now: nothing to re-send
            if a.state == "firing" and a.id not in self._told:
                self._hidden[a.id] = a.node
                if len(self._hidden) > HIDDEN_KEPT:  # the oldest: its resolve long past
                    del self._hidden[next(iter(self._hidden))]
            elif a.state == "resolved" and not n.notify:
                self._told.pop(a.id, None)  # resolved muted: no resolve sent
        return self._post({n.alert.id: n for n in changes if self.tells(n)})

    def tick(self) -> bool:
        """Post the firing alerts the receiver missed, if any (after a give-up)."""
        return self._post({})

    def adopt(self, notices: Sequence[Notice]) -> None:
        """Firing alerts taken over: the processor before told the receiver of them."""
        for n in notices:
            self._told[n.alert.id] = (notification_id(n), n.alert.node)
            if n.notify:
                self._firing[n.alert.id] = n

    def let_go(self, ids: Collection[str]) -> None:
        """Alerts now another processor's (a rack another member judges): its to tell."""
        for alert_id in ids:
            self._firing.pop(alert_id, None)
            self._told.pop(alert_id, None)
            self._hidden.pop(alert_id, None)

    def forget(self, nodes: Iterable[str]) -> None:
        """Nodes now another processor's: their alerts are its to tell."""
        gone = set(nodes)
        for alert_id in [i for i, n in self._firing.items() if n.alert.node in gone]:
            del self._firing[alert_id]
        for alert_id in [i for i, (_, node) in self._told.items() if node in gone]:
            del self._told[alert_id]
        for alert_id in [i for i, node in self._hidden.items() if node in gone]:
            del self._hidden[alert_id]

    def _post(self, notices: dict[str, Notice]) -> bool:
        missed = {i: n for i, n in self._firing.items()
                  if i not in notices and self._told.get(i, ("",))[0] != notification_id(n)}
        notices = {**missed, **notices}
        self.resent = 0
        self.missed = list(missed.values())
        if not notices:
            return False
        alerts = [n.alert for n in notices.values()]
        body = {"version": 1, "summary": summary(alerts), "groups": [
            {"cluster": k[0], "rack": k[1], "node": k[2],
             "alerts": [self._change(notices[a.id]) for a in these]}
            for k, these in sorted(group(alerts).items())]}
        keys = sorted(notification_id(n) for n in notices.values())
        try:
            post_json(self.server, body, self.timeout_s, "webhook",
                      setting="alerts.webhook_url", headers={"Idempotency-Key": hashlib.sha256(
                          "\n".join(keys).encode()).hexdigest()})
        except SinkRejected:
            self._took(notices.values())  # never sent again, a re-sync included
            raise
        self._took(notices.values())
        self.resent = len(missed)  # for the lane's "is back" line
        return True

    def _change(self, n: Notice) -> dict[str, Any]:
        out = change_json(n, self.dashboard_url)
        if n.alert.state == "resolved":
            out["firing_notified"] = n.alert.id in self._told
        return out

    def _took(self, notices: Iterable[Notice]) -> None:
        for n in notices:
            if n.alert.state == "resolved":
                self._told.pop(n.alert.id, None)
            else:
                self._told[n.alert.id] = (notification_id(n), n.alert.node)

    def close(self) -> None:
        pass

