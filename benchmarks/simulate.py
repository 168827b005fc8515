"""Benchmark: `fleetwatch simulate` against a bare SQLite executemany of the same rows.

Writes DAYS (default 7) of a 32-GPU fleet (4 nodes x 8) sampled every 15 s
into a fresh embedded store through the real `simulate` path (simulation,
processor, detector, alerts, rollups), then inserts the very same rows with
a bare `executemany`, one row per sample (ts, series id, value) as the plainest
schema has it, and prints both rates.
Last line is JSON. Targets (issue #2): simulate >= half the raw rate, and a
week in under 60 s.

    python benchmarks/simulate.py [--days 7]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from fleetwatch.collectors.sim import SimParams, parse_fault
from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.simulate import simulate


def raw_sqlite(db: Path, rows_from: Path) -> tuple[int, float]:
    """Time a bare executemany of every sample simulate wrote, one row per sample.

    The samples are read back from simulate's store first (not timed) and given
    integer series ids, as the plainest schema a user would write has them.
    """
    ids: dict[object, int] = {}
    rows = [(ts, ids.setdefault(key, len(ids)), value)
            for key, ts, value in SqliteStore(rows_from, read_only=True).export()]
    per_hour = len(rows) * 3600 * 1000 // max(1, rows[-1][0] - rows[0][0])
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE samples (ts INTEGER NOT NULL, sid INTEGER NOT NULL, "
                 "value REAL NOT NULL, PRIMARY KEY (ts, sid)) WITHOUT ROWID")
    t0 = time.perf_counter()
    # Same transaction size as simulate: one hour of the fleet per commit.
    for i in range(0, len(rows), per_hour):
        with conn:
            conn.executemany("INSERT OR REPLACE INTO samples VALUES (?, ?, ?)",
                             rows[i:i + per_hour])
    seconds = time.perf_counter() - t0
    conn.close()
    return len(rows), seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=float, default=7.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "simulate.db"
        store = SqliteStore(db)
        end = time.time()
        params = SimParams(nodes=4, gpus=8, interval_s=15.0, seed=1)

        def progress(done: float, points: int) -> None:
            print(f"\r  simulate: {done:6.1%}  {points:>12,} samples", end="", file=sys.stderr)

        result = simulate(store, params, end - args.days * 86400, args.days * 86400,
                          [parse_fault("cooling:node-001/3@1d+2h")], [GpuTemperatureLimit()],
                          progress)
        store.close()
        print(file=sys.stderr)
        print(f"simulate: {result.points:,} samples in {result.seconds:.1f} s "
              f"= {result.points_per_s:,.0f} samples/s", file=sys.stderr)
        n, seconds = raw_sqlite(Path(tmp) / "raw.db", db)
        print(f"raw executemany: {n:,} rows in {seconds:.1f} s = {n / seconds:,.0f} rows/s",
              file=sys.stderr)
    print(json.dumps({"simulate_samples_per_s": round(result.points_per_s),
                      "raw_sqlite_samples_per_s": round(n / seconds),
                      "simulate_seconds": round(result.seconds, 1), "days": args.days,
                      "gpus": params.nodes * params.gpus, "samples": result.points}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
