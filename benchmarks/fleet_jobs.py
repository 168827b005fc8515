"""Benchmark: one refresh of the fleet page at 1,000 nodes x 8 GPUs on SQLite, with and
without each GPU's job (and user) in the heatmap's hover.

The store holds each GPU's newest temperature, power and utilization, a month of job
events (a job per node a day, 16 events a node a day: ~500,000) and the ledger's current
hour (the users). Timed: what the page's callback does (``read_fleet``, the mutes, the
figure), without jobs (as before), then with ``FleetJobs``: its first refresh (a day of
events and the ledger's hours) and the refreshes after (the last hour's events). A first
version read the month of events: 4.3 s for its first refresh. Last line is JSON.

    python benchmarks/fleet_jobs.py [--nodes 1000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fleetwatch.dashboards import alert_tables, fleet  # noqa: E402
from fleetwatch.dashboards.data import read_fleet, read_mutes  # noqa: E402
from fleetwatch.dashboards.fleet_jobs import FleetJobs  # noqa: E402
from fleetwatch.pipeline.store.base import Event  # noqa: E402
from fleetwatch.pipeline.store.ledger import EnergyRow, bucket_floor  # noqa: E402
from fleetwatch.pipeline.store.sqlite import SqliteStore  # noqa: E402
from tests.energy.helpers import frame  # noqa: E402

GPUS, DAYS, RUNS = 8, 31, 5


def fill(store: SqliteStore, nodes: int, now: float) -> None:
    frames = [frame(now - 5, {g: {"gpu_temp_c": 40.0 + (n + g) % 40, "gpu_power_w": 300.0,
                                   "gpu_util_pct": 90.0} for g in range(GPUS)},
                    node=f"node{n:04d}", rack=f"rack{n // 16:03d}", cluster="sim")
              for n in range(nodes)]
    store.write(frames)
    day0 = now - now % 86400
    for d in range(DAYS):
        events = []
        for n in range(nodes):
            start = day0 - (DAYS - 1 - d) * 86400 + n
            job = f"{d * nodes + n}"
            for g in range(GPUS):
                place = ("sim", f"rack{n // 16:03d}", f"node{n:04d}", f"gpu{g}")
                events.append(Event(start, "job_start", *place, value=job))
                if d < DAYS - 1:
                    events.append(Event(start + 80000, "job_end", *place, value=job))
        store.write_events(events)
    hour = bucket_floor(now)
    store.write_energy([EnergyRow(hour, "sim", f"rack{n // 16:03d}", f"node{n:04d}",
                                  f"gpu{g}", f"{(DAYS - 1) * nodes + n}", f"user{n % 50}",
                                  "", 1e6, 0.0, 600.0, 0.0, 0.0, 0.0)
                        for n in range(nodes) for g in range(GPUS)], [])


SIZES: dict[bool, int] = {}  # with jobs -> the heatmap's JSON, bytes


def refresh(store: SqliteStore, now: float, jobs: FleetJobs | None) -> float:
    t = time.perf_counter()
    view = read_fleet(store, now)
    muted = alert_tables.notes(view.alerts, *read_mutes(store, view.alerts, now), now)
    held = jobs.read(store, now) if jobs is not None else None
    fig = fleet.parts(view, now, None, muted, held)[1]
    took = time.perf_counter() - t
    SIZES[jobs is not None] = len(fig.to_json())
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    args = ap.parse_args()
    now = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(Path(tmp) / "fleet.db")
        fill(store, args.nodes, now)
        without = [refresh(store, now, None) for _ in range(RUNS)]
        jobs = FleetJobs()
        first = refresh(store, now, jobs)
        later = [refresh(store, now + 15 * (i + 1), jobs) for i in range(RUNS)]
        held = jobs.read(store, now + 15 * (RUNS + 1))
        store.close()
    out = {"nodes": args.nodes, "gpus": args.nodes * GPUS,
           "without_jobs_s": round(statistics.median(without), 3),
           "with_jobs_first_s": round(first, 3),
           "with_jobs_later_s": round(statistics.median(later), 3),
           "figure_kb_without": SIZES[False] // 1024, "figure_kb_with": SIZES[True] // 1024,
           "gpus_with_a_job": len(held),
           "with_a_user": sum(" · user " in v for v in held.values())}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
