"""A failing sensor on one GPU: its impossible reading is left out (or, for a temperature
an 8-bit sensor can read, judged by the sensor rule), and the node's other readings are
stored and judged as ever. A dead-lettered frame would blind fleetwatch to all its GPUs."""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import pytest

from fleetwatch.codec import encode
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models.peers import ThermalPeers
from fleetwatch.models.thermal import ThermalLimits
from fleetwatch.pipeline.bus import Message
from fleetwatch.pipeline.health import ProcessorCollector
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore

T0 = time.time() - 600
SPAN = (int(T0 * 1000) - 1000, int(T0 * 1000) + 60_000)  # raw samples, not minute means
LIMITS = {"gpu_slowdown_temp_c": 89.0, "gpu_shutdown_temp_c": 92.0}


def node_frame(ts: float, temps: list[float], power: list[float], node: str = "n1") -> Frame:
    gpus = tuple(GpuReading(i, f"GPU-{node}-{i}", "NVIDIA H100 80GB HBM3",
                            {"gpu_temp_c": t, "gpu_power_w": p, **LIMITS})
                 for i, (t, p) in enumerate(zip(temps, power)))
    return Frame("c1", "r1", node, ts, gpus)


def messages(frames: list[Frame]) -> list[Message]:
    return [Message(encode(f), f.node.encode(), "frames", 0, i) for i, f in enumerate(frames)]


def test_a_255_reading_raises_the_sensor_alert_and_the_other_gpus_are_stored(
        tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "f.db")
    p = Processor(store, [ThermalLimits()])
    frames = [node_frame(T0 + 5 * k, [60.0, 255.0 if k >= 2 else 61.0, 62.0], [400.0] * 3)
              for k in range(6)]
    p.handle(messages(frames))
    assert p.stats.dead_letters == 0
    assert len(store.range("gpu_temp_c", *SPAN, node="n1")) == 18  # every GPU, every frame
    (alert,) = store.alerts()
    assert (alert.rule, alert.device) == ("gpu_temp_sensor_invalid", "gpu1")
    assert "reads 255 °C, which a working GPU cannot" in alert.message


def test_an_out_of_range_reading_is_left_out_counted_and_said_once_per_node_and_metric(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = SqliteStore(tmp_path / "f.db")
    p = Processor(store, [ThermalLimits()])
    frames = [node_frame(T0 + 5 * k, [60.0, 61.0], [400.0, 1e9]) for k in range(4)]
    frames += [node_frame(T0 + 5 * k, [60.0, 61.0], [400.0, 1e9], node="n2") for k in range(2)]
    with caplog.at_level(logging.WARNING, logger="fleetwatch.pipeline.processor"):
        p.handle(messages(frames))
    assert p.stats.dead_letters == 0 and p.stats.readings_dropped == {"gpu_power_w": 6}
    power = store.range("gpu_power_w", *SPAN)
    assert {(k.node, k.device) for k, _, _ in power} == {("n1", "gpu0"), ("n2", "gpu0")}
    assert len(store.range("gpu_temp_c", *SPAN)) == 12
    said = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert len(said) == 2 and said[0].startswith(
        "c1/n1 (frames/0@0): gpus[1].metrics.gpu_power_w: 1000000000.0 W is outside the "
        "possible range")
    family = next(m for m in ProcessorCollector(p, None).collect()  # type: ignore[arg-type]
                  if m.name == "fleetwatch_processor_readings_dropped")
    (sample,) = family.samples
    assert sample.labels == {"metric": "gpu_power_w"} and sample.value == 6


def test_a_failing_sensor_is_said_for_each_clusters_node_of_one_name(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    p = Processor(SqliteStore(tmp_path / "f.db"), [])
    frames = [dataclasses.replace(node_frame(T0 + 5 * k, [60.0], [1e9], node="node001"),
                                  cluster=c) for k in range(2) for c in ("c-east", "c-west")]
    with caplog.at_level(logging.WARNING, logger="fleetwatch.pipeline.processor"):
        p.handle(messages(frames))
    p.store.close()
    said = sorted(r.getMessage().split(" ")[0] for r in caplog.records
                  if "left out" in r.getMessage())
    assert said == ["c-east/node001", "c-west/node001"]


def test_a_255_reading_is_no_cooling_fault_for_the_peer_rule(tmp_path: Path) -> None:
    """Eight GPUs after the peer rule's warm-up; GPU 1's sensor then sticks at 255 °C for two
    minutes. The store holds the sensor alert only: no gpu_hot_vs_peers(_critical) 'check the
    cooling' page, and the node's other GPUs are judged as ever."""
    store = SqliteStore(tmp_path / "p.db")
    p = Processor(store, [ThermalLimits(), ThermalPeers()])
    start = T0 - 1800
    normal = [60.0, 61.0, 62.0, 61.0, 60.0, 61.0, 62.0, 61.0]
    frames = [node_frame(start + 5 * k, [255.0 if k >= 300 and g == 1 else x
                                         for g, x in enumerate(normal)], [400.0] * 8)
              for k in range(324)]
    p.handle(messages(frames))
    assert p.stats.dead_letters == 0
    assert {(a.rule, a.device) for a in store.alerts(("pending", "firing", "resolved"))} == {
        ("gpu_temp_sensor_invalid", "gpu1")}
