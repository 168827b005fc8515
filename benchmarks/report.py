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

import numpy as np

from fleetwatch.carbon import build_model
from fleetwatch.pipeline.energy import EnergySettings
from fleetwatch.pipeline.energy_arrays import integrate_arrays
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.report import month_span, write_report

MONTH = "2022-05"
INTERVAL_S = 15.0
FINE = 3            # ground-truth knots per sample interval (5 s)
GPUS_PER_NODE = 8
CISO = Path(__file__).resolve().parents[1] / "tests" / "data" / "eia_hourly_2022_CISO.csv"


def schedule(rng: np.random.Generator, nodes: int, start: float, end: float
             ) -> tuple[list[np.ndarray], list[np.ndarray], list[tuple[str, str, str]]]:
    """Per node: segment start times and owner codes (0: idle); and the owner table."""
    owners = [("", "", "")]
    starts, codes = [], []
    for _ in range(nodes):
        t = start - rng.exponential(3600)
        s, c = [], []
        busy = rng.random() < 0.7
        while t < end:
            s.append(t)
            if busy:
                user = int(rng.integers(40))
                owners.append((f"job-{len(owners):05d}", f"user{user:02d}",
                               f"team{user % 6}"))
                c.append(len(owners) - 1)
                t += rng.exponential(6 * 3600)
            else:
                c.append(0)
                t += rng.exponential(3600)
            busy = not busy
        starts.append(np.array(s))
        codes.append(np.array(c))
    return starts, codes, owners


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--days", type=int, default=31)
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--out", help="keep the report files here (default: a temp dir)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    start, _ = month_span(MONTH)
    end = start + args.days * 86400
    nodes = args.gpus // GPUS_PER_NODE
    n_g = nodes * GPUS_PER_NODE
    devices = [(f"cluster-{'ab'[n % 2]}", f"rack-{n // 8:02d}", f"node-{n:03d}", f"gpu{g}")
               for n in range(nodes) for g in range(GPUS_PER_NODE)]
    node_of = np.repeat(np.arange(nodes), GPUS_PER_NODE)
    seg_starts, seg_codes, owners = schedule(rng, nodes, start, end)
    p_idle = rng.normal(60.0, 4.0, n_g)
    p_job = rng.normal(395.0, 30.0, n_g)
    has_counter = np.arange(n_g) % 2 == 0
    reload_at = {int(g): start + rng.uniform(0.2, 0.8) * (end - start)
                 for g in rng.choice(np.flatnonzero(has_counter), 10, replace=False)}
    running = rng.uniform(1e8, 5e9, n_g)        # NVML counter: J since driver load
    truth = 0.0
    settings = EnergySettings()
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(Path(tmp) / "ledger.db")
        integrate_s = 0.0
        rows_written = 0
        t_gen = time.perf_counter()
        for day in range(args.days):
            d0 = start + day * 86400
            n_fine = int(86400 / INTERVAL_S) * FINE + 1
            tf = d0 + np.arange(n_fine) * (INTERVAL_S / FINE)
            owner_f = np.empty((n_fine, nodes), np.int32)
            for n in range(nodes):
                k = np.searchsorted(seg_starts[n], tf, side="right") - 1
                owner_f[:, n] = seg_codes[n][np.maximum(k, 0)]
            busy = (owner_f > 0)[:, node_of]
            power_f = np.where(busy, p_job, p_idle) + rng.normal(0.0, 12.0, busy.shape)
            np.clip(power_f, 30.0, 700.0, out=power_f)
            fine_e = 0.5 * (power_f[1:] + power_f[:-1]) * (INTERVAL_S / FINE)
            step_e = fine_e.reshape(-1, FINE, n_g).sum(axis=1)  # per 15 s interval
            truth += float(step_e.sum())
            pick = slice(0, None, FINE)
            ts, power = tf[pick], power_f[pick]
            counter = np.empty_like(power)
            counter[0] = running
            np.cumsum(step_e, axis=0, out=counter[1:])
            counter[1:] += running
            for g, t_reload in reload_at.items():  # a driver reload: the counter restarts
                after = ts >= t_reload
                if after.any() and ts[0] < t_reload:
                    counter[after, g] -= counter[np.argmax(after), g] - 1000.0
            running = counter[-1].copy()  # the last sample is the next day's first
            counter[:, ~has_counter] = np.nan
            owner = owner_f[pick][:, node_of]
            t0 = time.perf_counter()
            rows = integrate_arrays(ts, power, counter, owner == 0, owner, devices, owners,
                                    settings)
            store.write_energy(rows, [])
            integrate_s += time.perf_counter() - t0
            rows_written += len(rows)
            print(f"\r  day {day + 1}/{args.days}: {rows_written:,} ledger rows",
                  end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
        generate_s = time.perf_counter() - t_gen - integrate_s
        model = build_model("USA", 0.0, str(CISO), "avg_CI", 1.2, "", "pue", 0.12, "USD")
        out = Path(args.out) if args.out else Path(tmp) / "out"
        t0 = time.perf_counter()
        paths = write_report(store, model, MONTH, out, "benchmark ledger")
        report_s = time.perf_counter() - t0
        summary = json.loads(paths["json"].read_text())
        ledger_j = summary["energy_by_device_kwh"]["gpu"] * 3.6e6
        store.close()
    error = abs(ledger_j - truth) / truth * 100
    samples = args.days * 86400 / INTERVAL_S * n_g
    print(f"trace: {n_g} GPUs x {args.days} d at {INTERVAL_S:g} s = {samples:,.0f} GPU-samples "
          f"(generated in {generate_s:.1f} s); integrated into {rows_written:,} ledger rows in "
          f"{integrate_s:.1f} s", file=sys.stderr)
    print(f"report: {report_s:.1f} s; {summary['co2e_t']:.1f} t CO2e, "
          f"{summary['it_kwh']:,.0f} kWh; ledger {ledger_j / 3.6e6:,.1f} kWh vs truth "
          f"{truth / 3.6e6:,.1f} kWh: {error:.4f}%", file=sys.stderr)
    print(json.dumps({"report_month_1000_gpus_s": round(report_s, 2),
                      "energy_error_pct": round(error, 5), "integrate_s": round(integrate_s, 1),
                      "ledger_rows": rows_written, "gpu_samples": int(samples),
                      "gpus": n_g, "days": args.days}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
