"""A small store whose coverage has holes, for the utilization page's tests: two nodes x two
GPUs over three hours, n1 reporting SM activity (DCGM/GPM) and n2 not (an A100 without
DCGM), and n2 silent for the middle hour (the ledger holds only its missing seconds)."""

from __future__ import annotations

from pathlib import Path

from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.store.ledger import EnergyRow
from fleetwatch.pipeline.store.sqlite import SqliteStore

HOUR0 = 1_800_000_000 - 1_800_000_000 % 3600 - 4 * 3600  # the first of three whole hours
NOW = HOUR0 + 3 * 3600 + 600                               # ten minutes into the fourth
SILENT = HOUR0 + 3600                                      # n2's silent hour
GPUS = 2


def _frame(node: str, ts: float) -> Frame:
    gpus = []
    for g in range(GPUS):
        metrics = {"gpu_util_pct": 50.0, "gpu_power_w": 200.0, "gpu_fb_used_bytes": 2.0**30}
        if node == "n1":
            metrics["gpu_sm_active_ratio"] = 0.4
        gpus.append(GpuReading(g, f"GPU-{node}-{g}", "A100", metrics))
    return Frame("c", "r", node, ts, tuple(gpus))


def _row(hour: int, node: str, gpu: int, seconds: float, idle_s: float, missing_s: float
         ) -> EnergyRow:
    return EnergyRow(hour, "c", "r", node, f"gpu{gpu}", "", "", "", seconds * 200.0,
                     idle_s * 60.0, seconds, idle_s, missing_s, 0.0)


def build(path: Path) -> SqliteStore:
    """The store, closed for writing; returns a read-only handle, as the dashboard has."""
    store = SqliteStore(path)
    frames = [_frame(node, HOUR0 + t) for t in range(0, 3 * 3600, 60)
              for node in ("n1", "n2") if node == "n1" or not SILENT <= HOUR0 + t < SILENT + 3600]
    store.write(frames)
    store.maintain(int((NOW + 600) * 1000))  # roll up every closed minute
    rows = []
    for h in range(3):
        hour = HOUR0 + h * 3600
        for g in range(GPUS):
            rows.append(_row(hour, "n1", g, 3600, 900, 0))
            silent = hour == SILENT
            rows.append(_row(hour, "n2", g, 0 if silent else 3600, 0 if silent else 1800,
                             3600 if silent else 0))
    store.write_energy(rows, [])
    store.close()
    return SqliteStore(path, read_only=True)
