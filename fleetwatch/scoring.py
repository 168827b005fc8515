"""Score alerts against a ground truth of injected faults. Pure functions, no I/O.

The rules, stated once:

* Only alerts that fired count (``fired_ts`` set); a pending alert that never
  fired was never seen by anyone. Each alert counts once, by its id.
* Subject: an alert matches a fault when the alert's subject is the fault's
  subject or lies inside it. A GPU fault is matched by alerts on that GPU; a
  node fault (``gpu`` None) by alerts on the node or any of its GPUs; a rack
  fault (``node`` "") by alerts on the rack, or on any node or GPU in it. A
  fault on a job (a hung job) reaches every node of the job (``nodes``): it is
  matched by alerts on any of them or their GPUs.
* Time: the alert fired between the fault's onset and its end plus a grace
  (``grace_s``: a detector needs a little time to confirm a fault that ended
  just after it began).
* A fault that no reading ever showed (the simulator saw no faulty sample: a GPU
  stuck while no job ran on it) is counted as ``never_visible``, not in recall
  or delays: no detector could have seen it.
* A fault is detected (recall) when at least one alert matches it; its delay
  is the first matching alert's ``fired_ts`` minus the onset, and minus the
  fault's first faulty sample (``first_ts``: when the readings first show it;
  the onset for a drift that starts from nothing).
* An alert that matches no fault is a false alarm. An alert that matches a
  fault is true, whatever its rule.
* A node alert (no GPU) in the time of a fault of one of the node's GPUs is not
  a false alarm either (a node that keeps failing, a node that lost a GPU: it
  is about that GPU's fault), but it does not detect the GPU fault: recall and
  delays count only alerts on the GPU, which is what the operator must be shown.
* Per kind precision: a rule's alerts are attributed to the kinds of the
  faults it matched; precision of a kind is the share of true alerts among the
  alerts of the rules attributed to it. A rule that matched nothing adds only
  false alarms, to the overall precision (true alerts / all alerts).
* False alarms per 1,000 GPU-days: unmatched alerts / (GPUs x days) x 1,000,
  measured on a fault-free run.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fleetwatch.pipeline.store.base import Alert, gpu_index

GRACE_S = 300.0


@dataclass(frozen=True, slots=True)
class Truth:
    """One injected fault, as the scorer needs it."""

    kind: str
    mode: str            # drift or sudden
    rack: str
    node: str            # "" for a rack fault
    gpu: int | None      # None for a node or rack fault
    onset_ts: float
    end_ts: float
    first_ts: float      # the first faulty sample's time
    # False for a fault no reading ever showed (a GPU stuck while no job ran on it): no
    # detector could see it, so it counts in no recall or delay, only as never visible.
    visible: bool = True
    # Every node a fault on a job reached (its job's nodes, ``node`` among them); empty:
    # ``node`` alone.
    nodes: tuple[str, ...] = ()

    @property
    def scope(self) -> str:
        if not self.node:
            return "rack"
        return "node" if self.gpu is None else "gpu"


@dataclass(frozen=True, slots=True)
class Fired:
    """A fired alert: its id, rule, subject and when it fired."""

    id: str
    rule: str
    cluster: str
    rack: str
    node: str
    gpu: int | None      # None for a node or rack alert
    fired_ts: float


def fired(alerts: Iterable[Alert]) -> list[Fired]:
    """The alerts that fired, once each (the first time seen), in time order."""
    out: dict[str, Fired] = {}
    for a in alerts:
        if a.fired_ts is None or a.id in out:
            continue
        out[a.id] = Fired(a.id, a.rule, a.cluster, a.rack, a.node, gpu_index(a.device),
                          a.fired_ts)
    return sorted(out.values(), key=lambda f: (f.fired_ts, f.id))


def covers(t: Truth, f: Fired) -> bool:
    """Is the alert's subject the fault's subject, or inside it?"""
    if t.scope == "rack":
        return f.rack == t.rack
    if t.nodes and t.scope == "node":
        return f.node in t.nodes
    if f.node != t.node:
        return False
    return t.scope == "node" or f.gpu == t.gpu


def match(truths: Sequence[Truth], alerts: Sequence[Fired],
          grace_s: float = GRACE_S) -> dict[int, list[Fired]]:
    """Fault index -> the alerts that match it, first fired first."""
    by_node: dict[str, list[Fired]] = defaultdict(list)
    by_rack: dict[str, list[Fired]] = defaultdict(list)
    for f in alerts:
        by_node[f.node].append(f)
        by_rack[f.rack].append(f)
    out: dict[int, list[Fired]] = {}
    for i, t in enumerate(truths):
        if t.scope == "rack":
            pool = by_rack[t.rack]
        elif t.nodes:  # first fired first, over all the job's nodes
            pool = sorted((f for n in dict.fromkeys((t.node, *t.nodes)) for f in by_node[n]),
                          key=lambda f: (f.fired_ts, f.id))
        else:
            pool = by_node[t.node]
        hits = [f for f in pool if t.onset_ts <= f.fired_ts <= t.end_ts + grace_s
                and covers(t, f)]
        if hits:
            out[i] = hits
    return out


def node_context(truths: Sequence[Truth], alerts: Sequence[Fired],
                 grace_s: float = GRACE_S) -> dict[int, list[Fired]]:
    """GPU fault index -> the node alerts (no GPU) on its node in its time window."""
    by_node: dict[str, list[Fired]] = defaultdict(list)
    for f in alerts:
        if f.gpu is None and f.node:
            by_node[f.node].append(f)
    out: dict[int, list[Fired]] = {}
    for i, t in enumerate(truths):
        if t.scope == "gpu":
            hits = [f for f in by_node[t.node] if t.onset_ts <= f.fired_ts <= t.end_ts + grace_s]
            if hits:
                out[i] = hits
    return out


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (as numpy's default); None for no values."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _delays(truths: Sequence[Truth], matched: Mapping[int, list[Fired]], idx: Sequence[int]
            ) -> dict[str, Any]:
    hidden = sum(not truths[i].visible for i in idx)
    idx = [i for i in idx if truths[i].visible]
    onset = [matched[i][0].fired_ts - truths[i].onset_ts for i in idx if i in matched]
    first = [matched[i][0].fired_ts - truths[i].first_ts for i in idx if i in matched]
    return {"faults": len(idx), "never_visible": hidden, "detected": len(onset),
            "recall": len(onset) / len(idx) if idx else None,
            "delay_p50_s": percentile(onset, 50), "delay_p95_s": percentile(onset, 95),
            "delay_first_sample_p50_s": percentile(first, 50),
            "delay_first_sample_p95_s": percentile(first, 95)}


def score(truths: Sequence[Truth], alerts: Iterable[Alert], grace_s: float = GRACE_S
          ) -> dict[str, Any]:
    """Per kind (and per mode within it) recall, precision and delays; per rule counts;
    overall precision and the false alarms (unmatched alerts) with their rules."""
    fs = fired(alerts)
    matched = match(truths, fs, grace_s)
    context = node_context(truths, fs, grace_s)
    true_ids = {f.id for m in (matched, context) for hits in m.values() for f in hits}
    rule_kinds: dict[str, set[str]] = defaultdict(set)
    for m in (matched, context):
        for i, hits in m.items():
            for f in hits:
                rule_kinds[f.rule].add(truths[i].kind)
    by_rule: dict[str, list[Fired]] = defaultdict(list)
    for f in fs:
        by_rule[f.rule].append(f)
    kinds: dict[str, Any] = {}
    for kind in sorted({t.kind for t in truths}):
        idx = [i for i, t in enumerate(truths) if t.kind == kind]
        row = _delays(truths, matched, idx)
        mine = [f for rule, kinds_of in rule_kinds.items() if kind in kinds_of
                for f in by_rule[rule]]
        row["precision"] = (sum(f.id in true_ids for f in mine) / len(mine)) if mine else None
        row["rules"] = sorted(r for r, k in rule_kinds.items() if kind in k)
        row["modes"] = {mode: _delays(truths, matched, [i for i in idx if truths[i].mode == mode])
                        for mode in sorted({truths[i].mode for i in idx})}
        kinds[kind] = row
    rules = {rule: {"alerts": len(v), "true": sum(f.id in true_ids for f in v),
                    "false": sum(f.id not in true_ids for f in v),
                    "kinds": sorted(rule_kinds.get(rule, ()))}
             for rule, v in sorted(by_rule.items())}
    false = [f for f in fs if f.id not in true_ids]
    return {"kinds": kinds, "rules": rules,
            "precision": len(true_ids) / len(fs) if fs else None,
            "alerts": len(fs), "false_alarms": len(false)}


def notified(alerts: Iterable[Alert]) -> list[Alert]:
    """The alerts that fired and that a notifier would have paged: not inhibited
    (``pipeline.inhibition.inhibited_by``: a node, rack or room alert covering them) by the
    alerts open when each first fired, the changes read in their order."""
    from fleetwatch.pipeline.inhibition import inhibited_by

    open_now: dict[str, Alert] = {}
    seen: set[str] = set()
    out = []
    for a in alerts:
        if a.state == "resolved":
            open_now.pop(a.id, None)
        else:
            open_now[a.id] = a
        if a.state != "firing" or a.id in seen:
            continue
        seen.add(a.id)
        if not inhibited_by(a, [o for o in open_now.values() if o.id != a.id]):
            out.append(a)
    return out


def false_alarms_per_1000_gpu_days(alerts: Iterable[Alert], gpus: int, seconds: float) -> float:
    """On a fault-free run every fired alert is a false alarm."""
    gpu_days = gpus * seconds / 86400.0
    return 1000.0 * len(fired(alerts)) / gpu_days if gpu_days > 0 else float("nan")
