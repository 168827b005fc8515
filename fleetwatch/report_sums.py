"""The monthly report's sums: one ``Line`` per job, user, team, node, rack, cluster and GPU
part, and the month's totals, per day and per hour, added up as the ledger's rows are read
(``Month``), each hour priced with its cluster's grid and PUE, and counted for its share of
the month (``hour_share``: half of it where a month of a half-hour-offset zone begins or
ends inside a UTC hour). Pure: no store, no files."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fleetwatch.carbon import J_PER_KWH, CarbonModel, HourFactors
from fleetwatch.pipeline.store.ledger import CPU_DEVICE, REST_DEVICE, EnergyRow
from fleetwatch.report_month import day_start, hour_share, longest_measured

KINDS = ("job", "user", "team", "node", "rack", "cluster", "part")
NO_NAME = {"job": "(no job)", "user": "(no user)", "team": "(no team)",
           "part": "(part not named)"}
# The "part" of the rows of CPUs and the rest of a node: so that the part lines add up to
# the month, as every other kind's do.
NOT_A_GPU = "(CPUs and rest of node)"
# (cluster, node, device) -> the GPU's product name (its board's, ``pipeline.board_events.Board``)
Parts = dict[tuple[str, str, str], str]
# Kinds whose names are a cluster's own: node and rack names (node001, rack-a) and Slurm
# job ids restart in every cluster, so their rows are keyed by (cluster, name). Users and teams are
# people, the same across clusters: one row each.
PER_CLUSTER = ("job", "node", "rack")


@dataclass
class Line:
    """Totals of one job, user, team, node, rack or cluster (or of everything)."""

    kind: str
    name: str
    it_kwh: float = 0.0
    facility_kwh: float = 0.0
    co2e_kg: float = 0.0
    cost: float = 0.0
    gpu_hours: float = 0.0
    idle_kwh: float = 0.0
    idle_gpu_hours: float = 0.0
    gpu_kwh: float = 0.0
    over_tdp_gpu_hours: float = 0.0
    missing_gpu_hours: float = 0.0
    # The cluster of a job, node, rack or cluster row; "" for users, teams and totals.
    cluster: str = ""

    def add(self, it: float, fac: float, co2: float, cost: float, gpu_h: float, idle: float,
            idle_h: float, gpu_kwh: float, over_h: float, miss_h: float) -> None:
        self.it_kwh += it
        self.facility_kwh += fac
        self.co2e_kg += co2
        self.cost += cost
        self.gpu_hours += gpu_h
        self.idle_kwh += idle
        self.idle_gpu_hours += idle_h
        self.gpu_kwh += gpu_kwh
        self.over_tdp_gpu_hours += over_h
        self.missing_gpu_hours += miss_h

    @property
    def idle_time_share(self) -> float:
        """The share of GPU time spent idle: the "idle share" of capacity figures."""
        return self.idle_gpu_hours / self.gpu_hours if self.gpu_hours else 0.0

    @property
    def idle_energy_share(self) -> float:
        """The share of GPU energy spent idle (smaller than the time share: an idle GPU
        draws ~60 W, a busy one several hundred)."""
        return self.idle_kwh / self.gpu_kwh if self.gpu_kwh else 0.0


_LINE_FIELDS = ("it_kwh", "facility_kwh", "co2e_kg", "cost", "gpu_hours", "idle_kwh",
                "idle_gpu_hours", "gpu_kwh", "over_tdp_gpu_hours", "missing_gpu_hours")
_DAILY_FIELDS = ("it_kwh", "co2e_kg", "idle_kwh")


class _Sums:
    """Per-key sums of the line fields, keys in the order they first appear. Added to in
    row order with ``np.add.at`` (unbuffered, one row after the other), so chunk after
    chunk gives exactly the sums one pass over every row would."""

    def __init__(self, fields: Sequence[str]) -> None:
        self.fields = fields
        self.index: dict[object, int] = {}
        self.sums = {k: np.zeros(0) for k in fields}

    def add(self, keys: Sequence[object], n: int, values: dict[str, np.ndarray]) -> None:
        index = self.index
        for k in dict.fromkeys(keys):  # the chunk's names, first appearance first
            index.setdefault(k, len(index))
        codes = np.fromiter(map(index.__getitem__, keys), np.int64, n)
        for k in self.fields:
            acc = self.sums[k]
            if len(acc) < len(index):
                acc = self.sums[k] = np.concatenate([acc, np.zeros(len(index) - len(acc))])
            np.add.at(acc, codes, values[k])


@dataclass
class Month:
    """What the report keeps while it reads the ledger: sums per name, never the rows."""

    model: CarbonModel
    # The month, [start, end) in epoch seconds, and the time zone whose days the daily
    # sums follow; the default takes every row whole, in UTC days.
    start_ts: float = float("-inf")
    end_ts: float = float("inf")
    tz: str = "UTC"
    # Each GPU's part: the "part" lines (a GPU not in it: NO_NAME["part"])
    parts: Parts = field(default_factory=dict)
    # (grid, hour) -> the hour's factors; grid: a cluster of carbon.clusters, "" the global
    factors: dict[tuple[str, int], HourFactors] = field(default_factory=dict)
    kinds: dict[str, _Sums] = field(
        default_factory=lambda: {k: _Sums(_LINE_FIELDS) for k in KINDS})
    daily: _Sums = field(default_factory=lambda: _Sums(_DAILY_FIELDS))
    total: dict[str, float] = field(default_factory=lambda: dict.fromkeys(_LINE_FIELDS, 0.0))
    devices: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(("gpu", CPU_DEVICE, REST_DEVICE), 0.0))
    oldest_rows: list[EnergyRow] = field(default_factory=list)  # the oldest hour's rows
    # hour -> [GPU seconds measured, GPU seconds missing, energy J, longest device seconds]
    hours: dict[int, list[float]] = field(default_factory=dict)
    # (cluster, node) -> its newest ledger hour read: the nodes whose watermarks say
    # whether one fell silent before the month's end (``report_silent``).
    nodes: dict[tuple[str, str], int] = field(default_factory=dict)
    # Energy the counters measured across gaps (``EnergyRow.gap_j``): IT kWh, the GPU
    # gaps that ended in the month, the longest of them (s), and the nodes they were of.
    gap: dict[str, float] = field(
        default_factory=lambda: {"kwh": 0.0, "gaps": 0.0, "longest_s": 0.0})
    gap_nodes: set[tuple[str, str]] = field(default_factory=set)

    def add(self, rows: Sequence[EnergyRow]) -> None:
        """Columns and bincount-like sums, not a loop over rows in Python. Rows of hours
        outside the month (none of it in [start, end)) are left out."""
        lo, hi = self.start_ts - 3600, self.end_ts
        if any(not lo < r.bucket_ts < hi for r in rows):
            rows = [r for r in rows if lo < r.bucket_ts < hi]
        n = len(rows)
        if not n:
            return
        col: dict[str, tuple] = dict(zip(EnergyRow._fields, zip(*rows)))
        parts = self.parts
        col["part"] = tuple(parts.get((c, nd, d), "") if d.startswith("gpu") else NOT_A_GPU
                            for c, nd, d in zip(col["cluster"], col["node"], col["device"]))
        hours = np.fromiter(col["bucket_ts"], np.int64, n)
        uniq_hours, hour_of = np.unique(hours, return_inverse=True)
        # Each row takes its cluster's grid and PUE (carbon.clusters), else the global.
        uniq_c, c_of = np.unique(np.asarray(col["cluster"], dtype=str), return_inverse=True)
        grids = [c if c in self.model.clusters else "" for c in uniq_c.tolist()]
        fs = [[self._factors(g, int(h)) for h in uniq_hours] for g in grids]
        pue = np.array([[f.pue for f in r] for r in fs])[c_of, hour_of]
        kg_per_kwh = np.array([[f.pue * f.intensity_g_per_kwh / 1000 for f in r]
                               for r in fs])[c_of, hour_of]
        device = np.asarray(col["device"], dtype=str)
        gpu = np.char.startswith(device, "gpu")

        # Each row counts for its hour's share of the month (1 but at a half-hour edge).
        share = np.array([hour_share(h, self.start_ts, self.end_ts)
                          for h in uniq_hours.tolist()])[hour_of]

        def f64(name: str) -> np.ndarray:
            return np.fromiter(col[name], np.float64, n) * share

        it = f64("energy_j") / J_PER_KWH
        values = {
            "it_kwh": it, "facility_kwh": it * pue, "co2e_kg": it * kg_per_kwh,
            "cost": it * pue * self.model.price_per_kwh,
            "gpu_hours": np.where(gpu, f64("seconds"), 0.0) / 3600,
            "idle_kwh": f64("idle_j") / J_PER_KWH,
            "idle_gpu_hours": np.where(gpu, f64("idle_s"), 0.0) / 3600,
            "gpu_kwh": np.where(gpu, it, 0.0),
            "over_tdp_gpu_hours": f64("over_tdp_s") / 3600,
            "missing_gpu_hours": np.where(gpu, f64("missing_s"), 0.0) / 3600}
        for k, v in values.items():
            self.total[k] += float(v.sum())
        for kind in KINDS:
            keys = list(zip(col["cluster"], col[kind])) if kind in PER_CLUSTER else col[kind]
            self.kinds[kind].add(keys, n, values)
        # The local day of each hour (of the month's part of an hour it begins in).
        day_of = [day_start(max(h, self.start_ts), self.tz) for h in uniq_hours.tolist()]
        days = [day_of[i] for i in hour_of.tolist()]
        self.daily.add(list(zip(col["cluster"], days)), n, values)
        self.devices["gpu"] += float(values["gpu_kwh"].sum())
        for name in (CPU_DEVICE, REST_DEVICE):
            self.devices[name] += float(it[device == name].sum())
        self._add_gaps(col, n, share)
        self._add_hours(rows, col, n, uniq_hours, hour_of, gpu)
        for key in set(zip(col["cluster"], col["node"])):
            self.nodes[key] = max(self.nodes.get(key, 0), int(uniq_hours[-1]))
        first = int(uniq_hours[0])
        if not self.oldest_rows or first <= self.oldest_rows[0].bucket_ts:
            if self.oldest_rows and first < self.oldest_rows[0].bucket_ts:
                self.oldest_rows = []
            self.oldest_rows += [r for r in rows if r.bucket_ts == first]

    def _factors(self, grid: str, hour: int) -> HourFactors:
        f = self.factors.get((grid, hour))
        if f is None:
            f = self.factors[grid, hour] = self.model.for_cluster(grid).hour(hour)
        return f

    def _add_gaps(self, col: dict[str, tuple], n: int, share: np.ndarray) -> None:
        """The energy measured across gaps, for the report to say apart."""
        gap_j = np.fromiter(col["gap_j"], np.float64, n)
        gaps = np.fromiter(col["gaps"], np.float64, n)
        if not (gap_j.any() or gaps.any()):
            return
        self.gap["kwh"] += float((gap_j * share).sum()) / J_PER_KWH
        ended = gaps > 0
        self.gap["gaps"] += float((gaps * (share > 0)).sum())
        self.gap["longest_s"] = max(self.gap["longest_s"], max(
            (x for x, e in zip(col["longest_gap_s"], ended) if e), default=0.0))
        self.gap_nodes.update(k for k, e in zip(zip(col["cluster"], col["node"]), ended) if e)

    def _add_hours(self, rows: Sequence[EnergyRow], col: dict[str, tuple], n: int,
                   uniq_hours: np.ndarray, hour_of: np.ndarray, gpu: np.ndarray) -> None:
        """Per hour, what ``measured_hours`` needs. The longest time one device was
        measured sums its rows of the hour (one per job it ran): an hour's rows come in
        one chunk (``ledger_chunks`` reads whole hours)."""
        # Time across a gap the counter measured is covered: its energy is known.
        seconds = (np.fromiter(col["seconds"], np.float64, n)
                   + np.fromiter(col["gap_s"], np.float64, n))
        sums = [np.bincount(hour_of, np.where(gpu, seconds, 0.0), len(uniq_hours)),
                np.bincount(hour_of, np.where(gpu, np.fromiter(col["missing_s"], np.float64, n),
                                              0.0), len(uniq_hours)),
                np.bincount(hour_of, np.fromiter(col["energy_j"], np.float64, n),
                            len(uniq_hours))]
        longest = longest_measured(rows)
        for i, h in enumerate(uniq_hours.tolist()):
            a = self.hours.setdefault(h, [0.0, 0.0, 0.0, 0.0])
            a[0] += sums[0][i]
            a[1] += sums[1][i]
            a[2] += sums[2][i]
            a[3] = max(a[3], longest.get(h, 0.0))

    def lines(self, kind: str) -> list[Line]:
        sums = self.kinds[kind]
        empty = NO_NAME.get(kind, "")
        out = []
        for key, i in sums.index.items():
            cluster, name = key if kind in PER_CLUSTER else (
                key if kind == "cluster" else "", key)  # type: ignore[misc]
            out.append(Line(kind, str(name) or empty, cluster=str(cluster),
                            **{k: float(sums.sums[k][i]) for k in _LINE_FIELDS}))
        return sorted(out, key=lambda x: -x.it_kwh)

    def daily_lines(self) -> dict[str, dict[int, list[float]]]:
        daily: dict[str, dict[int, list[float]]] = {}
        clusters = list(self.kinds["cluster"].index)
        at = self.daily.index
        for name in clusters:
            for day in sorted({d for c, d in at if c == name}):  # type: ignore[misc]
                i = at[(name, day)]
                v = [float(self.daily.sums[k][i]) for k in _DAILY_FIELDS]
                if v[0] or v[1]:
                    daily.setdefault(str(name), {})[day] = v
        return daily
