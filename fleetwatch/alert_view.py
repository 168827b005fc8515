"""``fleetwatch alerts``: the alerts of the store as on-call reads them in a terminal.

Pure: alerts, acknowledgements and silences in, lines out. What is open comes first
(firing, then pending; critical, then warning, then info; the oldest first), each with
where, since when (firing since it fired, as Alertmanager's ``startsAt`` says, and pending
from when it started), what, the evidence, the action, and why it is not being notified.
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fleetwatch.pipeline.silence_matchers import not_in_alertmanager
from fleetwatch.pipeline.silences import mute, visible
from fleetwatch.pipeline.sinks.notified import outcome_text
from fleetwatch.pipeline.store.base import (
    Acknowledgement,
    Alert,
    Notification,
    Silence,
    board,
    board_text,
    evidence_value,
)

# No temperature sample in this long: the data have ended (a replay store, a stopped
# pipeline), and an open alert is open as the data left it, not "now". As the dashboard's
# fleet page, whose GPUs drop off the heatmap after as long.
STALE_S = 300.0

# No temperature sample in this long (every agent sends one each tick): the pipeline is
# said silent as fast as the node_silent rule says a node is (four of the agent's 15 s
# ticks). A processor that stopped leaves every open alert and count as it was, looking live.
LAG_S = 60.0
# A sample stamped this far past "now" comes from a node whose clock runs ahead: left out,
# or one such node would hide the others stopping (as the dashboard's ``AHEAD_S``).
AHEAD_S = 10.0
# What was notified is read up to this far past "now" (``fleetwatch alerts``, the Alerts
# page): a record stamped by a processor whose clock runs a little ahead is still shown.
NOTIFIED_AHEAD_S = 120.0
# Where to look first: only `fleetwatch process` serves probes (`fleetwatch up` has none).
PROCESSOR_HINT = ("is `fleetwatch process` (or `fleetwatch up`) running? Ask the processor's "
                  "/healthz and /readyz (processor.metrics_port, 9401 by default); if they "
                  "answer, the agents or the bus stopped")

_STATE_ORDER = {"firing": 0, "pending": 1, "resolved": 2}
_SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


def ordered(alerts: Iterable[Alert]) -> list[Alert]:
    return sorted(alerts, key=lambda a: (_STATE_ORDER.get(a.state, 3),
                                         _SEVERITY_ORDER.get(a.severity, 3), a.started_ts,
                                         a.id))


def where(a: Alert) -> str:
    return "/".join(p for p in (a.cluster, a.rack, a.node, a.device) if p)


def age(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    if s < 172800:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts))


def hms(ts: float, day_of: float) -> str:
    """The time of day, with the date if it is not ``day_of``'s."""
    same = time.gmtime(ts)[:3] == time.gmtime(day_of)[:3]
    return time.strftime("%H:%M:%S", time.gmtime(ts)) if same else utc(ts)


# Where the newest sample is looked for, nearest first (s back from "now"): each an
# indexed or server-side read, so the store's whole history is asked only where none of
# these holds a sample (data ended over a week ago, or an empty store).
LOOKBACKS_S = (STALE_S, 3600.0, 86400.0, 7 * 86400.0)


# What every agent sends each tick: a GPU's temperature, a host's CPU (a node without GPUs).
TICK_METRICS = ("gpu_temp_c", "host_cpu_util_pct")


def newest_sample_ms(store: Any, now: float, known_ms: int | None = None,
                     cluster: str | None = None) -> int | None:
    """The store's newest sample (ms) of a GPU's temperature or a host's CPU (every agent
    sends one or the other each tick: a node without GPUs only the host's), of ``cluster``
    where given, leaving out those stamped more than ``AHEAD_S`` past ``now`` (a node whose
    clock runs ahead would hide the others stopping); None: the store holds none.
    ``known_ms``: an earlier answer, where the newest is at least."""
    until = int((now + AHEAD_S) * 1000)
    starts = {int((now - back) * 1000) for back in LOOKBACKS_S} | {0}
    if known_ms is not None:
        starts.add(min(known_ms, until))
    for since in sorted(starts, reverse=True):
        found = [store.newest_ms(metric, since, until, cluster) for metric in TICK_METRICS]
        newest = max((int(f) for f in found if f is not None), default=None)
        if newest is not None:
            return newest
    return None


