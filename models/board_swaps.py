"""Which GPU slots had their board replaced, and when: for what a model file learned per
slot (thermal health's trained offset), which is the old board's where the training saw
the slot before its board was replaced.

A processor sees a replacement live (``GpuState.replaced``); one started after it, or
one that took the node's partition over, reads the ``gpu_replaced`` events the store
kept (``use_events``), once per node it meets, as the lemon scores do.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence

from fleetwatch.frame import Frame
from fleetwatch.models.lemon import EventReader

Key = tuple[str, str, int]  # (cluster, node, GPU index)
# How far back the stored replacements of a node are read: a model trained on older
# history than this is stale for other reasons.
RECALL_S = 90 * 86400.0
log = logging.getLogger(__name__)


class BoardSwaps:
    def __init__(self) -> None:
        self.at: dict[Key, float] = {}  # the slot's newest replacement
        self._events: EventReader | None = None
        self._read: set[tuple[str, str]] = set()  # nodes whose stored ones were read

    def use_events(self, events: EventReader | None) -> None:
        self._events = events

    def saw(self, keys: Iterable[Key], ts: float) -> None:
        for key in keys:
            self.at[key] = max(self.at.get(key, -math.inf), ts)

    def recall(self, frames: Sequence[Frame]) -> None:
        """The stored replacements of the nodes of ``frames`` not met before."""
        if self._events is None:
            return
        new = {(f.cluster, f.node) for f in frames} - self._read
        if not new:
            return
        self._read |= new  # tried once: a store that fails is not asked again
        end = max(f.ts for f in frames) + 60.0
        nodes = sorted({n for _, n in new})
        try:  # one read for many nodes (a start), one per node for a few (a partition moved)
            events = [e for node in ([None] if len(nodes) > 8 else nodes)
                      for e in self._events(end - RECALL_S, end, node=node,
                                            kinds=["gpu_replaced"])]
        except Exception as exc:  # a write-only store, or one that is away
            log.warning("boards replaced on %d node(s) could not be read from the store "
                        "(%s): a trained offset is used for their slots until one is seen",
                        len(new), exc)
            return
        for e in events:
            digits = e.device.removeprefix("gpu")
            if (e.cluster, e.node) in new and digits.isdigit():
                self.saw([(e.cluster, e.node, int(digits))], e.ts)

    def since(self, ts: float | None) -> list[Key]:
        """Slots whose board was replaced at or after ``ts`` (None: ever)."""
        if ts is None:
            return list(self.at)
        return [k for k, at in self.at.items() if at >= ts]

    def drop(self, nodes: Iterable[str]) -> None:
        gone = set(nodes)
        self.at = {k: v for k, v in self.at.items() if k[1] not in gone}
        self._read = {k for k in self._read if k[1] not in gone}
