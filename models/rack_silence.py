"""A rack gone silent at once (``rack_silent``): its PDU tripped or its top-of-rack switch
was lost, and several of its nodes stopped sending in the same few seconds.

``NodeSilence`` pages each silent node on its own; a PDU trip is then 4 to 8 critical
pages that do not say their common cause. The physics tells the two apart: power or a
switch lost cuts every node of the rack within one reporting interval (their last frames
a few seconds apart), while nodes that die one by one over an hour have last frames
minutes apart. A rack is down when at least ``rack_silent_min_nodes`` of its known nodes,
and ``rack_silent_fraction`` of them, were last heard of within ``rack_silent_window_s``
of each other (or two of the rack's usual reporting intervals, where longer: agents that
report every minute are cut anywhere within that minute), one of them past its own
silence limit and the others within the window of theirs (each sent nothing for at least
half of its limit too, so a node that merely reports late never counts). The rack is
judged as the first of them passes its limit, so the rack's page and its first node's
alert come together and that node's alert is muted under it (``pipeline.inhibition``)
instead of paging on its own a few seconds before.

Pure logic: ``racks_down`` takes what the silence detector knows of each node now. A
processor reading every partition of its topic (or no bus) knows every node of a rack and
judges every rack. With several processors in a consumer group, each reads some of a
rack's nodes (frames are keyed by node): each rack is then judged by one member only, its
judge (the member owning the partition the rack's name maps to, as a node's does), on its
own nodes of the rack and on the others' last frame times as the shared store has them
(``Remote``: every member writes its frames there). ``SharedRacks`` keeps the judge's
findings: a rack found down and no longer found is resolved (``Finding.resolves``: the
judge may read none of the rack's frames itself), and while the store cannot be read the
last findings are held, neither resolved nor new (a live node's last frame, not read
again, would look silent).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame
from fleetwatch.models import KEEP_FIRING, Finding

RULE = "rack_silent"
NAMED = 16  # nodes named in the message; the rest are counted
# Nodes whose last frame's time the evidence gives, the first to stop first; the rest are
# counted (``last_frame_ts_left_out``): a "rack" that is a whole hall (one rack name for
# every node) would otherwise write thousands of fields to each store and receiver.
EVIDENCE_NODES = 64


@dataclass(frozen=True, slots=True)
class Heard:
    """A node as the silence detector knows it now: when it was last heard of (on the
    stream's clock), for how long it has sent nothing, and its own silence limit.
    ``waiting``: taken over and not heard yet (its frames may be on their way): known
    as the rack's, never counted silent."""

    cluster: str
    rack: str
    node: str
    heard: float
    gap: float
    limit: float
    waiting: bool = False
    interval: float = math.nan  # how often it reports (NaN: not known)


def racks_down(nodes: Iterable[Heard], now: float, c: DetectorsConfig) -> list[Finding]:
    """One ``rack_silent`` finding at ``now`` per rack whose nodes went silent together
    (see the module)."""
    racks: dict[tuple[str, str], list[Heard]] = defaultdict(list)
    for n in nodes:
        if n.rack and n.heard == n.heard:  # NaN: forgotten
            racks[(n.cluster, n.rack)].append(n)
    out = []
    for (cluster, rack), known in sorted(racks.items()):
        intervals = sorted(n.interval for n in known if n.interval == n.interval)
        usual = intervals[(len(intervals) - 1) // 2] if intervals else 0.0
        together = _together(known, max(c.rack_silent_window_s, 2 * usual))
        need = max(c.rack_silent_min_nodes, math.ceil(c.rack_silent_fraction * len(known)))
        if len(together) >= need:
            out.append(_finding(cluster, rack, together, len(known), now))
    return out


def _together(known: Sequence[Heard], window: float) -> list[Heard]:
    """The most nodes last heard of within ``window`` of each other, each silent for at
    least half its limit and within ``window`` of it, one of them past it ([]: none)."""
    quiet = sorted((n for n in known if not n.waiting
                    and n.gap >= max(n.limit - window, n.limit / 2)),
                   key=lambda n: (n.heard, n.node))
    best: list[Heard] = []
    start = 0
    for end in range(len(quiet)):
        while quiet[end].heard - quiet[start].heard > window:
            start += 1
        group = quiet[start:end + 1]
        if len(group) > len(best) and any(n.gap > n.limit for n in group):
            best = group
    return best


def _finding(cluster: str, rack: str, together: list[Heard], known: int,
             now: float) -> Finding:
    first, last = together[0].heard, together[-1].heard
    names = [n.node for n in together]
    named = ", ".join(names[:NAMED]) + (f" +{len(names) - NAMED}" if len(names) > NAMED
                                        else "")
    evidence: dict[str, float] = {
        "silent_nodes": len(together), "known_nodes": known,
        "last_frames_span_s": round(last - first, 1),
        "silent_s": round(max(n.gap for n in together), 1),
        # Ends with the nodes' frames back, as node_silent does: no keep_firing_s.
        KEEP_FIRING: 0.0}
    for n in together[:EVIDENCE_NODES]:
        evidence[f"last_frame_ts.{n.node}"] = round(n.heard, 3)
    if len(together) > EVIDENCE_NODES:
        evidence["last_frame_ts_left_out"] = len(together) - EVIDENCE_NODES
    return Finding(
        RULE, cluster, rack, "", None, now, float(len(together)),
        f"Rack {rack}: {len(together)} of its {known} nodes stopped sending together "
        f"(last frames {_utc(first)} to {_utc(last)}, {last - first:.0f} s apart): "
        f"{named}", "critical", 0.0, 0.0, evidence,
        "Check the rack's power (PDU, breaker, power feed) and its top-of-rack switch "
        "(link lights, the switch's log); the nodes' own node_silent alerts are muted "
        "under this one", "rack",
        # Down since the first of them passed its limit, as node_silent says for each.
        since=min(n.heard + n.limit for n in together))


def _utc(ts: float) -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime(ts))


def at_frames(findings: list[Finding], frames: Sequence[Frame]) -> list[Finding]:
    """``findings`` with each rack's repeated at the times of its frames in the batch (its
    nodes still sending): the alert lifecycle judges a rack alert at each of them, and a
    time without its finding would read as the rack back."""
    racks = {(f.cluster, f.rack) for f in findings if f.rule == RULE}
    if not racks:
        return findings
    times: dict[tuple[str, str], set[float]] = defaultdict(set)
    for fr in frames:
        if (fr.cluster, fr.rack) in racks:
            times[(fr.cluster, fr.rack)].add(fr.ts)
    out = list(findings)
    for f in findings:
        if f.rule == RULE:
            out += [replace(f, ts=ts) for ts in sorted(times[(f.cluster, f.rack)] - {f.ts})]
    return out


@dataclass(frozen=True, slots=True)
class Remote:
    """A node of a rack this member judges that another member of its group reads: its
    newest frame's time (on its own clock) as the shared store has it, and its partition
    (``lane``): it is judged on the time that partition's frames have reached in the store
    (``rack_remote``). ``settled``: its partition is stored to its end (the group's
    committed offset reaches it), so that frame is its last: it is judged on the judge's
    time, not only on how far its partition has got in the store."""

    cluster: str
    rack: str
    node: str
    ts: float
    settled: bool = False
    lane: Hashable = None  # its partition (None: not known; those are one lane)


def judged_clusters(own: Collection[str], named: Collection[str]) -> set[str]:
    """The clusters whose racks a member of a consumer group judges: those it has had frames
    from (``own``) and those its configuration names as its deployment's (``named``: every
    member shares it). No other: a cluster the store holds may be another deployment's,
    with its own topic and processors, that merely shares the store; so a member that has
    had no frame (every node maps to another member's partitions: a small fleet) and whose
    configuration names none judges none."""
    return set(own) | set(named)


def remote_at(node: Remote, seen: float, settled: float) -> float:
    """The time another member's ``node`` is judged at: ``seen`` (how far the store's view
    of the other members' nodes has got, never later than the judge's time: a view that
    lags, or a member catching up a backlog, makes no live node silent), or, where its
    partition is settled (nothing of it waited unstored when the store was read), the
    judge's own time at that read, ``settled`` (its nodes all stopping, the only ones of
    their member in a small fleet, stop ``seen`` too)."""
    return settled if node.settled else seen


def remote_heard(nodes: Iterable[Remote], seen: float, limit: float,
                 interval: float, settled: float | None = None) -> list[Heard]:
    """``nodes`` as the silence detector would know them (at ``remote_at``), each with the
    fleet's usual ``limit`` and ``interval`` (agents share a configuration; its own are its
    reader's)."""
    settled = seen if settled is None else settled
    return [Heard(n.cluster, n.rack, n.node, n.ts, remote_at(n, seen, settled) - n.ts,
                  limit, False, interval)
            for n in nodes if n.ts == n.ts]


@dataclass(slots=True)
class SharedRacks:
    """The findings of the racks a member judges when several members share its topic
    (see the module): each rack's latest, resolved when it is no longer found."""

    # (cluster, rack) -> its latest finding (None: an open alert taken over, not judged yet).
    down: dict[tuple[str, str], Finding | None] = field(default_factory=dict)

    def adopt(self, cluster: str, rack: str) -> None:
        """An open ``rack_silent`` alert of a rack this member now judges (loaded from the
        store after a rebalance or a restart): resolved here once its rack is found up."""
        self.down.setdefault((cluster, rack), None)

    def judge(self, found: list[Finding] | None, judged: Callable[[str, str], bool],
              now: float) -> list[Finding]:
        """The findings at ``now``: ``found`` (``racks_down`` of the racks judged; None: the
        store could not be read, the last findings held), and for each rack down before,
        judged now and not found, one that resolves its alert."""
        if found is None:
            return [replace(f, ts=now) for f in self.down.values() if f is not None]
        out = list(found)
        now_down = {(f.cluster, f.rack): f for f in found}
        for (cluster, rack) in sorted(set(self.down) - set(now_down)):
            if judged(cluster, rack):
                out.append(_back(cluster, rack, now))
            # Not judged here any more (a rebalance): its new judge took its alert over.
            del self.down[(cluster, rack)]
        self.down.update(now_down)
        return out


def _back(cluster: str, rack: str, now: float) -> Finding:
    return Finding(
        RULE, cluster, rack, "", None, now, 0.0,
        f"Rack {rack}: its nodes send again (or are no longer enough of it to be a rack down)",
        "critical", scope="rack", resolves=True)
