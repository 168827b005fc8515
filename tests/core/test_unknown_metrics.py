"""An agent one release newer than the processors (deploy finding 2, r22): a metric id the
processor's catalogue lacks dead-lettered the whole frame, all its GPUs, XIDs and jobs, so
upgraded nodes were neither stored nor judged. Now that metric alone is left out, counted
per id and said once per id ("upgrade the processors"); the rest is stored and judged.
Over a real SQLite store."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import msgpack
import pytest

from fleetwatch.codec import encode
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models.thermal import ThermalLimits
from fleetwatch.pipeline.bus import Message
from fleetwatch.pipeline.health import ProcessorCollector
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore

T0 = time.time() - 600
SPAN = (int(T0 * 1000) - 1000, int(T0 * 1000) + 60_000)
LIMITS = {"gpu_slowdown_temp_c": 89.0, "gpu_shutdown_temp_c": 92.0}
LATER_HOST_ID, LATER_GPU_ID = 9106, 9107  # ids a later catalogue adds


def newer_agents_message(ts: float, offset: int, node: str = "n1") -> Message:
    """A frame as an agent of a later release sends it: one more host metric and one more
    GPU metric, each under an id this release does not have."""
    gpus = tuple(GpuReading(i, f"GPU-{node}-{i}", "NVIDIA H100 80GB HBM3",
                            {"gpu_temp_c": t, "gpu_power_w": 300.0, **LIMITS}, xids=xids)
                 for i, (t, xids) in enumerate([(60.0, ()), (255.0, (79,))]))
    body = msgpack.unpackb(encode(Frame("c1", "r1", node, ts, gpus)), strict_map_key=False)
    body[7][0][LATER_HOST_ID] = 1.0
    for g in body[6]:
        g[5][LATER_GPU_ID] = 12
    return Message(msgpack.packb(body, use_bin_type=True), node.encode(), "frames", 0, offset)


def test_a_newer_agents_frames_are_stored_and_judged_without_the_metrics_it_added(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = SqliteStore(tmp_path / "f.db")
    p = Processor(store, [ThermalLimits()])
    batch = [newer_agents_message(T0 + 5 * k, k) for k in range(4)]
    batch += [newer_agents_message(T0 + 5 * k, 4 + k, node="n2") for k in range(2)]
    with caplog.at_level(logging.WARNING, logger="fleetwatch.pipeline.processor"):
        p.handle(batch)
    assert p.stats.dead_letters == 0 and p.stats.frames == 6
    assert len(store.range("gpu_temp_c", *SPAN)) == 12  # every GPU of every frame
    assert {a.rule for a in store.alerts()} >= {"gpu_temp_sensor_invalid"}  # judged
    assert p.stats.unknown_metrics == {"host:9106": 6, "gpu:9107": 12}
    said = [r.getMessage() for r in caplog.records if "older than the agent" in r.getMessage()]
    assert len(said) == 2, said  # once per id, not per frame, GPU or node
    assert "upgrade the processors" in said[0] and "metric id 9107" in " ".join(said)
    family = next(m for m in ProcessorCollector(p, None).collect()  # type: ignore[arg-type]
                  if m.name == "fleetwatch_processor_unknown_metrics")
    assert sorted((s.labels["scope"], s.labels["id"], s.value) for s in family.samples) == [
        ("gpu", "9107", 12), ("host", "9106", 6)]


def test_a_malformed_value_under_a_later_id_still_dead_letters_the_frame(
        tmp_path: Path) -> None:
    body = msgpack.unpackb(newer_agents_message(T0, 0).value, strict_map_key=False)
    body[7][0][LATER_HOST_ID] = "1.0"
    p = Processor(SqliteStore(tmp_path / "f.db"), [ThermalLimits()])
    p.handle([Message(msgpack.packb(body, use_bin_type=True), b"n1", "frames", 0, 0)])
    assert p.stats.frames == 0 and p.stats.by_reason == {"host.metrics": 1}
