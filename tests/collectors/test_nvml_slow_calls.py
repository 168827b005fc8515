"""One GPU whose NVML calls are slow (a GSP slow to answer, a call that blocks for seconds)
must not slow the node: the others keep their cadence, the slow call is left out after
its budget, and the log names the GPU and the call."""

from __future__ import annotations

import dataclasses
import logging
import re
import time

import pytest

from fleetwatch.collectors.node import NodeSource
from fleetwatch.collectors.nvml import FakeNvml, NvmlReader
from tests.collectors.conftest import Clock, NodeTree
from tests.collectors.test_node import config


def timed_read(reader: NvmlReader) -> tuple[float, list]:
    t0 = time.perf_counter()
    gpus = reader.read().gpus
    return time.perf_counter() - t0, gpus


def test_a_gpu_whose_call_hangs_does_not_hold_up_the_others(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    nv = FakeNvml.of(4)
    reader = NvmlReader.open(nv, slow_every=3, budget_s=0.15)
    reader.call_budget_s = 0.1
    reader.read()
    nv.gpus[3].delays["temperature_c"] = 0.6
    took, gpus = timed_read(reader)
    assert took < 0.4  # the budget, not GPU 3's 0.6 s
    assert [bool(g.metrics) for g in gpus] == [True, True, True, False]  # none read late
    assert all(g.metrics["gpu_temp_c"] == 61 for g in gpus[:3])
    assert "GPU 3 (GPU-" in caplog.text and "did not return within 0.15 s" in caplog.text
    # Its worker comes back (it says how long the call took: 0.6 s, more on a loaded
    # machine); its late values are dropped.
    deadline = time.monotonic() + 10
    while not (slow := re.search(r"NVML call temperature took (\d+\.\d) s, over its 0\.10 s "
                                 r"budget", caplog.text)):
        assert time.monotonic() < deadline, caplog.text
        time.sleep(0.05)
    assert float(slow[1]) >= 0.6
    took, gpus = timed_read(reader)
    assert took < 0.3  # not GPU 3's 0.6 s
    took, gpus = timed_read(reader)  # the slow call is left out: GPU 3 reports the rest
    assert took < 0.3 and gpus[3].state == "ok"
    assert "gpu_temp_c" not in gpus[3].metrics and gpus[3].metrics["gpu_power_w"] > 0
    said = [r for r in caplog.records if "NVML call temperature took" in r.getMessage()]
    assert len(said) == 1
    del nv.gpus[3].delays["temperature_c"]
    for _ in range(4):  # asked again on the slow cadence: in time now
        gpus = reader.read().gpus
    assert gpus[3].metrics["gpu_temp_c"] == 61
    assert "GPU 3 (GPU-" in caplog.text and "temperature answers in time again" in caplog.text
    reader.close()


def test_a_slow_call_without_a_pool_is_left_out_after_its_first_time() -> None:
    nv = FakeNvml.of(2)
    reader = NvmlReader.open(nv, slow_every=12)
    reader.call_budget_s = 0.05
    nv.gpus[1].delays["power_usage_mw"] = 0.2
    reader.read()
    took, gpus = timed_read(reader)
    assert took < 0.15  # not GPU 1's 0.2 s
    assert "gpu_power_w" not in gpus[1].metrics and gpus[1].metrics["gpu_temp_c"] == 61
    assert gpus[0].metrics["gpu_power_w"] > 0


def test_the_node_reads_its_gpus_within_half_its_interval(
        tree: NodeTree, clock: Clock) -> None:
    nv = FakeNvml.of(3)
    cfg = config(tree)
    cfg = dataclasses.replace(cfg, agent=dataclasses.replace(cfg.agent, interval_s=0.4))
    source = NodeSource(cfg, lambda: nv, None, clock=clock)
    source.frames(time.time())
    nv.gpus[0].delays["memory"] = 1.0
    t0 = time.perf_counter()
    [frame] = source.frames(time.time())
    assert time.perf_counter() - t0 < 0.6
    assert frame.gpus[0].metrics == {} and frame.gpus[1].metrics["gpu_temp_c"] == 61
    source.close()


def test_a_call_and_a_field_failing_every_tick_are_said_once_per_gpu_with_counts(
        caplog: pytest.LogCaptureFixture) -> None:
    import pynvml

    from fleetwatch.collectors.nvml import backend as b
    from fleetwatch.collectors.nvml.fake_gpus import FieldError

    caplog.set_level(logging.INFO)
    nv = FakeNvml.of(4)
    nv.fail(3, "power_usage_mw", pynvml.NVMLError_Unknown())
    nv.gpus[3].fields[b.FI_ECC_DBE_VOL_TOTAL] = FieldError(pynvml.NVML_ERROR_UNKNOWN)
    errors: list[str] = []
    reader = NvmlReader.open(nv, errors.append)
    for _ in range(5):
        gpus = reader.read().gpus
    assert "gpu_power_w" not in gpus[3].metrics and gpus[2].metrics["gpu_power_w"] > 0
    lines = [r.getMessage() for r in caplog.records]
    power = [x for x in lines if x.startswith("GPU 3 (") and " power: NVML Unknown" in x]
    ecc = [x for x in lines if x.startswith("GPU 3 (") and "gpu_ecc_dbe_volatile_total: NVML "
           "Unknown" in x]
    assert len(power) == 1 and len(ecc) == 1
    assert 'fleetwatch_agent_nvml_errors_total{kind="unknown"}' in power[0]
    assert errors.count("unknown") == 10
    nv.set(3, "power_usage_mw", 300_000)
    gpus = reader.read().gpus
    assert gpus[3].metrics["gpu_power_w"] == 300.0
    assert any(x.startswith("GPU 3 (") and "power answers again after 5 failed reads "
               "(NVML Unknown)" in x for x in (r.getMessage() for r in caplog.records))


def test_a_gpu_whose_reads_never_return_is_lost_and_tried_again_in_its_worker(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetwatch.collectors.nvml import reader as r

    monkeypatch.setattr(r, "HUNG_S", 0.3)
    nv = FakeNvml.of(3)
    reader = NvmlReader.open(nv, slow_every=2, budget_s=0.1)
    reader.read()
    nv.gpus[2].delays["memory"] = 2.0  # GPU 2's read does not come back for 2 s
    states = []
    for _ in range(8):
        took, gpus = timed_read(reader)
        assert took < 0.35  # a re-probe of GPU 2 is in its worker too, within the budget
        assert all(g.metrics for g in gpus[:2])
        states.append(gpus[2].state)
        time.sleep(0.1)  # the agent's interval
    assert states[0] == "ok" and "lost" in states  # lost only once not back for 0.3 s
    del nv.gpus[2].delays["memory"]
    time.sleep(2.0)
    for _ in range(4):
        gpus = reader.read().gpus
    assert gpus[2].state == "ok" and gpus[2].metrics["gpu_temp_c"] == 61
    reader.close()
