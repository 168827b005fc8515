"""Benchmark: the monthly report over a month of 1,000 GPUs sampled every 15 s.

What it measures, exactly:

1. A vectorised power trace (not the simulator: frame by frame it would take
   hours here): 125 nodes x 8 GPUs in two clusters, jobs (exponential lengths,
   40 users in 6 teams) and idle gaps per node; per-GPU job and idle power
   (job power spread around the 400 W TDP, so some GPUs run above it), with
   noise, at a 5 s resolution. Ground truth is the exact energy of that
   piecewise-linear trace. The agents' view is a sample every 15 s: board
   power for every GPU, and NVML's energy counter (the exact running total)
   for half of them, 10 of which see a driver reload mid-month (counter back
   to ~0).
2. The ledger: the 15 s samples go, a day at a time, through the integrator's
   array path (``pipeline/energy_arrays.py``, tested to give the processor's
   rows) into a fresh SQLite store's ledger. Timed apart (``integrate_s``).
3. ``report_month_1000_gpus_s``: ``write_report`` for the month, as
   ``fleetwatch report`` runs it: read the ledger, price each hour (EIA hourly
   grid intensity for CISO 2022, with its empty hours filled), attribute per
   job, user, team, node and cluster, write the HTML, CSV and JSON.
4. ``energy_error_pct``: |ledger GPU energy - ground truth| / ground truth.

Last line is JSON. Targets (issue 13): report under 60 s, error under 1%.

    python benchmarks/report.py [--days 31] [--gpus 1000] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from energy_trace import MONTH, month_ledger

from fleetwatch.carbon import build_model
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.report import write_report

CISO = (Path(__file__).resolve().parents[1] / "tests" / "data" / "carbon"
        / "eia_hourly_2022_CISO.csv")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--days", type=int, default=31)
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--out", help="keep the report files here (default: a temp dir)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(Path(tmp) / "ledger.db")
        led = month_ledger(store, args.days, args.gpus)
        model = build_model("USA", 0.0, str(CISO), "avg_CI", 1.2, "", "pue", 0.12, "USD")
        out = Path(args.out) if args.out else Path(tmp) / "out"
        t0 = time.perf_counter()
        paths = write_report(store, model, MONTH, out, "benchmark ledger")
        report_s = time.perf_counter() - t0
        summary = json.loads(paths["json"].read_text())
        ledger_j = summary["energy_by_device_kwh"]["gpu"] * 3.6e6
        store.close()
    truth = led.truth_j
    error = abs(ledger_j - truth) / truth * 100
    print(f"trace: {led.gpus} GPUs x {args.days} d at 15 s = {led.samples:,} GPU-samples "
          f"(generated in {led.generate_s:.1f} s); integrated into {led.rows:,} ledger rows in "
          f"{led.integrate_s:.1f} s", file=sys.stderr)
    print(f"report: {report_s:.1f} s; {summary['co2e_t']:.1f} t CO2e, "
          f"{summary['it_kwh']:,.0f} kWh; ledger {ledger_j / 3.6e6:,.1f} kWh vs truth "
          f"{truth / 3.6e6:,.1f} kWh: {error:.4f}%", file=sys.stderr)
    print(json.dumps({"report_month_1000_gpus_s": round(report_s, 2),
                      "energy_error_pct": round(error, 5),
                      "integrate_s": round(led.integrate_s, 1), "ledger_rows": led.rows,
                      "gpu_samples": led.samples, "gpus": led.gpus, "days": args.days}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
