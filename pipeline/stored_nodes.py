"""Which nodes the store knows, and when each last sent: read at a takeover
(``ownership``), by the rack judges and by the CLI, so that a node that sends nothing
is known all the same."""

from __future__ import annotations

from fleetwatch.frame import AGENT_STOPPED
from fleetwatch.pipeline.store.base import Store

# A node: its cluster and its name (names such as node001 repeat from cluster to cluster).
NodeKey = tuple[str, str]

# How far back the store is asked which nodes exist: a node silent for longer is
# taken as gone for good (as ``NodeSilence`` forgets one).
EXPECT_S = 7 * 86400.0
# Metrics every node's frames carry: the host's, and its GPUs' where it has no host part.
SEEN_METRICS = ("host_cpu_util_pct", "gpu_temp_c")
# The host metric of an agent's last frame when it stopped cleanly (``frame.AGENT_STOPPED``).
STOPPED_METRIC = AGENT_STOPPED


def last_seen(store: Store, since: float) -> dict[NodeKey, tuple[str, float]]:
    """(cluster, node) -> (rack, time of its newest stored sample), for nodes with one
    after ``since`` (seconds since the epoch)."""
    out: dict[NodeKey, tuple[str, float]] = {}
    for metric in SEEN_METRICS:
        for key, ts_ms, _ in store.latest(metric, int(since * 1000)):
            ts = ts_ms / 1000.0
            old = out.get((key.cluster, key.node))
            if old is None or ts > old[1]:
                out[(key.cluster, key.node)] = (key.rack, ts)
    return out


def stopped_at(store: Store, since: float) -> dict[NodeKey, float]:
    """(cluster, node) -> the time of its newest frame that said its agent stopped cleanly
    (``host_agent_stopped``), for nodes with one after ``since``: stopped still where that
    is its newest frame (``last_seen``), back where a later one came."""
    return {(key.cluster, key.node): ts_ms / 1000.0
            for key, ts_ms, value in store.latest(STOPPED_METRIC, int(since * 1000))
            if value >= 1.0}
