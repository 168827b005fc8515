"""The monthly report's files and the ``fleetwatch report`` command: thin I/O around
``fleetwatch.report``'s pure ``build_chunks``.

Reads the month's ledger rows from the store, builds the report, and writes an
HTML report (``report_html``), a CSV with a row per job, user, team, node, rack and
cluster, and a JSON summary; returns the headline the command prints.
"""

from __future__ import annotations

import csv
import json
import sys
import time
from datetime import datetime
from pathlib import Path

from fleetwatch import amounts
from fleetwatch.carbon import CarbonModel
from fleetwatch.config import Config
from fleetwatch.models.lemon import HISTORY_HALF_LIVES
from fleetwatch.models.lemon_report import Offender, offenders
from fleetwatch.pipeline.store.ledger import EnergyStore
from fleetwatch.report import (
    KINDS,
    Progress,
    Report,
    board_parts,
    build_chunks,
    ledger_chunks,
)
from fleetwatch.report_month import (
    NothingToReport,
    ReportError,
    ZoneError,
    month_span,
    resolve_month,
    zone,
    zone_name,
)
from fleetwatch.report_silent import silent_before, silent_nodes

# The columns of earlier releases keep their place and meaning (consumers read them by
# name or by position); columns added since go at the end. ``idle_share`` is kept for
# them: the share of GPU energy spent idle, the same number as ``idle_energy_share``.
CSV_FIELDS = ("kind", "name", "it_kwh", "facility_kwh", "co2e_kg", "cost", "gpu_hours",
              "gpu_kwh", "idle_share", "idle_kwh", "idle_gpu_hours",
              "over_tdp_gpu_hours", "missing_gpu_hours", "idle_time_share", "idle_energy_share",
              "currency", "cluster", "timezone", "month_start", "month_end")
# A kept column's name -> the ``Line`` attribute that gives it.
_KEPT = {"idle_share": "idle_energy_share"}
# Every column but ``currency`` is a ``Line`` attribute; ``currency`` (the cost column's,
# from energy.currency) is the report's, on every row, so that the CSV alone says it.
# ``cluster``: the cluster of a job, node, rack or cluster row (job ids, node and rack names
# repeat across clusters); empty for users and teams, who span clusters. ``timezone``,
# ``month_start`` and ``month_end``: the month the rows cover, its ends local midnights in
# ISO 8601 with their offset (2026-03-01T00:00:00+01:00), on every row as ``currency``.
_ATTRS = tuple(_KEPT.get(name, name) for name in CSV_FIELDS[:-5])
# What a spreadsheet reads as the start of a formula (OWASP "CSV injection"): a text cell
# starting with one gets a leading ' so Excel and LibreOffice show it as text. Job, user
# and team names come from the scheduler and pods, which the cluster's tenants name.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _text_cell(value: str) -> str:
    return "'" + value if value.startswith(_FORMULA_START) else value


def write_csv(report: Report, path: Path) -> None:
    month = [report.tz, report.local(report.start_ts).isoformat(),
             report.local(report.end_ts).isoformat()]
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(CSV_FIELDS)
        for kind in KINDS:
            for line in report.lines[kind]:
                # getattr, not asdict: asdict deep-copies, seconds for 66,000 jobs.
                values = [*(getattr(line, k) for k in _ATTRS), report.currency, line.cluster,
                          *month]
                # Only text is escaped: numbers (negative ones too) are written as numbers.
                w.writerow([_text_cell(v) if isinstance(v, str) else f"{v:.6f}"
                            for v in values])


def _no_such_cluster(store: EnergyStore, cluster: str, month: str, start: int, end: int,
                     store_name: str) -> None:
    """Raise naming the clusters the month's ledger has, where ``cluster`` is not one of
    them (a misspelt or unknown name, as ``alerts --cluster`` says); nothing if the
    ledger has none (then the store or the month is what is wrong)."""
    have = sorted({r.cluster for rows in ledger_chunks(store, start, end) for r in rows})
    if have and cluster not in have:
        raise ReportError(f"no cluster {cluster!r} in the ledger for {month} in {store_name}; "
                          f"clusters it has for {month}: {', '.join(have)} (name one of them, "
                          "or leave --cluster out for every cluster)")


def _ledger_after(store: EnergyStore, end: int, now: float, cluster: str | None) -> bool:
    """Whether the ledger holds energy between ``end`` (a month's) and ``now``: a month
    before the first row is one before fleetwatch ran, not a store misconfigured."""
    return int(now) > end and any(rows for rows in ledger_chunks(
        store, end, int(now), window_s=7 * 86400, cluster=cluster))


