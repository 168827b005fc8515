"""Thermal health over batches: the same findings however frames are batched and ordered."""

from __future__ import annotations

import numpy as np

from fleetwatch.frame import Frame
from fleetwatch.models.thermal_health import SCORE_METRIC, ThermalHealth
from fleetwatch.models.thermal_model import ThermalModel
from tests.models.helpers import busy, node


class Linear:
    """Expects 30 °C plus 0.1 °C per watt: the residual is what the temperature adds."""

    def predict(self, rows: np.ndarray) -> np.ndarray:
        return 30.0 + 0.1 * rows[:, 0]


def _health() -> ThermalHealth:
    model = ThermalModel(Linear(), "linear", {}, {f"c/{n}/gpu{i}": 0.0 for n in "ab"
                                                  for i in range(3)}, 1.0, used=(0,))
    return ThermalHealth(model, half_life_s=60.0, warmup_s=0.0)


def _batches() -> list[list[Frame]]:
    """Two nodes of three GPUs, 15 s apart, ten ticks a batch; GPU 2 runs 10 °C more than
    its load explains after ten minutes."""
    def frames(t: float) -> list[Frame]:
        hot = 80.0 if t > 600 else 70.0
        return [node(t, [busy(70.0), busy(70.0), busy(hot)], name=n) for n in "ab"]

    return [[f for t in range(k, k + 150, 15) for f in frames(float(t))]
            for k in range(0, 1800, 150)]


def _run(batches: list[list[Frame]], shuffle: bool) -> tuple[list[tuple], dict[str, float]]:
    health = _health()
    found = []
    rng = np.random.default_rng(0)
    for frames in batches:
        if shuffle:  # frames of different nodes interleaved differently, each node in order
            frames = sorted(frames, key=lambda f: (f.ts, rng.random()))
        health.enrich(frames)
        found += [(f.node, f.gpu, f.ts, f.value) for f in health.update(frames)]
    return sorted(found), health.scores


def test_thermal_health_judges_each_gpu_alike_however_nodes_interleave() -> None:
    batches = _batches()
    ordered, scores = _run(batches, shuffle=False)
    assert ordered and {(n, g) for n, g, _, _ in ordered} == {("a", 2), ("b", 2)}
    assert _run(batches, shuffle=True) == (ordered, scores)
    one_by_one = [[f] for frames_ in batches for f in frames_]
    assert _run(one_by_one, shuffle=False) == (ordered, scores)


def _found(found: list) -> list[tuple]:
    return [(f.node, f.gpu, f.ts, f.value, f.message) for f in found]


def test_a_batch_enriched_ahead_of_its_judgement_is_judged_as_in_turn() -> None:
    # The processor decodes (and enriches) a batch or two before it judges the one before,
    # and judges the frames of a batch that it still owns.
    batches = _batches()
    in_turn = _health()
    want = []
    for frames in batches:
        in_turn.enrich(frames)
        want += _found(in_turn.update(frames))
    assert {(n, g) for n, g, *_ in want} == {("a", 2), ("b", 2)}
    ahead = _health()
    got = []
    ahead.enrich(batches[0])
    ahead.enrich(batches[1])
    for k, frames in enumerate(batches):
        if k + 2 < len(batches):
            ahead.enrich(batches[k + 2])
        got += _found(ahead.update(frames))
    assert got == want
    owned = _health()
    mine = []
    for frames in batches:
        owned.enrich(frames)
        mine += _found(owned.update([f for f in frames if f.node == "a"]))
    assert mine == [w for w in want if w[0] == "a"]


def _stored(frames: list[Frame]) -> dict[tuple[str, int], list[tuple[float, float]]]:
    out: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for f in frames:
        for g in f.gpus:
            if SCORE_METRIC in g.metrics:
                out.setdefault((f.node, g.index), []).append((f.ts, g.metrics[SCORE_METRIC]))
    return out


def test_the_score_is_judged_every_sample_and_stored_once_a_minute() -> None:
    batches = _batches()  # 15 s samples from t = 0
    every = _health()
    each = ThermalHealth(every.model, half_life_s=60.0, warmup_s=0.0, store_every_s=0.0)
    copies = _batches()
    found, found_each = [], []
    for frames, same in zip(batches, copies):
        every.enrich(frames)
        found += _found(every.update(frames))
        each.enrich(same)
        found_each += _found(each.update(same))
    assert found and found == found_each  # judged on every sample either way
    stored = _stored([f for b in batches for f in b])
    assert set(stored) == {(n, i) for n in "ab" for i in range(3)}
    for points in stored.values():
        # The first score (the second sample: the first starts the average), then the
        # first sample of each minute: one point a minute.
        assert [t for t, _ in points] == [15.0, *range(60, 1800, 60)]
    all_samples = _stored([f for b in copies for f in b])
    assert all(len(p) == 1800 // 15 - 1 for p in all_samples.values())
    for key, points in stored.items():  # the same values as every sample's score
        assert set(points) <= set(all_samples[key])
    # A batch delivered again adds no point that the first delivery did not store.
    again = _batches()
    for k in (-1, 3):
        every.enrich(again[k])
        first = _stored(batches[k])
        assert first and all(set(p) <= set(first[key]) for key, p in _stored(again[k]).items())
