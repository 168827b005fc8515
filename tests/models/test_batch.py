from __future__ import annotations

import math

import numpy as np

from fleetwatch.models.batch import METRICS, columns
from fleetwatch.models.gpu_slots import GpuTable
from fleetwatch.models.peer_stats import peer_median
from tests.models.helpers import busy, node


def test_columns_match_each_gpus_metrics_and_mark_what_is_absent() -> None:
    frames = [node(10, [busy(60), busy(61), {"gpu_temp_c": 50.0}], name="a"),
              node(5, [busy(70), busy(71)], name="b", lost=[1], job=None)]
    b = columns(frames)
    assert [f.node for f in b.frames] == ["b", "a"]            # in time order
    assert b.col("gpu_temp_c")[1].tolist()[:3] == [60.0, 61.0, 50.0]
    assert math.isnan(b.col("gpu_power_w")[1, 2])              # not reported: NaN, never 0
    assert b.present.tolist() == [[True, True, False], [True, True, True]]
    assert b.lost.tolist() == [[False, True, False], [False, False, False]]
    assert b.job[0, 0] == -1 and b.job[1, 0] == b.job[1, 2] >= 0
    for fi, f in enumerate(b.frames):
        for j, g in enumerate(f.gpus):
            for k, name in enumerate(METRICS):
                want = g.metrics.get(name, float("nan"))
                assert b.x[fi, j, k] == want or (math.isnan(want) and math.isnan(b.x[fi, j, k]))


def test_a_gpu_missing_a_metric_its_node_neighbours_have_is_read_right() -> None:
    first = columns([node(1, [busy(60), busy(61)])])
    assert first.col("gpu_sm_active_ratio")[0].tolist() == [0.8, 0.8]
    m = busy(62)
    del m["gpu_sm_active_ratio"]
    m["gpu_mem_temp_c"] = 70.0  # same count of metrics, a different set
    b = columns([node(2, [busy(60), m])])
    assert math.isnan(b.col("gpu_sm_active_ratio")[0, 1])
    assert b.col("gpu_temp_c")[0].tolist() == [60.0, 62.0]


def test_one_odd_gpu_among_many_nodes_sharing_a_reader_leaves_the_others_read() -> None:
    odd = busy(72)
    del odd["gpu_sm_active_ratio"]
    odd["gpu_mem_temp_c"] = 75.0  # same count, a different set: its node's getter fails on it
    frames = [node(7, [busy(60 + k), busy(61 + k)], name=f"n{k}") for k in range(4)]
    frames.insert(2, node(7, [busy(71), odd], name="odd"))
    b = columns(frames)
    for fi, f in enumerate(b.frames):
        for j, g in enumerate(f.gpus):
            got = dict(zip(METRICS, b.x[fi, j].tolist(), strict=True))
            assert {k: v for k, v in got.items() if not math.isnan(v)} == {
                k: v for k, v in g.metrics.items() if k in got}


def test_a_lost_first_gpu_does_not_hide_its_neighbours_readings() -> None:
    b = columns([node(3, [busy(60), busy(61), busy(62)], lost=[0])])
    assert math.isnan(b.col("gpu_temp_c")[0, 0])
    assert b.col("gpu_temp_c")[0, 1:].tolist() == [61.0, 62.0]
    more = busy(64, gpu_mem_temp_c=70.0)  # a superset of the first GPU's metrics
    b = columns([node(4, [busy(63), more])])
    assert b.col("gpu_mem_temp_c")[0, 1] == 70.0 and math.isnan(b.col("gpu_mem_temp_c")[0, 0])


def test_waves_put_each_nodes_frames_in_order() -> None:
    frames = [node(t, [busy(60)], name=n) for t in (3, 1, 2) for n in ("a", "b")]
    b = columns(frames)
    assert len(b.waves) == 3
    for k, rows in enumerate(b.waves):
        assert sorted(b.frames[i].node for i in rows) == ["a", "b"]
        assert {b.frames[i].ts for i in rows} == {k + 1}


def test_waves_put_each_frame_with_the_other_nodes_frames_of_its_time() -> None:
    # A backlog read unevenly: a's partition read minutes further than b's and c's. The
    # k-th frame of each node is no wave: a's first frame is of b's and c's 61st time.
    frames = [node(t, [busy(60)], name="a") for t in (300, 305, 310)] + \
        [node(t, [busy(60)], name=n) for t in range(0, 310, 5) for n in ("b", "c")]
    b = columns(frames)
    times = [sorted({(b.frames[i].node, b.frames[i].ts) for i in rows}) for rows in b.waves]
    assert times[:2] == [[("b", 0), ("c", 0)], [("b", 5), ("c", 5)]]
    assert times[-3:] == [[("a", 300), ("b", 300), ("c", 300)],
                          [("a", 305), ("b", 305), ("c", 305)], [("a", 310)]]
    assert len(b.waves) == 63
    # Each node's frames in time order, one per wave.
    for rows in b.waves:
        assert len({b.frames[i].node for i in rows}) == len(rows)


def test_gpu_table_gives_stable_slots_and_forgets_dropped_nodes() -> None:
    t = GpuTable(v=0.0)
    b = columns([node(1, [busy(60)] * 3, name="a"), node(1, [busy(60)] * 2, name="b")])
    s = t.slots(b)
    t["v"][s[s >= 0]] = 7.0
    assert sorted(s[s >= 0].tolist()) == [0, 1, 2, 3, 4]
    t.drop(["a"])
    assert t["v"][s[0, :3]].tolist() == [0.0, 0.0, 0.0]        # reset for the next owner
    again = t.slots(columns([node(2, [busy(60)] * 2, name="b")]))
    assert again[0, :2].tolist() == s[1, :2].tolist()


def test_peer_median_excludes_what_the_mask_excludes() -> None:
    values = np.array([[1.0, 2.0, 3.0, 100.0]])
    peers = np.ones((1, 4, 4), bool) & ~np.eye(4, dtype=bool)[None]
    med, count = peer_median(values, peers)
    assert med.tolist() == [[3.0, 3.0, 2.0, 2.0]] and count.tolist() == [[3, 3, 3, 3]]
