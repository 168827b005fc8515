"""A node back from a reboot with its GPUs numbered otherwise, through the real Processor
and an embedded store: a board that did not enumerate is alerted on (``gpu_missing``,
named by its serial, UUID and PCI bus id, not by the board NVML now numbers in its place),
and boards only renumbered are recorded as moved, not replaced."""

from __future__ import annotations

from pathlib import Path

from fleetwatch.config import DetectorsConfig
from fleetwatch.dashboards import boards
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.store.base import Silence
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.wiring import detectors
from tests.recording_sink import Recording

T0 = 1.8e9
STEP = 5.0
ALL = ("pending", "firing", "resolved")


def uuid(k: int, new: bool = False) -> str:
    return f"GPU-{'9' if new else '0'}0000016-0000-4000-8000-{k:012x}"


def frame(ts: float, order: list[int], swapped: tuple[int, ...] = ()) -> Frame:
    """node-016 with the boards of ``order`` (board k: serial 16500016000k, PCI bus
    0x18 + k) at NVML indices 0, 1, ...; ``swapped``: boards replaced by new ones at the
    same bus."""
    gpus = tuple(GpuReading(
        i, uuid(k, k in swapped), "NVIDIA H100 80GB HBM3",
        {"gpu_temp_c": 60.0, "gpu_power_w": 300.0, "gpu_util_pct": 50.0},
        info={"serial": f"{9999 if k in swapped else 1650}0016{k:05d}",
              "pci_bus_id": f"00000000:{0x18 + k:02X}:00.0"})
        for i, k in enumerate(order))
    return Frame("prod", "rack-02", "node-016", ts, gpus)


def feed(p: Processor, start: float, seconds: float, order: list[int],
         swapped: tuple[int, ...] = ()) -> None:
    frames = [frame(T0 + start + k * STEP, order, swapped) for k in range(int(seconds / STEP))]
    for k in range(0, len(frames), 12):
        p.process(frames[k:k + 12])


