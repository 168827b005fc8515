"""``fleetwatch up``'s dashboard judges "now" on the simulated clock while it catches up.

The simulation starts 15 min in the past; the fleet page hides GPUs whose newest
sample is older than ``STALE_S`` (5 min) of its "now". Read on the wall clock, the
heatmap stayed empty behind "No fresh data" until the catch-up came within 5 min of
the present: over 70 s on a loaded 2-core machine, against the README's "within about
30 seconds". On the simulated clock the first stored tick is fresh.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import fleetwatch.dashboards
from fleetwatch.config import load
from fleetwatch.dashboards.data import read_fleet
from fleetwatch.up import UpOptions, run_up
from tests.servers import free_port


def test_the_heatmap_shows_while_up_catches_up(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def serve(store: Any, *args: Any, clock: Any = time.time, until: Any = None,
              **kwargs: Any) -> None:
        # What the fleet page reads on each refresh, until it has GPUs to show.
        started = time.monotonic()
        while time.monotonic() - started < 15:
            now = clock()
            if read_fleet(store, now).cells:
                seen["after_s"] = time.monotonic() - started
                seen["behind_s"] = time.time() - now
                return
            time.sleep(0.25)

    monkeypatch.setattr(fleetwatch.dashboards, "serve", serve)
    config = load(env={"FLEETWATCH_SIM_NODES": "2", "FLEETWATCH_SIM_GPUS": "2",
                       "FLEETWATCH_DASHBOARD_PORT": str(free_port())})
    options = UpOptions(simulate=True, store=str(tmp_path / "up.db"))
    assert run_up(config, options, out=(tmp_path / "out.txt").open("w")) == 0
    assert "after_s" in seen, "no GPU on the heatmap within 15 s of serving"
    # Shown while the data is still minutes behind the wall: the catch-up, not its end.
    assert seen["behind_s"] > 5 * 60, seen
