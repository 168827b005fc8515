"""A history span written before the stored one (``simulate`` with an older ``--end``,
documented: "a span clear of them, before or after, is written"): no clock warning, the
stored (newest) watermark stays, the older span's energy is booked in its own hours
beside the stored rows, and the next span after the newest continues from it."""

from __future__ import annotations

import logging
import time

import pytest

from fleetwatch.cli import main
from fleetwatch.pipeline.energy_state import newest_states
from fleetwatch.pipeline.store.ledger import DeviceState
from fleetwatch.pipeline.store.sqlite import SqliteStore

DAY = 86400.0
MAX_GAP_S = 60.0  # energy.max_gap_s's default; the runs sample every 30 s


def test_newest_states_keeps_each_devices_newest_watermark():
    held = [DeviceState("c", "n", "gpu0", 200.0, 300.0, 5e6),
            DeviceState("c", "n", "host", 200.0, None, None)]
    older = [DeviceState("c", "n", "gpu0", 100.0, 250.0, 4e6, 3.9e6),
             DeviceState("c", "n", "gpu1", 100.0, 250.0, 4e6),   # not held: kept
             DeviceState("c", "n", "host", 100.0, None, None)]
    assert sorted(newest_states(held, older)) == sorted([held[0], older[1], held[1]])
    newer = [DeviceState("c", "n", "gpu0", 300.0, 310.0, 6e6)]
    assert newest_states(held, newer) == [newer[0], held[1]]


def hand_sum(db: str, spans: list[tuple[float, float]]) -> float:
    """GPU energy from the stored samples: each GPU's counter step between consecutive
    samples at most MAX_GAP_S apart (longer is missing time), or, where the counter went
    down (each ``simulate`` run starts its boards' counters again), the trapezoid of the
    power samples: the integrator's documented rules."""
    store = SqliteStore(db, read_only=True)
    series: dict[tuple[str, str], dict[int, list[float]]] = {}
    try:
        for start, end in spans:
            for metric in ("gpu_energy_j", "gpu_power_w"):
                for key, ts, v in store.range(metric, int(start * 1000), int(end * 1000) + 1):
                    at = series.setdefault((key.node, key.device), {})
                    at.setdefault(ts, [0.0, 0.0])[metric == "gpu_power_w"] = v
    finally:
        store.close()
    total = 0.0
    for points in series.values():
        ordered = sorted(points.items())
        for (t0, (c0, p0)), (t1, (c1, p1)) in zip(ordered, ordered[1:]):
            dt = (t1 - t0) / 1000
            if 0 < dt <= MAX_GAP_S:
                total += c1 - c0 if c1 >= c0 else (p0 + p1) / 2 * dt
    return total


@pytest.mark.parametrize("gap_s", [600.0, 8 * DAY], ids=["same-hour", "8-days-before"])
def test_an_older_span_between_newer_ones_keeps_the_ledger_whole(tmp_path, caplog, gap_s):
    db = str(tmp_path / "s.db")
    # B, then A ending gap_s before B's first sample (same hour, or 8 days before), then C
    # straight after B: the ledger's GPU energy is the hand sum of the stored samples.
    b_end = (int(time.time()) // 3600 - 30) * 3600 + 2700.0  # B: 30 min to hh:45
    a_end = b_end - 1800 + 30 - gap_s
    c_end = b_end + 1800
    args = ["simulate", "--nodes", "2", "--gpus", "2", "--no-faults", "--duration", "30m",
            "--interval", "30s", "--store", db]
    with caplog.at_level(logging.INFO):
        for end in (b_end, a_end, c_end):
            assert main([*args, "--end", str(int(end))]) == 0
    said = [r.getMessage() for r in caplog.records if r.name.startswith("fleetwatch.pipeline")]
    assert not [m for m in said if "clock" in m or "sent nothing" in m], said
    spans = [(e - 1800, e) for e in (a_end, b_end, c_end)]
    store = SqliteStore(db, read_only=True)
    rows = store.energy(a_end - 2 * 3600, c_end + 3600)
    state = store.energy_state("sim", "node-000", c_end)[0]
    store.close()
    ledger = sum(r.energy_j for r in rows if r.device.startswith("gpu"))
    assert ledger == pytest.approx(hand_sum(db, spans), rel=1e-9)
    assert {s.ts for s in state} == {c_end}  # the newest stored point
    a_hour = (int(a_end) - 1000) // 3600 * 3600  # A's alone: B starts later
    assert sum(r.energy_j for r in rows if r.bucket_ts == a_hour) > 0
