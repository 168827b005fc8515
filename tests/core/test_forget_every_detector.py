"""Every detector forgets a node gone for good: a node is fed through every registered
detector, switched on as ``fleetwatch up`` wires them (the learned ones with a thermal
model), until it is forgotten (no frame for ``FORGET_S``); then every attribute of every
detector, and of the processor's own per-node state, is walked for a container still
holding its name or its GPUs' boards. Memory must follow the live fleet, not every node
name ever seen (an autoscaled pool churns through thousands)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from fleetwatch.config import DetectorsConfig, ModelsConfig
from fleetwatch.frame import Frame, GpuReading, HostReading
from fleetwatch.models.artifact import ModelSet
from fleetwatch.models.learned import LearnedDetectors
from fleetwatch.models.node_silence import FORGET_S
from fleetwatch.models.registry import REGISTRY
from fleetwatch.models.thermal_health import ThermalModel
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.wiring import detectors, learned_detectors, linked

T0 = 1_790_000_000.0
GONE = "gonenode7"  # a name no other string of the detectors holds by chance


class _Expect50:
    """A thermal model's estimator that expects 50 °C whatever the load."""

    def predict(self, rows: np.ndarray) -> np.ndarray:
        return np.full(len(rows), 50.0)


def frame(ts: float, name: str, rack: str, k: int) -> Frame:
    """A busy node of 8 GPUs: one hot, one with XIDs and ECC errors, one lost now and then."""
    gpus = []
    for i in range(8):
        metrics = {"gpu_temp_c": 90.0 if i == 1 else 55.0 + i, "gpu_power_w": 500.0,
                   "gpu_util_pct": 95.0, "gpu_sm_active_ratio": 0.8,
                   "gpu_sm_clock_mhz": 1980.0, "gpu_mem_temp_c": 60.0,
                   "gpu_power_limit_w": 700.0, "gpu_fb_used_bytes": 4e10,
                   "gpu_ecc_dbe_volatile_total": float(k // 10 if i == 2 else 0),
                   "gpu_ecc_sbe_volatile_total": float(k if i == 2 else 0),
                   "gpu_pcie_replay_total": 0.0, "gpu_retired_pages_sbe": 0.0,
                   "gpu_throttle_reasons": 0.0}
        lost = i == 3 and k % 7 == 3
        gpus.append(GpuReading(i, f"GPU-{name}-{i}", "NVIDIA H100 80GB HBM3",
                               {} if lost else metrics, "job-a" if i < 4 else "job-b",
                               "lost" if lost else "ok", (79,) if i == 2 and k % 5 == 0 else ()))
    return Frame("c", rack, name, ts, tuple(gpus), HostReading(
        {"host_inlet_temp_c": 24.0, "host_cpu_util_pct": 50.0, "host_nvml_up": 1.0}))


def held(obj: object, needle: str, path: str = "", seen: set[int] | None = None,
         depth: int = 0) -> list[str]:
    """Where in ``obj`` a container holds ``needle`` (a key, a member, an element, in a
    string): attribute paths, walked through objects, mappings, collections and arrays."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth > 12 or callable(obj) and not hasattr(obj, "__dict__"):
        return []
    if isinstance(obj, str):
        return [path] if needle in obj else []
    if isinstance(obj, (int, float, bool, bytes, type(None), Path)):
        return []
    seen.add(id(obj))
    out: list[str] = []
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in "OUS":
            out += [path] if any(needle in str(x) for x in obj.ravel()) else []
        return out
    if isinstance(obj, dict):
        for k, v in list(obj.items()):
            out += held(k, needle, f"{path}[key]", seen, depth + 1)
            out += held(v, needle, f"{path}[{k!r}]", seen, depth + 1)
        return out
    if isinstance(obj, (list, tuple, set, frozenset)) or type(obj).__name__ == "deque":
        for j, v in enumerate(list(obj)):  # type: ignore[call-overload]
            out += held(v, needle, f"{path}[{j}]", seen, depth + 1)
        return out
    if type(obj).__module__.split(".")[0] not in ("fleetwatch", "tests"):
        return []  # a library's object (a lock, a model's estimator): not ours to walk
    fields = dict(vars(obj)) if hasattr(obj, "__dict__") else {}
    for slot in getattr(type(obj), "__slots__", ()):
        if hasattr(obj, slot):
            fields[slot] = getattr(obj, slot)
    if dataclasses.is_dataclass(obj) and not fields:
        fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    for name, v in fields.items():
        out += held(v, needle, f"{path}.{name}", seen, depth + 1)
    return out


def test_no_detector_keeps_state_of_a_forgotten_node(tmp_path: Path) -> None:
    config = DetectorsConfig()
    assert set(config.enabled) == set(REGISTRY)  # every registered detector is on
    chosen = linked([*detectors(config),
                     *learned_detectors(ModelsConfig(dir=str(tmp_path / "models")))])
    (learned,) = [d for d in chosen if isinstance(d, LearnedDetectors)]
    offsets = {f"c/{n}/gpu{i}": 0.0 for n in (GONE, "stays", "peer") for i in range(8)}
    learned.use(ModelSet(thermal=ThermalModel(_Expect50(), "constant", {}, offsets, 1.0),
                         metadata={"range": [T0 - 86400.0, T0]}))
    store = SqliteStore(tmp_path / "fw.db")
    processor = Processor(store, chosen)
    t, k = T0, 0
    while t < T0 + FORGET_S + 2 * 3600.0:
        names = ("stays", "peer", GONE) if t < T0 + 3600.0 else ("stays", "peer")
        processor.process([frame(t, n, "r1", k) for n in names])
        t, k = t + (60.0 if t < T0 + 2 * 3600.0 else 600.0), k + 1
    processor.flush()
    assert [a for a in store.alerts() if a.node == GONE] == []
    # The walk finds a node's state where it is: the live node's, in most detectors.
    assert len({p.split(".")[0] for p in held(processor.detectors, "stays")}) >= 5
    # A trained model's per-GPU offsets are the model file's, replaced with it, not state
    # built from frames (this one was trained with the node).
    left = {f"{type(d).__name__}{p}" for d in processor.detectors for p in held(d, GONE)
            if ".model." not in p}
    left |= {f"processor.{name}{p}" for name in ("events", "node_states", "energy", "ownership")
             for p in held(getattr(processor, name), GONE)}
    assert sorted(left) == [], "\n".join(sorted(left))
    store.close()
