"""A board replaced in its slot, through the real Processor and an embedded store: what
the detectors say of the new board is judged on its own, not by what they had learned of
the old one (its hot offset, its error counters, its falling off the bus)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models.artifact import ModelSet
from fleetwatch.models.learned import LearnedDetectors
from fleetwatch.models.lemon import LemonScore
from fleetwatch.models.thermal_health import ThermalHealth, ThermalModel
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


class _Expect50:
    """A thermal model's estimator that expects 50 °C whatever the load."""

    def predict(self, rows: np.ndarray) -> np.ndarray:
        return np.full(len(rows), 50.0)


def _health_frames(start: float, seconds: float, temp2: float, board: str) -> list[Frame]:
    """node-0 every 15 s: four GPUs at 50 °C but GPU 2 (``board``) at ``temp2``."""
    return [Frame("c", "r", "node-0", T0 + start + k * 15.0, tuple(
        GpuReading(i, board if i == 2 else f"GPU-0000000{i}-0000-0000-0000-000000000000",
                   "H100", {"gpu_temp_c": temp2 if i == 2 else 50.0, "gpu_power_w": 500.0})
        for i in range(4))) for k in range(int(seconds / 15.0))]


def _thermal_after_restart(tmp_path: Path, trained_from: float) -> list:
    """A processor stores the swap of GPU 2's board (at T0 + 2 h); another starts later with
    a model whose trained offset for GPU 2 is the old board's 6 °C, trained on history from
    ``trained_from``; the new board runs like its peers for 1.5 h, then 6 °C over."""
    store = SqliteStore(tmp_path / f"s{trained_from}.db")
    first = Processor(store, [])
    for frames in (_health_frames(0, 60, 56.0, OLD), _health_frames(7200, 60, 50.0, NEW)):
        first.process(frames)
    model = ThermalModel(_Expect50(), "constant", {}, {f"c/node-0/gpu{i}": 0.0 for i in range(4)}
                         | {"c/node-0/gpu2": 6.0}, 1.0)
    learned = LearnedDetectors(tmp_path / "no-models", thermal=ThermalHealth(half_life_s=60.0))
    learned.use(ModelSet(thermal=model, metadata={"range": [trained_from, T0 + 3 * 86400]}))
    later = Processor(store, [learned])
    for start, seconds, temp in ((9000, 5400, 50.0), (14400, 3600, 56.0)):
        frames = _health_frames(start, seconds, temp, NEW)
        for k in range(0, len(frames), 40):
            later.process(frames[k:k + 40])
    alerts = [a for a in store.alerts(("pending", "firing", "resolved"))
              if a.rule == "thermal_health"]
    store.close()
    return alerts


def test_a_processor_started_after_a_swap_does_not_take_the_old_boards_trained_offset(
        tmp_path: Path) -> None:
    [alert] = _thermal_after_restart(tmp_path, trained_from=T0 - 86400)
    assert (alert.device, alert.uuid, alert.state) == ("gpu2", NEW, "firing")
    assert alert.evidence["offset_online"] == 1.0 and abs(alert.evidence["offset_c"]) < 0.5
    # A model trained on history since the swap knows the new board: its offset is used.
    assert _thermal_after_restart(tmp_path, trained_from=T0 + 7300) == []