def data_end(store: Any, now: float, cluster: str | None = None) -> float | None:
    """When the store's data (of ``cluster`` where given) ended (its newest sample:
    ``newest_sample_ms``), if no sample came in the last ``STALE_S``: the one store read of
    this module. None while data arrive, and for a store without any."""
    return ended_at(newest_data(store, now, cluster), now)


def ended_at(newest: float | None, now: float) -> float | None:
    """``newest`` (``newest_data``) if the data ended then: over ``STALE_S`` ago."""
    return newest if newest is not None and newest < now - STALE_S else None


def newest_data(store: Any, now: float, cluster: str | None = None) -> float | None:
    """The store's newest sample (s, ``newest_sample_ms``) of ``cluster`` where given,
    leaving out those stamped more than ``AHEAD_S`` past ``now``, never later than ``now``;
    None for a store without any."""
    newest = newest_sample_ms(store, now, cluster=cluster)
    return min(newest / 1000, now) if newest is not None else None


def newest_of_clusters(store: Any, now: float, clusters: Iterable[str]
                       ) -> dict[str, float | None]:
    """Per cluster, its newest sample (``newest_data``): a cluster whose data stopped is not
    hidden by another of the same store that is live. Two indexed reads a live cluster."""
    return {c: newest_data(store, now, c) for c in sorted(set(clusters))}


# The clusters of a store (``store_clusters``): those that sent a tick metric within this
# while; one gone longer (taken down, renamed) is no longer named as stopped.
CLUSTERS_SEEN_S = 86400.0


def store_clusters(store: Any, now: float) -> set[str]:
    """The clusters that sent the store a tick metric (``TICK_METRICS``) within
    ``CLUSTERS_SEEN_S``: a read a metric, each series' newest point."""
    since = int((now - CLUSTERS_SEEN_S) * 1000)
    return {key.cluster for metric in TICK_METRICS for key, _, _ in store.latest(metric, since)}


def stopped_clusters(store: Any, now: float, clusters: Iterable[str]) -> dict[str, float]:
    """Of ``clusters``, those whose data stopped (``lagging``), and their newest sample
    (``newest_data``: a read a cluster), so that one with no alert open is named too."""
    per = newest_of_clusters(store, now, clusters)
    return {c: n for c, n in per.items() if n is not None and lagging(n, now)}


# When the data ended: one moment for every alert shown, or one per cluster.
Ended = float | Mapping[str, float] | None


def end_of(ended: Ended, cluster: str) -> float | None:
    """When the data of ``cluster`` ended, of ``ended`` (``data_end``, or per cluster)."""
    return ended.get(cluster) if isinstance(ended, Mapping) else ended


def lagging(newest: float | None, now: float) -> bool:
    """Whether data stopped coming: the newest sample older than ``LAG_S`` (an empty store
    is waiting, not lagging)."""
    return newest is not None and now - newest > LAG_S


def lag_text(newest: float, now: float) -> str:
    """What a silent pipeline is said with, on the alerts page and in ``fleetwatch alerts``."""
    return (f"no new data for {age(now - newest)} (newest sample {utc(newest)} UTC): "
            f"the alerts and counts are as of then, not now; {PROCESSOR_HINT}")


def at_end(a: Alert, ended: float, now: float) -> str:
    """An open alert of data that ended (``data_end``): open when they ended, its last
    evidence when; not "firing since" for as long as the store is kept."""
    began = a.fired_ts if a.state == "firing" and a.fired_ts is not None else a.started_ts
    return (f"{a.state} at the end of the data ({utc(ended)}, {age(now - ended)} ago; "
            f"{a.state} from {hms(began, ended)}, last evidence {hms(a.updated_ts, ended)})")


