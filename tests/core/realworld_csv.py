"""Replay inputs as real exports come, in the long layout, and a replay of them: shared by
the replay tests of real-world files."""

from __future__ import annotations

import io
import json
from pathlib import Path

from fleetwatch.config import DetectorsConfig
from fleetwatch.replay import replay
from fleetwatch.wiring import detectors

T0 = 1_780_000_000
HEADER = "timestamp,node,gpu,metric,value"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def fleet(ticks: int, gpus: int = 4, step: int = 15, node: str = "n1", extra: str = "",
          cols: str = "", row=None) -> str:  # noqa: ANN001 - row(t, g) -> extra cells
    """A node whose GPUs run at 60 + g °C and 300 W, every ``step`` s."""
    lines = [HEADER + cols]
    for t in range(ticks):
        for g in range(gpus):
            more = row(t, g) if row else ""
            lines.append(f"{T0 + step * t},{node},{g},gpu_temp_c,{60 + g}{more}")
            lines.append(f"{T0 + step * t},{node},{g},gpu_power_w,300{more}")
    return "\n".join(lines) + "\n" + extra


def run(tmp_path: Path, text: str, dets: list | None = None, **kw) -> tuple[list[dict], object]:
    out = io.StringIO()
    summary = replay([write(tmp_path / "f.csv", text)],
                     detectors(DetectorsConfig()) if dets is None else dets, out, **kw)
    return [json.loads(line) for line in out.getvalue().splitlines()], summary


def fired(changes: list[dict]) -> set[str]:
    return {c["rule"] for c in changes if c["state"] == "firing"}
