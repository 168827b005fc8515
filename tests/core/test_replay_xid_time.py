"""An XID is an event, not a sample: replay keeps its own time (the kernel's) in the stored
event and in its alert, rather than the start of the tick its node's samples make."""

from __future__ import annotations

import io
from pathlib import Path

from fleetwatch.config import DetectorsConfig
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.recorded import frames, read_files
from fleetwatch.replay import replay
from fleetwatch.wiring import detectors

T0 = 1_780_000_000  # 2026-05-28 20:26:40 UTC


def xid_file(path: Path) -> Path:
    """8 GPUs every 10 s, each sample a fraction of a second apart (their own DCGM times),
    and XID 119 on GPU 4 at +33.0 s and +63.0 s: 3 s into a tick."""
    lines = ["timestamp,node,gpu,metric,value"]
    for t in range(0, 600, 10):
        lines += [f"{T0 + t + g * 0.01:.2f},xe,{g},gpu_temp_c,50" for g in range(8)]
    lines += [f"{T0 + 33},xe,4,xid,119", f"{T0 + 63},xe,4,xid,119"]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_xid_keeps_its_own_time_in_the_frames_the_store_and_the_alert(
        tmp_path: Path) -> None:
    path = xid_file(tmp_path / "x.csv")
    at = [b[0].ts - T0 for b in frames(read_files([path])) if any(g.xids for g in b[0].gpus)]
    assert at == [33.0, 63.0]
    store = SqliteStore(tmp_path / "s.db")
    replay([path], detectors(DetectorsConfig()), io.StringIO(), store=store)
    assert [e.ts - T0 for e in store.events(T0, T0 + 600, kinds=["xid"])] == [33.0, 63.0]
    [alert] = [a for a in store.alerts() if a.rule == "gpu_xid_critical"]
    assert alert.started_ts == T0 + 33 and "20:27:13Z to 20:27:43Z" in alert.message
    store.close()


def test_a_replayed_burst_of_sixteen_xids_within_two_ms_is_sixteen_stored_events(
        tmp_path: Path) -> None:
    """The kernel log's 16 x XID 13 at .283302 ... .285147 s: the alert counts 16, and so
    does the store (it kept 3, one per millisecond)."""
    lines = ["timestamp,node,gpu,metric,value"]
    for t in range(0, 120, 10):
        lines += [f"{T0 + t},n38,{g},gpu_temp_c,50" for g in range(8)]
    lines += [f"{T0 + 40.283302 + k * 0.000123:.6f},n38,0,xid,13" for k in range(16)]
    path = tmp_path / "burst.csv"
    path.write_text("\n".join(lines) + "\n")
    store = SqliteStore(tmp_path / "s.db")
    replay([path], detectors(DetectorsConfig()), io.StringIO(), store=store)
    assert len(store.events(T0, T0 + 120, kinds=["xid"])) == 16
    [alert] = [a for a in store.alerts() if a.rule == "gpu_xid_info"]
    assert "16x" in alert.message
    store.close()
