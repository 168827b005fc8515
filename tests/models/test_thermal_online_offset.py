"""Thermal health on GPUs the model has not seen: their own offset is learned online.

A GPU that always runs a few degrees warm (a longer cold-plate loop, worse paste) is
healthy; what thermal health scores is the growth of its residual over its own
history. A GPU absent from the training (a new node, another cluster, a replay) has
no trained offset: it learns one from its own first hour before it is judged.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from fleetwatch.frame import Frame, GpuReading, HostReading
from fleetwatch.models.thermal_health import ThermalHealth, ThermalModel

STEP = 15.0


class Constant:
    """An 'estimator' that expects one temperature whatever the load (50 °C: the residual
    is temp - 50)."""

    def __init__(self, expect: float = 50.0) -> None:
        self.expect = expect

    def predict(self, rows: np.ndarray) -> np.ndarray:
        return np.full(len(rows), self.expect)


def frame(ts: float, temps: list[float], node: str = "n") -> Frame:
    gpus = tuple(GpuReading(i, f"GPU-{i}", "H100", {"gpu_temp_c": t, "gpu_power_w": 500.0})
                 for i, t in enumerate(temps))
    return Frame("c", "r", node, ts, gpus, HostReading({}), 0)


def model(offsets: dict[str, float] | None = None, expect: float = 50.0) -> ThermalModel:
    return ThermalModel(Constant(expect), "constant", {}, offsets or {}, 1.0)


def health(m: ThermalModel, **kw: float) -> ThermalHealth:
    # The defaults the processor runs with, but for the smoothing (a minute, not 15).
    return ThermalHealth(m, half_life_s=60.0, **kw)


def run(h: ThermalHealth, start: float, seconds: float, temps: Callable[[float], list[float]],
        node: str = "n") -> list:
    found = []
    t = start
    while t < start + seconds:
        found += h.update([frame(t, temps(t), node)])
        t += STEP
    return found


def warm(t: float) -> list[float]:
    # Load-independent, noisy, lifelong: GPU 2 always runs 6 °C over what the model expects.
    wobble = 0.8 * np.sin(t / 97.0)
    return [50.0 + wobble, 50.0 - wobble, 56.0 + wobble, 50.0]


def test_an_unseen_gpu_that_always_runs_warm_is_not_paged() -> None:
    h = health(model())
    assert run(h, 0.0, 6 * 3600, warm) == []
    # Once its hour is learned it is scored near 0: a flat residual is no growth.
    assert abs(h.scores["c/n/gpu2"]) < 1.0


def test_an_unseen_gpu_is_not_scored_before_its_baseline_hour() -> None:
    h = health(model())
    run(h, 0.0, 3000.0, warm)
    assert "c/n/gpu2" not in h.scores  # no offset yet: no score to store or show
    run(h, 3000.0, 1200.0, warm)
    assert "c/n/gpu2" in h.scores


def test_an_unseen_gpu_that_degrades_after_its_baseline_is_caught_against_it() -> None:
    h = health(model())
    onset = 2 * 3600.0

    def degrading(t: float) -> list[float]:
        temps = warm(t)
        temps[2] += min(9.0, max(0.0, (t - onset) / 3600.0 * 9.0))  # +9 °C over an hour
        return temps

    found = run(h, 0.0, 5 * 3600, degrading)
    assert {f.gpu for f in found} == {2}
    first = found[0]
    assert onset < first.ts < onset + 3600
    assert first.evidence["offset_online"] == 1.0
    assert first.evidence["offset_c"] == pytest.approx(6.0, abs=0.5)
    assert first.evidence["excess_c"] >= 5.0


def test_a_trained_offset_is_used_and_named_as_trained() -> None:
    # Trained on GPU 2 (its warm 6 °C) but not on GPU 3, which runs 9 °C over from the
    # start: a broken-from-birth GPU looks to this detector like a warm one, so it is
    # learned as its normal and never paged here (the peer rules judge it against its
    # node's other GPUs).
    h = health(model({"c/n/gpu0": 0.0, "c/n/gpu1": 0.0, "c/n/gpu2": 6.0}))

    def hot(t: float) -> list[float]:
        return [*warm(t)[:3], 59.0]

    assert run(h, 0.0, 3 * 3600, hot) == []
    assert "c/n/gpu2" in h.scores and abs(h.scores["c/n/gpu3"]) < 1.0

    def degrading(t: float) -> list[float]:
        temps = hot(t)
        temps[2] += 10.0
        return temps

    found = run(h, 3 * 3600, 3600.0, degrading)
    assert {f.gpu for f in found} == {2}
    assert found[0].evidence["offset_online"] == 0.0
    assert found[0].evidence["offset_c"] == 6.0


def test_a_new_model_learns_unseen_offsets_again() -> None:
    # An offset learned online is the residual under one model: a retrain expects other
    # temperatures (here 6 °C less for every GPU: GPU 2's residual becomes 12 °C), so the
    # GPU learns its offset again under the new model before it is judged again.
    h = health(model())
    assert run(h, 0.0, 4000.0, warm) == []
    assert "c/n/gpu2" in h.scores
    h.model = model(expect=44.0)
    assert run(h, 4000.0, 1800.0, warm) == []
    assert "c/n/gpu2" not in h.scores  # the old model's score is not shown as the new one's
    assert run(h, 5800.0, 3 * 3600, warm) == []
    assert abs(h.scores["c/n/gpu2"]) < 1.0


def test_a_short_baseline_is_refused() -> None:
    with pytest.raises(ValueError, match="baseline_s"):
        ThermalHealth(model(), baseline_s=30.0)


def _batches() -> list[list[Frame]]:
    """Two unseen nodes of three GPUs, 15 s apart, ten ticks a batch, for 50 minutes: GPU 2
    runs 4 °C warm from its first sample, and 12 °C warm after 30 minutes."""
    def frames(t: float) -> list[Frame]:
        hot = 62.0 if t > 1800 else 54.0
        return [frame(t, [50.0 + 0.3 * ((t // 15) % 3), 50.0, hot], node=n) for n in "ab"]

    return [[f for t in range(k, k + 150, 15) for f in frames(float(t))]
            for k in range(0, 3000, 150)]


def _run(batches: list[list[Frame]], shuffle: bool, ahead: bool = False) -> list[tuple]:
    h = health(model(), baseline_s=600.0)
    rng = np.random.default_rng(0)
    if shuffle:  # frames of different nodes interleaved differently, each node in order
        batches = [sorted(b, key=lambda f: (f.ts, rng.random())) for b in batches]
    found = []
    if ahead:  # the processor enriches a batch or two before it judges the one before
        h.enrich(batches[0])
    for k, frames in enumerate(batches):
        if ahead and k + 1 < len(batches):
            h.enrich(batches[k + 1])
        h.enrich(frames)
        found += [(f.node, f.gpu, f.ts, f.value, f.evidence["offset_c"]) for f in h.update(frames)]
    return sorted(found)


def test_online_offsets_are_learned_alike_however_frames_are_batched() -> None:
    batches = _batches()
    ordered = _run(batches, shuffle=False)
    assert {(n, g) for n, g, *_ in ordered} == {("a", 2), ("b", 2)}
    assert all(o == pytest.approx(4.0) for *_, o in ordered)  # learned from its first minutes
    assert _run(batches, shuffle=True) == ordered
    assert _run(batches, shuffle=False, ahead=True) == ordered
    assert _run([[f] for b in batches for f in b], shuffle=False) == ordered
