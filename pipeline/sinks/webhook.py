"""A JSON webhook: one POST per batch with the changes grouped by cluster, rack and node.

Body: ``{"version": 1, "groups": [{"cluster", "rack", "node", "alerts": [CHANGE, ...]}]}``
where CHANGE is ``change_json`` (id, state, rule, severity, labels, message,
value, evidence, action, started, fired_ts, resolved_ts, muted_by). A rack
alert is its own group with node "". Only notifications are sent: firing,
and resolved ones that had fired, and not muted; a firing alert whose evidence
``revision`` changed (another XID joined it) is sent again with the same id.

The URL's path is often the webhook's secret (Slack's ``/services/T../B../X..``): messages
show it as ``***``, as ``fleetwatch config`` does; a ``user:password@`` in it is sent as
HTTP basic auth (``http``).
"""

from __future__ import annotations

from collections.abc import Sequence

from fleetwatch.pipeline.silences import Notice, group
from fleetwatch.pipeline.sinks.base import change_json
from fleetwatch.pipeline.sinks.http import ServerURL, post_json


class WebhookSink:
    name = "webhook"
    notify_only = True

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        self.url = url
        self.timeout_s = timeout_s

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
        groups = group([n.alert for n in notices.values()])
        body = {"version": 1, "groups": [
            {"cluster": k[0], "rack": k[1], "node": k[2],
             "alerts": [change_json(notices[a.id]) for a in alerts]}
            for k, alerts in sorted(groups.items())]}
        post_json(self.server, body, self.timeout_s, "webhook", setting="alerts.webhook_url")

    def close(self) -> None:
        pass
