"""What a node's trouble is worth toward servicing it: points per XID, lost GPU, slowdown.

The scoring rules of the lemon detector (``models.lemon``), pure and without state
but for ``Incidents``: an incident is what one GPU reports within ``INCIDENT_S`` of
its first XID, counted once by its worst code; application XIDs (the ``info`` class of
the XID table) score nothing; a GPU lost right after its XID 79 is that incident, not
another. ``train`` scores stored history by the same rules.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from fleetwatch.xids import describe, xid_table

# Points per XID incident by its worst code: hardware faults weigh; other codes of the
# XID table score 1, its application (info) codes nothing (``xid_points``).
DEFAULT_XID_POINTS: dict[int, float] = {
    79: 5.0, 48: 3.0, 95: 3.0, 94: 2.0, 64: 2.0, 63: 1.0, 74: 2.0, 92: 1.0, 119: 2.0,
    120: 2.0, 61: 2.0, 62: 2.0}
# One GPU's XIDs within this long of the incident's first are one incident.
INCIDENT_S = 900.0
LOST_POINTS = 5.0
THERMAL_SLOWDOWN_POINTS = 0.5
# A GPU that falls off the bus reports XID 79 and is then lost: one incident, counted
# once (by its XID) when the loss follows the XID within this time.
FELL_OFF_S = 3600.0


def lost_points(fell_ts: float | None, lost_ts: float) -> float:
    """Points for a GPU lost at ``lost_ts`` whose last XID 79 was at ``fell_ts``."""
    return 0.0 if fell_ts is not None and 0.0 <= lost_ts - fell_ts <= FELL_OFF_S else LOST_POINTS


def xid_points(code: int) -> float:
    """An XID's points toward servicing the node: none for an application XID."""
    if code in DEFAULT_XID_POINTS:
        return DEFAULT_XID_POINTS[code]
    return 0.0 if describe(code).severity == "info" else 1.0


# The XIDs of the table that score nothing: the rebuild asks the store to leave them out,
# since a job's storm stores millions (2M took 13 s and 1.3 GB to read whole).
UNSCORED_XIDS = tuple(sorted(c for c in xid_table() if xid_points(c) == 0.0))


class Incidents:
    """XID points per incident: one GPU's XIDs within ``INCIDENT_S`` of the incident's first
    count once, by the worst code (a worse code later adds only the difference)."""

    def __init__(self, points: Callable[[int], float] = xid_points) -> None:
        self._points = points
        self._open: dict[tuple[str, str, str], tuple[float, float]] = {}  # -> (start, counted)

    def add(self, gpu: tuple[str, str, str], ts: float, code: int) -> float:
        """The points this XID adds (0 for a repeat within its incident). A code that
        scores nothing (an application XID) opens no incident: a job's storm neither
        splits a hardware incident nor depends on the rebuild reading it (it does not)."""
        p = self._points(code)
        if p <= 0.0:
            return 0.0
        start, counted = self._open.get(gpu, (math.nan, 0.0))
        if not 0.0 <= ts - start < INCIDENT_S:  # a new incident (nan: the GPU's first)
            self._open[gpu] = (ts, p)
            return p
        if p > counted:
            self._open[gpu] = (start, p)
            return p - counted
        return 0.0

    def drop(self, nodes: set[str]) -> None:
        for gpu in [k for k in self._open if k[1] in nodes]:
            del self._open[gpu]
