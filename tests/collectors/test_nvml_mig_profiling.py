"""MIG and NVML answers that are not textbook: GPM that the query says is supported but
whose sampling answers NotSupported (an H100 in MIG mode), and MIG profile lookups
refused to an unprivileged agent."""

from __future__ import annotations

import logging
import time

import pynvml
import pytest

from fleetwatch.collectors.node import NodeSource
from fleetwatch.collectors.nvml import FakeNvml, NvmlReader
from tests.collectors.conftest import Clock, NodeTree
from tests.collectors.test_node import config


def test_gpm_that_cannot_sample_is_not_claimed_as_the_ratios_source(
        tree: NodeTree, clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    nv = FakeNvml.of(2)
    nv.enable_mig(1, [(1, "7g.80gb", 80 * 2**30)])
    nv.fail(1, "gpm_metrics", pynvml.NVMLError_NotSupported())
    source = NodeSource(config(tree), lambda: nv, None, clock=clock)
    for _ in range(3):
        [frame] = source.frames(time.time())
        clock.advance(5)
    assert frame.gpus[0].info["profiling"] == "gpm"
    assert frame.gpus[0].metrics["gpu_sm_active_ratio"] > 0
    assert frame.gpus[1].info["profiling"] == "none"
    assert "gpu_sm_active_ratio" not in frame.gpus[1].metrics
    hint = [r.getMessage() for r in caplog.records if "DCGM is not available" in r.getMessage()]
    assert len(hint) == 1 and hint[0].startswith("1 GPU(s) (GPU 1: NVIDIA H100")
    source.close()


def test_gpm_claimed_again_once_it_samples_after_mig_is_turned_off() -> None:
    nv = FakeNvml.of(1)
    nv.enable_mig(0, [(1, "7g.80gb", 80 * 2**30)])
    nv.fail(0, "gpm_metrics", pynvml.NVMLError_NotSupported())
    reader = NvmlReader.open(nv, slow_every=2)
    assert reader.read().gpus[0].info["profiling"] == "none"
    nv.set(0, "mig_mode", pynvml.NVML_DEVICE_MIG_DISABLE)
    del nv.gpus[0].answers["gpm_metrics"]
    for _ in range(4):
        g = reader.read().gpus[0]
    assert g.info["profiling"] == "gpm" and g.metrics["gpu_sm_active_ratio"] > 0
