"""Who reports as a node: two machines under one name (a cloned image), and a node whose
NVIDIA driver is away (its frames say NVML does not answer). Read by ``NodeSilence``, which
judges the node's silence; pure, no I/O."""

from __future__ import annotations

from collections.abc import Sequence

from fleetwatch.frame import Frame
from fleetwatch.models import Finding

CONFLICT_S = 120.0      # a node's GPU set switching twice this close: two agents, one name
# A node's NVML not answering (host_nvml_up 0) in this many frames in a row, over at least
# NVML_DOWN_S, is an alert: less is a driver reload (nvidia-smi -r, a module reload; the
# agent tries NVML again every 10 s), more leaves the node's GPUs unwatched.
NVML_DOWN_FRAMES = 3
NVML_DOWN_S = 30.0

# A node is its cluster and its name: names (node001) repeat from cluster to cluster.
NodeKey = tuple[str, str]


class _Identities:
    """The GPU UUIDs of a node's frames: the current set, and when it last switched. A
    GPU replaced (or a node rebuilt) switches it once; two agents that report under one
    name switch it back and forth, frame after frame."""

    __slots__ = ("current", "switches", "recent", "seq")

    def __init__(self, ident: tuple[str, ...], seq: int = 0) -> None:
        self.current = ident
        self.switches: list[float] = []
        self.recent: dict[tuple[str, ...], float] = {}
        self.seq = seq  # the agent's sequence number in the node's latest frame

    def switch(self, ident: tuple[str, ...], ts: float, seq: int = 0) -> bool:
        """The frame at ``ts`` shows another set: do two agents report as the node?

        A frame whose ``seq`` follows on from the node's previous one is the same agent's
        next frame (each agent counts from its own start, in ms): its GPU set changed
        on that machine (a driver away and back, a GPU lost), which is no second agent."""
        follows, self.seq = self.seq > 0 and seq == self.seq + 1, seq
        if follows:
            self.current = ident
            return False
        self.recent[self.current] = ts
        self.recent[ident] = ts
        self.current = ident
        self.switches = [t for t in self.switches if ts - t <= CONFLICT_S] + [ts]
        self.recent = {k: t for k, t in self.recent.items() if ts - t <= CONFLICT_S}
        return len(self.switches) >= 2


class NodeAgents:
    """Per node (cluster, name): the GPU UUIDs its frames show and the agent's sequence
    number (``_Identities``), and how long its frames have said NVML is away."""

    def __init__(self) -> None:
        # Per node: the GPU UUIDs each agent reporting as it showed, and when last. Two
        # seen within CONFLICT_S of each other: two machines share the node's name.
        self._identities: dict[NodeKey, _Identities] = {}
        # Per node whose frames say NVML is away: (its first such frame's time, how many
        # in a row, how many GPUs it listed before).
        self._nvml_down: dict[NodeKey, tuple[float, int, int]] = {}
        self._gpus_listed: dict[NodeKey, int] = {}  # GPUs in each node's latest NVML frame
        self._conflicts: dict[NodeKey, Frame] = {}  # seen since the last ``findings``

    def drop(self, key: NodeKey) -> None:
        self._identities.pop(key, None)
        self._nvml_down.pop(key, None)
        self._gpus_listed.pop(key, None)
        self._conflicts.pop(key, None)

    def see(self, f: Frame) -> None:
        """One frame of the node, in arrival order."""
        key = (f.cluster, f.node)
        ident = tuple([g.uuid for g in f.gpus])
        seen = self._identities.get(key)
        if seen is None:
            self._identities[key] = _Identities(ident, f.seq)
        elif ident != seen.current:
            if seen.switch(ident, f.ts, f.seq):
                self._conflicts[key] = f
        else:
            seen.seq = f.seq
        self._nvml_state(f)

    def findings(self, frames: Sequence[Frame]) -> list[Finding]:
        """The name conflicts seen since the last call, and the NVML-away nodes of
        ``frames`` (the batch just seen)."""
        out = [self._conflict(f) for f in self._conflicts.values()]
        self._conflicts = {}
        return out + self._nvml_findings(frames)

    def _conflict(self, f: Frame) -> Finding:
        seen = self._identities[(f.cluster, f.node)].recent
        shown = "; ".join(f"{len(k)} GPUs ({', '.join(k[:2])}{', ...' if len(k) > 2 else ''})"
                          if k else "no GPU" for k in sorted(seen))
        return Finding(
            "node_name_conflict", f.cluster, f.rack, f.node, None, f.ts, float(len(seen)),
            f"{len(seen)} agents report as {f.node}, their frames interleaved: {shown}",
            "warning", 0.0, 0.0, {"agents": len(seen)},
            "Give each machine its own name (node.node, FLEETWATCH_NODE_NODE; a cloned image "
            "or a copied config keeps the first one's): the node's series mix two machines' "
            "readings until then", "node")

    def _nvml_state(self, f: Frame) -> None:
        """Count the node's frames in a row that say NVML does not answer."""
        key = (f.cluster, f.node)
        if f.host.metrics.get("host_nvml_up") != 0.0:
            self._nvml_down.pop(key, None)
            if "host_nvml_up" in f.host.metrics:
                self._gpus_listed[key] = len(f.gpus)
            return
        since, n, had = self._nvml_down.get(key, (f.ts, 0, self._gpus_listed.get(key, 0)))
        self._nvml_down[key] = (min(since, f.ts), n + 1, had)

    def _nvml_findings(self, frames: Sequence[Frame]) -> list[Finding]:
        """A node of this batch whose NVML has not answered for ``NVML_DOWN_FRAMES`` frames
        in a row and ``NVML_DOWN_S`` or more, at its newest frame."""
        newest: dict[NodeKey, Frame] = {}
        for f in frames:
            key = (f.cluster, f.node)
            if key in self._nvml_down and not f.ts < newest.get(key, f).ts:
                newest[key] = f
        out = []
        for key, f in newest.items():
            since, n, had = self._nvml_down[key]
            name = f.node
            away = f.ts - since
            if n < NVML_DOWN_FRAMES or away < NVML_DOWN_S:
                continue
            gpus = f"its {had} GPUs" if had else "its GPUs"
            out.append(Finding(
                "node_nvml_down", f.cluster, f.rack, name, None, f.ts, away,
                f"{name}: NVML has not answered for {away:.0f} s ({n} frames): the NVIDIA "
                f"driver is unloaded, reset or reloading, or fails to start; {gpus} are "
                "unwatched (no temperature, power or XID from NVML) until it answers again",
                "warning", 0.0, 0.0, {"away_s": round(away, 1), "frames": float(n)},
                "Check the node's driver: nvidia-smi, the kernel log (dmesg) for a reset or "
                "an Xid, and the agent's log, which says what NVML answered", "node"))
        return out
