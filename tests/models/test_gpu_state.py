from __future__ import annotations

import numpy as np
import pytest

from fleetwatch.models.batch import columns
from fleetwatch.models.gpu_state import GpuState, arrival, row_median
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
