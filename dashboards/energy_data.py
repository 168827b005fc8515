"""What the energy and utilization pages show from the ledger: plain records, no Dash.

The processor integrated the energy once; these functions only add up the
store's hourly totals (``energy_totals``) and price each hour with the carbon
model. Pure, but for ``read_energy``, which makes the store calls.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from fleetwatch.carbon import J_PER_KWH, CarbonModel
from fleetwatch.carbon_warnings import hours_warning
from fleetwatch.pipeline.store.base import gpu_index
from fleetwatch.pipeline.store.ledger import (
    EnergyRow,
    EnergyStore,
    EnergyTotal,
    TopLine,
    bucket_floor,
    top_from_totals,
)
from fleetwatch.report_month import (
    HourData,
    data_began,
    day_start,
    hour_share,
    ledger_span,
    longest_measured,
    month_of,
    month_projection,
    zone,
)
from fleetwatch.report_silent import describe, silent_nodes
from fleetwatch.report_sums import PER_CLUSTER

NO_NAME = {"job": "(no job)", "user": "(no user)", "cluster": "(none)"}


@dataclass(frozen=True)
class Share:
    """One job's, user's or cluster's part of a window."""

    name: str
    kwh: float
    co2e_kg: float
    gpu_hours: float
    idle_time_share: float     # of its GPU time: the "idle share" of capacity figures
    idle_energy_share: float   # of its GPU energy
    cluster: str = ""          # a job's (ids restart per cluster); "" for a user or cluster


@dataclass(frozen=True)
class HourlyIdle:
    """The idle share of GPU time per hour, per series, with the time no one knows about.

    An hour without GPU time (a silent node: the ledger has only its missing seconds, or no
    row at all) has no idle share: None, a gap, never 0 % idle (that reads "fully busy")."""

    hours: tuple[int, ...]                  # every hour from the first to the last
    idle: dict[str, list[float | None]]     # name -> idle seconds / GPU seconds with data
    missing: dict[str, list[float]]         # name -> share of GPU time without data
    missing_h: dict[str, list[float]]       # name -> GPU-hours without data


def hourly_idle(totals: Iterable[EnergyTotal], name: str | None = None) -> HourlyIdle:
    """Per series (``t.name``, or all as one ``name``), each hour's idle share of the GPU
    time with data and the share of the GPU time without data (``missing_s``)."""
    acc: dict[tuple[str, int], list[float]] = {}
    for t in totals:
        a = acc.setdefault((name or t.name or NO_NAME["cluster"], t.bucket_ts), [0.0] * 3)
        a[0] += t.idle_s
        a[1] += t.gpu_s
        a[2] += t.missing_s
    if not acc:
        return HourlyIdle((), {}, {}, {})
    first, last = min(h for _, h in acc), max(h for _, h in acc)
    hours = tuple(range(first, last + 3600, 3600))
    idle: dict[str, list[float | None]] = {}
    missing: dict[str, list[float]] = {}
    missing_h: dict[str, list[float]] = {}
    for series in sorted({n for n, _ in acc}):
        rows = [acc.get((series, h), [0.0, 0.0, 0.0]) for h in hours]
        idle[series] = [i / g if g else None for i, g, _ in rows]
        missing[series] = [m / (g + m) if g + m else 0.0 for _, g, m in rows]
        missing_h[series] = [m / 3600 for _, _, m in rows]
    return HourlyIdle(hours, idle, missing, missing_h)


