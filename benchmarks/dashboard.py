"""Benchmark: the energy page over a month of 1,000 GPUs, loaded in headless Chromium.

The month's ledger comes from the same trace as benchmarks/report.py (a vectorised
power trace through the integrator's array path into a SQLite store: about a million
ledger rows). The dashboard serves it (waitress, as ``fleetwatch dashboard`` does) with
its clock at the month's last hour; the browser opens ``/energy?range=month``. Timed:
from the navigation until both hourly charts hold their bars, the top jobs and users
are drawn and the tiles show numbers, each load in a fresh tab with nothing cached
by the server. Reported: the median of LOADS loads (and each load).

Last line is JSON. Target (issue 13): under 2 s.

    python benchmarks/dashboard.py [--days 31] [--gpus 1000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from energy_trace import MONTH, month_ledger
from selenium import webdriver

from fleetwatch.dashboards.app import create_app
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.report_month import month_span

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.dashboards.conftest import pytest_setup_options  # noqa: E402
from tests.servers import free_port, wait_port  # noqa: E402

LOADS = 5
_READY = """
const drawn = id => { const g = document.querySelector('#' + id + ' .js-plotly-plot');
  return g && g.data && g.data.length > 0 && g.querySelector('.bars, .scatterlayer .trace'); };
const tile = document.querySelector('#energy-inrange .tile-value');
return ['energy-kwh', 'energy-co2e', 'energy-jobs', 'energy-users'].every(drawn)
  && tile && /Wh/.test(tile.textContent);  // kWh, or MWh for a month"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--days", type=int, default=31)
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--ledger", metavar="PATH",
                    help="keep the ledger here, and reuse it if it is there (same trace)")
    args = ap.parse_args()
    start, end = month_span(MONTH)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(args.ledger) if args.ledger else Path(tmp) / "ledger.db"
        store = SqliteStore(db)
        if args.ledger and store.energy(start, start + 3600):
            rows = len(store.energy(start, end))
            print(f"reusing the ledger in {db} ({rows:,} rows)", file=sys.stderr)
        else:
            rows = month_ledger(store, args.days, args.gpus).rows
        store.close()
        now = start + args.days * 86400 - 1800.0
        import waitress

        app = create_app(SqliteStore(db, read_only=True), refresh_s=60.0, clock=lambda: now)
        port = free_port()
        threading.Thread(target=waitress.serve, args=(app.server,),
                         kwargs={"host": "127.0.0.1", "port": port, "threads": 8,
                                 "_quiet": True}, daemon=True).start()
        wait_port(port)
        driver = webdriver.Chrome(options=pytest_setup_options())
        times = []
        try:
            for _ in range(LOADS):
                driver.get("about:blank")
                t0 = time.perf_counter()
                driver.get(f"http://127.0.0.1:{port}/energy?range=month")
                while not driver.execute_script(_READY):
                    if time.perf_counter() - t0 > 120:
                        raise SystemExit("the energy page did not finish loading in 120 s")
                    time.sleep(0.02)
                times.append(time.perf_counter() - t0)
                print(f"  load: {times[-1]:.2f} s", file=sys.stderr)
            logs = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        finally:
            driver.quit()
    if logs:
        print(f"browser console errors: {logs}", file=sys.stderr)
    median = statistics.median(times)
    print(f"energy page over {args.gpus} GPUs x {args.days} d ({rows:,} ledger rows): "
          f"median {median:.2f} s of {LOADS} loads", file=sys.stderr)
    print(json.dumps({"energy_page_month_1000_gpus_s": round(median, 2),
                      "loads_s": [round(t, 2) for t in times], "ledger_rows": rows,
                      "gpus": args.gpus, "days": args.days, "console_errors": len(logs)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