def write_report(store: EnergyStore, model: CarbonModel, month: str, out_dir: str | Path,
                 store_name: str = "", now: float | None = None,
                 progress: Progress | None = None,
                 lemon_half_life_d: float = 7.0, cluster: str | None = None,
                 tz: str = "UTC", max_gap_s: float = 60.0,
                 zone_in_name: bool = False) -> dict[str, Path]:
    """The month's HTML, CSV and JSON in ``out_dir``; returns their paths. The ledger is
    read a few hours at a time (``ledger_chunks``); ``progress`` hears of each. A store
    that keeps events adds the month's repeat offenders (lemon scores). ``cluster``: that
    cluster's rows only, in files named after it (another cluster's report beside them
    is kept). ``tz``: the time zone whose calendar month it is (its local midnights).
    ``max_gap_s`` (energy.max_gap_s): a node whose last frame is older than that at the
    month's end (now, before it) is silent, its time since in no row yet (report_silent).
    ``zone_in_name``: the files' names end in the zone (``-Europe_Berlin``), so that a
    report of the month in another zone than energy.timezone's keeps that one's files."""
    from fleetwatch.report_html import render

    start, end = month_span(month, tz)
    report = build_chunks(ledger_chunks(store, start, end, cluster=cluster), model, start,
                          end, month, now, progress, tz, parts=board_parts(store, end))
    if not report.hourly_intensity and cluster is not None:
        _no_such_cluster(store, cluster, month, start, end, store_name or "the store")
    if cluster is not None:
        store_name = f"{store_name or 'the store'}, cluster {cluster}"
        report.clusters_warning = ""  # the other clusters' tables are not for this one
    if not report.hourly_intensity and start >= report.generated_ts:
        raise ReportError(f"{month} has not begun: it starts {_at(start, tz)}, and it is "
                          f"{_at(report.generated_ts, tz)} now; choose a month that has begun "
                          "(--month current, previous or YYYY-MM)")
    if not report.hourly_intensity and _ledger_after(store, end, report.generated_ts, cluster):
        raise NothingToReport(f"not enough history yet: the ledger of {store_name or 'the store'}"
                              f" begins after {month} (fleetwatch was installed since, or "
                              f"that month's rows were deleted), so there is nothing to "
                              f"report for {month}; nothing written")
    if not report.hourly_intensity:
        raise ReportError(f"no energy in the ledger for {month} in {store_name or 'the store'}: "
                          "the processor writes it as frames arrive; check store.kind/path "
                          "and the month")
    report.silent = sorted(
        silent_before(store, start, report.nodes, report.upto_ts, max_gap_s, cluster)
        + silent_nodes(store, report.nodes, report.upto_ts, max_gap_s, report.generated_ts),
        key=lambda x: (x.since_ts, x.cluster, x.node))
    report.offenders = [o for o in repeat_offenders(store, start, min(end, report.generated_ts),
                                                    lemon_half_life_d)
                        if cluster is None or o.cluster == cluster]
    report.events_kept_since_ts = events_horizon(store, min(end, report.generated_ts),
                                                 lemon_half_life_d)
    out = Path(out_dir)
    stem = (f"fleetwatch-energy-{month}" + ("" if cluster is None else f"-{cluster}")
            + (f"-{tz.replace('/', '_')}" if zone_in_name else ""))
    paths = {ext: out / f"{stem}.{ext}" for ext in ("html", "csv", "json")}
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_csv(report, paths["csv"])
        summary = report.summary() | {"store": store_name, "cluster": cluster or ""}
        paths["json"].write_text(json.dumps(summary, indent=2) + "\n", "utf-8")
        paths["html"].write_text(render(report, store_name), "utf-8")
    except OSError as exc:
        where = exc.filename or out
        raise ReportError(f"--out {str(out_dir)!r}: cannot write {where} ({exc.strerror or exc}); "
                          "choose a directory you can write to") from exc
    return paths


def repeat_offenders(store: object, start_ts: float, end_ts: float, half_life_d: float,
                     top: int = 10) -> list[Offender]:
    """The worst nodes by lemon score at ``end_ts`` from the store's XID and GPU-lost events
    of the last ``HISTORY_HALF_LIVES`` half-lives (none if the store keeps no events)."""
    events = getattr(store, "events", None)
    if events is None:
        return []
    since = end_ts - HISTORY_HALF_LIVES * half_life_d * 86400.0
    return offenders(events(since, end_ts, kinds=["xid", "gpu_state"]), start_ts, end_ts,
                     half_life_d, top)


def events_horizon(store: object, end_ts: float, half_life_d: float) -> float | None:
    """The instant before which retention deleted the events that the repeat offenders at
    ``end_ts`` are judged from (``repeat_offenders``), or None when none of them is gone."""
    pruned = getattr(store, "events_pruned_before", None)
    before = pruned() if callable(pruned) else None
    since = end_ts - HISTORY_HALF_LIVES * half_life_d * 86400.0
    return before if before is not None and before > since else None


