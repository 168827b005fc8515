"""Agent frames with the error counters an RMA engineer reads, replayed into a store: a
field read that failed for a tick raises nothing, SBE and DBE retired pages count up to
the retirement limit, a GPU reset ends the DBE alert, rate alerts say the current rate."""

from __future__ import annotations

import json
from pathlib import Path

from fleetwatch.cli import main
from fleetwatch.pipeline.store.sqlite import SqliteStore

T0 = 1.8e9


def _gpu(index: int, k: int) -> dict:
    m: dict[str, float] = {"gpu_temp_c": 60.0, "gpu_power_w": 400.0, "gpu_util_pct": 90.0}
    minute = k // 6
    if index == 0:   # NVLink totals flat, the replay field missing every 7th tick
        m["gpu_nvlink_crc_errors_total"] = 1000.0
        m["gpu_nvlink_recovery_errors_total"] = 0.0
        if k % 7 != 4:
            m["gpu_nvlink_replay_errors_total"] = 500.0
    elif index == 1:  # one SBE-retired page a minute from 50, 4 DBE pages
        m["gpu_retired_pages_sbe"] = float(min(50 + minute, 60))
        m["gpu_retired_pages_dbe"] = 4.0
        m["gpu_retired_pages_pending"] = 0.0
    elif index == 2:  # a DBE at minute 2, the GPU reset at minute 5
        m["gpu_ecc_dbe_volatile_total"] = 1.0 if 2 <= minute < 5 else 0.0
        m["gpu_ecc_dbe_aggregate_total"] = 7.0 if minute >= 2 else 6.0
    else:             # PCIe replays: 20/min for 10 minutes, then 60/min
        m["gpu_pcie_replay_total"] = 20.0 / 6 * k if k < 60 else 200.0 + 10.0 * (k - 60)
    return {"index": index, "uuid": f"GPU-{index}", "job": None, "metrics": m}


def test_replayed_error_counters_alert_as_an_rma_engineer_expects(tmp_path: Path) -> None:
    lines = [json.dumps({"ts": T0 + 10.0 * k, "node": "n1", "cluster": "c", "rack": "r",
                         "gpus": [_gpu(i, k) for i in range(4)], "host": {}})
             for k in range(90)]
    path = tmp_path / "frames.jsonl"
    path.write_text("\n".join(lines) + "\n")
    db = tmp_path / "fw.db"
    assert main(["replay", "--store", str(db), str(path)]) == 0
    alerts = SqliteStore(db, read_only=True).alerts(("pending", "firing", "resolved"))
    by = {(a.rule, a.device): a for a in alerts}
    assert not [a for a in alerts if a.device == "gpu0"]   # no counter moved
    pages = by["gpu_retired_pages", "gpu1"]
    assert pages.severity == "warning" and "64 memory pages retired" in pages.message
    limit = by["gpu_retired_pages_limit", "gpu1"]
    assert limit.severity == "critical" and "RMA" in limit.action
    assert limit.started_ts == T0 + 60.0 * 6   # 56 SBE + 4 DBE = 60 pages
    assert "64 memory pages retired" in limit.message and "limit of 64" in limit.message
    dbe = by["gpu_ecc_dbe", "gpu2"]
    assert dbe.state == "resolved" and dbe.started_ts == T0 + 120.0
    # reset at minute 5, resolved after keep_firing_s (300 s) judged clear, not an hour
    assert dbe.resolved_ts is not None and dbe.resolved_ts <= T0 + 300.0 + 310.0
    pcie = by["gpu_pcie_replay", "gpu3"]
    assert "60 PCIe replays/min" in pcie.message and pcie.evidence["replays_per_min"] == 60.0
