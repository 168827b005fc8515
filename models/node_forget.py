"""A node gone for good (decommissioned, scaled down, renamed): after ``FORGET_S`` without
a frame ``NodeSilence`` forgets it, and says so (``Finding.resolves`` with ``FORGOTTEN``):
every open alert of the node ends then, and of its rack where it was the rack's last node,
as no frame will ever come to judge them (an XID latched as an autoscaler removed the
node stayed open for ever, re-sent to Alertmanager every minute)."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from fleetwatch.models import FORGOTTEN, Finding
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
