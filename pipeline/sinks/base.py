"""The ``AlertSink`` protocol and the one JSON form of an alert change that sinks share."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any, Protocol

from fleetwatch.pipeline.alert_keys import revision
from fleetwatch.pipeline.links import alert_jobs, alert_url
from fleetwatch.pipeline.silence_matchers import labels
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.store.base import board


class SinkError(RuntimeError):
    """The sink could not take the changes now (down, timeout, 5xx): worth retrying."""


class SinkMisconfigured(SinkError):
    """The sink's setting is wrong until someone changes it (``SinkUnauthorized``,
    ``SinkRedirected``): held and retried like an outage, not tried again in place (the
    same request fails the same way), said as an error that names what to change."""


class SinkRedirected(SinkMisconfigured):
    """The sink's URL answered a redirect (3xx). It is never followed: urllib turns a
    redirected POST into a GET without the alerts (301, 302, 303), and a 200 from the page
    it leads to would count them as delivered. The message names the ``Location`` and the
    setting to change to it; counted as a failure at once (``_fail``), held like an
    outage."""


class SinkUnauthorized(SinkMisconfigured):
    """The sink (or a proxy on the way) refused fleetwatch's credentials: 401, 403, 407. A
    state of the sink's configuration, not of the changes: held and retried like an outage
    (not in place: the same credentials fail the same way), said as an error that names
    what to check, and delivered once the credentials match."""


class SinkRejected(ValueError):
    """The sink refused the changes for good (a 4xx answer other than ``SinkUnauthorized``'s:
    400, 404, 413, 422): sending them again fails again."""


class AlertSink(Protocol):
    """Where alert changes go: Alertmanager, a webhook, the Kafka alert topic, the store.

    ``send`` gets the changes of one batch, in time order, each with why it is
    muted (silence, inhibition, acknowledgement; "" if it is not). Notifying
    sinks (``notify_only`` True) tell people only about ``Notice.notify``
    changes; record sinks keep every change. ``send`` raises ``SinkError`` when
    it may succeed later (``SinkUnauthorized`` when the credentials are refused) and
    ``SinkRejected`` when it never will.

    A sink may also have, each called on the sink's own delivery thread in order
    with its changes: ``tick()`` (every second or so: Alertmanager's re-sends),
    ``adopt(notices)`` (firing alerts this processor took over, each ``Notice``
    with its muting when adopted), ``forget(nodes)`` (nodes now another
    processor's) and ``mutes(silences, acks)`` (after every reload of silences
    and acknowledgements, before the changes judged with them).
    """

    name: str
    notify_only: bool

    def send(self, changes: Sequence[Notice]) -> bool | None: ...

    def close(self) -> None: ...


def iso(ts: float) -> str:
    """RFC 3339 in UTC with milliseconds, as Alertmanager and most receivers parse it."""
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def notification_id(notice: Notice) -> str:
    """The key a receiver dedupes on: ``ALERT_ID/STATE/DIGEST``, the digest over what makes
    this change news (when it entered its state, the evidence ``revision``, the message,
    which says a joined finding, the muting and the severity). The same on every retry and
    re-send of one change (and from another processor); another for a new change: the
    alert's next state, another XID code joined, a later finding joined to its page, a new
    muting, a severity changed (a room's critical a warning again)."""
    a = notice.alert
    since = {"firing": a.fired_ts, "resolved": a.resolved_ts}.get(a.state) or a.started_ts
    what = json.dumps([a.state, since, revision(a), a.message, notice.muted_by, a.severity])
    return f"{a.id}/{a.state}/{hashlib.sha256(what.encode()).hexdigest()[:16]}"


def change_json(notice: Notice, dashboard_url: str = "") -> dict[str, Any]:
    """What, where, since when, the evidence and the action, as plain JSON; ``jobs``, the
    jobs it is about, where it is about any (``links.alert_jobs``), and ``users`` and
    ``teams``, whom they belong to, where the frames named them; with ``dashboard_url``,
    ``link``: the dashboard page about its subject (``links``); ``notification_id``, the
    change's dedupe key (``notification_id``)."""
    a = notice.alert
    out = {
        "id": a.id, "state": a.state, "rule": a.rule, "severity": a.severity,
        "labels": labels(a),
        "message": a.message, "value": a.value, "evidence": dict(a.evidence),
        "board": board(a),
        "action": a.action,
        **({"resolution": a.resolution} if a.resolution else {}),
        "started": iso(a.started_ts), "started_ts": a.started_ts,
        "fired_ts": a.fired_ts, "resolved_ts": a.resolved_ts, "updated_ts": a.updated_ts,
        "muted_by": notice.muted_by,
        "notification_id": notification_id(notice),
    }
    jobs = alert_jobs(a)
    if jobs:
        out["jobs"] = list(jobs)
    out.update({k: list(v) for k, v in (("users", a.users), ("teams", a.teams)) if v})
    if dashboard_url:
        out["link"] = alert_url(dashboard_url, a)
    return out
