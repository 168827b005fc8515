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
    assert "NVML is available now: 2 GPUs (NVML was away 20 s)" in caplog.text
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


def test_driver_away_frames_say_so_and_one_agent_is_not_two_machines(
        tree: NodeTree, clock: Clock) -> None:
    """The agent's own frames, through the codec, to the processor's node detector: a
    reload is no name conflict, and a driver away for a while is node_nvml_down."""
    from fleetwatch.codec import Decoder, Encoder
    from fleetwatch.models.node_silence import NodeSilence

    nv = FakeNvml.of(8)
    source = NodeSource(config(tree), lambda: nv, None, clock=clock)
    enc, dec, detector = Encoder(), Decoder(), NodeSilence()
    found, ups, t = [], [], 1_790_000_000.0
    for k in range(50):
        if k in (5, 20):
            nv.unload_driver()
        if k in (7, 38):
            nv.load_driver()
        [frame] = source.frames(t)
        frame = dec.decode(enc.encode(frame))
        ups.append(frame.host.metrics["host_nvml_up"])
        found += detector.update([frame])
        clock.advance(2.0)
        t += 2.0
    source.close()
    assert ups[:5] == [1.0] * 5 and ups[5] == 0.0 and ups[-1] == 1.0
    assert "node_name_conflict" not in {f.rule for f in found}
    away = [f for f in found if f.rule == "node_nvml_down"]
    assert [f.ts - 1_790_000_000.0 for f in away] == [70.0, 72.0, 74.0, 76.0, 78.0]
    assert "its 8 GPUs are unwatched" in away[0].message


def test_a_host_only_node_by_choice_does_not_say_nvml_is_away(
        tree: NodeTree, clock: Clock) -> None:
    source = NodeSource(config(tree, policy="ignore"), FakeNvml.missing, None, clock=clock)
    [frame] = source.frames(time.time())
    assert frame.gpus == () and "host_nvml_up" not in frame.host.metrics
    source.close()


def test_metrics_say_nvml_is_away_while_the_driver_is(tree: NodeTree, clock: Clock) -> None:
    from fleetwatch.collectors.exporter import Exporter, render

    nv = FakeNvml.of(2)
    source = NodeSource(config(tree), lambda: nv, None, clock=clock)
    e = Exporter(hostname="n")
    nv.unload_driver()
    [frame] = source.frames(time.time())
    e.update(frame, source.mig)
    text = render(e.collect()).decode()
    assert 'fleetwatch_host_nvml_up{Hostname="n"} 0.0' in text
    source.close()


def test_frames_say_their_agents_interval_through_the_codec(tree: NodeTree,
                                                             clock: Clock) -> None:
    """A node whose agent.interval_s is raised is judged silent on it from its first frame
    (``models.node_silence``): the frame carries it, and the wire keeps it."""
    import dataclasses

    from fleetwatch.codec import decode, encode

    cfg = config(tree)
    cfg = dataclasses.replace(cfg, agent=dataclasses.replace(cfg.agent, interval_s=65.0))
    source = NodeSource(cfg, lambda: FakeNvml.of(1), None, clock=clock)
    [frame] = source.frames(time.time())
    source.close()
    assert decode(encode(frame)).host.metrics["host_agent_interval_s"] == 65.0
