"""One node's cooling (``node_cooling``): most GPUs of one node above their thermal models.

The rack detector (``models.rack``) learns each GPU's model and judges the racks; a node
whose GPUs run above their models and above the rest of their rack, while the rack's
own finding does not hold, is that node's fans or intake. ``node_findings`` is that
judgement, pure: the detector hands it the models' residuals and keeps which node
findings hold.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping

import numpy as np

from fleetwatch.config import DetectorsConfig
from fleetwatch.models import Finding
from fleetwatch.models.batch import Batch
from fleetwatch.models.gpu_slots import GpuTable

NODE_WARMUP = 3.0    # node findings: models learned this many warm-ups
# After a rack's finding ends, its GPUs' heat sinks still carry the heat of the fault for
# a few of their time constants (about 23 s on the parts simulated: five shed 99 % of it):
# its nodes are not judged on their own (node_cooling) for this long, or the slowest to
# cool reads as a node fault at the repair.
SETTLE_S = 120.0


def node_findings(c: DetectorsConfig, t: GpuTable, b: Batch, codes: np.ndarray,
                  slots: np.ndarray, rise: np.ndarray, averaged: np.ndarray,
                  flagged: Collection[int], cleared: Mapping[int, float]
                  ) -> tuple[dict[tuple[str, str], Finding], int]:
    """Node findings by (cluster, node): most GPUs of one node above their models (its
    fans, its air) and above the rest of its rack, whose finding does not hold (rack codes
    ``flagged``) nor ended less than ``SETTLE_S`` ago (``cleared``: when each last ended);
    and how many GPU samples were judged. Above the rest of the rack is judged on the
    residuals' averages, the same time scale for every GPU (a rack warming reaches its
    settled GPUs' residuals first)."""
    have = (slots >= 0) & b.present
    s = np.where(have, slots, 0)
    # A node's few GPUs are a smaller sample than a rack's: only models that have
    # learned NODE_WARMUP times as long, over at least half of the node's GPUs (a
    # model fresh from its warm-up can be degrees off at a power it has not seen).
    ready = np.isfinite(rise) & (t["learned"][:len(rise)] >= NODE_WARMUP * c.warmup_s)
    mine = ready[s] & have
    judged = mine.sum(axis=1)
    enough = (judged >= 2) & (2 * judged >= have.sum(axis=1))
    rack = t["rack"][:len(rise)]
    node = t["node"][:len(rise)]
    out: dict[tuple[str, str], Finding] = {}
    for row in np.flatnonzero(enough).tolist():  # the last frame of a node counts
        f = b.frames[row]
        key = (f.cluster, f.node)
        code = int(codes[row])
        if code in flagged or (  # the rack's cooling explains it, or just did
                b.ts[-1] - cleared.get(code, -math.inf) < SETTLE_S):
            continue
        # Above the rest of its rack (a rack's air warming raises all its nodes).
        own = s[row][mine[row]]
        others = np.flatnonzero(np.isfinite(averaged) & (rack == codes[row])
                                & (node != node[own[0]]))
        base = max(0.0, float(np.median(averaged[others]))) if len(others) else 0.0
        above = (rise[own] > c.rack_margin_c) \
            & (np.nan_to_num(averaged[own], nan=-np.inf) - base > c.rack_margin_c)
        many = int(above.sum())
        if many < 2 or many < c.rack_fraction * len(own):
            continue
        value = float(np.median(rise[own[above]]))
        out[key] = Finding(
            "node_cooling", f.cluster, f.rack, f.node, None, f.ts, value,
            f"{f.node}: {many} of {len(own)} GPUs run {value:.0f} °C above their "
            "usual temperature at their power, together", "critical",
            c.rack_for_s, 0.0, {"gpus_hot": many, "gpus_judged": len(own),
                                "median_rise_c": round(value, 2),
                                "rack_median_rise_c": round(base, 2)},
            "Check the node's fans and airflow (fan faults in the BMC log, blanking "
            "panels, cables blocking the intake) and its inlet air; drain it if it "
            "keeps rising", "node")
    return out, int(mine[enough].sum())
