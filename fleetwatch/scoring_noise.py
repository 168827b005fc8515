"""Noise in the evaluation: how many alerts one incident raises, how many of them are
heard, and how often one alert subject flaps. Pure functions over alert changes, no I/O.

* Notified: an alert that fired while no firing alert covered it
  (``fleetwatch.pipeline.inhibition.inhibited_by``: a node or rack alert, or a cause on the
  same GPU), judged at its firing time with the alerts firing then. Silences and
  acknowledgements are people's, not the detectors': left out.
* Alerts per incident: for each detected fault, the fired alerts that match it
  (``fleetwatch.scoring.match``), and of those the notified ones; median and max per kind.
* Re-fires: a firing of one rule on one subject (GPU, node, rack) that comes within
  ``REFIRE_S`` of the end of that rule's previous alert on that subject: flapping. Per
  fault kind, the re-fires among the alerts that match its faults; on the healthy fleet,
  all of them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from fleetwatch.pipeline.inhibition import inhibited_by
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.scoring import GRACE_S, Truth, fired, match, percentile

REFIRE_S = 3600.0


def _episodes(alerts: Iterable[Alert]) -> dict[str, tuple[Alert, float | None]]:
    """Alert id -> (the alert as it fired, when it resolved or None), for the fired ones."""
    firing: dict[str, Alert] = {}
    ended: dict[str, float] = {}
    for a in alerts:
        if a.fired_ts is None:
            continue
        firing.setdefault(a.id, a if a.state == "firing" else replace(a, state="firing"))
        if a.state == "resolved" and a.resolved_ts is not None:
            ended[a.id] = a.resolved_ts
    return {i: (a, ended.get(i)) for i, a in firing.items()}


def notified(alerts: Iterable[Alert]) -> set[str]:
    """Ids of the fired alerts that no firing alert covered when they fired."""
    eps = _episodes(alerts)
    by_cluster: dict[str, list[tuple[Alert, float | None]]] = defaultdict(list)
    for a, end in eps.values():
        by_cluster[a.cluster].append((a, end))
    out = set()
    for aid, (a, _) in eps.items():
        t = a.fired_ts
        assert t is not None
        # A cover firing then was judged then: a live processor re-writes a firing alert
        # every ``alerts.REFRESH_S`` (``inhibition.judged``), the episode keeps its first form.
        firing_then = [replace(b, updated_ts=t) for b, end in by_cluster[a.cluster]
                       if b.id != aid and (b.node == a.node or b.rack == a.rack)
                       and b.fired_ts is not None and b.fired_ts <= t
                       and (end is None or end > t)]
        if not inhibited_by(a, firing_then):
            out.add(aid)
    return out


def refires(alerts: Iterable[Alert], within_s: float = REFIRE_S) -> list[str]:
    """Ids of the alerts that fired within ``within_s`` of the end of the previous alert of
    the same rule and subject, in firing order."""
    by_subject: dict[tuple[str, str, str, str], list[tuple[float, float | None, str]]] = \
        defaultdict(list)
    for aid, (a, end) in _episodes(alerts).items():
        assert a.fired_ts is not None
        by_subject[(a.rule, a.cluster, a.node, a.device)].append((a.fired_ts, end, aid))
    out: list[tuple[float, str]] = []
    for eps in by_subject.values():
        eps.sort()
        for (_, end, _), (start, _, aid) in zip(eps, eps[1:]):
            if end is not None and start - end <= within_s:
                out.append((start, aid))
    return [aid for _, aid in sorted(out)]


def _spread(counts: Sequence[int]) -> tuple[float | None, int | None]:
    return percentile(counts, 50), (max(counts) if counts else None)


def noise(truths: Sequence[Truth], faulty: Sequence[Alert], healthy: Sequence[Alert],
          grace_s: float = GRACE_S) -> dict[str, Any]:
    """Per fault kind: alerts and notified alerts per detected incident (median, max) and
    re-fires; on the healthy fleet: alerts, notified and re-fires."""
    matched = match(truths, fired(faulty), grace_s)
    heard, again = notified(faulty), set(refires(faulty))
    kinds: dict[str, Any] = {}
    for kind in sorted({t.kind for t in truths}):
        hits = [matched[i] for i, t in enumerate(truths) if t.kind == kind and i in matched]
        ids = {f.id for h in hits for f in h}
        p50, most = _spread([len(h) for h in hits])
        n50, nmost = _spread([sum(f.id in heard for f in h) for h in hits])
        kinds[kind] = {"alerts_per_incident_p50": p50, "alerts_per_incident_max": most,
                       "notified_per_incident_p50": n50, "notified_per_incident_max": nmost,
                       "refires": len(ids & again)}
    return {"kinds": kinds, "healthy": {"alerts": len(fired(healthy)),
                                        "notified": len(notified(healthy)),
                                        "refires": len(refires(healthy))}}
