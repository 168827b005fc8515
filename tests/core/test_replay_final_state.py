"""Replay prints the last state of each alert still open when the data ends, where it
changed since its last line: a kernel's five XID 119 read 5x on stdout, not 1."""

from __future__ import annotations

import io
import json
from pathlib import Path

from fleetwatch.config import DetectorsConfig
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.replay import replay
from fleetwatch.wiring import detectors

T0 = 1_780_000_000


def test_an_open_xid_alerts_final_count_is_printed(tmp_path: Path) -> None:
    lines = ["timestamp,node,gpu,metric,value"]
    for t in range(0, 900, 10):   # ends 10 minutes after the last XID, within xid_hold_s
        lines += [f"{T0 + t},xe,{g},gpu_temp_c,50" for g in range(8)]
    lines += [f"{T0 + t},xe,4,xid,119" for t in (30, 95, 160, 231, 300)]
    path = tmp_path / "x.csv"
    path.write_text("\n".join(lines) + "\n")
    out = io.StringIO()
    store = SqliteStore(tmp_path / "s.db")
    replay([path], detectors(DetectorsConfig()), out, store=store, keep_firing_s=300)
    printed = [json.loads(line) for line in out.getvalue().splitlines()]
    xid = [p for p in printed if p["rule"] == "gpu_xid_critical"]
    assert xid[0]["state"] == "firing" and "5x" not in xid[0]["message"]
    assert xid[-1]["state"] == "firing" and "5x" in xid[-1]["message"]
    assert xid[-1]["open_at_end"] and "open_at_end" not in xid[0]
    [stored] = [a for a in store.alerts() if a.rule == "gpu_xid_critical"]
    assert stored.message == xid[-1]["message"]
    assert len(xid) == 2   # once when it fired, once with its final count
    store.close()
