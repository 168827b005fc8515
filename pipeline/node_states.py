"""``node_state`` events: a node silent (its ``node_silent`` alert fired) and back (its
first frame after that), kept beside the GPUs' events so that a postmortem's timeline says
when a rebooted node went away and came back, not only when its alert changed.

Pure: no I/O, no clock; the processor writes the events with the batch. A node whose
alert this processor took over already firing (a restart, a partition moved) has its
"silent" event from the processor before; its "back" is written only if this processor
saw it go silent (it cannot tell a node back before the takeover from one back now)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from fleetwatch.frame import Frame
from fleetwatch.pipeline.store.base import Alert, Event

SILENT_RULE = "node_silent"
NodeKey = tuple[str, str]  # (cluster, node)


class NodeStates:
    """Turns a batch's frames and ``node_silent`` alert changes into ``node_state`` events
    (``value``: silent, back)."""

    def __init__(self) -> None:
        self._silent: dict[NodeKey, str] = {}   # nodes silent, not heard since: alert id
        self._back: dict[NodeKey, float] = {}   # when each came back, its alert open

    def update(self, frames: Sequence[Frame], changes: Iterable[Alert]) -> list[Event]:
        """The events of one batch: its frames first (they came before the judgement)."""
        out = []
        for f in frames:
            key = (f.cluster, f.node)
            if self._silent.pop(key, None) is not None:
                self._back[key] = f.ts
                out.append(Event(f.ts, "node_state", f.cluster, f.rack, f.node, "host",
                                 value="back", text=f"{f.node} reports again"))
        for a in changes:
            if a.rule != SILENT_RULE:
                continue
            key = (a.cluster, a.node)
            if a.state == "resolved":
                self._silent.pop(key, None)
                self._back.pop(key, None)
            elif a.state == "firing" and key not in self._silent and (
                    a.fired_ts == a.updated_ts or a.updated_ts > self._back.get(key, a.updated_ts)):
                # Fired now, or silent again while its alert was still open (kept firing).
                self._silent[key] = a.id
                out.append(Event(a.updated_ts, "node_state", a.cluster, a.rack, a.node, "host",
                                 value="silent", text=a.message))
        return out

    def drop(self, nodes: Iterable[str | NodeKey]) -> None:
        """Forget nodes (their partition moved): the new owner judges them."""
        gone = set(nodes)
        for held in (self._silent, self._back):
            for key in [k for k in held if k in gone or k[1] in gone]:
                del held[key]
