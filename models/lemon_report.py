"""The repeat offenders of a period, for the report: the worst nodes by lemon score.

Built from stored events alone (``offenders``), by the same ``LemonScore`` the processor
runs, with each node's XIDs of the period shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fleetwatch.models.lemon import LemonScore, StoredEvent


@dataclass(frozen=True, slots=True)
class Offender:
    """A node's lemon score at a time, and the XIDs it reported in the period shown."""

    cluster: str
    node: str
    score: float
    xids: dict[int, int]  # code -> how many in the period


def offenders(events: Sequence[StoredEvent], start_ts: float, end_ts: float,
              half_life_d: float = 7.0, top: int = 10) -> list[Offender]:
    """The worst nodes at ``end_ts`` by lemon score from stored events (read from
    ``end_ts`` less ``HISTORY_HALF_LIVES`` half-lives), with their XIDs of [start, end)."""
    lemon = LemonScore(half_life_d)
    lemon.load_events(e for e in events if e.ts < end_ts)
    out = []
    for cluster, node, score in lemon.ranking(end_ts, top):
        codes: dict[int, int] = {}
        for e in events:
            if (e.kind == "xid" and e.cluster == cluster and e.node == node
                    and start_ts <= e.ts < end_ts):
                codes[e.code] = codes.get(e.code, 0) + 1
        out.append(Offender(cluster, node, round(score, 2), dict(sorted(codes.items()))))
    return out
