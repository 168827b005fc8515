"""The findings of the thermal peer rule (``ThermalPeers``, peers.py): a GPU hotter than
its peers at the same power beyond its own offset (a warning, critical while far out or
climbing fast), or a sensor reading far below them."""

from __future__ import annotations

import numpy as np

from fleetwatch.config import DetectorsConfig
from fleetwatch.models import Finding
from fleetwatch.models.batch import Batch, flagged, gpu_finding, thermal_keep
from fleetwatch.models.peer_rack import SCOPES
from fleetwatch.models.thermal import COOLING


def peer_findings(c: DetectorsConfig, b: Batch, rows: np.ndarray, out: list[Finding],
                  temp: np.ndarray, median: np.ndarray, offset: np.ndarray, excess: np.ndarray,
                  margin: np.ndarray, slope: np.ndarray, plag: np.ndarray, count: np.ndarray,
                  hot: np.ndarray, crit: np.ndarray, low: np.ndarray, climb: np.ndarray,
                  climb_s: np.ndarray, drift: np.ndarray, scope: np.ndarray) -> None:
    """The findings of ``ThermalPeers`` (peers.py) for the GPUs it judged ``hot``, ``crit``
    or ``low``, added to ``out``. ``slope`` is the rise that fired: the held climb's where
    ``climb`` is given (a fast climb made it critical), else the rise over about
    RISE_EVIDENCE_S; ``drift`` the sequential test's sum (``ThermalPeers._drift``), °C x
    minutes over peer_drift_allow_c; ``scope``: where its peers came from
    (``peer_rack.SCOPES``: its node, else its rack or cluster)."""
    for i, j in flagged(hot | crit | low):
        f = b.frames[rows[i]]
        g = f.gpus[j].index
        # Its distance from its peers, of which ``offset`` is allowed as its own (the
        # learned one, or max_offset_c while unlearned): the excess is what is left.
        raw = excess[i, j] + offset[i, j]
        ev = {"temp_c": temp[i, j], "peer_median_c": temp[i, j] - raw,
              "excess_c": excess[i, j], "margin_c": margin[i, j],
              "own_offset_c": offset[i, j], "power_lagged_w": plag[i, j],
              "peers": count[i, j], "excess_rise_c_per_min": slope[i, j],
              "excess_sum_c_min": drift[i, j]}
        if scope[i, j]:  # peers beyond its node: 1 its rack, 2 its cluster
            ev["peers_scope"] = scope[i, j]
        rushing = bool(np.isfinite(climb[i, j]))
        if rushing:
            ev |= {"climb_c": climb[i, j], "climb_s": climb_s[i, j]}
        where = f"GPU {g} on {f.node}"
        if low[i, j]:
            out.append(gpu_finding(
                f, g, "gpu_temp_sensor_low", excess[i, j],
                f"{where} reads {temp[i, j]:.0f} °C, {-excess[i, j]:.0f} °C below its "
                f"{count[i, j]} peers at the same power: its sensor is failing", "warning",
                c.sensor_for_s, ev,
                "The GPU's temperature reading cannot be trusted, so its thermal alerts "
                "are blind: reset the GPU; service it if the reading stays wrong"))
            continue
        text = (f"{where} at {temp[i, j]:.0f} °C, {raw:.0f} °C above its "
                f"{count[i, j]} peers{SCOPES[scope[i, j]]} at the same power"
                f"{_allowed(offset[i, j], excess[i, j])}"
                + (f", climbing {slope[i, j]:.0f} °C/min ({climb[i, j]:.0f} °C in the "
                   f"last {climb_s[i, j]:.0f} s)" if rushing else
                   f", rising {slope[i, j]:.1f} °C/min over the last minutes"
                   if slope[i, j] >= 0.1 else ""))
        action = COOLING + "; this GPU's heat path is failing while its peers' is not"
        # The warning holds for as long as the GPU runs hot; the critical one rides on
        # top while it is far out or climbing fast, so neither flaps into the other.
        ev = {**ev, **thermal_keep(c.thermal_keep_firing_s)}
        out.append(gpu_finding(f, g, "gpu_hot_vs_peers", excess[i, j], text, "warning",
                               c.peer_for_s, ev, action))
        if crit[i, j]:
            out.append(gpu_finding(f, g, "gpu_hot_vs_peers_critical", excess[i, j], text,
                                   "critical", 0.0, ev, action))


def _allowed(offset: float, excess: float) -> str:
    """What of a GPU's distance from its peers its own offset accounts for, in words."""
    if offset >= 0.5:
        return f" ({offset:.0f} °C allowed as its own offset, {excess:.0f} °C beyond)"
    if offset <= -0.5:
        return f" (held to {-offset:.0f} °C below them as its own offset, {excess:.0f} °C beyond)"
    return ""
