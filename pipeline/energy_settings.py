"""The energy ledger's settings, and when a GPU runs over its TDP (``pipeline.energy``)."""

from __future__ import annotations

from dataclasses import dataclass

from fleetwatch.config import EnergyConfig
from fleetwatch.frame import GpuReading
from fleetwatch.parts import tdp_w


@dataclass(frozen=True)
class EnergySettings:
    max_gap_s: float = 60.0        # longer intervals are missing time, not integrated
    idle_sm_ratio: float = 0.05    # SM activity under this: idle
    # Time above TDP is counted where board power exceeds it by more than TDP_MARGIN.
    # 0: each GPU's own default power limit (NVML's), else its part's TDP (fleetwatch.parts),
    # else its enforced power limit.
    tdp_w: float = 0.0
    node_static_w: float = 0.0     # the rest of the node (fans, NICs, DRAM, disks)
    # A counter step implying more than this mean power is not trusted (a reset seen
    # as a jump, a counter from another GPU): the interval uses the power samples.
    max_plausible_w: float = 3000.0
    # Where the frame carries the GPU's enforced power limit, the bound is this many times
    # the limit (never above max_plausible_w): the driver holds the board's mean power at
    # the limit, so a 400 W A100 whose counter says 2,800 W glitched, though 2,800 W is
    # under the absolute cap. The margin covers excursions above the limit and the
    # counter's update granularity on short intervals.
    limit_ratio: float = 1.5
    # A counter step under this fraction of the smaller power sample times the interval:
    # the counter stood still (a stale DCGM field, a hung counter). A powered GPU never
    # draws nothing (an idle A100 ~50 W), and a real step under a quarter of both ends'
    # power needs the board to drop far below both samples for most of the interval; a
    # counter updated less often than it is read is caught here too, and comes out exact
    # (its catch-up pays back what power booked).
    stale_ratio: float = 0.25
    # A node's clock that moved further than this between two frames (forward or back)
    # moved by a clock error (a frame stamped in 2099, a clock set years off), not by an
    # outage: the node starts anew there, nothing is booked for the jump. Missing time is
    # booked hour by hour, so this also bounds the rows one interval can write.
    max_jump_s: float = 7 * 86400.0
    # Across a gap longer than max_gap_s, the energy counter's step is booked where its mean
    # power is at most this many times the GPU's enforced power limit: the driver holds
    # the board's mean power at the limit over minutes, so the margin is small (the
    # limit_ratio above covers a short interval's excursions and update granularity).
    gap_limit_ratio: float = 1.05

    @classmethod
    def from_config(cls, c: EnergyConfig) -> EnergySettings:
        return cls(c.max_gap_s, c.idle_sm_ratio, c.tdp_w, c.node_static_w)


# Board power read at the cap scatters around it: a real H100 held at its 700 W cap read
# 614 to 703 W (tests/data/recorded/h100_gemm_load.jsonl.gz). A GPU runs above its TDP
# when it draws more than this fraction over it (an A100 at a 500 W limit: 25% over).
TDP_MARGIN = 0.02


def over_tdp_w(g: GpuReading, tdp: float) -> float | None:
    """The board power above which ``g`` runs over its TDP: ``tdp`` (config) when set,
    else the board's own default power limit where NVML reports it (a SKU may be rated
    above its family's data sheet: an A100-SXM4-80GB's default is 500 W, the table's 400 W),
    else its part's TDP, else its enforced power limit; None when none is known."""
    rated = tdp or g.metrics.get("gpu_power_default_limit_w") or tdp_w(g.model) \
        or g.metrics.get("gpu_power_limit_w")
    return rated * (1.0 + TDP_MARGIN) if rated else None
