"""Benchmark: ``fleetwatch replay`` of a large long-layout CSV: peak memory, time to the
first alert, and time in all.

The file (written once, to ``--file``): NODES nodes x 8 GPUs x 4 metrics every 15 s,
healthy (temperatures by GPU, 650 W, busy), sorted by time as scrapers write it; GPU 5
of node-000 reports XID 79 one minute in and sends nothing more. ``--mb`` picks the
hours so that the file is about that size (keep it under a few hundred MB on a shared
machine). The replay runs in its own process (``--fleetwatch``, default the one beside
this interpreter); its first stdout line is that XID's alert, and the figure is when
it came, against the run's wall time and the child's peak RSS (``wait4``).

    python benchmarks/replay_stream.py --mb 60 --file /tmp/big.csv
    python benchmarks/replay_stream.py --mb 60 --file /tmp/big.csv --fleetwatch ./fw
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

T0 = 1_696_000_000
ROW_BYTES = 37  # about, for the row "1696000000,node-000,3,gpu_temp_c,61.4"


def write(path: Path, nodes: int, mb: float) -> None:
    ticks = max(8, int(mb * 1e6 / (nodes * 8 * 4 * ROW_BYTES)))
    rnd = random.Random(3)
    with path.open("w") as f:
        f.write("timestamp,node,gpu,metric,value\n")
        for k in range(ticks):
            ts = T0 + 15 * k
            buf = []
            for n in range(nodes):
                for g in range(8):
                    if n == 0 and g == 5 and ts > T0 + 60:
                        continue  # fallen off the bus
                    buf.append(f"{ts},node-{n:03d},{g},gpu_temp_c,{60 + g % 4 + rnd.random():.1f}\n"
                               f"{ts},node-{n:03d},{g},gpu_power_w,{650 + rnd.random() * 10:.1f}\n"
                               f"{ts},node-{n:03d},{g},gpu_util_pct,99\n"
                               f"{ts},node-{n:03d},{g},gpu_sm_active_ratio,0.91\n")
                    if n == 0 and g == 5 and ts == T0 + 60:
                        buf.append(f"{ts},node-000,5,xid,79\n")
            f.write("".join(buf))


def run(fleetwatch: str, path: Path) -> dict[str, object]:
    t0 = time.monotonic()
    p = subprocess.Popen([fleetwatch, "replay", str(path)], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    assert p.stdout is not None
    first = p.stdout.readline()
    t_first = time.monotonic() - t0
    rest = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    return {"file_mb": round(path.stat().st_size / 1e6, 1),
            "peak_rss_mb": round(usage.ru_maxrss / 1024),   # Linux: KiB
            "first_alert_s": round(t_first, 1), "wall_s": round(wall, 1),
            "exit": os.waitstatus_to_exitcode(status),
            "alert_lines": bool(first) + rest.count("\n"),
            "first_alert": json.loads(first)["rule"] if first else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=60.0, help="size of the file to write (MB)")
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--file", type=Path, default=Path("replay_bench.csv"))
    ap.add_argument("--fleetwatch", default=str(Path(sys.executable).with_name("fleetwatch")))
    ap.add_argument("--keep", action="store_true", help="reuse --file if it exists")
    a = ap.parse_args()
    if not (a.keep and a.file.exists()):
        write(a.file, a.nodes, a.mb)
    print(json.dumps(run(a.fleetwatch, a.file), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
