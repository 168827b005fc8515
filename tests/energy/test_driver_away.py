"""The energy ledger while a node's NVIDIA driver is away (unloaded, reset, reloading):
its frames list no GPU and say NVML does not answer (host_nvml_up 0). The boards ran and
drew power meanwhile: that time is missing, as for a silent node, not an absence."""

from __future__ import annotations

import pytest

from fleetwatch.frame import Frame, HostReading
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.energy.test_integrator_owners_gaps import T0, H, P, feed, gpu, kwh, total


def fr(ts: float, gpus: list, nvml_up: bool = True) -> Frame:
    return Frame("c", "r0", "n0", float(ts), tuple(gpus),
                 HostReading({"host_nvml_up": 1.0 if nvml_up else 0.0}))


def driver_away(start: int, end: int) -> list[Frame]:
    """2 GPUs at 15 s for an hour; the driver away from ``start`` to ``end`` s."""
    return [fr(t, [], nvml_up=False) if T0 + start <= t < T0 + end
            else fr(t, [gpu(0, t), gpu(1, t)]) for t in range(T0, T0 + H + 1, 15)]


@pytest.fixture
def store(tmp_path):
    s = SqliteStore(tmp_path / "s.db")
    yield s
    s.close()


def test_a_driver_away_for_minutes_is_missing_time_for_every_gpu(store):
    feed(store, driver_away(300, 600))
    for dev in ("gpu0", "gpu1"):
        # Last frame with GPUs at 285 s, the next at 600 s: 315 s not measured.
        assert total(store, "missing_s", device=dev) == pytest.approx(315)
        assert total(store, "seconds", device=dev) == pytest.approx(H - 315)
        assert kwh(store, device=dev) == pytest.approx(P * (H - 315) / 3.6e6)


def test_a_driver_away_across_a_processor_restart_is_still_missing_time(tmp_path):
    frames = driver_away(300, 600)
    path = tmp_path / "s.db"
    first = SqliteStore(path)
    feed(first, frames[:30])  # to 435 s: the driver is away
    first.close()
    second = SqliteStore(path)
    feed(second, frames[30:])
    assert total(second, "missing_s", device="gpu0") == pytest.approx(315)
    second.close()


def test_a_board_the_node_stops_listing_with_nvml_up_is_still_absent(store):
    frames = [fr(t, [gpu(0, t)] + ([] if T0 + 300 <= t < T0 + 600 else [gpu(1, t)]))
              for t in range(T0, T0 + H + 1, 15)]
    feed(store, frames)
    assert total(store, "missing_s") == 0.0
