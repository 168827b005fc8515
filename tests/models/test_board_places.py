"""Which board is where after a node's GPUs are numbered again: a board that does not
enumerate (the boards after it move down one NVML index), a renumbering by a firmware
upgrade, a renumbering with one board really swapped, and frames that name no PCI bus id
or no UUID for a GPU."""

from __future__ import annotations

import numpy as np

from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models.batch import columns
from fleetwatch.models.board_places import Seen, place
from fleetwatch.models.gpu_slots import GpuTable
from fleetwatch.models.gpu_state import GpuState


def boards(order: list[int], swapped: dict[int, str] | None = None,
           pci: bool = True) -> dict[int, Seen]:
    """index -> board, the boards of ``order`` (board k sits at PCI bus 0x1k): what NVML
    gives after a reboot; ``swapped``: board k replaced by a new one at the same bus."""
    swapped = swapped or {}
    return {i: Seen(swapped.get(k, f"GPU-board-{k}"), f"00000000:{0x18 + k:02X}:00.0"
                    if pci else "") for i, k in enumerate(order)}


EIGHT = list(range(8))


def test_the_same_boards_in_the_same_order_change_nothing() -> None:
    assert not place(boards(EIGHT), boards(EIGHT)).changed


def test_a_board_missing_in_the_middle_is_missing_and_those_after_it_moved() -> None:
    p = place(boards(EIGHT), boards([0, 1, 3, 4, 5, 6, 7]))
    assert p.missing == {2: "GPU-board-2"}
    assert p.moved == {2: 3, 3: 4, 4: 5, 5: 6, 6: 7}
    assert p.replaced == {} and p.added == []


def test_a_missing_board_back_is_seen_again_and_the_others_move_back() -> None:
    p = place(boards([0, 1, 3, 4, 5, 6, 7]), boards(EIGHT))
    assert p.added == [2] and p.missing == {} and p.replaced == {}
    assert p.moved == {3: 2, 4: 3, 5: 4, 6: 5, 7: 6}


def test_a_renumbering_moves_boards_and_replaces_none() -> None:
    p = place(boards(EIGHT), boards([1, 0, 2, 3, 4, 5, 6, 7]))
    assert p.moved == {0: 1, 1: 0}
    assert p.replaced == {} and p.added == [] and p.missing == {}


def test_a_renumbering_with_one_board_swapped_replaces_that_one_only() -> None:
    p = place(boards(EIGHT), boards([1, 0, 2, 3, 4, 5, 6, 7], {3: "GPU-new"}))
    assert p.moved == {0: 1, 1: 0} and p.replaced == {3: 3}
    assert p.added == [] and p.missing == {}


def test_a_new_board_replaces_the_one_of_its_pci_bus_id_wherever_nvml_numbers_it() -> None:
    # Board 2 swapped for a new one at its bus, and NVML numbers the new one last.
    before = boards(EIGHT)
    now = boards([0, 1, 3, 4, 5, 6, 7, 2], {2: "GPU-new"})
    p = place(before, now)
    assert p.replaced == {7: 2} and p.missing == {} and p.added == []
    assert p.moved == {2: 3, 3: 4, 4: 5, 5: 6, 6: 7}


def test_a_missing_board_with_a_new_board_at_another_bus_is_still_missing() -> None:
    before = boards(EIGHT)
    now = {**boards([0, 1, 3, 4, 5, 6, 7]), 7: Seen("GPU-extra", "00000000:99:00.0")}
    p = place(before, now)
    assert p.missing == {2: "GPU-board-2"} and p.added == [7] and p.replaced == {}


def test_without_pci_bus_ids_a_new_uuid_replaces_the_board_at_its_index() -> None:
    p = place(boards(EIGHT, pci=False), boards(EIGHT, {5: "GPU-new"}, pci=False))
    assert p.replaced == {5: 5} and p.missing == {} and p.moved == {}
    p = place(boards(EIGHT, pci=False), boards([0, 1, 3, 4, 5, 6, 7], pci=False))
    assert p.missing == {2: "GPU-board-2"} and p.replaced == {}


def test_a_gpu_whose_uuid_was_not_read_is_unread_not_missing() -> None:
    now = boards(EIGHT)
    del now[4]
    assert place(boards(EIGHT), now, unnamed=[4]).missing == {}
    # Seven named, one unnamed at another index: the node still has its eight.
    short = boards([0, 1, 3, 4, 5, 6, 7])
    assert place(boards(EIGHT), short, unnamed=[7]).missing == {}
    assert place(boards(EIGHT), short).missing == {2: "GPU-board-2"}



