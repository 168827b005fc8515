"""A JSON webhook: one POST per batch with the changes grouped by cluster, rack and node,
and summed up per cluster and rule.

Body: ``{"version": 1, "summary": [LINE, ...], "groups": [{"cluster", "rack", "node",
"alerts": [CHANGE, ...]}]}`` where CHANGE is ``change_json`` (id, state, rule, severity,
labels, message, value, evidence, action, ``resolution`` where its detector said how it
ended, started, fired_ts, resolved_ts, muted_by, ``jobs`` where it is about jobs, and
``link``, the dashboard page about the alert, where
``alerts.dashboard_url`` is set). A rack alert is its own group with node "". LINE is
``summary``'s: what a storm with one cause (a switch silencing 200 nodes, a row's power
cap slowing 800 GPUs) is in one line, so that a receiver can post it once instead of a
message per node. Only notifications are sent:
firing, and resolved ones that had fired, and not muted; a firing alert whose evidence
``revision`` changed (another XID joined it) is sent again with the same id.

The URL's path is often the webhook's secret (Slack's ``/services/T../B../X..``): messages
show it as ``***``, as ``fleetwatch config`` does; a ``user:password@`` in it is sent as
HTTP basic auth (``http``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from fleetwatch.models.room import ROOM
from fleetwatch.pipeline.silences import Notice, group
from fleetwatch.pipeline.sinks.base import change_json
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


class WebhookSink:
    name = "webhook"
    notify_only = True

    def __init__(self, url: str, timeout_s: float = 10.0, dashboard_url: str = "") -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.dashboard_url = dashboard_url  # each change's ``link`` (``links``); "": none

    @property
    def url(self) -> str:
        """The webhook's URL as messages show it (its path and any password masked)."""
        return self.server.shown

    @url.setter
    def url(self, url: str) -> None:
        self.server = ServerURL.of(url, path_is_secret=True)

    def tells(self, notice: Notice) -> bool:
        """Whether this change is one the webhook is sent (what a count of its changes
        counts)."""
        return notice.notify

    def send(self, changes: Sequence[Notice]) -> None:
        notices = {n.alert.id: n for n in changes if self.tells(n)}
        if not notices:
            return
        alerts = [n.alert for n in notices.values()]
        body = {"version": 1, "summary": summary(alerts), "groups": [
            {"cluster": k[0], "rack": k[1], "node": k[2],
             "alerts": [change_json(notices[a.id], self.dashboard_url) for a in these]}
            for k, these in sorted(group(alerts).items())]}
        post_json(self.server, body, self.timeout_s, "webhook", setting="alerts.webhook_url")

    def close(self) -> None:
        pass
