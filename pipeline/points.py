"""Frames to store points: one point per metric per device per frame."""

from __future__ import annotations

from collections.abc import Iterable

from fleetwatch.frame import Frame
from fleetwatch.pipeline.store.base import Point, SeriesKey, gpu_device


class PointMaker:
    """Turns frames into points, reusing ``SeriesKey`` objects across frames."""

    def __init__(self) -> None:
        self._keys: dict[tuple[str, str, str, str, str], SeriesKey] = {}

    def _key(self, metric: str, f: Frame, device: str) -> SeriesKey:
        raw = (metric, f.cluster, f.rack, f.node, device)
        key = self._keys.get(raw)
        if key is None:
            key = self._keys[raw] = SeriesKey(*raw)
        return key

    def points(self, frames: Iterable[Frame]) -> list[Point]:
        out: list[Point] = []
        add = out.append
        key = self._key
        for f in frames:
            ts = int(round(f.ts * 1000))
            for g in f.gpus:
                device = gpu_device(g.index)
                for metric, value in g.metrics.items():
                    add((key(metric, f, device), ts, value))
            for metric, value in f.host.metrics.items():
                add((key(metric, f, "host"), ts, value))
            for p in f.host.ports:
                for metric, value in p.metrics.items():
                    add((key(metric, f, p.name), ts, value))
        return out