@dataclass(frozen=True)
class EnergyView:
    hours: tuple[int, ...]                    # bucket starts, oldest first
    by_cluster: dict[str, list[float]]        # cluster -> kWh per hour (aligned to hours)
    co2e_by_cluster: dict[str, list[float]]   # cluster -> kg CO2e per hour
    idle: HourlyIdle                          # GPU idle time share per hour, all clusters
    jobs: tuple[Share, ...]
    users: tuple[Share, ...]
    clusters: tuple[Share, ...]
    kwh: float
    co2e_kg: float
    # None where no hour of today (of the month) has data: unknown, not zero use.
    today_kwh: float | None
    today_co2e_kg: float | None
    month_kwh: float | None
    month_co2e_kg: float | None
    month_projection_kg: float | None
    idle_kwh: float
    gpu_kwh: float
    missing_gpu_hours: float
    over_tdp_gpu_hours: float
    projection_withheld: str = ""             # why there is no projection
    seen: tuple[str, ...] = ()                # every cluster in the range, whatever shown
    tz: str = "UTC"                           # whose days and month today and month are
    # Facility kWh (IT kWh x each cluster's hour's PUE), beside the IT kWh above: the
    # figure a facility meter compares with, and the report leads with.
    facility_kwh: float = 0.0
    # The (cluster, hour) pairs of the range: what a warning of a series' fallback hours
    # prices each with its cluster's grid (``series_warning``).
    priced: tuple[tuple[str, int], ...] = ()
    # The nodes with no frame for longer than energy.max_gap_s, in words: their time since
    # is in no ledger row yet, neither energy nor missing (``report_silent``); "" if none.
    silent: str = ""
    today_facility_kwh: float | None = None
    month_facility_kwh: float | None = None


def _factors(model: CarbonModel, hours: Iterable[int]) -> dict[int, float]:
    """kg CO2e per IT kWh for each hour (PUE x intensity)."""
    out = {}
    for h in hours:
        f = model.hour(h)
        out[h] = f.pue * f.intensity_g_per_kwh / 1000
    return out


def _cluster_factors(model: CarbonModel, totals: Iterable[EnergyTotal], by_cluster: bool = True
                     ) -> dict[tuple[str, int], float]:
    """kg CO2e per IT kWh for each (cluster, hour) of totals by cluster (else of totals
    per cluster: their ``cluster``): a cluster of carbon.clusters takes its own grid and
    PUE, as in the report."""
    out = {}
    for t in totals:
        c = t.name if by_cluster else t.cluster
        if (c, t.bucket_ts) not in out:
            f = model.for_cluster(c).hour(t.bucket_ts)
            out[c, t.bucket_ts] = f.pue * f.intensity_g_per_kwh / 1000
    return out


def _cluster_shares(totals: Sequence[EnergyTotal], fc: dict[tuple[str, int], float]
                    ) -> tuple[Share, ...]:
    """``shares`` by cluster, each cluster's hours priced with its own factors."""
    return shares(totals, "cluster", {}, limit=50, factor=lambda t: fc[t.name, t.bucket_ts])


def shares(totals: Sequence[EnergyTotal], kind: str, factors: dict[int, float],
           limit: int = 15, factor: Callable[[EnergyTotal], float] | None = None
           ) -> tuple[Share, ...]:
    """``factor``: a total's kg CO2e per kWh, when not ``factors`` of its hour."""
    acc: dict[str, list[float]] = {}
    for t in totals:
        a = acc.setdefault(t.name or NO_NAME.get(kind, ""), [0.0] * 6)
        kwh = t.energy_j / J_PER_KWH
        a[0] += kwh
        a[1] += kwh * (factors[t.bucket_ts] if factor is None else factor(t))
        a[2] += t.gpu_s / 3600
        a[3] += t.idle_j
        a[4] += t.gpu_energy_j
        a[5] += t.idle_s / 3600
    out = [Share(n, a[0], a[1], a[2], a[5] / a[2] if a[2] else 0.0,
                 a[3] / a[4] if a[4] else 0.0) for n, a in acc.items()]
    out.sort(key=lambda s: -s.kwh)
    return tuple(out[:limit])


