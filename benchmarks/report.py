"""Benchmark: the monthly report over a month of 1,000 GPUs sampled every 15 s.

What it measures, exactly:

1. ``energy_error_pct``: the fleet simulator (``collectors/sim``, 125 nodes x 8
   GPUs, its jobs and physics) runs ``--sim-days`` (default 31: the whole month)
   on its energy fast path; after each 15 s step the agents' view (board power,
   NVML's energy counter for half the GPUs, two nodes rebooting mid-month, the
   job on each node, SM activity for idle) goes, a day at a time, through the
   integrator's array path (``pipeline/energy_arrays.py``, tested to give the
   processor's rows) into a fresh SQLite store's ledger (``benchmarks/energy_sim.py``).
   The error is |ledger GPU energy - ground truth| / ground truth, the truth being
   the simulator's own per-GPU energy (``sim.energy_j``), the ledger's figure
   the one the report's JSON states.
2. ``report_month_1000_gpus_s``: ``write_report`` for the month, as
   ``fleetwatch report`` runs it: read the ledger, price each hour (EIA hourly
   grid intensity for CISO 2022, with its empty hours filled), attribute per
   job, user, team, node and cluster, write the HTML, CSV and JSON. Over the
   simulated ledger when ``--sim-days`` covers the month (31); with fewer
   simulated days, over a full month of the vectorised power trace of
   ``benchmarks/energy_trace.py`` (``timing_from`` in the JSON says which).

3. ``report_peak_rss_mb``: the report's peak resident memory. The report runs in
   a fresh interpreter (this script with ``--store``), so the figure is the
   report's own, not the simulator's.

``--store DB [--month YYYY-MM]`` times only the report over an existing SQLite
store (opened read-only), e.g. a copy of a production ledger: wall seconds, peak
RSS and the rows read.

Last line is JSON. Targets (issue 13): report under 60 s, error under 1%.

    python benchmarks/report.py [--sim-days 31] [--gpus 1000] [--out DIR]
    python benchmarks/report.py --store ledger.db [--month 2022-10] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from energy_sim import MONTH, sim_month_ledger
from energy_trace import month_ledger

from fleetwatch.carbon import build_model
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.report_files import write_report

CISO = (Path(__file__).resolve().parents[1] / "tests" / "data" / "carbon"
        / "eia_hourly_2022_CISO.csv")
MONTH_DAYS = 31  # May


def _report(store: SqliteStore, out: Path) -> tuple[float, dict]:
    """Seconds ``write_report`` takes for MONTH over ``store``, and its JSON summary."""
    model = build_model("USA", 0.0, str(CISO), "avg_CI", 1.2, "", "pue", 0.12, "USD")
    t0 = time.perf_counter()
    paths = write_report(store, model, MONTH, out, "benchmark ledger")
    seconds = time.perf_counter() - t0
    return seconds, json.loads(paths["json"].read_text())


def _peak_rss_mb() -> float:
    """This process's peak resident memory (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def report_only(db: Path, month: str, out: Path) -> dict:
    """Time and peak RSS of ``write_report`` over an existing store, in this process."""
    store = SqliteStore(db, read_only=True)
    rows = [0]

    def progress(n: int, done: float) -> None:
        rows[0] = n

    model = build_model("USA", 0.0, str(CISO), "avg_CI", 1.2, "", "pue", 0.12, "USD")
    t0 = time.perf_counter()
    paths = write_report(store, model, month, out, str(db), progress=progress)
    seconds = time.perf_counter() - t0
    store.close()
    summary = json.loads(paths["json"].read_text())
    return {"report_s": round(seconds, 2), "report_peak_rss_mb": round(_peak_rss_mb(), 1),
            "ledger_rows": rows[0], "it_kwh": summary["it_kwh"], "month": month}


def _report_in_child(db: Path, month: str, out: Path) -> dict:
    """``report_only`` in a fresh interpreter: its peak RSS is the report's alone."""
    done = subprocess.run([sys.executable, __file__, "--store", str(db), "--month", month,
                           "--out", str(out)], check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sim-days", type=float, default=MONTH_DAYS,
                    help="days of the simulator to measure the error on (31: the month)")
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--out", help="keep the report files here (default: a temp dir)")
    ap.add_argument("--store", help="only time the report over this SQLite store")
    ap.add_argument("--month", default=MONTH, help="with --store: the month (YYYY-MM)")
    args = ap.parse_args()
    if args.store:
        with tempfile.TemporaryDirectory() as tmp:
            got = report_only(Path(args.store), args.month, Path(args.out or tmp))
        print(f"report {got['month']} over {got['ledger_rows']:,} ledger rows: "
              f"{got['report_s']:.1f} s, peak RSS {got['report_peak_rss_mb']:,.0f} MB",
              file=sys.stderr)
        print(json.dumps(got))
        return 0
    if not 0 < args.sim_days <= MONTH_DAYS:
        ap.error(f"--sim-days must be in (0, {MONTH_DAYS}], got {args.sim_days}")
    whole = args.sim_days >= MONTH_DAYS
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out) if args.out else Path(tmp) / "out"
        store = SqliteStore(Path(tmp) / "sim.db")
        led = sim_month_ledger(store, args.sim_days, args.gpus)
        sim_s, summary = _report(store, out / "sim" if not whole else out)
        store.close()
        ledger_j = summary["energy_by_device_kwh"]["gpu"] * 3.6e6
        print(f"simulator: {led.gpus} GPUs x {led.days:g} d at 15 s = {led.samples:,} "
              f"GPU-samples in {led.simulate_s:.1f} s; integrated into {led.rows:,} ledger "
              f"rows in {led.integrate_s:.1f} s; report over it {sim_s:.1f} s", file=sys.stderr)
        if whole:
            timed, timing = Path(tmp) / "sim.db", "simulator"
        else:  # the report's timing still wants a whole month of 1,000 GPUs
            trace = SqliteStore(Path(tmp) / "trace.db")
            month_ledger(trace, MONTH_DAYS, args.gpus)
            trace.close()
            timed, timing = Path(tmp) / "trace.db", "energy_trace"
        child = _report_in_child(timed, MONTH, out / "timed")
        report_s, rss_mb = child["report_s"], child["report_peak_rss_mb"]
        print(f"report over a month of the {timing} ledger ({child['ledger_rows']:,} rows): "
              f"{report_s:.1f} s, peak RSS {rss_mb:,.0f} MB; {child['it_kwh']:,.0f} kWh",
              file=sys.stderr)
    truth = led.truth_j
    error = abs(ledger_j - truth) / truth * 100
    print(f"ledger {ledger_j / 3.6e6:,.3f} kWh vs simulator truth {truth / 3.6e6:,.3f} kWh: "
          f"{error:.5f}%; {summary['co2e_t']:.2f} t CO2e", file=sys.stderr)
    print(json.dumps({"report_month_1000_gpus_s": round(report_s, 2),
                      "report_peak_rss_mb": rss_mb,
                      "energy_error_pct": round(error, 5), "sim_days": round(led.days, 3),
                      "timing_from": timing, "gpus": led.gpus, "gpu_samples": led.samples,
                      "simulate_s": round(led.simulate_s, 1),
                      "integrate_s": round(led.integrate_s, 1), "ledger_rows": led.rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
