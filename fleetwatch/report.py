"""``fleetwatch report --month YYYY-MM``: the month's energy, carbon and cost, attributed.

Reads the ledger the processor wrote (never raw samples), prices each hour
with that hour's PUE and grid intensity (``fleetwatch.carbon``), and adds the
hours up per job, user, team, node and cluster. Every breakdown is a
partition of the same rows, so each one sums to the total ("(no job)" holds
energy no job was running for, "(no user)" energy of jobs without a user).
``report_files`` writes it: an HTML report (``report_html``), a CSV with a row
per job, user, team, node and cluster, and a JSON summary.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np

from fleetwatch.carbon import J_PER_KWH, CarbonModel
from fleetwatch.pipeline.store.ledger import CPU_DEVICE, REST_DEVICE, EnergyRow

KINDS = ("job", "user", "team", "node", "cluster")
NO_NAME = {"job": "(no job)", "user": "(no user)", "team": "(no team)"}
DAY_S = 86_400


class ReportError(ValueError):
    """The report cannot be made as asked (a bad month, an empty store)."""


@dataclass
class Line:
    """Totals of one job, user, team, node or cluster (or of everything)."""

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
    def idle_share(self) -> float:
        """The share of GPU energy spent idle."""
        return self.idle_kwh / self.gpu_kwh if self.gpu_kwh else 0.0


@dataclass
class Report:
    month: str
    start_ts: int
    end_ts: int
    generated_ts: float
    covered_from_ts: float         # the oldest ledger hour
    covered_until_ts: float        # the newest ledger hour (+1 h)
    total: Line
    lines: dict[str, list[Line]]   # kind -> lines, largest energy first
    daily: dict[str, dict[int, list[float]]]  # cluster -> day -> [it_kwh, co2e_kg, idle_kwh]
    hourly_intensity: list[tuple[int, float, bool]]  # (hour, gCO2e/kWh, filled)
    intensity_filled_hours: int    # hours with energy whose intensity was filled
    pue_filled_hours: int
    method: list[str]
    currency: str
    devices: dict[str, float] = field(default_factory=dict)  # gpu/cpu/rest -> IT kWh
    hours_with_data: int = 0       # hours of the month with at least one ledger row
    # Hours with energy whose factor is the fallback constant because the configured
    # series has nothing near them (a file that does not cover the month), and a warning
    # that says so; "" when every hour came from its series (or none is configured).
    intensity_fallback_hours: int = 0
    pue_fallback_hours: int = 0
    series_warning: str = ""
    began_ts: float = 0.0          # when the data began, inside the oldest hour (data_began)

    @property
    def ended(self) -> bool:
        """The month is over (when the report was made)."""
        return self.generated_ts >= self.end_ts

    @property
    def hours_so_far(self) -> int:
        """Hours of the month up to when the report was made (all of them once it ended)."""
        upto = min(max(self.generated_ts, self.start_ts), self.end_ts)
        return -(-int(upto - self.start_ts) // 3600)

    @property
    def status(self) -> str:
        """``complete``: the month ended and every hour has data; ``month_to_date``: it has
        not ended; ``partial``: it ended, and some hours have no data at all (the fleet,
        its agents or the processors were not running, or the store was started late)."""
        if not self.ended:
            return "month_to_date"
        return "complete" if self.hours_with_data >= self.hours_so_far else "partial"

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    @property
    def projected_co2e_kg(self) -> float | None:
        """The month's CO2e if the rest of it goes at the rate so far; None once it ended."""
        if self.ended:
            return None
        return month_projection(self.total.co2e_kg, max(self.covered_from_ts, self.began_ts),
                                self.generated_ts, self.start_ts, self.end_ts)

    def coverage(self) -> str:
        """Which part of the month the numbers cover, in words."""
        def at(ts: float) -> str:
            return datetime.fromtimestamp(ts, timezone.utc).strftime("%d %b %H:%M")

        span = (f"data from {at(self.covered_from_ts)} to "
                f"{at(min(self.covered_until_ts, self.end_ts))} UTC")
        if self.status == "complete":
            return "complete month"
        share = self.hours_with_data / self.hours_so_far if self.hours_so_far else 0.0
        hours = (f"{self.hours_with_data:,} of the "
                 + ("month's" if self.ended else "month's first") + f" {self.hours_so_far:,} "
                 f"hours have data ({share:.0%})")
        if self.status == "month_to_date":
            return f"month to date: {span}; {hours}"
        return f"partial month: {span}; only {hours}"

    def summary(self) -> dict[str, object]:
        t = self.total
        gpu_time = t.gpu_hours + t.missing_gpu_hours

        def iso(ts: float) -> str:
            return datetime.fromtimestamp(ts, timezone.utc).isoformat()

        return {
            "month": self.month, "complete": self.complete, "status": self.status,
            "coverage": self.coverage(), "covered_from": iso(self.covered_from_ts),
            "covered_until": iso(min(self.covered_until_ts, self.end_ts)),
            "hours_with_data": self.hours_with_data, "hours_so_far": self.hours_so_far,
            "it_kwh": t.it_kwh, "facility_kwh": t.facility_kwh, "co2e_kg": t.co2e_kg,
            "co2e_t": t.co2e_kg / 1000, "cost": t.cost, "currency": self.currency,
            "projected_co2e_kg": self.projected_co2e_kg,
            "gpu_kwh": t.gpu_kwh,
            "gpu_hours": t.gpu_hours, "idle_gpu_hours": t.idle_gpu_hours,
            "idle_kwh": t.idle_kwh, "idle_energy_share": t.idle_share,
            "idle_time_share": t.idle_gpu_hours / t.gpu_hours if t.gpu_hours else 0.0,
            "over_tdp_gpu_hours": t.over_tdp_gpu_hours,
            "missing_gpu_hours": t.missing_gpu_hours,
            "missing_share": t.missing_gpu_hours / gpu_time if gpu_time else 0.0,
            "intensity_filled_hours": self.intensity_filled_hours,
            "pue_filled_hours": self.pue_filled_hours,
            "intensity_fallback_hours": self.intensity_fallback_hours,
            "pue_fallback_hours": self.pue_fallback_hours,
            "series_warning": self.series_warning,
            "energy_by_device_kwh": self.devices,
            "counts": {k: len(v) for k, v in self.lines.items()},
            "method": self.method,
            "generated": datetime.fromtimestamp(self.generated_ts, timezone.utc).isoformat(),
        }


