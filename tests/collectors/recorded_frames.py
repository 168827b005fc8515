"""The recordings of fleetwatch's own agent on a real GPU (tests/data/recorded/*.jsonl.gz:
``dataclasses.asdict(Frame)`` per line plus a ``_phase`` label) back as Frames."""

from __future__ import annotations

import gzip
import json

from fleetwatch.frame import Frame, GpuReading, HostReading, PortReading


def frame_of(d: dict) -> Frame:
    gpus = tuple(GpuReading(**{**g, "xids": tuple(g["xids"])}) for g in d["gpus"])
    host = HostReading(d["host"]["metrics"],
                       tuple(PortReading(**p) for p in d["host"]["ports"]))
    return Frame(**{**d, "gpus": gpus, "host": host})


def read_recording(name: str) -> list[tuple[str, Frame]]:
    """(phase, frame) per line of ``tests/data/<name>``, in order."""
    from tests.conftest import REAL_DATA

    out = []
    with gzip.open(REAL_DATA / name, "rt") as f:
        for line in f:
            d = json.loads(line)
            phase = d.pop("_phase")
            out.append((phase, frame_of(d)))
    return out
