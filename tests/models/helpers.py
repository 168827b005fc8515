"""Frames built by hand for the detectors' tests: one node, N GPUs, the metrics given."""

from __future__ import annotations

from collections.abc import Sequence

from fleetwatch.frame import Frame, GpuReading

MODEL = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
# A server mixing parts in one job: GPUs 0-3 A100s, 4-7 H100s.
MIXED = [A100] * 4 + [MODEL] * 4


def node(ts: float, per_gpu: Sequence[dict[str, float]], name: str = "n1", rack: str = "r1",
         job: str | None = "job1", model: str = MODEL, lost: Sequence[int] = (),
         xids: dict[int, tuple[int, ...]] | None = None,
         jobs: Sequence[str | None] | None = None,
         models: Sequence[str] | None = None) -> Frame:
    gpus = tuple(GpuReading(i, f"GPU-{name}-{i}", models[i] if models is not None else model,
                            {} if i in lost else dict(m),
                            jobs[i] if jobs is not None else job,
                            "lost" if i in lost else "ok", (xids or {}).get(i, ()))
                 for i, m in enumerate(per_gpu))
    return Frame("c", rack, name, ts, gpus)


def busy(temp: float, power: float = 400.0, **more: float) -> dict[str, float]:
    return {"gpu_temp_c": temp, "gpu_power_w": power, "gpu_util_pct": 95.0,
            "gpu_sm_active_ratio": 0.8, "gpu_sm_clock_mhz": 1980.0, **more}


def rules(findings: Sequence) -> list[tuple[str, int | None]]:
    return [(f.rule, f.gpu) for f in findings]
