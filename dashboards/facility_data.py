"""What the facility page shows, per rack: IT power now, IT and facility energy over the
range, and the rack's inlet air and its GPUs' mean die temperature over time. Plain records,
no Dash; pure but for ``read_facility``, which makes the store calls.

Energy is the ledger's (the processor integrated it once: ``pipeline/energy``), summed per
rack and hour by the store (``energy_totals(..., "rack", per_cluster=True)``), facility kWh
priced with each cluster's hour's PUE as on the energy page. Power now is the newest
samples of the devices the integration books: GPU board power, CPU packages (RAPL), and
the rest of the node's static model (``energy.node_static_w``) per node reporting.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fleetwatch.carbon import J_PER_KWH, CarbonModel
from fleetwatch.dashboards.data import STALE_S
from fleetwatch.pipeline.store.base import Point, gpu_index
from fleetwatch.pipeline.store.ledger import EnergyTotal
from fleetwatch.pipeline.store.rack_series import (
    Rack,
    RackSeries,
    bin_step_ms,
    rack_means,
    series_of_points,
)

INLET, DIE = "host_inlet_temp_c", "gpu_temp_c"
GPU_POWER, CPU_POWER = "gpu_power_w", "host_cpu_power_w"


@dataclass(frozen=True)
class RackLine:
    """One rack's row of the table."""

    cluster: str
    rack: str
    power_w: float | None        # IT power now; None: nothing of the rack reports now
    gpus_now: int                # GPUs whose power is in power_w
    kwh: float                   # IT energy in the range's whole hours
    facility_kwh: float          # the same x each hour's PUE of the rack's cluster
    inlet_c: float | None        # the newest bin's mean inlet air
    die_c: float | None          # the newest bin's mean GPU die temperature


@dataclass(frozen=True)
class FacilityView:
    racks: tuple[RackLine, ...]
    inlet: RackSeries
    die: RackSeries
    room: dict[str, list[float | None]]      # cluster -> median of its racks' inlet, per bin
    hours: int = 0                           # whole ledger hours the energy covers
    seen: tuple[str, ...] = ()               # every cluster with a rack in view
    static_w: float = 0.0                    # energy.node_static_w counted per node
    nodes_now: int = 0

    @property
    def empty(self) -> bool:
        return not self.racks


def rack_energy(totals: Iterable[EnergyTotal], model: CarbonModel
                ) -> dict[Rack, tuple[float, float]]:
    """Per (cluster, rack): (IT kWh, facility kWh) of totals by rack per cluster, each hour
    at its cluster's PUE (carbon.clusters, carbon.pue_csv) as the energy page's tiles."""
    out: dict[Rack, list[float]] = {}
    for t in totals:
        kwh = t.energy_j / J_PER_KWH
        a = out.setdefault((t.cluster, t.name), [0.0, 0.0])
        a[0] += kwh
        a[1] += kwh * model.for_cluster(t.cluster).hour(t.bucket_ts).pue
    return {k: (v[0], v[1]) for k, v in out.items()}


def rack_power(gpu: Iterable[Point], cpu: Iterable[Point], now_ms: int,
               static_w: float = 0.0) -> dict[Rack, tuple[float, int, int]]:
    """Per (cluster, rack): (watts, GPUs, nodes) of the newest samples no older than
    ``STALE_S`` (a silent node draws nothing we know of): GPU board power, CPU package
    power, and ``static_w`` for each node with either."""
    since = now_ms - STALE_S * 1000
    watts: dict[Rack, float] = {}
    gpus: dict[Rack, int] = {}
    nodes: dict[Rack, set[str]] = {}
    for points, is_gpu in ((gpu, True), (cpu, False)):
        for key, ts, value in points:
            if ts < since or (is_gpu and gpu_index(key.device) is None):
                continue
            rack = (key.cluster, key.rack)
            watts[rack] = watts.get(rack, 0.0) + value
            gpus[rack] = gpus.get(rack, 0) + is_gpu
            nodes.setdefault(rack, set()).add(key.node)
    return {r: (w + static_w * len(nodes[r]), gpus[r], len(nodes[r])) for r, w in watts.items()}


