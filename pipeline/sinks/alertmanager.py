"""Alertmanager's v2 API: ``POST /api/v2/alerts``, so existing routing keeps working.

Each firing alert is posted with its labels (alertname = the rule, severity,
cluster, rack, node, device, scope), annotations (summary, description with
where and since when, evidence, action), ``startsAt`` (when it fired),
``endsAt`` and a ``generatorURL``: the dashboard page of the alert's GPU, node, job or
rack's cluster (``links.alert_url``). As Prometheus does,
firing alerts are re-sent every ``resend_s`` with ``endsAt`` four resend
intervals ahead: Alertmanager resolves an alert whose ``endsAt`` passes, so
one that is no longer re-sent (this processor died) resolves by itself. A
resolved alert is posted once with ``endsAt`` = when it resolved.

An XID alert also has the label ``remedy``: the class of its worst code's action
(``fleetwatch.xids.REMEDIES``: none, restart, reset, drain, reboot, rma). Alertmanager
dedups notifications by label set and never notifies changed annotations (only at the
route's repeat_interval), so an escalation (48 "drain and reset", then 64 "RMA") is a new
label set: notified within the route's group_interval, as a new alert is, while the label
set posted before is posted resolved at once (``endsAt`` = now) and nothing of it
lingers. Codes of the same or a lower rank leave the label set as it is: no new page.
Every label set posted is resolved in its turn: Alertmanager drops the "resolved" of an
alert a silence or an inhibition mutes, so while the alert is muted (an ack holds through
an escalation) the superseded set is kept firing, muted, and resolved once the alert is
no longer muted or resolves; an acknowledged alert that resolves is posted resolved under
its ack's silence, the silence expired, then posted resolved again (a flush between the
two would otherwise page the new set, never heard, as firing).
An XID alert taken over (``adopt``) is known under every label set Alertmanager has it
under (one ``GET /api/v2/alerts``; if that fails, the one the store says), so that an
escalation in the backlog a restarted processor reads first resolves it at once: an
older release's, without ``remedy``, is re-sent until its remedy rises (an upgrade pages
nobody); a lower remedy's, whose escalation its owner stored but never posted, is
resolved and the escalation notified.

The firing alerts re-sent are this processor's: ``adopt`` adds those of
nodes whose partition it took over, ``forget`` drops those of nodes whose
partition moved away (the new owner re-sends them; were they re-sent from
here too, an alert resolved there would come back to life here).

Muting: an alert muted from its start (silence, inhibition, acknowledgement)
is never posted. One posted before keeps being re-sent while it fires, muted
or not (letting it lapse would page "resolved" while it still fires), and
fleetwatch's silences and acknowledgements are mirrored as Alertmanager
silences (``am_silences``; an acknowledgement's matches its alert whatever its
``remedy``: the ack holds through an escalation, as for the webhook), so Alertmanager
keeps quiet too: when the notifier
hands over the ones it reloaded (``mutes``) and they changed (or ``resend_s`` has
passed since the last pass, or it failed), and before every re-send of the firing
alerts (``tick``) and every post that follows a failed one: an Alertmanager that
restarted and lost its silences gets them back before the alerts they mute (one
``GET /api/v2/silences`` a pass, and a POST only for what is missing or differs).
The inhibition of GPU alerts under a node's or rack's alert is
deploy/alertmanager/alertmanager.yml's inhibit rules. A pass that fails (silence
API unreachable) or in which Alertmanager refuses a silence is counted
(``silence_errors``); the failure is logged once per outage, a refusal once per
silence; it is tried again at the next pass, and never holds back the alerts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from fleetwatch.pipeline.links import alert_url
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks.am_mirror import SilenceMirroring
from fleetwatch.pipeline.sinks.am_payload import (
    REMEDY,
    XID_RULES,
    ack_labels,
    am_annotations,
    am_labels,
    posted_sets,
)
from fleetwatch.pipeline.sinks.am_silences import (
    AlertmanagerSilences,
    owner_tag,
)
from fleetwatch.pipeline.sinks.base import SinkError, iso
from fleetwatch.pipeline.sinks.http import ServerURL, post_json
from fleetwatch.pipeline.store.base import Acknowledgement, Alert, Silence

__all__ = ["VALID_FOR_RESENDS", "AlertmanagerSink", "ack_labels", "am_annotations",
           "am_labels"]

log = logging.getLogger(__name__)

# Prometheus: endsAt = now + 4 * max(resend delay, evaluation interval).
VALID_FOR_RESENDS = 4


class AlertmanagerSink(SilenceMirroring):
    name = "alertmanager"
    notify_only = True

    def __init__(self, url: str, resend_s: float = 60.0, dashboard_url: str = "",
                 timeout_s: float = 10.0, clock: Callable[[], float] = time.time,
                 instance: str = "default", clusters: Sequence[str] = (),
                 remedy_label: bool = True,
                 clusters_seen: Callable[[], Iterable[str]] = lambda: ()) -> None:
        # A user:password@ in the URL is sent as basic auth, masked in messages (``http``).
        self.server = ServerURL.of(url.rstrip("/")).join("/api/v2/alerts")
        self.resend_s, self.timeout_s, self.clock = resend_s, timeout_s, clock
        self.dashboard_url = dashboard_url.rstrip("/")
        # False: XID alerts are posted without ``remedy``, as a release before it posted
        # them, so that a rollback or a consumer group mixing releases pages nobody.
        self.remedy_label = remedy_label
        self._firing: dict[str, Alert] = {}
        # Why each of them is muted ("" if not): a superseded label set of a muted alert
        # is kept firing, since Alertmanager would drop its "resolved" (see ``_post``).
        self._muted: dict[str, str] = {}
        # The payloads posted firing and not yet resolved, per alert: the current label
        # set first, then those an escalation superseded while the alert was muted. An XID
        # alert whose ``remedy`` rose since gets the others posted resolved.
        self._posted: dict[str, list[dict[str, Any]]] = {}
        # Adopted XID alerts that Alertmanager has under a label set without ``remedy`` (an
        # older release posted them): (that label set, the remedy when adopted). Re-sent
        # under it, so an upgrade pages nobody, until the remedy rises.
        self._pinned: dict[str, tuple[dict[str, str], str]] = {}
        # adopt and forget may come from another thread than send and tick.
        self._lock = threading.Lock()
        self._last_sent = 0.0
        # Mirroring: the silences and acks last handed over (None: not yet, mirror nothing),
        # and the alerts of this processor resolved since the last mirroring (their ack
        # silences are this processor's to expire).
        self.silence_api = AlertmanagerSilences(url, timeout_s)
        # Whose silences are ours (createdBy), and the clusters a silence without one mutes:
        # other deployments may share this Alertmanager (``am_silences``).
        self.owner = owner_tag(instance)
        self.clusters = tuple(clusters)
        # The clusters the store has seen (read only when a silence is mirrored) and those
        # of the alerts handed here: an alerts.clusters entry in neither is said, since a
        # silence mirrored with it mutes nothing (``check_clusters``).
        self._clusters_seen = clusters_seen
        self._alert_clusters: set[str] = set()
        self._silences: list[Silence] | None = None
        self._acks: dict[str, Acknowledgement] = {}
        self._resolved_ids: set[str] = set()
        self._mirror_failing = False
        self._mirrored_at = float("-inf")  # when the last pass went through (``clock``)
        self._post_failed = False          # the last post failed: mirror before the next
        self.silence_errors = 0   # mirroring passes that failed or had a silence refused
        self._refused: set[str] = set()  # keys whose silence Alertmanager refused (logged)
        # What this processor last put per key (matchers, end): a difference there while
        # fleetwatch's is the same is a person's edit in Alertmanager (``_say_edit``).
        self._put_last: dict[str, tuple[tuple[Any, ...], float]] = {}

    @property
    def url(self) -> str:
        """Where alerts are posted, as messages show it (a password masked)."""
        return self.server.shown

    @url.setter
    def url(self, url: str) -> None:
        self.server = ServerURL.of(url)

    def _payload(self, alert: Alert, now: float,
                 posted: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``posted``: the alert's last firing payload, whose labels a resolved one keeps
        (Alertmanager never had the label set of an escalation that resolved unposted)."""
        firing = alert.state != "resolved"
        start = alert.fired_ts if alert.fired_ts is not None else alert.started_ts
        labels = self._labels(alert) if firing or posted is None else dict(posted["labels"])
        body = {"labels": labels, "annotations": am_annotations(alert, self._several()),
                "startsAt": iso(start),
                "endsAt": iso(now + VALID_FOR_RESENDS * self.resend_s if firing
                              else max(alert.resolved_ts or now, start))}
        if self.dashboard_url:  # the page about the alert's subject (``links``)
            body["generatorURL"] = alert_url(self.dashboard_url, alert)
        return body

    def _several(self) -> bool:
        """Does this Alertmanager get several clusters' alerts (``alerts.clusters``, or the
        alerts handed here)? Then each summary names its cluster."""
        return len(self.clusters) > 1 or len(self._alert_clusters) > 1

    def send(self, changes: Sequence[Notice]) -> bool:
        """Post what changed; whether anything was posted (not: only muted changes)."""
        with self._lock:
            resolved = self._take(changes)
            acked = self._silences is not None and any(a.id in self._acks for a in resolved)
        if self._post_failed:  # after a failure, Alertmanager may have restarted
            self._mirror()
        if acked:
            # An acknowledged alert resolved: its silence must go, else Alertmanager mutes
            # the "resolved" too. Posted resolved under it first: between the expiry and
            # the post, a flush would page a set it muted (an escalation's) as firing. A
            # "resolved" muted at a flush is dropped: posted again after the expiry.
            posted = self._post(resolved, keep=True)
            self._mirror()
        else:
            posted = False
        if (resolved or any(n.notify for n in changes)
                or self._superseded({n.alert.id for n in changes})):
            # A label set superseded (an XID alert's remedy rose, acked or not) is posted
            # at once: resolved, or kept firing while the alert is muted (``_post``).
            posted = self._post(resolved) or posted
        return posted

    def _take(self, changes: Sequence[Notice]) -> list[Alert]:
        """Follow the changes in ``_firing``; the resolved alerts to post once."""
        resolved: list[Alert] = []
        for n in changes:
            a = n.alert
            self._alert_clusters.add(a.cluster)
            if a.state == "resolved":
                # Posted before (muted since or not): Alertmanager must hear it ended.
                self._muted.pop(a.id, None)
                if self._firing.pop(a.id, None) is not None or n.notify:
                    resolved.append(a)
                    if self._silences is not None:  # its ack silence, if any, is ours to end
                        self._resolved_ids.add(a.id)
            elif n.notify or a.state == "firing" and a.id in self._firing:
                # Muted after it was posted (silence, inhibition, ack): still re-sent, else
                # Alertmanager would expire it and page "resolved"; its mirrored silence (or
                # an inhibit rule) keeps Alertmanager quiet.
                self._firing[a.id] = a
                self._muted[a.id] = n.muted_by
        return resolved

    def _labels(self, alert: Alert) -> dict[str, str]:
        """The labels to post a firing alert under: ``am_labels``, or the label set it was
        adopted under while its remedy has not risen since (``_pinned``)."""
        if not self.remedy_label:
            return ack_labels(alert)  # am_labels without remedy
        labels = am_labels(alert)
        pin = self._pinned.get(alert.id)
        if pin is None:
            return labels
        if labels.get(REMEDY) == pin[1]:
            return dict(pin[0])
        del self._pinned[alert.id]  # escalated: posted under the new set, the pinned one ended
        return labels

    def adopt(self, alerts: Sequence[Notice | Alert]) -> None:
        """Keep re-sending these firing alerts (open before this process started, or of
        nodes whose partition this processor took over), muted or not: they may have been
        posted before, and their muting is mirrored as Alertmanager silences. Each is known
        under the label sets Alertmanager has it under (``_adopt_labels``), so that an
        escalation before the first re-send resolves them."""
        adopted = [n for n in (i if isinstance(i, Notice) else Notice(i) for i in alerts)
                   if n.alert.state == "firing"]
        xids = {n.alert.id: n.alert for n in adopted
                if self.remedy_label and REMEDY in am_labels(n.alert)}
        had = self._adopt_labels(list(xids.values()))
        with self._lock:
            for n in adopted:
                a = n.alert
                self._alert_clusters.add(a.cluster)
                self._firing[a.id], self._muted[a.id] = a, n.muted_by
                sets = [self._labels(a)]  # what the store says was posted
                if a.id in xids and had is not None:
                    sets = had.get(a.id, [])
                if not sets:
                    continue  # Alertmanager does not have it: posted at the next re-send
                start = iso(a.started_ts if a.fired_ts is None else a.fired_ts)
                self._posted[a.id] = [{"labels": lab,
                                       "annotations": am_annotations(a, self._several()),
                                       "startsAt": start} for lab in sets]
                if a.id in xids and REMEDY not in sets[0]:
                    # An older release's: re-sent as it is until the remedy rises.
                    self._pinned[a.id] = (sets[0], am_labels(a)[REMEDY])
            self._last_sent = 0.0  # re-send on the next tick: Alertmanager may expire them

    def _adopt_labels(self, xid_alerts: Sequence[Alert]
                      ) -> dict[str, list[dict[str, str]]] | None:
        """Of these adopted XID alerts, the label sets Alertmanager has each under (alert
        id -> labels, ``posted_sets``); None if it cannot say (the GET failed)."""
        if not xid_alerts:
            return {}
        try:
            have = self.silence_api.alerts(f'alertname=~"{XID_RULES}.*"')
        except SinkError as exc:
            log.warning("could not read Alertmanager's XID alerts to keep the label sets of "
                        "the adopted ones (an older release's are notified again with the "
                        "label remedy): %s", exc)
            return None
        return posted_sets(xid_alerts, have)

    def forget(self, nodes: Iterable[str]) -> None:
        """Stop re-sending the alerts of these nodes: another processor owns them now."""
        gone = set(nodes)
        with self._lock:
            for alert_id in [i for i, a in self._firing.items() if a.node in gone]:
                del self._firing[alert_id]
                self._muted.pop(alert_id, None)
                self._posted.pop(alert_id, None)
                self._pinned.pop(alert_id, None)

    def let_go(self, ids: Collection[str]) -> None:
        """Stop re-sending these alerts: another processor judges their subject now."""
        with self._lock:
            for alert_id in ids:
                self._firing.pop(alert_id, None)
                self._muted.pop(alert_id, None)
                self._posted.pop(alert_id, None)
                self._pinned.pop(alert_id, None)

    def mutes(self, silences: Sequence[Silence], acks: Mapping[str, Acknowledgement]) -> None:
        """fleetwatch's silences and acknowledgements as just reloaded: mirror them as
        Alertmanager silences now (before alerts are re-sent)."""
        with self._lock:
            same = self._silences == list(silences) and self._acks == dict(acks)
            self._silences, self._acks = list(silences), dict(acks)
        if (not same or self._mirror_failing
                or self.clock() - self._mirrored_at >= self.resend_s):
            self._mirror()

    def tick(self) -> bool:
        """Re-send the firing alerts when the resend interval has passed, the mirrored
        silences reconciled first (renewing the ack silences; re-creating those an
        Alertmanager that restarted lost, before the alerts they mute); whether it posted."""
        if self._firing and self.clock() - self._last_sent >= self.resend_s:
            self._mirror()
            return self._post([])
        return False

    def _superseded(self, ids: set[str]) -> bool:
        """Has one of these firing alerts a label set to post: other than the one last
        posted (its remedy rose), or superseded and held while it was muted, which it is no
        longer?"""
        with self._lock:
            for i in ids:
                if i not in self._posted or i not in self._firing:
                    continue
                sets = [p["labels"] for p in self._posted[i]]
                if sets[0] != self._labels(self._firing[i]) or (
                        len(sets) > 1 and not self._muted.get(i)):
                    return True
        return False

    def _post(self, resolved: Sequence[Alert], keep: bool = False) -> bool:
        """Re-send the firing alerts and post ``resolved`` ones resolved, under every label
        set posted for them (``keep``: still kept, to post them again). A label set an
        escalation superseded is resolved, or, while its alert is muted, re-sent firing:
        Alertmanager drops a "resolved" that a silence or an inhibition mutes at its flush,
        and the receiver that heard that set (the new one may route elsewhere) would never
        hear it ended."""
        now = self.clock()
        with self._lock:
            firing = {a.id: self._payload(a, now) for a in self._firing.values()}
            held: dict[str, list[dict[str, Any]]] = {}
            ended = []
            for i, p in firing.items():
                old = [q for q in self._posted.get(i, ()) if q["labels"] != p["labels"]]
                if self._muted.get(i):
                    held[i] = [{**q, "endsAt": p["endsAt"]} for q in old]
                else:
                    ended += [{**q, "endsAt": iso(now)} for q in old]
            # A resolved alert ends under each set posted (Alertmanager never had that of an
            # escalation that resolved unposted), or its own if none was.
            ends = [self._payload(a, now, q)
                    for a in resolved for q in self._posted.get(a.id) or [None]]
        body = [*firing.values(), *(q for qs in held.values() for q in qs), *ended, *ends]
        if body:
            try:
                post_json(self.server, body, self.timeout_s, "Alertmanager",
                          setting="alerts.alertmanager_url")
            except SinkError:
                self._post_failed = True
                raise
            self._post_failed = False
        with self._lock:
            self._posted.update((i, [p, *held.get(i, ())]) for i, p in firing.items()
                                if i in self._firing)
            for a in () if keep else resolved:
                self._posted.pop(a.id, None)
                self._pinned.pop(a.id, None)
        self._last_sent = now
        return bool(body)

    def close(self) -> None:
        pass
