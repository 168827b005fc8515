"""The GPU board (serial, UUID, PCI bus id) from the agent's frame to the alerts, the
store's events and the sinks: what an RMA asks for, and a board replaced in its slot."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from fleetwatch.alert_view import lines, record
from fleetwatch.cli import main as cli_main
from fleetwatch.config import DetectorsConfig
from fleetwatch.dashboards.data import read_alerts
from fleetwatch.dashboards.node_data import read_node
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.events import EventTracker
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.silence_matchers import labels
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks.alertmanager import am_annotations, am_labels
from fleetwatch.pipeline.sinks.base import change_json
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.pipeline.store.sqlite_records import ALERT_TABLE
from fleetwatch.wiring import detectors

T0 = 1.8e9
OLD = ("GPU-11111111-2222-3333-4444-555555555555", "1650123456789", "00000000:31:00.0")
NEW = ("GPU-99999999-8888-7777-6666-555555555555", "1650999999999", "00000000:31:00.0")


def gpu(index: int, board: tuple[str, str, str] | None = None, state: str = "ok",
        xids: tuple[int, ...] = ()) -> GpuReading:
    uuid, serial, pci = board or (f"GPU-0000000{index}-0000-0000-0000-000000000000",
                                  f"16500000000{index}", f"00000000:{index:02x}:00.0")
    info = {"serial": serial, "pci_bus_id": pci, "driver": "550.54"} if serial else {}
    metrics = {} if state == "lost" else {"gpu_temp_c": 50.0}
    return GpuReading(index, uuid, "NVIDIA H100 80GB HBM3", metrics, state=state,  # type: ignore[arg-type]
                      xids=xids, info=info)


def frame(ts: float, *gpus: GpuReading) -> Frame:
    return Frame("c", "r", "node-0", ts, gpus)


def test_a_board_is_named_at_its_first_frame_and_a_new_uuid_in_the_slot_is_a_replacement(
        ) -> None:
    t = EventTracker()
    first = t.update([frame(T0, gpu(0), gpu(1, OLD))])
    assert [(e.kind, e.device, e.value) for e in first] == [
        ("gpu_identity", "gpu0", "GPU-00000000-0000-0000-0000-000000000000"),
        ("gpu_identity", "gpu1", OLD[0])]  # the first sighting: no replacement
    assert "serial 1650123456789, PCI bus id 00000000:31:00.0" in first[1].text
    assert t.update([frame(T0 + 10, gpu(0), gpu(1, OLD))]) == []  # the same boards
    # A frame that could not read the UUID (the reader's stand-in), or lacks the serial
    # this tick: nothing happened to the board.
    assert t.update([frame(T0 + 20, gpu(0), gpu(1, ("GPU-unknown-1", "", "")))]) == []
    assert t.update([frame(T0 + 30, gpu(0), gpu(1, (OLD[0], "", "")))]) == []
    assert t.board("c", "node-0", 1).serial == OLD[1]  # type: ignore[union-attr]
    swapped = t.update([frame(T0 + 40, gpu(0), gpu(1, NEW))])
    assert [(e.kind, e.device, e.value) for e in swapped] == [
        ("gpu_identity", "gpu1", NEW[0]), ("gpu_replaced", "gpu1", NEW[0])]
    assert OLD[0] in swapped[1].text and OLD[1] in swapped[1].text and NEW[1] in swapped[1].text
    assert t.board("c", "node-0", 1).uuid == NEW[0]  # type: ignore[union-attr]


def test_gpu_alerts_in_the_store_name_the_board_and_a_replacement_is_a_stored_event(
        tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    processor = Processor(store, detectors(DetectorsConfig()))
    processor.process([frame(T0, gpu(0), gpu(1, OLD))])
    processor.process([frame(T0 + 10, gpu(0), gpu(1, OLD, xids=(79,)))])
    processor.process([frame(T0 + 20 + k, gpu(0), gpu(1, OLD, state="lost"))
                       for k in range(0, 60, 10)])
    alerts = {a.rule: a for a in store.alerts(("pending", "firing", "resolved"))}
    for rule in ("gpu_xid_critical", "gpu_lost"):
        a = alerts[rule]
        assert (a.device, a.uuid, a.serial, a.pci_bus_id) == ("gpu1", *OLD), rule
    assert "board: serial=1650123456789, uuid=GPU-1111" in "\n".join(
        lines([alerts["gpu_lost"]], [], {}, T0 + 100))
    assert record(alerts["gpu_lost"], [], [], {})["board"]["serial"] == OLD[1]
    # The board is replaced in the slot: stored as an event; the open alert keeps naming
    # the board it is about.
    processor.process([frame(T0 + 3600 + k, gpu(0), gpu(1, NEW)) for k in range(0, 60, 10)])
    replaced = store.events(T0, T0 + 7200, kinds=["gpu_replaced"])
    assert [(e.device, e.value) for e in replaced] == [("gpu1", NEW[0])]
    identities = store.events(T0, T0 + 7200, node="node-0", kinds=["gpu_identity"],
                              device="gpu1")
    assert [(e.ts, e.value) for e in identities] == [(T0, OLD[0]), (T0 + 3600, NEW[0])]
    lost = {a.rule: a for a in store.alerts(("pending", "firing", "resolved"))}["gpu_lost"]
    assert lost.uuid == OLD[0]
    store.close()


def _alert(**kw: object) -> Alert:
    base: dict[str, object] = dict(
        id="gpu_lost/c/n/gpu1/1", rule="gpu_lost", severity="critical", cluster="c",
        rack="r", node="n", device="gpu1", state="firing", started_ts=T0, updated_ts=T0,
        value=1.0, message="GPU 1 on n is lost", fired_ts=T0)
    base.update(kw)
    return Alert(**base)  # type: ignore[arg-type]


def test_sinks_carry_the_board_as_annotations_and_json_never_as_labels() -> None:
    a = _alert(uuid=OLD[0], serial=OLD[1], pci_bus_id=OLD[2])
    ann = am_annotations(a)
    assert (ann["uuid"], ann["serial"], ann["pci_bus_id"]) == OLD
    assert "board: serial=1650123456789" in ann["description"]
    # Labels (what Alertmanager groups and silences by) stay the slot's.
    assert am_labels(a) == am_labels(_alert()) and labels(a) == labels(_alert())
    out = json.loads(json.dumps(change_json(Notice(a))))
    assert out["board"] == {"serial": OLD[1], "uuid": OLD[0], "pci_bus_id": OLD[2]}
    assert change_json(Notice(_alert()))["board"] == {}  # none known: said as none


def _old_schema_store(path: Path) -> None:
    """A store file whose alert table is as the version before boards made it."""
    SqliteStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute(f"DROP TABLE {ALERT_TABLE}")
        conn.execute(  # the table as the version before this one made it
            f"CREATE TABLE {ALERT_TABLE} (id TEXT, rule TEXT, severity TEXT, cluster TEXT, "
            "rack TEXT, node TEXT, device TEXT, state TEXT, started_ts REAL, updated_ts REAL,"
            " value REAL, message TEXT, fired_ts REAL, resolved_ts REAL, evidence TEXT, "
            "action TEXT, PRIMARY KEY (cluster, id))")
        conn.execute(f"INSERT INTO {ALERT_TABLE} VALUES ('x/c/n/gpu1/1', 'gpu_lost', "
                     "'critical', 'c', 'r', 'n', 'gpu1', 'firing', 1.8e9, 1.8e9, 1.0, 'lost',"
                     " 1.8e9, NULL, '{}', 'reboot')")


def test_a_store_file_of_the_old_schema_opens_and_keeps_its_alerts(tmp_path: Path) -> None:
    """A database written before alerts named boards: its alert table gains the columns
    in place; its alerts read back with none, new ones keep theirs."""
    path = tmp_path / "old.db"
    _old_schema_store(path)
    store = SqliteStore(path)
    [old] = store.alerts()
    assert (old.id, old.action, old.uuid, old.serial) == ("x/c/n/gpu1/1", "reboot", "", "")
    store.write_alerts([_alert(uuid=OLD[0], serial=OLD[1], pci_bus_id=OLD[2])])
    got = {a.id: a for a in store.alerts()}
    assert (got["gpu_lost/c/n/gpu1/1"].serial, got["x/c/n/gpu1/1"].serial) == (OLD[1], "")
    store.close()


def test_read_only_readers_of_an_old_schema_file_read_its_alerts_without_migrating(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The alerts CLI and the dashboard open the store read-only, so nothing adds the
    board columns to a file no new writer has opened yet: they read what is there."""
    path = tmp_path / "old.db"
    _old_schema_store(path)
    reader = SqliteStore(path, read_only=True)
    [old] = reader.alerts()
    assert (old.id, old.action, old.uuid, old.serial, old.pci_bus_id) == (
        "x/c/n/gpu1/1", "reboot", "", "", "")
    active, _ = read_alerts(reader, 1.8e9 + 60)          # the alerts page
    assert [a.id for a in active] == ["x/c/n/gpu1/1"]
    assert [a.id for a in read_node(reader, "n", 1.8e9 + 60).alerts] == ["x/c/n/gpu1/1"]
    reader.close()
    assert cli_main(["alerts", "--store", str(path)]) == 0
    out = capsys.readouterr()
    assert "gpu_lost" in out.out and "x/c/n/gpu1/1" in out.out, out
    with sqlite3.connect(path) as conn:  # still the old file: readers changed nothing
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({ALERT_TABLE})")}
    assert "uuid" not in have


