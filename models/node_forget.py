"""A node gone for good (decommissioned, scaled down, renamed): after ``FORGET_S`` without
a frame ``NodeSilence`` forgets it, and says so (``Finding.resolves`` with ``FORGOTTEN``):
every open alert of the node ends then, and of its rack where it was the rack's last node,
as no frame will ever come to judge them (an XID latched as an autoscaler removed the
node stayed open for ever, re-sent to Alertmanager every minute)."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from fleetwatch.models import FORGOTTEN, Finding, OpenAlert
from fleetwatch.models.rack_silence import RULE as RACK_RULE
from fleetwatch.models.room import ROOM

# A node silent this long is forgotten: its open alerts resolve, saying so, and every
# per-node state of it is dropped (``Processor.retire``).
FORGET_S = 7 * 86400.0


def forgotten_node(cluster: str, rack: str, node: str, at: float, gap: float) -> Finding:
    """The finding that ends every open alert of a node not heard of for ``FORGET_S``
    (``gap``), at ``at``. Said of a node whose agent stopped cleanly too: its node_silent
    is not open, but an alert of its GPUs may be."""
    return Finding(
        "node_silent", cluster, rack, node, None, at, gap,
        f"no frame for {FORGET_S / 86400:.0f} days: {node} is forgotten (its open alerts end "
        "here; it is not back)", "critical",
        evidence={"silent_s": round(gap, 1), FORGOTTEN: 1.0},
        action="Nothing, if it was retired; if it should run, start its agent: its first "
               "frame makes it known again", scope="node", resolves=True)


class LoneRacks:
    """Open rack alerts taken over (a restart, a partition) of racks no node of which is
    known here: their nodes left before, so none will be forgotten to end them, and they
    were re-sent for ever. Each ends ``FORGET_S`` after it was last updated, unless a
    node of its rack (of its cluster, for a room's) is heard first: then its frames
    judge it, as any rack alert's."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, str], float] = {}  # (cluster, rack) -> last updated

    def __len__(self) -> int:
        return len(self._held)

    def adopt(self, alerts: Iterable[OpenAlert]) -> None:
        for a in alerts:
            if a.device.startswith("rack:") and a.state != "resolved":
                key = (a.cluster, a.device.removeprefix("rack:"))
                self._held[key] = max(self._held.get(key, a.updated_ts), a.updated_ts)

    def due(self, now: float, known: Collection[tuple[str, str]],
            clusters: Collection[str]) -> list[Finding]:
        """The findings that end those due at ``now``; ``known``: (cluster, rack) of every
        node known here; ``clusters``: those this processor has frames from."""
        known = set(known)
        alive = {cluster for cluster, _ in known}
        due: dict[tuple[str, str], float] = {}
        for (cluster, rack), ts in list(self._held.items()):
            if (cluster, rack) in known or rack == ROOM and cluster in alive:
                del self._held[(cluster, rack)]  # heard: judged on its frames
            elif now - ts >= FORGET_S and cluster in clusters:
                del self._held[(cluster, rack)]
                due[(cluster, rack)] = now
        return empty_racks(due, known, clusters)


def empty_racks(places: dict[tuple[str, str], float], left: Iterable[tuple[str, str]],
                clusters: Collection[str]) -> list[Finding]:
    """The findings that end the open rack alerts of the racks (and the rooms) whose last
    node was just forgotten. ``places``: (cluster, rack) -> when, of the nodes forgotten;
    ``left``: (cluster, rack) of every node still known; ``clusters``: those this
    processor has frames from (another cluster's racks are its own processors')."""
    left = set(left)
    alive = {cluster for cluster, _ in left}
    out: dict[tuple[str, str], Finding] = {}
    for (cluster, rack), at in sorted(places.items()):
        if cluster not in clusters:
            continue
        for r, empty in ((rack, (cluster, rack) not in left), (ROOM, cluster not in alive)):
            if empty:
                where = "the room" if r == ROOM else f"rack {r}"
                out[(cluster, r)] = Finding(
                    RACK_RULE, cluster, r, "", None, at, FORGET_S,
                    f"every node of {where} is forgotten (no frame for "
                    f"{FORGET_S / 86400:.0f} days): its open rack alerts end here", "critical",
                    evidence={FORGOTTEN: 1.0}, scope="rack", resolves=True)
    return list(out.values())
