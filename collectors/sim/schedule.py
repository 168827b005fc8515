"""A labelled fault schedule for evaluations: every kind, in each of its modes.

Faults are spread over the fleet and over time; no two overlap on one subject
(a GPU, its node or its rack, with a cool-down gap after each), so each
finding can be matched to one fault.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from fleetwatch.collectors.sim.faults import KINDS, SPECS, Fault
from fleetwatch.collectors.sim.params import SimParams

# (shortest, longest) duration of each kind, seconds: long enough for a drift
# to ripen; xid79 and ecc_dbe last until the node is rebooted or the GPU reset.
DURATION_S: dict[str, tuple[float, float]] = {
    "cooling": (3600, 7200), "cooling_slow": (6 * 3600, 12 * 3600),
    "rack_cooling": (3600, 7200), "xid79": (3600, 3 * 3600), "ecc_dbe": (3600, 3 * 3600),
    "nvlink": (3600, 7200), "stuck": (1800, 3600), "straggler": (3600, 7200),
    "power_brake": (1800, 5400), "sensor": (3600, 3 * 3600), "node_silent": (600, 1800),
    "pcie_replay": (3600, 7200),
    # Until NCCL's watchdog kills the job: 10 minutes by PyTorch's default, 30-60 where
    # sites raise it.
    "job_hang": (600, 3600),
}
WARMUP_S = 1800.0   # let jobs and temperatures settle first
GAP_S = 1800.0      # cool-down after a fault before the same subject gets another


def random_schedule(params: SimParams, duration_s: float, seed: int | np.random.Generator = 0,
                    kinds: Iterable[str] = KINDS, per_kind: int = 1,
                    modes: Iterable[str] = ("drift", "sudden")) -> list[Fault]:
    """``per_kind`` faults of each kind in each of its modes (of ``modes``), sorted by start.

    A kind lasts a random time from ``DURATION_S`` (shortened to fit a short
    run). Raises ``ValueError`` when the fleet or the time is too small to
    place them all without overlap.
    """
    kinds = list(kinds)
    for k in kinds:
        if k not in SPECS:
            raise ValueError(f"random_schedule: unknown kind {k!r} (known: {', '.join(KINDS)})")
    if per_kind < 0 or not duration_s > WARMUP_S + 600:
        raise ValueError(f"random_schedule: per_kind must be >= 0 and duration_s over "
                         f"{WARMUP_S + 600:g} s, got {per_kind}, {duration_s}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    n, g, per_rack = params.nodes, params.gpus, params.nodes_per_rack
    racks = (n - 1) // per_rack + 1
    busy_node: list[list[tuple[float, float]]] = [[] for _ in range(n)]
    busy_rack: list[list[tuple[float, float]]] = [[] for _ in range(racks)]
    room = duration_s - WARMUP_S - 600
    out: list[Fault] = []
    wanted = [(k, m) for k in kinds for m in SPECS[k].modes if m in set(modes)]
    # Longest first: they are the hardest to place.
    wanted.sort(key=lambda km: -DURATION_S[km[0]][1])
    for kind, mode in wanted:
        lo, hi = DURATION_S[kind]
        scope = SPECS[kind].scope
        for _ in range(per_kind):
            for _attempt in range(500):
                dur = min(float(rng.uniform(lo, hi)), room * 0.5)
                start = WARMUP_S + float(rng.uniform(0.0, room - dur))
                span = (start, start + dur + GAP_S)
                if scope == "rack":
                    rack = int(rng.integers(racks))
                    nodes = range(rack * per_rack, min(n, (rack + 1) * per_rack))
                    if _free(busy_rack[rack], span) and all(_free(busy_node[i], span)
                                                            for i in nodes):
                        busy_rack[rack].append(span)
                        out.append(Fault(kind, None, None, start, dur, None, mode,  # type: ignore[arg-type]
                                         f"rack-{rack:02d}"))
                        break
                else:
                    node = int(rng.integers(n))
                    if _free(busy_node[node], span) and _free(busy_rack[node // per_rack], span):
                        busy_node[node].append(span)
                        gpu = int(rng.integers(g)) if scope == "gpu" else None
                        out.append(Fault(kind, f"node-{node:03d}", gpu, start, dur, None,
                                         mode))  # type: ignore[arg-type]
                        break
            else:
                raise ValueError(
                    f"random_schedule: no room for {per_kind} x {kind} ({mode}) without "
                    f"overlaps on {n} nodes in {duration_s / 3600:g} h: use more nodes, a "
                    f"longer duration or a smaller per_kind")
    return sorted(out, key=lambda f: (f.start_s, f.kind))


def _free(spans: list[tuple[float, float]], span: tuple[float, float]) -> bool:
    return all(span[1] <= s or e <= span[0] for s, e in spans)
