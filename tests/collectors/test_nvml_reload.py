"""A driver reload that takes longer than one retry, and the error kinds NVML's failures
are counted under (fleetwatch_agent_nvml_errors_total{kind})."""

from __future__ import annotations

import logging
import time

import pynvml
import pytest

from fleetwatch.collectors.node import NVML_REINIT_S, NodeSource
from fleetwatch.collectors.nvml import FakeNvml, NvmlReader
from fleetwatch.collectors.nvml.state import error_kind
from tests.collectors.conftest import Clock, NodeTree
from tests.collectors.test_node import config


def test_a_slow_driver_reload_is_retried_every_reinit_interval_as_logged(
        tree: NodeTree, clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    nv = FakeNvml.of(2)
    source = NodeSource(config(tree, policy="ignore"), lambda: nv, None, clock=clock)
    assert len(source.frames(time.time())[0].gpus) == 2
    nv.unload_driver()
    assert source.frames(time.time())[0].gpus == ()
    clock.advance(NVML_REINIT_S)
    assert source.frames(time.time())[0].gpus == ()  # the first retry: still unloaded
    nv.load_driver()  # back 4 s after that retry
    clock.advance(NVML_REINIT_S)  # the next retry, as the log says: not a minute later
    assert [g.state for g in source.frames(time.time())[0].gpus] == ["ok", "ok"]
    assert "NVML is available again after 20 s: 2 GPUs" in caplog.text
    source.close()


@pytest.mark.parametrize(("exc", "kind"), [
    (pynvml.NVMLError_GpuIsLost(), "gpu_is_lost"),
    (pynvml.NVMLError_InvalidArgument(), "invalid_argument"),
    (pynvml.NVMLError_Unknown(), "unknown"),
    (pynvml.NVMLError_NoPermission(), "no_permission"),
])
def test_error_kinds_are_snake_case_like_the_readers_own(exc: Exception, kind: str) -> None:
    assert error_kind(exc) == kind


def test_a_lost_gpu_is_counted_under_one_kind_by_the_read_and_the_reprobe() -> None:
    nv = FakeNvml.of(2)
    errors: list[str] = []
    reader = NvmlReader.open(nv, errors.append, slow_every=2)
    reader.read()
    nv.lose(1)
    for _ in range(4):
        reader.read()
    assert errors and set(errors) == {"gpu_is_lost"}
    assert len(errors) >= 2  # the read's and the re-probes'
