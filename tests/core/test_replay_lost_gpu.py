"""A GPU whose samples stop: absence alone is weak evidence (a scrape gap, an exporter
restart), so it is read as lost only after ``gpu_lost_silent_s`` (5 minutes); XID 79 says
it at once; and a GPU that reports again ends its gpu_lost alert at once, with no
keep-firing hold (a GPU that answers is not lost)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from fleetwatch.config import DetectorsConfig
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.recorded import read_files
from fleetwatch.replay import replay
from fleetwatch.wiring import detectors

T0 = 1_780_000_000
STEP = 10


def node8(path: Path, ticks: int, gone: range, gpu: int = 5, xid79: bool = False) -> Path:
    """8 steady GPUs every 10 s; ``gpu`` has no sample in the ticks of ``gone``."""
    lines = ["timestamp,node,gpu,metric,value"]
    for t in range(ticks):
        for g in range(8):
            if g == gpu and t in gone:
                continue
            lines.append(f"{T0 + STEP * t},n1,{g},gpu_temp_c,{60 + g}")
            lines.append(f"{T0 + STEP * t},n1,{g},gpu_power_w,300")
            if xid79 and g == gpu and t == gone.start - 1:
                lines.append(f"{T0 + STEP * t},n1,{g},xid,79")
    path.write_text("\n".join(lines) + "\n")
    return path


def run(path: Path, **kw: object) -> list[dict]:
    out = io.StringIO()
    replay([path], detectors(DetectorsConfig()), out, keep_firing_s=300, **kw)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def lost(changes: list[dict]) -> list[tuple[str, float]]:
    return [(c["state"], c["updated_ts"] - T0) for c in changes if c["rule"] == "gpu_lost"]


def test_a_40_s_scrape_gap_is_no_lost_gpu(tmp_path: Path) -> None:
    path = node8(tmp_path / "gap.csv", 120, range(30, 34))   # the tester's gap_long4.csv
    assert not read_files([path]).lost
    assert lost(run(path)) == []


def test_a_gpu_silent_for_minutes_is_lost_and_resolves_the_tick_it_is_back(
        tmp_path: Path) -> None:
    # Last sample at 290 s, back at 700 s: lost once over 300 s have passed (600 s on).
    path = node8(tmp_path / "long.csv", 120, range(30, 70))
    reading = read_files([path])
    ticks = sorted(int(ts - T0) for (ts, _), gpus in reading.lost.items() if 5 in gpus)
    assert ticks == list(range(600, 700, STEP))
    assert lost(run(path)) == [("firing", 600.0), ("resolved", 700.0)]


def test_xid_79_still_makes_a_gpu_lost_at_its_next_tick(tmp_path: Path) -> None:
    path = node8(tmp_path / "x79.csv", 120, range(30, 120), xid79=True)
    assert lost(run(path))[:1] == [("firing", 300.0)]


def test_the_silence_that_reads_as_lost_is_configurable(tmp_path: Path) -> None:
    path = node8(tmp_path / "gap.csv", 120, range(30, 34))
    assert lost(run(path, lost_silent_s=30.0)) == [("firing", 330.0), ("resolved", 340.0)]


def test_a_lost_gpu_alert_and_its_stored_event_start_when_its_samples_stopped(
        tmp_path: Path) -> None:
    """Judged lost 5 minutes into the silence, the alert fires then, but it and the stored
    ``lost`` event start at the first tick without a sample (the last sample's tick + one
    interval), as an operator reading "lost since" expects."""
    path = node8(tmp_path / "long.csv", 120, range(30, 120))  # last sample at 290 s
    store = SqliteStore(tmp_path / "s.db")
    changes = [c for c in run(path, store=store) if c["rule"] == "gpu_lost"]
    assert [(c["state"], c["started_ts"] - T0, c["updated_ts"] - T0)
            for c in changes][:1] == [("firing", 300.0, 600.0)]
    [alert] = [a for a in store.alerts(states=("firing",)) if a.rule == "gpu_lost"]
    assert alert.started_ts - T0 == 300.0 and alert.fired_ts - T0 == 600.0
    states = store.events(T0, T0 + 1200, kinds=["gpu_state"], device="gpu5")
    assert [(e.ts - T0, e.value) for e in states] == [(300.0, "lost")]
    store.close()