def when(a: Alert, now: float, ended: Ended = None) -> str:
    """Since when, in words that cannot be misread: firing since when it fired (the
    ``startsAt`` Alertmanager and the webhook show, as Prometheus sends it), with when it
    started pending; pending since when it started; resolved when, after how long firing.
    ``ended``: when the data ended (``data_end``, or per cluster), for an open alert left by
    them."""
    ended = end_of(ended, a.cluster)
    if ended is not None and a.state != "resolved":
        return at_end(a, ended, now)
    fired = a.fired_ts
    pend = hms(a.started_ts, a.fired_ts if fired is not None else a.resolved_ts or now)
    if a.state == "resolved" and a.resolved_ts is not None:
        if fired is None:
            return f"resolved {utc(a.resolved_ts)}, never fired (pending from {pend})"
        return (f"resolved {utc(a.resolved_ts)}, after firing {age(a.resolved_ts - fired)} "
                f"(firing from {hms(fired, a.resolved_ts)}" + (f", pending from {pend})"
                                                if fired != a.started_ts else ")"))
    if a.state == "firing" and fired is not None:
        return f"firing since {utc(fired)} ({age(now - fired)}" + (
            f"; pending from {pend})" if fired != a.started_ts else ")")
    return f"{a.state} since {utc(a.started_ts)} ({age(now - a.started_ts)})"


def record(a: Alert, open_alerts: Sequence[Alert], silences: Sequence[Silence],
           acks: Mapping[str, Acknowledgement], now: float | None = None,
           notified: Sequence[Notification] = ()) -> dict[str, Any]:
    """One alert as a JSON object: its fields, ``muted`` (``silence:ID``,
    ``inhibited:ID``, ``ack:BY`` or "") as the processor would decide it at ``now``, its
    acknowledgement (who, when, why), and ``notifications``: what the processor recorded
    at the time for each notifying sink (``Notification``, oldest first)."""
    ack = acks.get(a.id)
    return {"id": a.id, "state": a.state, "severity": a.severity, "rule": a.rule,
            "cluster": a.cluster, "rack": a.rack, "node": a.node, "device": a.device,
            "started_ts": a.started_ts, "fired_ts": a.fired_ts, "resolved_ts": a.resolved_ts,
            "updated_ts": a.updated_ts, "value": a.value, "message": a.message,
            "evidence": dict(a.evidence), "action": a.action, "resolution": a.resolution,
            "board": board(a),
            "acked_by": ack.by if ack else None,
            "acked_ts": ack.ts if ack else None,
            "ack_comment": ack.comment if ack else None,
            "muted": mute(a, open_alerts, silences, acks, now) if a.state != "resolved" else "",
            "notifications": [{"ts": n.ts, "sent_ts": n.sent_ts, "sink": n.sink,
                               "state": n.state, "outcome": n.outcome,
                               "muted_by": n.muted_by} for n in notified]}


def notified_line(notes: Sequence[Notification]) -> str:
    """``    notified: 16:43:47 firing sent to webhook; 16:50:02 resolved muted at webhook
    (ack:bob)``: what was recorded at the time, or "" if nothing was."""
    if not notes:
        return ""
    day = notes[0].ts  # the first with its date, the rest with theirs where it differs
    parts = [f"{utc(n.ts) if i == 0 else hms(n.ts, day)} {n.state} "
             + outcome_text(n) + (f" ({n.muted_by})" if n.outcome == "muted" else "")
             for i, n in enumerate(notes)]
    return "    notified: " + "; ".join(parts)


def lines(alerts: Sequence[Alert], silences: Sequence[Silence],
          acks: Mapping[str, Acknowledgement], now: float,
          ended: Ended = None, width: int = 0, short: bool = False,
          piped: bool = False,
          notified: Mapping[str, Sequence[Notification]] | None = None) -> list[str]:
    """The table: a heading line per alert and its id on a line of its own (what ``ack``
    takes, copied whole), then what, the evidence, the action and why it is muted,
    indented (``short``: the heading and id only). ``ended``: when the data ended
    (``data_end``, or per cluster), if they did. ``width``: the terminal's, lines wrapped
    to it (0: none).
    ``piped``: the previous release's layout, which scripts parse (``grep ^FIRING | awk
    '{print $NF}'``): the id ends the heading line, nothing wrapped. ``notified``: per
    alert id, what was recorded as notified (``notified_line``)."""
    open_alerts = [a for a in alerts if a.state != "resolved"]
    out: list[str] = []
    for a in ordered(alerts):
        heading = (f"{a.state.upper():8} {a.severity:8} {a.rule}  {where(a)}  "
                   f"{when(a, now, ended)}")
        if piped:
            out.append(f"{heading}  id {a.id}")
        else:
            out += fit(heading, width)
            out.append(f"    id {a.id}")  # never wrapped: a broken id cannot be pasted
        if not short:
            more = [notified_line((notified or {}).get(a.id, ()))]
            out += [w for line in _details(a, open_alerts, silences, acks, now) + more
                    if line for w in fit(line, 0 if piped else width)]
    return out