def _frame(ts: float, order: list[int], swapped: tuple[int, ...] = ()) -> Frame:
    return Frame("c", "r", "node-0", ts, tuple(
        GpuReading(i, f"GPU-{'new' if k in swapped else 'old'}-{k}", "H100",
                   {"gpu_temp_c": 50.0}) for i, k in enumerate(order)))


def _learned(table: GpuTable, f: Frame) -> list[float]:
    """What the table holds for each GPU of the frame (NaN: nothing learned)."""
    return [float(v) for v in table["v"][table.slots(columns([f]))[0][:len(f.gpus)]]]


def test_what_the_detectors_learned_follows_a_board_numbered_otherwise() -> None:
    table = GpuTable(v=np.nan)
    slots = table.slots(columns([_frame(0, EIGHT)]))[0]
    table["v"][slots] = np.arange(8.0)  # each board's own learned value: its number
    # Renumbered by a firmware upgrade, board 3 swapped: 0 and 1 keep theirs, 3 is new.
    got = _learned(table, _frame(5, [1, 0, 2, 3, 4, 5, 6, 7], swapped=(3,)))
    assert got[:3] == [1.0, 0.0, 2.0] and np.isnan(got[3]) and got[4:] == [4.0, 5.0, 6.0, 7.0]


def test_boards_after_a_missing_one_keep_theirs_and_it_takes_its_own_back() -> None:
    table = GpuTable(v=np.nan)
    slots = table.slots(columns([_frame(0, EIGHT)]))[0]
    table["v"][slots] = np.arange(8.0)
    assert _learned(table, _frame(5, [0, 1, 3, 4, 5, 6, 7])) == [0.0, 1.0, 3.0, 4.0, 5.0,
                                                                  6.0, 7.0]
    assert _learned(table, _frame(10, EIGHT)) == [float(k) for k in EIGHT]
    assert table.used <= 9  # no slot handed out per frame


def _state(state: GpuState, f: Frame) -> list[float]:
    return [float(v) for v in state["v"][state.slots(columns([f]))[0][:len(f.gpus)]]]


def test_the_learned_detectors_state_follows_a_renumbered_board_too() -> None:
    state = GpuState({"v": np.nan})
    slots = state.slots(columns([_frame(0, EIGHT)]))[0]
    state["v"][slots] = np.arange(8.0)
    got = _state(state, _frame(5, [1, 0, 2, 3, 4, 5, 6, 7], swapped=(3,)))
    assert got[:3] == [1.0, 0.0, 2.0] and np.isnan(got[3]) and got[4:] == [4.0, 5.0, 6.0, 7.0]
    # Every GPU whose board changed is listed: a trained offset kept per GPU index is
    # another board's now.
    assert sorted(k[2] for k in state.replaced) == [0, 1, 3]
    assert _state(state, _frame(10, [1, 0, 2, 4, 5, 6, 7], swapped=(3,))) == [
        1.0, 0.0, 2.0, 4.0, 5.0, 6.0, 7.0]


def test_a_gpu_put_in_mig_mode_at_a_reboot_is_the_same_board_in_the_same_place() -> None:
    """The agent's frames over the fake NVML: under MIG a frame's GPU is still the physical
    board (its GPU- UUID; the instances are read beside it), so re-partitioning a board
    at a reboot moves, replaces and loses nothing."""
    from fleetwatch.collectors.node import node_source
    from fleetwatch.collectors.nvml import FakeNvml
    from fleetwatch.config import AgentConfig, Config, NodeConfig
    from fleetwatch.models.board_places import MissingBoards
    from fleetwatch.pipeline.events import EventTracker

    config = Config(node=NodeConfig("c", "r", "n1"), agent=AgentConfig(kernel_log=""))
    plain, mig = FakeNvml.of(8), FakeNvml.of(8)
    mig.enable_mig(3, [(1, "3g.40gb", 40 << 30), (2, "3g.40gb", 40 << 30)])
    frames = [f for k, nv in enumerate((plain, mig)) for f in node_source(
        config, nvml=nv).frames(1.8e9 + 60 * k)]
    assert frames[1].gpus[3].info.get("mig_mode") == "enabled"
    assert [g.uuid for g in frames[0].gpus] == [g.uuid for g in frames[1].gpus]
    boards, tracker = MissingBoards(), EventTracker()
    assert [boards.see(f) for f in frames] == [[], []]
    kinds = {e.kind for e in tracker.update(frames)}
    assert kinds.isdisjoint({"gpu_moved", "gpu_replaced"})
