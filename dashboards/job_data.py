"""What the job page shows, read from the store: plain records, no Dash.

The store keeps no job label on its series: a job is known by its ``job_start`` /
``job_end`` events (``pipeline.events``), one per GPU it held. ``find_jobs`` reads those
events back through the ``Store`` protocol, so every backend answers it the same way;
``read_job`` then reads the job's nodes' series, alerts and energy ledger rows over the
job's span. Turning records into what is drawn (``job_spans``, ``clip``, ``gpu_stats``,
``job_alerts``, ``energy_share``) is pure and tested without a store.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from fleetwatch.carbon import CarbonModel
from fleetwatch.dashboards.data import FUTURE_SLACK_S, POWER, TEMP, UTIL, read_alerts
from fleetwatch.dashboards.energy_data import Share, _factors, shares
from fleetwatch.pipeline.events import split_jobs
from fleetwatch.pipeline.store.base import Alert, Event, Store, gpu_index
from fleetwatch.pipeline.store.ledger import (
    BUCKET_S,
    EnergyRow,
    EnergyTotal,
    bucket_floor,
    job_owners,
)

JOB_EVENTS = ("job_start", "job_end")
# How far back a job's events are looked for: the near past first (a job just slow or
# just crashed, the usual question), further only when the job is not found there or
# one of its GPUs' starts is older.
LOOKBACKS_S = (86_400.0, 7 * 86_400.0, 31 * 86_400.0)
# The span drawn by default: the whole job, or its last week (a week of 1-minute means
# per GPU is what a browser still draws quickly).
SPAN_CAP_S = 7 * 86_400.0
MAX_NODES = 32  # nodes read per refresh (8 GPUs each: 256 lines a chart at most)
SM, CLOCK = "gpu_sm_active_ratio", "gpu_sm_clock_mhz"
# The per-GPU charts; SM activity needs GPM (Hopper and newer): else utilization.
CHART_METRICS = (SM, POWER, TEMP, CLOCK)
FALLBACK = {SM: UTIL}
# The table's columns: each GPU's median against the job's.
STAT_METRICS = (CLOCK, POWER, TEMP)

GpuKey = tuple[str, int]  # (node, GPU index)
K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class JobGpu:
    """One GPU the job held: from its first ``job_start`` to its last ``job_end`` (None:
    still held). ``start_known``: False where only the end was in the events read."""

    rack: str
    node: str
    gpu: int
    start_ts: float
    end_ts: float | None
    start_known: bool = True


@dataclass(frozen=True, slots=True)
class Job:
    """One job in one cluster, as its events tell it."""

    job: str
    cluster: str
    gpus: tuple[JobGpu, ...]  # by node, then GPU

    @property
    def start_ts(self) -> float:
        return min(g.start_ts for g in self.gpus)

    @property
    def end_ts(self) -> float | None:
        """When the last GPU left the job; None while one still holds it."""
        ends = [g.end_ts for g in self.gpus]
        return None if any(e is None for e in ends) else max(e for e in ends if e is not None)

    @property
    def running(self) -> bool:
        return self.end_ts is None

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted({g.node for g in self.gpus}))


def job_spans(events: Iterable[Event], job: str, since_ts: float) -> list[Job]:
    """The job's spans per cluster from its ``job_start`` / ``job_end`` events (any order,
    other jobs' left out). A GPU whose first event read is an end started before
    ``since_ts`` (``start_known`` False). A job started again on a GPU after an end (a
    processor that restarted, a requeue) is one span from the first start to the last
    event."""
    per_gpu: dict[tuple[str, str, int], list[Event]] = {}
    for e in events:
        index = gpu_index(e.device)
        # A GPU's value of several jobs is comma-joined (events stored before they were
        # one per job): the job is one of them.
        if (e.kind in JOB_EVENTS and index is not None
                and (e.value == job or job in split_jobs(e.value))):
            per_gpu.setdefault((e.cluster, e.node, index), []).append(e)
    by_cluster: dict[str, list[JobGpu]] = {}
    for (cluster, node, index), evs in per_gpu.items():
        evs.sort(key=lambda e: (e.ts, e.kind == "job_start"))
        starts = [e.ts for e in evs if e.kind == "job_start"]
        known = bool(starts) and evs[0].kind == "job_start"
        start = starts[0] if known else since_ts
        end = evs[-1].ts if evs[-1].kind == "job_end" else None
        by_cluster.setdefault(cluster, []).append(
            JobGpu(evs[-1].rack, node, index, start, end, known))
    return [Job(job, c, tuple(sorted(gs, key=lambda g: (g.node, g.gpu))))
            for c, gs in sorted(by_cluster.items())]


def find_jobs(store: Store, job: str, now_s: float, cluster: str | None = None
              ) -> list[Job]:
    """The job in each cluster that ran it (only ``cluster``'s, if given); [] if none of
    its events is in the last ``LOOKBACKS_S[-1]``. The fleet's job events are read over
    ``LOOKBACKS_S`` in turn until the job is found; then its own nodes' over the whole
    lookback, for its first start: a start read may be a processor that restarted
    announcing a job already running (``pipeline.events``)."""
    end = now_s + FUTURE_SLACK_S
    for back in LOOKBACKS_S:
        events = store.events(now_s - back, end, kinds=JOB_EVENTS)
        found = [j for j in job_spans(events, job, now_s - back)
                 if cluster is None or j.cluster == cluster]
        if found:
            break
    else:
        return []
    since = now_s - LOOKBACKS_S[-1]
    if back < LOOKBACKS_S[-1]:
        nodes = sorted({n for j in found for n in j.nodes})
        events = [e for n in nodes for e in store.events(since, end, node=n, kinds=JOB_EVENTS)]
    return [j for j in job_spans(events, job, since) if cluster is None or j.cluster == cluster]


def default_window(job: Job, now_s: float) -> tuple[float, float]:
    """The job's span (to now while it runs), its last ``SPAN_CAP_S`` if longer."""
    end = job.end_ts if job.end_ts is not None else now_s
    return max(job.start_ts, end - SPAN_CAP_S), end


def clip(points: Iterable[tuple[Any, int, float]], job: Job, node: str
         ) -> dict[GpuKey, list[tuple[int, float]]]:
    """Points of one node's series as per-GPU lines, each kept to the span its GPU held
    the job (the GPU's samples before and after are another job's)."""
    spans = {g.gpu: (g.start_ts * 1000, g.end_ts * 1000 if g.end_ts is not None else None)
             for g in job.gpus if g.node == node}
    out: dict[GpuKey, list[tuple[int, float]]] = {}
    for key, ts, value in points:
        index = gpu_index(key.device)
        span = spans.get(index) if index is not None else None
        if span is None or ts < span[0] or (span[1] is not None and ts > span[1]):
            continue
        out.setdefault((node, index), []).append((ts, value))  # type: ignore[arg-type]
    for line in out.values():
        line.sort()
    return out


@dataclass(frozen=True, slots=True)
class GpuStat:
    """One GPU's medians over the span against the job's (the median of its GPUs')."""

    node: str
    gpu: int
    medians: dict[str, float | None]   # metric -> this GPU's median (None: not reported)
    off: dict[str, float | None]       # metric -> (GPU - job) / job (None: not known)

    @property
    def worst(self) -> float:
        return max((abs(v) for v in self.off.values() if v is not None), default=0.0)


def gpu_stats(series: dict[str, dict[GpuKey, list[tuple[int, float]]]],
              gpus: Sequence[GpuKey]) -> tuple[dict[str, float | None], list[GpuStat]]:
    """(the job's median per metric, one row per GPU, the GPU furthest off first)."""
    medians = {m: {k: statistics.median(v for _, v in line)
                   for k, line in series.get(m, {}).items() if line} for m in STAT_METRICS}
    job = {m: statistics.median(per.values()) if per else None for m, per in medians.items()}
    rows = []
    for key in gpus:
        mine = {m: medians[m].get(key) for m in STAT_METRICS}
        off = {m: (mine[m] - j) / j if mine[m] is not None and j else None  # type: ignore[operator]
               for m, j in job.items()}
        rows.append(GpuStat(key[0], key[1], mine, off))
    rows.sort(key=lambda r: (-r.worst, r.node, r.gpu))
    return job, rows


def job_alerts(alerts: Iterable[Alert], job: Job) -> tuple[Alert, ...]:
    """The alerts on the job's GPUs while each held it, and the node alerts (a hung job,
    a silent node) on its nodes during the job, in the order given."""
    end = job.end_ts if job.end_ts is not None else float("inf")
    spans = {(g.node, g.gpu): (g.start_ts, g.end_ts if g.end_ts is not None else float("inf"))
             for g in job.gpus}
    nodes = set(job.nodes)
    out = []
    for a in alerts:
        if a.cluster != job.cluster or a.node not in nodes:
            continue
        index = gpu_index(a.device)
        start, stop = (spans.get((a.node, index), (0.0, -1.0)) if index is not None
                       else (job.start_ts, end))
        if a.started_ts <= stop and (a.resolved_ts or float("inf")) >= start:
            out.append(a)
    return tuple(out)


def energy_share(rows: Iterable[EnergyRow], job: str, model: CarbonModel) -> Share | None:
    """The job's kWh and kg CO2e from its ledger rows, priced hour by hour as the energy
    page prices them; None without a row."""
    totals: dict[int, list[float]] = {}
    for r in rows:
        if r.job != job:
            continue
        t = totals.setdefault(r.bucket_ts, [0.0] * 7)
        for i, v in enumerate((r.energy_j, r.idle_j, r.energy_j if r.device.startswith("gpu")
                               else 0.0, r.seconds if r.device.startswith("gpu") else 0.0,
                               r.idle_s, r.missing_s, r.over_tdp_s)):
            t[i] += v
    if not totals:
        return None
    hourly = [EnergyTotal(h, job, *t) for h, t in sorted(totals.items())]
    return shares(hourly, "job", _factors(model, totals))[0]


def missing_gpu_hours(rows: Iterable[EnergyRow], job: str) -> float:
    """The job's GPU time without energy data in its ledger rows (``missing_s``), in
    hours: as the energy page's missing tile counts it (GPUs only)."""
    return sum(r.missing_s for r in rows
               if r.job == job and r.device.startswith("gpu")) / 3600.0


@dataclass(frozen=True, slots=True)
class JobView:
    job: Job
    start_s: float
    end_s: float
    series: dict[str, dict[GpuKey, list[tuple[int, float]]]]  # metric drawn -> lines
    drawn: dict[str, str]           # chart metric -> the metric read (SM: utilization?)
    alerts: tuple[Alert, ...]
    energy: Share | None
    nodes_left: int = 0             # nodes past MAX_NODES, not read
    # The job's GPU-hours in its ledger rows with no energy data (gaps past energy.max_gap_s,
    # a silent node): the energy is of the rest only.
    energy_missing_h: float = 0.0
    # Whom the job belongs to (users, teams: ``job_owners``); empty where unknown.
    owners: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())

    @property
    def last_seen_ms(self) -> int | None:
        return max((line[-1][0] for per in self.series.values() for line in per.values()
                    if line), default=None)