def month_projection(so_far: float, first_ts: float, now: float, start_ts: float,
                     end_ts: float) -> float:
    """A month's total if the rest of it goes at the rate since its data began
    (``first_ts``, from :func:`data_began`; the month's start if earlier): what the
    dashboard and the report both show. The oldest ledger hour's start is not when the
    data began: counting the minutes before the first sample as covered time understates
    the rate, threefold when the data began at minute 40."""
    covered = max(1.0, now - max(start_ts, first_ts))
    return so_far + so_far / covered * max(0.0, end_ts - now)


def data_began(rows: Iterable[EnergyRow], now: float, bucket_s: int = 3600) -> float | None:
    """When the data of the oldest hour among ``rows`` began: the end of that hour (now,
    while it runs) less the longest time one device was followed in it (measured or
    missing time, over its rows of the hour). None without rows."""
    by_hour: dict[int, dict[tuple[str, str, str], float]] = {}
    for r in rows:
        devices = by_hour.setdefault(r.bucket_ts, {})
        key = (r.cluster, r.node, r.device)
        devices[key] = devices.get(key, 0.0) + r.seconds + r.missing_s
    if not by_hour:
        return None
    first = min(by_hour)
    followed = min(float(bucket_s), max(by_hour[first].values()))
    return max(float(first), min(first + bucket_s, now) - followed)


def resolve_month(month: str, now: float) -> str:
    """``previous`` and ``current`` (UTC months, as the ledger's) as ``YYYY-MM``; any other
    text is returned as it is, for :func:`month_span` to check."""
    if month not in ("previous", "current"):
        return month
    today = datetime.fromtimestamp(now, timezone.utc)
    year, mon = today.year, today.month
    if month == "previous":
        year, mon = (year - 1, 12) if mon == 1 else (year, mon - 1)
    return f"{year:04d}-{mon:02d}"


def month_span(month: str) -> tuple[int, int]:
    """``2026-11`` -> (start, end) in epoch seconds, UTC."""
    try:
        year, mon = (int(x) for x in month.split("-"))
        if not (1 <= mon <= 12 and 2000 <= year <= 2200) or len(month) != 7:
            raise ValueError
    except ValueError:
        raise ReportError(f"--month {month!r}: expected YYYY-MM (e.g. 2026-11), previous or "
                          "current") from None
    start = calendar.timegm((year, mon, 1, 0, 0, 0))
    days = calendar.monthrange(year, mon)[1]
    return start, start + days * DAY_S


_LINE_FIELDS = ("it_kwh", "facility_kwh", "co2e_kg", "cost", "gpu_hours", "idle_kwh",
                "idle_gpu_hours", "gpu_kwh", "over_tdp_gpu_hours", "missing_gpu_hours")


def _codes(names: Sequence[str], empty: str) -> tuple[np.ndarray, list[str]]:
    """Each row's index into the list of distinct names ("" shown as ``empty``)."""
    index: dict[str, int] = {}
    codes = np.fromiter((index.setdefault(n, len(index)) for n in names), np.int64, len(names))
    return codes, [n or empty for n in index]


