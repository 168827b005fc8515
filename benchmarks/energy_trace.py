"""The benchmarks' month of a GPU fleet: a vectorised power trace with ground truth, put
through the integrator's array path into a store's ledger (see benchmarks/report.py)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import numpy as np

from fleetwatch.pipeline.energy_arrays import integrate_arrays
from fleetwatch.pipeline.energy_settings import EnergySettings
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.report_month import month_span

MONTH = "2022-05"
INTERVAL_S = 15.0
FINE = 3            # ground-truth knots per sample interval (5 s)
GPUS_PER_NODE = 8


@dataclass
class Ledger:
    truth_j: float
    rows: int
    integrate_s: float
    generate_s: float
    samples: int
    gpus: int
    roll_up_s: float


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


def month_ledger(store: SqliteStore, days: int, gpus: int) -> Ledger:
    """Fill ``store``'s ledger with ``days`` of ``gpus`` GPUs from the start of MONTH."""
    rng = np.random.default_rng(0)
    start, _ = month_span(MONTH)
    end = start + days * 86400
    nodes = gpus // GPUS_PER_NODE
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
    settings = EnergySettings(tdp_w=400.0)  # the A100 SXM4's TDP (fleetwatch.parts)
    integrate_s = 0.0
    rows_written = 0
    t_gen = time.perf_counter()
    for day in range(days):
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
        print(f"\r  day {day + 1}/{days}: {rows_written:,} ledger rows",
              end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    generate_s = time.perf_counter() - t_gen - integrate_s
    # The processor rolls each hour up for the dashboard once it has closed; here, at once.
    t0 = time.perf_counter()
    store.roll_up_energy(end)
    roll_up_s = time.perf_counter() - t0
    samples = int(days * 86400 / INTERVAL_S * n_g)
    return Ledger(truth, rows_written, integrate_s, generate_s, samples, n_g, roll_up_s)