def _read_metric(store: Store, metric: str, job: Job, nodes: Sequence[str], start_ms: int,
                 end_ms: int) -> dict[GpuKey, list[tuple[int, float]]]:
    out: dict[GpuKey, list[tuple[int, float]]] = {}
    for node in nodes:
        # Of the job's cluster: a node of the same name elsewhere is another machine.
        out.update(clip(store.range(metric, start_ms, end_ms, node=node, cluster=job.cluster),
                        job, node))
    return out


def read_job(store: Store, job: Job, start_s: float, end_s: float, now_s: float,
             carbon: CarbonModel | None = None) -> JobView:
    """The job's GPUs over [start, end): their series (each from its first ``MAX_NODES``
    nodes), the alerts on them during the job, and its energy where the store keeps a
    ledger (the whole job's, not the window's)."""
    nodes = job.nodes[:MAX_NODES]
    start_ms, end_ms = int(start_s * 1000), int((end_s + FUTURE_SLACK_S) * 1000)
    series, drawn = {}, {}
    for metric in CHART_METRICS:
        lines = _read_metric(store, metric, job, nodes, start_ms, end_ms)
        if not lines and metric in FALLBACK:
            metric_read = FALLBACK[metric]
            lines = _read_metric(store, metric_read, job, nodes, start_ms, end_ms)
        else:
            metric_read = metric
        series[metric], drawn[metric] = lines, metric_read
    active, resolved = read_alerts(store, now_s, max(now_s - job.start_ts, 0.0) + 3600)
    energy, missing_h = None, 0.0
    reader: Callable[..., list[EnergyRow]] | None = getattr(store, "energy", None)
    rows: list[EnergyRow] = []
    if callable(reader):
        end = job.end_ts if job.end_ts is not None else now_s
        rows = [r for node in job.nodes
                for r in reader(bucket_floor(job.start_ts), end + BUCKET_S, job.cluster, node)]
    if carbon is not None and callable(reader):
        energy, missing_h = energy_share(rows, job.job, carbon), missing_gpu_hours(rows, job.job)
    alerts = job_alerts(active + resolved, job)
    return JobView(job, start_s, end_s, series, drawn, alerts, energy,
                   max(len(job.nodes) - MAX_NODES, 0), missing_h,
                   job_owners(rows, alerts, job.job))