def energy_view(window: Sequence[EnergyTotal], month: Sequence[EnergyTotal],
                jobs: Sequence[EnergyTotal], users: Sequence[EnergyTotal],
                model: CarbonModel, now_s: float, began_ts: float | None = None,
                longest: Mapping[int, float] | None = None) -> EnergyView:
    """``window``/``month``: totals by cluster over the picked range and over this month;
    ``began_ts``: when this month's data began (``report_month.data_began``), inside its oldest
    hour (None: that hour's start); ``longest``: per hour read, the longest time one device
    was measured in it (``report_month.longest_measured``)."""
    hours = tuple(sorted({t.bucket_ts for t in window}))
    index = {h: i for i, h in enumerate(hours)}
    # jobs and users: totals per cluster, or with no cluster (the global grid prices them).
    fj = _cluster_factors(model, (*jobs, *users), by_cluster=False)
    # window and month are totals by cluster: each priced with its cluster's grid and PUE.
    fc = _cluster_factors(model, (*window, *month))
    by_cluster: dict[str, list[float]] = {}
    co2e: dict[str, list[float]] = {}
    for t in window:
        name = t.name or NO_NAME["cluster"]
        i = index[t.bucket_ts]
        kwh = t.energy_j / J_PER_KWH
        by_cluster.setdefault(name, [0.0] * len(hours))[i] += kwh
        co2e.setdefault(name, [0.0] * len(hours))[i] += kwh * fc[t.name, t.bucket_ts]
    # Today and this month of model.timezone (energy.timezone): an hour a half-hour
    # offset cuts at local midnight counts for its share (report_month.hour_share).
    tz = model.timezone
    start, end = month_of(now_s, tz)
    day0 = day_start(now_s, tz)
    today = [(t, hour_share(t.bucket_ts, day0, end)) for t in month
             if hour_share(t.bucket_ts, day0, end) > 0]
    in_month = [(t, hour_share(t.bucket_ts, start, end)) for t in month]
    m_kwh = sum(t.energy_j * w for t, w in in_month) / J_PER_KWH
    pue = {(t.name, t.bucket_ts): model.for_cluster(t.name).hour(t.bucket_ts).pue
           for t in (*window, *month)}

    def facility(rows: Iterable[tuple[EnergyTotal, float]]) -> float:
        return sum(t.energy_j * w * pue[t.name, t.bucket_ts] for t, w in rows) / J_PER_KWH
    m_co2 = sum(t.energy_j * w / J_PER_KWH * fc[t.name, t.bucket_ts] for t, w in in_month)
    first = max(min((t.bucket_ts for t in month), default=start), began_ts or 0.0)
    longest = longest or {}
    hours_data = [HourData(t.bucket_ts, t.gpu_s, t.missing_s, t.energy_j,
                           longest.get(t.bucket_ts)) for t in month]
    projection, withheld = month_projection(m_co2, hours_data, first, now_s, start, end)
    return EnergyView(
        hours=hours, by_cluster=by_cluster, co2e_by_cluster=co2e,
        idle=hourly_idle(window, "all clusters"),
        jobs=shares(jobs, "job", {}, factor=lambda t: fj[t.cluster, t.bucket_ts]),
        users=shares(users, "user", {}, factor=lambda t: fj[t.cluster, t.bucket_ts]),
        clusters=_cluster_shares(window, fc),
        kwh=sum(sum(v) for v in by_cluster.values()),
        co2e_kg=sum(sum(v) for v in co2e.values()),
        today_kwh=sum(t.energy_j * w for t, w in today) / J_PER_KWH if today else None,
        today_co2e_kg=(sum(t.energy_j * w / J_PER_KWH * fc[t.name, t.bucket_ts]
                           for t, w in today) if today else None),
        month_kwh=m_kwh if month else None, month_co2e_kg=m_co2 if month else None,
        month_projection_kg=projection, projection_withheld=withheld,
        idle_kwh=sum(t.idle_j for t in window) / J_PER_KWH,
        gpu_kwh=sum(t.gpu_energy_j for t in window) / J_PER_KWH,
        missing_gpu_hours=sum(t.missing_s for t in window) / 3600,
        over_tdp_gpu_hours=sum(t.over_tdp_s for t in window) / 3600, tz=tz,
        facility_kwh=facility((t, 1.0) for t in window),
        priced=tuple(sorted({(t.name, t.bucket_ts) for t in window})),
        today_facility_kwh=facility(today) if today else None,
        month_facility_kwh=facility(in_month) if month else None)


