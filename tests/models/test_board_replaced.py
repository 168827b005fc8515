"""A GPU board replaced in its slot (the UUID the frames carry for (cluster, node, GPU index)
changed): every detector forgets what it learned of the old board, from the new board's
first frame on; a frame without a readable UUID is no new board."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models.anomaly import _FLOORS, FEATURES, AnomalyModel, FleetAnomaly
from fleetwatch.models.batch import columns
from fleetwatch.models.board_swaps import BoardSwaps
from fleetwatch.models.gpu_errors import GpuErrors
from fleetwatch.models.gpu_slots import GpuTable
from fleetwatch.models.gpu_state import GpuState
from fleetwatch.models.jobs import JobPeers
from fleetwatch.models.lemon import LemonScore
from fleetwatch.models.peers import ThermalPeers
from fleetwatch.models.thermal_health import ThermalHealth, ThermalModel
from fleetwatch.models.xid_events import XidEvents
from fleetwatch.pipeline.store.base import Alert
from tests.models.helpers import busy, node, rules

OLD = "GPU-11111111-2222-3333-4444-555555555555"
NEW = "GPU-99999999-8888-7777-6666-555555555555"
OTHER = "GPU-77777777-8888-7777-6666-555555555555"
STEP = 5.0


def on(f: Frame, uuid: str, gpu: int = 0) -> Frame:
    """The frame with ``uuid`` as the board of GPU ``gpu``."""
    gpus = tuple(dataclasses.replace(g, uuid=uuid) if g.index == gpu else g for g in f.gpus)
    return dataclasses.replace(f, gpus=gpus)


def test_a_new_board_gets_a_fresh_slot_from_its_first_frame_on() -> None:
    t = GpuTable(v=0.0)
    first = t.slots(columns([on(node(0, [busy(60)] * 2), OLD)]))
    t["v"][first[0]] = 7.0  # what the detector learned of both boards
    frames = [on(node(10, [busy(60)] * 2), OLD), on(node(20, [busy(60)] * 2), NEW)]
    s = t.slots(columns(frames))
    assert s[0, 0] == first[0, 0]            # the old board's last frame: its state
    assert s[1, 0] != first[0, 0] and t["v"][s[1, 0]] == 0.0   # the new board's: none
    assert s[0, 1] == s[1, 1] == first[0, 1] and t["v"][s[1, 1]] == 7.0  # its neighbour
    later = t.slots(columns([on(node(30, [busy(60)] * 2), NEW)]))
    assert later[0, 0] == s[1, 0] and t["v"][first[0, 0]] == 7.0  # kept for the old board
    # A third board: the first one's state is forgotten, its slot freed at the next batch.
    third = t.slots(columns([on(node(40, [busy(60)] * 2), OTHER)]))
    t.slots(columns([on(node(50, [busy(60)] * 2), OTHER)]))
    assert third[0, 0] not in (first[0, 0], s[1, 0]) and t["v"][first[0, 0]] == 0.0


def test_boards_alternating_in_a_slot_are_each_judged_by_their_own_state() -> None:
    """Two machines under one node name (or two clusters' nodes of one name): the UUIDs
    of a slot alternate frame by frame; each board keeps its own state, and only the
    first sighting of the second board is a new board."""
    t, g = GpuTable(v=0.0), GpuState({"v": 0.0})
    frames = [on(node(k, [busy(60)] * 2), (OLD, NEW)[k % 2]) for k in range(6)]
    rows = t.slots(columns(frames[:3]))
    assert rows[0, 0] == rows[2, 0] != rows[1, 0] and rows[0, 1] == rows[1, 1]
    t["v"][rows[0, 0]], t["v"][rows[1, 0]] = 1.0, 2.0
    more = t.slots(columns(frames[3:]))
    assert more[:, 0].tolist() == [rows[1, 0], rows[0, 0], rows[1, 0]]
    assert t["v"][rows[0, 0]] == 1.0 and t["v"][rows[1, 0]] == 2.0
    first = g.slots(columns(frames[:3]))
    assert first[0, 0] == first[2, 0] != first[1, 0] and g.replaced == [("c", "n1", 0)]
    later = g.slots(columns(frames[3:]))
    assert later[:, 0].tolist() == [first[1, 0], first[0, 0], first[1, 0]]
    assert g.replaced == []
    # Another cluster's node of the same name is another node: no board changes there.
    other = [dataclasses.replace(f, cluster=("c", "c2")[k % 2]) for k, f in enumerate(frames)]
    u = GpuTable(v=0.0)
    s = u.slots(columns(other))
    assert len({*s[::2, 0].tolist()}) == len({*s[1::2, 0].tolist()}) == 1
    assert s[0, 0] != s[1, 0] and s[0, 1] != s[1, 1]


def test_a_failing_board_alternating_with_another_is_alerted() -> None:
    """Its double-bit errors climb frame after frame of its own: gpu_ecc_dbe."""
    d, found = GpuErrors(), []
    for k in range(40):
        counters = ({"gpu_ecc_dbe_volatile_total": 0.0, "gpu_ecc_dbe_aggregate_total": 0.0}
                    if k % 2 == 0 else {"gpu_ecc_dbe_volatile_total": float(k // 2),
                                        "gpu_ecc_dbe_aggregate_total": float(k // 2)})
        f = node(k * STEP, [busy(60, **counters), busy(60)])
        found += d.update([on(f, (OLD, NEW)[k % 2])])
    assert ("gpu_ecc_dbe", 0) in rules(found)


def test_a_frame_without_a_readable_uuid_is_no_new_board() -> None:
    t = GpuTable(v=0.0)
    first = t.slots(columns([on(node(0, [busy(60)]), OLD)]))[0, 0]
    t["v"][first] = 7.0
    # NVML could not read it (the reader's stand-in), a replay's file names none, none at all
    for k, uuid in enumerate(["GPU-unknown-0", "n1/gpu0", "", OLD]):
        assert t.slots(columns([on(node(10 + k, [busy(60)]), uuid)]))[0, 0] == first
    assert t["v"][first] == 7.0
    # A slot's first board is no replacement either, whatever came before without one.
    u = GpuTable(v=0.0)
    s = u.slots(columns([on(node(0, [busy(60)]), "GPU-unknown-0")]))[0, 0]
    assert u.slots(columns([on(node(10, [busy(60)]), NEW)]))[0, 0] == s


def test_the_learned_detectors_state_starts_afresh_for_a_new_board() -> None:
    g = GpuState({"v": 0.0})
    first = g.slots(columns([on(node(0, [busy(60)] * 2), OLD)]))
    g["v"][first[0]] = 7.0
    s = g.slots(columns([on(node(10, [busy(60)] * 2), OLD), on(node(20, [busy(60)] * 2), NEW)]))
    assert s[0, 0] == first[0, 0] and s[1, 0] != s[0, 0] and g["v"][s[1, 0]] == 0.0
    assert g.replaced == [("c", "n1", 0)]
    assert g.slot_of[("c", "n1", 0)] == s[1, 0] and s[1, 1] == first[0, 1]
    again = g.slots(columns([on(node(30, [busy(60)] * 2), "GPU-unknown-0")]))
    assert again[0, 0] == s[1, 0] and g.replaced == []
    # Slots are not handed out twice: another node's GPUs get slots of their own.
    other = g.slots(columns([node(40, [busy(60)] * 3, name="n2")]))
    assert len({*other[0].tolist(), *again[0].tolist()}) == 5


def test_replaced_boards_are_forgotten_with_their_node() -> None:
    t = GpuTable(v=0.0)
    t.slots(columns([on(node(0, [busy(60)]), OLD)]))
    t.drop(["n1"])
    # Met again after a rebalance: its board is a first sighting, not a replacement.
    s = t.slots(columns([on(node(10, [busy(60)]), NEW)]))
    t["v"][s[0, 0]] = 3.0
    assert t.slots(columns([on(node(20, [busy(60)]), NEW)]))[0, 0] == s[0, 0]
    assert np.count_nonzero(t["v"][:t.used]) == 1


def _peers(d: ThermalPeers, t0: float, seconds: float, hot_c: float, uuid: str) -> list:
    """One 8-GPU node every STEP s, GPU 0 (board ``uuid``) ``hot_c`` over its peers."""
    found = []
    t = t0
    while t < t0 + seconds:
        temps = [66.0 + hot_c] + [66.0, 65.0, 67.0, 66.0, 65.0, 66.0, 67.0]
        found += d.update([on(node(t, [busy(x) for x in temps]), uuid)])
        t += STEP
    return found


def test_a_new_board_does_not_inherit_a_hot_boards_offset_and_its_overheat_pages() -> None:
    """The old board ran 6 °C over its peers all its life (learned, no alert). The new
    board runs like its peers, then 6 °C over them: an overheat by the old board's
    offset, which that offset would hide."""
    d = ThermalPeers()
    assert _peers(d, 0, 4 * 3600, 6.0, OLD) == []
    t = 4 * 3600
    assert _peers(d, t, 1200, 0.0, NEW) == []
    found = _peers(d, t + 1200, 120, 6.0, NEW)
    assert ("gpu_hot_vs_peers", 0) in rules(found)
    assert all(f.gpu == 0 for f in found)


def test_a_hot_board_seen_without_its_uuid_keeps_its_learned_offset() -> None:
    """A frame without the UUID now and then changes nothing: the same board keeps its
    learned offset and raises nothing."""
    d = ThermalPeers()
    assert _peers(d, 0, 3600, 6.0, OLD) == []
    assert _peers(d, 3600, 60, 6.0, "GPU-unknown-0") == []
    assert _peers(d, 3660, 600, 6.0, OLD) == []


WORN = {"gpu_ecc_dbe_volatile_total": 2.0, "gpu_ecc_dbe_aggregate_total": 5.0,
        "gpu_retired_pages_sbe": 4.0, "gpu_retired_pages_dbe": 3.0,
        "gpu_pcie_replay_total": 900.0, "gpu_nvlink_crc_errors_total": 40.0,
        "gpu_nvlink_replay_errors_total": 30.0, "gpu_nvlink_recovery_errors_total": 2.0}


def _errors(d: GpuErrors, t0: float, uuid: str, samples: list[dict[str, float]]) -> list:
    """GPU 0 (board ``uuid``) reads ``samples``, one every 10 s; GPU 1 reads WORN."""
    found = []
    for k, m in enumerate(samples):
        found += d.update([on(node(t0 + 10.0 * k, [busy(60, **m), busy(60, **WORN)]), uuid)])
    return found


def test_a_new_boards_error_counters_from_zero_raise_nothing_and_a_new_error_does() -> None:
    d = GpuErrors()
    before = _errors(d, 0, OLD, [{**WORN, "gpu_ecc_dbe_volatile_total": 1.0}, WORN, WORN])
    assert ("gpu_ecc_dbe", 0) in rules(before)   # the old board's last DBE, in its hold
    fresh = dict.fromkeys(WORN, 0.0)
    # Its counters start at 0: no reset of the old board's ECC errors, no drop, nothing.
    assert _errors(d, 30, NEW, [fresh] * 3) == []
    # A real first error on it (below the old board's counts) is one.
    found = _errors(d, 60, NEW, [{**fresh, "gpu_ecc_dbe_volatile_total": 1.0,
                                  "gpu_ecc_dbe_aggregate_total": 1.0,
                                  "gpu_retired_pages_dbe": 1.0}])
    assert set(rules(found)) == {("gpu_ecc_dbe", 0), ("gpu_retired_pages", 0)}
    dbe = next(f for f in found if f.rule == "gpu_ecc_dbe")
    assert dbe.evidence.get("reset", 0.0) == 0.0


class _Expect50:
    """A thermal model's estimator that expects 50 °C whatever the load."""

    def predict(self, rows: np.ndarray) -> np.ndarray:
        return np.full(len(rows), 50.0)


def _health(h: ThermalHealth, t0: float, seconds: float, temp2: float, uuid: str) -> list:
    """Four GPUs every 15 s; GPU 2 (board ``uuid``) at ``temp2``, the others at 50 °C."""
    found = []
    t = t0
    while t < t0 + seconds:
        temps = [50.0, 50.0, temp2, 50.0]
        gpus = tuple(GpuReading(i, uuid if i == 2 else f"GPU-{i}", "H100",
                                {"gpu_temp_c": x, "gpu_power_w": 500.0})
                     for i, x in enumerate(temps))
        found += h.update([Frame("c", "r", "n", t, gpus)])
        t += 15.0
    return found


def test_thermal_health_judges_a_new_board_by_its_own_offset_not_the_trained_one() -> None:
    """Training saw the old board run 6 °C warm all its life; the new board in its slot
    learns its own offset (its first hour) and its overheating by 6 °C is paged."""
    model = ThermalModel(_Expect50(), "constant", {}, {f"c/n/gpu{i}": 0.0 for i in range(4)}
                         | {"c/n/gpu2": 6.0}, 1.0)
    h = ThermalHealth(model, half_life_s=60.0)
    assert _health(h, 0, 7200, 56.0, OLD) == []
    assert _health(h, 7200, 5400, 50.0, NEW) == []
    found = _health(h, 12600, 3600, 56.0, NEW)
    assert found and {f.gpu for f in found} == {2}
    assert found[0].evidence["offset_online"] == 1.0
    assert abs(found[0].evidence["offset_c"]) < 0.5


def test_a_new_board_starts_its_own_anomaly_windows_and_streak() -> None:
    """GPU 3 draws 700 W against a history of 400 W; its board is replaced at minute
    ``swap``: the new board is flagged after two whole windows of its own, never on the
    strength of the old board's."""
    T0 = 1_763_800_020.0
    heavy = 3
    centre = np.array([dict(zip(FEATURES, (60.0, 0.0, 0.0, 400.0, 0.0, 0.8, 0.0, 1980.0,
                                           0.0, 0.0, 0.0)))[f] for f in FEATURES])
    model = AnomalyModel({heavy: centre}, {heavy: _FLOORS.copy()}, {heavy: 8.0}, {heavy: 500})

    def flagged_at(swap: int) -> list[float]:
        anomaly = FleetAnomaly(model)
        found = []
        for m in range(41):
            f = node(T0 + 60.0 * m, [busy(60.0)] * 3 + [busy(60.0, 700.0)])
            found += anomaly.update([on(f, OLD if m < swap else NEW, gpu=3)])
        return [(f.ts - T0) / 60.0 for f in found if f.gpu == 3]

    assert flagged_at(99) == [20.0, 30.0, 40.0]     # never replaced
    assert flagged_at(10) == [30.0, 40.0]           # its windows from minute 10 on
    assert flagged_at(15) == [35.0]                 # one window of the old board's, then its


def test_a_new_board_lost_at_once_is_a_lemon_incident_of_its_own() -> None:
    """The old board fell off the bus (XID 79, then lost: one incident); the new board in
    its slot is lost too: the node's second incident, whatever the old board did."""
    def frame(ts: float, uuid: str, lost: bool, xids: tuple[int, ...] = ()) -> Frame:
        return on(node(ts, [busy(60)] * 2, lost=(0,) if lost else (), xids={0: xids}), uuid)

    lemon = LemonScore(threshold=100.0)
    lemon.update([frame(0, OLD, False, (79,))])
    lemon.update([frame(10, OLD, True)])
    once = lemon.score("c", "n1", 20)
    assert once == pytest.approx(5.0, abs=0.01)      # the XID 79; the loss is the same one
    lemon.update([frame(600, NEW, True)])
    assert lemon.score("c", "n1", 600) == pytest.approx(once + 5.0, abs=0.01)


def test_an_xid_on_a_new_board_does_not_carry_the_old_boards_codes() -> None:
    d = XidEvents()
    old = d.update([on(node(0, [busy(60)], xids={0: (79,)}), OLD)])
    assert old[0].evidence["xid_79_count"] == 1
    # A frame that could not read the UUID: the same board, its codes join.
    same = d.update([on(node(10, [busy(60)], xids={0: (48,)}), "GPU-unknown-0")])
    assert {"xid_79_count", "xid_48_count"} <= set(same[0].evidence)
    new = d.update([on(node(20, [busy(60)], xids={0: (48,)}), NEW)])
    assert len(new) == 1 and new[0].evidence["xid_48_count"] == 1
    assert "xid_79_count" not in new[0].evidence and new[0].evidence["revision"] == 1


def test_a_new_board_in_a_requeued_job_is_not_held_stuck_for_the_old_board() -> None:
    """The old board hung in job1 and was found stuck; the node was repaired and job1
    requeued (Slurm keeps its id): the new board waiting in a collective with its peers
    is the job starting, not the old board's hang going on."""
    comm = {"gpu_util_pct": 100.0, "gpu_sm_active_ratio": 0.06}
    hung = busy(45, 78.0, gpu_util_pct=100.0, gpu_sm_active_ratio=0.0)
    d = JobPeers()

    def stuck(ts: float, uuid: str, peers: dict[str, float]) -> bool:
        found = d.update([on(node(ts, [hung] + [peers] * 3), uuid)])
        return rules(found) == [("gpu_stuck", 0)]

    assert stuck(0, OLD, busy(60))
    assert stuck(15, "GPU-unknown-0", busy(45, 97.0, **comm))  # the same board's hang
    assert not stuck(3600, NEW, busy(45, 97.0, **comm))


def test_an_adopted_xid_alert_keeps_the_board_the_store_names() -> None:
    """After a restart the open XID alert is taken over with its board (the store names
    it): an XID of the same board joins it, one of a new board starts afresh."""
    evidence = {"xid": 79.0, "count": 1.0, "xid_79_count": 1.0, "xid_79_first_ts": 0.0,
                "xid_79_last_ts": 0.0, "revision": 1.0}
    alert = Alert(id="gpu_xid_critical/c/n1/gpu0/1", rule="gpu_xid_critical",
                  severity="critical", cluster="c", rack="r1", node="n1", device="gpu0",
                  state="firing", started_ts=0.0, updated_ts=0.0, value=79.0,
                  message="XID 79", evidence=evidence, uuid=OLD)
    for board, joined in ((OLD, True), (NEW, False)):
        d = XidEvents()
        d.adopt([alert])
        [found] = d.update([on(node(10, [busy(60)], xids={0: (48,)}), board)])
        assert ("xid_79_count" in found.evidence) is joined, board


def test_boards_replaced_are_read_once_per_node_met_and_a_store_that_fails_is_said(
        caplog: pytest.LogCaptureFixture) -> None:
    asked: list[str | None] = []

    def events(start: float, end: float, node: str | None = None,
               kinds: list[str] | None = None) -> list:
        asked.append(node)
        raise OSError("store away")

    swaps = BoardSwaps()
    swaps.use_events(events)
    swaps.recall([node(0, [busy(60)])])
    swaps.recall([node(10, [busy(60)])])
    assert asked == ["n1"] and swaps.at == {}
    assert "could not be read from the store (store away)" in caplog.text
    swaps.drop(["n1"])  # its partition went to another processor, and came back
    swaps.recall([node(20, [busy(60)])])
    assert asked == ["n1", "n1"]
