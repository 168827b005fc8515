"""The frames of ``benchmarks/pipeline.py``: the simulator's, and the agent's.

``sim``: the simulator's frames (36 metrics a GPU, 5 host metrics, no ports).
``agent``: frames as ``fleetwatch agent --fake-gpus 8`` makes them: ``node_source``
over ``FakeNvml`` and the tests' host fixture (NICs, InfiniBand ports, RAPL).
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

from fleetwatch.catalogue import catalogue
from fleetwatch.collectors.node import node_source
from fleetwatch.collectors.sim import FleetSim, SimParams
from fleetwatch.config import AgentConfig, Config, NodeConfig
from fleetwatch.frame import Frame

NODES, GPUS = 125, 8
# Host fixture of the tests: /proc and /sys of a node with NICs, InfiniBand ports and RAPL.
HOST_FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "node" / "t0"
AGENT_READINGS = 8  # distinct readings per node, cycled: the values vary, the shape does not


def make_frames(steps: int, cluster: str, start_ts: float) -> list[Frame]:
    sim = FleetSim(SimParams(nodes=NODES, gpus=GPUS, interval_s=1.0, cluster=cluster), start_ts)
    out: list[Frame] = []
    for _ in range(steps):
        sim.step()
        out.extend(sim.frames())
    return out


def make_agent_frames(steps: int, cluster: str, start_ts: float) -> list[Frame]:
    """Frames as ``fleetwatch agent --fake-gpus 8`` makes them, for every node and tick.

    Reading NVML through FakeNvml costs about as much per frame as the
    processor spends on it, so a few readings are taken and cycled; each node
    gets its own copy with its gauges scaled by a factor of its own (FakeNvml's
    GPUs all read alike, and 125 identical nodes would compress unrealistically
    well), and its name, rack, tick and sequence number.
    """
    config = Config(node=NodeConfig(cluster=cluster, rack="rack-00", node="template"),
                    agent=AgentConfig(proc_root=str(HOST_FIXTURE / "proc"),
                                      sys_root=str(HOST_FIXTURE / "sys"), kernel_log=""))
    source = node_source(config, fake_gpus=GPUS)
    try:
        source.frames(start_ts)  # rates (PCIe, NIC, InfiniBand) need a reading before
        readings = [source.frames(start_ts + i)[0] for i in range(AGENT_READINGS)]
    finally:
        source.close()
    rng = random.Random(0)
    per_node = [[_scaled(r, rng.uniform(0.9, 1.1)) for r in readings] for _ in range(NODES)]
    return [dataclasses.replace(per_node[n][step % AGENT_READINGS], node=f"node-{n:03d}",
                                rack=f"rack-{n // 2:02d}", ts=start_ts + step, seq=step + 1)
            for step in range(steps) for n in range(NODES)]


# Gauges that vary from node to node; counts, flags and bitmasks are left as read.
_SCALED_UNITS = {"%": 100.0, "W": None, "C": None, "MHz": None, "bytes/s": None,
                 "ratio": 1.0, "bytes": None}


def _scaled(frame: Frame, factor: float) -> Frame:
    cat = catalogue()

    def scale(metrics: dict[str, float]) -> dict[str, float]:
        out = dict(metrics)
        for name, value in metrics.items():
            unit = cat[name].unit if name in cat else None
            if unit in _SCALED_UNITS:
                top = _SCALED_UNITS[unit]
                out[name] = min(value * factor, top) if top is not None else value * factor
        return out

    gpus = tuple(dataclasses.replace(g, metrics=scale(g.metrics)) for g in frame.gpus)
    return dataclasses.replace(frame, gpus=gpus)


def frame_points(frames: list[Frame]) -> int:
    """Points the store must take for ``frames``: GPU, host and port metrics."""
    return sum(sum(len(g.metrics) for g in f.gpus) + len(f.host.metrics)
               + sum(len(p.metrics) for p in f.host.ports) for f in frames)


def describe(frames: list[Frame]) -> dict[str, float]:
    f = frames[0]
    return {"gpu_metrics_per_gpu": sum(len(g.metrics) for g in f.gpus) / max(1, len(f.gpus)),
            "host_metrics": len(f.host.metrics), "ports": len(f.host.ports),
            "port_metrics": sum(len(p.metrics) for p in f.host.ports),
            "xids": sum(len(g.xids) for g in f.gpus)}
