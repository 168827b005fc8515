"""What training leaves out, and how far a retrain moves a GPU's offset: pure logic."""

from __future__ import annotations

import numpy as np
import pytest

from fleetwatch.history import Day
from fleetwatch.models.thermal_model import shrink_offsets, step_offsets
from fleetwatch.pipeline.store.base import Alert, Annotation
from fleetwatch.train_exclusions import ALERT_MARGIN_S, LeftOut, mask, spans

T0 = 1_800_000_000.0


def alert(rule: str, node: str, device: str, start: float, fired: float | None,
          resolved: float | None) -> Alert:
    return Alert(f"{rule}{node}{device}{start}", rule, "warning", "c", "r1", node, device,
                 "resolved" if resolved else "firing", start, start, 1.0, "",
                 fired_ts=fired, resolved_ts=resolved)


def test_spans_are_fired_thermal_alerts_with_a_margin_and_fault_annotations() -> None:
    out = spans([alert("gpu_hot_vs_peers", "n1", "gpu3", T0, T0 + 30, T0 + 600),
                 alert("gpu_temp_high", "n1", "gpu2", T0, None, T0 + 60),        # never fired
                 alert("gpu_nvlink_errors", "n1", "gpu1", T0, T0 + 30, None),  # not thermal
                 alert("node_cooling", "n2", "", T0, T0 + 30, None)],          # still open
                [Annotation("fault", T0, None, "n3", "gpu0", "injected cooling fault", "c"),
                 Annotation("deploy", T0, T0 + 60, "n3", "", "driver upgrade", "c")],
                end_ts=T0 + 3600)
    assert [(s.place, s.device, s.start_ts, s.end_ts, s.why) for s in out] == [
        ("n1", "gpu3", T0 - ALERT_MARGIN_S, T0 + 600, "gpu_hot_vs_peers alert"),
        ("n2", "", T0 - ALERT_MARGIN_S, T0 + 3600, "node_cooling alert"),
        ("n3", "gpu0", T0, T0 + 3600, "fault annotation 'injected cooling fault'")]


def test_mask_leaves_out_the_minutes_of_a_gpu_a_node_or_a_rack_and_counts_them() -> None:
    minutes = (T0 * 1000 + np.arange(10) * 60_000).astype(np.int64)
    gpus = [("c", "r1", "n1", 0), ("c", "r1", "n1", 1), ("c", "r2", "n2", 0),
            ("d", "r1", "n1", 0)]
    day = Day(gpus, minutes, {"gpu_temp_c": np.full((4, 10), 50.0)})
    keys = [f"{c}/{n}/gpu{g}" for c, _, n, g in gpus]
    left = spans([alert("gpu_hot_vs_peers", "n1", "gpu1", T0 + ALERT_MARGIN_S + 120,
                        T0, T0 + 300)],
                 [Annotation("fault", T0 + 480, T0 + 9999, "r2", "", "rack", "c")], T0 + 600)
    out = LeftOut()
    m = mask(day, keys, left, out)
    assert m[1].tolist() == [False] * 2 + [True] * 3 + [False] * 5  # 120 s to 300 s
    assert m[2].tolist() == [False] * 8 + [True] * 2                # the rack, from 480 s
    assert not m[0].any() and not m[3].any()                         # another GPU, cluster
    assert out.minutes == {"c/n1/gpu1": 3, "c/n2/gpu0": 2}
    assert out.lines() == ["c/n1/gpu1: 0.1 h (gpu_hot_vs_peers alert)",
                           "c/n2/gpu0: 0.0 h (fault annotation 'rack')"]


def test_an_uncertain_offset_is_shrunk_toward_its_node() -> None:
    offsets = {"c/n1/gpu0": 3.0, "c/n1/gpu1": 0.1, "c/n1/gpu2": -0.1, "c/n1/gpu3": 0.0}
    steady = shrink_offsets(offsets, dict.fromkeys(offsets, 0.01))
    assert steady["c/n1/gpu0"] == pytest.approx(3.0, abs=0.05)  # seen steadily: its own
    wandering = shrink_offsets(offsets, {**dict.fromkeys(offsets, 0.01), "c/n1/gpu0": 2.0})
    assert wandering["c/n1/gpu0"] < 0.5  # mostly its node's (0.0)


def test_a_retrain_moves_an_offset_at_most_a_step_and_fills_gpus_left_out() -> None:
    new = {"c/n1/gpu0": 2.0, "c/n1/gpu1": 0.3, "c/n1/gpu2": 0.1, "c/n1/gpu3": -0.1}
    previous = {"c/n1/gpu0": 0.5, "c/n1/gpu1": 0.2, "c/n2/gpu0": 1.0}
    kept, held = step_offsets(new, previous, [*new, "c/n2/gpu0", "c/n2/gpu1"], 0.5)
    assert kept["c/n1/gpu0"] == 1.0 and held == {"c/n1/gpu0": (2.0, 1.0)}
    assert kept["c/n1/gpu1"] == 0.3                   # within a step: as learnt
    assert kept["c/n2/gpu0"] == 1.0                   # all left out: the previous one
    assert kept["c/n2/gpu1"] == pytest.approx(0.2)    # none before: the fleet's median
