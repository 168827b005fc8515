"""The nightly training of a cluster (deploy/: `fleetwatch train` on a timer or a CronJob)
reads its history from VictoriaMetrics, not SQLite: the same history written to both gives
the same model, through the command a timer runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from fleetwatch.collectors.sim import FleetSim, SimParams
from fleetwatch.models.artifact import load
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.pipeline.store.victoria import VictoriaMetricsStore
from tests.servers import victoria_metrics

pytestmark = pytest.mark.tsdb

PARAMS = SimParams(nodes=4, gpus=4, nodes_per_rack=2, seed=3, interval_s=15.0)


def train(args: list[str], env: dict[str, str], cwd: Path) -> Path:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
    result = subprocess.run([sys.executable, "-m", "fleetwatch.cli", "train", *args],
                            env={**clean, **env}, cwd=cwd, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "wrote " in result.stderr and "16 GPUs" in result.stderr, result.stderr
    (model,) = (cwd / "fleetwatch-models").glob("*.fwm")
    return model


def test_a_model_trained_on_victoriametrics_is_the_one_trained_on_sqlite(
        tmp_path: Path) -> None:
    # A server of the test's own: training reads every cluster in its window.
    server = victoria_metrics(tmp_path).start()
    try:
        end = time.time() // 60 * 60 - 600
        start = end - 8 * 3600
        sim = FleetSim(PARAMS, start)
        vm = VictoriaMetricsStore(f"http://{server.address}")
        sqlite = SqliteStore(tmp_path / "history.db")
        while sim.ts < end - 1:
            sim.step()
            frames = sim.frames()
            vm.write(frames)
            sqlite.write(frames)
        sqlite.maintain(int((end + 600) * 1000))
        sqlite.close()
        vm.close()
        urllib.request.urlopen(f"http://{server.address}/internal/force_flush", timeout=10)
        span = ["--duration", "8h", "--end", str(end)]
        (tmp_path / "vm").mkdir()
        (tmp_path / "sqlite").mkdir()
        a = load(train(span, {"FLEETWATCH_STORE_KIND": "victoriametrics",
                              "FLEETWATCH_STORE_URL": f"http://{server.address}"},
                       tmp_path / "vm"))
        b = load(train([*span, "--store", str(tmp_path / "history.db")], {},
                       tmp_path / "sqlite"))
    finally:
        server.stop()
    assert a.thermal.kind == b.thermal.kind
    assert a.thermal.offsets.keys() == b.thermal.offsets.keys() and len(a.thermal.offsets) == 16
    # To a ten-thousandth of a degree: VictoriaMetrics keeps a value as a decimal, and the
    # Huber fit carries its last digits into the offsets (3e-6 °C apart in one CI run, where
    # 1e-6 held before: the history is simulated up to the time the test runs, so it differs).
    assert np.allclose(list(a.thermal.offsets.values()), list(b.thermal.offsets.values()),
                       atol=1e-4)
    assert abs(a.thermal.spread_c - b.thermal.spread_c) < 1e-4
    assert a.anomaly is not None and b.anomaly is not None
    assert a.anomaly.windows == b.anomaly.windows