def report_month(config: Config, month: str, out_dir: str | Path,
                 cluster: str | None = None, tz: str | None = None) -> str:
    """``fleetwatch report``: the files for ``month`` (``YYYY-MM``, ``previous`` or
    ``current``) from the configured store, of one cluster or all, in the calendar of
    ``tz`` (``--tz``; None: energy.timezone); returns what to print (the headline and
    the paths)."""
    from fleetwatch.carbon import CarbonDataError, model_from_config
    from fleetwatch.pipeline.store.base import StoreError
    from fleetwatch.wiring import open_store, store_name

    tz = config.energy.timezone if tz is None else tz
    try:
        tz = zone_name(tz)  # as the database spells it: "utc" is reported as "UTC"
    except ZoneError as exc:
        raise ZoneError(f"--tz: {exc}") from None
    # Another zone's report of the month is written beside energy.timezone's, not over it.
    other_zone = tz != zone_name(config.energy.timezone)
    month = resolve_month(month, time.time(), tz)
    month_span(month, tz)  # a wrong month is said before the store is opened
    try:
        model = model_from_config(config.carbon, config.energy)
    except CarbonDataError as exc:
        raise ReportError(str(exc)) from exc
    c = config.store
    name = store_name(c)
    try:
        store = open_store(c, read_only=c.kind == "sqlite")
    except StoreError as exc:
        raise ReportError(str(exc)) from exc
    try:
        if not hasattr(store, "energy"):
            raise ReportError(f"store.kind {c.kind!r} keeps no energy ledger")
        progress = _Progress(month)
        try:
            paths = write_report(store, model, month, out_dir, name,  # type: ignore[arg-type]
                                 progress=progress,
                                 lemon_half_life_d=config.models.lemon_half_life_d,
                                 cluster=cluster, tz=tz,
                                 max_gap_s=config.energy.max_gap_s,
                                 zone_in_name=other_zone)
        finally:
            progress.done()
    except StoreError as exc:
        raise ReportError(f"cannot read the ledger: {exc}") from exc
    finally:
        store.close()
    s = json.loads(paths["json"].read_text("utf-8"))
    which = f"{month} cluster {cluster}" if cluster else month
    which += "" if tz == "UTC" else f" ({tz})"
    head = (f"{which}: {amounts.mass(s['co2e_kg'])}, {amounts.energy(s['facility_kwh'])} "
            f"facility ({amounts.energy(s['it_kwh'])} IT), "
            f"{amounts.money(s['cost'], s['currency'])}, "
            f"{s['gpu_hours']:,.1f} GPU-hours, {s['idle_energy_share']:.1%} of GPU energy idle, "
            f"{s['missing_gpu_hours']:,.1f} GPU-hours missing")
    lines = [head]
    if not s["energy_by_device_kwh"].get("rest"):
        # Facility kWh is IT x PUE: without the rest of the node it is well under the meter.
        lines.append("  IT energy is GPUs and CPU packages only: the rest of the node (fans, "
                     "NICs, NVSwitches, memory, PSU losses) is not counted while "
                     "energy.node_static_w is 0; set it to the node's draw less its GPUs and "
                     "CPUs to count it")
    if s["series_warning"]:
        lines.append(f"  warning: {s['series_warning']}")
    if s["clusters_warning"]:
        lines.append(f"  warning: {s['clusters_warning']}")
    if not s["complete"]:
        lines.append(f"  {s['coverage']}")
    if s["projected_co2e_kg"] is not None:
        lines.append(f"  projected month: {amounts.mass(s['projected_co2e_kg'])} "
                     "at the rate of the hours with data")
    elif s["projection_withheld"]:
        lines.append(f"  projected month: withheld, {s['projection_withheld']}")
    return "\n".join([*lines, *(f"  {p}" for p in paths.values())])


class _Progress:
    """Reading the ledger, on stderr (stdout is the headline): a line rewritten at most
    once a second, from the first second on, so a short report prints nothing."""

    def __init__(self, month: str, every_s: float = 1.0) -> None:
        self.month = month
        self.every_s = every_s
        self.last = time.monotonic()
        self.shown = False

    def __call__(self, rows: int, done: float) -> None:
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            self.shown = True
            print(f"\r  reading the ledger for {self.month}: {done:6.1%} of the month, "
                  f"{rows:>12,} rows", end="", file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.shown:
            print(file=sys.stderr, flush=True)


def _at(ts: float, tz: str) -> str:
    return datetime.fromtimestamp(ts, zone(tz)).strftime(f"%Y-%m-%d %H:%M {tz}")
