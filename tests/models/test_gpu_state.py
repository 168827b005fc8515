from __future__ import annotations

import numpy as np
import pytest

from fleetwatch.models.batch import columns
from fleetwatch.models.gpu_state import GpuState, arrival, row_median
from fleetwatch.models.thermal_health import ThermalHealth
from fleetwatch.models.thermal_model import ThermalModel
from tests.models.helpers import busy, node


def test_arrival_keeps_the_order_frames_were_handed_over() -> None:
    frames = [node(t, [busy(60)], name=n) for t, n in ((3, "a"), (1, "a"), (2, "b"), (1, "b"))]
    b = columns(frames)
    order = arrival(frames, b)
    assert [b.frames[r] for r in order.rows] == frames
    assert [w.tolist() for w in order.waves] == [[0, 2], [1, 3]]  # each node's 1st, then 2nd
    timely = sorted(frames, key=lambda f: f.ts)
    assert [w.tolist() for w in arrival(timely, columns(timely)).waves] == [[0, 1], [2, 3]]


def test_a_gpu_keeps_its_slot_while_missing_until_its_node_is_dropped() -> None:
    state = GpuState({"v": 0.0, "seen": False})
    first = state.slots(columns([node(1, [busy(60)] * 3, name="a")]))[0].tolist()
    state["v"][first] = [1.0, 2.0, 3.0]
    fewer = state.slots(columns([node(2, [busy(60)] * 2, name="a")]))[0]
    assert fewer.tolist() == first[:2]
    again = state.slots(columns([node(3, [busy(60)] * 3, name="a")]))[0].tolist()
    assert again == first and state["v"][again].tolist() == [1.0, 2.0, 3.0]
    for k in range(100):  # the arrays grow past their first 64 slots
        state.slots(columns([node(4, [busy(60)], name=f"n{k}")]))
    assert state["v"][first].tolist() == [1.0, 2.0, 3.0]
    state.drop(["a"])
    assert state["v"][first].tolist() == [0.0, 0.0, 0.0]
    assert sorted(state.slots(columns([node(5, [busy(60)] * 3, name="z")]))[0]) == sorted(first)


@pytest.mark.parametrize("values", [[3.0, 1.0, 2.0], [4.0, -0.0, 1.0, -0.0], [7.0]])
def test_row_median_is_numpys(values: list[float]) -> None:
    row = np.array([values + [np.nan]])
    use = ~np.isnan(row)
    median, n = row_median(row, use)
    assert median[0] == float(np.median(values)) and n[0] == len(values)
    assert str(median[0]) == str(0.0 + float(np.median(values)))  # -0.0 comes out 0.0


class Linear:
    """Expects 30 °C plus 0.1 °C per watt: the residual is what the temperature adds."""

    def predict(self, rows: np.ndarray) -> np.ndarray:
        return 30.0 + 0.1 * rows[:, 0]


def _run(batches: list[list], shuffle: bool) -> tuple[list[tuple], dict[str, float]]:
    model = ThermalModel(Linear(), "linear", {}, {f"c/{n}/gpu{i}": 0.0 for n in "ab"
                                                  for i in range(3)}, 1.0, used=(0,))
    health = ThermalHealth(model, half_life_s=60.0, warmup_s=0.0)
    found = []
    rng = np.random.default_rng(0)
    for frames in batches:
        if shuffle:  # frames of different nodes interleaved differently, each node in order
            frames = sorted(frames, key=lambda f: (f.ts, rng.random()))
        health.enrich(frames)
        found += [(f.node, f.gpu, f.ts, f.value) for f in health.update(frames)]
    return sorted(found), health.scores


def test_thermal_health_judges_each_gpu_alike_however_nodes_interleave() -> None:
    def frames(t: float) -> list:
        hot = 80.0 if t > 600 else 70.0  # 10 °C more than its load explains
        return [node(t, [busy(70.0), busy(70.0), busy(hot)], name=n) for n in "ab"]

    batches = [[f for t in range(k, k + 150, 15) for f in frames(float(t))]
               for k in range(0, 1800, 150)]
    ordered, scores = _run(batches, shuffle=False)
    assert ordered and {(n, g) for n, g, _, _ in ordered} == {("a", 2), ("b", 2)}
    assert _run(batches, shuffle=True) == (ordered, scores)
    one_by_one = [[f] for frames_ in batches for f in frames_]
    assert _run(one_by_one, shuffle=False) == (ordered, scores)