@pytest.mark.parametrize("with_uuid", [True, False])
def test_replayed_agent_frames_keep_the_board_and_name_conflicts_are_judged(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], with_uuid: bool) -> None:
    from fleetwatch.cli import main

    lines_ = []
    for k in range(30):
        uuid, serial, pci = OLD if k < 15 else NEW
        g = {"index": 0, "model": "NVIDIA H100 80GB HBM3", "metrics": {"gpu_temp_c": 50.0},
             "xids": [79] if k == 20 else []}
        if with_uuid:
            g.update(uuid=uuid, info={"serial": serial, "pci_bus_id": pci})
        lines_.append(json.dumps({"ts": T0 + 10 * k, "node": "n1", "cluster": "c",
                                  "rack": "r", "gpus": [g]}))
    path = tmp_path / "frames.jsonl"
    path.write_text("\n".join(lines_) + "\n")
    db = tmp_path / "replay.db"
    assert main(["replay", "--store", str(db), str(path)]) == 0
    out, err = capsys.readouterr()
    changes = [json.loads(line) for line in out.splitlines()]
    [xid] = [c for c in changes if c["rule"] == "gpu_xid_critical" and c["state"] == "firing"]
    store = SqliteStore(db)
    replaced = store.events(0, 2e9, kinds=["gpu_replaced"])
    store.close()
    if with_uuid:
        assert xid["board"] == {"serial": NEW[1], "uuid": NEW[0], "pci_bus_id": NEW[2]}
        assert [e.value for e in replaced] == [NEW[0]]
        assert "not judged: recorded files carry no GPU identity" not in err
    else:
        assert xid["board"] == {} and replaced == []
        assert "the data names no GPU UUID" in err


