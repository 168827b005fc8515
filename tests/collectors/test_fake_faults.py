"""``fleetwatch agent --fake-gpus N --fake-faults FILE``: an on-call makes a fake GPU hot,
loses it or raises an XID through the real agent path (oncall #6)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.collectors.node import node_source
from fleetwatch.collectors.nvml import backend as b
from fleetwatch.collectors.nvml.fake import FakeNvml
from fleetwatch.collectors.nvml.fault_file import FaultFileError
from fleetwatch.config import DetectorsConfig
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.wiring import detectors
from tests.collectors.conftest import Clock, NodeTree
from tests.collectors.test_node import config


def write(path: Path, doc: object) -> Path:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    path.write_text(text)
    # A new version even within the file system's time resolution.
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    return path


def test_the_file_makes_a_gpu_hot_lost_and_raises_an_xid_through_the_processor(
        tree: NodeTree, clock: Clock, tmp_path: Path) -> None:
    faults = write(tmp_path / "f.json", {})
    source = node_source(config(tree), fake_gpus=8, clock=clock, fake_faults=str(faults))
    store = SqliteStore(tmp_path / "s.db")
    processor = Processor(store, detectors(DetectorsConfig()))
    ts = time.time() - 300
    seen = []
    for k in range(12):
        if k == 2:
            write(faults, {"temp": {"3": 95}, "xid": [[4, 48]], "lost": [2]})
        clock.advance(5)
        ts += 5
        [frame] = source.frames(ts)
        processor.process([frame])
        seen.append(frame)
    hot = seen[2]
    assert hot.gpus[3].metrics["gpu_temp_c"] == 95 and hot.gpus[2].state == "lost"
    assert hot.gpus[4].xids == (48,)
    assert all(f.gpus[4].xids == () for f in seen[3:])  # an event: once per write
    assert {g.metrics.get("gpu_temp_c") for g in hot.gpus if g.index not in (2, 3)} == {61}
    firing = sorted((a.rule, a.device) for a in store.alerts(("firing",)))
    assert ("gpu_temp_critical", "gpu3") in firing
    assert ("gpu_lost", "gpu2") in firing and ("gpu_xid_critical", "gpu4") in firing
    store.close()


def test_writing_the_file_again_raises_the_xid_again_and_clearing_it_heals(
        tmp_path: Path) -> None:
    faults = write(tmp_path / "f.json", {"xid": [[1, 79]]})
    nv = FakeNvml.of(2, faults=str(faults))
    nv.init()
    nv.xid_events_open([0, 1])
    assert nv.xid_events_drain(10) == [(1, 79)]  # written before the start: raised once
    assert nv.xid_events_drain(10) == []
    write(faults, {"xid": [[1, 79]], "lost": [0], "temp": {"1": 90}})
    assert nv.xid_events_drain(10) == [(1, 79)]
    assert nv.gpus[0].lost and nv.gpus[1].answers["temperature_c"] == 90
    write(faults, {})
    assert nv.xid_events_drain(10) == []
    assert not nv.gpus[0].lost and nv.gpus[1].answers["temperature_c"] == 61


@pytest.mark.parametrize(("doc", "message"), [
    ("{", "not JSON: Expecting property name enclosed in double quotes: line 1 column 2 "
          "(char 1)"),
    ([3], "expected an object such as {\"temp\": {\"3\": 95}}, got '[3]'"),
    ({"temps": {"3": 95}}, "unknown key 'temps' (the keys are temp, xid, lost, counters, "
                           "per_min)"),
    ({"counters": {"1": {"gpu_ecc_dbe": 1}}}, "counters.1: unknown counter 'gpu_ecc_dbe' "
     "(the counters are gpu_ecc_sbe_volatile_total, gpu_ecc_dbe_volatile_total, "
     "gpu_ecc_sbe_aggregate_total, gpu_ecc_dbe_aggregate_total, gpu_retired_pages_sbe, "
     "gpu_retired_pages_dbe, gpu_retired_pages_pending, gpu_remapped_rows_correctable, "
     "gpu_remapped_rows_uncorrectable, gpu_row_remap_pending, gpu_row_remap_failure, "
     "gpu_pcie_replay_total, gpu_nvlink_crc_errors_total, gpu_nvlink_replay_errors_total, "
     "gpu_nvlink_recovery_errors_total)"),
    ({"counters": {"7": {"gpu_row_remap_failure": 1}}},
     "counters: GPU '7' is not one of the 4 fake GPUs (0..3)"),
    ({"per_min": {"0": {"gpu_pcie_replay_total": -3}}},
     "per_min.0.gpu_pcie_replay_total: -3 is not a number 0..1e+15"),
    ({"counters": {"0": 1}}, "counters.0: expected an object of counter -> value, got 1"),
    ({"per_min": [1]}, "per_min: expected an object of GPU index -> {counter: value}, got [1]"),
    ({"temp": {"9": 95}}, "temp: GPU '9' is not one of the 4 fake GPUs (0..3)"),
    ({"temp": {"3": "hot"}}, "temp.3: 'hot' is not a temperature in °C (-40..255)"),
    ({"temp": [95]}, "temp: expected an object of GPU index -> °C, got [95]"),
    ({"xid": [[4, 79]]}, "xid[0]: GPU 4 is not one of the 4 fake GPUs (0..3)"),
    ({"xid": [[1, 79, 1]]}, "xid[0]: [1, 79, 1] is not a [GPU, XID code] pair"),
    ({"xid": [[1, 0]]}, "xid[0]: XID code 0 is not a whole number 1..65535"),
    ({"lost": 2}, "lost: expected a list of GPU indices, got 2"),
    ({"lost": [-1]}, "lost: GPU -1 is not one of the 4 fake GPUs (0..3)"),
])
def test_a_bad_file_at_start_names_the_key_and_value(tmp_path: Path, doc: object,
                                                     message: str) -> None:
    path = write(tmp_path / "f.json", doc)
    with pytest.raises(FaultFileError) as err:
        FakeNvml.of(4, faults=str(path))
    assert str(err.value) == f"--fake-faults {path}: {message}"


def test_a_bad_file_later_is_said_once_and_the_faults_before_stay(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    faults = write(tmp_path / "f.json", {"temp": {"0": 90}})
    nv = FakeNvml.of(2, faults=str(faults))
    nv.init()
    write(faults, {"temp": {"0": 95, "1": 200}, "lost": [1], "tmp": 1})
    with caplog.at_level(logging.WARNING, "fleetwatch.collectors.nvml.fake"):
        nv.xid_events_drain(10)
        nv.xid_events_drain(10)
    assert nv.gpus[0].answers["temperature_c"] == 90 and not nv.gpus[1].lost
    assert [r.getMessage() for r in caplog.records] == [
        f"--fake-faults {faults}: unknown key 'tmp' (the keys are temp, xid, lost, counters, "
        "per_min); the faults before stay"]


def test_the_agent_command_reads_the_file(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("FLEETWATCH_AGENT_KERNEL_LOG", "")
    faults = write(tmp_path / "f.json", {"temp": {"1": 93}, "lost": [0]})
    assert main(["agent", "--fake-gpus", "2", "--fake-faults", str(faults), "--once",
                 "--json"]) == 0
    frame = json.loads(capsys.readouterr().out)
    assert [g["state"] for g in frame["gpus"]] == ["lost", "ok"]
    assert frame["gpus"][1]["metrics"]["gpu_temp_c"] == 93


def test_the_agent_command_refuses_a_bad_file_or_one_without_fake_gpus(
        tmp_path: Path, capsys) -> None:
    bad = write(tmp_path / "f.json", {"lost": [5]})
    assert main(["agent", "--fake-gpus", "2", "--fake-faults", str(bad), "--once"]) == 2
    assert capsys.readouterr().err == (
        f"fleetwatch: configuration error: --fake-faults {bad}: lost: GPU 5 is not one of the "
        "2 fake GPUs (0..1)\n")
    assert main(["agent", "--fake-faults", str(bad), "--once"]) == 2
    assert capsys.readouterr().err == (
        "fleetwatch agent: --fake-faults steers the fake GPUs of --fake-gpus N: add "
        "--fake-gpus\n")
    missing = tmp_path / "none.json"
    assert main(["agent", "--fake-gpus", "2", "--fake-faults", str(missing), "--once"]) == 2
    assert capsys.readouterr().err == (
        f"fleetwatch: configuration error: --fake-faults {missing}: no such file\n")


def test_error_counters_set_and_climbing_reach_the_processor_as_alerts(
        tree: NodeTree, clock: Clock, tmp_path: Path) -> None:
    """ECC DBE, row remap pending and failure, retired pages, PCIe and NVLink error rates
    raised from the file through the agent's NVML reader and the processor."""
    # The retired-page fields, which an H100 does not answer, named from the start: the
    # reader asks a GPU only for what it answered at its first read.
    pages = {"gpu_retired_pages_sbe": 0, "gpu_retired_pages_dbe": 0}
    faults = write(tmp_path / "f.json", {"counters": {"3": pages}})
    source = node_source(config(tree), fake_gpus=8, clock=clock, fake_faults=str(faults))
    store = SqliteStore(tmp_path / "s.db")
    processor = Processor(store, detectors(DetectorsConfig()))
    ts = time.time() - 600
    seen = []
    for k in range(30):
        if k == 2:
            write(faults, {
                "counters": {"1": {"gpu_ecc_dbe_volatile_total": 1,
                                   "gpu_ecc_dbe_aggregate_total": 1,
                                   "gpu_row_remap_pending": 1},
                             "2": {"gpu_row_remap_failure": 1},
                             "3": {"gpu_retired_pages_sbe": 58, "gpu_retired_pages_dbe": 3}},
                "per_min": {"4": {"gpu_pcie_replay_total": 30},
                            "5": {"gpu_nvlink_crc_errors_total": 600}}})
        clock.advance(5)
        ts += 5
        [frame] = source.frames(ts)
        processor.process([frame])
        seen.append(frame)
    m = seen[-1].gpus
    assert m[1].metrics["gpu_ecc_dbe_volatile_total"] == 1
    assert m[3].metrics["gpu_retired_pages_sbe"] == 58
    assert "gpu_retired_pages_sbe" not in m[0].metrics   # Hopper: not supported, as before
    assert m[4].metrics["gpu_pcie_replay_total"] == pytest.approx(30 * 27 * 5 / 60)
    firing = sorted((a.rule, a.device) for a in store.alerts(("firing",)))
    assert firing == [("gpu_ecc_dbe", "gpu1"), ("gpu_nvlink_errors", "gpu5"),
                      ("gpu_pcie_replay", "gpu4"), ("gpu_retired_pages", "gpu3"),
                      ("gpu_retired_pages_limit", "gpu3"),
                      ("gpu_row_remap_failure", "gpu2"), ("gpu_row_remap_pending", "gpu1")]
    store.close()


