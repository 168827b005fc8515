"""Nodes silent at the end of what a report or the energy page covers.

The ledger books a silence as missing GPU time only when the node reports again (the
integrator needs the frame that ends the gap), so a node that stopped before the month's
end (or, for a month to date, before now) and has not reported since has nothing in the
ledger for that time: neither energy nor missing time. Its watermark (``energy_state``,
the last frame integrated) says since when; the report and the dashboard name such nodes
and count their GPU time from then as not counted yet, and a month with one is not
complete. A node silent since before the month began has no row in it at all: the report
finds it among the nodes with rows in the 7 days before the month (``silent_before``; one
silent for longer is forgotten, as the detectors forget it) and counts its GPU time from
the month's start.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fleetwatch.pipeline.store.base import gpu_index
from fleetwatch.pipeline.store.ledger import (
    BUCKET_S,
    STATE_LOOKBACK_S,
    DeviceState,
    EnergyStore,
)


@dataclass(frozen=True)
class SilentNode:
    """A node whose newest frame (``since_ts``) is older than ``max_gap_s`` before the end
    of the span read: its GPU time from then is in no ledger row yet."""

    cluster: str
    node: str
    since_ts: float
    gpus: int          # the GPUs it had at its last frame

    def uncounted_gpu_s(self, upto_ts: float, from_ts: float = -math.inf) -> float:
        """Its GPU-seconds from its last frame (or ``from_ts``, the month's start, if
        later) up to ``upto_ts``, not in the ledger yet."""
        return self.gpus * max(0.0, upto_ts - max(self.since_ts, from_ts))


def silent_from_states(cluster: str, node: str, states: Sequence[DeviceState],
                       upto_ts: float, max_gap_s: float) -> SilentNode | None:
    """The node, where its watermarks say it sent no frame over the last ``max_gap_s``
    before ``upto_ts`` (pure); None if it did, or nothing is stored of it."""
    if not states:
        return None
    last = max(s.ts for s in states)
    if last >= upto_ts - max_gap_s:
        return None
    gpus = sum(1 for s in states if gpu_index(s.device) is not None)
    return SilentNode(cluster, node, last, gpus)


def silent_nodes(store: EnergyStore, nodes: Iterable[tuple[str, str]], upto_ts: float,
                 max_gap_s: float, now_ts: float) -> list[SilentNode]:
    """Of ``nodes`` ((cluster, node) pairs), those silent at ``upto_ts``, by their stored
    watermarks as of ``now_ts`` (a node back since then has its silence booked), oldest
    silence first. A store that keeps no watermarks names none."""
    state = getattr(store, "energy_state", None)
    out = []
    for cluster, node in sorted(set(nodes)) if state is not None else ():
        states, _ = state(cluster, node, now_ts)
        found = silent_from_states(cluster, node, states, upto_ts, max_gap_s)
        if found is not None:
            out.append(found)
    return sorted(out, key=lambda s: (s.since_ts, s.cluster, s.node))


def silent_before(store: EnergyStore, start_ts: float, known: Iterable[tuple[str, str]],
                  upto_ts: float, max_gap_s: float, cluster: str | None = None,
                  lookback_s: float = STATE_LOOKBACK_S) -> list[SilentNode]:
    """The nodes (of ``cluster``, or all) with rows in the ``lookback_s`` before
    ``start_ts`` but none from it on (not among ``known``, the month's), silent at
    ``upto_ts`` by their watermarks as of their newest such hour (a backend looks for a
    watermark only so far around the time asked: ``STATE_LOOKBACK_S``). A node name
    the month knows in one cluster is not looked for in another."""
    state = getattr(store, "energy_state", None)
    if state is None:
        return []
    names = {n for _, n in known}
    newest: dict[str, int] = {}
    for t in store.energy_totals(start_ts - lookback_s, start_ts, "node"):
        if t.name not in names:
            newest[t.name] = max(newest.get(t.name, 0), t.bucket_ts)
    out = []
    for node, h in sorted(newest.items()):
        for c in sorted({r.cluster for r in store.energy(h, h + BUCKET_S, cluster=cluster,
                                                         node=node)}):
            states, _ = state(c, node, h + BUCKET_S)
            found = silent_from_states(c, node, states, upto_ts, max_gap_s)
            if found is not None and found.since_ts < start_ts:
                out.append(found)
    return out


def uncounted_gpu_hours(silent: Iterable[SilentNode], upto_ts: float,
                        from_ts: float = -math.inf) -> float:
    return sum(s.uncounted_gpu_s(upto_ts, from_ts) for s in silent) / 3600


def describe(silent: Sequence[SilentNode], upto_ts: float, at: object, most: int = 5,
             from_ts: float = -math.inf) -> str:
    """In words, for a report's coverage and the dashboard's tile: which nodes, since when
    (``at``: a timestamp -> local time text), and how much GPU time is not counted yet."""
    if not silent:
        return ""
    named = [f"{s.node} ({s.cluster}) since {at(s.since_ts)}"  # type: ignore[operator]
             for s in silent[:most]]
    if len(silent) > most:
        named.append(f"{len(silent) - most:,} more")
    hours = uncounted_gpu_hours(silent, upto_ts, from_ts)
    return (f"{len(silent):,} node{'s' if len(silent) != 1 else ''} sent no frame since: "
            f"{', '.join(named)}; {hours:,.1f} GPU-hours of theirs from then are not counted "
            "yet (booked as missing when they report again)")