def build(rows: Sequence[EnergyRow], model: CarbonModel, start_ts: int, end_ts: int,
          month: str = "", now: float | None = None) -> Report:
    """The report of these ledger rows (pure). Columns and bincounts, not a loop over rows:
    a month of 1,000 GPUs is about a million rows."""
    n = len(rows)
    cols = list(zip(*rows)) if n else [()] * len(EnergyRow._fields)
    col = dict(zip(EnergyRow._fields, cols))
    hours = np.fromiter(col["bucket_ts"], np.int64, n)
    uniq_hours, hour_of = np.unique(hours, return_inverse=True)
    fs = [model.hour(int(h)) for h in uniq_hours]
    pue = np.array([f.pue for f in fs])[hour_of]
    kg_per_kwh = np.array([f.pue * f.intensity_g_per_kwh / 1000 for f in fs])[hour_of]
    gpu = np.fromiter((d.startswith("gpu") for d in col["device"]), bool, n)

    def f64(name: str) -> np.ndarray:
        return np.fromiter(col[name], np.float64, n)

    it = f64("energy_j") / J_PER_KWH
    values = {
        "it_kwh": it, "facility_kwh": it * pue, "co2e_kg": it * kg_per_kwh,
        "cost": it * pue * model.price_per_kwh,
        "gpu_hours": np.where(gpu, f64("seconds"), 0.0) / 3600,
        "idle_kwh": f64("idle_j") / J_PER_KWH,
        "idle_gpu_hours": np.where(gpu, f64("idle_s"), 0.0) / 3600,
        "gpu_kwh": np.where(gpu, it, 0.0),
        "over_tdp_gpu_hours": f64("over_tdp_s") / 3600,
        "missing_gpu_hours": np.where(gpu, f64("missing_s"), 0.0) / 3600}
    total = Line("total", "all", **{k: float(v.sum()) for k, v in values.items()})
    lines: dict[str, list[Line]] = {}
    for kind in KINDS:
        codes, names = _codes(col[kind], NO_NAME.get(kind, ""))
        sums = {k: np.bincount(codes, weights=v, minlength=len(names))
                for k, v in values.items()}
        lines[kind] = sorted((Line(kind, name, **{k: float(sums[k][i]) for k in _LINE_FIELDS})
                              for i, name in enumerate(names)), key=lambda x: -x.it_kwh)
    daily: dict[str, dict[int, list[float]]] = {}
    cluster_codes, clusters = _codes(col["cluster"], "")
    days = hours - hours % DAY_S
    uniq_days, day_of = np.unique(days, return_inverse=True)
    key = cluster_codes * len(uniq_days) + day_of
    width = len(clusters) * len(uniq_days)
    per = [np.bincount(key, weights=values[k], minlength=width)
           for k in ("it_kwh", "co2e_kg", "idle_kwh")]
    for c, name in enumerate(clusters):
        for d, day in enumerate(uniq_days.tolist()):
            i = c * len(uniq_days) + d
            if per[0][i] or per[1][i]:
                daily.setdefault(name, {})[day] = [float(p[i]) for p in per]
    devices = {"gpu": float(values["gpu_kwh"].sum())}
    for name in (CPU_DEVICE, REST_DEVICE):
        mask = np.fromiter((d == name for d in col["device"]), bool, n)
        devices[name] = float(it[mask].sum())
    filled_ci = {int(h) for h, f in zip(uniq_hours, fs) if f.intensity_filled}
    hourly = [(int(h), f.intensity_g_per_kwh, int(h) in filled_ci)
              for h, f in zip(uniq_hours, fs)]
    ci_fallback = sum(f.intensity_from_fallback for f in fs)
    pue_fallback = sum(f.pue_from_fallback for f in fs)
    newest = int(uniq_hours[-1]) + 3600 if n else start_ts
    oldest = int(uniq_hours[0]) if n else start_ts
    return Report(
        month=month, start_ts=start_ts, end_ts=end_ts,
        generated_ts=time.time() if now is None else now, covered_from_ts=oldest,
        covered_until_ts=newest, total=total, lines=lines, daily=daily,
        hourly_intensity=hourly, intensity_filled_hours=len(filled_ci),
        pue_filled_hours=sum(1 for f in fs if f.pue_filled), method=model.method(),
        currency=model.currency, devices=devices,
        hours_with_data=int(((uniq_hours >= start_ts) & (uniq_hours < end_ts)).sum()),
        intensity_fallback_hours=ci_fallback, pue_fallback_hours=pue_fallback,
        series_warning=_series_warning(model, len(fs), ci_fallback, pue_fallback),
        began_ts=data_began(rows, time.time() if now is None else now) or oldest)


def _series_warning(model: CarbonModel, hours: int, ci: int, pue: int) -> str:
    """What to tell the reader when a configured series did not cover the hours."""
    def span(series: object) -> str:
        first, last = series.span()  # type: ignore[attr-defined]
        return (f"{datetime.fromtimestamp(first, timezone.utc):%Y-%m-%d %H:00} to "
                f"{datetime.fromtimestamp(last, timezone.utc):%Y-%m-%d %H:00} UTC")

    out = []
    if ci and model.intensity is not None:
        out.append(f"{ci:,} of {hours:,} hours use the fallback intensity "
                   f"{model.intensity_fallback:g} gCO2e/kWh: the hourly series covers "
                   f"{span(model.intensity)}, not these hours (carbon.intensity_csv)")
    if pue and model.pue is not None:
        out.append(f"{pue:,} of {hours:,} hours use the fallback PUE {model.pue_fallback:g}: "
                   f"the hourly series covers {span(model.pue)} (carbon.pue_csv)")
    return "; ".join(out)