def test_counters_the_file_no_longer_names_answer_as_before(tmp_path: Path) -> None:
    faults = write(tmp_path / "f.json", {"counters": {"0": {"gpu_row_remap_pending": 1,
                                                            "gpu_retired_pages_dbe": 2}},
                                         "per_min": {"1": {"gpu_pcie_replay_total": 60}}})
    clock = Clock()
    nv = FakeNvml.of(2, faults=str(faults), clock=clock)
    nv.init()
    nv.xid_events_drain(10)
    clock.advance(30)
    nv.xid_events_drain(10)
    assert nv.gpus[1].fields[b.FI_PCIE_REPLAY_COUNTER] == 30
    write(faults, {"per_min": {"1": {"gpu_pcie_replay_total": 60}}})
    clock.advance(30)
    nv.xid_events_drain(10)
    assert nv.gpus[1].fields[b.FI_PCIE_REPLAY_COUNTER] == 60    # climbs on, not restarted
    assert nv.gpus[0].fields[b.FI_REMAPPED_PENDING] == 0
    assert nv.field_values(0, [(b.FI_RETIRED_DBE, 0)])[0][0] != 0   # "not supported" again


def test_a_kernel_log_with_fake_gpus_is_said_not_read(
        tree: NodeTree, clock: Clock, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    kern = tmp_path / "kern.log"
    kern.write_text("")
    cfg = config(tree)
    cfg = dataclasses.replace(cfg, agent=dataclasses.replace(cfg.agent, kernel_log=str(kern)))
    with caplog.at_level(logging.WARNING, "fleetwatch.collectors.node"):
        node_source(cfg, fake_gpus=2, clock=clock)
    assert [r.getMessage() for r in caplog.records] == [
        f"agent.kernel_log {kern} is not read with --fake-gpus: its XID lines name the PCI "
        "addresses of real GPUs; raise XIDs on the fake GPUs with --fake-faults (\"xid\": "
        "[[GPU, code]])"]
    caplog.clear()
    default = dataclasses.replace(cfg, agent=dataclasses.replace(cfg.agent,
                                                                 kernel_log="/dev/kmsg"))
    with caplog.at_level(logging.INFO, "fleetwatch.collectors.node"):
        node_source(default, fake_gpus=2, clock=clock)
    assert [r.levelname for r in caplog.records] == ["INFO"]   # the default: a note only
