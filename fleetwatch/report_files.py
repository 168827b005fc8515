"""The monthly report's files and the ``fleetwatch report`` command: thin I/O around
``fleetwatch.report``'s pure ``build``.

Reads the month's ledger rows from the store, builds the report, and writes an
HTML report (``report_html``), a CSV with a row per job, user, team, node and
cluster, and a JSON summary; returns the headline the command prints.
"""

from __future__ import annotations

import csv
import json
import time
from dataclasses import asdict
from pathlib import Path

from fleetwatch import amounts
from fleetwatch.carbon import CarbonModel
from fleetwatch.config import Config
from fleetwatch.pipeline.store.ledger import EnergyStore
from fleetwatch.report import KINDS, Report, ReportError, build, month_span, resolve_month

CSV_FIELDS = ("kind", "name", "it_kwh", "facility_kwh", "co2e_kg", "cost", "gpu_hours",
              "gpu_kwh", "idle_share", "idle_kwh", "idle_gpu_hours", "over_tdp_gpu_hours",
              "missing_gpu_hours")


def write_csv(report: Report, path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(CSV_FIELDS)
        for kind in KINDS:
            for line in report.lines[kind]:
                d = asdict(line)
                d["idle_share"] = line.idle_share
                w.writerow([d[k] if isinstance(d[k], str) else f"{d[k]:.6f}"
                            for k in CSV_FIELDS])


def write_report(store: EnergyStore, model: CarbonModel, month: str, out_dir: str | Path,
                 store_name: str = "", now: float | None = None) -> dict[str, Path]:
    """The month's HTML, CSV and JSON in ``out_dir``; returns their paths."""
    from fleetwatch.report_html import render

    start, end = month_span(month)
    rows = store.energy(start, end)
    if not rows:
        raise ReportError(f"no energy in the ledger for {month} in {store_name or 'the store'}: "
                          "the processor writes it as frames arrive; check store.kind/path "
                          "and the month")
    report = build(rows, model, start, end, month, now)
    out = Path(out_dir)
    paths = {ext: out / f"fleetwatch-energy-{month}.{ext}" for ext in ("html", "csv", "json")}
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_csv(report, paths["csv"])
        summary = report.summary() | {"store": store_name}
        paths["json"].write_text(json.dumps(summary, indent=2) + "\n", "utf-8")
        paths["html"].write_text(render(report, store_name), "utf-8")
    except OSError as exc:
        where = exc.filename or out
        raise ReportError(f"--out {str(out_dir)!r}: cannot write {where} ({exc.strerror or exc}); "
                          "choose a directory you can write to") from exc
    return paths


def report_month(config: Config, month: str, out_dir: str | Path) -> str:
    """``fleetwatch report``: the files for ``month`` (``YYYY-MM``, ``previous`` or
    ``current``) from the configured store; returns what to print (the headline and the
    paths)."""
    from fleetwatch.carbon import CarbonDataError, model_from_config
    from fleetwatch.pipeline.store.base import StoreError
    from fleetwatch.wiring import open_store, store_name

    month = resolve_month(month, time.time())
    month_span(month)  # a wrong month is said before the store is opened
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
        paths = write_report(store, model, month, out_dir, name)  # type: ignore[arg-type]
    except StoreError as exc:
        raise ReportError(f"cannot read the ledger: {exc}") from exc
    finally:
        store.close()
    s = json.loads(paths["json"].read_text("utf-8"))
    head = (f"{month}: {amounts.mass(s['co2e_kg'])}, {amounts.energy(s['facility_kwh'])} "
            f"facility ({amounts.energy(s['it_kwh'])} IT), "
            f"{amounts.money(s['cost'], s['currency'])}, "
            f"{s['gpu_hours']:,.1f} GPU-hours, {s['idle_energy_share']:.1%} of GPU energy idle, "
            f"{s['missing_gpu_hours']:,.1f} GPU-hours missing")
    lines = [head]
    if s["series_warning"]:
        lines.append(f"  warning: {s['series_warning']}")
    if not s["complete"]:
        lines.append(f"  {s['coverage']}")
    if s["projected_co2e_kg"] is not None:
        lines.append(f"  projected month: {amounts.mass(s['projected_co2e_kg'])} "
                     "at the rate so far")
    return "\n".join([*lines, *(f"  {p}" for p in paths.values())])