def series_warning(model: CarbonModel, hours: Iterable[int],
                   priced: Iterable[tuple[str, int]] = ()) -> str:
    """The report's warning when a configured hourly series (carbon.intensity_csv,
    carbon.pue_csv, a cluster's own of carbon.clusters) misses these hours and the fallback
    constant priced them; "" if none. ``priced``: the (cluster, hour) pairs shown, each
    priced with its cluster's grid as the report prices it (``carbon_warnings``); without
    them, ``hours`` on the global grid."""
    pairs = list(priced) or [("", h) for h in hours]
    return hours_warning(model, pairs)


def top_shares(lines: Sequence[TopLine], kind: str) -> tuple[Share, ...]:
    return tuple(Share(t.name or NO_NAME.get(kind, ""), t.energy_j / J_PER_KWH, t.co2e_kg,
                       t.gpu_s / 3600, t.idle_s / t.gpu_s if t.gpu_s else 0.0,
                       t.idle_j / t.gpu_energy_j if t.gpu_energy_j else 0.0, t.cluster)
                 for t in lines)


def totals_from_rows(rows: Iterable[EnergyRow], by: str, per_cluster: bool = False
                     ) -> list[EnergyTotal]:
    """Per hour and value of ``by`` (and cluster, ``per_cluster``), the sums
    ``energy_totals`` gives (GPU energy, GPU seconds and missing time of GPU devices
    only), from ledger rows."""
    acc: dict[tuple[int, str, str], list[float]] = {}
    for r in rows:
        gpu = gpu_index(r.device) is not None
        key = (r.bucket_ts, getattr(r, by), r.cluster if per_cluster else "")
        a = acc.setdefault(key, [0.0] * 7)
        for i, v in enumerate((r.energy_j, r.idle_j, r.energy_j if gpu else 0.0,
                               r.seconds if gpu else 0.0, r.idle_s,
                               r.missing_s if gpu else 0.0, r.over_tdp_s)):
            a[i] += v
    return [EnergyTotal(h, name, *a, cluster=c) for (h, name, c), a in sorted(acc.items())]


def read_energy(store: EnergyStore, model: CarbonModel, start_s: float, end_s: float,
                now_s: float, limit: int = 15, cluster: str | None = None,
                max_gap_s: float = 60.0) -> EnergyView:
    """The window and the month by cluster per hour; the window's top jobs and users, which
    the store sums (a month holds ~100,000 job-hours). ``cluster``: of that cluster only
    (its top jobs and users then summed from its rows: job ids repeat across clusters).
    ``max_gap_s``: a node of the month silent longer is named (``silent``)."""
    first = start_s - start_s % 3600
    everywhere = store.energy_totals(first, end_s, "cluster")
    window = [t for t in everywhere if cluster is None or t.name == cluster]
    # The ledger hours that overlap this month of model.timezone (whole UTC hours).
    m0, m1 = ledger_span(*month_of(now_s, model.timezone))
    if first <= m0 and end_s >= m1:
        month = [t for t in window if m0 <= t.bucket_ts < m1]
    else:  # to the month's end: data stamped after now (a clock ahead) is flagged
        month = [t for t in store.energy_totals(m0, m1, "cluster")
                 if cluster is None or t.name == cluster]
    # Each (cluster, hour) of the window: what its jobs' and users' energy is priced at.
    fc = _cluster_factors(model, window)
    # The month's oldest hour may have begun with data at minute 40: its rows say when.
    oldest = min((t.bucket_ts for t in month), default=None)
    began = (data_began(store.energy(oldest, oldest + 3600, cluster=cluster), now_s)
             if oldest is not None else None)
    longest: dict[int, float] = {}
    for h in span_edges(month):
        longest.update(longest_measured(store.energy(h, h + 3600, cluster=cluster)))
    view = energy_view(window, month, (), (), model, now_s, began, longest)
    # As the report keys them (report_sums.PER_CLUSTER): a job per cluster (its ids restart
    # in each), a user across clusters; each cluster's part priced with its grid and PUE.
    if cluster is None:
        jobs = store.energy_top(first, end_s, "job", fc, limit, "job" in PER_CLUSTER)
        users = store.energy_top(first, end_s, "user", fc, limit, "user" in PER_CLUSTER)
    else:
        rows = store.energy(first, end_s, cluster=cluster)
        jobs = top_from_totals(totals_from_rows(rows, "job", True), fc, limit, True)
        users = top_from_totals(totals_from_rows(rows, "user", True), fc, limit)
    silent = silent_nodes(store, silent_candidates(store, m0, now_s, max_gap_s, cluster),
                          now_s, max_gap_s, now_s)
    return dataclasses.replace(view, jobs=top_shares(jobs, "job"),
                               silent=describe(silent, now_s, lambda ts: _local(ts, model)),
                               users=top_shares(users, "user"),
                               idle=hourly_idle(window, cluster) if cluster else view.idle,
                               seen=tuple(sorted({t.name for t in everywhere})))