def _details(a: Alert, open_alerts: Sequence[Alert], silences: Sequence[Silence],
             acks: Mapping[str, Acknowledgement], now: float) -> list[str]:
    """An alert's indented lines: its message, evidence, board, action, muting."""
    out: list[str] = []
    if a.message:  # VictoriaMetrics keeps no alert text: the rule and evidence say it
        out.append(f"    {a.message}")
    if a.evidence:
        out.append("    evidence: " + ", ".join(f"{k}={evidence_value(k, v, '.4g')}"
                                               for k, v in sorted(a.evidence.items())))
    if board_text(a):
        out.append(f"    board: {board_text(a)}")
    if a.action:
        out.append(f"    action: {a.action}")
    if a.resolution:
        out.append(f"    resolution: {a.resolution}")
    muted = mute(a, open_alerts, silences, acks, now) if a.state != "resolved" else ""
    ack = acks.get(a.id)
    if ack is not None and not muted.startswith("ack:"):  # resolved, or muted otherwise too
        out.append(f"    acknowledged by {visible(ack.by)} at {utc(ack.ts)} UTC"
                   + (f": {visible(ack.comment)}" if ack.comment else ""))
    if muted:
        kind, _, who = muted.partition(":")
        ack = acks.get(a.id)
        who = visible(who)  # an acknowledgement's author as typed (older stores: raw)
        said = {"silence": f"silenced by {who}", "inhibited": f"inhibited by {who}",
                "ack": f"acknowledged by {who}"
                       + (f": {visible(ack.comment)}" if ack and ack.comment else "")}[kind]
        out.append(f"    notifications: {said}")
        problem = next((not_in_alertmanager(s) for s in silences
                        if kind == "silence" and s.id == who), "")
        if problem:
            out.append(f"    but not in Alertmanager, which still pages it: {problem} "
                       f"(`fleetwatch silence list` says what to do)")
    return out


def fit(line: str, width: int) -> list[str]:
    """``line`` wrapped to ``width`` (0: as it is), continued lines indented past its own
    indent, long words (a UUID) broken rather than overflowing."""
    if width <= 0 or len(line) <= width:
        return [line]
    indent = " " * (len(line) - len(line.lstrip()) + 2)
    return textwrap.wrap(line, max(width, 20), subsequent_indent=indent,
                         break_on_hyphens=False) or [line]


def rule_summary(alerts: Sequence[Alert]) -> list[str]:
    """A line per rule, severity, state and cluster, the largest first: a storm (a switch
    silencing 16 nodes) in one line before its 16 alerts (``webhook.summary``'s count)."""
    from fleetwatch.pipeline.sinks.webhook import summary

    out = []
    for s in summary(alerts):
        nodes, racks = s["nodes"], s["racks"]
        where = (f"{len(nodes)} nodes in {len(racks)} rack{'s' * (len(racks) != 1)}"
                 if len(nodes) > 1 else ", ".join(nodes) or ", ".join(racks) or "the room")
        names = f": {nodes[0]} … {nodes[-1]}" if len(nodes) > 2 else (
            f": {', '.join(nodes)}" if len(nodes) == 2 else "")
        out.append(f"{s['alerts']} {s['rule']} ({s['severity']}) {s['state']} on {where}"
                   f" of {s['cluster']}{names}")
    return out


def headline(alerts: Sequence[Alert]) -> str:
    firing = sum(a.state == "firing" for a in alerts)
    pending = sum(a.state == "pending" for a in alerts)
    resolved = sum(a.state == "resolved" for a in alerts)
    parts = [f"{firing} firing", f"{pending} pending"] + (
        [f"{resolved} resolved"] if resolved else [])
    return ", ".join(parts)
