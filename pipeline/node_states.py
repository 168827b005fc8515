"""``node_state`` events: a node silent (its ``node_silent`` alert fired), stopped (its
agent's last frame said it stopped cleanly: ``frame.stopped``) and back (its first frame
after either), kept beside the GPUs' events so that a postmortem's timeline says
when a rebooted node went away and came back, not only when its alert changed.

Pure: no I/O, no clock; the processor writes the events with the batch. A node whose
alert this processor took over already firing (a restart, a partition moved) has its
"silent" event from the processor before; its "back" is written only if this processor
saw it go silent (it cannot tell a node back before the takeover from one back now)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from fleetwatch.frame import Frame, stopped
from fleetwatch.models.node_silence import FORGET_S
from fleetwatch.pipeline.store.base import Alert, Event

SILENT_RULE = "node_silent"
NodeKey = tuple[str, str]  # (cluster, node)


class NodeStates:
    """Turns a batch's frames and ``node_silent`` alert changes into ``node_state`` events
    (``value``: silent, stopped, back)."""

    def __init__(self) -> None:
        self._silent: dict[NodeKey, str] = {}   # nodes silent, not heard since: alert id
        self._back: dict[NodeKey, float] = {}   # when each came back, its alert open
        # Nodes whose agent stopped, not heard since: when (forgotten after ``FORGET_S``).
        self._stopped: dict[NodeKey, float] = {}

    def update(self, frames: Sequence[Frame], changes: Iterable[Alert],
               now: float | None = None) -> list[Event]:
        """The events of one batch: its frames first (they came before the judgement).
        ``now``: the processor's clock (None in a replay): a node's stop or return is
        recorded at its frame's time, never later than that (a frame stamped ahead)."""
        out = []
        for f in frames:
            key = (f.cluster, f.node)
            at = f.ts if now is None else min(f.ts, now)
            if stopped(f):
                if key not in self._stopped:
                    self._stopped = {k: t for k, t in self._stopped.items()
                                     if t > at - FORGET_S}  # left for good: forgotten
                    self._stopped[key] = at
                    out.append(Event(at, "node_state", f.cluster, f.rack, f.node, "host",
                                     value="stopped", text=f"agent stopped at {_utc(at)} "
                                     "(a clean stop: SIGTERM, SIGINT or SIGHUP); not paged"))
                continue
            since = self._stopped.pop(key, None)
            if since is not None:
                # Never before its stop: a stop stamped ahead of the frames after it (a
                # clock stepped back, a replay) would read as back before it stopped.
                out.append(Event(max(at, since), "node_state", f.cluster, f.rack, f.node,
                                 "host", value="back", text=f"{f.node} reports again"))
                continue
            if self._silent.pop(key, None) is not None:
                self._back[key] = at
                out.append(Event(at, "node_state", f.cluster, f.rack, f.node, "host",
                                 value="back", text=f"{f.node} reports again"))
        for a in changes:
            if a.rule != SILENT_RULE:
                continue
            key = (a.cluster, a.node)
            if a.state == "resolved":
                self._silent.pop(key, None)
                self._back.pop(key, None)
            elif a.state == "firing" and key not in self._silent and (
                    _fired_now(a) or a.updated_ts > self._back.get(key, a.updated_ts)):
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
        self._stopped = {k: t for k, t in self._stopped.items()
                         if k not in gone and k[1] not in gone}


def _fired_now(a: Alert) -> bool:
    """Did the alert fire in this change (not an update of one taken over firing)? Its fired
    time is its update's, or it opened at this update already firing: one opened past its
    for_s (a node silent since before a takeover) fired as of then (``AlertBook``), and its
    id carries the time it opened."""
    return a.fired_ts == a.updated_ts or a.id.endswith(f"/{int(a.updated_ts * 1000)}")


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))
