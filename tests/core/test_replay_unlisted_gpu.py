"""``fleetwatch replay`` of the agent's JSON frames books a GPU the node stopped listing (a
board removed, one the driver no longer enumerates) as the live processor does: absent,
neither energy nor missing time, starting anew when listed again; not missing time and an
invented interval at its return."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.frame import Frame, GpuReading, HostReading
from fleetwatch.pipeline.energy import EnergyIntegrator
from fleetwatch.pipeline.store.sqlite import SqliteStore

T0 = 1_800_000_000 - 1_800_000_000 % 3600
AWAY = range(60, 120)  # ticks (10 s) in which the node's frames do not list GPU 1


def frames() -> list[dict]:
    out = []
    for k in range(181):
        ts = T0 + 10 * k
        gpus = [{"index": i, "uuid": f"GPU-{i}", "model": "NVIDIA H100 80GB HBM3",
                 "job": "j1", "metrics": {"gpu_power_w": 300.0 + i,
                                          "gpu_energy_j": 1e6 + (300.0 + i) * 10 * k,
                                          "gpu_power_limit_w": 700.0}}
                for i in range(2) if not (i == 1 and k in AWAY)]
        out.append({"ts": ts, "node": "n1", "cluster": "c", "rack": "r", "gpus": gpus,
                    "host": {"metrics": {"host_nvml_up": 1.0}}})
    return out


def live(store: SqliteStore) -> None:
    ei = EnergyIntegrator(store)
    for f in frames():
        gpus = tuple(GpuReading(g["index"], g["uuid"], g["model"], g["metrics"], g["job"])
                     for g in f["gpus"])
        ei.observe([Frame("c", "r", "n1", float(f["ts"]), gpus,
                          HostReading(f["host"]["metrics"]))])


def gpu1(store: SqliteStore) -> tuple[float, float, float]:
    rows = [r for r in store.energy(0, 5e9) if r.device == "gpu1"]
    return (sum(r.energy_j for r in rows), sum(r.seconds for r in rows),
            sum(r.missing_s for r in rows))


def test_replay_books_a_gpu_the_node_stopped_listing_as_live_does(tmp_path: Path) -> None:
    path = tmp_path / "node.jsonl"
    path.write_text("".join(json.dumps(f) + "\n" for f in frames()))
    assert main(["replay", str(path), "--store", str(tmp_path / "replay.db")]) == 0
    replayed = SqliteStore(tmp_path / "replay.db")
    expected = SqliteStore(tmp_path / "live.db")
    live(expected)
    want = gpu1(expected)
    assert want[2] == 0.0  # live: absent, not missing
    # Listed up to tick 59 and again from tick 120: 590 s and 600 s measured.
    assert want[:2] == pytest.approx((301.0 * 1190, 1190.0))
    assert gpu1(replayed) == pytest.approx(want)
    replayed.close()
    expected.close()
