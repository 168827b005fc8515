"""A board replaced in its slot, through the real Processor and an embedded store: what
the detectors say of the new board is judged on its own, not by what they had learned of
the old one (its hot offset, its error counters, its falling off the bus)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models.lemon import LemonScore
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.wiring import detectors

T0 = 1.8e9
STEP = 30.0
OLD = "GPU-11111111-2222-3333-4444-555555555555"
NEW = "GPU-99999999-8888-7777-6666-555555555555"
PEERS_C = (66.0, 65.0, 67.0, 66.0, 65.0, 66.0, 67.0)
WORN = {"gpu_ecc_dbe_volatile_total": 2.0, "gpu_ecc_dbe_aggregate_total": 5.0,
        "gpu_retired_pages_dbe": 3.0}


def frame(ts: float, board: str, hot_c: float, counters: dict[str, float]) -> Frame:
    """node-0: GPU 0 (``board``) ``hot_c`` over its 7 job peers, with ``counters``."""
    gpus = []
    for i, temp in enumerate((66.0 + hot_c, *PEERS_C)):
        uuid = board if i == 0 else f"GPU-0000000{i}-0000-0000-0000-000000000000"
        m = {"gpu_temp_c": temp, "gpu_power_w": 400.0, "gpu_util_pct": 95.0,
             "gpu_sm_active_ratio": 0.8, "gpu_sm_clock_mhz": 1980.0, **WORN}
        if i == 0:
            m.update(counters)
        gpus.append(GpuReading(i, uuid, "NVIDIA H100 80GB HBM3", m, job="job1"))
    return Frame("c", "r", "node-0", ts, tuple(gpus))


def feed(p: Processor, start: float, seconds: float, board: str, hot_c: float,
         counters: dict[str, float]) -> None:
    frames = [frame(T0 + start + k * STEP, board, hot_c, counters)
              for k in range(int(seconds / STEP))]
    for k in range(0, len(frames), 20):  # batches of ten minutes, as a replay gives them
        p.process(frames[k:k + 20])


def test_a_new_board_is_judged_on_its_own_through_the_processor(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    p = Processor(store, detectors(DetectorsConfig()))
    # The old board: 6 °C over its peers all its life (learned: no alert), worn counters.
    feed(p, 0, 4 * 3600, OLD, 6.0, {})
    assert store.alerts(("pending", "firing", "resolved")) == []
    # The new board: counters from 0, like its peers for 20 minutes; then a first
    # double-bit error, and 6 °C over its peers: the old board's offset, as an overheat.
    new = dict.fromkeys(WORN, 0.0)
    feed(p, 4 * 3600, 1200, NEW, 0.0, new)
    assert store.alerts(("pending", "firing", "resolved")) == []
    ecc = {**new, "gpu_ecc_dbe_volatile_total": 1.0, "gpu_ecc_dbe_aggregate_total": 1.0}
    feed(p, 4 * 3600 + 1200, 300, NEW, 6.0, ecc)
    alerts = {a.rule: a for a in store.alerts(("pending", "firing", "resolved"))}
    assert {"gpu_hot_vs_peers", "gpu_ecc_dbe"} <= set(alerts)
    for rule in ("gpu_hot_vs_peers", "gpu_ecc_dbe"):
        a = alerts[rule]
        assert (a.device, a.uuid, a.state) == ("gpu0", NEW, "firing"), rule
    assert alerts["gpu_hot_vs_peers"].started_ts >= T0 + 4 * 3600 + 1200
    [swap] = store.events(T0, T0 + 5 * 3600, kinds=["gpu_replaced"])
    assert (swap.device, swap.value, swap.ts) == ("gpu0", NEW, T0 + 4 * 3600)
    store.close()


def test_a_lemon_score_rebuilt_from_the_store_counts_a_new_boards_loss_as_its_own(
        tmp_path: Path) -> None:
    """The old board fell off the bus (XID 79, then lost: one incident), the new board in
    its slot was lost too, all stored by a processor; a processor started later rebuilds
    the node's score from the stored events with both incidents, as the live score has."""
    def gpu0(board: str, lost: bool, xids: tuple[int, ...] = ()) -> GpuReading:
        return GpuReading(0, board, "NVIDIA H100 80GB HBM3", {} if lost else
                          {"gpu_temp_c": 50.0}, state="lost" if lost else "ok", xids=xids)

    def at(ts: float, g: GpuReading) -> Frame:
        return Frame("c", "r", "node-0", T0 + ts, (g,))

    store = SqliteStore(tmp_path / "s.db")
    Processor(store, []).process([at(0, gpu0(OLD, False, (79,))), at(10, gpu0(OLD, True)),
                                  at(600, gpu0(NEW, True))])
    live = LemonScore(threshold=100.0)
    for ts, g in ((0, gpu0(OLD, False, (79,))), (10, gpu0(OLD, True)), (600, gpu0(NEW, True))):
        live.update([at(ts, g)])
    rebuilt = LemonScore(threshold=100.0)
    rebuilt.use_events(store.events)
    rebuilt.update([at(700, gpu0(NEW, True))])
    assert live.score("c", "node-0", T0 + 700) == pytest.approx(10.0, abs=0.01)
    assert rebuilt.score("c", "node-0", T0 + 700) == pytest.approx(10.0, abs=0.01)
    store.close()