def test_the_node_page_lists_each_slots_board_and_its_replacements(tmp_path: Path) -> None:
    from fleetwatch.dashboards import boards

    store = SqliteStore(tmp_path / "s.db")
    processor = Processor(store)
    processor.process([frame(T0, gpu(0), gpu(1, OLD))])
    processor.process([frame(T0 + 3600, gpu(0), gpu(1, NEW))])
    [g0, g1] = boards.slots(store.events(0, 2e9, node="node-0", kinds=list(boards.KINDS)))
    assert (g0.device, g0.replaced) == ("gpu0", ())
    assert (g1.uuid, g1.since) == (NEW[0], T0 + 3600) and NEW[1] in g1.details
    [(when, text)] = g1.replaced
    assert when == T0 + 3600 and OLD[1] in text
    shown = str(boards.panel(store, "node-0", T0 + 7200).to_plotly_json())
    assert NEW[0] in shown and OLD[0] in shown and "00000000:31:00.0" in shown
    assert "No GPU board" in str(boards.panel(store, "node-9", T0).to_plotly_json())
    store.close()


def test_a_row_remap_failure_says_how_many_rows_were_remapped() -> None:
    from fleetwatch.models.gpu_errors import GpuErrors

    d = GpuErrors(DetectorsConfig())
    metrics = {"gpu_temp_c": 50.0, "gpu_row_remap_failure": 1.0, "gpu_row_remap_pending": 0.0,
               "gpu_remapped_rows_uncorrectable": 8.0, "gpu_remapped_rows_correctable": 2.0}
    g = GpuReading(1, OLD[0], "NVIDIA A100-SXM4-80GB", metrics)
    [found] = [x for x in d.update([frame(T0, g)]) if x.rule == "gpu_row_remap_failure"]
    assert found.evidence["gpu_remapped_rows_uncorrectable"] == 8.0
    assert found.evidence["gpu_remapped_rows_correctable"] == 2.0


def test_a_board_swapped_while_no_processor_ran_is_a_replacement_and_one_met_again_is_not(
        tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    Processor(store).process([frame(T0, gpu(0), gpu(1, OLD))])
    store.close()
    store = SqliteStore(path)  # a processor restarted: the slot's board is read back
    Processor(store).process([frame(T0 + 600, gpu(0), gpu(1, OLD))])
    assert [e.ts for e in store.events(0, 2e9, kinds=["gpu_identity"])] == [T0, T0]
    store.close()
    store = SqliteStore(path)  # the board was swapped during the restart
    Processor(store).process([frame(T0 + 1200, gpu(0), gpu(1, NEW))])
    got = [(e.ts, e.kind, e.device, e.value) for e in store.events(
        T0 + 1, 2e9, kinds=["gpu_identity", "gpu_replaced"])]
    assert got == [(T0 + 1200, "gpu_identity", "gpu1", NEW[0]),
                   (T0 + 1200, "gpu_replaced", "gpu1", NEW[0])]
    [replaced] = store.events(T0 + 1, 2e9, kinds=["gpu_replaced"])
    assert OLD[1] in replaced.text  # the old board's serial, read back from the store
    store.close()


def test_boards_alternating_frame_by_frame_are_one_replacement_and_a_swap_back_is_one(
        ) -> None:
    """Two machines under one node name: the slot's UUIDs alternate; the second board is
    recorded replacing the first once, not at every frame. A board swapped back after
    it stayed out longer than ``FLAP_S`` is a replacement again."""
    t = EventTracker()
    events = [e for k in range(40)
              for e in t.update([frame(T0 + 5 * k, gpu(0), gpu(1, (OLD, NEW)[k % 2]))])]
    assert [e.value for e in events if e.kind == "gpu_replaced"] == [NEW[0]]
    assert t.board("c", "node-0", 1).uuid == NEW[0]  # type: ignore[union-attr]
    later = t.update([frame(T0 + 200 + 700, gpu(0), gpu(1, OLD))])
    assert [(e.kind, e.value) for e in later] == [("gpu_identity", OLD[0]),
                                                  ("gpu_replaced", OLD[0])]
