"""What fleetwatch posts to Alertmanager for an alert: its labels and annotations.

Labels: ``alertname`` = the rule, severity, cluster, rack, node, device, scope, and for an
XID alert ``remedy``, the class of its worst code's action (``fleetwatch.xids.REMEDIES``:
none, restart, reset, drain, reboot, rma). Alertmanager dedups notifications by label set
and does not notify changed annotations (only at the route's repeat_interval), so an XID
alert whose action escalates gets a new label set, which it notifies as a new alert.
An alert about a job whose owner the frames named has ``team`` (``Alert.teams``, fixed as
the alert opened: a route can send it to the owning team; one value per team, few).
Annotations: summary, description (where and since when), evidence, action, the board,
and ``user`` and ``team`` where known.

``posted_sets`` is the pure part of taking an XID alert over (``AlertmanagerSink.adopt``):
every label set Alertmanager has it under, so that each is resolved in its turn.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fleetwatch.pipeline.silence_matchers import labels
from fleetwatch.pipeline.sinks.base import iso
from fleetwatch.pipeline.store.base import Alert, board, board_text, evidence_value
from fleetwatch.xids import REMEDIES, remedy

# XID alerts (``models.xid_events``) carry the label ``remedy``: their action's class.
XID_RULES, REMEDY = "gpu_xid_", "remedy"
# Alerts about a job with a known owner carry its team as a label (routing).
TEAM = "team"


def am_labels(alert: Alert) -> dict[str, str]:
    have = labels(alert)
    out = {"alertname": alert.rule}
    out.update({k: v for k, v in have.items() if v and k != "rule"})
    if alert.rule.startswith(XID_RULES) and alert.evidence and "xid" in alert.evidence:
        # The class of its worst code's action: an escalation is a new label set, which
        # Alertmanager notifies (it does not for changed annotations).
        out[REMEDY] = remedy(int(alert.evidence["xid"]))
    if alert.teams:
        out[TEAM] = ",".join(alert.teams)
    return out


def ack_labels(alert: Alert) -> dict[str, str]:
    """The labels an acknowledgement's silence matches: the alert's whatever its
    ``remedy``, as fleetwatch's own ack holds until the alert resolves, however it
    escalates (so its superseded label set, kept firing until then, stays quiet too)."""
    out = am_labels(alert)
    out.pop(REMEDY, None)
    return out


def am_annotations(alert: Alert, several_clusters: bool = False) -> dict[str, str]:
    """``several_clusters``: the Alertmanager has several clusters' alerts, so the summary
    (what a Slack or PagerDuty template often shows alone) starts with the cluster. The
    description always names the rack and cluster."""
    place = ", ".join(x for x in (f"rack {alert.rack}" if alert.rack else "",
                                  f"cluster {alert.cluster}" if alert.cluster else "") if x)
    where = f"{alert.node} ({place})" if alert.node and place else (
        alert.node or f"rack {alert.rack}" + (f" of cluster {alert.cluster}"
                                              if alert.cluster else ""))
    if alert.device.startswith("gpu"):
        where = f"{alert.device} on {where}"
    since = iso(alert.fired_ts if alert.fired_ts is not None else alert.started_ts)
    if alert.fired_ts is not None and alert.started_ts < alert.fired_ts:
        # Its condition began before it fired (a for_s, or a rack's air found above its
        # peers' from samples that began to warm earlier): the on-call needs both.
        since += f" (began {iso(alert.started_ts)})"
    evidence = ", ".join(f"{k}={evidence_value(k, v)}" for k, v in alert.evidence.items())
    summary = f"{alert.cluster}: {alert.message}" if several_clusters and alert.cluster else (
        alert.message)
    out = {"summary": summary,
           "description": f"{alert.message}; {where}, since {since}"
                          + (f"; evidence: {evidence}" if evidence else ""),
           "value": f"{alert.value:g}"}
    if alert.state == "resolved":
        out |= resolved_text(alert, where, since)
    if evidence:
        out["evidence"] = evidence
    if alert.action:
        out["action"] = alert.action
    # The board as annotations, not labels: a label that changes with the board would
    # split Alertmanager's groups and break silences on a slot.
    out.update(board(alert))
    out.update({k: ",".join(v) for k, v in (("user", alert.users), ("team", alert.teams))
                if v})
    if board_text(alert):
        out["description"] += f"; board: {board_text(alert)}"
    return out


def resolved_text(alert: Alert, where: str, since: str) -> dict[str, str]:
    """A resolved alert's summary and description: that it resolved and when, what its
    subject reads now where the resolving sample said (``resolved_<metric>``), and the
    firing text as what it was (read on a phone, the firing text alone says "broken")."""
    end = iso(alert.resolved_ts if alert.resolved_ts is not None else alert.updated_ts)
    now = ", ".join(f"{k.removeprefix('resolved_')}={evidence_value(k, v)}"
                    for k, v in alert.evidence.items() if k.startswith("resolved_"))
    subject = where if alert.device.startswith(("gpu", "rack:")) else alert.node or where
    head = f"Resolved: {subject} back to normal since {end}" + (f" ({now})" if now else "")
    return {"summary": head,
            "description": f"{head}; it had fired {since}: {alert.message}"}


def _rank(labels: Mapping[str, str]) -> int:
    """The rank of a posted label set's remedy (-1 if it names none fleetwatch knows)."""
    names = {name: rank for rank, name in REMEDIES.items()}
    return names.get(labels.get(REMEDY, ""), -1)


def posted_sets(xid_alerts: Sequence[Alert], have: Iterable[Any]
                ) -> dict[str, list[dict[str, str]]]:
    """Of these XID alerts, those that Alertmanager (``have``: its ``GET /api/v2/alerts``,
    firing ones only) has: alert id -> every label set it has the alert under, each to be
    resolved when superseded or when the alert resolves. The same alert there has the same
    labels but ``remedy``: ``am_labels``' own set, a lower remedy's (an escalation stored but
    never posted), a superseded one kept firing while the alert is muted, or an older
    release's without ``remedy``. That one first (it is what its receivers heard), then by
    rank, highest first."""
    by_key: dict[tuple[tuple[str, str], ...], list[dict[str, str]]] = {}
    for got in have:
        lab = got.get("labels") if isinstance(got, dict) else None
        if isinstance(lab, dict):
            key = tuple(sorted((k, v) for k, v in lab.items() if k != REMEDY))
            if lab not in by_key.setdefault(key, []):
                by_key[key].append(lab)
    out: dict[str, list[dict[str, str]]] = {}
    for a in xid_alerts:
        found = by_key.get(tuple(sorted(ack_labels(a).items())), [])
        if found:
            out[a.id] = sorted(found, key=lambda lab: (REMEDY in lab, -_rank(lab)))
    return out