def silent_candidates(store: EnergyStore, since_ts: float, now_s: float, max_gap_s: float,
                      cluster: str | None = None) -> list[tuple[str, str]]:
    """The (cluster, node) pairs with rows since ``since_ts`` (the month's first ledger
    hour) but none in the hour ``max_gap_s`` before now is in, nor after it: those whose
    watermarks ``report_silent`` asks about (a node silent for less than that hour's
    rest is named from the next hour on). Totals per node, then the rows of each one's
    newest hour for its cluster: a refresh reads little more when every node reports."""
    recent = bucket_floor(now_s - max_gap_s)
    newest: dict[str, int] = {}
    for t in store.energy_totals(since_ts, now_s + 3600, "node"):
        newest[t.name] = max(newest.get(t.name, 0), t.bucket_ts)
    out = set()
    for node, h in newest.items():
        if h < recent:
            out |= {(r.cluster, r.node) for r in store.energy(h, h + 3600, cluster=cluster,
                                                              node=node)}
    return sorted(out)


def _local(ts: float, model: CarbonModel) -> str:
    return datetime.fromtimestamp(ts, zone(model.timezone)).strftime(
        f"%d %b %H:%M {model.timezone}")


# The most hours at the edges of spans of data ``read_energy`` reads row by row.
MAX_EDGE_READS = 48


def span_edges(month: Sequence[EnergyTotal], most: int = MAX_EDGE_READS) -> list[int]:
    """The hours with measured data whose hour before or after has none: where data may
    have begun or stopped mid-hour without the ledger booking the rest as missing (a
    silence too long to book). The newest ``most`` of them: a flapping fleet's month
    would otherwise be read row by row."""
    measured = {t.bucket_ts for t in month if t.gpu_s > 0 or t.energy_j > 0}
    edges = sorted(h for h in measured
                   if h - 3600 not in measured or h + 3600 not in measured)
    return edges[-most:]


def rebin(hours: Sequence[int], series: dict[str, list[float]], step: int
          ) -> tuple[tuple[int, ...], dict[str, list[float]]]:
    """Hourly sums into ``step``-second bins (a day for long ranges: 31 bars read better,
    and draw faster, than 744)."""
    if step <= 3600:
        return tuple(hours), series
    bins = sorted({h - h % step for h in hours})
    index = {b: i for i, b in enumerate(bins)}
    out = {}
    for name, ys in series.items():
        acc = [0.0] * len(bins)
        for h, y in zip(hours, ys):
            acc[index[h - h % step]] += y
        out[name] = acc
    return tuple(bins), out