def test_a_board_missing_after_a_reboot_is_a_critical_alert_naming_that_board(
        tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    p = Processor(store, detectors(DetectorsConfig()))
    feed(p, 0, 300, list(range(8)))
    # Rebooted at T0 + 400: board 2 does not enumerate; boards 3..7 are NVML's 2..6.
    feed(p, 400, 300, [0, 1, 3, 4, 5, 6, 7])
    [alert] = [a for a in store.alerts(ALL) if a.rule == "gpu_missing"]
    assert (alert.state, alert.severity, alert.device) == ("firing", "critical", "gpu2")
    assert (alert.uuid, alert.serial, alert.pci_bus_id) == (
        uuid(2), "1650001600002", "00000000:1A:00.0")
    assert "1650001600002" in alert.message
    assert "7 of its 8" in alert.message and alert.action
    assert alert.started_ts == T0 + 400
    events = store.events(T0, T0 + 3600, kinds=["gpu_replaced", "gpu_moved", "gpu_state"])
    assert [e for e in events if e.kind == "gpu_replaced"] == []
    moved = sorted((e.device, e.code, e.value) for e in events if e.kind == "gpu_moved")
    assert moved == [(f"gpu{i}", i + 1, uuid(i + 1)) for i in range(2, 7)]
    [gone] = [e for e in events if e.kind == "gpu_state"]
    assert gone.device == "gpu7" and "1650001600002" in gone.text
    # Back with all eight at the next reboot: the alert ends, the boards move back.
    feed(p, 800, 120, list(range(8)))
    [alert] = [a for a in store.alerts(ALL) if a.rule == "gpu_missing"]
    assert (alert.state, alert.resolved_ts) == ("resolved", T0 + 800)
    assert store.events(T0, T0 + 3600, kinds=["gpu_replaced"]) == []
    assert len(store.events(T0 + 800, T0 + 3600, kinds=["gpu_moved"])) == 5
    store.close()


def test_a_renumbering_is_moves_and_a_board_swapped_meanwhile_a_replacement(
        tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    p = Processor(store, detectors(DetectorsConfig()))
    feed(p, 0, 300, list(range(8)))
    # A firmware upgrade numbers boards 0 and 1 otherwise; board 3 was swapped (RMA).
    feed(p, 400, 300, [1, 0, 2, 3, 4, 5, 6, 7], swapped=(3,))
    events = store.events(T0, T0 + 3600, kinds=["gpu_replaced", "gpu_moved"])
    assert sorted((e.kind, e.device, e.value) for e in events) == [
        ("gpu_moved", "gpu0", uuid(1)), ("gpu_moved", "gpu1", uuid(0)),
        ("gpu_replaced", "gpu3", uuid(3, new=True))]
    assert [a for a in store.alerts(ALL) if a.rule == "gpu_missing"] == []
    # The node page's boards: which board each index holds, and since when it moved in.
    rows = {s.device: s for s in boards.slots(
        store.events(T0, T0 + 3600, node="node-016", kinds=list(boards.KINDS)))}
    assert (rows["gpu0"].uuid, rows["gpu0"].since) == (uuid(1), T0 + 400)
    [(ts, text)] = rows["gpu0"].replaced
    assert ts == T0 + 400 and "moved from gpu1 to gpu0" in text and "1650001600001" in text
    [(_, text)] = rows["gpu3"].replaced
    assert "replaced by" in text and rows["gpu3"].uuid == uuid(3, new=True)
    assert rows["gpu2"].replaced == ()
    store.close()


def test_a_missing_board_is_muted_by_a_silence_and_paged_when_it_ends_if_still_missing(
        tmp_path: Path) -> None:
    """The maintenance window: node-016 rebooted under a silence comes back without board
    2; the alert is muted while the silence holds and paged once it ends, then resolved
    when the board is back."""
    sink = Recording()
    window = Silence("maint", (("node", "=", "node-016"),), T0 + 350, T0 + 600, "admin")
    notifier = Notifier([sink], silences=lambda: [window], background=False, reload_s=0.0)
    store = SqliteStore(tmp_path / "s.db")
    p = Processor(store, detectors(DetectorsConfig()), notifier=notifier)
    feed(p, 0, 300, list(range(8)))
    feed(p, 400, 180, [0, 1, 3, 4, 5, 6, 7])
    said = [(n.alert.state, n.muted_by, n.notify) for n in sink.sent
            if n.alert.rule == "gpu_missing"]
    assert said and all(m == "silence:maint" and not notify for _, m, notify in said)
    feed(p, 580, 120, [0, 1, 3, 4, 5, 6, 7])  # the silence ends at T0 + 600
    paged = [n for n in sink.sent if n.alert.rule == "gpu_missing" and n.notify]
    assert [(n.alert.state, n.alert.serial) for n in paged] == [("firing", "1650001600002")]
    feed(p, 800, 60, list(range(8)))
    paged = [n.alert.state for n in sink.sent if n.alert.rule == "gpu_missing" and n.notify]
    assert paged == ["firing", "resolved"]
    store.close()


def test_a_processor_started_after_the_renumbering_tells_moves_from_the_stored_boards(
        tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    feed(Processor(store, detectors(DetectorsConfig())), 0, 120, list(range(8)))
    later = Processor(store, detectors(DetectorsConfig()))
    feed(later, 400, 120, [1, 0, 2, 3, 4, 5, 6, 7], swapped=(3,))
    events = store.events(T0, T0 + 3600, kinds=["gpu_replaced", "gpu_moved"])
    assert sorted((e.kind, e.device, e.ts) for e in events) == [
        ("gpu_moved", "gpu0", T0 + 400), ("gpu_moved", "gpu1", T0 + 400),
        ("gpu_replaced", "gpu3", T0 + 400)]
    store.close()


def test_a_processor_restarted_while_a_board_is_missing_keeps_its_alert_open(
        tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    first = Processor(store, detectors(DetectorsConfig()))
    feed(first, 0, 300, list(range(8)))
    feed(first, 400, 120, [0, 1, 3, 4, 5, 6, 7])
    later = Processor(store, detectors(DetectorsConfig()))  # an upgrade: stop, start
    feed(later, 520, 120, [0, 1, 3, 4, 5, 6, 7])
    [alert] = [a for a in store.alerts(ALL) if a.rule == "gpu_missing"]
    assert (alert.state, alert.uuid, alert.started_ts) == ("firing", uuid(2), T0 + 400)
    assert alert.updated_ts >= T0 + 520
    feed(later, 700, 30, list(range(8)))
    [alert] = [a for a in store.alerts(ALL) if a.rule == "gpu_missing"]
    assert (alert.state, alert.resolved_ts) == ("resolved", T0 + 700)
    store.close()


def test_a_processor_started_while_a_board_is_missing_tells_no_move_again(
        tmp_path: Path) -> None:
    """The store names board 7 in gpu7 (before the reboot) and in gpu6 (moved there since):
    the newest naming is where it is."""
    store = SqliteStore(tmp_path / "s.db")
    first = Processor(store, detectors(DetectorsConfig()))
    feed(first, 0, 120, list(range(8)))
    feed(first, 400, 60, [0, 1, 3, 4, 5, 6, 7])
    later = Processor(store, detectors(DetectorsConfig()))
    feed(later, 520, 60, [0, 1, 3, 4, 5, 6, 7])
    assert len(store.events(T0, T0 + 3600, kinds=["gpu_moved"])) == 5
    assert store.events(T0, T0 + 3600, kinds=["gpu_replaced"]) == []
    store.close()