def fold_jobs(held: Mapping[K, str], events: Iterable[Event],
              key: Callable[[Event, int], K]) -> dict[K, str]:
    """``held`` (each GPU's jobs, comma-joined, by ``key`` of an event and its GPU index)
    after these job events: a GPU holds each job of a ``job_start`` with no ``job_end`` of
    that job after it; several sorted and comma-joined (a shared GPU). Events of older
    releases carry a shared GPU's jobs comma-joined in one: split alike."""
    now = {k: set(split_jobs(v)) for k, v in held.items()}
    for e in sorted(events, key=lambda e: (e.ts, e.kind == "job_start")):
        index = gpu_index(e.device)
        if index is None:
            continue
        k = key(e, index)
        if e.kind == "job_start":
            now.setdefault(k, set()).update(split_jobs(e.value))
        elif e.kind == "job_end":
            now.get(k, set()).difference_update(split_jobs(e.value))
    return {k: ",".join(sorted(jobs)) for k, jobs in now.items() if jobs}


def current_jobs(events: Iterable[Event]) -> dict[int, str]:
    """Each GPU's jobs now, from one node's job events (``fold_jobs``)."""
    return dict(sorted(fold_jobs({}, events, lambda _, index: index).items()))


def read_current_jobs(store: Store, node: str, now_s: float,
                      cluster: str | None = None) -> dict[int, str]:
    """The node's GPUs' jobs now (``current_jobs``), from its job events of the last
    ``LOOKBACKS_S[-1]`` (a processor that starts sees running jobs start again); of the
    node of ``cluster`` where given."""
    if not callable(getattr(store, "events", None)):
        return {}  # a store that keeps no events knows no jobs
    return current_jobs([e for e in store.events(now_s - LOOKBACKS_S[-1],
                                                 now_s + FUTURE_SLACK_S, node=node,
                                                 kinds=JOB_EVENTS)
                         if cluster is None or e.cluster == cluster])