def room_median(inlet: RackSeries) -> dict[str, list[float | None]]:
    """Per cluster and bin, the median of its racks' mean inlet air (the room's air as the
    ``room_inlet`` detector reads it, of the racks rather than the nodes)."""
    by: dict[str, list[list[float | None]]] = {}
    for (cluster, _), line in inlet.means.items():
        by.setdefault(cluster, []).append(line)
    out = {}
    for cluster, lines in sorted(by.items()):
        out[cluster] = [statistics.median(vs) if (vs := [v for v in col if v is not None])
                        else None for col in zip(*lines)]
    return out


def newest(line: Sequence[float | None]) -> float | None:
    return next((v for v in reversed(line) if v is not None), None)


def facility_view(energy: Mapping[Rack, tuple[float, float]],
                  power: Mapping[Rack, tuple[float, int, int]], inlet: RackSeries,
                  die: RackSeries, hours: int = 0, static_w: float = 0.0) -> FacilityView:
    """The table's rows, one per rack seen by any of the reads, by cluster and name."""
    racks = sorted({*energy, *power, *inlet.means, *die.means})
    rows = tuple(RackLine(
        c, r, power[c, r][0] if (c, r) in power else None,
        power[c, r][1] if (c, r) in power else 0, *energy.get((c, r), (0.0, 0.0)),
        newest(inlet.means.get((c, r), ())), newest(die.means.get((c, r), ())))
        for c, r in racks)
    return FacilityView(rows, inlet, die, room_median(inlet), hours,
                        tuple(sorted({c for c, _ in racks})), static_w,
                        sum(p[2] for p in power.values()))


def read_means(store: Any, metric: str, start_ms: int, end_ms: int, step_ms: int,
               cluster: str | None) -> RackSeries:
    """The store's ``rack_means`` (SQLite, VictoriaMetrics: binned where the data are), or,
    for a store without one, the same from its ``range``."""
    own = getattr(store, "rack_means", None)
    if own is not None:
        result: RackSeries = own(metric, start_ms, end_ms, step_ms, cluster=cluster)
        return result
    bins = max(0, -(-(end_ms - start_ms) // step_ms))
    points = store.range(metric, start_ms, end_ms, cluster=cluster)
    return rack_means(series_of_points(points), start_ms, step_ms, bins, cluster)


@dataclass(frozen=True)
class Window:
    """The range's bins: [start, end) cut in ``step`` (whole minutes), start on a step."""

    start_ms: int
    end_ms: int
    step_ms: int


def window(start_s: float, end_s: float) -> Window:
    step = bin_step_ms(int(start_s * 1000), int(end_s * 1000))
    start = int(start_s * 1000) // step * step
    return Window(start, int(end_s * 1000), step)


def read_facility(store: Any, model: CarbonModel, start_s: float, end_s: float, now_s: float,
                  cluster: str | None = None, static_w: float = 0.0) -> FacilityView:
    """The page's reads: two binned series, two newest-sample reads, one ledger sum."""
    w = window(start_s, end_s)
    inlet = read_means(store, INLET, w.start_ms, w.end_ms, w.step_ms, cluster)
    die = read_means(store, DIE, w.start_ms, w.end_ms, w.step_ms, cluster)
    now_ms = int(now_s * 1000)
    since = now_ms - int(STALE_S * 1000)

    gpu, cpu = store.latest(GPU_POWER, since), store.latest(CPU_POWER, since)
    first = start_s - start_s % 3600
    totals = store.energy_totals(first, end_s + 3600, "rack", per_cluster=True)
    seen = {p[0].cluster for p in (*gpu, *cpu)} | {t.cluster for t in totals}
    if cluster is not None:  # read whole, for the picker's clusters; shown of one
        gpu = [p for p in gpu if p[0].cluster == cluster]
        cpu = [p for p in cpu if p[0].cluster == cluster]
        totals = [t for t in totals if t.cluster == cluster]
    view = facility_view(rack_energy(totals, model), rack_power(gpu, cpu, now_ms, static_w),
                         inlet, die, len({t.bucket_ts for t in totals}), static_w)
    return dataclasses.replace(view, seen=tuple(sorted(seen | set(view.seen))))
