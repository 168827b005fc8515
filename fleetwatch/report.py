"""``fleetwatch report --month YYYY-MM``: the month's energy, carbon and cost, attributed.

Reads the ledger the processor wrote (never raw samples), prices each hour
with that hour's PUE and grid intensity (``fleetwatch.carbon``), and adds the
hours up per job, user, team, node, rack, cluster and GPU part. Every breakdown is a
partition of the same rows, so each one sums to the total ("(no job)" holds
energy no job was running for, "(no user)" energy of jobs without a user).
``report_files`` writes it: an HTML report (``report_html``), a CSV with a row
per job, user, team, node, rack and cluster, and a JSON summary. The rows are read a
few hours at a time (``ledger_chunks``) and summed as they come (``build_chunks``):
a month of 1,000 GPUs is 1.6 million rows, which the report never holds at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from fleetwatch.carbon import CarbonModel, HourFactors
from fleetwatch.carbon_warnings import clusters_warning, grid_warnings
from fleetwatch.models.lemon_report import Offender
from fleetwatch.pipeline.board_events import Board
from fleetwatch.pipeline.store.ledger import EnergyRow, EnergyStore
from fleetwatch.report_month import (
    HourData,
    data_began,
    hours_with_data,
    ledger_span,
    measured_hours,
    month_projection,
    zone,
)
from fleetwatch.report_silent import SilentNode, describe, uncounted_gpu_hours
from fleetwatch.report_sums import KINDS, Line, Month, Parts


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
    hours_with_data: int = 0       # hours of the month with measured data (measured_hours)
    # The time with data in them, in hours: of an hour whose data began or ended inside it,
    # the part with data (a month whose only data is its last half hour: 0.5).
    hours_of_data: float = 0.0
    # Hours with energy whose factor is the fallback constant because the configured
    # series has nothing near them (a file that does not cover the month, or a hole in it
    # too long to interpolate), and a warning that says which; "" when every hour came
    # from its series (or none is configured).
    intensity_fallback_hours: int = 0
    pue_fallback_hours: int = 0
    series_warning: str = ""
    # The clusters priced with a grid of their own (carbon.clusters): cluster -> (hour,
    # gCO2e/kWh, filled), as ``hourly_intensity`` is for the global grid.
    cluster_intensity: dict[str, list[tuple[int, float, bool]]] = field(default_factory=dict)
    began_ts: float = 0.0          # when the data began, inside the oldest hour (data_began)
    # Repeat offenders: the worst nodes by lemon score at the month's end (or now), from
    # the store's XID and GPU-lost events, with their XIDs of the month (``offenders``).
    offenders: list[Offender] = field(default_factory=list)
    # When retention (store.rollup_retention_d) deleted events the offenders are judged
    # from: the instant before which none is left; None when the whole span is there.
    events_kept_since_ts: float | None = None
    # Per ledger hour, the GPU time measured and missing (what the projection's rate and
    # the hours with data are counted from, as the dashboard counts them).
    hour_data: list[HourData] = field(default_factory=list)
    # The IANA time zone whose calendar the month, its days and the times shown follow
    # (energy.timezone, report --tz); the ledger's hours are UTC whatever it is.
    tz: str = "UTC"
    # The nodes of the month's rows, and those of them silent at its end (or now, for a
    # month to date): their time since their last frame is in no row yet (report_silent).
    nodes: tuple[tuple[str, str], ...] = ()
    silent: list[SilentNode] = field(default_factory=list)
    # A carbon.clusters table that matches no cluster of the month (a misspelt name), and
    # which clusters fell back to [carbon]: "" when every table priced its cluster.
    clusters_warning: str = ""
    # Energy NVML's counters measured across gaps longer than energy.max_gap_s (in the
    # totals, spread evenly over each gap's hours): IT kWh, the GPU gaps that ended in the
    # month, the nodes they were of, and the longest gap (s).
    gap_kwh: float = 0.0
    gap_count: float = 0.0
    gap_nodes: int = 0
    longest_gap_s: float = 0.0

    def gaps_said(self) -> str:
        """In words, the energy the counters measured across gaps; "" if none."""
        if not self.gap_kwh:
            return ""
        n = round(self.gap_count)
        return (f"{self.gap_kwh:,.3f} kWh measured by the GPUs' energy counters across {n:,} "
                f"GPU gap{'s' if n != 1 else ''} on {self.gap_nodes:,} "
                f"node{'s' if self.gap_nodes != 1 else ''} (longest "
                f"{self.longest_gap_s / 3600:,.1f} h) where no frame came for longer than "
                "energy.max_gap_s; spread evenly over each gap's hours for carbon (when in "
                "the gap it was drawn is not known: the hours' attribution is an estimate)")

    def local(self, ts: float) -> datetime:
        """``ts`` in the report's time zone."""
        return datetime.fromtimestamp(ts, zone(self.tz))

    @property
    def ended(self) -> bool:
        """The month is over (when the report was made)."""
        return self.generated_ts >= self.end_ts

    @property
    def covered_until(self) -> float:
        """Where the data ends, as a reader is told: the newest ledger hour's end, but never
        past the month's end nor, for a month to date, past when the report was made (the
        open hour is in progress). Data stamped after now (a clock ahead) is said apart."""
        until = min(self.covered_until_ts, self.end_ts)
        if self.generated_ts < until and self.covered_until_ts <= self.generated_ts + 3600:
            until = max(self.generated_ts, self.start_ts)
        return until

    @property
    def hours_so_far(self) -> int:
        """Hours of the month up to when the report was made (all of them once it ended)."""
        upto = min(max(self.generated_ts, self.start_ts), self.end_ts)
        return -(-int(upto - self.start_ts) // 3600)

    @property
    def status(self) -> str:
        """``complete``: the month ended, every hour has data and every node reported up to
        its end; ``month_to_date``: it has not ended; ``partial``: it ended, and some hours
        have no data at all (the fleet, its agents or the processors were not running, or
        the store was started late), or a node silent since before its end has time in no
        row yet (``silent``)."""
        if not self.ended:
            return "month_to_date"
        return ("complete" if self.hours_with_data >= self.hours_so_far and not self.silent
                else "partial")

    @property
    def upto_ts(self) -> float:
        """The end of the time the report covers: the month's end, or now before it."""
        return min(max(self.generated_ts, self.start_ts), self.end_ts)

    @property
    def uncounted_gpu_hours(self) -> float:
        """The silent nodes' GPU-hours from their last frame on: in no row yet."""
        return uncounted_gpu_hours(self.silent, self.upto_ts, self.start_ts)

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    @property
    def projection(self) -> tuple[float | None, str]:
        """(the month's CO2e if the rest of it goes at the rate of its hours with data, why
        there is none); (None, "") once the month ended."""
        if self.ended:
            return None, ""
        return month_projection(self.total.co2e_kg, self.hour_data,
                                max(self.covered_from_ts, self.began_ts), self.generated_ts,
                                self.start_ts, self.end_ts)

    @property
    def projected_co2e_kg(self) -> float | None:
        return self.projection[0]

    def coverage(self) -> str:
        """Which part of the month the numbers cover, in words."""
        tz = self.tz

        def at(ts: float) -> str:
            return self.local(ts).strftime("%d %b %H:%M")

        span = (f"data from {at(max(self.covered_from_ts, self.began_ts, self.start_ts))} to "
                f"{at(self.covered_until)} {tz}")
        if self.status == "complete":
            return "complete month"
        silent = describe(self.silent, self.upto_ts, lambda ts: f"{at(ts)} {tz}",
                          from_ts=self.start_ts)
        if self.hours_with_data >= self.hours_so_far and self.ended:
            return f"partial month: {span}; {silent}"
        silent = f"; {silent}" if silent else ""
        share = self.hours_of_data / self.hours_so_far if self.hours_so_far else 0.0
        pct = f"{share:.0%}" if share >= 0.01 or not share else f"{share:.2%}"  # not 0%
        hours = (f"{self.data_hours_said} of the "
                 + ("month's" if self.ended else "month's first") + f" {self.hours_so_far:,} "
                 f"hours have data ({pct})")
        if not self.ended and self.covered_until_ts > self.generated_ts + 3600:
            hours = (f"data stamped up to {at(self.covered_until_ts)} {tz}, after now "
                     f"({at(self.generated_ts)} {tz}): a node's clock runs ahead")
        if self.status == "month_to_date":
            return f"month to date: {span}; {hours}{silent}"
        return f"partial month: {span}; only {hours}{silent}"

    @property
    def data_hours_said(self) -> str:
        """The hours with data, as said: whole where they are (96), else to a tenth (0.5)."""
        x = self.hours_of_data
        return f"{round(x):,}" if abs(x - round(x)) < 0.05 else f"{x:,.1f}"

    def summary(self) -> dict[str, object]:
        t = self.total
        gpu_time = t.gpu_hours + t.missing_gpu_hours

        def iso(ts: float) -> str:  # with the zone's offset: 2026-03-01T00:00:00+01:00
            return self.local(ts).isoformat()

        return {
            "month": self.month, "timezone": self.tz,
            "month_start": iso(self.start_ts), "month_end": iso(self.end_ts),
            "complete": self.complete, "status": self.status,
            "coverage": self.coverage(),
            "covered_from": iso(max(self.covered_from_ts, self.start_ts)),
            "covered_until": iso(self.covered_until),
            "hours_with_data": self.hours_with_data, "hours_so_far": self.hours_so_far,
            "hours_of_data": self.hours_of_data,
            "it_kwh": t.it_kwh, "facility_kwh": t.facility_kwh, "co2e_kg": t.co2e_kg,
            "co2e_t": t.co2e_kg / 1000, "cost": t.cost, "currency": self.currency,
            "projected_co2e_kg": self.projected_co2e_kg,
            "projection_withheld": self.projection[1],
            "gpu_kwh": t.gpu_kwh,
            "gpu_hours": t.gpu_hours, "idle_gpu_hours": t.idle_gpu_hours,
            "idle_kwh": t.idle_kwh, "idle_energy_share": t.idle_energy_share,
            "idle_time_share": t.idle_time_share,
            "over_tdp_gpu_hours": t.over_tdp_gpu_hours,
            "missing_gpu_hours": t.missing_gpu_hours,
            "missing_share": t.missing_gpu_hours / gpu_time if gpu_time else 0.0,
            "uncounted_gpu_hours": self.uncounted_gpu_hours,
            "gap_measured": {"it_kwh": self.gap_kwh, "gpu_gaps": round(self.gap_count),
                             "nodes": self.gap_nodes,
                             "longest_gap_hours": self.longest_gap_s / 3600,
                             "said": self.gaps_said()},
            "silent_nodes": [{"cluster": x.cluster, "node": x.node, "gpus": x.gpus,
                              "last_frame": iso(x.since_ts)} for x in self.silent],
            "clusters_warning": self.clusters_warning,
            "intensity_filled_hours": self.intensity_filled_hours,
            "pue_filled_hours": self.pue_filled_hours,
            "intensity_fallback_hours": self.intensity_fallback_hours,
            "pue_fallback_hours": self.pue_fallback_hours,
            "series_warning": self.series_warning,
            "energy_by_device_kwh": self.devices,
            "by_part": [{"part": x.name, "it_kwh": x.it_kwh, "gpu_kwh": x.gpu_kwh,
                         "gpu_hours": x.gpu_hours, "idle_time_share": x.idle_time_share,
                         "over_tdp_gpu_hours": x.over_tdp_gpu_hours}
                        for x in self.lines.get("part", [])],
            "counts": {k: len(v) for k, v in self.lines.items()},
            "repeat_offenders": [
                {"cluster": o.cluster, "node": o.node, "lemon_score": o.score,
                 "xids": {str(c): n for c, n in o.xids.items()}} for o in self.offenders],
            "events_kept_since": (None if self.events_kept_since_ts is None
                                  else iso(self.events_kept_since_ts)),
            "method": self.method,
            "generated": iso(self.generated_ts),
        }


# (rows read so far, share of the month's span read): called after each chunk of rows.
Progress = Callable[[int, float], None]


def build(rows: Sequence[EnergyRow], model: CarbonModel, start_ts: int, end_ts: int,
          month: str = "", now: float | None = None, tz: str = "UTC") -> Report:
    """The report of these ledger rows (pure)."""
    return build_chunks([rows], model, start_ts, end_ts, month, now, tz=tz)


def build_chunks(chunks: Iterable[Sequence[EnergyRow]], model: CarbonModel, start_ts: int,
                 end_ts: int, month: str = "", now: float | None = None,
                 progress: Progress | None = None, tz: str = "UTC",
                 parts: Parts | None = None) -> Report:
    """The report of the ledger rows in ``chunks`` (oldest first, e.g. a few hours of the
    month each, as :func:`ledger_chunks` reads them): each chunk is summed per job, user,
    team, node, rack, cluster and day and let go, so memory grows with the names, not with the
    rows (a month of 1,000 GPUs is about 1.6 million rows). ``progress`` hears of each.
    ``tz``: the time zone of the month [start, end) (``report_month.month_span``); an hour
    the month's edge cuts counts for its share. ``parts``: each GPU's product name, for the
    lines per GPU part (``board_parts``)."""
    acc = Month(model, start_ts, end_ts, tz, parts=dict(parts or {}))
    n = 0
    for chunk in chunks:
        acc.add(chunk)
        n += len(chunk)
        if progress is not None and chunk:
            done = (chunk[-1].bucket_ts + 3600 - start_ts) / max(1, end_ts - start_ts)
            progress(n, min(1.0, max(0.0, done)))
    # Counts are of grid-hours: an hour priced on two grids counts on each.
    fs = list(acc.factors.values())
    grids = _grid_hours(acc.factors)
    uniq_hours = sorted({h for _, h in acc.factors})
    # The chart's line: the global grid's hours, else (every cluster has its own) the first.
    hourly = grids.get("") or next(iter(grids.values()), [])
    ci_fallback = sum(f.intensity_from_fallback for f in fs)
    pue_fallback = sum(f.pue_from_fallback for f in fs)
    newest = uniq_hours[-1] + 3600 if n else start_ts
    oldest = uniq_hours[0] if n else start_ts
    when = time.time() if now is None else now
    began = data_began(acc.oldest_rows, when) or oldest
    hour_data = [HourData(h, *a) for h, a in sorted(acc.hours.items())
                 if start_ts - 3600 < h < end_ts]  # the hours that overlap the month
    upto = min(max(when, start_ts), end_ts)
    with_data = measured_hours(hour_data, max(start_ts, began), upto)
    return Report(
        month=month, start_ts=start_ts, end_ts=end_ts, generated_ts=when,
        covered_from_ts=oldest, covered_until_ts=newest,
        total=Line("total", "all", **acc.total),
        lines={kind: acc.lines(kind) for kind in KINDS}, daily=acc.daily_lines(),
        hourly_intensity=hourly, cluster_intensity={g: v for g, v in grids.items() if g},
        intensity_filled_hours=sum(1 for f in fs if f.intensity_filled),
        pue_filled_hours=sum(1 for f in fs if f.pue_filled),
        method=model.method(sorted(acc.kinds["cluster"].index)),
        currency=model.currency, devices=acc.devices,
        hours_with_data=hours_with_data(with_data, start_ts, upto),
        hours_of_data=sum(measured_hours([h._replace(missing_s=0.0) for h in hour_data],
                                         max(start_ts, began), upto).values()) / 3600,
        intensity_fallback_hours=ci_fallback, pue_fallback_hours=pue_fallback,
        series_warning=grid_warnings(model, acc.factors),
        clusters_warning=clusters_warning(model, acc.kinds["cluster"].index),
        began_ts=began, hour_data=hour_data, tz=tz, nodes=tuple(sorted(acc.nodes)),
        gap_kwh=acc.gap["kwh"], gap_count=acc.gap["gaps"], gap_nodes=len(acc.gap_nodes),
        longest_gap_s=acc.gap["longest_s"])


def _grid_hours(factors: dict[tuple[str, int], HourFactors]
                ) -> dict[str, list[tuple[int, float, bool]]]:
    """Per grid ("" the global one), its (hour, gCO2e/kWh, filled) in hour order."""
    out: dict[str, list[tuple[int, float, bool]]] = {}
    for (grid, h), f in sorted(factors.items(), key=lambda kv: kv[0][1]):
        out.setdefault(grid, []).append((h, f.intensity_g_per_kwh, f.intensity_filled))
    return out


def board_parts(store: object, end_ts: float) -> Parts:
    """Each GPU slot's part, (cluster, node, device) -> product name, as the newest
    ``gpu_identity`` event before ``end_ts`` names it (a board is named when a processor
    first sees it, which may be long before the month); none from a store without events.
    A slot whose board changed part in the month is counted under its newer part."""
    events = getattr(store, "events", None)
    if events is None:
        return {}
    out: Parts = {}
    for e in sorted(events(0.0, end_ts, kinds=["gpu_identity"]), key=lambda e: e.ts):
        if model := Board.of_event(e).model:
            out[(e.cluster, e.node, e.device)] = model
    return out


def ledger_chunks(store: EnergyStore, start_ts: int, end_ts: int,
                  window_s: int = 6 * 3600, cluster: str | None = None
                  ) -> Iterator[list[EnergyRow]]:
    """The ledger rows of the hours that overlap [start, end) (of one cluster, or all), a
    window of hours at a time, oldest first: what :func:`build_chunks` reads, so that no
    backend holds the month's rows at once. A month of Asia/Kolkata begins at 18:30 UTC:
    its first ledger hour is 18:00."""
    first, last = ledger_span(start_ts, end_ts)
    for t in range(first, last, window_s):
        yield store.energy(t, min(t + window_s, last), cluster=cluster)
